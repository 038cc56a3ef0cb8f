//! Plans for the Dirichlet family with a public lower bound (seed 000 Remark 2 / seed 003) or a
//! prior shape for `posterior` (seed 004 Algorithm 3): calibration, the preview's comparisons
//! (`without_bound`, Gohari's own accounting) and the draw. Pure, like the rest of `release`.
//!
//! Every calibration here solves against [`super::price`], the function that prices the
//! release at the ledger order, so whichever curve `price` uses (001 Corollary 3 or the exact
//! ε*) is the one the parameters are solved for.

use std::borrow::Cow;

use serde::Serialize;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use super::record::{Mechanism, PriorRecord};
use super::{price, Draw, PlanError, Target};
use crate::privacy::bounded::{clamp_excess, solve_monotone, CellValues};
use crate::privacy::calibrate::CalibrationError;
use crate::privacy::convert::rdp_to_dp;
use crate::privacy::gohari::GohariSetting;
use crate::privacy::sampler::{release_shapes, try_sample_dirichlet, CsRng};
use crate::privacy::types::Relation;
use crate::privacy::{Counts, Delta, DirichletParams, Epsilon, Order, Prior, Sensitivity};
use crate::schema::{self, SchemaRef};
/// δ at which the preview's `gohari` comparison is made when the dataset has no (ε, δ) target.
pub const DEFAULT_GOHARI_DELTA: f64 = 1e-5;

/// How a bounded (or prior-shaped) Dirichlet release chooses r and α.
#[derive(Debug, Clone, PartialEq)]
pub enum BoundedMode {
    /// 000 Algorithm 1's rule α = a₀ + 4(λ−1)rΔ∞, r solved against the price with α + rL.
    Dirichlet { target: Target, prior: f64 },
    /// r fixed, α = m·shape with m ≥ 0 solved (004 Algorithm 3; shape 1 per cell by default).
    Posterior {
        target: Target,
        r: f64,
        shape: CellValues,
    },
    /// α ≥ 0 fixed, r solved.
    Diffuse { target: Target, alpha: CellValues },
    /// Nothing solved; α ≥ 0.
    Explicit {
        r: f64,
        alpha: CellValues,
        cap: Option<Epsilon>,
    },
}

/// A Dirichlet-family release with an optional public lower bound.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundedSpec {
    pub mode: BoundedMode,
    pub lower: Option<CellValues>,
}

impl BoundedSpec {
    /// The calibration target, for the calibrated modes.
    pub fn target(&self) -> Option<&Target> {
        match &self.mode {
            BoundedMode::Dirichlet { target, .. }
            | BoundedMode::Posterior { target, .. }
            | BoundedMode::Diffuse { target, .. } => Some(target),
            BoundedMode::Explicit { .. } => None,
        }
    }

    /// The same spec solved for another target (`release::plan` aims at the ledger grid).
    pub fn with_target(&self, target: Target) -> BoundedSpec {
        let mut spec = self.clone();
        match &mut spec.mode {
            BoundedMode::Dirichlet { target: t, .. }
            | BoundedMode::Posterior { target: t, .. }
            | BoundedMode::Diffuse { target: t, .. } => *t = target,
            BoundedMode::Explicit { .. } => {}
        }
        spec
    }
}

fn mode_kind(mode: &BoundedMode) -> super::request::Kind {
    use super::request::Kind;
    match mode {
        BoundedMode::Dirichlet { .. } => Kind::Dirichlet,
        BoundedMode::Posterior { .. } => Kind::Posterior,
        BoundedMode::Diffuse { .. } => Kind::Diffuse,
        BoundedMode::Explicit { .. } => Kind::Explicit,
    }
}

struct Pricer<'a> {
    lower: CellValues,
    sens: &'a Sensitivity,
    d: usize,
}

impl Pricer<'_> {
    /// α + rL, as a prior (None when a cell is not > 0).
    fn effective(&self, r: f64, alpha: &CellValues) -> Option<Prior> {
        alpha.combine(1.0, &self.lower, r, self.d).to_prior()
    }
    fn at(&self, order: Order, r: f64, alpha: &CellValues) -> f64 {
        match self.effective(r, alpha) {
            Some(alpha) => price(&Draw::Dirichlet { r, alpha }, order, self.sens, self.d),
            None => f64::INFINITY,
        }
    }
}

