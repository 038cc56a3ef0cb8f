//! The one-dimensional solvers the calibrations share: a safeguarded Newton, a secant solver
//! for curves with a pole, and the walk that settles a root on the f64 that meets the contract.

use super::contract::{verdict, Verdict, POLE_GAP, POLE_SPEND_TOLERANCE};

/// Why [`settle_reach`] found no parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Unsettled {
    /// ε lies beyond the curve's reach: `reach` is its value at the last f64 parameter before
    /// its pole (every parameter past it prices at +∞).
    Beyond { reach: f64 },
    /// The walk left the positive finite floats, or ran out of steps.
    Unrepresentable,
}

/// [`settle_reach`], for the calibrations that only need to know whether it succeeded.
pub(crate) fn settle(
    p: f64,
    rising: bool,
    epsilon: f64,
    curve: impl Fn(f64) -> f64,
) -> Option<f64> {
    settle_reach(p, rising, epsilon, curve).ok()
}

/// Walk a positive parameter `p` until `verdict(curve(p), ε)` fits. `rising` says whether the
/// curve increases with p. Works on the bit patterns of p (ordered like the positive floats
/// themselves): steps of 1, 2, 4, … ulps outward until the verdict flips, then bisection of
/// the bit interval, so a window narrower than a relative 1e-15 is still found (after at most
/// ~130 evaluations).
///
/// A window that falls between two adjacent floats (next to ε*'s logarithmic pole one ulp of
/// the parameter moves the price by more than 1e-9, and in the last few ulps by percents)
/// gives the one below the window: the best f64 can do, charged ε and spending a little less
/// (at most [`POLE_GAP`] less; a wider gap is not a pole's and is refused).
/// When the float above is the pole itself (+∞), ε is beyond the curve's reach and the one
/// below is returned only within `POLE_SPEND_TOLERANCE` of ε; otherwise `Beyond` carries its
/// price.
pub(crate) fn settle_reach(
    p: f64,
    rising: bool,
    epsilon: f64,
    curve: impl Fn(f64) -> f64,
) -> Result<f64, Unsettled> {
    let mut bits = p.to_bits();
    let mut step: u64 = 1;
    // Bit patterns known to price over (`over`) and under (`under`) the window.
    let (mut over, mut under): (Option<u64>, Option<u64>) = (None, None);
    let unrepresentable = Unsettled::Unrepresentable;
    for _ in 0..200 {
        let q = f64::from_bits(bits);
        if !(q.is_finite() && q > 0.0) {
            return Err(unrepresentable);
        }
        let up = match verdict(curve(q), epsilon) {
            Verdict::Fits => return Ok(q),
            Verdict::Over => {
                over = Some(bits);
                !rising
            }
            Verdict::Under => {
                under = Some(bits);
                rising
            }
        };
        bits = match (over, under) {
            (Some(a), Some(b)) => {
                let (lo, hi) = (a.min(b), a.max(b));
                if hi - lo <= 1 {
                    let (q, above) = (f64::from_bits(b), curve(f64::from_bits(a)));
                    let below = curve(q);
                    let tolerance = if above.is_finite() {
                        POLE_GAP
                    } else {
                        POLE_SPEND_TOLERANCE
                    };
                    if below >= epsilon * (1.0 - tolerance) {
                        return Ok(q);
                    }
                    return Err(Unsettled::Beyond { reach: below });
                }
                lo + (hi - lo) / 2
            }
            _ => {
                let next = if up {
                    bits.checked_add(step).ok_or(unrepresentable)?
                } else {
                    bits.checked_sub(step).ok_or(unrepresentable)?
                };
                step = step.saturating_mul(2);
                next
            }
        };
    }
    Err(unrepresentable)
}

/// Safeguarded Newton on an increasing function F(t) with F′ supplied: Newton steps while they
/// stay inside the current bracket [lo, hi] (either side may be infinite until found),
/// bisection or outward expansion otherwise. Returns t with |F(t)| ≤ `residual`, or the last
/// iterate once the steps stall at rounding level.
pub(crate) fn newton(
    mut f: impl FnMut(f64) -> (f64, f64),
    start: f64,
    mut lo: f64,
    mut hi: f64,
    residual: f64,
) -> f64 {
    let mut t = start;
    for _ in 0..200 {
        let (v, dv) = f(t);
        if v.abs() <= residual {
            return t;
        }
        // NaN or +∞ means past a pole: too high.
        if v > 0.0 || v.is_nan() {
            hi = hi.min(t);
        } else {
            lo = lo.max(t);
        }
        let mut next = t - v / dv;
        if (next - t).abs() <= 4.0 * f64::EPSILON * t.abs().max(1.0) {
            return next;
        }
        if !(next.is_finite() && next > lo && next < hi) {
            next = match (lo.is_finite(), hi.is_finite()) {
                (true, true) => 0.5 * (lo + hi),
                (true, false) => lo + lo.abs().max(1.0),
                (false, true) => hi - hi.abs().max(1.0),
                (false, false) => t - 1.0,
            };
        }
        t = next;
    }
    t
}

