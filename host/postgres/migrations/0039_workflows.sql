-- Workflows (issue 39): a named graph of steps submitted in one call. Each
-- step is a task (with its edges in task_dependencies); these tables hold
-- the workflow and which task is which step. The workflow ends once, in the
-- transaction that writes its final step's terminal state (state is
-- 'running' until then, and the end is fenced on it).
CREATE TABLE workflows (
    tenant           text    NOT NULL,
    id               text    NOT NULL,
    name             text    NOT NULL,
    created_by       text    NOT NULL,
    state            text    NOT NULL,
    final_step       text    NOT NULL,
    final_task_id    text    NOT NULL,
    step_count       integer NOT NULL,
    cancel_requested boolean NOT NULL DEFAULT false,
    idempotency_key  text    NOT NULL DEFAULT '',
    request_hash     text    NOT NULL DEFAULT '',
    submit_receipt   text    NOT NULL,
    end_receipt      text    NOT NULL DEFAULT '',
    result           text,
    error            text    NOT NULL DEFAULT '',
    created_at       bigint  NOT NULL,
    updated_at       bigint  NOT NULL,
    completed_at     bigint,
    PRIMARY KEY (tenant, id)
);
CREATE UNIQUE INDEX workflows_idempotency ON workflows (tenant, created_by, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX workflows_by_creator ON workflows (tenant, created_by, id);
CREATE TABLE workflow_steps (
    tenant      text    NOT NULL,
    workflow_id text    NOT NULL,
    position    integer NOT NULL,
    step        text    NOT NULL,
    task_id     text    NOT NULL,
    after_steps text    NOT NULL DEFAULT '[]',
    after_rule  text    NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, workflow_id, position)
);
