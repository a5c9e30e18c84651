-- Resource sessions (issue 43 item 4): a holder groups leases under one
-- heartbeat; ending or losing the session ends them all. Times are
-- microseconds since the epoch (server clock).
CREATE TABLE resource_sessions (
    id         TEXT    PRIMARY KEY,
    tenant     TEXT    NOT NULL,
    holder     TEXT    NOT NULL,
    state      TEXT    NOT NULL,
    ttl_ms     INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    ended_at   INTEGER
);
-- The leases granted in a session.
CREATE TABLE resource_session_leases (
    tenant     TEXT NOT NULL,
    session_id TEXT NOT NULL,
    lease_id   TEXT NOT NULL,
    PRIMARY KEY (tenant, session_id, lease_id)
);
CREATE INDEX resource_session_leases_lease ON resource_session_leases (tenant, lease_id);
