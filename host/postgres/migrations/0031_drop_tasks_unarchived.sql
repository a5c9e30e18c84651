-- Retention finds a type's due tasks through tasks_finished, one range per
-- state, and orphaned tasks (of types no longer registered) by a loose walk
-- of its (tenant, task_type) pairs (delivery.go, RetentionDue).
-- tasks_unarchived (completed_at, for every finished task) was one more
-- entry every completion wrote; no task update is HOT, so each one costs the
-- single writer's backend an index insertion (host/sqlite dropped it in its
-- 0017).
DROP INDEX IF EXISTS tasks_unarchived;
