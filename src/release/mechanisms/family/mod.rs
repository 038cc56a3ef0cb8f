//! The Dirichlet family's draw, y ~ Dir(r·x + α), shared by `dirichlet`, `posterior`,
//! `diffuse` and `explicit` (which differ only in how they choose r and α): its price, its
//! floating-point guard, its sampler, its forecasts, and the public lower bound any of them may
//! take (seed 000 Remark 2 / seed 003: Dir(r·max(x, L) + α), priced as the mechanism on
//! max(x − L, 0) with the prior α + rL; `privacy::bounded`).

pub mod preview;

use serde_json::Value;

use crate::privacy::accuracy::{Bounds, DirichletDraw as Accuracy, MAX_CELL_SD, MAX_L2};
use crate::privacy::bounded::{clamp_excess, solve_monotone, CellValues};
use crate::privacy::curve::{dirichlet_max_order, dirichlet_price, Pricing};
use crate::privacy::exact::worst_pair;
use crate::privacy::sampler::{release_shapes, try_sample_dirichlet, CsRng, SampleError};
use crate::privacy::types::Relation;
use crate::privacy::utility::dirichlet_forecast;
use crate::privacy::{CalibrationError, Counts, DirichletParams, Order, Prior, Sensitivity};
use crate::release::mechanism::{
    Draw, Drawn, FieldSpec, Need, Parameters, PlanError, RequestError, Setup, Target,
    VectorForecast, Wire, FORECAST_BETA,
};
use crate::schema::{self, SchemaRef};
use crate::wire::ScalarOrCells;

/// rΔ∞ must be at least this many ulps of the largest shape (2²⁰): the shapes r·x + α are
/// formed in f64, so a neighbour's shift of rΔ∞ arrives as rΔ∞ ± ½ulp; at 2²⁰ ulps that is a
/// relative error below 2⁻²¹ of the shift, and the shift spans ≥ 2²⁰/3 of the sampler's
/// resolution steps (`sampler::MAX_SHAPE`). Below it the divergence can exceed the charge by
/// orders of magnitude (posterior r = 1000 at ε = 1e-6: 268×).
pub const MIN_SHIFT_ULPS: f64 = 1_048_576.0;

/// y ~ Dir(r·x + α), or with a public lower bound L, Dir(r·max(x − L, 0) + α) where α is the
/// effective prior α + rL (`lower` is then the bound).
#[derive(Debug, Clone, PartialEq)]
pub struct DirichletDraw {
    pub r: f64,
    /// The prior the draw uses (with a bound, α + rL).
    pub alpha: Prior,
    pub lower: Option<CellValues>,
    /// α as solved or given, before the bound's rL (what the record calls `alpha`).
    pub base: CellValues,
}

impl DirichletDraw {
    pub fn new(r: f64, alpha: Prior) -> DirichletDraw {
        DirichletDraw {
            r,
            base: CellValues::from(&alpha),
            alpha,
            lower: None,
        }
    }

    /// The statistic the draw runs the mechanism on: the counts, or max(x − L, 0).
    fn statistic(&self, counts: &Counts) -> Counts {
        match &self.lower {
            Some(lower) => clamp_excess(counts, lower),
            None => counts.clone(),
        }
    }

    fn params(&self) -> DirichletParams {
        DirichletParams {
            r: self.r,
            alpha: self.alpha.clone(),
        }
    }

