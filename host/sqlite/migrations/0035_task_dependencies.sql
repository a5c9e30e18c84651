-- Task dependencies (issue 39): one row per edge, a waiter (a task enqueued
-- with an after list) and a task it waits on, under the waiter's rule.
-- dep_state is '' until the dependency finishes; the transaction that writes
-- its terminal state records it here, and settles the waiter by its rule in
-- the same transaction. A waiting task's own row is in state 'waiting'.
CREATE TABLE task_dependencies (
    tenant    TEXT    NOT NULL,
    waiter_id TEXT    NOT NULL,
    dep_id    TEXT    NOT NULL,
    rule      TEXT    NOT NULL,
    position  INTEGER NOT NULL,
    dep_state TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, waiter_id, dep_id)
) WITHOUT ROWID;
-- The edges a finishing task must settle: only the open ones.
CREATE INDEX task_dependencies_open ON task_dependencies (tenant, dep_id) WHERE dep_state = '';
