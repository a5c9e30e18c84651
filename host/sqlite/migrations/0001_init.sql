-- AsyncGate schema, version 1. Times are microseconds since the Unix epoch (UTC).

CREATE TABLE tasks (
    seq               INTEGER PRIMARY KEY AUTOINCREMENT, -- queue order: oldest first
    id                TEXT    NOT NULL UNIQUE,
    tenant            TEXT    NOT NULL,
    task_type         TEXT    NOT NULL,
    created_by        TEXT    NOT NULL,
    recipient         TEXT    NOT NULL,
    state             TEXT    NOT NULL,
    priority          INTEGER NOT NULL,
    params            TEXT    NOT NULL,
    summary           TEXT    NOT NULL DEFAULT '',
    idempotency_key   TEXT    NOT NULL DEFAULT '',
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    available_at      INTEGER NOT NULL,
    lease_id          TEXT    NOT NULL DEFAULT '',
    worker_id         TEXT    NOT NULL DEFAULT '',
    leased_at         INTEGER,
    lease_expires_at  INTEGER,
    accepted_at       INTEGER,
    accept_receipt    TEXT    NOT NULL DEFAULT '',
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    attempts          INTEGER NOT NULL DEFAULT 0,
    max_retries       INTEGER NOT NULL,
    lease_count       INTEGER NOT NULL DEFAULT 0,
    lease_expiries    INTEGER NOT NULL DEFAULT 0,
    started_at        INTEGER,
    completed_at      INTEGER,
    progress_percent  REAL,
    progress_message  TEXT    NOT NULL DEFAULT '',
    result            TEXT,
    last_error        TEXT    NOT NULL DEFAULT '',
    dead_reason       TEXT    NOT NULL DEFAULT '',
    assign_receipt    TEXT    NOT NULL DEFAULT ''
);
-- Lease order: only queued tasks are indexed, so a lease never walks finished work.
CREATE INDEX tasks_ready      ON tasks (tenant, priority DESC, seq) WHERE state = 'queued';
CREATE INDEX tasks_ready_type ON tasks (tenant, task_type, priority DESC, seq) WHERE state = 'queued';
CREATE INDEX tasks_leased     ON tasks (lease_expires_at) WHERE state = 'leased';
CREATE INDEX tasks_lease_id   ON tasks (lease_id) WHERE lease_id <> '';
CREATE INDEX tasks_state      ON tasks (tenant, state, seq);
CREATE INDEX tasks_created_by ON tasks (tenant, created_by, seq);
CREATE INDEX tasks_recipient  ON tasks (tenant, recipient, seq);
CREATE UNIQUE INDEX tasks_idempotency ON tasks (tenant, recipient, idempotency_key) WHERE idempotency_key <> '';

CREATE TABLE task_progress (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant   TEXT    NOT NULL,
    task_id  TEXT    NOT NULL,
    lease_id TEXT    NOT NULL,
    percent  REAL,
    message  TEXT    NOT NULL DEFAULT '',
    at       INTEGER NOT NULL
);
CREATE INDEX task_progress_task ON task_progress (tenant, task_id, seq);

CREATE TABLE task_types (
    tenant TEXT NOT NULL,
    name   TEXT NOT NULL,
    body   TEXT NOT NULL, -- the whole TaskType as JSON
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;

-- The receipt ledger: append-only, hash-chained in seq order.
CREATE TABLE receipts (
    seq        INTEGER PRIMARY KEY,
    id         TEXT    NOT NULL UNIQUE,
    tenant     TEXT    NOT NULL,
    type       TEXT    NOT NULL,
    from_p     TEXT    NOT NULL,
    to_p       TEXT    NOT NULL,
    task_id    TEXT    NOT NULL DEFAULT '',
    lease_id   TEXT    NOT NULL DEFAULT '',
    parents    TEXT    NOT NULL, -- JSON array of receipt ids
    body       TEXT    NOT NULL,
    dedupe_key TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    prev_hash  TEXT    NOT NULL,
    hash       TEXT    NOT NULL
);
CREATE INDEX receipts_task ON receipts (tenant, task_id, seq) WHERE task_id <> '';
CREATE UNIQUE INDEX receipts_dedupe ON receipts (tenant, dedupe_key) WHERE dedupe_key <> '';

-- The last link of the chain, so a removed tail is detected too.
CREATE TABLE ledger_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash TEXT    NOT NULL
);
INSERT INTO ledger_head (id, seq, hash) VALUES (1, 0, '');

-- Obligation index: one row per obligation-creating receipt; terminated_by is set
-- once by its first terminator. Open-obligation queries read only the partial
-- indexes below, never the ledger.
CREATE TABLE obligations (
    receipt_id    TEXT    PRIMARY KEY,
    tenant        TEXT    NOT NULL,
    type          TEXT    NOT NULL,
    obligor       TEXT    NOT NULL,
    obligee       TEXT    NOT NULL,
    task_id       TEXT    NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    terminated_by TEXT
) WITHOUT ROWID;
CREATE INDEX obligations_open_obligor ON obligations (tenant, obligor, seq) WHERE terminated_by IS NULL;
CREATE INDEX obligations_open_obligee ON obligations (tenant, obligee, seq) WHERE terminated_by IS NULL;

CREATE TABLE workers (
    tenant       TEXT    NOT NULL,
    id           TEXT    NOT NULL,
    capabilities TEXT,
    first_seen   INTEGER NOT NULL,
    last_seen    INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
) WITHOUT ROWID;

CREATE TABLE api_keys (
    id         TEXT    PRIMARY KEY,
    hash       TEXT    NOT NULL UNIQUE,
    prefix     TEXT    NOT NULL,
    role       TEXT    NOT NULL,
    tenant     TEXT    NOT NULL,
    principal  TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
