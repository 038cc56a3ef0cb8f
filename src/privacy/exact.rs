//! The exact worst-case Rényi divergence ε*(λ) of Dir(r·x + α) for the two histogram relations
//! (docs/PRIVACY.md, "Exact pricing"; research note seeds-002-004 §1, the program of seed 004
//! Observation 7 + Theorem 15 carried out in closed form).
//!
//! A record moving from cell k to cell l changes only u_k and u_l by r, and every other cell and
//! the total cancel from the exact divergence, leaving two one-cell terms (s = (λ−1)r):
//!
//! ```text
//! G⁻(a) = [lnΓ(a+s) − λ lnΓ(a) + (λ−1) lnΓ(a−r)] / (λ−1)   (the cell that loses r)
//! G⁺(c) = [lnΓ(c−s) − λ lnΓ(c) + (λ−1) lnΓ(c+r)] / (λ−1)   (the cell that gains r)
//! ```
//!
//! Both are λr² times a second divided difference of lnΓ, i.e. integrals of ψ′ against
//! positive linear kernels (Peano), which is how they are evaluated here — without the
//! cancellation between lnΓ differences that loses log10(α ln α/(λr)) digits for large priors:
//!
//! ```text
//! G⁻(a) = r²∫₀¹ u ψ′(a − r + r u) du + r s ∫₀¹ (1 − v) ψ′(a + s v) dv
//! G⁺(c) = r s ∫₀¹ u ψ′(c − s + s u) du + r² ∫₀¹ (1 − v) ψ′(c + r v) dv
//! ```
//!
//! Both are non-increasing in their argument (ψ′ decreases), so the supremum over datasets sits
//! at the smallest arguments: ε*_RO = max over k ≠ l of G⁻(α_k + r) + G⁺(α_l) (only the two
//! smallest α matter, both orders), ε*_AR = max{G⁺(α_m), G⁻(α_m + r)}.
//!
//! Error bound ([`EXACT_RELATIVE_ERROR`]): every integral is split so that each piece [p, q]
//! has q ≤ 1.49p and integrated by 8-point Gauss–Legendre. ψ′ is analytic in Re z > 0 with
//! |ψ′(z)| ≤ ψ′(Re z), and x²ψ′(x) increases, so on the Bernstein ellipse ρ = 8 of a piece
//! (q ≤ 1.5p keeps it in Re z ≥ 0.234p) |kernel·ψ′| ≤ 4.06·41.1·max(kernel)·ψ′(q), while the
//! integral is ≥ ½(q−p)·max(kernel)·ψ′(q). Trefethen (ATAP Thm 19.3) then bounds the quadrature's
//! relative error by (64/15)·4.06·41.1/63·8⁻¹⁶ < 4.1e-14. With ψ′'s own 1e-13
//! (special.rs, checked against mpmath), ≤ 12 roundings per term and a compensated sum of
//! positive terms, the computed value is within 1.5e-13 of the exact one. `s` is rounded up and
//! the argument a = α_k + r down before use: ε* increases with λ and decreases with a, so the
//! value computed is the exact one of a slightly *more* expensive mechanism. Near a pole the
//! singular part 1/x² of ψ′ is integrated in closed form ([`singular_part`], within 30 ulps)
//! and the bound above applies to the quadrature of the remainder ψ′(x + 1), a function of the
//! same kind; both parts are positive, so the sum keeps the larger relative error.
use super::divergence::Compensated;
use super::special::{ln_gamma, trigamma, trigamma_8};
use super::types::{Order, Prior, Relation};

/// Proven relative error of [`exact_rdp`] (module docs): 1e-13 from ψ′, 4.1e-14 quadrature,
/// the rest rounding. Below `ledger::charge::CURVE_RELATIVE_ERROR`, which the charge inflates by.
pub const EXACT_RELATIVE_ERROR: f64 = 1.5e-13;

/// 8-point Gauss–Legendre on [0, 1]: (node, weight).
const GAUSS_LEGENDRE_8: [(f64, f64); 8] = {
    const X: [f64; 4] = [
        0.183_434_642_495_649_8,
        0.525_532_409_916_329,
        0.796_666_477_413_626_7,
        0.960_289_856_497_536_3,
    ];
    const W: [f64; 4] = [
        0.362_683_783_378_362,
        0.313_706_645_877_887_3,
        0.222_381_034_453_374_5,
        0.101_228_536_290_376_26,
    ];
    let mut out = [(0.0, 0.0); 8];
    let mut i = 0;
    while i < 4 {
        out[2 * i] = (0.5 - 0.5 * X[i], 0.5 * W[i]);
        out[2 * i + 1] = (0.5 + 0.5 * X[i], 0.5 * W[i]);
        i += 1;
    }
    out
};

/// Most pieces of one kernel integral: covers b/p up to 1.49⁵¹² ≈ 5e88. A finite price never
/// needs more than ~91 (it needs α > (λ−1)r with λ − 1 ≥ 2⁻⁵², so b/p < 2⁵²); beyond the cap
/// the price is +∞ (a refusal), where an unbounded loop would let one request spin
/// (schemathesis found r = 1.2e119 with α = 2.2e-308, whose first step underflows and never
/// moves).
const MAX_PIECES: usize = 512;

