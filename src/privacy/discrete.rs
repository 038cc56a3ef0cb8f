//! Exact integer noise for the baselines: the discrete Laplace and the discrete Gaussian of
//! Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for Differential Privacy" (CKS20),
//! Algorithms 1–3, and the Rényi-DP curves that price them.
//!
//! Why not floating point: `x + b·Lap` in f64 has a finite, x-dependent set of reachable outputs
//! whose low bits reveal x (Mironov, CCS 2012; `baseline` tests show it on the old code). Here
//! no float touches a random draw: a scale given as an f64 is an exact dyadic rational M·2^E,
//! every Bernoulli is "a uniform integer below n is below k", and the noise is an integer.
//!
//! Why hand-written: OpenDP's CKS20 samplers (`traits/samplers/cks20`) draw every bit from the
//! library's own thread-local DRBG, so they cannot take the service's generator, and house
//! rule 3 allows randomness only from `sampler::CsRng`. rand's `random_range` is not used
//! either: without its `unbiased` feature it samples with a bias of up to 2⁻⁶⁴ (Canon's
//! method); `uniform_below` rejects instead, which is exact.
//!
//! Pricing (integer shifts only: the mechanisms refuse non-integer counts, see `baseline`):
//! - discrete Gaussian N_ℤ(0, σ²) per cell: for integer shifts s, D_λ ≤ λ‖s‖²/(2σ²), with
//!   equality at integer λ (CKS20 Proposition 5 / Theorem 4 for one cell; independent cells add,
//!   their Corollary 13 for the multivariate case), so the continuous curve λΔ2²/(2σ²) prices it.
//! - discrete Laplace L_ℤ(b) per cell: the exact divergence of a shift by 1, from the sum over
//!   the integers split into three geometric series (see [`laplace_shift_one_rdp`]); it is *not*
//!   the continuous curve (at large 1/b it exceeds it: it tends to the pure-DP bound 1/b, the
//!   continuous one to 1/b − ln((2λ−1)/λ)/(λ−1)).
use num_bigint::BigUint;
use num_traits::{ToPrimitive, Zero};
use rand::Rng;

use super::calibrate::{newton, settle, CalibrationError, RESIDUAL, TARGET_SHORTFALL};
use super::curve;
use super::sampler::CsRng;
use super::types::{Epsilon, Order, Relation, Sensitivity};

/// The largest σ or Laplace scale the samplers accept: 2⁵² (4.5e15), above any count the API
/// admits (1e15). It keeps every integer of the algorithms below 2¹²⁸ (the noise itself below
/// 2¹¹⁷ unless a geometric loop succeeds 2⁶⁴ times in a row, which no machine lives to see).
pub const MAX_NOISE_SCALE: f64 = 4_503_599_627_370_496.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NoiseError {
    #[error("the noise scale must be a finite number greater than 0 and at most 2^52")]
    Scale,
}

/// Which curve priced a release (shared with the Dirichlet curves).
pub use super::curve::Pricing;

// ------------------------------------------------------------------------------ sampling

/// Uniform on {0, …, n−1} for n ≥ 1: draw ⌈log₂ n⌉ bits, reject values ≥ n (exact; expected
/// fewer than 2 tries).
fn uniform_below(n: u128, rng: &mut CsRng) -> u128 {
    if n <= 1 {
        return 0;
    }
    let bits = 128 - (n - 1).leading_zeros();
    loop {
        let v = if bits <= 64 {
            (rng.next_u64() >> (64 - bits)) as u128
        } else {
            let hi = rng.next_u64() >> (128 - bits);
            ((hi as u128) << 64) | rng.next_u64() as u128
        };
        if v < n {
            return v;
        }
    }
}

/// [`uniform_below`] for big n ≥ 1.
fn uniform_below_big(n: &BigUint, rng: &mut CsRng) -> BigUint {
    if *n <= BigUint::from(1u32) {
        return BigUint::zero();
    }
    let bits = (n - 1u32).bits();
    let words = bits.div_ceil(32) as usize;
    let top_bits = bits - 32 * (words as u64 - 1);
    loop {
        let mut digits: Vec<u32> = (0..words).map(|_| rng.next_u32()).collect();
        if top_bits < 32 {
            digits[words - 1] >>= 32 - top_bits;
        }
        let v = BigUint::new(digits);
        if v < *n {
            return v;
        }
    }
}

/// Bernoulli(exp(−num/den)) for 0 ≤ num ≤ den (CKS20 Algorithm 1, γ ∈ [0, 1]): K counts the
/// successes of Bernoulli(γ/K) trials; the answer is "K odd". den·K < 2¹²⁸ for any u64 K.
fn bernoulli_exp_unit(num: u64, den: u64, rng: &mut CsRng) -> bool {
    let mut k: u64 = 1;
    loop {
        if uniform_below(den as u128 * k as u128, rng) >= num as u128 {
            return k % 2 == 1;
        }
        k = k.saturating_add(1);
    }
}

/// Bernoulli(exp(−1)).
fn bernoulli_exp_minus_one(rng: &mut CsRng) -> bool {
    bernoulli_exp_unit(1, 1, rng)
}

