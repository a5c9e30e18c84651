package worker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// spoolEntry is one undeliverable outcome in the spool file (one JSON object
// per line).
type spoolEntry struct {
	Kind      string          `json:"kind"` // "complete" or "fail"
	LeaseID   string          `json:"lease_id"`
	TaskID    string          `json:"task_id"`
	TaskType  string          `json:"task_type,omitempty"`
	Body      json.RawMessage `json:"body"`
	SpooledAt time.Time       `json:"spooled_at"`
}

func (e spoolEntry) key() string { return e.Kind + "\x00" + e.LeaseID }

// spool is the local dead-letter queue of outcomes the gate could not be
// reached for (the "Lease to Receipt flow"). Every append is fsync'd before
// it returns; rewrites go through a temporary file and a rename. A Runner
// holds an exclusive lock on <path>.lock while it runs, so no second process
// (or second Runner) replays, rewrites or drops the same file's entries.
type spool struct {
	path string
	mu   sync.Mutex
	lk   *os.File // the held lock file, nil when not held
}

// ErrSpoolLocked is returned by Run (and FlushSpool) when another process or
// Runner holds the spool: two workers must not share one spool file.
var ErrSpoolLocked = errors.New("worker: the spool is in use by another worker process")

var errLockBusy = errors.New("lock busy")

// lock takes the spool's lock, or fails with ErrSpoolLocked when someone
// else holds it. Locking twice is a no-op.
func (s *spool) lock() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lk != nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	f, err := os.OpenFile(s.path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if err := tryLock(f); err != nil {
		owner, _ := os.ReadFile(s.path + ".lock")
		f.Close()
		if errors.Is(err, errLockBusy) {
			return fmt.Errorf("%w: %s is locked (held by pid %s); give each worker process its own WorkerID or SpoolPath",
				ErrSpoolLocked, s.path, bytes.TrimSpace(owner))
		}
		return fmt.Errorf("spool: lock %s: %w", s.path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
	s.lk = f
	return nil
}

// locked reports whether this spool holds its lock.
func (s *spool) locked() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lk != nil
}

// unlock releases the lock (closing the file releases the flock).
func (s *spool) unlock() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lk != nil {
		s.lk.Close()
		s.lk = nil
	}
}

func (s *spool) add(e spoolEntry) error {
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	_, statErr := os.Stat(s.path)
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	// A line a crash cut short ends the file without its newline: the
	// entry starts a line of its own, or it would be glued to that one
	// and skipped with it.
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			line = append([]byte{'\n'}, line...)
		}
	}
	_, werr := f.Write(append(line, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		syncDir(filepath.Dir(s.path))
	}
	return nil
}

// load reads every entry. Lines that do not parse (a write cut short by a
// crash) are returned as bad and left out.
func (s *spool) load() (entries []spoolEntry, bad int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loadLocked()
}

func (s *spool) loadLocked() ([]spoolEntry, int, error) {
	raw, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("spool: %w", err)
	}
	var out []spoolEntry
	bad := 0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var e spoolEntry
		if json.Unmarshal(line, &e) != nil || e.LeaseID == "" || (e.Kind != "complete" && e.Kind != "fail") {
			bad++
			continue
		}
		out = append(out, e)
	}
	return out, bad, sc.Err()
}

// remove drops the entries whose keys are in done, keeping anything appended
// since they were loaded. An empty spool is deleted.
func (s *spool) remove(done map[string]bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, _, err := s.loadLocked()
	if err != nil {
		return err
	}
	var keep bytes.Buffer
	n := 0
	for _, e := range cur {
		if done[e.key()] {
			continue
		}
		line, err := json.Marshal(e)
		if err != nil {
			return err
		}
		keep.Write(append(line, '\n'))
		n++
	}
	if n == 0 {
		if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("spool: %w", err)
		}
		syncDir(filepath.Dir(s.path))
		return nil
	}
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	_, werr := f.Write(keep.Bytes())
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("spool: %w", err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	syncDir(filepath.Dir(s.path))
	return nil
}

// syncDir fsyncs a folder so a created, renamed or removed file survives a
// crash. Errors are ignored: some systems cannot sync folders.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
