//! Worst-case accuracy of one release, from public inputs only: the shape d, a public total n
//! (or a public lower bound of it) and the mechanism's parameters — never the counts.
//!
//! Every bound here is about the output y *as the service draws it* against the true normalised
//! histogram p = x/n, and holds for **every** count vector x with total n (a supremum over x),
//! and, because each is non-increasing in n, for every x with total ≥ n. Two quantities:
//!
//! - `l2`: ‖y − p‖₂ ≤ l2 with probability ≥ 1 − β;
//! - `cell_sd`: every output cell's root-mean-square deviation from the truth,
//!   √E[(yᵢ − pᵢ)²] ≤ cell_sd — its standard deviation and its bias in quadrature, so also a
//!   bound on sd(yᵢ). (A bound on sd(yᵢ) alone could be met by shrinking the output towards a
//!   prior: `posterior` at a tiny ε has a huge prior, an almost constant output and sd ≈ 0.)
//!
//! The derivations, their sources and their confidence are in docs/PRIVACY.md, "Planning for
//! accuracy"; the comments here say which step each function is. Pure functions: no I/O, no
//! randomness, no counts.

use super::exponential::{hellinger_bound_with, selection_scale, BetaCandidates};
use super::types::Prior;

/// Every bound is inflated by this relative amount before it is returned: it covers the f64
/// rounding of the bounds' own arithmetic and of the parameters the sampler receives (the
/// Gamma shapes fl(fl(r·x) + α), σ² rounded up by one ulp), each below 1e-15 relative.
pub const BOUND_INFLATION: f64 = 1e-9;
/// The ℓ2 diameter of the probability simplex: ‖y − p‖₂ ≤ √2 for any two distributions, so a
/// bound at √2 claims nothing.
pub const MAX_L2: f64 = std::f64::consts::SQRT_2;
/// The largest root-mean-square deviation of a cell in [0, 1] from a value in [0, 1]: a
/// cell_sd of 1 claims nothing.
pub const MAX_CELL_SD: f64 = 1.0;

fn inflate(x: f64) -> f64 {
    x * (1.0 + BOUND_INFLATION)
}

/// The worst-case bounds of one release (see the module documentation): `kl` bounds
/// D_KL(x/n ‖ y) at confidence 1 − β (∞ where no bound is proven).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    pub l2: f64,
    pub cell_sd: f64,
    pub kl: f64,
}

// ------------------------------------------------------------------------ Dirichlet family

/// y ~ Dir(r·x + α): the parameters the worst-case bounds need (r, α₀ = Σα, d and how far the
/// prior's mean can be from p).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DirichletDraw {
    r: f64,
    alpha_total: f64,
    /// The smallest αᵢ.
    alpha_min: f64,
    /// max over p in the simplex of ‖α/α₀ − p‖₂ (attained at a vertex: the histogram with
    /// every record in the cell of the smallest prior).
    bias_factor: f64,
    /// The smallest and largest αᵢ/α₀.
    q_min: f64,
    q_max: f64,
    d: usize,
}

impl DirichletDraw {
    /// `None` unless r and every αᵢ are finite and > 0, d ≥ 2, and a per-cell prior has d cells.
    pub fn new(r: f64, alpha: &Prior, d: usize) -> Option<DirichletDraw> {
        if !(r.is_finite() && r > 0.0 && d >= 2) || alpha.check_dimension(d).is_err() {
            return None;
        }
        match alpha {
            Prior::Uniform(a) => Self::uniform(r, *a, d),
            Prior::PerCell(v) => {
                if !v.iter().all(|a| a.is_finite() && *a > 0.0) {
                    return None;
                }
                let total: f64 = v.iter().sum();
                let (k, min) =
                    v.iter()
                        .copied()
                        .enumerate()
                        .fold(
                            (0, f64::INFINITY),
                            |b, (i, a)| if a < b.1 { (i, a) } else { b },
                        );
                // ‖q − e_k‖² = (1 − q_k)² + Σ_{i≠k} q_i², from differences so that no 1 − (a
                // number near 1) cancels.
                let squares: f64 = v.iter().map(|a| a * a).sum::<f64>() - v[k] * v[k];
                let factor = (((total - min) * (total - min) + squares.max(0.0)) / (total * total))
                    .sqrt()
                    .min(MAX_L2);
                let max = v.iter().copied().fold(0.0, f64::max);
                (total.is_finite() && factor.is_finite()).then_some(DirichletDraw {
                    r,
                    alpha_total: total,
                    alpha_min: min,
                    bias_factor: factor,
                    q_min: min / total,
                    q_max: max / total,
                    d,
                })
            }
        }
    }

    /// A uniform prior α in every cell: the prior's mean is the uniform vector, at distance
    /// √(1 − 1/d) from every vertex.
    pub fn uniform(r: f64, alpha: f64, d: usize) -> Option<DirichletDraw> {
        let total = alpha * d as f64;
        let valid = r.is_finite()
            && r > 0.0
            && alpha.is_finite()
            && alpha > 0.0
            && d >= 2
            && total.is_finite();
        valid.then(|| DirichletDraw {
            r,
            alpha_total: total,
            alpha_min: alpha,
            bias_factor: (1.0 - 1.0 / d as f64).sqrt(),
            q_min: 1.0 / d as f64,
            q_max: 1.0 / d as f64,
            d,
        })
    }

    /// a₀ = r·n + α₀, the total concentration of the draw when the counts sum to n.
    pub fn concentration(&self, n: f64) -> f64 {
        self.r * n + self.alpha_total
    }

    /// sup over x with Σx = n of ‖E[y] − p‖₂ = α₀/(rn + α₀)·max_p ‖α/α₀ − p‖₂: E[y] − p =
    /// (α₀/(rn + α₀))(α/α₀ − p), convex in p, so the supremum is at a vertex (a one-hot
    /// histogram, which exists) and is attained.
    pub fn bias(&self, n: f64) -> f64 {
        self.alpha_total / self.concentration(n) * self.bias_factor
    }

    /// The bounds at total n (a public total or a lower bound of it) and confidence 1 − β.
    pub fn bounds(&self, n: f64, beta: f64) -> Bounds {
        Bounds {
            l2: self.l2(n, beta),
            cell_sd: self.cell_sd(n),
            kl: self.kl(n, beta),
        }
    }

    /// D_KL(x/n ‖ y) ≤ kl with probability ≥ 1 − β for every x with Σx = n (and every larger
    /// total: the bound falls with n). Chernoff, P(KL > η) ≤ e^{−tη}·E[e^{t·KL}], with the
    /// moment generating function taken at its worst x (docs/PRIVACY.md, "KL"):
    ///
    /// - every αᵢ ≥ 1: the MGF is largest at a one-hot x in the cell of the smallest prior, where
    ///   it is E[Y^{−t}] for Y ~ Beta(b + α_m, α₀ − α_m), b = rn — so
    ///   η = min_t (Λ(t) + ln(1/β))/t with Λ(t) = lnΓ(b + α_m − t) − lnΓ(b + α_m) + lnΓ(b + α₀)
    ///   − lnΓ(b + α₀ − t), the tight bound;
    /// - ½ ≤ α_m < 1: seed 000 Theorem 2's own chain (ψ(z) > ln(z − ½)), with its last step
    ///   kept as a minimum over t rather than its closed form: η = min_t ln(1/β)/t +
    ///   ln((b + α₀)/(b + α_m − ½ − t));
    /// - α_m < ½ (or n = 0, where there is no x/n): no bound is proven, ∞.
    pub fn kl(&self, n: f64, beta: f64) -> f64 {
        dirichlet_kl(self.r * n, self.alpha_total, self.alpha_min, beta)
    }

    /// ‖y − p‖₂ ≤ ‖y − E[y]‖₂ + ‖E[y] − p‖₂: the spread at confidence 1 − β
    /// ([`dirichlet_spread_squared`]) plus the worst-case bias; √2 (no claim) when n = 0, where
    /// there is no p.
    pub fn l2(&self, n: f64, beta: f64) -> f64 {
        if !(n > 0.0 && n.is_finite() && beta > 0.0 && beta < 1.0) {
            return MAX_L2;
        }
        let a0 = self.concentration(n);
        let spread = dirichlet_spread_squared(a0, self.d, beta).sqrt();
        inflate(spread + self.bias(n)).min(MAX_L2)
    }

    /// sup over x with Σx = n and over cells of √E[(yᵢ − pᵢ)²], E[(yᵢ − pᵢ)²] = Var yᵢ + (mᵢ − pᵢ)²
    /// with mᵢ = (1 − B)pᵢ + Bqᵢ, B = α₀/a₀, qᵢ = αᵢ/α₀ and Var yᵢ = mᵢ(1 − mᵢ)/(a₀ + 1)
    /// (000 §2.2). Each cell's pᵢ ranges over [0, 1] whatever the others do, the expression is a
    /// quadratic in pᵢ (maximised exactly on [0, 1]) and convex in qᵢ (so the largest is at
    /// q_min or q_max, both priors of some cell). At n = 0, where there is no p, 1 (no claim).
    pub fn cell_sd(&self, n: f64) -> f64 {
        if !(n > 0.0 && n.is_finite()) {
            return MAX_CELL_SD;
        }
        let a0 = self.concentration(n);
        let b = self.alpha_total / a0;
        let v = 1.0 / (a0 + 1.0);
        let worst = [self.q_min, self.q_max]
            .into_iter()
            .map(|q| {
                // f(p) = v·m(1 − m) + b²(q − p)², m = (1 − b)p + bq: a quadratic c₂p² + c₁p + c₀.
                let f = |p: f64| {
                    let m = (1.0 - b) * p + b * q;
                    v * m * (1.0 - m) + b * b * (q - p) * (q - p)
                };
                let c2 = b * b - v * (1.0 - b) * (1.0 - b);
                let c1 = v * (1.0 - b) * (1.0 - 2.0 * b * q) - 2.0 * b * b * q;
                let mut best = f(0.0).max(f(1.0));
                if c2 < 0.0 {
                    let p = (-c1 / (2.0 * c2)).clamp(0.0, 1.0);
                    best = best.max(f(p));
                }
                best
            })
            .fold(0.0, f64::max);
        inflate(worst.max(0.0).sqrt()).min(MAX_CELL_SD)
    }
}

