//! `/v1/datasets/{id}/releases`: preview, release, history.
//!
//! Order of a release: authorise → parse (counts, mechanism) → calibrate and price at the
//! ledger order → idempotency check → budget pre-check (saves drawing a sample that would be
//! refused) → draw → `commit_release` (check, charge and record in one transaction) → respond.
//! The output leaves the service only after the commit returned `Committed`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use uuid::Uuid;

use super::auth::Caller;
use super::datasets::param_error;
use super::error::ApiError;
use super::extract::{parse_json_bounded, ApiJson, ApiPath, ApiQuery};
use super::limits::CommitGate;
use super::views::{budget_json, BudgetView, CostView, ReleaseSummaryView, ReleaseView};
use super::AppState;
use crate::ledger::{BudgetState, CommitOutcome, Dataset, Idempotency, Label, NewRelease, Output};
use crate::privacy::bounded::CellValues;
use crate::privacy::exponential::BetaCandidates;
use crate::privacy::types::Relation;
use crate::privacy::utility::Forecast;
use crate::privacy::{Counts, Epsilon, Order, Prior};
use crate::release::seeds::{BoundedMode, BoundedSpec, ExponentialSpec};
use crate::release::{
    self, Draw, Noise, Plan, PlanError, Spec, Target, VectorForecast, DEFAULT_PRIOR, DEFAULT_R,
};
use crate::table::{self, CountTable, TableError};

/// Counts above this lose integer precision in f64 and push Gamma shapes towards overflow; the
/// service refuses them rather than sample from a distorted distribution.
const MAX_COUNT: f64 = 1e15;

/// Draws with fewer cells than this run inline; larger ones move to the blocking pool.
const INLINE_DRAW_CELLS: usize = 4096;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/datasets/{id}/releases", get(list).post(create))
        .route("/v1/datasets/{id}/releases/preview", post(preview))
        .route("/v1/datasets/{id}/releases/{release_id}", get(show))
}

/// Read through a string, so a non-string value is a 422 data error, not a JSON syntax error,
/// and serde's `{"dirichlet": null}` enum form is refused.
#[derive(Deserialize, Serialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum Kind {
    #[default]
    Dirichlet,
    Posterior,
    Diffuse,
    Explicit,
    Gaussian,
    Laplace,
    Exponential,
}

impl TryFrom<String> for Kind {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        Ok(match name.as_str() {
            "dirichlet" => Kind::Dirichlet,
            "posterior" => Kind::Posterior,
            "diffuse" => Kind::Diffuse,
            "explicit" => Kind::Explicit,
            "gaussian" => Kind::Gaussian,
            "laplace" => Kind::Laplace,
            "exponential" => Kind::Exponential,
            // Never quote `name`: problem documents echo nothing that was sent.
            _ => {
                return Err(
                    "expected one of dirichlet, posterior, diffuse, explicit, gaussian, laplace, exponential"
                        .into(),
                )
            }
        })
    }
}

/// A number or an array of numbers (bounded while parsed: `extract::ScalarOrCells`).
#[derive(Deserialize, Serialize, Clone, Debug)]
#[serde(untagged)]
#[serde(from = "super::extract::ScalarOrCells")]
pub enum AlphaRequest {
    Scalar(f64),
    PerCell(Vec<f64>),
}

/// Raw counts as they arrive. No `Debug`: they must never reach a log.
#[derive(Deserialize, Serialize, Clone)]
#[serde(transparent)]
pub struct RawCounts(#[serde(deserialize_with = "super::extract::cells")] Vec<f64>);

impl From<super::extract::ScalarOrCells> for AlphaRequest {
    fn from(value: super::extract::ScalarOrCells) -> Self {
        match value {
            super::extract::ScalarOrCells::Scalar(a) => AlphaRequest::Scalar(a),
            super::extract::ScalarOrCells::Cells(v) => AlphaRequest::PerCell(v),
        }
    }
}

/// A raw table (rows of counts) as it arrives. No `Debug`, like [`RawCounts`].
#[derive(Deserialize, Serialize, Clone)]
#[serde(transparent)]
pub struct RawTable(#[serde(deserialize_with = "super::extract::rows")] Vec<Vec<f64>>);

/// The release request body. Serialised back (canonically) only to compute the idempotency
/// fingerprint; never logged or stored.
#[derive(Deserialize, Serialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    // `table` and `label` are skipped when absent, so a vector request serialises as it did
    // before tables existed and its stored idempotency fingerprint still matches a retry.
    #[serde(
        default,
        deserialize_with = "super::nonnull::value",
        skip_serializing_if = "Option::is_none"
    )]
    counts: Option<RawCounts>,
    #[serde(
        default,
        deserialize_with = "super::nonnull::value",
        skip_serializing_if = "Option::is_none"
    )]
    table: Option<RawTable>,
    #[serde(default, deserialize_with = "super::nonnull::value")]
    epsilon: Option<f64>,
    #[serde(default, deserialize_with = "super::nonnull::value")]
    order: Option<f64>,
    #[serde(default)]
    mechanism: Kind,
    /// A number (dirichlet's base prior a₀) or `[α, β]` (exponential's Beta prior).
    #[serde(default, deserialize_with = "super::nonnull::value")]
    prior: Option<AlphaRequest>,
    #[serde(default, deserialize_with = "super::nonnull::value")]
    r: Option<f64>,
    #[serde(default, deserialize_with = "super::nonnull::value")]
    alpha: Option<AlphaRequest>,
    #[serde(default, deserialize_with = "super::nonnull::value")]
    sigma: Option<f64>,
    #[serde(default, deserialize_with = "super::nonnull::value")]
    scale: Option<f64>,
    // Skipped when absent so that the idempotency fingerprint of older requests is unchanged.
    #[serde(
        default,
        deserialize_with = "super::nonnull::value",
        skip_serializing_if = "Option::is_none"
    )]
    label: Option<String>,
    #[serde(
        default,
        deserialize_with = "super::nonnull::value",
        skip_serializing_if = "Option::is_none"
    )]
    lower_bound: Option<AlphaRequest>,
    #[serde(
        default,
        deserialize_with = "super::nonnull::value",
        skip_serializing_if = "Option::is_none"
    )]
    prior_shape: Option<AlphaRequest>,
}

