//! The mechanism record in openapi.yaml: `Mechanism`, a `oneOf` of one record shape per mechanism
//! (`<Name>Mechanism`, written by each mechanism: `release::mechanisms::record_schemas`), and the
//! parts they share (`Calibration`, `Pricing`). The record itself is `release::mechanism::Record`.

use std::borrow::Cow;

use serde::Serialize;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use super::mechanism::Record;
use super::mechanisms::{self, Kind};
use crate::privacy::curve::Pricing;
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

impl PartialSchema for Record {
    fn schema() -> RefOr<Schema> {
        schema::one_of(
            Kind::ALL
                .iter()
                .map(|kind| schema::component(&kind.record_schema_name())),
        )
        .description(Some(
            "The mechanism as carried out, with the parameters it used (one shape per `kind`).",
        ))
        .into()
    }
}

impl ToSchema for Record {
    fn name() -> Cow<'static, str> {
        "Mechanism".into()
    }

    fn schemas(schemas: &mut Vec<(String, SchemaRef)>) {
        schemas.extend(mechanisms::record_schemas());
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
    fn absent_fields_are_left_out_and_a_selection_is_flat() {
        let mut m = Record::new("diffuse").with("r", 0.5).with("alpha", 2.0);
        assert_eq!(
            m.to_value(),
            json!({"kind": "diffuse", "r": 0.5, "alpha": 2.0})
        );
        let mut selection = serde_json::Map::new();
        selection.insert("selected".into(), json!(3));
        selection.insert("posterior".into(), json!([4.0, 8.0]));
        m.merge(selection);
        m.set("pricing", Pricing::Exact);
        assert_eq!(
            m.to_value(),
            json!({"kind": "diffuse", "r": 0.5, "alpha": 2.0, "pricing": "exact", "selected": 3, "posterior": [4.0, 8.0]})
        );
        // The stored text sorts its keys whatever order the fields were set in.
        assert_eq!(
            m.to_value().to_string(),
            r#"{"alpha":2.0,"kind":"diffuse","posterior":[4.0,8.0],"pricing":"exact","r":0.5,"selected":3}"#
        );
        let with_none = Record::new("gaussian").with_some("sigma", None::<f64>);
        assert_eq!(with_none.to_value(), json!({"kind": "gaussian"}));
    }
}
