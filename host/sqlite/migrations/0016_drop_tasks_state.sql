-- Lists by state walk tasks_state_type_seq, one range per state and type,
-- merged in seq order (queries.go, listByState); the oldest ready task is found
-- through tasks_ready. tasks_state (tenant, state, seq) was one more entry every
-- transition moved, which the single writer paid for in every cycle.
DROP INDEX IF EXISTS tasks_state;