/// [`DirichletDraw::kl`] from b = rn, α₀ and α_m: η with P(D_KL(x/n ‖ y) > η) ≤ β for
/// y ~ Dir(b·x/n + α), every x; ∞ where no bound is proven (α_m < ½, b = 0).
pub fn dirichlet_kl(b: f64, alpha_total: f64, alpha_min: f64, beta: f64) -> f64 {
    if !(b > 0.0 && b.is_finite() && beta > 0.0 && beta < 1.0) {
        return f64::INFINITY;
    }
    let l = (1.0 / beta).ln();
    let eta = if alpha_min >= 1.0 {
        one_hot_kl(b, alpha_total, alpha_min, l)
    } else if alpha_min >= 0.5 {
        theorem_2_kl(b, alpha_total, alpha_min, l)
    } else {
        f64::INFINITY
    };
    if eta.is_finite() {
        inflate(eta)
    } else {
        f64::INFINITY
    }
}

/// Λ(t) = lnΓ(z₀ − t) − lnΓ(z₀) + lnΓ(z₀ + Δ) − lnΓ(z₀ + Δ − t) for 0 < t < z₀ (z₀ = b + α_m,
/// Δ = α₀ − α_m), the log-MGF of −ln Y, Y ~ Beta(z₀, Δ), and its first two derivatives. As
/// ∫ ℓ(w) ψ′(z₀ + w) dw over w ∈ [−t, Δ] with ℓ the trapezoid of height min(t, Δ) (the
/// overlap of [0, Δ] and [w, w + t]): positive pieces, no cancellation between lnΓ values
/// (which loses every digit at large b), by `exact::kernel_integrals`.
fn one_hot_lambda(z0: f64, delta: f64, t: f64) -> (f64, f64, f64) {
    use super::exact::kernel_integrals;
    let m = t.min(delta);
    let x1 = z0 - t;
    let x2 = x1 + m;
    let x3 = z0 + delta - m;
    // Rising piece on [x1, x2], flat of height m on [x2, x3], falling on [x3, x3 + m].
    let (rise, _) = kernel_integrals(x1, m);
    let rising = m * m * rise / (x1 * x1);
    let flat = if x3 > x2 {
        let (a, b) = kernel_integrals(x2, x3 - x2);
        m * (x3 - x2) * (a + b) / (x2 * x2)
    } else {
        0.0
    };
    let (_, fall) = kernel_integrals(x3, m);
    let falling = m * m * fall / (x3 * x3);
    // Λ′(t) = ψ(z₀ + Δ − t) − ψ(z₀ − t) = ∫ ψ′ over [x1, x1 + Δ]; Λ″ = ψ′(x1) − ψ′(x1 + Δ).
    let (a, b) = kernel_integrals(x1, delta);
    let first = delta * (a + b) / (x1 * x1);
    let second = super::special::trigamma(x1) - super::special::trigamma(x1 + delta);
    (rising + flat + falling, first, second)
}

/// min over t ∈ (0, b + α_m) of (Λ(t) + l)/t (any t gives a valid bound; the minimum is where
/// N(t) = tΛ′(t) − Λ(t) − l, increasing since N′ = tΛ″ ≥ 0, crosses 0): safeguarded Newton.
fn one_hot_kl(b: f64, alpha_total: f64, alpha_min: f64, l: f64) -> f64 {
    let z0 = b + alpha_min;
    let delta = alpha_total - alpha_min;
    if !(z0.is_finite() && delta > 0.0 && delta.is_finite()) {
        return f64::INFINITY;
    }
    let value = |t: f64| {
        let (lambda, _, _) = one_hot_lambda(z0, delta, t);
        (lambda + l) / t
    };
    // For t ≪ b, N ≈ t²Δ/(2b²) − l: t ≈ b·√(2l/Δ), kept inside the domain.
    let (mut lo, mut hi) = (0.0, z0);
    let mut t = (b * (2.0 * l / delta).sqrt()).min(0.5 * z0);
    let mut best = f64::INFINITY;
    for _ in 0..60 {
        let (lambda, first, second) = one_hot_lambda(z0, delta, t);
        let v = (lambda + l) / t;
        if v.is_finite() {
            best = best.min(v);
        }
        let n = t * first - lambda - l;
        if n > 0.0 {
            hi = t;
        } else {
            lo = t;
        }
        let step = n / (t * second);
        let mut next = t - step;
        if !(next > lo && next < hi && next.is_finite()) {
            next = if hi < z0 {
                0.5 * (lo + hi)
            } else {
                0.5 * (t + z0)
            };
        }
        if (next - t).abs() <= 1e-10 * t {
            break;
        }
        t = next;
    }
    best.min(value(t))
}

/// Seed 000 Theorem 2's chain for ½ ≤ α_m < 1: P(KL > η) ≤ exp(−tη + t·ln((b + α₀)/(b + c −
/// t))), c = α_m − ½, 0 < t < b; the minimising t solves t² = l(b + c − t).
fn theorem_2_kl(b: f64, alpha_total: f64, alpha_min: f64, l: f64) -> f64 {
    let c = alpha_min - 0.5;
    let t = (0.5 * ((l * l + 4.0 * l * (b + c)).sqrt() - l)).min(b * (1.0 - 1e-9));
    if t.is_nan() || t <= 0.0 {
        return f64::INFINITY;
    }
    l / t + ((alpha_total - c) / (b + c)).ln_1p() - (-t / (b + c)).ln_1p()
}

/// The three tail bounds on Q = ‖y − m‖₂², y ~ Dir(a) with Σa = a₀ and mean m, each valid at
/// confidence 1 − β for **every** m in the simplex (so for every x): (sub-Gaussian, Cantelli,
/// Markov). See docs/PRIVACY.md, "Planning for accuracy", for the proofs.
pub fn dirichlet_spread_parts(a0: f64, d: usize, beta: f64) -> (f64, f64, f64) {
    let dm1 = d as f64 - 1.0;
    let t = (1.0 / beta).ln();
    // Marchal & Arbel 2017: Dir(a) is 1/(4(a₀ + 1))-sub-Gaussian; Hsu, Kakade & Zhang 2012,
    // Theorem 1, with A the orthogonal projection onto {Σv = 0} (y − m lies there, tr A = d − 1,
    // tr A² = d − 1, ‖A‖ = 1).
    let hkz = (dm1 + 2.0 * (dm1 * t).sqrt() + 2.0 * t) / (4.0 * (a0 + 1.0));
    let w_max = 1.0 - 1.0 / d as f64;
    let cantelli = dirichlet_cantelli(a0, w_max, (1.0 - beta) / beta);
    // E[Q] = (1 − ‖m‖²)/(a₀ + 1) ≤ (1 − 1/d)/(a₀ + 1), and Markov.
    let markov = w_max / ((a0 + 1.0) * beta);
    (hkz, cantelli, markov)
}

/// A bound on Q = ‖y − E[y]‖₂² at confidence 1 − β for y ~ Dir(a), a₀ = Σa, whatever the
/// mean: the smallest of [`dirichlet_spread_parts`], and 2 (the squared diameter).
pub fn dirichlet_spread_squared(a0: f64, d: usize, beta: f64) -> f64 {
    let (hkz, cantelli, markov) = dirichlet_spread_parts(a0, d, beta);
    hkz.min(cantelli).min(markov).min(2.0)
}

/// sup over w ∈ [0, w_max] of E[Q] + √(k²·Var Q), k² = (1 − β)/β (Cantelli: P(Q ≥ E[Q] +
/// √(Var Q (1−β)/β)) ≤ β), with w = 1 − ‖m‖² and Var Q bounded by a concave quadratic
/// f(w) = b·w − c·w² (exact fourth moments of the Dirichlet; docs). E[Q] = w/(a₀ + 1) is
/// linear, √f concave, so the maximiser is the stationary point, clamped to the interval.
fn dirichlet_cantelli(a0: f64, w_max: f64, k2: f64) -> f64 {
    let a1 = a0 + 1.0;
    let h = 1.0 / (a1 * a1);
    let (b, c) = dirichlet_variance_quadratic(a0);
    let w = (b / (2.0 * c) * (1.0 + (h / (h + k2 * c)).sqrt())).clamp(0.0, w_max);
    let f = (b * w - c * w * w).max(0.0);
    w / a1 + (k2 * f).sqrt()
}

/// (b, c) with Var Q ≤ b·w − c·w² for y ~ Dir(a), Σa = a₀, w = 1 − ‖E[y]‖², c > 0. From the
/// exact fourth moment: E[Q²]·(a₀+1)(a₀+2)(a₀+3) = a₀(1 + 3s₂²) + 6(1 − 2s₂ − 3s₂²) +
/// (24 − 4a₀)s₃ with s_k = Σm_iᵏ (docs); then s₃ ≥ s₂² (a₀ ≥ 6, where its coefficient is ≤ 0) or
/// s₃ ≤ s₂ (a₀ < 6), and E[Q] = w/(a₀ + 1).
pub(crate) fn dirichlet_variance_quadratic(a0: f64) -> (f64, f64) {
    let a1 = a0 + 1.0;
    let d3 = a1 * (a0 + 2.0) * (a0 + 3.0);
    let h = 1.0 / (a1 * a1);
    if a0 >= 6.0 {
        (2.0 * a0 / d3, (a0 - 6.0) / d3 + h)
    } else {
        ((24.0 - 2.0 * a0) / d3, (18.0 - 3.0 * a0) / d3 + h)
    }
}

// ------------------------------------------------------------------------------ baselines

