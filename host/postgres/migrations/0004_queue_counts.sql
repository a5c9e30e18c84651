-- Task counts by tenant, type and state, kept by each writer with one upsert
-- of per-batch deltas, so queue stats and /metrics read a few rows instead of
-- scanning tasks. Each writer adds its deltas to rows of its own shard (its
-- ledger chain id), so hosts never wait on each other's count rows; a count is
-- the sum over shards (a shard's row may be negative: a task queued by one
-- host and leased by another).
CREATE TABLE queue_counts (
    tenant    text   NOT NULL,
    task_type text   NOT NULL,
    state     text   NOT NULL,
    shard     bigint NOT NULL,
    n         bigint NOT NULL,
    PRIMARY KEY (tenant, task_type, state, shard)
);
INSERT INTO queue_counts (tenant, task_type, state, shard, n)
    SELECT tenant, task_type, state, 0, count(*) FROM tasks GROUP BY tenant, task_type, state;
