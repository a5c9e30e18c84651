-- The TTL a lease was granted with: a heartbeat without extend_lease_seconds
-- extends the lease by it (KLIS-3 §3.2).
ALTER TABLE tasks ADD COLUMN lease_seconds INTEGER NOT NULL DEFAULT 0;
