-- Workflows under retention (issue 39): an ended workflow moves to
-- 'archived' in the transaction in which retention archives its final step
-- (the copy of the final step's result it holds gets the same purge), and
-- outcome keeps how it ended (succeeded, failed or canceled; '' while it
-- runs). archived_at is when it was archived.
ALTER TABLE workflows ADD COLUMN outcome text NOT NULL DEFAULT '';
ALTER TABLE workflows ADD COLUMN archived_at bigint;
UPDATE workflows SET outcome = state WHERE state IN ('succeeded', 'failed', 'canceled');
-- Workflows whose final step was archived before this migration: archived
-- now, their result taken from the archived step (pointer purged).
UPDATE workflows w SET state = 'archived', archived_at = t.updated_at, updated_at = greatest(w.updated_at, t.updated_at),
    result = CASE WHEN w.result IS NULL THEN NULL ELSE t.result END
FROM tasks t
WHERE t.tenant = w.tenant AND t.id = w.final_task_id AND t.state = 'archived'
  AND w.state IN ('succeeded', 'failed', 'canceled');
