-- A task's attempts (issue 42): one row per lease that ended, written in the
-- transaction that ended it, so a task's history (who held it, when, how
-- long, how it ended, with which error) outlives the task row's fields of
-- its current lease. body is the host.Attempt as JSON.
CREATE TABLE task_attempts (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant   TEXT    NOT NULL,
    task_id  TEXT    NOT NULL,
    lease_id TEXT    NOT NULL,
    ended_at INTEGER NOT NULL,
    body     TEXT    NOT NULL
);
CREATE INDEX task_attempts_task ON task_attempts (tenant, task_id, seq);
