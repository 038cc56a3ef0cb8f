#!/usr/bin/env python3
"""What a release costs in storage: bytes per release and per cell, per table and per index, on
PostgreSQL and SQLite; WAL bytes per release; and, under concurrent load, how many releases
share one transaction (group commit). Stdlib only; drives the release build over HTTP.

    scripts/research/scale_storage.py                 full run (docs/SCALING.md's figures)
    scripts/research/scale_storage.py --short         fewer releases per d (a smoke test)

Environment: BIN (default $CARGO_TARGET_DIR/release/dirichlet-release), PG (admin URL of the
PostgreSQL server to measure; default postgres://postgres@127.0.0.1:5432/postgres — WAL is
counted cluster-wide, so a server of its own gives clean WAL figures: see docs/SCALING.md),
DIMS (space-separated, default "2 10 100 1000 10000"), BACKENDS (default "postgres sqlite"),
OUT (default target/scale).
Concurrent part: wrk, 64 connections over 64 datasets at d = 16, keyless then keyed; then all 64
on one dataset through 1, 2 and 4 servers (replicas) on one database, sampling lock waits in
pg_stat_activity (CONC_SECONDS per workload, default 10; CONC=0 skips it).

Every database and file it creates is its own (scale_* databases, dropped at the end).
"""
import http.client
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SHORT = "--short" in sys.argv
TARGET = os.environ.get("CARGO_TARGET_DIR", "target")
BIN = os.environ.get("BIN", f"{TARGET}/release/dirichlet-release")
PG = os.environ.get("PG", "postgres://postgres@127.0.0.1:5432/postgres")
DIMS = [int(d) for d in os.environ.get("DIMS", "2 10 100 1000 10000").split()]
OUT = os.environ.get("OUT", f"{TARGET}/scale")
CONC = os.environ.get("CONC", "1") != "0"
BACKENDS = os.environ.get("BACKENDS", "postgres sqlite").split()
CONC_SECONDS = int(os.environ.get("CONC_SECONDS", "3" if SHORT else "10"))


def releases_for(d):
    if SHORT:
        return 50
    return {2: 2000, 10: 2000, 100: 2000, 1000: 1000}.get(d, 400)


def load1():
    return float(open("/proc/loadavg").read().split()[0])


