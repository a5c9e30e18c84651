-- One receipt chain per writer instead of one global chain, so writers never
-- wait on one head row. receipts.seq stays the ledger's global order; a
-- receipt's place in its writer's chain is (chain_id, chain_seq), and
-- prev_hash/hash link it within that chain. The chain of the first schema
-- becomes chain 1 (hash version 1: its hashes cover the global seq), closed:
-- new writers register chains of their own (hash version 2).
ALTER TABLE receipts ADD COLUMN chain_id  INTEGER NOT NULL DEFAULT 1;
ALTER TABLE receipts ADD COLUMN chain_seq INTEGER NOT NULL DEFAULT 0;
UPDATE receipts SET chain_seq = seq;

-- The last link of every chain, so a removed tail is detected per chain.
-- Only the chain's writer updates its row.
CREATE TABLE ledger_chains (
    chain_id     INTEGER PRIMARY KEY,
    seq          INTEGER NOT NULL, -- chain_seq of the chain's last receipt, 0 while empty
    hash         TEXT    NOT NULL,
    hash_version INTEGER NOT NULL,
    opened_at    INTEGER NOT NULL
);
INSERT INTO ledger_chains (chain_id, seq, hash, hash_version, opened_at) SELECT 1, seq, hash, 1, 0 FROM ledger_head;
DROP TABLE ledger_head;

-- Checkpoints bind the chains together: each records every non-empty chain's
-- head and is linked to the one before it.
CREATE TABLE ledger_checkpoints (
    id        INTEGER PRIMARY KEY,
    at        INTEGER NOT NULL,
    heads     TEXT    NOT NULL, -- JSON array of {chain_id, seq, hash}
    prev_hash TEXT    NOT NULL,
    hash      TEXT    NOT NULL
);
CREATE TABLE ledger_checkpoint_head (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    checkpoint_id INTEGER NOT NULL,
    hash          TEXT    NOT NULL
);
INSERT INTO ledger_checkpoint_head (id, checkpoint_id, hash) VALUES (1, 0, '');
