//! The release request: its wire body, and the typed request it parses into.
//!
//! [`RequestBody`] is the JSON as it arrives: every field optional, read with number sequences
//! bounded (`crate::wire`). It is also the *canonical form* of a request: re-serialised, it is
//! what the idempotency fingerprint hashes, so its field order and skip rules are part of every
//! stored fingerprint (tests/it/golden.rs pins them). Never logged or stored; no `Debug`.
//!
//! [`Request::parse`] turns a body into a [`Request`]: the input (a vector or a table), the
//! mechanism with exactly its own fields ([`Spec`], one variant per mechanism), and the label.
//! Which fields each mechanism takes is one table, [`Kind::fields`]; everything a request can get
//! wrong is a [`RequestError`] naming the field. Pure: no HTTP, no store, no randomness.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::bounded::{self, BoundedMode, BoundedSpec};
use super::exponential::ExponentialSpec;
use super::record::Selection;
use super::table::{self, CountTable};
use super::{Draw, Noise, Plan, PlanError, Spec, Target, DEFAULT_PRIOR, DEFAULT_R};
use crate::ledger::{Label, Names, Output};
use crate::privacy::bounded::CellValues;
use crate::privacy::exponential::BetaCandidates;
use crate::privacy::types::Relation;
use crate::privacy::{Counts, Epsilon, Order, Prior, Sensitivity};
use crate::wire::{cells, non_null, rows, ScalarOrCells};

mod schema;

/// Counts above this lose integer precision in f64 and push Gamma shapes towards overflow; the
/// service refuses them rather than sample from a distorted distribution.
pub const MAX_COUNT: f64 = 1e15;

/// The mechanism a request names. Read through a string, so a non-string value is a 422 data
/// error, not a JSON syntax error, and serde's `{"dirichlet": null}` enum form is refused.
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

/// The optional fields whose presence depends on the mechanism, in the order a refusal names
/// the first one that does not apply.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Field {
    Order,
    Prior,
    R,
    Alpha,
    Sigma,
    Scale,
    LowerBound,
    PriorShape,
}

impl Field {
    pub const ALL: [Field; 8] = [
        Field::Order,
        Field::Prior,
        Field::R,
        Field::Alpha,
        Field::Sigma,
        Field::Scale,
        Field::LowerBound,
        Field::PriorShape,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Field::Order => "order",
            Field::Prior => "prior",
            Field::R => "r",
            Field::Alpha => "alpha",
            Field::Sigma => "sigma",
            Field::Scale => "scale",
            Field::LowerBound => "lower_bound",
            Field::PriorShape => "prior_shape",
        }
    }
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::Dirichlet,
        Kind::Posterior,
        Kind::Diffuse,
        Kind::Explicit,
        Kind::Gaussian,
        Kind::Laplace,
        Kind::Exponential,
    ];

    /// The name on the wire and in mechanism records.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Dirichlet => "dirichlet",
            Kind::Posterior => "posterior",
            Kind::Diffuse => "diffuse",
            Kind::Explicit => "explicit",
            Kind::Gaussian => "gaussian",
            Kind::Laplace => "laplace",
            Kind::Exponential => "exponential",
        }
    }

    /// The optional fields this mechanism takes (besides counts/table, epsilon and label).
    /// `prior_shape` applies to posterior only; `lower_bound` to the Dirichlet family.
    pub fn fields(self) -> &'static [Field] {
        use Field::*;
        match self {
            Kind::Dirichlet => &[Order, Prior, LowerBound],
            Kind::Posterior => &[Order, R, LowerBound, PriorShape],
            Kind::Diffuse => &[Order, Alpha, LowerBound],
            Kind::Explicit => &[Order, R, Alpha, LowerBound],
            Kind::Gaussian => &[Order, Sigma],
            Kind::Laplace => &[Order, Scale],
            Kind::Exponential => &[Prior],
        }
    }

    fn is_dirichlet_family(self) -> bool {
        matches!(
            self,
            Kind::Dirichlet | Kind::Posterior | Kind::Diffuse | Kind::Explicit
        )
    }
}

impl TryFrom<String> for Kind {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            // Never quote `name`: problem documents echo nothing that was sent.
            .ok_or_else(|| {
                let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
                format!("expected one of {}", names.join(", "))
            })
    }
}

/// A number or an array of numbers (bounded while parsed: [`ScalarOrCells`]).
#[derive(Deserialize, Serialize, Clone, Debug)]
#[serde(untagged)]
#[serde(from = "ScalarOrCells")]
pub enum AlphaRequest {
    Scalar(f64),
    PerCell(Vec<f64>),
}

impl From<ScalarOrCells> for AlphaRequest {
    fn from(value: ScalarOrCells) -> Self {
        match value {
            ScalarOrCells::Scalar(a) => AlphaRequest::Scalar(a),
            ScalarOrCells::Cells(v) => AlphaRequest::PerCell(v),
        }
    }
}