fn infeasible(target: &Target, reason: &str) -> PlanError {
    PlanError::Infeasible(CalibrationError::Infeasible {
        order: target.order.get(),
        epsilon: target.epsilon.get(),
        reason: reason.to_string(),
    })
}

/// Solve (r, α) for `spec` with lower bound `lower` (zero when absent).
fn solve(
    mode: &BoundedMode,
    lower: &CellValues,
    sens: &Sensitivity,
    d: usize,
) -> Result<(f64, CellValues), PlanError> {
    let p = Pricer {
        lower: lower.clone(),
        sens,
        d,
    };
    Ok(match mode {
        BoundedMode::Dirichlet { target, prior } => {
            let (lambda, eps) = (target.order.get(), target.epsilon.get());
            let alpha_of =
                |r: f64| CellValues::Uniform(prior + 4.0 * (lambda - 1.0) * r * sens.linf());
            let r = solve_monotone(|r| p.at(target.order, r, &alpha_of(r)), true, eps, 1.0)
                .ok_or_else(|| infeasible(target, "no concentration r meets the target"))?;
            (r, alpha_of(r))
        }
        BoundedMode::Posterior { target, r, shape } => {
            let eps = target.epsilon.get();
            let at = |m: f64| p.at(target.order, *r, &shape.combine(m, shape, 0.0, d));
            // m = 0 is Gohari's prior-free draw: use it when the bound alone pays for ε.
            let zero = at(0.0);
            let m = if zero.is_finite()
                && zero * (1.0 + crate::privacy::calibrate::CHARGE_INFLATION) <= eps
            {
                0.0
            } else {
                solve_monotone(at, false, eps, 1.0)
                    .ok_or_else(|| infeasible(target, "no prior scale meets the target"))?
            };
            (*r, shape.combine(m, shape, 0.0, d))
        }
        BoundedMode::Diffuse { target, alpha } => {
            let r = solve_monotone(|r| p.at(target.order, r, alpha), true, target.epsilon.get(), 1.0)
                .ok_or_else(|| infeasible(target, "no concentration r meets the target (where alpha is 0, lower_bound must be well above (order − 1)·linf)"))?;
            (r, alpha.clone())
        }
        BoundedMode::Explicit { r, alpha, .. } => (*r, alpha.clone()),
    })
}

/// Plan a bounded / prior-shaped Dirichlet release: (draw, record, cap).
pub fn plan_bounded(
    spec: &BoundedSpec,
    d: usize,
    sens: &Sensitivity,
) -> Result<(Draw, Mechanism, Option<Epsilon>), PlanError> {
    let param = |e: crate::privacy::ParamError| PlanError::Parameter(e.to_string());
    let lower = spec.lower.clone().unwrap_or(CellValues::Uniform(0.0));
    lower.check_dimension(d).map_err(param)?;
    let (target, cap) = match &spec.mode {
        BoundedMode::Dirichlet { target, .. } => (Some(target), None),
        BoundedMode::Posterior { target, shape, .. } => {
            shape.check_dimension(d).map_err(param)?;
            (Some(target), None)
        }
        BoundedMode::Diffuse { target, alpha } => {
            alpha.check_dimension(d).map_err(param)?;
            (Some(target), None)
        }
        BoundedMode::Explicit { alpha, cap, .. } => {
            alpha.check_dimension(d).map_err(param)?;
            (None, *cap)
        }
    };
    let (r, alpha) = solve(&spec.mode, &lower, sens, d)?;
    let effective = alpha.combine(1.0, &lower, r, d).to_prior().ok_or_else(|| {
        PlanError::Parameter(
            "alpha + r * lower_bound must be greater than 0 in every cell (alpha may be 0 only where lower_bound > 0)".into(),
        )
    })?;
    let mut record = Mechanism::dirichlet(mode_kind(&spec.mode), r, alpha).calibrated(target);
    if let BoundedMode::Dirichlet { prior, .. } = &spec.mode {
        record.prior = Some(PriorRecord::Base(*prior));
    }
    if let BoundedMode::Posterior { shape, .. } = &spec.mode {
        record.prior_shape = Some(shape.clone());
    }
    let draw = match &spec.lower {
        Some(l) => {
            record.lower_bound = Some(l.clone());
            record.effective_alpha = Some(CellValues::from(&effective));
            Draw::Bounded {
                r,
                alpha: effective,
                lower: l.clone(),
            }
        }
        None => Draw::Dirichlet {
            r,
            alpha: effective,
        },
    };
    Ok((draw, record, cap))
}