    /// The floating-point rules on the statistic: every shape ≤ `sampler::MAX_SHAPE` (2⁵⁰,
    /// where the Gamma sampler is still exact) and rΔ∞ ≥ 2²⁰·ulp(largest shape)
    /// ([`MIN_SHIFT_ULPS`]), or the release is refused as `BeyondPrecision`.
    fn check_statistic(&self, counts: &Counts, sens: &Sensitivity) -> Result<(), PlanError> {
        let shapes = release_shapes(counts, &self.params()).map_err(|e| match e {
            SampleError::ShapeTooLarge { .. } => PlanError::BeyondPrecision(format!(
                "{e}; lower r or alpha (the largest supported shape r*count + alpha is 2^50)"
            )),
            _ => PlanError::Parameter(e.to_string()),
        })?;
        let largest = shapes.iter().copied().fold(0.0, f64::max);
        // rΔ∞ rounded down (the price assumes the real product clears the bar).
        let shift = self.r * sens.linf();
        let shift = if self.r.mul_add(sens.linf(), -shift) < 0.0 {
            crate::privacy::exact::next_down(shift)
        } else {
            shift
        };
        let needed = min_shift_ulps(sens, counts.len()) * ulp(largest);
        if shift.is_nan() || shift < needed {
            return Err(PlanError::BeyondPrecision(
                "r times the sensitivity is below 2^20 ulps (times 2^ceil(log2(d)/2) for a custom \
                 sensitivity) of the largest shape r*count + alpha, so a neighbouring dataset's \
                 shift is lost to rounding; raise r or lower alpha"
                    .to_string(),
            ));
        }
        Ok(())
    }
}

/// The guard's bar in ulps of the largest shape: [`MIN_SHIFT_ULPS`] for the histogram
/// relations (a neighbour changes at most two cells, each priced by its own realised shift);
/// times 2^⌈log₂(d)/2⌉ ≥ √d for a custom sensitivity, whose neighbour may change every cell:
/// Corollary 3 needs ‖realised shifts‖₂ ≤ r(1 + 2⁻¹⁷)·√Δ2², and d cells each off by
/// 8·ulp/√d-ish add up to that (docs/PRIVACY.md, "The realised shift").
pub fn min_shift_ulps(sens: &Sensitivity, d: usize) -> f64 {
    match sens.relation() {
        Relation::Custom => {
            let log2_d = usize::BITS - d.max(1).saturating_sub(1).leading_zeros();
            MIN_SHIFT_ULPS * 2f64.powi(log2_d.div_ceil(2) as i32)
        }
        Relation::ReplaceOne | Relation::AddRemoveOne => MIN_SHIFT_ULPS,
    }
}

/// The gap between `x` (finite, > 0) and the next larger f64.
fn ulp(x: f64) -> f64 {
    f64::from_bits(x.to_bits() + 1) - x
}

impl Draw for DirichletDraw {
    /// The exact worst case ε* on `replace_one`/`add_remove_one` (`privacy::exact`), 001
    /// Corollary 3 (a bound) on a custom sensitivity. The bounded draw is the same mechanism on
    /// max(x − L, 0) with the effective prior.
    fn price(&self, order: Order, sens: &Sensitivity, _d: usize) -> (f64, Pricing) {
        dirichlet_price(order, self.r, &self.alpha, sens)
    }

    fn max_order(&self, sens: &Sensitivity) -> f64 {
        dirichlet_max_order(self.r, self.alpha.min(), sens)
    }

    /// Every Gamma shape r·x_i + α_i finite and positive (huge counts times a huge explicit r
    /// could overflow), and the floating-point rules ([`DirichletDraw::check_statistic`]).
    fn check(&self, counts: &Counts, sens: &Sensitivity) -> Result<(), PlanError> {
        self.check_statistic(&self.statistic(counts), sens)
    }

    fn sample(&self, counts: &Counts, rng: &mut CsRng) -> Result<Drawn, String> {
        let shapes =
            release_shapes(&self.statistic(counts), &self.params()).map_err(|e| e.to_string())?;
        try_sample_dirichlet(&shapes, rng)
            .map(|y| (y, None))
            .map_err(|e| e.to_string())
    }

