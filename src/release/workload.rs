//! Accuracy-first planning without the data (issue 22, item 2): for a list of planned releases,
//! each given by its shape, a **public** total n (or a public lower bound of it), a mechanism (or
//! `"auto"`) and either ε or an accuracy target, say which mechanism to run, the cheapest ε on
//! the ledger grid that meets the target, the calibrated parameters, the worst-case forecast,
//! and what the whole list would cost at the dataset's order λ₀ — without charging anything and
//! without any count.
//!
//! Pure: no I/O, no async, no randomness; the answer is a function of the public inputs only
//! ([`plan_workload`]). The wire types ([`PlanRequest`], [`PlanAnswer`]) derive `Serialize` and
//! `Deserialize` and hold nothing of HTTP. Costs come from [`super::plan`], the function every
//! release is calibrated and priced by, so `total_cost` is exactly what the releases would be
//! charged. The bounds are `privacy::accuracy`'s; the search and its guarantees are in
//! docs/PRIVACY.md, "Planning for accuracy".

use std::collections::HashMap;
use std::sync::Mutex;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::exponential::ExponentialSpec;
use super::request::{AlphaRequest, Context, Kind};
use super::{Draw, Noise as SpecNoise, Spec, Target, DEFAULT_PRIOR, DEFAULT_R, FORECAST_BETA};
use crate::ledger::charge::{MAX_EPSILON, QUANTUM_BITS};
use crate::ledger::{charge_for, Units};
use crate::privacy::accuracy::{Bounds, DirichletDraw, Noise, SelectionDraw};
use crate::privacy::curve::dirichlet_price;
use crate::privacy::discrete::{self, MAX_NOISE_SCALE};
use crate::privacy::exact::worst_pair;
use crate::privacy::exponential::{
    exponential_rdp, hellinger_beta, priced_epsilon, BetaCandidates,
};
use crate::privacy::types::Relation;
use crate::privacy::{calibrate, Calibration, Counts, Epsilon, Order, Prior, Sensitivity};
use crate::wire::non_null;

/// The most items one plan may hold (the work is linear in them).
pub const MAX_PLAN_ITEMS: usize = 10_000;
/// The largest public total a plan takes: 2⁵³, past which totals are no longer exact in f64.
pub const MAX_TOTAL: f64 = 9_007_199_254_740_992.0;
/// The confidence of an ℓ2 forecast when none is asked (the previews' 95 %).
pub const DEFAULT_CONFIDENCE: f64 = 1.0 - FORECAST_BETA;

/// One ledger-grid unit, 2⁻⁴⁰.
const GRID: f64 = 1.0 / (1u64 << QUANTUM_BITS) as f64;
/// The ledger's largest value (8192) in grid units.
const MAX_UNITS: u64 = (MAX_EPSILON as u64) << QUANTUM_BITS;

// ------------------------------------------------------------------------------ the wire

/// The plan request: the releases one intends to make.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    pub items: Vec<PlanItem>,
}

/// One planned release. `d` cells (per row for a table of `rows` disjoint groups); a public total
/// `n` or a public `n_lower_bound` (per row for a table); `mechanism` (default `"auto"`); and
/// either `epsilon` or a `target`. `prior`, `r` and `alpha` are the mechanisms' own fields, as
/// in a release request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanItem {
    pub d: u64,
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub rows: Option<u64>,
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub n: Option<f64>,
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub n_lower_bound: Option<f64>,
    #[serde(default)]
    pub mechanism: MechanismChoice,
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub epsilon: Option<f64>,
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub target: Option<AccuracyTarget>,
    /// `dirichlet`'s base prior a₀ (a number) or `exponential`'s Beta prior `[α, β]`.
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub prior: Option<AlphaRequest>,
    /// `posterior`'s (default 1) or `explicit`'s r.
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub r: Option<f64>,
    /// `diffuse`'s or `explicit`'s prior α (a number or one per cell).
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub alpha: Option<AlphaRequest>,
}

/// The accuracy to reach: at least one of `l2` (at `confidence`, default 0.95) and `cell_sd`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccuracyTarget {
    /// ‖y − x/n‖₂ ≤ l2 with probability ≥ confidence, for every count vector of the total.
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub l2: Option<f64>,
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub confidence: Option<f64>,
    /// Every output cell's root-mean-square deviation from the truth, √E[(yᵢ − xᵢ/n)²] (its
    /// standard deviation and bias in quadrature), ≤ cell_sd, for every count vector.
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub cell_sd: Option<f64>,
}

/// `"auto"` or a mechanism's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum MechanismChoice {
    #[default]
    Auto,
    Named(Kind),
}

impl TryFrom<String> for MechanismChoice {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        if name == "auto" {
            return Ok(MechanismChoice::Auto);
        }
        // Never quote the name sent (problem documents echo nothing).
        Kind::try_from(name)
            .map(MechanismChoice::Named)
            .map_err(|e| format!("{e} or auto"))
    }
}

impl From<MechanismChoice> for String {
    fn from(c: MechanismChoice) -> String {
        match c {
            MechanismChoice::Auto => "auto".into(),
            MechanismChoice::Named(k) => k.name().into(),
        }
    }
}

/// The answer for the whole list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanAnswer {
    /// The dataset's ledger order λ₀, at which every cost is charged.
    pub order: f64,
    pub items: Vec<ItemAnswer>,
    /// The sum of the planned items' costs: what the releases would be charged, exact on the
    /// ledger's 2⁻⁴⁰ grid (up to the ledger's maximum, 8192).
    pub total_cost: f64,
    /// The remaining budget the plan was checked against, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<f64>,
    /// Every item planned and `total_cost ≤ remaining`; absent without a remaining budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fits: Option<bool>,
    /// How many items no mechanism can plan.
    pub unreachable: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    Planned,
    Unreachable,
}

/// The answer for one item: the chosen mechanism with its ε, cost, parameters and forecast; or,
/// when nothing reaches the target, the best any mechanism can do and what would reach it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemAnswer {
    pub status: ItemStatus,
    /// The mechanism chosen, or (unreachable) the one that comes closest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mechanism: Option<Kind>,
    /// The `epsilon` to send in the release request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epsilon: Option<f64>,
    /// What the release would be charged at λ₀ (a grid value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Parameters>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<Forecast>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shortfall: Option<Shortfall>,
    /// Every mechanism considered, in the tie-break order.
    pub candidates: Vec<CandidateAnswer>,
}

/// The worst-case forecast: for every count vector with the item's total (or any larger total,
/// for a lower bound), and per row for a table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    /// ‖y − x/n‖₂ ≤ l2 with probability ≥ confidence.
    pub l2: f64,
    pub confidence: f64,
    /// Every output cell's root-mean-square deviation from the truth, √E[(yᵢ − xᵢ/n)²], is at
    /// most this (so is its standard deviation).
    pub cell_sd: f64,
}

/// A parameter given as one number (every cell) or one per cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Values {
    Number(f64),
    PerCell(Vec<f64>),
}

/// The calibrated parameters a release at the planned ε would run with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Parameters {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<Values>,
    /// The exponential mechanism's Beta prior [α, β].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prior: Option<Values>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigma: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
}

/// Why a target is out of reach, and what would reach it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Shortfall {
    /// The largest ε the mechanism is planned at: the ledger's maximum (8192) or, for a
    /// mechanism with a pole (`posterior`, `diffuse`), where more ε no longer buys accuracy.
    pub max_epsilon: f64,
    /// The forecast at `max_epsilon`: the best this mechanism does for this shape and total.
    pub best: Forecast,
    /// The smallest public total at which `max_epsilon` meets the target; absent when none up
    /// to 2⁵³ does, or for the exponential mechanism (whose candidates are fixed by n).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_n: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CandidateStatus {
    /// Chosen: `epsilon` and `cost` are exact.
    Chosen,
    /// Meets the target (or runs at the ε given) but was not chosen.
    Planned,
    Unreachable,
    NotApplicable,
    /// Ruled out without its exact plan (the exponential mechanism in `"auto"`): a lower bound
    /// on its cost (or its error) already exceeds the chosen mechanism's.
    Outranked,
}

/// One mechanism as the planner saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateAnswer {
    pub mechanism: Kind,
    pub status: CandidateStatus,
    /// Target: the price of the continuous optimum before grid rounding (≤ the grid cost, within
    /// ~1e-8 of it); ε given: its cost. What `"auto"` ranks by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_cost: Option<f64>,
    /// The forecast at the planned ε (exact for the chosen candidate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<Forecast>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shortfall: Option<Shortfall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A request the planner refuses, with the field at fault: `items[3].target.confidence`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct WorkloadError {
    pub field: String,
    pub message: String,
}

