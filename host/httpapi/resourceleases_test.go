package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestResourceLeasesHTTP walks the resource lease door: acquire, conflict
// with the holder named, heartbeat, verify, release (twice), the admin
// listing and audit trail, metrics, and bad input answered 4xx with a code.
func TestResourceLeasesHTTP(t *testing.T) {
	b := setup(t)
	code, body := b.do(t, "POST", "/v1/resource-leases", b.agent, `{"intents":[{"resource":"file:/repo/a.go","predicate":"MUTATES"},{"resource":"REPO:x","predicate":"READS"}],"ttl_ms":30000}`)
	if code != 201 || body["server_time"] == nil || body["manifest_id"] == nil {
		t.Fatalf("acquire: %d %v", code, body)
	}
	leases := body["leases"].([]any)
	first := leases[0].(map[string]any)
	if len(leases) != 2 || first["resource"] != "FILE:/repo/a.go" || first["holder"] != "agent.a" || first["ttl_ms"] != float64(30000) || first["state"] != "active" {
		t.Fatalf("leases: %v", leases)
	}
	id := first["lease_id"].(string)
	// Another holder: refused at once (younger), the holder's lease named.
	code, body = b.do(t, "POST", "/v1/resource-leases", b.worker, `{"intents":[{"resource":"FILE:/repo/a.go","predicate":"READS"}]}`)
	conflict, _ := body["conflict"].(map[string]any)
	if code != 409 || body["error"] != "resource_conflict" || conflict["lease_id"] != id || body["wait_die"] != "die" ||
		!strings.Contains(body["detail"].(string), id) || body["server_time"] == nil {
		t.Fatalf("conflict: %d %v", code, body)
	}
	// Older than the holder: told it may wait; waiting a little, refused when the wait ends.
	code, body = b.do(t, "POST", "/v1/resource-leases", b.worker, `{"intents":[{"resource":"FILE:/repo/a.go","predicate":"READS"}],"priority_at":"2020-01-01T00:00:00Z","wait_seconds":0.05}`)
	if code != 409 || body["wait_die"] != "wait" || !strings.Contains(body["detail"].(string), "waited") {
		t.Fatalf("older conflict: %d %v", code, body)
	}
	code, body = b.do(t, "POST", "/v1/resource-leases/"+id+"/heartbeat", b.agent, `{}`)
	if code != 200 || body["server_time"] == nil {
		t.Fatalf("heartbeat: %d %v", code, body)
	}
	code, body = b.do(t, "POST", "/v1/resource-leases/heartbeat", b.worker, `{"lease_ids":["`+id+`"]}`)
	if code != 403 || body["error"] != "forbidden" {
		t.Fatalf("heartbeat by another holder: %d %v", code, body)
	}
	code, body = b.do(t, "POST", "/v1/resource-leases/verify", b.agent, `{}`)
	if code != 200 || len(body["leases"].([]any)) != 2 {
		t.Fatalf("verify: %d %v", code, body)
	}
	code, body = b.do(t, "POST", "/v1/resource-leases/verify", b.worker, `{"lease_ids":["`+id+`"]}`)
	if code != 200 || body["leases"].([]any)[0].(map[string]any)["state"] != "active" {
		t.Fatalf("verify by another holder of the tenant: %d %v", code, body)
	}
	code, body = b.do(t, "GET", "/v1/admin/resource-leases?state=held&resource=file:/repo/a.go", b.admin, ``)
	if code != 200 || len(body["leases"].([]any)) != 1 {
		t.Fatalf("admin listing: %d %v", code, body)
	}
	metrics := b.scrape(t)
	for _, want := range []string{`asyncgate_resource_leases_held{predicate="MUTATES"} 1`, `asyncgate_resource_leases_held{predicate="READS"} 1`,
		`asyncgate_resource_leases_granted_total{predicate="MUTATES",tenant="default"} 1`,
		`asyncgate_resource_leases_refused_total{reason="resource_conflict",tenant="default"} 2`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for i := 0; i < 2; i++ {
		code, body = b.do(t, "POST", "/v1/resource-leases/release", b.agent, `{"lease_ids":["`+id+`"]}`)
		if code != 200 || body["leases"].([]any)[0].(map[string]any)["state"] != "released" {
			t.Fatalf("release #%d: %d %v", i+1, code, body)
		}
	}
	code, body = b.do(t, "POST", "/v1/resource-leases/"+id+"/heartbeat", b.agent, ``)
	if code != 409 || body["error"] != "lease_expired" {
		t.Fatalf("heartbeat after release: %d %v", code, body)
	}
	code, body = b.do(t, "GET", "/v1/admin/resource-leases/events?lease_id="+id, b.admin, ``)
	if code != 200 {
		t.Fatalf("audit: %d %v", code, body)
	}
	var kinds []string
	for _, e := range body["events"].([]any) {
		kinds = append(kinds, e.(map[string]any)["kind"].(string))
	}
	if strings.Join(kinds, ",") != "granted,heartbeat,released" {
		t.Fatalf("audit trail = %v", kinds)
	}
	if code, _ = b.do(t, "GET", "/v1/admin/resource-leases", b.agent, ``); code != 403 {
		t.Fatalf("admin listing with an agent key: %d", code)
	}
	// DIE_RESTART, then heartbeats wait for VERIFY_ALL.
	_, body = b.do(t, "POST", "/v1/resource-leases", b.agent, `{"intents":[{"resource":"R:1","predicate":"MUTATES"}]}`)
	id2 := body["leases"].([]any)[0].(map[string]any)["lease_id"].(string)
	code, body = b.do(t, "POST", "/v1/resource-leases/die-restart", b.agent, ``)
	if code != 200 || len(body["leases"].([]any)) != 2 {
		t.Fatalf("die-restart: %d %v", code, body) // R:1 and the REPO:x lease still held
	}
	if code, body = b.do(t, "POST", "/v1/resource-leases/"+id2+"/heartbeat", b.agent, ``); code != 409 || body["error"] != "verify_required" {
		t.Fatalf("heartbeat in DIE_RESTART: %d %v", code, body)
	}
	b.do(t, "POST", "/v1/resource-leases/verify", b.agent, `{"lease_ids":["`+id2+`"]}`)
	if code, body = b.do(t, "POST", "/v1/resource-leases/"+id2+"/heartbeat", b.agent, ``); code != 200 {
		t.Fatalf("heartbeat after verify: %d %v", code, body)
	}

	for _, bad := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/v1/resource-leases", `{"intents":[{"resource":"","predicate":"READS"}]}`, 400, "invalid_resource"},
		{"/v1/resource-leases", `{"intents":[{"resource":"` + strings.Repeat("x", 600) + `","predicate":"READS"}]}`, 400, "invalid_resource"},
		{"/v1/resource-leases", `{"intents":[{"resource":"a","predicate":"OWNS"}]}`, 400, "bad_request"},
		{"/v1/resource-leases", `{"intents":[]}`, 400, "bad_request"},
		{"/v1/resource-leases", `{"intents":[{"resource":"a","predicate":"READS"}],"ttl_ms":-1}`, 400, "bad_request"},
		{"/v1/resource-leases", `{"intents":[{"resource":"a","predicate":"READS"}],"wait_seconds":-1}`, 400, "bad_request"},
		{"/v1/resource-leases", `{"intents":[{"resource":"a","predicate":"READS"}],"priority_at":"yesterday"}`, 400, "bad_request"},
		{"/v1/resource-leases", `{"intents":[{"resource":"a","predicate":"READS"}],"holder":"someone.else"}`, 403, "forbidden"},
		{"/v1/resource-leases", `{"nope":1}`, 400, "bad_request"},
		{"/v1/resource-leases", `[1]`, 400, "bad_request"},
		{"/v1/resource-leases/heartbeat", `{}`, 400, "bad_request"},
		{"/v1/resource-leases/heartbeat", `{"lease_ids":[""]}`, 400, "bad_request"},
		{"/v1/resource-leases/release", `{"lease_ids":["rlease-x",""]}`, 400, "bad_request"},
		{"/v1/resource-leases/verify", `{"lease_ids":[""]}`, 400, "bad_request"},
		{"/v1/resource-leases/heartbeat", `{"lease_ids":["rlease-x"]}`, 404, "not_found"},
		{"/v1/resource-leases/release", `{"lease_ids":["rlease-x"]}`, 404, "not_found"},
		{"/v1/resource-leases/verify", `{"lease_ids":["a"],"holder":"b"}`, 400, "bad_request"},
		{"/v1/resource-leases/verify", `{"holder":"b"}`, 403, "forbidden"},
		{"/v1/resource-leases/" + id + "/release", `{"lease_ids":["x"]}`, 400, "bad_request"},
	} {
		code, body := b.do(t, "POST", bad.path, b.agent, bad.body)
		if code != bad.status || body["error"] != bad.code || body["detail"] == "" {
			t.Errorf("POST %s %s: %d %v, want %d %s", bad.path, bad.body, code, body, bad.status, bad.code)
		}
	}
}

