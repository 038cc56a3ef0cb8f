"""Thompson sampling from `posterior` releases: the release *is* the posterior draw.

Five arms (say, five page layouts) convert at rates unknown to the allocator. Every round sends
a batch of visitors to one arm; the allocator then needs, for each arm, a draw of its rate from
its posterior. The visitors' outcomes are private, so the allocator never sees the counts: each
round the service releases the table "arm × (converted, did not)" of the counts so far with
`posterior` (r = 1), and each released row (θ, 1 − θ) is one draw from Beta(s + α, f + α) — the
posterior of that arm's rate under a Beta(α, α) prior, α calibrated from the round's ε (seed 001,
seed 004). That is exactly the sample Thompson sampling needs, so the private allocator plays the
arm with the largest released θ, with no further modelling. The rows count disjoint visitors, so
the table costs one charge; the rounds' releases share one dataset budget.

The same loop is run on the same simulated visitors with the exact posterior draw (no privacy,
α = 1) and with an even split over the arms, `--runs` times (a dataset and budget each), and the
mean conversions of the three are printed. Run it against a server:

    DIRICHLET_URL=http://127.0.0.1:8080 DIRICHLET_TOKEN=… python thompson.py [--seed 7] [--runs 10]
"""

from __future__ import annotations

import argparse
import random
from typing import Callable, Dict, List, Tuple

from dirichlet_release import Client

RATES = [0.04, 0.05, 0.06, 0.08, 0.10]  # the arms' true conversion rates (unknown to the allocator)
ROUNDS = 20
BATCH = 250  # visitors per round
BUDGET = 2.0  # ε of Rényi DP at order 2 for all rounds together
EPSILON = BUDGET / ROUNDS  # each round's table release

Draws = Callable[[List[Tuple[int, int]]], List[float]]


def run(world: random.Random, draw: Draws) -> Tuple[int, List[int]]:
    """Play ROUNDS batches; `draw` turns the (successes, failures) per arm into one θ per arm."""
    counts = [(0, 0) for _ in RATES]
    pulls = [0 for _ in RATES]
    converted = 0
    for _ in range(ROUNDS):
        theta = draw(counts)
        arm = max(range(len(RATES)), key=lambda a: theta[a])
        wins = sum(world.random() < RATES[arm] for _ in range(BATCH))
        s, f = counts[arm]
        counts[arm] = (s + wins, f + BATCH - wins)
        pulls[arm] += BATCH
        converted += wins
    return converted, pulls


def one_run(
    client: Client, run_no: int, seed: int, exact: random.Random, alphas: List[float]
) -> Dict[str, int]:
    """The three allocators on the same simulated visitors; a fresh dataset for the private one."""
    dataset = client.create_dataset(
        f"conversions per layout {run_no}", epsilon=BUDGET, order=2, cells=["yes", "no"]
    )

    def private(counts: List[Tuple[int, int]]) -> List[float]:
        released = client.release(
            dataset.id, [[s, f] for s, f in counts], mechanism="posterior", epsilon=EPSILON
        )
        alphas.append(float(released.mechanism["alpha"]))
        rows = released.distributions
        assert rows is not None
        return [float(row[0]) for row in rows]

    def posterior(counts: List[Tuple[int, int]]) -> List[float]:
        return [exact.betavariate(s + 1, f + 1) for s, f in counts]

    turns = iter(range(ROUNDS))

    def even(counts: List[Tuple[int, int]]) -> List[float]:
        turn = next(turns) % len(RATES)
        return [1.0 if a == turn else 0.0 for a in range(len(RATES))]

    out = {}
    for name, draw in (("private", private), ("exact", posterior), ("even", even)):
        out[name], _ = run(random.Random(seed), draw)
    budget = client.budget(dataset.id)
    assert budget.releases == ROUNDS and budget.spent <= BUDGET
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=7, help="the simulated visitors' seed")
    parser.add_argument("--runs", type=int, default=10, help="repetitions (a dataset each)")
    args = parser.parse_args()
    exact = random.Random(args.seed + 1)
    totals = {"private": 0, "exact": 0, "even": 0}
    alphas: List[float] = []
    with Client.from_env() as client:
        for run_no in range(args.runs):
            for name, converted in one_run(
                client, run_no, args.seed * 1000 + run_no, exact, alphas
            ).items():
                totals[name] += converted

    best = max(RATES) * ROUNDS * BATCH
    print(f"{args.runs} runs of {ROUNDS} rounds of {BATCH} visitors over {len(RATES)} arms")
    print(f"mean conversions per run (the best arm alone: {best:.0f})")
    for name, total in totals.items():
        print(f"  {name:8s} {total / args.runs:7.1f}")
    print(
        f"private: a table release at ε = {EPSILON:g} (order 2) per round, {BUDGET:g} per run; "
        f"the posterior's prior α = {min(alphas):.3g}–{max(alphas):.3g}"
    )


if __name__ == "__main__":
    main()
