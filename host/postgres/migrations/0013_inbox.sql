-- The inbox (issue 13): per recipient, the actionable items only, each with
-- its lifecycle timestamps (microseconds since the Unix epoch, UTC). A row is
-- written in the same transaction as the task change it reports.
CREATE TABLE inbox (
    seq bigserial PRIMARY KEY,
    id           text NOT NULL UNIQUE,
    tenant       text NOT NULL,
    recipient    text NOT NULL,
    kind         text NOT NULL,
    task_id      text NOT NULL,
    task_type    text NOT NULL DEFAULT '',
    receipt_id   text NOT NULL DEFAULT '',
    summary      text NOT NULL DEFAULT '',
    created_at   bigint NOT NULL,
    delivered_at bigint,
    read_at      bigint,
    fetched_at   bigint,
    promoted_at  bigint
);
CREATE INDEX inbox_recipient ON inbox (tenant, recipient, seq);
CREATE INDEX inbox_unread    ON inbox (tenant, recipient, seq) WHERE read_at IS NULL;
CREATE INDEX inbox_task      ON inbox (tenant, task_id);

-- Retention walks finished tasks of one type by completion time.
CREATE INDEX tasks_finished ON tasks (tenant, task_type, state, completed_at) WHERE completed_at IS NOT NULL;
-- and, for tasks of task types no longer registered, every finished task not
-- archived yet by completion time.
CREATE INDEX tasks_unarchived ON tasks (completed_at) WHERE state IN ('succeeded', 'canceled', 'dead_letter');
