package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

func init() {
	register(command{name: "bench", summary: "load-test a gate over HTTP: producers, batch-leasing workers, latency percentiles", run: runBench})
}

// benchOpts are gate bench's flags.
type benchOpts struct {
	url, key        string
	spawn           bool
	data            string
	producers       int
	workers         int
	batch           int
	wait            int
	duration        time.Duration
	tasks           int64
	accept          bool
	cpuprofile      string
	progress        bool
	completeWorkers int
	warm            bool
	outcomeBatch    int
}

func runBench(args []string, stdout, stderr io.Writer) int {
	var o benchOpts
	fs := flag.NewFlagSet("gate bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.url, "url", "", "gate to load (default: start one on a temp data folder)")
	fs.StringVar(&o.key, "key", "", "admin key of the gate given by --url (the run makes a task type and keys of its own, and removes them when it ends)")
	fs.BoolVar(&o.spawn, "spawn", false, "start the gate as a subprocess instead of in this process")
	fs.StringVar(&o.data, "data", "", "data folder for the gate it starts (default: a temp folder, removed after)")
	fs.IntVar(&o.producers, "producers", 8, "producers enqueueing tasks (P)")
	fs.IntVar(&o.workers, "workers", 4, "workers leasing in batches with long-poll (W)")
	fs.IntVar(&o.completeWorkers, "completers", 8, "concurrent completions per worker")
	fs.IntVar(&o.batch, "batch", 64, "max_tasks per lease call")
	fs.IntVar(&o.outcomeBatch, "outcome-batch", 1, "completions a completer sends in one POST /v1/leases/batch when several are ready (1: one POST …/complete each)")
	fs.IntVar(&o.wait, "wait", 5, "wait_seconds of each lease call (long-poll)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long producers enqueue")
	fs.Int64Var(&o.tasks, "tasks", 0, "enqueue exactly this many tasks instead of running for --duration")
	fs.BoolVar(&o.accept, "accept", false, "accept every offer before completing it (one more call and receipt per cycle)")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of this process (client and, in-process, the gate) to this file")
	fs.BoolVar(&o.progress, "progress", true, "draw a progress bar on stderr")
	fs.BoolVar(&o.warm, "warm", true, "wait until the gate's plugins are compiled before the clock starts (a gate on a fresh data folder compiles them in the background)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.producers < 1 || o.workers < 1 || o.batch < 1 || o.batch > 100 || o.completeWorkers < 1 || o.outcomeBatch < 1 || o.outcomeBatch > 100 {
		fmt.Fprintln(stderr, "gate bench: --producers, --workers and --completers must be positive, --batch and --outcome-batch 1..100")
		return 2
	}
	// The client runs with the gate's collector target, as the gate it
	// starts does: on a shared machine a client collecting many times a
	// second takes CPU from the gate it measures.
	host.SetGCPercent(host.GCPercent)
	if err := bench(o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "gate bench:", err)
		if errors.Is(err, errBenchInterrupted) {
			return 130 // as a shell reports a run ended by Ctrl-C
		}
		return 1
	}
	return 0
}

// benchClient is a keep-alive HTTP client sized for the load.
type benchClient struct {
	base string
	hc   *http.Client
}