/// Bernoulli(exp(−num/den)) for any num ≥ 0, den ≥ 1 (CKS20 Algorithm 1): ⌊γ⌋ Bernoulli(e⁻¹)
/// trials must all succeed, then one Bernoulli(exp(−frac γ)).
fn bernoulli_exp_big(num: &BigUint, den: &BigUint, rng: &mut CsRng) -> bool {
    let mut whole = num / den;
    let rest = num % den;
    while !whole.is_zero() {
        if !bernoulli_exp_minus_one(rng) {
            return false;
        }
        whole -= 1u32;
    }
    let mut k: u64 = 1;
    loop {
        let dk = den * BigUint::from(k);
        if uniform_below_big(&dk, rng) >= rest {
            return k % 2 == 1;
        }
        k = k.saturating_add(1);
    }
}

/// [`bernoulli_exp_big`] in u128 arithmetic, the common case (no allocation). The same
/// algorithm step for step: a trial whose den·K would overflow runs in big integers instead.
fn bernoulli_exp_u128(num: u128, den: u128, rng: &mut CsRng) -> bool {
    let mut whole = num / den;
    let rest = num % den;
    while whole > 0 {
        if !bernoulli_exp_minus_one(rng) {
            return false;
        }
        whole -= 1;
    }
    let mut k: u64 = 1;
    loop {
        let below = match den.checked_mul(k as u128) {
            Some(dk) => uniform_below(dk, rng) < rest,
            None => uniform_below_big(&(BigUint::from(den) * k), rng) < BigUint::from(rest),
        };
        if !below {
            return k % 2 == 1;
        }
        k = k.saturating_add(1);
    }
}

/// An f64 > 0 as an exact dyadic rational m·2^e with m odd.
fn dyadic(x: f64) -> (u64, i32) {
    let bits = x.to_bits();
    let exp_bits = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    let (m, e) = if exp_bits == 0 {
        (frac, -1074)
    } else {
        (frac | (1u64 << 52), exp_bits - 1075)
    };
    let tz = m.trailing_zeros();
    (m >> tz, e + tz as i32)
}

fn check_scale(scale: f64) -> Result<(), NoiseError> {
    if scale.is_finite() && scale > 0.0 && scale <= MAX_NOISE_SCALE {
        Ok(())
    } else {
        Err(NoiseError::Scale)
    }
}

/// Discrete Laplace of scale t/2^shift (CKS20 Algorithm 2 with s = 2^shift): P(y) ∝ e^{−|y|·2^shift/t}.
/// t ≤ 2⁵³, so every intermediate fits a u128.
fn discrete_laplace_parts(t: u64, shift: u32, rng: &mut CsRng) -> i128 {
    loop {
        let u = uniform_below(t as u128, rng) as u64;
        if !bernoulli_exp_unit(u, t, rng) {
            continue;
        }
        let mut v: u64 = 0;
        while bernoulli_exp_minus_one(rng) {
            v = v.saturating_add(1);
        }
        let x = u as u128 + t as u128 * v as u128;
        let y = x.checked_shr(shift).unwrap_or(0);
        let negative = rng.next_u32() & 1 == 1;
        if negative && y == 0 {
            continue;
        }
        // y < 2^117 (t ≤ 2^53, v < 2^64), so the conversion cannot fail.
        let y = i128::try_from(y).unwrap_or(i128::MAX);
        return if negative { -y } else { y };
    }
}

/// The discrete Laplace L_ℤ(b): P(y) = (1−p)/(1+p)·p^{|y|}, p = e^{−1/b}, with b taken exactly
/// as the f64 given (b = m·2^e is the ratio of integers CKS20 Algorithm 2 takes).
#[derive(Debug, Clone, Copy)]
pub struct DiscreteLaplace {
    t: u64,
    shift: u32,
}

impl DiscreteLaplace {
    pub fn new(scale: f64) -> Result<Self, NoiseError> {
        check_scale(scale)?;
        let (m, e) = dyadic(scale);
        Ok(if e >= 0 {
            // m·2^e ≤ 2^52
            Self {
                t: m << e,
                shift: 0,
            }
        } else {
            Self {
                t: m,
                shift: e.unsigned_abs(),
            }
        })
    }

    pub fn sample(&self, rng: &mut CsRng) -> i128 {
        discrete_laplace_parts(self.t, self.shift, rng)
    }
}

/// One draw of [`DiscreteLaplace`].
pub fn sample_discrete_laplace(scale: f64, rng: &mut CsRng) -> Result<i128, NoiseError> {
    Ok(DiscreteLaplace::new(scale)?.sample(rng))
}

/// A discrete Gaussian sampler for one σ: the variance σ² rounded *up* to the next f64 (an
/// exact dyadic m·2^e, at most one ulp above σ², so the price at σ is never below the cost of
/// what is drawn), and the proposal's integer scale t = ⌊σ⌋ + 1 (any positive integer t is
/// correct, CKS20 Algorithm 3; this one makes the expected number of tries < 2).
#[derive(Debug, Clone)]
pub struct DiscreteGaussian {
    t: u64,
    /// σ² = big_m / 2^k.
    big_m: BigUint,
    k: u32,
    /// 2^{k+1}·M·t², the acceptance exponent's denominator.
    den: BigUint,
    /// M and the denominator in u128 when they fit (σ below ~2²⁶), for the allocation-free path.
    small: Option<(u128, u128)>,
}

