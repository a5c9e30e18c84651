-- The wide row: the gate's tasks table as migrated, 20,000 queued tasks (run.sh).
DROP SCHEMA IF EXISTS sp CASCADE; CREATE SCHEMA sp; SET search_path = sp;
CREATE TABLE tasks (LIKE public.tasks INCLUDING DEFAULTS);
ALTER TABLE tasks ADD PRIMARY KEY (seq); ALTER TABLE tasks ADD UNIQUE (id);
CREATE INDEX ON tasks (tenant, task_type, state, completed_at) WHERE completed_at IS NOT NULL;
CREATE UNIQUE INDEX ON tasks (tenant, created_by, recipient, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX ON tasks (lease_id) WHERE lease_id <> '' AND strpos(lease_id, '.') = 0;
CREATE INDEX ON tasks (lease_expires_at) WHERE state = 'leased';
CREATE INDEX tr ON tasks (tenant, task_type, priority DESC, seq) WHERE state = 'queued';
CREATE INDEX ON tasks (tenant, state, task_type, seq);
INSERT INTO tasks (seq, id, tenant, task_type, created_by, recipient, state, priority, params, created_at, updated_at, available_at, max_retries, assign_receipt)
SELECT g, 'T-01JQZ' || lpad(g::text, 21, '0'), 'default', 'bench', 'agent.bench', 'bench', 'queued', 0, '{"n":1}', 1764600000000000+g, 1764600000000000+g, 1764600000000000+g, 3, 'R-01JQZ' || lpad(g::text, 21, '0') FROM generate_series(1, 20000) g;
VACUUM ANALYZE tasks; CHECKPOINT;