// scrape returns /metrics as the gate's operator sees it.
func (b *testBundle) scrape(t testing.TB) string {
	t.Helper()
	_, raw := b.raw(t, "GET", "/metrics", b.admin, "")
	return string(raw)
}

// BenchmarkResourceLeasesHTTP measures uncontended acquire+release pairs
// over HTTP (httptest server, SQLite store, one resource per holder) and
// reports pairs/s and the p99 acquire latency.
func BenchmarkResourceLeasesHTTP(b *testing.B) {
	tb := setup(b)
	client := tb.ts.Client()
	post := func(path, body string) (int, []byte) {
		req, _ := http.NewRequest("POST", tb.ts.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tb.agent)
		res, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode, raw
	}
	var lat []time.Duration
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		code, raw := post("/v1/resource-leases", fmt.Sprintf(`{"intents":[{"resource":"B:%d","predicate":"MUTATES"}]}`, i))
		lat = append(lat, time.Since(t0))
		if code != 201 {
			b.Fatalf("acquire: %d %s", code, raw)
		}
		id := string(raw[strings.Index(string(raw), `"lease_id":"`)+12:])
		id = id[:strings.IndexByte(id, '"')]
		if code, raw := post("/v1/resource-leases/"+id+"/release", ``); code != 200 {
			b.Fatalf("release: %d %s", code, raw)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(b.N)/el.Seconds(), "pairs/s")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_acquire_ms")
}

