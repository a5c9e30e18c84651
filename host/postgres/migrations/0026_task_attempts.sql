-- A task's attempts (issue 42): one row per lease that ended, written in the
-- transaction that ended it, so a task's history (who held it, when, how
-- long, how it ended, with which error) outlives the task row's fields of
-- its current lease. body is the host.Attempt as JSON (text, not jsonb: a
-- worker's error may hold a \u0000 escape, which jsonb refuses).
CREATE TABLE task_attempts (
    seq      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant   text   NOT NULL,
    task_id  text   NOT NULL,
    lease_id text   NOT NULL,
    ended_at bigint NOT NULL,
    body     text   NOT NULL
);
CREATE INDEX task_attempts_task ON task_attempts (tenant, task_id, seq);
