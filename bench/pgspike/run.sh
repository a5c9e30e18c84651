#!/usr/bin/env bash
# run.sh measures, in the PostgreSQL server alone, what a task cycle's
# task-row statements cost on today's one wide tasks row against a narrow
# queue row beside it (issue 40 item 1; docs/performance.md, "A narrow
# queue row on PostgreSQL"). It needs a database a gate has migrated (the
# scripts copy its public.tasks):
#
#   createdb -h 127.0.0.1 -U postgres spike
#   bin/gate serve --data /tmp/spike --db 'postgres://postgres@127.0.0.1:5432/spike?sslmode=disable'   # stop it once started
#   bench/pgspike/run.sh [ROUNDS]
#
# Each round builds 20,000 queued tasks in schema sp (dropped and made
# again), then claims and completes them 50 at a time, a commit a batch,
# and prints each statement's server time a task.
set -euo pipefail
cd "$(dirname "$0")"
db=${PGSPIKE_DB:-spike}
for i in $(seq "${1:-3}"); do
	for v in wide narrow; do
		psql -h 127.0.0.1 -U postgres -d "$db" -q -f "$v.sql" >/dev/null 2>&1
		lsn=$(psql -h 127.0.0.1 -U postgres -d "$db" -Atc 'SELECT pg_current_wal_lsn()')
		line=$(psql -h 127.0.0.1 -U postgres -d "$db" -q -f "${v}_run.sql" 2>&1 | grep -o "per task.*")
		wal=$(psql -h 127.0.0.1 -U postgres -d "$db" -Atc "SELECT round(pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn') / 20000)")
		echo "$v: $line; WAL $wal bytes a task"
	done
done
psql -h 127.0.0.1 -U postgres -d "$db" -q -c 'DROP SCHEMA IF EXISTS sp CASCADE' 2>/dev/null
