//! Special functions: trigamma ψ′, tetragamma ψ″, log-gamma.
// SKELETON: the privacy helper implements these (see issue 2).

/// ψ′(x) for x > 0, relative error ≤ 1e-13 on [1e-6, 1e8].
pub fn trigamma(x: f64) -> f64 {
    todo!("{x}")
}

/// ψ″(x) for x > 0.
pub fn tetragamma(x: f64) -> f64 {
    todo!("{x}")
}

/// ln Γ(x) for x > 0.
pub fn ln_gamma(x: f64) -> f64 {
    todo!("{x}")
}
