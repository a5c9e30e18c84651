// Command compare runs the same workloads on AsyncGate and on River
// (riverqueue/river, SQLite and pgx v5 drivers) on this machine, with durable
// commits on both sides, and prints the medians side by side with their
// ratio. See bench/README.md.
//
//	cd bench && go run ./cmd/compare -duration 10s -runs 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// options are compare's flags.
type options struct {
	duration     time.Duration // steady-state measuring window
	runs         int           // runs of every workload
	burn         int           // tasks queued before a burn-down
	producers    int           // producers in steady state
	workers      int           // gate workers in-process
	batch        int           // gate lease batch in-process
	riverMax     int           // River's MaxWorkers (its own benchmark's value)
	httpBatch    int           // gate bench --batch for the HTTP workloads
	httpOutcomes int           // gate bench --outcome-batch for the HTTP workloads
	timeout      time.Duration // cap on one burn-down or one HTTP run
	pgURL        string
	root         string // repository root (for the gate binary)
	gateBin      string
	only         *regexp.Regexp
	skipRiver    bool
	verbose      bool
	stderr       io.Writer
	wasmCache    string // compiled plugins shared by every gate serve of one invocation
	scratchDir   string // temp folder of this invocation
	gogc         int    // the collector's target of every process of the run
	pgWriters    int    // writer connections of each in-process gate host on PostgreSQL (0: the store's default)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	var only string
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measuring window of each steady-state run")
	fs.IntVar(&o.runs, "runs", 3, "runs of each workload (the table shows medians)")
	fs.IntVar(&o.burn, "burn", 20000, "tasks queued before each burn-down run")
	fs.IntVar(&o.producers, "producers", 32, "producers in the steady-state and HTTP workloads")
	fs.IntVar(&o.workers, "workers", 8, "gate workers (in-process: leasing -batch and completing concurrently; HTTP: completing each task in turn)")
	fs.IntVar(&o.batch, "batch", 50, "tasks per lease call of an in-process gate worker")
	fs.IntVar(&o.httpBatch, "http-batch", 16, "tasks per lease call of an HTTP gate worker")
	fs.IntVar(&o.httpOutcomes, "http-outcomes", 16, "completions an HTTP gate worker sends in one batch call when several are ready (1: one call each)")
	fs.IntVar(&o.pgWriters, "gate-pg-writers", 0, "writer connections of each in-process gate host on PostgreSQL (0: the store's default, as gate serve without --db-writers)")
	fs.IntVar(&o.riverMax, "river-max-workers", 2000, "River's MaxWorkers (2,000 as in River's own benchmark)")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "cap on one burn-down run or one gate start")
	fs.StringVar(&o.pgURL, "pg", envOr("ASYNCGATE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL server (each run gets a fresh database, dropped after)")
	fs.StringVar(&o.root, "root", "..", "repository root, where `make build` makes bin/gate")
	fs.StringVar(&o.gateBin, "gate", "", "gate binary for the HTTP workloads (default: <root>/bin/gate, built with make build if missing)")
	fs.StringVar(&only, "only", "", "run only workloads whose id matches this regexp (ids: "+strings.Join(workloadIDs(), ", ")+")")
	fs.BoolVar(&o.skipRiver, "skip-river", false, "run the gate side only")
	fs.BoolVar(&o.verbose, "v", false, "print every run as it ends")
	fs.IntVar(&o.gogc, "gogc", host.GCPercent, "the collector's target (GOGC) of this process, River and the in-process gate alike, and of the gate processes it starts (default: the gate's own; GOGC wins when set)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.runs < 1 || o.runs > 20 || o.burn < 1 || o.producers < 1 || o.workers < 1 || o.batch < 1 || o.batch > 100 ||
		o.httpBatch < 1 || o.httpBatch > 100 || o.httpOutcomes < 1 || o.httpOutcomes > 100 || o.riverMax < 1 || o.duration <= 0 || o.timeout <= 0 {
		fmt.Fprintln(stderr, "compare: -runs 1..20; -burn, -producers, -workers, -river-max-workers, -duration, -timeout positive; -batch and -http-batch 1..100")
		return 2
	}
	var err error
	if o.only, err = regexp.Compile(only); err != nil {
		fmt.Fprintln(stderr, "compare: -only:", err)
		return 2
	}
	o.stderr = stderr
	if v := os.Getenv("GOGC"); v != "" {
		o.gogc, _ = strconv.Atoi(v) // 0 for "off"
	} else if changed, _ := host.SetGCPercent(o.gogc); changed {
		os.Setenv("GOGC", strconv.Itoa(o.gogc)) // gate serve and gate bench inherit it
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := compare(ctx, o, stdout); err != nil {
		fmt.Fprintln(stderr, "compare:", err)
		return 1
	}
	return 0
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// result is one run of one side of a workload.
type result struct {
	rate float64       // completed cycles (jobs) per second
	p99  time.Duration // p99 enqueue→work, 0 when not measured
	done int64         // cycles completed in the measured window
	// partial: a burn-down that -timeout cut off before the queue was empty
	// (the rate is over what it completed).
	partial bool
}

// side runs one side of a workload once.
type side func(ctx context.Context, o options) (result, error)

// workload is one row of the table.
type workload struct {
	id    string
	name  string
	gate  side
	river side
	// riverKey names River's run: rows with the same key share it (the HTTP
	// rows compare against River's in-process PostgreSQL steady state).
	riverKey  string
	riverName string
	latency   bool // show p99 enqueue→work
}

func workloads() []workload {
	return []workload{
		{id: "sqlite-burn", name: "SQLite burn-down: %[1]d queued, workers complete", gate: gateSQLiteBurn, river: riverSQLiteBurn, riverKey: "sqlite-burn"},
		{id: "sqlite-steady", name: "SQLite steady: %[2]d producers, workers complete", gate: gateSQLiteSteady, river: riverSQLiteSteady, riverKey: "sqlite-steady", latency: true},
		{id: "pg-burn", name: "PostgreSQL burn-down: %[1]d queued, 1 host", gate: gatePGBurn(1), river: riverPGBurn(1), riverKey: "pg-burn-1"},
		{id: "pg-burn-3", name: "PostgreSQL burn-down: %[1]d queued, 3 hosts (River: 3 clients)", gate: gatePGBurn(3), river: riverPGBurn(3), riverKey: "pg-burn-3"},
		{id: "pg-steady", name: "PostgreSQL steady: %[2]d producers, 1 host", gate: gatePGSteady(1), river: riverPGSteady(1), riverKey: "pg-steady-1", latency: true},
		{id: "pg-steady-3", name: "PostgreSQL steady: %[2]d producers, 3 hosts (River: 3 clients)", gate: gatePGSteady(3), river: riverPGSteady(3), riverKey: "pg-steady-3", latency: true},
		{id: "http-sqlite", name: "HTTP, gate on SQLite: %[2]d producers, %[3]d workers completing in turn", gate: gateHTTP(false), river: riverPGSteady(1), riverKey: "pg-steady-1",
			riverName: "River has no HTTP door: River column is its in-process PostgreSQL steady state", latency: true},
		{id: "http-pg", name: "HTTP, gate on PostgreSQL: %[2]d producers, %[3]d workers completing in turn", gate: gateHTTP(true), river: riverPGSteady(1), riverKey: "pg-steady-1",
			riverName: "River has no HTTP door: River column is its in-process PostgreSQL steady state", latency: true},
	}
}

func workloadIDs() []string {
	var ids []string
	for _, w := range workloads() {
		ids = append(ids, w.id)
	}
	return ids
}

// row collects the runs of one workload.
type row struct {
	w     workload
	gate  []result
	river []result
	errs  []string
}

func compare(ctx context.Context, o options, stdout io.Writer) error {
	var rows []*row
	for _, w := range workloads() {
		if o.only.MatchString(w.id) {
			rows = append(rows, &row{w: w})
		}
	}
	if len(rows) == 0 {
		return errors.New("-only matches no workload")
	}
	tmp, err := os.MkdirTemp("", "asyncgate-compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	o.scratchDir = tmp
	o.wasmCache = filepath.Join(tmp, "wasm-cache")

	needPG, needHTTP := false, false
	for _, r := range rows {
		needPG = needPG || strings.HasPrefix(r.w.id, "pg") || (strings.HasPrefix(r.w.id, "http") && !o.skipRiver) || r.w.id == "http-pg"
		needHTTP = needHTTP || strings.HasPrefix(r.w.id, "http")
	}
	var pgInfo string
	if needPG {
		if pgInfo, err = pgSettings(ctx, o.pgURL); err != nil {
			return fmt.Errorf("PostgreSQL at %s: %w (set ASYNCGATE_TEST_POSTGRES or -pg, or -only sqlite)", redact(o.pgURL), err)
		}
	}
	if needHTTP {
		if o.gateBin, err = gateBinary(ctx, o); err != nil {
			return err
		}
	}

	started := time.Now().UTC()
	fmt.Fprintf(o.stderr, "compare: %d workloads × %d runs; window %s, burn-down %d tasks\n", len(rows), o.runs, o.duration, o.burn)
	for i := 0; i < o.runs; i++ {
		// River's runs are shared by rows with the same key within one round.
		riverDone := map[string]result{}
		for _, r := range rows {
			if err := ctx.Err(); err != nil {
				return err
			}
			g, err := r.w.gate(ctx, o)
			if err != nil {
				r.errs = append(r.errs, fmt.Sprintf("gate run %d: %v", i+1, err))
			} else {
				r.gate = append(r.gate, g)
			}
			if o.verbose {
				fmt.Fprintf(o.stderr, "  run %d %-12s gate  %s %v\n", i+1, r.w.id, fmtRate(g, true), errOrNil(err))
			}
			if o.skipRiver || r.w.river == nil {
				continue
			}
			rv, ok := riverDone[r.w.riverKey]
			if !ok {
				rv, err = r.w.river(ctx, o)
				if err != nil {
					r.errs = append(r.errs, fmt.Sprintf("River run %d: %v", i+1, err))
					continue
				}
				riverDone[r.w.riverKey] = rv
				if o.verbose {
					fmt.Fprintf(o.stderr, "  run %d %-12s River %s\n", i+1, r.w.id, fmtRate(rv, true))
				}
			}
			r.river = append(r.river, rv)
		}
	}
	printTable(stdout, o, rows, started, pgInfo)
	for _, r := range rows {
		if len(r.errs) > 0 {
			return fmt.Errorf("%d runs failed (see the table)", countErrs(rows))
		}
	}
	return nil
}

func errOrNil(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return ""
}

func countErrs(rows []*row) int {
	n := 0
	for _, r := range rows {
		n += len(r.errs)
	}
	return n
}

func printTable(w io.Writer, o options, rows []*row, started time.Time, pgInfo string) {
	fmt.Fprintf(w, "AsyncGate vs River %s, %s, GOMAXPROCS %d, GOGC %d, %s/%s\n", riverVersion, started.Format("2006-01-02 15:04 UTC"), runtime.GOMAXPROCS(0), o.gogc, runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "durable commits on both sides: SQLite WAL synchronous=FULL; PostgreSQL %s\n", pgInfo)
	fmt.Fprintf(w, "medians of %d runs; burn-down %d tasks; steady window %s; gate in-process: %d workers leasing %d and completing them concurrently; River: MaxWorkers %d, FetchCooldown 2ms, FetchPollInterval 20ms\n\n",
		o.runs, o.burn, o.duration, o.workers, o.batch, o.riverMax)
	fmt.Fprintln(w, "| workload | AsyncGate median | River median | ratio |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	var notes []string
	for _, r := range rows {
		name := fmt.Sprintf(r.w.name, o.burn, o.producers, o.workers)
		g, rv := median(r.gate), median(r.river)
		gs, rs, ratio := "failed", "—", "—"
		if len(r.gate) > 0 {
			gs = fmtRate(g, r.w.latency)
		}
		if len(r.river) > 0 {
			rs = fmtRate(rv, r.w.latency)
			if r.w.riverName != "" {
				rs += " ¹"
			}
		} else if o.skipRiver {
			rs = "skipped"
		} else {
			rs = "failed"
		}
		if len(r.gate) > 0 && len(r.river) > 0 && rv.rate > 0 {
			ratio = fmt.Sprintf("%.2f×", g.rate/rv.rate)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", name, gs, rs, ratio)
		if r.w.riverName != "" && !contains(notes, r.w.riverName) {
			notes = append(notes, r.w.riverName)
		}
	}
	fmt.Fprintln(w)
	for _, n := range notes {
		fmt.Fprintf(w, "¹ %s.\n", n)
	}
	for _, r := range rows {
		if anyPartial(r.gate) || anyPartial(r.river) {
			fmt.Fprintf(w, "† a burn-down run that -timeout (%s) cut off before the queue was empty: rate over what it completed.\n", o.timeout)
			break
		}
	}
	fmt.Fprintln(w, "ratio = AsyncGate / River (above 1: the gate is faster). p99 is enqueue→work: the gate from a task's available_at to the lease reaching the worker, River from a job's created_at to Work starting.")
	fmt.Fprintln(w, "\nevery run (cycles/s):")
	for _, r := range rows {
		fmt.Fprintf(w, "  %-12s gate %s   River %s\n", r.w.id, rates(r.gate), rates(r.river))
		for _, e := range r.errs {
			fmt.Fprintf(w, "  %-12s %s\n", "", e)
		}
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func rates(rs []result) string {
	if len(rs) == 0 {
		return "—"
	}
	var parts []string
	for _, r := range rs {
		s := fmt.Sprintf("%.0f", r.rate)
		if r.partial {
			s += fmt.Sprintf(" † (%d of the queue)", r.done)
		}
		if r.p99 > 0 {
			s += " (p99 " + fmtDur(r.p99) + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// median takes the median rate and, separately, the median p99.
func median(rs []result) result {
	if len(rs) == 0 {
		return result{}
	}
	r := append([]result(nil), rs...)
	sort.Slice(r, func(i, j int) bool { return r[i].rate < r[j].rate })
	out := r[len(r)/2]
	if len(r)%2 == 0 {
		out.rate = (r[len(r)/2-1].rate + r[len(r)/2].rate) / 2
	}
	sort.Slice(r, func(i, j int) bool { return r[i].p99 < r[j].p99 })
	out.p99 = r[len(r)/2].p99
	return out
}

func fmtRate(r result, latency bool) string {
	s := fmt.Sprintf("%s/s", thousands(r.rate))
	if r.partial {
		s += " †"
	}
	if latency && r.p99 > 0 {
		s += ", p99 " + fmtDur(r.p99)
	}
	return s
}

func thousands(f float64) string {
	n := int64(f + 0.5)
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "—"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func anyPartial(rs []result) bool {
	for _, r := range rs {
		if r.partial {
			return true
		}
	}
	return false
}