impl WorkloadError {
    fn at(item: usize, field: &str, message: impl Into<String>) -> Self {
        WorkloadError {
            field: format!("items[{item}].{field}"),
            message: message.into(),
        }
    }
}

// ------------------------------------------------------------------------------ parsing

/// What an item asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Goal {
    Epsilon(Epsilon),
    Target {
        l2: Option<f64>,
        cell_sd: Option<f64>,
    },
    /// `explicit` without a target: its forecast and cost only.
    Given,
}

/// A parsed item: every value valid, every field the chosen mechanism(s) take.
#[derive(Debug, Clone, PartialEq)]
struct Item {
    d: usize,
    rows: Option<usize>,
    n: f64,
    lower_bound: bool,
    choice: MechanismChoice,
    goal: Goal,
    /// β = 1 − confidence.
    beta: f64,
    base_prior: f64,
    beta_prior: (f64, f64),
    r: f64,
    alpha: Option<Prior>,
}

fn finite_positive(item: usize, field: &str, v: f64) -> Result<f64, WorkloadError> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(WorkloadError::at(
            item,
            field,
            "must be a finite number greater than 0",
        ))
    }
}

fn parse_item(i: usize, it: &PlanItem, ctx: &Context) -> Result<Item, WorkloadError> {
    let err = |field: &str, msg: &str| WorkloadError::at(i, field, msg);
    let max = ctx.max_dimension as u64;
    if it.d < 2 {
        return Err(err("d", "must be at least 2"));
    }
    if it.d > max {
        return Err(err(
            "d",
            &format!("exceeds the configured maximum of {max} cells"),
        ));
    }
    let d = it.d as usize;
    if let Some(cells) = ctx.cells.filter(|&cells| cells != d) {
        return Err(err(
            "d",
            &format!("the dataset names {cells} cells, so every release has {cells}"),
        ));
    }
    let rows = match it.rows {
        None => None,
        Some(0) => return Err(err("rows", "a table has at least 1 row")),
        Some(rows) => {
            if rows.saturating_mul(it.d) > max {
                return Err(err(
                    "rows",
                    &format!("rows × d exceeds the configured maximum of {max} cells"),
                ));
            }
            if super::table::check_relation(&ctx.sensitivity).is_err() {
                return Err(err(
                    "rows",
                    "tables need the replace_one or add_remove_one relation",
                ));
            }
            Some(rows as usize)
        }
    };
    let (n, lower_bound, n_field) =
        match (it.n, it.n_lower_bound) {
            (Some(n), None) => (n, false, "n"),
            (None, Some(n)) => (n, true, "n_lower_bound"),
            (Some(_), Some(_)) => return Err(err(
                "n_lower_bound",
                "give n (the public total) or n_lower_bound (a public lower bound of it), not both",
            )),
            (None, None) => return Err(err(
                "n",
                "n (the public total) or n_lower_bound (a public lower bound of it) is required",
            )),
        };
    // Below 2⁵³, where every total is exact in f64 (a JSON number above it may round down to it).
    if !(n.is_finite() && (0.0..MAX_TOTAL).contains(&n)) {
        return Err(err(n_field, "must be a finite number ≥ 0 and below 2^53"));
    }
    let kind = match it.mechanism {
        MechanismChoice::Named(k) => Some(k),
        MechanismChoice::Auto => None,
    };
    let takes = |k: Kind| kind.is_none_or(|named| named == k);
    let goal = match (it.epsilon, it.target, kind) {
        (Some(_), _, Some(Kind::Explicit)) => {
            return Err(err(
                "epsilon",
                "explicit runs with the r and alpha given; give a target to check, or nothing",
            ))
        }
        (None, None, Some(Kind::Explicit)) => Goal::Given,
        (Some(_), Some(_), _) => {
            return Err(err("target", "give epsilon or target, not both"));
        }
        (None, None, _) => return Err(err("target", "epsilon or target is required")),
        (Some(e), None, _) => {
            let e = Epsilon::new(e).map_err(|e| WorkloadError::at(i, "epsilon", e.to_string()))?;
            if e.get() > MAX_EPSILON {
                return Err(err(
                    "epsilon",
                    &format!("exceeds the ledger's maximum of {MAX_EPSILON}"),
                ));
            }
            Goal::Epsilon(e)
        }
        (None, Some(t), _) => {
            if t.l2.is_none() && t.cell_sd.is_none() {
                return Err(err("target", "give l2, cell_sd or both"));
            }
            if t.l2.is_none() && t.confidence.is_some() {
                return Err(err(
                    "target.confidence",
                    "confidence applies to l2 (cell_sd bounds a standard deviation)",
                ));
            }
            Goal::Target {
                l2: t
                    .l2
                    .map(|v| finite_positive(i, "target.l2", v))
                    .transpose()?,
                cell_sd: t
                    .cell_sd
                    .map(|v| finite_positive(i, "target.cell_sd", v))
                    .transpose()?,
            }
        }
    };
    let confidence = it
        .target
        .and_then(|t| t.confidence)
        .unwrap_or(DEFAULT_CONFIDENCE);
    // A bound that holds less often than not bounds nothing; and β = 1 − confidence must be
    // exact enough to report the confidence back.
    if !((0.5..1.0).contains(&confidence)) {
        return Err(err(
            "target.confidence",
            "must be a number ≥ 0.5 and below 1",
        ));
    }
    let not_for = |field: &str| {
        err(
            field,
            &format!(
                "{field} does not apply to the {} mechanism",
                kind.map_or("auto", Kind::name)
            ),
        )
    };
    // prior: dirichlet's a₀ (a number), exponential's [α, β].
    let (mut base_prior, mut beta_prior) = (DEFAULT_PRIOR, (1.0, 1.0));
    match &it.prior {
        None => {}
        Some(AlphaRequest::Scalar(p)) if takes(Kind::Dirichlet) => {
            base_prior = finite_positive(i, "prior", *p)?;
        }
        Some(AlphaRequest::PerCell(v)) if takes(Kind::Exponential) => {
            if v.len() != 2 {
                return Err(err("prior", "the exponential prior is [alpha, beta]"));
            }
            beta_prior = (
                finite_positive(i, "prior", v[0])?,
                finite_positive(i, "prior", v[1])?,
            );
        }
        Some(AlphaRequest::Scalar(_)) if takes(Kind::Exponential) => {
            return Err(err("prior", "the exponential prior is [alpha, beta]"));
        }
        Some(AlphaRequest::PerCell(_)) if takes(Kind::Dirichlet) => {
            return Err(err("prior", "the dirichlet prior is a number"));
        }
        Some(_) => return Err(not_for("prior")),
    }
    let r = match it.r {
        None if kind == Some(Kind::Explicit) => {
            return Err(err("r", "the explicit mechanism needs r"))
        }
        None => DEFAULT_R,
        Some(r) if takes(Kind::Posterior) || kind == Some(Kind::Explicit) => {
            finite_positive(i, "r", r)?
        }
        Some(_) => return Err(not_for("r")),
    };
    let alpha = match &it.alpha {
        None if matches!(kind, Some(Kind::Diffuse | Kind::Explicit)) => {
            return Err(err(
                "alpha",
                &format!("the {} mechanism needs alpha", kind.map_or("", Kind::name)),
            ))
        }
        None => None,
        Some(a) if takes(Kind::Diffuse) || kind == Some(Kind::Explicit) => {
            let prior = match a {
                AlphaRequest::Scalar(v) => Prior::uniform(*v),
                AlphaRequest::PerCell(v) => Prior::per_cell(v.clone()),
            }
            .map_err(|e| WorkloadError::at(i, "alpha", e.to_string()))?;
            prior
                .check_dimension(d)
                .map_err(|e| WorkloadError::at(i, "alpha", e.to_string()))?;
            Some(prior)
        }
        Some(_) => return Err(not_for("alpha")),
    };
    let item = Item {
        d,
        rows,
        n,
        lower_bound,
        choice: it.mechanism,
        goal,
        beta: 1.0 - confidence,
        base_prior,
        beta_prior,
        r,
        alpha,
    };
    if let Some(k) = kind {
        applicable_at(k, &item, ctx).map_err(|(field, reason)| err(field, &reason))?;
    }
    Ok(item)
}

/// Whether mechanism `k` can run this item at all (the reason if not).
fn applicable(k: Kind, item: &Item, ctx: &Context) -> Result<(), String> {
    applicable_at(k, item, ctx).map_err(|(_, reason)| reason)
}

