-- Dependencies cost nothing to a task none waits on (issue 39): a task's
-- row says whether a waiter was enqueued on it while it was unfinished,
-- and only the terminal write of a task so marked settles waiters. An
-- enqueue with an after list marks its unfinished dependencies in its own
-- transaction; a terminal write built from a copy that did not see the
-- marker is fenced on its absence. The column is in no index.
ALTER TABLE tasks ADD COLUMN has_waiters INTEGER NOT NULL DEFAULT 0;
UPDATE tasks SET has_waiters = 1 WHERE EXISTS (
    SELECT 1 FROM task_dependencies d WHERE d.tenant = tasks.tenant AND d.dep_id = tasks.id AND d.dep_state = '');
