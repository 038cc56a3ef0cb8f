"""EXPERIMENTS.md's tables and plot from the examples' summaries (their --out CSV files).

    plot_experiments.py NB.csv BN.csv --png docs/experiments.png --markdown EXPERIMENTS.md

Rewrites the part of the markdown file between `<!-- results:start -->` and
`<!-- results:end -->`; everything else in it is left as written.
"""

import argparse
import csv
import math
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PRIVATE = ["dirichlet", "gaussian", "laplace"]
# The ε split by the planner for a common KL target (and the baselines smoothed by it), and the
# controls: the planner's smoothing with the even split.
PLANNED = ["planned:dirichlet", "planned:gaussian", "planned:laplace"]
SMOOTHED = ["smoothed:gaussian", "smoothed:laplace"]
VARIANTS = PLANNED + SMOOTHED
MODELS = PRIVATE + VARIANTS
# Each variant drawn in its mechanism's colour: even split solid, planned dashed, smoothed dotted.
STYLES = {"": ("-", "o"), "planned:": ("--", "s"), "smoothed:": (":", "^")}
REFERENCES = [
    ("non-private", "non-private (MLE)", "black", "--"),
    ("non-private+1", "non-private (add-one)", "dimgray", ":"),
    ("uniform", "uniform", "silver", "-."),
]
COLOURS = {"dirichlet": "tab:blue", "gaussian": "tab:orange", "laplace": "tab:green"}
PANELS = [
    ("naive_bayes", "cross_entropy", "Naive Bayes: test cross-entropy (nats, lower is better)"),
    ("naive_bayes", "accuracy", "Naive Bayes: test accuracy (higher is better)"),
    ("bayes_net", "log_likelihood", "Bayesian network: test log-likelihood per record (nats, higher is better)"),
]
# The plot shows the network's negative log-likelihood, so that all panels of losses share a
# log axis on which the additive mechanisms' large losses and the small gaps near the
# non-private model are both visible.
PLOT_TITLES = {
    "log_likelihood": "Bayesian network: test negative log-likelihood per record\n(nats, log scale, lower is better)",
    "cross_entropy": "Naive Bayes: test cross-entropy\n(nats, log scale, lower is better)",
    "accuracy": "Naive Bayes: test accuracy\n(higher is better)",
}


def load(paths):
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            rows.extend(csv.DictReader(f))
    data = defaultdict(dict)
    for r in rows:
        eps = float(r["epsilon"]) if r["epsilon"] else None
        data[(r["example"], r["metric"], r["model"])][eps] = r
    return data


def num(r, key):
    return float(r[key]) if r[key] else math.nan


def fmt(mean, se):
    if math.isnan(se):
        return f"{mean:.3f}"
    return f"{mean:.3f} ± {se:.3f}"


def style(model):
    prefix, _, mech = model.rpartition(":")
    prefix = prefix + ":" if prefix else ""
    line, marker = STYLES[prefix]
    return COLOURS[mech], line, marker


