package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const defaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// postgresSchema returns the URL of a fresh schema on the test PostgreSQL
// server, dropped when the test ends. Without a server the test skips, except
// under CI, where it fails.
func postgresSchema(t *testing.T) string {
	t.Helper()
	base := os.Getenv("ASYNCGATE_TEST_POSTGRES")
	if base == "" {
		base = defaultPostgresURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL at %s is unreachable (CI is set, so this fails): %v", base, err)
		}
		t.Skipf("PostgreSQL at %s is unreachable; run scripts/ensure-postgres.sh: %v", base, err)
	}
	defer conn.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "ag_e2e_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, base); err == nil {
			_, _ = c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			c.Close(ctx)
		}
	})
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "search_path=" + schema
}

// TestE2EMultiHostPostgres runs three `gate serve` processes on one
// PostgreSQL database with workers spread across them, SIGKILLs one host (and
// the workers that talk to it) mid-run, and checks that every task completes
// exactly once, no task is leased while an earlier lease of it is live (by the
// gates' clock), every refused completion is a lease that expired, the
// abandoned leases expire and are leased again through the surviving hosts,
// and the ledger verifies.
func TestE2EMultiHostPostgres(t *testing.T) {
	t.Parallel()
	db := postgresSchema(t)
	results := t.TempDir() // the hosts of one database share one results folder
	gates := []*gateProc{startGate(t, t.TempDir(), "--db", db, "--results-dir", results)}
	admin := gates[0].Admin
	for i := 0; i < 2; i++ {
		// One database, one set of keys: the first host made the admin key.
		dir := t.TempDir()
		if err := os.WriteFile(dir+"/admin.key", []byte(admin+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		gates = append(gates, startGate(t, dir, "--db", db, "--results-dir", results))
	}
	gates[0].putType(t, "mh", map[string]any{"lease_seconds": 3, "requeue_delay_seconds": 0}, "")
	agent := gates[0].newKey(t, "agent", "agent.mh", "")
	const tasks, workers = 600, 6
	keys := make([]string, workers)
	for i := range keys {
		keys[i] = gates[0].newKey(t, "worker", fmt.Sprintf("mh.%d", i), "")
	}

	// Producers spread over the three hosts queue everything first.
	ids := make(chan string, tasks)
	var pwg sync.WaitGroup
	for p := 0; p < 6; p++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := p; i < tasks; i += 6 {
				g := gates[i%3]
				r, err := tryCall("POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "mh", "params": map[string]any{"i": i}})
				if err != nil || r.Status != 201 {
					t.Errorf("enqueue via %s: %v %d %s", g.URL, err, r.Status, r.Body)
					return
				}
				var ack struct {
					TaskID string `json:"task_id"`
				}
				_ = json.Unmarshal(r.Body, &ack)
				ids <- ack.TaskID
			}
		}()
	}
	pwg.Wait()
	close(ids)
	var idList []string
	for id := range ids {
		idList = append(idList, id)
	}
	enqueuedAt := time.Now()

	var mu sync.Mutex
	offersOf := map[string][]offer{} // task id -> offers the workers saw
	nLeases := 0
	completed := map[string]int{}  // task id -> first-time completions
	abandoned := map[string]bool{} // tasks whose lease died with host 2
	lost := map[string]int{}       // task id -> completions refused with 409 lease_expired
	var done atomic.Int64
	stop := make(chan struct{})
	var wwg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wwg.Add(1)
		worker := fmt.Sprintf("mh.%d", w)
		g := gates[w%3]
		go func() {
			defer wwg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := tryCall("POST", g.URL+"/v1/leases", keys[w], map[string]any{"worker_id": worker, "task_types": []string{"mh"}, "max_tasks": 10, "wait_seconds": 1})
				if err != nil {
					if g == gates[2] {
						return // this worker died with its host
					}
					t.Errorf("lease via %s: %v", g.URL, err)
					return
				}
				if r.Status == 204 {
					continue
				}
				var out struct {
					Leases []offer `json:"leases"`
				}
				if err := json.Unmarshal(r.Body, &out); err != nil || r.Status != 200 {
					t.Errorf("lease answer %d %s", r.Status, r.Body)
					return
				}
				mu.Lock()
				for _, o := range out.Leases {
					offersOf[o.Task.ID] = append(offersOf[o.Task.ID], o)
					nLeases++
				}
				mu.Unlock()
				for _, o := range out.Leases {
					if _, err := tryCall("POST", g.URL+"/v1/leases/"+o.LeaseID+"/accept", keys[w], map[string]any{}); err != nil {
						mu.Lock()
						abandoned[o.Task.ID] = true
						mu.Unlock()
						continue
					}
					c, err := tryCall("POST", g.URL+"/v1/leases/"+o.LeaseID+"/complete", keys[w], map[string]any{"result_pointer": "inline:b2s=", "summary": "ok"})
					if err != nil {
						mu.Lock()
						abandoned[o.Task.ID] = true
						mu.Unlock()
						continue
					}
					if c.Status == 409 {
						// The only refusal a live worker may see: its 3 s lease
						// expired under load before it completed. Any other 409
						// is a failure; each one is checked against the task's
						// expiry count below.
						var eb struct {
							Error string `json:"error"`
						}
						if err := json.Unmarshal(c.Body, &eb); err != nil || eb.Error != "lease_expired" {
							t.Errorf("complete %s: 409 that is not lease_expired: %s", o.LeaseID, c.Body)
						}
						mu.Lock()
						lost[o.Task.ID]++
						mu.Unlock()
						continue
					}
					var cr struct {
						Duplicate bool `json:"duplicate"`
					}
					_ = json.Unmarshal(c.Body, &cr)
					if c.Status != 200 || cr.Duplicate {
						t.Errorf("complete %s: %d %s", o.LeaseID, c.Status, c.Body)
						continue
					}
					mu.Lock()
					completed[o.Task.ID]++
					mu.Unlock()
					done.Add(1)
				}
			}
		}()
	}

	// Kill host 2 (and so its workers) a third of the way through.
	if !waitUntil(3*time.Minute, func() bool { return done.Load() >= tasks/3 }) {
		close(stop)
		wwg.Wait()
		t.Fatalf("before the kill: %d of %d tasks completed after 3 minutes, want %d", done.Load(), tasks, tasks/3)
	}
	if err := gates[2].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// A completion that host 2 committed just before it died never reached
	// its worker: such a task is succeeded with no completion counted here.
	// Done is every task completed once through a worker, or succeeded after
	// its worker lost the answer with host 2.
	statusOf := func(id string) string {
		r, err := tryCall("GET", gates[0].URL+"/v1/tasks/"+id, admin, nil)
		if err != nil || r.Status != 200 {
			return ""
		}
		var tk struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal(r.Body, &tk)
		return tk.Status
	}
	var missing []string
	finished := waitUntil(4*time.Minute, func() bool {
		if done.Load() >= tasks {
			return true
		}
		mu.Lock()
		missing = missing[:0]
		unexplained := false
		for _, id := range idList {
			if completed[id] == 0 {
				missing = append(missing, id)
				unexplained = unexplained || !abandoned[id]
			}
		}
		mu.Unlock()
		if unexplained || len(missing) > workers*10 {
			return false
		}
		for _, id := range missing {
			if statusOf(id) != "succeeded" {
				return false
			}
		}
		return true
	})
	close(stop)
	wwg.Wait()
	if !finished {
		t.Fatalf("%d of %d tasks completed after 4 minutes; not completed: %v", done.Load(), tasks, missing)
	}
	all := 0
	lostTotal, expiredTotal := 0, 0
	for _, id := range idList {
		all++
		r := call(t, "GET", gates[0].URL+"/v1/tasks/"+id, admin, nil)
		var tk struct {
			Status        string `json:"status"`
			LeaseExpiries int    `json:"lease_expiries"`
			LeaseCount    int    `json:"lease_count"`
		}
		r.Into(t, &tk)
		answerLost := completed[id] == 0 && abandoned[id] && tk.Status == "succeeded"
		if completed[id] != 1 && !answerLost {
			t.Errorf("task %s completed %d times", id, completed[id])
		}
		// Only the last lease completed; every earlier one expired.
		if tk.Status != "succeeded" || tk.LeaseCount != tk.LeaseExpiries+1 {
			t.Errorf("task %s: %+v, want succeeded with lease_count == lease_expiries + 1", id, tk)
		}
		if lost[id] > tk.LeaseExpiries {
			t.Errorf("task %s: %d completions refused as lease_expired but only %d expiries", id, lost[id], tk.LeaseExpiries)
		}
		if seen := len(offersOf[id]); seen > tk.LeaseCount || seen == 0 {
			t.Errorf("task %s: workers saw %d offers, the gate counted %d leases", id, seen, tk.LeaseCount)
		}
		checkLeaseWindows(t, id, offersOf[id])
		lostTotal += lost[id]
		expiredTotal += tk.LeaseExpiries
	}
	if all != tasks {
		t.Fatalf("%d tasks acknowledged, want %d", all, tasks)
	}
	// Tasks whose leases died with host 2 expired and were leased again.
	reLeased := 0
	for id := range abandoned {
		r := call(t, "GET", gates[0].URL+"/v1/tasks/"+id, admin, nil)
		var tk struct {
			Status        string `json:"status"`
			LeaseExpiries int    `json:"lease_expiries"`
			LeaseCount    int    `json:"lease_count"`
		}
		r.Into(t, &tk)
		answerLost := completed[id] == 0 && tk.Status == "succeeded"
		if tk.Status != "succeeded" || !answerLost && (tk.LeaseCount < 2 || tk.LeaseExpiries < 1) {
			t.Errorf("abandoned task %s: %+v", id, tk)
		}
		reLeased++
	}
	out, errOut, code := gateCLI(t, "ledger", "verify", "--db", db)
	if code != 0 {
		t.Fatalf("ledger verify: %d %s %s", code, out, errOut)
	}
	t.Logf("multi-host: %d tasks in %v after queueing, %d leases, %d abandoned with the killed host and re-leased, %d completions refused as expired, %d expiries",
		tasks, time.Since(enqueuedAt).Round(time.Millisecond), nLeases, reLeased, lostTotal, expiredTotal)
}

// checkLeaseWindows checks, by the gates' clock, that no lease of a task was
// granted while an earlier one was live. Every lease but a task's last one
// expired (checked beside it) and nobody heartbeats, so an earlier lease was
// live from its grant (server_time) until its lease_expires_at.
func checkLeaseWindows(t *testing.T, taskID string, offers []offer) {
	t.Helper()
	sorted := append([]offer(nil), offers...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ServerTime.Before(sorted[j].ServerTime) })
	for i := 1; i < len(sorted); i++ {
		prev, cur := sorted[i-1], sorted[i]
		if cur.ServerTime.Before(prev.LeaseExpiresAt) {
			t.Errorf("task %s: lease %s granted at %v while lease %s (granted %v) was live until %v",
				taskID, cur.LeaseID, cur.ServerTime, prev.LeaseID, prev.ServerTime, prev.LeaseExpiresAt)
		}
	}
}

// waitUntil polls cond until it holds or d has passed, and reports whether it held.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
