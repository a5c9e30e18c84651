package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/asyncgate/asyncgate/sdk/client"
)

// The commands that talk to a running gate over HTTP (gate tasks, dlq,
// receipts, types, workers, stats) share one shape, defined here: a group of
// subcommands, each with the same connection flags (--url, --key,
// --key-file, or ASYNCGATE_URL, ASYNCGATE_KEY, ASYNCGATE_KEY_FILE), human
// output by default and --json for scripts, and the same help layout. The
// groups also feed shell completion (completion.go).

// defaultGateURL is where the remote commands look for a gate by default.
const defaultGateURL = "http://127.0.0.1:8080"

// Exit codes of the remote commands.
const (
	exitOK    = 0
	exitError = 1 // the gate refused, or could not be reached
	exitUsage = 2
)

// remoteGroup is a top-level command with subcommands (gate tasks list …),
// or a single remote command when its only sub has the empty name.
type remoteGroup struct {
	name    string
	summary string
	subs    []remoteSub
}

// remoteSub is one subcommand.
type remoteSub struct {
	name    string // "" for a group that is itself the command (gate stats)
	args    string // usage of the positional arguments, e.g. "TASK_ID"
	summary string
	// more describes the command beyond its summary (help text).
	more string
	// minArgs and maxArgs bound the positional arguments (maxArgs -1: any).
	minArgs, maxArgs int
	// tenant adds --tenant (operator commands).
	tenant bool
	// flags declares the command's own flags.
	flags func(fs *flag.FlagSet)
	run   func(rc *remoteCtx, args []string) error
}

// remoteGroups are the registered groups by name (for help and completion).
var remoteGroups = map[string]*remoteGroup{}

// registerRemote registers a group as a gate command.
func registerRemote(g remoteGroup) {
	gp := &g
	remoteGroups[g.name] = gp
	register(command{name: g.name, summary: g.summary, run: func(args []string, stdout, stderr io.Writer) int {
		return gp.dispatch(args, stdout, stderr)
	}})
}

func (g *remoteGroup) single() bool { return len(g.subs) == 1 && g.subs[0].name == "" }

func (g *remoteGroup) sub(name string) *remoteSub {
	for i := range g.subs {
		if g.subs[i].name == name {
			return &g.subs[i]
		}
	}
	return nil
}

func (g *remoteGroup) usage(w io.Writer) {
	fmt.Fprintf(w, "gate %s — %s\n\nUsage:\n", g.name, g.summary)
	for _, s := range g.subs {
		fmt.Fprintf(w, "  %s\n", strings.TrimSpace(strings.Join([]string{"gate", g.name, s.name, "[flags]", s.args}, " ")))
	}
	if !g.single() {
		fmt.Fprintln(w, "\nCommands:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, s := range g.subs {
			fmt.Fprintf(tw, "  %s\t%s\n", s.name, s.summary)
		}
		tw.Flush()
		fmt.Fprintf(w, "\nRun \"gate %s COMMAND -h\" for a command's flags.\n", g.name)
	}
	fmt.Fprint(w, connectionHelp)
}

const connectionHelp = `
Every command takes --url (default $ASYNCGATE_URL, else ` + defaultGateURL + `),
--key or --key-file (default $ASYNCGATE_KEY, $ASYNCGATE_KEY_FILE) and --json.
Exit status: 0 done, 1 the gate refused or could not be reached, 2 bad usage.
`

func (g *remoteGroup) dispatch(args []string, stdout, stderr io.Writer) int {
	var s *remoteSub
	if g.single() {
		s = &g.subs[0]
	} else {
		if len(args) == 0 {
			g.usage(stderr)
			return exitUsage
		}
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			g.usage(stdout)
			return exitOK
		}
		if s = g.sub(args[0]); s == nil {
			fmt.Fprintf(stderr, "gate %s: unknown command %q\n\n", g.name, args[0])
			g.usage(stderr)
			return exitUsage
		}
		args = args[1:]
	}
	return g.runSub(s, args, stdout, stderr)
}

// commandName is "gate tasks list" (or "gate stats").
func (g *remoteGroup) commandName(s *remoteSub) string {
	return strings.TrimSpace("gate " + g.name + " " + s.name)
}

