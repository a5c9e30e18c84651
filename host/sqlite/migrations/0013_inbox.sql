-- The inbox (issue 13): per recipient, the actionable items only, each with
-- its lifecycle timestamps (microseconds since the Unix epoch, UTC). A row is
-- written in the same transaction as the task change it reports.
CREATE TABLE inbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,
    tenant       TEXT NOT NULL,
    recipient    TEXT NOT NULL,
    kind         TEXT NOT NULL,
    task_id      TEXT NOT NULL,
    task_type    TEXT NOT NULL DEFAULT '',
    receipt_id   TEXT NOT NULL DEFAULT '',
    summary      TEXT NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    delivered_at INTEGER,
    read_at      INTEGER,
    fetched_at   INTEGER,
    promoted_at  INTEGER
);
CREATE INDEX inbox_recipient ON inbox (tenant, recipient, seq);
CREATE INDEX inbox_unread    ON inbox (tenant, recipient, seq) WHERE read_at IS NULL;
CREATE INDEX inbox_task      ON inbox (tenant, task_id);

-- Retention walks finished tasks of one type by completion time.
CREATE INDEX tasks_finished ON tasks (tenant, task_type, state, completed_at) WHERE completed_at IS NOT NULL;
-- and, for tasks of task types no longer registered, every finished task not
-- archived yet by completion time.
CREATE INDEX tasks_unarchived ON tasks (completed_at) WHERE state IN ('succeeded', 'canceled', 'dead_letter');
