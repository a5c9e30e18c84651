package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"path/filepath"
	"sync"
	"testing"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// connMutex returns the connection's mutex as SQLite reports it
// (sqlite3_db_mutex): 0 once released, and 0 when conn is not a connection of
// the driver.
func connMutex(conn driver.Conn) uintptr {
	db := connHandle(conn)
	if db == 0 {
		return 0
	}
	tls := libc.NewTLS()
	defer tls.Close()
	return sqlite3.Xsqlite3_db_mutex(tls, db)
}

// rawMutex returns the SQLite mutex of a connection db hands out, failing the
// test when the connection is not one whose handle connHandle can read.
func rawMutex(t *testing.T, db *sql.DB) uintptr {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var m uintptr
	if err := c.Raw(func(dc any) error {
		conn, ok := dc.(driver.Conn)
		if !ok || connHandle(conn) == 0 {
			t.Fatalf("connection %T: no sqlite3 handle where this driver version keeps it", dc)
		}
		m = connMutex(conn)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestConnectionsRunWithoutMutex: the store's writer and readers run without
// SQLite's per-connection mutex, while a connection the driver opens itself
// has one (so the probe can see a mutex). It fails when a driver upgrade
// changes the connection's shape and the store silently keeps the mutex.
func TestConnectionsRunWithoutMutex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	plain, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if rawMutex(t, plain) == 0 {
		t.Fatal("a connection opened by the driver has no mutex; the probe cannot tell")
	}
	if m := rawMutex(t, s.wdb); m != 0 {
		t.Errorf("writer's connection has mutex %#x, want none", m)
	}
	if m := rawMutex(t, s.rdb); m != 0 {
		t.Errorf("reader's connection has mutex %#x, want none", m)
	}
}

// TestWithoutMutexUnderLoad runs the writer and every reader connection at
// once (updates, views and queue stats from many goroutines) and checks what
// they wrote adds up; under -race it also checks that no connection is
// reached from two goroutines without the pool between them.
func TestWithoutMutexUnderLoad(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "gate.db"), Options{ReadConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const writers, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers*2)
	for w := 0; w < writers; w++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				err := s.Update(ctx, func(tx store.Tx) error {
					return tx.AppendReceipt(ctx, &host.Receipt{ID: host.NewID(host.PrefixReceipt), Tenant: "acme", Type: host.ReceiptProgress,
						From: "worker.w", To: "agent.kee", Parents: []string{}, Body: []byte(`{}`), CreatedAt: storetest.Epoch})
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := s.View(ctx, func(r store.Reader) error {
					_, _, err := r.ListReceipts(ctx, store.ReceiptFilter{Tenant: "acme", Limit: 10})
					return err
				}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var n int
	if err := s.View(ctx, func(r store.Reader) error {
		rs, _, err := r.ListReceipts(ctx, store.ReceiptFilter{Tenant: "acme", Limit: writers * each * 2})
		n = len(rs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n != writers*each {
		t.Fatalf("%d receipts, want %d", n, writers*each)
	}
}
