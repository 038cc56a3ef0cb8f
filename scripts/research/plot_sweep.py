"""docs/mechanism-sweep.png from examples/sweep.rs's CSV, and the numbers behind it.

    plot_sweep.py target/sweep/sweep.csv --png docs/mechanism-sweep.png

One column per ledger order λ₀. Every heat map compares the Dirichlet family (the best of
`dirichlet`, `posterior`, `diffuse` with α = 1) with the additive baselines (the best of
`gaussian`, `laplace`) as a ratio family ÷ baselines on a log colour scale: blue where the family
is better (cheaper, or more accurate), red where the baselines are.

1. For a target: the cheapest planned ε of each side (the ε the planner finds for that mechanism,
   charged at λ₀); "out" where no member of the family reaches the target at any ε. The letter is
   what `"auto"` chose (D dirichlet, P posterior, G gaussian, L laplace).
2. At the same ε, simulated: each mechanism's error in each metric (the 95 % quantile of the ℓ2
   error or of D_KL(x/n ‖ y), the largest cell's root-mean-square error), at the worst of the
   four count vectors for that mechanism, then the best of each side.
3. The same at Zipf counts (xᵢ ∝ 1/i), 4. at uniform counts (the vector every Dirichlet prior
   pulls toward).
5. How tight each planned forecast is: the simulated quantile (or cell RMSE) at the worst count
   vector over the forecast, at the planned ε, for every planned item; 1 is a bound attained.
"""

import argparse
import csv
import math
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import Normalize  # noqa: E402

FAMILY = ["dirichlet", "posterior", "diffuse"]
BASELINES = ["gaussian", "laplace"]
MECHANISMS = FAMILY + BASELINES
LETTER = {"dirichlet": "D", "posterior": "P", "diffuse": "Df", "gaussian": "G", "laplace": "L"}
METRICS = [("l2", "l2_q95", "ℓ2"), ("cell_sd", "cell_rmse", "cell sd"), ("kl", "kl_q95", "KL")]
COLUMN = {m: c for m, c, _ in METRICS}
LABEL = {m: l for m, _, l in METRICS}
# The colour scale: a ratio of 1/100 to 100 (log10 −2 to 2), clipped beyond.
NORM = Normalize(vmin=-2, vmax=2)
CMAP = plt.get_cmap("RdBu_r")


