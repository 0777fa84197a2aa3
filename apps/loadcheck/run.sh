#!/usr/bin/env bash
# Load check of the HTTP server: wrk on GET /root/Sample/{ID}, 256 connections.
#
#   apps/loadcheck/run.sh [seconds=60] [connections=256] [execution=auto|inline|pool]
#
# Needs wrk (Debian: apt-get install -y wrk). Starts the `serve` example of
# burrow-http on 127.0.0.1 with 10,000 rows in in-memory SQLite, records its
# resident memory before and after, runs wrk with latency percentiles, and
# stops the server. Traffic stays on the loopback interface.
#
# The server binds a free port of its choosing (port 0) and prints its URL;
# set PORT to ask for one. Before and after every wrk run the script checks
# that the server it started is alive and is the process listening on that
# port, so that it never measures some other program; any failure (server not
# starting, dying, wrk errors, non-2xx answers) exits non-zero.
set -euo pipefail
secs=${1:-60}
conns=${2:-256}
exec_mode=${3:-auto}
rows=10000
port=${PORT:-0}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

die() {
  echo "loadcheck: $*" >&2
  exit 1
}
# shellcheck source=../../scripts/server-proc.sh
source "$root/scripts/server-proc.sh"

command -v wrk >/dev/null || die "wrk is not installed (apt-get install -y wrk)"
command -v curl >/dev/null || die "curl is not installed (apt-get install -y curl)"
cargo build --release -p burrow-http --example serve --manifest-path "$root/Cargo.toml" >&2
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d)
# The server serves until SIGTERM, then shuts down gracefully.
"$target/release/examples/serve" "127.0.0.1:$port" "$rows" "$exec_mode" \
  </dev/null >"$work/out" 2>"$work/err" &
pid=$!

cleanup() {
  local status=$?
  # A graceful shutdown first, then the server is stopped.
  stop_server 10 || status=1
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

wait_for_url

# Runs wrk, shows its report, and fails on errors it only reports.
run_wrk() {
  local out="$work/wrk"
  ROWS=$rows wrk -t2 -c"$conns" "$@" -s "$here/wrk-by-id.lua" "$base" >"$out" ||
    die "wrk failed: $(cat "$out")"
  grep -q ' requests in ' "$out" || die "wrk reported no requests: $(cat "$out")"
  if grep -q '^ *0 requests in ' "$out"; then die "wrk completed no request: $(cat "$out")"; fi
  if grep -q 'Non-2xx or 3xx responses' "$out"; then die "the server answered errors: $(cat "$out")"; fi
  if grep -q 'Socket errors: connect [1-9]' "$out"; then die "wrk could not connect: $(cat "$out")"; fi
}

check_server "before the run"
curl -fsS "$base/root/timestamp" >/dev/null || server_failed "does not answer $base/root/timestamp"
echo "execution: $exec_mode, rows: $rows, connections: $conns, duration: ${secs}s, port: $port"
# Warm up for 2 seconds, so that "before" is the steady state.
run_wrk -d2s
check_server "after the warm-up"
echo "RSS before: $(rss_kb) kB"
run_wrk -d"${secs}s" --latency
cat "$work/wrk"
check_server "after the run"
echo "RSS after: $(rss_kb) kB"