fn positive(field: &'static str, v: f64) -> Result<f64, ApiError> {
    if !v.is_finite() || v <= 0.0 {
        return Err(ApiError::invalid_field(
            field,
            format!("{field} must be a finite number greater than 0"),
        ));
    }
    Ok(v)
}

fn forbid(kind: Kind, present: &[(&str, bool)]) -> Result<(), ApiError> {
    for (name, is_present) in present {
        if *is_present {
            return Err(ApiError::invalid_field(
                name,
                format!("{name} does not apply to the {} mechanism", kind_name(kind)),
            ));
        }
    }
    Ok(())
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Dirichlet => "dirichlet",
        Kind::Posterior => "posterior",
        Kind::Diffuse => "diffuse",
        Kind::Explicit => "explicit",
        Kind::Gaussian => "gaussian",
        Kind::Laplace => "laplace",
        Kind::Exponential => "exponential",
    }
}

fn prior_of(alpha: &AlphaRequest) -> Result<Prior, ApiError> {
    match alpha {
        AlphaRequest::Scalar(a) => Prior::uniform(*a),
        AlphaRequest::PerCell(v) => Prior::per_cell(v.clone()),
    }
    .map_err(|e| param_error("alpha", e))
}

/// Parse the mechanism part of a request against the dataset's ledger order.
fn parse_spec(req: &ReleaseRequest, ledger_order: Order) -> Result<Spec, ApiError> {
    let epsilon = req
        .epsilon
        .map(|e| Epsilon::new(e).map_err(|err| param_error("epsilon", err)))
        .transpose()?;
    let order = match req.order {
        Some(o) => Order::new(o).map_err(|e| param_error("order", e))?,
        None => ledger_order,
    };
    if req.order.is_some() && epsilon.is_none() {
        return Err(ApiError::invalid_field(
            "order",
            "order applies only together with epsilon (the calibration target)",
        ));
    }
    let target = || {
        epsilon
            .map(|epsilon| Target { epsilon, order })
            .ok_or_else(|| {
                ApiError::invalid_field(
                    "epsilon",
                    format!("the {} mechanism needs epsilon", kind_name(req.mechanism)),
                )
            })
    };
    let kind = req.mechanism;
    let has = |o: &Option<f64>| o.is_some();
    Ok(match kind {
        Kind::Dirichlet => {
            forbid(
                kind,
                &[
                    ("r", has(&req.r)),
                    ("alpha", req.alpha.is_some()),
                    ("sigma", has(&req.sigma)),
                    ("scale", has(&req.scale)),
                ],
            )?;
            let prior = scalar_prior(req)?;
            Spec::Dirichlet {
                target: target()?,
                prior,
            }
        }
        Kind::Posterior => {
            forbid(
                kind,
                &[
                    ("prior", req.prior.is_some()),
                    ("alpha", req.alpha.is_some()),
                    ("sigma", has(&req.sigma)),
                    ("scale", has(&req.scale)),
                ],
            )?;
            let r = req
                .r
                .map(|r| positive("r", r))
                .transpose()?
                .unwrap_or(DEFAULT_R);
            Spec::Posterior {
                target: target()?,
                r,
            }
        }
        Kind::Diffuse => {
            forbid(
                kind,
                &[
                    ("prior", req.prior.is_some()),
                    ("r", has(&req.r)),
                    ("sigma", has(&req.sigma)),
                    ("scale", has(&req.scale)),
                ],
            )?;
            let alpha = req.alpha.as_ref().ok_or_else(|| {
                ApiError::invalid_field("alpha", "the diffuse mechanism needs alpha")
            })?;
            Spec::Diffuse {
                target: target()?,
                alpha: prior_of(alpha)?,
            }
        }
        Kind::Explicit => {
            forbid(
                kind,
                &[
                    ("prior", req.prior.is_some()),
                    ("sigma", has(&req.sigma)),
                    ("scale", has(&req.scale)),
                ],
            )?;
            let r = positive(
                "r",
                req.r.ok_or_else(|| {
                    ApiError::invalid_field("r", "the explicit mechanism needs r")
                })?,
            )?;
            let alpha = req.alpha.as_ref().ok_or_else(|| {
                ApiError::invalid_field("alpha", "the explicit mechanism needs alpha")
            })?;
            if req.order.is_some() {
                return Err(ApiError::invalid_field(
                    "order",
                    "the explicit mechanism is priced at the ledger order; order does not apply",
                ));
            }
            Spec::Explicit {
                r,
                alpha: prior_of(alpha)?,
                cap: epsilon,
            }
        }
        Kind::Gaussian | Kind::Laplace => {
            let (own, own_name, other, other_name) = match kind {
                Kind::Gaussian => (req.sigma, "sigma", req.scale, "scale"),
                _ => (req.scale, "scale", req.sigma, "sigma"),
            };
            forbid(
                kind,
                &[
                    ("prior", req.prior.is_some()),
                    ("r", has(&req.r)),
                    ("alpha", req.alpha.is_some()),
                    (other_name, other.is_some()),
                ],
            )?;
            let noise = match own {
                Some(v) => {
                    if req.order.is_some() {
                        return Err(ApiError::invalid_field("order", format!("with {own_name} given, the mechanism is priced at the ledger order; order does not apply")));
                    }
                    Noise::Given {
                        value: positive(own_name, v)?,
                        cap: epsilon,
                    }
                }
                None => Noise::Calibrated(target().map_err(|_| {
                    ApiError::invalid_field(
                        "epsilon",
                        format!(
                            "the {} mechanism needs {own_name} or epsilon",
                            kind_name(kind)
                        ),
                    )
                })?),
            };
            if kind == Kind::Gaussian {
                Spec::Gaussian(noise)
            } else {
                Spec::Laplace(noise)
            }
        }
        Kind::Exponential => {
            return Err(ApiError::Internal(
                "the exponential mechanism is parsed with its counts".into(),
            ))
        }
    })
}