/// Largest ratio q/p of a quadrature piece (the bound is proven for 1.5; rounding of the split
/// points, ~1e-16 relative, is far below the gap). 1.49 rather than a rounder 1.4: an interval
/// of ratio 2 (common: [α, α + r] at α ≈ r) takes two pieces instead of three.
const PIECE_RATIO: f64 = 1.49;

/// x²ψ′(x), finite for every x > 0 (ψ′ itself overflows below ~1e-154): 1 + x²ψ′(x + 1) below 1.
pub(crate) fn scaled_trigamma(x: f64) -> f64 {
    if x < 1.0 {
        1.0 + x * (x * trigamma(x + 1.0))
    } else {
        x * (x * trigamma(x))
    }
}

/// p² · ∫₀¹ w(u) ψ′(p + b u) du for both kernels, w(u) = u and w(u) = 1 − u, from one set of
/// ψ′ values (p > 0, b ≥ 0): `(rising, falling)`. Scaled by p² so that tiny p (ψ′ ≈ 1/p²)
/// neither overflows nor loses range. Both kernels are wanted on [α, α + r] (G⁻ of a cell at α
/// and G⁺ of a cell at α), and ψ′ is the whole cost of the price.
///
/// Near a pole (p < 1 and b ≥ p, the cell that gains r at a small shape) ψ′'s singular part
/// is integrated in closed form, ψ′(x) = 1/x² + ψ′(x + 1) (A&S 6.4.6), and only the smooth
/// remainder by quadrature: the quadrature needs pieces in proportion to ln(b/p) on ψ′ itself
/// (α − s = 1e-5 took 34 pieces) but ln(1 + b/(1 + p)) on the remainder.
pub(crate) fn kernel_integrals(p: f64, b: f64) -> (f64, f64) {
    if p < 1.0 && b >= p && p >= SPLIT_RANGE.0 && b <= SPLIT_RANGE.1 {
        let (rising, falling) = singular_part(b / p);
        let (smooth_rising, smooth_falling) = quadrature(p, 1.0, b);
        return (rising + smooth_rising, falling + smooth_falling);
    }
    quadrature(p, 0.0, b)
}

/// Where [`kernel_integrals`] splits off the singular part: p² ≥ 1e-120 and p²ψ′(1 + p + b)
/// ≥ 1e-181 stay normal, so the remainder's plain p²-scaling loses no bits.
const SPLIT_RANGE: (f64, f64) = (1e-60, 1e60);

/// p² · ∫₀¹ w(u) (p + b u)⁻² du for w(u) = u and 1 − u, with q = b/p ∈ [1, 1e120]:
/// (ln(1 + q) − q/(1 + q))/q² and 1/(1 + q) minus that. Both are positive sums whose
/// subtraction loses at most a factor 3.6 (at q = 1; less as q grows), so with ≤ 6 roundings
/// each is within 30 ulps — far inside [`EXACT_RELATIVE_ERROR`].
fn singular_part(q: f64) -> (f64, f64) {
    let rising = (q.ln_1p() - q / (1.0 + q)) / (q * q);
    (rising, 1.0 / (1.0 + q) - rising)
}

/// p² · ∫₀¹ w(u) ψ′(p + shift + b u) du for both kernels by 8-point Gauss–Legendre on pieces
/// of argument ratio ≤ [`PIECE_RATIO`] (the module's error bound). `shift` is 0, or 1 for
/// the remainder of [`kernel_integrals`]' split (then p ∈ `SPLIT_RANGE`).
fn quadrature(p: f64, shift: f64, b: f64) -> (f64, f64) {
    let (mut rising, mut falling) = (Compensated::default(), Compensated::default());
    let base = p + shift;
    let pp = p * p;
    let mut u0 = 0.0;
    let mut pieces = 0;
    while u0 < 1.0 {
        let x0 = base + b * u0;
        let u1 = if b > 0.0 {
            (u0 + (PIECE_RATIO - 1.0) * x0 / b).min(1.0)
        } else {
            1.0
        };
        // b/p beyond 1.49^MAX_PIECES (or so far beyond that the first step underflows and the
        // loop would never move) is an interval no release needs priced: fail closed.
        pieces += 1;
        if u1.is_nan() || u1 <= u0 || pieces > MAX_PIECES {
            return (f64::INFINITY, f64::INFINITY);
        }
        let h = u1 - u0;
        let u = GAUSS_LEGENDRE_8.map(|(node, _)| u0 + h * node);
        let x = u.map(|u| base + b * u);
        // p²ψ′(x) at the eight nodes. From x = 1 up (the usual case) ψ′ is finite and is
        // computed in one batch; the unshifted form goes through (p/x)²·x²ψ′(x), which keeps
        // tiny p and x in range, and below 1 through x²ψ′(x) = 1 + x²ψ′(x + 1).
        let value: [f64; 8] = if shift > 0.0 {
            let psi = trigamma_8(x);
            std::array::from_fn(|i| pp * psi[i])
        } else {
            let scaled: [f64; 8] = if x0 >= 1.0 {
                let psi = trigamma_8(x);
                std::array::from_fn(|i| x[i] * (x[i] * psi[i]))
            } else {
                let psi = trigamma_8(x.map(|v| v + 1.0));
                std::array::from_fn(|i| 1.0 + x[i] * (x[i] * psi[i]))
            };
            std::array::from_fn(|i| {
                let ratio = p / x[i];
                ratio * ratio * scaled[i]
            })
        };
        for i in 0..8 {
            let f = GAUSS_LEGENDRE_8[i].1 * h * value[i];
            rising.add(f * u[i]);
            falling.add(f * (1.0 - u[i]));
        }
        u0 = u1;
    }
    (rising.sum(), falling.sum())
}