/// One integer noise law, as the baselines' bounds need it: its moments and tails. The baselines
/// add it to every count (`privacy::discrete`), then project z/Σz onto the simplex
/// (`baseline::project_to_simplex`) or smooth it. A mechanism adding noise of its own law
/// implements this for that law (beside the law, in its own module) and gets every bound of
/// [`Noise`] from it: nothing here lists the laws.
pub trait NoiseTail: Copy + std::fmt::Debug {
    /// E[e²] and E[e⁴].
    fn moments(&self) -> (f64, f64);
    /// The noise's scale parameter (σ, b): where the searches for a pseudo-count and a Chernoff
    /// parameter start (its variance can be far smaller: a σ of 0.05 draws 0 all but e⁻²⁰⁰ of
    /// the time).
    fn scale(&self) -> f64;
    /// M with d·P(|e| > M) ≤ β.
    fn max_quantile(&self, d: usize, beta: f64) -> f64;
    /// E[e^{θw}] − 1 for one cell's w = e⁺ + ℓ·e⁻, an upper bound (∞ where it diverges).
    fn w_mgf_minus_one(&self, theta: f64, ell: f64) -> f64;
    /// ln of the largest θ worth trying in the Chernoff bound on Σw (below any pole).
    fn w_ln_theta_max(&self, ell: f64) -> f64;
    /// s with P(S ≤ −s) ≤ β for the sum S of d independent noises.
    fn sum_margin(&self, d: usize, beta: f64) -> f64;
    /// A bound on P(S ≤ −s) for s > 0 (values above 1 or NaN are read as 1).
    fn sum_tail(&self, d: usize, s: f64) -> f64;
    /// A quantile of the quadratic form ‖Me‖₂² at a vertex sharper than Cantelli's and Markov's,
    /// where the law has one (sub-Gaussian noise: Hsu–Kakade–Zhang).
    fn quadratic_quantile(&self, _d: usize, _beta: f64) -> Option<f64> {
        None
    }
}

/// The worst-case bounds of an additive release with noise of law `T`; a law that could not be
/// built (a non-finite or non-positive scale) gives NaN bounds, which no target accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Noise<T>(Option<T>);

/// The split of β between the event "the noisy total is too small" (a fraction f of β) and
/// "the noise vector is too long" (the rest); every split is a valid bound, the smallest wins.
const SPLITS: [f64; 4] = [0.01, 0.05, 0.2, 0.5];
/// The margins s = f·n of the total tried by the cell bound.
const MARGINS: [f64; 6] = [0.001, 0.01, 0.05, 0.15, 0.3, 0.5];

impl<T: NoiseTail> Noise<T> {
    pub fn new(law: Option<T>) -> Noise<T> {
        Noise(law)
    }

    /// E[e²] and E[e⁴] of one cell's noise.
    pub fn moments(&self) -> Option<(f64, f64)> {
        self.0.map(|l| l.moments())
    }

    /// The bounds at total n and confidence 1 − β of the projected release (whose zeros leave
    /// its KL unbounded: `kl` is ∞; see [`Self::smoothed_kl`]).
    pub fn bounds(&self, d: usize, n: f64, beta: f64) -> Bounds {
        Bounds {
            l2: self.l2(d, n, beta),
            cell_sd: self.cell_sd(d, n),
            kl: f64::INFINITY,
        }
    }

    /// D_KL(x/n ‖ y) ≤ kl with probability ≥ 1 − β for every x with Σx = n (and every larger
    /// total), for the *smoothed* release y = (max(z, 0) + k)/Σ, z = x + e (docs/PRIVACY.md,
    /// "KL"). Per cell, with u = max(x + e, 0) + k: (x/n)·ln(x/u) ≤ φ(e)/n, φ(e) = |e|·ln(|e|/k)
    /// when e < −k and 0 otherwise (the worst x is x = |e|), and Σu ≤ n + Σe⁺ + dk, so
    /// KL = ln(Σu/n) + Σ(x/n)ln(x/u) ≤ (dk + Σe⁺ + Σφ(e))/n. On {max|eᵢ| ≤ M}, φ(e) ≤ ℓ·e⁻
    /// with ℓ = ln(M/k)⁺, so KL ≤ (dk + W)/n, W = Σ(eᵢ⁺ + ℓeᵢ⁻). A union bound: P(max|eᵢ| >
    /// M) ≤ fβ, Chernoff P(W > a) ≤ (1 − f)β; the best of a few splits f. ∞ for n = 0 or k ≤ 0.
    pub fn smoothed_kl(&self, d: usize, n: f64, beta: f64, k: f64) -> f64 {
        let Some(law) = self.0 else {
            return f64::NAN;
        };
        if !(n > 0.0 && n.is_finite() && d >= 1 && beta > 0.0 && beta < 1.0 && k > 0.0) {
            return f64::INFINITY;
        }
        let df = d as f64;
        let mut best = f64::INFINITY;
        for f in SPLITS {
            let m = law.max_quantile(d, f * beta);
            let ell = if m > k { (m / k).ln() } else { 0.0 };
            let a = w_quantile(&law, df, ell, (1.0 - f) * beta);
            best = best.min((df * k + a) / n);
        }
        inflate(best)
    }

    /// The pseudo-count k that minimises [`Self::smoothed_kl`] (golden-section search in ln k;
    /// any k is a valid choice, this one only the tightest found). Public: it depends on the
    /// noise, d, n and β, never on counts.
    pub fn best_smoothing(&self, d: usize, n: f64, beta: f64) -> f64 {
        let Some(law) = self.0 else {
            return f64::NAN;
        };
        let scale = law.scale();
        let kl = |lnk: f64| self.smoothed_kl(d, n, beta, lnk.exp());
        golden_min(kl, (scale * 1e-4).ln(), (scale * 1e2).ln(), 40)
            .0
            .exp()
    }

    /// ‖y − p‖₂ at confidence 1 − β for y = proj(z/Σz), z = x + e, every x with total n: with
    /// S = Σe and M = I − p1ᵀ, z/Σz − p = Me/(n + S), and the projection onto the simplex is
    /// non-expansive and fixes p, so on {S ≥ −s} (s < n), ‖y − p‖₂ ≤ ‖Me‖₂/(n − s). A union
    /// bound over P(S < −s) ≤ fβ and P(‖Me‖² > q) ≤ (1 − f)β ([`quadratic_quantile`],
    /// worst case p one-hot) gives √q/(n − s) for each split f; the smallest is returned.
    pub fn l2(&self, d: usize, n: f64, beta: f64) -> f64 {
        let Some(law) = self.0 else {
            return f64::NAN;
        };
        if !(n > 0.0 && n.is_finite() && d >= 2 && beta > 0.0 && beta < 1.0) {
            return MAX_L2;
        }
        let mut best = f64::INFINITY;
        for f in SPLITS {
            let (b_sum, b_quad) = (f * beta, (1.0 - f) * beta);
            let s = law.sum_margin(d, b_sum);
            // (NaN margins are skipped too.)
            if s.is_nan() || s >= n {
                continue;
            }
            let q = quadratic_quantile(&law, d, b_quad);
            best = best.min(q.sqrt() / (n - s));
        }
        inflate(best).min(MAX_L2)
    }

    /// E[(yᵢ − pᵢ)²] ≤ (1 − 1/d)·E‖Me‖²/(n − s)² + P(S < −s): y − p sums to 0, so
    /// (yᵢ − pᵢ)² ≤ (1 − 1/d)‖y − p‖², on {S ≥ −s} as in [`Self::l2`], and (yᵢ − pᵢ)² ≤ 1
    /// elsewhere; E‖Me‖² ≤ 2(d − 1)E[e²] (p one-hot). The best of a few margins s = f·n.
    pub fn cell_sd(&self, d: usize, n: f64) -> f64 {
        let Some(law) = self.0 else {
            return f64::NAN;
        };
        if !(n > 0.0 && n.is_finite() && d >= 2) {
            return MAX_CELL_SD;
        }
        let dm1 = d as f64 - 1.0;
        let mean_quad = 2.0 * dm1 * law.moments().0;
        // (yᵢ − pᵢ)² ≤ 1 always.
        let mut best: f64 = 1.0;
        for f in MARGINS {
            let s = f * n;
            let var =
                (1.0 - 1.0 / d as f64) * mean_quad / ((n - s) * (n - s)) + sum_tail(&law, d, s);
            best = best.min(var);
        }
        inflate(best.sqrt()).min(MAX_CELL_SD)
    }
}

/// The minimum of a unimodal `f` on [a, b] by golden-section search: (argmin, min).
fn golden_min(f: impl Fn(f64) -> f64, mut a: f64, mut b: f64, steps: usize) -> (f64, f64) {
    let g = 0.5 * (5f64.sqrt() - 1.0);
    let (mut c, mut e) = (b - g * (b - a), a + g * (b - a));
    let (mut fc, mut fe) = (f(c), f(e));
    for _ in 0..steps {
        if fc <= fe {
            b = e;
            e = c;
            fe = fc;
            c = b - g * (b - a);
            fc = f(c);
        } else {
            a = c;
            c = e;
            fc = fe;
            e = a + g * (b - a);
            fe = f(e);
        }
    }
    if fc <= fe {
        (c, fc)
    } else {
        (e, fe)
    }
}

/// A bound on P(S ≤ −s) (1 for s ≤ 0 and wherever the law's bound says nothing).
fn sum_tail<T: NoiseTail>(law: &T, d: usize, s: f64) -> f64 {
    if s.is_nan() || s <= 0.0 {
        return 1.0;
    }
    let value = law.sum_tail(d, s);
    if value.is_nan() {
        1.0
    } else {
        value.min(1.0)
    }
}

/// a with P(W > a) ≤ β for W = Σᵢ (eᵢ⁺ + ℓ·eᵢ⁻) over d cells (Chernoff,
/// a = min_θ (ln(1/β) + d·ln E[e^{θw}])/θ, golden-section search in ln θ over a wide bracket).
fn w_quantile<T: NoiseTail>(law: &T, d: f64, ell: f64, beta: f64) -> f64 {
    let l = (1.0 / beta).ln();
    let objective = |ln_theta: f64| {
        let theta = ln_theta.exp();
        let m = law.w_mgf_minus_one(theta, ell);
        if !(m.is_finite() && m > -1.0) {
            return f64::INFINITY;
        }
        (l + d * m.ln_1p()) / theta
    };
    let hi = law.w_ln_theta_max(ell);
    let lo = (1e-6 / law.scale()).ln().min(hi - 1.0);
    golden_min(objective, lo, hi, 60).1
}

