#!/usr/bin/env python3
"""Runs wrk over every TFB endpoint of burrow-tfb and, given its binary, of
mORMot2's TFB server (`raw`), alternately in one run, and prints one markdown
table (requests/s, p50/p99 latency, errors, server RSS) plus JSON.

    python3 apps/tfb/bench.py [--mormot /path/to/mormot2/raw] [--rounds 3]

Fixed settings, for a 2-core machine: wrk -t 1 -c 256 -d 5 --latency per
endpoint after a 1 s warm-up; plaintext also pipelined 16 deep (TFB's
pipeline.lua); `queries=20` and `count=20` for the multi-row tests. The
servers run with their defaults for this machine, on port 8080, against TFB's
database (apps/tfb/setup-db.sh). Each cell is the median of the rounds.
Embedded-mode figures (burrow-tfb --db sqlite / memory, the ORM family) are
measured in the same run. Needs wrk (Debian: apt-get install wrk).
"""

import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PORT = 8080

# (family, test, path); "pipelined" is plaintext through pipeline.lua.
ENDPOINTS = [
    ("none", "plaintext", "/plaintext"),
    ("none", "plaintext-pipelined", "/plaintext"),
    ("none", "json", "/json"),
    ("orm", "db", "/db"),
    ("orm", "queries", "/queries?queries=20"),
    ("orm", "cached", "/cached-queries?count=20"),
    ("orm", "updates", "/updates?queries=20"),
    ("orm", "fortunes", "/fortunes"),
    ("raw", "db", "/rawdb"),
    ("raw", "queries", "/rawqueries?queries=20"),
    ("raw", "cached", "/rawcached?count=20"),
    ("raw", "updates", "/rawupdates?queries=20"),
    ("raw", "fortunes", "/rawfortunes"),
    ("async", "db", "/asyncdb"),
    ("async", "queries", "/asyncqueries?queries=20"),
    ("async", "updates", "/asyncupdates?queries=20"),
    ("async", "fortunes", "/asyncfortunes"),
]
DB_TESTS = {"db", "queries", "cached", "updates", "fortunes"}


def port_open():
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", PORT)) == 0


def wait_port(proc, what):
    for _ in range(300):
        if proc.poll() is not None:
            hint = ""
            if what == "mormot":
                # TFB's servers reach PostgreSQL by this host name.
                try:
                    socket.gethostbyname("tfb-database")
                except OSError:
                    hint = ("; it connects to host tfb-database: add "
                            "'127.0.0.1 tfb-database' to /etc/hosts")
            sys.exit(f"{what} exited at start (code {proc.returncode}){hint}")
        if port_open():
            return
        time.sleep(0.1)
    sys.exit(f"{what} does not listen on port {PORT} after 30 s")


def start(cmd, what):
    if port_open():
        sys.exit(f"port {PORT} is already in use: stop what holds it first")
    # stdin stays open: mORMot2's server waits on it for Enter.
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    wait_port(proc, what)
    return proc


def stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except Exception:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for _ in range(100):
        if not port_open():
            return
        time.sleep(0.1)


def rss_kib(pid):
    """Resident memory now and at its peak (VmRSS, VmHWM), in KiB."""
    now = peak = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    now = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1])
    except OSError:
        pass
    return now, peak


UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def ms(text):
    m = re.match(r"([\d.]+)(us|ms|s)$", text)
    return float(m.group(1)) * UNIT[m.group(2)] if m else None


