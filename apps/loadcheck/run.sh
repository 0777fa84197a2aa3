#!/usr/bin/env bash
# Load check of the HTTP server: wrk on GET /root/Sample/{ID}, 256 connections.
#
#   apps/loadcheck/run.sh [seconds=60] [connections=256] [execution=auto|inline|pool]
#
# Needs wrk (Debian: apt-get install -y wrk). Starts the `serve` example of
# burrow-http on 127.0.0.1 with 10,000 rows in in-memory SQLite, records its
# resident memory before and after, runs wrk with latency percentiles, and
# stops the server. Traffic stays on the loopback interface.
set -euo pipefail
secs=${1:-60}
conns=${2:-256}
exec_mode=${3:-auto}
rows=10000
port=${PORT:-18080}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install -y wrk)" >&2; exit 1; }
cargo build --release -p burrow-http --example serve --manifest-path "$root/Cargo.toml" >&2
target=${CARGO_TARGET_DIR:-$root/target}
fifo=$(mktemp -u)
mkfifo "$fifo"
"$target/release/examples/serve" "127.0.0.1:$port" "$rows" "$exec_mode" <"$fifo" >/dev/null &
pid=$!
exec 3>"$fifo"
rm -f "$fifo"
trap 'exec 3>&-; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 200); do
  curl -fs "http://127.0.0.1:$port/root/timestamp" >/dev/null 2>&1 && break
  sleep 0.05
done
rss() { awk '/VmRSS/ {print $2 " kB"}' "/proc/$pid/status"; }
echo "execution: $exec_mode, rows: $rows, connections: $conns, duration: ${secs}s"
# Warm up for 2 seconds, so that "before" is the steady state.
ROWS=$rows wrk -t2 -c"$conns" -d2s -s "$here/wrk-by-id.lua" "http://127.0.0.1:$port" >/dev/null
echo "RSS before: $(rss)"
ROWS=$rows wrk -t2 -c"$conns" -d"${secs}s" --latency -s "$here/wrk-by-id.lua" "http://127.0.0.1:$port"
echo "RSS after: $(rss)"
