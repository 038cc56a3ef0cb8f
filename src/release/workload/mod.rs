//! Accuracy-first planning without the data: for a list of planned releases, each given by its
//! shape, a **public** total n (or a public lower bound of it), a mechanism (or `"auto"`) and
//! either ε or an accuracy target, say which mechanism to run, the cheapest ε on the ledger grid
//! that meets the target, the calibrated parameters, the worst-case forecast, and what the whole
//! list would cost at the dataset's order λ₀ — without charging anything and without any count.
//!
//! Pure: no I/O, no async, no randomness; the answer is a function of the public inputs only
//! ([`plan_workload`]). Every mechanism is planned through its own `Mechanism` implementation:
//! its fields parsed by its own parser, its searches calibrating through `release::calibrate`,
//! and every answer planned by `release::plan`, the function every release is calibrated and
//! priced by — so `total_cost` is, by construction, what the releases would be charged. The
//! parts: the wire types (here), an item's parsing (`item`), one mechanism's search (`search`),
//! the choice among mechanisms and the answers (`choose`); the bounds are the draws' own
//! (`privacy::accuracy`), the search and its guarantees are in docs/PRIVACY.md, "Planning for
//! accuracy".

mod choose;
mod item;
mod search;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use rayon::prelude::*;
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::mechanism::{Cache, Context, Parameters, Params, FORECAST_BETA, GRID};
use super::mechanisms::Kind;
use super::request::{expected, next_param, once, unknown};
use crate::ledger::Units;
use crate::wire::non_null;

/// The most items one plan may hold (the work is linear in them).
pub const MAX_PLAN_ITEMS: usize = 10_000;
/// The largest public total a plan takes: 2⁵³, past which totals are no longer exact in f64.
pub const MAX_TOTAL: f64 = 9_007_199_254_740_992.0;
/// The confidence of an ℓ2 forecast when none is asked (the previews' 95 %).
pub const DEFAULT_CONFIDENCE: f64 = 1.0 - FORECAST_BETA;

// ------------------------------------------------------------------------------ the wire

/// The plan request: the releases one intends to make.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    pub items: Vec<PlanItem>,
}

/// One planned release. `d` cells (per row for a table of `rows` disjoint groups); a public total
/// `n` or a public `n_lower_bound` (per row for a table); `mechanism` (default `"auto"`); and
/// either `epsilon` or a `target`. The mechanisms' own fields (`prior`, `r`, `alpha`...) are as in
/// a release request, read by the same parsers.
#[derive(Debug, Clone, Default)]
pub struct PlanItem {
    pub d: u64,
    pub rows: Option<u64>,
    pub n: Option<f64>,
    pub n_lower_bound: Option<f64>,
    pub mechanism: MechanismChoice,
    pub epsilon: Option<f64>,
    pub target: Option<AccuracyTarget>,
    /// The mechanisms' own fields, in the order they arrived.
    pub params: Params,
}

/// The common fields of a plan item.
const ITEM_FIELDS: [&str; 7] = [
    "d",
    "rows",
    "n",
    "n_lower_bound",
    "mechanism",
    "epsilon",
    "target",
];