    /// 001 Theorem 5's ℓ2 bound, the per-cell variance and 000 Theorem 2's KL tail, from
    /// (r, α, N, d). With a lower bound: on data that respects it the draw is Dir(r·x + α − rL),
    /// so that is forecast; data below the bound gets no forecast.
    fn forecast(&self, counts: &Counts) -> Option<VectorForecast> {
        let d = counts.len();
        let f = match &self.lower {
            Some(lower) => {
                let respects = counts
                    .as_slice()
                    .iter()
                    .enumerate()
                    .all(|(i, &x)| x >= lower.at(i));
                if !respects {
                    return None;
                }
                // α − rL may be 0 (Gohari's draw); the forecasts' formulas hold for α ≥ 0.
                let base: Vec<f64> = (0..d)
                    .map(|i| (self.alpha.at(i) - self.r * lower.at(i)).max(0.0))
                    .collect();
                let min = base.iter().copied().fold(f64::INFINITY, f64::min);
                let f = dirichlet_forecast(
                    self.r,
                    base.iter().sum(),
                    min,
                    counts.total(),
                    d,
                    FORECAST_BETA,
                );
                let finite = [f.l2_bound, f.l2_bound_confidence, f.max_cell_variance]
                    .iter()
                    .all(|v| v.is_finite());
                return finite.then_some(VectorForecast::Dirichlet(f));
            }
            None => dirichlet_forecast(
                self.r,
                self.alpha.total(d),
                self.alpha.min(),
                counts.total(),
                d,
                FORECAST_BETA,
            ),
        };
        let finite = [f.l2_bound, f.l2_bound_confidence, f.max_cell_variance]
            .iter()
            .all(|v| v.is_finite())
            && f.kl_tail
                .as_ref()
                .is_none_or(|k| k.eta.is_finite() && k.probability.is_finite());
        finite.then_some(VectorForecast::Dirichlet(f))
    }

    /// `privacy::accuracy`'s Dirichlet bounds. A bounded draw claims nothing here (the bounds
    /// would have to hold for data below the bound too; the planner does not plan bounds).
    fn bounds(&self, n: f64, d: usize, beta: f64, need: Need) -> Bounds {
        let none = Bounds {
            l2: f64::INFINITY,
            cell_sd: f64::INFINITY,
            kl: f64::INFINITY,
        };
        if self.lower.is_some() {
            return Bounds {
                l2: MAX_L2,
                cell_sd: MAX_CELL_SD,
                kl: f64::INFINITY,
            };
        }
        match Accuracy::new(self.r, &self.alpha, d) {
            Some(draw) => Bounds {
                l2: if need.l2 { draw.l2(n, beta) } else { 0.0 },
                cell_sd: if need.cell_sd { draw.cell_sd(n) } else { 0.0 },
                kl: if need.kl { draw.kl(n, beta) } else { 0.0 },
            },
            None => none,
        }
    }

    /// [`Draw::check`] on the worst case of total n: every record in the cell of the largest
    /// prior (the largest Gamma shape fl(fl(r·n) + α_max); the guard and the shape cap are
    /// monotone in it). The custom guard depends on d: then the whole vector.
    fn feasible(&self, n: f64, d: usize, sens: &Sensitivity) -> Result<(), String> {
        let alpha = &self.alpha;
        let (counts, draw) = if sens.relation() == Relation::Custom {
            let top = (0..d).fold(0, |b, i| if alpha.at(i) > alpha.at(b) { i } else { b });
            let mut x = vec![0.0; d];
            x[top] = n;
            (x, DirichletDraw::new(self.r, alpha.clone()))
        } else {
            let max = (0..d).fold(alpha.min(), |m, i| m.max(alpha.at(i)));
            (
                vec![n, 0.0],
                DirichletDraw::new(self.r, Prior::PerCell(vec![max, alpha.min()])),
            )
        };
        let counts = Counts::new(counts, usize::MAX).map_err(|e| e.to_string())?;
        draw.check_statistic(&counts, sens)
            .map_err(|e| e.to_string())
    }

    fn parameters(&self) -> Parameters {
        let mut p = Parameters::new();
        p.insert("r".into(), Value::from(self.r));
        p.insert(
            "alpha".into(),
            serde_json::to_value(CellValues::from(&self.alpha)).expect("numbers serialise"),
        );
        p
    }
}

// ------------------------------------------------------------------------------ fields

fn alpha_schema() -> SchemaRef {
    schema::described(
        "NonNegativeCells",
        "The prior α, fixed: > 0 in every cell (≥ 0 with `lower_bound`).",
    )
}

fn lower_bound_schema() -> SchemaRef {
    schema::component("LowerBound")
}

