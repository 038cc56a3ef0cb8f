//! What a release mechanism is: the [`Mechanism`] trait, which every mechanism implements once
//! in a module of its own under `release::mechanisms`, and the [`Draw`] trait of the parameters
//! it calibrates. The release path, tables, previews, the planner, the API description and the
//! `GET /v1/mechanisms` listing all reach a mechanism through these two traits and the registry
//! (`release::mechanisms`), never through a list of mechanisms of their own; a new mechanism is a
//! module implementing them and one line in the registry, and one that forgets a duty does not
//! compile (no method here has a default).
//!
//! Also the vocabulary the traits speak: the calibration [`Target`], the refusals
//! ([`PlanError`], [`RequestError`]), the request's mechanism fields ([`Params`], declared by
//! [`FieldSpec`]s) and how `epsilon`/`order` are read ([`Targeting`]), and the stored
//! [`Record`]. Pure: no I/O, no async; randomness only through the generator a caller passes.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::input::Input;
use crate::ledger::charge::{MAX_EPSILON, QUANTUM_BITS};
use crate::privacy::accuracy::Bounds;
use crate::privacy::curve::Pricing;
use crate::privacy::sampler::CsRng;
use crate::privacy::{CalibrationError, Counts, Epsilon, Order, Sensitivity};
use crate::schema::SchemaRef;
use crate::wire::ScalarOrCells;

/// β of the forecasts: each bound holds with probability 1 − β.
pub const FORECAST_BETA: f64 = 0.05;
/// One ledger-grid unit, 2⁻⁴⁰.
pub const GRID: f64 = 1.0 / (1u64 << QUANTUM_BITS) as f64;
/// The ledger's largest value (8192) in grid units.
pub const MAX_UNITS: u64 = (MAX_EPSILON as u64) << QUANTUM_BITS;

// ------------------------------------------------------------------------------ targets

/// A calibration target: spend ε at order λ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    pub epsilon: Epsilon,
    pub order: Order,
}

/// How a mechanism was asked to spend: solved for a target, or with its parameters given and
/// an optional cap on what its price may be at the ledger order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Aim {
    /// Calibrated to the target (solved for its largest ledger-grid value ≤ ε).
    Calibrated(Target),
    /// Parameters given (or a pure-DP ε that is itself a parameter); the price at the ledger
    /// order, inflated and rounded up, must not exceed the cap when there is one.
    Priced { cap: Option<Epsilon> },
}

// ------------------------------------------------------------------------------ refusals

/// Why a parsed request cannot be priced or drawn.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Infeasible(#[from] CalibrationError),
    #[error("the mechanism has no RDP guarantee at the ledger order {ledger_order:?} (its curve is finite only below order {max_order:?})")]
    NoGuarantee { ledger_order: f64, max_order: f64 },
    #[error(
        "the mechanism costs {price:?} at order {order:?}, more than the epsilon {cap:?} given"
    )]
    CostExceedsCap { price: f64, cap: f64, order: f64 },
    /// The price exceeds anything the ledger can hold, so no budget admits it.
    #[error("the mechanism costs {price:?} at order {order:?}, more than any budget")]
    TooExpensive { price: f64, order: f64 },
    #[error("{0}")]
    Parameter(String),
    /// The release's f64 arithmetic cannot carry the shift the price assumes
    /// (docs/PRIVACY.md, "Floating point").
    #[error("{0}")]
    BeyondPrecision(String),
}

/// A request the service cannot run, with the field at fault (problem+json's `field`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    pub field: &'static str,
    pub message: String,
}

impl RequestError {
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        RequestError {
            field,
            message: message.into(),
        }
    }

    pub fn param(field: &'static str, e: impl std::fmt::Display) -> Self {
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

// ------------------------------------------------------------------------------ fields

/// How a mechanism field is written on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Wire {
    /// One number.
    Number,
    /// One number (every cell) or an array of numbers (one per cell, or a fixed pair).
    NumberOrNumbers,
}

/// A field's default when absent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Default {
    Number(f64),
    Numbers(&'static [f64]),
}

impl Default {
    pub fn to_value(self) -> Value {
        match self {
            Default::Number(v) => Value::from(v),
            Default::Numbers(v) => Value::from(v.to_vec()),
        }
    }
}

