-- Retention finds orphaned tasks (of types no longer registered) through
-- tasks_finished, by a loose walk of its (tenant, task_type) pairs (delivery.go,
-- RetentionDue). tasks_unarchived (completed_at, for every finished task) was
-- one more entry every completion wrote, which the single writer paid for in
-- every cycle.
DROP INDEX IF EXISTS tasks_unarchived;
