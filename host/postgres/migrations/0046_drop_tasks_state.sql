-- Lists by state merge ranges of tasks_state_type_seq (tenant, state,
-- task_type, seq) in seq order, one range per state and type (queries.go,
-- listByState), as host/sqlite has done since its 0016. tasks_state
-- (tenant, state, seq) was one more entry every claim, completion and
-- requeue wrote: no task update is HOT (state is in the indexes), so each
-- cost the single writer's backend an index insertion.
DROP INDEX IF EXISTS tasks_state;
