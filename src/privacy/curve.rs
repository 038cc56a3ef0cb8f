//! Pricing: the RDP curve ε(λ) of every mechanism the service runs.
// SKELETON: the privacy helper implements these (see issue 2).
use super::types::{Order, Sensitivity};

/// 001 Corollary 3: ε(λ) = ½ λ r² Δ2² ψ′(α_m − (λ−1) r Δ∞); +∞ at and beyond λ = 1 + α_m/(rΔ∞).
pub fn dirichlet_rdp(order: Order, r: f64, alpha_min: f64, sens: &Sensitivity) -> f64 {
    todo!("{order:?} {r} {alpha_min} {sens:?}")
}

/// The supremum of orders with a finite guarantee: 1 + α_m/(rΔ∞).
pub fn dirichlet_max_order(r: f64, alpha_min: f64, sens: &Sensitivity) -> f64 {
    todo!("{r} {alpha_min} {sens:?}")
}

/// Gaussian noise σ per cell: ε(λ) = λΔ2²/(2σ²).
pub fn gaussian_rdp(order: Order, sigma: f64, sens: &Sensitivity) -> f64 {
    todo!("{order:?} {sigma} {sens:?}")
}

/// Laplace noise of scale b per cell on a d-cell vector (Mironov 2017 Prop. 6, worst neighbour).
pub fn laplace_rdp(order: Order, scale: f64, sens: &Sensitivity, d: usize) -> f64 {
    todo!("{order:?} {scale} {sens:?} {d}")
}
