//! External charges: the Rényi-DP cost, at one order λ, of a mechanism run *outside* the service
//! on the same people, so that it can be charged to a dataset's (and its populations') ledger
//! (docs/PRIVACY.md, "Populations and external charges").
//!
//! Every function returns an upper bound on the real-number value that no f64 rounding can put
//! below it, for finite positive parameters and a finite order λ > 1. Anything else (NaN, ±∞,
//! ≤ 0, λ ≤ 1) prices at +∞: the caller validates first, and this is the fail-closed backstop
//! (as in `curve`), so a ledger that refuses non-finite charges refuses the request.
//!
//! Two ways of rounding outward, named at each function:
//!
//! - *Directed* ([`gaussian_rdp`], [`zcdp_rdp`], and the fallbacks below): after every IEEE
//!   operation the result is stepped to the next f64 up. An operation rounds to nearest, so its
//!   result is within half a spacing of the exact one (subnormals included), and the next f64 up
//!   is ≥ the exact result on the same operands; every operation used is increasing in its
//!   operands, which are themselves upper bounds, so the end result is ≥ the real value.
//!   Overflow gives +∞, still an upper bound. No transcendental function is involved.
//! - *Bounded error* ([`laplace_rdp`], [`pure_rdp`]): evaluated to nearest, with a relative
//!   error proven below 200·2⁻⁵³ ≈ 2.2e-14 at each function (each libm call — exp, exp_m1,
//!   ln, ln_1p, tanh — allowed 4 ulps), then multiplied by 1 + [`EVALUATION_ERROR`] (1e-13,
//!   four times that) and stepped up one f64. The analysis assumes no intermediate underflowed;
//!   a value below [`UNDERFLOW_GUARD`] is instead priced by the directed bound
//!   min(ε₀, λε₀²/2) of an ε₀-DP mechanism (Bun & Steinke 2016, Prop. 3.3), which is also
//!   taken as a cap everywhere (a minimum of upper bounds is an upper bound).
//!
//! The ledger inflates every curve value once more by `ledger::charge::CURVE_RELATIVE_ERROR`
//! and rounds it up to its grid; composition (a `count`, a `composed` list) is best done there,
//! on the integer grid, where sums and multiples are exact.

use super::curve::exp_minus_one_minus_id as phi;
use super::exact::next_up;

/// The relative inflation of the bounded-error evaluations: four times their proven error.
const EVALUATION_ERROR: f64 = 1e-13;

/// Below this (2⁻⁹⁰⁰ ≈ 1.2e-271) a bounded-error value may rest on underflowed intermediates;
/// the directed fallback prices it instead (far below the ledger's grid of 2⁻⁴⁰ either way).
const UNDERFLOW_GUARD: f64 = f64::from_bits((1023 - 900) << 52);

/// Where the Laplace and randomized-response forms switch from the cancellation-free sum of
/// φ terms to the factored log-sum-exp: (λ−1)·u ≥ 30 (as `curve`'s continuous Laplace).
const FACTOR_FROM: f64 = 30.0;

/// The Gaussian mechanism, noise N(0, σ²) on a query of ℓ2-sensitivity Δ:
/// ε(λ) = λΔ²/(2σ²) (Mironov 2017, Prop. 7; for vector queries the multivariate form is the
/// same with Δ the ℓ2 sensitivity). Also an upper bound for the discrete Gaussian at integer
/// shifts (Canonne, Kamath & Steinke 2020, Theorem 4). Directed rounding: exact-or-above.
pub fn gaussian_rdp(sigma: f64, sensitivity: f64, order: f64) -> f64 {
    if !(positive(sigma) && positive(sensitivity) && valid_order(order)) {
        return f64::INFINITY;
    }
    // λ/2 · (Δ/σ)², in that order so that nothing overflows before it must: Δ/σ first (Δ² and
    // σ² could each overflow where their ratio does not). λ/2 is exact (λ > 1 is normal).
    let r = next_up(sensitivity / sigma);
    let r2 = next_up(r * r);
    next_up(0.5 * order * r2)
}

