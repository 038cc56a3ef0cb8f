#!/usr/bin/env python3
"""A model of the release commit path on 1 to 16 PostgreSQL shards: throughput and p99 of a closed
loop of clients (as scripts/bench/bench-e2e.sh drives one primary), with single-shard commits and
cross-shard (two-phase) commits depending on where the rows a release charges live.

    scripts/research/shard_sim.py                       the table of docs/SCALING.md
    scripts/research/shard_sim.py --shards 1,2,4 --seconds 0.5 --workload hot
    scripts/research/shard_sim.py --help                every parameter and its default

Stdlib only, deterministic for a given --seed. It is a model, not a measurement: docs/SCALING.md
("A simulation of the sharded commit path") states what it assumes and what calibrates it.

What it models
- Machines: one per shard, `--cores` CPUs each (FIFO), running both the service's per-request
  work (`--service-ms` of CPU per release: HTTP, JSON, auth, calibration, sampling) for the
  clients of its replica and the database statements of its shard. One shard is the measured
  box of BENCHMARKS.md: 2 cores, one service replica, one PostgreSQL primary.
- Clients: `--clients` per shard, closed loop (a new release as soon as one is answered), spread
  over datasets (`spread`: uniformly; `hot`: all on one dataset of each shard's share).
- Budget trees: every dataset belongs to one of the trees (`--datasets-per-tree` leaves each);
  a release charges its dataset's row and `--depth` ancestor nodes (the root included) in the
  same transaction. `--depth 0` is today's schema (no population trees).
- Group commit as src/store/postgres/group.rs does it, generalised to tree nodes: a runner takes
  up to 64 waiting releases when a commit slot is free; a release any of whose rows (dataset or
  ancestor) is in a running group waits for the next group, together with the others of that
  row. `--grouping global`: one queue and 2 slots per shard over all shards (today's code run
  against a sharded database: a group spans shards); `per-shard`: one queue and 2 slots per
  shard, keyed by the shard of the release's dataset row (a router in front of the runner).
- Placement: `dataset` = every row by its dataset's id (tree nodes by their own id);
  `root` = every row of a tree (its datasets, their releases and token rows, its nodes) on the
  shard of the tree's root.
- Statement cost on a shard (CPU): `--stmt-ms` + `--member-ms` per release stored there +
  `--node-ms` per distinct tree node row updated there; then a WAL flush (`--flush-ms`, latency,
  no CPU). A transaction on one shard commits with that. One on several shards commits by two
  phases: every participant runs its part plus PREPARE TRANSACTION (`--prepare-ms` CPU, a
  flush), then, after all have answered, COMMIT PREPARED (`--commit-prepared-ms` CPU, a flush);
  a network round trip (`--rtt-ms`) before each phase. Its rows stay locked (and its slot held)
  until the second phase ends on every participant.
- Service times vary: every CPU job takes its cost times a uniform factor in [1 - j, 1 + j]
  (`--jitter`, default 0.5), so that queues form as they do on a real machine; flushes and
  round trips are fixed.
- Calibration: with --calibrate RPS, every CPU cost is scaled by one factor so that 1 shard,
  spread, depth 0 gives RPS (the measured single-primary figure); the factor is printed.
"""
import argparse
import heapq
import random
import statistics
import zlib


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--shards", default="1,2,4,8,16", help="comma-separated shard counts")
    p.add_argument("--seconds", type=float, default=0.4, help="simulated seconds per point")
    p.add_argument("--warmup", type=float, default=0.15, help="simulated seconds not counted")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workload", choices=["spread", "hot"], default="spread")
    p.add_argument("--clients", type=int, default=64, help="per shard")
    p.add_argument("--datasets", type=int, default=64, help="per shard")
    p.add_argument("--datasets-per-tree", type=int, default=8)
    p.add_argument("--depth", type=int, default=2, help="ancestor nodes charged per release")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--jitter", type=float, default=0.5,
                   help="every CPU job takes its cost times a uniform factor in [1-j, 1+j]")
    p.add_argument("--slots", type=int, default=2, help="commit slots per shard")
    p.add_argument("--max-group", type=int, default=64)
    p.add_argument("--service-ms", type=float, default=0.40)
    p.add_argument("--stmt-ms", type=float, default=0.80)
    p.add_argument("--member-ms", type=float, default=0.024)
    p.add_argument("--node-ms", type=float, default=0.012)
    p.add_argument("--keyed-share", type=float, default=0.5)
    p.add_argument("--key-ms", type=float, default=0.003, help="per keyed member: index probe")
    p.add_argument("--flush-ms", type=float, default=0.25)
    p.add_argument("--prepare-ms", type=float, default=0.10)
    p.add_argument("--commit-prepared-ms", type=float, default=0.10)
    p.add_argument("--rtt-ms", type=float, default=0.20)
    p.add_argument("--calibrate", type=float, default=0.0,
                   help="measured 1-shard spread req/s to scale CPU costs to (0: no scaling)")
    p.add_argument("--scenarios", default="all",
                   help="all, or comma-separated of: today,dataset-global,dataset-pershard,"
                        "root-global,root-pershard")
    return p.parse_args()


