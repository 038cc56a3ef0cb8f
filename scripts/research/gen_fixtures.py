#!/usr/bin/env python3
"""Reference values for the privacy core's special functions and Rényi divergences.

Run from the repository root:  python3 scripts/research/gen_fixtures.py [core|discrete|external]...
(default: all three). Writes src/privacy/fixtures/*.csv, which the tests load with include_str!.
Every argument is written as Python's repr of an f64, so Rust parses exactly the double mpmath
evaluated at. Requires mpmath (pip install mpmath).

- core: special functions, the Laplace and Dirichlet divergences and exact calibrations
  (src/privacy/special.rs, calibrate.rs); 50 significant digits, printed with 20.
- discrete: the discrete Laplace divergence D_lambda(L_Z(b) || 1 + L_Z(b)) at u = 1/b
  (src/privacy/discrete.rs, discrete_laplace.csv). The sum over the integers is evaluated in
  closed form (two geometric series, A = (e^{(l-1)u} + e^{-l u}) / (1 + e^{-u})), where 50 digits
  leave > 25 after the cancellation at u = 1e-9, and cross-checked against direct summation
  wherever that is feasible (u >= 0.01).
- external: external charges (src/privacy/external.rs, external.csv): mechanism, order, the two
  parameters (laplace: scale, sensitivity; pure: epsilon, unused), and the real-number RDP at the
  exact f64 arguments (the Laplace ratio sensitivity/scale is taken exactly, not rounded), at 60
  digits, printed with 25.
"""

import os
import sys

import mpmath as mp

mp.mp.dps = 50
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "privacy", "fixtures")


def log_spaced(lo_exp, hi_exp, n):
    return [float(mp.mpf(10) ** (lo_exp + (hi_exp - lo_exp) * k / (n - 1))) for k in range(n)]


def awkward_points():
    pts = [
        1e-6, 1e8, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.4603, 0.25, 0.1, 1e-3, 1e-2,
        # around the recurrence/asymptotic switch and other integers
        7.0, 7.5, 7.999999999, 8.0, 8.000000001, 8.5, 9.0, 10.0, 12.0, 16.0, 20.0,
        # near-integers just below and above
        0.999999999999, 1.000000000001, 1.9999999999999, 2.0000000000001,
        # values next to a tiny shape
        1.0000001e-6, 3.1e-5, 4.2e-4,
        # large
        123456.789, 9.87654321e6, 5e7, 99999999.5,
        # a bit outside the promised range (checked too)
        1e-8, 1e9, 1e12,
    ]
    return pts


def fmt(v):
    return mp.nstr(v, 20, min_fixed=-1, max_fixed=-1) if v != 0 else "0"


def write(name, header, rows):
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        f.write(header + "\n")
        for row in rows:
            f.write(",".join(row) + "\n")
    print(f"wrote {len(rows)} rows to {os.path.relpath(path)}")