def plot(data, png):
    # Top row: the paper's comparison (even split). Bottom row: the planner's split and
    # smoothing beside the even-split Dirichlet mechanism (the unsmoothed baselines' losses, an
    # order of magnitude larger, would flatten the rest).
    rows = [PRIVATE, ["dirichlet"] + VARIANTS]
    row_titles = ["ε split evenly (the paper)", "ε split by the planner for one KL target; smoothing"]
    fig, axes = plt.subplots(len(rows), len(PANELS), figsize=(6 * len(PANELS), 4.6 * len(rows)), squeeze=False)
    for row, (models, row_title) in enumerate(zip(rows, row_titles)):
        for ax, (example, metric, _) in zip(axes[row], PANELS):
            sign = -1.0 if metric == "log_likelihood" else 1.0
            for model in models:
                series = data.get((example, metric, model))
                if not series:
                    continue
                eps = sorted(e for e in series if e is not None)
                means = [sign * num(series[e], "mean") for e in eps]
                ses = [0.0 if math.isnan(num(series[e], "stderr")) else num(series[e], "stderr") for e in eps]
                colour, line, marker = style(model)
                ax.errorbar(eps, means, yerr=ses, marker=marker, ms=4, capsize=2, label=model,
                            color=colour, linestyle=line)
            for model, name, colour, linestyle in REFERENCES:
                series = data.get((example, metric, model))
                if series:
                    ax.axhline(sign * num(series[None], "mean"), color=colour, linestyle=linestyle, label=name)
            ax.set_xscale("log")
            ax.set_xlabel("total ε of the model (Rényi DP, λ = 5)")
            ax.set_title(f"{PLOT_TITLES[metric]}\n[{row_title}]", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            if metric != "accuracy":
                ax.set_yscale("log")
        axes[row][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def table(data, example, metric):
    private = [m for m in MODELS if (example, metric, m) in data]
    eps = sorted({e for m in private for e in data[(example, metric, m)] if e is not None})
    lines = [
        "| ε | " + " | ".join(private) + " | spent/ε (min–max over all fits) |",
        "|---:|" + "---:|" * len(private) + "---|",
    ]
    for e in eps:
        cells, lo, hi = [], math.inf, -math.inf
        for m in private:
            r = data[(example, metric, m)].get(e)
            if r is None:
                cells.append("")
                continue
            cells.append(fmt(num(r, "mean"), num(r, "stderr")))
            lo = min(lo, num(r, "spent_over_epsilon_min"))
            hi = max(hi, num(r, "spent_over_epsilon_max"))
        lines.append(f"| {e:g} | " + " | ".join(cells) + f" | {lo:.12f} – {hi:.12f} |")
    refs = []
    for model, name, _, _ in REFERENCES:
        series = data.get((example, metric, model))
        if series:
            refs.append(f"{name} {num(series[None], 'mean'):.3f}")
    lines.append("")
    lines.append("References (do not depend on ε): " + "; ".join(refs) + ".")
    return lines


def plan_table(data, example):
    """What the planner chose per ε: the common KL target per mechanism, the largest and
    smallest table's ε over the even split's, and the baselines' pseudo-counts."""
    def value(mech, metric, e):
        r = data.get((example, metric, f"planned:{mech}"), {}).get(e)
        return num(r, "mean") if r else math.nan

    eps = sorted({e for m in PRIVATE for e in data.get((example, "plan_kl_target", f"planned:{m}"), {})})
    if not eps:
        return []
    lines = [
        "| ε | KL target t: dirichlet | gaussian | laplace | table ε / (ε/T), min–max: dirichlet | gaussian | laplace "
        "| smoothing k, min–max: gaussian | laplace | plan cost / ε (min) |",
        "|---:|---:|---:|---:|---|---|---|---|---|---:|",
    ]
    for e in eps:
        targets = [f"{value(m, 'plan_kl_target', e):.4g}" for m in PRIVATE]
        shares = [f"{value(m, 'plan_share_min', e):.2g}–{value(m, 'plan_share_max', e):.2g}" for m in PRIVATE]
        smooth = [f"{value(m, 'plan_smoothing_min', e):.3g}–{value(m, 'plan_smoothing_max', e):.3g}"
                  for m in ("gaussian", "laplace")]
        frac = min(value(m, "plan_cost_over_epsilon", e) for m in PRIVATE)
        lines.append(f"| {e:g} | " + " | ".join(targets + shares + smooth) + f" | {frac:.9f} |")
    return lines


def compare(data, example, metric, better, mine, theirs, label):
    """ε at which model `mine` is better than every model in `theirs` (means)."""
    d = data.get((example, metric, mine), {})
    wins, losses = [], []
    for e in sorted(x for x in d if x is not None):
        others = [num(data[(example, metric, m)][e], "mean") for m in theirs
                  if e in data.get((example, metric, m), {})]
        if not others:
            continue
        v = num(d[e], "mean")
        (wins if all(better(v, o) == v and v != o for o in others) else losses).append(f"{e:g}")
    if not wins and not losses:
        return []
    return [f"- {example} {metric}: {label} for ε ∈ {{{', '.join(wins) or 'none'}}}; "
            f"not for ε ∈ {{{', '.join(losses) or 'none'}}}."]


def variant_claims(data):
    """What the planner's split and smoothing change, on these numbers (means)."""
    out = []
    for example, metric, better in [("naive_bayes", "cross_entropy", min), ("naive_bayes", "accuracy", max),
                                    ("bayes_net", "log_likelihood", max)]:
        for mech in ("gaussian", "laplace"):
            out += compare(data, example, metric, better, f"smoothed:{mech}", [mech],
                           f"smoothed:{mech} better than {mech} (smoothing, same even split)")
            out += compare(data, example, metric, better, f"planned:{mech}", [f"smoothed:{mech}"],
                           f"planned:{mech} better than smoothed:{mech} (the planner's split, same smoothing)")
        out += compare(data, example, metric, better, "planned:dirichlet", ["dirichlet"],
                       "planned:dirichlet better than dirichlet (the planner's split)")
        out += compare(data, example, metric, better, "dirichlet", ["smoothed:gaussian", "smoothed:laplace"],
                       "dirichlet better than both smoothed baselines")
        out += compare(data, example, metric, better, "dirichlet", [m for m in MODELS if m != "dirichlet"],
                       "dirichlet (even split) better than every other variant")
    return out


def claims(data):
    """The seed paper's claims, checked on these numbers (means over repetitions)."""
    out = []
    for example, metric, better in [("naive_bayes", "cross_entropy", min), ("bayes_net", "log_likelihood", max)]:
        d = data.get((example, metric, "dirichlet"))
        if not d:
            continue
        wins, losses = [], []
        for e in sorted(x for x in d if x is not None and x <= 1.0):
            others = {m: num(data[(example, metric, m)][e], "mean") for m in ("gaussian", "laplace")
                      if e in data.get((example, metric, m), {})}
            mine = num(d[e], "mean")
            if all(better(mine, v) == mine for v in others.values()):
                wins.append(f"{e:g}")
            else:
                losses.append(f"{e:g}")
        word = "lower" if better is min else "higher"
        out.append(
            f"- {example} {metric}: Dirichlet {word} than both Gaussian and Laplace at ε ≤ 1 for "
            f"ε ∈ {{{', '.join(wins) or 'none'}}}; not for ε ∈ {{{', '.join(losses) or 'none'}}}."
        )
        if 10.0 in d:
            top = num(d[10.0], "mean")
            for model, name, _, _ in REFERENCES[:2]:
                ref = data.get((example, metric, model))
                if ref:
                    v = num(ref[None], "mean")
                    out.append(f"  - at ε = 10: Dirichlet {top:.3f} vs {name} {v:.3f} (difference {top - v:+.3f}).")
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv", nargs="+")
    p.add_argument("--png", required=True)
    p.add_argument("--markdown", required=True)
    p.add_argument("--png-link", required=True, help="the PNG's path as linked from the markdown")
    a = p.parse_args()
    data = load(a.csv)
    plot(data, a.png)
    body = [f"![test metrics against ε]({a.png_link})", ""]
    for example, metric, title in PANELS:
        if any(k[0] == example and k[1] == metric for k in data):
            body += [f"**{title}** (mean ± standard error over repetitions)", ""]
            body += table(data, example, metric)
            body.append("")
    for example, title in [("naive_bayes", "Naive Bayes"), ("bayes_net", "Bayesian network")]:
        lines = plan_table(data, example)
        if lines:
            body += [f"**{title}: what the planner chose** (T tables; the plans do not depend on the repetition)", ""]
            body += lines + [""]
    body += ["Checked automatically from the numbers above:", ""] + claims(data) + variant_claims(data)
    text = open(a.markdown).read()
    start, end = "<!-- results:start -->", "<!-- results:end -->"
    i, j = text.index(start) + len(start), text.index(end)
    open(a.markdown, "w").write(text[:i] + "\n" + "\n".join(body) + "\n" + text[j:])


if __name__ == "__main__":
    main()