/// r² and r·s scaled terms: (r/p)²·J or (r/p)(s/p)·J, formed as ratios first so that tiny r and
/// tiny p (the log-space case of `explicit`) neither underflow nor overflow.
fn scaled(f1: f64, f2: f64, p: f64, j: f64) -> f64 {
    (f1 / p) * (f2 / p) * j
}

/// Evaluation counts, for the tests that keep the price's cost in check.
#[cfg(test)]
pub(crate) mod counters {
    use std::cell::Cell;
    thread_local! {
        /// One-cell quadratures ([`super::Terms::cell`]).
        pub static CELLS: Cell<usize> = const { Cell::new(0) };
        /// Second-case evaluations of [`super::realised_cell`].
        pub static FAR: Cell<usize> = const { Cell::new(0) };
    }
    pub fn reset() {
        CELLS.with(|c| c.set(0));
        FAR.with(|c| c.set(0));
    }
    pub fn get() -> (usize, usize) {
        (CELLS.with(|c| c.get()), FAR.with(|c| c.get()))
    }
}

/// The exact one-cell terms at order λ with s = (λ−1)r (already rounded up by the caller).
#[derive(Debug, Clone, Copy)]
struct Terms {
    r: f64,
    s: f64,
}

impl Terms {
    /// The terms for shift r at `order`, with s = (λ−1)r rounded up; None if s is not a finite
    /// positive number.
    fn new(order: Order, r: f64) -> Option<Terms> {
        // λ − 1 is exact below 2⁵³ (Sterbenz below 2, on λ's grid above); the product's
        // rounding error is recovered by an FMA and, if the product rounded down, s moves up
        // one ulp.
        let lm1 = order.get() - 1.0;
        let s = lm1 * r;
        let s = if lm1.mul_add(r, -s) > 0.0 && s.is_finite() {
            f64::from_bits(s.to_bits() + 1)
        } else {
            s
        };
        valid(s).then_some(Terms { r, s })
    }

    /// G⁻ and G⁺ of one cell whose prior is α (α > 0): the cell at shape α + r that loses r,
    /// and the cell at shape α that gains r. They share the integral over [α, α + r].
    /// G⁺ is +∞ at and past the pole α ≤ s.
    fn cell(&self, alpha: f64) -> (f64, f64) {
        #[cfg(test)]
        counters::CELLS.with(|c| c.set(c.get() + 1));
        let (r, s) = (self.r, self.s);
        let (near_rising, near_falling) = kernel_integrals(alpha, r);
        // G⁻'s far piece starts at the shape α + r, rounded down (ε* decreases in it).
        let a = add_down(alpha, r);
        let g_minus = scaled(r, r, alpha, near_rising) + scaled(r, s, a, kernel_integrals(a, s).1);
        let low = alpha - s;
        let g_plus = if low.is_nan() || low <= 0.0 {
            f64::INFINITY
        } else {
            scaled(r, s, low, kernel_integrals(low, s).0) + scaled(r, r, alpha, near_falling)
        };
        (g_minus, g_plus)
    }
}

/// x + y rounded down (both positive): the nearest f64 not above the exact sum.
fn add_down(x: f64, y: f64) -> f64 {
    let s = x + y;
    let bb = s - x;
    let err = (x - (s - bb)) + (y - bb);
    if err < 0.0 && s > 0.0 && s.is_finite() {
        f64::from_bits(s.to_bits() - 1)
    } else {
        s
    }
}

/// The two smallest entries of a prior (both the same for a uniform one).
fn two_smallest(alpha: &Prior) -> (f64, f64) {
    match alpha {
        Prior::Uniform(a) => (*a, *a),
        Prior::PerCell(v) => {
            let (mut m1, mut m2) = (f64::INFINITY, f64::INFINITY);
            for &a in v {
                if a < m1 {
                    m2 = m1;
                    m1 = a;
                } else if a < m2 {
                    m2 = a;
                }
            }
            (m1, m2)
        }
    }
}

/// ε*(λ) of Dir(r·x + α) on a histogram under `relation`, evaluated with the error bound
/// [`EXACT_RELATIVE_ERROR`]. +∞ for invalid input (r or an α not finite and > 0, or a custom
/// relation, which has no exact form here), at and beyond the pole λ ≥ 1 + α_m/r. Never below
/// `f64::MIN_POSITIVE` (the true cost is positive even when the value underflows).
pub fn exact_rdp(order: Order, r: f64, alpha: &Prior, relation: Relation) -> f64 {
    let (a1, a2) = worst_pair(alpha, false);
    exact_rdp_two(order, r, a1, a2, relation)
}