/// [`applicable`], with the field that makes a named mechanism inapplicable.
fn applicable_at(k: Kind, item: &Item, ctx: &Context) -> Result<(), (&'static str, String)> {
    let no = |field: &'static str, reason: &str| Err((field, reason.to_string()));
    match k {
        Kind::Gaussian | Kind::Laplace => discrete::integer_sensitivity(&ctx.sensitivity)
            .map(|_| ())
            .map_err(|reason| ("mechanism", reason)),
        Kind::Exponential => {
            if item.d != 2 {
                return no(
                    "d",
                    "the exponential mechanism releases one two-cell vector (d = 2)",
                );
            }
            if item.rows.is_some() {
                return no("rows", "the exponential mechanism does not release tables");
            }
            if ctx.sensitivity.relation() != Relation::ReplaceOne {
                return no(
                    "mechanism",
                    "the exponential mechanism needs the replace_one relation",
                );
            }
            if item.lower_bound {
                return no(
                    "n_lower_bound",
                    "the exponential mechanism needs the exact public total n: its candidates are the n + 1 posteriors",
                );
            }
            if item.n.fract() != 0.0 {
                return no("n", "the exponential mechanism needs a whole number n");
            }
            if item.n > ctx.max_exponential_n as f64 {
                return no(
                    "n",
                    &format!(
                        "the exponential mechanism takes n up to {}",
                        ctx.max_exponential_n
                    ),
                );
            }
            Ok(())
        }
        Kind::Diffuse if item.alpha.is_none() => no("alpha", "diffuse needs alpha"),
        _ => Ok(()),
    }
}

// ------------------------------------------------------------------------------ mechanisms

/// The parameters of one calibrated release.
#[derive(Debug, Clone, PartialEq)]
enum Params {
    Dirichlet { r: f64, alpha: Prior },
    Gaussian { sigma: f64 },
    Laplace { scale: f64 },
    Exponential { epsilon: f64 },
}

/// A mechanism as the planner runs it: its calibration, price, bounds and one scalar "strength"
/// t (more ε, more t) along which both the price and the accuracy are monotone.
#[derive(Debug, Clone)]
enum Mech {
    Dirichlet {
        a0: f64,
    },
    Posterior {
        r: f64,
    },
    Diffuse {
        alpha: Prior,
    },
    Explicit {
        r: f64,
        alpha: Prior,
    },
    Gaussian,
    Laplace,
    Exponential {
        candidates: BetaCandidates,
        law: SelectionDraw,
    },
}

type Selection = Result<(BetaCandidates, SelectionDraw), String>;

/// The exponential mechanism's candidates and bounds by (n, α, β), computed when first needed:
/// they take n Hellinger distances, so a plan computes them once per distinct key.
#[derive(Default)]
struct Selections(Mutex<HashMap<(u64, u64, u64), Selection>>);

impl Selections {
    fn get(&self, item: &Item) -> Selection {
        let (a, b) = item.beta_prior;
        let key = (item.n as u64, a.to_bits(), b.to_bits());
        if let Some(found) = self.0.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return found;
        }
        // Computed outside the lock (two items may race to compute the same key: same value).
        let computed = BetaCandidates::new(item.n as u64, a, b)
            .map(|c| (c, SelectionDraw::new(&c)))
            .map_err(|e| e.to_string());
        if let Ok(mut m) = self.0.lock() {
            m.insert(key, computed.clone());
        }
        computed
    }
}

/// Lower bounds on the exponential mechanism's forecasts in O(1), for ruling it out without
/// its O(n) sensitivity (`SelectionDraw::from_parts`): Δ̃ replaced by the larger of the two
/// edge steps, which the computed Δ̂_g is the maximum of with others, and E by 0.
fn optimistic_selection(item: &Item) -> SelectionDraw {
    let (a, b) = item.beta_prior;
    let n = item.n;
    let edge = if n >= 1.0 {
        hellinger_beta(a, b + n, a + 1.0, b + n - 1.0).max(hellinger_beta(
            a + n - 1.0,
            b + 1.0,
            a + n,
            b,
        ))
    } else {
        0.0
    };
    SelectionDraw::from_parts(n as u64, a, b, edge, 0.0)
}

/// The dataset-side context of one item: how it is priced and what its bounds are about.
struct Setup<'a> {
    item: &'a Item,
    order: Order,
    /// The sensitivity the release is priced under (the table form for a table).
    sens: Sensitivity,
}

impl Setup<'_> {
    fn lambda(&self) -> f64 {
        self.order.get()
    }

    fn forecast(&self, b: Bounds) -> Forecast {
        Forecast {
            l2: b.l2,
            confidence: 1.0 - self.item.beta,
            cell_sd: b.cell_sd,
        }
    }

    /// Whether bounds meet the item's target, and by how much in log terms (≤ 0: met).
    fn gap(&self, b: Bounds) -> f64 {
        let Goal::Target { l2, cell_sd } = self.item.goal else {
            return 0.0;
        };
        let mut g = f64::NEG_INFINITY;
        if let Some(t) = l2 {
            g = g.max((b.l2 / t).ln());
        }
        if let Some(t) = cell_sd {
            g = g.max((b.cell_sd / t).ln());
        }
        if g.is_nan() {
            f64::INFINITY
        } else {
            g
        }
    }

    fn meets(&self, b: Bounds) -> bool {
        self.gap(b) <= 0.0
    }
}

impl Mech {
    fn kind(&self) -> Kind {
        match self {
            Mech::Dirichlet { .. } => Kind::Dirichlet,
            Mech::Posterior { .. } => Kind::Posterior,
            Mech::Diffuse { .. } => Kind::Diffuse,
            Mech::Explicit { .. } => Kind::Explicit,
            Mech::Gaussian => Kind::Gaussian,
            Mech::Laplace => Kind::Laplace,
            Mech::Exponential { .. } => Kind::Exponential,
        }
    }

    fn new(k: Kind, item: &Item, selections: &Selections) -> Result<Mech, String> {
        Ok(match k {
            Kind::Dirichlet => Mech::Dirichlet {
                a0: item.base_prior,
            },
            Kind::Posterior => Mech::Posterior { r: item.r },
            Kind::Diffuse => Mech::Diffuse {
                alpha: item.alpha.clone().ok_or("diffuse needs alpha")?,
            },
            Kind::Explicit => Mech::Explicit {
                r: item.r,
                alpha: item.alpha.clone().ok_or("explicit needs alpha")?,
            },
            Kind::Gaussian => Mech::Gaussian,
            Kind::Laplace => Mech::Laplace,
            Kind::Exponential => {
                let (candidates, law) = selections.get(item)?;
                Mech::Exponential { candidates, law }
            }
        })
    }

    /// The release's own spec at ε (calibrated at λ₀, as a release without `order` is).
    fn spec(&self, epsilon: Epsilon, s: &Setup) -> Spec {
        let target = Target {
            epsilon,
            order: s.order,
        };
        match self {
            Mech::Dirichlet { a0 } => Spec::Dirichlet { target, prior: *a0 },
            Mech::Posterior { r } => Spec::Posterior { target, r: *r },
            Mech::Diffuse { alpha } => Spec::Diffuse {
                target,
                alpha: alpha.clone(),
            },
            Mech::Explicit { r, alpha } => Spec::Explicit {
                r: *r,
                alpha: alpha.clone(),
                cap: None,
            },
            Mech::Gaussian => Spec::Gaussian(SpecNoise::Calibrated(target)),
            Mech::Laplace => Spec::Laplace(SpecNoise::Calibrated(target)),
            Mech::Exponential { candidates, .. } => Spec::Exponential(ExponentialSpec {
                epsilon,
                prior: candidates.prior(),
                n: candidates.n(),
            }),
        }
    }