/// The Laplace mechanism, noise Lap(0, s) on a query of ℓ1-sensitivity Δ, with b = s/Δ and
/// u = 1/b = Δ/s (Mironov 2017, Prop. 6):
///
///   ε(λ) = 1/(λ−1) · ln( λ/(2λ−1)·e^{(λ−1)u} + (λ−1)/(2λ−1)·e^{−λu} ).
///
/// Prop. 6 is the scalar shift by Δ. For a vector query with ℓ1 sensitivity Δ (independent
/// Lap(0, s) per coordinate) it is still the worst case: the divergence of a shift vector δ is
/// Σᵢ f(|δᵢ|/s)/(λ−1) with f(u) = (λ−1)ε(u) a log-sum-exp of affine functions of u, hence
/// convex, with f(0) = 0, hence superadditive: Σᵢ f(|δᵢ|/s) ≤ f(Σᵢ|δᵢ|/s) ≤ f(Δ/s) (f is
/// increasing). The tests check both.
///
/// Bounded error (module docs). With p = λ/(2λ−1), q = (λ−1)/(2λ−1), x = (λ−1)u, y = λu:
/// p·x = q·y, so A − 1 = p·φ(x) + q·φ(−y), φ(z) = e^z − 1 − z ≥ 0 (`curve`'s form): a sum of
/// non-negative terms, no cancellation, for x < 30; from there (λ−1)ε = x + ln(p + q·e^{−(2λ−1)u})
/// (no overflow, and x ≥ 30 dominates the log, which lies in (ln ½, 0)). Error, in units of
/// 2⁻⁵³: u is rounded *up* (ε increases in u); x carries 2, and φ's condition number is below 30
/// for x < 30, so 60; φ itself 104 (18-term Horner with |z| ≤ 1: 52·(e−2)/φ(−1) ≤ 102 plus two
/// products; beyond, exp_m1's 8 amplified at most 4.44 by the subtraction); p, q ≤ 4; the sum,
/// ln_1p (condition ≤ 1, 8) and the division add ≤ 12: under 190 in all. The factored branch is
/// within 10.
pub fn laplace_rdp(scale: f64, sensitivity: f64, order: f64) -> f64 {
    if !(positive(scale) && positive(sensitivity) && valid_order(order)) {
        return f64::INFINITY;
    }
    let u = next_up(sensitivity / scale);
    let cap = pure_dp_cap(u, order);
    let lambda = order;
    let lm1 = lambda - 1.0;
    // 2λ − 1 = 2(λ − ½): written through λ − ½ so that no λ ≤ f64::MAX overflows it.
    let half = lambda - 0.5;
    let p = 0.5 * lambda / half;
    let q = 0.5 * lm1 / half;
    let x = lm1 * u;
    let value = if x < FACTOR_FROM {
        let a = p * phi(x) + q * phi(-(lambda * u));
        a.ln_1p() / lm1
    } else {
        let tail = q * (-(2.0 * half) * u).exp();
        (x + (p + tail).ln()) / lm1
    };
    outward(value, cap)
}