// flagSet builds a subcommand's flags: the connection flags, then its own.
func (g *remoteGroup) flagSet(s *remoteSub, rc *remoteCtx, stderr io.Writer) *flag.FlagSet {
	name := g.commandName(s)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&rc.url, "url", "", "the gate's URL (default $ASYNCGATE_URL, else "+defaultGateURL+")")
	fs.StringVar(&rc.key, "key", "", "API key (default $ASYNCGATE_KEY); prefer --key-file: a key on the command line shows in the process list")
	fs.StringVar(&rc.keyFile, "key-file", "", "file holding the API key, e.g. gate-data/admin.key (default $ASYNCGATE_KEY_FILE)")
	fs.BoolVar(&rc.json, "json", false, "print JSON (the gate's answers) instead of tables")
	fs.DurationVar(&rc.timeout, "timeout", 60*time.Second, "give up on a request after this long")
	if s.tenant {
		fs.StringVar(&rc.tenant, "tenant", "", "another tenant (operators: admin keys of the default tenant)")
	}
	if s.flags != nil {
		s.flags(fs)
	}
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: %s\n\n%s\n", strings.TrimSpace(name+" [flags] "+s.args), s.summary)
		if s.more != "" {
			fmt.Fprintf(w, "\n%s\n", strings.TrimRight(s.more, "\n"))
		}
		fmt.Fprintln(w, "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

func (g *remoteGroup) runSub(s *remoteSub, args []string, stdout, stderr io.Writer) int {
	rc := &remoteCtx{out: &termSafe{w: stdout}, raw: stdout, errw: &termSafe{w: stderr}}
	fs := g.flagSet(s, rc, stderr)
	fs.SetOutput(stderr)
	// Flags may follow the positional arguments (gate tasks show T-1 --json).
	var pos []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	name := g.commandName(s)
	if len(pos) < s.minArgs || (s.maxArgs >= 0 && len(pos) > s.maxArgs) {
		fmt.Fprintf(stderr, "%s: wants %s\n", name, argCount(s))
		fs.Usage()
		return exitUsage
	}
	if err := rc.connect(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rc.ctx = ctx
	if err := s.run(rc, pos); err != nil {
		var ee exitErr
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintf(stderr, "%s: %s\n", name, ee.msg)
			}
			return ee.code
		}
		fmt.Fprintf(stderr, "%s: %v\n", name, describeErr(err))
		return exitError
	}
	return exitOK
}

func argCount(s *remoteSub) string {
	switch {
	case s.maxArgs == 0:
		return "no arguments"
	case s.minArgs == s.maxArgs:
		return fmt.Sprintf("%d argument(s): %s", s.minArgs, s.args)
	case s.maxArgs < 0:
		return fmt.Sprintf("at least %d argument(s): %s", s.minArgs, s.args)
	}
	return fmt.Sprintf("%d to %d arguments: %s", s.minArgs, s.maxArgs, s.args)
}

// exitErr ends a command with a given exit status.
type exitErr struct {
	code int
	msg  string
}

func (e exitErr) Error() string { return e.msg }

// describeErr explains an error for people: the gate's code and detail, or
// how to reach it.
func describeErr(err error) string {
	var ae *client.APIError
	if errors.As(err, &ae) {
		s := fmt.Sprintf("%s (%d): %s", ae.Code, ae.Status, ae.Detail)
		if ae.Status == 401 {
			s += " — give an API key with --key-file, --key or ASYNCGATE_KEY"
		}
		return s
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Sprintf("cannot reach the gate: %v (is it running? --url or ASYNCGATE_URL names it)", ue.Err)
	}
	return err.Error()
}

// remoteCtx is what a remote command runs with.
type remoteCtx struct {
	ctx               context.Context
	url, key, keyFile string
	tenant            string
	json              bool
	timeout           time.Duration
	c                 *client.Client
	out, errw         io.Writer // through termSafe: no control characters reach the terminal
	raw               io.Writer // stdout as it is, for a result's payload
}

