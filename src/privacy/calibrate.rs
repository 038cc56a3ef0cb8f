//! Calibrations: from a target (λ, ε) to mechanism parameters.
// SKELETON: the privacy helper implements these (see issue 2).
use super::types::{DirichletParams, Epsilon, Order, Prior, Sensitivity};

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

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalibrationError {
    #[error("no parameters achieve epsilon {epsilon} at order {order}: {reason}")]
    Infeasible { order: f64, epsilon: f64, reason: String },
    #[error("{0} is not a finite positive number")]
    NotFinite(&'static str),
}

/// Solve for the parameters whose curve value at `order` is `epsilon` (never above it).
pub fn calibrate(cal: &Calibration, order: Order, epsilon: Epsilon, sens: &Sensitivity) -> Result<DirichletParams, CalibrationError> {
    todo!("{cal:?} {order:?} {epsilon:?} {sens:?}")
}

/// Gaussian σ with λΔ2²/(2σ²) = ε.
pub fn gaussian_sigma(order: Order, epsilon: Epsilon, sens: &Sensitivity) -> f64 {
    todo!("{order:?} {epsilon:?} {sens:?}")
}

/// Laplace scale b whose worst-case curve value at `order` is ε (never above it).
pub fn laplace_scale(order: Order, epsilon: Epsilon, sens: &Sensitivity, d: usize) -> Result<f64, CalibrationError> {
    todo!("{order:?} {epsilon:?} {sens:?} {d}")
}
