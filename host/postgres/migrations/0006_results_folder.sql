-- The database's identity, and whether a gate host has claimed a results
-- folder for it. Every host of one database must use the same results folder
-- (the file channel's); the folder carries a marker file with this id, so a
-- host started with a folder of its own is refused instead of storing
-- results the other hosts cannot reach.
CREATE TABLE gate_identity (
    id                 integer PRIMARY KEY CHECK (id = 1),
    database_id        text    NOT NULL,
    results_claimed_at bigint
);
INSERT INTO gate_identity (id, database_id) VALUES (1, md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text));
