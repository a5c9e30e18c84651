-- A redrive of a dead letter reopens the edges of the tasks still waiting
-- on it (store.Tx.ReopenDependency). Settled edges had no index by their
-- dependency, and a tenant's edges outlive their waiters, so finding a
-- dependency's settled edges walked the tenant's. Only the edges settled
-- as dead letters are indexed here: an edge is inserted open and most
-- settle on a success, so the dependency hot path writes no entry in it;
-- the settling of a dead letter writes one per waiter.
CREATE INDEX IF NOT EXISTS task_dependencies_dead ON task_dependencies (tenant, dep_id) WHERE dep_state = 'dead_letter';
