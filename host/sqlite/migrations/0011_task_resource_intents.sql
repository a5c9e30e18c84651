-- The resource intents a task runs under (KLIS-3 task integration): its type's
-- and its enqueue's, fixed at enqueue, as a JSON array ('' for none).
ALTER TABLE tasks ADD COLUMN resource_intents TEXT NOT NULL DEFAULT '';
