//! Calibrations: from a target (λ, ε) to mechanism parameters.
//!
//! Every calibration meets one contract, checked against the very function that prices the
//! release (so that the ledger's view and the solver's view cannot drift apart):
//!
//! - `curve(params) · (1 + CHARGE_INFLATION) ≤ ε`: the ledger's charge (the curve inflated by
//!   its error bound, then rounded up to the 2⁻⁴⁰ grid) is at most ε when ε is on the grid, so
//!   two releases at ε = 0.5 fit a budget of 1 exactly;
//! - `curve(params) ≥ ε · (1 − SPEND_TOLERANCE)`: the release really uses what was asked.
//!
//! The roots are solved against ε·(1 − 10⁻¹²), which sits between the two bounds with room for
//! the solver's residual, and the result is then verified and, if needed, nudged along the
//! monotone parameter. A result that cannot meet both bounds in f64 is a typed error.

mod contract;
mod inverse;
mod problem;
mod roots;
#[cfg(test)]
mod tests;

pub use contract::{
    CalibrationError, CHARGE_INFLATION, POLE_GAP, POLE_SPEND_TOLERANCE, SPEND_TOLERANCE,
};
pub(crate) use contract::{RESIDUAL, TARGET_SHORTFALL};
pub use inverse::{gaussian_sigma, inverse_trigamma};
pub(crate) use roots::{newton, settle};

use super::types::{DirichletParams, Epsilon, Order, Prior, Sensitivity};
use problem::Problem;

/// How the Dirichlet parameters of a release are chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum Calibration {
    /// 000 Algorithm 1 with base prior a₀: r solved, α = a₀ + 4(λ−1)rΔ∞.
    Dirichlet { prior: f64 },
    /// 001 Theorem 2 solved for α_m with r fixed.
    Posterior { r: f64 },
    /// Prior fixed by the caller, r solved.
    Diffuse { alpha: Prior },
    /// Nothing solved.
    Explicit { r: f64, alpha: Prior },
}

/// Solve for the parameters whose curve value at `order` is `epsilon` (never above it).
///
/// - `Dirichlet { prior: a₀ }`: 000 Algorithm 1 — the unique r with
///   ε = ½λr²Δ2²ψ′(a₀ + 3(λ−1)rΔ∞) (increasing in r, 000 Lemma 2), α = a₀ + 4(λ−1)rΔ∞.
/// - `Posterior { r }`: 001 Theorem 2 / Corollary 3 solved for the prior: the unique α_m with
///   ψ′(α_m − (λ−1)rΔ∞) = 2ε/(λr²Δ2²) (ψ′ is decreasing); α uniform = α_m.
/// - `Diffuse { alpha }`: 001 §5 / Geumlek et al.: the prior is fixed and the unique
///   r ∈ (0, α_m/((λ−1)Δ∞)) solving Corollary 3 is found.
/// - `Explicit { r, alpha }`: returned as given once validated (ε is not used; the release is
///   priced by the curve like any other).
///
/// The result satisfies the module's contract: `curve·(1 + CHARGE_INFLATION) ≤ ε` and
/// `curve ≥ ε(1 − SPEND_TOLERANCE)`. Never panics; non-finite or non-positive inputs are
/// `NotFinite`, parameters that overflow f64 or cannot meet the contract are `Infeasible`.
pub fn calibrate(
    cal: &Calibration,
    order: Order,
    epsilon: Epsilon,
    sens: &Sensitivity,
) -> Result<DirichletParams, CalibrationError> {
    calibrate_with(cal, order, epsilon, sens, true)
}

/// [`calibrate`] against the real-number curve (ε* or Corollary 3 at the nominal shift r),
/// not the realised-shift price the service charges: the papers' and mpmath's roots, for the
/// tests that check the solver against them.
#[cfg(test)]
pub(crate) fn calibrate_ideal(
    cal: &Calibration,
    order: Order,
    epsilon: Epsilon,
    sens: &Sensitivity,
) -> Result<DirichletParams, CalibrationError> {
    calibrate_with(cal, order, epsilon, sens, false)
}

fn calibrate_with(
    cal: &Calibration,
    order: Order,
    epsilon: Epsilon,
    sens: &Sensitivity,
    realised: bool,
) -> Result<DirichletParams, CalibrationError> {
    let problem = Problem {
        order,
        epsilon,
        sens,
        realised,
        last: std::cell::Cell::new([f64::NAN; 4]),
    };
    match cal {
        Calibration::Dirichlet { prior } => problem.algorithm_1(positive("prior", *prior)?),
        Calibration::Posterior { r } => problem.posterior(positive("r", *r)?),
        Calibration::Diffuse { alpha } => problem.diffuse(validated_prior(alpha)?),
        Calibration::Explicit { r, alpha } => Ok(DirichletParams {
            r: positive("r", *r)?,
            alpha: validated_prior(alpha)?.clone(),
        }),
    }
}

fn positive(name: &'static str, v: f64) -> Result<f64, CalibrationError> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(CalibrationError::NotFinite(name))
    }
}

/// `Prior`'s variants are public, so a value may not have gone through its constructors.
fn validated_prior(alpha: &Prior) -> Result<&Prior, CalibrationError> {
    let ok = match alpha {
        Prior::Uniform(a) => a.is_finite() && *a > 0.0,
        Prior::PerCell(v) => v.len() >= 2 && v.iter().all(|a| a.is_finite() && *a > 0.0),
    };
    if ok {
        Ok(alpha)
    } else {
        Err(CalibrationError::NotFinite("alpha"))
    }
}