impl DiscreteGaussian {
    pub fn new(sigma: f64) -> Result<Self, NoiseError> {
        check_scale(sigma)?;
        let sq = sigma * sigma;
        // σ² = sq + err exactly (FMA); a positive error means sq is below σ².
        let err = sigma.mul_add(sigma, -sq);
        let variance = if err > 0.0 {
            f64::from_bits(sq.to_bits() + 1)
        } else {
            sq
        };
        if !(variance.is_finite() && variance > 0.0) {
            return Err(NoiseError::Scale);
        }
        let (m, e) = dyadic(variance);
        let (big_m, k) = if e >= 0 {
            (BigUint::from(m) << e as usize, 0)
        } else {
            (BigUint::from(m), e.unsigned_abs())
        };
        let t = sigma.floor() as u64 + 1;
        let den = (&big_m * t * t) << (k as usize + 1);
        let small = big_m.to_u128().zip(den.to_u128());
        Ok(Self {
            t,
            big_m,
            k,
            den,
            small,
        })
    }

    /// One draw of N_ℤ(0, σ²): P(y) ∝ e^{−y²/(2σ²)} (CKS20 Algorithm 3). A candidate Y from
    /// L_ℤ(t) is kept with probability exp(−(|Y| − σ²/t)²/(2σ²)); with σ² = M/2^k that exponent
    /// is (|Y|·t·2^k − M)² / (2^{k+1}·M·t²), a ratio of integers.
    pub fn sample(&self, rng: &mut CsRng) -> i128 {
        loop {
            let y = discrete_laplace_parts(self.t, 0, rng);
            if self.accept(y.unsigned_abs(), rng) {
                return y;
            }
        }
    }

    fn accept(&self, abs_y: u128, rng: &mut CsRng) -> bool {
        if let Some((m, den)) = self.small {
            let num = abs_y
                .checked_mul(self.t as u128)
                .and_then(|a| a.checked_mul(1u128.checked_shl(self.k)?))
                .map(|a| a.abs_diff(m))
                .and_then(|diff| diff.checked_mul(diff));
            if let Some(num) = num {
                return bernoulli_exp_u128(num, den, rng);
            }
        }
        let a = (BigUint::from(abs_y) * self.t) << self.k as usize;
        let diff = if a >= self.big_m {
            a - &self.big_m
        } else {
            &self.big_m - a
        };
        bernoulli_exp_big(&(&diff * &diff), &self.den, rng)
    }
}

// ------------------------------------------------------------------------------ pricing

/// The neighbour relation as integer shifts. The baselines run on integer counts, so two
/// neighbours differ by an integer vector s: for a custom declaration (Δ2², Δ∞) that means
/// |sᵢ| ≤ ⌊Δ∞⌋ and Σsᵢ² ≤ ⌊Δ2²⌋ (a sum of integer squares is an integer). A declaration with
/// Δ∞ < 1 admits no integer change at all: it describes a non-integer statistic, which these
/// mechanisms cannot take, and is refused rather than priced at 0.
pub fn integer_sensitivity(sens: &Sensitivity) -> Result<Sensitivity, String> {
    if sens.relation() != Relation::Custom {
        return Ok(*sens);
    }
    let linf = sens.linf().floor();
    if linf < 1.0 {
        return Err(format!(
            "the gaussian and laplace mechanisms add integer noise to integer counts, so the dataset's custom linf ({}) must be at least 1",
            sens.linf()
        ));
    }
    Sensitivity::new(sens.l2_squared().floor(), linf).map_err(|e| e.to_string())
}

/// Discrete Gaussian σ per cell: λ·Δ2²/(2σ²) over the integer shifts (CKS20 Thm 4 / Cor. 13;
/// equality at integer λ). +∞ for an invalid σ or a relation with no integer shifts.
pub fn gaussian_rdp(order: Order, sigma: f64, sens: &Sensitivity) -> f64 {
    match integer_sensitivity(sens) {
        Ok(s) => curve::gaussian_rdp(order, sigma, &s),
        Err(_) => f64::INFINITY,
    }
}

/// Exact for the histogram relations at an integer order (where CKS20's bound is an
/// equality: the worst neighbour shifts whole records), a bound otherwise.
pub fn gaussian_pricing(order: Order, sens: &Sensitivity) -> Pricing {
    let integer_order = order.get().fract() == 0.0;
    if sens.relation() != Relation::Custom && integer_order {
        Pricing::Exact
    } else {
        Pricing::Bound
    }
}

/// Exact for the histogram relations, a bound for custom ones.
pub fn laplace_pricing(sens: &Sensitivity) -> Pricing {
    if sens.relation() == Relation::Custom {
        Pricing::Bound
    } else {
        Pricing::Exact
    }
}

/// σ whose discrete-Gaussian price at `order` is ε, same contract as
/// `calibrate::gaussian_sigma` (which it calls on the integer shifts).
pub fn gaussian_sigma(
    order: Order,
    epsilon: Epsilon,
    sens: &Sensitivity,
) -> Result<f64, CalibrationError> {
    let s = integer_sensitivity(sens).map_err(|reason| CalibrationError::Infeasible {
        order: order.get(),
        epsilon: epsilon.get(),
        reason,
    })?;
    Ok(super::calibrate::gaussian_sigma(order, epsilon, &s))
}

/// φ(z) = e^z − 1 − z without cancellation (`curve`'s series).
fn phi(z: f64) -> f64 {
    curve::exp_minus_one_minus_id(z)
}

/// h(r) = r·e^r − e^r + 1 ≥ 0, without cancellation near 0 (series Σ_{k≥2} (k−1)rᵏ/k!).
fn h(r: f64) -> f64 {
    if r.abs() <= 1.0 {
        let mut term = 1.0; // r^k / k! for k = 0
        let mut sum = 0.0;
        for k in 1..=20 {
            term *= r / k as f64;
            if k >= 2 {
                sum += (k - 1) as f64 * term;
            }
        }
        sum
    } else {
        r * r.exp() - r.exp_m1()
    }
}