fn scalar_prior(req: &ReleaseRequest) -> Result<f64, ApiError> {
    match &req.prior {
        None => Ok(DEFAULT_PRIOR),
        Some(AlphaRequest::Scalar(p)) => positive("prior", *p),
        Some(AlphaRequest::PerCell(_)) => Err(ApiError::invalid_field(
            "prior",
            "prior must be a number for the dirichlet mechanism",
        )),
    }
}

fn cells(field: &'static str, value: &AlphaRequest) -> Result<CellValues, ApiError> {
    let values = match value {
        AlphaRequest::Scalar(v) => CellValues::Uniform(*v),
        AlphaRequest::PerCell(v) => CellValues::PerCell(v.clone()),
    };
    CellValues::non_negative(field, values).map_err(|e| param_error(field, e))
}

/// A Dirichlet-family request with `lower_bound` or `prior_shape` (seeds 000 Remark 2, 003,
/// 004 Algorithm 3). `alpha` may be 0 in a cell here: the bound supplies the prior there.
fn parse_bounded(req: &ReleaseRequest, ledger_order: Order) -> Result<Spec, ApiError> {
    let kind = req.mechanism;
    let lower = req
        .lower_bound
        .as_ref()
        .map(|l| cells("lower_bound", l))
        .transpose()?;
    if req.prior_shape.is_some() && kind != Kind::Posterior {
        return Err(ApiError::invalid_field(
            "prior_shape",
            format!(
                "prior_shape does not apply to the {} mechanism (only to posterior)",
                kind_name(kind)
            ),
        ));
    }
    let epsilon = req
        .epsilon
        .map(|e| Epsilon::new(e).map_err(|err| param_error("epsilon", err)))
        .transpose()?;
    let order = match req.order {
        Some(o) => Order::new(o).map_err(|e| param_error("order", e))?,
        None => ledger_order,
    };
    let target = || {
        epsilon
            .map(|epsilon| Target { epsilon, order })
            .ok_or_else(|| {
                ApiError::invalid_field(
                    "epsilon",
                    format!("the {} mechanism needs epsilon", kind_name(kind)),
                )
            })
    };
    let alpha = || {
        req.alpha
            .as_ref()
            .ok_or_else(|| {
                ApiError::invalid_field(
                    "alpha",
                    format!("the {} mechanism needs alpha", kind_name(kind)),
                )
            })
            .and_then(|a| cells("alpha", a))
    };
    let has = |o: &Option<f64>| o.is_some();
    let mode = match kind {
        Kind::Dirichlet => {
            forbid(
                kind,
                &[
                    ("r", has(&req.r)),
                    ("alpha", req.alpha.is_some()),
                    ("sigma", has(&req.sigma)),
                    ("scale", has(&req.scale)),
                ],
            )?;
            BoundedMode::Dirichlet {
                target: target()?,
                prior: scalar_prior(req)?,
            }
        }
        Kind::Posterior => {
            forbid(
                kind,
                &[
                    ("prior", req.prior.is_some()),
                    ("alpha", req.alpha.is_some()),
                    ("sigma", has(&req.sigma)),
                    ("scale", has(&req.scale)),
                ],
            )?;
            let shape = match &req.prior_shape {
                Some(s) => cells("prior_shape", s)?,
                None => CellValues::Uniform(1.0),
            };
            if shape.min() <= 0.0 && lower.is_none() {
                return Err(ApiError::invalid_field(
                    "prior_shape",
                    "prior_shape must be greater than 0 in every cell (0 is allowed only with lower_bound)",
                ));
            }
            BoundedMode::Posterior {
                target: target()?,
                r: req
                    .r
                    .map(|r| positive("r", r))
                    .transpose()?
                    .unwrap_or(DEFAULT_R),
                shape,
            }
        }
        Kind::Diffuse => {
            forbid(
                kind,
                &[
                    ("prior", req.prior.is_some()),
                    ("r", has(&req.r)),
                    ("sigma", has(&req.sigma)),
                    ("scale", has(&req.scale)),
                ],
            )?;
            BoundedMode::Diffuse {
                target: target()?,
                alpha: alpha()?,
            }
        }
        Kind::Explicit => {
            forbid(
                kind,
                &[
                    ("prior", req.prior.is_some()),
                    ("sigma", has(&req.sigma)),
                    ("scale", has(&req.scale)),
                ],
            )?;
            if req.order.is_some() {
                return Err(ApiError::invalid_field(
                    "order",
                    "the explicit mechanism is priced at the ledger order; order does not apply",
                ));
            }
            let r = positive(
                "r",
                req.r.ok_or_else(|| {
                    ApiError::invalid_field("r", "the explicit mechanism needs r")
                })?,
            )?;
            BoundedMode::Explicit {
                r,
                alpha: alpha()?,
                cap: epsilon,
            }
        }
        _ => {
            return Err(ApiError::invalid_field(
                "lower_bound",
                format!(
                    "lower_bound does not apply to the {} mechanism (only to dirichlet, posterior, diffuse and explicit)",
                    kind_name(kind)
                ),
            ))
        }
    };
    Ok(Spec::Bounded(BoundedSpec { mode, lower }))
}

