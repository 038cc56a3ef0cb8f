//! The mechanism record: what a release ran (its kind, parameters, calibration target and how it
//! was priced), returned with every preview and release and stored with the release.
//!
//! Stored as JSON through `serde_json::Value`, whose maps sort their keys, so the stored text does
//! not depend on the field order here; the field names and which are present are part of every
//! stored row (tests/it/golden.rs pins them). Absent fields are left out, never `null`.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use super::request::Kind;
use super::Target;
use crate::privacy::bounded::CellValues;
use crate::privacy::curve::Pricing;
#[cfg(test)]
use crate::privacy::Prior;
use crate::schema::{self, SchemaRef};

/// The target a calibrated mechanism was solved for, as asked (before the ledger grid).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, ToSchema)]
#[schema(as = Calibration)]
#[serde(deny_unknown_fields)]
pub struct CalibrationRecord {
    #[schema(exclusive_minimum = 1)]
    pub order: f64,
    #[schema(exclusive_minimum = 0)]
    pub epsilon: f64,
}

impl From<&Target> for CalibrationRecord {
    fn from(t: &Target) -> Self {
        CalibrationRecord {
            order: t.order.get(),
            epsilon: t.epsilon.get(),
        }
    }
}

/// A prior as recorded: dirichlet's base prior a₀, or exponential's Beta prior [α, β].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum PriorRecord {
    Base(f64),
    Beta([f64; 2]),
}

/// What the exponential mechanism's draw adds: the candidate selected and its Beta posterior.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Selection {
    pub selected: u64,
    pub posterior: [f64; 2],
}

/// See the module docs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mechanism {
    pub kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alpha: Option<CellValues>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prior: Option<PriorRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prior_shape: Option<CellValues>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lower_bound: Option<CellValues>,
    /// α + r·lower_bound: the prior the bounded draw actually uses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effective_alpha: Option<CellValues>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sigma: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    /// The exponential mechanism's ε (pure DP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epsilon: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sensitivity: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sensitivity_used: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration: Option<CalibrationRecord>,
    /// Set by the planner once the mechanism is priced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pricing: Option<Pricing>,
    /// The exponential draw's selection, set after the draw (flat: `selected`, `posterior`).
    #[serde(flatten)]
    pub selection: Option<Selection>,
}

impl Mechanism {
    /// A record of `kind` with nothing else set yet.
    pub fn new(kind: Kind) -> Mechanism {
        Mechanism {
            kind,
            r: None,
            alpha: None,
            prior: None,
            prior_shape: None,
            lower_bound: None,
            effective_alpha: None,
            sigma: None,
            scale: None,
            epsilon: None,
            n: None,
            sensitivity: None,
            sensitivity_used: None,
            calibration: None,
            pricing: None,
            selection: None,
        }
    }

    /// A Dirichlet-family record: kind, r and α.
    pub fn dirichlet(kind: Kind, r: f64, alpha: impl Into<CellValues>) -> Mechanism {
        Mechanism {
            r: Some(r),
            alpha: Some(alpha.into()),
            ..Mechanism::new(kind)
        }
    }

    pub fn calibrated(self, target: Option<&Target>) -> Mechanism {
        Mechanism {
            calibration: target.map(CalibrationRecord::from),
            ..self
        }
    }

    /// The JSON stored with the release and returned by every later read of it.
    pub fn to_value(&self) -> Value {
        // Plain numbers, strings and arrays: serialising cannot fail.
        serde_json::to_value(self).expect("a mechanism record serialises")
    }
}

// ------------------------------------------------------------------------ in openapi.yaml