def core():
    os.makedirs(OUT, exist_ok=True)
    xs = sorted(set(log_spaced(-6, 8, 200) + awkward_points()))

    write("trigamma.csv", "x,trigamma",
          [[repr(x), fmt(mp.psi(1, mp.mpf(x)))] for x in xs])
    write("tetragamma.csv", "x,tetragamma",
          [[repr(x), fmt(mp.psi(2, mp.mpf(x)))] for x in xs])
    write("ln_gamma.csv", "x,ln_gamma",
          [[repr(x), fmt(mp.loggamma(mp.mpf(x)))] for x in xs])

    # Laplace RDP of one cell shifted by u = s/b (Mironov 2017, Prop. 6).
    def laplace(lam, u):
        lam, u = mp.mpf(lam), mp.mpf(u)
        return mp.log(lam / (2 * lam - 1) * mp.exp((lam - 1) * u)
                      + (lam - 1) / (2 * lam - 1) * mp.exp(-lam * u)) / (lam - 1)

    rows = []
    for lam in [1.0001, 1.01, 1.5, 2.0, 3.0, 10.0, 1000.0]:
        for u in [1e-9, 1e-6, 1e-3, 0.1, 0.5, 0.999, 1.0, 1.001, 2.0, 10.0, 29.9, 30.1, 100.0, 1e4]:
            rows.append([repr(lam), repr(u), fmt(laplace(lam, u))])
    write("laplace.csv", "order,shift_over_scale,rdp", rows)

    # Exact Rényi divergence between Dirichlets (proof of 001 Theorem 2, eq. 19).
    def log_b(u):
        return mp.fsum(mp.loggamma(mp.mpf(a)) for a in u) - mp.loggamma(mp.fsum(mp.mpf(a) for a in u))

    def renyi(lam, u, v):
        lam = mp.mpf(lam)
        w = [mp.mpf(a) + (lam - 1) * (mp.mpf(a) - mp.mpf(b)) for a, b in zip(u, v)]
        if any(x <= 0 for x in w):
            return mp.inf
        return ((lam - 1) * (log_b(v) - log_b(u)) + log_b(w) - log_b(u)) / (lam - 1)

    x = [11.0, 8.0, 65.0, 25.0, 38.0, 1.0]
    xp = [11.0, 7.0, 65.0, 25.0, 38.0, 0.0]
    cases = []
    # 000 Figure 3's neighbours under Algorithm 1's prior alpha = 1 + 4(lambda - 1) r.
    for lam in [2.0, 20.0, 200.0]:
        for r in [0.1, 1.0, 3.0]:
            alpha = 1.0 + 4.0 * (lam - 1.0) * r
            u = [r * a + alpha for a in x]
            v = [r * a + alpha for a in xp]
            cases.append((lam, u, v))
            cases.append((lam, v, u))
    # Worst-case style pairs: one cell 0 -> 1 at the smallest prior; replace-one.
    cases += [
        (2.0, [3.46, 3.46, 10.0], [4.46, 3.46, 10.0]),
        (2.0, [4.46, 3.46, 10.0], [3.46, 3.46, 10.0]),
        (1.5, [0.7, 2.0, 5.0, 1.0], [1.7, 1.0, 5.0, 1.0]),
        (3.0, [2.5, 2.5], [3.5, 1.5]),
        (1.0001, [1e-3, 5.0, 7.0], [1.001, 5.0, 7.0]),
        (50.0, [1000.0, 2000.0, 3000.0], [1001.0, 1999.0, 3000.0]),
        (5.0, [0.25, 0.5, 100.0], [1.25, 0.5, 100.0]),
        # infinite: w_1 = 1 + 2 * (1 - 2) < 0
        (3.0, [1.0, 2.0], [2.0, 1.0]),
    ]
    rows = []
    for lam, u, v in cases:
        val = renyi(lam, u, v)
        rows.append([repr(lam), " ".join(repr(a) for a in u), " ".join(repr(b) for b in v),
                     "inf" if val == mp.inf else fmt(val)])
    write("renyi.csv", "order,u,v,divergence", rows)


    # Exact worst-case Rényi curve of Dir(r·x + α) for the two histogram relations
    # (docs/PRIVACY.md "Exact pricing"): G⁻, G⁺ from log-gammas at 50 digits, where the
    # cancellation that forces the service onto the kernel form does not matter.
    def g_minus(lam, r, a):
        lam, r, a = mp.mpf(lam), mp.mpf(r), mp.mpf(a)
        return (mp.loggamma(a + (lam - 1) * r) - lam * mp.loggamma(a)
                + (lam - 1) * mp.loggamma(a - r)) / (lam - 1)

    def g_plus(lam, r, c):
        lam, r, c = mp.mpf(lam), mp.mpf(r), mp.mpf(c)
        if c <= (lam - 1) * r:
            return mp.inf
        return (mp.loggamma(c - (lam - 1) * r) - lam * mp.loggamma(c)
                + (lam - 1) * mp.loggamma(c + r)) / (lam - 1)

    def exact(rel, lam, r, alphas):
        if rel == "replace_one":
            return max(g_minus(lam, r, mp.mpf(alphas[k]) + r) + g_plus(lam, r, alphas[l])
                       for k in range(len(alphas)) for l in range(len(alphas)) if k != l)
        am = min(alphas)
        return max(g_plus(lam, r, am), g_minus(lam, r, mp.mpf(am) + r))

    exact_cases = [
        # research note §1 table
        (2.0, 1.0, [3.46, 3.46]), (2.0, 1.0, [5.0, 5.0]), (3.0, 1.0, [5.0, 5.0]),
        (2.0, 0.1, [1.0, 1.0]), (8.0, 0.1, [1.0, 1.0]), (5.0, 1.0, [10.0, 10.0]),
        (22.0, 1.0, [100.0, 100.0]),
        # per-cell priors: only the two smallest matter, both orders
        (2.0, 1.0, [3.46, 5.0, 2.5]), (4.0, 0.3, [7.0, 1.5, 1.5, 9.0]), (1.5, 2.0, [3.0, 40.0]),
        # near the pole, tiny and huge priors, orders near 1 and large
        (2.0, 1.0, [1.000001, 1.000001]), (1.0 + 1e-6, 1.0, [0.5, 0.5]),
        (1000.0, 1e-4, [1.0, 1.0]), (2.0, 1.0, [1e8, 1e8]), (5.0, 3.0, [1e12, 1e12]),
        (2.0, 1e-3, [1e-3, 2e-3]), (10.0, 1e-8, [1e-6, 1e-6]), (3.0, 50.0, [101.0, 200.0]),
        (1.5, 1.0, [0.5000001, 0.7]),
    ]
    rows = []
    for lam, r, alphas in exact_cases:
        for rel in ["replace_one", "add_remove_one"]:
            rows.append([rel, repr(lam), repr(r), " ".join(repr(a) for a in alphas),
                         fmt(exact(rel, lam, r, alphas))])
    write("exact.csv", "relation,order,r,alpha,epsilon_star", rows)

    # Calibrations against the exact curve: (relation, kind, order, epsilon, fixed parameter,
    # solved parameter). dirichlet: α = a₀ + 4(λ−1)r, r solved; posterior: r fixed, α solved;
    # diffuse: α fixed, r solved.
    def solve(f, lo, hi):
        lo, hi = mp.mpf(lo), mp.mpf(hi)
        for _ in range(400):
            mid = (lo + hi) / 2
            if f(mid) > 0:
                hi = mid
            else:
                lo = mid
        return (lo + hi) / 2

    cal_rows = []
    cal_cases = [
        ("replace_one", "posterior", 2.0, 1.0, 1.0), ("replace_one", "posterior", 22.0, 0.134, 1.0),
        ("replace_one", "diffuse", 2.0, 0.01, 10.0), ("replace_one", "dirichlet", 2.0, 1.0, 1.0),
        ("replace_one", "posterior", 5.0, 0.1, 1.0), ("replace_one", "dirichlet", 5.0, 0.1, 1.0),
        ("replace_one", "diffuse", 5.0, 0.1, 1.0), ("add_remove_one", "posterior", 2.0, 1.0, 1.0),
        ("add_remove_one", "dirichlet", 20.0, 0.5, 1.0), ("add_remove_one", "diffuse", 3.0, 2.0, 0.5),
    ]
    for rel, kind, lam, eps, fixed in cal_cases:
        lamm = mp.mpf(lam)
        if kind == "posterior":
            val = solve(lambda a: eps - exact(rel, lam, fixed, [a, a]),
                        (lamm - 1) * fixed * (1 + mp.mpf(10) ** -40), 1e9)
        elif kind == "diffuse":
            val = solve(lambda r: exact(rel, lam, r, [fixed, fixed]) - eps,
                        mp.mpf(10) ** -30, fixed / (lamm - 1) * (1 - mp.mpf(10) ** -40))
        else:
            val = solve(lambda r: exact(rel, lam, r, [fixed + 4 * (lamm - 1) * r] * 2) - eps,
                        mp.mpf(10) ** -30, 1e6)
        cal_rows.append([rel, kind, repr(lam), repr(eps), repr(fixed), fmt(val)])
    write("exact_calibrations.csv", "relation,kind,order,epsilon,fixed,solved", cal_rows)


