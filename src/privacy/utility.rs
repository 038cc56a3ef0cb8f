//! Utility forecasts before anything is spent.
// SKELETON: the privacy helper implements these (see issue 2).
use serde::Serialize;

/// Aggregate forecast of a Dirichlet release from (r, α, N, d) only; nothing per cell, so a
/// forecast never echoes counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Forecast {
    /// 001 Theorem 5 at the given β: ‖y − x/N‖₂ ≤ this with probability 1 − β.
    pub l2_bound: f64,
    pub l2_bound_confidence: f64,
    /// Upper bound on every cell's variance (000 §2.2).
    pub max_cell_variance: f64,
    /// 000 Theorem 2: Pr[KL(p‖q) > η] ≤ this, at the η reported (None when β·p + α's condition fails).
    pub kl_tail: Option<KlTail>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KlTail {
    pub eta: f64,
    pub probability: f64,
}

/// Forecast for y ~ Dir(r·x + α) with N = Σx, α₀ = Σα (uniform α_m used for the KL condition).
pub fn dirichlet_forecast(r: f64, alpha_total: f64, alpha_min: f64, n: f64, d: usize, beta: f64) -> Forecast {
    todo!("{r} {alpha_total} {alpha_min} {n} {d} {beta}")
}

/// 000 §2.2: E[y_i] = (r x_i + α_i)/(rN + α₀).
pub fn cell_mean(r: f64, x_i: f64, alpha_i: f64, n: f64, alpha_total: f64) -> f64 {
    todo!("{r} {x_i} {alpha_i} {n} {alpha_total}")
}

/// 000 §2.2: Var[y_i] = a_i(a₀ − a_i)/(a₀²(a₀ + 1)) with a_i = r x_i + α_i, a₀ = rN + α₀.
pub fn cell_variance(r: f64, x_i: f64, alpha_i: f64, n: f64, alpha_total: f64) -> f64 {
    todo!("{r} {x_i} {alpha_i} {n} {alpha_total}")
}