impl Kind {
    /// The name of this mechanism's record schema in openapi.yaml.
    pub fn record_schema_name(self) -> &'static str {
        match self {
            Kind::Dirichlet => "DirichletMechanism",
            Kind::Posterior => "PosteriorMechanism",
            Kind::Diffuse => "DiffuseMechanism",
            Kind::Explicit => "ExplicitMechanism",
            Kind::Gaussian => "GaussianMechanism",
            Kind::Laplace => "LaplaceMechanism",
            Kind::Exponential => "ExponentialMechanism",
        }
    }

    /// The record of this mechanism: which fields of [`Mechanism`] it sets.
    fn record_schema(self) -> Schema {
        let pricing = schema::component("Pricing");
        let record = schema::closed()
            .property("kind", schema::constant(self.name()))
            .required("kind")
            .required("pricing");
        let positive = || schema::component("PositiveNumber");
        let effective = || {
            schema::described(
                "Alpha",
                "With `lower_bound`, the prior α + rL the release is priced with.",
            )
        };
        let record = match self {
            Kind::Dirichlet => record
                .property("pricing", pricing)
                .property("r", positive())
                .property("alpha", schema::component("Alpha"))
                .property(
                    "prior",
                    schema::described("PositiveNumber", "The base prior a₀."),
                )
                .property("calibration", schema::component("Calibration"))
                .property("lower_bound", schema::component("LowerBound"))
                .property("effective_alpha", effective())
                .required("r")
                .required("alpha")
                .required("prior")
                .required("calibration"),
            Kind::Posterior | Kind::Diffuse => {
                let record = record
                    .property("pricing", pricing)
                    .property("r", positive())
                    .property(
                        "alpha",
                        schema::described(
                            "NonNegativeCells",
                            "The prior α (0 only in cells where `lower_bound` > 0).",
                        ),
                    )
                    .property("calibration", schema::component("Calibration"));
                let record = match self {
                    Kind::Posterior => record.property(
                        "prior_shape",
                        schema::described("NonNegativeCells", "The prior's shape s: α = m·s."),
                    ),
                    _ => record,
                };
                record
                    .property("lower_bound", schema::component("LowerBound"))
                    .property("effective_alpha", effective())
                    .required("r")
                    .required("alpha")
                    .required("calibration")
            }
            Kind::Explicit => record
                .property("pricing", pricing)
                .property("r", positive())
                .property("alpha", schema::component("NonNegativeCells"))
                .property("lower_bound", schema::component("LowerBound"))
                .property("effective_alpha", effective())
                .required("r")
                .required("alpha"),
            Kind::Exponential => record
                .property("pricing", pricing)
                .property("epsilon", positive())
                .property("prior", schema::component("BetaPrior"))
                .property(
                    "n",
                    schema::integer()
                        .minimum(Some(0))
                        .description(Some("successes + failures (public for this mechanism).")),
                )
                .property(
                    "sensitivity",
                    schema::between(0.0, 1.0).description(Some(
                        "Δ_g = max_j H(r_j, r_{j+1}), the global sensitivity of the Hellinger \
                         utility (0 when n = 0, a single candidate).",
                    )),
                )
                .property(
                    "sensitivity_used",
                    schema::above(0.0).description(Some(
                        "Δ_g rounded up by the bound on the floating-point error of every computed \
                         H (the selection divides by this).",
                    )),
                )
                .property(
                    "selected",
                    schema::integer().minimum(Some(0)).description(Some(
                        "The selected candidate j* (absent in a preview, which draws nothing).",
                    )),
                )
                .property(
                    "posterior",
                    schema::described(
                        "BetaPrior",
                        "The selected posterior Beta(α + j*, β + n − j*); `distribution` is its \
                         mean.",
                    ),
                )
                .required("epsilon")
                .required("prior")
                .required("n")
                .required("sensitivity")
                .required("sensitivity_used"),
            Kind::Gaussian | Kind::Laplace => {
                let (own, pricing) = match self {
                    Kind::Gaussian => (
                        "sigma",
                        "Which curve priced the charge. `exact`: λΔ2²/(2σ²) is the exact \
                         worst-case Rényi divergence of the discrete Gaussian (histogram relations \
                         at an integer ledger order, CKS20). `bound`: an upper bound (a \
                         non-integer order, or a custom relation).",
                    ),
                    _ => (
                        "scale",
                        "`exact`: the discrete Laplace's exact worst-case Rényi divergence \
                         (histogram relations). `bound`: the pure-DP/zCDP bound used for custom \
                         relations.",
                    ),
                };
                record
                    .property(own, positive())
                    .property("calibration", schema::component("Calibration"))
                    .property("pricing", schema::described("Pricing", pricing))
                    .required(own)
            }
        };
        record.into()
    }
}

impl PartialSchema for Mechanism {
    fn schema() -> RefOr<Schema> {
        schema::one_of(
            Kind::ALL
                .iter()
                .map(|kind| schema::component(kind.record_schema_name())),
        )
        .description(Some(
            "The mechanism as carried out, with the parameters it used (one shape per `kind`).",
        ))
        .into()
    }
}

impl ToSchema for Mechanism {
    fn schemas(schemas: &mut Vec<(String, SchemaRef)>) {
        for kind in Kind::ALL {
            schemas.push((
                kind.record_schema_name().into(),
                kind.record_schema().into(),
            ));
        }
        schemas.push(("Calibration".into(), CalibrationRecord::schema()));
        schemas.push((Pricing::name().into(), Pricing::schema()));
    }
}

impl PartialSchema for Pricing {
    fn schema() -> RefOr<Schema> {
        schema::string()
            .enum_values(Some(["exact", "bound"]))
            .description(Some(
                "Which RDP curve priced the release. `exact`: the exact worst-case Rényi \
                 divergence over the dataset's neighbouring relation — for a Dirichlet draw on \
                 `replace_one` or `add_remove_one` the closed form ε* of docs/PRIVACY.md (\"Exact \
                 pricing\"), for discrete Gaussian and discrete Laplace noise their exact curves \
                 on the histogram relations (see the gaussian and laplace mechanism records). \
                 `bound`: an upper bound on it — 001 Corollary 3 for a Dirichlet draw on a custom \
                 sensitivity, the documented bounds of the discrete baselines elsewhere, and \
                 min(ε, λ₀ε²/8) for `exponential`.",
            ))
            .into()
    }
}

impl ToSchema for Pricing {
    fn name() -> Cow<'static, str> {
        "Pricing".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn absent_fields_are_left_out_and_the_selection_is_flat() {
        let mut m = Mechanism::dirichlet(Kind::Diffuse, 0.5, &Prior::Uniform(2.0));
        assert_eq!(
            m.to_value(),
            json!({"kind": "diffuse", "r": 0.5, "alpha": 2.0})
        );
        m.selection = Some(Selection {
            selected: 3,
            posterior: [4.0, 8.0],
        });
        m.pricing = Some(Pricing::Exact);
        assert_eq!(
            m.to_value(),
            json!({"kind": "diffuse", "r": 0.5, "alpha": 2.0, "pricing": "exact", "selected": 3, "posterior": [4.0, 8.0]})
        );
    }
}