/// One of a mechanism's own request fields (besides the common `counts`/`table`, `epsilon`,
/// `order`, `label` and `row_names`): what the wire carries, whether the mechanism needs it,
/// its default, what it means and its schema in the mechanism's request shape. The same name
/// may be declared by several mechanisms, each with its own meaning and [`Wire`]: the body reads
/// it as the widest of them, and a mechanism declaring [`Wire::Number`] refuses an array.
#[derive(Debug, Clone, Copy)]
pub struct FieldSpec {
    pub name: &'static str,
    /// What this mechanism takes.
    pub wire: Wire,
    /// Whether a plan item takes it (a field whose worst-case bounds the planner does not
    /// derive, such as a lower bound, is refused there).
    pub planned: bool,
    /// Needed in every request (a field needed only without another, like `sigma` without
    /// `epsilon`, is not).
    pub required: bool,
    pub default: Option<Default>,
    pub description: &'static str,
    /// The property's schema in the mechanism's request shape (openapi.yaml).
    pub schema: fn() -> SchemaRef,
}

/// The mechanism fields a request carries, each as sent (a number or an array of numbers), in
/// the canonical order of the request body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Params(Vec<(&'static str, ScalarOrCells)>);

impl Params {
    pub fn new(values: Vec<(&'static str, ScalarOrCells)>) -> Params {
        Params(values)
    }

    pub fn iter(&self) -> impl Iterator<Item = &(&'static str, ScalarOrCells)> {
        self.0.iter()
    }

    pub fn get(&self, name: &str) -> Option<&ScalarOrCells> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// A [`Wire::Number`] field (the body's parser admits only numbers for those).
    pub fn number(&self, name: &'static str) -> Option<f64> {
        match self.get(name) {
            Some(ScalarOrCells::Scalar(v)) => Some(*v),
            // Unreachable for a Number field: the wire refuses arrays for it.
            Some(ScalarOrCells::Cells(_)) | None => None,
        }
    }

    /// A finite number > 0, or `default` when absent.
    pub fn positive_or(&self, name: &'static str, default: f64) -> Result<f64, RequestError> {
        self.number(name)
            .map(|v| positive(name, v))
            .transpose()
            .map(|v| v.unwrap_or(default))
    }

    /// A needed finite number > 0.
    pub fn positive(&self, name: &'static str, mechanism: &str) -> Result<f64, RequestError> {
        let v = self.number(name).ok_or_else(|| needs(mechanism, name))?;
        positive(name, v)
    }
}

/// "the M mechanism needs F".
pub fn needs(mechanism: &str, field: &'static str) -> RequestError {
    RequestError::new(field, format!("the {mechanism} mechanism needs {field}"))
}

/// A finite number > 0.
pub fn positive(field: &'static str, v: f64) -> Result<f64, RequestError> {
    if !v.is_finite() || v <= 0.0 {
        return Err(RequestError::new(
            field,
            format!("{field} must be a finite number greater than 0"),
        ));
    }
    Ok(v)
}

/// `epsilon` and `order` as a request gives them, read against the ledger order. Each mechanism
/// says what they mean for it ([`Mechanism::request`]); the registry has already refused
/// `order` where the mechanism takes none, and `order` without `epsilon`.
#[derive(Debug, Clone, Copy)]
pub struct Targeting {
    pub epsilon: Option<Epsilon>,
    pub order: Option<Order>,
    pub ledger_order: Order,
}

impl Targeting {
    /// The calibration target: `epsilon` (needed) at `order` (default the ledger order).
    pub fn target(&self, mechanism: &str) -> Result<Target, RequestError> {
        let epsilon = self.epsilon.ok_or_else(|| needs(mechanism, "epsilon"))?;
        Ok(Target {
            epsilon,
            order: self.order.unwrap_or(self.ledger_order),
        })
    }

