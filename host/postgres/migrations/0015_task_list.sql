-- The listing columns of every task (tenant, type, creator, recipient, seq)
-- in a narrow row of their own, written once at enqueue and never updated,
-- with the four listing indexes that do not contain state. On tasks they
-- cost an entry each on every update: no task update is HOT (each changes
-- state, which other indexes hold), so PostgreSQL writes a new entry into
-- every index of tasks for each one. Measured on a fenced task update: about
-- 25,000 rows/s with them on tasks, 35,000-50,000 without (RATIONALE.md,
-- "Set-oriented writes"). Lists by state keep using tasks_state and
-- tasks_state_type_seq on tasks, which change with state anyway.
CREATE TABLE task_list (
    seq        bigint NOT NULL, -- tasks.seq
    tenant     text   NOT NULL,
    task_type  text   NOT NULL,
    created_by text   NOT NULL,
    recipient  text   NOT NULL
);
INSERT INTO task_list (seq, tenant, task_type, created_by, recipient)
    SELECT seq, tenant, task_type, created_by, recipient FROM tasks;
CREATE UNIQUE INDEX task_list_seq  ON task_list (tenant, seq);
CREATE INDEX task_list_type        ON task_list (tenant, task_type, seq);
CREATE INDEX task_list_created_by  ON task_list (tenant, created_by, seq);
CREATE INDEX task_list_recipient   ON task_list (tenant, recipient, seq);
-- Statistics now, so the planner walks the new indexes from the first list
-- (autovacuum may be off, or not yet have looked at the table).
ANALYZE task_list;
DROP INDEX IF EXISTS tasks_created_by;
DROP INDEX IF EXISTS tasks_recipient;
DROP INDEX IF EXISTS tasks_tenant_seq;
DROP INDEX IF EXISTS tasks_type_seq;
