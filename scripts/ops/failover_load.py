#!/usr/bin/env python3
"""Release load and its verdict for scripts/ops/failover.sh (standard library only).

  failover_load.py setup  --base URL --admin TOKEN --datasets N --out datasets.json
  failover_load.py run    --bases URL,URL,... --admin TOKEN --datasets datasets.json
                          --duration S --rate R --keyed PCT --workers W --out requests.jsonl
  failover_load.py check  --requests requests.jsonl --datasets datasets.json --events events.txt
                          --new-releases FILE --new-datasets FILE [--old-releases FILE]
                          --bases URL,... --admin TOKEN [--report FILE]

`run` sends releases at about R per second for S seconds, request i to replica i mod n. Every
request carries a label of its own (`fo-<i>`), so the database tells which request each stored
release belongs to. PCT percent of the requests carry an Idempotency-Key: an unanswered one
(timeout, dropped connection, 503, 504, 500) is retried with the same key on the next replica
until it gets a definite answer or RETRY_WINDOW seconds have passed. A keyless request is retried
only after a 503, which the service promises was not charged (the same label then tells whether
that promise held); after a 504 or a lost connection it is left unknown, as a client without a
key must leave it.

`check` compares what the clients were told with what the new primary holds, and prints the
figures and any violation; it exits 1 if there is one:
  - every 201 is stored on the new primary (same id, dataset, label);
  - no request is stored twice (one charge per label), and a keyed request's 201 is the release
    stored under its key;
  - a stored release whose request got no 201 had an unknown outcome (504, timeout, lost
    connection), never a definite refusal (409, 503, 4xx);
  - per dataset: spent = the sum of the stored releases' costs, the release count = the rows,
    and the release log verifies (GET /v1/datasets/{id}/audit through a replica);
  - a release an old primary held (as it came back) but the new one lacks never got a 201;
  - no answer was a 500 (RELIABILITY.md promises 201, 409, 503 with Retry-After, or 504).
"""

import argparse
import json
import random
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

RETRY_WINDOW = 90.0
CLIENT_TIMEOUT = 40.0
# Dyadic costs: exact on the ledger's 2^-40 grid, so sums compare exactly.
EPSILONS = (1 / 64, 1 / 32, 3 / 64)
UNITS_PER_EPSILON = 2**40