    /// The parameters a release asked at `units`·2⁻⁴⁰ runs with: the calibrations
    /// [`super::plan`] calls, on the same grid value. `None` where no release is possible.
    fn calibrated(&self, units: u64, s: &Setup) -> Option<Params> {
        let epsilon = Epsilon::new(units as f64 * GRID).ok()?;
        let d = s.item.d;
        let dirichlet = |cal: Calibration| {
            calibrate(&cal, s.order, epsilon, &s.sens)
                .ok()
                .map(|p| Params::Dirichlet {
                    r: p.r,
                    alpha: p.alpha,
                })
        };
        match self {
            Mech::Dirichlet { a0 } => dirichlet(Calibration::Dirichlet { prior: *a0 }),
            Mech::Posterior { r } => dirichlet(Calibration::Posterior { r: *r }),
            Mech::Diffuse { alpha } => dirichlet(Calibration::Diffuse {
                alpha: alpha.clone(),
            }),
            Mech::Explicit { r, alpha } => Some(Params::Dirichlet {
                r: *r,
                alpha: alpha.clone(),
            }),
            Mech::Gaussian => discrete::gaussian_sigma(s.order, epsilon, &s.sens)
                .ok()
                .filter(|v| *v <= MAX_NOISE_SCALE)
                .map(|sigma| Params::Gaussian { sigma }),
            Mech::Laplace => discrete::laplace_scale(s.order, epsilon, &s.sens, d)
                .ok()
                .filter(|v| *v <= MAX_NOISE_SCALE)
                .map(|scale| Params::Laplace { scale }),
            Mech::Exponential { candidates, .. } => (epsilon.get() <= candidates.max_epsilon())
                .then_some(Params::Exponential {
                    epsilon: epsilon.get(),
                }),
        }
    }

    /// The worst-case bounds of a release with these parameters, at total n.
    fn bounds(&self, p: &Params, n: f64, s: &Setup) -> Bounds {
        self.some_bounds(p, n, s, (true, true))
    }

    /// The bounds the item's target asks about (the others are 0 and must not be read): what
    /// the searches compare, at the cost of the bounds they need only.
    fn target_bounds(&self, p: &Params, n: f64, s: &Setup) -> Bounds {
        let need = match s.item.goal {
            Goal::Target { l2, cell_sd } => (l2.is_some(), cell_sd.is_some()),
            _ => (true, true),
        };
        self.some_bounds(p, n, s, need)
    }

    fn some_bounds(&self, p: &Params, n: f64, s: &Setup, (l2, sd): (bool, bool)) -> Bounds {
        let d = s.item.d;
        let beta = s.item.beta;
        let none = Bounds {
            l2: f64::INFINITY,
            cell_sd: f64::INFINITY,
        };
        let pick = |a: bool, f: &dyn Fn() -> f64| if a { f() } else { 0.0 };
        match (self, p) {
            (Mech::Exponential { law, .. }, Params::Exponential { epsilon }) => Bounds {
                l2: pick(l2, &|| law.l2(*epsilon, beta)),
                cell_sd: pick(sd, &|| law.cell_sd(*epsilon)),
            },
            (_, Params::Dirichlet { r, alpha }) => match DirichletDraw::new(*r, alpha, d) {
                Some(draw) => Bounds {
                    l2: pick(l2, &|| draw.l2(n, beta)),
                    cell_sd: pick(sd, &|| draw.cell_sd(n)),
                },
                None => none,
            },
            (_, Params::Gaussian { sigma }) => {
                let noise = Noise::Gaussian { sigma: *sigma };
                Bounds {
                    l2: pick(l2, &|| noise.l2(d, n, beta)),
                    cell_sd: pick(sd, &|| noise.cell_sd(d, n)),
                }
            }
            (_, Params::Laplace { scale }) => {
                let noise = Noise::Laplace { scale: *scale };
                Bounds {
                    l2: pick(l2, &|| noise.l2(d, n, beta)),
                    cell_sd: pick(sd, &|| noise.cell_sd(d, n)),
                }
            }
            _ => none,
        }
    }

    /// The target's bounds at the item's total, checked against what f64 can carry at that
    /// total (a release the service would refuse meets nothing).
    fn exact_bounds(&self, p: &Params, s: &Setup) -> Option<Bounds> {
        feasible(p, s).ok()?;
        Some(self.target_bounds(p, s.item.n, s))
    }

    /// The price at λ₀ of a release with these parameters: the curve the ledger charges.
    fn price(&self, p: &Params, s: &Setup) -> f64 {
        match p {
            Params::Dirichlet { r, alpha } => dirichlet_price(s.order, *r, alpha, &s.sens).0,
            Params::Gaussian { sigma } => discrete::gaussian_rdp(s.order, *sigma, &s.sens),
            Params::Laplace { scale } => discrete::laplace_rdp(s.order, *scale, &s.sens, s.item.d),
            Params::Exponential { epsilon } => {
                exponential_rdp(s.lambda(), priced_epsilon(*epsilon))
            }
        }
    }

    /// The `epsilon` a release request gives for these parameters: the exponential mechanism's
    /// own ε; for the calibrated mechanisms their price (they are calibrated to it).
    fn request_epsilon(&self, p: &Params, s: &Setup) -> f64 {
        match p {
            Params::Exponential { epsilon } => *epsilon,
            _ => self.price(p, s),
        }
    }

    /// What the ledger charges for a release whose continuous optimum prices at `price`: the
    /// calibrated mechanisms are charged the grid value they are asked at (≥ the price); the
    /// exponential mechanism its price inflated and rounded up.
    fn cost_of_price(&self, price: f64) -> f64 {
        match self {
            Mech::Exponential { .. } | Mech::Explicit { .. } => {
                charge_for(price).map_or(f64::INFINITY, Units::to_f64)
            }
            _ => price,
        }
    }

    /// The pole of the strength parameter, where one exists (posterior's α, diffuse's r).
    fn pole(&self, s: &Setup) -> Option<f64> {
        let k = (s.lambda() - 1.0) * s.sens.linf();
        match self {
            Mech::Posterior { r } => Some(k * r),
            Mech::Diffuse { alpha } => Some(worst_pair(alpha, s.sens.is_table()).0 / k),
            _ => None,
        }
    }

    /// The parameters at strength t, without calibrating (the continuous search): r = eᵗ
    /// (dirichlet, α = a₀ + 4(λ−1)rΔ∞), α = pole + e^{−t} (posterior), r = pole/(1 + e^{−t})
    /// (diffuse), σ or b = e^{−t}, the exponential ε = eᵗ.
    fn params_at(&self, t: f64, s: &Setup) -> Params {
        let dirichlet = |r: f64, alpha: Prior| Params::Dirichlet { r, alpha };
        match self {
            Mech::Dirichlet { a0 } => {
                let r = t.exp();
                let a = a0 + 4.0 * (s.lambda() - 1.0) * r * s.sens.linf();
                dirichlet(r, Prior::Uniform(a))
            }
            Mech::Posterior { r } => {
                let pole = self.pole(s).unwrap_or(0.0);
                dirichlet(*r, Prior::Uniform(pole + (-t).exp()))
            }
            Mech::Diffuse { alpha } => {
                let pole = self.pole(s).unwrap_or(0.0);
                dirichlet(pole / (1.0 + (-t).exp()), alpha.clone())
            }
            Mech::Explicit { r, alpha } => dirichlet(*r, alpha.clone()),
            Mech::Gaussian => Params::Gaussian { sigma: (-t).exp() },
            Mech::Laplace => Params::Laplace { scale: (-t).exp() },
            Mech::Exponential { .. } => Params::Exponential { epsilon: t.exp() },
        }
    }

    /// The strength of calibrated parameters (the inverse of [`Self::params_at`]).
    fn strength(&self, p: &Params, s: &Setup) -> f64 {
        match (self, p) {
            (Mech::Posterior { .. }, Params::Dirichlet { alpha, .. }) => {
                -(alpha.min() - self.pole(s).unwrap_or(0.0)).ln()
            }
            (Mech::Diffuse { .. }, Params::Dirichlet { r, .. }) => {
                let pole = self.pole(s).unwrap_or(f64::INFINITY);
                (r / (pole - r)).ln()
            }
            (_, Params::Dirichlet { r, .. }) => r.ln(),
            (_, Params::Gaussian { sigma }) => -sigma.ln(),
            (_, Params::Laplace { scale }) => -scale.ln(),
            (_, Params::Exponential { epsilon }) => epsilon.ln(),
        }
    }
}

/// Whether f64 can carry a release with these parameters for every count vector of the item's
/// total: `release::check_shapes` on the worst case, every record in the cell of the largest
/// prior (the largest Gamma shape fl(fl(r·n) + α_max); the guard and the shape cap are monotone
/// in it). For a lower bound this is checked at the bound: the guard binds only near 2³²
/// records per cell.
fn feasible(p: &Params, s: &Setup) -> Result<(), String> {
    let Params::Dirichlet { r, alpha } = p else {
        return Ok(());
    };
    let n = s.item.n;
    let (counts, draw) = if s.sens.relation() == Relation::Custom {
        // The custom guard depends on d: the whole vector, every record in the first cell of
        // the largest prior.
        let d = s.item.d;
        let top = (0..d).fold(0, |b, i| if alpha.at(i) > alpha.at(b) { i } else { b });
        let mut x = vec![0.0; d];
        x[top] = n;
        (
            x,
            Draw::Dirichlet {
                r: *r,
                alpha: alpha.clone(),
            },
        )
    } else {
        let max = (0..s.item.d).fold(alpha.min(), |m, i| m.max(alpha.at(i)));
        (
            vec![n, 0.0],
            Draw::Dirichlet {
                r: *r,
                alpha: Prior::PerCell(vec![max, alpha.min()]),
            },
        )
    };
    let counts = Counts::new(counts, usize::MAX).map_err(|e| e.to_string())?;
    super::check_shapes(&draw, &counts, &s.sens).map_err(|e| e.to_string())
}