    /// Given parameters priced at the ledger order: `epsilon` is an optional cap and `order`
    /// does not apply (`why` says so).
    pub fn cap(&self, why: &str) -> Result<Option<Epsilon>, RequestError> {
        match self.order {
            Some(_) => Err(RequestError::new("order", why)),
            None => Ok(self.epsilon),
        }
    }
}

// ------------------------------------------------------------------------------ what a mechanism supports

/// How a mechanism reads `epsilon` (for listings and clients; its own parser is the authority).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpsilonUse {
    /// The calibration target (needed), at `order` (default the ledger order).
    Target,
    /// The calibration target when the named noise field is absent; a cap when it is given.
    TargetUnless(&'static str),
    /// An optional cap on the price of given parameters.
    Cap,
    /// The mechanism's own pure-DP parameter (needed); no `order`.
    Pure,
}

/// What a mechanism can do, beyond its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Supports {
    /// Releases of a `table` (rows of disjoint groups) for the price of one vector.
    pub tables: bool,
    /// Which accuracy targets the planner can meet with it.
    pub targets: &'static [TargetKind],
    /// Whether `"auto"` in a plan considers it (not for given parameters).
    pub auto: bool,
    /// What the preview forecasts, if anything.
    pub forecast: Option<ForecastShape>,
}

/// A planning target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    L2,
    CellSd,
    /// D_KL(x/n ‖ y), the metric the Dirichlet mechanism minimises.
    Kl,
}

/// What a preview forecasts for a mechanism, declared by the mechanism: the name
/// `GET /v1/mechanisms` lists, and the forecast's schemas in openapi.yaml (`component` first,
/// then what it refers to). Mechanisms that forecast alike share one shape.
#[derive(Debug, Clone, Copy)]
pub struct ForecastShape {
    pub kind: &'static str,
    pub component: &'static str,
    pub schemas: fn(&mut Components),
}

impl PartialEq for ForecastShape {
    fn eq(&self, other: &ForecastShape) -> bool {
        self.kind == other.kind && self.component == other.component
    }
}

impl Eq for ForecastShape {}

// ------------------------------------------------------------------------------ records

/// The mechanism record: what a release ran (its kind, parameters, calibration target and how
/// it was priced), returned with every preview and release and stored with the release.
///
/// A JSON object whose keys are sorted (serde_json's map), so the stored text does not depend on
/// the order a mechanism writes its fields in; the field names and which are present are part of
/// every stored row (tests/it/golden.rs pins them). Absent fields are left out, never `null`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Record(Map<String, Value>);

impl Record {
    /// A record of the mechanism named `kind`, with nothing else yet.
    pub fn new(kind: &str) -> Record {
        let mut map = Map::new();
        map.insert("kind".into(), Value::from(kind));
        Record(map)
    }

    /// Set `field` (serialising plain numbers, arrays and strings cannot fail).
    pub fn set(&mut self, field: &str, value: impl Serialize) {
        let value = serde_json::to_value(value).expect("a record field serialises");
        self.0.insert(field.into(), value);
    }

    /// [`Record::set`] by value, for building.
    pub fn with(mut self, field: &str, value: impl Serialize) -> Record {
        self.set(field, value);
        self
    }

    /// [`Record::with`] when `value` is `Some`; absent fields are left out.
    pub fn with_some<T: Serialize>(self, field: &str, value: Option<T>) -> Record {
        match value {
            Some(v) => self.with(field, v),
            None => self,
        }
    }

    /// The target a calibrated mechanism was solved for, as asked (before the ledger grid).
    pub fn calibrated(self, aim: &Aim) -> Record {
        match aim {
            Aim::Calibrated(t) => self.with(
                "calibration",
                serde_json::json!({"order": t.order.get(), "epsilon": t.epsilon.get()}),
            ),
            Aim::Priced { .. } => self,
        }
    }

    /// What the draw added (the exponential mechanism's selection), merged in flat.
    pub fn merge(&mut self, drawn: Map<String, Value>) {
        self.0.extend(drawn);
    }

    pub fn kind(&self) -> &str {
        self.0.get("kind").and_then(Value::as_str).unwrap_or("")
    }

    pub fn get(&self, field: &str) -> Option<&Value> {
        self.0.get(field)
    }

    /// The JSON stored with the release and returned by every later read of it.
    pub fn to_value(&self) -> Value {
        Value::Object(self.0.clone())
    }
}

// ------------------------------------------------------------------------------ forecasts

/// A preview's `forecast` of one vector (or one row of a table), as its mechanism wrote it: the
/// shape its [`ForecastShape`] declares.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct VectorForecast(Value);

