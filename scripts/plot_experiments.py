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


def plot(data, png):
    fig, axes = plt.subplots(1, len(PANELS), figsize=(6 * len(PANELS), 4.6))
    for ax, (example, metric, _) in zip(axes, PANELS):
        sign = -1.0 if metric == "log_likelihood" else 1.0
        for mech in PRIVATE:
            series = data.get((example, metric, mech))
            if not series:
                continue
            eps = sorted(e for e in series if e is not None)
            means = [sign * num(series[e], "mean") for e in eps]
            ses = [0.0 if math.isnan(num(series[e], "stderr")) else num(series[e], "stderr") for e in eps]
            ax.errorbar(eps, means, yerr=ses, marker="o", ms=4, capsize=2, label=mech, color=COLOURS[mech])
        for model, name, colour, style in REFERENCES:
            series = data.get((example, metric, model))
            if series:
                ax.axhline(sign * num(series[None], "mean"), color=colour, linestyle=style, label=name)
        ax.set_xscale("log")
        ax.set_xlabel("total ε of the model (Rényi DP, λ = 5)")
        ax.set_title(PLOT_TITLES[metric], fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        if metric != "accuracy":
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def table(data, example, metric):
    private = [m for m in PRIVATE if (example, metric, m) in data]
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
    body += ["Checked automatically from the numbers above:", ""] + claims(data)
    text = open(a.markdown).read()
    start, end = "<!-- results:start -->", "<!-- results:end -->"
    i, j = text.index(start) + len(start), text.index(end)
    open(a.markdown, "w").write(text[:i] + "\n" + "\n".join(body) + "\n" + text[j:])


if __name__ == "__main__":
    main()