func newBenchClient(base string, conns int) *benchClient {
	tr := &http.Transport{MaxIdleConns: conns * 2, MaxIdleConnsPerHost: conns * 2, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
	return &benchClient{base: strings.TrimRight(base, "/"), hc: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

// do sends a JSON body and decodes a JSON answer into out (if non-nil).
func (c *benchClient) do(method, path, key string, body []byte, out any) (int, error) {
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if res.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return res.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil && res.StatusCode != http.StatusNoContent {
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			return res.StatusCode, err
		}
	} else {
		_, _ = io.Copy(io.Discard, res.Body)
	}
	return res.StatusCode, nil
}

// pluginWarmTimeout caps how long gate bench waits for a gate's plugins.
const pluginWarmTimeout = 10 * time.Minute

// waitPluginsReady polls the admin plugin list until the gate reports every
// plugin's first load finished and none running on the interpreter, and
// returns how long that took (0 when they were compiled at once).
func waitPluginsReady(c *benchClient, admin string, timeout time.Duration, stop <-chan struct{}) (time.Duration, error) {
	start := time.Now()
	for polls := 0; ; polls++ {
		var list struct {
			Ready   bool `json:"ready"`
			Plugins []struct {
				Engine string `json:"engine"`
			} `json:"plugins"`
		}
		if _, err := c.do("GET", "/v1/admin/plugins", admin, nil, &list); err != nil {
			return 0, fmt.Errorf("asking the gate whether its plugins are compiled: %w", err)
		}
		// Ready comes while plugins still run on the interpreter (a start
		// serves from it while they compile): wait for the compiled code.
		compiled := list.Ready
		for _, p := range list.Plugins {
			if p.Engine == "interpreter" {
				compiled = false
			}
		}
		if compiled {
			if polls == 0 {
				return 0, nil
			}
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return 0, fmt.Errorf("the gate's plugins were still compiling after %s", timeout)
		}
		select {
		case <-stop:
			return 0, errBenchInterrupted
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errBenchInterrupted ends a run stopped by Ctrl-C or SIGTERM.
var errBenchInterrupted = errors.New("interrupted")

// latencies collects durations from one goroutine; merge them at the end.
type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	i := int(float64(len(l)-1) * p)
	return l[i]
}

type benchStats struct {
	mu                              sync.Mutex
	enqueue, lease, complete, e2l   latencies
	accept                          latencies
	enqueued, completed, leaseCalls atomic.Int64
	emptyLeases                     atomic.Int64
	errors                          atomic.Int64
	firstErr                        atomic.Value
}

func (s *benchStats) merge(dst *latencies, src latencies) {
	s.mu.Lock()
	*dst = append(*dst, src...)
	s.mu.Unlock()
}

func (s *benchStats) fail(err error) {
	s.errors.Add(1)
	s.firstErr.CompareAndSwap(nil, err.Error())
}

func bench(o benchOpts, stdout, stderr io.Writer) error {
	base, admin := o.url, o.key
	mode := "external gate " + o.url
	if base == "" {
		dir := o.data
		if dir == "" {
			tmp, err := os.MkdirTemp("", "gate-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			dir = tmp
		}
		var stop func()
		var err error
		if o.spawn {
			base, stop, err = spawnGate(dir)
			mode = "gate subprocess on " + dir
		} else {
			base, stop, err = inProcessGate(dir)
			mode = "in-process gate on " + dir
		}
		if err != nil {
			return err
		}
		defer stop()
		k, err := os.ReadFile(filepath.Join(dir, "admin.key"))
		if err != nil {
			return err
		}
		admin = strings.TrimSpace(string(k))
	} else if admin == "" {
		return errors.New("--url needs --key (an admin key)")
	}
	conns := o.producers + o.workers*(o.completeWorkers+1) + 4
	c := newBenchClient(base, conns)

	// Ctrl-C (or SIGTERM) ends the run early, and the run still removes
	// what it made on the gate; a second one exits at once.
	interrupt := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer func() { signal.Stop(sigs); close(sigs) }()
	go func() {
		if _, ok := <-sigs; !ok {
			return
		}
		close(interrupt)
		fmt.Fprintln(stderr, "\ngate bench: interrupted; removing what the run made on the gate (again to exit at once)")
		if _, ok := <-sigs; ok {
			os.Exit(130)
		}
	}()

	// A task type and keys of the run's own: a gate given by --url may be
	// somebody's, so the run replaces none of its task types, and when it
	// ends it cancels its tasks still open, revokes the keys it made and
	// deletes its type. The type's name is fixed, so the gate's metrics
	// gain one set of series for it, not one per run.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	taskType := benchTaskType
	if code, err := c.do("GET", "/v1/admin/task-types/"+taskType, admin, nil, nil); err == nil {
		return fmt.Errorf("the gate already has a task type %s (an earlier run's, stopped before it could remove it, or one of its users'); "+
			"remove it (DELETE /v1/admin/task-types/%s) to run gate bench on this gate", taskType, taskType)
	} else if code != http.StatusNotFound {
		return err
	}
	var made benchLeftovers
	if o.url != "" || o.data != "" {
		// A gate that outlives the run (a throwaway one is removed whole).
		defer made.clean(c, admin, stderr)
	}
	made.taskType = taskType // set first: a PUT the gate took but whose answer was lost is undone too
	if _, err := c.do("PUT", "/v1/admin/task-types/"+taskType, admin, []byte(`{"lease_seconds":300,"requeue_delay_seconds":0,"description":"gate bench (removed when the run ends)"}`), nil); err != nil {
		return err
	}
	newKey := func(role, principal string) (string, error) {
		var k struct {
			ID     string `json:"key_id"`
			APIKey string `json:"api_key"`
		}
		body := fmt.Sprintf(`{"role":%q,"principal":%q}`, role, principal)
		if _, err := c.do("POST", "/v1/admin/keys", admin, []byte(body), &k); err != nil {
			return "", err
		}
		made.keys = append(made.keys, k.ID)
		return k.APIKey, nil
	}
	agentKey, err := newKey("agent", "bench.agent-"+run)
	if err != nil {
		return err
	}
	made.agentKey = agentKey
	workerKeys := make([]string, o.workers)
	for i := range workerKeys {
		if workerKeys[i], err = newKey("worker", fmt.Sprintf("bench.w%d-%s", i, run)); err != nil {
			return err
		}
	}

	if o.warm {
		// A gate on a fresh data folder compiles its plugins in the
		// background while it serves; that one-time work would share the
		// CPU with the load and lower the figure.
		waited, err := waitPluginsReady(c, admin, pluginWarmTimeout, interrupt)
		if err != nil {
			return err
		}
		if waited > 0 {
			fmt.Fprintf(stderr, "gate bench: waited %s for the gate's plugins to compile (--warm=false to start at once)\n", waited.Round(time.Millisecond))
		}
	}
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Fprintf(stderr, "gate bench: %s; %d producers, %d workers (batch %d, %d completers each, wait %ds)\n",
		mode, o.producers, o.workers, o.batch, o.completeWorkers, o.wait)
	writersBefore, writersOK := scrapeWriters(c, admin)
	var st benchStats
	start := time.Now()
	stopProducing := make(chan struct{})
	var claimed atomic.Int64
	var pwg, wwg sync.WaitGroup
	for p := 0; p < o.producers; p++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			var lat latencies
			defer func() { st.merge(&st.enqueue, lat) }()
			var buf []byte
			for n := 0; ; n++ {
				select {
				case <-stopProducing:
					return
				default:
				}
				if o.tasks > 0 && claimed.Add(1) > o.tasks {
					return
				}
				buf = append(buf[:0], `{"task_type":"`+taskType+`","params":{"n":`...)
				buf = strconv.AppendInt(buf, int64(n), 10)
				buf = append(buf, `}}`...)
				t0 := time.Now()
				if _, err := c.do("POST", "/v1/tasks", agentKey, buf, nil); err != nil {
					st.fail(err)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				lat = append(lat, time.Since(t0))
				st.enqueued.Add(1)
			}
		}()
	}
	doneWorking := make(chan struct{})
	for w := 0; w < o.workers; w++ {
		wwg.Add(1)
		go func(w int) {
			defer wwg.Done()
			benchWorker(c, &st, o, workerKeys[w], fmt.Sprintf("bench.w%d-%s", w, run), taskType, doneWorking)
		}(w)
	}

	// Progress and the end of the run.
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	producing := true
	prodDoneCh := make(chan struct{})
	go func() { pwg.Wait(); close(prodDoneCh) }()
	prodDone := prodDoneCh
	var drainDeadline time.Time
	interrupted := false
	var lastDone int64
	var lastAt time.Time
	// The producing window's counts, taken as the producers are told to
	// stop: what the workers completed while the producers still ran.
	var window benchWindow
	endWindow := func() {
		window = benchWindow{elapsed: time.Since(start), enqueued: st.enqueued.Load(), completed: st.completed.Load(), leaseCalls: st.leaseCalls.Load()}
	}
	for {
		select {
		case <-prodDone:
			prodDone = nil // closed: stop selecting it
			if producing {
				endWindow()
				producing = false
				drainDeadline = time.Now().Add(30 * time.Second)
			}
		case <-ticker.C:
		case <-interrupt:
			interrupted = true
		}
		el := time.Since(start)
		if interrupted {
			if producing {
				endWindow()
				close(stopProducing)
			}
			pwg.Wait()
			break
		}
		if producing && o.tasks == 0 && el >= o.duration {
			endWindow()
			close(stopProducing)
			pwg.Wait()
			prodDone = nil
			producing = false
			drainDeadline = time.Now().Add(30 * time.Second)
		}
		done, enq := st.completed.Load(), st.enqueued.Load()
		if done != lastDone {
			lastDone, lastAt = done, time.Now()
		}
		if o.progress {
			frac := float64(done) / float64(max(enq, 1))
			if producing {
				if o.tasks > 0 {
					frac = float64(done) / float64(o.tasks)
				} else {
					frac = el.Seconds() / o.duration.Seconds()
				}
			}
			drawBar(stderr, frac, done, enq, el)
		}
		if !producing && (done >= enq || time.Now().After(drainDeadline)) {
			break
		}
	}
	// The writers' work is read as the last task completes, before the
	// workers' last long-polls end: the window is the run's.
	var writersAfter writersSample
	writersEnd := time.Now()
	if writersOK {
		writersAfter, writersOK = scrapeWriters(c, admin)
	}
	if o.progress {
		fmt.Fprintln(stderr)
	}
	close(doneWorking)
	wwg.Wait()
	if lastAt.IsZero() {
		lastAt = time.Now()
	}
	elapsed := lastAt.Sub(start)

	for _, l := range []*latencies{&st.enqueue, &st.lease, &st.complete, &st.e2l, &st.accept} {
		sort.Slice(*l, func(i, j int) bool { return (*l)[i] < (*l)[j] })
	}
	done := st.completed.Load()
	fmt.Fprintf(stdout, "gate bench: %s\n", mode)
	fmt.Fprintf(stdout, "  producers %d, workers %d, batch %d, completers %d, accept %v\n", o.producers, o.workers, o.batch, o.completeWorkers, o.accept)
	fmt.Fprintf(stdout, "  enqueued %d, completed %d in %.2fs: %.0f full cycles/s\n", st.enqueued.Load(), done, elapsed.Seconds(), float64(done)/elapsed.Seconds())
	fmt.Fprintf(stdout, "  lease calls %d (%d empty), %.1f offers per call\n", st.leaseCalls.Load(), st.emptyLeases.Load(), float64(len(st.e2l))/float64(max(st.leaseCalls.Load(), 1)))
	fmt.Fprintf(stdout, "  %-16s %9s %9s %9s %9s\n", "latency", "p50", "p90", "p99", "max")
	row := func(name string, l latencies) {
		if len(l) == 0 {
			return
		}
		fmt.Fprintf(stdout, "  %-16s %9s %9s %9s %9s\n", name, fmtDur(l.pct(0.5)), fmtDur(l.pct(0.9)), fmtDur(l.pct(0.99)), fmtDur(l[len(l)-1]))
	}
	row("enqueue", st.enqueue)
	row("lease call", st.lease)
	row("accept", st.accept)
	row("complete", st.complete)
	row("enqueue→lease", st.e2l)
	if window.elapsed > 0 {
		fmt.Fprintf(stdout, "  %s\n", window.line())
	}
	if writersOK {
		fmt.Fprintf(stdout, "  %s\n", writersLine(writersBefore, writersAfter, writersEnd.Sub(start)))
	}
	if n := st.errors.Load(); n > 0 {
		fmt.Fprintf(stdout, "  errors %d (first: %v)\n", n, st.firstErr.Load())
	}
	if interrupted {
		return errBenchInterrupted
	}
	if done < st.enqueued.Load() {
		return fmt.Errorf("%d tasks were enqueued but not completed", st.enqueued.Load()-done)
	}
	return nil
}

// benchWindow is what happened while the producers ran: the share of
// the store's writer the workers' completions got against free-running
// producers (issue 40: at least 40 % of enqueues and completions together).
type benchWindow struct {
	elapsed                         time.Duration
	enqueued, completed, leaseCalls int64
}

// line reports the window's rates and the completions' share of the
// tasks written (enqueues and completions; a lease call is one more
// write for up to --batch tasks, counted apart).
func (w benchWindow) line() string {
	secs := max(w.elapsed.Seconds(), 1e-9)
	share := float64(w.completed) / float64(max(w.enqueued+w.completed, 1))
	return fmt.Sprintf("while producing (%.2fs): enqueued %.0f/s, completed %.0f/s, lease calls %.0f/s; completions %.1f%% of enqueues and completions",
		w.elapsed.Seconds(), float64(w.enqueued)/secs, float64(w.completed)/secs, float64(w.leaseCalls)/secs, 100*share)
}

// benchTaskType is the task type gate bench makes for a run and removes
// after it.
const benchTaskType = "gate-bench"

// benchLeftovers is what a run made on the gate it loads.
type benchLeftovers struct {
	taskType string
	agentKey string // the key the run's tasks were queued with
	keys     []string
}

// clean cancels the run's tasks still open (a run stopped early, or one
// whose drain ran out of time), revokes the run's keys and deletes its
// task type; what it cannot undo it names on stderr.
func (l *benchLeftovers) clean(c *benchClient, admin string, stderr io.Writer) {
	if l.taskType != "" && l.agentKey != "" {
		if n, err := cancelOpen(c, l.agentKey, l.taskType); err != nil {
			fmt.Fprintf(stderr, "gate bench: tasks of %s left open: %v\n", l.taskType, err)
		} else if n > 0 {
			fmt.Fprintf(stderr, "gate bench: canceled the run's %d open tasks\n", n)
		}
	}
	for _, id := range l.keys {
		if _, err := c.do("DELETE", "/v1/admin/keys/"+id, admin, nil, nil); err != nil {
			fmt.Fprintf(stderr, "gate bench: key %s left active: %v\n", id, err)
		}
	}
	if l.taskType != "" {
		if code, err := c.do("DELETE", "/v1/admin/task-types/"+l.taskType, admin, nil, nil); err != nil && code != http.StatusNotFound {
			fmt.Fprintf(stderr, "gate bench: task type %s left: %v\n", l.taskType, err)
		}
	}
}

// cancelOpen cancels the queued, scheduled and leased tasks of taskType that key
// queued, and returns how many. A queued task ends when canceled; a leased
// one is only asked to stop (its worker ends it), so each is asked once.
func cancelOpen(c *benchClient, key, taskType string) (int, error) {
	n := 0
	asked := map[string]bool{}
	for _, status := range []string{"queued,scheduled", "leased"} {
		for {
			var page struct {
				Tasks []struct {
					ID string `json:"task_id"`
				} `json:"tasks"`
				Cursor string `json:"cursor"`
			}
			if _, err := c.do("GET", "/v1/tasks?status="+status+"&limit=500&task_type="+taskType, key, nil, &page); err != nil {
				return n, err
			}
			fresh := 0
			for _, t := range page.Tasks {
				if asked[t.ID] {
					continue
				}
				asked[t.ID] = true
				fresh++
				if _, err := c.do("POST", "/v1/tasks/"+t.ID+"/cancel", key, []byte(`{"reason":"gate bench ended"}`), nil); err != nil {
					return n, err
				}
				n++
			}
			if fresh == 0 {
				break
			}
		}
	}
	return n, nil
}

// benchWorker leases in batches with long-poll and completes each offer
// through a small pool of concurrent completers.
func benchWorker(c *benchClient, st *benchStats, o benchOpts, key, id, taskType string, stop <-chan struct{}) {
	var leaseLat, e2l latencies
	jobs := make(chan string, o.batch)
	var cwg sync.WaitGroup
	for i := 0; i < o.completeWorkers; i++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			var comp, acc latencies
			defer func() { st.merge(&st.complete, comp); st.merge(&st.accept, acc) }()
			body := []byte(`{"result_pointer":"bench:ok","summary":"ok"}`)
			for lid := range jobs {
				lids := []string{lid}
				// Whatever else is ready now goes in the same call.
			more:
				for len(lids) < o.outcomeBatch {
					select {
					case l, ok := <-jobs:
						if !ok {
							break more
						}
						lids = append(lids, l)
					default:
						break more
					}
				}
				if o.accept {
					for _, lid := range lids {
						t0 := time.Now()
						if _, err := c.do("POST", "/v1/leases/"+lid+"/accept", key, nil, nil); err != nil {
							st.fail(err)
							continue
						}
						acc = append(acc, time.Since(t0))
					}
				}
				t0 := time.Now()
				if len(lids) == 1 {
					if _, err := c.do("POST", "/v1/leases/"+lid+"/complete", key, body, nil); err != nil {
						st.fail(err)
						continue
					}
					comp = append(comp, time.Since(t0))
					st.completed.Add(1)
					continue
				}
				n, err := completeBatch(c, key, lids, body)
				if err != nil {
					st.fail(err)
				}
				for range n {
					comp = append(comp, time.Since(t0))
				}
				st.completed.Add(int64(n))
			}
		}()
	}
	req := []byte(fmt.Sprintf(`{"worker_id":%q,"task_types":[%q],"max_tasks":%d,"wait_seconds":%d}`, id, taskType, o.batch, o.wait))
	type leaseResp struct {
		Leases []struct {
			LeaseID string `json:"lease_id"`
			Task    struct {
				AvailableAt time.Time `json:"available_at"`
			} `json:"task"`
		} `json:"leases"`
	}
loop:
	for {
		select {
		case <-stop:
			break loop
		default:
		}
		var lr leaseResp
		t0 := time.Now()
		code, err := c.do("POST", "/v1/leases", key, req, &lr)
		now := time.Now()
		st.leaseCalls.Add(1)
		if err != nil {
			st.fail(err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		leaseLat = append(leaseLat, now.Sub(t0))
		if code == http.StatusNoContent {
			st.emptyLeases.Add(1)
			continue
		}
		for _, l := range lr.Leases {
			e2l = append(e2l, now.Sub(l.Task.AvailableAt))
			jobs <- l.LeaseID
		}
	}
	close(jobs)
	cwg.Wait()
	st.merge(&st.lease, leaseLat)
	st.merge(&st.e2l, e2l)
}

// completeBatch completes leases in one POST /v1/leases/batch and returns
// how many the gate completed; an entry it refused is an error.
func completeBatch(c *benchClient, key string, lids []string, body json.RawMessage) (int, error) {
	entries := make([]map[string]any, len(lids))
	for i, lid := range lids {
		entries[i] = map[string]any{"lease_id": lid, "complete": body}
	}
	req, err := json.Marshal(map[string]any{"entries": entries})
	if err != nil {
		return 0, err
	}
	var out struct {
		Results []struct {
			OK     bool   `json:"ok"`
			Error  string `json:"error"`
			Detail string `json:"detail"`
		} `json:"results"`
	}
	if _, err := c.do("POST", "/v1/leases/batch", key, req, &out); err != nil {
		return 0, err
	}
	n := 0
	var refused error
	for _, r := range out.Results {
		if r.OK {
			n++
		} else if refused == nil {
			refused = fmt.Errorf("a batch entry was refused: %s: %s", r.Error, r.Detail)
		}
	}
	return n, refused
}

func drawBar(w io.Writer, frac float64, done, enq int64, el time.Duration) {
	frac = min(max(frac, 0), 1)
	const width = 30
	n := int(frac * width)
	rate := float64(done) / max(el.Seconds(), 0.001)
	fmt.Fprintf(w, "\r[%s%s] %3.0f%%  completed %d / enqueued %d  %6.0f cycles/s  %5.1fs ",
		strings.Repeat("#", n), strings.Repeat(".", width-n), frac*100, done, enq, rate, el.Seconds())
}

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// inProcessGate runs serve in this process on 127.0.0.1:0.
func inProcessGate(dir string) (string, func(), error) {
	cfg := defaultServeConfig()
	cfg.Data, cfg.Listen = dir, "127.0.0.1:0"
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- serve(ctx, cfg, log, ready) }()
	select {
	case addr := <-ready:
		return "http://" + addr, func() { cancel(); <-errc }, nil
	case err := <-errc:
		cancel()
		return "", nil, err
	}
}

// spawnGate starts `gate serve` as a subprocess and parses its listening line.
func spawnGate(dir string) (string, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(exe, "serve", "--data", dir, "--listen", "127.0.0.1:0", "--log-level", "info")
	// A process group of its own: Ctrl-C in the terminal interrupts the
	// run, which then stops this gate itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			if line := sc.Text(); strings.Contains(line, "msg=listening") {
				for _, f := range strings.Fields(line) {
					if a, ok := strings.CutPrefix(f, "addr="); ok {
						addrc <- a
					}
				}
			}
		}
	}()
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}
	select {
	case a := <-addrc:
		return "http://" + a, stop, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return "", nil, errors.New("the gate subprocess did not start")
	}
}