// FuzzResourceLeaseRoutes sends arbitrary bodies to the resource lease
// routes: never a 5xx, every error answer JSON.
func FuzzResourceLeaseRoutes(f *testing.F) {
	b := setup(f)
	routes := []string{"/v1/resource-leases", "/v1/resource-leases/heartbeat", "/v1/resource-leases/release",
		"/v1/resource-leases/verify", "/v1/resource-leases/die-restart", "/v1/resource-leases/rlease-X/heartbeat", "/v1/resource-leases/rlease-X/release"}
	for _, s := range []string{`{}`, `{"intents":[{"resource":"FILE:/a","predicate":"MUTATES"}],"ttl_ms":1000}`,
		`{"intents":[{"resource":"a","predicate":"READS"}],"priority_at":"2020-01-01T00:00:00Z","wait_seconds":0.01}`,
		`{"lease_ids":["rlease-X"],"ttl_ms":5}`, `{"holder":"agent.a"}`} {
		for i := range routes {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		path := routes[int(which)%len(routes)]
		req, _ := http.NewRequest("POST", b.ts.URL+path, strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+b.agent)
		res, err := b.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode >= 500 {
			t.Fatalf("POST %s with %q: %d %s", path, body, res.StatusCode, raw)
		}
		if res.StatusCode >= 400 && !strings.HasPrefix(string(raw), `{"error":`) {
			t.Fatalf("POST %s: error answer is not the error JSON: %q", path, raw)
		}
	})
}

// TestResourceLeasePriorityFloorHTTP: a holder that holds nothing and names
// a priority_at from 1970 is answered the priority it ran with, the server
// time less the longest wait (30 s), and one from the future runs as now.
func TestResourceLeasePriorityFloorHTTP(t *testing.T) {
	b := setup(t)
	ts := func(body map[string]any, k string) time.Time {
		t.Helper()
		v, _ := body[k].(string)
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			t.Fatalf("%s: %v in %v", k, err, body)
		}
		return at
	}
	code, body := b.do(t, "POST", "/v1/resource-leases", b.agent, `{"intents":[{"resource":"FILE:/floor/a","predicate":"MUTATES"}],"priority_at":"1970-01-01T00:00:00Z"}`)
	if code != 201 {
		t.Fatalf("acquire with priority_at 1970: %d %v", code, body)
	}
	st, prio := ts(body, "server_time"), ts(body, "priority_at")
	if prio.Before(st.Add(-30*time.Second-time.Second)) || prio.After(st.Add(-30*time.Second)) {
		t.Fatalf("priority_at 1970 ran with %s, server time %s: want the server time less 30 s", prio, st)
	}
	code, body = b.do(t, "POST", "/v1/resource-leases", b.worker, `{"intents":[{"resource":"FILE:/floor/b","predicate":"MUTATES"}],"priority_at":"2999-01-01T00:00:00Z"}`)
	if code != 201 {
		t.Fatalf("acquire with priority_at 2999: %d %v", code, body)
	}
	if st, prio := ts(body, "server_time"), ts(body, "priority_at"); prio.After(st) || prio.Before(st.Add(-10*time.Second)) {
		t.Fatalf("priority_at 2999 ran with %s, server time %s: want now", prio, st)
	}
}
