#!/usr/bin/env python3
"""The soak's abusive clients, and its check of the live data afterwards.

    abuse.py run URL SECS      abusive clients, all at once, for SECS seconds
    abuse.py verify URL SEED   reads every row back (after the load)

`run` starts one or more threads per kind of abuse, each from its own
loopback address (127.0.0.1 is left to wrk, which takes every one of the 256
connections the server allows one address). Each counts the answers it gets
by status; an answer outside the refusals its abuse should earn (or a socket
error where an answer was due) is a surprise. It prints one line per client
and exits 1 on any surprise, or if a client never got an answer at all.

`verify` pages through the Item table as the writer and checks every row as
`burrow-soak check` checks the file, printing the same figures
(`rows=N added=M qty_sum=S bad=B`) for the two to be compared.

Python 3 standard library only.
"""

import collections
import json
import os
import random
import re
import select
import socket
import sys
import threading
import time
import urllib.parse

WRITER = "Authorization: Bearer soak-writer-token\r\n"
READER = "Authorization: Bearer soak-reader-token\r\n"

HOST = "127.0.0.1"
PORT = 0
DEADLINE = 0.0


class Client:
    """One kind of abuse: its counts, its surprises, its own address(es)."""

    def __init__(self, name, expected):
        self.name = name
        self.expected = set(expected)
        self.counts = collections.Counter()
        self.surprises = []
        self.lock = threading.Lock()

    def count(self, what, detail=""):
        with self.lock:
            self.counts[what] += 1
            if what not in self.expected and not str(what).startswith("note:"):
                self.counts["surprises"] += 1
                if len(self.surprises) < 5:
                    self.surprises.append(f"{what} {detail}".strip())

    def answered(self):
        return sum(v for k, v in self.counts.items() if isinstance(k, int))

    def report(self):
        parts = " ".join(f"{k}:{v}" for k, v in sorted(self.counts.items(), key=str))
        line = f"abuse {self.name}: {parts or 'nothing'}"
        if self.surprises:
            line += " | first surprises: " + "; ".join(self.surprises)
        return line


def connect(src, timeout=10.0):
    return socket.create_connection((HOST, PORT), timeout=timeout, source_address=(src, 0))


def head(method, path, auth="", extra=""):
    """A request head alone: its body, if any, is the caller's to send."""
    return f"{method} {path} HTTP/1.1\r\nHost: soak\r\n{auth}{extra}\r\n".encode()


def request(method, path, auth="", body=b"", extra=""):
    if isinstance(body, str):
        body = body.encode()
    head = f"{method} {path} HTTP/1.1\r\nHost: soak\r\n{auth}{extra}"
    if body or method in ("POST", "PUT"):
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


