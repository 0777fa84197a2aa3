#!/usr/bin/env bash
# Soak of the HTTP server: well-formed load and abusive clients at once.
#
#   apps/soak/run.sh [seconds=60]       (or SOAK_SECS=10 for a short run)
#
# Starts `burrow-soak serve` on a SQLite file in a temporary directory (access
# control on: a writer and a read-only user), then runs SOAK_ROUNDS rounds
# (default 2) of: wrk for the duration, 256 connections from 127.0.0.1,
# authenticated as the writer, mixing retrieves, small lists with a WHERE,
# adds and updates (mixed.lua); and, at the same time, the abusive clients of
# abuse.py from other loopback addresses (slow bodies and heads, anonymous and
# read-only BEGINs, login floods, deep WHEREs, huge IN lists, pipelined list
# floods, connection floods from one address).
#
# It fails (exit 1) when the server dies, when a well-formed request gets a
# non-2xx answer or a socket error, when a row read during the load breaks
# the writers' invariant, when an abusive client gets an answer other than
# the refusal it should earn, when the resident memory grows from the end of
# round 1 to the end of the last round by more than half plus 32 MiB (the
# first round sets the allocator's high-water marks: see limits.md, Soak),
# or when the data afterwards is not consistent: every row read back over
# HTTP keeps the invariant, their number is what the server counts and
# within what the writers were told they added (at most one in-flight add
# per connection more), and after a graceful shutdown the file passes
# `PRAGMA integrity_check` and holds the same rows (`burrow-soak check`).
#
# Needs wrk (installed with apt-get if missing), python3 and curl. Traffic
# stays on the loopback interface. PORT asks for a port (default: any free).
set -euo pipefail
secs=${1:-${SOAK_SECS:-60}}
rounds=${SOAK_ROUNDS:-2}
conns=256
seed=10000
port=${PORT:-0}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

die() {
  echo "soak: $*" >&2
  exit 1
}
# shellcheck source=../../scripts/server-proc.sh
source "$root/scripts/server-proc.sh"

if ! command -v wrk >/dev/null; then
  apt-get update && apt-get install -y wrk || die "could not install wrk"
fi
command -v python3 >/dev/null || die "python3 is not installed"
command -v curl >/dev/null || die "curl is not installed"
cargo build --release -p burrow-soak --manifest-path "$root/Cargo.toml" >&2
bin=${CARGO_TARGET_DIR:-$root/target}/release/burrow-soak
work=$(mktemp -d)
db="$work/soak.db"
"$bin" serve "$db" "127.0.0.1:$port" "$seed" </dev/null >"$work/out" 2>"$work/err" &
pid=$!

