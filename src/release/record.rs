//! The mechanism record: what a release ran (its kind, parameters, calibration target and how it
//! was priced), returned with every preview and release and stored with the release.
//!
//! Stored as JSON through `serde_json::Value`, whose maps sort their keys, so the stored text does
//! not depend on the field order here; the field names and which are present are part of every
//! stored row (tests/it/golden.rs pins them). Absent fields are left out, never `null`.

use serde::Serialize;
use serde_json::Value;

use super::request::Kind;
use super::Target;
use crate::privacy::bounded::CellValues;
use crate::privacy::curve::Pricing;
#[cfg(test)]
use crate::privacy::Prior;

/// The calibration target a release was solved for, as asked (before the ledger grid).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CalibrationRecord {
    pub order: f64,
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