/// q with P(‖Me‖₂² > q) ≤ β for every p in the simplex. At p = e_k, ‖Me‖² =
/// Σ_{i≠k} eᵢ² + (Σ_{i≠k} eᵢ)²; with m = d − 1, E = 2mv and Var = 2v²(m² + 3m) +
/// 4m(μ₄ − 3v²) (the quadratic form eᵀAe, A = MᵀM, has E = v·tr A and Var = 2v² tr A² +
/// (μ₄ − 3v²)Σ A_ii²; tr A, tr A² and Σ A_ii² are each largest at a vertex). Cantelli;
/// Markov; and the law's own bound where it has one. The smallest.
fn quadratic_quantile<T: NoiseTail>(law: &T, d: usize, beta: f64) -> f64 {
    let m = d as f64 - 1.0;
    let (v, mu4) = law.moments();
    let mean = 2.0 * m * v;
    let var = 2.0 * v * v * (m * m + 3.0 * m) + 4.0 * m * (mu4 - 3.0 * v * v).max(0.0);
    let cantelli = mean + (var * (1.0 - beta) / beta).sqrt();
    let markov = mean / beta;
    let q = cantelli.min(markov);
    match law.quadratic_quantile(d, beta) {
        Some(own) => q.min(own),
        None => q,
    }
}

/// The discrete Gaussian N_ℤ(0, σ²) of the `gaussian` baseline (CKS20).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiscreteGaussianTail {
    /// The variance proxy: E[e^{te}] ≤ e^{t²·proxy/2} for all t (σ²-subgaussian, CKS20).
    proxy: f64,
    v: f64,
    mu4: f64,
}

impl DiscreteGaussianTail {
    /// None unless σ is finite and positive.
    pub fn new(sigma: f64) -> Option<DiscreteGaussianTail> {
        if !(sigma.is_finite() && sigma > 0.0) {
            return None;
        }
        // The sampler's σ² is σ·σ rounded up by one ulp (`discrete::DiscreteGaussian`).
        let proxy = sigma * sigma * (1.0 + 4.0 * f64::EPSILON);
        let (v, mu4) = discrete_gaussian_moments(sigma);
        Some(DiscreteGaussianTail { proxy, v, mu4 })
    }
}

impl NoiseTail for DiscreteGaussianTail {
    fn moments(&self) -> (f64, f64) {
        (self.v, self.mu4)
    }

    fn scale(&self) -> f64 {
        self.proxy.sqrt()
    }

    /// The tail P(|e| ≥ s) ≤ 2e^{−s²/(2σ²)} (sub-Gaussian, CKS20).
    fn max_quantile(&self, d: usize, beta: f64) -> f64 {
        (2.0 * self.proxy * (2.0 * d as f64 / beta).ln()).sqrt()
    }

    /// E[e^{θe⁺}] ≤ e^{θ²σ²/2} + θ·E[e⁻] (E[e^{θe}] ≤ e^{θ²σ²/2}, and e^{θe} ≥ 1 + θe where
    /// e ≤ 0) with E[e⁻] = E|e|/2 bounded in [`half_abs_mean`]; E[e^{θw}] = E[e^{θe⁺}] +
    /// E[e^{θℓe⁻}] − 1 (the two parts are never both non-zero).
    fn w_mgf_minus_one(&self, theta: f64, ell: f64) -> f64 {
        let mu = half_abs_mean(self.proxy);
        (0.5 * theta * theta * self.proxy).exp_m1()
            + (0.5 * theta * theta * ell * ell * self.proxy).exp_m1()
            + theta * (1.0 + ell) * mu
    }

    fn w_ln_theta_max(&self, _ell: f64) -> f64 {
        (1e3 / self.scale()).ln()
    }

    fn sum_margin(&self, d: usize, beta: f64) -> f64 {
        (2.0 * d as f64 * self.proxy * (1.0 / beta).ln()).sqrt()
    }

    fn sum_tail(&self, d: usize, s: f64) -> f64 {
        (-s * s / (2.0 * d as f64 * self.proxy)).exp()
    }

    /// Hsu–Kakade–Zhang with tr A = 2m, tr A² = m² + 3m, ‖A‖ = d (m = d − 1).
    fn quadratic_quantile(&self, d: usize, beta: f64) -> Option<f64> {
        let m = d as f64 - 1.0;
        let t = (1.0 / beta).ln();
        Some(self.proxy * (2.0 * m + 2.0 * ((m * m + 3.0 * m) * t).sqrt() + 2.0 * (m + 1.0) * t))
    }
}

/// The discrete Laplace L_ℤ(b) of the `laplace` baseline, P(y) ∝ p^{|y|}, p = e^{−u}, u = 1/b,
/// with its exact moment generating function M(t) = (1 − p)²/((1 − pe^t)(1 − pe^{−t})) for
/// |t| < u.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiscreteLaplaceTail {
    u: f64,
    one_minus_p: f64,
    v: f64,
    mu4: f64,
}

impl DiscreteLaplaceTail {
    /// None unless b is finite and positive.
    pub fn new(scale: f64) -> Option<DiscreteLaplaceTail> {
        if !(scale.is_finite() && scale > 0.0) {
            return None;
        }
        let u = 1.0 / scale;
        let p = (-u).exp();
        let one_minus_p = -(-u).exp_m1();
        let v = 2.0 * p / (one_minus_p * one_minus_p);
        let mu4 = 2.0 * p * (1.0 + p * (11.0 + p * (11.0 + p))) / ((1.0 + p) * one_minus_p.powi(4));
        Some(DiscreteLaplaceTail {
            u,
            one_minus_p,
            v,
            mu4,
        })
    }

    fn p(&self) -> f64 {
        (-self.u).exp()
    }
}

impl NoiseTail for DiscreteLaplaceTail {
    fn moments(&self) -> (f64, f64) {
        (self.v, self.mu4)
    }

    fn scale(&self) -> f64 {
        1.0 / self.u
    }

    /// Exactly P(|e| > M) = 2p^{M+1}/(1 + p).
    fn max_quantile(&self, d: usize, beta: f64) -> f64 {
        let p = self.p();
        // 2d·p^{M+1}/(1 + p) ≤ β ⇔ (M + 1)·u ≥ ln(2d/(β(1 + p))).
        let need = (2.0 * d as f64 / (beta * (1.0 + p))).ln() / self.u;
        (need.ceil() - 1.0).max(0.0)
    }

    /// Both parts exact geometric sums: E[e^{s·e⁺}] − 1 = P(e ≤ 0) + Σ_{j≥1} P(j)e^{sj} − 1 =
    /// ((1 − p)/(1 + p))·(q/(1 − q) − p/(1 − p)) with q = pe^s (∞ from s = u on).
    fn w_mgf_minus_one(&self, theta: f64, ell: f64) -> f64 {
        let (u, p, one_minus_p) = (self.u, self.p(), self.one_minus_p);
        let part = |s: f64| -> f64 {
            if s >= u {
                return f64::INFINITY;
            }
            let one_minus_q = -(s - u).exp_m1();
            let q = 1.0 - one_minus_q;
            (one_minus_p / (1.0 + p)) * (q / one_minus_q - p / one_minus_p)
        };
        part(theta) + part(theta * ell)
    }

    fn w_ln_theta_max(&self, ell: f64) -> f64 {
        (self.u * (1.0 - 1e-9) / ell.max(1.0)).ln()
    }

    fn sum_margin(&self, d: usize, beta: f64) -> f64 {
        let (u, p) = (self.u, self.p());
        let l = (1.0 / beta).ln();
        let df = d as f64;
        // S ≤ −s < 0 needs a non-zero noise, P ≤ 2dp/(1 + p): a scale so small that this is
        // already below β needs no margin.
        if 2.0 * df * p / (1.0 + p) <= beta {
            return f64::MIN_POSITIVE;
        }
        // Chernoff with ln M(t) ≤ h(t₀)t²/2 on [0, t₀]: h = (ln M)″,
        // h(t) = Σ_k k p^k (e^{kt} + e^{−kt}), is even and convex, so increasing on
        // t ≥ 0, and ln M(0) = (ln M)′(0) = 0. Then P(S ≤ −s) ≤ β at
        // s = √(2d·h(t₀)·ln(1/β)) when its optimal t, s/(d·h(t₀)), is ≤ t₀, else at
        // s = (ln(1/β) + d·h(t₀)t₀²/2)/t₀. Any t₀ < u is valid; the best of six.
        let h = |t: f64| {
            // p·e^{±t}/(1 − p·e^{±t})², with 1 − p·e^{±t} = −expm1(±t − u).
            let up = -(t - u).exp_m1();
            let down = -(-t - u).exp_m1();
            p * t.exp() / (up * up) + p * (-t).exp() / (down * down)
        };
        let guess = (2.0 * l / (df * self.v)).sqrt();
        [guess, 1.5 * guess, 2.5 * guess, 0.25 * u, 0.5 * u, 0.8 * u]
            .into_iter()
            .filter(|t0| *t0 > 0.0 && *t0 < u)
            .map(|t0| {
                let h0 = h(t0);
                let s = (2.0 * df * h0 * l).sqrt();
                if s / (df * h0) <= t0 {
                    s
                } else {
                    (l + 0.5 * df * h0 * t0 * t0) / t0
                }
            })
            .filter(|s| s.is_finite())
            .fold(f64::INFINITY, f64::min)
    }

    /// Chernoff at its optimal t, and P(S ≠ 0) for a tiny scale.
    fn sum_tail(&self, d: usize, s: f64) -> f64 {
        let (u, one_minus_p) = (self.u, self.one_minus_p);
        let df = d as f64;
        // S ≤ −s < 0 needs a non-zero noise: P ≤ d·P(e ≠ 0) = 2dp/(1 + p), which is what
        // bounds the tail of a tiny scale (p = e^{−u} may underflow to 0).
        let p = self.p();
        let any = (2.0 * df * p / (1.0 + p)).max(f64::MIN_POSITIVE);
        if p == 0.0 {
            return any;
        }
        // d/dt [d ln M(t)] = s at w = e^t: p(1+c)w² − c(1+p²)w − p(1−c) = 0, c = s/d.
        let c = s / df;
        let one_minus_p2 = one_minus_p * (1.0 + p);
        let disc = (c * one_minus_p2).powi(2) + 4.0 * p * p;
        let w = (c * (1.0 + p * p) + disc.sqrt()) / (2.0 * p * (1.0 + c));
        let t = w.ln().clamp(0.0, u * (1.0 - 1e-9));
        let chernoff = if t > 0.0 {
            (-t * s + df * laplace_ln_mgf(t, u, one_minus_p)).exp()
        } else {
            1.0
        };
        chernoff.min(any)
    }
}

/// The bounds of the `gaussian` baseline at σ.
pub fn gaussian_noise(sigma: f64) -> Noise<DiscreteGaussianTail> {
    Noise::new(DiscreteGaussianTail::new(sigma))
}

