-- Schedules (issue 39): recurring tasks fired from a cron expression in a
-- time zone or every interval_seconds. next_fire_at is the next fire the
-- gate owes; the firer claims due rows, enqueues their tasks and advances
-- next_fire_at in one transaction, so each fire is taken once.
CREATE TABLE schedules (
    id               TEXT    NOT NULL PRIMARY KEY,
    tenant           TEXT    NOT NULL,
    owner            TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    cron             TEXT    NOT NULL DEFAULT '',
    timezone         TEXT    NOT NULL DEFAULT '',
    interval_seconds INTEGER NOT NULL DEFAULT 0,
    anchor_at        INTEGER NOT NULL,
    template         TEXT    NOT NULL,
    missed_policy    TEXT    NOT NULL,
    missed_cap       INTEGER NOT NULL DEFAULT 0,
    grace_seconds    INTEGER NOT NULL,
    paused           INTEGER NOT NULL DEFAULT 0,
    next_fire_at     INTEGER NOT NULL,
    last_fire_at     INTEGER,
    fires            INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
CREATE UNIQUE INDEX schedules_owner_name ON schedules (tenant, owner, name);
CREATE INDEX schedules_tenant ON schedules (tenant, id);
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE paused = 0;
