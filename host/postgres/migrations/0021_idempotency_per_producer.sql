-- An idempotency key belongs to the principal that produced the task
-- (created_by), not to the recipient's whole tenant (issue 37): unique per
-- (tenant, created_by, recipient, key). Keyed by (tenant, recipient, key)
-- alone, another agent of the tenant could name the recipient and reuse its
-- key, and be handed that task, or a conflict naming it and its first
-- differing field, or take the key first.
--
-- Every stored key stays as it is: rows unique per (tenant, recipient, key)
-- are unique per (tenant, created_by, recipient, key) too, so the new index
-- cannot meet a duplicate and no key is dropped or rewritten.
DROP INDEX IF EXISTS tasks_idempotency;
CREATE UNIQUE INDEX tasks_idempotency ON tasks (tenant, created_by, recipient, idempotency_key) WHERE idempotency_key <> '';
