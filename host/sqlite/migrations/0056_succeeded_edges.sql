-- An archive of a result its channel then deletes is refused while a task
-- that waits on the result's task has not finished (store.Reader.OwedWaiters):
-- its worker still reads that payload through its lease. The edges a
-- succeeded dependency settled had no index by their dependency (a tenant's
-- edges outlive their waiters), so that check walked the tenant's edges.
-- Only edges settled as succeeded are indexed: the open ones are in
-- task_dependencies_open already, and no other settled edge names a result.
CREATE INDEX IF NOT EXISTS task_dependencies_succeeded ON task_dependencies (tenant, dep_id) WHERE dep_state = 'succeeded';