/// With `lower_bound` only: the same request without the bound — the r and α its calibration
/// would give and its cost at the ledger order (null where none exists, e.g. α = 0 alone) — so
/// the bound's gain in r (or in α for `posterior`) can be read off next to `mechanism`. For a
/// table it is priced as the table is (d = cells per row, the table form of the relation).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WithoutBound {
    #[schema(schema_with = nullable_positive, required = true)]
    pub r: Option<f64>,
    #[schema(schema_with = nullable_cells, required = true)]
    pub alpha: Option<CellValues>,
    #[schema(schema_with = nullable_positive, required = true)]
    pub epsilon: Option<f64>,
}

fn nullable_positive() -> SchemaRef {
    schema::nullable(schema::component("PositiveNumber")).into()
}

fn nullable_cells() -> SchemaRef {
    schema::nullable(schema::component("NonNegativeCells")).into()
}

/// The preview's comparison: the same request without the lower bound (r and α it would get,
/// and its price at the ledger order), so a user sees the bound's gain. `None` without a bound.
pub fn without_bound(
    spec: &BoundedSpec,
    d: usize,
    ledger_order: Order,
    sens: &Sensitivity,
) -> Option<WithoutBound> {
    spec.lower.as_ref()?;
    let zero = CellValues::Uniform(0.0);
    Some(match solve(&spec.mode, &zero, sens, d) {
        Ok((r, alpha)) => {
            let cost = match alpha.to_prior() {
                Some(alpha) => price(&Draw::Dirichlet { r, alpha }, ledger_order, sens, d),
                None => f64::INFINITY,
            };
            WithoutBound {
                r: Some(r),
                alpha: Some(alpha),
                epsilon: cost.is_finite().then_some(cost),
            }
        }
        Err(_) => WithoutBound {
            r: None,
            alpha: None,
            epsilon: None,
        },
    })
}

/// The preview's `gohari`: seed 003's own (ε, δ) for the bounded draw, or why it does not apply.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum GohariView {
    Guarantee(GohariGuarantee),
    NotApplicable(GohariNotApplicable),
}

/// Theorem 1's (ε, δ) with its parameters, next to the ledger's RDP route.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GohariGuarantee {
    /// k = rN.
    #[schema(exclusive_minimum = 0)]
    pub k: f64,
    /// η = min L / N.
    #[schema(exclusive_minimum = 0)]
    pub eta: f64,
    pub epsilon: f64,
    #[schema(exclusive_minimum = 0, exclusive_maximum = 1)]
    pub delta: f64,
    #[schema(exclusive_minimum = 0)]
    pub gamma: f64,
    /// Whether this release is the prior-free draw Dir(k·p) that 003's statement covers.
    pub prior_free: bool,
    pub rdp_route: RdpRoute,
}

/// The best CKS20 conversion over orders of the curve the ledger charges (null where there is
/// none).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RdpRoute {
    #[schema(schema_with = nullable_non_negative, required = true)]
    pub epsilon: Option<f64>,
    pub delta: f64,
    #[schema(schema_with = nullable_order, required = true)]
    pub order: Option<f64>,
}

fn nullable_non_negative() -> SchemaRef {
    schema::nullable(schema::number().minimum(Some(0.0))).into()
}

fn nullable_order() -> SchemaRef {
    schema::nullable(schema::component("Order")).into()
}

