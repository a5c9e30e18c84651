-- Resource sessions (issue 43 item 4): a holder groups leases under one
-- heartbeat; ending or losing the session ends them all. Times are
-- microseconds since the epoch (server clock).
CREATE TABLE resource_sessions (
    id         text    PRIMARY KEY,
    tenant     text    NOT NULL,
    holder     text    NOT NULL,
    state      text    NOT NULL,
    ttl_ms     bigint  NOT NULL,
    created_at bigint  NOT NULL,
    expires_at bigint  NOT NULL,
    ended_at   bigint 
);
-- The leases granted in a session.
CREATE TABLE resource_session_leases (
    tenant     text NOT NULL,
    session_id text NOT NULL,
    lease_id   text NOT NULL,
    PRIMARY KEY (tenant, session_id, lease_id)
);
CREATE INDEX resource_session_leases_lease ON resource_session_leases (tenant, lease_id);
