#!/usr/bin/env python3
"""Reference values for src/privacy/external.rs (external charges), at 60 significant digits.

Run from the repository root:  python3 scripts/research/gen_external_fixtures.py
Writes src/privacy/fixtures/external.csv: mechanism, order, the two parameters (laplace: scale,
sensitivity; pure: epsilon, unused), and the real-number RDP at the exact f64 arguments (the
Laplace ratio sensitivity/scale is taken exactly, not rounded), printed with 25 digits.
Requires mpmath (pip install mpmath).
"""

import os

import mpmath as mp

mp.mp.dps = 60
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "privacy", "fixtures")


def laplace(lam, u):
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


def main():
    orders = [1.0001, 1.01, 1.5, 2.0, 3.0, 10.0, 64.0, 1000.0, 1e6, 1e15]
    rows = []
    for lam in orders:
        for scale, sens in [(1e9, 1.0), (1e6, 1.0), (1e3, 1.0), (7.0, 3.0), (10.0, 1.0),
                            (1.0, 1.0), (0.5, 1.0), (0.1, 3.0), (1.0, 29.9), (1.0, 30.1),
                            (0.01, 1.0), (1e-4, 1.0)]:
            u = mp.mpf(sens) / mp.mpf(scale)
            rows.append(["laplace", repr(lam), repr(scale), repr(sens), mp.nstr(laplace(lam, u), 25)])
        for eps in [1e-9, 1e-6, 1e-3, 0.05, 0.3, 1.0, 2.0, 5.0, 10.0, 29.0, 31.0, 200.0]:
            rows.append(["pure", repr(lam), repr(eps), "0", mp.nstr(randomized_response(lam, eps), 25)])
    path = os.path.join(OUT, "external.csv")
    with open(path, "w") as f:
        f.write("mechanism,order,a,b,rdp\n")
        for r in rows:
            f.write(",".join(r) + "\n")
    print(f"wrote {len(rows)} rows to {path}")


if __name__ == "__main__":
    main()