impl Serialize for PlanItem {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("d", &self.d)?;
        if let Some(rows) = self.rows {
            map.serialize_entry("rows", &rows)?;
        }
        if let Some(n) = self.n {
            map.serialize_entry("n", &n)?;
        }
        if let Some(n) = self.n_lower_bound {
            map.serialize_entry("n_lower_bound", &n)?;
        }
        map.serialize_entry("mechanism", &self.mechanism)?;
        if let Some(e) = self.epsilon {
            map.serialize_entry("epsilon", &e)?;
        }
        if let Some(t) = &self.target {
            map.serialize_entry("target", t)?;
        }
        for (name, value) in self.params.iter() {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for PlanItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Item;
        impl<'de> Visitor<'de> for Item {
            type Value = PlanItem;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a plan item object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PlanItem, A::Error> {
                let mut it = PlanItem::default();
                let (mut d, mut mechanism) = (None, None);
                let mut params = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "d" => once(&mut map, &mut d, "d")?,
                        "rows" => once(&mut map, &mut it.rows, "rows")?,
                        "n" => once(&mut map, &mut it.n, "n")?,
                        "n_lower_bound" => once(&mut map, &mut it.n_lower_bound, "n_lower_bound")?,
                        "mechanism" => once(&mut map, &mut mechanism, "mechanism")?,
                        "epsilon" => once(&mut map, &mut it.epsilon, "epsilon")?,
                        "target" => once(&mut map, &mut it.target, "target")?,
                        other => {
                            if !next_param(&mut map, other, &mut params)? {
                                static EXPECTED: OnceLock<&'static [&'static str]> =
                                    OnceLock::new();
                                return Err(unknown(other, expected(&ITEM_FIELDS, &EXPECTED)));
                            }
                        }
                    }
                }
                it.d = d.ok_or_else(|| serde::de::Error::missing_field("d"))?;
                it.mechanism = mechanism.unwrap_or_default();
                it.params = Params::new(params);
                Ok(it)
            }
        }
        d.deserialize_map(Item)
    }
}

/// The accuracy to reach: at least one of `l2` and `kl` (each at `confidence`, default 0.95)
/// and `cell_sd`.
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
    /// D_KL(x/n ‖ y) ≤ kl with probability ≥ confidence, for every count vector of the total.
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub kl: Option<f64>,
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
    /// The parameters the release would run with, named as in its mechanism record.
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
    /// D_KL(x/n ‖ y) ≤ kl with probability ≥ confidence, where a bound is proven (absent
    /// otherwise: the projected baselines, whose zeros leave it unbounded; the exponential
    /// mechanism).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kl: Option<f64>,
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

// ------------------------------------------------------------------------------ the entry

/// Cancels a plan's work when set (its request ended: answered, timed out or dropped), checked
/// between items and inside every search, so that a plan nobody waits for stops using the cores
/// it shares with the sampler.
#[derive(Debug, Default)]
pub struct Cancel(AtomicBool);

impl Cancel {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The plan was cancelled before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancelled;

/// Plan a list of releases against a dataset's public parameters (`ctx`: its ledger order λ₀,
/// relation and the service limits) and, when given, its remaining budget. Nothing is charged
/// and no count is seen: the answer depends on the request and `ctx` only. Identical items are
/// planned once; distinct ones in parallel.
pub fn plan_workload(
    request: &PlanRequest,
    ctx: &Context,
    remaining: Option<Units>,
) -> Result<PlanAnswer, WorkloadError> {
    plan_workload_until(request, ctx, remaining, &Cancel::default())
        .map(|planned| planned.expect("a plan that cannot be cancelled finishes"))
}

/// [`plan_workload`], stopping early (`Ok(Err(Cancelled))`) once `cancel` is set.
pub fn plan_workload_until(
    request: &PlanRequest,
    ctx: &Context,
    remaining: Option<Units>,
    cancel: &Cancel,
) -> Result<Result<PlanAnswer, Cancelled>, WorkloadError> {
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
        .map(|(i, it)| item::parse(i, it, ctx))
        .collect::<Result<Vec<_>, _>>()?;
    // Identical items (the same parsed values) are planned once.
    let mut unique: Vec<&item::Item> = Vec::new();
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
    let cache = Cache::default();
    let planned: Result<Vec<ItemAnswer>, Cancelled> = unique
        .par_iter()
        .map(|it| choose::plan_item(it, ctx, &cache, cancel))
        .collect();
    let Ok(planned) = planned else {
        return Ok(Err(Cancelled));
    };
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
    Ok(Ok(PlanAnswer {
        order: ctx.ledger_order.get(),
        items: answers,
        total_cost,
        remaining: remaining.map(Units::to_f64),
        fits,
        unreachable,
    }))
}

mod schema;
#[cfg(test)]
mod simulation;
#[cfg(test)]
mod tests;