def http(method, url, admin, body=None, key=None, timeout=CLIENT_TIMEOUT):
    """(status, headers, parsed body) or (None, None, error text) when no HTTP answer came."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {admin}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if key is not None:
        request.add_header("Idempotency-Key", key)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        raw = error.read()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = {"raw": raw.decode(errors="replace")[:200]}
        return error.code, dict(error.headers), parsed
    except (OSError, urllib.error.URLError, ValueError) as error:
        # Timeouts, refused and reset connections, a response cut short.
        return None, None, f"{type(error).__name__}: {error}"


def setup(args):
    datasets = []
    for n in range(args.datasets):
        status, _, body = http(
            "POST",
            f"{args.base}/v1/datasets",
            args.admin,
            {"name": f"failover {n}", "budget": {"order": 2, "epsilon": 4096}},
        )
        if status != 201:
            sys.exit(f"setup: creating a dataset answered {status}: {body}")
        datasets.append(body["id"])
    with open(args.out, "w") as out:
        json.dump(datasets, out)


def run(args):
    bases = args.bases.split(",")
    datasets = json.load(open(args.datasets))
    rng = random.Random(args.seed)
    start = time.time()
    total = int(args.duration * args.rate)
    plan = []
    for i in range(total):
        plan.append(
            {
                "i": i,
                "at": start + i / args.rate,
                "dataset": datasets[i % len(datasets)],
                "keyed": rng.random() * 100 < args.keyed,
                "epsilon": rng.choice(EPSILONS),
                "counts": [rng.randint(0, 50) for _ in range(rng.randint(3, 6))],
            }
        )
    lock = threading.Lock()
    cursor = iter(plan)
    out = open(args.out, "w")

    def one(item):
        label = f"fo-{item['i']}"
        key = f"fo-{uuid.uuid4()}" if item["keyed"] else None
        body = {"counts": item["counts"], "epsilon": item["epsilon"], "label": label}
        url_of = lambda r: f"{bases[r % len(bases)]}/v1/datasets/{item['dataset']}/releases"  # noqa: E731
        replica = item["i"]
        attempts = []
        deadline = item["at"] + RETRY_WINDOW
        while True:
            sent = time.time()
            status, headers, answer = http("POST", url_of(replica), args.admin, body, key)
            attempt = {"replica": replica % len(bases), "sent": sent, "answered": time.time(), "status": status}
            if status is None:
                attempt["error"] = answer
            elif status == 201:
                attempt["id"] = answer["id"]
                attempt["replayed"] = (headers.get("Idempotent-Replayed") or headers.get("idempotent-replayed")) == "true"
            else:
                attempt["type"] = answer.get("type") if isinstance(answer, dict) else None
            attempts.append(attempt)
            unknown = status is None or status in (500, 503, 504)
            retry = (key is not None and unknown) or (key is None and status == 503)
            if not retry or time.time() > deadline:
                break
            wait = 1.0
            if headers:
                try:
                    wait = float(headers.get("Retry-After") or headers.get("retry-after") or 1)
                except ValueError:
                    pass
            time.sleep(min(wait, 2.0))
            replica += 1
        record = {
            "i": item["i"],
            "label": label,
            "dataset": item["dataset"],
            "key": key,
            "units": int(item["epsilon"] * UNITS_PER_EPSILON),
            "attempts": attempts,
        }
        with lock:
            out.write(json.dumps(record) + "\n")

    def worker():
        while True:
            with lock:
                item = next(cursor, None)
            if item is None:
                return
            delay = item["at"] - time.time()
            if delay > 0:
                time.sleep(delay)
            one(item)

    threads = [threading.Thread(target=worker) for _ in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.close()


def read_table(path, columns):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line:
                rows.append(dict(zip(columns, line.split("|"))))
    return rows


def check(args):
    requests = [json.loads(line) for line in open(args.requests)]
    datasets = json.load(open(args.datasets))
    events = {}
    for line in open(args.events):
        name, value = line.split()
        events[name] = float(value)
    stored = read_table(args.new_releases, ["id", "dataset", "label", "key", "units", "seq"])
    ledger = read_table(args.new_datasets, ["id", "spent", "count", "total"])
    old = read_table(args.old_releases, ["id", "dataset", "label"]) if args.old_releases else []
    old = list({r["id"]: r for r in old}.values())

    failures = []
    by_id = {r["id"]: r for r in stored}
    by_label = {}
    for r in stored:
        by_label.setdefault(r["label"], []).append(r)

    figures = {
        "requests": len(requests),
        "keyed": sum(1 for r in requests if r["key"]),
        "attempts": sum(len(r["attempts"]) for r in requests),
        "retries": sum(len(r["attempts"]) - 1 for r in requests),
        "answers": {},
    }
    answered_201 = set()
    keyed_retried = keyed_retried_201 = replays_after_unanswered = 0
    unknown_outcome = 0
    for r in requests:
        for a in r["attempts"]:
            name = str(a["status"]) if a["status"] is not None else "no answer"
            figures["answers"][name] = figures["answers"].get(name, 0) + 1
        final = r["attempts"][-1]
        ids = {a["id"] for a in r["attempts"] if a["status"] == 201}
        if len(ids) > 1:
            failures.append(f"{r['label']}: two different releases answered 201: {sorted(ids)}")
        if r["key"] and len(r["attempts"]) > 1:
            keyed_retried += 1
            if final["status"] == 201:
                keyed_retried_201 += 1
                if final.get("replayed"):
                    replays_after_unanswered += 1
        if final["status"] == 201:
            answered_201.add(r["label"])
            row = by_id.get(final["id"])
            if row is None:
                failures.append(f"{r['label']}: 201 with release {final['id']}, which the new primary lacks")
            elif row["label"] != r["label"] or row["dataset"] != r["dataset"]:
                failures.append(f"{r['label']}: 201 with release {final['id']}, stored for {row['label']}")
            elif r["key"] and row["key"] != r["key"]:
                failures.append(f"{r['label']}: 201 with release {final['id']}, stored under another key")
        elif final["status"] is None or final["status"] in (500, 504):
            unknown_outcome += 1
            if r["key"]:
                failures.append(f"{r['label']}: keyed request still unanswered after {RETRY_WINDOW} s of retries: {final}")
        else:
            if r["key"] and final["status"] == 503:
                failures.append(f"{r['label']}: keyed request still 503 after {RETRY_WINDOW} s of retries")
        for a in r["attempts"]:
            if a["status"] == 500:
                failures.append(
                    f"{r['label']}: answered 500 on replica {a['replica']} "
                    f"({'keyed' if r['key'] else 'keyless'}); the service promises 201, 409, 503 or 504"
                )
        rows = by_label.get(r["label"], [])
        if len(rows) > 1:
            failures.append(f"{r['label']}: stored {len(rows)} times (charged more than once)")
        if rows and final["status"] != 201 and not (final["status"] is None or final["status"] in (500, 504)):
            failures.append(f"{r['label']}: stored although its answer was a definite {final['status']}")
    known_labels = {r["label"] for r in requests}
    strays = [r for r in stored if r["label"] not in known_labels]
    if strays:
        failures.append(f"{len(strays)} stored releases belong to no request: {strays[:3]}")
    stored_without_201 = [r for r in stored if r["label"] not in answered_201]

    # The ledger: spent is the sum of the distinct stored releases' costs, per dataset.
    sums = {}
    for r in stored:
        s = sums.setdefault(r["dataset"], [0, 0])
        s[0] += int(r["units"])
        s[1] += 1
    spent_total = sum_total = 0
    for d in ledger:
        if d["id"] not in datasets:
            continue
        s = sums.get(d["id"], [0, 0])
        spent_total += int(d["spent"])
        sum_total += s[0]
        if int(d["spent"]) != s[0] or int(d["count"]) != s[1]:
            failures.append(f"dataset {d['id']}: spent {d['spent']} units and {d['count']} releases, stored {s[0]} units in {s[1]}")
    bases = args.bases.split(",")
    audits_ok = 0
    for n, d in enumerate(datasets):
        status, _, audit = http("GET", f"{bases[n % len(bases)]}/v1/datasets/{d}/audit", args.admin)
        if status == 200 and audit.get("ok"):
            audits_ok += 1
        else:
            failures.append(f"dataset {d}: audit answered {status}: {audit}")

    # The old primaries, as they came back before being rewound: what they held that the new one
    # lacks.
    old_only = [r for r in old if r["id"] not in by_id]
    answered_ids = {a["id"] for r in requests for a in r["attempts"] if a["status"] == 201}
    for r in old_only:
        if r["id"] in answered_ids:
            failures.append(f"release {r['id']} ({r['label']}) was answered 201 but only the old primary has it")

    # Per failover: from the kill to the first 201 of a request sent after it.
    kills = sorted((t, name[len("kill_"):]) for name, t in events.items() if name.startswith("kill_"))
    ok_attempts = [a for r in requests for a in r["attempts"] if a["status"] == 201]
    failovers = []
    for t, node in kills:
        after = [a["answered"] for a in ok_attempts if a["sent"] >= t]
        promoted = [v for name, v in events.items() if name.startswith("promoted_") and v >= t]
        failovers.append(
            {
                "killed": node,
                "promoted_after_s": round(min(promoted) - t, 3) if promoted else None,
                "first_201_after_s": round(min(after) - t, 3) if after else None,
            }
        )
        if not after:
            failures.append(f"no release was answered 201 after {node} was killed")
    ok_times = sorted(a["answered"] for a in ok_attempts)
    longest_gap = max((b - a for a, b in zip(ok_times, ok_times[1:])), default=0.0)

    figures.update(
        {
            "answered_201": len(answered_201),
            "keyed_retried": keyed_retried,
            "keyed_retried_then_201": keyed_retried_201,
            "replayed_after_no_answer": replays_after_unanswered,
            "keyless_unknown_outcome": unknown_outcome,
            "new_primary_releases": len(stored),
            "new_primary_releases_without_201": len(stored_without_201),
            "spent_units": spent_total,
            "sum_of_stored_costs_units": sum_total,
            "spent_epsilon": spent_total / UNITS_PER_EPSILON,
            "audits_ok": f"{audits_ok}/{len(datasets)}",
            "old_primaries_releases": len(old),
            "old_primaries_only": len(old_only),
            "failovers": failovers,
            "longest_gap_between_201s_s": round(longest_gap, 3),
            "failures": len(failures),
        }
    )
    print("FAILOVER " + json.dumps(figures, sort_keys=True))
    if args.report:
        with open(args.report, "a") as report:
            report.write(json.dumps(figures, sort_keys=True) + "\n")
    for f in failures[:50]:
        print("FAILED: " + f, file=sys.stderr)
    sys.exit(1 if failures else 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("setup")
    p.add_argument("--base", required=True)
    p.add_argument("--admin", required=True)
    p.add_argument("--datasets", type=int, default=4)
    p.add_argument("--out", required=True)
    p = sub.add_parser("run")
    p.add_argument("--bases", required=True)
    p.add_argument("--admin", required=True)
    p.add_argument("--datasets", required=True)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--keyed", type=float, default=50)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--out", required=True)
    p = sub.add_parser("check")
    for name in ("requests", "datasets", "events", "new-releases", "new-datasets", "bases", "admin"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--old-releases")
    p.add_argument("--report")
    args = parser.parse_args()
    {"setup": setup, "run": run, "check": check}[args.command](args)


if __name__ == "__main__":
    main()