/// The exact Rényi divergence D_λ(L_ℤ(b) ‖ 1 + L_ℤ(b)) of one discrete Laplace cell whose
/// centre moves by 1, at u = 1/b.
///
/// With p = e^{−u}, P(y) = (1−p)/(1+p)·p^{|y|}, and r(y) = ln P₀(y)/P₁(y) equal to u for
/// y ≤ 0 and −u for y ≥ 1, the sum A = Σ_y P₀^λ P₁^{1−λ} splits into two geometric series:
/// A = (e^{(λ−1)u} + e^{−λu})/(1 + e^{−u}), and D_λ = ln A/(λ−1). Near u = 0 that cancels
/// (D ≈ λu²/2 while ln A's terms are O(u)); with δ = λ−1 and E_{P₁}[e^r] = 1,
/// A − 1 = E_{P₁}[e^{λr} − 1 − λ(e^r − 1)], and e^{λr} − 1 − λ(e^r − 1) = e^r φ(δr) + δ h(r)
/// with φ, h ≥ 0, so
///     A − 1 = (φ(δu) + δφ(−u) + e^{−u}φ(−δu) + δh(−u)) / (1 + e^{−u}),
/// a sum of non-negative terms (p·e^u φ(δu) = φ(δu), p·h(u) = φ(−u)). Far out (δu ≥ 30) the
/// closed form D = u + (ln(1 + e^{−(2λ−1)u}) − ln(1 + e^{−u}))/δ has no cancellation.
/// +∞ for a NaN, negative or infinite u.
pub fn laplace_shift_one_rdp(order: Order, u: f64) -> f64 {
    if u.is_nan() || u < 0.0 || u == f64::INFINITY {
        return f64::INFINITY;
    }
    let lambda = order.get();
    let delta = lambda - 1.0;
    if delta * u < 30.0 {
        let e = (-u).exp();
        let a =
            (phi(delta * u) + delta * phi(-u) + e * phi(-delta * u) + delta * h(-u)) / (1.0 + e);
        a.ln_1p() / delta
    } else {
        let two_lm1 = lambda + delta;
        u + ((-two_lm1 * u).exp().ln_1p() - (-u).exp().ln_1p()) / delta
    }
}

/// d/du of [`laplace_shift_one_rdp`]: ((δe^{δu} − λe^{−λu})/(e^{δu} + e^{−λu}) + e^{−u}/(1+e^{−u}))/δ,
/// computed in the factored form (e^{−(2λ−1)u}, e^{−u} ≤ 1); only Newton's steps use it.
fn laplace_shift_one_derivative(lambda: f64, u: f64) -> f64 {
    let delta = lambda - 1.0;
    let q = (-(lambda + delta) * u).exp();
    let p = (-u).exp();
    ((delta - lambda * q) / (1.0 + q) + p / (1.0 + p)) / delta
}

/// Discrete Laplace of scale b per cell on a d-cell vector, worst neighbour:
/// - replace-one: two cells shift by 1 (one up, one down; the divergence is symmetric in the
///   sign): 2·D₁(λ, 1/b), exact;
/// - add/remove-one: one cell by 1: D₁(λ, 1/b), exact;
/// - custom: integer shifts with |sᵢ| ≤ L = ⌊Δ∞⌋, Σsᵢ² ≤ Q = ⌊Δ2²⌋ on at most d cells. Each cell
///   is (|sᵢ|/b)-DP, hence D ≤ min(|sᵢ|u, λsᵢ²u²/2) (Bun & Steinke 2016, Prop. 3.3); summed,
///   D ≤ min(u·S₁, λu²Q/2) with S₁ = min(Q, dL, √(dQ)) ≥ Σ|sᵢ| (|s| ≤ s² for integers;
///   Cauchy–Schwarz). A bound, not the exact worst case.
///
/// +∞ for an invalid scale, d = 0 or a custom relation with no integer shifts.
pub fn laplace_rdp(order: Order, scale: f64, sens: &Sensitivity, d: usize) -> f64 {
    if !(scale.is_finite() && scale > 0.0) || d == 0 {
        return f64::INFINITY;
    }
    let u = 1.0 / scale;
    let value = match sens.relation() {
        Relation::ReplaceOne => 2.0 * laplace_shift_one_rdp(order, u),
        Relation::AddRemoveOne => laplace_shift_one_rdp(order, u),
        Relation::Custom => match integer_sensitivity(sens) {
            Ok(s) => {
                let (q, l) = (s.l2_squared(), s.linf());
                let s1 = q.min(d as f64 * l).min((d as f64 * q).sqrt());
                (u * s1).min(0.5 * order.get() * u * u * q)
            }
            Err(_) => f64::INFINITY,
        },
    };
    if value.is_nan() {
        f64::INFINITY
    } else {
        value.max(f64::MIN_POSITIVE)
    }
}

