package httpapi

import (
	"encoding/json"
	"net/url"
	"testing"
	"time"
)

// TestResourceHoldersWait: GET /v1/resource-leases with wait_seconds waits,
// taking nothing, until nothing in the way of the predicate holds the
// resource, and answers what is still in the way when the wait runs out; bad
// waits and predicates are 400 with a code.
func TestResourceHoldersWait(t *testing.T) {
	b := setup(t)
	code, body := b.do(t, "POST", "/v1/resource-leases", b.agent, `{"intents":[{"resource":"file:/w/a.go","predicate":"MUTATES"}],"ttl_ms":30000}`)
	if code != 201 {
		t.Fatalf("acquire: %d %v", code, body)
	}
	id := body["leases"].([]any)[0].(map[string]any)["lease_id"].(string)
	q := "/v1/resource-leases?resource=" + url.QueryEscape("FILE:/w/a.go")
	code, body = b.do(t, "GET", q+"&wait_seconds=0.05&predicate=READS", b.worker, ``)
	if code != 200 || len(body["leases"].([]any)) != 1 || body["server_time"] == nil {
		t.Fatalf("a wait that ran out: %d %v", code, body)
	}
	type out struct {
		code int
		body map[string]any
		at   time.Time
	}
	done := make(chan out, 1)
	go func() {
		code, raw := b.raw(t, "GET", q+"&wait_seconds=20", b.worker, ``)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		done <- out{code, m, time.Now()}
	}()
	if code, body := b.do(t, "POST", "/v1/resource-leases/"+id+"/release", b.agent, `{}`); code != 200 {
		t.Fatalf("release: %d %v", code, body)
	}
	released := time.Now()
	o := <-done
	if ls, _ := o.body["leases"].([]any); o.code != 200 || ls == nil || len(ls) != 0 || o.at.Sub(released) > 5*time.Second {
		t.Fatalf("wait for the release: %d %v, %s after it", o.code, o.body, o.at.Sub(released))
	}
	for _, bad := range []string{"&wait_seconds=-1", "&wait_seconds=x", "&wait_seconds=NaN", "&predicate=OWNS", "&wait_seconds=1&wait_seconds=2", "&bogus=1"} {
		if code, body := b.do(t, "GET", q+bad, b.worker, ``); code != 400 || body["error"] != "bad_request" {
			t.Fatalf("%s: %d %v", bad, code, body)
		}
	}
}