def load(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def fnum(s):
    return float(s) if s else math.nan


def ratio_text(r):
    if r is None:
        return "out"
    if r >= 100:
        return f"{r:.0f}"
    if r >= 10:
        return f"{r:.0f}"
    return f"{r:.2f}"


def heatmap(ax, values, texts, rows, cols, title):
    """values: rows × cols of log10 ratios (None: the family out of reach → deepest red)."""
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            colour = CMAP(NORM(2.2 if v is None else v))
            ax.add_patch(plt.Rectangle((j, i), 1, 1, facecolor=colour, edgecolor="white", lw=1))
            dark = v is None or abs(v) > 1.1
            ax.text(
                j + 0.5,
                i + 0.5,
                texts[i][j],
                ha="center",
                va="center",
                fontsize=7.5,
                color="white" if dark else "black",
            )
    ax.set_xlim(0, len(cols))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([j + 0.5 for j in range(len(cols))])
    ax.set_xticklabels(cols, fontsize=7.5)
    ax.set_yticks([i + 0.5 for i in range(len(rows))])
    ax.set_yticklabels(rows, fontsize=8)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(title, fontsize=10)


def shape_columns(rows):
    dims = sorted({int(r["d"]) for r in rows})
    totals = sorted({int(r["n"]) for r in rows})
    return [(d, n) for d in dims for n in totals]


def col_label(d, n):
    return f"d={d}\nn={n:,}"


def planned_panel(rows, order):
    """Family's cheapest ε ÷ baselines' cheapest ε, per target and shape."""
    plan = [r for r in rows if r["section"] == "plan" and float(r["order"]) == order]
    shapes = shape_columns(plan)
    targets = sorted(
        {(r["target"], float(r["level"])) for r in plan},
        key=lambda t: ([m for m, _, _ in METRICS].index(t[0]), t[1]),
    )
    eps = defaultdict(dict)
    auto = {}
    for r in plan:
        key = (r["target"], float(r["level"]), int(r["d"]), int(r["n"]))
        if r["requested"] == "auto":
            auto[key] = r["mechanism"] if r["status"] == "planned" else None
        elif r["status"] == "planned":
            eps[key][r["requested"]] = float(r["epsilon"])
    values, texts, stats = [], [], []
    for t in targets:
        vrow, trow = [], []
        for d, n in shapes:
            key = (t[0], t[1], d, n)
            fam = min((eps[key][m] for m in FAMILY if m in eps[key]), default=None)
            base = min((eps[key][m] for m in BASELINES if m in eps[key]), default=None)
            letter = LETTER.get(auto.get(key), "–")
            if fam is None or base is None:
                vrow.append(None if fam is None else -2.2)
                trow.append(("out" if fam is None else "family\nonly") + f"\n{letter}")
                stats.append((t, d, n, None if fam is None else 0.0, auto.get(key)))
            else:
                r = fam / base
                vrow.append(math.log10(r))
                trow.append(f"{ratio_text(r)}\n{letter}")
                stats.append((t, d, n, r, auto.get(key)))
        values.append(vrow)
        texts.append(trow)
    labels = [f"{LABEL[m]} ≤ {lvl:g}" for m, lvl in targets]
    return values, texts, labels, [col_label(*s) for s in shapes], stats


def best_worst(err, case, names, vectors, metric):
    """The best of `names` at its own worst count vector."""
    return min(max(err[(*case, m)][v][metric] for v in vectors) for m in names)


def fixed_panel(rows, order, vectors):
    """Best family error ÷ best baseline error at each ε, each mechanism at its worst vector."""
    fixed = [r for r in rows if r["section"] == "fixed" and float(r["order"]) == order]
    shapes = shape_columns(fixed)
    epsilons = sorted({float(r["epsilon"]) for r in fixed})
    err = defaultdict(dict)
    for r in fixed:
        if r["vector"] in vectors:
            key = (float(r["epsilon"]), int(r["d"]), int(r["n"]), r["mechanism"])
            err[key][r["vector"]] = {m: float(r[c]) for m, c, _ in METRICS}
    values, texts, labels, stats = [], [], [], []
    for metric, _, label in METRICS:
        for e in epsilons:
            labels.append(f"{label}, ε = {e:g}")
            vrow, trow = [], []
            for d, n in shapes:
                f = best_worst(err, (e, d, n), FAMILY, vectors, metric)
                b = best_worst(err, (e, d, n), BASELINES, vectors, metric)
                r = f / b
                vrow.append(math.log10(r))
                trow.append(ratio_text(r))
                stats.append((metric, e, d, n, r, f, b))
            values.append(vrow)
            texts.append(trow)
    return values, texts, labels, [col_label(*s) for s in shapes], stats


def tightness(rows, order):
    """Per (metric, mechanism): worst-vector simulated quantile ÷ forecast at the planned ε."""
    worst_of = defaultdict(float)
    for r in rows:
        if r["section"] != "planned" or float(r["order"]) != order or r["requested"] == "auto":
            continue
        key = (r["target"], float(r["level"]), r["d"], r["n"], r["mechanism"])
        value = fnum(r[COLUMN[r["target"]]]) / fnum(r["bound"])
        worst_of[key] = max(worst_of[key], value)
    out = defaultdict(list)
    for (metric, _, _, _, mech), v in worst_of.items():
        out[(metric, mech)].append(v)
    return out


def strip(ax, tight, title):
    x = 0
    ticks, labels = [], []
    for metric, _, label in METRICS:
        for mech in MECHANISMS:
            vs = tight.get((metric, mech), [])
            colour = "tab:blue" if mech in FAMILY else "tab:red"
            jitter = [x + 0.25 * ((i * 0.618) % 1 - 0.5) for i in range(len(vs))]
            ax.scatter(jitter, vs, s=9, color=colour, alpha=0.7, lw=0)
            ticks.append(x)
            labels.append(mech if mech != "diffuse" else "diffuse α=1")
            x += 1
        ax.text(x - 3, 1.22, label, ha="center", fontsize=9)
        x += 1
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, fontsize=8, rotation=35, ha="right")
    ax.set_ylim(0, 1.3)
    ax.set_xlim(-1, x - 1)
    ax.set_ylabel("simulated ÷ forecast", fontsize=8)
    ax.set_title(title, fontsize=10)


