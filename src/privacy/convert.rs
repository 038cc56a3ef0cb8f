//! Conversions between RDP and (ε, δ)-DP.
// SKELETON: the privacy helper implements these (see issue 2).
use super::types::{Delta, Epsilon, Order};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConversionError {
    #[error("the (epsilon, delta) target leaves no RDP budget at order {order}")]
    NoBudgetAtOrder { order: f64 },
}

/// 001 Lemma 1 (CKS20): (λ, ε̂)-RDP ⇒ (ε, δ)-DP with ε = ε̂ + log(1 − 1/λ) − (log δ + log λ)/(λ − 1).
pub fn rdp_to_dp(order: Order, rdp_epsilon: f64, delta: Delta) -> f64 {
    todo!("{order:?} {rdp_epsilon} {delta:?}")
}

/// The RDP budget at `order` implied by an (ε, δ) target (the inverse of [`rdp_to_dp`]).
pub fn dp_to_rdp_budget(epsilon: Epsilon, delta: Delta, order: Order) -> Result<Epsilon, ConversionError> {
    todo!("{epsilon:?} {delta:?} {order:?}")
}

/// The default ledger order for an (ε, δ) target: the order maximising the number of
/// releases with linear-in-λ cost that the target admits, i.e. argmax B(λ)/λ.
pub fn default_order(epsilon: Epsilon, delta: Delta) -> Order {
    todo!("{epsilon:?} {delta:?}")
}

/// 001 Theorem 4: the best (ε, δ) of a single Dirichlet release over continuous λ. Returns (ε, λ*).
pub fn best_dp_of_dirichlet(r: f64, alpha_min: f64, sens: &super::Sensitivity, delta: Delta) -> (f64, f64) {
    todo!("{r} {alpha_min} {sens:?} {delta:?}")
}
