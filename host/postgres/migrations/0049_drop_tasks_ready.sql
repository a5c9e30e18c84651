-- A lease naming no type walks tasks_ready_type (tenant, task_type,
-- priority DESC, seq) once per type the tenant has queued tasks of, the
-- types found by seeks of the same index, and merges the ranges
-- (queries.go, claimAny); the stats' oldest ready task probes it per type
-- and priority (oldestReady). tasks_ready (tenant, priority DESC, seq) was
-- one more entry every enqueue, requeue and retry wrote.
DROP INDEX IF EXISTS tasks_ready;
