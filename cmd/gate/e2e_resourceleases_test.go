package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/postgres"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// TestE2EResourceLeasesMultiHost runs three `gate serve` processes on one
// PostgreSQL database; holders spread over them contend for a few resources
// over HTTP (acquire with and without waits, heartbeats with random pauses,
// releases, walk-aways), and one host is SIGKILLed mid-run. The checker then
// proves from the stored history that no two conflicting leases on one
// resource were honoured at once by server time, and none past its expiry.
func TestE2EResourceLeasesMultiHost(t *testing.T) {
	t.Parallel()
	db := postgresSchema(t)
	results := t.TempDir() // the hosts of one database share one results folder
	gates := []*gateProc{startGate(t, t.TempDir(), "--db", db, "--results-dir", results)}
	for i := 0; i < 2; i++ {
		dir := t.TempDir()
		if err := os.WriteFile(dir+"/admin.key", []byte(gates[0].Admin+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		gates = append(gates, startGate(t, dir, "--db", db, "--results-dir", results))
	}
	const holders, rounds = 9, 25
	keys := make([]string, holders)
	for i := range keys {
		keys[i] = gates[0].newKey(t, "agent", fmt.Sprintf("agent.%d", i), "")
	}
	resources := []string{"FILE:/repo/a.go", "FILE:/repo/b.go", "FILE:/repo/c.go", "FILE:/repo/d.go", "REPO:github.com/x/y"}
	var granted, refused, heartbeats, lost, deadHost atomic.Int64
	var killed atomic.Bool
	var wg sync.WaitGroup
	for h := 0; h < holders; h++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := gates[h%3]
			for r := 0; r < rounds; r++ {
				var intents []map[string]any
				for _, res := range resources {
					if rand.IntN(4) == 0 {
						p := "MUTATES"
						if rand.IntN(3) == 0 {
							p = "READS"
						}
						intents = append(intents, map[string]any{"resource": res, "predicate": p})
					}
				}
				if len(intents) == 0 {
					intents = append(intents, map[string]any{"resource": resources[rand.IntN(len(resources))], "predicate": "MUTATES"})
				}
				ttl := 150 + rand.IntN(250)
				body := map[string]any{"intents": intents, "ttl_ms": ttl}
				if rand.IntN(2) == 0 {
					body["wait_seconds"] = 0.3
					body["priority_at"] = time.Now().UTC().Add(-time.Second).Format(time.RFC3339Nano)
				}
				a, err := tryCall("POST", g.URL+"/v1/resource-leases", keys[h], body)
				if err != nil {
					if g == gates[2] && killed.Load() {
						deadHost.Add(1)
						return // this holder died with its host
					}
					t.Errorf("acquire via %s: %v", g.URL, err)
					return
				}
				if a.Status == 409 {
					refused.Add(1)
					continue
				}
				if a.Status != 201 {
					t.Errorf("acquire: %d %s", a.Status, a.Body)
					return
				}
				granted.Add(1)
				var m struct {
					Leases []struct {
						ID        string    `json:"lease_id"`
						ExpiresAt time.Time `json:"expires_at"`
					} `json:"leases"`
				}
				if err := json.Unmarshal(a.Body, &m); err != nil {
					t.Error(err)
					return
				}
				ids := make([]string, len(m.Leases))
				for i, l := range m.Leases {
					ids[i] = l.ID
				}
				for k := rand.IntN(3); k > 0; k-- {
					time.Sleep(time.Duration(rand.IntN(ttl*3/2)) * time.Millisecond) // a pause, sometimes past the TTL
					hg := gates[rand.IntN(3)]
					hb, err := tryCall("POST", hg.URL+"/v1/resource-leases/heartbeat", keys[h], map[string]any{"lease_ids": ids})
					if err != nil {
						continue // a killed host: the lease runs out
					}
					if hb.Status == 409 {
						lost.Add(1)
						break
					}
					if hb.Status != 200 {
						t.Errorf("heartbeat: %d %s", hb.Status, hb.Body)
						return
					}
					heartbeats.Add(1)
				}
				if rand.IntN(4) == 0 {
					continue // crash: walk away, the leases expire
				}
				if rel, err := tryCall("POST", g.URL+"/v1/resource-leases/release", keys[h], map[string]any{"lease_ids": ids}); err == nil && rel.Status != 200 {
					t.Errorf("release: %d %s", rel.Status, rel.Body)
					return
				}
			}
		}()
	}
	if !waitUntil(3*time.Minute, func() bool { return granted.Load()+refused.Load() >= holders*rounds/3 }) {
		t.Errorf("only %d acquires answered before the kill", granted.Load()+refused.Load())
	}
	killed.Store(true)
	if err := gates[2].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if granted.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("no contention: granted %d, refused %d", granted.Load(), refused.Load())
	}
	t.Logf("granted %d, refused %d, heartbeats %d, lost %d, holders that died with their host %d",
		granted.Load(), refused.Load(), heartbeats.Load(), lost.Load(), deadHost.Load())
	st, err := postgres.Open(context.Background(), db, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	storetest.CheckResourceLeaseHistory(t, st, "default")

	// Each call of the door once more, checked against the OpenAPI document.
	contract(t)
	g := gates[0]
	a := call(t, "POST", g.URL+"/v1/resource-leases", keys[0], map[string]any{"intents": []any{map[string]any{"resource": "FILE:/contract.go", "predicate": "MUTATES"}}})
	var m struct {
		Leases []struct {
			ID string `json:"lease_id"`
		} `json:"leases"`
	}
	want(t, a, 201, "")
	a.Into(t, &m)
	id := m.Leases[0].ID
	want(t, call(t, "POST", g.URL+"/v1/resource-leases", keys[1], map[string]any{"intents": []any{map[string]any{"resource": "FILE:/contract.go", "predicate": "READS"}}}), 409, "resource_conflict")
	want(t, call(t, "POST", g.URL+"/v1/resource-leases/"+id+"/heartbeat", keys[0], map[string]any{}), 200, "")
	want(t, call(t, "POST", g.URL+"/v1/resource-leases/verify", keys[0], map[string]any{}), 200, "")
	want(t, call(t, "POST", g.URL+"/v1/resource-leases/verify", keys[1], map[string]any{"lease_ids": []string{id}}), 200, "")
	want(t, call(t, "GET", g.URL+"/v1/admin/resource-leases?state=held", g.Admin, nil), 200, "")
	want(t, call(t, "GET", g.URL+"/v1/admin/resource-leases/events?lease_id="+id, g.Admin, nil), 200, "")
	want(t, call(t, "POST", g.URL+"/v1/resource-leases/die-restart", keys[0], map[string]any{}), 200, "")
	want(t, call(t, "POST", g.URL+"/v1/resource-leases/heartbeat", keys[0], map[string]any{"lease_ids": []string{id}}), 409, "verify_required")
	want(t, call(t, "POST", g.URL+"/v1/resource-leases/release", keys[0], map[string]any{"lease_ids": []string{id}}), 200, "")
	want(t, call(t, "POST", g.URL+"/v1/resource-leases/"+id+"/release", keys[0], nil), 200, "")
	want(t, call(t, "POST", g.URL+"/v1/resource-leases", keys[0], map[string]any{"intents": []any{map[string]any{"resource": "", "predicate": "READS"}}}), 400, "invalid_resource")
}