/// ε* of a *table* release (rows of disjoint groups, drawn independently, one prior for every
/// row): under replace-one a record may leave cell k of one row and join cell l of another with
/// k = l, so the worst pair is G⁻(α_m + r) + G⁺(α_m) even for a per-cell prior — the vector
/// price of the uniform prior α_m. Add/remove changes one cell of one row: the vector price.
/// docs/PRIVACY.md ("Tables") has the proof.
pub fn exact_table_rdp(order: Order, r: f64, alpha: &Prior, relation: Relation) -> f64 {
    let (a1, a2) = worst_pair(alpha, true);
    exact_rdp_two(order, r, a1, a2, relation)
}

/// The two prior entries ε* depends on: the two smallest for one vector (a record moves
/// between two *distinct* cells), the smallest twice for a table ([`exact_table_rdp`]).
pub fn worst_pair(alpha: &Prior, table: bool) -> (f64, f64) {
    let (m1, m2) = two_smallest(alpha);
    if table {
        (m1, m1)
    } else {
        (m1, m2)
    }
}

/// [`exact_rdp`] from the two smallest prior entries α₁ ≤ α₂ (α₂ = α₁ for a uniform prior).
pub fn exact_rdp_two(order: Order, r: f64, alpha_1: f64, alpha_2: f64, relation: Relation) -> f64 {
    if !(valid(r) && valid(alpha_1) && valid(alpha_2)) {
        return f64::INFINITY;
    }
    let Some(t) = Terms::new(order, r) else {
        return f64::INFINITY;
    };
    finish(worst_case(relation, alpha_1, alpha_2, |a| t.cell(a)))
}

