# Shell functions for scripts that start a Burrow server and load it
# (apps/loadcheck, apps/soak). Sourced; the caller defines `die`, and sets
# `pid` (the server's process), `work` (a directory holding the server's
# stdout in `out` and stderr in `err`) and `port` once known.

server_failed() {
  die "the server (pid $pid) $1; its output: $(cat "$work/out" "$work/err" 2>/dev/null)"
}

# Waits for the URL the server prints once it serves (a whole first line:
# the URL may be in the middle of being written), then sets url, port and
# base.
wait_for_url() {
  url=
  for _ in $(seq 1 600); do
    kill -0 "$pid" 2>/dev/null || server_failed "exited before serving"
    if [[ $(wc -l <"$work/out") -ge 1 ]]; then
      url=$(head -n1 "$work/out")
      break
    fi
    sleep 0.05
  done
  [[ $url =~ ^http://127\.0\.0\.1:([0-9]+)/root$ ]] ||
    server_failed "printed no URL within 30 s, or an unexpected one: $url"
  port=${BASH_REMATCH[1]}
  base="http://127.0.0.1:$port"
}

# Whether our server is alive and is the process listening on the port: the
# inode of the listening socket in /proc/net/tcp must be one of its open files.
check_server() {
  kill -0 "$pid" 2>/dev/null || server_failed "is not running ($1)"
  local hex inodes fd link
  hex=$(printf '%04X' "$port")
  inodes=$(awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { print $10 }' \
    /proc/net/tcp /proc/net/tcp6)
  [[ -n $inodes ]] || die "nothing listens on port $port ($1)"
  for fd in /proc/"$pid"/fd/*; do
    link=$(readlink "$fd" 2>/dev/null) || continue
    for inode in $inodes; do
      [[ $link == "socket:[$inode]" ]] && return 0
    done
  done
  die "port $port is held by another process, not the server (pid $pid) ($1)"
}

# The server's resident memory, in kB.
rss_kb() {
  local kb
  kb=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status" 2>/dev/null) || server_failed "has no memory figures"
  [[ -n $kb ]] || server_failed "has no memory figures"
  echo "$kb"
}

# Stops the server with SIGTERM (a graceful shutdown), waiting up to $1
# seconds before killing it; fails if it had to be killed or exited non-zero.
stop_server() {
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 $(($1 * 10))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "the server did not stop on SIGTERM within $1 s; killing $pid" >&2
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 1
  fi
  wait "$pid"
}