/// `lower_bound`: a public floor L on every cell (a number, or one per cell), ≥ 0.
pub const LOWER_BOUND: FieldSpec = FieldSpec {
    name: "lower_bound",
    wire: Wire::NumberOrNumbers,
    required: false,
    default: None,
    description: "A public lower bound L on every cell (a number, or one per cell): the release \
                  draws Dir(r·max(x, L) + α), priced with the prior α + rL (seed 000 Remark 2).",
    schema: lower_bound_schema,
};

/// `alpha`: a prior fixed by the caller (`diffuse`, `explicit`).
pub const ALPHA: FieldSpec = FieldSpec {
    name: "alpha",
    wire: Wire::NumberOrNumbers,
    required: true,
    default: None,
    description: "The prior α (a number, or one per cell): > 0 in every cell, ≥ 0 with \
                  `lower_bound`.",
    schema: alpha_schema,
};

/// A parameter of cells (a number, or one per cell) ≥ 0, for `field`.
pub fn cell_values(field: &'static str, value: &ScalarOrCells) -> Result<CellValues, RequestError> {
    let values = match value {
        ScalarOrCells::Scalar(v) => CellValues::Uniform(*v),
        ScalarOrCells::Cells(v) => CellValues::PerCell(v.clone()),
    };
    CellValues::non_negative(field, values).map_err(|e| RequestError::param(field, e))
}

/// `lower_bound`, when given.
pub fn lower_bound(
    params: &crate::release::mechanism::Params,
) -> Result<Option<CellValues>, RequestError> {
    params
        .get("lower_bound")
        .map(|l| cell_values("lower_bound", l))
        .transpose()
}

/// `alpha` of `diffuse` and `explicit`: > 0 in every cell, or ≥ 0 with a lower bound (which
/// then supplies the prior where α is 0).
pub fn fixed_alpha(
    params: &crate::release::mechanism::Params,
    mechanism: &str,
    bounded: bool,
) -> Result<CellValues, RequestError> {
    let alpha = params
        .get("alpha")
        .ok_or_else(|| crate::release::mechanism::needs(mechanism, "alpha"))?;
    if bounded {
        return cell_values("alpha", alpha);
    }
    let prior = match alpha {
        ScalarOrCells::Scalar(a) => Prior::uniform(*a),
        ScalarOrCells::Cells(v) => Prior::per_cell(v.clone()),
    }
    .map_err(|e| RequestError::param("alpha", e))?;
    Ok(CellValues::from(&prior))
}

// ------------------------------------------------------------------------------ calibration

pub fn infeasible(target: &Target, reason: &str) -> PlanError {
    PlanError::Infeasible(CalibrationError::Infeasible {
        order: target.order.get(),
        epsilon: target.epsilon.get(),
        reason: reason.to_string(),
    })
}

pub fn parameter(e: crate::privacy::ParamError) -> PlanError {
    PlanError::Parameter(e.to_string())
}

/// Prices (r, α) with a lower bound for the bounded calibrations, which solve against the very
/// price the release is charged.
pub struct Pricer<'a> {
    pub lower: CellValues,
    pub sens: &'a Sensitivity,
    pub d: usize,
}

impl Pricer<'_> {
    /// α + rL, as a prior (None when a cell is not > 0).
    pub fn effective(&self, r: f64, alpha: &CellValues) -> Option<Prior> {
        alpha.combine(1.0, &self.lower, r, self.d).to_prior()
    }

    pub fn at(&self, order: Order, r: f64, alpha: &CellValues) -> f64 {
        match self.effective(r, alpha) {
            Some(alpha) => {
                DirichletDraw::new(r, alpha)
                    .price(order, self.sens, self.d)
                    .0
            }
            None => f64::INFINITY,
        }
    }

    /// r solved (increasing price in r) for `alpha_of(r)` at the target.
    pub fn solve_r(
        &self,
        target: &Target,
        alpha_of: impl Fn(f64) -> CellValues,
        reason: &str,
    ) -> Result<f64, PlanError> {
        solve_monotone(
            |r| self.at(target.order, r, &alpha_of(r)),
            true,
            target.epsilon.get(),
            1.0,
        )
        .ok_or_else(|| infeasible(target, reason))
    }
}

