"""Naive Bayes through the service with the Python client: a port of examples/naive_bayes.rs.

Reads a CSV with a header, splits it 70/30 with a fixed seed, cuts numeric columns into 10
quantile bins on the training rows, and fits a categorical naive Bayes model from K + 1 count
tables: the class counts (one row) and, for every feature, a table with one row per class (the
rows count disjoint groups of records, so a whole table costs one vector). Each table is a
`pandas.DataFrame` released in one call; the tables are released with `dirichlet`, `gaussian`
and `laplace` at ε/(K+1) each under one dataset budget of ε, and the test cross-entropy and
accuracy are printed against ε beside the non-private (maximum-likelihood) model and uniform
guessing. Every model's ledger must have spent exactly its budget.

    python examples/naive_bayes.py --short          # DIRICHLET_URL, DIRICHLET_TOKEN name the server

The 70/30 split is the Rust example's own: the same seeded ChaCha8 shuffle (rand 0.10's
Fisher–Yates over ChaCha8Rng::seed_from_u64, re-implemented below), so both examples train and
test on the same records and their non-private rows agree to the last digit. The seed only fixes
the split; all privacy noise is drawn by the service.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from dirichlet_release import Client

FULL_EPSILONS = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0]
SHORT_EPSILONS = [0.1, 1.0, 10.0]
MECHANISMS = ["dirichlet", "gaussian", "laplace"]
BINS = 10
TRAIN_FRACTION = 0.7
# A zero probability would make a test loss infinite; as in the Rust example (and scikit-learn's
# log_loss) every probability a loss takes the log of is clipped below at machine epsilon.
FLOOR = float(np.finfo(float).eps)
GRID_STEP = 2.0**-40  # the ledger's grid

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "examples" / "data" / "breast_cancer.csv"


@dataclass
class Encoded:
    """The data as cell indices: one column per attribute, training and test rows."""

    names: List[str]
    cells: List[int]
    train: np.ndarray
    test: np.ndarray


_MASK = 0xFFFFFFFF


def _rotl(x: int, n: int) -> int:
    return ((x << n) | (x >> (32 - n))) & _MASK


def _chacha8_words(seed: int) -> Iterator[int]:
    """The u32 outputs of rand's `ChaCha8Rng::seed_from_u64(seed)`, in order."""
    key = []
    state = seed
    for _ in range(8):  # rand_core's seed_from_u64: PCG32 outputs as the 32-byte key
        state = (state * 0x5851F42D4C957F2D + 0xA17654E46FBE17F3) % 2**64
        xorshifted = (((state >> 18) ^ state) >> 27) & _MASK
        rot = state >> 59
        key.append(((xorshifted >> rot) | (xorshifted << ((32 - rot) % 32))) & _MASK)
    counter = 0
    while True:
        start = [0x61707865, 0x3320646E, 0x79622D32, 0x6B206574, *key]
        start += [counter & _MASK, counter >> 32, 0, 0]  # 64-bit block counter, stream 0
        x = list(start)
        for _ in range(4):  # 8 rounds
            for a, b, c, d in (
                (0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
                (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14),
            ):  # fmt: skip
                x[a] = (x[a] + x[b]) & _MASK
                x[d] = _rotl(x[d] ^ x[a], 16)
                x[c] = (x[c] + x[d]) & _MASK
                x[b] = _rotl(x[b] ^ x[c], 12)
                x[a] = (x[a] + x[b]) & _MASK
                x[d] = _rotl(x[d] ^ x[a], 8)
                x[c] = (x[c] + x[d]) & _MASK
                x[b] = _rotl(x[b] ^ x[c], 7)
        yield from ((x[i] + start[i]) & _MASK for i in range(16))
        counter += 1


def rust_shuffle(n: int, seed: int) -> List[int]:
    """`(0..n).collect::<Vec<_>>().shuffle(&mut ChaCha8Rng::seed_from_u64(seed))` of rand 0.10."""
    words = _chacha8_words(seed)

    def below(bound: int) -> int:  # rng.random_range(..bound) for u32: widening multiply
        product = next(words) * bound
        result, low = product >> 32, product & _MASK
        if low > (-bound) & _MASK:
            result += (low + ((next(words) * bound) >> 32)) >> 32
        return result

    order = list(range(n))
    # IncreasingUniform: indices in [0, i] for i = 0, 1, …, drawn several at a time from one
    # u32 below (i + 1)(i + 2)…(i + k), the largest such product that fits.
    chunk, remaining = 0, 1  # the first index is in [0, 0]: no draw
    for i in range(n):
        size = i + 1
        if remaining > 0:
            remaining -= 1
        else:
            bound, current = size, size + 1
            while bound * current <= _MASK:
                bound *= current
                current += 1
            chunk, remaining = below(bound), current - size - 1
        if remaining == 0:
            index = chunk
        else:
            index, chunk = chunk % size, chunk // size
        order[i], order[index] = order[index], order[i]
    return order


def quantile_edges(values: np.ndarray, bins: int) -> np.ndarray:
    """Interior edges of `bins` quantile bins (numpy's linear quantiles), ties merged."""
    edges: np.ndarray = np.unique(np.quantile(values, np.arange(1, bins) / bins))
    # An edge at the minimum would leave the first bin empty by construction.
    kept: np.ndarray = edges[edges > values.min()]
    return kept


def encode(frame: pd.DataFrame, seed: int, categorical: Sequence[str]) -> Encoded:
    """Split, then bin numeric columns on the training rows and index categorical ones."""
    order = np.array(rust_shuffle(len(frame), seed))
    n_train = round(len(frame) * TRAIN_FRACTION)
    train_rows, test_rows = order[:n_train], order[n_train:]
    columns = []
    cells = []
    for name in frame.columns:
        column = frame[name]
        numeric = pd.to_numeric(column, errors="coerce")
        levels = sorted(column.astype(str).str.strip().unique())
        if name in categorical or numeric.isna().any() or len(levels) <= BINS:
            # The column's values in the whole file are the attribute's public domain.
            codes = np.searchsorted(levels, column.astype(str).str.strip().to_numpy())
            cells.append(len(levels))
        else:
            values = numeric.to_numpy(dtype=float)
            edges = quantile_edges(values[train_rows], BINS)
            # A value's bin is the number of edges at or below it.
            codes = np.searchsorted(edges, values, side="right")
            cells.append(len(edges) + 1)
        columns.append(codes)
    data = np.column_stack(columns)
    return Encoded(list(frame.columns), cells, data[train_rows], data[test_rows])


def count_tables(data: Encoded, cls: int, features: List[int]) -> List[Tuple[str, pd.DataFrame]]:
    """Table 0: the class counts; table 1 + f: feature f's counts, one row per class."""
    total = len(features) + 1
    y = data.train[:, cls]
    classes = pd.Index(range(data.cells[cls]), name=data.names[cls])
    tables = [
        (
            f"NB 1/{total} class {data.names[cls]}",
            pd.DataFrame([np.bincount(y, minlength=data.cells[cls])], columns=classes),
        )
    ]
    for i, f in enumerate(features):
        rows = np.zeros((data.cells[cls], data.cells[f]))
        np.add.at(rows, (y, data.train[:, f]), 1.0)
        frame = pd.DataFrame(rows, index=classes, columns=pd.Index(range(data.cells[f])))
        label = f"NB {i + 2}/{total} {data.names[f]} | {data.names[cls]}"[:200]
        tables.append((label, frame))
    return tables


def score(
    data: Encoded, cls: int, features: List[int], fitted: List[np.ndarray]
) -> Dict[str, float]:
    """Test cross-entropy (mean −ln p(true class | features), nats) and accuracy."""
    log = np.log(np.maximum(fitted[0][0], FLOOR))[None, :].repeat(len(data.test), axis=0)
    for i, f in enumerate(features):
        table = np.log(np.maximum(fitted[i + 1], FLOOR))  # classes × cells
        log += table[:, data.test[:, f]].T
    top = log.max(axis=1, keepdims=True)
    evidence = top[:, 0] + np.log(np.exp(log - top).sum(axis=1))
    truth = data.test[:, cls]
    posterior = np.exp(log[np.arange(len(truth)), truth] - evidence)
    predicted = log.argmax(axis=1)  # ties go to the lowest class index
    return {
        "cross_entropy": float(-np.log(np.maximum(posterior, FLOOR)).mean()),
        "accuracy": float((predicted == truth).mean()),
    }


def maximum_likelihood(tables: List[Tuple[str, pd.DataFrame]], pseudo: float) -> List[np.ndarray]:
    """Row-normalised counts plus `pseudo` per cell (an empty row is uniform)."""
    out = []
    for _, frame in tables:
        rows = frame.to_numpy(dtype=float) + pseudo
        sums = rows.sum(axis=1, keepdims=True)
        out.append(np.where(sums > 0, rows / np.where(sums > 0, sums, 1), 1 / rows.shape[1]))
    return out


def fit_private(
    client: Client,
    name: str,
    tables: List[Tuple[str, pd.DataFrame]],
    mechanism: str,
    epsilon: float,
    order: float,
) -> Tuple[List[np.ndarray], float]:
    """One dataset of budget ε, every table released at ε / T; the tables and `spent`."""
    dataset = client.create_dataset(name, epsilon=epsilon, order=order, neighbouring="replace_one")
    per_table = epsilon / len(tables)
    fitted = []
    charged = 0.0
    for label, frame in tables:
        release = client.release(
            dataset.id, frame, epsilon=per_table, mechanism=mechanism, label=label
        )
        assert isinstance(release.distributions, pd.DataFrame)
        fitted.append(release.distributions.to_numpy())
        charged += release.cost.epsilon
    spent = client.budget(dataset.id).spent
    if abs(charged - spent) > GRID_STEP:
        raise SystemExit(
            f"{name}: the responses' costs add up to {charged}, the ledger says {spent}"
        )
    return fitted, spent


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default=os.environ.get("DIRICHLET_URL"))
    parser.add_argument(
        "--token",
        default=os.environ.get("DIRICHLET_TOKEN") or os.environ.get("DIRICHLET_ADMIN_TOKEN"),
        help="admin token (default: $DIRICHLET_TOKEN, else $DIRICHLET_ADMIN_TOKEN)",
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--class", dest="class_name", default="diagnosis")
    parser.add_argument("--seed", type=int, default=2024, help="seed of the split only")
    parser.add_argument("--epsilon", type=lambda s: [float(e) for e in s.split(",")])
    parser.add_argument("--repetitions", type=int)
    parser.add_argument("--order", type=float, default=5.0, help="the paper's λ = 5")
    parser.add_argument("--short", action="store_true", help="ε = 0.1, 1, 10, once")
    parser.add_argument("--out", type=Path, help="also write the summary as CSV")
    args = parser.parse_args(argv)
    if not args.url or not args.token:
        parser.error("give --url and --token (or set DIRICHLET_URL and DIRICHLET_TOKEN)")
    epsilons = args.epsilon or (SHORT_EPSILONS if args.short else FULL_EPSILONS)
    repetitions = args.repetitions or (1 if args.short else 10)

    frame = pd.read_csv(args.data, dtype=str)
    data = encode(frame, args.seed, [args.class_name])
    cls = data.names.index(args.class_name)
    features = [j for j in range(len(data.names)) if j != cls]
    print(
        f"{args.data}: {len(data.train)} training and {len(data.test)} test records, "
        f"{data.cells[cls]} classes, {len(features)} features",
        file=sys.stderr,
    )
    tables = count_tables(data, cls, features)
    empty = [label for label, t in tables if (t.sum(axis=1) == 0).any()]
    if empty:
        raise SystemExit(f"these tables have a row with no training records: {empty}")

    started = time.monotonic()
    rows: List[Tuple[str, Optional[float], str, List[float], List[float]]] = []

    def add(
        model: str, eps: Optional[float], scores: List[Dict[str, float]], spent: List[float]
    ) -> None:
        for metric in ("cross_entropy", "accuracy"):
            rows.append((model, eps, metric, [s[metric] for s in scores], spent))

    add("non-private", None, [score(data, cls, features, maximum_likelihood(tables, 0.0))], [])
    add("non-private+1", None, [score(data, cls, features, maximum_likelihood(tables, 1.0))], [])
    uniform = [np.full(t.shape, 1 / t.shape[1]) for _, t in tables]
    add("uniform", None, [score(data, cls, features, uniform)], [])
    failures = []
    with Client(args.url, args.token) as client:
        for eps in epsilons:
            for mechanism in MECHANISMS:
                scores, ratios = [], []
                for rep in range(repetitions):
                    name = f"naive_bayes.py {mechanism} eps={eps} rep={rep}"
                    fitted, spent = fit_private(client, name, tables, mechanism, eps, args.order)
                    scores.append(score(data, cls, features, fitted))
                    ratios.append(spent / eps)
                    # Each release is charged the largest grid value at or below what was asked
                    # and the budget is rounded down to the grid.
                    if spent > eps or eps - spent > (len(tables) + 1) * GRID_STEP:
                        failures.append(f"{mechanism} at ε = {eps}: spent {spent}")
                add(mechanism, eps, scores, ratios)
            print(f"ε = {eps} done ({time.monotonic() - started:.1f} s)", file=sys.stderr)

    print(
        f"\nnaive_bayes.py: {len(tables)} tables per model, split evenly, one charge each; "
        f"{len(epsilons) * len(MECHANISMS) * repetitions * len(tables)} table releases in "
        f"{time.monotonic() - started:.1f} s"
    )
    header = f"{'model':<14} {'epsilon':>8} {'metric':<15} {'mean':>12} {'stderr':>10} {'reps':>5}"
    print(header + f" {'spent/epsilon (min..max)':>24}")
    csv = ["example,model,epsilon,metric,mean,stderr,repetitions,spent_min,spent_max"]
    order = {m: i for i, m in enumerate(["non-private", "non-private+1", "uniform", *MECHANISMS])}
    rows.sort(key=lambda r: (order[r[0]], r[1] if r[1] is not None else math.inf, r[2]))
    for model, eps, metric, values, ratios in rows:
        mean = float(np.mean(values))
        stderr = math.nan
        if len(values) > 1:
            stderr = float(np.std(values, ddof=1) / math.sqrt(len(values)))
        low = repr(min(ratios)) if ratios else ""
        high = repr(max(ratios)) if ratios else ""
        shown = f"{min(ratios):.9f}..{max(ratios):.9f}" if ratios else "-"
        eps_text = "-" if eps is None else f"{eps:g}"
        print(
            f"{model:<14} {eps_text:>8} {metric:<15} {mean:>12.5f} {stderr:>10.5f} "
            f"{len(values):>5} {shown:>24}"
        )
        csv.append(
            f"naive_bayes.py,{model},{'' if eps is None else eps},{metric},{mean},{stderr},"
            f"{len(values)},{low},{high}"
        )
    if args.out:
        args.out.write_text("\n".join(csv) + "\n")
    for failure in failures:
        print(f"budget check failed: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