/// The root of an increasing function `f` near `t0`: secant steps (the first with the given
/// slope guessed from f(t₀)) kept inside the bracket found so far, regula falsi or bisection otherwise.
/// A non-finite value (past a pole) counts as above the root. Returns t with |f(t)| ≤
/// `tolerance`, or the last iterate once the steps reach rounding level or `f` has been
/// evaluated `max_evaluations` times.
pub(super) fn solve_increasing(
    mut f: impl FnMut(f64) -> f64,
    t0: f64,
    slope: impl FnOnce(f64) -> f64,
    tolerance: f64,
    max_evaluations: usize,
) -> f64 {
    let (mut lo, mut f_lo) = (f64::NEG_INFINITY, f64::NAN);
    let (mut hi, mut f_hi) = (f64::INFINITY, f64::NAN);
    let mut t = t0;
    let mut ft = f(t);
    let (mut slope, mut guess) = (Some(slope), f64::NAN);
    let mut prev: Option<(f64, f64)> = None;
    let mut prev_2: Option<(f64, f64)> = None;
    // Consecutive iterates on one side of a finite bracket: interpolation can creep along one
    // end for ever (regula falsi's failure on a steep convex curve); the third in a row
    // bisects instead.
    let mut same_side = 0;
    for _ in 1..max_evaluations {
        if ft.abs() <= tolerance {
            return t;
        }
        same_side = match prev {
            Some((_, fp)) if (fp <= 0.0) == (ft <= 0.0) => same_side + 1,
            _ => 0,
        };
        if ft <= 0.0 {
            (lo, f_lo) = (t, ft);
        } else {
            (hi, f_hi) = (t, ft);
        }
        let secant = match prev {
            Some((tp, fp)) if ft.is_finite() && fp.is_finite() && fp != ft => {
                t - ft * (t - tp) / (ft - fp)
            }
            _ if ft.is_finite() => {
                if let Some(first) = slope.take() {
                    guess = first(ft);
                }
                t - ft / guess
            }
            _ => f64::NAN,
        };
        // With three points, inverse quadratic interpolation (as in Brent's method) follows
        // the curvature that makes secant steps from a far start creep up on the root from
        // one side (next to ε*'s pole ln ε* bends like ln ln(1/z)).
        let quadratic = match (prev, prev_2) {
            (Some((tp, fp)), Some((tq, fq))) => {
                let (a, b, c) = (ft - fp, ft - fq, fp - fq);
                t * fp * fq / (a * b) - tp * ft * fq / (a * c) + tq * ft * fp / (b * c)
            }
            _ => f64::NAN,
        };
        let mut next = if quadratic > lo && quadratic < hi {
            quadratic
        } else {
            secant
        };
        if !(next > lo && next < hi) {
            next = match (lo.is_finite(), hi.is_finite()) {
                (true, true) if f_lo.is_finite() && f_hi.is_finite() => {
                    lo - f_lo * (hi - lo) / (f_hi - f_lo)
                }
                (true, true) => 0.5 * (lo + hi),
                (true, false) => lo + lo.abs().max(1.0),
                (false, true) => hi - hi.abs().max(1.0),
                (false, false) => t - 1.0,
            };
            if !(next > lo && next < hi) {
                next = 0.5 * (lo + hi);
            }
        }
        let bracketed = lo.is_finite() && hi.is_finite();
        if same_side >= 2 && bracketed {
            next = 0.5 * (lo + hi);
            same_side = 0;
        }
        if (next - t).abs() <= 4.0 * f64::EPSILON * t.abs().max(1.0) {
            // At rounding level — unless a wide bracket says the step only stalled.
            if !bracketed || hi - lo <= 1e-9 * t.abs().max(1.0) {
                return next;
            }
            next = 0.5 * (lo + hi);
        }
        prev_2 = prev;
        prev = Some((t, ft));
        t = next;
        ft = f(t);
    }
    t
}

pub(super) fn finite_ln_or(v: f64, default: f64) -> f64 {
    let l = v.ln();
    if l.is_finite() {
        l
    } else {
        default
    }
}

pub(super) fn nan_to(v: f64, default: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        default
    }
}
