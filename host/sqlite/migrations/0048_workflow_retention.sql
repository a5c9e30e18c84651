-- Workflows under retention (issue 39): an ended workflow moves to
-- 'archived' in the transaction in which retention archives its final step
-- (the copy of the final step's result it holds gets the same purge), and
-- outcome keeps how it ended (succeeded, failed or canceled; '' while it
-- runs). archived_at is when it was archived.
ALTER TABLE workflows ADD COLUMN outcome TEXT NOT NULL DEFAULT '';
ALTER TABLE workflows ADD COLUMN archived_at INTEGER;
UPDATE workflows SET outcome = state WHERE state IN ('succeeded', 'failed', 'canceled');
-- Workflows whose final step was archived before this migration: archived
-- now, their result taken from the archived step (pointer purged).
UPDATE workflows SET state = 'archived',
    archived_at = (SELECT t.updated_at FROM tasks t WHERE t.tenant = workflows.tenant AND t.id = workflows.final_task_id),
    updated_at = max(updated_at, (SELECT t.updated_at FROM tasks t WHERE t.tenant = workflows.tenant AND t.id = workflows.final_task_id)),
    result = CASE WHEN result IS NULL THEN NULL
        ELSE (SELECT t.result FROM tasks t WHERE t.tenant = workflows.tenant AND t.id = workflows.final_task_id) END
WHERE state IN ('succeeded', 'failed', 'canceled')
  AND EXISTS (SELECT 1 FROM tasks t WHERE t.tenant = workflows.tenant AND t.id = workflows.final_task_id AND t.state = 'archived');