/// Seed 002's exponential mechanism: two whole-number cells (successes, failures) on a
/// `replace_one` dataset, n = their sum at most `max_n` (the selection is O(n)).
fn parse_exponential(
    req: &ReleaseRequest,
    counts: &Counts,
    dataset: &Dataset,
    max_n: u64,
) -> Result<Spec, ApiError> {
    let kind = Kind::Exponential;
    forbid(
        kind,
        &[
            ("order", req.order.is_some()),
            ("r", req.r.is_some()),
            ("alpha", req.alpha.is_some()),
            ("sigma", req.sigma.is_some()),
            ("scale", req.scale.is_some()),
            ("lower_bound", req.lower_bound.is_some()),
            ("prior_shape", req.prior_shape.is_some()),
        ],
    )?;
    if dataset.sensitivity.relation() != Relation::ReplaceOne {
        return Err(ApiError::invalid_field(
            "mechanism",
            "the exponential mechanism needs a replace_one dataset (seed 002's neighbours replace one record and keep n fixed)",
        ));
    }
    let epsilon = Epsilon::new(req.epsilon.ok_or_else(|| {
        ApiError::invalid_field("epsilon", "the exponential mechanism needs epsilon")
    })?)
    .map_err(|e| param_error("epsilon", e))?;
    let x = counts.as_slice();
    if x.len() != 2 {
        return Err(ApiError::invalid_field(
            "counts",
            "the exponential mechanism needs exactly 2 cells (successes, failures)",
        ));
    }
    if x.iter().any(|v| v.fract() != 0.0) {
        return Err(ApiError::invalid_field(
            "counts",
            "the exponential mechanism needs whole-number counts",
        ));
    }
    // n = 0 (an empty group) is released like any other: one candidate, the prior
    // (`privacy::exponential`, "Parameters").
    let n = x[0] + x[1];
    if n > max_n as f64 {
        return Err(ApiError::invalid_field(
            "counts",
            format!("the exponential mechanism needs counts[0] + counts[1] <= {max_n} (the configured max_exponential_n)"),
        ));
    }
    let prior = match &req.prior {
        None => (1.0, 1.0),
        Some(AlphaRequest::PerCell(v)) if v.len() == 2 => {
            (positive("prior", v[0])?, positive("prior", v[1])?)
        }
        Some(_) => {
            return Err(ApiError::invalid_field(
                "prior",
                "prior must be [alpha, beta] (two numbers > 0) for the exponential mechanism",
            ))
        }
    };
    // The prior is checked here, with its field, rather than later as a bare plan error.
    BetaCandidates::new(n as u64, prior.0, prior.1)
        .map_err(|e| ApiError::invalid_field("prior", format!("prior [alpha, beta]: {e}")))?;
    Ok(Spec::Exponential(ExponentialSpec {
        epsilon,
        prior,
        n: n as u64,
    }))
}

fn plan_error(e: PlanError, dataset: &Dataset) -> ApiError {
    match e {
        PlanError::Infeasible(err) => ApiError::CalibrationInfeasible(err.to_string()),
        PlanError::NoGuarantee { .. } => ApiError::NoGuarantee(e.to_string()),
        PlanError::CostExceedsCap { .. } => ApiError::CostExceedsEpsilon(e.to_string()),
        PlanError::TooExpensive { .. } => exhausted(&dataset.budget(), e.to_string()),
        PlanError::Parameter(message) => ApiError::invalid(message),
        PlanError::BeyondPrecision(message) => ApiError::BeyondPrecision(message),
    }
}

fn exhausted(budget: &BudgetState, detail: String) -> ApiError {
    ApiError::BudgetExhausted {
        detail,
        budget: budget_json(budget),
    }
}