def wrk(args, path, pipelined, duration):
    url = f"http://127.0.0.1:{PORT}{path}"
    cmd = ["wrk", "-t", str(args.wrk_threads), "-c", str(args.connections),
           "-d", f"{duration}s", "--latency", "-H", "Connection: keep-alive"]
    if pipelined:
        cmd += ["-s", os.path.join(HERE, "pipeline.lua"), url, "--", str(args.depth)]
    else:
        cmd.append(url)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60).stdout
    r = {"rps": 0.0, "p50_ms": None, "p99_ms": None, "socket_errors": 0, "non2xx": 0}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m:
        r["rps"] = float(m.group(1))
    m = re.search(r"^\s+50%\s+(\S+)", out, re.M)
    if m:
        r["p50_ms"] = ms(m.group(1))
    m = re.search(r"^\s+99%\s+(\S+)", out, re.M)
    if m:
        r["p99_ms"] = ms(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        r["socket_errors"] = sum(int(x) for x in m.groups())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        r["non2xx"] = int(m.group(1))
    if not r["rps"]:
        r["raw"] = out[-400:]
    return r


def check(path):
    """One request by hand before measuring: None for a 200, else what went
    wrong (the endpoint is then reported as failed, and the run goes on)."""
    try:
        with socket.create_connection(("127.0.0.1", PORT), timeout=10) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
            head = s.recv(65536).decode("utf-8", "replace")
    except OSError as e:
        return f"no answer ({e})"
    if not head.startswith("HTTP/1.1 200"):
        return head.splitlines()[0] if head else "no answer"
    return None


FAILED = {"rps": None, "p50_ms": None, "p99_ms": None, "socket_errors": None, "non2xx": None,
          "rss_kib": None, "rss_peak_kib": None}


def run_server(args, name, cmd, endpoints):
    proc = start(cmd, name)
    results = {}
    try:
        for family, test, path in endpoints:
            problem = check(path)
            if problem:
                results[f"{family}/{test}"] = dict(FAILED, failed=problem)
                print(f"  {name:>16} {family:>5} {test:<20} failed: {problem}", flush=True)
                continue
            pipelined = test == "plaintext-pipelined"
            wrk(args, path, pipelined, 1)  # warm-up: connections, caches
            r = wrk(args, path, pipelined, args.duration)
            r["rss_kib"], r["rss_peak_kib"] = rss_kib(proc.pid)
            results[f"{family}/{test}"] = r
            print(f"  {name:>16} {family:>5} {test:<20} {r['rps']:>12,.0f} req/s", flush=True)
    finally:
        stop(proc)
    return results


def median(runs, key, field):
    vals = [r[key][field] for r in runs if key in r and r[key][field] is not None]
    return statistics.median(vals) if vals else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--burrow", default=os.path.join(ROOT, "target", "release", "burrow-tfb"),
                    help="burrow-tfb binary (default: the release build; built if missing)")
    ap.add_argument("--mormot", help="mORMot2's TFB server binary (ex/techempower-bench/raw.pas)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5, help="seconds per endpoint")
    ap.add_argument("--connections", type=int, default=256)
    ap.add_argument("--wrk-threads", type=int, default=1)
    ap.add_argument("--depth", type=int, default=16, help="pipelining depth for plaintext")
    ap.add_argument("--no-embedded", action="store_true", help="skip the embedded-mode runs")
    ap.add_argument("--only", help="comma-separated families to run (none,orm,raw,async)")
    ap.add_argument("--burrow-args", default="", help="more burrow-tfb options, e.g. '--pg-conns 4'")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    # wrk holds a descriptor per connection: 16,384 need more than the
    # usual soft limit; the servers it starts inherit the raised one too.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (Debian: apt-get install wrk)")
    if not os.path.exists(args.burrow):
        subprocess.run(["cargo", "build", "--release", "-p", "burrow-tfb"], cwd=ROOT, check=True)
    endpoints = ENDPOINTS
    if args.only:
        keep = set(args.only.split(","))
        endpoints = [e for e in ENDPOINTS if e[0] in keep]
    embedded = [e for e in endpoints if e[0] in ("none", "orm")]
    extra = args.burrow_args.split()
    servers = [("burrow", [args.burrow, "--port", str(PORT)] + extra, endpoints)]
    if args.mormot:
        servers.append(("mormot", [args.mormot], endpoints))
    if not args.no_embedded:
        for db in ("sqlite", "memory"):
            servers.append((f"burrow-{db}", [args.burrow, "--port", str(PORT), "--db", db] + extra,
                            embedded))
    print(f"wrk -t {args.wrk_threads} -c {args.connections} -d {args.duration} --latency "
          f"(plaintext pipelined {args.depth} deep), {args.rounds} rounds, medians", flush=True)
    runs = {name: [] for name, _, _ in servers}
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds}", flush=True)
        for name, cmd, eps in servers:
            runs[name].append(run_server(args, name, cmd, eps))
    fields = ("rps", "p50_ms", "p99_ms", "socket_errors", "non2xx", "rss_peak_kib")
    figures = {name: {f"{fam}/{t}": {f: median(rs, f"{fam}/{t}", f) for f in fields}
                      for fam, t, _ in eps}
               for (name, _, eps), rs in zip(servers, runs.values())}
    print()
    head = "| family | test | Burrow req/s | p50 / p99 ms | errors | RSS MiB |"
    sep = "|---|---|---:|---:|---:|---:|"
    if args.mormot:
        head += " mORMot2 req/s | p50 / p99 ms | errors | RSS MiB | Burrow ÷ mORMot2 | target |"
        sep += "---:|---:|---:|---:|---:|---|"
    if not args.no_embedded:
        head += " SQLite req/s | memory req/s |"
        sep += "---:|---:|"
    print(head)
    print(sep)

    def cell(f):
        if f["rps"] is None:
            return " failed | – | – | – |"
        lat = "–" if f["p50_ms"] is None else f"{f['p50_ms']:.2f} / {f['p99_ms']:.2f}"
        errs = (f["socket_errors"] or 0) + (f["non2xx"] or 0)
        rss = (f["rss_peak_kib"] or 0) / 1024
        return f" {f['rps']:,.0f} | {lat} | {errs:.0f} | {rss:.0f} |"

    for fam, t, _ in endpoints:
        key = f"{fam}/{t}"
        b = figures["burrow"][key]
        line = f"| {fam} | {t} |" + cell(b)
        if args.mormot:
            m = figures["mormot"][key]
            ratio = b["rps"] / m["rps"] if b["rps"] and m["rps"] else float("nan")
            target = 1.5 if t in DB_TESTS else 1.2
            mark = "met" if ratio >= target else "short" if ratio == ratio else "–"
            shown = f"{ratio:.2f}" if ratio == ratio else "–"
            line += cell(m) + f" {shown} | ≥ {target} {mark} |"
        if not args.no_embedded:
            for db in ("sqlite", "memory"):
                e = figures[f"burrow-{db}"].get(key)
                line += (" – |" if not e else " failed |" if e["rps"] is None
                         else f" {e['rps']:,.0f} |")
        print(line)
    failures = [f"{name} {key}: {res['failed']}" for name, rs in runs.items() for run in rs
                for key, res in run.items() if res.get("failed")]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args), "figures": figures, "runs": runs}, f, indent=1)
    if failures:
        print("\nEndpoints that failed their check (left out of the medians):")
        for line in failures:
            print(f"- {line}")
    # Burrow failing an endpoint is a bug; the competitor's failures are reported.
    if any(line.startswith("burrow") for line in failures):
        sys.exit(1)


if __name__ == "__main__":
    main()
