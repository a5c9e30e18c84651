package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestE2EDeadHostsWaiterLapses: an acquire parked on a held resource is a
// registered waiter that younger conflicting requests queue behind. When
// the host it waits on is SIGKILLed, its registration must stop blocking
// them soon (it lasts acquireWaiterTTL, 5 s, unless renewed), not for the
// rest of its 30 s wait; and a live waiter must keep its place for as long
// as it waits, past that TTL. On PostgreSQL the waiter's host dies and
// another host serves on; on SQLite the one host is killed and restarted
// on its folder.
func TestE2EDeadHostsWaiterLapses(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			// The hosts of one database share one results folder.
			args := append(sc.args(t), "--results-dir", t.TempDir())
			dir := t.TempDir()
			serving := startGate(t, dir, args...)
			waitHost := serving
			if sc.name == "postgres" {
				dir2 := t.TempDir()
				if err := os.WriteFile(dir2+"/admin.key", []byte(serving.Admin+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				waitHost = startGate(t, dir2, args...)
			}
			x := serving.newKey(t, "agent", "agent.x", "")
			y := serving.newKey(t, "agent", "agent.y", "")
			z := serving.newKey(t, "agent", "agent.z", "")
			const res = "FILE:/repo/waiter.go"
			intent := func(p string) []any { return []any{map[string]any{"resource": res, "predicate": p}} }
			var held struct {
				Leases []struct {
					ID string `json:"lease_id"`
				} `json:"leases"`
			}
			xr := call(t, "POST", serving.URL+"/v1/resource-leases", x, map[string]any{"intents": intent("READS"), "ttl_ms": 120000})
			want(t, xr, 201, "")
			xr.Into(t, &held)

			// y waits to write; z's read, which x's read would not stop,
			// queues behind y once y is registered.
			ydone := make(chan resp, 1)
			park := func(g *gateProc) {
				go func() {
					// Older than x's read (wait-die: an older request waits
					// for a younger holder, a younger one is refused).
					prio := time.Now().UTC().Add(-20 * time.Second).Format(time.RFC3339Nano)
					r, _ := tryCall("POST", g.URL+"/v1/resource-leases", y, map[string]any{"intents": intent("MUTATES"), "wait_seconds": 30, "priority_at": prio})
					ydone <- r
				}()
			}
			// zRefusedBehindY tries z's read once: true when refused behind
			// y's registration; a grant (y not registered yet, or lapsed)
			// is released at once.
			zRefusedBehindY := func(g *gateProc) bool {
				r, err := tryCall("POST", g.URL+"/v1/resource-leases", z, map[string]any{"intents": intent("READS")})
				if err != nil {
					return false // a host restarting
				}
				switch r.Status {
				case 409:
					if !strings.Contains(string(r.Body), "holder agent.y waits for") {
						t.Fatalf("z refused, but not behind y: %s", r.Body)
					}
					return true
				case 201:
					var m struct {
						Leases []struct {
							ID string `json:"lease_id"`
						} `json:"leases"`
					}
					r.Into(t, &m)
					want(t, call(t, "POST", g.URL+"/v1/resource-leases/release", z, map[string]any{"lease_ids": []string{m.Leases[0].ID}}), 200, "")
					return false
				}
				t.Fatalf("z's acquire: %d %s", r.Status, r.Body)
				return false
			}

			park(waitHost)
			if !waitUntil(20*time.Second, func() bool { return zRefusedBehindY(serving) }) {
				t.Fatal("y's waiting acquire never blocked z's younger read")
			}
			killed := time.Now()
			if err := waitHost.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-waitHost.done
			<-ydone
			up := killed // when a host serves again
			if sc.name == "sqlite" {
				serving = startGateLoading(t, dir, args...) // resource leases need no plugin
				up = time.Now()
			}
			if !waitUntil(25*time.Second, func() bool { return !zRefusedBehindY(serving) }) {
				t.Fatal("a waiter whose host died still blocks z 25 s after the kill")
			}
			// Before the registration was renewed, it lasted the whole wait
			// (30 s) and 2 s more.
			if d := time.Since(up); d > 10*time.Second {
				t.Errorf("a waiter whose host died blocked z for %s after the kill (%s after a host served again); its registration lasts 5 s unless renewed",
					time.Since(killed).Round(time.Millisecond), d.Round(time.Millisecond))
			}

			// A live waiter keeps its place past the TTL: z is refused
			// behind it through three TTLs of its wait.
			park(serving)
			if !waitUntil(20*time.Second, func() bool { return zRefusedBehindY(serving) }) {
				t.Fatal("y's second waiting acquire never blocked z")
			}
			for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
				if !zRefusedBehindY(serving) {
					t.Fatal("a live waiter's registration lapsed while it waited")
				}
			}
			select {
			case r := <-ydone:
				t.Fatalf("y's wait ended early: %d %s", r.Status, r.Body)
			default:
			}
			// x releases: y gets its write.
			want(t, call(t, "POST", serving.URL+"/v1/resource-leases/release", x, map[string]any{"lease_ids": []string{held.Leases[0].ID}}), 200, "")
			select {
			case r := <-ydone:
				want(t, r, 201, "")
			case <-time.After(20 * time.Second):
				t.Fatal("y was not granted after x released")
			}
		})
	}
}
