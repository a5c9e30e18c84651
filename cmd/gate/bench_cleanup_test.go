package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchLeavesAGateInUseAsItWas: gate bench --url loads a gate somebody
// uses, so it must not replace a task type of theirs (one called "bench"
// included) nor leave keys or a type of its own behind.
func TestBenchLeavesAGateInUseAsItWas(t *testing.T) {
	url, admin := benchTarget(t, filepath.Join(t.TempDir(), "cache"))
	c := newBenchClient(url, 4)
	theirs := `{"lease_seconds":77,"description":"the users' own bench type"}`
	if _, err := c.do("PUT", "/v1/admin/task-types/bench", admin, []byte(theirs), nil); err != nil {
		t.Fatal(err)
	}
	type key struct {
		ID        string     `json:"key_id"`
		Principal string     `json:"principal"`
		RevokedAt *time.Time `json:"revoked_at"`
	}
	var before struct{ Keys []key }
	if _, err := c.do("GET", "/v1/admin/keys", admin, nil, &before); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	o := benchOpts{url: url, key: admin, producers: 2, workers: 2, batch: 8, completeWorkers: 2, wait: 1, tasks: 40}
	if err := bench(o, &out, io.Discard); err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "completed 40") {
		t.Fatalf("bench did not complete its 40 tasks:\n%s", out.String())
	}

	var tt struct {
		LeaseSeconds int    `json:"lease_seconds"`
		Description  string `json:"description"`
	}
	if _, err := c.do("GET", "/v1/admin/task-types/bench", admin, nil, &tt); err != nil {
		t.Fatal(err)
	}
	if tt.LeaseSeconds != 77 || tt.Description != "the users' own bench type" {
		t.Fatalf("the users' bench type after a run: %+v", tt)
	}
	var types struct {
		TaskTypes []struct {
			Name string `json:"task_type"`
		} `json:"task_types"`
	}
	if _, err := c.do("GET", "/v1/admin/task-types", admin, nil, &types); err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, ty := range types.TaskTypes {
		listed = listed || ty.Name == "bench"
		if ty.Name != "bench" && strings.HasPrefix(ty.Name, "bench") {
			t.Errorf("the run left its task type %s", ty.Name)
		}
	}
	if !listed {
		t.Fatalf("the users' bench type is not listed: %+v", types.TaskTypes)
	}
	var after struct{ Keys []key }
	if _, err := c.do("GET", "/v1/admin/keys", admin, nil, &after); err != nil {
		t.Fatal(err)
	}
	old := map[string]bool{}
	for _, k := range before.Keys {
		old[k.ID] = true
	}
	made := 0
	for _, k := range after.Keys {
		if old[k.ID] {
			continue
		}
		made++
		if k.RevokedAt == nil {
			t.Errorf("the run left key %s (%s) active", k.ID, k.Principal)
		}
	}
	if made != 3 {
		t.Fatalf("the run made %d keys, want 3 (an agent's and two workers')", made)
	}
}