def discrete_closed_form(lam, u):
    lam, u = mp.mpf(lam), mp.mpf(u)
    a = (mp.exp((lam - 1) * u) + mp.exp(-lam * u)) / (1 + mp.exp(-u))
    return mp.log(a) / (lam - 1)


def discrete_direct(lam, u):
    lam, u = mp.mpf(lam), mp.mpf(u)
    p = mp.exp(-u)
    c = (1 - p) / (1 + p)

    def term(y):
        p0 = c * p ** abs(y)
        p1 = c * p ** abs(y - 1)
        return p0 ** lam * p1 ** (1 - lam)

    n = int(mp.ceil(200 / u)) + 10
    s = mp.fsum(term(y) for y in range(-n, n + 2))
    return mp.log(s) / (lam - 1)


def discrete():
    rows = []
    for lam in [1.0001, 1.01, 1.5, 2.0, 3.0, 10.0, 1000.0]:
        for u in [1e-9, 1e-6, 1e-3, 0.01, 0.1, 0.5, 1.0, 2.0, 10.0, 29.9, 30.1, 100.0, 1e4]:
            v = discrete_closed_form(lam, u)
            if 0.01 <= u <= 10 and lam <= 10:
                d = discrete_direct(lam, u)
                assert abs(d - v) <= mp.mpf(10) ** -30 * abs(v), (lam, u, d, v)
            rows.append([repr(lam), repr(u), fmt(v)])
    write("discrete_laplace.csv", "order,u,rdp", rows)