/// A pure ε-DP mechanism (any mechanism, of any output space): the tightest RDP bound that holds
/// for every ε-DP mechanism, attained by binary randomized response,
///
///   ε(λ) = 1/(λ−1) · ln( (e^{λε} + e^{−(λ−1)ε}) / (e^ε + 1) ),
///
/// capped by min(ε, λε²/2) (both always above it: D_λ never exceeds the max divergence D_∞ ≤ ε,
/// and Bun & Steinke 2016, Prop. 3.3 — the cap only guards the rounding).
///
/// Why it bounds every ε-DP pair (P, Q): the likelihood ratio L = dP/dQ lies in [e^{−ε}, e^{ε}]
/// and E_Q[L] = 1. L ↦ L^λ is convex (λ > 1), so on that interval it lies below its chord, and
/// taking E_Q of the chord, E_Q[L^λ] ≤ (e^{ε}·e^{−λε} + e^{λε})/(e^ε + 1) — the chord's weights
/// at a fixed mean 1 are e^ε/(e^ε+1) at e^{−ε} and 1/(e^ε+1) at e^{ε}. That is e^{(λ−1)D_λ} for
/// randomized response (report the true bit with probability e^ε/(1+e^ε); Mironov 2017, the
/// randomized-response row of its table of basic mechanisms), so the bound is tight. It is the
/// two-point extremal argument behind Bun & Steinke's Prop. 3.3, kept exact instead of relaxed
/// to λε²/2.
///
/// Bounded error (module docs). With p = e^ε/(1+e^ε), q = 1 − p, x = (λ−1)ε:
/// A − 1 = p(e^x − 1) + q(e^{−x} − 1) = p·φ(x) + q·φ(−x) + (p − q)·x with p − q = tanh(ε/2):
/// three non-negative terms for x < 30; from there (λ−1)D = x − ln(1 + e^{−ε}) +
/// ln(1 + e^{−ε−2x}). Error in units of 2⁻⁵³: p ≤ 6, q ≤ 15, tanh 8, x 2 (60 through φ(x)),
/// φ 104, the rest ≤ 12: under 190.
pub fn pure_rdp(epsilon: f64, order: f64) -> f64 {
    if !(positive(epsilon) && valid_order(order)) {
        return f64::INFINITY;
    }
    let cap = pure_dp_cap(epsilon, order);
    let lm1 = order - 1.0;
    let x = lm1 * epsilon;
    let value = if x < FACTOR_FROM {
        let e = (-epsilon).exp();
        let p = 1.0 / (1.0 + e);
        let q = e * p;
        let a = p * phi(x) + q * phi(-x) + (0.5 * epsilon).tanh() * x;
        a.ln_1p() / lm1
    } else {
        (x - (-epsilon).exp().ln_1p() + (-epsilon - 2.0 * x).exp().ln_1p()) / lm1
    };
    outward(value, cap)
}

/// ρ-zCDP (Bun & Steinke 2016, Def. 1.1): D_λ ≤ λρ at every λ > 1, by definition. Directed
/// rounding: one product, stepped up.
pub fn zcdp_rdp(rho: f64, order: f64) -> f64 {
    if !(positive(rho) && valid_order(order)) {
        return f64::INFINITY;
    }
    next_up(order * rho)
}

/// min(ε₀, λε₀²/2), directed: the RDP of any ε₀-DP mechanism is at most both (D_λ ≤ D_∞ ≤ ε₀;
/// Bun & Steinke 2016, Prop. 3.3). ε₀ itself is exact (an input, or already rounded up).
fn pure_dp_cap(epsilon: f64, order: f64) -> f64 {
    let half_l_e = next_up(0.5 * order * epsilon);
    epsilon.min(next_up(half_l_e * epsilon))
}

/// A bounded-error value made an upper bound (module docs), capped by `cap`; the cap alone where
/// the value may have underflowed or is not a number.
fn outward(value: f64, cap: f64) -> f64 {
    if value >= UNDERFLOW_GUARD {
        next_up(value * (1.0 + EVALUATION_ERROR)).min(cap)
    } else {
        cap
    }
}