struct Parsed {
    dataset: Arc<Dataset>,
    planned: Planned,
}

/// What a release draws from: one count vector, or a table of disjoint groups' vectors.
pub enum Input {
    Vector(Counts),
    Table(CountTable),
}

impl Input {
    /// Every cell of the input (rows × cells for a table).
    pub fn total_cells(&self) -> usize {
        match self {
            Input::Vector(counts) => counts.len(),
            Input::Table(table) => table.total_cells(),
        }
    }

    /// Draw the output: the vector, or every row of the table independently; plus what the
    /// draw adds to the mechanism record (the exponential mechanism's selection).
    pub fn draw(&self, draw: &Draw) -> Result<(Output, Option<Value>), String> {
        match self {
            Input::Vector(counts) => {
                release::execute_release(draw, counts).map(|(y, drawn)| (Output::Vector(y), drawn))
            }
            Input::Table(t) => table::execute(draw, t).map(|t| (Output::Table(t), None)),
        }
    }
}

/// A release request validated and priced: what to draw from, the plan, the label.
pub struct Planned {
    pub input: Input,
    pub plan: Plan,
    pub label: Option<Label>,
}

async fn load_and_plan(
    state: &AppState,
    caller: &Caller,
    id: Uuid,
    req: &ReleaseRequest,
    cached: bool,
) -> Result<Parsed, ApiError> {
    caller.require_dataset(id)?;
    // With `cached`, the ledger figures may be behind (see `super::cache`); the parameters
    // that planning uses are exact.
    let dataset = match cached.then(|| state.caches.dataset(id)).flatten() {
        Some(dataset) => dataset,
        None => state.caches.put_dataset(
            state
                .store
                .get_dataset(id)
                .await?
                .ok_or_else(|| ApiError::not_found("dataset"))?,
        ),
    };
    let planned = plan_request(
        req,
        &dataset,
        state.settings.max_dimension,
        state.settings.max_exponential_n,
    )?;
    Ok(Parsed { dataset, planned })
}

/// A release request body, validated and priced against a dataset's ledger: the counts (or
/// table) and the plan that would be drawn and charged. Pure (no store, no randomness) and total: any bytes
/// give a plan or an [`ApiError`], never a panic (`fuzz/fuzz_targets/requests.rs` holds it to
/// that). The handlers run the same steps on the body their extractor parsed.
pub fn plan_release(
    body: &[u8],
    dataset: &Dataset,
    max_dimension: usize,
) -> Result<Planned, ApiError> {
    let req: ReleaseRequest = parse_json_bounded(body, max_dimension)?;
    plan_request(&req, dataset, max_dimension, DEFAULT_MAX_EXPONENTIAL_N)
}

/// `max_exponential_n` of config/default.toml, for callers without settings.
pub const DEFAULT_MAX_EXPONENTIAL_N: u64 = 10_000;

fn parse_any(
    req: &ReleaseRequest,
    counts: &Counts,
    dataset: &Dataset,
    max_exponential_n: u64,
) -> Result<Spec, ApiError> {
    if req.mechanism == Kind::Exponential {
        parse_exponential(req, counts, dataset, max_exponential_n)
    } else if req.lower_bound.is_some() || req.prior_shape.is_some() {
        parse_bounded(req, dataset.order)
    } else {
        parse_spec(req, dataset.order)
    }
}

fn table_error(e: TableError) -> ApiError {
    ApiError::invalid_field("table", e.to_string())
}

fn parse_input(
    req: &ReleaseRequest,
    dataset: &Dataset,
    max_dimension: usize,
) -> Result<Input, ApiError> {
    let too_large = |field: &str, at: String| {
        ApiError::invalid_field(
            field,
            format!("{field}{at} exceeds the largest supported count, {MAX_COUNT:e}"),
        )
    };
    match (&req.counts, &req.table) {
        (Some(counts), None) => {
            let counts = Counts::new(counts.0.clone(), max_dimension)
                .map_err(|e| param_error("counts", e))?;
            if let Some(index) = counts.as_slice().iter().position(|&x| x > MAX_COUNT) {
                return Err(too_large("counts", format!("[{index}]")));
            }
            Ok(Input::Vector(counts))
        }
        (None, Some(rows)) => {
            table::check_relation(&dataset.sensitivity).map_err(table_error)?;
            let t = CountTable::new(rows.0.clone(), max_dimension).map_err(table_error)?;
            for (row, counts) in t.rows().iter().enumerate() {
                if let Some(index) = counts.as_slice().iter().position(|&x| x > MAX_COUNT) {
                    return Err(too_large("table", format!("[{row}][{index}]")));
                }
            }
            Ok(Input::Table(t))
        }
        (Some(_), Some(_)) => Err(ApiError::invalid_field(
            "table",
            "give counts (one vector) or table (rows of counts), not both",
        )),
        (None, None) => Err(ApiError::invalid_field(
            "counts",
            "counts (one vector) or table (rows of counts) is required",
        )),
    }
}