fn valid(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

/// A price as the ledger takes it: NaN is +∞, and never below the smallest normal float.
fn finish(value: f64) -> f64 {
    if value.is_nan() {
        f64::INFINITY
    } else {
        value.max(f64::MIN_POSITIVE)
    }
}

/// The relative error of a realised shift once a shape is large: with the sampler's guard
/// (rΔ∞ ≥ 2²⁰·ulp(largest shape), `release::MIN_SHIFT_ULPS`) the larger shape of a changed
/// cell has ulp ≤ 2⁻¹⁹·rΔ∞, and a realised shift is within [`SHIFT_ERROR_ULPS`] of those ulps
/// of its real value: 4·2⁻¹⁹ = 2⁻¹⁷ (docs/PRIVACY.md, "The realised shift").
pub const REALISED_FAR: f64 = 7.629_394_531_25e-6;

/// How many ulps of the larger shape of a changed cell its realised shift can be off by: each
/// shape fl(fl(r·x) + α) is within ulp(shape) of r·x + α (two roundings of ½ulp), and within
/// 2·ulp(shape) when the count itself was formed as fl(x − L) (`lower_bound`).
pub const SHIFT_ERROR_ULPS: f64 = 4.0;

/// The next f64 above x (`f64::next_up`, stable only since Rust 1.86, above this crate's MSRV).
pub(crate) fn next_up(x: f64) -> f64 {
    if x.is_nan() || x == f64::INFINITY {
        x
    } else if x == 0.0 {
        f64::from_bits(1)
    } else if x > 0.0 {
        f64::from_bits(x.to_bits() + 1)
    } else {
        f64::from_bits(x.to_bits() - 1)
    }
}

/// The next f64 below x.
pub(crate) fn next_down(x: f64) -> f64 {
    -next_up(-x)
}

/// r(1 + 2⁻¹⁷), rounded up: every realised shift of a draw that passed the guard is at most
/// this (docs/PRIVACY.md, "The realised shift"). Custom sensitivities are priced with it.
pub fn far_shift(r: f64) -> f64 {
    next_up(r * (1.0 + REALISED_FAR))
}

/// The realised shift of a cell whose larger shape is at most h: r + 4·ulp(h) with ulp(h)
/// bounded by 2⁻⁵²h (a bound that grows smoothly with h, so that the price stays monotone in
/// α and r where ulp(h) itself would step at every binade), and never above [`far_shift`]
/// (the guard bounds every shift of a draw it admits). Rounded up.
fn near_shift(r: f64, h: f64) -> f64 {
    let ulp = next_up(h * f64::EPSILON * 0.5);
    next_up(r + SHIFT_ERROR_ULPS * ulp).min(far_shift(r))
}

/// The threshold on a changed cell's larger shape that splits [`realised_cell`]: 2α + 2r₀.
fn threshold(alpha: f64, r0: f64) -> f64 {
    2.0 * alpha + 2.0 * r0
}

/// (G⁻, G⁺) of a cell with prior α for the shifts the f64 code realises (docs/PRIVACY.md,
/// "The realised shift"). Both terms, as functions of the cell's smaller shape `lo` and its
/// realised shift δ, fall in `lo` and rise in δ. A cell whose larger shape is ≤ h = 2α + 2r₀
/// has δ ≤ r₁ = min(r + 4ulp(h), r₀) and lo ≥ α; one whose larger shape is above h has δ ≤ r₀
/// (the guard) and lo > h − r₀ > 2α. The terms are the larger of the two cases. The second is
/// checked first with x²ψ′(x) < 1 + x at each kernel's left end, and only evaluated when that
/// bound is not already below the first case: on the common path the price costs one exact
/// evaluation, as the unrealised one does.
fn realised_cell(order: Order, r: f64, alpha: f64) -> (f64, f64) {
    let r0 = far_shift(r);
    let h = threshold(alpha, r0);
    let r1 = near_shift(r, h);
    let near = match Terms::new(order, r1) {
        Some(t) => t.cell(alpha),
        None => return (f64::INFINITY, f64::INFINITY),
    };
    let Some(far) = Terms::new(order, r0) else {
        return (f64::INFINITY, f64::INFINITY);
    };
    let lo = 2.0 * alpha;
    // Each term is two kernels of weight ½δ²·(1 or λ − 1), each at most its weight times ψ′ at
    // its left end: G⁻(lo, δ) ≤ ½δ²[ψ′(lo) + (λ−1)ψ′(lo + δ)], G⁺(lo, δ) ≤ ½δ²[(λ−1)ψ′(lo − s) +
    // ψ′(lo)], with ψ′(x) < (1 + x)/x².
    let lm1 = order.get() - 1.0;
    let psi_bound = |x: f64| {
        if x > 0.0 {
            let q = r0 / x;
            0.5 * q * q * (1.0 + x)
        } else {
            f64::INFINITY
        }
    };
    let at_lo = psi_bound(lo);
    let minus_bound = (at_lo + lm1 * psi_bound(next_down(lo + r0))) * (1.0 + 1e-12);
    let plus_bound = (lm1 * psi_bound(next_down(lo - far.s)) + at_lo) * (1.0 + 1e-12);
    if minus_bound <= near.0 && plus_bound <= near.1 {
        return near;
    }
    #[cfg(test)]
    counters::FAR.with(|c| c.set(c.get() + 1));
    let (far_minus, far_plus) = far.cell(lo);
    (near.0.max(far_minus), near.1.max(far_plus))
}

/// The price of what the f64 code draws: ε* of the *realised* Gamma shapes fl(fl(r·x) + α) of
/// every pair of neighbours whose draw passes the guard (docs/PRIVACY.md, "The realised
/// shift") — the exact worst case with each changed cell's shift bounded by [`realised_cell`].
/// Above [`exact_rdp_two`] by ~8ulp(2α + 2r)/r relative (1e-15 for moderate priors, 2e-7 for
/// α = 1.5e10 at r = 123), and it reaches the pole at r₁ = r + 4ulp(2α + 2r₀) instead of r.
pub fn realised_rdp_two(
    order: Order,
    r: f64,
    alpha_1: f64,
    alpha_2: f64,
    relation: Relation,
) -> f64 {
    if !(valid(r) && valid(alpha_1) && valid(alpha_2)) {
        return f64::INFINITY;
    }
    finish(worst_case(relation, alpha_1, alpha_2, |a| {
        realised_cell(order, r, a)
    }))
}

/// The exact one-cell divergence terms of a cell whose smaller shape is `lo` and whose two
/// shapes differ by `delta`: (h(lo + δ → lo), h(lo → lo + δ)) = (G⁻, G⁺) with shift δ. The
/// brute-force oracle of what the f64 code draws (tests in `release`).
#[cfg(test)]
pub(crate) fn cell_divergences(order: Order, lo: f64, delta: f64) -> (f64, f64) {
    if delta == 0.0 {
        return (0.0, 0.0);
    }
    match Terms::new(order, delta) {
        Some(t) => t.cell(lo),
        None => (f64::INFINITY, f64::INFINITY),
    }
}

/// The shift [`realised_rdp_two`] prices a near cell with, for a prior whose larger entry is
/// `alpha_2`: what the calibrations' lnΓ estimate is evaluated at.
pub(crate) fn realised_near_shift(r: f64, alpha_2: f64) -> f64 {
    near_shift(r, threshold(alpha_2, far_shift(r)))
}

/// A cheap estimate of [`exact_rdp_two`] from four log-gammas per cell pair — **not a price**:
/// the lnΓ differences cancel (they lose about log10(α ln α/((λ−1)ε*)) digits), so its
/// error has no useful bound for large priors. The calibrations solve against it first and
/// then check the root with the exact price once, which accepts it when the estimate was
/// good to ~3e-10 (every moderate prior) and otherwise carries on from it
/// (`calibrate::Problem::refine`). NaN or +∞ outside the domain, like the price.
pub(crate) fn estimate_rdp_two(
    order: Order,
    r: f64,
    alpha_1: f64,
    alpha_2: f64,
    relation: Relation,
) -> f64 {
    let lambda = order.get();
    let lm1 = lambda - 1.0;
    let s = lm1 * r;
    // ln Γ at α − s, α, α + r and α + λr: G⁻(α + r) and G⁺(α) of one cell, times λ − 1.
    let cell = |a: f64| -> (f64, f64) {
        let low = a - s;
        if low.is_nan() || low <= 0.0 {
            return (f64::INFINITY, f64::INFINITY);
        }
        let (l_low, l_0, l_r, l_top) = (
            ln_gamma(low),
            ln_gamma(a),
            ln_gamma(a + r),
            ln_gamma(a + lambda * r),
        );
        let minus = (l_top - l_r) - lm1 * (l_r - l_0);
        let plus = (l_low - l_0) + lm1 * (l_r - l_0);
        (minus / lm1, plus / lm1)
    };
    worst_case(relation, alpha_1, alpha_2, cell)
}

/// ε* from the one-cell terms (G⁻, G⁺) of the two smallest prior entries (module docs):
/// the worse of the two moves between them under replace-one, the worse term under add/remove.
fn worst_case(
    relation: Relation,
    alpha_1: f64,
    alpha_2: f64,
    cell: impl Fn(f64) -> (f64, f64),
) -> f64 {
    match relation {
        Relation::ReplaceOne => {
            let (minus_1, plus_1) = cell(alpha_1);
            if alpha_1 == alpha_2 {
                minus_1 + plus_1
            } else {
                let (minus_2, plus_2) = cell(alpha_2);
                (minus_1 + plus_2).max(minus_2 + plus_1)
            }
        }
        Relation::AddRemoveOne => {
            let (minus, plus) = cell(alpha_1);
            plus.max(minus)
        }
        Relation::Custom => f64::INFINITY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::curve::dirichlet_rdp;
    use crate::privacy::divergence::renyi_dirichlet;
    use crate::privacy::Sensitivity;
    use proptest::prelude::*;

    fn order(v: f64) -> Order {
        Order::new(v).unwrap()
    }

    fn relation(name: &str) -> Relation {
        match name {
            "replace_one" => Relation::ReplaceOne,
            "add_remove_one" => Relation::AddRemoveOne,
            _ => panic!("{name}"),
        }
    }

    /// schemathesis's hang: an `explicit` release with r = 1.2e119 and a prior entry at the
    /// smallest normal float. The quadrature's first piece underflowed to zero width and the
    /// loop never moved; now the price is +∞ (refused) at once.
    #[test]
    fn extreme_ratios_fail_closed_instead_of_spinning() {
        let r = 1.244_891_369_848_710_7e119;
        for relation in [Relation::ReplaceOne, Relation::AddRemoveOne] {
            for (a1, a2) in [(2.225_073_858_507_201_4e-308, 9.9e-240), (1e-300, 1e-300)] {
                let v = exact_rdp_two(order(1.5), r, a1, a2, relation);
                assert_eq!(v, f64::INFINITY, "{relation:?} {a1} {a2}");
            }
        }
        // The widest intervals a finite price has (r/α just below 1/(λ − 1), λ − 1 = 2⁻⁴⁰)
        // are still priced: about 70 pieces, well inside the cap.
        let lambda = 1.0 + 2f64.powi(-40);
        let v = exact_rdp(
            order(lambda),
            1e9,
            &Prior::Uniform(1e-3),
            Relation::AddRemoveOne,
        );
        assert!(v.is_finite() && v > 0.0, "{v}");
    }

    #[test]
    fn gauss_legendre_integrates_degree_15_exactly() {
        for k in 0..16 {
            let got: f64 = GAUSS_LEGENDRE_8.iter().map(|(x, w)| w * x.powi(k)).sum();
            let want = 1.0 / (k as f64 + 1.0);
            assert!((got - want).abs() < 4e-16, "degree {k}: {got} vs {want}");
        }
    }

    #[test]
    fn matches_mpmath_fixtures() {
        let rows = include_str!("fixtures/exact.csv");
        let mut n = 0;
        for line in rows.lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            let lambda: f64 = f[1].parse().unwrap();
            let r: f64 = f[2].parse().unwrap();
            let alpha: Vec<f64> = f[3].split(' ').map(|v| v.parse().unwrap()).collect();
            let got = exact_rdp(
                order(lambda),
                r,
                &Prior::PerCell(alpha.clone()),
                relation(f[0]),
            );
            if f[4] == "+inf" {
                assert_eq!(got, f64::INFINITY, "{line}");
                continue;
            }
            let want: f64 = f[4].parse().unwrap();
            let e = (got - want) / want;
            // Never below the exact value by more than the bound. Above it by the bound plus
            // the one ulp s is rounded up by, which near the pole weighs ~ulp(s)/(α_m − s).
            let am = alpha.iter().copied().fold(f64::INFINITY, f64::min);
            let s = (lambda - 1.0) * r;
            let above = EXACT_RELATIVE_ERROR + 2.0 * f64::EPSILON * s / (am - s);
            assert!(
                e >= -EXACT_RELATIVE_ERROR && e <= above,
                "{line}: {got} ({e:e})"
            );
            n += 1;
        }
        assert!(n >= 36);
    }

    #[test]
    fn research_note_closed_forms() {
        // λ = 2, r = 1: ε*_RO = ln((α+1)/(α−1)), so α = coth(ε/2) prices ε; λ = 3: ½ ln(…).
        for a in [1.5f64, 2.163_953_413_738_653, 3.46, 10.0, 1e4] {
            let got = exact_rdp(order(2.0), 1.0, &Prior::Uniform(a), Relation::ReplaceOne);
            let want = ((a + 1.0) / (a - 1.0)).ln();
            assert!((got / want - 1.0).abs() < 1e-12, "α={a}: {got} vs {want}");
        }
        let coth_half = 1.0 / 0.5f64.tanh();
        let got = exact_rdp(
            order(2.0),
            1.0,
            &Prior::Uniform(coth_half),
            Relation::ReplaceOne,
        );
        assert!((got - 1.0).abs() < 1e-12, "{got}");
        let a = 5.0;
        let got = exact_rdp(order(3.0), 1.0, &Prior::Uniform(a), Relation::ReplaceOne);
        let want = 0.5 * ((a + 1.0) * (a + 2.0) / ((a - 1.0) * (a - 2.0))).ln();
        assert!((got / want - 1.0).abs() < 1e-12);
    }

    #[test]
    fn never_above_the_corollary_3_curve() {
        for (lambda, r, a) in [
            (2.0, 1.0, 3.46),
            (8.0, 0.1, 1.0),
            (1.001, 5.0, 0.1),
            (50.0, 0.01, 2.0),
        ] {
            for (rel, sens) in [
                (Relation::ReplaceOne, Sensitivity::REPLACE_ONE),
                (Relation::AddRemoveOne, Sensitivity::ADD_REMOVE_ONE),
            ] {
                let e = exact_rdp(order(lambda), r, &Prior::Uniform(a), rel);
                let c = dirichlet_rdp(order(lambda), r, a, &sens);
                assert!(e <= c, "λ={lambda} r={r} α={a}: {e} > {c}");
            }
        }
    }

    /// A record moving between two rows of a table: the product's exact divergence over every
    /// such neighbour (cell k of row A → cell l of row B, k = l included) stays within the
    /// table price, and reaches it.
    #[test]
    fn table_price_bounds_two_row_moves() {
        let alpha = [0.7, 1.3, 2.0];
        let (lambda, r) = (1.4, 0.5);
        let table = exact_table_rdp(
            order(lambda),
            r,
            &Prior::PerCell(alpha.to_vec()),
            Relation::ReplaceOne,
        );
        let vector = exact_rdp(
            order(lambda),
            r,
            &Prior::PerCell(alpha.to_vec()),
            Relation::ReplaceOne,
        );
        assert!(table >= vector);
        let mut worst: f64 = 0.0;
        for xa in all_counts(3, 3) {
            for xb in all_counts(3, 2) {
                for k in 0..3 {
                    if xa[k] < 1.0 {
                        continue;
                    }
                    for l in 0..3 {
                        let mut ya = xa.clone();
                        ya[k] -= 1.0;
                        let mut yb = xb.clone();
                        yb[l] += 1.0;
                        let d = renyi_dirichlet(
                            lambda,
                            &shapes(&xa, r, &alpha),
                            &shapes(&ya, r, &alpha),
                        ) + renyi_dirichlet(
                            lambda,
                            &shapes(&xb, r, &alpha),
                            &shapes(&yb, r, &alpha),
                        );
                        assert!(d <= table * (1.0 + 1e-12), "{d} > {table}");
                        worst = worst.max(d);
                    }
                }
            }
        }
        // The k = l move across rows exceeds the vector price (so the table price is needed),
        // and approaches the table price as the rows' other cells grow.
        assert!(worst > vector, "{worst} vs {vector}");
        assert!(worst > 0.9 * table);
    }

    #[test]
    fn pole_and_invalid_input_price_at_infinity() {
        let o = order(3.0);
        // pole at λ = 1 + α/r = 3
        assert_eq!(
            exact_rdp(o, 1.0, &Prior::Uniform(2.0), Relation::ReplaceOne),
            f64::INFINITY
        );
        assert!(exact_rdp(
            order(2.999),
            1.0,
            &Prior::Uniform(2.0),
            Relation::AddRemoveOne
        )
        .is_finite());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(
                exact_rdp(o, bad, &Prior::Uniform(2.0), Relation::ReplaceOne),
                f64::INFINITY
            );
            assert_eq!(
                exact_rdp(o, 1.0, &Prior::Uniform(bad), Relation::ReplaceOne),
                f64::INFINITY
            );
        }
        assert_eq!(
            exact_rdp(o, 1.0, &Prior::Uniform(10.0), Relation::Custom),
            f64::INFINITY
        );
    }

    /// The calibrations' lnΓ estimate agrees with the price where its cancellation is mild
    /// (moderate priors, ε* not tiny), which is what lets a calibration stop at one exact
    /// evaluation; and it is +∞ at and past the pole, like the price.
    #[test]
    fn estimate_agrees_with_the_price_for_moderate_priors() {
        let mut checked = 0;
        for relation in [Relation::ReplaceOne, Relation::AddRemoveOne] {
            for lambda in [1.1, 2.0, 3.5, 8.0, 32.0] {
                for a1 in [0.05, 0.4, 1.0, 3.46, 12.0, 60.0] {
                    for a2 in [a1, 1.7 * a1] {
                        for t in [0.01, 0.2, 0.6, 0.95, 0.999] {
                            let r = t * a1 / (lambda - 1.0);
                            let want = exact_rdp_two(order(lambda), r, a1, a2, relation);
                            if want < 1e-3 {
                                continue;
                            }
                            let got = estimate_rdp_two(order(lambda), r, a1, a2, relation);
                            let e = (got / want - 1.0).abs();
                            assert!(
                                e < 1e-10,
                                "{relation:?} λ {lambda} α {a1},{a2} r {r}: {got} vs {want}"
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 300, "{checked}");
        for relation in [Relation::ReplaceOne, Relation::AddRemoveOne] {
            let v = estimate_rdp_two(order(2.0), 1.0, 1.0, 1.0, relation);
            assert_eq!(v, f64::INFINITY, "{relation:?}");
        }
    }

    #[test]
    fn tiny_r_and_alpha_are_priced_not_refused() {
        // r²ψ′ would be 0·∞ in plain f64; the scaled kernel gives ½λr²/α²-sized values.
        let e = exact_rdp(
            order(2.0),
            1e-200,
            &Prior::Uniform(1e-180),
            Relation::ReplaceOne,
        );
        assert!(e.is_finite() && e > 0.0 && e < 1e-38, "{e}");
        let e = exact_rdp(
            order(1.5),
            1e-170,
            &Prior::Uniform(1e-168),
            Relation::AddRemoveOne,
        );
        // ≈ G⁺(α) ≈ ln-gamma second difference ≈ ½λr²/α² ⋯ = O(1e-4)
        assert!(e.is_finite() && e > 1e-6 && e < 1.0, "{e}");
    }

    /// Every count vector with cells in 0..=max over d cells.
    fn all_counts(d: usize, max: u32) -> Vec<Vec<f64>> {
        let mut out = vec![vec![]];
        for _ in 0..d {
            out = out
                .into_iter()
                .flat_map(|v| {
                    (0..=max).map(move |c| {
                        let mut w = v.clone();
                        w.push(c as f64);
                        w
                    })
                })
                .collect();
        }
        out
    }

    fn shapes(x: &[f64], r: f64, alpha: &[f64]) -> Vec<f64> {
        x.iter().zip(alpha).map(|(c, a)| r * c + a).collect()
    }

    /// max over every neighbouring pair (both directions) with counts 0..=6 of the exact
    /// divergence, and the largest G⁺(u_Σ)-type remainder seen for add/remove.
    fn brute_force(lambda: f64, r: f64, alpha: &[f64], rel: Relation) -> f64 {
        let d = alpha.len();
        let mut worst: f64 = 0.0;
        for x in all_counts(d, 6) {
            let u = shapes(&x, r, alpha);
            for l in 0..d {
                match rel {
                    Relation::ReplaceOne => {
                        for k in 0..d {
                            if k == l || x[k] < 1.0 {
                                continue;
                            }
                            let mut y = x.clone();
                            y[k] -= 1.0;
                            y[l] += 1.0;
                            let v = shapes(&y, r, alpha);
                            worst = worst.max(renyi_dirichlet(lambda, &u, &v));
                        }
                    }
                    _ => {
                        let mut y = x.clone();
                        y[l] += 1.0;
                        let v = shapes(&y, r, alpha);
                        worst = worst.max(renyi_dirichlet(lambda, &u, &v));
                        worst = worst.max(renyi_dirichlet(lambda, &v, &u));
                    }
                }
            }
        }
        worst
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Replace-one: ε* is attained (x_k = 1, x_l = 0), so it equals the brute-force maximum
        /// over all neighbouring pairs with counts 0..6, d = 2..4, both directions.
        #[test]
        fn replace_one_equals_brute_force_maximum(
            d in 2usize..5,
            seed in prop::collection::vec(0.2f64..6.0, 4),
            r in 0.05f64..2.0,
            t in 0.05f64..0.95,
        ) {
            let alpha: Vec<f64> = seed[..d].to_vec();
            let am = alpha.iter().copied().fold(f64::INFINITY, f64::min);
            // an order strictly inside (1, 1 + α_m/r)
            let lambda = 1.0 + t * am / r;
            let star = exact_rdp(order(lambda), r, &Prior::PerCell(alpha.clone()), Relation::ReplaceOne);
            let brute = brute_force(lambda, r, &alpha, Relation::ReplaceOne);
            prop_assert!(((star - brute) / brute).abs() <= 1e-10, "ε* {} vs brute {}", star, brute);
        }

        /// Add/remove: the supremum is approached as the other cells grow; the brute-force
        /// maximum is below ε*, and above ε* minus the total's term G⁺(u_Σ) ≤ ½λr²ψ′(u_Σ − s).
        #[test]
        fn add_remove_bounds_brute_force_maximum(
            d in 2usize..5,
            seed in prop::collection::vec(0.2f64..6.0, 4),
            r in 0.05f64..2.0,
            t in 0.05f64..0.95,
        ) {
            let alpha: Vec<f64> = seed[..d].to_vec();
            let am = alpha.iter().copied().fold(f64::INFINITY, f64::min);
            let lambda = 1.0 + t * am / r;
            let star = exact_rdp(order(lambda), r, &Prior::PerCell(alpha.clone()), Relation::AddRemoveOne);
            let brute = brute_force(lambda, r, &alpha, Relation::AddRemoveOne);
            prop_assert!(brute <= star * (1.0 + 1e-12), "brute {} above ε* {}", brute, star);
            // The largest total in the enumeration: all cells at 6 (+1 for the added record).
            let total: f64 = alpha.iter().sum::<f64>() + r * (6.0 * (d - 1) as f64);
            let rest = 0.5 * lambda * r * r * trigamma(total - (lambda - 1.0) * r);
            prop_assert!(brute >= star - rest, "brute {} too far below ε* {} (rest {})", brute, star, rest);
        }
    }
}
