-- Resource leases (seed 003, KLIS-3): temporary intents on named resources,
-- and their audit trail. Times are microseconds since the epoch (server clock).
CREATE TABLE resource_leases (
    seq          bigserial PRIMARY KEY,
    id           text    NOT NULL UNIQUE,
    tenant       text    NOT NULL,
    resource     text    NOT NULL,
    predicate    text    NOT NULL,
    holder       text    NOT NULL,
    state        text    NOT NULL,
    manifest_id  text    NOT NULL,
    priority_at  bigint  NOT NULL,
    acquired_at  bigint  NOT NULL,
    expires_at   bigint  NOT NULL,
    ttl_ms       bigint  NOT NULL,
    ended_at     bigint,
    restarting   boolean NOT NULL DEFAULT false,
    grace_used   boolean NOT NULL DEFAULT false,
    task_id      text    NOT NULL DEFAULT ''
);
-- Conflict checks and the sweeper read active leases only.
CREATE INDEX resource_leases_active ON resource_leases (tenant, resource, expires_at) WHERE state = 'active';
CREATE INDEX resource_leases_expiry ON resource_leases (expires_at) WHERE state = 'active';
-- A holder's live leases (its concurrent-lease quota, VERIFY_ALL by holder).
CREATE INDEX resource_leases_holder ON resource_leases (tenant, holder) WHERE state = 'active';

-- Lease time granted to a holder on a resource in the current quota window
-- (fixed windows), so the squatting quota costs one row, not a history scan.
CREATE TABLE resource_holds (
    tenant       text    NOT NULL,
    holder       text    NOT NULL,
    resource     text    NOT NULL,
    window_start bigint NOT NULL,
    held_us      bigint NOT NULL,
    PRIMARY KEY (tenant, holder, resource)
);

CREATE TABLE resource_lease_events (
    seq             bigserial PRIMARY KEY,
    tenant          text    NOT NULL,
    lease_id        text    NOT NULL,
    resource        text    NOT NULL,
    predicate       text    NOT NULL,
    holder          text    NOT NULL,
    kind            text    NOT NULL,
    at              bigint  NOT NULL,
    prev_expires_at bigint,
    expires_at      bigint  NOT NULL
);
CREATE INDEX resource_lease_events_lease ON resource_lease_events (tenant, lease_id, seq);
CREATE INDEX resource_lease_events_resource ON resource_lease_events (tenant, resource, seq);