// connect resolves the URL and key (flags, then the environment) and makes
// the client.
func (rc *remoteCtx) connect() error {
	getenv := os.Getenv
	if rc.url == "" {
		rc.url = getenv("ASYNCGATE_URL")
	}
	if rc.url == "" {
		rc.url = defaultGateURL
	}
	u, err := url.Parse(rc.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--url %q: want http://host:port or https://…", rc.url)
	}
	if rc.key != "" && rc.keyFile != "" {
		return errors.New("give --key or --key-file, not both")
	}
	if rc.key == "" && rc.keyFile == "" {
		rc.key = getenv("ASYNCGATE_KEY")
		if rc.key == "" {
			rc.keyFile = getenv("ASYNCGATE_KEY_FILE")
		}
	}
	if rc.keyFile != "" {
		b, err := os.ReadFile(rc.keyFile)
		if err != nil {
			return fmt.Errorf("key file: %w", err)
		}
		rc.key = strings.TrimSpace(string(b))
		if rc.key == "" {
			return fmt.Errorf("key file %s holds no key", rc.keyFile)
		}
	}
	rc.c = client.New(rc.url, rc.key, client.WithUserAgent("gate-cli/"+buildVersion()))
	return nil
}

// call sends a request with the command's timeout and decodes the answer
// into out.
func (rc *remoteCtx) call(method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(rc.ctx, rc.timeout)
	defer cancel()
	_, err := rc.c.Do(ctx, method, path, body, out)
	return err
}

// withTenant adds ?tenant= (or &tenant=) when --tenant was given.
func (rc *remoteCtx) withTenant(path string) string {
	if rc.tenant == "" {
		return path
	}
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return path + sep + "tenant=" + url.QueryEscape(rc.tenant)
}

// printJSON prints v indented.
func (rc *remoteCtx) printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(rc.out, string(b))
	return err
}

// table prints rows under a header, aligned. A cell is one line whatever
// its text: a newline, carriage return or tab in it is a space.
func (rc *remoteCtx) table(header []string, rows [][]string) {
	tw := tabwriter.NewWriter(rc.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	cells := make([]string, 0, len(header))
	for _, r := range rows {
		cells = cells[:0]
		for _, c := range r {
			cells = append(cells, cellSpaces.Replace(c))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()
}

// fields prints "name: value" lines, aligned, skipping empty values; a
// line with no name is one more value of the field above it.
func (rc *remoteCtx) fields(kv [][2]string) {
	tw := tabwriter.NewWriter(rc.out, 0, 0, 1, ' ', 0)
	for _, f := range kv {
		switch {
		case f[1] == "":
		case f[0] == "": // a further value of the field above
			fmt.Fprintf(tw, "\t%s\n", oneLine(f[1]))
		default:
			fmt.Fprintf(tw, "%s:\t%s\n", f[0], oneLine(f[1]))
		}
	}
	tw.Flush()
}

// ago is a short age: "4s", "3m", "2h", "5d".
func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return short(time.Since(t))
}

func short(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		s = fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh", int(d.Hours()))
	default:
		s = fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	if neg {
		return "in " + s
	}
	return s
}

// clip shortens s to n runes with an ellipsis, on one line: a newline,
// carriage return or tab in it is a space, so text an agent or a worker
// wrote cannot add a row or a column to a table.
func clip(s string, n int) string {
	r := []rune(cellSpaces.Replace(s))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n-1]) + "…"
}

var cellSpaces = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ", "\t", " ")

// oneLine is a value printed on a line of its own (fields, a wait's plain
// progress line) with its newlines, carriage returns and tabs written as
// \n, \r and \t: a summary, progress message or error an agent or a
// worker wrote must not print a line the operator takes for the gate's (a
// second "status:" line, a forged progress line) or shift the columns.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\n\r\t") {
		return s
	}
	return lineEscapes.Replace(s)
}

var lineEscapes = strings.NewReplacer("\n", `\n`, "\r", `\r`, "\t", `\t`)

// sortedKeys returns m's keys sorted.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// readJSONArg reads a JSON argument: inline JSON, @FILE, or - for stdin.
func readJSONArg(arg string, stdin io.Reader) (json.RawMessage, error) {
	var b []byte
	var err error
	switch {
	case arg == "-":
		b, err = io.ReadAll(stdin)
	case strings.HasPrefix(arg, "@"):
		b, err = os.ReadFile(arg[1:])
	default:
		b = []byte(arg)
	}
	if err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		return nil, errors.New("not valid JSON (give inline JSON, @FILE or - for stdin)")
	}
	return json.RawMessage(b), nil
}
