//! The registry: the one list of mechanisms, and what the service derives from it — the
//! [`Kind`] names, the typed request [`Spec`] and [`Calibrated`] draw of any mechanism, the
//! request parser's generic rules, the request and record shapes in openapi.yaml, and the
//! `GET /v1/mechanisms` listing that clients (the console, the Python client) read instead of
//! keeping copies.
//!
//! Each mechanism lives in its own module and implements `release::mechanism::Mechanism`;
//! adding one is that module and one line in [`registry!`]'s invocation below (docs/
//! ARCHITECTURE.md, "Adding a mechanism"). Code that works on any mechanism is written once,
//! generic over `M: Registered`, and reached through [`Kind::visit`] or [`Spec::visit`]: the
//! generated `match`es are exhaustive, so nothing here or elsewhere lists mechanisms by hand.

pub(crate) mod family;

pub mod noise;

pub use family::preview::{GohariView, WithoutBound};
pub use family::DirichletDraw;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::{ObjectBuilder, Schema};
use utoipa::openapi::RefOr;

use super::input::Input;
use super::mechanism::{
    Components, Context, Draw, EpsilonUse, FieldSpec, ForecastShape, Mechanism, Params, Properties,
    RequestError, Shape, TargetKind, Targeting, Wire,
};
use crate::schema::{self, SchemaRef};

/// A mechanism the registry lists: its [`Kind`] and how its own types enter the registry's.
/// Implemented by [`registry!`] only.
pub trait Registered: Mechanism {
    const KIND: Kind;
    fn wrap_spec(spec: Self::Spec) -> Spec;
    fn wrap(spec: Self::Spec, draw: Self::Draw) -> Calibrated;
}

/// Generic code over the mechanism of a [`Kind`].
pub trait KindVisitor {
    type Output;
    fn visit<M: Registered>(self) -> Self::Output;
}

/// Generic code over the mechanism of a [`Spec`], with its own spec.
pub trait SpecVisitor {
    type Output;
    fn visit<M: Registered>(self, spec: &M::Spec) -> Self::Output;
}

/// Generic code over the mechanism of a [`Calibrated`], with its own spec and draw.
pub trait CalibratedVisitor {
    type Output;
    fn visit<M: Registered>(self, spec: &M::Spec, draw: &M::Draw) -> Self::Output;
}

macro_rules! registry {
    ($($variant:ident => $module:ident::$ty:ident,)+) => {
        $(pub mod $module;)+
        /// A mechanism, by name; the order is the registry's (the planner's tie-break order,
        /// the listing's order), and the first is the default.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        pub enum Kind {
            $($variant,)+
        }

        impl Kind {
            pub const ALL: [Kind; [$(stringify!($variant),)+].len()] = [$(Kind::$variant,)+];

            /// Run `v` with this kind's mechanism.
            pub fn visit<V: KindVisitor>(self, v: V) -> V::Output {
                match self {
                    $(Kind::$variant => v.visit::<$module::$ty>(),)+
                }
            }
        }

        /// A parsed mechanism choice: one mechanism's own spec.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Spec {
            $($variant(<$module::$ty as Mechanism>::Spec),)+
        }

        impl Spec {
            pub fn kind(&self) -> Kind {
                match self {
                    $(Spec::$variant(_) => Kind::$variant,)+
                }
            }

            /// Run `v` with this spec's mechanism and its own spec.
            pub fn visit<V: SpecVisitor>(&self, v: V) -> V::Output {
                match self {
                    $(Spec::$variant(spec) => v.visit::<$module::$ty>(spec),)+
                }
            }
        }

        /// A mechanism's spec with the parameters it calibrated.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Calibrated {
            $($variant(<$module::$ty as Mechanism>::Spec, <$module::$ty as Mechanism>::Draw),)+
        }

        impl Calibrated {
            pub fn kind(&self) -> Kind {
                match self {
                    $(Calibrated::$variant(..) => Kind::$variant,)+
                }
            }

            pub fn draw(&self) -> &dyn Draw {
                match self {
                    $(Calibrated::$variant(_, draw) => draw,)+
                }
            }

            /// Run `v` with this mechanism, its spec and its draw.
            pub fn visit<V: CalibratedVisitor>(&self, v: V) -> V::Output {
                match self {
                    $(Calibrated::$variant(spec, draw) => v.visit::<$module::$ty>(spec, draw),)+
                }
            }
        }

        $(
            impl Registered for $module::$ty {
                const KIND: Kind = Kind::$variant;
                fn wrap_spec(spec: Self::Spec) -> Spec {
                    Spec::$variant(spec)
                }
                fn wrap(spec: Self::Spec, draw: Self::Draw) -> Calibrated {
                    Calibrated::$variant(spec, draw)
                }
            }
        )+
    };
}