/// Where Theorem 1 does not apply: `epsilon` is null and `reason` says why.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GohariNotApplicable {
    /// Always null.
    #[schema(schema_with = schema::null)]
    pub epsilon: (),
    pub delta: f64,
    pub reason: String,
    pub prior_free: bool,
}

impl PartialSchema for GohariView {
    fn schema() -> RefOr<Schema> {
        schema::one_of([
            schema::component("GohariGuarantee"),
            schema::component("GohariNotApplicable"),
        ])
        .description(Some(
            "With `lower_bound` on `counts` only (never for a table: Theorem 1 is stated for one \
             vector whose total N stays fixed, and under `replace_one` a record moving between two \
             rows changes both rows' totals): seed 003's own (ε, δ) guarantee (Theorem 1 with the \
             union-bound δ) for Dir(k·p) with k = rN and η = min L / N (N = the submitted total, \
             replace one: h = 1/N, |W| = d − 1, η̄ = η), at the dataset's δ or 1e-5 when it has \
             none, next to `rdp_route`: the best CKS20 conversion over orders of the curve the \
             ledger charges. Informational: the ledger charges the RDP route. 003's statement \
             covers data with every cell ≥ L and the prior-free draw (`prior_free`). Where it \
             does not apply (not `replace_one`, a cell with L = 0, η ≥ (1 − η)/2) `epsilon` is \
             null and `reason` says why.",
        ))
        .into()
    }
}

impl ToSchema for GohariView {
    fn name() -> Cow<'static, str> {
        "Gohari".into()
    }

    fn schemas(schemas: &mut Vec<(String, SchemaRef)>) {
        schemas.push(("GohariGuarantee".into(), GohariGuarantee::schema()));
        schemas.push(("RdpRoute".into(), RdpRoute::schema()));
        schemas.push(("GohariNotApplicable".into(), GohariNotApplicable::schema()));
    }
}

/// The preview's `gohari` key for a bounded release: 003 Theorem 1's (ε, δ) for Dir(k·p) with
/// k = rN and η = min L / N (N = the submitted total; replace one moves two entries of p by 1/N,
/// so h = 1/N; W = d − 1 cells, η̄ = η), next to the RDP route: the best CKS20 conversion over
/// orders of the price this service charges. Gohari's statement covers data with every cell
/// ≥ L and the prior-free draw; `prior_free` says whether this release is that draw.
pub fn gohari_view(
    draw: &Draw,
    counts: &Counts,
    sens: &Sensitivity,
    dataset_delta: Option<f64>,
) -> Option<GohariView> {
    let Draw::Bounded { r, alpha, lower } = draw else {
        return None;
    };
    let d = counts.len();
    let delta = dataset_delta.unwrap_or(DEFAULT_GOHARI_DELTA);
    let n = counts.total();
    let prior_free = (0..d).all(|i| (alpha.at(i) - r * lower.at(i)).abs() <= 1e-12 * alpha.at(i));
    let none = |reason: &str| {
        Some(GohariView::NotApplicable(GohariNotApplicable {
            epsilon: (),
            delta,
            reason: reason.to_string(),
            prior_free,
        }))
    };
    if sens.relation() != Relation::ReplaceOne {
        return none("Gohari et al.'s Theorem 1 covers replace_one datasets only");
    }
    if !(n > 0.0 && lower.min() > 0.0) {
        return none(
            "Gohari et al.'s Theorem 1 needs a lower bound > 0 in every cell and a positive total",
        );
    }
    let setting = GohariSetting {
        k: r * n,
        eta: lower.min() / n,
        eta_bar: lower.min() / n,
        protected: u32::try_from(d - 1).unwrap_or(u32::MAX),
        half_b: 1.0 / n,
    };
    let gohari = match setting.guarantee(delta) {
        Ok(g) => g,
        Err(e) => return none(&e.to_string()),
    };
    let delta_t = Delta::new(delta).ok()?;
    // Best conversion over a log grid of orders λ − 1 ∈ [1e-3, 1e4].
    let (mut best, mut best_order) = (f64::INFINITY, f64::NAN);
    let single = Draw::Dirichlet {
        r: *r,
        alpha: alpha.clone(),
    };
    for i in 0..=700 {
        let lambda = 1.0 + 10f64.powf(-3.0 + f64::from(i) * 0.01);
        let Ok(order) = Order::new(lambda) else {
            continue;
        };
        let eps = rdp_to_dp(order, price(&single, order, sens, d), delta_t);
        if eps < best {
            best = eps;
            best_order = lambda;
        }
    }
    Some(GohariView::Guarantee(GohariGuarantee {
        k: setting.k,
        eta: setting.eta,
        epsilon: gohari.epsilon,
        delta: gohari.delta,
        gamma: gohari.gamma,
        prior_free,
        rdp_route: RdpRoute {
            epsilon: best.is_finite().then_some(best),
            delta,
            order: best.is_finite().then_some(best_order),
        },
    }))
}

