-- Resource leases (seed 003, KLIS-3): temporary intents on named resources,
-- and their audit trail. Times are microseconds since the epoch (server clock).
CREATE TABLE resource_leases (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT    NOT NULL UNIQUE,
    tenant       TEXT    NOT NULL,
    resource     TEXT    NOT NULL,
    predicate    TEXT    NOT NULL,
    holder       TEXT    NOT NULL,
    state        TEXT    NOT NULL,
    manifest_id  TEXT    NOT NULL,
    priority_at  INTEGER NOT NULL,
    acquired_at  INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    ttl_ms       INTEGER NOT NULL,
    ended_at     INTEGER,
    restarting   INTEGER NOT NULL DEFAULT 0,
    grace_used   INTEGER NOT NULL DEFAULT 0,
    task_id      TEXT    NOT NULL DEFAULT ''
);
-- Conflict checks and the sweeper read active leases only.
CREATE INDEX resource_leases_active ON resource_leases (tenant, resource, expires_at) WHERE state = 'active';
CREATE INDEX resource_leases_expiry ON resource_leases (expires_at) WHERE state = 'active';
-- A holder's live leases (its concurrent-lease quota, VERIFY_ALL by holder).
CREATE INDEX resource_leases_holder ON resource_leases (tenant, holder) WHERE state = 'active';

-- Lease time granted to a holder on a resource in the current quota window
-- (fixed windows), so the squatting quota costs one row, not a history scan.
CREATE TABLE resource_holds (
    tenant       TEXT    NOT NULL,
    holder       TEXT    NOT NULL,
    resource     TEXT    NOT NULL,
    window_start INTEGER NOT NULL,
    held_us      INTEGER NOT NULL,
    PRIMARY KEY (tenant, holder, resource)
);

CREATE TABLE resource_lease_events (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant          TEXT    NOT NULL,
    lease_id        TEXT    NOT NULL,
    resource        TEXT    NOT NULL,
    predicate       TEXT    NOT NULL,
    holder          TEXT    NOT NULL,
    kind            TEXT    NOT NULL,
    at              INTEGER NOT NULL,
    prev_expires_at INTEGER,
    expires_at      INTEGER NOT NULL
);
CREATE INDEX resource_lease_events_lease ON resource_lease_events (tenant, lease_id, seq);
CREATE INDEX resource_lease_events_resource ON resource_lease_events (tenant, resource, seq);