cleanup() {
  local status=$?
  [[ -n ${abuse_pid:-} ]] && kill "$abuse_pid" 2>/dev/null
  if kill -0 "$pid" 2>/dev/null; then stop_server 15 || status=1; fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

wait_for_url

# Waits until the server has closed every connection from 127.0.0.1 (wrk's
# address): a new wrk run opening its 256 connections while the server has
# not yet seen the previous run's close would be over the per-address limit
# and get 503s the soak would blame on the server.
wait_closed() {
  local hex n
  hex=$(printf '%04X' "$port")
  for _ in $(seq 1 300); do
    # Server-side sockets of the port whose peer is 127.0.0.1 (0100007F),
    # but for TIME_WAIT (06) and the listener (0A).
    n=$(awk -v p=":$hex" 'substr($2, length($2) - 4) == p && substr($3, 1, 8) == "0100007F" &&
      $4 != "06" && $4 != "0A"' /proc/net/tcp | wc -l)
    ((n == 0)) && return 0
    sleep 0.1
  done
  fail "the server kept $n connection(s) from 127.0.0.1 for 30 s after wrk closed them"
}

failures=()
fail() {
  echo "soak: FAIL: $*" >&2
  failures+=("$*")
}

# One wrk run; prints its summary line and adds its adds to `adds`.
adds=0
runs=0
run_wrk() {
  local label=$1 out="$work/wrk-$1"
  shift
  runs=$((runs + 1))
  RUN=$runs SEED=$seed wrk -t2 -c"$conns" --timeout 5s "$@" -s "$here/mixed.lua" "$base" >"$out" 2>&1 ||
    fail "wrk ($label) failed: $(cat "$out")"
  local line
  line=$(grep '^soak-wrk ' "$out") || { fail "wrk ($label) printed no summary: $(cat "$out")"; return; }
  echo "wrk $label: ${line#soak-wrk }"
  [[ $line =~ \ non2xx=0\  ]] || fail "wrk ($label): well-formed requests got non-2xx answers"
  [[ $line =~ \ socket_errors=0\  ]] || fail "wrk ($label): socket errors"
  [[ $line =~ \ bad_rows=0\  ]] || fail "wrk ($label): rows read back broke the invariant"
  [[ $line =~ \ requests=([0-9]+)\  ]] && ((BASH_REMATCH[1] > 0)) || fail "wrk ($label): no request completed"
  [[ $line =~ \ adds=([0-9]+)\  ]] && adds=$((adds + BASH_REMATCH[1]))
}

check_server "before the run"
curl -fsS --interface 127.0.0.9 "$base/root/timestamp" >/dev/null || server_failed "does not answer $base/root/timestamp"
echo "soak: $rounds round(s) of ${secs}s, $conns wrk connections, $seed seed rows, SQLite file $db, port $port"
# Warm up, so that "before" is the steady state of well-formed load alone.
run_wrk warm-up -d2s
rss_before=$(rss_kb)
echo "RSS before: $rss_before kB"
rss_rounds=()
for round in $(seq 1 "$rounds"); do
  wait_closed
  python3 "$here/abuse.py" run "$base/root" "$secs" >"$work/abuse-$round" 2>&1 &
  abuse_pid=$!
  run_wrk "round-$round" -d"${secs}s" --latency
  abuse_status=0
  wait "$abuse_pid" || abuse_status=$?
  abuse_pid=
  sed "s/^/round $round: /" "$work/abuse-$round"
  ((abuse_status == 0)) || fail "round $round: abusive clients met surprises (exit $abuse_status)"
  check_server "after round $round"
  rss_rounds+=("$(rss_kb)")
  echo "RSS after round $round: ${rss_rounds[-1]} kB"
done

first=${rss_rounds[0]}
last=${rss_rounds[-1]}
bound=$((first + first / 2 + 32 * 1024))
echo "RSS: before $rss_before kB, after round 1 $first kB, after round $rounds $last kB (bound $bound kB)"
((last <= bound)) || fail "resident memory grew from $first kB to $last kB between round 1 and round $rounds"

# Data consistency, live: every row read back over HTTP.
live=$(python3 "$here/abuse.py" verify "$base/root" "$seed" 2>&1) || fail "live check: $live"
echo "live check: $live"
[[ $live =~ added=([0-9]+)\  ]] || fail "live check printed no figures"
added=${BASH_REMATCH[1]:-0}
max_added=$((adds + conns * (rounds + 1)))
echo "adds answered 201 to wrk: $adds; rows added: $added (at most $max_added: one add in flight per connection at each wrk run's end)"
((added >= adds && added <= max_added)) || fail "rows added ($added) disagree with the adds wrk saw answered ($adds)"

# A graceful shutdown, then the file itself.
stop_server 15 || fail "the server did not shut down gracefully"
file=$("$bin" check "$db" "$seed" 2>&1) || fail "file check: $file"
echo "file check: $file"
[[ "${live%% server_count=*}" == "${file%% integrity=*}" ]] ||
  fail "the file ($file) does not hold what the server served ($live)"

if ((${#failures[@]})); then
  echo "soak: ${#failures[@]} failure(s):" >&2
  printf '  %s\n' "${failures[@]}" >&2
  exit 1
fi
echo "soak: passed"
