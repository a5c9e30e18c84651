-- The outbox (issue 13): receipts waiting to be delivered to an external
-- ledger, written in the transaction that appends them. Delivered entries are
-- deleted; refused ones stay as 'dead' until an operator retries them.
CREATE TABLE outbox (
    id            bigserial PRIMARY KEY,
    tenant        text NOT NULL,
    task_id       text NOT NULL DEFAULT '',
    kind          text NOT NULL,
    dedupe_key    text NOT NULL,
    body          text NOT NULL,
    state         text NOT NULL DEFAULT 'pending',
    attempts      bigint NOT NULL DEFAULT 0,
    next_at       bigint NOT NULL,
    claimed_until bigint,
    last_error    text NOT NULL DEFAULT '',
    created_at    bigint NOT NULL
);
CREATE INDEX outbox_due  ON outbox (next_at, id) WHERE state = 'pending';
CREATE INDEX outbox_task ON outbox (task_id, id) WHERE state = 'pending';
CREATE INDEX outbox_dead ON outbox (id) WHERE state = 'dead';
