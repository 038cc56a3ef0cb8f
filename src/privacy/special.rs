//! Special functions: trigamma ψ′, tetragamma ψ″, log-gamma.
//!
//! ψ′ prices every Dirichlet release (001 Corollary 3), so it is implemented here rather than
//! borrowed: the recurrence ψ⁽ⁿ⁾(x) = ψ⁽ⁿ⁾(x + 1) + (−1)ⁿ⁺¹ n!/xⁿ⁺¹ lifts the argument to
//! x ≥ [`SHIFT`], where the Bernoulli asymptotic series is accurate to a few ulps. Every term of
//! the recurrence and of ψ′'s series has the same sign where it matters, so no cancellation
//! occurs and the relative error stays at a few ulps on all of (0, ∞) (checked against mpmath
//! fixtures in the tests: ≤ 1e-13 is the contract, ~1e-15 is observed).

/// Arguments below this are lifted by the recurrence. At 8 the first omitted series term
/// (B₂₀/x²¹ for ψ′) is below 1e-16 relative.
const SHIFT: f64 = 8.0;

/// ψ′(x) = 1/x + 1/(2x²) + Σₖ B₂ₖ/x²ᵏ⁺¹ (Abramowitz & Stegun 6.4.12), as coefficients of
/// t·w^k with t = 1/x, w = t², k = 1…9: B₂, B₄, …, B₁₈.
const TRIGAMMA_SERIES: [f64; 9] = [
    1.0 / 6.0,
    -1.0 / 30.0,
    1.0 / 42.0,
    -1.0 / 30.0,
    5.0 / 66.0,
    -691.0 / 2730.0,
    7.0 / 6.0,
    -3617.0 / 510.0,
    43867.0 / 798.0,
];

/// ψ″(x) = −1/x² − 1/x³ − Σₖ (2k+1)B₂ₖ/x²ᵏ⁺², as coefficients of w^(k+1) (the derivative of the
/// series above, term by term).
const TETRAGAMMA_SERIES: [f64; 9] = [
    -3.0 / 6.0,
    5.0 / 30.0,
    -7.0 / 42.0,
    9.0 / 30.0,
    -11.0 * 5.0 / 66.0,
    13.0 * 691.0 / 2730.0,
    -15.0 * 7.0 / 6.0,
    17.0 * 3617.0 / 510.0,
    -19.0 * 43867.0 / 798.0,
];

/// The recurrence's lift of x > 0 to z = x + steps ≥ [`SHIFT`]: `(steps, z)`; or the value of
/// ψ′ and ψ″ at the edges (NaN for x ≤ 0 or NaN, 0 at +∞).
#[inline]
fn lift(x: f64) -> Result<(usize, f64), f64> {
    if x.is_nan() || x <= 0.0 {
        return Err(f64::NAN);
    }
    if x == f64::INFINITY {
        return Err(0.0);
    }
    let steps = if x < SHIFT {
        (SHIFT - x).ceil() as usize
    } else {
        0
    };
    Ok((steps, x + steps as f64))
}

/// ψ′'s asymptotic series at z ≥ [`SHIFT`], from t = 1/z.
#[inline]
fn trigamma_series(t: f64) -> f64 {
    let w = t * t;
    t * w * horner(w, &TRIGAMMA_SERIES) + 0.5 * w + t
}

#[inline]
fn horner(w: f64, coefficients: &[f64]) -> f64 {
    coefficients.iter().rev().fold(0.0, |acc, &c| acc * w + c)
}

/// ψ′(x) for x > 0, relative error ≤ 1e-13 on [1e-6, 1e8] (A&S 6.4.6 recurrence + 6.4.12
/// asymptotic series). NaN for x ≤ 0 or NaN; 0 at +∞.
pub fn trigamma(x: f64) -> f64 {
    // The same arithmetic as `trigamma_tetragamma`'s first component (a test holds them
    // bit-equal), without ψ″'s series and recurrence: the exact price evaluates ψ′ at ~50
    // quadrature nodes per call, and ψ″ is only wanted by Newton steps.
    let (steps, z) = match lift(x) {
        Ok(lifted) => lifted,
        Err(edge) => return edge,
    };
    let mut tri = trigamma_series(1.0 / z);
    for k in (0..steps).rev() {
        let r = 1.0 / (x + k as f64);
        tri += r * r;
    }
    tri
}