/// Raw counts as they arrive. No `Debug`: they must never reach a log.
#[derive(Deserialize, Serialize, Clone)]
#[serde(transparent)]
pub struct RawCounts(#[serde(deserialize_with = "cells")] Vec<f64>);

/// A raw table (rows of counts) as it arrives. No `Debug`, like [`RawCounts`].
#[derive(Deserialize, Serialize, Clone)]
#[serde(transparent)]
pub struct RawTable(#[serde(deserialize_with = "rows")] Vec<Vec<f64>>);

/// The release request body on the wire, and its canonical form (see the module docs).
#[derive(Deserialize, Serialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct RequestBody {
    // `table` and `label` are skipped when absent, so a vector request serialises as it did
    // before tables existed and its stored idempotency fingerprint still matches a retry.
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    counts: Option<RawCounts>,
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    table: Option<RawTable>,
    #[serde(default, deserialize_with = "non_null")]
    epsilon: Option<f64>,
    #[serde(default, deserialize_with = "non_null")]
    order: Option<f64>,
    #[serde(default)]
    mechanism: Kind,
    /// A number (dirichlet's base prior a₀) or `[α, β]` (exponential's Beta prior).
    #[serde(default, deserialize_with = "non_null")]
    prior: Option<AlphaRequest>,
    #[serde(default, deserialize_with = "non_null")]
    r: Option<f64>,
    #[serde(default, deserialize_with = "non_null")]
    alpha: Option<AlphaRequest>,
    #[serde(default, deserialize_with = "non_null")]
    sigma: Option<f64>,
    #[serde(default, deserialize_with = "non_null")]
    scale: Option<f64>,
    // Skipped when absent so that the idempotency fingerprint of older requests is unchanged.
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    label: Option<String>,
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    lower_bound: Option<AlphaRequest>,
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    prior_shape: Option<AlphaRequest>,
    /// Public names of a table's rows (issue 22), stored with the release. Skipped when absent,
    /// like every field added after the first fingerprints were stored.
    #[serde(
        default,
        deserialize_with = "non_null",
        skip_serializing_if = "Option::is_none"
    )]
    row_names: Option<Vec<String>>,
}

impl RequestBody {
    /// HMAC-SHA-256 of the dataset id, the caller and the canonical request under the server's
    /// key. The caller is part of it so that a key is a retry handle of the caller that made the
    /// request only: another token presenting the same key is refused whatever its body, instead
    /// of being told (by a replay) that it guessed the counts right.
    pub fn fingerprint(&self, key: &[u8; 32], dataset: uuid::Uuid, caller: &str) -> [u8; 32] {
        // Serialising plain numbers, strings and arrays cannot fail.
        let body = serde_json::to_vec(self).expect("a request body serialises");
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
        mac.update(dataset.as_bytes());
        mac.update(&(caller.len() as u64).to_le_bytes());
        mac.update(caller.as_bytes());
        mac.update(&body);
        mac.finalize().into_bytes().into()
    }

    fn has(&self, field: Field) -> bool {
        match field {
            Field::Order => self.order.is_some(),
            Field::Prior => self.prior.is_some(),
            Field::R => self.r.is_some(),
            Field::Alpha => self.alpha.is_some(),
            Field::Sigma => self.sigma.is_some(),
            Field::Scale => self.scale.is_some(),
            Field::LowerBound => self.lower_bound.is_some(),
            Field::PriorShape => self.prior_shape.is_some(),
        }
    }
}

/// A request the service cannot run, with the field at fault (problem+json's `field`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    pub field: &'static str,
    pub message: String,
}

impl RequestError {
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        RequestError {
            field,
            message: message.into(),
        }
    }
    fn param(field: &'static str, e: impl std::fmt::Display) -> Self {
        RequestError::new(field, e.to_string())
    }
}

/// What a request is parsed against: the dataset's public parameters and the service limits.
#[derive(Debug, Clone, Copy)]
pub struct Context {
    pub ledger_order: Order,
    pub sensitivity: Sensitivity,
    pub max_dimension: usize,
    pub max_exponential_n: u64,
    /// The number of cells the dataset names, when it was registered with `cells`: every vector
    /// (or table row) must have exactly that many.
    pub cells: Option<usize>,
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
    pub fn draw(&self, draw: &Draw) -> Result<(Output, Option<Selection>), String> {
        match self {
            Input::Vector(counts) => {
                super::execute_release(draw, counts).map(|(y, drawn)| (Output::Vector(y), drawn))
            }
            Input::Table(t) => table::execute(draw, t).map(|t| (Output::Table(t), None)),
        }
    }
}

