#!/usr/bin/env python3
"""Which mechanism truly needs the least ε, and how far `auto` is from it.

An independent check of the planner. For each point of a small grid (ledger order λ₀, relation,
d cells, public total n, one KL / ℓ2 / cell-sd target at confidence 0.95) and each mechanism
configuration (dirichlet with per-cell prior a₀ ∈ A0S, posterior with r = 1, the discrete
Gaussian and Laplace — projected for ℓ2 and cell-sd targets, smoothed with pseudo-count k ∈
KS·scale for KL), it finds the smallest ε on a 2^(1/8) grid whose TRUE worst-case error meets
the target: the 95th percentile of the error (for cell_sd: the largest cell's root-mean-square
deviation) maximised over a search of count vectors of the total — one-hot, uniform, a two-cell
split and every "m cells at j records, the rest in one cell" on geometric grids of m and j (for a
smoothed baseline the worst case is m cells at about σ records and the rest empty; for the
Dirichlet family a one-hot or near-empty vector).

Only the charge → parameter calibration comes from the service: `POST /v1/datasets/{id}/plan`
with a mechanism and an `epsilon` returns the parameters a release at that ε runs with (σ, the
Laplace scale, r and α). The samplers are numpy's (gamma for the Dirichlet; the discrete Gaussian
by inverse CDF over its exactly normalised pmf; the discrete Laplace as a difference of two
geometric variables), not the service's. `auto` is then asked for the same targets and its
charge is divided by the truly best mechanism's ε.

    python scripts/research/mechanism_map.py BASE_URL ADMIN_TOKEN OUT.csv [OUT.png [TRUTH.csv]]

With TRUTH.csv (an earlier OUT.csv) the simulated rows are taken from it and only `auto` is asked
again: to compare another build's planner with the same truth.

scripts/research/mechanism-map.sh starts a server on SQLite and runs it.
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
import urllib.request
from typing import Any, Dict, List, Tuple

import numpy as np

ORDERS = [2.0, 5.0, 22.0]
RELATIONS = ["replace_one", "add_remove_one"]
DS = [2, 10, 100]
NS = [40, 1000, 100_000]
KINDS = ["kl", "l2", "cell_sd"]
CONFIDENCE = 0.95
A0S = [0.05, 0.3, 1.0]  # dirichlet's per-cell prior
KS = [0.05, 0.2, 0.6]  # smoothing k as a multiple of the noise scale (σ or b)
EPS_GRID = [2.0 ** (k / 8) for k in range(-24 * 8, 10 * 8 + 1)]  # 2^-24 … 2^10
DRAWS = 400
SEED = 20261206


def target_for(kind: str, d: int, n: int) -> float:
    """One target per point, a few times the sampling error of a posterior draw at that size."""
    if kind == "kl":
        return min(0.5 * math.log(d), 2.0 * (d - 1) / n)
    if kind == "l2":
        return min(0.5, 2.0 / math.sqrt(n))
    return min(0.25, 1.0 / math.sqrt(n))


# --------------------------------------------------------------------------- the service


def call(base: str, token: str, method: str, path: str, body: Any) -> Any:
    req = urllib.request.Request(
        base + path,
        method=method,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.loads(resp.read())


def dataset(base: str, token: str, order: float, relation: str) -> str:
    doc = call(base, token, "POST", "/v1/datasets", {
        "name": f"map {order} {relation}", "budget": {"epsilon": 8000.0, "order": order},
        "neighbouring": relation,
    })
    return str(doc["id"])


def configs() -> List[Tuple[str, str, Dict[str, Any]]]:
    """(label, service mechanism, plan fields) per configuration whose calibration is asked."""
    out = [(f"dirichlet a0={a}", "dirichlet", {"prior": a}) for a in A0S]
    out.append(("posterior r=1", "posterior", {}))
    out.append(("gaussian", "gaussian", {}))
    out.append(("laplace", "laplace", {}))
    return out


def calibrate(base: str, token: str, ds: str, d: int, n: int) -> Dict[str, List[Dict[str, float]]]:
    """Per configuration, the parameters a release at each grid ε runs with (None: refused)."""
    out: Dict[str, List[Dict[str, float]]] = {}
    for label, mech, fields in configs():
        items = [dict(d=d, n=n, mechanism=mech, epsilon=e, **fields) for e in EPS_GRID]
        doc = call(base, token, "POST", f"/v1/datasets/{ds}/plan", {"items": items})
        out[label] = [it.get("parameters") if it.get("status") == "planned" else None
                      for it in doc["items"]]
    return out


# --------------------------------------------------------------------------- samplers (numpy's)


def discrete_gaussian(rng: np.random.Generator, sigma: float, size: Tuple[int, ...]) -> np.ndarray:
    half = int(math.ceil(14 * sigma)) + 2
    ys = np.arange(-half, half + 1)
    logp = -(ys.astype(float) ** 2) / (2 * sigma * sigma)
    pmf = np.exp(logp - logp.max())
    cdf = np.cumsum(pmf)
    cdf /= cdf[-1]
    return ys[np.searchsorted(cdf, rng.random(size), side="right").clip(0, len(ys) - 1)]


def discrete_laplace(rng: np.random.Generator, b: float, size: Tuple[int, ...]) -> np.ndarray:
    q = 1.0 - math.exp(-1.0 / b)  # P(geometric stops); numpy's geometric counts from 1
    return rng.geometric(q, size) - rng.geometric(q, size)


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection of each last-axis row onto the simplex (sort-based)."""
    u = -np.sort(-v, axis=-1)
    css = np.cumsum(u, axis=-1) - 1.0
    idx = np.arange(1, v.shape[-1] + 1)
    cond = u - css / idx > 0
    rho = cond.shape[-1] - 1 - np.argmax(cond[..., ::-1], axis=-1)
    theta = np.take_along_axis(css, rho[..., None], axis=-1) / (rho[..., None] + 1)
    return np.maximum(v - theta, 0.0)


