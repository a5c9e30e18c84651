-- A receipt's dedupe key belongs to the principal that used it (issue 37):
-- one agent reusing another's key gets a receipt of its own, never the
-- other's, and does not stop the other's from being written. The unique
-- index moves from (tenant, dedupe_key) to (tenant, dedupe_key, from_p);
-- lookups by (tenant, dedupe_key), which the gate's own keys (complete:,
-- fail:, email) use, still read its prefix. The rows stay as they are:
-- dedupe_key is covered by each receipt's hash, and keys unique per tenant
-- are unique per issuer too.
DROP INDEX IF EXISTS receipts_dedupe;
CREATE UNIQUE INDEX receipts_dedupe ON receipts (tenant, dedupe_key, from_p) WHERE dedupe_key <> '';
