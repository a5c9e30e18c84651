-- A waiter's depth (issue 39): 1 for a task waiting only on tasks that are
-- not waiting themselves, else 1 + the largest depth of its waiting
-- dependencies, the same on each of its edges. An enqueue is refused when
-- it would make a chain deeper than the gate's bound, so the cascade one
-- terminal write settles is bounded in depth. Edges written before this
-- migration count as depth 1.
ALTER TABLE task_dependencies ADD COLUMN depth integer NOT NULL DEFAULT 1;