impl VectorForecast {
    /// The forecast `f` on the wire; `None` when it has no JSON form (no forecast rather than
    /// a wrong one).
    pub fn new(f: &impl Serialize) -> Option<VectorForecast> {
        serde_json::to_value(f).ok().map(VectorForecast)
    }

    pub fn as_value(&self) -> &Value {
        &self.0
    }
}

/// Which of a draw's worst-case bounds a search needs (the others are 0 and must not be read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    pub l2: bool,
    pub cell_sd: bool,
    pub kl: bool,
}

impl Need {
    pub const ALL: Need = Need {
        l2: true,
        cell_sd: true,
        kl: true,
    };
}

/// The parameters a planned release would run with, as the plan reports them (each draw names
/// its own: `r` and `alpha`, `sigma`, `scale`, a Beta `prior`...).
pub type Parameters = Map<String, Value>;

/// A drawn output and what the draw adds to the mechanism record (a selection), if anything.
pub type Drawn = (Vec<f64>, Option<Map<String, Value>>);

// ------------------------------------------------------------------------------ the traits

/// The calibrated parameters of one release: how it is priced, checked, drawn and forecast.
/// Object safe: tables and previews hold any mechanism's draw as `&dyn Draw`.
pub trait Draw: Any + std::fmt::Debug + Send + Sync {
    /// The RDP cost of one draw at `order`, within `ledger::charge::CURVE_RELATIVE_ERROR` (the
    /// charge inflates by it and rounds up), and which curve gave it.
    fn price(&self, order: Order, sens: &Sensitivity, d: usize) -> (f64, Pricing);

    /// Where the price stops being finite (∞ if it never does): for the refusal of a draw with
    /// no guarantee at the ledger order.
    fn max_order(&self, sens: &Sensitivity) -> f64;

    /// Refuse, before anything is drawn, counts this draw cannot carry (a shape f64 cannot hold
    /// or whose neighbours' shift it would round away; fractional counts for integer noise).
    /// The error names a cell by index, never its value.
    fn check(&self, counts: &Counts, sens: &Sensitivity) -> Result<(), PlanError>;

    /// One draw for these counts, with the OS-seeded generator given. Fails closed (never
    /// panics).
    fn sample(&self, counts: &Counts, rng: &mut CsRng) -> Result<Drawn, String>;

    /// The preview's forecast, from the counts' total and shape only; `None` where the
    /// mechanism has none (or its conditions fail).
    fn forecast(&self, counts: &Counts) -> Option<VectorForecast>;

    /// The planner's worst-case bounds over every count vector of total `n` (d cells,
    /// confidence 1 − beta): only those `need` asks for (the others 0).
    fn bounds(&self, n: f64, d: usize, beta: f64, need: Need) -> Bounds;

    /// Whether f64 carries this draw for every count vector of total `n` (the refusal
    /// [`Draw::check`] would give for the worst of them).
    fn feasible(&self, n: f64, d: usize, sens: &Sensitivity) -> Result<(), String>;

    /// The parameters a plan reports for this draw.
    fn parameters(&self) -> Parameters;
}

/// The public shape of a planned release: what the planner knows instead of counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub d: usize,
    /// A table of this many rows (each of d cells), or a vector.
    pub rows: Option<usize>,
    /// The public total (per row for a table), or a public lower bound of it.
    pub n: f64,
    pub n_is_lower_bound: bool,
}

/// The planner's view of one item, for one mechanism: the shape, the ledger order and the
/// sensitivity the release is priced under (the table form for a table).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Setup {
    pub shape: Shape,
    pub order: Order,
    pub sens: Sensitivity,
    /// β = 1 − confidence of the ℓ2 and KL targets.
    pub beta: f64,
    /// Which bounds the item's target asks about (every one for a forecast at a given ε).
    pub need: Need,
    /// Whether the item's target asks for KL: a mechanism may then run differently (the
    /// additive baselines smooth their output).
    pub kl_target: bool,
}

impl Setup {
    pub fn lambda(&self) -> f64 {
        self.order.get()
    }
}