// ------------------------------------------------------------------------------ the search

/// What the search found for one mechanism.
#[derive(Debug, Clone)]
enum Found {
    /// Meets the target; `units` is exact once refined.
    Reaches {
        estimate: f64,
        units: Option<u64>,
        lo: u64,
        hi: u64,
    },
    Short(Shortfall),
    Fails(String),
}

/// Illinois (regula falsi with halving) on g over [a, b] with g(a) > 0 ≥ g(b): the point at
/// which the target is just met, from the meeting side.
fn illinois(g: impl Fn(f64) -> f64, mut a: f64, mut ga: f64, mut b: f64, mut gb: f64) -> f64 {
    let mut side = 0;
    for _ in 0..100 {
        if (b - a).abs() <= 1e-13 * (1.0 + a.abs().max(b.abs())) {
            break;
        }
        let mut c = (a * gb - b * ga) / (gb - ga);
        if !(c > a.min(b) && c < a.max(b)) {
            c = 0.5 * (a + b);
        }
        let gc = g(c);
        if gc > 0.0 {
            a = c;
            ga = gc;
            if side == -1 {
                gb *= 0.5;
            }
            side = -1;
        } else {
            b = c;
            gb = gc;
            if side == 1 {
                ga *= 0.5;
            }
            side = 1;
        }
    }
    b
}

impl Mech {
    /// The strongest parameters the plan considers: calibrated at the ledger's maximum ε, or for
    /// a mechanism with a pole, a relative 1e-9 short of it (further ε moves the forecast by
    /// less than 1e-9 and the price up only logarithmically).
    fn strongest(&self, s: &Setup) -> Option<(Params, f64)> {
        if let Mech::Exponential { candidates, .. } = self {
            // Its ε is bounded by what the integer weights represent exactly.
            let units = ((candidates.max_epsilon() / GRID).floor() as u64).min(MAX_UNITS);
            let epsilon = units as f64 * GRID;
            return (units > 0).then_some((Params::Exponential { epsilon }, epsilon));
        }
        // Next to a pole (ε* grows only logarithmically there, so it is usually far below the
        // ledger's top), the parameter 1e-9 short of it; a calibration at the top would only
        // fail, slowly, beyond the curve's reach.
        let near_pole = self.pole(s).and_then(|pole| match self {
            Mech::Posterior { r } => Some(Params::Dirichlet {
                r: *r,
                alpha: Prior::Uniform(pole * (1.0 + 1e-9)),
            }),
            Mech::Diffuse { alpha } => Some(Params::Dirichlet {
                r: pole * (1.0 - 1e-9),
                alpha: alpha.clone(),
            }),
            _ => None,
        });
        if let Some(p) = near_pole {
            let price = self.price(&p, s);
            if price.is_finite() && price < MAX_EPSILON {
                return Some((p, price));
            }
        }
        self.calibrated(MAX_UNITS, s).map(|p| (p, MAX_EPSILON))
    }

