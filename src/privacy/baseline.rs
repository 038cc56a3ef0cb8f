//! Baselines the papers compare against: Gaussian and Laplace noise on counts, post-processed
//! to the simplex.
// SKELETON: the privacy helper implements these (see issue 2).
use super::sampler::CsRng;
use super::types::Counts;

/// Counts + N(0, σ²) per cell, clipped at 0, renormalised (uniform if everything clipped).
pub fn gaussian_release(counts: &Counts, sigma: f64, rng: &mut CsRng) -> Vec<f64> {
    todo!("{counts:?} {sigma}")
}

/// Counts + Laplace(b) per cell, clipped at 0, renormalised (uniform if everything clipped).
pub fn laplace_release(counts: &Counts, scale: f64, rng: &mut CsRng) -> Vec<f64> {
    todo!("{counts:?} {scale}")
}
