-- Fencing tokens (issue 43): every grant of a resource carries a token
-- strictly greater than every earlier grant's of that resource. The last
-- token of each (tenant, resource) lives in a row of its own that no lease
-- expiry, release or purge deletes, so a token never goes backwards.
CREATE TABLE resource_fences (
    tenant   TEXT    NOT NULL,
    resource TEXT    NOT NULL,
    token    INTEGER NOT NULL,
    PRIMARY KEY (tenant, resource)
) WITHOUT ROWID;

ALTER TABLE resource_leases ADD COLUMN fencing_token INTEGER NOT NULL DEFAULT 0;

-- Leases granted before this migration are numbered 1, 2, … per resource in
-- grant order, and each resource's counter starts after its last one.
UPDATE resource_leases SET fencing_token = n.token
FROM (SELECT seq, row_number() OVER (PARTITION BY tenant, resource ORDER BY seq) AS token FROM resource_leases) AS n
WHERE n.seq = resource_leases.seq;

INSERT INTO resource_fences (tenant, resource, token)
SELECT tenant, resource, max(fencing_token) FROM resource_leases GROUP BY tenant, resource;