fn plan_request(
    req: &ReleaseRequest,
    dataset: &Dataset,
    max_dimension: usize,
    max_exponential_n: u64,
) -> Result<Planned, ApiError> {
    let input = parse_input(req, dataset, max_dimension)?;
    let label = req
        .label
        .clone()
        .map(Label::new)
        .transpose()
        .map_err(|e| ApiError::invalid_field("label", e.to_string()))?;
    let spec = match &input {
        Input::Vector(counts) => parse_any(req, counts, dataset, max_exponential_n)?,
        Input::Table(_) if req.mechanism == Kind::Exponential => {
            return Err(ApiError::invalid_field(
                "table",
                "the exponential mechanism releases one two-cell vector (counts), not a table",
            ))
        }
        Input::Table(_) if req.lower_bound.is_some() || req.prior_shape.is_some() => {
            parse_bounded(req, dataset.order)?
        }
        Input::Table(_) => parse_spec(req, dataset.order)?,
    };
    // A table is priced as one vector of its row length under the table form of the
    // dataset's relation: see `crate::table`.
    let (d, sens) = match &input {
        Input::Vector(counts) => (counts.len(), dataset.sensitivity),
        Input::Table(t) => (t.cells(), dataset.sensitivity.for_table()),
    };
    let plan = release::plan(&spec, d, dataset.order, &sens).map_err(|e| plan_error(e, dataset))?;
    match &input {
        Input::Vector(counts) => release::check_shapes(&plan.draw, counts, &sens),
        Input::Table(t) => table::check_shapes(&plan.draw, t, &sens),
    }
    .map_err(|e| plan_error(e, dataset))?;
    Ok(Planned { input, plan, label })
}

#[derive(Serialize)]
struct PreviewView {
    mechanism: Value,
    cost: CostView,
    admissible: bool,
    budget_after: BudgetView,
    /// Vectors: the forecast (null for baselines). Absent for tables.
    #[serde(skip_serializing_if = "Option::is_none")]
    forecast: Option<Option<VectorForecast>>,
    /// Tables: one forecast per row, rows in order. Absent for vectors.
    #[serde(skip_serializing_if = "Option::is_none")]
    forecasts: Option<Vec<Option<Forecast>>>,
    /// With `lower_bound`: the same request without it (the bound's gain).
    #[serde(skip_serializing_if = "Option::is_none")]
    without_bound: Option<Value>,
    /// With `lower_bound` on a vector: seed 003's own (ε, δ) next to the RDP route's. Tables
    /// have none: Theorem 1 is stated for one vector whose total N stays fixed, and under
    /// replace_one a record moving between rows changes two rows' totals.
    #[serde(skip_serializing_if = "Option::is_none")]
    gohari: Option<Value>,
}

async fn preview(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(req): ApiJson<ReleaseRequest>,
) -> Result<Json<Value>, ApiError> {
    let Parsed {
        dataset,
        planned: Planned { input, plan, .. },
    } = load_and_plan(&state, &caller, id, &req, false).await?;
    let budget = dataset.budget();
    let admissible = budget.admits(plan.charge);
    let mut after = budget;
    if admissible {
        after.spent = budget
            .spent
            .checked_add(plan.charge)
            .unwrap_or(budget.total);
        after.releases += 1;
    }
    let (forecast, forecasts) = match &input {
        Input::Vector(counts) => (Some(release::vector_forecast(&plan.draw, counts)), None),
        Input::Table(t) => (None, Some(table::forecasts(&plan.draw, t))),
    };
    let (without_bound, gohari) = match &input {
        Input::Vector(counts) => {
            match parse_any(&req, counts, &dataset, state.settings.max_exponential_n) {
                Ok(Spec::Bounded(spec)) => (
                    release::seeds::without_bound(
                        &spec,
                        counts.len(),
                        dataset.order,
                        &dataset.sensitivity,
                    ),
                    release::seeds::gohari_view(
                        &plan.draw,
                        counts,
                        &dataset.sensitivity,
                        dataset.dp_target.map(|t| t.delta),
                    ),
                ),
                _ => (None, None),
            }
        }
        // Priced as the table itself is: d = cells per row, the table form of the relation.
        Input::Table(t) if req.lower_bound.is_some() => match parse_bounded(&req, dataset.order) {
            Ok(Spec::Bounded(spec)) => (
                release::seeds::without_bound(
                    &spec,
                    t.cells(),
                    dataset.order,
                    &dataset.sensitivity.for_table(),
                ),
                None,
            ),
            _ => (None, None),
        },
        Input::Table(_) => (None, None),
    };
    let view = PreviewView {
        forecast,
        forecasts,
        without_bound,
        gohari,
        mechanism: plan.record,
        cost: CostView {
            order: dataset.order.get(),
            epsilon: plan.charge.to_f64(),
        },
        admissible,
        budget_after: BudgetView::from(&after),
    };
    Ok(Json(
        serde_json::to_value(view).map_err(|e| ApiError::Internal(e.to_string()))?,
    ))
}

/// `Idempotency-Key`: 1 to 255 visible ASCII characters, at most once.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::invalid_field(
            "Idempotency-Key",
            "Idempotency-Key must be sent at most once",
        ));
    }
    let key = value
        .to_str()
        .ok()
        .filter(|k| !k.is_empty() && k.len() <= 255 && k.bytes().all(|b| b.is_ascii_graphic()));
    key.map(|k| Some(k.to_string())).ok_or_else(|| {
        ApiError::invalid_field(
            "Idempotency-Key",
            "Idempotency-Key must be 1 to 255 visible ASCII characters",
        )
    })
}

