-- Lease ids minted from now on carry their task's id (host.NewLeaseID:
-- "lease-", 26 random characters, '.', the task id), and a lease-bound
-- call finds the task by its unique id and compares the whole lease id
-- there (queries.go, leaseByTaskSQL). tasks_lease_id keeps only the lease
-- ids of the older form (no '.'), so leases handed out before this
-- migration, and finished tasks' last leases, are still found; a claim
-- writes no entry in it. No task update is HOT, so every entry a claim
-- wrote cost the single writer's backend an index insertion.
CREATE INDEX tasks_lease_id_old ON tasks (lease_id) WHERE lease_id <> '' AND strpos(lease_id, '.') = 0;
DROP INDEX IF EXISTS tasks_lease_id;
ALTER INDEX tasks_lease_id_old RENAME TO tasks_lease_id;
