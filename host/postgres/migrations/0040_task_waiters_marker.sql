-- Dependencies cost nothing to a task none waits on (issue 39): a task's
-- row says whether a waiter was enqueued on it while it was unfinished,
-- and only the terminal write of a task so marked settles waiters. An
-- enqueue with an after list marks its unfinished dependencies in its own
-- transaction, before it locks them FOR SHARE; a terminal write built from
-- a copy that did not see the marker is fenced on its absence. The column
-- is in no index, so setting it is a HOT update.
ALTER TABLE tasks ADD COLUMN has_waiters boolean NOT NULL DEFAULT false;
UPDATE tasks t SET has_waiters = true
FROM (SELECT DISTINCT tenant, dep_id FROM task_dependencies WHERE dep_state = '') d
WHERE t.tenant = d.tenant AND t.id = d.dep_id;

-- settle_waiters is one dependency's settlement in one round trip: it
-- records p_state on the open edges that name p_dep, locks their waiters in
-- id order, and answers each waiter's row with its edges counted by state
-- (its rule's tally) as they stand once the lock is held. Each statement of
-- a VOLATILE function under READ COMMITTED takes a fresh snapshot, so the
-- tally, read after the lock, sees the edge of any other dependency of the
-- same waiter settled by a transaction that held the lock before: of two
-- dependencies finishing at once on two writers, the second sees the first.
CREATE FUNCTION settle_waiters(p_tenant text, p_dep text, p_state text)
RETURNS TABLE (o_task tasks, o_rule text, o_states text[], o_counts integer[])
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    ws text[];
BEGIN
    WITH s AS (
        UPDATE task_dependencies SET dep_state = p_state
        WHERE tenant = p_tenant AND dep_id = p_dep AND dep_state = ''
        RETURNING waiter_id)
    SELECT array_agg(s.waiter_id ORDER BY s.waiter_id) INTO ws FROM s;
    IF ws IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM tasks t WHERE t.tenant = p_tenant AND t.id = ANY(ws) ORDER BY t.id FOR UPDATE;
    RETURN QUERY SELECT t, e.r, e.st, e.n FROM tasks t
    CROSS JOIN LATERAL (
        SELECT min(g.rule) AS r, array_agg(g.dep_state) AS st, array_agg(g.c) AS n FROM (
            SELECT d.rule, d.dep_state, count(*)::integer AS c FROM task_dependencies d
            WHERE d.tenant = p_tenant AND d.waiter_id = t.id GROUP BY d.rule, d.dep_state) g) e
    WHERE t.tenant = p_tenant AND t.id = ANY(ws) ORDER BY t.id;
END
$$;
