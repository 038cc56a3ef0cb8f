#!/usr/bin/env python3
"""Reference values for src/privacy/{exponential,gohari}.rs, recomputed with mpmath (40 digits).

Run: python3 scripts/research/seeds_reference.py   (needs mpmath). Prints the numbers the unit tests of
those modules check, independently of the research note that first listed them.
"""
from mpmath import mp, mpf, loggamma as lg, log, log1p, exp, expm1, sqrt, betainc

mp.dps = 40


def lnbeta(a, b):
    return lg(a) + lg(b) - lg(a + b)


def hellinger(a1, b1, a2, b2):
    return sqrt(-expm1(lnbeta((a1 + a2) / 2, (b1 + b2) / 2) - (lnbeta(a1, b1) + lnbeta(a2, b2)) / 2))


def cands(n, a, b):
    return [(a + j, b + n - j) for j in range(n + 1)]


def delta_g(n, a, b):
    c = cands(n, a, b)
    return max(hellinger(*c[j], *c[j + 1]) for j in range(n))


def probs(n, a, b, n1, eps):
    c = cands(n, a, b)
    d = delta_g(n, a, b)
    w = [exp(-eps * hellinger(*c[n1], *cj) / (2 * d)) for cj in c]
    s = sum(w)
    return [x / s for x in w]


def gohari(k, eta, etabar, h, nW, delta):
    s = min(h, (1 - etabar) / 2 - eta)
    v2 = lnbeta(k * eta, k * (1 - etabar - eta)) - lnbeta(k * (eta + s), k * (1 - etabar - eta - s))
    dU = lambda g: nW * betainc(k * eta, k * (1 - eta), 0, g, regularized=True)
    lo, hi = mpf(0), min(mpf(eta), mpf(1) / nW)
    if dU(hi) <= delta:
        lo = hi
    else:
        for _ in range(150):
            mid = (lo + hi) / 2
            if dU(mid) <= delta:
                lo = mid
            else:
                hi = mid
    return v2 + k * h * log((1 - (nW - 1) * lo) / lo), lo


print("Delta_g n=10 (1,1):", delta_g(10, 1, 1))
for n, a, b in [(100, 1, 1), (100, 6, 12), (1000, 1, 1)]:
    print(f"Delta_g n={n} ({a},{b}):", delta_g(n, mpf(a), mpf(b)))
print("P n=10 n1=3 eps=1:", [mp.nstr(p, 10) for p in probs(10, 1, 1, 3, 1)])
for eps in [1, 5, 20]:
    p = probs(100, 1, 1, 30, eps)
    print(f"n=100 n1=30 eps={eps}: P[30]={mp.nstr(p[30], 6)} E|j-30|={mp.nstr(sum(pj * abs(j - 30) for j, pj in enumerate(p)), 8)}")
print("I_0.002(1.2,22.8):", betainc(mpf('1.2'), mpf('22.8'), 0, mpf('0.002'), regularized=True))
print("003 VI (delta_U):", gohari(mpf(24), mpf('0.05'), mpf('0.05'), mpf(1) / 200, 2, mpf('0.05')))
for eta, k in [('0.15', '6.7'), ('0.20', '5.1'), ('0.25', '4.1')]:
    print(f"Fig.1 eta={eta} k={k}:", [mp.nstr(gohari(mpf(k), mpf(eta), mpf(eta), mpf('0.05'), 3, mpf(d))[0], 7) for d in ['0.02', '0.05', '0.1']])
