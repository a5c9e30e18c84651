-- A schedule whose owner can no longer act stops firing (issue 39): the
-- firer pauses it and says why in paused_reason ('' for a schedule running
-- or paused by a person). The firer looks up the owner's keys by tenant and
-- principal at each pass, hence the index.
ALTER TABLE schedules ADD COLUMN paused_reason TEXT NOT NULL DEFAULT '';
CREATE INDEX api_keys_principal ON api_keys (tenant, principal);
-- Workflow counts by state (GET /v1/admin/stats, asyncgate_workflows) read
-- this index alone.
CREATE INDEX workflows_state ON workflows (tenant, state);
