//! Baselines the papers compare against: Gaussian and Laplace noise on counts, post-processed
//! to the simplex (001 §4 and Figure 2; 000 §5).
//!
//! Clipping and renormalising are post-processing, so the releases cost exactly the curves of
//! `curve::gaussian_rdp` and `curve::laplace_rdp`. An invalid noise scale (not finite, or not
//! positive) releases the uniform vector, which reveals nothing about the counts, rather than
//! under-noised data. Counts are never formatted or logged here.
use rand_distr::{Distribution, Exp1, StandardNormal};

use super::divergence::Compensated;
use super::sampler::CsRng;
use super::types::Counts;

/// Counts + N(0, σ²) per cell, clipped at 0, renormalised (uniform if everything clipped).
/// Priced by `curve::gaussian_rdp` (Mironov 2017, Prop. 7).
pub fn gaussian_release(counts: &Counts, sigma: f64, rng: &mut CsRng) -> Vec<f64> {
    if !(sigma.is_finite() && sigma > 0.0) {
        return uniform(counts.len());
    }
    let noisy = counts
        .as_slice()
        .iter()
        .map(|&x| {
            let z: f64 = StandardNormal.sample(rng);
            x + sigma * z
        })
        .collect();
    clip_and_normalise(noisy)
}

/// Counts + Laplace(b) per cell, clipped at 0, renormalised (uniform if everything clipped).
/// Priced by `curve::laplace_rdp` (Mironov 2017, Prop. 6). Laplace(b) is drawn as a random sign
/// times an Exp(1) draw times b, which is exact (the Laplace law is the symmetrised exponential).
pub fn laplace_release(counts: &Counts, scale: f64, rng: &mut CsRng) -> Vec<f64> {
    if !(scale.is_finite() && scale > 0.0) {
        return uniform(counts.len());
    }
    let noisy = counts
        .as_slice()
        .iter()
        .map(|&x| {
            let e: f64 = Exp1.sample(rng);
            let negative: bool = rand::RngExt::random(rng);
            x + if negative { -scale * e } else { scale * e }
        })
        .collect();
    clip_and_normalise(noisy)
}

fn uniform(d: usize) -> Vec<f64> {
    vec![1.0 / d as f64; d]
}

/// Clip below at 0 and renormalise; uniform when nothing is left. Scaled by the largest cell
/// before summing so that even counts near f64::MAX plus noise cannot overflow the total.
fn clip_and_normalise(mut y: Vec<f64>) -> Vec<f64> {
    let mut max = 0.0f64;
    for v in y.iter_mut() {
        // NaN is impossible with finite counts and noise, but must not survive if it occurs.
        *v = if v.is_nan() { 0.0 } else { v.max(0.0) };
        max = max.max(*v);
    }
    if max <= 0.0 || !max.is_finite() {
        return uniform(y.len());
    }
    let mut sum = Compensated::default();
    for v in y.iter_mut() {
        *v /= max;
        sum.add(*v);
    }
    let inv = 1.0 / sum.sum();
    y.iter_mut().for_each(|v| *v *= inv);
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::sampler::test_rng;

    fn counts(v: &[f64]) -> Counts {
        Counts::new(v.to_vec(), 1 << 20).unwrap()
    }

    fn check_simplex(y: &[f64]) {
        assert!(y.iter().all(|v| v.is_finite() && *v >= 0.0));
        let s: f64 = y.iter().sum();
        assert!((s - 1.0).abs() < 1e-12, "{s}");
    }

    #[test]
    fn releases_are_probability_vectors_close_to_the_data_for_small_noise() {
        let mut rng = test_rng(7);
        let c = counts(&[100.0, 300.0, 600.0]);
        for y in [
            gaussian_release(&c, 1e-3, &mut rng),
            laplace_release(&c, 1e-3, &mut rng),
        ] {
            check_simplex(&y);
            for (got, want) in y.iter().zip([0.1, 0.3, 0.6]) {
                assert!((got - want).abs() < 1e-4);
            }
        }
    }

    #[test]
    fn everything_clipped_or_invalid_scale_gives_uniform() {
        let mut rng = test_rng(8);
        let c = counts(&[0.0, 0.0, 0.0, 0.0]);
        // With 4 zero counts the chance that no cell's noise is positive is 1/16 per draw;
        // over 200 draws a few are all-clipped and must come out uniform.
        let mut uniform_seen = 0;
        for _ in 0..200 {
            for y in [
                gaussian_release(&c, 1.0, &mut rng),
                laplace_release(&c, 1.0, &mut rng),
            ] {
                check_simplex(&y);
                if y.iter().all(|v| *v == 0.25) {
                    uniform_seen += 1;
                }
            }
        }
        assert!(uniform_seen > 0);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(gaussian_release(&c, bad, &mut rng), vec![0.25; 4]);
            assert_eq!(laplace_release(&c, bad, &mut rng), vec![0.25; 4]);
        }
    }

    #[test]
    fn noise_has_the_right_spread() {
        // One huge cell keeps the normaliser ≈ N, so y₁·N − x₁ is the noise up to O(σ/N).
        let n = 20_000;
        let mut rng = test_rng(9);
        let c = counts(&[1e9, 1e4]);
        let (mut g2, mut l_abs) = (0.0, 0.0);
        for _ in 0..n {
            let total = 1e9 + 1e4;
            let g = gaussian_release(&c, 3.0, &mut rng);
            let l = laplace_release(&c, 3.0, &mut rng);
            // the second cell carries noise of scale 3 relative to a total of ~1e9
            let gn = g[1] * total - 1e4;
            let ln = l[1] * total - 1e4;
            g2 += gn * gn;
            l_abs += ln.abs();
        }
        // E[Z²] = σ² = 9 and E|L| = b = 3, each within ~5 standard errors (plus the O(σ/1e5)
        // distortion of the normaliser's own noise).
        let g_var = g2 / n as f64;
        let l_mean_abs = l_abs / n as f64;
        assert!(
            (g_var - 9.0).abs() < 5.0 * 9.0 * (2.0 / n as f64).sqrt() + 0.05,
            "{g_var}"
        );
        assert!(
            (l_mean_abs - 3.0).abs() < 5.0 * 3.0 / (n as f64).sqrt() + 0.02,
            "{l_mean_abs}"
        );
    }

    #[test]
    fn huge_counts_do_not_overflow() {
        let mut rng = test_rng(10);
        let c = counts(&[f64::MAX, f64::MAX, 1.0]);
        check_simplex(&gaussian_release(&c, 1.0, &mut rng));
        check_simplex(&laplace_release(&c, 1.0, &mut rng));
    }
}