// writersSample is the store's writer series on a gate's /metrics.
type writersSample struct {
	writers, batches, updates, busySeconds float64
}

// scrapeWriters reads the store's writer series from the gate's /metrics
// (an operator's view), or reports false when the gate does not show them.
func scrapeWriters(c *benchClient, admin string) (writersSample, bool) {
	req, err := http.NewRequest("GET", c.base+"/metrics", nil)
	if err != nil {
		return writersSample{}, false
	}
	req.Header.Set("Authorization", "Bearer "+admin)
	res, err := c.hc.Do(req)
	if err != nil {
		return writersSample{}, false
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, res.Body)
		return writersSample{}, false
	}
	var w writersSample
	found := 0
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "asyncgate_store_writers":
			dst = &w.writers
		case "asyncgate_store_batches_total":
			dst = &w.batches
		case "asyncgate_store_batched_updates_total":
			dst = &w.updates
		case "asyncgate_store_writer_busy_seconds_total":
			dst = &w.busySeconds
		default:
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return writersSample{}, false
		}
		*dst = v
		found++
	}
	return w, sc.Err() == nil && found == 4 && w.writers > 0
}

// writersLine says how busy the gate's writers were between two samples
// taken elapsed apart: near 100%, the store's writers were the ceiling of
// the run.
func writersLine(before, after writersSample, elapsed time.Duration) string {
	batches := after.batches - before.batches
	busy := (after.busySeconds - before.busySeconds) / after.writers / elapsed.Seconds()
	return fmt.Sprintf("store writers %.0f: busy %.0f%% of the run, %.0f batches of %.1f updates",
		after.writers, 100*busy, batches, (after.updates-before.updates)/max(batches, 1))
}
