//! Inversions with one answer: ψ′⁻¹ and the Gaussian mechanism's σ.

use super::contract::TARGET_SHORTFALL;
use super::roots::settle;
use crate::privacy::curve::gaussian_rdp;
use crate::privacy::special::trigamma_tetragamma;
use crate::privacy::types::{Epsilon, Order, Sensitivity};

/// The z > 0 with ψ′(z) = y, for y > 0. Newton on 1/ψ′(z) − 1/y, which is nearly linear
/// (≈ z² near 0, ≈ z − ½ far out), started at ½ + 1/y as in limma's `trigammaInverse`
/// (Smyth 2004), with a bracket as a safeguard. For y < 1e-8, z = 1/y + ½ already has relative
/// error y²/12 in ψ′ (from ψ′(z) = 1/z + 1/(2z²) + 1/(6z³) + …) and ψ″ would underflow.
pub fn inverse_trigamma(y: f64) -> f64 {
    if y.is_nan() || y <= 0.0 {
        return f64::NAN;
    }
    if y == f64::INFINITY {
        return 0.0;
    }
    if y < 1e-8 {
        return 1.0 / y + 0.5;
    }
    let mut z = if y > 1e7 {
        1.0 / y.sqrt()
    } else {
        0.5 + 1.0 / y
    };
    let (mut lo, mut hi) = (0.0f64, f64::INFINITY);
    for _ in 0..100 {
        let (p1, p2) = trigamma_tetragamma(z);
        if p1 > y {
            lo = lo.max(z);
        } else {
            hi = hi.min(z);
        }
        let step = p1 * (1.0 - p1 / y) / p2;
        // Converged: checked before the bracket test, which a zero step at a bracket end
        // would fail and turn into a needless bisection.
        if p1 == y || step.abs() <= 2.0 * f64::EPSILON * z {
            return z + step;
        }
        let mut next = z + step;
        if !(next > lo && next < hi) {
            next = if hi.is_finite() {
                0.5 * (lo + hi)
            } else {
                2.0 * z
            };
        }
        z = next;
    }
    z
}

/// Gaussian σ with λΔ2²/(2σ²) = ε (Mironov 2017 Prop. 7), on the safe side:
/// `gaussian_rdp(σ)·(1 + CHARGE_INFLATION) ≤ ε` and `≥ ε(1 − SPEND_TOLERANCE)`. Returns +∞ only
/// if σ overflows f64 (ε ≲ λΔ2²·1e-308), which `gaussian_rdp` would price at +∞ as invalid.
pub fn gaussian_sigma(order: Order, epsilon: Epsilon, sens: &Sensitivity) -> f64 {
    let eps = epsilon.get();
    let target = eps * (1.0 - TARGET_SHORTFALL);
    // √(λ/2ε)·√Δ2² avoids overflowing the product when λΔ2² is large.
    let sigma0 = (order.get() / (2.0 * target)).sqrt() * sens.l2_squared().sqrt();
    if !sigma0.is_finite() {
        return f64::INFINITY;
    }
    settle(sigma0, false, eps, |s| gaussian_rdp(order, s, sens)).unwrap_or(f64::INFINITY)
}
