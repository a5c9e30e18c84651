-- A narrow queue row (state, availability, lease) beside the wide task row, 20,000 queued tasks (run.sh).
DROP SCHEMA IF EXISTS sp CASCADE; CREATE SCHEMA sp; SET search_path = sp;
CREATE TABLE tasks (LIKE public.tasks INCLUDING DEFAULTS);
ALTER TABLE tasks ADD PRIMARY KEY (seq); ALTER TABLE tasks ADD UNIQUE (id);
CREATE INDEX ON tasks (tenant, task_type, state, completed_at) WHERE completed_at IS NOT NULL;
CREATE UNIQUE INDEX ON tasks (tenant, created_by, recipient, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX ON tasks (tenant, state, task_type, seq);
CREATE TABLE queue (seq bigint PRIMARY KEY, tenant text NOT NULL, task_type text NOT NULL, state text NOT NULL, priority int NOT NULL, available_at bigint NOT NULL,
  lease_id text NOT NULL DEFAULT '', worker_id text NOT NULL DEFAULT '', leased_at bigint, lease_expires_at bigint, attempts int NOT NULL DEFAULT 0, lease_count int NOT NULL DEFAULT 0, version bigint NOT NULL DEFAULT 1);
CREATE INDEX ON queue (lease_expires_at) WHERE state = 'leased';
CREATE INDEX ON queue (tenant, task_type, priority DESC, seq) WHERE state = 'queued';
CREATE INDEX ON queue (tenant, state, task_type, seq);
INSERT INTO tasks (seq, id, tenant, task_type, created_by, recipient, state, priority, params, created_at, updated_at, available_at, max_retries, assign_receipt)
SELECT g, 'T-01JQZ' || lpad(g::text, 21, '0'), 'default', 'bench', 'agent.bench', 'bench', 'queued', 0, '{"n":1}', 1764600000000000+g, 1764600000000000+g, 1764600000000000+g, 3, 'R-01JQZ' || lpad(g::text, 21, '0') FROM generate_series(1, 20000) g;
INSERT INTO queue (seq, tenant, task_type, state, priority, available_at) SELECT seq, tenant, task_type, state, priority, available_at FROM tasks;
VACUUM ANALYZE tasks; VACUUM ANALYZE queue; CHECKPOINT;