#[inline]
fn positive(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

#[inline]
fn valid_order(order: f64) -> bool {
    order.is_finite() && order > 1.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_bigint::BigUint;
    use proptest::prelude::*;
    use std::cmp::Ordering;

    /// 2⁻⁵³: one rounding's relative error.
    const U: f64 = f64::EPSILON / 2.0;

    #[test]
    fn closed_forms_at_known_points() {
        // λΔ²/(2σ²): exact values are returned, or a few f64s above (one step per operation).
        let g = gaussian_rdp(1.0, 1.0, 2.0);
        assert!((1.0..=1.0 + 16.0 * U).contains(&g), "{g}");
        let g = gaussian_rdp(2.0, 1.0, 10.0);
        assert!((1.25..=1.25 * (1.0 + 16.0 * U)).contains(&g), "{g}");
        let g = gaussian_rdp(3.0, 2.0, 4.5);
        assert!((1.0..=1.0 + 16.0 * U).contains(&g), "{g}");
        let z = zcdp_rdp(0.5, 3.0);
        assert!((1.5..=1.5 * (1.0 + 4.0 * U)).contains(&z), "{z}");
        // Prop. 6 at λ = 2, b = 1: ln(2/3·e + 1/3·e⁻²).
        let want = (2.0 / 3.0 * 1f64.exp() + 1.0 / 3.0 * (-2f64).exp()).ln();
        let l = laplace_rdp(1.0, 1.0, 2.0);
        assert!(l >= want && l <= want * (1.0 + 2e-13), "{l} vs {want}");
        // Only the ratio b = scale/sensitivity matters.
        let l2 = laplace_rdp(2.5, 2.5, 2.0);
        assert!((l2 - l).abs() <= 4.0 * U * l, "{l2} vs {l}");
        // Randomized response at λ = 2, ε = 1: ln((e² + e⁻¹)/(e + 1)).
        let e = 1f64.exp();
        let want = ((e * e + 1.0 / e) / (e + 1.0)).ln();
        let r = pure_rdp(1.0, 2.0);
        assert!(r >= want && r <= want * (1.0 + 2e-13), "{r} vs {want}");
        // Far out, randomized response approaches ε (its max divergence) and the Laplace
        // approaches u + ln(λ/(2λ−1))/(λ−1).
        let r = pure_rdp(3.0, 1e6);
        assert!(r < 3.0 && r > 3.0 - 1e-6, "{r}");
        let l = laplace_rdp(1.0, 100.0, 2.0);
        let want = 100.0 + (2.0f64 / 3.0).ln();
        assert!(l >= want && l <= want * (1.0 + 2e-13), "{l} vs {want}");
    }

    #[test]
    fn out_of_domain_prices_at_infinity() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(gaussian_rdp(bad, 1.0, 2.0), f64::INFINITY);
            assert_eq!(gaussian_rdp(1.0, bad, 2.0), f64::INFINITY);
            assert_eq!(laplace_rdp(bad, 1.0, 2.0), f64::INFINITY);
            assert_eq!(laplace_rdp(1.0, bad, 2.0), f64::INFINITY);
            assert_eq!(pure_rdp(bad, 2.0), f64::INFINITY);
            assert_eq!(zcdp_rdp(bad, 2.0), f64::INFINITY);
        }
        for bad_order in [1.0, 0.5, -3.0, f64::NAN, f64::INFINITY] {
            assert_eq!(gaussian_rdp(1.0, 1.0, bad_order), f64::INFINITY);
            assert_eq!(laplace_rdp(1.0, 1.0, bad_order), f64::INFINITY);
            assert_eq!(pure_rdp(1.0, bad_order), f64::INFINITY);
            assert_eq!(zcdp_rdp(1.0, bad_order), f64::INFINITY);
        }
    }

    #[test]
    fn extreme_arguments_stay_finite_positive_upper_bounds() {
        // Huge and tiny orders, shifts and budgets: never NaN, never 0, never negative, and
        // +∞ only where the real value overflows.
        for order in [1.0 + f64::EPSILON, 1.5, 1e6, 1e300, f64::MAX] {
            for param in [
                f64::from_bits(1),
                1e-300,
                1e-160,
                1e-9,
                1.0,
                1e9,
                1e300,
                f64::MAX,
            ] {
                let l = laplace_rdp(1.0, param, order);
                let p = pure_rdp(param, order);
                assert!(l > 0.0 && l <= next_up(param), "λ={order} u={param}: {l}");
                assert!(p > 0.0 && p <= param, "λ={order} ε={param}: {p}");
                let z = zcdp_rdp(param, order);
                let g = gaussian_rdp(1.0, param, order);
                assert!(z > 0.0 && g > 0.0, "λ={order} {param}: {z} {g}");
            }
        }
        // Tiny values are priced by λε²/2, never below it.
        let p = pure_rdp(1e-160, 3.0);
        assert!(p >= 1.5e-320, "{p}");
    }

    #[test]
    fn matches_mpmath_and_never_rounds_below() {
        // 60-digit values from `scripts/research/gen_fixtures.py external`: the Laplace at the
        // exact ratio sensitivity/scale, randomized response at ε; orders 1.0001 … 1e15.
        let rows = include_str!("fixtures/external.csv");
        let mut n = 0;
        for line in rows.lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            let order: f64 = f[1].parse().unwrap();
            let a: f64 = f[2].parse().unwrap();
            let b: f64 = f[3].parse().unwrap();
            let want: f64 = f[4].parse().unwrap();
            let got = match f[0] {
                "laplace" => laplace_rdp(a, b, order),
                "pure" => pure_rdp(a, order),
                other => panic!("{other}"),
            };
            // `want` is the real value rounded to nearest, so within ½ulp of it.
            assert!(
                got >= want * (1.0 - U),
                "{line}: {got:e} below the real value"
            );
            assert!(
                got <= want * (1.0 + 3e-13),
                "{line}: {got:e} looser than 3e-13 ({:e})",
                got / want - 1.0
            );
            n += 1;
        }
        assert_eq!(n, 240);
    }

    #[test]
    fn pure_price_equals_the_discrete_laplace_unit_shift() {
        // The discrete Laplace's likelihood ratio for a shift of 1 takes only the values
        // e^{±1/b}: it *is* randomized response at ε = 1/b, priced independently (and checked
        // against direct summation) in `discrete`. So the two curves must agree.
        use crate::privacy::discrete::laplace_rdp as discrete_laplace;
        use crate::privacy::types::{Order, Sensitivity};
        for order in [1.01, 1.5, 2.0, 3.0, 8.0, 32.0, 1000.0] {
            for b in [0.05, 0.25, 1.0, 4.0, 20.0, 1e3] {
                let want = discrete_laplace(
                    Order::new(order).unwrap(),
                    b,
                    &Sensitivity::ADD_REMOVE_ONE,
                    2,
                );
                let got = pure_rdp(1.0 / b, order);
                assert!(
                    (got - want).abs() <= 5e-13 * want,
                    "λ={order} b={b}: {got} vs {want}"
                );
            }
        }
    }

    // ---- exact rational comparisons for the directed-rounding functions ----

    /// x = m·2^e exactly, for a finite x > 0.
    fn exact(x: f64) -> (BigUint, i64) {
        assert!(x.is_finite() && x > 0.0);
        let bits = x.to_bits();
        let exp = ((bits >> 52) & 0x7ff) as i64;
        let frac = bits & ((1u64 << 52) - 1);
        if exp == 0 {
            (BigUint::from(frac), -1074)
        } else {
            (BigUint::from(frac | (1u64 << 52)), exp - 1075)
        }
    }

    /// Π xᵢ exactly, as (m, e).
    fn product(xs: &[f64]) -> (BigUint, i64) {
        xs.iter().fold((BigUint::from(1u32), 0), |(m, e), &x| {
            let (mx, ex) = exact(x);
            (m * mx, e + ex)
        })
    }

    fn compare((ma, ea): (BigUint, i64), (mb, eb): (BigUint, i64)) -> Ordering {
        let shift = |m: BigUint, by: i64| m << (by as usize);
        if ea >= eb {
            shift(ma, ea - eb).cmp(&mb)
        } else {
            ma.cmp(&shift(mb, eb - ea))
        }
    }

    /// v ≥ λΔ²/(2σ²) in exact arithmetic: 2·v·σ² ≥ λ·Δ².
    fn gaussian_at_least(v: f64, sigma: f64, sens: f64, order: f64) -> bool {
        v == f64::INFINITY
            || compare(
                product(&[2.0, v, sigma, sigma]),
                product(&[order, sens, sens]),
            ) != Ordering::Less
    }

    fn log_uniform(lo: f64, hi: f64) -> impl Strategy<Value = f64> {
        (lo.ln()..hi.ln()).prop_map(f64::exp)
    }

    #[test]
    fn the_exact_check_can_fail_on_the_nearest_rounded_formula() {
        // The naive λΔ²/(2σ²) rounds below the real value for some inputs; the directed
        // version never does on the same inputs.
        let mut below = 0;
        for i in 1..200 {
            let sigma = 1.0 + i as f64 / 7.0;
            let (sens, order) = (1.0 + i as f64 / 13.0, 2.0 + i as f64 / 11.0);
            let naive = order * sens * sens / (2.0 * sigma * sigma);
            if !gaussian_at_least(naive, sigma, sens, order) {
                below += 1;
            }
            assert!(gaussian_at_least(
                gaussian_rdp(sigma, sens, order),
                sigma,
                sens,
                order
            ));
        }
        assert!(below > 20, "{below}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// (iv) Gaussian and zCDP are never below the real-number formula, over the whole
        /// f64 range (subnormal results and overflow included), and within 4 roundings of it
        /// where it is normal.
        #[test]
        fn gaussian_and_zcdp_never_below_the_real_formula(
            sigma in log_uniform(1e-300, 1e300),
            sens in log_uniform(1e-300, 1e300),
            order in log_uniform(1.000_001, 1e12),
            rho in log_uniform(1e-320, 1e300),
        ) {
            let v = gaussian_rdp(sigma, sens, order);
            prop_assert!(v > 0.0);
            prop_assert!(gaussian_at_least(v, sigma, sens, order), "σ={sigma} Δ={sens} λ={order}: {v}");
            let r = sens / sigma;
            let naive = 0.5 * order * r * r;
            if (r * r).is_normal() && naive.is_normal() && naive < 1e300 {
                prop_assert!(v <= naive * (1.0 + 12.0 * U), "{v} vs {naive}");
            }
            let z = zcdp_rdp(rho, order);
            prop_assert!(z == f64::INFINITY || compare(exact(z), product(&[order, rho])) != Ordering::Less);
            if (order * rho).is_normal() {
                prop_assert!(z <= order * rho * (1.0 + 4.0 * U));
            }
        }

        /// (iii) Monotone where the real functions are: in the order, in the noise (down), in
        /// the sensitivity, ε and ρ (up).
        #[test]
        fn monotone_in_order_and_parameter(
            order in log_uniform(1.001, 1e4),
            a in log_uniform(1e-4, 50.0),
            step in 1.001f64..3.0,
        ) {
            let (l2, a2) = (order * step, a * step);
            prop_assert!(gaussian_rdp(1.0, a, l2) >= gaussian_rdp(1.0, a, order));
            prop_assert!(gaussian_rdp(1.0, a2, order) >= gaussian_rdp(1.0, a, order));
            prop_assert!(gaussian_rdp(a, 1.0, order) >= gaussian_rdp(a2, 1.0, order));
            prop_assert!(zcdp_rdp(a, l2) >= zcdp_rdp(a, order));
            prop_assert!(zcdp_rdp(a2, order) >= zcdp_rdp(a, order));
            let l = laplace_rdp(1.0, a, order);
            prop_assert!(laplace_rdp(1.0, a, l2) >= l, "λ: {} < {l}", laplace_rdp(1.0, a, l2));
            prop_assert!(laplace_rdp(1.0, a2, order) >= l);
            prop_assert!(laplace_rdp(1.0 / step, a, order) >= l);
            let p = pure_rdp(a, order);
            prop_assert!(pure_rdp(a, l2) >= p, "λ: {} < {p}", pure_rdp(a, l2));
            prop_assert!(pure_rdp(a2, order) >= p);
        }

        /// (ii) The pure-DP price is at least randomized response's exact divergence (the worst
        /// ε-DP pair) and at most min(ε, λε²/2) (up to the cap's own outward rounding).
        #[test]
        fn pure_price_between_randomized_response_and_the_classic_bounds(
            order in log_uniform(1.01, 1e4),
            eps in log_uniform(1e-3, 60.0),
        ) {
            let got = pure_rdp(eps, order);
            prop_assert!(got <= eps);
            prop_assert!(got <= 0.5 * order * eps * eps * (1.0 + 8.0 * U));
            let (want, err) = randomized_response(order, eps);
            prop_assert!(got >= want - err, "λ={order} ε={eps}: {got} < {want} (± {err})");
            prop_assert!(got <= want + err + 3e-13 * want, "λ={order} ε={eps}: {got} ≫ {want}");
        }

        /// Every ε-DP pair of distributions (P, Q) — here random ones on 2–6 outcomes, ε their
        /// largest log-ratio — has D_λ(P‖Q) ≤ the pure-DP price: the chord argument.
        #[test]
        fn every_pure_dp_pair_is_below_the_pure_price(
            order in log_uniform(1.01, 200.0),
            w in prop::collection::vec((0.05f64..1.0, 0.05f64..1.0), 2..7),
        ) {
            let (sp, sq): (f64, f64) = (w.iter().map(|v| v.0).sum(), w.iter().map(|v| v.1).sum());
            let pq: Vec<(f64, f64)> = w.iter().map(|&(a, b)| (a / sp, b / sq)).collect();
            let eps = pq.iter().map(|&(p, q)| (p / q).ln().abs()).fold(0.0, f64::max);
            prop_assume!(eps > 1e-3);
            let sum: f64 = pq.iter().map(|&(p, q)| p * ((order - 1.0) * (p / q).ln()).exp()).sum();
            let d = sum.ln() / (order - 1.0);
            let price = pure_rdp(eps, order);
            prop_assert!(d <= price * (1.0 + 1e-12) + 1e-15, "λ={order} ε={eps}: D={d} > {price}");
        }

        /// A vector query with ℓ1 sensitivity Δ: splitting the shift over coordinates costs no
        /// more than putting it on one (f convex with f(0) = 0 is superadditive), so the scalar
        /// price covers it.
        #[test]
        fn laplace_is_superadditive_in_the_shift(
            order in log_uniform(1.01, 1e3),
            u1 in log_uniform(1e-3, 40.0),
            u2 in log_uniform(1e-3, 40.0),
        ) {
            let split = laplace_rdp(1.0, u1, order) + laplace_rdp(1.0, u2, order);
            let whole = laplace_rdp(1.0, u1 + u2, order);
            prop_assert!(split * (1.0 - 3e-13) <= whole, "{split} > {whole}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// (i) The Laplace price against a brute-force Gauss–Legendre integration of
        /// ∫ p^λ q^{1−λ} for Lap(0, s) and Lap(Δ, s): never below it, within 1e-11 of it.
        #[test]
        fn laplace_price_dominates_quadrature(
            order in log_uniform(1.01, 64.0),
            u in log_uniform(1e-2, 25.0),
            scale in log_uniform(1e-3, 1e3),
        ) {
            let sens = scale * u;
            let got = laplace_rdp(scale, sens, order);
            let want = laplace_quadrature(scale, sens, order);
            prop_assert!(got >= want, "λ={order} u={u}: {got} < {want}");
            prop_assert!(got <= want * (1.0 + 1e-11), "λ={order} u={u}: {got} vs {want}");
        }
    }

    /// Randomized response's D_λ at ε computed independently, as the two-outcome sum in
    /// log-sum-exp form, with a bound on this evaluation's own absolute error:
    /// (λ−1)D = (λ−1)ε + ln(1 + e^{−(2λ−1)ε}) − ln(1 + e^{−ε}).
    fn randomized_response(order: f64, eps: f64) -> (f64, f64) {
        let lm1 = order - 1.0;
        let a = lm1 * eps;
        let b = (-(2.0 * order - 1.0) * eps).exp().ln_1p();
        let c = (-eps).exp().ln_1p();
        let value = (a + b - c) / lm1;
        // Each term within ~8 roundings of itself; the sum's cancellation is what costs.
        let err = 16.0 * U * (a.abs() + b.abs() + c.abs()) / lm1 + 4.0 * U * value.abs();
        (value, err)
    }

    /// 20-point Gauss–Legendre nodes and weights on [−1, 1], by Newton's method on P₂₀.
    fn gauss_legendre_20() -> Vec<(f64, f64)> {
        let n = 20;
        (1..=n)
            .map(|i| {
                let mut x = (std::f64::consts::PI * (i as f64 - 0.25) / (n as f64 + 0.5)).cos();
                let mut dp = 0.0;
                for _ in 0..100 {
                    let (mut p0, mut p1) = (1.0, x);
                    for k in 2..=n {
                        let p2 = ((2 * k - 1) as f64 * x * p1 - (k - 1) as f64 * p0) / k as f64;
                        p0 = p1;
                        p1 = p2;
                    }
                    dp = n as f64 * (x * p1 - p0) / (x * x - 1.0);
                    let dx = p1 / dp;
                    x -= dx;
                    if dx.abs() < 1e-17 {
                        break;
                    }
                }
                (x, 2.0 / ((1.0 - x * x) * dp * dp))
            })
            .collect()
    }

    /// Σ over panels of width ≤ `width` of ∫ f on [a, b], compensated.
    fn integrate(f: &dyn Fn(f64) -> f64, a: f64, b: f64, width: f64, gl: &[(f64, f64)]) -> f64 {
        let panels = ((b - a) / width).ceil().max(1.0) as usize;
        let h = (b - a) / panels as f64;
        let mut sum = crate::privacy::divergence::Compensated::default();
        for k in 0..panels {
            let (lo, hi) = (a + k as f64 * h, a + (k + 1) as f64 * h);
            let (mid, half) = (0.5 * (lo + hi), 0.5 * (hi - lo));
            for &(x, w) in gl {
                sum.add(half * w * f(mid + half * x));
            }
        }
        sum.sum()
    }

    /// D_λ(Lap(0, s) ‖ Lap(Δ, s)) by quadrature over [−60s, Δ + 60s] (the rest weighs
    /// below e⁻⁶⁰), split at the kinks 0 and Δ, on panels of width ≤ s/(2λ−1) between them (the
    /// integrand's fastest exponential rate) and ≤ s outside. Where (λ−1)u ≤ 1 it integrates
    /// q·g(p/q) with g(t) = t^λ − 1 − λ(t − 1) ≥ 0, whose integral is A − 1 exactly (∫p = ∫q
    /// = 1), so that a small divergence is not lost to cancellation; otherwise
    /// ∫ p^λ q^{1−λ}·e^{−(λ−1)u}. The log-densities are written per piece (ln p/q is u, then
    /// (Δ − 2x)/s, then −u) so that no large |x| cancels against itself.
    fn laplace_quadrature(scale: f64, sens: f64, order: f64) -> f64 {
        let gl = gauss_legendre_20();
        let (b, d, l) = (scale, sens, order);
        let u = d / b;
        let fast = b / (2.0 * l - 1.0);
        let pieces = [(-60.0 * b, 0.0, b), (0.0, d, fast), (d, d + 60.0 * b, b)];
        // Which piece x is in decides the formula, not the sign of a rounded x − d.
        let piece_of = |x: f64| {
            if x < 0.0 {
                0
            } else if x <= d {
                1
            } else {
                2
            }
        };
        let total = |f: &dyn Fn(f64) -> f64| -> f64 {
            pieces
                .iter()
                .map(|&(a, z, w)| integrate(f, a, z, w, &gl))
                .sum()
        };
        if (l - 1.0) * u <= 1.0 {
            // g(e^s) = e^{λs} − λe^s + λ − 1: a series of λ(λ^{k−1} − 1)s^k/k! where λ|s| is
            // small, else e^s·expm1((λ−1)s) − (λ−1)·expm1(s) (cancels by at most 2/(λ|s|)).
            let g = |s: f64| {
                if (l * s).abs() <= 0.5 {
                    let (mut term, mut sum, ln_l) = (1.0, 0.0, l.ln());
                    for k in 1..40 {
                        term *= s / k as f64;
                        if k >= 2 {
                            sum += l * ((k - 1) as f64 * ln_l).exp_m1() * term;
                        }
                    }
                    sum
                } else {
                    s.exp() * ((l - 1.0) * s).exp_m1() - (l - 1.0) * s.exp_m1()
                }
            };
            // q(x) = e^{−|x−Δ|/s}/(2s), s(x) = ln p(x)/q(x).
            let f = |x: f64| match piece_of(x) {
                0 => ((x - d) / b).exp() / (2.0 * b) * g(u),
                1 => ((x - d) / b).exp() / (2.0 * b) * g((d - 2.0 * x) / b),
                _ => (-(x - d) / b).exp() / (2.0 * b) * g(-u),
            };
            total(&f).ln_1p() / (l - 1.0)
        } else {
            // λ ln p + (1−λ) ln q + ln 2s − (λ−1)u per piece: x/s, −(2λ−1)x/s, −x/s − 2(λ−1)u.
            let f = |x: f64| {
                let e = match piece_of(x) {
                    0 => x / b,
                    1 => -(2.0 * l - 1.0) * x / b,
                    _ => -x / b - 2.0 * (l - 1.0) * u,
                };
                e.exp() / (2.0 * b)
            };
            ((l - 1.0) * u + total(&f).ln()) / (l - 1.0)
        }
    }
}
