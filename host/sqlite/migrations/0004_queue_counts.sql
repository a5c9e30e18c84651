-- Task counts by tenant, type and state, kept by the writer with one upsert
-- of per-batch deltas, so queue stats and /metrics read a few rows instead of
-- scanning tasks. SQLite has one writer at a time: every count is shard 0.
CREATE TABLE queue_counts (
    tenant    TEXT    NOT NULL,
    task_type TEXT    NOT NULL,
    state     TEXT    NOT NULL,
    shard     INTEGER NOT NULL,
    n         INTEGER NOT NULL,
    PRIMARY KEY (tenant, task_type, state, shard)
) WITHOUT ROWID;
INSERT INTO queue_counts (tenant, task_type, state, shard, n)
    SELECT tenant, task_type, state, 0, count(*) FROM tasks GROUP BY tenant, task_type, state;
