//! Baselines the papers compare against: Gaussian and Laplace noise on counts, projected to the
//! simplex (001 §4 and Figure 2; 000 §5).
//!
//! The noise is exact and integer: discrete Gaussian N_ℤ(0, σ²) and discrete Laplace L_ℤ(b)
//! per cell (`discrete`, CKS20), added to integer counts in integer arithmetic, so the noisy
//! counts z = x + Y are integers whose law is the noise's shifted by x and nothing else (the
//! f64 `x + noise` of the previous version leaked x through its low bits, Mironov 2012; the
//! tests below show both). Non-integer counts are refused (they would need non-integer shifts,
//! which these mechanisms cannot price), as are counts above 2⁵³.
//!
//! Everything after the draw is post-processing of the integer vector z, so it costs nothing
//! more: the Euclidean projection of z/Σz onto the probability simplex ([`project_to_simplex`]).
//! Counts are never formatted or logged here.

use super::discrete::{DiscreteGaussian, DiscreteLaplace, NoiseError};
use super::divergence::Compensated;
use super::sampler::CsRng;
use super::types::Counts;

/// The largest count the discrete baselines take: 2⁵³, below which every integer is an f64.
pub const MAX_INTEGER_COUNT: f64 = 9_007_199_254_740_992.0;

/// Noisy counts are clamped to ±2⁶² before the projection. Post-processing (a fixed function of
/// the exact integers), so it cannot weaken the guarantee; with counts ≤ 2⁵³ and scales ≤ 2⁵²
/// the clamp acts only on noise beyond 2⁶¹, an event of probability below e⁻⁵⁰⁰. It keeps the
/// projection's exact integer arithmetic inside i128 for any d below 2⁴⁰.
const CLAMP: i128 = 1 << 62;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BaselineError {
    #[error("counts[{index}] is not an integer; the gaussian and laplace mechanisms add integer (discrete) noise and need integer counts")]
    FractionalCount { index: usize },
    #[error(
        "counts[{index}] exceeds 2^53, the largest count the gaussian and laplace mechanisms take"
    )]
    CountTooLarge { index: usize },
    #[error(transparent)]
    Noise(#[from] NoiseError),
}

/// The counts as integers, or the first cell that is not one (by index only, never by value).
pub fn integer_counts(counts: &Counts) -> Result<Vec<i64>, BaselineError> {
    counts
        .as_slice()
        .iter()
        .enumerate()
        .map(|(index, &x)| {
            if x.fract() != 0.0 {
                Err(BaselineError::FractionalCount { index })
            } else if x > MAX_INTEGER_COUNT {
                Err(BaselineError::CountTooLarge { index })
            } else {
                Ok(x as i64)
            }
        })
        .collect()
}

/// Counts + N_ℤ(0, σ²) per cell: the noisy integer counts z, before any post-processing.
pub fn gaussian_noisy(
    counts: &Counts,
    sigma: f64,
    rng: &mut CsRng,
) -> Result<Vec<i64>, BaselineError> {
    let x = integer_counts(counts)?;
    let g = DiscreteGaussian::new(sigma)?;
    Ok(add_noise(&x, || g.sample(rng)))
}

/// Counts + L_ℤ(b) per cell: the noisy integer counts z, before any post-processing.
pub fn laplace_noisy(
    counts: &Counts,
    scale: f64,
    rng: &mut CsRng,
) -> Result<Vec<i64>, BaselineError> {
    let x = integer_counts(counts)?;
    let l = DiscreteLaplace::new(scale)?;
    Ok(add_noise(&x, || l.sample(rng)))
}