class Reader:
    """Reads responses from a socket; `None` when the server closed it."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError
        self.buf += chunk

    def response(self):
        try:
            while b"\r\n\r\n" not in self.buf:
                self._fill()
            head, _, self.buf = self.buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            n = int(headers.get("content-length", "0"))
            while len(self.buf) < n:
                self._fill()
            body, self.buf = self.buf[:n], self.buf[n:]
            return status, headers, body
        except EOFError:
            return None


def exchange(client, src, req, conn=None, expect=None):
    """Sends one request and counts its answer (a status outside `expect`,
    when given, as a surprise, even one the client expects of its other
    requests); returns the connection to reuse (None once the server closed
    it)."""
    try:
        if conn is None:
            sock = connect(src)
            conn = Reader(sock)
        conn.sock.sendall(req)
        r = conn.response()
    except (OSError, ValueError) as e:
        client.count("socket-error", repr(e))
        close(conn)
        return None
    if r is None:
        client.count("closed-without-answer")
        close(conn)
        return None
    status, headers, _ = r
    client.count(status if expect is None or status in expect else f"{status}-here")
    if headers.get("connection", "").lower() == "close":
        close(conn)
        return None
    return conn


def close(conn):
    if conn is not None:
        try:
            conn.sock.close()
        except OSError:
            pass


def running():
    return time.monotonic() < DEADLINE


def cycle(client, src, reqs, pause):
    """Sends (request, wanted statuses) pairs in turn on one kept connection
    (a new one whenever the server closed it) until the deadline."""
    conn = None
    i = 0
    while running():
        req, want = reqs[i % len(reqs)]
        conn = exchange(client, src, req, conn, want)
        i += 1
        time.sleep(pause)
    close(conn)


# --- slow bodies and heads (slowloris) -------------------------------------


def slow_trickler(client, src, part):
    """Announces a 1 MiB body (or a head) and trickles a byte every half
    second: the server must answer 408 once 30 s have passed."""
    while running():
        try:
            sock = connect(src, timeout=45)
            if part == "body":
                sock.sendall(head("POST", "/root/Item", WRITER, "Content-Length: 1048576\r\n"))
                prefix = b""
            else:
                prefix = b"GET /root/Item/1 HTTP/1.1\r\nHost: soak\r\n" + WRITER.encode() + b"X-Slow: "
            conn = Reader(sock)
            sent = 0
            start = time.monotonic()
            answered = None
            while answered is None:
                if not running():
                    client.count("note:cut-at-end")
                    break
                r, _, _ = select.select([sock], [], [], 0.5)
                if r:
                    answered = conn.response()
                    client.count(answered[0] if answered else "closed-without-answer")
                    if answered and time.monotonic() - start < 25:
                        client.count("note:answered-early", f"after {time.monotonic() - start:.1f}s")
                    break
                try:
                    if prefix and sent < len(prefix):
                        sock.sendall(prefix[sent : sent + 64])
                        sent += 64
                    else:
                        sock.sendall(b"x")
                except OSError:
                    # Closed by the server while we wrote: read its answer.
                    pass
            sock.close()
        except (OSError, ValueError) as e:
            client.count("socket-error", repr(e))
            time.sleep(0.5)


def body_refusals(client, src):
    """Bodies refused from the head: anonymous (401), too large (413),
    chunked (411). Their bodies never arrive."""
    variants = [
        (head("POST", "/root/Item", "", "Content-Length: 1048576\r\n"), {401}),
        (head("POST", "/root/Item", WRITER, "Content-Length: 104857600\r\n"), {413}),
        (head("POST", "/root/Item", WRITER, "Transfer-Encoding: chunked\r\n"), {411}),
    ]
    i = 0
    while running():
        req, want = variants[i % len(variants)]
        i += 1
        exchange(client, src, req + b'{"Name":', None, want)
        time.sleep(0.01)


# --- transactions ------------------------------------------------------------


def begins(client, src):
    """BEGIN without credentials (401) and by the read-only user (403)."""
    reqs = [
        (request("BEGIN", "/root"), {401}),
        (request("BEGIN", "/root", READER), {403}),
        (request("BEGIN", "/root/Item", READER), {403}),
        (request("BEGIN", "/root/Item"), {401}),
    ]
    cycle(client, src, reqs, 0.002)


# --- logins ------------------------------------------------------------------


def bearer_logins(client, base, n_addresses):
    """Wrong passwords for real and unknown names, from many addresses:
    401 while checks run, 429 once a name or address is throttled, 503 when
    every password check is taken."""
    i = 0
    while running():
        src = f"127.0.{base}.{1 + i % n_addresses}"
        name = random.choice(["writer", "reader", f"nobody{i % 97}"])
        body = json.dumps({"userName": name, "password": f"wrong{i}"})
        exchange(client, src, request("POST", "/root/auth", "", body, "Connection: close\r\n"))
        i += 1
        time.sleep(0.005)


def mormot_logins(client, base, n_addresses):
    """mORMot's two-step login with a wrong proof: the nonce is public (200),
    the proof is refused (401, 429 or 503)."""
    i = 0
    while running():
        src = f"127.0.{base}.{1 + i % n_addresses}"
        name = random.choice(["writer", "reader", f"ghost{i % 89}"])
        q = urllib.parse.urlencode({"username": name})
        exchange(client, src, request("GET", f"/root/auth?{q}", "", extra="Connection: close\r\n"), None, {200, 429, 503})
        proof = "%064x" % random.getrandbits(256)
        q = urllib.parse.urlencode({"username": name, "password": proof, "clientnonce": "%064x" % i})
        exchange(client, src, request("GET", f"/root/auth?{q}", "", extra="Connection: close\r\n"), None, {401, 429, 503})
        i += 1
        time.sleep(0.005)


# --- WHERE clauses -----------------------------------------------------------


def deep_wheres(client, src):
    """Nesting far past the 64 levels allowed: 400 naming the bound; 413
    when the clause does not even fit in a request head. A DELETE with one
    (as the writer) must delete nothing: the check afterwards counts rows."""
    parens = "(" * 7000 + "ID=1" + ")" * 7000
    nots = "NOT " * 20000 + "ID=1"
    reqs = [
        (request("GET", "/root/Item?where=" + parens, READER), {400}),
        (request("GET", "/root/Item?where=" + nots.replace(" ", "%20"), READER), {413}),
        (request("GET", "/root", READER, "SELECT * FROM Item WHERE " + nots), {400}),
        (request("GET", "/root", READER, "SELECT * FROM Item WHERE " + "(" * 50000 + "ID=1" + ")" * 50000), {400}),
        (request("DELETE", "/root/Item?where=" + parens, WRITER), {400}),
        (request("GET", "/root", READER, "SELECT ID FROM Item WHERE " + " OR ".join(f"ID={k}" for k in range(1, 2000))), {400}),
    ]
    cycle(client, src, reqs, 0.01)


def in_lists(client, src):
    """An IN list past the 10,000 bound values (400), one inside it (200,
    5,000 rows), and one in a URL too long for a head (413)."""
    big = "SELECT ID FROM Item WHERE ID IN (" + ",".join(str(k) for k in range(1, 20001)) + ")"
    fair = "SELECT ID FROM Item WHERE ID IN (" + ",".join(str(k) for k in range(1, 5001)) + ")"
    url = "/root/Item?where=ID%20IN%20(" + ",".join(str(k) for k in range(1, 8001)) + ")"
    reqs = [
        request("GET", "/root", READER, big),
        request("GET", "/root", READER, fair),
        request("GET", url, READER),
    ]
    expect = [400, 200, 413]
    conn = None
    i = 0
    while running():
        req, want = reqs[i % len(reqs)], expect[i % len(reqs)]
        i += 1
        try:
            if conn is None:
                conn = Reader(connect(src))
            conn.sock.sendall(req)
            r = conn.response()
        except (OSError, ValueError) as e:
            client.count("socket-error", repr(e))
            close(conn)
            conn = None
            continue
        if r is None:
            client.count("closed-without-answer")
            close(conn)
            conn = None
            continue
        status, headers, body = r
        client.count(status if status == want else f"{status}-here")
        if req is reqs[1] and status == 200:
            rows = len(re.findall(rb'"ID"', body)) if body.startswith(b"[") else json.loads(body).get("rowCount", -1)
            if rows != 5000:
                client.count("wrong-row-count", str(rows))
        if headers.get("connection", "").lower() == "close":
            close(conn)
            conn = None
        time.sleep(0.01)
    close(conn)


# --- pipelining --------------------------------------------------------------


def pipelines(client, src, seed):
    """2,000 list requests pipelined on one connection, read only after a
    pause (every answer 200); every other round the client reads nothing and
    closes, leaving the server with answers nobody reads."""
    rnd = 0
    while running():
        rnd += 1
        reqs = b"".join(
            request("GET", f"/root/Item?where=ID%3E%3D{k}%20AND%20ID%3C{k + 10}", READER)
            for k in (random.randint(1, seed - 10) for _ in range(2000))
        )
        try:
            sock = connect(src, timeout=30)
        except OSError as e:
            client.count("socket-error", repr(e))
            time.sleep(0.5)
            continue
        sender = threading.Thread(target=send_quietly, args=(sock, reqs))
        sender.start()
        if rnd % 2 == 0:
            time.sleep(0.5)
            client.count("note:abandoned-pipelines")
            sock.close()
            sender.join()
            continue
        time.sleep(1)
        conn = Reader(sock)
        for _ in range(2000):
            try:
                r = conn.response()
            except (OSError, ValueError) as e:
                client.count("socket-error", repr(e))
                break
            if r is None:
                client.count("closed-without-answer")
                break
            client.count(r[0])
        sender.join()
        sock.close()


def send_quietly(sock, data):
    try:
        sock.sendall(data)
    except OSError:
        pass


# --- connections from one address --------------------------------------------


def conn_floods(client, src):
    """300 connections at once from one address: at most 256 are served
    (200), the others are refused with 503 and closed."""
    while running():
        socks = []
        for _ in range(300):
            try:
                socks.append(connect(src, timeout=10))
            except OSError as e:
                client.count("socket-error", repr(e))
        time.sleep(0.3)
        served = 0
        for s in socks:
            conn = Reader(s)
            try:
                readable, _, _ = select.select([s], [], [], 0)
                if not readable:
                    s.sendall(request("GET", "/root/timestamp"))
                r = conn.response()
            except OSError as e:
                client.count("socket-error", repr(e))
                continue
            if r is None:
                client.count("closed-without-answer")
                continue
            client.count(r[0])
            served += r[0] == 200
        if served > 256:
            client.count("over-256-served", str(served))
        time.sleep(1)
        for s in socks:
            s.close()
        time.sleep(0.5)


def run(url, secs):
    global HOST, PORT, DEADLINE
    u = urllib.parse.urlparse(url)
    HOST, PORT = u.hostname, u.port
    DEADLINE = time.monotonic() + secs
    seed = 10000
    clients = {
        "slow-bodies": Client("slow-bodies", [408]),
        "slow-heads": Client("slow-heads", [408]),
        "body-refusals": Client("body-refusals", [401, 411, 413]),
        "begins": Client("begins", [401, 403]),
        "bearer-logins": Client("bearer-logins", [401, 429, 503]),
        "mormot-logins": Client("mormot-logins", [200, 401, 429, 503]),
        "deep-wheres": Client("deep-wheres", [400, 413]),
        "in-lists": Client("in-lists", [200, 400, 413]),
        "pipelines": Client("pipelines", [200]),
        "conn-floods": Client("conn-floods", [200, 503]),
    }
    threads = []
    # SOAK_ABUSE=name,name runs only those clients (to find which one
    # causes what a run shows).
    only = {n for n in os.environ.get("SOAK_ABUSE", "").split(",") if n}
    if only - clients.keys():
        raise SystemExit(f"abuse: unknown client(s) {sorted(only - clients.keys())}")
    selected = {k: c for k, c in clients.items() if not only or k in only}

    def start(target, c, *args):
        if c.name not in selected:
            return
        t = threading.Thread(target=target, args=(c, *args), daemon=True)
        t.start()
        threads.append(t)

    for _ in range(8):
        start(slow_trickler, clients["slow-bodies"], "127.0.0.2", "body")
        start(slow_trickler, clients["slow-heads"], "127.0.0.2", "head")
    start(body_refusals, clients["body-refusals"], "127.0.0.3")
    start(begins, clients["begins"], "127.0.0.4")
    for base in (1, 2):
        start(bearer_logins, clients["bearer-logins"], base, 40)
    start(mormot_logins, clients["mormot-logins"], 3, 40)
    start(deep_wheres, clients["deep-wheres"], "127.0.0.5")
    start(in_lists, clients["in-lists"], "127.0.0.6")
    start(pipelines, clients["pipelines"], "127.0.0.7", seed)
    start(conn_floods, clients["conn-floods"], "127.0.0.8")
    for t in threads:
        t.join(timeout=max(0.0, DEADLINE - time.monotonic()) + 60)
    failed = False
    for c in selected.values():
        print(c.report())
        if c.counts["surprises"]:
            failed = True
    # The slow clients need 30 s for their 408: in a shorter run, none.
    for c in selected.values():
        if c.answered() == 0 and not (c.name.startswith("slow-") and secs < 35):
            print(f"abuse {c.name}: never answered")
            failed = True
    alive = [t for t in threads if t.is_alive()]
    if alive:
        print(f"abuse: {len(alive)} client thread(s) still blocked after the end")
        failed = True
    return 1 if failed else 0


def verify(url, seed):
    import http.client

    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60, source_address=("127.0.0.9", 0))
    auth = {"Authorization": "Bearer soak-writer-token"}

    def get(path, body=None):
        conn.request("GET", path, body=body, headers=auth)
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise SystemExit(f"verify: GET {path} answered {r.status}: {data[:200]!r}")
        return json.loads(data)

    server_count = get("/root", "SELECT count(*) FROM Item")[0]["count(*)"]
    rows = added = qty_sum = bad = 0
    names = set()
    last = 0
    writer_name = re.compile(r"w\d+-\d+-\d+\Z")
    while True:
        page = get(f"/root/Item?where=ID%3E{last}&sort=ID&results=2000")
        if isinstance(page, dict):
            page = [] if page.get("rowCount") == 0 else page
        if not page:
            break
        for row in page:
            rows += 1
            last = row["ID"]
            qty_sum += row["Qty"]
            ok = row["Note"] == f"q{row['Qty']}"
            if row["ID"] <= seed:
                ok = ok and row["Name"] == f"seed{row['ID']}"
            else:
                added += 1
                ok = ok and bool(writer_name.match(row["Name"])) and row["Name"] not in names
                names.add(row["Name"])
            if not ok:
                bad += 1
                if bad <= 10:
                    print(f"verify: bad row {row}", file=sys.stderr)
    print(f"rows={rows} added={added} qty_sum={qty_sum} bad={bad} server_count={server_count}")
    return 0 if bad == 0 and rows == server_count and rows - added == seed else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "run":
        sys.exit(run(sys.argv[2], float(sys.argv[3])))
    if len(sys.argv) == 4 and sys.argv[1] == "verify":
        sys.exit(verify(sys.argv[2], int(sys.argv[3])))
    sys.exit(__doc__)
