-- Schedules (issue 39): recurring tasks fired from a cron expression in a
-- time zone or every interval_seconds. next_fire_at is the next fire the
-- gate owes; the firer claims due rows (FOR UPDATE SKIP LOCKED), enqueues
-- their tasks and advances next_fire_at in one transaction, so each fire is
-- taken by one host.
CREATE TABLE schedules (
    id               text    NOT NULL PRIMARY KEY,
    tenant           text    NOT NULL,
    owner            text    NOT NULL,
    name             text    NOT NULL,
    cron             text    NOT NULL DEFAULT '',
    timezone         text    NOT NULL DEFAULT '',
    interval_seconds bigint  NOT NULL DEFAULT 0,
    anchor_at        bigint  NOT NULL,
    template         text    NOT NULL,
    missed_policy    text    NOT NULL,
    missed_cap       integer NOT NULL DEFAULT 0,
    grace_seconds    integer NOT NULL,
    paused           boolean NOT NULL DEFAULT false,
    next_fire_at     bigint  NOT NULL,
    last_fire_at     bigint,
    fires            bigint  NOT NULL DEFAULT 0,
    created_at       bigint  NOT NULL,
    updated_at       bigint  NOT NULL
);
CREATE UNIQUE INDEX schedules_owner_name ON schedules (tenant, owner, name);
CREATE INDEX schedules_tenant ON schedules (tenant, id);
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE NOT paused;