def findings(order, plan_stats, views, tight):
    """The numbers the README quotes."""
    print(f"\n=== λ₀ = {order:g}")
    by_kind = defaultdict(lambda: defaultdict(list))
    for (metric, level), d, n, r, auto in plan_stats:
        tag = "out" if r is None else ("family" if r < 1 else "baselines")
        by_kind[metric][tag].append((level, d, n, r, auto))
    for metric, _, label in METRICS:
        k = by_kind[metric]
        wins = k["family"]
        text = f"  {label}: family cheaper in {len(wins)}, baselines cheaper in {len(k['baselines'])}, family out of reach in {len(k['out'])}"
        if wins:
            rs = [w[3] for w in wins]
            text += f"; family/baseline ε where the family wins {min(rs):.2f}–{max(rs):.2f}"
            autos = defaultdict(int)
            for w in wins:
                autos[w[4]] += 1
            text += f"; auto chose {dict(autos)} there"
        if k["baselines"]:
            rs = [w[3] for w in k["baselines"]]
            text += f"; where the baselines win the family needs {min(rs):.2f}–{max(rs):.3g}×"
        print(text)
    for name, stats in views:
        print(f"  same ε, {name}:")
        for metric, _, label in METRICS:
            rs = [s for s in stats if s[0] == metric]
            wins = [s for s in rs if s[4] < 1]
            ratios = [s[4] for s in rs]
            text = f"    {label}: family more accurate in {len(wins)} of {len(rs)}; family/baseline error {min(ratios):.2f}–{max(ratios):.3g}"
            if wins:
                text += " (family wins at " + ", ".join(
                    f"d={s[2]} n={s[3]} ε={s[1]:g}: {s[4]:.2f} ({s[5]:.3g} vs {s[6]:.3g})" for s in wins
                ) + ")"
            print(text)
    for metric, _, label in METRICS:
        fam = [v for m in FAMILY for v in tight.get((metric, m), [])]
        base = [v for m in BASELINES for v in tight.get((metric, m), [])]
        if fam and base:
            print(
                f"  tightness {label}: family {min(fam):.2f}–{max(fam):.2f} (median {sorted(fam)[len(fam)//2]:.2f}), "
                f"baselines {min(base):.2f}–{max(base):.2f} (median {sorted(base)[len(base)//2]:.2f})"
            )


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv")
    p.add_argument("--png", required=True)
    args = p.parse_args()
    rows = load(args.csv)
    orders = sorted({float(r["order"]) for r in rows})
    draws = max(int(r["draws"]) for r in rows if r["draws"])

    fig = plt.figure(figsize=(17, 27))
    grid = fig.add_gridspec(5, len(orders), height_ratios=[1, 1, 1, 1, 0.55], hspace=0.3, wspace=0.22, top=0.94, bottom=0.05)
    all_vectors = {"uniform", "zipf", "small_cells", "one_hot"}
    for j, order in enumerate(orders):
        v, t, rl, cl, plan_stats = planned_panel(rows, order)
        heatmap(
            fig.add_subplot(grid[0, j]),
            v,
            t,
            rl,
            cl,
            f"λ₀ = {order:g} — for a target (95 %): family's cheapest ε ÷ baselines' cheapest ε\n"
            "(planned; 'out': no family member reaches it; letter: auto's choice)",
        )
        views = []
        for i, (name, vectors) in enumerate(
            [
                ("worst of the four count vectors", all_vectors),
                ("Zipf counts", {"zipf"}),
                ("uniform counts", {"uniform"}),
            ],
            start=1,
        ):
            v, t, rl, cl, stats = fixed_panel(rows, order, vectors)
            views.append((name, stats))
            heatmap(
                fig.add_subplot(grid[i, j]),
                v,
                t,
                rl,
                cl,
                f"λ₀ = {order:g} — same ε, simulated ({draws:,} draws), {name}:\n"
                "family's error ÷ baselines' error (q95 for ℓ2 and KL; worst cell's RMSE)",
            )
        tight = tightness(rows, order)
        strip(
            fig.add_subplot(grid[4, j]),
            tight,
            f"λ₀ = {order:g} — each planned release at its planned ε: simulated (worst count vector) ÷ forecast\n"
            "(the Dirichlet family blue, the baselines red; 1 = the bound attained)",
        )
        findings(order, plan_stats, views, tight)
    sm = plt.cm.ScalarMappable(norm=NORM, cmap=CMAP)
    cbar = fig.colorbar(sm, ax=fig.axes, orientation="horizontal", fraction=0.012, pad=0.045, aspect=60)
    cbar.set_ticks([-2, -1, 0, 1, 2])
    cbar.set_ticklabels(
        ["0.01 (family 100× better)", "0.1", "1 (equal)", "10", "100 (baselines 100× better)"],
        fontsize=9,
    )
    fig.suptitle(
        "Where each mechanism wins: the Dirichlet family (dirichlet, posterior, diffuse α = 1) against the additive "
        "baselines (gaussian, laplace; smoothed for KL)\nreplace_one, confidence 95 %; ratios family ÷ baselines, "
        "blue below 1 (the family better), red above (examples/sweep.rs, scripts/research/sweep.sh)",
        fontsize=12,
        y=0.975,
    )
    fig.savefig(args.png, dpi=100, bbox_inches="tight")
    print(f"\nwrote {args.png}")


if __name__ == "__main__":
    main()
