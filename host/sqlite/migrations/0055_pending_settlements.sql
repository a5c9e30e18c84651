-- The rest of a dependency cascade that outgrew its transaction: finished
-- tasks whose waiters are still to be settled, with the state each finished
-- in and the cause the cascade carries (the engine's JSON). The transaction
-- that ends a task writes them beside it; the engine's drainer settles and
-- deletes them in later transactions. Empty unless a cascade was cut.
CREATE TABLE pending_settlements (
    tenant     TEXT NOT NULL,
    task_id    TEXT NOT NULL,
    state      TEXT NOT NULL,
    cause      TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, task_id)
);
CREATE INDEX pending_settlements_age ON pending_settlements (created_at);