# --------------------------------------------------------------------------- count vectors


def count_vectors(d: int, n: int, scale: float) -> np.ndarray:
    """The searched count vectors of total n (rows)."""
    rows = []

    def add(v: np.ndarray) -> None:
        if v.sum() == n and (v >= 0).all():
            rows.append(v)

    one = np.zeros(d, dtype=np.int64)
    one[0] = n
    add(one)
    uni = np.full(d, n // d, dtype=np.int64)
    uni[: n - uni.sum()] += 1
    add(uni)
    two = np.zeros(d, dtype=np.int64)
    two[0], two[1] = n - n // 2, n // 2
    add(two)
    js = sorted({int(j) for j in np.geomspace(1, max(n // 2, 1), 8).round()}
                | {max(1, int(round(scale * f))) for f in (0.5, 1.0, 2.0, 4.0)})
    ms = sorted({1, max(1, d // 4), max(1, d // 2), d - 1})
    for j in js:
        for m in ms:
            m = min(m, (n - 0) // j, d - 1)  # cells 1..m at j, the rest in cell 0
            if m < 1:
                continue
            v = np.zeros(d, dtype=np.int64)
            v[1 : m + 1] = j
            v[0] = n - m * j
            add(v)
            if v[0] > 0 and m < d - 1 and n - m * j <= j:
                w = v.copy()  # the remainder in its own cell, cell 0 empty
                w[0], w[m + 1] = 0, n - m * j
                add(w)
    return np.unique(np.array(rows), axis=0)


# --------------------------------------------------------------------------- the truth


def draws(rng, label: str, params: Dict[str, float], x: np.ndarray, kind: str) -> np.ndarray:
    """Outputs y, shape (vectors, DRAWS, d), for the configuration at these parameters."""
    S, d = x.shape
    shape = (S, DRAWS, d)
    xs = np.broadcast_to(x[:, None, :], shape).astype(float)
    if label.startswith("dirichlet") or label.startswith("posterior"):
        g = rng.gamma(params["r"] * xs + params["alpha"])
        return g / g.sum(axis=-1, keepdims=True)
    mech, _, k = label.partition(" k=")
    e = (discrete_gaussian(rng, params["sigma"], shape) if mech == "gaussian"
         else discrete_laplace(rng, params["scale"], shape))
    z = xs + e
    if k:  # smoothed: (max(z, 0) + k) / Σ
        u = np.maximum(z, 0.0) + float(k) * noise_scale(label, params)
        return u / u.sum(axis=-1, keepdims=True)
    tot = z.sum(axis=-1, keepdims=True)
    safe = np.where(tot > 0, tot, 1.0)
    y = project_simplex(z / safe)
    return np.where(tot > 0, y, 1.0 / d)


def noise_scale(label: str, params: Dict[str, float]) -> float:
    return params["sigma"] if label.startswith("gaussian") else params["scale"]


def worst(rng, label: str, params: Dict[str, float], d: int, n: int, kind: str) -> float:
    scale = noise_scale(label, params) if ("gaussian" in label or "laplace" in label) else 1.0
    x = count_vectors(d, n, scale)
    p = x / n
    y = draws(rng, label, params, x, kind)
    diff = y - p[:, None, :]
    if kind == "kl":
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(p[:, None, :] > 0, p[:, None, :] * np.log(p[:, None, :] / y), 0.0)
        err = np.nan_to_num(terms.sum(axis=-1), nan=np.inf)
        return float(np.quantile(err, CONFIDENCE, axis=1).max())
    if kind == "l2":
        err = np.sqrt((diff**2).sum(axis=-1))
        return float(np.quantile(err, CONFIDENCE, axis=1).max())
    return float(np.sqrt((diff**2).mean(axis=1)).max())


def labels_for(kind: str) -> List[Tuple[str, str]]:
    """(simulated label, calibration label)."""
    out = [(f"dirichlet a0={a}", f"dirichlet a0={a}") for a in A0S]
    out.append(("posterior r=1", "posterior r=1"))
    for mech in ("gaussian", "laplace"):
        if kind == "kl":
            out += [(f"{mech} k={k}", mech) for k in KS]
        else:
            out.append((mech, mech))
    return out


def smallest_eps(rng, label, cal, d, n, kind, target) -> Tuple[float, float]:
    """Smallest grid ε whose worst-case error meets the target, by bisection (inf if none).

    Bisection assumes the true worst case falls with ε; `posterior`'s can rise again near its
    strong end (its prior's pull), so for it the answer is a crossing, not necessarily the least.
    """
    ok = [i for i, prm in enumerate(cal) if prm is not None]
    if not ok:
        return math.inf, math.nan
    err = worst(rng, label, cal[ok[-1]], d, n, kind)
    if err > target:
        return math.inf, err
    lo, hi, best_err = -1, len(ok) - 1, err
    while hi - lo > 1:
        mid = (lo + hi) // 2
        err = worst(rng, label, cal[ok[mid]], d, n, kind)
        if err <= target:
            hi, best_err = mid, err
        else:
            lo = mid
    return EPS_GRID[ok[hi]], best_err


def family(label: str) -> str:
    return label.split(" ")[0]


def main() -> None:
    base, token, out_csv = sys.argv[1], sys.argv[2], sys.argv[3]
    rng = np.random.default_rng(SEED)
    rows: List[Dict[str, Any]] = []
    known: Dict[Tuple[Any, ...], Dict[str, Any]] = {}
    if len(sys.argv) > 5:
        with open(sys.argv[5]) as f:
            for r in csv.DictReader(f):
                if r["mechanism"] != "auto":
                    key = (float(r["order"]), r["relation"], int(r["d"]), int(r["n"]), r["kind"],
                           r["mechanism"])
                    known[key] = dict(r, order=float(r["order"]), d=int(r["d"]), n=int(r["n"]),
                                      target=float(r["target"]), epsilon=float(r["epsilon"]))
    started = time.time()
    for order in ORDERS:
        for relation in RELATIONS:
            ds = dataset(base, token, order, relation)
            for d in DS:
                for n in NS:
                    cal = calibrate(base, token, ds, d, n) if not known else {}
                    items = [dict(d=d, n=n, mechanism="auto",
                                  target={kind: target_for(kind, d, n), "confidence": CONFIDENCE}
                                  if kind != "cell_sd" else {"cell_sd": target_for(kind, d, n)})
                             for kind in KINDS]
                    auto = call(base, token, "POST", f"/v1/datasets/{ds}/plan", {"items": items})
                    for kind, a in zip(KINDS, auto["items"]):
                        target = target_for(kind, d, n)
                        truth = {}
                        for label, cal_label in labels_for(kind):
                            if known:
                                row = known[(order, relation, d, n, kind, label)]
                                truth[label] = row["epsilon"]
                                rows.append(row)
                                continue
                            eps, err = smallest_eps(rng, label, cal[cal_label], d, n, kind, target)
                            truth[label] = eps
                            rows.append(dict(order=order, relation=relation, d=d, n=n, kind=kind,
                                             target=target, mechanism=label, epsilon=eps,
                                             worst_error=err, auto_mechanism="", auto_cost=""))
                        best_label = min(truth, key=lambda k: truth[k])
                        planned = a.get("status") == "planned"
                        params = a.get("parameters", {})
                        rows.append(dict(order=order, relation=relation, d=d, n=n, kind=kind,
                                         target=target, mechanism="auto",
                                         epsilon=a.get("epsilon", math.inf) if planned else math.inf,
                                         worst_error="", auto_mechanism=a.get("mechanism", ""),
                                         auto_cost=a.get("cost", "") if planned else "",
                                         ))
                        ratio = (a["cost"] / truth[best_label]) if planned else math.inf
                        print(f"λ₀={order:g} {relation:14s} d={d:3d} n={n:6d} {kind:7s} "
                              f"target={target:.3g} best={best_label} ε={truth[best_label]:.4g} "
                              f"auto={a.get('mechanism')}{json.dumps(params)} "
                              f"cost={a.get('cost')} ratio={ratio:.2f} "
                              f"[{time.time() - started:.0f}s]", flush=True)
    with open(out_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    summary(rows)
    if len(sys.argv) > 4:
        plot(rows, sys.argv[4])


def summary(rows: List[Dict[str, Any]]) -> None:
    """The figures the docs quote: per target kind and overall."""
    points: Dict[Tuple[Any, ...], List[Dict[str, Any]]] = {}
    for r in rows:
        points.setdefault((r["order"], r["relation"], r["d"], r["n"], r["kind"]), []).append(r)

    def q(xs: List[float]) -> str:
        if not xs:
            return "none"
        xs = sorted(xs)
        return f"{xs[0]:.3g} / {xs[len(xs) // 2]:.3g} / {xs[-1]:.3g} (n={len(xs)})"

    for kinds in ([k] for k in KINDS + ["all"]):
        sel = {k: v for k, v in points.items() if kinds[0] in ("all", k[4])}
        ratios, fam_ratio, wins, auto_mech, unreached = [], [], {}, {}, 0
        for pts in sel.values():
            mech = [r for r in pts if r["mechanism"] != "auto"]
            auto = [r for r in pts if r["mechanism"] == "auto"][0]
            best = min(mech, key=lambda r: float(r["epsilon"]))
            b = float(best["epsilon"])
            fam = min(float(r["epsilon"]) for r in mech
                      if family(r["mechanism"]) in ("dirichlet", "posterior"))
            if not math.isfinite(b):
                unreached += 1
                continue
            wins[family(best["mechanism"])] = wins.get(family(best["mechanism"]), 0) + 1
            fam_ratio.append(fam / b)
            am = auto["auto_mechanism"] if auto["auto_cost"] != "" else "unplanned"
            auto_mech[am] = auto_mech.get(am, 0) + 1
            if auto["auto_cost"] != "":
                ratios.append(float(auto["auto_cost"]) / b)
        finite_fam = [x for x in fam_ratio if math.isfinite(x)]
        print(f"[{kinds[0]}] points {len(sel)}, no mechanism reaches {unreached}; truly best: "
              f"{wins}; auto chose {auto_mech}")
        print(f"  auto cost ÷ truly best ε, min / median / max: {q(ratios)}")
        print(f"  best Dirichlet-family ε ÷ truly best ε: {q(finite_fam)}; the family "
              f"reaches no target at any grid ε in {len(fam_ratio) - len(finite_fam)} points")


COLOURS = {"dirichlet": "#1f77b4", "posterior": "#17becf", "gaussian": "#d62728",
           "laplace": "#ff7f0e", "none": "#cccccc"}


def plot(rows: List[Dict[str, Any]], out_png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    cols = [(o, r) for o in ORDERS for r in RELATIONS]
    fig, axes = plt.subplots(len(KINDS), len(cols), figsize=(3.0 * len(cols), 3.0 * len(KINDS)),
                             squeeze=False)
    for i, kind in enumerate(KINDS):
        for j, (order, relation) in enumerate(cols):
            ax = axes[i][j]
            for yi, d in enumerate(DS):
                for xi, n in enumerate(NS):
                    pts = [r for r in rows if (r["order"], r["relation"], r["d"], r["n"],
                                               r["kind"]) == (order, relation, d, n, kind)]
                    mech = [r for r in pts if r["mechanism"] != "auto"]
                    best = min(mech, key=lambda r: r["epsilon"])
                    fam = family(best["mechanism"]) if math.isfinite(best["epsilon"]) else "none"
                    auto = [r for r in pts if r["mechanism"] == "auto"][0]
                    ax.add_patch(plt.Rectangle((xi, yi), 1, 1, color=COLOURS[fam]))
                    ratio = (float(auto["auto_cost"]) / best["epsilon"]
                             if auto["auto_cost"] != "" and math.isfinite(best["epsilon"]) else None)
                    txt = f"ε {best['epsilon']:.2g}\nauto ×{ratio:.2g}" if ratio else (
                        f"ε {best['epsilon']:.2g}\nauto –")
                    ax.text(xi + 0.5, yi + 0.5, txt, ha="center", va="center", fontsize=7)
            ax.set_xlim(0, len(NS))
            ax.set_ylim(0, len(DS))
            ax.set_xticks([k + 0.5 for k in range(len(NS))], [f"{n:,}" for n in NS], fontsize=7)
            ax.set_yticks([k + 0.5 for k in range(len(DS))], [str(d) for d in DS], fontsize=7)
            if i == 0:
                ax.set_title(f"λ₀ = {order:g}, {relation}", fontsize=8)
            if j == 0:
                ax.set_ylabel(f"{kind} target\nd", fontsize=8)
            if i == len(KINDS) - 1:
                ax.set_xlabel("n", fontsize=8)
    fig.legend(handles=[Patch(color=c, label=k) for k, c in COLOURS.items()], loc="lower center",
               ncol=len(COLOURS), fontsize=8)
    fig.suptitle("Which mechanism truly needs the least ε (worst-case 95th percentile, "
                 "simulated); the cell: that ε and auto's planned cost ÷ it", fontsize=9)
    fig.tight_layout(rect=(0, 0.04, 1, 0.96))
    fig.savefig(out_png, dpi=110)


if __name__ == "__main__":
    main()
