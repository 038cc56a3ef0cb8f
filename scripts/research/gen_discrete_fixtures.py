#!/usr/bin/env python3
"""Reference values for the discrete Laplace Renyi divergence (src/privacy/discrete.rs).

Run from the repository root:  python3 scripts/research/gen_discrete_fixtures.py
Writes src/privacy/fixtures/discrete_laplace.csv: D_lambda(L_Z(b) || 1 + L_Z(b)) at u = 1/b, from
the sum over the integers at 50 significant digits. The sum is evaluated in closed form (two
geometric series, A = (e^{(l-1)u} + e^{-l u}) / (1 + e^{-u})), where 50 digits leave > 25 after the
cancellation at u = 1e-9, and cross-checked here against direct summation wherever that is
feasible (u >= 0.01). Requires mpmath.
"""

import os

import mpmath as mp

mp.mp.dps = 50
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "privacy", "fixtures")


def closed_form(lam, u):
    lam, u = mp.mpf(lam), mp.mpf(u)
    a = (mp.exp((lam - 1) * u) + mp.exp(-lam * u)) / (1 + mp.exp(-u))
    return mp.log(a) / (lam - 1)


def direct(lam, u):
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


def fmt(v):
    return mp.nstr(v, 20, min_fixed=-1, max_fixed=-1) if v != 0 else "0"


def main():
    rows = []
    for lam in [1.0001, 1.01, 1.5, 2.0, 3.0, 10.0, 1000.0]:
        for u in [1e-9, 1e-6, 1e-3, 0.01, 0.1, 0.5, 1.0, 2.0, 10.0, 29.9, 30.1, 100.0, 1e4]:
            v = closed_form(lam, u)
            if 0.01 <= u <= 10 and lam <= 10:
                d = direct(lam, u)
                assert abs(d - v) <= mp.mpf(10) ** -30 * abs(v), (lam, u, d, v)
            rows.append([repr(lam), repr(u), fmt(v)])
    path = os.path.join(OUT, "discrete_laplace.csv")
    with open(path, "w") as f:
        f.write("order,u,rdp\n")
        for row in rows:
            f.write(",".join(row) + "\n")
    print(f"wrote {len(rows)} rows to {os.path.relpath(path)}")


if __name__ == "__main__":
    main()
