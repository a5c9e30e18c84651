-- AsyncGate schema for PostgreSQL, version 1. It mirrors host/sqlite's schema:
-- times are microseconds since the Unix epoch (UTC) in bigint columns, so a
-- round trip is exact and both drivers compare times the same way; JSON is kept
-- as text so bytes come back exactly as written.

CREATE TABLE tasks (
    seq               bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- queue order: oldest first
    id                text    NOT NULL UNIQUE,
    tenant            text    NOT NULL,
    task_type         text    NOT NULL,
    created_by        text    NOT NULL,
    recipient         text    NOT NULL,
    state             text    NOT NULL,
    priority          integer NOT NULL,
    params            text    NOT NULL,
    summary           text    NOT NULL DEFAULT '',
    idempotency_key   text    NOT NULL DEFAULT '',
    created_at        bigint  NOT NULL,
    updated_at        bigint  NOT NULL,
    available_at      bigint  NOT NULL,
    lease_id          text    NOT NULL DEFAULT '',
    worker_id         text    NOT NULL DEFAULT '',
    leased_at         bigint,
    lease_expires_at  bigint,
    accepted_at       bigint,
    accept_receipt    text    NOT NULL DEFAULT '',
    cancel_requested  boolean NOT NULL DEFAULT false,
    attempts          integer NOT NULL DEFAULT 0,
    max_retries       integer NOT NULL,
    lease_count       integer NOT NULL DEFAULT 0,
    lease_expiries    integer NOT NULL DEFAULT 0,
    started_at        bigint,
    completed_at      bigint,
    progress_percent  double precision,
    progress_message  text    NOT NULL DEFAULT '',
    result            text,
    last_error        text    NOT NULL DEFAULT '',
    dead_reason       text    NOT NULL DEFAULT '',
    assign_receipt    text    NOT NULL DEFAULT ''
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
    seq      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant   text   NOT NULL,
    task_id  text   NOT NULL,
    lease_id text   NOT NULL,
    percent  double precision,
    message  text   NOT NULL DEFAULT '',
    at       bigint NOT NULL
);
CREATE INDEX task_progress_task ON task_progress (tenant, task_id, seq);

CREATE TABLE task_types (
    tenant text NOT NULL,
    name   text NOT NULL,
    body   text NOT NULL, -- the whole TaskType as JSON
    PRIMARY KEY (tenant, name)
);

-- The receipt ledger: append-only, hash-chained in seq order. seq is assigned by
-- the writer that holds the ledger_head row lock, so every host appends to one
-- chain.
CREATE TABLE receipts (
    seq        bigint PRIMARY KEY,
    id         text   NOT NULL UNIQUE,
    tenant     text   NOT NULL,
    type       text   NOT NULL,
    from_p     text   NOT NULL,
    to_p       text   NOT NULL,
    task_id    text   NOT NULL DEFAULT '',
    lease_id   text   NOT NULL DEFAULT '',
    parents    text   NOT NULL, -- JSON array of receipt ids
    body       text   NOT NULL,
    dedupe_key text   NOT NULL DEFAULT '',
    created_at bigint NOT NULL,
    prev_hash  text   NOT NULL,
    hash       text   NOT NULL
);
CREATE INDEX receipts_task ON receipts (tenant, task_id, seq) WHERE task_id <> '';
CREATE INDEX receipts_tenant ON receipts (tenant, seq);
CREATE UNIQUE INDEX receipts_dedupe ON receipts (tenant, dedupe_key) WHERE dedupe_key <> '';

-- The last link of the chain, so a removed tail is detected too. Its row lock
-- orders appends across hosts.
CREATE TABLE ledger_head (
    id   integer PRIMARY KEY CHECK (id = 1),
    seq  bigint  NOT NULL,
    hash text    NOT NULL
);
INSERT INTO ledger_head (id, seq, hash) VALUES (1, 0, '');

-- Obligation index: one row per obligation-creating receipt; terminated_by is set
-- once by its first terminator. Open-obligation queries read only the partial
-- indexes below, never the ledger.
CREATE TABLE obligations (
    receipt_id    text   PRIMARY KEY,
    tenant        text   NOT NULL,
    type          text   NOT NULL,
    obligor       text   NOT NULL,
    obligee       text   NOT NULL,
    task_id       text   NOT NULL DEFAULT '',
    created_at    bigint NOT NULL,
    seq           bigint NOT NULL,
    terminated_by text
);
CREATE INDEX obligations_open_obligor ON obligations (tenant, obligor, seq) WHERE terminated_by IS NULL;
CREATE INDEX obligations_open_obligee ON obligations (tenant, obligee, seq) WHERE terminated_by IS NULL;

CREATE TABLE workers (
    tenant       text   NOT NULL,
    id           text   NOT NULL,
    capabilities text,
    first_seen   bigint NOT NULL,
    last_seen    bigint NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE TABLE api_keys (
    id         text   PRIMARY KEY,
    hash       text   NOT NULL UNIQUE,
    prefix     text   NOT NULL,
    role       text   NOT NULL,
    tenant     text   NOT NULL,
    principal  text   NOT NULL,
    created_at bigint NOT NULL,
    revoked_at bigint
);