// The mechanisms, one line each: the variant of `Kind`, the module (declared here) and the type
// implementing `Mechanism` in it.
registry! {
    Dirichlet => dirichlet::Dirichlet,
    Posterior => posterior::Posterior,
    Diffuse => diffuse::Diffuse,
    Explicit => explicit::Explicit,
    Gaussian => gaussian::Gaussian,
    Laplace => laplace::Laplace,
    Exponential => exponential::Exponential,
}

impl Kind {
    /// The name on the wire and in records.
    pub fn name(self) -> &'static str {
        struct Name;
        impl KindVisitor for Name {
            type Output = &'static str;
            fn visit<M: Registered>(self) -> &'static str {
                M::NAME
            }
        }
        self.visit(Name)
    }

    /// Its own fields.
    pub fn fields(self) -> &'static [FieldSpec] {
        struct Fields;
        impl KindVisitor for Fields {
            type Output = &'static [FieldSpec];
            fn visit<M: Registered>(self) -> &'static [FieldSpec] {
                M::FIELDS
            }
        }
        self.visit(Fields)
    }

    pub fn takes(self, field: &str) -> bool {
        self.fields().iter().any(|f| f.name == field)
    }

    /// Whether `"auto"` in a plan considers it.
    pub fn in_auto(self) -> bool {
        struct Auto;
        impl KindVisitor for Auto {
            type Output = bool;
            fn visit<M: Registered>(self) -> bool {
                M::SUPPORTS.auto
            }
        }
        self.visit(Auto)
    }

    /// The name of its request shape in openapi.yaml (`DirichletRequest`).
    pub fn request_schema_name(self) -> String {
        format!("{}Request", capitalised(self.name()))
    }

    /// The name of its record's schema in openapi.yaml (`DirichletMechanism`).
    pub fn record_schema_name(self) -> String {
        format!("{}Mechanism", capitalised(self.name()))
    }
}

/// The default mechanism (a request without `mechanism`).
impl Default for Kind {
    fn default() -> Kind {
        Kind::ALL[0]
    }
}

fn capitalised(name: &str) -> String {
    let mut chars = name.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// Read through a string, so a non-string value is a 422 data error, not a JSON syntax error.
impl TryFrom<String> for Kind {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            // Never quote `name`: problem documents echo nothing that was sent.
            .ok_or_else(|| format!("expected one of {}", names(&Kind::ALL)))
    }
}

impl Serialize for Kind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Kind::try_from(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// "a, b and c".
fn names(kinds: &[Kind]) -> String {
    let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

// ------------------------------------------------------------------------------ fields

/// How the request body reads a mechanism field, before it knows the mechanism: the widest
/// [`Wire`] any mechanism declares for the name (a mechanism that takes less refuses the rest
/// itself); `None` for a name no mechanism declares.
pub fn field_wire(name: &str) -> Option<Wire> {
    Kind::ALL
        .iter()
        .flat_map(|k| k.fields())
        .filter(|f| f.name == name)
        .map(|f| f.wire)
        .reduce(|a, b| {
            if a == Wire::NumberOrNumbers || b == Wire::NumberOrNumbers {
                Wire::NumberOrNumbers
            } else {
                Wire::Number
            }
        })
}

/// Every mechanism field name, once, in registry order.
pub fn field_names() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let mut out: Vec<&'static str> = Vec::new();
        for f in Kind::ALL.iter().flat_map(|k| k.fields()) {
            if !out.contains(&f.name) {
                out.push(f.name);
            }
        }
        out
    })
}

