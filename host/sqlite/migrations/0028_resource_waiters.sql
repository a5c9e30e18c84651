-- Waiters on resources (issue 43 item 3: fairness): acquires parked under
-- wait-die and queued tasks whose intents could not be granted. A waiter
-- blocks younger conflicting requests; a registration lapses at expires_at
-- unless renewed. Times are microseconds since the epoch (server clock).
CREATE TABLE resource_waiters (
    tenant      TEXT    NOT NULL,
    resource    TEXT    NOT NULL,
    waiter_id   TEXT    NOT NULL,
    holder      TEXT    NOT NULL DEFAULT '',
    predicate   TEXT    NOT NULL,
    priority_at INTEGER NOT NULL,
    task_id     TEXT    NOT NULL DEFAULT '',
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, resource, waiter_id)
);
CREATE INDEX resource_waiters_waiter ON resource_waiters (tenant, waiter_id);
CREATE INDEX resource_waiters_expiry ON resource_waiters (expires_at);
