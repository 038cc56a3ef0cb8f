//! The exact Rényi divergence between two Dirichlet distributions (proof of 001 Theorem 2,
//! eq. 19): the oracle the charged cost is tested against.
// SKELETON: the privacy helper implements this (see issue 2).

/// D_λ(Dir(u) ‖ Dir(v)); +∞ when some w_i = u_i + (λ−1)(u_i − v_i) ≤ 0.
pub fn renyi_dirichlet(order: f64, u: &[f64], v: &[f64]) -> f64 {
    todo!("{order} {} {}", u.len(), v.len())
}