/// Every mechanism field's schema, once (a plan item takes any of them): one mechanism's
/// schema, or where several mechanisms declare the name with different meanings, any of theirs.
pub fn field_schemas() -> Vec<(&'static str, SchemaRef)> {
    field_names()
        .iter()
        .map(|&name| {
            let mut schemas: Vec<SchemaRef> = Vec::new();
            let mut seen: Vec<String> = Vec::new();
            for f in Kind::ALL
                .iter()
                .flat_map(|k| k.fields())
                .filter(|f| f.name == name)
            {
                let schema = (f.schema)();
                let text = serde_json::to_string(&schema).unwrap_or_default();
                if !seen.contains(&text) {
                    seen.push(text);
                    schemas.push(schema);
                }
            }
            let takers: Vec<Kind> = Kind::ALL.into_iter().filter(|k| k.takes(name)).collect();
            let schema: SchemaRef = match schemas.len() {
                1 => schemas.remove(0),
                _ => schemas
                    .into_iter()
                    .fold(utoipa::openapi::schema::AnyOfBuilder::new(), |b, s| {
                        b.item(s)
                    })
                    .description(Some(format!(
                        "The field of {}, as in a release request.",
                        names(&takers)
                    )))
                    .into(),
            };
            (name, schema)
        })
        .collect()
}

/// The refusal of a field `kind` does not take, naming those that do.
pub fn not_taken(kind: Kind, field: &'static str) -> RequestError {
    let takers: Vec<Kind> = Kind::ALL.into_iter().filter(|k| k.takes(field)).collect();
    RequestError::new(
        field,
        format!(
            "{field} does not apply to the {} mechanism (only to {})",
            kind.name(),
            names(&takers)
        ),
    )
}

/// The first mechanism field of `params` that `kind` does not take.
pub fn check_fields(kind: Kind, params: &Params) -> Result<(), RequestError> {
    match params.iter().find(|(name, _)| !kind.takes(name)) {
        Some((name, _)) => Err(not_taken(kind, name)),
        None => Ok(()),
    }
}

/// A release request's mechanism: the rules every mechanism shares (its fields only; `order`
/// only where it takes one and only with `epsilon`; a table only where it releases tables),
/// then its own parser.
pub fn parse(
    kind: Kind,
    params: &Params,
    targeting: &Targeting,
    input: &Input,
    ctx: &Context,
) -> Result<Spec, RequestError> {
    struct Parse<'a> {
        params: &'a Params,
        targeting: &'a Targeting,
        input: &'a Input,
        ctx: &'a Context,
    }
    impl KindVisitor for Parse<'_> {
        type Output = Result<Spec, RequestError>;
        fn visit<M: Registered>(self) -> Result<Spec, RequestError> {
            if self.targeting.order.is_some() {
                if !M::TAKES_ORDER {
                    return Err(RequestError::new(
                        "order",
                        format!(
                            "order does not apply to the {} mechanism (it takes no calibration order)",
                            M::NAME
                        ),
                    ));
                }
                if self.targeting.epsilon.is_none() {
                    return Err(RequestError::new(
                        "order",
                        "order applies only together with epsilon (the calibration target)",
                    ));
                }
            }
            check_fields(M::KIND, self.params)?;
            if matches!(self.input, Input::Table(_)) && !M::SUPPORTS.tables {
                return Err(RequestError::new(
                    "table",
                    format!(
                        "the {} mechanism releases one vector (counts), not a table",
                        M::NAME
                    ),
                ));
            }
            let settings = M::settings(self.params, self.ctx)?;
            M::request(settings, self.targeting, self.input, self.ctx).map(M::wrap_spec)
        }
    }
    kind.visit(Parse {
        params,
        targeting,
        input,
        ctx,
    })
}