/// Discrete Laplace scale b whose worst-case price ([`laplace_rdp`]) at `order` is ε, same
/// contract and signature as `calibrate::laplace_scale`: Newton in ln u for the histogram
/// relations, the closed form u = max(ε/S₁, √(2ε/(λQ))) for custom ones, then the same
/// verification walk (`calibrate::settle`) against the pricing function itself.
pub fn laplace_scale(
    order: Order,
    epsilon: Epsilon,
    sens: &Sensitivity,
    d: usize,
) -> Result<f64, CalibrationError> {
    let eps = epsilon.get();
    let lambda = order.get();
    let infeasible = |reason: String| CalibrationError::Infeasible {
        order: lambda,
        epsilon: eps,
        reason,
    };
    if d == 0 {
        return Err(infeasible("the vector has no cells".into()));
    }
    let target = eps * (1.0 - TARGET_SHORTFALL);
    let u = match sens.relation() {
        Relation::Custom => {
            let s = integer_sensitivity(sens).map_err(infeasible)?;
            let (q, l) = (s.l2_squared(), s.linf());
            let s1 = q.min(d as f64 * l).min((d as f64 * q).sqrt());
            (target / s1).max((2.0 * target / (lambda * q)).sqrt())
        }
        relation => {
            let cells = if relation == Relation::ReplaceOne {
                2.0
            } else {
                1.0
            };
            // Per-cell target; D₁ ≤ min(u, λu²/2) puts the root above u_lo.
            let per_cell = target / cells;
            let u_lo = per_cell.max((2.0 * per_cell / lambda).sqrt());
            let lo = u_lo.ln();
            let ln_target = per_cell.ln();
            let t = newton(
                |t| {
                    let u = t.exp();
                    let v = laplace_shift_one_rdp(order, u);
                    let slope = u * laplace_shift_one_derivative(lambda, u) / v;
                    (v.ln() - ln_target, slope)
                },
                if lo.is_finite() { lo } else { 0.0 },
                if lo.is_finite() {
                    lo
                } else {
                    f64::NEG_INFINITY
                },
                f64::INFINITY,
                RESIDUAL,
            );
            t.exp()
        }
    };
    let scale = 1.0 / u;
    if !(scale.is_finite() && scale > 0.0) {
        return Err(infeasible("the scale overflows".into()));
    }
    settle(scale, false, eps, |b| laplace_rdp(order, b, sens, d))
        .ok_or_else(|| infeasible("the solution is not representable in f64 precision".into()))
}

