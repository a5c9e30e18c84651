-- settle_waiters (migration 0040) looked its waiters up by tenant and id;
-- under a generic plan, or on a young table whose statistics are stale, the
-- planner walked every task of the tenant on tasks_state_type_seq to find
-- them (~900 buffers a call at 2,000 tasks, growing with the tenant). The
-- tenant is now compared as an expression (tenant || ''), so the ids are
-- looked up by their unique index. Nothing else changes.
CREATE OR REPLACE FUNCTION settle_waiters(p_tenant text, p_dep text, p_state text)
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
    PERFORM 1 FROM tasks t WHERE t.tenant || '' = p_tenant AND t.id = ANY(ws) ORDER BY t.id FOR UPDATE;
    RETURN QUERY SELECT t, e.r, e.st, e.n FROM tasks t
    CROSS JOIN LATERAL (
        SELECT min(g.rule) AS r, array_agg(g.dep_state) AS st, array_agg(g.c) AS n FROM (
            SELECT d.rule, d.dep_state, count(*)::integer AS c FROM task_dependencies d
            WHERE d.tenant = p_tenant AND d.waiter_id = t.id GROUP BY d.rule, d.dep_state) g) e
    WHERE t.tenant || '' = p_tenant AND t.id = ANY(ws) ORDER BY t.id;
END
$$;