/// HMAC-SHA-256 of the dataset id, the caller and the canonical request under the server's key.
/// The caller is part of it so that a key is a retry handle of the caller that made the request
/// only: another token presenting the same key is refused whatever its body, instead of being
/// told (by a replay) that it guessed the counts right.
fn fingerprint(
    key: &[u8; 32],
    dataset: Uuid,
    caller: &str,
    req: &ReleaseRequest,
) -> Result<[u8; 32], ApiError> {
    let body = serde_json::to_vec(req).map_err(|e| ApiError::Internal(e.to_string()))?;
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    mac.update(dataset.as_bytes());
    mac.update(&(caller.len() as u64).to_le_bytes());
    mac.update(caller.as_bytes());
    mac.update(&body);
    Ok(mac.finalize().into_bytes().into())
}

fn created(view: ReleaseView, replayed: bool) -> Response {
    let location = format!("/v1/datasets/{}/releases/{}", view.dataset_id, view.id);
    let mut response = (
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(view),
    )
        .into_response();
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}

/// The answer to a retry: the stored release, unchanged, charging nothing — or a refusal when
/// the key was used for a different request. Never a fresh sample.
async fn replay(
    state: &AppState,
    dataset: &Dataset,
    release: crate::ledger::Release,
    stored: [u8; 32],
    presented: [u8; 32],
) -> Result<Response, ApiError> {
    if !bool::from(stored.ct_eq(&presented)) {
        return Err(ApiError::IdempotencyKeyReused);
    }
    let current = state
        .store
        .get_dataset(dataset.id)
        .await?
        .ok_or_else(|| ApiError::not_found("dataset"))?;
    state.metrics.replays.inc();
    Ok(created(
        ReleaseView::new(release, dataset.order.get(), Some(&current.budget())),
        true,
    ))
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    gate: CommitGate,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ReleaseRequest>,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers)?;
    let Parsed {
        dataset,
        planned: Planned { input, plan, label },
    } = match load_and_plan(&state, &caller, id, &req, true).await {
        Ok(parsed) => parsed,
        Err(e) => {
            state.metrics.refusal(&e);
            return Err(e);
        }
    };
    let idempotency = match key {
        Some(key) => {
            let fp = fingerprint(&state.fingerprint_key, id, &caller.name(), &req)?;
            if let Some((existing, stored)) = state.store.find_by_idempotency_key(id, &key).await? {
                return replay(&state, &dataset, existing, stored, fp).await;
            }
            Some(Idempotency {
                key,
                fingerprint: fp,
            })
        }
        None => None,
    };
    drop(req);
    if !dataset.budget().admits(plan.charge) {
        // The cached figures only lag behind, so this refusal stands; report current ones.
        let current = state
            .store
            .get_dataset(id)
            .await?
            .ok_or_else(|| ApiError::not_found("dataset"))?;
        let budget = current.budget();
        state.caches.put_dataset(current);
        let e = exhausted(&budget, refusal_detail(&plan, &budget));
        state.metrics.refusal(&e);
        return Err(e);
    }

    // Draw and commit in a task of their own: if the client goes away or the request times
    // out, the commit still completes or rolls back as a whole (and a retry with the same
    // Idempotency-Key gets the stored release); it is never cut between "charged" and "stored".
    let task_state = state.clone();
    let created_by = caller.name();
    let kind = plan
        .record
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_string();
    let outcome = state
        .tasks
        .spawn(async move {
            let Plan {
                draw,
                charge,
                mut record,
                ..
            } = plan;
            let (output, drawn) = if input.total_cells() < INLINE_DRAW_CELLS {
                input.draw(&draw)
            } else {
                tokio::task::spawn_blocking(move || input.draw(&draw))
                    .await
                    .map_err(|e| ApiError::Internal(format!("sampler task failed: {e}")))?
            }
            .map_err(|e| ApiError::Internal(format!("sampling refused: {e}")))?;
            if let (Some(Value::Object(drawn)), Value::Object(record)) = (drawn, &mut record) {
                record.extend(drawn);
            }
            // The request timeout answered while this was drawing: the client was told 503
            // (not charged), so nothing may be charged.
            if !gate.begin_commit() {
                return Err(ApiError::Timeout);
            }
            let new = NewRelease {
                id: Uuid::now_v7(),
                dataset_id: id,
                created_by,
                mechanism: record,
                cost: charge,
                output,
                label,
                idempotency,
            };
            let fp = new.idempotency.as_ref().map(|i| i.fingerprint);
            Ok::<_, ApiError>((task_state.store.commit_release(&new).await?, fp))
        })
        .await
        .map_err(|e| ApiError::Internal(format!("release task failed: {e}")))?;
    let (outcome, fp) = outcome?;
    match outcome {
        CommitOutcome::Committed { release, budget } => {
            state.caches.observe_budget(id, &budget);
            tracing::info!(dataset = %id, release = %release.id, seq = release.seq, cost = release.cost.to_f64(), "release committed");
            state.metrics.release(&kind);
            if let Some(rows) = release.output.rows() {
                state.metrics.table_release(&kind, rows);
            }
            Ok(created(
                ReleaseView::new(release, dataset.order.get(), Some(&budget)),
                false,
            ))
        }
        CommitOutcome::Exhausted { budget } => {
            state.caches.observe_budget(id, &budget);
            let e = exhausted(
                &budget,
                "the release would exceed the dataset's remaining budget".into(),
            );
            state.metrics.refusal(&e);
            Err(e)
        }
        CommitOutcome::Existing {
            release,
            fingerprint,
        } => {
            let presented =
                fp.ok_or_else(|| ApiError::Internal("an idempotent outcome without a key".into()))?;
            replay(&state, &dataset, release, fingerprint, presented).await
        }
        CommitOutcome::DatasetNotFound => Err(ApiError::not_found("dataset")),
        CommitOutcome::OutputQuotaExceeded { quota } => {
            let e = ApiError::OutputQuotaExceeded { quota };
            state.metrics.refusal(&e);
            Err(e)
        }
    }
}