/// A parsed release request. No `Debug`: it holds the counts.
pub struct Request {
    pub input: Input,
    pub spec: Spec,
    pub label: Option<Label>,
    /// A table's public row names, one per row.
    pub row_names: Option<Names>,
}

impl Request {
    /// Parse a body against a dataset: the input first (so a malformed count is reported before
    /// anything about the mechanism), then the label, then the mechanism and its fields.
    pub fn parse(body: &RequestBody, ctx: &Context) -> Result<Request, RequestError> {
        let input = parse_input(body, ctx)?;
        let label = body
            .label
            .clone()
            .map(Label::new)
            .transpose()
            .map_err(|e| RequestError::new("label", format!("label {e}")))?;
        let row_names = parse_row_names(body, &input)?;
        let spec = match &input {
            Input::Vector(counts) if body.mechanism == Kind::Exponential => {
                parse_exponential(body, counts, ctx)?
            }
            Input::Table(_) if body.mechanism == Kind::Exponential => {
                return Err(RequestError::new(
                    "table",
                    "the exponential mechanism releases one two-cell vector (counts), not a table",
                ))
            }
            _ if body.lower_bound.is_some() || body.prior_shape.is_some() => {
                parse_bounded(body, ctx.ledger_order)?
            }
            _ => parse_spec(body, ctx.ledger_order)?,
        };
        Ok(Request {
            input,
            spec,
            label,
            row_names,
        })
    }

    /// The cells that price the release and the relation it is priced under: a table is priced
    /// as one vector of its row length under the table form of the dataset's relation (see
    /// `release::table`).
    pub fn priced_as(&self, sensitivity: &Sensitivity) -> (usize, Sensitivity) {
        match &self.input {
            Input::Vector(counts) => (counts.len(), *sensitivity),
            Input::Table(t) => (t.cells(), sensitivity.for_table()),
        }
    }

    /// Calibrate and price at the ledger order, then check that the f64 draw can carry it.
    pub fn plan(&self, ledger_order: Order, sensitivity: &Sensitivity) -> Result<Plan, PlanError> {
        let (d, sens) = self.priced_as(sensitivity);
        let plan = super::plan(&self.spec, d, ledger_order, &sens)?;
        match &self.input {
            Input::Vector(counts) => super::check_shapes(&plan.draw, counts, &sens),
            Input::Table(t) => table::check_shapes(&plan.draw, t, &sens),
        }?;
        Ok(plan)
    }

    /// With `lower_bound`: the same request without it, priced as this one is (the bound's gain).
    pub fn without_bound(
        &self,
        ledger_order: Order,
        sensitivity: &Sensitivity,
    ) -> Option<bounded::WithoutBound> {
        let Spec::Bounded(spec) = &self.spec else {
            return None;
        };
        let (d, sens) = self.priced_as(sensitivity);
        bounded::without_bound(spec, d, ledger_order, &sens)
    }
}

fn parse_input(body: &RequestBody, ctx: &Context) -> Result<Input, RequestError> {
    let too_large = |field: &'static str, at: String| {
        RequestError::new(
            field,
            format!("{field}{at} exceeds the largest supported count, {MAX_COUNT:e}"),
        )
    };
    match (&body.counts, &body.table) {
        (Some(counts), None) => {
            let counts = Counts::new(counts.0.clone(), ctx.max_dimension)
                .map_err(|e| RequestError::param("counts", e))?;
            if let Some(index) = counts.as_slice().iter().position(|&x| x > MAX_COUNT) {
                return Err(too_large("counts", format!("[{index}]")));
            }
            if let Some(cells) = ctx.cells.filter(|&n| n != counts.len()) {
                return Err(RequestError::new(
                    "counts",
                    format!(
                        "the dataset names {cells} cells, and counts has {}",
                        counts.len()
                    ),
                ));
            }
            Ok(Input::Vector(counts))
        }
        (None, Some(rows)) => {
            let table_error = |e: table::TableError| RequestError::param("table", e);
            table::check_relation(&ctx.sensitivity).map_err(table_error)?;
            let t = CountTable::new(rows.0.clone(), ctx.max_dimension).map_err(table_error)?;
            for (row, counts) in t.rows().iter().enumerate() {
                if let Some(index) = counts.as_slice().iter().position(|&x| x > MAX_COUNT) {
                    return Err(too_large("table", format!("[{row}][{index}]")));
                }
            }
            if let Some(cells) = ctx.cells.filter(|&n| n != t.cells()) {
                return Err(RequestError::new(
                    "table",
                    format!(
                        "the dataset names {cells} cells, and the table's rows have {}",
                        t.cells()
                    ),
                ));
            }
            Ok(Input::Table(t))
        }
        (Some(_), Some(_)) => Err(RequestError::new(
            "table",
            "give counts (one vector) or table (rows of counts), not both",
        )),
        (None, None) => Err(RequestError::new(
            "counts",
            "counts (one vector) or table (rows of counts) is required",
        )),
    }
}