SCENARIOS = {
    # name: (depth override or None, placement, grouping)
    "today": (0, "dataset", "global"),
    "dataset-global": (None, "dataset", "global"),
    "dataset-pershard": (None, "dataset", "per-shard"),
    "root-global": (None, "root", "global"),
    "root-pershard": (None, "root", "per-shard"),
}


def h(key, shards):
    return zlib.crc32(key.encode()) % shards


class Machine:
    """`cores` CPUs serving jobs first come, first served."""

    def __init__(self, sim, cores):
        self.sim, self.free, self.queue = sim, cores, []

    def run(self, ms, then):
        j = self.sim.a.jitter
        ms *= self.sim.rng.uniform(1 - j, 1 + j) if j else 1.0
        if self.free:
            self.free -= 1
            self.sim.at(ms, self._done, then)
        else:
            self.queue.append((ms, then))

    def _done(self, then):
        if self.queue:
            ms, nxt = self.queue.pop(0)
            self.sim.at(ms, self._done, nxt)
        else:
            self.free += 1
        then()


class Sim:
    def __init__(self, a, shards, depth, placement, grouping, scale):
        self.a, self.shards, self.depth = a, shards, depth
        self.placement, self.grouping, self.scale = placement, grouping, scale
        self.now, self.events, self.seq = 0.0, [], 0
        self.rng = random.Random(a.seed * 1000 + shards)
        self.machines = [Machine(self, a.cores) for _ in range(shards)]
        n = a.datasets * shards
        self.datasets = [f"d{i}" for i in range(n)]
        self.tree_of = {d: f"t{i // a.datasets_per_tree}" for i, d in enumerate(self.datasets)}
        self.home = {d: self.shard_of_dataset(d) for d in self.datasets}
        self.queues = {q: [] for q in (range(shards) if grouping == "per-shard" else [0])}
        slots = a.slots * (1 if grouping == "per-shard" else shards)
        self.free_slots = {q: slots for q in self.queues}
        self.in_flight = set()
        self.latencies, self.done, self.txns, self.cross, self.parts = [], 0, 0, 0, 0
        self.measuring = False
        hot = {}
        for d in self.datasets:  # the hot workload: one dataset per shard takes its clients
            hot.setdefault(self.home[d], d)
        self.hot = hot

    def at(self, delay, fn, *args):
        self.seq += 1
        heapq.heappush(self.events, (self.now + delay, self.seq, fn, args))

    def shard_of_dataset(self, d):
        key = self.tree_of[d] if self.placement == "root" else d
        return h(key, self.shards)

    def rows(self, d):
        """The rows a release of `d` locks and writes: its dataset's and its ancestors'."""
        tree = self.tree_of[d]
        nodes = [f"{tree}/n{level}" for level in range(self.depth)]
        return [d] + nodes

    def shard_of_row(self, row, d):
        if row == d or self.placement == "root":
            return self.home[d]
        return h(row, self.shards)

    # Clients
    def client(self, cid):
        rep = cid % self.shards
        if self.a.workload == "hot":
            d = self.hot[rep] if rep in self.hot else self.datasets[0]
        else:
            d = self.rng.choice(self.datasets)
        keyed = self.rng.random() < self.a.keyed_share
        start = self.now
        self.machines[rep].run(self.a.service_ms * self.scale,
                               lambda: self.enqueue((cid, d, keyed, start)))

    def answer(self, member):
        cid, _, _, start = member
        if self.measuring:
            self.latencies.append(self.now - start)
            self.done += 1
        self.client(cid)

    # Group commit
    def enqueue(self, member):
        q = self.home[member[1]] if self.grouping == "per-shard" else 0
        self.queues[q].append(member)
        self.form(q)

    def form(self, q):
        while self.free_slots[q] and self.queues[q]:
            group, later, joined = [], [], set()
            for m in self.queues[q]:
                rows = self.rows(m[1])
                if any(r in self.in_flight and r not in joined for r in rows) \
                        or len(group) >= self.a.max_group:
                    later.append(m)
                    continue
                for r in rows:
                    if r not in self.in_flight:
                        self.in_flight.add(r)
                        joined.add(r)
                group.append(m)
            self.queues[q] = later
            if not group:
                return
            self.free_slots[q] -= 1
            self.commit(q, group, joined)

    def commit(self, q, group, locked):
        a, s = self.a, self.scale
        work = {}
        nodes = {}
        for m in group:
            d = m[1]
            shard = self.home[d]
            work[shard] = work.get(shard, 0.0) + a.member_ms + (a.key_ms if m[2] else 0.0)
            for r in self.rows(d)[1:]:
                nodes.setdefault(self.shard_of_row(r, d), set()).add(r)
        for shard, ns in nodes.items():
            work[shard] = work.get(shard, 0.0) + a.node_ms * len(ns)
        parts = sorted(work)
        if self.measuring:
            self.txns += 1
            self.parts += len(parts)
            self.cross += len(parts) > 1

        def finish():
            for r in locked:
                self.in_flight.discard(r)
            self.free_slots[q] += 1
            for m in group:
                self.answer(m)
            for qq in self.queues:
                self.form(qq)

        if len(parts) == 1:
            shard = parts[0]
            self.at(a.rtt_ms / 2, lambda: self.machines[shard].run(
                (a.stmt_ms + work[shard]) * s,
                lambda: self.at(a.flush_ms + a.rtt_ms / 2, finish)))
            return
        pending = {"n": len(parts)}

        def phase2():
            pending["n"] = len(parts)
            for shard in parts:
                self.machines[shard].run(a.commit_prepared_ms * s, lambda: self.at(
                    a.flush_ms, lambda: acked(lambda: self.at(a.rtt_ms / 2, finish))))

        def acked(then):
            pending["n"] -= 1
            if pending["n"] == 0:
                then()

        def phase1():
            for shard in parts:
                self.machines[shard].run((a.stmt_ms + work[shard] + a.prepare_ms) * s,
                                         lambda: self.at(a.flush_ms, lambda: acked(
                                             lambda: self.at(a.rtt_ms, phase2))))
        self.at(a.rtt_ms / 2, phase1)

    def run(self):
        for cid in range(self.a.clients * self.shards):
            self.client(cid)
        end = (self.a.warmup + self.a.seconds) * 1000
        while self.events:
            t, _, fn, args = heapq.heappop(self.events)
            if t > end:
                break
            if not self.measuring and t >= self.a.warmup * 1000:
                self.measuring = True
            self.now = t
            fn(*args)
        lat = sorted(self.latencies)
        return {
            "rps": self.done / self.a.seconds,
            "p50": lat[len(lat) // 2] if lat else float("nan"),
            "p99": lat[int(len(lat) * 0.99)] if lat else float("nan"),
            "cross": self.cross / self.txns if self.txns else 0.0,
            "parts": self.parts / self.txns if self.txns else 0.0,
            "group": self.done / self.txns if self.txns else 0.0,
        }


def main():
    a = parse()
    shards = [int(x) for x in a.shards.split(",")]
    names = list(SCENARIOS) if a.scenarios == "all" else a.scenarios.split(",")
    scale = 1.0
    if a.calibrate:
        # Bisection on the CPU scale so that today's 1-shard spread run gives the measured rate.
        workload, a.workload = a.workload, "spread"
        lo, hi = 0.1, 10.0
        for _ in range(14):
            mid = (lo * hi) ** 0.5
            rps = Sim(a, 1, 0, "dataset", "global", mid).run()["rps"]
            lo, hi = (mid, hi) if rps > a.calibrate else (lo, mid)
        scale = (lo * hi) ** 0.5
        a.workload = workload
    print(f"# shard_sim: workload={a.workload} clients/shard={a.clients} datasets/shard="
          f"{a.datasets} datasets/tree={a.datasets_per_tree} depth={a.depth} cores={a.cores} "
          f"slots/shard={a.slots} keyed={a.keyed_share} seed={a.seed}")
    print(f"# CPU ms: service {a.service_ms} stmt {a.stmt_ms} member {a.member_ms} node "
          f"{a.node_ms} prepare {a.prepare_ms} commit-prepared {a.commit_prepared_ms}; "
          f"latency ms: flush {a.flush_ms} rtt {a.rtt_ms}; CPU scale {scale:.3f}"
          + (f" (calibrated to {a.calibrate:.0f} req/s)" if a.calibrate else ""))
    print("| scenario | placement | grouping | depth | shards | req/s | × 1 shard | per shard "
          "| p50 ms | p99 ms | releases/txn | cross-shard txns | participants/txn |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        depth, placement, grouping = SCENARIOS[name]
        depth = a.depth if depth is None else depth
        base = None
        for n in shards:
            r = Sim(a, n, depth, placement, grouping, scale).run()
            if base is None:
                base = r["rps"] / n
            print(f"| {name} | {placement} | {grouping} | {depth} | {n} | {r['rps']:.0f} | "
                  f"{r['rps'] / base:.2f} | {r['rps'] / n:.0f} | {r['p50']:.1f} | "
                  f"{r['p99']:.1f} | {r['group']:.1f} | {r['cross']:.0%} | {r['parts']:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
