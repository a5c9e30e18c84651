-- The outbox (issue 13): receipts waiting to be delivered to an external
-- ledger, written in the transaction that appends them. Delivered entries are
-- deleted; refused ones stay as 'dead' until an operator retries them.
CREATE TABLE outbox (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant        TEXT NOT NULL,
    task_id       TEXT NOT NULL DEFAULT '',
    kind          TEXT NOT NULL,
    dedupe_key    TEXT NOT NULL,
    body          TEXT NOT NULL,
    state         TEXT NOT NULL DEFAULT 'pending',
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_at       INTEGER NOT NULL,
    claimed_until INTEGER,
    last_error    TEXT NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL
);
CREATE INDEX outbox_due  ON outbox (next_at, id) WHERE state = 'pending';
CREATE INDEX outbox_task ON outbox (task_id, id) WHERE state = 'pending';
CREATE INDEX outbox_dead ON outbox (id) WHERE state = 'dead';
