#!/usr/bin/env python3
"""Re-applies, after a restore from a backup, the privacy spend of releases published after it.

A backup holds the ledger as it was when it was taken. Releases committed after that were
answered and published: their outputs are out, whatever the database now says. Restoring the
backup as it is re-grants their budget (RELIABILITY.md, "Backup and restore"). This tool charges
it again, before the restored service is opened to clients:

  carry-over-spend.py --base URL --admin TOKEN [--log FILE]... [--spent DATASET=EPSILON]... [--dry-run]

What was spent after the backup comes from either source (the larger per dataset wins):
  --log FILE     the service's JSON logs (DIRICHLET_LOG_FORMAT=json) from every replica since the
                 backup: each committed release is logged once as "release committed" with its
                 dataset, release id, seq and cost; those with a seq above the restored release
                 log's head (GET /v1/datasets/{id}/audit) are the ones the backup lacks;
  --spent D=E    the spent budget ε of dataset D as last known outside the database (a 201's
                 `budget.spent`, a scrape of /metrics): what the restored ledger shows less is
                 carried over.
Per dataset, the carried spend is charged by one release of all-zero counts at that ε, labelled
"carry-over: …": it goes through the ledger like any release (admission, the hash-chained
release log, spent = the sum of the releases' costs, so GET …/audit keeps verifying), and its
output is a draw from the prior alone, which depends on no record. It is refused like any release
if the restored budget cannot hold it, which means the spend information is wrong.

Run it once, before clients reach the restored service: a dataset whose newest release is
already a carry-over is skipped. Not carried over: an analyst's own allocation spend (the
dataset's budget, the privacy guarantee, is); datasets registered after the backup are gone from
it and are reported (exit status 2): re-register them with what remains of their budgets.
Exit status: 0 done (or nothing to do), 1 a carry-over was refused or failed, 2 unknown datasets.
"""

import argparse
import json
import sys
import urllib.error
import urllib.request

UNITS = 2**40  # the ledger's grid: costs are integers of 2^-40 (src/ledger/charge.rs)


def call(method, url, admin, body=None, key=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {admin}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Idempotency-Key", key)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read())
        except ValueError:
            return error.code, None


def logged_releases(paths):
    """{dataset: {release id: (seq, cost units)}} from "release committed" log lines."""
    found = {}
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                start = line.find("{")
                if start < 0 or "release committed" not in line:
                    continue
                try:
                    entry = json.loads(line[start:])
                except ValueError:
                    continue
                fields = entry.get("fields", entry)
                if fields.get("message") != "release committed":
                    continue
                cost = round(float(fields["cost"]) * UNITS)
                found.setdefault(fields["dataset"], {})[fields["release"]] = (int(fields["seq"]), cost)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True)
    parser.add_argument("--admin", required=True)
    parser.add_argument("--log", action="append", default=[])
    parser.add_argument("--spent", action="append", default=[], metavar="DATASET=EPSILON")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()

    logged = logged_releases(args.log)
    known = {}
    for item in args.spent:
        dataset, _, epsilon = item.partition("=")
        known[dataset] = round(float(epsilon) * UNITS)
    status = 0
    for dataset in sorted(set(logged) | set(known)):
        base = f"{args.base}/v1/datasets/{dataset}"
        code, info = call("GET", base, args.admin)
        if code == 404:
            print(f"{dataset}: not in the restored database (registered after the backup): re-register it")
            status = max(status, 2)
            continue
        if code != 200:
            print(f"{dataset}: GET answered {code}: {info}")
            return 1
        _, audit = call("GET", f"{base}/audit", args.admin)
        _, budget = call("GET", f"{base}/budget", args.admin)
        if not audit or not audit.get("ok"):
            print(f"{dataset}: the restored release log does not verify: {audit}")
            return 1
        head = audit["head"]["seq"]
        _, newest = call("GET", f"{base}/releases?limit=1&fields=summary", args.admin)
        items = (newest or {}).get("releases") or (newest or {}).get("items") or []
        if items and str(items[0].get("label") or "").startswith("carry-over:"):
            print(f"{dataset}: newest release is already a carry-over; skipped")
            continue
        after = {rid: v for rid, v in logged.get(dataset, {}).items() if v[0] > head}
        from_log = sum(cost for _, cost in after.values())
        restored_spent = round(float(budget["spent"]) * UNITS)
        from_known = max(0, known.get(dataset, 0) - restored_spent)
        carry = max(from_log, from_known)
        if carry == 0:
            print(f"{dataset}: nothing to carry over (restored at seq {head})")
            continue
        seqs = sorted(v[0] for v in after.values())
        what = f"seq {seqs[0]}-{seqs[-1]}" if seqs else "known spend"
        epsilon = carry / UNITS
        label = f"carry-over: {what} published after the backup, restored at seq {head}"
        print(f"{dataset}: carrying over ε = {epsilon!r} ({len(after)} logged releases after seq {head}; "
              f"from logs {from_log / UNITS!r}, from known spend {from_known / UNITS!r})")
        if args.dry_run:
            continue
        cells = len(info.get("cells") or []) or 2
        code, answer = call(
            "POST",
            f"{base}/releases",
            args.admin,
            {"counts": [0] * cells, "epsilon": epsilon, "label": label},
            key=f"carry-over-{dataset}-{head}",
        )
        if code != 201 or round(answer["cost"]["epsilon"] * UNITS) != carry:
            print(f"{dataset}: the carry-over release answered {code}: {answer}")
            status = 1
            continue
        print(f"{dataset}: carried over as release {answer['id']} (seq {answer['seq']}); spent now {answer['budget']['spent']!r}")
    return status


if __name__ == "__main__":
    sys.exit(main())