def psql(url, sql):
    out = subprocess.run(["psql", url, "-XAtq", "-F", "\t", "-c", sql], check=True,
                         capture_output=True, text=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


def db_url(name):
    return PG.rsplit("/", 1)[0] + "/" + name


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, url, work):
        self.port = free_port()
        self.admin = "scale-admin-" + secrets.token_hex(8)
        env = dict(os.environ, DIRICHLET_DATABASE_URL=url,
                   DIRICHLET_LISTEN=f"127.0.0.1:{self.port}", DIRICHLET_ADMIN_TOKEN=self.admin,
                   DIRICHLET_LOG_LEVEL="warn")
        self.log = open(os.path.join(work, f"server-{self.port}.log"), "w")
        self.proc = subprocess.Popen([BIN], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(200):
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited; see {self.log.name}")
            time.sleep(0.1)
        else:
            raise SystemExit("server not ready")
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def call(self, method, path, body=None, bearer=None, headers=None):
        h = {"Authorization": f"Bearer {bearer or self.admin}", "Content-Type": "application/json"}
        h.update(headers or {})
        self.conn.request(method, path, body=json.dumps(body) if body is not None else None,
                          headers=h)
        r = self.conn.getresponse()
        data = r.read()
        if r.status >= 300:
            raise SystemExit(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data) if data else None

    def dataset(self, name):
        return self.call("POST", "/v1/datasets",
                         {"name": name, "budget": {"order": 2, "epsilon": 8000}})["id"]

    def analyst(self, ids):
        return self.call("POST", "/v1/tokens", {"datasets": ids})["token"]

    def stop(self):
        self.conn.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def body(d):
    return {"counts": [(i * 7919) % 97 for i in range(d)], "epsilon": 0.01}


def relation_sizes(url):
    """Bytes of every relation of the schema, its TOAST table and TOAST index included, by name
    (a TOAST relation is named after its table: pg_toast(releases), pg_toast_index(releases))."""
    rows = psql(url, """
        SELECT c.relname, c.relkind, pg_relation_size(c.oid) FROM pg_class c
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i')
        UNION ALL
        SELECT 'pg_toast(' || c.relname || ')', 't', pg_relation_size(c.reltoastrelid)
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.reltoastrelid <> 0
        UNION ALL
        SELECT 'pg_toast_index(' || c.relname || ')', 'ti', pg_indexes_size(c.reltoastrelid)
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.reltoastrelid <> 0""")
    return {name: (kind, int(size)) for name, kind, size in rows}


def wal_lsn(url):
    return psql(url, "SELECT pg_current_wal_lsn(), pg_current_wal_insert_lsn()")[0]


def wal_diff(url, a, b):
    return int(psql(url, f"SELECT pg_wal_lsn_diff('{b}', '{a}')")[0][0])


def pg_one_d(d, work):
    name = f"scale_d{d}_{os.getpid()}"
    url = db_url(name)
    psql(PG, f"CREATE DATABASE {name}")
    server = Server(url, work)
    try:
        ds = server.dataset(f"scale d={d}")
        analyst = server.analyst([ds])
        req = body(d)
        # One release first, so that every relation has its first pages and the token row is warm.
        server.call("POST", f"/v1/datasets/{ds}/releases", req, analyst)
        psql(url, "CHECKPOINT")
        before = relation_sizes(url)
        lsn0 = wal_lsn(url)[1]
        n = releases_for(d)
        la0 = load1()
        t0 = time.time()
        for _ in range(n):
            server.call("POST", f"/v1/datasets/{ds}/releases", req, analyst)
        secs = time.time() - t0
        lsn1 = wal_lsn(url)[1]
        after = relation_sizes(url)
        wal = wal_diff(url, lsn0, lsn1)
        mech = int(psql(url, "SELECT avg(octet_length(mechanism::text))::int FROM releases")[0][0])
        row = int(psql(url, "SELECT avg(pg_column_size(r.*))::int FROM releases r")[0][0])
        per_rel = {k: (after[k][0], (after[k][1] - before.get(k, (None, 0))[1]) / n) for k in after}
        total = sum(v for _, v in per_rel.values())
        return {"backend": "postgres", "d": d, "releases": n, "seconds": round(secs, 2),
                "sequential_rps": round(n / secs, 1), "load1_before": la0, "load1_after": load1(),
                "bytes_per_release": round(total, 1), "bytes_per_cell": round(total / d, 2),
                "wal_bytes_per_release": round(wal / n, 1), "mechanism_json_bytes": mech,
                "avg_row_bytes": row,
                "per_relation": {k: round(v, 1) for k, (_, v) in sorted(per_rel.items()) if v}}
    finally:
        server.stop()
        psql(PG, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def sqlite_size(path):
    """The main file after a full checkpoint (its -wal emptied into it): what the ledger occupies,
    not how far the write-ahead log happened to be from its next checkpoint."""
    import sqlite3
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def sqlite_one_d(d, work):
    """File bytes after n releases minus after one, both measured with the server stopped and the
    WAL checkpointed into the main file."""
    sizes = {}
    n = releases_for(d)
    for count in (1, n + 1):
        path = os.path.join(work, f"sqlite-d{d}-{count}.db")
        server = Server(f"sqlite://{path}", work)
        try:
            ds = server.dataset(f"scale d={d}")
            analyst = server.analyst([ds])
            req = body(d)
            for _ in range(count):
                server.call("POST", f"/v1/datasets/{ds}/releases", req, analyst)
        finally:
            server.stop()
        sizes[count] = sqlite_size(path)
        os.remove(path)
    grow = (sizes[n + 1] - sizes[1]) / n
    return {"backend": "sqlite", "d": d, "releases": n, "file_bytes_after_1": sizes[1],
            "file_bytes_after_n_plus_1": sizes[n + 1], "bytes_per_release": round(grow, 1),
            "bytes_per_cell": round(grow / d, 2), "load1": load1()}


def concurrent(work, keyed):
    """64 wrk connections over 64 datasets at d = 16: releases per transaction (rows sharing
    xmin), WAL per release, releases per second — the grouped path's figures."""
    name = f"scale_conc_{'keyed' if keyed else 'keyless'}_{os.getpid()}"
    url = db_url(name)
    psql(PG, f"CREATE DATABASE {name}")
    server = Server(url, work)
    try:
        ids = [server.dataset(f"conc {i}") for i in range(64)]
        analyst = server.analyst(ids)
        req = json.dumps(body(16))
        lua = os.path.join(work, f"conc-{keyed}.lua")
        with open(lua, "w") as f:
            f.write(f"""
local ids = {{{",".join('"%s"' % i for i in ids)}}}
local headers = {{["Authorization"] = "Bearer {analyst}", ["Content-Type"] = "application/json"}}
local n = 0
local threads = 0
setup = function(thread) threads = threads + 1; thread:set("tid", threads) end
init = function(args) n = tid * 7 end
request = function()
  n = n + 1
  if {1 if keyed else 0} == 1 then headers["Idempotency-Key"] = "k-{secrets.token_hex(4)}-" .. tid .. "-" .. n end
  return wrk.format("POST", "/v1/datasets/" .. ids[(n % #ids) + 1] .. "/releases", headers, '{req}')
end
""")
        server.call("POST", f"/v1/datasets/{ids[0]}/releases", body(16), analyst)
        psql(url, "CHECKPOINT")
        before = relation_sizes(url)
        lsn0 = wal_lsn(url)[1]
        count0 = int(psql(url, "SELECT count(*) FROM releases")[0][0])
        la0 = load1()
        out = subprocess.run(["wrk", "-t2", "-c64", f"-d{CONC_SECONDS}s", "--timeout", "10s",
                              "-s", lua, f"http://127.0.0.1:{server.port}"],
                             check=True, capture_output=True, text=True).stdout
        la1 = load1()
        lsn1 = wal_lsn(url)[1]
        after = relation_sizes(url)
        n = int(psql(url, "SELECT count(*) FROM releases")[0][0]) - count0
        groups = psql(url, """
            SELECT size, count(*) FROM (SELECT xmin::text, count(*) AS size FROM releases
                                        GROUP BY 1) g GROUP BY size ORDER BY size""")
        dist = {int(s): int(c) for s, c in groups}
        txns = sum(dist.values())
        rel = sum(s * c for s, c in dist.items())
        datasets_per_txn = psql(url, """
            SELECT avg(k)::numeric(10,2) FROM (SELECT xmin::text, count(DISTINCT dataset_id) AS k
                                                FROM releases GROUP BY 1) g""")[0][0]
        total = sum(after[k][1] - before.get(k, (None, 0))[1] for k in after)
        rps = [l for l in out.splitlines() if l.startswith("Requests/sec")]
        non2xx = [l for l in out.splitlines() if "Non-2xx" in l]
        return {"backend": "postgres", "workload": "spread_keyed" if keyed else "spread",
                "d": 16, "conns": 64, "seconds": CONC_SECONDS, "releases": n,
                "wrk_rps": float(rps[0].split()[1]) if rps else None,
                "non2xx": non2xx[0].strip() if non2xx else "0",
                "load1_before": la0, "load1_after": la1,
                "transactions": txns, "releases_per_transaction": round(rel / txns, 2),
                "datasets_per_transaction": float(datasets_per_txn),
                "group_size_histogram": dist,
                "wal_bytes_per_release": round(wal_diff(url, lsn0, lsn1) / n, 1),
                "bytes_per_release": round(total / n, 1)}
    finally:
        server.stop()
        psql(PG, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def contention(work, replicas):
    """All clients on one dataset, through `replicas` servers on one database (64 wrk connections
    in all): releases per transaction, and how often a backend waited on a lock, sampled from
    pg_stat_activity every 20 ms while wrk ran."""
    name = f"scale_hot{replicas}_{os.getpid()}"
    url = db_url(name)
    psql(PG, f"CREATE DATABASE {name}")
    servers = []
    try:
        servers.append(Server(url, work))
        ds = servers[0].dataset("hot")
        analyst = servers[0].analyst([ds])
        for _ in range(replicas - 1):
            s = Server(url, work)
            s.admin = servers[0].admin
            servers.append(s)
        req = json.dumps(body(16))
        lua = os.path.join(work, "hot.lua")
        with open(lua, "w") as f:
            f.write(f"""
wrk.method = "POST"
wrk.body = '{req}'
wrk.headers["Authorization"] = "Bearer {analyst}"
wrk.headers["Content-Type"] = "application/json"
wrk.path = "/v1/datasets/{ds}/releases"
""")
        servers[0].call("POST", f"/v1/datasets/{ds}/releases", body(16), analyst)
        count0 = int(psql(url, "SELECT count(*) FROM releases")[0][0])
        la0 = load1()
        procs = [subprocess.Popen(["wrk", "-t1", f"-c{64 // replicas}", f"-d{CONC_SECONDS}s",
                                   "--timeout", "10s", "-s", lua,
                                   f"http://127.0.0.1:{s.port}"],
                                  stdout=subprocess.PIPE, text=True) for s in servers]
        samples = lock_waits = active = 0
        sampler = ["psql", url, "-XAtq", "-F", "\t"]
        script = ("SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'), "
                  "count(*) FILTER (WHERE state = 'active') FROM pg_stat_activity "
                  f"WHERE datname = '{name}' AND application_name = 'dirichlet-release';\n"
                  "SELECT pg_sleep(0.02);\n") * int(CONC_SECONDS * 40)
        out = subprocess.run(sampler, input=script, capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split("\t")
            if len(parts) == 2 and parts[0].isdigit():
                samples += 1
                lock_waits += int(parts[0])
                active += int(parts[1])
        outs = [p.communicate()[0] for p in procs]
        la1 = load1()
        n = int(psql(url, "SELECT count(*) FROM releases")[0][0]) - count0
        groups = psql(url, """
            SELECT size, count(*) FROM (SELECT xmin::text, count(*) AS size FROM releases
                                        GROUP BY 1) g GROUP BY size ORDER BY size""")
        dist = {int(s): int(c) for s, c in groups}
        txns = sum(dist.values())
        rps = sum(float(l.split()[1]) for o in outs for l in o.splitlines()
                  if l.startswith("Requests/sec"))
        return {"backend": "postgres", "workload": f"hot_{replicas}_replicas", "d": 16,
                "conns": 64, "seconds": CONC_SECONDS, "releases": n, "wrk_rps": round(rps, 1),
                "load1_before": la0, "load1_after": la1, "transactions": txns,
                "releases_per_transaction": round(sum(s * c for s, c in dist.items()) / txns, 2),
                "alone_share": round(dist.get(1, 0) / n, 3) if n else None,
                "lock_wait_per_sample": round(lock_waits / samples, 2) if samples else None,
                "active_per_sample": round(active / samples, 2) if samples else None,
                "samples": samples}
    finally:
        for s in servers:
            s.stop()
        psql(PG, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def main():
    if not os.access(BIN, os.X_OK):
        raise SystemExit(f"{BIN} missing: cargo build --release --bin dirichlet-release")
    os.makedirs(OUT, exist_ok=True)
    work = tempfile.mkdtemp(prefix="scale-")
    results = []
    try:
        settings = dict(psql(PG, "SELECT name, setting FROM pg_settings WHERE name IN "
                                 "('server_version', 'wal_level', 'full_page_writes', "
                                 "'wal_compression', 'shared_buffers', 'synchronous_commit')"))
        results.append({"settings": settings})
        print("settings:", settings, flush=True)
        for d in DIMS if "postgres" in BACKENDS else []:
            r = pg_one_d(d, work)
            results.append(r)
            print(json.dumps(r), flush=True)
        for d in DIMS if "sqlite" in BACKENDS else []:
            r = sqlite_one_d(d, work)
            results.append(r)
            print(json.dumps(r), flush=True)
        if CONC and shutil.which("wrk"):
            for keyed in (False, True):
                r = concurrent(work, keyed)
                results.append(r)
                print(json.dumps(r), flush=True)
            for replicas in (1, 2, 4):
                r = contention(work, replicas)
                results.append(r)
                print(json.dumps(r), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(OUT, "storage.jsonl"), "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    print(f"\nwritten: {OUT}/storage.jsonl")
    print("\n| backend | d | releases | bytes/release | bytes/cell | WAL bytes/release | load1 |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        if r.get("backend") and "workload" not in r:
            print(f"| {r['backend']} | {r['d']} | {r['releases']} | {r['bytes_per_release']:.0f} | "
                  f"{r['bytes_per_cell']:.1f} | {r.get('wal_bytes_per_release', '–')} | "
                  f"{r.get('load1_before', r.get('load1'))} |")


if __name__ == "__main__":
    main()
