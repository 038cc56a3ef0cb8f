//! A public lower bound L on every cell (seed 000 Remark 2; seed 003's prior-free mechanism)
//! and the calibrations that solve against an arbitrary monotone price.
//!
//! The release draws Dir(r·max(x, L) + α) with α ≥ 0. Written as
//! Dir(r·max(x − L, 0) + (α + rL)) it is the service's own mechanism on the statistic
//! y = max(x − L, 0) with the prior α_eff = α + rL: y moves by at most as much as x in every
//! cell (clamping is 1-Lipschitz per cell), so the dataset's sensitivities hold for y and every
//! curve of the service prices it with α_eff. When the data really satisfies x ≥ L the draw is
//! exactly Dir(r·x + α) — for α = 0, Gohari's Dir(k·p) with k = rN, p = x/N — and for data that
//! breaks the bound the guarantee still holds (the clamp only changes what is drawn). L must be
//! public knowledge (a floor the data owner guarantees), never computed from the counts: the
//! parameters are not protected, only the counts are.

use super::calibrate::CHARGE_INFLATION;
use super::types::{Counts, ParamError, Prior};

/// A scalar or per-cell vector of finite numbers ≥ 0 (the lower bound L, or a prior α that may
/// be 0 because L supplies the prior).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum CellValues {
    Uniform(f64),
    PerCell(Vec<f64>),
}

impl CellValues {
    pub fn non_negative(name: &'static str, values: CellValues) -> Result<Self, ParamError> {
        let check = |v: f64| {
            if !v.is_finite() {
                Err(ParamError::NotFinite { name })
            } else if v < 0.0 {
                Err(ParamError::OutOfRange {
                    name,
                    constraint: "at least 0",
                })
            } else {
                Ok(())
            }
        };
        match &values {
            CellValues::Uniform(v) => check(*v)?,
            CellValues::PerCell(vs) => {
                if vs.len() < 2 {
                    return Err(ParamError::OutOfRange {
                        name,
                        constraint: "a number or an array of at least 2 numbers",
                    });
                }
                vs.iter().try_for_each(|v| check(*v))?;
            }
        }
        Ok(values)
    }

    pub fn at(&self, i: usize) -> f64 {
        match self {
            CellValues::Uniform(v) => *v,
            CellValues::PerCell(vs) => vs[i],
        }
    }

    pub fn check_dimension(&self, d: usize) -> Result<(), ParamError> {
        match self {
            CellValues::PerCell(v) if v.len() != d => Err(ParamError::DimensionMismatch {
                got: v.len(),
                expected: d,
            }),
            _ => Ok(()),
        }
    }

    pub fn min(&self) -> f64 {
        match self {
            CellValues::Uniform(v) => *v,
            CellValues::PerCell(vs) => vs.iter().copied().fold(f64::INFINITY, f64::min),
        }
    }

    /// a·self + b·other, cell by cell, over d cells: a uniform result when both are uniform.
    pub fn combine(&self, a: f64, other: &CellValues, b: f64, d: usize) -> CellValues {
        match (self, other) {
            (CellValues::Uniform(x), CellValues::Uniform(y)) => CellValues::Uniform(a * x + b * y),
            _ => CellValues::PerCell((0..d).map(|i| a * self.at(i) + b * other.at(i)).collect()),
        }
    }

    /// As a prior: `None` unless every cell is a finite number > 0.
    pub fn to_prior(&self) -> Option<Prior> {
        match self {
            CellValues::Uniform(v) => Prior::uniform(*v).ok(),
            CellValues::PerCell(vs) => Prior::per_cell(vs.clone()).ok(),
        }
    }
}

impl From<&Prior> for CellValues {
    fn from(p: &Prior) -> Self {
        match p {
            Prior::Uniform(v) => CellValues::Uniform(*v),
            Prior::PerCell(v) => CellValues::PerCell(v.clone()),
        }
    }
}

/// y = max(x − L, 0) cell by cell: the statistic the bounded release runs the service's
/// mechanism on. Keeps `Counts`' redaction (the result is as sensitive as x).
pub fn clamp_excess(counts: &Counts, lower: &CellValues) -> Counts {
    let y: Vec<f64> = counts
        .as_slice()
        .iter()
        .enumerate()
        .map(|(i, &x)| (x - lower.at(i)).max(0.0))
        .collect();
    // Same length and all finite ≥ 0, so this cannot fail; `usize::MAX` keeps the cell cap out.
    Counts::new(y, usize::MAX).unwrap_or_else(|_| counts.clone())
}

/// The largest relative amount below the target a solved price may fall.
pub const SPEND_TOLERANCE: f64 = 1e-9;

