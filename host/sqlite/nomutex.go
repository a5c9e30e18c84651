package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"reflect"
	"unsafe"

	"modernc.org/libc"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// openPool opens a database/sql pool on dsn whose connections run without
// SQLite's per-connection mutex, as if opened SQLITE_OPEN_NOMUTEX.
//
// The driver opens every connection SQLITE_OPEN_FULLMUTEX and offers no
// option. In the transpiled library that mutex is a Go mutex with atomic
// bookkeeping, entered by every bind, column read and step: about a tenth of
// the writer's CPU. database/sql never uses one connection from two
// goroutines at once, which is all NOMUTEX asks of its caller (the driver's
// cancellation calls sqlite3_interrupt from another goroutine, which takes no
// mutex). RATIONALE.md, "SQLite's connection mutex, released at connect",
// has the measurements.
func openPool(dsn string) (*sql.DB, error) {
	c, err := msqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(noMutexConnector{c}), nil
}

// noMutexConnector hands out the driver's own connections, each with its
// mutex released. It returns them unwrapped, so every optional interface of
// the driver's connection stays visible to database/sql.
type noMutexConnector struct{ driver.Connector }

// Connect opens a connection and releases its mutex.
func (c noMutexConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	releaseConnMutex(conn)
	return conn, nil
}

// connHandle returns the sqlite3* of a connection opened by modernc.org/sqlite
// (its unexported field db), or 0 when conn is not shaped as expected.
func connHandle(conn driver.Conn) uintptr {
	v := reflect.ValueOf(conn)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return 0
	}
	f := v.Elem().FieldByName("db")
	if !f.IsValid() || f.Kind() != reflect.Uintptr {
		return 0
	}
	return uintptr(f.Uint())
}

// releaseConnMutex does what SQLITE_OPEN_NOMUTEX does at open: the
// connection's mutex pointer is null, and SQLite's mutex calls do nothing for
// a null mutex. It must run before the connection is shared, which Connect
// ensures. It releases nothing, and the connection keeps its mutex, when the
// driver's connection is not shaped as this version of it is (a later driver
// version): correctness never rests on it, and TestConnectionsRunWithoutMutex
// says when it stopped working.
func releaseConnMutex(conn driver.Conn) {
	db := connHandle(conn)
	if db == 0 {
		return
	}
	tls := libc.NewTLS()
	defer tls.Close()
	// The handle points into the library's C heap, not Go's, so the collector
	// never moves or frees it under this conversion.
	h := (*sqlite3.Tsqlite3)(unsafe.Add(unsafe.Pointer(nil), db))
	m := h.Fmutex
	if m == 0 {
		return
	}
	h.Fmutex = 0
	sqlite3.Xsqlite3_mutex_free(tls, m)
}
