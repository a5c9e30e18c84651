package sqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// BenchmarkTaskRowShape measures the task-row half of a cycle on the gate's
// real schema, in three shapes, to decide a change of the write path before
// any code moves (RATIONALE.md, "What the SQLite writer does not wait on"):
//
//   - wide: today's statements: a multi-row insert, a claim that reads the
//     claimed rows' 34 columns and sets all 24 mutable ones of each, and a
//     completion that sets all 24 again, fenced on the lease;
//   - wide-min: the same rows, each update setting only the columns it
//     changes (SQLite rewrites an index only when the UPDATE names one of
//     its columns);
//   - narrow: a queue row (state, lease, priority, availability, fence)
//     beside the task row, which loses its four queue indexes: the claim
//     reads and updates queue rows and then reads the claimed tasks, and the
//     completion deletes the queue row and writes the task's end once.
//
// Each batch is 50 tasks in three durable transactions, as the writer
// groups them. Receipts, obligations and inbox rows, the other half of a
// cycle, are left out: they are the same in every shape.
func BenchmarkTaskRowShape(b *testing.B) {
	for _, shape := range []string{"wide", "wide-min", "narrow"} {
		b.Run(shape, func(b *testing.B) { taskRowShape(b, shape) })
	}
}

func taskRowShape(b *testing.B, shape string) {
	path := filepath.Join(b.TempDir(), "gate.db")
	st, err := Open(path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	defer db.Close()
	narrow, minimal := shape == "narrow", shape == "wide-min"
	if narrow {
		if _, err := db.Exec(`DROP INDEX tasks_ready; DROP INDEX tasks_ready_type; DROP INDEX tasks_leased; DROP INDEX tasks_lease_id;
CREATE TABLE queue (seq INTEGER PRIMARY KEY, tenant TEXT NOT NULL, task_type TEXT NOT NULL, priority INTEGER NOT NULL,
    available_at INTEGER NOT NULL, state TEXT NOT NULL, lease_id TEXT NOT NULL DEFAULT '', lease_expires_at INTEGER,
    version INTEGER NOT NULL DEFAULT 1);
CREATE INDEX queue_ready      ON queue (tenant, priority DESC, seq) WHERE state = 'queued';
CREATE INDEX queue_ready_type ON queue (tenant, task_type, priority DESC, seq) WHERE state = 'queued';
CREATE INDEX queue_leased     ON queue (lease_expires_at) WHERE state = 'leased';
CREATE INDEX queue_lease_id   ON queue (lease_id) WHERE lease_id <> '';`); err != nil {
			b.Fatal(err)
		}
	}
	const n = 50
	insertTasks := `INSERT INTO tasks (` + sqlrows.TaskInsertColumns + `) VALUES ` + strings.TrimSuffix(strings.Repeat("("+placeholders(taskInsertN)+"),", n), ",")
	fullSet := `UPDATE tasks SET state=?, priority=?, available_at=?, updated_at=?, lease_id=?, worker_id=?, leased_at=?, lease_expires_at=?,
accepted_at=?, accept_receipt=?, cancel_requested=?, attempts=?, max_retries=?, lease_count=?, lease_expiries=?, started_at=?,
completed_at=?, progress_percent=?, progress_message=?, result=?, last_error=?, dead_reason=?, assign_receipt=?,
lease_seconds=?, version=version+1 WHERE id = ? AND state = ?`
	inTx := func(fn func(tx *sql.Tx) error) {
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		if err := fn(tx); err != nil {
			tx.Rollback()
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	made := 0
	b.ResetTimer()
	for done := 0; done < b.N; done += n {
		now := time.Now().UnixMicro()
		lease := fmt.Sprintf("lse_%d", done)
		inTx(func(tx *sql.Tx) error {
			var before int64
			if err := tx.QueryRow(`SELECT coalesce(max(seq), 0) FROM tasks`).Scan(&before); err != nil {
				return err
			}
			args := make([]any, 0, taskInsertN*n)
			for i := 0; i < n; i++ {
				made++
				args = append(args, fmt.Sprintf("tsk_%026d", made), "t", "bench", "p", "p", "queued", 5, `{"x":1}`, "", "",
					now, now, now, "", "", nil, nil, nil, "", 0, 0, 3, 0, 0, nil, nil, nil, "", nil, "", "", "", 300, "[]", "", "", false)
			}
			if _, err := tx.Exec(insertTasks, args...); err != nil {
				return err
			}
			if narrow {
				_, err := tx.Exec(`INSERT INTO queue (seq, tenant, task_type, priority, available_at, state)
SELECT seq, tenant, task_type, priority, available_at, 'queued' FROM tasks WHERE seq > ?`, before)
				return err
			}
			return nil
		})
		var ids []string
		var seqs []int64
		inTx(func(tx *sql.Tx) error {
			read := func(q string, args ...any) error {
				rows, err := tx.Query(q, args...)
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					t, seq, err := sqlrows.ScanTask(rows)
					if err != nil {
						return err
					}
					ids, seqs = append(ids, t.ID), append(seqs, seq)
				}
				return rows.Err()
			}
			if !narrow {
				if err := read(`SELECT `+sqlrows.TaskColumns+` FROM tasks INDEXED BY tasks_ready_type WHERE tenant = ? AND task_type = ? AND state = 'queued'
AND available_at <= ? ORDER BY priority DESC, seq LIMIT ?`, "t", "bench", now, n); err != nil {
					return err
				}
				for _, id := range ids {
					var err error
					if minimal {
						_, err = tx.Exec(`UPDATE tasks SET state=?, updated_at=?, lease_id=?, worker_id=?, leased_at=?, lease_expires_at=?, attempts=?,
lease_count=?, started_at=?, assign_receipt=?, version=version+1 WHERE id = ? AND state = ?`,
							"leased", now, lease, "w", now, now+300e6, 1, 1, now, "rct", id, "queued")
					} else {
						_, err = tx.Exec(fullSet, "leased", 5, now, now, lease, "w", now, now+300e6, nil, "", 0, 1, 3, 1, 0, now,
							nil, nil, "", nil, "", "", "rct", 300, id, "queued")
					}
					if err != nil {
						return err
					}
				}
				return nil
			}
			rows, err := tx.Query(`SELECT seq FROM queue INDEXED BY queue_ready_type WHERE tenant = ? AND task_type = ? AND state = 'queued'
AND available_at <= ? ORDER BY priority DESC, seq LIMIT ?`, "t", "bench", now, n)
			if err != nil {
				return err
			}
			var claimed []string
			for rows.Next() {
				var seq int64
				if err := rows.Scan(&seq); err != nil {
					rows.Close()
					return err
				}
				claimed = append(claimed, fmt.Sprint(seq))
			}
			rows.Close()
			for _, seq := range claimed {
				if _, err := tx.Exec(`UPDATE queue SET state = 'leased', lease_id = ?, lease_expires_at = ?, version = version + 1
WHERE seq = ? AND state = 'queued'`, lease, now+300e6, seq); err != nil {
					return err
				}
			}
			// The lease's answer carries the task.
			return read(`SELECT `+sqlrows.TaskColumns+` FROM tasks WHERE seq IN (SELECT value FROM json_each(?))`, "["+strings.Join(claimed, ",")+"]")
		})
		if len(ids) != n {
			b.Fatalf("claimed %d tasks, want %d", len(ids), n)
		}
		inTx(func(tx *sql.Tx) error {
			for i, id := range ids {
				var err error
				switch {
				case narrow:
					if _, err = tx.Exec(`DELETE FROM queue WHERE seq = ? AND lease_id = ? AND state = 'leased'`, seqs[i], lease); err == nil {
						_, err = tx.Exec(`UPDATE tasks SET state=?, updated_at=?, lease_id=?, worker_id=?, leased_at=?, lease_expires_at=?, attempts=?,
lease_count=?, started_at=?, completed_at=?, result=?, assign_receipt=?, version=version+1 WHERE id = ? AND state = ?`,
							"succeeded", now, lease, "w", now, now+300e6, 1, 1, now, now, `{"pointer":"x"}`, "rct", id, "queued")
					}
				case minimal:
					_, err = tx.Exec(`UPDATE tasks SET state=?, updated_at=?, completed_at=?, result=?, version=version+1
WHERE id = ? AND state = ? AND lease_id = ?`, "succeeded", now, now, `{"pointer":"x"}`, id, "leased", lease)
				default:
					_, err = tx.Exec(fullSet+` AND lease_id = ?`, "succeeded", 5, now, now, lease, "w", now, now+300e6, nil, "", 0, 1, 3, 1, 0, now,
						now, nil, "", `{"pointer":"x"}`, "", "", "rct", 300, id, "leased", lease)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	b.StopTimer()
	var succeeded int
	if err := db.QueryRow(`SELECT count(*) FROM tasks WHERE state = 'succeeded'`).Scan(&succeeded); err != nil {
		b.Fatal(err)
	}
	if succeeded != made {
		b.Fatalf("%d of %d tasks succeeded: an update missed its row", succeeded, made)
	}
	b.ReportMetric(float64(made)/b.Elapsed().Seconds(), "tasks/s")
}