/// How the planner moves a mechanism's accuracy continuously: one scalar strength t (more t,
/// more ε and more accuracy) along which its parameters can be written without calibrating,
/// so that the search runs on closed forms and only the answer is calibrated (by the release's
/// own [`Mechanism::calibrate`]).
pub trait Strength<D> {
    /// The parameters at strength t.
    fn params_at(&self, t: f64) -> D;
    /// The strength of calibrated parameters (the inverse of [`Strength::params_at`]).
    fn strength(&self, params: &D) -> f64;
    /// Strengths below the grid's smallest ε and above its largest, from the curves' leading
    /// terms (a wrong guess only sends the search to the grid).
    fn ends(&self) -> (f64, f64);
    /// The strongest parameters worth planning when they are short of the ledger's top (next
    /// to a pole, where more ε buys no accuracy), with their price.
    fn near_pole(&self) -> Option<(D, f64)>;
    /// The `epsilon` a release request gives to run with these parameters.
    fn request_epsilon(&self, params: &D) -> f64;
    /// The largest grid value (in 2⁻⁴⁰ units) this mechanism can be asked at.
    fn max_units(&self) -> u64;
    /// Whether its KL bound falls monotonically with t. Where it does not (a prior that pulls
    /// towards uniform meets a target above log d at small ε, misses it further up and meets
    /// it again), the search scans the grid below the crossing it found for a cheaper band.
    fn kl_monotone(&self) -> bool;
}

/// The cheap bounds of a mechanism whose exact planning is costly (the exponential mechanism's
/// O(n) sensitivity), so that `"auto"` plans it only if it could win.
pub trait Optimistic {
    /// Lower bounds of its forecasts at the largest ε whose charge is at most `spend` grid
    /// units (ignoring any cap on its ε); `None` if no ε fits.
    fn bounds_within(&self, spend: u64) -> Option<Bounds>;
    /// A lower bound of its cost for `l2`/`cell_sd` targets; `None` if no ε meets them.
    fn cost_floor(&self, l2: Option<f64>, cell_sd: Option<f64>) -> Option<f64>;
}