def external_laplace(lam, u):
    """Mironov 2017, Prop. 6, in log-sum-exp form (exact in mpmath at any size)."""
    lam, u = mp.mpf(lam), mp.mpf(u)
    a = mp.log(lam / (2 * lam - 1)) + (lam - 1) * u
    b = mp.log((lam - 1) / (2 * lam - 1)) - lam * u
    m = max(a, b)
    return (m + mp.log(mp.exp(a - m) + mp.exp(b - m))) / (lam - 1)


def randomized_response(lam, eps):
    """D_λ of binary randomized response at ε: ln((e^{λε} + e^{(1−λ)ε})/(e^ε + 1))/(λ−1)."""
    lam, eps = mp.mpf(lam), mp.mpf(eps)
    a = lam * eps
    b = (1 - lam) * eps
    m = max(a, b)
    num = m + mp.log(mp.exp(a - m) + mp.exp(b - m))
    den = eps + mp.log(1 + mp.exp(-eps))
    return (num - den) / (lam - 1)


def external():
    with mp.workdps(60):
        external_rows()


def external_rows():
    orders = [1.0001, 1.01, 1.5, 2.0, 3.0, 10.0, 64.0, 1000.0, 1e6, 1e15]
    rows = []
    for lam in orders:
        for scale, sens in [(1e9, 1.0), (1e6, 1.0), (1e3, 1.0), (7.0, 3.0), (10.0, 1.0),
                            (1.0, 1.0), (0.5, 1.0), (0.1, 3.0), (1.0, 29.9), (1.0, 30.1),
                            (0.01, 1.0), (1e-4, 1.0)]:
            u = mp.mpf(sens) / mp.mpf(scale)
            rows.append(["laplace", repr(lam), repr(scale), repr(sens), mp.nstr(external_laplace(lam, u), 25)])
        for eps in [1e-9, 1e-6, 1e-3, 0.05, 0.3, 1.0, 2.0, 5.0, 10.0, 29.0, 31.0, 200.0]:
            rows.append(["pure", repr(lam), repr(eps), "0", mp.nstr(randomized_response(lam, eps), 25)])
    write("external.csv", "mechanism,order,a,b,rdp", rows)


SETS = {"core": core, "discrete": discrete, "external": external}


def main(names):
    for name in names or SETS:
        if name not in SETS:
            sys.exit(f"unknown set {name!r}: one of {', '.join(SETS)}")
        SETS[name]()


if __name__ == "__main__":
    main(sys.argv[1:])