    /// The smallest public total at which `p` meets the target (bisection; the bounds fall with
    /// n), rounded up to a whole number.
    fn min_n(&self, p: &Params, s: &Setup) -> Option<f64> {
        if matches!(self, Mech::Exponential { .. }) {
            return None;
        }
        let meets = |n: f64| s.meets(self.target_bounds(p, n, s));
        let mut lo = s.item.n.max(0.0);
        let mut hi = (2.0 * lo).max(1.0);
        while !meets(hi) {
            lo = hi;
            hi *= 4.0;
            if hi > MAX_TOTAL {
                return None;
            }
        }
        while hi - lo > 0.5 && hi > lo * (1.0 + 1e-12) {
            let mid = 0.5 * (lo + hi);
            if meets(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi.ceil())
    }

    /// Out of reach: what the strongest parameters do. A forecast that f64 cannot carry there
    /// (an overflow at extreme totals or priors) says nothing, so the mechanism is not
    /// applicable rather than short of a non-number.
    fn shortfall(&self, best: &Params, max_epsilon: f64, s: &Setup) -> Found {
        let forecast = s.forecast(self.bounds(best, s.item.n, s));
        if !(forecast.l2.is_finite() && forecast.cell_sd.is_finite()) {
            return Found::Fails(
                "its forecast at the largest ε is not finite in f64 for this total and prior"
                    .into(),
            );
        }
        Found::Short(Shortfall {
            max_epsilon,
            best: forecast,
            min_n: self.min_n(best, s),
        })
    }

    /// Meets the target at this grid value (calibrated exactly as the release would be)?
    fn meets_at(&self, units: u64, s: &Setup) -> bool {
        self.calibrated(units, s)
            .and_then(|p| self.exact_bounds(&p, s))
            .is_some_and(|b| s.meets(b))
    }

    /// The largest grid value this mechanism can be asked at.
    fn max_units(&self) -> u64 {
        match self {
            Mech::Exponential { candidates, .. } => {
                ((candidates.max_epsilon() / GRID).floor() as u64).min(MAX_UNITS)
            }
            _ => MAX_UNITS,
        }
    }

    /// Strengths t below the smallest grid ε and above the ledger's largest, from the curves'
    /// leading terms (no calibration): they only bracket the continuous search, and a wrong
    /// guess only sends it to [`Self::analyse_exactly`].
    fn analytic_ends(&self, s: &Setup) -> (f64, f64) {
        let lambda = s.lambda();
        let l2 = s.sens.l2_squared().max(1.0);
        let linf = s.sens.linf();
        // r with ½λr²Δ2²ψ′(a) = ε, a tenth of it (ε* ≤ Corollary 3).
        let r_at = |epsilon: f64, a: f64| {
            0.1 * (2.0 * epsilon / (lambda * l2 * crate::privacy::special::trigamma(a))).sqrt()
        };
        match self {
            Mech::Dirichlet { a0 } => {
                // Far out ε ≈ λΔ2²r/(6(λ − 1)Δ∞) (ψ′(z) ≈ 1/z); ten times that r.
                let strong = 10.0 * MAX_EPSILON * 6.0 * (lambda - 1.0) * linf / (lambda * l2);
                (r_at(GRID, *a0).ln(), strong.max(1.0).ln())
            }
            Mech::Posterior { r } => {
                let pole = self.pole(s).unwrap_or(0.0);
                // ε ≈ ½λr²Δ2²/(α − pole) far from the pole; 1e-9 of the pole near it.
                let far = 10.0 * lambda * r * r * l2 / (2.0 * GRID);
                (-far.ln(), -(pole * 1e-9).ln())
            }
            Mech::Diffuse { alpha } => {
                let pole = self.pole(s).unwrap_or(0.0);
                let r = r_at(GRID, alpha.min()).min(0.5 * pole);
                ((r / (pole - r)).ln(), 1e9f64.ln())
            }
            Mech::Gaussian => {
                let sigma = |epsilon: f64| (lambda * l2 / (2.0 * epsilon)).sqrt();
                let weak = (10.0 * sigma(GRID)).min(MAX_NOISE_SCALE);
                (-weak.ln(), -(0.1 * sigma(MAX_EPSILON)).ln())
            }
            Mech::Laplace => {
                // D₁ ≈ λu²/2 for small u, ≈ u for large u (u = 1/b), up to two cells.
                let weak = (10.0 * (lambda / (2.0 * GRID)).sqrt()).min(MAX_NOISE_SCALE);
                (-weak.ln(), -(0.1 / MAX_EPSILON).ln())
            }
            Mech::Exponential { .. } => (GRID.ln(), (self.max_units() as f64 * GRID).ln()),
            Mech::Explicit { .. } => (0.0, 0.0),
        }
    }

    /// Where the continuous search cannot bracket the answer (an end rounds the wrong way, or
    /// f64's limits refuse a release the bounds would accept), the grid is searched whole,
    /// with the release's own calibrations.
    fn whole_grid(&self, s: &Setup) -> Found {
        // From the strongest grid value the mechanism reaches (the top, or next to its pole),
        // which must meet the target.
        let top = self.strongest(s).map_or(0, |(_, e)| {
            ((e / GRID).floor() as u64).min(self.max_units())
        });
        let found = (top > 0 && self.meets_at(top, s))
            .then(|| self.refine(0, top, s))
            .flatten();
        match found {
            Some(units) => Found::Reaches {
                estimate: self.cost_of_price(units as f64 * GRID),
                units: Some(units),
                lo: units - 1,
                hi: units,
            },
            None => Found::Fails(
                "no grid value meets the target with a release f64 can carry at this total".into(),
            ),
        }
    }

    /// The continuous search: the cheapest ε at which the target is met, before grid rounding,
    /// and a bracket of grid values around it. Illinois in the strength t on the bounds of the
    /// parameters at t, between analytic ends; the answer's price is the continuous optimum.
    fn analyse(&self, s: &Setup) -> Found {
        let g = |t: f64| {
            let gap = s.gap(self.target_bounds(&self.params_at(t, s), s.item.n, s));
            gap.clamp(-50.0, 50.0)
        };
        let (tw, ts) = self.analytic_ends(s);
        let gs = g(ts);
        if !(tw.is_finite() && ts.is_finite() && tw < ts && gs <= 0.0) {
            // Possibly out of reach: decide with the release's own calibration at the top.
            return self.analyse_exactly(s);
        }
        let gw = g(tw);
        if gw <= 0.0 {
            // Met even at the weakest strength: the grid's first value, if f64 carries it.
            return self.at_the_bottom(s);
        }
        let root = self.params_at(illinois(g, tw, gw, ts, gs), s);
        // Beyond the ledger's top: decide with the release's own calibration there.
        self.bracket(root, s)
            .unwrap_or_else(|| self.analyse_exactly(s))
    }

    /// The grid bracket around a continuous optimum `root`; `None` if it lies above the
    /// largest grid value.
    fn bracket(&self, root: Params, s: &Setup) -> Option<Found> {
        if let Err(reason) = feasible(&root, s) {
            return Some(Found::Fails(reason));
        }
        let (epsilon, price) = (self.request_epsilon(&root, s), self.price(&root, s));
        if !(epsilon.is_finite() && epsilon > 0.0 && price.is_finite()) {
            return Some(self.whole_grid(s));
        }
        let max_units = self.max_units();
        if epsilon / GRID > max_units as f64 {
            return None;
        }
        // A release asked at ε is calibrated to a price in ε·[1 − 9e-10, 1 − 1e-10]
        // (`calibrate`'s contract), so the cheapest grid value lies just above the optimum's
        // price; `refine` widens the bracket if it does not.
        let lo = ((epsilon * (1.0 - 1e-11) / GRID).floor() as u64).min(max_units);
        let hi = ((epsilon * (1.0 + 1e-9) / GRID).ceil() as u64).clamp(1, max_units);
        Some(Found::Reaches {
            estimate: self.cost_of_price(price),
            units: None,
            lo,
            hi,
        })
    }

    /// The smallest grid value, if it meets the target; else the whole grid.
    fn at_the_bottom(&self, s: &Setup) -> Found {
        match self.calibrated(1, s) {
            Some(weak) if self.exact_bounds(&weak, s).is_some_and(|b| s.meets(b)) => {
                Found::Reaches {
                    estimate: self.cost_of_price(self.price(&weak, s)),
                    units: Some(1),
                    lo: 0,
                    hi: 1,
                }
            }
            _ => self.whole_grid(s),
        }
    }

    /// The continuous search between the release's own calibrations at the grid's ends (or the
    /// pole): reports the shortfall at the top when the target is out of reach.
    fn analyse_exactly(&self, s: &Setup) -> Found {
        let Some((strong, max_epsilon)) = self.strongest(s) else {
            return Found::Fails(
                "no parameters of this mechanism have a finite price at the ledger order".into(),
            );
        };
        if !s.meets(self.target_bounds(&strong, s.item.n, s)) {
            return self.shortfall(&strong, max_epsilon, s);
        }
        let Some(weak) = self.calibrated(1, s) else {
            return self.whole_grid(s);
        };
        if self.exact_bounds(&weak, s).is_some_and(|b| s.meets(b)) {
            return self.at_the_bottom(s);
        }
        let g = |t: f64| {
            let gap = s.gap(self.target_bounds(&self.params_at(t, s), s.item.n, s));
            gap.clamp(-50.0, 50.0)
        };
        let (ta, tb) = (self.strength(&weak, s), self.strength(&strong, s));
        let (ga, gb) = (g(ta), g(tb));
        if !(ta.is_finite() && tb.is_finite() && ga > 0.0 && gb <= 0.0) {
            return self.whole_grid(s);
        }
        let root = self.params_at(illinois(g, ta, ga, tb, gb), s);
        // Past the top only by rounding (the top meets): the grid below it.
        self.bracket(root, s).unwrap_or_else(|| self.whole_grid(s))
    }

    /// The cheapest grid value in (lo, hi] that meets the target, widening the bracket until
    /// lo fails and hi meets, then bisecting. `None` if even the largest fails.
    fn refine(&self, mut lo: u64, mut hi: u64, s: &Setup) -> Option<u64> {
        let top = self.max_units();
        let mut widen = 64u64;
        while !self.meets_at(hi, s) {
            if hi >= top {
                return None;
            }
            lo = hi;
            hi = hi
                .saturating_add(hi.div_ceil(1 << 20).max(1).saturating_mul(widen))
                .min(top);
            widen = widen.saturating_mul(64);
        }
        let mut widen = 64u64;
        while lo > 0 && self.meets_at(lo, s) {
            hi = lo;
            lo = lo.saturating_sub(lo.div_ceil(1 << 20).max(1).saturating_mul(widen));
            widen = widen.saturating_mul(64);
        }
        // lo fails (or is 0, below the grid), hi meets.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.meets_at(mid, s) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }
}

// ------------------------------------------------------------------------------ answers

/// A candidate planned exactly: the release's own plan at its ε.
struct Exact {
    epsilon: Option<f64>,
    cost: Units,
    parameters: Parameters,
    bounds: Bounds,
}

/// Plan the release at `units` with [`super::plan`] (what the release would run and be
/// charged) and check it against f64's limits at the item's total.
fn exact(m: &Mech, units: u64, s: &Setup) -> Result<Exact, String> {
    let epsilon = Epsilon::new(units as f64 * GRID).map_err(|e| e.to_string())?;
    let spec = m.spec(epsilon, s);
    let plan = super::plan(&spec, s.item.d, s.order, &s.sens).map_err(|e| e.to_string())?;
    let params = match &plan.draw {
        Draw::Dirichlet { r, alpha } => Params::Dirichlet {
            r: *r,
            alpha: alpha.clone(),
        },
        Draw::Gaussian { sigma } => Params::Gaussian { sigma: *sigma },
        Draw::Laplace { scale } => Params::Laplace { scale: *scale },
        Draw::Exponential { epsilon, .. } => Params::Exponential { epsilon: *epsilon },
        Draw::Bounded { .. } => return Err("the planner does not plan lower-bound draws".into()),
    };
    feasible(&params, s)?;
    let bounds = m.bounds(&params, s.item.n, s);
    let parameters = match &params {
        Params::Dirichlet { r, alpha } => Parameters {
            r: Some(*r),
            alpha: Some(match alpha {
                Prior::Uniform(a) => Values::Number(*a),
                Prior::PerCell(v) => Values::PerCell(v.clone()),
            }),
            prior: None,
            sigma: None,
            scale: None,
        },
        Params::Gaussian { sigma } => Parameters {
            sigma: Some(*sigma),
            ..Parameters::none()
        },
        Params::Laplace { scale } => Parameters {
            scale: Some(*scale),
            ..Parameters::none()
        },
        Params::Exponential { .. } => {
            let (a, b) = s.item.beta_prior;
            Parameters {
                prior: Some(Values::PerCell(vec![a, b])),
                ..Parameters::none()
            }
        }
    };
    Ok(Exact {
        epsilon: (!matches!(m, Mech::Explicit { .. })).then_some(epsilon.get()),
        cost: plan.charge,
        parameters,
        bounds,
    })
}

impl Parameters {
    fn none() -> Parameters {
        Parameters {
            r: None,
            alpha: None,
            prior: None,
            sigma: None,
            scale: None,
        }
    }
}

/// The candidates of an item, in the tie-break order (the order of `Kind::ALL`: the Dirichlet
/// family first, the service's default).
/// A candidate mechanism: ready to plan, not applicable, or (the exponential mechanism in
/// `"auto"`) deferred until the others are planned, so that its O(n) sensitivity is computed
/// only if it could win.
enum Cand {
    Ready(Mech),
    Deferred,
    No(String),
}

fn candidates(item: &Item, ctx: &Context, selections: &Selections) -> Vec<(Kind, Cand)> {
    let kinds: Vec<Kind> = match item.choice {
        MechanismChoice::Named(k) => vec![k],
        MechanismChoice::Auto => Kind::ALL
            .into_iter()
            .filter(|k| *k != Kind::Explicit)
            .filter(|k| *k != Kind::Diffuse || item.alpha.is_some())
            .collect(),
    };
    let auto = item.choice == MechanismChoice::Auto;
    kinds
        .into_iter()
        .map(|k| {
            let cand = match applicable(k, item, ctx) {
                Err(reason) => Cand::No(reason),
                Ok(()) if auto && k == Kind::Exponential => Cand::Deferred,
                Ok(()) => match Mech::new(k, item, selections) {
                    Ok(m) => Cand::Ready(m),
                    Err(reason) => Cand::No(reason),
                },
            };
            (k, cand)
        })
        .collect()
}

fn not_applicable(k: Kind, reason: String) -> CandidateAnswer {
    CandidateAnswer {
        mechanism: k,
        status: CandidateStatus::NotApplicable,
        estimated_cost: None,
        forecast: None,
        shortfall: None,
        reason: Some(reason),
    }
}

fn outranked(k: Kind, reason: String) -> CandidateAnswer {
    CandidateAnswer {
        status: CandidateStatus::Outranked,
        ..not_applicable(k, reason)
    }
}

/// The answer slot of a candidate about to be analysed (overwritten by [`analysed`]).
fn pending(k: Kind) -> CandidateAnswer {
    not_applicable(k, "not analysed".into())
}

fn plan_item(item: &Item, ctx: &Context, selections: &Selections) -> ItemAnswer {
    let sens = if item.rows.is_some() {
        ctx.sensitivity.for_table()
    } else {
        ctx.sensitivity
    };
    let s = Setup {
        item,
        order: ctx.ledger_order,
        sens,
    };
    let cands = candidates(item, ctx, selections);
    match item.goal {
        Goal::Target { .. } => plan_target(cands, &s, selections),
        Goal::Epsilon(e) => plan_epsilon(cands, e, &s, selections),
        Goal::Given => plan_epsilon(
            cands,
            Epsilon::new(GRID).expect("2^-40 > 0"),
            &s,
            selections,
        ),
    }
}

/// ε given: every candidate at that spend; the chosen one forecasts best (ℓ2, then cell_sd,
/// then the order of `Kind::ALL`). The exponential mechanism, whose ε is a pure-DP parameter
/// charged min(ε, λ₀ε²/8), runs at the largest grid ε whose charge is at most the same spend;
/// in `"auto"` it is planned only if its optimistic forecast (O(1)) could beat the best.
fn plan_epsilon(
    cands: Vec<(Kind, Cand)>,
    e: Epsilon,
    s: &Setup,
    selections: &Selections,
) -> ItemAnswer {
    let asked = Units::floor(e.get()).map_or(0, |u| u.raw() as u64).max(1);
    let mut answers = Vec::new();
    let mut best: Option<(usize, Exact, Kind)> = None;
    let key = |b: &Bounds| (b.l2, b.cell_sd);
    for (k, cand) in cands {
        let m = match cand {
            Cand::Ready(m) => m,
            Cand::No(reason) => {
                answers.push(not_applicable(k, reason));
                continue;
            }
            Cand::Deferred => {
                // Its ε at this spend, ignoring its cap (a larger ε only forecasts better).
                let optimistic = exponential_units_within(asked, f64::INFINITY, s)
                    .map(|u| optimistic_selection(s.item).bounds(u as f64 * GRID, s.item.beta));
                let beaten = match (&best, optimistic) {
                    (Some((_, b, _)), Some(o)) => key(&o) >= key(&b.bounds),
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                if beaten {
                    answers.push(outranked(
                        k,
                        "less accurate at this spend than the chosen mechanism, even with the \
                         lower bound of its sensitivity (not planned exactly)"
                            .into(),
                    ));
                    continue;
                }
                match Mech::new(k, s.item, selections) {
                    Ok(m) => m,
                    Err(reason) => {
                        answers.push(not_applicable(k, reason));
                        continue;
                    }
                }
            }
        };
        let units = match &m {
            Mech::Exponential { candidates, .. } => {
                exponential_units_within(asked, candidates.max_epsilon(), s)
            }
            _ => Some(asked),
        };
        let planned = units
            .ok_or_else(|| "no epsilon of this mechanism fits this spend".to_string())
            .and_then(|u| exact(&m, u, s));
        match planned {
            Err(reason) => answers.push(not_applicable(k, reason)),
            Ok(x) => {
                answers.push(CandidateAnswer {
                    mechanism: k,
                    status: CandidateStatus::Planned,
                    estimated_cost: Some(x.cost.to_f64()),
                    forecast: Some(s.forecast(x.bounds)),
                    shortfall: None,
                    reason: None,
                });
                let better = best
                    .as_ref()
                    .is_none_or(|(_, b, _)| key(&x.bounds) < key(&b.bounds));
                if better {
                    best = Some((answers.len() - 1, x, k));
                }
            }
        }
    }
    match best {
        Some((i, x, k)) => {
            answers[i].status = CandidateStatus::Chosen;
            chosen_answer(k, x, s, answers)
        }
        None => ItemAnswer {
            status: ItemStatus::Unreachable,
            mechanism: None,
            epsilon: None,
            cost: None,
            parameters: None,
            forecast: None,
            shortfall: None,
            candidates: answers,
        },
    }
}

/// The largest grid ε in (0, max_epsilon] whose exponential charge is at most `spend` units.
fn exponential_units_within(spend: u64, max_epsilon: f64, s: &Setup) -> Option<u64> {
    let charge = |u: u64| {
        charge_for(exponential_rdp(s.lambda(), priced_epsilon(u as f64 * GRID)))
            .map_or(u64::MAX, |c| c.raw() as u64)
    };
    let mut lo = 0u64;
    let mut hi = ((max_epsilon / GRID).floor() as u64).min(MAX_UNITS);
    if hi == 0 || charge(1) > spend {
        return None;
    }
    if charge(hi) <= spend {
        return Some(hi);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if charge(mid) <= spend {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo > 0).then_some(lo)
}

fn chosen_answer(k: Kind, x: Exact, s: &Setup, candidates: Vec<CandidateAnswer>) -> ItemAnswer {
    let meets = !matches!(s.item.goal, Goal::Target { .. }) || s.meets(x.bounds);
    ItemAnswer {
        status: if meets {
            ItemStatus::Planned
        } else {
            ItemStatus::Unreachable
        },
        mechanism: Some(k),
        epsilon: x.epsilon,
        cost: Some(x.cost.to_f64()),
        parameters: Some(x.parameters),
        forecast: Some(s.forecast(x.bounds)),
        shortfall: None,
        candidates,
    }
}

/// A target: every candidate's continuous optimum, then the cheapest refined on the grid
/// (with any other within the refinement's tolerance of it). The exponential mechanism in
/// `"auto"` is analysed last, and only if a lower bound on its cost (O(1)) does not already
/// exceed the chosen cost.
fn plan_target(cands: Vec<(Kind, Cand)>, s: &Setup, selections: &Selections) -> ItemAnswer {
    let mut answers = Vec::new();
    let mut found: Vec<(usize, Mech, Found)> = Vec::new();
    let mut deferred = None;
    for (k, cand) in cands {
        match cand {
            Cand::No(reason) => answers.push(not_applicable(k, reason)),
            Cand::Deferred => {
                answers.push(pending(k));
                deferred = Some((answers.len() - 1, k));
            }
            Cand::Ready(m) => {
                answers.push(pending(k));
                let slot = answers.len() - 1;
                let f = analysed(&m, s, &mut answers[slot]);
                found.push((slot, m, f));
            }
        }
    }
    let mut best: Option<(usize, Kind, Exact)> = None;
    refine_cheapest(&found, s, &mut answers, &mut best);
    if let Some((slot, k)) = deferred {
        let floor = exponential_cost_floor(s);
        let beaten = match (&best, floor) {
            (Some((_, _, b)), Some(floor)) => floor >= b.cost.to_f64(),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if beaten {
            answers[slot] = outranked(
                k,
                match floor {
                    Some(floor) => format!(
                        "costs at least {floor:e} (from the lower bound of its sensitivity), \
                         not less than the chosen mechanism (not planned exactly)"
                    ),
                    None => "out of reach: its bias alone exceeds the target".into(),
                },
            );
        } else {
            match Mech::new(k, s.item, selections) {
                Err(reason) => answers[slot] = not_applicable(k, reason),
                Ok(m) => {
                    let f = analysed(&m, s, &mut answers[slot]);
                    let more = [(slot, m, f)];
                    refine_cheapest(&more, s, &mut answers, &mut best);
                }
            }
        }
    }
    if let Some((slot, k, x)) = best {
        answers[slot].status = CandidateStatus::Chosen;
        return chosen_answer(k, x, s, answers);
    }
    // Nothing reaches: the candidate that needs the smallest total comes closest.
    let closest = answers
        .iter()
        .filter_map(|a| a.shortfall.map(|sh| (a.mechanism, sh)))
        .min_by(|a, b| {
            let key = |s: &Shortfall| s.min_n.unwrap_or(f64::INFINITY);
            key(&a.1).total_cmp(&key(&b.1))
        });
    ItemAnswer {
        status: ItemStatus::Unreachable,
        mechanism: closest.map(|c| c.0),
        epsilon: None,
        cost: None,
        parameters: None,
        forecast: None,
        shortfall: closest.map(|c| c.1),
        candidates: answers,
    }
}

/// Analyse one candidate and write what was found into its answer.
fn analysed(m: &Mech, s: &Setup, answer: &mut CandidateAnswer) -> Found {
    let f = if let Mech::Explicit { .. } = m {
        explicit_found(m, s)
    } else {
        m.analyse(s)
    };
    let k = m.kind();
    *answer = match &f {
        Found::Reaches { estimate, .. } => CandidateAnswer {
            mechanism: k,
            status: CandidateStatus::Planned,
            estimated_cost: Some(*estimate),
            forecast: None,
            shortfall: None,
            reason: None,
        },
        Found::Short(short) => CandidateAnswer {
            mechanism: k,
            status: CandidateStatus::Unreachable,
            estimated_cost: None,
            forecast: None,
            shortfall: Some(*short),
            reason: None,
        },
        Found::Fails(reason) => not_applicable(k, reason.clone()),
    };
    f
}

/// Refine the candidates that reach the target, cheapest estimate first, into `best` (the
/// cheapest exact cost, ties to the earlier slot). A refined cost exceeds its estimate by at
/// most the bracket (~1e-9), so once a refined cost is below every remaining estimate it wins.
fn refine_cheapest(
    found: &[(usize, Mech, Found)],
    s: &Setup,
    answers: &mut [CandidateAnswer],
    best: &mut Option<(usize, Kind, Exact)>,
) {
    let estimate = |i: usize| match found[i].2 {
        Found::Reaches { estimate, .. } => estimate,
        _ => f64::INFINITY,
    };
    let mut order: Vec<usize> = (0..found.len())
        .filter(|i| matches!(found[*i].2, Found::Reaches { .. }))
        .collect();
    order.sort_by(|a, b| estimate(*a).total_cmp(&estimate(*b)).then(a.cmp(b)));
    for i in order {
        if let Some((_, _, b)) = best.as_ref() {
            if estimate(i) > b.cost.to_f64() {
                break;
            }
        }
        let (slot, m, f) = &found[i];
        let Found::Reaches { units, lo, hi, .. } = f else {
            continue;
        };
        let units = match units {
            Some(u) => Some(*u),
            // (A bracket past a pole's reach: from the strongest value reached.)
            None => m.refine(*lo, *hi, s).or_else(|| match m.whole_grid(s) {
                Found::Reaches { units, .. } => units,
                _ => None,
            }),
        };
        let refined = units.ok_or_else(|| "the target is not met at any grid value".to_string());
        match refined.and_then(|u| exact(m, u, s)) {
            Ok(x) => {
                answers[*slot].forecast = Some(s.forecast(x.bounds));
                let better = best
                    .as_ref()
                    .is_none_or(|(j, _, b)| (x.cost, *slot) < (b.cost, *j));
                if better {
                    *best = Some((*slot, m.kind(), x));
                }
            }
            Err(reason) => {
                answers[*slot].status = CandidateStatus::NotApplicable;
                answers[*slot].reason = Some(reason);
            }
        }
    }
}

/// A lower bound on the exponential mechanism's cost for the item's target, in O(1): the
/// price of the smallest ε at which its optimistic forecasts ([`optimistic_selection`]) meet
/// it, ignoring its ε cap; `None` if they never do (its bias alone exceeds the target).
fn exponential_cost_floor(s: &Setup) -> Option<f64> {
    let law = optimistic_selection(s.item);
    let (l2, sd) = match s.item.goal {
        Goal::Target { l2, cell_sd } => (l2, cell_sd),
        _ => (None, None),
    };
    // Only the bounds the target asks about (the cell bound is the costlier).
    let meets = |e: f64| {
        l2.is_none_or(|t| law.l2(e, s.item.beta) <= t) && sd.is_none_or(|t| law.cell_sd(e) <= t)
    };
    let (mut lo, mut hi) = (GRID, 1e6);
    if !meets(hi) {
        return None;
    }
    if meets(lo) {
        return Some(0.0);
    }
    // Bisection in ln ε, keeping lo on the failing side: any ε below the threshold prices
    // below the cost, so a coarse bracket is still a valid floor.
    for _ in 0..30 {
        let mid = (lo * hi).sqrt();
        if meets(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(exponential_rdp(s.lambda(), priced_epsilon(lo)))
}

/// `explicit` with a target: its parameters are given, so it either meets the target or not.
fn explicit_found(m: &Mech, s: &Setup) -> Found {
    let Some(p) = m.calibrated(1, s) else {
        return Found::Fails("invalid parameters".into());
    };
    let price = m.price(&p, s);
    if !(price.is_finite() && price <= MAX_EPSILON) {
        return Found::Fails("the release has no finite price at the ledger order".into());
    }
    if m.exact_bounds(&p, s).is_some_and(|b| s.meets(b)) {
        Found::Reaches {
            estimate: m.cost_of_price(price),
            units: Some(1),
            lo: 0,
            hi: 1,
        }
    } else {
        m.shortfall(&p, m.cost_of_price(price), s)
    }
}

/// Plan a list of releases against a dataset's public parameters (`ctx`: its ledger order λ₀,
/// relation and the service limits) and, when given, its remaining budget. Nothing is charged
/// and no count is seen: the answer depends on the request and `ctx` only. Identical items are
/// planned once; distinct ones in parallel.
pub fn plan_workload(
    request: &PlanRequest,
    ctx: &Context,
    remaining: Option<Units>,
) -> Result<PlanAnswer, WorkloadError> {
    if request.items.is_empty() {
        return Err(WorkloadError {
            field: "items".into(),
            message: "a plan has at least one item".into(),
        });
    }
    if request.items.len() > MAX_PLAN_ITEMS {
        return Err(WorkloadError {
            field: "items".into(),
            message: format!("a plan has at most {MAX_PLAN_ITEMS} items"),
        });
    }
    let items = request
        .items
        .iter()
        .enumerate()
        .map(|(i, it)| parse_item(i, it, ctx))
        .collect::<Result<Vec<Item>, _>>()?;
    // Identical items (the same parsed values) are planned once.
    let mut unique: Vec<&Item> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let slots: Vec<usize> = items
        .iter()
        .map(|it| {
            *index.entry(format!("{it:?}")).or_insert_with(|| {
                unique.push(it);
                unique.len() - 1
            })
        })
        .collect();
    let selections = Selections::default();
    let planned: Vec<ItemAnswer> = unique
        .par_iter()
        .map(|it| plan_item(it, ctx, &selections))
        .collect();
    let answers: Vec<ItemAnswer> = slots.iter().map(|&u| planned[u].clone()).collect();
    let unreachable = answers
        .iter()
        .filter(|a| a.status == ItemStatus::Unreachable)
        .count();
    // Costs are grid values: their sum in grid units is exact.
    let total_units: u128 = answers
        .iter()
        .filter(|a| a.status == ItemStatus::Planned)
        .filter_map(|a| a.cost)
        .map(|c| (c / GRID) as u128)
        .sum();
    let total_cost = total_units as f64 * GRID;
    let fits = remaining.map(|r| unreachable == 0 && total_units <= r.raw() as u128);
    Ok(PlanAnswer {
        order: ctx.ledger_order.get(),
        items: answers,
        total_cost,
        remaining: remaining.map(Units::to_f64),
        fits,
        unreachable,
    })
}

mod schema;
#[cfg(test)]
mod simulation;
#[cfg(test)]
mod tests;