/// Whether `kind` can be planned for `shape` at all: tables only where it releases them.
pub fn table_refusal(kind: Kind, shape: &Shape) -> Option<(&'static str, String)> {
    struct Tables;
    impl KindVisitor for Tables {
        type Output = bool;
        fn visit<M: Registered>(self) -> bool {
            M::SUPPORTS.tables
        }
    }
    (shape.rows.is_some() && !kind.visit(Tables)).then(|| {
        (
            "rows",
            format!("the {} mechanism does not release tables", kind.name()),
        )
    })
}

// ------------------------------------------------------------------------------ the description

/// Every mechanism's request shape (`<Name>Request`), for openapi.yaml.
pub fn request_schemas() -> Vec<(String, SchemaRef)> {
    struct Shape;
    impl KindVisitor for Shape {
        type Output = SchemaRef;
        fn visit<M: Registered>(self) -> SchemaRef {
            request_schema::<M>()
        }
    }
    Kind::ALL
        .into_iter()
        .map(|k| (k.request_schema_name(), k.visit(Shape)))
        .collect()
}

fn epsilon_description(use_: EpsilonUse) -> String {
    match use_ {
        EpsilonUse::Target => "The calibration target ε, at `order`.".into(),
        EpsilonUse::TargetUnless(field) => {
            format!("The calibration target ε at `order` without `{field}`; a cap with it.")
        }
        EpsilonUse::Cap => "An optional cap: a mechanism that costs more at the ledger order is \
                            422 `cost-exceeds-epsilon`."
            .into(),
        EpsilonUse::Pure => "The mechanism's pure-DP ε.".into(),
    }
}

fn request_schema<M: Registered>() -> SchemaRef {
    let default = M::KIND == Kind::default();
    let mut shape = schema::closed()
        .description(Some(M::SUMMARY))
        .property("counts", schema::component("Counts"));
    let mut assertions = Vec::new();
    if M::SUPPORTS.tables {
        shape = shape
            .property("table", schema::component("Table"))
            .property(
            "row_names",
            schema::described(
                "Names",
                "Public names of the table's rows, one per row (only with `table`): stored with \
                 the release and returned with it.",
            ),
        );
        assertions.push(schema::exactly_one_of("counts", "table"));
        assertions.push(
            serde_json::json!({"if": {"required": ["row_names"]}, "then": {"required": ["table"]}}),
        );
    }
    let mechanism = schema::constant(M::NAME);
    shape = shape
        .property("label", schema::component("Label"))
        .property("blocks", schema::component("BlockSpan"))
        .property(
            "block",
            schema::described(
                "BlockKey",
                "The one block the release reads, on a dataset split into blocks (instead of \
                 `blocks`).",
            ),
        )
        .property(
            "mechanism",
            if default {
                mechanism.default(Some(Value::from(M::NAME)))
            } else {
                mechanism
            },
        );
    shape = shape.property(
        "epsilon",
        schema::described("PositiveNumber", &epsilon_description(M::EPSILON)),
    );
    if M::TAKES_ORDER {
        shape = shape.property(
            "order",
            schema::described(
                "Order",
                "The order of the calibration target (default: the ledger order); only with \
                 `epsilon`.",
            ),
        );
    }
    for f in M::FIELDS {
        shape = shape.property(f.name, (f.schema)());
    }
    if !default {
        shape = shape.required("mechanism");
    }
    if matches!(M::EPSILON, EpsilonUse::Target | EpsilonUse::Pure) {
        shape = shape.required("epsilon");
    }
    for f in M::FIELDS.iter().filter(|f| f.required) {
        shape = shape.required(f.name);
    }
    let shape = M::request_schema(shape, &mut assertions);
    if assertions.is_empty() {
        shape.into()
    } else {
        schema::asserting(shape, assertions).into()
    }
}

