package worker

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzSpoolLoad feeds arbitrary spool files (a crash may cut a write short,
// a disk may hand back garbage) to the loader. It must never panic; every
// entry it returns is a complete or fail outcome with a lease id, and
// removing them all leaves nothing behind that loads as an entry.
func FuzzSpoolLoad(f *testing.F) {
	for _, s := range []string{
		`{"kind":"complete","lease_id":"L-1","task_id":"T-1","body":{"result_pointer":"inline:aGk="},"spooled_at":"2026-01-01T00:00:00Z"}` + "\n",
		`{"kind":"fail","lease_id":"L-2","task_id":"T-2","body":{}}` + "\n" + `{"kind":"complete","lease_id":"L-3","task_` + "\n",
		`{"kind":"other","lease_id":"L-4"}` + "\n\n   \n",
		`{"kind":"fail","lease_id":""}`,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, raw []byte) {
		path := filepath.Join(dir, "spool.jsonl")
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		s := &spool{path: path}
		entries, bad, err := s.load()
		if err != nil {
			return // a line longer than the scanner allows: reported, not a panic
		}
		if bad < 0 {
			t.Fatalf("bad = %d", bad)
		}
		done := map[string]bool{}
		for _, e := range entries {
			if e.LeaseID == "" || (e.Kind != "complete" && e.Kind != "fail") {
				t.Fatalf("loaded an invalid entry %+v", e)
			}
			done[e.key()] = true
		}
		if err := s.remove(done); err != nil {
			t.Fatalf("remove: %v", err)
		}
		left, _, err := s.load()
		if err != nil || len(left) != 0 {
			t.Fatalf("after removing every loaded entry: %d left, %v", len(left), err)
		}
	})
}
