package main

import (
	"strings"
	"testing"
)

// startGateOnStore starts `gate serve` on a fresh SQLite data folder or a
// fresh PostgreSQL schema.
func startGateOnStore(t *testing.T, driver string) *gateProc {
	t.Helper()
	if driver == "postgres" {
		return startGate(t, t.TempDir(), "--db", postgresSchema(t))
	}
	return startGate(t, t.TempDir())
}

// TestE2EIdempotencyKeysPerProducer (issue 37): an idempotency key belongs to
// the principal that queued the task. Another agent of the same tenant that
// names the first one as recipient_ai and reuses its key, over HTTP or MCP,
// is neither handed its task, nor told by a 409 that it exists (its id, the
// field that differs), nor able to take the key first; the producer's own
// repeats keep their answers. On SQLite and PostgreSQL.
func TestE2EIdempotencyKeysPerProducer(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			g := startGateOnStore(t, driver)
			g.putType(t, "idem.work", map[string]any{}, "")
			alice := g.newKey(t, "agent", "agent.alice", "")
			bob := g.newKey(t, "agent", "agent.bob", "")
			enqueue := func(key string, params map[string]any, recipient, idem string) resp {
				t.Helper()
				body := map[string]any{"task_type": "idem.work", "params": params, "idempotency_key": idem}
				if recipient != "" {
					body["recipient_ai"] = recipient
				}
				return call(t, "POST", g.URL+"/v1/tasks", key, body)
			}
			taskOf := func(id string) map[string]any {
				t.Helper()
				r := call(t, "GET", g.URL+"/v1/tasks/"+id, g.Admin, nil)
				want(t, r, 200, "")
				return r.JSON(t)
			}
			secret := map[string]any{"repo": "alice-private", "token_hint": "x1"}

			r := enqueue(alice, secret, "", "nightly")
			want(t, r, 201, "")
			aliceTask := r.JSON(t)["task_id"].(string)

			// The same params under alice's key, naming alice: bob's own task.
			r = enqueue(bob, secret, "agent.alice", "nightly")
			want(t, r, 201, "")
			bobTask, _ := r.JSON(t)["task_id"].(string)
			if bobTask == aliceTask || r.JSON(t)["is_duplicate"] != false {
				t.Fatalf("bob reusing alice's key with her params was answered %s", r.Body)
			}
			if tk := taskOf(bobTask); tk["created_by"] != "agent.bob" || tk["recipient_ai"] != "agent.alice" {
				t.Fatalf("bob's task: %v", tk)
			}
			// Guessed params: a conflict with bob's own task at most, never
			// a word about alice's.
			r = enqueue(bob, map[string]any{"repo": "guess"}, "agent.alice", "nightly")
			want(t, r, 409, "idempotency_conflict")
			if strings.Contains(string(r.Body), aliceTask) || !strings.Contains(string(r.Body), bobTask) {
				t.Fatalf("bob's conflict names %s; want his task %s and never alice's %s", r.Body, bobTask, aliceTask)
			}
			// Squatting: bob takes a key for alice first; alice's enqueue
			// under it is her own task.
			r = enqueue(bob, map[string]any{"repo": "bob-wants-this"}, "agent.alice", "deploy")
			want(t, r, 201, "")
			squat := r.JSON(t)["task_id"].(string)
			r = enqueue(alice, map[string]any{"repo": "alice-deploy"}, "", "deploy")
			want(t, r, 201, "")
			mine := r.JSON(t)["task_id"].(string)
			if tk := taskOf(mine); mine == squat || tk["created_by"] != "agent.alice" || tk["params"].(map[string]any)["repo"] != "alice-deploy" {
				t.Fatalf("alice's enqueue under a key bob took first: %v", tk)
			}
			// An admin of the tenant produces under its own principal.
			r = enqueue(g.Admin, secret, "agent.alice", "nightly")
			want(t, r, 201, "")
			if id := r.JSON(t)["task_id"]; id == aliceTask || id == bobTask {
				t.Fatalf("the admin's enqueue under alice's key was handed %v", id)
			}
			// Over MCP (the stdio bridge to the gate's MCP door) bob is bob.
			bridge := stdioClient(t, "mcp", "--url", g.URL, "--key", bob)
			ack, isErr := callTool(t, bridge, "queue_task", map[string]any{"task_type": "idem.work", "params": secret,
				"recipient_ai": "agent.alice", "idempotency_key": "nightly"})
			if isErr || ack["task_id"] != bobTask || ack["is_duplicate"] != true {
				t.Fatalf("bob's queue_task under alice's key over MCP: %v; want his own task %s as the duplicate", ack, bobTask)
			}
			// Alice's repeats keep their answers.
			r = enqueue(alice, map[string]any{"token_hint": "x1", "repo": "alice-private"}, "", "nightly")
			want(t, r, 200, "")
			if r.JSON(t)["task_id"] != aliceTask || r.JSON(t)["is_duplicate"] != true {
				t.Fatalf("alice's repeat: %s, want the duplicate %s", r.Body, aliceTask)
			}
			r = enqueue(alice, map[string]any{"repo": "other"}, "", "nightly")
			want(t, r, 409, "idempotency_conflict")
			if d := r.JSON(t)["detail"].(string); !strings.Contains(d, aliceTask) || !strings.Contains(d, "params") {
				t.Fatalf("alice's conflicting repeat: %s", d)
			}
		})
	}
}