/// `row_names`: only with a table, one distinct name per row.
fn parse_row_names(body: &RequestBody, input: &Input) -> Result<Option<Names>, RequestError> {
    let Some(names) = &body.row_names else {
        return Ok(None);
    };
    let Input::Table(t) = input else {
        return Err(RequestError::new(
            "row_names",
            "row_names names a table's rows: give it with table, not with counts",
        ));
    };
    if names.len() != t.rows().len() {
        return Err(RequestError::new(
            "row_names",
            format!(
                "row_names has {} names for a table of {} rows",
                names.len(),
                t.rows().len()
            ),
        ));
    }
    Names::new(names.clone(), t.rows().len())
        .map(Some)
        .map_err(|e| RequestError::new("row_names", format!("row_names {e}")))
}

/// The first field present that `kind` does not take, among `fields` (all by default).
fn check_fields(body: &RequestBody, kind: Kind, fields: &[Field]) -> Result<(), RequestError> {
    match fields
        .iter()
        .find(|f| body.has(**f) && !kind.fields().contains(f))
    {
        None => Ok(()),
        Some(f) => Err(RequestError::new(
            f.name(),
            format!(
                "{} does not apply to the {} mechanism",
                f.name(),
                kind.name()
            ),
        )),
    }
}

fn positive(field: &'static str, v: f64) -> Result<f64, RequestError> {
    if !v.is_finite() || v <= 0.0 {
        return Err(RequestError::new(
            field,
            format!("{field} must be a finite number greater than 0"),
        ));
    }
    Ok(v)
}

fn prior_of(alpha: &AlphaRequest) -> Result<Prior, RequestError> {
    match alpha {
        AlphaRequest::Scalar(a) => Prior::uniform(*a),
        AlphaRequest::PerCell(v) => Prior::per_cell(v.clone()),
    }
    .map_err(|e| RequestError::param("alpha", e))
}

fn cell_values(field: &'static str, value: &AlphaRequest) -> Result<CellValues, RequestError> {
    let values = match value {
        AlphaRequest::Scalar(v) => CellValues::Uniform(*v),
        AlphaRequest::PerCell(v) => CellValues::PerCell(v.clone()),
    };
    CellValues::non_negative(field, values).map_err(|e| RequestError::param(field, e))
}

fn scalar_prior(body: &RequestBody) -> Result<f64, RequestError> {
    match &body.prior {
        None => Ok(DEFAULT_PRIOR),
        Some(AlphaRequest::Scalar(p)) => positive("prior", *p),
        Some(AlphaRequest::PerCell(_)) => Err(RequestError::new(
            "prior",
            "prior must be a number for the dirichlet mechanism",
        )),
    }
}

/// `epsilon` and `order` of a calibrated mechanism: the target, when epsilon is given.
struct Targeting {
    epsilon: Option<Epsilon>,
    order: Order,
    kind: Kind,
}

impl Targeting {
    fn parse(body: &RequestBody, ledger_order: Order) -> Result<Targeting, RequestError> {
        let epsilon = body
            .epsilon
            .map(|e| Epsilon::new(e).map_err(|err| RequestError::param("epsilon", err)))
            .transpose()?;
        let order = match body.order {
            Some(o) => Order::new(o).map_err(|e| RequestError::param("order", e))?,
            None => ledger_order,
        };
        Ok(Targeting {
            epsilon,
            order,
            kind: body.mechanism,
        })
    }

    fn target(&self) -> Result<Target, RequestError> {
        self.epsilon
            .map(|epsilon| Target {
                epsilon,
                order: self.order,
            })
            .ok_or_else(|| {
                RequestError::new(
                    "epsilon",
                    format!("the {} mechanism needs epsilon", self.kind.name()),
                )
            })
    }
}

/// Given parameters are priced at the ledger order: a calibration order does not apply.
fn no_order(body: &RequestBody, message: &str) -> Result<(), RequestError> {
    match body.order {
        Some(_) => Err(RequestError::new("order", message)),
        None => Ok(()),
    }
}

const EXPLICIT_ORDER: &str =
    "the explicit mechanism is priced at the ledger order; order does not apply";