/// Discrete Laplace / Gaussian pmf ratios, for tests elsewhere.
#[cfg(test)]
pub(crate) fn laplace_pmf(b: f64, y: i64) -> f64 {
    let p = (-1.0 / b).exp();
    (1.0 - p) / (1.0 + p) * p.powi(y.unsigned_abs().min(i32::MAX as u64) as i32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::calibrate::{CHARGE_INFLATION, SPEND_TOLERANCE};
    use crate::privacy::sampler::test_rng;
    use proptest::prelude::*;

    fn order(v: f64) -> Order {
        Order::new(v).unwrap()
    }

    fn eps(v: f64) -> Epsilon {
        Epsilon::new(v).unwrap()
    }

    /// D_λ(P_0 ‖ P_s) of the discrete Laplace by direct summation over |y| ≤ n (log-sum-exp).
    fn brute_force_laplace(lambda: f64, u: f64, s: i64) -> f64 {
        let ln_c = (-(-u).exp_m1()).ln() - (-u).exp().ln_1p();
        let n = ((60.0 / u.min(60.0)) as i64 + 20 + s).min(2_000_000);
        let terms: Vec<f64> = (-n..=n + s)
            .map(|y| {
                let l0 = ln_c - u * (y.abs() as f64);
                let l1 = ln_c - u * ((y - s).abs() as f64);
                lambda * l0 + (1.0 - lambda) * l1
            })
            .collect();
        let max = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = terms.iter().map(|t| (t - max).exp()).sum();
        (max + sum.ln()) / (lambda - 1.0)
    }

    #[test]
    fn laplace_curve_matches_mpmath() {
        // Direct summation at 50 digits (scripts/research/gen_fixtures.py discrete): small u
        // (first-order cancellation), λ → 1, large λu and the branch switch at (λ−1)u = 30.
        let rows = include_str!("fixtures/discrete_laplace.csv");
        let mut n = 0;
        for line in rows.lines().skip(1) {
            let f: Vec<f64> = line.split(',').map(|v| v.parse().unwrap()).collect();
            let got = laplace_shift_one_rdp(order(f[0]), f[1]);
            let e = ((got - f[2]) / f[2]).abs();
            assert!(
                e < 1e-14,
                "λ={} u={}: {got} vs {} ({e:e})",
                f[0],
                f[1],
                f[2]
            );
            n += 1;
        }
        assert!(n >= 60, "{n}");
    }

    #[test]
    fn laplace_curve_at_a_hand_value() {
        // λ = 2, u = 1: A = (e + e^{−2})/(1 + e^{−1}).
        let e1 = 1f64.exp();
        let want = ((e1 + (-2f64).exp()) / (1.0 + 1.0 / e1)).ln();
        let got = laplace_shift_one_rdp(order(2.0), 1.0);
        assert!((got - want).abs() < 1e-15 * want, "{got} vs {want}");
        assert_eq!(laplace_shift_one_rdp(order(2.0), 0.0), 0.0);
        assert_eq!(
            laplace_rdp(order(2.0), 1.0, &Sensitivity::REPLACE_ONE, 5),
            2.0 * got
        );
        assert_eq!(
            laplace_rdp(order(2.0), 1.0, &Sensitivity::ADD_REMOVE_ONE, 5),
            got
        );
    }

    #[test]
    fn discrete_laplace_costs_more_than_the_continuous_curve_far_out() {
        // Why the continuous curve cannot be borrowed: at u = 5, λ = 2 the discrete cell
        // costs ≈ 5 (its pure-DP bound), the continuous one 5 − ln(3/2).
        let d = laplace_shift_one_rdp(order(2.0), 5.0);
        let c = curve::laplace_cell_rdp(order(2.0), 5.0);
        assert!(d > c + 0.3, "{d} vs {c}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(100))]

        #[test]
        fn laplace_curve_equals_brute_force_summation(
            lambda in 1.001f64..64.0, log_u in -2.5f64..2.0,
        ) {
            let u = 10f64.powf(log_u);
            let exact = laplace_shift_one_rdp(order(lambda), u);
            let brute = brute_force_laplace(lambda, u, 1);
            // brute force loses digits to cancellation when D is tiny; compare at its precision
            let tol = 1e-9 * exact + 1e-13 / (lambda - 1.0);
            prop_assert!((exact - brute).abs() <= tol, "λ={} u={}: {} vs {}", lambda, u, exact, brute);
        }

        #[test]
        fn custom_laplace_bound_dominates_every_integer_neighbour(
            lambda in 1.01f64..20.0, scale in 0.2f64..20.0,
            l2 in 1.0f64..12.0, linf in 1.0f64..3.5, d in 1usize..6,
            raw in proptest::collection::vec(-3i64..=3, 6),
        ) {
            prop_assume!(linf * linf <= l2);
            let sens = Sensitivity::new(l2, linf).unwrap();
            let price = laplace_rdp(order(lambda), scale, &sens, d);
            // a random integer neighbour inside the ball
            let l = linf.floor() as i64;
            let mut s: Vec<i64> = raw[..d].iter().map(|v| (*v).clamp(-l, l)).collect();
            while s.iter().map(|v| (v * v) as f64).sum::<f64>() > l2 {
                let i = s.iter().position(|v| *v != 0).unwrap();
                s[i] -= s[i].signum();
            }
            let cost: f64 = s.iter().map(|v| if *v == 0 { 0.0 } else { brute_force_laplace(lambda, 1.0 / scale, v.abs()) }).sum();
            prop_assert!(price >= cost * (1.0 - 1e-9), "price {} < {} for {:?}", price, cost, s);
        }

        #[test]
        fn laplace_calibration_meets_the_contract(
            lambda in 1.0001f64..500.0, log_eps in -7.0f64..9.0, which in 0usize..3, d in 2usize..1000,
        ) {
            let e = log_eps.exp();
            let sens = match which {
                0 => Sensitivity::REPLACE_ONE,
                1 => Sensitivity::ADD_REMOVE_ONE,
                _ => Sensitivity::new(5.5, 2.2).unwrap(),
            };
            let b = laplace_scale(order(lambda), eps(e), &sens, d).unwrap();
            let c = laplace_rdp(order(lambda), b, &sens, d);
            prop_assert!(c * (1.0 + CHARGE_INFLATION) <= e, "over: {} vs {}", c, e);
            prop_assert!(c >= e * (1.0 - SPEND_TOLERANCE), "under: {} vs {}", c, e);
        }
    }

    #[test]
    fn custom_relations_use_integer_shifts() {
        let s = integer_sensitivity(&Sensitivity::new(5.5, 2.2).unwrap()).unwrap();
        assert_eq!((s.l2_squared(), s.linf()), (5.0, 2.0));
        assert_eq!(s.relation(), Relation::Custom);
        assert!(integer_sensitivity(&Sensitivity::new(0.25, 0.5).unwrap()).is_err());
        assert_eq!(
            gaussian_rdp(order(2.0), 1.0, &Sensitivity::new(0.25, 0.5).unwrap()),
            f64::INFINITY
        );
        assert_eq!(
            gaussian_rdp(order(3.0), 2.0, &Sensitivity::new(5.5, 2.2).unwrap()),
            3.0 * 5.0 / 8.0
        );
        assert_eq!(
            integer_sensitivity(&Sensitivity::REPLACE_ONE),
            Ok(Sensitivity::REPLACE_ONE)
        );
        assert_eq!(
            gaussian_pricing(order(2.0), &Sensitivity::REPLACE_ONE),
            Pricing::Exact
        );
        assert_eq!(
            gaussian_pricing(order(2.5), &Sensitivity::REPLACE_ONE),
            Pricing::Bound
        );
        assert_eq!(
            laplace_pricing(&Sensitivity::ADD_REMOVE_ONE),
            Pricing::Exact
        );
        assert_eq!(
            laplace_pricing(&Sensitivity::new(2.0, 1.0).unwrap()),
            Pricing::Bound
        );
    }

    #[test]
    fn discrete_gaussian_rdp_at_integer_orders_is_the_continuous_one() {
        // CKS20: for integer shifts and integer λ the divergence equals λ‖s‖²/(2σ²). Checked by
        // direct summation of Σ_y P₀(y)^λ P₁(y)^{1−λ} for one cell shifted by 1.
        for sigma in [0.4f64, 0.8, 1.5, 3.0] {
            for lambda in [2.0f64, 3.0, 5.0] {
                let w = |y: i64, c: i64| -((y - c) as f64).powi(2) / (2.0 * sigma * sigma);
                let z: f64 = (-200..=200).map(|y| w(y, 0).exp()).sum();
                let a: f64 = (-200..=200)
                    .map(|y| (lambda * w(y, 0) + (1.0 - lambda) * w(y, 1)).exp())
                    .sum::<f64>()
                    / z;
                let exact = a.ln() / (lambda - 1.0);
                let priced = gaussian_rdp(order(lambda), sigma, &Sensitivity::ADD_REMOVE_ONE);
                assert!(
                    (exact - priced).abs() <= 1e-12 * priced,
                    "σ={sigma} λ={lambda}"
                );
            }
            // and at a non-integer order the continuous curve is an upper bound
            let lambda = 2.5;
            let w = |y: i64, c: i64| -((y - c) as f64).powi(2) / (2.0 * sigma * sigma);
            let z: f64 = (-200..=200).map(|y| w(y, 0).exp()).sum();
            let a: f64 = (-200..=200)
                .map(|y| (lambda * w(y, 0) + (1.0 - lambda) * w(y, 1)).exp())
                .sum::<f64>()
                / z;
            let exact = a.ln() / (lambda - 1.0);
            let priced = gaussian_rdp(order(lambda), sigma, &Sensitivity::ADD_REMOVE_ONE);
            assert!(exact <= priced * (1.0 + 1e-12), "σ={sigma}");
        }
    }

    #[test]
    fn gaussian_sigma_contract_and_refusal() {
        for s in [
            Sensitivity::REPLACE_ONE,
            Sensitivity::new(5.5, 2.2).unwrap(),
        ] {
            for lambda in [1.5, 2.0, 64.0] {
                for e in [1e-3, 0.5, 3.0] {
                    let sigma = gaussian_sigma(order(lambda), eps(e), &s).unwrap();
                    let c = gaussian_rdp(order(lambda), sigma, &s);
                    assert!(c * (1.0 + CHARGE_INFLATION) <= e && c >= e * (1.0 - SPEND_TOLERANCE));
                }
            }
        }
        assert!(
            gaussian_sigma(order(2.0), eps(1.0), &Sensitivity::new(0.5, 0.5).unwrap()).is_err()
        );
        assert!(laplace_scale(
            order(2.0),
            eps(1.0),
            &Sensitivity::new(0.5, 0.5).unwrap(),
            3
        )
        .is_err());
    }

    // ------------------------------------------------------------------ samplers

    #[test]
    fn uniform_below_is_uniform() {
        let mut rng = test_rng(1);
        for n in [1u128, 2, 3, 7, (1 << 64) + 3] {
            let small = n.min(7) as usize;
            let mut hits = vec![0usize; small];
            let draws = 70_000;
            for _ in 0..draws {
                let v = uniform_below(n, &mut rng);
                assert!(v < n);
                if (v as usize) < small && v < small as u128 {
                    hits[v as usize] += 1;
                }
            }
            if n <= 7 {
                let want = draws as f64 / n as f64;
                for h in hits {
                    // 6 standard deviations
                    assert!(
                        (h as f64 - want).abs() < 6.0 * want.sqrt(),
                        "n={n}: {h} vs {want}"
                    );
                }
            }
        }
        let big = BigUint::from(1u128 << 100) * 3u32 + 1u32;
        for _ in 0..1000 {
            assert!(uniform_below_big(&big, &mut rng) < big);
        }
    }

    #[test]
    fn bernoulli_exp_has_the_right_mean() {
        let mut rng = test_rng(2);
        let n = 200_000;
        for (num, den) in [(0u64, 1u64), (1, 3), (1, 1), (7, 8)] {
            let p = (-(num as f64) / den as f64).exp();
            let hits = (0..n)
                .filter(|_| bernoulli_exp_unit(num, den, &mut rng))
                .count();
            let sd = (p * (1.0 - p) / n as f64).sqrt();
            assert!(
                ((hits as f64 / n as f64) - p).abs() <= 6.0 * sd + 1e-12,
                "{num}/{den}"
            );
        }
        for (num, den) in [(5u32, 2u32), (0, 1), (31, 10)] {
            let p = (-(num as f64) / den as f64).exp();
            let (bn, bd) = (BigUint::from(num), BigUint::from(den));
            let hits = (0..n)
                .filter(|_| bernoulli_exp_big(&bn, &bd, &mut rng))
                .count();
            let sd = (p * (1.0 - p) / n as f64).sqrt();
            assert!(
                ((hits as f64 / n as f64) - p).abs() <= 6.0 * sd + 1e-12,
                "{num}/{den}"
            );
        }
    }

    #[test]
    fn the_u128_and_big_integer_acceptance_paths_both_accept_with_exp_minus_gamma() {
        let sigma = 3.3f64;
        let g = DiscreteGaussian::new(sigma).unwrap();
        assert!(g.small.is_some());
        let mut slow = g.clone();
        slow.small = None;
        let mut rng = test_rng(21);
        let n = 20_000;
        for abs_y in [0u128, 1, 4, 9] {
            let t = 4.0; // ⌊3.3⌋ + 1
            let p = (-(abs_y as f64 - sigma * sigma / t).powi(2) / (2.0 * sigma * sigma)).exp();
            let sd = (p * (1.0 - p) / n as f64).sqrt();
            for path in [&g, &slow] {
                let hits = (0..n).filter(|_| path.accept(abs_y, &mut rng)).count();
                let f = hits as f64 / n as f64;
                assert!((f - p).abs() <= 6.0 * sd + 1e-9, "|y|={abs_y}: {f} vs {p}");
            }
        }
        assert!(DiscreteGaussian::new(1e12).unwrap().small.is_none());
    }

    /// Pearson χ² of integer draws against a pmf over |y| ≤ k (tails pooled).
    fn chi_square(draws: &[i128], pmf: impl Fn(i64) -> f64, k: i64) -> (f64, usize) {
        let n = draws.len() as f64;
        let mut counts = vec![0usize; (2 * k + 3) as usize];
        for &y in draws {
            let idx = if y < -(k as i128) {
                0
            } else if y > k as i128 {
                (2 * k + 2) as usize
            } else {
                (y as i64 + k + 1) as usize
            };
            counts[idx] += 1;
        }
        let inner: f64 = (-k..=k).map(&pmf).sum();
        let tail = (1.0 - inner) / 2.0;
        let mut stat = 0.0;
        let mut cells = 0;
        for (i, &c) in counts.iter().enumerate() {
            let p = if i == 0 || i == counts.len() - 1 {
                tail
            } else {
                pmf(i as i64 - k - 1)
            };
            let want = p * n;
            if want < 5.0 {
                continue;
            }
            stat += (c as f64 - want).powi(2) / want;
            cells += 1;
        }
        (stat, cells)
    }

    #[test]
    fn discrete_laplace_matches_its_pmf() {
        let mut rng = test_rng(3);
        // integer, dyadic-fraction and non-dyadic scales
        for b in [1.0, 2.5, 0.3, 7.0] {
            let draws: Vec<i128> = (0..100_000)
                .map(|_| sample_discrete_laplace(b, &mut rng).unwrap())
                .collect();
            let (stat, cells) = chi_square(&draws, |y| laplace_pmf(b, y), 12);
            // χ²(k) has mean k and sd √(2k): 6 sd above the mean fails.
            let limit = cells as f64 + 6.0 * (2.0 * cells as f64).sqrt();
            assert!(stat < limit, "b={b}: χ²={stat} over {cells} cells");
            // Var = 2p/(1−p)²
            let p = (-1.0 / b).exp();
            let var = 2.0 * p / (1.0 - p).powi(2);
            let m2 = draws.iter().map(|y| (*y as f64).powi(2)).sum::<f64>() / draws.len() as f64;
            assert!((m2 / var - 1.0).abs() < 0.05, "b={b}: {m2} vs {var}");
        }
    }

    #[test]
    fn discrete_gaussian_matches_its_pmf() {
        let mut rng = test_rng(4);
        for sigma in [0.7, 1.0, 3.3, 10.0] {
            let g = DiscreteGaussian::new(sigma).unwrap();
            let draws: Vec<i128> = (0..100_000).map(|_| g.sample(&mut rng)).collect();
            let w = |y: i64| (-(y as f64).powi(2) / (2.0 * sigma * sigma)).exp();
            let z: f64 = (-2000..=2000).map(w).sum();
            let (stat, cells) = chi_square(&draws, |y| w(y) / z, (4.0 * sigma) as i64 + 1);
            let limit = cells as f64 + 6.0 * (2.0 * cells as f64).sqrt();
            assert!(stat < limit, "σ={sigma}: χ²={stat} over {cells} cells");
            let var: f64 = (-2000..=2000)
                .map(|y| (y as f64).powi(2) * w(y))
                .sum::<f64>()
                / z;
            let m2 = draws.iter().map(|y| (*y as f64).powi(2)).sum::<f64>() / draws.len() as f64;
            let mean = draws.iter().map(|y| *y as f64).sum::<f64>() / draws.len() as f64;
            assert!((m2 / var - 1.0).abs() < 0.03, "σ={sigma}: {m2} vs {var}");
            assert!(
                mean.abs() < 6.0 * (var / draws.len() as f64).sqrt(),
                "σ={sigma}: {mean}"
            );
        }
    }

    #[test]
    fn huge_scales_sample_and_out_of_range_scales_are_refused() {
        let mut rng = test_rng(5);
        let g = DiscreteGaussian::new(MAX_NOISE_SCALE).unwrap();
        let mut big = 0;
        for _ in 0..200 {
            let y = g.sample(&mut rng);
            assert!(y.unsigned_abs() < 1u128 << 60);
            big += (y.unsigned_abs() > 1u128 << 48) as usize;
            let l = sample_discrete_laplace(MAX_NOISE_SCALE, &mut rng).unwrap();
            assert!(l.unsigned_abs() < 1u128 << 62);
        }
        assert!(big > 150, "{big}");
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, MAX_NOISE_SCALE * 2.0] {
            assert!(DiscreteGaussian::new(bad).is_err());
            assert!(sample_discrete_laplace(bad, &mut rng).is_err());
        }
        // a tiny scale is almost surely 0 and never fails
        for _ in 0..100 {
            assert_eq!(sample_discrete_laplace(1e-300, &mut rng).unwrap(), 0);
            assert_eq!(DiscreteGaussian::new(1e-3).unwrap().sample(&mut rng), 0);
        }
    }

    #[test]
    fn dyadic_is_exact() {
        for x in [1.0, 0.3, 2.5, 7.0, 1e-300, 5e-324, MAX_NOISE_SCALE, 3.0e15] {
            let (m, e) = dyadic(x);
            assert_eq!(m % 2, 1);
            let back = (m as f64) * 2f64.powi(e);
            // powi underflows for the subnormal case; compare via ldexp-like scaling
            if x > 1e-290 {
                assert_eq!(back, x, "{x}");
            }
        }
    }
}