/// Every mechanism's record schema (`<Name>Mechanism`), for openapi.yaml.
pub fn record_schemas() -> Vec<(String, SchemaRef)> {
    struct Record;
    impl KindVisitor for Record {
        type Output = SchemaRef;
        fn visit<M: Registered>(self) -> SchemaRef {
            let record: ObjectBuilder = schema::closed()
                .property("kind", schema::constant(M::NAME))
                .required("kind")
                .required("pricing");
            M::record_schema(record).into()
        }
    }
    Kind::ALL
        .into_iter()
        .map(|k| (k.record_schema_name(), k.visit(Record)))
        .collect()
}

/// The preview's mechanism-specific keys (property and schema, each once) and the components
/// they use.
pub fn preview_schemas() -> (Properties, Components) {
    struct Preview<'a>(&'a mut Properties, &'a mut Components);
    impl KindVisitor for Preview<'_> {
        type Output = ();
        fn visit<M: Registered>(self) {
            M::preview_schemas(self.0, self.1);
        }
    }
    let (mut properties, mut components) = (Vec::new(), Vec::new());
    for k in Kind::ALL {
        k.visit(Preview(&mut properties, &mut components));
    }
    let mut seen = Vec::new();
    properties.retain(|(name, _)| {
        let fresh = !seen.contains(name);
        seen.push(*name);
        fresh
    });
    let mut seen = Vec::new();
    components.retain(|(name, _)| {
        let fresh = !seen.contains(name);
        seen.push(name.clone());
        fresh
    });
    (properties, components)
}

// ------------------------------------------------------------------------------ the listing

/// One mechanism as `GET /v1/mechanisms` describes it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = MechanismDescription)]
pub struct Description {
    /// The value of `mechanism` in requests and plans, and of `kind` in records.
    pub name: String,
    pub summary: String,
    /// Whether a request without `mechanism` runs it.
    pub default: bool,
    /// How it reads `epsilon`: `target` (the calibration target, needed), `target_or_cap` (the
    /// target without `noise_field`, a cap with it), `cap` (an optional cap on given
    /// parameters), `pure` (its own pure-DP parameter, needed).
    #[schema(value_type = String)]
    pub epsilon: EpsilonView,
    /// With `epsilon: target_or_cap`: the field that makes it a cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_field: Option<String>,
    /// Whether it takes `order` (the calibration target's order).
    pub order: bool,
    pub fields: Vec<FieldView>,
    /// Whether it releases a `table` (rows of disjoint groups) for the price of one vector.
    pub tables: bool,
    /// Whether it takes `lower_bound` (a public floor on every cell).
    pub lower_bound: bool,
    /// The accuracy targets `POST …/plan` can plan it for.
    pub targets: Vec<TargetKind>,
    /// Whether `"auto"` in a plan considers it.
    pub auto: bool,
    /// What a preview forecasts for it (null: nothing): `dirichlet` (the `Forecast` schema)
    /// or `selection` (`SelectionForecast`).
    #[schema(schema_with = forecast_kind_schema)]
    pub forecast: Option<String>,
}

/// How a mechanism reads `epsilon`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EpsilonView {
    Target,
    TargetOrCap,
    Cap,
    Pure,
}

/// One of a mechanism's own request fields.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = MechanismField)]
pub struct FieldView {
    pub name: String,
    /// `number`, or `number_or_numbers` (one number for every cell, or an array).
    pub r#type: Wire,
    /// Needed in every request.
    pub required: bool,
    /// The value used when absent (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = number_or_numbers)]
    pub default: Option<Value>,
    pub description: String,
    /// Whether a plan item (`POST …/plan`) takes it.
    pub plan: bool,
}

fn number_or_numbers() -> SchemaRef {
    schema::one_of([
        schema::number().into(),
        schema::array(schema::number()).min_items(Some(1)).into(),
    ])
    .into()
}