/// The smoothed output y = (max(z, 0) + k)/Σ (k > 0, a public pseudo-count): post-processing
/// of the noisy counts, free of privacy cost. Every cell is at least k/Σ > 0, so D_KL(x/n ‖ y) is
/// finite (docs/PRIVACY.md, "KL"); the sum is compensated, then the vector renormalised.
pub fn smooth(z: &[i64], k: f64) -> Vec<f64> {
    let u: Vec<f64> = z.iter().map(|&v| v.max(0) as f64 + k).collect();
    let mut total = Compensated::default();
    for v in &u {
        total.add(*v);
    }
    let total = total.sum();
    u.into_iter().map(|v| v / total).collect()
}

/// Counts + N_ℤ(0, σ²) per cell, projected to the simplex. Priced by
/// `discrete::gaussian_rdp` (CKS20: the continuous curve λΔ2²/(2σ²)).
pub fn gaussian_release(
    counts: &Counts,
    sigma: f64,
    rng: &mut CsRng,
) -> Result<Vec<f64>, BaselineError> {
    let x = integer_counts(counts)?;
    let g = DiscreteGaussian::new(sigma)?;
    Ok(project_to_simplex(&add_noise(&x, || g.sample(rng))))
}

/// Counts + L_ℤ(b) per cell, projected to the simplex. Priced by `discrete::laplace_rdp` (the
/// exact discrete-Laplace divergence).
pub fn laplace_release(
    counts: &Counts,
    scale: f64,
    rng: &mut CsRng,
) -> Result<Vec<f64>, BaselineError> {
    let x = integer_counts(counts)?;
    let l = DiscreteLaplace::new(scale)?;
    Ok(project_to_simplex(&add_noise(&x, || l.sample(rng))))
}

fn add_noise(x: &[i64], mut noise: impl FnMut() -> i128) -> Vec<i64> {
    x.iter()
        .map(|&v| (v as i128 + noise()).clamp(-CLAMP, CLAMP) as i64)
        .collect()
}

fn uniform(d: usize) -> Vec<f64> {
    vec![1.0 / d as f64; d]
}

