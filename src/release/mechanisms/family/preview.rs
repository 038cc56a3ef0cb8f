//! The preview's comparisons for a release with a public lower bound: the same request without
//! the bound (`without_bound`), and seed 003's own (ε, δ) accounting of the bounded draw next to
//! the RDP route the ledger charges (`gohari`). Informational: nothing here is charged.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use super::DirichletDraw;
use crate::privacy::bounded::CellValues;
use crate::privacy::convert::rdp_to_dp;
use crate::privacy::gohari::GohariSetting;
use crate::privacy::types::Relation;
use crate::privacy::{Counts, Delta, Order, Sensitivity};
use crate::release::input::Input;
use crate::release::mechanism::{Draw, PlanError};
use crate::schema::{self, SchemaRef};

/// δ at which the preview's `gohari` comparison is made when the dataset has no (ε, δ) target.
pub const DEFAULT_GOHARI_DELTA: f64 = 1e-5;

/// The family's preview keys for a release with `lower_bound` (none without one): the request
/// solved without the bound, and for one vector Gohari's own accounting.
pub fn extras(
    draw: &DirichletDraw,
    without: impl FnOnce() -> Result<(f64, CellValues), PlanError>,
    d: usize,
    input: &Input,
    ledger_order: Order,
    sens: &Sensitivity,
    dataset_delta: Option<f64>,
) -> Map<String, Value> {
    let mut out = Map::new();
    if draw.lower.is_none() {
        return out;
    }
    fn json(v: impl Serialize) -> Value {
        // Plain numbers, strings and options: serialising cannot fail.
        serde_json::to_value(v).expect("a preview view serialises")
    }
    out.insert(
        "without_bound".into(),
        json(without_bound(without(), d, ledger_order, sens)),
    );
    // Seed 003's own (ε, δ) is stated for one vector.
    if let Input::Vector(counts) = input {
        if let Some(g) = gohari_view(draw, counts, sens, dataset_delta) {
            out.insert("gohari".into(), json(g));
        }
    }
    out
}

/// The schemas of the family's preview keys.
pub fn schemas(
    properties: &mut Vec<(&'static str, SchemaRef)>,
    components: &mut Vec<(String, SchemaRef)>,
) {
    properties.push(("without_bound", schema::component(&WithoutBound::name())));
    properties.push(("gohari", schema::component(&GohariView::name())));
    components.push((WithoutBound::name().into(), WithoutBound::schema()));
    components.push((GohariView::name().into(), GohariView::schema()));
    GohariView::schemas(components);
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
/// and its price at the ledger order), so a user sees the bound's gain; `solved` is the
/// mechanism's own solve with a zero bound.
pub fn without_bound(
    solved: Result<(f64, CellValues), PlanError>,
    d: usize,
    ledger_order: Order,
    sens: &Sensitivity,
) -> WithoutBound {
    match solved {
        Ok((r, alpha)) => {
            let cost = match alpha.to_prior() {
                Some(alpha) => DirichletDraw::new(r, alpha).price(ledger_order, sens, d).0,
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
    }
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
    draw: &DirichletDraw,
    counts: &Counts,
    sens: &Sensitivity,
    dataset_delta: Option<f64>,
) -> Option<GohariView> {
    let DirichletDraw {
        r,
        alpha,
        lower: Some(lower),
        ..
    } = draw
    else {
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
    let single = DirichletDraw::new(*r, alpha.clone());
    for i in 0..=700 {
        let lambda = 1.0 + 10f64.powf(-3.0 + f64::from(i) * 0.01);
        let Ok(order) = Order::new(lambda) else {
            continue;
        };
        let eps = rdp_to_dp(order, single.price(order, sens, d).0, delta_t);
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