/// The mechanisms without `lower_bound` or `prior_shape`.
fn parse_spec(body: &RequestBody, ledger_order: Order) -> Result<Spec, RequestError> {
    let kind = body.mechanism;
    let targeting = Targeting::parse(body, ledger_order)?;
    if body.order.is_some() && targeting.epsilon.is_none() {
        return Err(RequestError::new(
            "order",
            "order applies only together with epsilon (the calibration target)",
        ));
    }
    check_fields(body, kind, &Field::ALL)?;
    let need = |field: &'static str, value: Option<f64>| {
        value.ok_or_else(|| {
            RequestError::new(
                field,
                format!("the {} mechanism needs {field}", kind.name()),
            )
        })
    };
    let need_alpha = || {
        body.alpha.as_ref().ok_or_else(|| {
            RequestError::new(
                "alpha",
                format!("the {} mechanism needs alpha", kind.name()),
            )
        })
    };
    Ok(match kind {
        Kind::Dirichlet => Spec::Dirichlet {
            prior: scalar_prior(body)?,
            target: targeting.target()?,
        },
        Kind::Posterior => Spec::Posterior {
            r: body
                .r
                .map(|r| positive("r", r))
                .transpose()?
                .unwrap_or(DEFAULT_R),
            target: targeting.target()?,
        },
        Kind::Diffuse => {
            let alpha = prior_of(need_alpha()?)?;
            Spec::Diffuse {
                target: targeting.target()?,
                alpha,
            }
        }
        Kind::Explicit => {
            let r = positive("r", need("r", body.r)?)?;
            let alpha = need_alpha()?;
            no_order(body, EXPLICIT_ORDER)?;
            Spec::Explicit {
                r,
                alpha: prior_of(alpha)?,
                cap: targeting.epsilon,
            }
        }
        Kind::Gaussian | Kind::Laplace => {
            let (own, own_name) = match kind {
                Kind::Gaussian => (body.sigma, "sigma"),
                _ => (body.scale, "scale"),
            };
            let noise = match own {
                Some(v) => {
                    no_order(body, &format!("with {own_name} given, the mechanism is priced at the ledger order; order does not apply"))?;
                    Noise::Given {
                        value: positive(own_name, v)?,
                        cap: targeting.epsilon,
                    }
                }
                None => Noise::Calibrated(targeting.target().map_err(|_| {
                    RequestError::new(
                        "epsilon",
                        format!("the {} mechanism needs {own_name} or epsilon", kind.name()),
                    )
                })?),
            };
            if kind == Kind::Gaussian {
                Spec::Gaussian(noise)
            } else {
                Spec::Laplace(noise)
            }
        }
        // `Request::parse` sends exponential requests to `parse_exponential`.
        Kind::Exponential => {
            return Err(RequestError::new(
                "mechanism",
                "the exponential mechanism releases one two-cell vector (counts)",
            ))
        }
    })
}

/// A Dirichlet-family request with `lower_bound` or `prior_shape` (seeds 000 Remark 2, 003,
/// 004 Algorithm 3). `alpha` may be 0 in a cell here: the bound supplies the prior there.
fn parse_bounded(body: &RequestBody, ledger_order: Order) -> Result<Spec, RequestError> {
    let kind = body.mechanism;
    let lower = body
        .lower_bound
        .as_ref()
        .map(|l| cell_values("lower_bound", l))
        .transpose()?;
    if body.prior_shape.is_some() && kind != Kind::Posterior {
        return Err(RequestError::new(
            "prior_shape",
            format!(
                "prior_shape does not apply to the {} mechanism (only to posterior)",
                kind.name()
            ),
        ));
    }
    if !kind.is_dirichlet_family() {
        return Err(RequestError::new(
            "lower_bound",
            format!(
                "lower_bound does not apply to the {} mechanism (only to dirichlet, posterior, diffuse and explicit)",
                kind.name()
            ),
        ));
    }
    let targeting = Targeting::parse(body, ledger_order)?;
    check_fields(body, kind, &Field::ALL)?;
    let alpha = || {
        body.alpha
            .as_ref()
            .ok_or_else(|| {
                RequestError::new(
                    "alpha",
                    format!("the {} mechanism needs alpha", kind.name()),
                )
            })
            .and_then(|a| cell_values("alpha", a))
    };
    let mode = match kind {
        Kind::Dirichlet => BoundedMode::Dirichlet {
            target: targeting.target()?,
            prior: scalar_prior(body)?,
        },
        Kind::Posterior => {
            let shape = match &body.prior_shape {
                Some(s) => cell_values("prior_shape", s)?,
                None => CellValues::Uniform(1.0),
            };
            if shape.min() <= 0.0 && lower.is_none() {
                return Err(RequestError::new(
                    "prior_shape",
                    "prior_shape must be greater than 0 in every cell (0 is allowed only with lower_bound)",
                ));
            }
            BoundedMode::Posterior {
                target: targeting.target()?,
                r: body
                    .r
                    .map(|r| positive("r", r))
                    .transpose()?
                    .unwrap_or(DEFAULT_R),
                shape,
            }
        }
        Kind::Diffuse => BoundedMode::Diffuse {
            target: targeting.target()?,
            alpha: alpha()?,
        },
        Kind::Explicit => {
            no_order(body, EXPLICIT_ORDER)?;
            let r = positive(
                "r",
                body.r
                    .ok_or_else(|| RequestError::new("r", "the explicit mechanism needs r"))?,
            )?;
            BoundedMode::Explicit {
                r,
                alpha: alpha()?,
                cap: targeting.epsilon,
            }
        }
        Kind::Gaussian | Kind::Laplace | Kind::Exponential => {
            unreachable!("checked above: the Dirichlet family")
        }
    };
    Ok(Spec::Bounded(BoundedSpec { mode, lower }))
}