/// The Euclidean projection of v = z/S onto the probability simplex, S = Σz the noisy total:
/// argmin_{y ≥ 0, Σy = 1} ‖y − v‖₂ (Duchi, Shalev-Shwartz, Singer & Chandra 2008, Fig. 1;
/// Condat 2016): sort v decreasingly, ρ = max{j : v₍ⱼ₎ − (Σ_{i≤j} v₍ᵢ₎ − 1)/j > 0},
/// τ = (Σ_{i≤ρ} v₍ᵢ₎ − 1)/ρ, yᵢ = max(vᵢ − τ, 0). O(d log d).
///
/// Why z/Σz: the release estimates the distribution x/N; z/Σz is its unbiased-total estimate
/// (Σz estimates N), and projecting it is the ℓ2-closest distribution to it, where clipping at 0
/// and renormalising (the previous version) is not. The selection of ρ runs in exact integer
/// arithmetic (multiplied through by S > 0: j·z₍ⱼ₎ > C_j − S), so no rounding can pick the
/// wrong support; yᵢ = max(ρzᵢ − C_ρ + S, 0)/(ρS) is one division per cell, then the vector is
/// renormalised by its compensated sum to remove that rounding.
///
/// Degenerate case: S ≤ 0 (the noise swamped every count: in particular all zᵢ ≤ 0) leaves no
/// positive scale to divide by; the output is then the uniform vector, the centre of the
/// simplex (the minimax choice for ℓ2 error with no usable information), deterministically.
pub fn project_to_simplex(z: &[i64]) -> Vec<f64> {
    let d = z.len();
    if d == 0 {
        return Vec::new();
    }
    let total: i128 = z.iter().map(|&v| v as i128).sum();
    if total <= 0 {
        return uniform(d);
    }
    let mut sorted: Vec<i64> = z.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let (mut cum, mut rho, mut c_rho) = (0i128, 0i128, 0i128);
    for (j, &v) in sorted.iter().enumerate() {
        cum += v as i128;
        let j1 = j as i128 + 1;
        if j1 * v as i128 > cum - total {
            rho = j1;
            c_rho = cum;
        }
    }
    // ρ ≥ 1: the largest cell passes (z₍₁₎ > z₍₁₎ − S since S > 0).
    let shift = c_rho - total;
    let den = (rho * total) as f64;
    let mut y: Vec<f64> = z
        .iter()
        .map(|&v| {
            let n = rho * v as i128 - shift;
            if n > 0 {
                n as f64 / den
            } else {
                0.0
            }
        })
        .collect();
    let mut sum = Compensated::default();
    y.iter().for_each(|v| sum.add(*v));
    let s = sum.sum();
    if s > 0.0 && s.is_finite() {
        let inv = 1.0 / s;
        y.iter_mut().for_each(|v| *v *= inv);
        y
    } else {
        uniform(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::sampler::test_rng;
    use proptest::prelude::*;
    use rand_distr::{Distribution, Exp1, StandardNormal};

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
        for _ in 0..20 {
            for y in [
                gaussian_release(&c, 0.05, &mut rng).unwrap(),
                laplace_release(&c, 0.05, &mut rng).unwrap(),
            ] {
                check_simplex(&y);
                // noise of scale 0.05 is 0 except with probability ~1e-9 (Laplace: 2e^{-20})
                assert_eq!(y, vec![0.1, 0.3, 0.6]);
            }
        }
    }

    #[test]
    fn non_integer_or_huge_counts_and_bad_scales_are_refused() {
        let mut rng = test_rng(8);
        let c = counts(&[3.0, 0.5, 2.0]);
        assert_eq!(
            gaussian_release(&c, 1.0, &mut rng),
            Err(BaselineError::FractionalCount { index: 1 })
        );
        assert_eq!(
            laplace_release(&c, 1.0, &mut rng),
            Err(BaselineError::FractionalCount { index: 1 })
        );
        let c = counts(&[1.0, MAX_INTEGER_COUNT * 2.0]);
        assert_eq!(
            laplace_release(&c, 1.0, &mut rng),
            Err(BaselineError::CountTooLarge { index: 1 })
        );
        let ok = counts(&[1.0, MAX_INTEGER_COUNT]);
        check_simplex(&gaussian_release(&ok, 1.0, &mut rng).unwrap());
        let message = BaselineError::FractionalCount { index: 1 }.to_string();
        assert!(!message.contains("0.5"));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e30] {
            assert!(gaussian_release(&ok, bad, &mut rng).is_err());
            assert!(laplace_release(&ok, bad, &mut rng).is_err());
        }
    }

    #[test]
    fn all_noise_gives_uniform_deterministically() {
        assert_eq!(project_to_simplex(&[0, 0, 0, 0]), vec![0.25; 4]);
        assert_eq!(project_to_simplex(&[-3, -1, 0, -7]), vec![0.25; 4]);
        assert_eq!(project_to_simplex(&[5, -10]), vec![0.5; 2]);
        // With zero counts and σ = 1 the noisy total is ≤ 0 about half the time.
        let mut rng = test_rng(9);
        let c = counts(&[0.0, 0.0, 0.0, 0.0]);
        let uniform_seen = (0..200)
            .filter(|_| gaussian_release(&c, 1.0, &mut rng).unwrap() == vec![0.25; 4])
            .count();
        assert!((60..=140).contains(&uniform_seen), "{uniform_seen}");
    }

    #[test]
    fn projection_examples() {
        // Already a distribution: unchanged.
        assert_eq!(project_to_simplex(&[1, 3]), vec![0.25, 0.75]);
        // v = (6, −2)/4 = (1.5, −0.5): τ = 0.5, y = (1, 0).
        assert_eq!(project_to_simplex(&[6, -2]), vec![1.0, 0.0]);
        // v = (4, 3, −3)/4: sorted prefix sums give ρ = 2, τ = (7/4 − 1)/2 = 3/8,
        // y = (1 − 3/8, 3/4 − 3/8, 0) = (5/8, 3/8, 0).
        assert_eq!(project_to_simplex(&[4, 3, -3]), vec![0.625, 0.375, 0.0]);
        // Clip-and-renormalise would give (4/7, 3/7, 0) there: the projection is not that.
    }

    /// argmin ‖y − v‖² over the simplex by enumerating supports: for a support T the KKT point
    /// is yᵢ = vᵢ − τ_T on T (τ_T = (Σ_T v − 1)/|T|), 0 elsewhere; the best feasible one wins.
    fn brute_force_projection(v: &[f64]) -> Vec<f64> {
        let d = v.len();
        let mut best: Option<(f64, Vec<f64>)> = None;
        for mask in 1u32..(1 << d) {
            let k = mask.count_ones() as f64;
            let sum: f64 = (0..d).filter(|i| mask >> i & 1 == 1).map(|i| v[i]).sum();
            let tau = (sum - 1.0) / k;
            let y: Vec<f64> = (0..d)
                .map(|i| if mask >> i & 1 == 1 { v[i] - tau } else { 0.0 })
                .collect();
            if y.iter().any(|&x| x < -1e-15) {
                continue;
            }
            let dist: f64 = y.iter().zip(v).map(|(a, b)| (a - b).powi(2)).sum();
            if best.as_ref().is_none_or(|(b, _)| dist < *b - 1e-15) {
                best = Some((dist, y));
            }
        }
        best.unwrap().1
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn projection_equals_the_brute_force_qp(
            z in proptest::collection::vec(-60i64..120, 2..7),
        ) {
            let total: i64 = z.iter().sum();
            let y = project_to_simplex(&z);
            if total <= 0 {
                prop_assert!(y.iter().all(|&v| v == 1.0 / z.len() as f64));
            } else {
                let v: Vec<f64> = z.iter().map(|&a| a as f64 / total as f64).collect();
                let want = brute_force_projection(&v);
                for (a, b) in y.iter().zip(&want) {
                    prop_assert!((a - b).abs() < 1e-12, "{:?}: {:?} vs {:?}", z, y, want);
                }
                // KKT: one threshold τ with yᵢ = vᵢ − τ on the support, vᵢ ≤ τ off it.
                let i = y.iter().position(|&a| a > 0.0).unwrap();
                let tau = v[i] - y[i];
                for (a, b) in y.iter().zip(&v) {
                    if *a > 0.0 {
                        prop_assert!((b - a - tau).abs() < 1e-12);
                    } else {
                        prop_assert!(*b <= tau + 1e-12);
                    }
                }
                let s: f64 = y.iter().sum();
                prop_assert!((s - 1.0).abs() < 1e-12);
            }
        }
    }

    /// Lowest mantissa bit of outputs that fall in [2, 3): the fraction with bit 0.
    fn low_bit_zero_fraction(outputs: impl Iterator<Item = f64>) -> (f64, usize) {
        let hits: Vec<f64> = outputs.filter(|o| (2.0..3.0).contains(o)).collect();
        let zero = hits.iter().filter(|o| o.to_bits() & 1 == 0).count();
        (zero as f64 / hits.len() as f64, hits.len())
    }

    #[test]
    fn naive_float_noise_reveals_the_count_through_its_low_bits() {
        // Mironov (CCS 2012): x + noise in f64. For x = 1 and an output in [2, 3), the noise
        // was in [1, 2), whose ulp is half the output's: the sum is a tie (rounded to even,
        // low bit 0) whenever the noise's last bit is 1, so 3/4 of the outputs end in 0. For
        // x = 0 the output is the noise itself and ends in 0 half the time. An observer who
        // sees only outputs tells x = 0 from x = 1 — a privacy loss no finite ε covers. This is
        // what the service did before (rand_distr's Exp1 and StandardNormal, as in the old
        // `baseline.rs`).
        let mut rng = test_rng(11);
        let n = 200_000;
        let laplace = |x: f64, rng: &mut CsRng| {
            let e: f64 = Exp1.sample(rng);
            let negative: bool = rand::RngExt::random(rng);
            x + if negative { -2.0 * e } else { 2.0 * e }
        };
        let gauss = |x: f64, rng: &mut CsRng| {
            let z: f64 = StandardNormal.sample(rng);
            x + 2.0 * z
        };
        for (name, naive) in [
            ("laplace", &laplace as &dyn Fn(f64, &mut CsRng) -> f64),
            ("gaussian", &gauss),
        ] {
            let (f0, n0) = low_bit_zero_fraction((0..n).map(|_| naive(0.0, &mut rng)));
            let (f1, n1) = low_bit_zero_fraction((0..n).map(|_| naive(1.0, &mut rng)));
            eprintln!("{name}: low bit 0 in [2, 3): x = 0 {f0:.4} of {n0}, x = 1 {f1:.4} of {n1}");
            assert!(n0 > 5_000 && n1 > 5_000, "{name}: {n0} {n1}");
            assert!((f0 - 0.5).abs() < 0.03, "{name}: x = 0 gives {f0}");
            assert!((f1 - 0.75).abs() < 0.03, "{name}: x = 1 gives {f1}");
        }
    }

    #[test]
    fn discrete_noise_depends_on_the_count_only_through_the_shift() {
        // The same generator state gives the same integer noise whatever x is: the noisy count
        // for x is exactly x plus the noisy count for 0, so the output's law is the noise's,
        // shifted, with no low-order trace (every integer is reachable from every x).
        let big = (1i64 << 52) + 12_345;
        for seed in 0..20 {
            let g = DiscreteGaussian::new(2.0).unwrap();
            let l = DiscreteLaplace::new(2.0).unwrap();
            let mut base = test_rng(seed);
            let mut shifted = test_rng(seed);
            let z0 = add_noise(&[0, 0, 0], || g.sample(&mut base));
            let z1 = add_noise(&[1, big, 7], || g.sample(&mut shifted));
            assert_eq!(z1, vec![z0[0] + 1, z0[1] + big, z0[2] + 7]);
            let z0 = add_noise(&[0, 0], || l.sample(&mut base));
            let z1 = add_noise(&[1, big], || l.sample(&mut shifted));
            assert_eq!(z1, vec![z0[0] + 1, z0[1] + big]);
        }
    }

    #[test]
    fn noisy_counts_have_the_right_spread() {
        // Through the release: a huge first cell keeps S ≈ N, the projection changes nothing,
        // and y₂·S − x₂ is the integer noise (up to rounding of y₂).
        let n = 20_000;
        let mut rng = test_rng(12);
        let c = counts(&[1e9, 1e4]);
        let (mut g2, mut l_abs) = (0.0, 0.0);
        for _ in 0..n {
            let g = gaussian_release(&c, 3.0, &mut rng).unwrap();
            let l = laplace_release(&c, 3.0, &mut rng).unwrap();
            let total = 1e9 + 1e4; // the noisy total is within ~±20 of it: relative 2e-8
            let gn = (g[1] * total - 1e4).round();
            let ln = (l[1] * total - 1e4).round();
            g2 += gn * gn;
            l_abs += ln.abs();
        }
        // N_ℤ(0, 9) has variance 9 (to 1e-30); L_ℤ(3) has E|Y| = 2p/(1−p²), p = e^{−1/3}.
        let p = (-1.0f64 / 3.0).exp();
        let l_mean = 2.0 * p / (1.0 - p * p);
        let g_var = g2 / n as f64;
        let l_mean_abs = l_abs / n as f64;
        assert!(
            (g_var - 9.0).abs() < 5.0 * 9.0 * (2.0 / n as f64).sqrt() + 0.1,
            "{g_var}"
        );
        assert!(
            (l_mean_abs - l_mean).abs() < 5.0 * 3.0 / (n as f64).sqrt() + 0.05,
            "{l_mean_abs} vs {l_mean}"
        );
    }
}