/// The bounds of the `laplace` baseline at b.
pub fn laplace_noise(scale: f64) -> Noise<DiscreteLaplaceTail> {
    Noise::new(DiscreteLaplaceTail::new(scale))
}

/// ln E[e^{tY}] for Y ~ L_ℤ(b), 0 ≤ t < u = 1/b: 2 ln(1 − p) − ln(1 − pe^t) − ln(1 − pe^{−t}),
/// each 1 − p·e^{±t} = −expm1(±t − u) without cancellation.
fn laplace_ln_mgf(t: f64, u: f64, one_minus_p: f64) -> f64 {
    2.0 * one_minus_p.ln() - (-(t - u).exp_m1()).ln() - (-(-t - u).exp_m1()).ln()
}

/// An upper bound on E[e⁻] = E|e|/2 for the discrete Gaussian of variance proxy σ²: below σ =
/// 4 by direct summation (as [`discrete_gaussian_moments`]), above it from
/// Σ_{j≥1} j·e^{−j²/(2σ²)} ≤ σ² + σe^{−1/2} (a unimodal sum, at most its integral plus its
/// largest term) and Z ≥ √(2π)σ (Poisson summation): E|e| ≤ 2(σ + e^{−1/2})/√(2π).
fn half_abs_mean(proxy: f64) -> f64 {
    let sigma = proxy.sqrt();
    if sigma >= 4.0 {
        return (sigma + (-0.5f64).exp()) / (2.0 * std::f64::consts::PI).sqrt();
    }
    let top = (15.0 * sigma).ceil() as i64 + 2;
    let (mut z, mut m1) = (1.0, 0.0);
    for y in 1..=top {
        let yf = y as f64;
        let w = 2.0 * (-(yf * yf) / (2.0 * proxy)).exp();
        z += w;
        m1 += w * yf;
    }
    // The tail beyond 15σ adds below 1e-48 of the sum: rounded up by a relative 1e-12.
    0.5 * m1 / z * (1.0 + 1e-12)
}

/// E[Y²] and E[Y⁴] of the discrete Gaussian N_ℤ(0, σ²), P(y) ∝ e^{−y²/(2σ²)}. Below σ = 4 by
/// direct summation over |y| ≤ 15σ + 2 (the rest changes E[Y⁴] by a relative < 1e-40); from
/// σ = 4 on the
/// continuous moments σ² and 3σ⁴, which Poisson summation shows are exact to a relative
/// O(σ⁴e^{−2π²σ²}) < 1e-100.
pub fn discrete_gaussian_moments(sigma: f64) -> (f64, f64) {
    let var = sigma * sigma;
    if sigma >= 4.0 {
        return (var, 3.0 * var * var);
    }
    let top = (15.0 * sigma).ceil() as i64 + 2;
    let (mut z, mut m2, mut m4) = (1.0, 0.0, 0.0);
    for y in 1..=top {
        let yf = y as f64;
        let w = 2.0 * (-(yf * yf) / (2.0 * var)).exp();
        z += w;
        m2 += w * yf * yf;
        m4 += w * yf * yf * yf * yf;
    }
    (m2 / z, m4 / z)
}

// ------------------------------------------------------------------ exponential mechanism

/// Seed 002's selection over the n + 1 Beta posteriors, released as the posterior mean of the
/// selected candidate (`release::exponential`). Holds what its bounds need, computed once
/// (Δ̃ takes O(n)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SelectionDraw {
    n: u64,
    alpha: f64,
    beta: f64,
    sensitivity_used: f64,
    error_bound: f64,
}

impl SelectionDraw {
    pub fn new(c: &BetaCandidates) -> SelectionDraw {
        let (alpha, beta) = c.prior();
        SelectionDraw {
            n: c.n(),
            alpha,
            beta,
            sensitivity_used: c.sensitivity_used(),
            error_bound: c.utility_error_bound(),
        }
    }

    /// The bounds from their ingredients. Every bound grows with Δ̃ and E, so smaller values
    /// than the candidates' (say Δ̃ ≥ the largest of the two edge steps H(r₀, r₁),
    /// H(r_{n−1}, r_n), which are among the steps Δ̂_g maximises over, and E ≥ 0) give lower
    /// bounds on every forecast, in O(1): what a planner needs to rule the mechanism out
    /// without computing Δ̃.
    pub fn from_parts(
        n: u64,
        alpha: f64,
        beta: f64,
        sensitivity_used: f64,
        error_bound: f64,
    ) -> SelectionDraw {
        SelectionDraw {
            n,
            alpha,
            beta,
            sensitivity_used,
            error_bound,
        }
    }

    /// The bounds at the selection's ε and confidence 1 − β (n is the candidates' own; no KL
    /// bound is proven for it).
    pub fn bounds(&self, epsilon: f64, beta: f64) -> Bounds {
        Bounds {
            l2: self.l2(epsilon, beta),
            cell_sd: self.cell_sd(epsilon),
            kl: f64::INFINITY,
        }
    }

    /// ‖y − p‖₂ = √2·|y₁ − p₁| ≤ √2(gap(t) + bias): with probability ≥ 1 − β the selected
    /// posterior is within Hellinger distance t of the exact one
    /// ([`BetaCandidates::hellinger_bound`]); two Betas that close have means at most gap(t)
    /// apart ([`Self::mean_gap`]); and the exact posterior mean is within max(α, β)/(α + β + n)
    /// of n₁/n. √2 (no claim) for n = 0.
    pub fn l2(&self, epsilon: f64, beta: f64) -> f64 {
        if self.n == 0 {
            return MAX_L2;
        }
        let t = hellinger_bound_with(
            self.n,
            self.sensitivity_used,
            self.error_bound,
            epsilon,
            beta,
        );
        let bias = self.alpha.max(self.beta) / self.total();
        inflate(MAX_L2 * (self.mean_gap(t) + bias)).min(MAX_L2)
    }

    /// √E[(y₁ − p₁)²] (= the same for cell 2) ≤ √E[gap(H)²] + max(α, β)/(α + β + n)
    /// (Minkowski, around the exact posterior mean c: |y₁ − c| ≤ gap(H), |c − p₁| ≤ the bias),
    /// H the Hellinger distance of the selected posterior to the exact one, whose tail is
    /// P(H > h) ≤ n·exp(−scale·(h − √E)/(1 + 10⁻¹²)) (the argument of
    /// [`BetaCandidates::hellinger_bound`] at every level): an upper Riemann–Stieltjes sum over
    /// a grid of h. ½ (no claim) for n = 0, where there is no p.
    pub fn cell_sd(&self, epsilon: f64) -> f64 {
        if self.n == 0 {
            return MAX_CELL_SD;
        }
        let scale = selection_scale(epsilon, self.sensitivity_used);
        if scale.is_nan() || scale <= 0.0 {
            return MAX_CELL_SD;
        }
        let root_e = self.error_bound.sqrt();
        let n = self.n as f64;
        let tail = |h: f64| {
            if h <= root_e {
                1.0
            } else {
                (n * (-scale * (h - root_e) / (1.0 + 1e-12)).exp() * (1.0 + 1e-12)).min(1.0)
            }
        };
        // Below h_end the tail is summed on a fine grid; above it the tail is < e^{−50}.
        let h_end = (root_e + (n.ln() + 50.0) / scale).min(1.0);
        const STEPS: usize = 256;
        let gap2 = |h: f64| self.mean_gap(h).powi(2);
        let mut sum = gap2(h_end / STEPS as f64);
        let mut prev = h_end / STEPS as f64;
        for i in 2..=STEPS {
            let h = h_end * i as f64 / STEPS as f64;
            sum += (gap2(h) - gap2(prev)) * tail(prev);
            prev = h;
        }
        if h_end < 1.0 {
            sum += (gap2(1.0) - gap2(h_end)) * tail(h_end);
        }
        let bias = self.alpha.max(self.beta) / self.total();
        inflate(sum.sqrt() + bias).min(MAX_CELL_SD)
    }

    fn total(&self) -> f64 {
        self.alpha + self.beta + self.n as f64
    }

