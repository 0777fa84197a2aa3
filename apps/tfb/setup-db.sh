#!/usr/bin/env bash
# Creates TFB's database on a PostgreSQL server: the role benchmarkdbuser
# (password benchmarkdbpass), the database hello_world and its tables.
# Safe to run again. Connects as a superuser: PGHOST, PGPORT and PGUSER
# (default 127.0.0.1, 5432, postgres) as psql reads them.
set -euo pipefail
cd "$(dirname "$0")"
export PGOPTIONS="${PGOPTIONS:--c client_min_messages=warning}"
export PGHOST="${PGHOST:-127.0.0.1}" PGPORT="${PGPORT:-5432}" PGUSER="${PGUSER:-postgres}"
psql -q -v ON_ERROR_STOP=1 -d postgres <<'SQL'
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'benchmarkdbuser') THEN
    CREATE ROLE benchmarkdbuser LOGIN PASSWORD 'benchmarkdbpass';
  END IF;
END $$;
SQL
if [ "$(psql -d postgres -Atc "SELECT 1 FROM pg_database WHERE datname = 'hello_world'")" != 1 ]; then
    psql -q -d postgres -c 'CREATE DATABASE hello_world OWNER benchmarkdbuser'
fi
psql -q -d hello_world -f create-postgres.sql
echo "hello_world ready: $(psql -d hello_world -Atc 'SELECT count(*) FROM world') World rows, $(psql -d hello_world -Atc 'SELECT count(*) FROM fortune') Fortune rows"
