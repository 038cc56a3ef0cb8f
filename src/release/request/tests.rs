//! The parser's own tests: every mechanism's shape into its own spec, every refusal naming its
//! field, and the declared fields being exactly what the parser takes.

use super::*;
use crate::privacy::bounded::CellValues;
use crate::privacy::exponential::BetaCandidates;
use crate::privacy::Prior;
use crate::release::mechanism::Target;
use crate::release::mechanisms::noise::{Smoothing, Spec as Noise};
use crate::release::mechanisms::{diffuse, dirichlet, explicit, exponential, posterior};

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

/// Every mechanism's request shape, parsed into its own spec with its defaults.
#[test]
fn each_mechanism_parses_into_its_own_spec() {
    let dirichlet = |prior: f64, lower: Option<CellValues>, t: Target| {
        Spec::Dirichlet(dirichlet::Spec {
            settings: dirichlet::Settings { prior, lower },
            target: t,
        })
    };
    let cases: Vec<(&str, Spec)> = vec![
        (
            r#"{"counts": [1, 2], "epsilon": 0.5}"#,
            dirichlet(dirichlet::DEFAULT_PRIOR, None, target(0.5, 2.0)),
        ),
        (
            r#"{"counts": [1, 2], "epsilon": 0.5, "order": 4, "prior": 3}"#,
            dirichlet(3.0, None, target(0.5, 4.0)),
        ),
        (
            r#"{"counts": [1, 2], "epsilon": 1, "mechanism": "posterior"}"#,
            Spec::Posterior(posterior::Spec {
                settings: posterior::Settings {
                    r: posterior::DEFAULT_R,
                    shape: None,
                    lower: None,
                },
                target: target(1.0, 2.0),
            }),
        ),
        (
            r#"{"counts": [1, 2], "epsilon": 1, "mechanism": "diffuse", "alpha": 2}"#,
            Spec::Diffuse(diffuse::Spec {
                settings: diffuse::Settings {
                    alpha: CellValues::Uniform(2.0),
                    lower: None,
                },
                target: target(1.0, 2.0),
            }),
        ),
        (
            r#"{"counts": [1, 2], "mechanism": "explicit", "r": 0.5, "alpha": 2}"#,
            Spec::Explicit(explicit::Spec {
                settings: explicit::Settings {
                    r: 0.5,
                    alpha: CellValues::Uniform(2.0),
                    lower: None,
                },
                cap: None,
            }),
        ),
        (
            r#"{"counts": [1, 2], "mechanism": "gaussian", "sigma": 3}"#,
            Spec::Gaussian(Noise::Given {
                scale: 3.0,
                cap: None,
                smoothing: Smoothing::Projected,
            }),
        ),
        (
            r#"{"counts": [1, 2], "mechanism": "laplace", "epsilon": 1}"#,
            Spec::Laplace(Noise::Calibrated {
                target: target(1.0, 2.0),
                smoothing: Smoothing::Projected,
            }),
        ),
        (
            r#"{"counts": [1, 2], "mechanism": "laplace", "epsilon": 1, "smoothing": 0.5}"#,
            Spec::Laplace(Noise::Calibrated {
                target: target(1.0, 2.0),
                smoothing: Smoothing::Given(0.5),
            }),
        ),
        (
            r#"{"counts": [7, 3], "mechanism": "exponential", "epsilon": 2, "prior": [2, 3]}"#,
            Spec::Exponential(exponential::Spec {
                epsilon: Epsilon::new(2.0).unwrap(),
                candidates: BetaCandidates::new(10, 2.0, 3.0).unwrap(),
            }),
        ),
        (
            r#"{"counts": [1, 2], "epsilon": 1, "lower_bound": 1}"#,
            dirichlet(
                dirichlet::DEFAULT_PRIOR,
                Some(CellValues::Uniform(1.0)),
                target(1.0, 2.0),
            ),
        ),
        (
            r#"{"counts": [1, 2], "epsilon": 1, "mechanism": "posterior", "prior_shape": [1, 2]}"#,
            Spec::Posterior(posterior::Spec {
                settings: posterior::Settings {
                    r: posterior::DEFAULT_R,
                    shape: Some(CellValues::PerCell(vec![1.0, 2.0])),
                    lower: None,
                },
                target: target(1.0, 2.0),
            }),
        ),
    ];
    for (json, want) in cases {
        let got = parse(json).unwrap_or_else(|e| panic!("{json}: {e:?}"));
        assert_eq!(got.spec, want, "{json}");
    }
    // A per-cell prior stays per cell.
    let per_cell =
        parse(r#"{"counts": [1, 2], "epsilon": 1, "mechanism": "diffuse", "alpha": [1, 2]}"#)
            .unwrap();
    let Spec::Diffuse(d) = per_cell.spec else {
        panic!("diffuse")
    };
    assert_eq!(
        d.settings.alpha,
        CellValues::from(&Prior::per_cell(vec![1.0, 2.0]).unwrap())
    );
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

/// The fields the registry declares and the parser agree: every field a mechanism declares is
/// accepted by it (refused, if at all, for its value, not as a field that does not apply), every
/// other mechanism field refused by name.
#[test]
fn the_declared_fields_are_what_the_parser_enforces() {
    let value = |name: &str| match name {
        "prior" => "\"prior\": 1".to_string(),
        other => format!("\"{other}\": 1"),
    };
    for kind in Kind::ALL {
        // Two whole-number cells: every mechanism's input (the exponential mechanism's too).
        let base = format!(
            r#""counts": [7, 3], "epsilon": 2, "mechanism": "{}""#,
            kind.name()
        );
        for field in mechanisms::field_names() {
            let json = format!("{{{base}, {}}}", value(field));
            let result = parse(&json);
            let refused = format!("{field} does not apply to the {} mechanism", kind.name());
            if kind.takes(field) {
                if let Err(e) = &result {
                    assert!(!e.message.starts_with(&refused), "{json}: {e:?}");
                }
            } else {
                let err = result.err().unwrap_or_else(|| panic!("{json}: accepted"));
                assert_eq!(err.field, *field, "{json}: {err:?}");
                assert!(err.message.starts_with(&refused), "{json}: {err:?}");
            }
        }
    }
}

/// The canonical form: legacy fields in their order (absent ones of the first version written
/// `null`), then newer mechanism fields sorted by name.
#[test]
fn the_canonical_form_is_the_frozen_layout() {
    let body: RequestBody =
        serde_json::from_str(r#"{"prior_shape": [1, 2], "counts": [1, 2], "epsilon": 1, "label": "x", "mechanism": "posterior"}"#)
            .unwrap();
    assert_eq!(
        serde_json::to_string(&body).unwrap(),
        r#"{"counts":[1.0,2.0],"epsilon":1.0,"order":null,"mechanism":"posterior","prior":null,"r":null,"alpha":null,"sigma":null,"scale":null,"label":"x","prior_shape":[1.0,2.0]}"#
    );
}

#[test]
fn unknown_and_repeated_fields_are_refused() {
    let err = |json: &str| {
        serde_json::from_str::<RequestBody>(json)
            .err()
            .unwrap()
            .to_string()
    };
    assert!(err(r#"{"counts": [1, 2], "nonsense": 1}"#).starts_with("unknown field"));
    assert!(err(r#"{"counts": [1, 2], "r": 1, "r": 2}"#).starts_with("duplicate field"));
    assert!(err(r#"{"counts": [1, 2], "epsilon": 1, "epsilon": 2}"#).starts_with("duplicate field"));
    // A number field takes no array.
    assert!(err(r#"{"counts": [1, 2], "sigma": [1, 2]}"#).starts_with("invalid type"));
    assert!(err(r#"{"counts": [1, 2], "r": null}"#).starts_with("invalid type"));
}