/// Every mechanism, in the registry's order.
pub fn describe() -> Vec<Description> {
    struct Describe;
    impl KindVisitor for Describe {
        type Output = Description;
        fn visit<M: Registered>(self) -> Description {
            let (epsilon, noise_field) = match M::EPSILON {
                EpsilonUse::Target => (EpsilonView::Target, None),
                EpsilonUse::TargetUnless(f) => (EpsilonView::TargetOrCap, Some(f.to_string())),
                EpsilonUse::Cap => (EpsilonView::Cap, None),
                EpsilonUse::Pure => (EpsilonView::Pure, None),
            };
            Description {
                name: M::NAME.into(),
                summary: M::SUMMARY.into(),
                default: M::KIND == Kind::default(),
                epsilon,
                noise_field,
                order: M::TAKES_ORDER,
                fields: M::FIELDS
                    .iter()
                    .map(|f| FieldView {
                        name: f.name.into(),
                        r#type: f.wire,
                        required: f.required,
                        default: f.default.map(|d| d.to_value()),
                        description: f.description.into(),
                        plan: f.planned,
                    })
                    .collect(),
                tables: M::SUPPORTS.tables,
                lower_bound: M::FIELDS.iter().any(|f| f.name == "lower_bound"),
                targets: M::SUPPORTS.targets.to_vec(),
                auto: M::SUPPORTS.auto,
                forecast: M::SUPPORTS.forecast.map(|f| f.kind.to_string()),
            }
        }
    }
    Kind::ALL.into_iter().map(|k| k.visit(Describe)).collect()
}

/// The registry's forecast shapes, each once, in the registry's order.
fn forecast_shapes() -> Vec<ForecastShape> {
    struct Shape;
    impl KindVisitor for Shape {
        type Output = Option<ForecastShape>;
        fn visit<M: Registered>(self) -> Option<ForecastShape> {
            M::SUPPORTS.forecast
        }
    }
    let mut shapes: Vec<ForecastShape> = Vec::new();
    for shape in Kind::ALL.into_iter().filter_map(|k| k.visit(Shape)) {
        if !shapes.contains(&shape) {
            shapes.push(shape);
        }
    }
    shapes
}

/// The schema of a `forecast`: one of the mechanisms' forecast components.
pub fn forecast_schema() -> utoipa::openapi::schema::OneOfBuilder {
    schema::one_of(
        forecast_shapes()
            .into_iter()
            .map(|f| schema::component(f.component)),
    )
}

/// The forecast components and what they refer to.
pub fn forecast_schemas(schemas: &mut Components) {
    for f in forecast_shapes() {
        (f.schemas)(schemas);
    }
}

fn forecast_kind_schema() -> SchemaRef {
    let kinds: Vec<&str> = forecast_shapes().iter().map(|f| f.kind).collect();
    schema::one_of([
        schema::string().enum_values(Some(kinds)).into(),
        schema::null(),
    ])
    .description(Some(
        "What a preview forecasts for it (null: nothing): `dirichlet` is the `Forecast` schema, \
         `selection` the `SelectionForecast`.",
    ))
    .into()
}

/// The schema of a mechanism name (an enum of the registry's names).
pub fn kind_schema() -> RefOr<Schema> {
    schema::string()
        .enum_values(Some(Kind::ALL.iter().map(|k| k.name())))
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body reads every field at least as widely as each mechanism declares it (the
    /// mechanisms' refusals of the rest: `request::tests`).
    #[test]
    fn a_field_is_read_at_least_as_widely_as_it_is_declared() {
        for f in Kind::ALL.iter().flat_map(|k| k.fields()) {
            let wire = field_wire(f.name).unwrap();
            assert!(
                wire == f.wire || wire == Wire::NumberOrNumbers,
                "{}",
                f.name
            );
        }
        assert_eq!(field_wire("prior"), Some(Wire::NumberOrNumbers));
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

    #[test]
    fn the_listing_names_every_mechanism_once_with_its_fields() {
        let listed = describe();
        assert_eq!(listed.len(), Kind::ALL.len());
        assert_eq!(listed.iter().filter(|d| d.default).count(), 1);
        for (d, k) in listed.iter().zip(Kind::ALL) {
            assert_eq!(d.name, k.name());
            let names: Vec<&str> = d.fields.iter().map(|f| f.name.as_str()).collect();
            let want: Vec<&str> = k.fields().iter().map(|f| f.name).collect();
            assert_eq!(names, want);
        }
    }
}