/// Named schemas of an object's properties.
pub type Properties = Vec<(&'static str, SchemaRef)>;
/// Named component schemas.
pub type Components = Vec<(String, SchemaRef)>;

/// What one plan computes once and reuses across its items (the exponential mechanism's
/// candidates for a given n and prior): values by mechanism and key. Two items racing to
/// compute one key compute the same value.
#[derive(Default)]
pub struct Cache(Mutex<HashMap<CacheKey, Arc<dyn Any + Send + Sync>>>);

/// A mechanism's name and its own key.
type CacheKey = (&'static str, Vec<u64>);

impl Cache {
    pub fn get_or_insert<T: Any + Send + Sync>(
        &self,
        mechanism: &'static str,
        key: Vec<u64>,
        compute: impl FnOnce() -> T,
    ) -> Arc<T> {
        let key = (mechanism, key);
        let found = self.0.lock().ok().and_then(|m| m.get(&key).cloned());
        if let Some(v) = found.and_then(|v| v.downcast::<T>().ok()) {
            return v;
        }
        // Computed outside the lock.
        let value = Arc::new(compute());
        if let Ok(mut m) = self.0.lock() {
            m.insert(key, value.clone());
        }
        value
    }
}

/// A release mechanism. Everything the service does with a mechanism is here, implemented once
/// in the mechanism's module; the registry (`release::mechanisms`) is the only list of them.
pub trait Mechanism: 'static {
    /// The name on the wire, in records, plans and listings.
    const NAME: &'static str;
    /// What it is, in a sentence or two (its request shape's description).
    const SUMMARY: &'static str;
    /// Its own request fields.
    const FIELDS: &'static [FieldSpec];
    /// Whether it takes `order` (the order of a calibration target).
    const TAKES_ORDER: bool;
    /// How it reads `epsilon`.
    const EPSILON: EpsilonUse;
    const SUPPORTS: Supports;

    /// Its own fields, parsed (no ε yet).
    type Settings: Clone + std::fmt::Debug + PartialEq + Send + Sync;
    /// A request's choice: the settings and how ε is spent.
    type Spec: Clone + std::fmt::Debug + PartialEq + Send + Sync;
    /// The calibrated parameters.
    type Draw: Draw + Clone + PartialEq + 'static;

    // ---------------------------------------------------------------- requests

    /// Parse its own fields (the registry has refused fields it does not declare).
    fn settings(params: &Params, ctx: &Context) -> Result<Self::Settings, RequestError>;

    /// A release request: the settings, `epsilon`/`order` and the input (the registry has
    /// refused a table where [`Supports::tables`] is false).
    fn request(
        settings: Self::Settings,
        targeting: &Targeting,
        input: &Input,
        ctx: &Context,
    ) -> Result<Self::Spec, RequestError>;

    /// How the spec spends ε.
    fn aim(spec: &Self::Spec) -> Aim;

    // ---------------------------------------------------------------- releases

    /// The parameters of a d-cell release priced under `sens`. A calibrated spec is solved
    /// for `grid`, its target's largest ledger-grid value (`release::plan` computes it); the
    /// caller prices the result at the ledger order with [`Draw::price`].
    fn calibrate(
        spec: &Self::Spec,
        grid: Option<Target>,
        d: usize,
        sens: &Sensitivity,
    ) -> Result<Self::Draw, PlanError>;

    /// The record of a planned release (before `pricing` and the draw's additions, which the
    /// release path sets).
    fn record(spec: &Self::Spec, draw: &Self::Draw) -> Record;

    /// The preview's mechanism-specific comparisons, as extra keys of the preview (the
    /// Dirichlet family's `without_bound` and `gohari`); empty for most.
    fn preview_extras(
        spec: &Self::Spec,
        draw: &Self::Draw,
        input: &Input,
        ledger_order: Order,
        sens: &Sensitivity,
        dataset_delta: Option<f64>,
    ) -> Map<String, Value>;

    /// The schemas of those keys (property name and schema), and the components they use.
    fn preview_schemas(
        properties: &mut Vec<(&'static str, SchemaRef)>,
        components: &mut Vec<(String, SchemaRef)>,
    );

    // ---------------------------------------------------------------- the description

    /// Its request shape beyond what the registry writes from its fields (the common fields,
    /// `epsilon`/`order` as [`Mechanism::EPSILON`] and [`Mechanism::TAKES_ORDER`] say, its
    /// fields, `required` for the needed ones): assertions JSON Schema can state (a prior > 0
    /// unless bounded, `sigma` or `epsilon`) and anything it narrows (`counts` of two cells).
    fn request_schema(
        shape: utoipa::openapi::schema::ObjectBuilder,
        assertions: &mut Vec<Value>,
    ) -> utoipa::openapi::schema::ObjectBuilder;

    /// Its record's schema: the fields [`Mechanism::record`] writes (the registry has written
    /// `kind`).
    fn record_schema(
        record: utoipa::openapi::schema::ObjectBuilder,
    ) -> utoipa::openapi::schema::ObjectBuilder;

    // ---------------------------------------------------------------- planning

    /// Whether the planner can run it for this shape at all (the field at fault and why not).
    fn plannable(
        settings: &Self::Settings,
        shape: &Shape,
        ctx: &Context,
    ) -> Result<(), (&'static str, String)>;

    /// The spec of a release asked at grid value `epsilon`, as the planner plans it (calibrated
    /// at the ledger order, like a release without `order`).
    fn at_epsilon(
        settings: &Self::Settings,
        s: &Setup,
        epsilon: Epsilon,
        cache: &Cache,
    ) -> Result<Self::Spec, String>;

    /// The largest grid value (2⁻⁴⁰ units) whose charge is at most `spend` units: `spend` for
    /// a mechanism calibrated to what it is asked; for one priced below its ε, more.
    fn units_within(settings: &Self::Settings, s: &Setup, spend: u64, cache: &Cache)
        -> Option<u64>;

    /// Its continuous strength; `None` when its parameters are given (nothing to search: the
    /// planner checks and forecasts them).
    fn strength(
        settings: &Self::Settings,
        s: &Setup,
        cache: &Cache,
    ) -> Result<Option<Box<dyn Strength<Self::Draw>>>, String>;

    /// Cheap bounds when exact planning is costly (`"auto"` defers it until they could win);
    /// `None` for a mechanism planned directly.
    fn optimistic(settings: &Self::Settings, s: &Setup) -> Option<Box<dyn Optimistic>>;
}
