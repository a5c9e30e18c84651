-- Workflows (issue 39): a named graph of steps submitted in one call. Each
-- step is a task (with its edges in task_dependencies); these tables hold
-- the workflow and which task is which step. The workflow ends once, in the
-- transaction that writes its final step's terminal state (state is
-- 'running' until then, and the end is fenced on it).
CREATE TABLE workflows (
    tenant           TEXT    NOT NULL,
    id               TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    created_by       TEXT    NOT NULL,
    state            TEXT    NOT NULL,
    final_step       TEXT    NOT NULL,
    final_task_id    TEXT    NOT NULL,
    step_count       INTEGER NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    idempotency_key  TEXT    NOT NULL DEFAULT '',
    request_hash     TEXT    NOT NULL DEFAULT '',
    submit_receipt   TEXT    NOT NULL,
    end_receipt      TEXT    NOT NULL DEFAULT '',
    result           TEXT,
    error            TEXT    NOT NULL DEFAULT '',
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    completed_at     INTEGER,
    PRIMARY KEY (tenant, id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX workflows_idempotency ON workflows (tenant, created_by, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX workflows_by_creator ON workflows (tenant, created_by, id);
CREATE TABLE workflow_steps (
    tenant      TEXT    NOT NULL,
    workflow_id TEXT    NOT NULL,
    position    INTEGER NOT NULL,
    step        TEXT    NOT NULL,
    task_id     TEXT    NOT NULL,
    after_steps TEXT    NOT NULL DEFAULT '[]',
    after_rule  TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, workflow_id, position)
) WITHOUT ROWID;
