#!/bin/sh
# ensure-postgres.sh makes sure a PostgreSQL server answers on 127.0.0.1:5432
# with trust authentication for local TCP connections and a database named
# "test", as the PostgreSQL tests expect (ASYNCGATE_TEST_POSTGRES defaults to
# postgres://postgres@127.0.0.1:5432/test?sslmode=disable). It installs the
# Debian package when the binaries are missing. Idempotent; quiet on success,
# it prints only what it had to do or what went wrong. Needs root (CI).
set -eu

HOST=127.0.0.1
PORT=5432

say() { echo "ensure-postgres: $*" >&2; }

# wait_up waits up to 30 s for the server to answer.
wait_up() {
	i=0
	until pg_isready -q -h "$HOST" -p "$PORT"; do
		i=$((i + 1))
		if [ "$i" -ge 60 ]; then
			say "PostgreSQL did not come up on $HOST:$PORT"
			exit 1
		fi
		sleep 0.5
	done
}

if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
	say "installing postgresql"
	export DEBIAN_FRONTEND=noninteractive
	# Wait for dpkg's lock should another apt run hold it.
	apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
	apt-get -o DPkg::Lock::Timeout=600 install -y -qq postgresql >/dev/null
fi

version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
if [ ! -d "/etc/postgresql/$version/main" ]; then
	say "creating cluster $version/main"
	pg_createcluster --port "$PORT" "$version" main >/dev/null
fi
conf=/etc/postgresql/$version/main

# Trust authentication for local TCP connections (a throwaway CI database).
hba=$conf/pg_hba.conf
if ! grep -Eq '^host[[:space:]]+all[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' "$hba"; then
	say "enabling trust authentication for 127.0.0.1 in $hba"
	tmp=$(mktemp)
	{
		echo "host all all 127.0.0.1/32 trust"
		echo "host all all ::1/128 trust"
		grep -Ev '^host[[:space:]]+all[[:space:]]+all[[:space:]]+(127\.0\.0\.1/32|::1/128)' "$hba" || true
	} >"$tmp"
	cat "$tmp" >"$hba"
	rm -f "$tmp"
	reload=1
fi

if ! pg_isready -q -h "$HOST" -p "$PORT"; then
	say "starting cluster $version/main"
	pg_ctlcluster --skip-systemctl-redirect "$version" main start
	reload=
	wait_up
fi
if [ -n "${reload:-}" ]; then
	pg_ctlcluster --skip-systemctl-redirect "$version" main reload
fi

if ! psql -h "$HOST" -p "$PORT" -U postgres -d postgres -Atqc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1; then
	say "creating database test"
	psql -h "$HOST" -p "$PORT" -U postgres -d postgres -qc "CREATE DATABASE test" >/dev/null
fi

# Room for the tests' connections: packages run at once, each store holds a
# pool, a listener and its writers (two by default), and a multi-host test
# opens several stores. Debian's default of 100 is too few under `make test`
# run twice at once; raising it needs a restart.
want=300
have=$(psql -h "$HOST" -p "$PORT" -U postgres -d postgres -Atqc "SHOW max_connections")
if [ "$have" -lt "$want" ]; then
	say "raising max_connections from $have to $want (restart)"
	psql -h "$HOST" -p "$PORT" -U postgres -d postgres -qc "ALTER SYSTEM SET max_connections = $want" >/dev/null
	pg_ctlcluster --skip-systemctl-redirect "$version" main restart
	wait_up
fi
