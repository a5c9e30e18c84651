-- A batch's task updates written behind are fenced (state, lease, version):
-- each must change its row. fence_check makes a lost fence fail its
-- statement, so the transaction aborts on the server and the COMMIT
-- pipelined behind it never runs: the writer no longer reads every write's
-- answer in a round trip of its own before it commits (RATIONALE.md, "A
-- batch commits in the round trip that carries its writes"). updated are
-- the ids the update changed, given the ids it was given (no two alike);
-- the error's detail lists the given ids it did not change, comma-separated
-- (task ids hold no comma), so the writer sets their requests aside.
CREATE FUNCTION fence_check(updated text[], given text[]) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF cardinality(updated) = cardinality(given) THEN
        RETURN cardinality(updated);
    END IF;
    RAISE EXCEPTION 'fenced task update wrote % of % rows', cardinality(updated), cardinality(given)
        USING ERRCODE = 'AGF01',
              DETAIL = array_to_string(ARRAY(SELECT g FROM unnest(given) AS g EXCEPT SELECT u FROM unnest(updated) AS u), ',');
END
$$;