    /// The largest distance between the means of two Beta laws with parameter totals
    /// α + β + n at Hellinger distance h (H² = 1 − BC): with f(θ) = θ − c, c the midpoint,
    /// |E_P f − E_Q f| ≤ √(2h²)·√(2(E_P f² + E_Q f²)) (Cauchy–Schwarz on (√P − √Q)(√P + √Q)),
    /// and E_P f² + E_Q f² = V + gap²/2 with V ≤ 2/(4(α + β + n + 1)) (each Beta's variance), so
    /// gap ≤ h√(2/((α + β + n + 1)(1 − 2h²))) for h² < ½; also gap ≤ TV ≤ h√(2 − h²) and ≤ 1.
    pub fn mean_gap(&self, h: f64) -> f64 {
        let h = h.clamp(0.0, 1.0);
        let tv = h * (2.0 - h * h).sqrt();
        let local = if 2.0 * h * h < 1.0 {
            h * (2.0 / ((self.total() + 1.0) * (1.0 - 2.0 * h * h))).sqrt()
        } else {
            f64::INFINITY
        };
        tv.min(local).min(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::exponential::hellinger_beta;
    use proptest::prelude::*;

    /// The KL bound against its definition computed independently (mpmath, 40 digits: the
    /// minimum over t of (Λ(t) + ln(1/β))/t with Λ from lnΓ): never below it (any t is a valid
    /// bound, the minimum the tightest), and within 1e-7 of it — at large b too, where lnΓ
    /// differences in f64 would have lost every digit.
    #[test]
    fn the_kl_bound_is_the_minimum_over_t() {
        let cases = [
            ((100.0, 6.0, 1.0, 0.05), 0.122_644_722_073_117_72),
            ((30.0, 12.0, 2.0, 0.05), 0.549_043_942_671_098),
            ((1e4, 40.0, 1.0, 0.01), 0.006_101_738_031_289_47),
            ((1e6, 200.0, 5.0, 0.05), 0.000_231_182_998_160_109_22),
            ((5.0, 3.0, 1.5, 0.2), 0.726_193_671_576_541_4),
            ((1e9, 1000.0, 1.0, 0.05), 1.078_375_211_330_962_8e-6),
        ];
        for ((b, a0, am, beta), want) in cases {
            let got = dirichlet_kl(b, a0, am, beta);
            assert!(
                got >= want && got <= want * (1.0 + 1e-7),
                "b {b}, α₀ {a0}, α_m {am}, β {beta}: {got} vs {want}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The claim the KL bound rests on (docs/PRIVACY.md, "KL"): with every αᵢ ≥ 1 the log
        /// of E[e^{t·KL(p ‖ y)}] over the p-dependent part, Σᵢ g(pᵢ) with
        /// g(p) = tp ln p + lnΓ((b − t)p + αᵢ) − lnΓ(bp + αᵢ), is largest at the one-hot p in the
        /// smallest prior's cell: each g is convex with g(0) = 0.
        #[test]
        fn the_kl_mgf_is_largest_at_a_one_hot_count(
            alphas in prop::collection::vec(1.0f64..12.0, 2..6),
            weights in prop::collection::vec(0.0f64..1.0, 6),
            zeros in prop::collection::vec(any::<bool>(), 6),
            b in 0.05f64..3000.0,
            frac in 0.01f64..0.99,
        ) {
            let d = alphas.len();
            let am = alphas.iter().copied().fold(f64::INFINITY, f64::min);
            let t = frac * (b + am);
            let w: Vec<f64> = (0..d).map(|i| if zeros[i] { 0.0 } else { weights[i] }).collect();
            let total: f64 = w.iter().sum();
            prop_assume!(total > 0.0);
            let g = |p: f64, a: f64| {
                if p == 0.0 {
                    0.0
                } else {
                    t * p * p.ln() + crate::privacy::special::ln_gamma((b - t) * p + a)
                        - crate::privacy::special::ln_gamma(b * p + a)
                }
            };
            let lhs: f64 = (0..d).map(|i| g(w[i] / total, alphas[i])).sum();
            let rhs = g(1.0, am);
            let scale = crate::privacy::special::ln_gamma(b + 12.0).abs() + 1.0;
            prop_assert!(lhs <= rhs + 1e-11 * scale, "{lhs} > {rhs}");
        }
    }

    /// The lemma behind it (docs/PRIVACY.md, "KL"): H(w) = d/dw[w²ψ′(w + α)] ≤ 1 for every
    /// w ≥ 0 when α ≥ 1 — and not at α = ½, where the proof (and the bound's first case) stops.
    #[test]
    fn the_convexity_lemma_holds_from_alpha_one() {
        let h = |w: f64, a: f64| {
            let (tri, tetra) = crate::privacy::special::trigamma_tetragamma(w + a);
            2.0 * w * tri + w * w * tetra
        };
        for a in [1.0, 1.2, 2.0, 5.0, 40.0] {
            let mut w = 1e-6;
            while w < 1e7 {
                assert!(h(w, a) <= 1.0 + 1e-12, "α {a}, w {w}: {}", h(w, a));
                w *= 1.07;
            }
        }
        assert!(h(0.63, 0.5) > 1.04);
    }

    /// More data, less divergence: the bound falls with b (so it holds for every total above a
    /// public lower bound), and rises with the prior's mass.
    #[test]
    fn the_kl_bound_falls_with_the_total_and_rises_with_the_prior() {
        for (a0, am) in [(6.0, 1.0), (40.0, 1.0), (12.0, 0.75), (300.0, 3.0)] {
            let mut last = f64::INFINITY;
            for b in [0.5, 3.0, 10.0, 100.0, 1e3, 1e5, 1e8, 1e12] {
                let eta = dirichlet_kl(b, a0, am, 0.05);
                assert!(eta < last, "α₀ {a0}, α_m {am}: {eta} at {b} after {last}");
                last = eta;
            }
            assert!(dirichlet_kl(100.0, 2.0 * a0, am, 0.05) > dirichlet_kl(100.0, a0, am, 0.05));
        }
        assert_eq!(dirichlet_kl(100.0, 4.0, 0.4, 0.05), f64::INFINITY);
        assert_eq!(dirichlet_kl(0.0, 4.0, 1.0, 0.05), f64::INFINITY);
    }

    /// The smoothed baselines' KL bound: finite for any k > 0 and total n > 0, falls with n,
    /// and the pseudo-count the planner picks is at least as good as neighbouring ones.
    #[test]
    fn the_smoothed_kl_bound_falls_with_n_and_the_chosen_k_is_a_minimum() {
        fn check<T: NoiseTail>(noise: Noise<T>) {
            let mut last = f64::INFINITY;
            for n in [10.0, 100.0, 1e4, 1e7] {
                let kl = noise.smoothed_kl(20, n, 0.05, 1.0);
                assert!(kl.is_finite() && kl < last, "{noise:?} {n}: {kl}");
                last = kl;
            }
            let k = noise.best_smoothing(20, 1e4, 0.05);
            let at = |k: f64| noise.smoothed_kl(20, 1e4, 0.05, k);
            assert!(
                at(k) <= at(0.7 * k) && at(k) <= at(1.4 * k),
                "{noise:?}: k = {k}"
            );
            assert_eq!(noise.smoothed_kl(20, 0.0, 0.05, 1.0), f64::INFINITY);
            assert_eq!(noise.bounds(20, 1e4, 0.05).kl, f64::INFINITY);
        }
        check(gaussian_noise(3.0));
        check(laplace_noise(2.5));
    }

    /// A law that cannot be built gives bounds no target accepts.
    #[test]
    fn a_noise_without_a_law_claims_nothing() {
        for b in [
            gaussian_noise(0.0).bounds(6, 100.0, 0.05),
            laplace_noise(f64::NAN).bounds(6, 100.0, 0.05),
        ] {
            assert!(b.l2.is_nan() && b.cell_sd.is_nan(), "{b:?}");
        }
        assert!(gaussian_noise(-1.0)
            .smoothed_kl(6, 100.0, 0.05, 1.0)
            .is_nan());
    }

    /// (x)_k, the rising factorial.
    fn rising(x: f64, k: u32) -> f64 {
        (0..k).map(|i| x + i as f64).product()
    }

    /// E[Q] and Var Q for Q = ‖y − m‖², y ~ Dir(a), from the Dirichlet's raw moments
    /// E[y_i^j y_l^k] = (a_i)_j (a_l)_k / (a₀)_{j+k}, expanded term by term.
    fn exact_q_moments(a: &[f64]) -> (f64, f64) {
        let a0: f64 = a.iter().sum();
        let m: Vec<f64> = a.iter().map(|x| x / a0).collect();
        let binom2 = [1.0, 2.0, 1.0];
        let binom4 = [1.0, 4.0, 6.0, 4.0, 1.0];
        let mut eq = 0.0;
        let mut eq2 = 0.0;
        for i in 0..a.len() {
            eq += rising(a[i], 2) / rising(a0, 2) - m[i] * m[i];
            for l in 0..a.len() {
                let mut t = 0.0;
                if i == l {
                    // E[(y − m)⁴] = Σ_k C(4,k) E[y^k] (−m)^{4−k}
                    for (k, c) in binom4.iter().enumerate() {
                        let raw = rising(a[i], k as u32) / rising(a0, k as u32);
                        t += c * raw * (-m[i]).powi(4 - k as i32);
                    }
                } else {
                    for (j, cj) in binom2.iter().enumerate() {
                        for (k, ck) in binom2.iter().enumerate() {
                            let raw = rising(a[i], j as u32) * rising(a[l], k as u32)
                                / rising(a0, (j + k) as u32);
                            t += cj
                                * ck
                                * raw
                                * (-m[i]).powi(2 - j as i32)
                                * (-m[l]).powi(2 - k as i32);
                        }
                    }
                }
                eq2 += t;
            }
        }
        (eq, eq2 - eq * eq)
    }

    /// The closed form of E[Q²] the Cantelli bound starts from (docs), against the term-by-term
    /// expansion of the Dirichlet's moments; and the quadratic bound on Var Q above the exact
    /// variance, at the two-cell split where it is nearly attained and at random shapes.
    #[test]
    fn dirichlet_fourth_moment_and_its_bound_match_exact_moments() {
        let cases: [&[f64]; 7] = [
            &[1.0, 2.0],
            &[0.3, 0.3],
            &[5.0, 5.0],
            &[1.5, 0.25, 5.0],
            &[7.0, 1.0, 1.0, 0.4],
            &[40.0, 40.0, 0.01, 0.01, 0.01],
            &[3.0, 3.0, 3.0, 3.0, 3.0, 3.0],
        ];
        for a in cases {
            let a0: f64 = a.iter().sum();
            let m: Vec<f64> = a.iter().map(|x| x / a0).collect();
            let s2: f64 = m.iter().map(|x| x * x).sum();
            let s3: f64 = m.iter().map(|x| x * x * x).sum();
            let (eq, var) = exact_q_moments(a);
            assert!((eq - (1.0 - s2) / (a0 + 1.0)).abs() < 1e-12, "{a:?}");
            let closed = (a0 * (1.0 + 3.0 * s2 * s2)
                + 6.0 * (1.0 - 2.0 * s2 - 3.0 * s2 * s2)
                + (24.0 - 4.0 * a0) * s3)
                / ((a0 + 1.0) * (a0 + 2.0) * (a0 + 3.0))
                - eq * eq;
            assert!(
                (closed - var).abs() < 1e-9 * var.max(1e-12),
                "{a:?}: {closed} vs {var}"
            );
            let (b, c) = dirichlet_variance_quadratic(a0);
            let w = 1.0 - s2;
            assert!(var <= (b * w - c * w * w) * (1.0 + 1e-9) + 1e-15, "{a:?}");
        }
        // Two equal cells at a₀ = 100: the bound is within 1 % of the exact variance.
        let (_, var) = exact_q_moments(&[50.0, 50.0]);
        let (b, c) = dirichlet_variance_quadratic(100.0);
        let bound = b * 0.5 - c * 0.25;
        // (There s₃ = s₂², so the bound is the exact variance, up to rounding.)
        assert!(
            bound >= var * (1.0 - 1e-12) && bound < 1.01 * var,
            "{bound} vs {var}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Var Q ≤ b·w − c·w² for random shapes (tiny, moderate and large totals).
        #[test]
        fn dirichlet_variance_bound_holds_for_random_shapes(
            raw in prop::collection::vec(1e-3f64..1.0, 2..7),
            scale in prop::sample::select(vec![0.05, 1.0, 5.9, 6.0, 30.0, 1e3]),
        ) {
            let a: Vec<f64> = raw.iter().map(|x| x * scale).collect();
            let a0: f64 = a.iter().sum();
            let s2: f64 = a.iter().map(|x| (x / a0) * (x / a0)).sum();
            let (_, var) = exact_q_moments(&a);
            let (b, c) = dirichlet_variance_quadratic(a0);
            let w = 1.0 - s2;
            prop_assert!(var <= (b * w - c * w * w) * (1.0 + 1e-7) + 1e-14, "{:?} {} {}", a, var, b * w - c * w * w);
        }

        /// Every spread bound falls as the concentration a₀ grows, which is what makes a bound at
        /// a public lower bound of n hold for every larger total.
        #[test]
        fn dirichlet_spread_falls_with_the_concentration(
            a0 in 1e-3f64..1e7,
            factor in 1.0f64..100.0,
            d in 2usize..5000,
            beta in 0.001f64..0.5,
        ) {
            let (h1, c1, m1) = dirichlet_spread_parts(a0, d, beta);
            let (h2, c2, m2) = dirichlet_spread_parts(a0 * factor, d, beta);
            prop_assert!(h2 <= h1 * (1.0 + 1e-12));
            prop_assert!(c2 <= c1 * (1.0 + 1e-12), "{} {}", c1, c2);
            prop_assert!(m2 <= m1 * (1.0 + 1e-12));
        }

        /// The bias bound is the maximum over distributions p of ‖E[y] − p‖₂, attained at the
        /// vertex of the smallest prior.
        #[test]
        fn dirichlet_bias_is_the_worst_case_over_p(
            alpha in prop::collection::vec(0.01f64..10.0, 2..8),
            weights in prop::collection::vec(0.0f64..1.0, 8),
            r in 0.01f64..10.0,
            n in 1.0f64..1e4,
        ) {
            let d = alpha.len();
            let draw = DirichletDraw::new(r, &Prior::PerCell(alpha.clone()), d).unwrap();
            let a0: f64 = alpha.iter().sum();
            let gap = |x: &[f64]| {
                let total = r * n + a0;
                (0..d)
                    .map(|i| ((r * x[i] + alpha[i]) / total - x[i] / n).powi(2))
                    .sum::<f64>()
                    .sqrt()
            };
            let w: f64 = weights[..d].iter().sum::<f64>().max(1e-9);
            let x: Vec<f64> = weights[..d].iter().map(|v| v / w * n).collect();
            prop_assert!(gap(&x) <= draw.bias(n) * (1.0 + 1e-9));
            let k = (0..d).fold(0, |b, i| if alpha[i] < alpha[b] { i } else { b });
            let mut vertex = vec![0.0; d];
            vertex[k] = n;
            prop_assert!((gap(&vertex) - draw.bias(n)).abs() <= 1e-9 * draw.bias(n));
        }
    }

    /// The Cantelli closed form is the maximum over w of E[Q] + k·√(b·w − c·w²).
    #[test]
    fn cantelli_stationary_point_is_the_maximum() {
        for a0 in [0.1, 2.0, 5.99, 6.0, 10.0, 100.0, 1e6] {
            for beta in [0.01, 0.05, 0.3] {
                for d in [2usize, 3, 10, 1000] {
                    let w_max = 1.0 - 1.0 / d as f64;
                    let k2 = (1.0 - beta) / beta;
                    let (b, c) = dirichlet_variance_quadratic(a0);
                    let grid = (0..=20_000)
                        .map(|i| w_max * i as f64 / 20_000.0)
                        .map(|w| w / (a0 + 1.0) + (k2 * (b * w - c * w * w).max(0.0)).sqrt())
                        .fold(0.0, f64::max);
                    let closed = dirichlet_cantelli(a0, w_max, k2);
                    assert!(closed >= grid * (1.0 - 1e-12), "{a0} {beta} {d}");
                    assert!(
                        closed <= grid * (1.0 + 1e-6),
                        "{a0} {beta} {d}: {closed} {grid}"
                    );
                }
            }
        }
    }

    /// The sub-Gaussian part is 001 Theorem 5's spread or less (HKZ without the 2d + 3t
    /// simplification, on the (d − 1)-dimensional subspace y − m lives in); and which part wins.
    #[test]
    fn spread_parts_against_001_theorem_5() {
        for d in [2usize, 3, 40, 1000] {
            for beta in [0.01, 0.05, 0.2] {
                let a0 = 1234.5;
                let t = (1.0f64 / beta).ln();
                let (hkz, cantelli, _) = dirichlet_spread_parts(a0, d, beta);
                let theorem_5 = (3.0 * t + 2.0 * d as f64) / (4.0 * (a0 + 1.0));
                assert!(hkz <= theorem_5);
                // Cantelli does not grow with d (its worst mean is a two- or three-cell split).
                if d >= 40 && beta == 0.05 {
                    assert!(cantelli < hkz / 4.0, "{d}");
                }
            }
        }
        // 95 %, a₀ + 1 = 101: the figures docs/PRIVACY.md quotes (times a₀ + 1).
        let (h, c, m) = dirichlet_spread_parts(100.0, 2, 0.05);
        assert!((h * 101.0 - 2.6133).abs() < 1e-4 && (c * 101.0 - 3.5370).abs() < 1e-4);
        assert!((m * 101.0 - 10.0).abs() < 1e-9);
        let (_, c, _) = dirichlet_spread_parts(100.0, 40, 0.05);
        assert!((c * 101.0 - 3.5838).abs() < 1e-4);
    }

    /// The cell bound against the exact worst case over integer count vectors (d = 2 and 3,
    /// every x of the total): E[(yᵢ − pᵢ)²] = Var yᵢ + (mᵢ − pᵢ)² from 000 §2.2's moments.
    #[test]
    fn dirichlet_cell_bound_is_the_worst_case_over_x() {
        for (r, alpha, n) in [
            (1.0, vec![1.0, 1.0], 10.0),
            (0.2, vec![3.0, 0.5], 40.0),
            (5.0, vec![0.1, 2.0, 7.0], 12.0),
            (0.01, vec![4.0, 4.0, 4.0], 30.0),
        ] {
            let d = alpha.len();
            let a0: f64 = alpha.iter().sum();
            let draw = DirichletDraw::new(r, &Prior::PerCell(alpha.clone()), d).unwrap();
            let mut worst: f64 = 0.0;
            let m = n as usize;
            for x0 in 0..=m {
                for x1 in 0..=(m - x0) {
                    let mut x = vec![x0 as f64, x1 as f64];
                    if d == 3 {
                        x.push((m - x0 - x1) as f64);
                    } else if x0 + x1 != m {
                        continue;
                    }
                    for i in 0..d {
                        let var = crate::privacy::utility::cell_variance(r, x[i], alpha[i], n, a0);
                        let mean = crate::privacy::utility::cell_mean(r, x[i], alpha[i], n, a0);
                        worst = worst.max(var + (mean - x[i] / n).powi(2));
                    }
                }
            }
            let bound = draw.cell_sd(n);
            assert!(
                bound >= worst.sqrt(),
                "{alpha:?}: {bound} < {}",
                worst.sqrt()
            );
            // The supremum over real proportions is at most a grid step away.
            assert!(
                bound <= worst.sqrt() * 1.1,
                "{alpha:?}: {bound} vs {}",
                worst.sqrt()
            );
        }
        let draw = DirichletDraw::uniform(2.0, 1.5, 2).unwrap();
        // n = 0: no p, no claim.
        assert_eq!(draw.l2(0.0, 0.05), MAX_L2);
        assert_eq!(draw.cell_sd(0.0), MAX_CELL_SD);
        // Large n: the bias vanishes and the bound tends to the largest sd, 1/(2√(a₀ + 1)).
        let big = draw.cell_sd(1e9);
        assert!((big - 0.5 / (2e9 + 4.0f64).sqrt()).abs() < 1e-6 * big);
    }

    /// The pmf of N_ℤ(0, σ²) (normalised once; |y| ≤ 2000 holds all the mass for σ ≤ 30).
    fn discrete_gaussian(sigma: f64) -> impl Fn(i64) -> f64 {
        let z: f64 = (-2000..=2000)
            .map(|k: i64| (-((k * k) as f64) / (2.0 * sigma * sigma)).exp())
            .sum();
        move |y: i64| (-((y * y) as f64) / (2.0 * sigma * sigma)).exp() / z
    }

    fn discrete_gaussian_pmf(sigma: f64, y: i64) -> f64 {
        discrete_gaussian(sigma)(y)
    }

    fn discrete_laplace_pmf(scale: f64, y: i64) -> f64 {
        let p = (-1.0 / scale).exp();
        (1.0 - p) / (1.0 + p) * p.powi(y.abs() as i32)
    }

    /// Moments against direct summation over the integers; the continuous moments from σ = 4
    /// on; and the Laplace closed forms.
    #[test]
    fn noise_moments_match_direct_summation() {
        for sigma in [0.2, 0.7, 1.0, 2.5, 3.99, 4.0, 7.5, 30.0] {
            let (v, m4) = discrete_gaussian_moments(sigma);
            let (mut dv, mut dm4) = (0.0, 0.0);
            let pmf = discrete_gaussian(sigma);
            for y in -2000i64..=2000 {
                let p = pmf(y);
                dv += p * (y * y) as f64;
                dm4 += p * (y * y * y * y) as f64;
            }
            assert!((v - dv).abs() < 1e-12 * dv, "{sigma}: {v} {dv}");
            assert!((m4 - dm4).abs() < 1e-12 * dm4, "{sigma}: {m4} {dm4}");
        }
        for scale in [0.1, 0.5, 1.0, 3.7, 20.0] {
            let (v, m4) = laplace_noise(scale).moments().unwrap();
            let (mut dv, mut dm4) = (0.0, 0.0);
            for y in -20_000i64..=20_000 {
                let p = discrete_laplace_pmf(scale, y);
                dv += p * (y * y) as f64;
                dm4 += p * (y as f64).powi(4);
            }
            assert!((v - dv).abs() < 1e-10 * dv, "{scale}: {v} {dv}");
            assert!((m4 - dm4).abs() < 1e-10 * dm4, "{scale}: {m4} {dm4}");
        }
    }

    /// The facts the baselines' tails rest on, checked by summation: the discrete Gaussian is
    /// σ²-subgaussian (CKS20), and the discrete Laplace's moment generating function is the
    /// closed form used.
    #[test]
    fn noise_moment_generating_functions() {
        for sigma in [0.2, 0.5, 1.0, 2.0, 5.0] {
            for t in [0.05, 0.3, 1.0, 2.0, 4.0] {
                // In logs (e^{ty} alone overflows where the mass underflows); the summand peaks
                // at y = tσ² ≤ 100.
                let ln_z = discrete_gaussian_pmf(sigma, 0).ln();
                let mgf: f64 = (-2000i64..=2000)
                    .map(|y| {
                        let y = y as f64;
                        (t * y - y * y / (2.0 * sigma * sigma) + ln_z).exp()
                    })
                    .sum();
                assert!(
                    mgf <= (t * t * sigma * sigma / 2.0).exp() * (1.0 + 1e-12),
                    "{sigma} {t}"
                );
            }
        }
        for scale in [0.3, 1.0, 4.0] {
            let u: f64 = 1.0 / scale;
            let omp = -(-u).exp_m1();
            for t in [0.01, 0.3 * u, 0.9 * u] {
                // In logs: p^|y|·e^{ty} = e^{ty − u|y|}, which decays on both sides.
                let p = (-u).exp();
                let mgf: f64 = (-100_000i64..=100_000)
                    .map(|y| (1.0 - p) / (1.0 + p) * (t * y as f64 - u * y.abs() as f64).exp())
                    .sum();
                let closed = laplace_ln_mgf(t, u, omp).exp();
                assert!(
                    (mgf - closed).abs() < 1e-9 * closed,
                    "{scale} {t}: {mgf} {closed}"
                );
            }
        }
    }

    /// The exact law of S = Σ of d noises by convolution (support truncated where the mass is
    /// below 1e-300).
    fn sum_pmf(pmf: impl Fn(i64) -> f64, d: usize, half: i64) -> (i64, Vec<f64>) {
        let one: Vec<f64> = (-half..=half).map(&pmf).collect();
        let mut acc = vec![1.0];
        for _ in 0..d {
            let mut next = vec![0.0; acc.len() + one.len() - 1];
            for (i, a) in acc.iter().enumerate() {
                for (j, b) in one.iter().enumerate() {
                    next[i + j] += a * b;
                }
            }
            acc = next;
        }
        (-(half * d as i64), acc)
    }

    /// The Chernoff bounds on P(S ≤ −s) lie above the exact tail of the sum, and the margin
    /// for β has exact tail ≤ β.
    #[test]
    fn sum_tails_bound_the_exact_law() {
        fn check<T: NoiseTail>(law: T, pmf: impl Fn(i64) -> f64, width: i64) {
            for d in [2usize, 3, 6] {
                let (start, pmf) = sum_pmf(&pmf, d, width);
                let tail = |s: f64| -> f64 {
                    pmf.iter()
                        .enumerate()
                        .filter(|(i, _)| ((start + *i as i64) as f64) <= -s)
                        .map(|(_, p)| p)
                        .sum()
                };
                for s in [0.5, 1.0, 2.0, 5.0, 10.0, 20.0] {
                    let bound = sum_tail(&law, d, s);
                    assert!(
                        tail(s) <= bound * (1.0 + 1e-9) + 1e-300,
                        "{law:?} d={d} s={s}"
                    );
                }
                for beta in [0.3, 0.05, 1e-3] {
                    let s = law.sum_margin(d, beta);
                    assert!(tail(s) <= beta, "{law:?} d={d} beta={beta}: {}", tail(s));
                }
            }
        }
        for sigma in [0.8, 3.0] {
            check(
                DiscreteGaussianTail::new(sigma).unwrap(),
                discrete_gaussian(sigma),
                60,
            );
        }
        for scale in [0.7, 2.5] {
            let law = DiscreteLaplaceTail::new(scale).unwrap();
            check(law, |y| discrete_laplace_pmf(scale, y), 400);
        }
    }

    /// The moments of ‖Me‖² at a vertex, by exact enumeration over two noisy cells (d = 3,
    /// p = e₃), against E = 2mv and Var = 2v²(m² + 3m) + 4m(μ₄ − 3v²); and the quantile
    /// bound's exact tail.
    #[test]
    fn quadratic_form_moments_by_enumeration() {
        fn check<T: NoiseTail>(law: T, pmf: impl Fn(i64) -> f64) {
            let (mut e, mut e2) = (0.0, 0.0);
            let mut values = Vec::new();
            for a in -60i64..=60 {
                for b in -60i64..=60 {
                    let w = pmf(a) * pmf(b);
                    let q = (a * a + b * b + (a + b) * (a + b)) as f64;
                    e += w * q;
                    e2 += w * q * q;
                    values.push((q, w));
                }
            }
            let m = 2.0;
            let (v, mu4) = law.moments();
            assert!((e - 2.0 * m * v).abs() < 1e-9 * e, "{law:?}");
            let var = 2.0 * v * v * (m * m + 3.0 * m) + 4.0 * m * (mu4 - 3.0 * v * v);
            assert!(((e2 - e * e) - var).abs() < 1e-8 * var, "{law:?}");
            for beta in [0.2, 0.05, 0.01] {
                let q = quadratic_quantile(&law, 3, beta);
                let over: f64 = values.iter().filter(|(x, _)| *x > q).map(|(_, w)| w).sum();
                assert!(over <= beta, "{law:?} {beta}: {over}");
            }
        }
        for sigma in [0.6, 2.0] {
            check(
                DiscreteGaussianTail::new(sigma).unwrap(),
                discrete_gaussian(sigma),
            );
        }
        let scale = 0.8;
        check(DiscreteLaplaceTail::new(scale).unwrap(), |y| {
            discrete_laplace_pmf(scale, y)
        });
    }

    /// Two Betas at Hellinger distance H have means at most mean_gap(H) apart: every pair of
    /// candidates of a few priors and n.
    #[test]
    fn mean_gap_bounds_the_means_of_candidates() {
        for (n, a, b) in [(10u64, 1.0, 1.0), (100, 0.5, 2.0), (1000, 6.0, 12.0)] {
            let c = BetaCandidates::new(n, a, b).unwrap();
            let law = SelectionDraw::new(&c);
            let total = a + b + n as f64;
            for i in (0..=n).step_by((n / 10).max(1) as usize) {
                for j in 0..=n {
                    let h = hellinger_beta(
                        a + i as f64,
                        b + (n - i) as f64,
                        a + j as f64,
                        b + (n - j) as f64,
                    );
                    let gap = (i as f64 - j as f64).abs() / total;
                    assert!(gap <= law.mean_gap(h) * (1.0 + 1e-9) + 1e-15, "{n} {i} {j}");
                }
            }
        }
    }

    /// The exponential mechanism's bounds against the exact selection law (n ≤ 100, every n₁):
    /// the ℓ2 error's probability of exceeding the bound is ≤ β, and √E[(y₁ − p₁)²] ≤ cell_sd.
    #[test]
    fn exponential_bounds_hold_for_every_n1() {
        use crate::privacy::exponential::selection_probabilities;
        for (n, a, b) in [(10u64, 1.0, 1.0), (40, 0.5, 2.0), (100, 1.0, 1.0)] {
            let c = BetaCandidates::new(n, a, b).unwrap();
            let law = SelectionDraw::new(&c);
            let total = a + b + n as f64;
            for eps in [5.0, 15.0, 30.0] {
                if eps > c.max_epsilon() {
                    continue;
                }
                let bounds = law.bounds(eps, 0.05);
                for n1 in 0..=n {
                    let p = selection_probabilities(&c.scores(n1), eps, c.sensitivity_used());
                    let y1 = |j: usize| (a + j as f64) / total;
                    let truth = n1 as f64 / n as f64;
                    let over: f64 = p
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| MAX_L2 * (y1(*j) - truth).abs() > bounds.l2)
                        .map(|(_, q)| q)
                        .sum();
                    assert!(over <= 0.05, "n={n} eps={eps} n1={n1}: {over}");
                    let mse: f64 = p
                        .iter()
                        .enumerate()
                        .map(|(j, q)| q * (y1(j) - truth).powi(2))
                        .sum();
                    assert!(mse.sqrt() <= bounds.cell_sd, "n={n} eps={eps} n1={n1}");
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// The baselines' bounds fall with n and with ε (less noise), and never exceed the
        /// trivial ones.
        #[test]
        fn baseline_bounds_are_monotone(
            scale in 0.05f64..1e4,
            factor in 1.0f64..50.0,
            n in 1.0f64..1e7,
            d in 2usize..3000,
            beta in 0.001f64..0.5,
            laplace in any::<bool>(),
        ) {
            let bounds = |s: f64, n: f64| if laplace { laplace_noise(s).bounds(d, n, beta) } else { gaussian_noise(s).bounds(d, n, beta) };
            let b = bounds(scale, n);
            prop_assert!(b.l2 <= MAX_L2 && b.cell_sd <= MAX_CELL_SD);
            let more_n = bounds(scale, n * factor);
            prop_assert!(more_n.l2 <= b.l2 * (1.0 + 1e-12) && more_n.cell_sd <= b.cell_sd * (1.0 + 1e-12));
            let less_noise = bounds(scale / factor, n);
            prop_assert!(less_noise.l2 <= b.l2 * (1.0 + 1e-12), "{:?} {:?}", less_noise, b);
            prop_assert!(less_noise.cell_sd <= b.cell_sd * (1.0 + 1e-12), "{:?} {:?}", less_noise, b);
        }

        /// The exponential mechanism's bounds fall with ε.
        #[test]
        fn exponential_bounds_fall_with_epsilon(
            n in 1u64..2000,
            e1 in 0.1f64..30.0,
            factor in 1.0f64..5.0,
        ) {
            let c = BetaCandidates::new(n, 1.0, 1.0).unwrap();
            let law = SelectionDraw::new(&c);
            let e2 = (e1 * factor).min(c.max_epsilon());
            let (b1, b2) = (law.bounds(e1.min(e2), 0.05), law.bounds(e2, 0.05));
            prop_assert!(b2.l2 <= b1.l2 * (1.0 + 1e-12) && b2.cell_sd <= b1.cell_sd * (1.0 + 1e-12));
        }
    }
}
