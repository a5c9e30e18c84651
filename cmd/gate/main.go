// Command gate is AsyncGate: a durable task gate that lets AI agents hand long
// work to workers and pick the outcome up in a later session.
//
// Usage:
//
//	gate <command> [flags]
//
// Run "gate help" for the list of commands.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand of gate. Each lives in its own file and registers
// itself with register from an init function.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "gate: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "gate — AsyncGate, a durable task gate for AI agents")
	fmt.Fprintln(w, "\nUsage: gate <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	width := 8
	for n, c := range commands {
		if c.summary == "" {
			continue // hidden (gate __complete)
		}
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s %s\n", width, n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun \"gate <command> -h\" for a command's flags.")
}