/// ψ′ at eight points at once, for the exact price's quadrature (one Gauss–Legendre piece):
/// every point is lifted by the *same* number of recurrence steps, those of the smallest,
/// so the loops have fixed trip counts and run lane by lane across the eight points instead
/// of branching per point (the price is ~4× faster so). A larger point is lifted further
/// than [`trigamma`] would, which only moves its series to a larger argument, where it is
/// more accurate; the arithmetic is otherwise the same (all terms positive, recurrence terms
/// added after the series, smallest first) and the mpmath fixtures hold it to the same bound.
/// Every point must be a finite number above 1e-150 (so that 1/x² stays finite; the price
/// uses it from 1 up and scales smaller points itself); the result is unspecified otherwise.
pub(crate) fn trigamma_8(x: [f64; 8]) -> [f64; 8] {
    let smallest = x.iter().copied().fold(f64::INFINITY, f64::min);
    let steps = if smallest < SHIFT {
        (SHIFT - smallest).ceil() as usize
    } else {
        0
    };
    let lift = steps as f64;
    let mut out = [0.0; 8];
    for i in 0..8 {
        out[i] = trigamma_series(1.0 / (x[i] + lift));
    }
    for k in (0..steps).rev() {
        let k = k as f64;
        for i in 0..8 {
            let r = 1.0 / (x[i] + k);
            out[i] += r * r;
        }
    }
    out
}

/// ψ″(x) for x > 0 (A&S 6.4.6 recurrence + the derivative of 6.4.12). Used for Newton steps
/// when solving calibrations; relative error ~1e-15 like ψ′. NaN for x ≤ 0 or NaN.
pub fn tetragamma(x: f64) -> f64 {
    trigamma_tetragamma(x).1
}

/// (ψ′(x), ψ″(x)) in one pass: the calibration solvers need both at the same point, and the
/// recurrence reciprocals are shared.
pub fn trigamma_tetragamma(x: f64) -> (f64, f64) {
    // The recurrence terms are summed after the (smaller) series part so that rounding of
    // the small terms is not swamped; all terms of each sum share a sign.
    let (steps, z) = match lift(x) {
        Ok(lifted) => lifted,
        Err(edge) => return (edge, edge),
    };
    let t = 1.0 / z;
    let w = t * t;
    let mut tri = trigamma_series(t);
    let mut tetra = w * w * horner(w, &TETRAGAMMA_SERIES) - w * t - w;
    for k in (0..steps).rev() {
        let r = 1.0 / (x + k as f64);
        let r2 = r * r;
        tri += r2;
        tetra -= 2.0 * r2 * r;
    }
    (tri, tetra)
}

