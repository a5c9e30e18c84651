package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Shell completion: `gate completion bash|zsh|fish` prints a script that asks
// the gate binary itself for candidates (`gate __complete WORD…`), so the
// completion always matches the commands this binary has, including ones
// added later.

func init() {
	register(command{name: "completion", summary: "print a shell completion script (bash, zsh or fish)", run: runCompletion})
	register(command{name: "__complete", summary: "", run: runComplete}) // hidden: the scripts' helper
}

const completionUsage = `Usage: gate completion bash|zsh|fish

Prints a completion script for the shell. Load it:
  bash:  source <(gate completion bash)         (or save it in /etc/bash_completion.d/gate)
  zsh:   source <(gate completion zsh)          (or save it as _gate in a folder of $fpath)
  fish:  gate completion fish | source          (or save it in ~/.config/fish/completions/gate.fish)
`

const bashCompletion = `# bash completion for gate
_gate() {
    local cur="${COMP_WORDS[COMP_CWORD]}"
    local IFS=$'\n'
    COMPREPLY=( $(compgen -W "$(gate __complete "${COMP_WORDS[@]:1:COMP_CWORD-1}" 2>/dev/null)" -- "$cur") )
}
complete -o default -F _gate gate
`

const zshCompletion = `#compdef gate
# zsh completion for gate
_gate() {
    local -a cands
    cands=("${(@f)$(gate __complete "${(@)words[2,CURRENT-1]}" 2>/dev/null)}")
    compadd -a cands
}
if [ "$funcstack[1]" = "_gate" ]; then
    _gate "$@"
else
    compdef _gate gate
fi
`

const fishCompletion = `# fish completion for gate
complete -c gate -f -a '(gate __complete (commandline -opc)[2..-1])'
`

func runCompletion(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprint(stderr, completionUsage)
		return exitUsage
	}
	switch args[0] {
	case "bash":
		fmt.Fprint(stdout, bashCompletion)
	case "zsh":
		fmt.Fprint(stdout, zshCompletion)
	case "fish":
		fmt.Fprint(stdout, fishCompletion)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, completionUsage)
	default:
		fmt.Fprintf(stderr, "gate completion: unknown shell %q\n\n%s", args[0], completionUsage)
		return exitUsage
	}
	return exitOK
}

// runComplete prints the candidates for the word after args, one a line:
// command names, a group's subcommands, then the flags of the command.
func runComplete(args []string, stdout, _ io.Writer) int {
	for _, c := range completeWords(args) {
		fmt.Fprintln(stdout, c)
	}
	return exitOK
}

// flagValues are the values offered after a flag that takes one of a few.
var flagValues = map[string][]string{
	"status":   {"waiting", "queued", "scheduled", "leased", "succeeded", "canceled", "dead_letter"},
	"progress": {"auto", "bar", "plain", "none"},
	"missed":   {"skip", "run_once", "run_all"},
}

func completeWords(args []string) []string {
	if len(args) == 0 {
		var names []string
		for n := range commands {
			if !strings.HasPrefix(n, "__") {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		return names
	}
	if args[0] == "completion" {
		if len(args) == 1 {
			return []string{"bash", "zsh", "fish"}
		}
		return nil
	}
	g, ok := remoteGroups[args[0]]
	if !ok {
		return nil // another command: its own flags are not known here
	}
	if vs, ok := flagValues[strings.TrimLeft(args[len(args)-1], "-")]; ok && strings.HasPrefix(args[len(args)-1], "-") {
		return vs
	}
	var s *remoteSub
	if g.single() {
		s = &g.subs[0]
	} else {
		if len(args) == 1 {
			var subs []string
			for _, s := range g.subs {
				subs = append(subs, s.name)
			}
			return subs
		}
		if s = g.sub(args[1]); s == nil {
			return nil
		}
	}
	fs := g.flagSet(s, &remoteCtx{}, io.Discard)
	var flags []string
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, "--"+f.Name) })
	sort.Strings(flags)
	return flags
}