/// The draw of a release with (r, α) solved or given and an optional lower bound: α + rL must be
/// > 0 in every cell.
pub fn bounded_draw(
    r: f64,
    alpha: &CellValues,
    lower: &Option<CellValues>,
    d: usize,
) -> Result<DirichletDraw, PlanError> {
    let zero = CellValues::Uniform(0.0);
    let effective = alpha
        .combine(1.0, lower.as_ref().unwrap_or(&zero), r, d)
        .to_prior()
        .ok_or_else(|| {
            PlanError::Parameter(
                "alpha + r * lower_bound must be greater than 0 in every cell (alpha may be 0 only where lower_bound > 0)".into(),
            )
        })?;
    Ok(DirichletDraw {
        r,
        alpha: effective,
        lower: lower.clone(),
        base: alpha.clone(),
    })
}

/// The record fields every member of the family writes: r and α as solved (α without the
/// bound's rL), and with a bound the bound and the effective prior.
pub fn record(kind: &str, draw: &DirichletDraw) -> crate::release::mechanism::Record {
    crate::release::mechanism::Record::new(kind)
        .with("r", draw.r)
        .with("alpha", &draw.base)
        .with_some("lower_bound", draw.lower.as_ref())
        .with_some(
            "effective_alpha",
            draw.lower.as_ref().map(|_| CellValues::from(&draw.alpha)),
        )
}

// ------------------------------------------------------------------------------ planning

/// A plan item's lower bound (`lower_bound`) is not planned: the worst-case bounds would have
/// to hold for data below it too.
pub fn no_lower_bound(lower: &Option<CellValues>) -> Result<(), (&'static str, String)> {
    match lower {
        Some(_) => Err((
            "lower_bound",
            "the planner does not plan releases with a lower_bound".into(),
        )),
        None => Ok(()),
    }
}

/// The pole of a strength parameter: (λ − 1)Δ∞ times r for `posterior`'s α, the smallest prior
/// entry over it for `diffuse`'s r.
pub fn pole_factor(s: &Setup) -> f64 {
    (s.lambda() - 1.0) * s.sens.linf()
}

/// The entry of a prior that bounds `diffuse`'s r (the smallest a neighbour moves).
pub fn worst_alpha(alpha: &Prior, s: &Setup) -> f64 {
    worst_pair(alpha, s.sens.is_table()).0
}

/// r with ½λr²Δ2²ψ′(a) = ε, a tenth of it (ε* ≤ Corollary 3): a weak end of the search.
pub fn r_at(s: &Setup, epsilon: f64, a: f64) -> f64 {
    let l2 = s.sens.l2_squared().max(1.0);
    0.1 * (2.0 * epsilon / (s.lambda() * l2 * crate::privacy::special::trigamma(a))).sqrt()
}

/// The draw's price at the plan's ledger order: what a calibrated release is asked at.
pub fn price_at_ledger(draw: &DirichletDraw, s: &Setup) -> f64 {
    draw.price(s.order, &s.sens, s.shape.d).0
}

/// The record schema's family part: `pricing`, `r`, `alpha` (as `alpha` describes it), and
/// with a bound `lower_bound` and `effective_alpha`.
pub fn record_schema_with(
    record: utoipa::openapi::schema::ObjectBuilder,
    alpha: SchemaRef,
) -> utoipa::openapi::schema::ObjectBuilder {
    record
        .property("pricing", schema::component("Pricing"))
        .property("r", schema::component("PositiveNumber"))
        .property("alpha", alpha)
        .property("lower_bound", schema::component("LowerBound"))
        .property(
            "effective_alpha",
            schema::described(
                "Alpha",
                "With `lower_bound`, the prior α + rL the release is priced with.",
            ),
        )
        .required("r")
        .required("alpha")
}

/// [`record_schema_with`] for a prior that may be 0 where a bound supplies it.
pub fn record_schema(
    record: utoipa::openapi::schema::ObjectBuilder,
) -> utoipa::openapi::schema::ObjectBuilder {
    record_schema_with(
        record,
        schema::described(
            "NonNegativeCells",
            "The prior α (0 only in cells where `lower_bound` > 0).",
        ),
    )
}
