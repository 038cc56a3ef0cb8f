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
/// capped by min(ε, λε²/2) (both always above it: Mironov 2017, Prop. 3, and Bun & Steinke 2016,
/// Prop. 3.3 — the cap only guards the rounding).
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

/// min(ε₀, λε₀²/2), directed: the RDP of any ε₀-DP mechanism is at most both (Mironov 2017,
/// Prop. 3; Bun & Steinke 2016, Prop. 3.3). ε₀ itself is exact (an input, or already rounded up).
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

    #[test]
    fn closed_forms_at_known_points() {
        // λΔ²/(2σ²): exact values are returned, or one to three f64s above.
        let g = gaussian_rdp(1.0, 1.0, 2.0);
        assert!((1.0..=1.0 + 8.0 * f64::EPSILON).contains(&g), "{g}");
        let g = gaussian_rdp(2.0, 1.0, 10.0);
        assert!((1.25..=1.25 * (1.0 + 8.0 * f64::EPSILON)).contains(&g), "{g}");
        let z = zcdp_rdp(0.5, 3.0);
        assert!((1.5..=1.5 * (1.0 + 4.0 * f64::EPSILON)).contains(&z), "{z}");
        // Prop. 6 at λ = 2, b = 1: ln(2/3·e + 1/3·e⁻²).
        let want = (2.0 / 3.0 * 1f64.exp() + 1.0 / 3.0 * (-2f64).exp()).ln();
        let l = laplace_rdp(1.0, 1.0, 2.0);
        assert!(l >= want && l <= want * (1.0 + 2e-13), "{l} vs {want}");
        // Randomized response at λ = 2, ε = 1: ln((e² + e⁻¹)/(e + 1)).
        let e = 1f64.exp();
        let want = ((e * e + 1.0 / e) / (e + 1.0)).ln();
        let r = pure_rdp(1.0, 2.0);
        assert!(r >= want && r <= want * (1.0 + 2e-13), "{r} vs {want}");
    }

    #[test]
    fn out_of_domain_prices_at_infinity() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(gaussian_rdp(bad, 1.0, 2.0), f64::INFINITY);
            assert_eq!(gaussian_rdp(1.0, bad, 2.0), f64::INFINITY);
            assert_eq!(laplace_rdp(bad, 1.0, 2.0), f64::INFINITY);
            assert_eq!(laplace_rdp(1.0, bad, 2.0), f64::INFINITY);
            assert_eq!(pure_rdp(bad, 2.0), f64::INFINITY);
            assert_eq!(zcdp_rdp(bad, 2.0), f64::INFINITY);
        }
        for bad_order in [1.0, 0.5, f64::NAN, f64::INFINITY] {
            assert_eq!(gaussian_rdp(1.0, 1.0, bad_order), f64::INFINITY);
            assert_eq!(laplace_rdp(1.0, 1.0, bad_order), f64::INFINITY);
            assert_eq!(pure_rdp(1.0, bad_order), f64::INFINITY);
            assert_eq!(zcdp_rdp(1.0, bad_order), f64::INFINITY);
        }
    }
}