/// Seed 002's exponential mechanism: two whole-number cells (successes, failures) on a
/// `replace_one` dataset, n = their sum at most `max_exponential_n` (the selection is O(n)).
fn parse_exponential(
    body: &RequestBody,
    counts: &Counts,
    ctx: &Context,
) -> Result<Spec, RequestError> {
    check_fields(body, Kind::Exponential, &Field::ALL)?;
    if ctx.sensitivity.relation() != Relation::ReplaceOne {
        return Err(RequestError::new(
            "mechanism",
            "the exponential mechanism needs a replace_one dataset (seed 002's neighbours replace one record and keep n fixed)",
        ));
    }
    let epsilon =
        Epsilon::new(body.epsilon.ok_or_else(|| {
            RequestError::new("epsilon", "the exponential mechanism needs epsilon")
        })?)
        .map_err(|e| RequestError::param("epsilon", e))?;
    let x = counts.as_slice();
    if x.len() != 2 {
        return Err(RequestError::new(
            "counts",
            "the exponential mechanism needs exactly 2 cells (successes, failures)",
        ));
    }
    if x.iter().any(|v| v.fract() != 0.0) {
        return Err(RequestError::new(
            "counts",
            "the exponential mechanism needs whole-number counts",
        ));
    }
    // n = 0 (an empty group) is released like any other: one candidate, the prior
    // (`privacy::exponential`, "Parameters").
    let n = x[0] + x[1];
    let max_n = ctx.max_exponential_n;
    if n > max_n as f64 {
        return Err(RequestError::new(
            "counts",
            format!("the exponential mechanism needs counts[0] + counts[1] <= {max_n} (the configured max_exponential_n)"),
        ));
    }
    let prior = match &body.prior {
        None => (1.0, 1.0),
        Some(AlphaRequest::PerCell(v)) if v.len() == 2 => {
            (positive("prior", v[0])?, positive("prior", v[1])?)
        }
        Some(_) => {
            return Err(RequestError::new(
                "prior",
                "prior must be [alpha, beta] (two numbers > 0) for the exponential mechanism",
            ))
        }
    };
    // The prior is checked here, with its field, rather than later as a bare plan error.
    BetaCandidates::new(n as u64, prior.0, prior.1)
        .map_err(|e| RequestError::new("prior", format!("prior [alpha, beta]: {e}")))?;
    Ok(Spec::Exponential(ExponentialSpec {
        epsilon,
        prior,
        n: n as u64,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn ctx(relation: Sensitivity) -> Context {
        Context {
            ledger_order: Order::new(2.0).unwrap(),
            sensitivity: relation,
            max_dimension: 8,
            max_exponential_n: 100,
            cells: None,
        }
    }

    fn parse(json: &str) -> Result<Request, RequestError> {
        parse_with(json, Sensitivity::REPLACE_ONE)
    }

    fn parse_with(json: &str, relation: Sensitivity) -> Result<Request, RequestError> {
        let _limit = crate::wire::CellLimit::set(8);
        let body: RequestBody = serde_json::from_str(json).expect("a well-formed body");
        Request::parse(&body, &ctx(relation))
    }

    fn target(epsilon: f64, order: f64) -> Target {
        Target {
            epsilon: Epsilon::new(epsilon).unwrap(),
            order: Order::new(order).unwrap(),
        }
    }

    /// Every mechanism's request shape, parsed into its own variant with its defaults.
    #[test]
    fn each_mechanism_parses_into_its_own_variant() {
        let uniform = |a: f64| Prior::uniform(a).unwrap();
        let cases: Vec<(&str, Spec)> = vec![
            (
                r#"{"counts": [1, 2], "epsilon": 0.5}"#,
                Spec::Dirichlet {
                    target: target(0.5, 2.0),
                    prior: DEFAULT_PRIOR,
                },
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 0.5, "order": 4, "prior": 3}"#,
                Spec::Dirichlet {
                    target: target(0.5, 4.0),
                    prior: 3.0,
                },
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "mechanism": "posterior"}"#,
                Spec::Posterior {
                    target: target(1.0, 2.0),
                    r: DEFAULT_R,
                },
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "mechanism": "diffuse", "alpha": 2}"#,
                Spec::Diffuse {
                    target: target(1.0, 2.0),
                    alpha: uniform(2.0),
                },
            ),
            (
                r#"{"counts": [1, 2], "mechanism": "explicit", "r": 0.5, "alpha": 2}"#,
                Spec::Explicit {
                    r: 0.5,
                    alpha: uniform(2.0),
                    cap: None,
                },
            ),
            (
                r#"{"counts": [1, 2], "mechanism": "gaussian", "sigma": 3}"#,
                Spec::Gaussian(Noise::Given {
                    value: 3.0,
                    cap: None,
                }),
            ),
            (
                r#"{"counts": [1, 2], "mechanism": "laplace", "epsilon": 1}"#,
                Spec::Laplace(Noise::Calibrated(target(1.0, 2.0))),
            ),
            (
                r#"{"counts": [7, 3], "mechanism": "exponential", "epsilon": 2, "prior": [2, 3]}"#,
                Spec::Exponential(ExponentialSpec {
                    epsilon: Epsilon::new(2.0).unwrap(),
                    prior: (2.0, 3.0),
                    n: 10,
                }),
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "lower_bound": 1}"#,
                Spec::Bounded(BoundedSpec {
                    mode: BoundedMode::Dirichlet {
                        target: target(1.0, 2.0),
                        prior: DEFAULT_PRIOR,
                    },
                    lower: Some(CellValues::Uniform(1.0)),
                }),
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "mechanism": "posterior", "prior_shape": [1, 2]}"#,
                Spec::Bounded(BoundedSpec {
                    mode: BoundedMode::Posterior {
                        target: target(1.0, 2.0),
                        r: DEFAULT_R,
                        shape: CellValues::PerCell(vec![1.0, 2.0]),
                    },
                    lower: None,
                }),
            ),
        ];
        for (json, want) in cases {
            let got = parse(json).unwrap_or_else(|e| panic!("{json}: {e:?}"));
            assert_eq!(got.spec, want, "{json}");
        }
    }

    /// Each refusal names its field: a field another mechanism takes, a missing required one,
    /// out-of-range values, and the input rules.
    #[test]
    fn refusals_name_the_field_at_fault() {
        let cases: &[(&str, &str, &str)] = &[
            (
                r#"{"counts": [1, 2], "epsilon": 1, "r": 2}"#,
                "r",
                "does not apply to the dirichlet",
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "alpha": 2}"#,
                "alpha",
                "does not apply",
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "mechanism": "posterior", "prior": 2}"#,
                "prior",
                "does not apply to the posterior",
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "mechanism": "diffuse", "r": 2, "alpha": 1}"#,
                "r",
                "does not apply",
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "mechanism": "diffuse"}"#,
                "alpha",
                "needs alpha",
            ),
            (
                r#"{"counts": [1, 2], "mechanism": "explicit", "alpha": 1}"#,
                "r",
                "needs r",
            ),
            (
                r#"{"counts": [1, 2], "mechanism": "explicit", "r": 1}"#,
                "alpha",
                "needs alpha",
            ),
            (
                r#"{"counts": [1, 2], "mechanism": "explicit", "r": 1, "alpha": 1, "epsilon": 1, "order": 3}"#,
                "order",
                "order does not apply",
            ),
            (
                r#"{"counts": [1, 2], "mechanism": "gaussian", "sigma": 1, "scale": 1}"#,
                "scale",
                "does not apply to the gaussian",
            ),
            (
                r#"{"counts": [1, 2], "mechanism": "laplace", "sigma": 1}"#,
                "sigma",
                "does not apply to the laplace",
            ),
            (
                r#"{"counts": [1, 2], "mechanism": "gaussian"}"#,
                "epsilon",
                "needs sigma or epsilon",
            ),
            (
                r#"{"counts": [1, 2], "mechanism": "gaussian", "sigma": 1, "epsilon": 1, "order": 3}"#,
                "order",
                "order does not apply",
            ),
            (r#"{"counts": [1, 2]}"#, "epsilon", "needs epsilon"),
            (
                r#"{"counts": [1, 2], "order": 3}"#,
                "order",
                "only together with epsilon",
            ),
            (r#"{"counts": [1, 2], "epsilon": 0}"#, "epsilon", ""),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "prior": -1}"#,
                "prior",
                "greater than 0",
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "prior": [1, 2]}"#,
                "prior",
                "must be a number",
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "mechanism": "posterior", "r": 0}"#,
                "r",
                "greater than 0",
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "mechanism": "gaussian", "lower_bound": 1}"#,
                "lower_bound",
                "only to dirichlet",
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "prior_shape": 1}"#,
                "prior_shape",
                "only to posterior",
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "mechanism": "posterior", "prior_shape": 0}"#,
                "prior_shape",
                "only with lower_bound",
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "lower_bound": -1}"#,
                "lower_bound",
                "",
            ),
            (
                r#"{"counts": [7, 3], "mechanism": "exponential"}"#,
                "epsilon",
                "needs epsilon",
            ),
            (
                r#"{"counts": [7, 3], "mechanism": "exponential", "epsilon": 1, "order": 2}"#,
                "order",
                "does not apply to the exponential",
            ),
            (
                r#"{"counts": [7, 3, 1], "mechanism": "exponential", "epsilon": 1}"#,
                "counts",
                "exactly 2 cells",
            ),
            (
                r#"{"counts": [7.5, 3], "mechanism": "exponential", "epsilon": 1}"#,
                "counts",
                "whole-number",
            ),
            (
                r#"{"counts": [70, 31], "mechanism": "exponential", "epsilon": 1}"#,
                "counts",
                "max_exponential_n",
            ),
            (
                r#"{"counts": [7, 3], "mechanism": "exponential", "epsilon": 1, "prior": 1}"#,
                "prior",
                "[alpha, beta]",
            ),
            (
                r#"{"table": [[7, 3]], "mechanism": "exponential", "epsilon": 1}"#,
                "table",
                "not a table",
            ),
            (r#"{"epsilon": 1}"#, "counts", "is required"),
            (
                r#"{"counts": [1, 2], "table": [[1, 2]], "epsilon": 1}"#,
                "table",
                "not both",
            ),
            (
                r#"{"counts": [1, 2e15], "epsilon": 1}"#,
                "counts",
                "counts[1] exceeds",
            ),
            (
                r#"{"table": [[1, 2], [3, 2e15]], "epsilon": 1}"#,
                "table",
                "table[1][1] exceeds",
            ),
            (
                r#"{"counts": [1, 2], "epsilon": 1, "label": ""}"#,
                "label",
                "",
            ),
        ];
        for (json, field, fragment) in cases {
            let err = match parse(json) {
                Ok(_) => panic!("{json}: accepted"),
                Err(e) => e,
            };
            assert_eq!(err.field, *field, "{json}: {err:?}");
            assert!(err.message.contains(fragment), "{json}: {err:?}");
        }
    }

    #[test]
    fn relations_that_a_mechanism_cannot_price_are_refused() {
        let err = parse_with(
            r#"{"counts": [7, 3], "mechanism": "exponential", "epsilon": 1}"#,
            Sensitivity::ADD_REMOVE_ONE,
        )
        .err()
        .expect("refused");
        assert_eq!(err.field, "mechanism");
        let custom = Sensitivity::new(8.0, 2.0).unwrap();
        let table = parse_with(r#"{"table": [[1, 2], [3, 4]], "epsilon": 1}"#, custom);
        assert_eq!(table.err().expect("refused").field, "table");
    }

    #[test]
    fn mechanism_names_round_trip_and_unknown_names_are_not_echoed() {
        for kind in Kind::ALL {
            assert_eq!(Kind::try_from(kind.name().to_string()), Ok(kind));
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                Value::String(kind.name().into())
            );
        }
        let err = Kind::try_from("secret-31415".to_string()).unwrap_err();
        assert!(
            !err.contains("31415") && err.contains("exponential"),
            "{err}"
        );
    }

    /// The fields table and the parser agree: every field a mechanism lists is accepted by it,
    /// every other one refused by name.
    #[test]
    fn the_fields_table_is_what_the_parser_enforces() {
        let value = |f: Field| match f {
            Field::Order => "\"order\": 3",
            Field::Prior => "\"prior\": 1",
            Field::R => "\"r\": 0.5",
            Field::Alpha => "\"alpha\": 1",
            Field::Sigma => "\"sigma\": 2",
            Field::Scale => "\"scale\": 2",
            Field::LowerBound => "\"lower_bound\": 1",
            Field::PriorShape => "\"prior_shape\": 1",
        };
        for kind in Kind::ALL {
            let base = match kind {
                Kind::Exponential => format!(
                    r#""counts": [7, 3], "epsilon": 2, "mechanism": "{}""#,
                    kind.name()
                ),
                _ => format!(
                    r#""counts": [1, 2], "epsilon": 2, "mechanism": "{}""#,
                    kind.name()
                ),
            };
            for field in Field::ALL {
                let json = format!("{{{base}, {}}}", value(field));
                let result = parse(&json);
                if kind.fields().contains(&field) {
                    if let Err(e) = &result {
                        let refused = format!(
                            "{} does not apply to the {} mechanism",
                            field.name(),
                            kind.name()
                        );
                        assert!(!e.message.starts_with(&refused), "{json}: {e:?}");
                    }
                } else {
                    let err = result.err().unwrap_or_else(|| panic!("{json}: accepted"));
                    assert_eq!(err.field, field.name(), "{json}: {err:?}");
                }
            }
        }
    }
}