/// Find a parameter p > 0 at which a monotone price meets the calibration contract of
/// `calibrate.rs`: price(p)·(1 + CHARGE_INFLATION) ≤ ε (the ledger's charge never exceeds the
/// target) and, whenever f64 allows it, price(p) ≥ ε(1 − SPEND_TOLERANCE). `rising` says whether
/// the price increases with p; a price that is NaN or +∞ counts as over. The bracket is found
/// by doubling/halving from `start` (at most 128 steps), then the bit patterns of the two ends (ordered like the
/// positive floats) are bisected, so the answer is exact to one ulp after ≤ ~70 evaluations
/// beyond the bracket. Returns the side that fits (never one over ε); `None` if no p in
/// (0, f64::MAX] fits.
pub fn solve_monotone(
    price: impl Fn(f64) -> f64,
    rising: bool,
    epsilon: f64,
    start: f64,
) -> Option<f64> {
    let fits = |p: f64| {
        let v = price(p);
        v.is_finite() && v * (1.0 + CHARGE_INFLATION) <= epsilon
    };
    let done = |p: f64| price(p) >= epsilon * (1.0 - SPEND_TOLERANCE);
    // Moving "towards over" means larger p when rising.
    let grow = |p: f64, up: bool| if up { p * 2.0 } else { p * 0.5 };
    let mut p = start;
    let (mut ok, mut over) = if fits(p) {
        (p, f64::NAN)
    } else {
        (f64::NAN, p)
    };
    // At most 2^±128 from `start`: a price that has not crossed ε by then (e.g. a prior that
    // shrinks with r, whose price has a floor) never will, and every step costs a curve
    // evaluation, so an unbounded search is a way to make a request spin.
    for _ in 0..128 {
        if !ok.is_nan() && !over.is_nan() {
            break;
        }
        p = if ok.is_nan() {
            grow(p, !rising)
        } else {
            grow(p, rising)
        };
        if !(p.is_finite() && p > 0.0) {
            break;
        }
        if fits(p) {
            ok = p;
        } else {
            over = p;
        }
    }
    if ok.is_nan() {
        return None;
    }
    if over.is_nan() || done(ok) {
        return Some(ok);
    }
    let (mut a, mut b) = (ok.to_bits(), over.to_bits());
    for _ in 0..200 {
        let (lo, hi) = (a.min(b), a.max(b));
        if hi - lo <= 1 {
            break;
        }
        let mid = lo + (hi - lo) / 2;
        let m = f64::from_bits(mid);
        if fits(m) {
            a = mid;
            if done(m) {
                break;
            }
        } else {
            b = mid;
        }
    }
    Some(f64::from_bits(a))
}

#[cfg(test)]
mod tests {
    use super::super::curve::dirichlet_rdp;
    use super::super::divergence::renyi_dirichlet;
    use super::super::types::{Order, Sensitivity};
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn non_negative_values_parse_and_refuse() {
        assert!(CellValues::non_negative("lower_bound", CellValues::Uniform(0.0)).is_ok());
        assert!(CellValues::non_negative("lower_bound", CellValues::Uniform(-1.0)).is_err());
        assert!(CellValues::non_negative("lower_bound", CellValues::Uniform(f64::NAN)).is_err());
        assert!(CellValues::non_negative("lower_bound", CellValues::PerCell(vec![1.0])).is_err());
        assert!(
            CellValues::non_negative("lower_bound", CellValues::PerCell(vec![1.0, -0.5])).is_err()
        );
    }

    #[test]
    fn solver_hits_the_target_from_either_side_and_never_over() {
        let sens = Sensitivity::REPLACE_ONE;
        let order = Order::new(2.0).unwrap();
        // Posterior-like: α decreasing price; the 001 worked example α ≈ 3.46 at ε = 1.
        let a = solve_monotone(|a| dirichlet_rdp(order, 1.0, a, &sens), false, 1.0, 1.0).unwrap();
        let v = dirichlet_rdp(order, 1.0, a, &sens);
        assert!(
            v * (1.0 + CHARGE_INFLATION) <= 1.0 && v >= 1.0 - 1e-9,
            "{a} {v}"
        );
        assert!((a - 3.459952948).abs() < 1e-8, "{a}");
        // Diffuse-like: r increasing price.
        let r = solve_monotone(|r| dirichlet_rdp(order, r, 10.0, &sens), true, 0.01, 1.0).unwrap();
        let v = dirichlet_rdp(order, r, 10.0, &sens);
        assert!(
            v * (1.0 + CHARGE_INFLATION) <= 0.01 && v >= 0.01 * (1.0 - 1e-9),
            "{r} {v}"
        );
        // Nothing fits.
        assert!(solve_monotone(|_| f64::INFINITY, true, 1.0, 1.0).is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The clamped release Dir(r·max(x, L) + α) is the service's mechanism on max(x − L, 0)
        /// with prior α + rL: for every neighbour pair of small histograms (replace one) the
        /// exact divergence of the *clamped* draws is at most the 001 curve at α + rL.
        #[test]
        fn clamping_keeps_the_curve_with_the_effective_prior(
            x in proptest::collection::vec(0u8..6, 3),
            from in 0usize..3,
            to in 0usize..3,
            lower in 0.0f64..4.0,
            alpha in 0.0f64..2.0,
            r in 0.1f64..2.0,
            lambda in 1.1f64..6.0,
        ) {
            prop_assume!(from != to && x[from] > 0);
            let a_eff = alpha + r * lower;
            prop_assume!(a_eff > 0.05);
            let order = Order::new(lambda).unwrap();
            let curve = dirichlet_rdp(order, r, a_eff, &Sensitivity::REPLACE_ONE);
            prop_assume!(curve.is_finite());
            let mut x2: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
            let x1 = x2.clone();
            x2[from] -= 1.0;
            x2[to] += 1.0;
            let shapes = |v: &[f64]| v.iter().map(|&c| r * c.max(lower) + alpha).collect::<Vec<_>>();
            let (u, w) = (shapes(&x1), shapes(&x2));
            for d in [renyi_dirichlet(lambda, &u, &w), renyi_dirichlet(lambda, &w, &u)] {
                prop_assert!(d <= curve * (1.0 + 1e-9) + 1e-12, "D = {} > curve {}", d, curve);
            }
        }
    }
}