/// Draw Dir(r·max(x, L) + α): the counts clamped at the public bound, then the Dirichlet draw.
pub fn execute_bounded(
    r: f64,
    alpha: &Prior,
    lower: &CellValues,
    counts: &Counts,
    rng: &mut CsRng,
) -> Result<Vec<f64>, String> {
    let excess = clamp_excess(counts, lower);
    let params = DirichletParams {
        r,
        alpha: alpha.clone(),
    };
    release_shapes(&excess, &params)
        .map_err(|e| e.to_string())
        .and_then(|s| try_sample_dirichlet(&s, rng).map_err(|e| e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::Sensitivity;

    fn target(order: f64, epsilon: f64) -> Target {
        Target {
            epsilon: Epsilon::new(epsilon).unwrap(),
            order: Order::new(order).unwrap(),
        }
    }

    fn r_of(mode: &BoundedMode, lower: f64) -> (f64, CellValues) {
        solve(
            mode,
            &CellValues::Uniform(lower),
            &Sensitivity::REPLACE_ONE,
            3,
        )
        .unwrap()
    }

    /// The figures quoted in docs/PRIVACY.md ("Public lower bound"): at λ₀ = 22, ε = 0.5,
    /// replace one, d = 3, a bound L = 5 buys a larger r for `dirichlet` and `diffuse`, and a
    /// smaller α for `posterior`; the solved prices stay at ε.
    #[test]
    fn lower_bound_gain_at_l_5() {
        let t = target(22.0, 0.5);
        let sens = Sensitivity::REPLACE_ONE;
        let dir = BoundedMode::Dirichlet {
            target: t,
            prior: 1.0,
        };
        let (r0, _) = r_of(&dir, 0.0);
        let (r5, a5) = r_of(&dir, 5.0);
        let dif = BoundedMode::Diffuse {
            target: t,
            alpha: CellValues::Uniform(1.0),
        };
        let (d0, _) = r_of(&dif, 0.0);
        let (d5, _) = r_of(&dif, 5.0);
        let post = BoundedMode::Posterior {
            target: t,
            r: 1.0,
            shape: CellValues::Uniform(1.0),
        };
        let (_, p0) = r_of(&post, 0.0);
        let (_, p5) = r_of(&post, 5.0);
        println!(
            "dirichlet r {r0} -> {r5}; diffuse r {d0} -> {d5}; posterior alpha {p0:?} -> {p5:?}"
        );
        assert!(r5 > r0 && d5 > d0 && p5.min() < p0.min());
        // The priced effective prior meets ε.
        let eff = a5
            .combine(1.0, &CellValues::Uniform(5.0), r5, 3)
            .to_prior()
            .unwrap();
        let v = price(&Draw::Dirichlet { r: r5, alpha: eff }, t.order, &sens, 3);
        assert!((0.5 * (1.0 - 1e-9)..=0.5).contains(&v), "{v}");
        // Posterior: α + rL is the same effective prior as without the bound.
        assert!(
            (p5.min() + 5.0 - p0.min()).abs() < 1e-9 * p0.min(),
            "{p0:?} {p5:?}"
        );
    }
}