/// ln Γ(x) for x > 0 (musl's `lgamma_r` via the `special` crate; absolute error ~1e-16 near the
/// zeros at 1 and 2, relative ~1e-15 elsewhere — checked against mpmath fixtures). NaN for
/// x ≤ 0 or NaN.
pub fn ln_gamma(x: f64) -> f64 {
    if x.is_nan() || x <= 0.0 {
        return f64::NAN;
    }
    special::Gamma::ln_gamma(x).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigamma_alone_is_bit_equal_to_the_pair() {
        let mut x = 1e-7;
        while x < 1e9 {
            assert_eq!(
                trigamma(x).to_bits(),
                trigamma_tetragamma(x).0.to_bits(),
                "{x}"
            );
            x *= 1.013;
        }
        assert!(trigamma(0.0).is_nan() && trigamma(f64::NAN).is_nan());
        assert_eq!(trigamma(f64::INFINITY), 0.0);
    }

    pub(crate) fn load(csv: &str) -> Vec<(f64, f64)> {
        csv.lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let mut it = l.split(',');
                let x: f64 = it.next().unwrap().parse().unwrap();
                let y: f64 = it.next().unwrap().parse().unwrap();
                (x, y)
            })
            .collect()
    }

    fn rel(a: f64, b: f64) -> f64 {
        ((a - b) / b).abs()
    }

    #[test]
    fn trigamma_matches_mpmath_to_1e_13() {
        let rows = load(include_str!("fixtures/trigamma.csv"));
        assert!(rows.len() >= 200);
        let mut worst: f64 = 0.0;
        for (x, want) in rows {
            let got = trigamma(x);
            let e = rel(got, want);
            worst = worst.max(e);
            assert!(
                e <= 1e-13,
                "trigamma({x}) = {got}, want {want}, rel err {e:e}"
            );
        }
        // The implementation is far better than the contract; a regression to a sloppy
        // series would show up here before it breaks the contract.
        assert!(worst < 5e-15, "worst trigamma relative error {worst:e}");
    }

    /// The batch used by the price: each fixture point beside seven neighbours up to 1.4×
    /// larger (as in one quadrature piece) and, separately, as the smallest of its batch.
    #[test]
    fn trigamma_8_matches_mpmath_to_1e_13() {
        let rows = load(include_str!("fixtures/trigamma.csv"));
        let mut worst: f64 = 0.0;
        let mut checked = 0;
        for (x, want) in rows.iter().copied().filter(|(x, _)| *x >= 1.0) {
            for spread in [1.0, 1.1, 1.4] {
                let mut batch = [0.0; 8];
                for (i, v) in batch.iter_mut().enumerate() {
                    *v = x * (1.0 + (spread - 1.0) * i as f64 / 7.0);
                }
                // x as the smallest point (fewest extra steps) and as the largest.
                let mut below = batch.map(|v| v / spread);
                below[7] = x;
                for (at, xs) in [(0, batch), (7, below)] {
                    let got = trigamma_8(xs)[at];
                    let e = rel(got, want);
                    worst = worst.max(e);
                    assert!(
                        e <= 1e-13,
                        "trigamma_8 at {x} (spread {spread}): {got} vs {want}"
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked >= 300, "{checked}");
        assert!(worst < 5e-15, "worst trigamma_8 relative error {worst:e}");
        // Every lane is the same function as the scalar one, up to rounding.
        let xs = [1.0, 1.3, 2.0, 3.46, 7.9, 8.0, 50.0, 1e6];
        for (x, got) in xs.iter().zip(trigamma_8(xs)) {
            assert!(rel(got, trigamma(*x)) < 4e-15, "{x}");
        }
    }

    #[test]
    fn tetragamma_matches_mpmath() {
        for (x, want) in load(include_str!("fixtures/tetragamma.csv")) {
            let got = tetragamma(x);
            let e = rel(got, want);
            assert!(
                e <= 1e-13,
                "tetragamma({x}) = {got}, want {want}, rel err {e:e}"
            );
        }
    }

    #[test]
    fn ln_gamma_matches_mpmath() {
        for (x, want) in load(include_str!("fixtures/ln_gamma.csv")) {
            let got = ln_gamma(x);
            // ln Γ vanishes at 1 and 2, so a purely relative test is meaningless there.
            let tol = 1e-14 * want.abs() + 1e-15;
            assert!(
                (got - want).abs() <= tol,
                "ln_gamma({x}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn pair_agrees_with_singles_and_domain_is_guarded() {
        for x in [1e-6, 0.3, 1.0, 7.9, 8.0, 1e5] {
            let (a, b) = trigamma_tetragamma(x);
            assert_eq!(a, trigamma(x));
            assert_eq!(b, tetragamma(x));
        }
        for bad in [0.0, -1.0, f64::NAN, f64::NEG_INFINITY] {
            assert!(trigamma(bad).is_nan());
            assert!(tetragamma(bad).is_nan());
            assert!(ln_gamma(bad).is_nan());
        }
        assert_eq!(trigamma(f64::INFINITY), 0.0);
    }

    #[test]
    fn trigamma_respects_the_reciprocal_bounds_of_001_eq5() {
        // 1/x + 1/(2x²) < ψ′(x) < 1/x + 1/x² (001 eq. 5).
        let mut x = 1e-3;
        while x < 1e6 {
            let t = trigamma(x);
            assert!(t > 1.0 / x + 0.5 / (x * x), "{x}");
            assert!(t < 1.0 / x + 1.0 / (x * x), "{x}");
            x *= 1.37;
        }
    }
}