fn refusal_detail(plan: &Plan, budget: &BudgetState) -> String {
    format!(
        "the release costs {} at order {} but only {} of the budget remains",
        plan.charge.to_f64(),
        budget.order.get(),
        budget.remaining().to_f64()
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default, deserialize_with = "super::nonnull::value")]
    limit: Option<u32>,
    #[serde(default, deserialize_with = "super::nonnull::value")]
    before: Option<i64>,
    #[serde(default, deserialize_with = "super::nonnull::value")]
    fields: Option<Fields>,
}

/// `fields=summary` lists releases without their outputs and mechanism records: a client that
/// wants only who spent what when (the console's spend chart) need not fetch every output.
#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Fields {
    Summary,
}

const DEFAULT_PAGE: u32 = 100;

/// An upper bound on the JSON of one release of `cells` cells: 25 bytes per number (the longest
/// f64 in shortest form, `-2.2250738585072014e-308`, and a comma) and 2 KiB for the rest.
fn listed_bytes(cells: i64) -> usize {
    usize::try_from(cells)
        .unwrap_or(usize::MAX)
        .saturating_mul(25)
        .saturating_add(2048)
}

/// How many of the releases of `sizes` (newest first) fit in `max_bytes`; at least one when there
/// is one, so that any release can be listed.
fn page_fits(sizes: &[(i64, i64)], max_bytes: usize) -> usize {
    let mut total = 0usize;
    for (n, (_, cells)) in sizes.iter().enumerate() {
        total = total.saturating_add(listed_bytes(*cells));
        if total > max_bytes {
            return n.max(1);
        }
    }
    sizes.len()
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.require_dataset(id)?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > state.settings.max_page_size {
        return Err(ApiError::invalid_field(
            "limit",
            format!(
                "limit must be between 1 and {}",
                state.settings.max_page_size
            ),
        ));
    }
    if query.before.is_some_and(|b| b < 1) {
        return Err(ApiError::invalid_field(
            "before",
            "before must be at least 1",
        ));
    }
    let dataset = state
        .store
        .get_dataset(id)
        .await?
        .ok_or_else(|| ApiError::not_found("dataset"))?;
    if query.fields == Some(Fields::Summary) {
        // A summary's JSON is bounded whatever the release's size (a label is at most 200
        // characters, 800 bytes), so the page bound is a count: 4096 at the default 8 MiB.
        let fits = (state.settings.max_page_bytes / listed_bytes(0)).clamp(1, limit as usize);
        let summaries = state
            .store
            .list_release_summaries(id, query.before, fits as u32)
            .await?;
        let next_before = match summaries.last() {
            Some(last) if summaries.len() == fits && last.seq > 1 => Some(last.seq),
            _ => None,
        };
        let items: Vec<ReleaseSummaryView> = summaries
            .into_iter()
            .map(|r| ReleaseSummaryView::new(r, dataset.order.get()))
            .collect();
        return Ok(Json(json!({ "items": items, "next_before": next_before })));
    }
    // Sizes first: the page stops before the release that would take it past max_page_bytes
    // (one release always fits), so neither the outputs read nor the answer exceed that bound.
    let sizes = state.store.release_sizes(id, query.before, limit).await?;
    let fits = page_fits(&sizes, state.settings.max_page_bytes);
    // Pinned below the newest release measured, so one committed meanwhile cannot slip in.
    let before = query.before.or(sizes.first().map(|(seq, _)| seq + 1));
    let releases = state
        .store
        .list_releases(id, before, fits.max(1) as u32)
        .await?;
    let releases = if sizes.is_empty() {
        Vec::new()
    } else {
        releases
    };
    let next_before = match releases.last() {
        Some(last) if fits < sizes.len() => Some(last.seq),
        Some(last) if releases.len() == limit as usize && last.seq > 1 => Some(last.seq),
        _ => None,
    };
    let items: Vec<ReleaseView> = releases
        .into_iter()
        .map(|r| ReleaseView::new(r, dataset.order.get(), None))
        .collect();
    Ok(Json(json!({ "items": items, "next_before": next_before })))
}

async fn show(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((id, release_id)): ApiPath<(Uuid, Uuid)>,
) -> Result<Json<ReleaseView>, ApiError> {
    let dataset = state.dataset_for(&caller, id).await?;
    let release = state
        .store
        .get_release(id, release_id)
        .await?
        .ok_or_else(|| ApiError::not_found("release"))?;
    Ok(Json(ReleaseView::new(release, dataset.order.get(), None)))
}
