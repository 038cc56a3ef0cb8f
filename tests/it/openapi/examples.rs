//! The schemas of openapi.yaml mean what the API does, on hand-written bodies (no server):
//!
//! * request bodies: a valid body is accepted by its schema AND by the server's own parser
//!   (`plan_release`, `parse_registration`), an invalid one refused by both; and for every
//!   mechanism and every optional field, the request schema and `Request::parse` agree on whether
//!   the mechanism takes the field;
//! * responses: the response schemas accept what the server sends and refuse what it never
//!   sends (a release without its budget, a problem type under another status...);
//! * every operation declares the problem responses its route can return, as
//!   `application/problem+json` whose problem types all have the response's status.
//!
//! JSON Schema 2020-12 with format checking, over the whole document (`Spec::schema_errors`).

use dirichlet_release::http::datasets::parse_registration;
use dirichlet_release::http::error::ProblemType;
use dirichlet_release::http::releases::plan_release;
use dirichlet_release::ledger::{Dataset, Label, Units};
use dirichlet_release::privacy::{Order, Sensitivity};
use dirichlet_release::release::mechanisms::{self, EpsilonView, Kind};
use dirichlet_release::release::request::{Context, Request, RequestBody};
use serde_json::{json, Value};

use super::Spec;

const UUID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";
const UUID2: &str = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
const NOW: &str = "2025-01-02T03:04:05.678Z";

fn schema(name: &str) -> String {
    format!("#/components/schemas/{name}")
}

fn problem_schema(response: &str) -> String {
    format!("#/components/responses/{response}/content/application~1problem+json/schema")
}

/// Every case whose verdict is not `valid` at `pointer`, with why.
fn misjudged(spec: &Spec, pointer: &str, cases: &[(Value, &str)], valid: bool) -> Vec<String> {
    cases
        .iter()
        .filter_map(|(body, why)| {
            let errors = spec.schema_errors(pointer, body);
            match (valid, errors.first()) {
                (true, Some(e)) => Some(format!("{pointer} refused a valid body ({why}): {e}")),
                (false, None) => Some(format!("{pointer} accepted an invalid body ({why})")),
                _ => None,
            }
        })
        .collect()
}

fn dataset(relation: Sensitivity) -> Dataset {
    Dataset {
        id: uuid::Uuid::nil(),
        name: "examples".into(),
        order: Order::new(2.0).unwrap(),
        total: Units::floor(100.0).unwrap(),
        dp_target: None,
        sensitivity: relation,
        neighbouring: "replace_one".into(),
        created_at: chrono::DateTime::UNIX_EPOCH,
        created_by: "admin".into(),
        spent: Units::ZERO,
        releases: 0,
        cells: None,
        population: None,
        blocks: None,
    }
}

fn good_releases() -> Vec<(Value, &'static str)> {
    vec![
        (
            json!({"counts": [1, 2], "epsilon": 1}),
            "dirichlet by default",
        ),
        (
            json!({"counts": [0, 0, 5.5], "epsilon": 0.5, "order": 2, "mechanism": "dirichlet", "prior": 2}),
            "dirichlet, all fields",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "mechanism": "posterior"}),
            "posterior, r defaults",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "mechanism": "posterior", "r": 0.5, "order": 4}),
            "posterior with r",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "mechanism": "diffuse", "alpha": [10, 10]}),
            "diffuse, per-cell alpha",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "explicit", "r": 1, "alpha": 5}),
            "explicit",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "explicit", "r": 1, "alpha": [5, 6], "epsilon": 3}),
            "explicit with a cap",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "gaussian", "sigma": 3}),
            "gaussian sigma",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "gaussian", "epsilon": 1}),
            "gaussian calibrated",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "gaussian", "epsilon": 1, "order": 8}),
            "gaussian calibrated at an order",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "gaussian", "sigma": 3, "epsilon": 1}),
            "gaussian sigma with a cap",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "laplace", "scale": 3}),
            "laplace scale",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "laplace", "epsilon": 1, "order": 3}),
            "laplace calibrated",
        ),
        (
            json!({"counts": [7, 3], "mechanism": "exponential", "epsilon": 1, "prior": [2, 3], "label": "a rate"}),
            "exponential",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "lower_bound": [1, 0]}),
            "dirichlet with lower_bound",
        ),
        (
            json!({"table": [[1, 2], [3, 4]], "epsilon": 1, "mechanism": "diffuse", "alpha": 0, "lower_bound": [50, 60], "label": "t"}),
            "diffuse with lower_bound on a labelled table",
        ),
        (
            json!({"table": [[1, 2]], "mechanism": "explicit", "r": 1, "alpha": 0, "lower_bound": 5}),
            "explicit with lower_bound on a table",
        ),
        (
            json!({"table": [[1, 2]], "epsilon": 1, "mechanism": "posterior", "prior_shape": [1, 2]}),
            "posterior prior_shape on a table",
        ),
        (
            json!({"table": [[1, 2], [0, 0]], "epsilon": 1, "row_names": ["0-17", "18+"]}),
            "a table with row names",
        ),
        (
            json!({"table": [[1, 2]], "mechanism": "gaussian", "sigma": 2, "row_names": ["all"]}),
            "gaussian on a table with row names",
        ),
        (
            json!({"table": [[1, 2], [3, 4]], "epsilon": 1, "label": " Cafe\u{301} | by age\t", "row_names": ["0\u{2013}17 ", "\u{a0}18+"]}),
            "a label and row names trimmed and normalised",
        ),
    ]
}

fn bad_releases() -> Vec<(Value, &'static str)> {
    vec![
        (json!({"epsilon": 1}), "no counts"),
        (json!({"counts": [1], "epsilon": 1}), "one cell"),
        (json!({"counts": [1, -1], "epsilon": 1}), "negative count"),
        (json!({"counts": [1, "2"], "epsilon": 1}), "string count"),
        (json!({"counts": [1, 2]}), "dirichlet without epsilon"),
        (json!({"counts": [1, 2], "epsilon": 0}), "epsilon 0"),
        (
            json!({"counts": [1, 2], "epsilon": 1, "order": 1}),
            "order 1",
        ),
        (
            json!({"counts": [1, 2], "order": 2}),
            "order without epsilon",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "prior": 0}),
            "prior 0",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "r": 1}),
            "r with dirichlet",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "alpha": 1}),
            "alpha with dirichlet",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "sigma": 1}),
            "sigma with dirichlet",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "posterior"}),
            "posterior without epsilon",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "mechanism": "posterior", "prior": 1}),
            "prior with posterior",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "mechanism": "posterior", "alpha": 1}),
            "alpha with posterior",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "diffuse", "alpha": 1}),
            "diffuse without epsilon",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "mechanism": "diffuse"}),
            "diffuse without alpha",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "mechanism": "diffuse", "r": 1}),
            "r with diffuse",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "mechanism": "diffuse", "alpha": [1]}),
            "one-cell alpha",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "mechanism": "diffuse", "alpha": [1, 0]}),
            "alpha cell 0 without lower_bound",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "explicit", "r": 1}),
            "explicit without alpha",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "explicit", "alpha": 1}),
            "explicit without r",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "explicit", "r": 1, "alpha": 0}),
            "explicit alpha 0 without lower_bound",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "explicit", "r": 1, "alpha": 1, "prior": 1}),
            "prior with explicit",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "explicit", "r": 1, "alpha": 1, "epsilon": 1, "order": 2}),
            "order with explicit",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "gaussian"}),
            "gaussian without sigma or epsilon",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "gaussian", "scale": 1}),
            "scale with gaussian",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "gaussian", "sigma": 0}),
            "sigma 0",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "gaussian", "sigma": 1, "epsilon": 1, "order": 2}),
            "order with a given sigma",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "gaussian", "order": 2}),
            "order without epsilon",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "laplace"}),
            "laplace without scale or epsilon",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "laplace", "scale": 1, "sigma": 1}),
            "sigma with laplace",
        ),
        (
            json!({"counts": [1, 2], "mechanism": "laplace", "scale": 1, "order": 3}),
            "order with a given scale",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "mechanism": "telepathy"}),
            "unknown mechanism",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "mechanism": null}),
            "null mechanism",
        ),
        (
            json!({"table": [[1, 2]], "epsilon": 1, "mechanism": "exponential"}),
            "exponential on a table",
        ),
        (
            json!({"counts": [7, 3, 1], "epsilon": 1, "mechanism": "exponential"}),
            "exponential on three cells",
        ),
        (
            json!({"counts": [7, 3], "epsilon": 1, "mechanism": "exponential", "prior": 2}),
            "a number as the Beta prior",
        ),
        (
            json!({"epsilon": 1, "mechanism": "diffuse", "alpha": 0, "lower_bound": 1}),
            "lower_bound without counts or table",
        ),
        (
            json!({"counts": [1, 2], "table": [[1, 2]], "mechanism": "explicit", "r": 1, "alpha": 0, "lower_bound": 1}),
            "lower_bound with both counts and table",
        ),
        (json!({"table": [], "epsilon": 1}), "an empty table"),
        (
            json!({"counts": [1, 2], "epsilon": 1, "label": ""}),
            "an empty label",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "label": "two\nlines"}),
            "a label with a control character",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "row_names": ["a"]}),
            "row names without a table",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "label": "flu\u{200b}"}),
            "a label with a zero-width space",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "label": "\u{feff}flu"}),
            "a label after a byte order mark",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "label": "a\u{202e}b"}),
            "a label with a right-to-left override",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "label": "a\u{2028}b"}),
            "a label with a line separator inside",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "label": " \t\u{3000} "}),
            "a blank label",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "label": format!(" {} ", "x".repeat(201))}),
            "a label of 201 characters once trimmed",
        ),
        (
            json!({"table": [[1, 2], [3, 4]], "epsilon": 1, "row_names": ["a", "b\u{ad}"]}),
            "a row name with a soft hyphen",
        ),
        (
            json!({"table": [[1, 2], [3, 4]], "epsilon": 1, "row_names": ["a", "  "]}),
            "a blank row name",
        ),
        (
            json!({"table": [[1, 2], [3, 4]], "epsilon": 1, "row_names": ["a", "a"]}),
            "repeated row names",
        ),
        (
            json!({"table": [[1, 2]], "epsilon": 1, "row_names": [""]}),
            "an empty row name",
        ),
        (
            json!({"counts": [7, 3], "mechanism": "exponential", "epsilon": 1, "row_names": ["a"]}),
            "row names on the exponential mechanism",
        ),
        (
            json!({"counts": [1, 2], "epsilon": 1, "colour": "blue"}),
            "unknown field",
        ),
        (json!([1, 2]), "not an object"),
    ]
}

#[test]
fn release_requests_are_judged_as_the_parser_judges_them() {
    let spec = Spec::load();
    let request = schema("ReleaseRequest");
    let mut failures = misjudged(&spec, &request, &good_releases(), true);
    failures.extend(misjudged(&spec, &request, &bad_releases(), false));
    let on = dataset(Sensitivity::REPLACE_ONE);
    for (body, why) in good_releases() {
        if let Err(e) = plan_release(body.to_string().as_bytes(), &on, 1000) {
            failures.push(format!("the parser refused a valid body ({why}): {e}"));
        }
    }
    for (body, why) in bad_releases() {
        match plan_release(body.to_string().as_bytes(), &on, 1000) {
            Ok(_) => failures.push(format!("the parser accepted an invalid body ({why})")),
            Err(e) => {
                if e.problem_type() != ProblemType::InvalidRequest {
                    failures.push(format!(
                        "{why}: {:?}, not invalid-request",
                        e.problem_type()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n  - {}", failures.join("\n  - "));
}

/// For every mechanism and every field (`order` and every mechanism field the registry
/// declares): the schema takes the field exactly when the parser does — on the mechanism alone,
/// with its needed fields, and with its noise given (where that turns `epsilon` into a cap).
#[test]
fn each_request_shape_takes_the_fields_its_mechanism_takes() {
    let spec = Spec::load();
    let request = schema("ReleaseRequest");
    let value = |field: &str| match field {
        "order" => json!(3),
        "r" => json!(0.5),
        _ => json!(1),
    };
    let ctx = Context {
        ledger_order: Order::new(2.0).unwrap(),
        sensitivity: Sensitivity::REPLACE_ONE,
        max_dimension: 8,
        max_exponential_n: 100,
        cells: None,
    };
    let mut fields = vec!["order"];
    fields.extend(mechanisms::field_names());
    let mut failures = Vec::new();
    let mut accepted = 0;
    for (kind, d) in Kind::ALL.into_iter().zip(mechanisms::describe()) {
        let counts = if d.tables {
            json!([1, 2])
        } else {
            json!([7, 3])
        };
        // Every mechanism alone, with its needed fields, and with its noise given: the bodies
        // each field is added to.
        let alone = json!({"counts": counts, "epsilon": 2, "mechanism": kind.name()});
        let mut bases = vec![alone.clone()];
        let needed: Vec<&str> = d
            .fields
            .iter()
            .filter(|f| f.required)
            .map(|f| f.name.as_str())
            .collect();
        if !needed.is_empty() {
            let mut base = alone.clone();
            if d.epsilon == EpsilonView::Cap {
                base.as_object_mut().unwrap().remove("epsilon");
            }
            for f in &needed {
                base[*f] = value(f);
            }
            bases.push(base);
        }
        if let Some(noise) = &d.noise_field {
            let mut base = json!({"counts": counts, "mechanism": kind.name()});
            base[noise.as_str()] = value(noise);
            bases.push(base);
        }
        for base in &bases {
            let mut bodies = vec![base.clone()];
            for field in &fields {
                let mut body = base.clone();
                body[*field] = value(field);
                bodies.push(body);
            }
            for body in bodies {
                let by_schema = spec.schema_errors(&request, &body).is_empty();
                let parsed: RequestBody = serde_json::from_value(body.clone()).unwrap();
                let by_parser = Request::parse(&parsed, &ctx);
                accepted += usize::from(by_parser.is_ok());
                if by_schema != by_parser.is_ok() {
                    failures.push(format!(
                        "{body}: the schema {} it, the parser {}",
                        if by_schema { "accepts" } else { "refuses" },
                        match &by_parser {
                            Ok(_) => "accepts it".to_string(),
                            Err(e) => format!("refuses it ({}: {})", e.field, e.message),
                        }
                    ));
                }
            }
        }
    }
    assert!(
        accepted >= 25,
        "too few accepted bodies to mean anything: {accepted}"
    );
    assert!(failures.is_empty(), "\n  - {}", failures.join("\n  - "));
}

fn good_datasets() -> Vec<(Value, &'static str)> {
    vec![
        (
            json!({"name": "a", "budget": {"order": 2, "epsilon": 1}}),
            "RDP budget",
        ),
        (
            json!({"name": "x".repeat(200), "budget": {"order": 32, "epsilon": 8192}}),
            "longest name, largest budget",
        ),
        (
            json!({"name": "  a b\n", "budget": {"order": 2, "epsilon": 2f64.powi(-40)}}),
            "name trimmed, smallest budget",
        ),
        (
            json!({"name": format!(" {}\t", "x".repeat(200)), "budget": {"order": 2, "epsilon": 1}}),
            "200 characters once trimmed",
        ),
        (
            json!({"name": "a", "budget": {"epsilon": 1, "delta": 1e-6}}),
            "(eps, delta), server order",
        ),
        (
            json!({"name": "a", "budget": {"epsilon": 3, "delta": 1e-6, "order": 8}}),
            "(eps, delta) at an order",
        ),
        (
            json!({"name": "a", "budget": {"order": 2, "epsilon": 1}, "neighbouring": "add_remove_one"}),
            "neighbouring",
        ),
        (
            json!({"name": "a", "budget": {"order": 2, "epsilon": 1}, "sensitivity": {"l2_squared": 2, "linf": 1}}),
            "custom sensitivity",
        ),
        (
            json!({"name": "a", "budget": {"order": 2, "epsilon": 1}, "cells": ["flu", "asthma", "ünïcode | ☃"]}),
            "named cells",
        ),
        (
            json!({"name": "Cafe\u{301}", "budget": {"order": 2, "epsilon": 1}, "cells": [" flu", "e\u{301}\n"]}),
            "a decomposed name, cell names trimmed",
        ),
    ]
}

fn bad_datasets() -> Vec<(Value, &'static str)> {
    let b = json!({"order": 2, "epsilon": 1});
    vec![
        (json!({"budget": b}), "no name"),
        (json!({"name": "", "budget": b}), "empty name"),
        (
            json!({"name": "x".repeat(201), "budget": b}),
            "name too long",
        ),
        (json!({"name": " \t ", "budget": b}), "blank name"),
        (
            json!({"name": "a\u{1}b", "budget": b}),
            "a control character",
        ),
        (
            json!({"name": "a", "budget": {"order": 2, "epsilon": 1e-13}}),
            "RDP budget that rounds to zero",
        ),
        (json!({"name": "a"}), "no budget"),
        (
            json!({"name": "a", "budget": {"epsilon": 1}}),
            "budget without order or delta",
        ),
        (
            json!({"name": "a", "budget": {"order": 2}}),
            "budget without epsilon",
        ),
        (
            json!({"name": "a", "budget": {"order": 1, "epsilon": 1}}),
            "order 1",
        ),
        (
            json!({"name": "a", "budget": {"order": 2, "epsilon": 0}}),
            "epsilon 0",
        ),
        (
            json!({"name": "a", "budget": {"order": 2, "epsilon": 8192.5}}),
            "RDP epsilon above 8192",
        ),
        (
            json!({"name": "a", "budget": {"epsilon": 1, "delta": 0}}),
            "delta 0",
        ),
        (
            json!({"name": "a", "budget": {"epsilon": 1, "delta": 1}}),
            "delta 1",
        ),
        (
            json!({"name": "a", "budget": {"order": 2, "epsilon": 1, "extra": 1}}),
            "unknown budget field",
        ),
        (
            json!({"name": "a", "budget": b, "neighbouring": "custom"}),
            "neighbouring custom",
        ),
        (
            json!({"name": "a", "budget": b, "neighbouring": "replace_one", "sensitivity": {"l2_squared": 2, "linf": 1}}),
            "both sensitivity and neighbouring",
        ),
        (
            json!({"name": "a", "budget": b, "sensitivity": {"l2_squared": 2}}),
            "sensitivity without linf",
        ),
        (
            json!({"name": "a", "budget": b, "sensitivity": {"l2_squared": 0, "linf": 1}}),
            "l2_squared 0",
        ),
        (
            json!({"name": "a", "budget": b, "owner": "me"}),
            "unknown field",
        ),
        (
            json!({"name": "a", "budget": b, "neighbouring": null}),
            "null neighbouring",
        ),
        (
            json!({"name": "a", "budget": b, "cells": ["flu"]}),
            "one cell name",
        ),
        (
            json!({"name": "a", "budget": b, "cells": ["flu", "flu"]}),
            "a repeated cell name",
        ),
        (
            json!({"name": "a", "budget": b, "cells": ["flu", ""]}),
            "an empty cell name",
        ),
        (
            json!({"name": "a", "budget": b, "cells": ["flu", "a\nb"]}),
            "a cell name with a control character",
        ),
        (
            json!({"name": "a", "budget": b, "cells": ["flu", 1]}),
            "a cell name not a string",
        ),
        (
            json!({"name": "flu\u{200b}", "budget": b}),
            "a zero-width space in the name",
        ),
        (
            json!({"name": "\u{feff}flu", "budget": b}),
            "a byte order mark before the name",
        ),
        (
            json!({"name": "\u{202e}ulf", "budget": b}),
            "a right-to-left override in the name",
        ),
        (
            json!({"name": "a\u{2029}b", "budget": b}),
            "a paragraph separator in the name",
        ),
        (
            json!({"name": "\u{3000}\u{a0}", "budget": b}),
            "a name of ideographic and no-break spaces",
        ),
        (
            json!({"name": "a", "budget": b, "cells": ["flu", "flu\u{200b}"]}),
            "a cell name with a zero-width space",
        ),
        (
            json!({"name": "a", "budget": b, "cells": ["flu", "\u{2066}flu\u{2069}"]}),
            "a cell name in a bidirectional isolate",
        ),
        (
            json!({"name": "a", "budget": b, "cells": ["flu", " "]}),
            "a blank cell name",
        ),
        (
            json!({"name": "a", "budget": b, "cells": null}),
            "null cells",
        ),
    ]
}

/// The names' pattern and their parser (`ledger::names`) agree on every character of the Basic
/// Multilingual Plane, alone, inside a name and around it: controls, format characters and
/// separators refused inside, whitespace trimmed around. (Above the BMP the pattern cannot list
/// what is refused in a form every regex dialect reads; the parser's unit tests cover those.)
#[test]
fn the_name_pattern_refuses_what_the_parser_refuses() {
    let spec = Spec::load();
    let label = schema("Label");
    let mut failures = Vec::new();
    for c in (0u32..=0xffff).filter_map(char::from_u32) {
        for text in [
            c.to_string(),
            format!("a{c}b"),
            format!("{c}a"),
            format!("a{c}"),
        ] {
            let by_schema = spec.schema_errors(&label, &json!(text)).is_empty();
            let by_parser = Label::new(text.clone()).is_ok();
            if by_schema != by_parser {
                failures.push(format!(
                    "U+{:04X} in {text:?}: the schema {}, the parser {}",
                    c as u32,
                    if by_schema { "accepts" } else { "refuses" },
                    if by_parser { "accepts" } else { "refuses" },
                ));
            }
        }
    }
    let shown: Vec<&String> = failures.iter().take(20).collect();
    assert!(
        failures.is_empty(),
        "{} disagreements, the first: {shown:#?}",
        failures.len()
    );
}

#[test]
fn dataset_registrations_are_judged_as_the_parser_judges_them() {
    let spec = Spec::load();
    let create = schema("DatasetCreate");
    let mut failures = misjudged(&spec, &create, &good_datasets(), true);
    failures.extend(misjudged(&spec, &create, &bad_datasets(), false));
    for (body, why) in good_datasets() {
        if let Err(e) = parse_registration(body.to_string().as_bytes(), "admin".into(), 16) {
            failures.push(format!("the parser refused a valid body ({why}): {e}"));
        }
    }
    for (body, why) in bad_datasets() {
        if parse_registration(body.to_string().as_bytes(), "admin".into(), 16).is_ok() {
            failures.push(format!("the parser accepted an invalid body ({why})"));
        }
    }
    let token = schema("TokenCreate");
    failures.extend(misjudged(
        &spec,
        &token,
        &[
            (json!({"datasets": [UUID]}), "one dataset"),
            (
                json!({"datasets": [UUID], "expires_at": NOW}),
                "with an expiry",
            ),
            (json!({"datasets": [UUID], "expires_at": null}), "no expiry"),
        ],
        true,
    ));
    failures.extend(misjudged(
        &spec,
        &token,
        &[
            (json!({"datasets": []}), "no dataset"),
            (json!({"datasets": ["nope"]}), "not a uuid"),
            (
                json!({"datasets": [UUID], "expires_at": "tomorrow"}),
                "not a date-time",
            ),
            (
                json!({"datasets": [UUID], "role": "admin"}),
                "unknown field",
            ),
        ],
        false,
    ));
    assert!(failures.is_empty(), "\n  - {}", failures.join("\n  - "));
}

#[test]
fn response_schemas_accept_what_is_sent_and_refuse_what_is_not() {
    let spec = Spec::load();
    let budget = json!({"order": 2, "total": 1, "spent": 0.25, "remaining": 0.75, "releases": 1});
    let mut budget_dp = budget.clone();
    budget_dp["dp"] = json!({"delta": 1e-6, "total_epsilon": 3, "spent_epsilon": 1.5});
    let dataset = json!({
        "id": UUID, "name": "survey", "neighbouring": "replace_one",
        "sensitivity": {"l2_squared": 2, "linf": 1}, "budget": {"order": 2, "epsilon": 1},
        "spent": 0.25, "releases": 1, "created_at": NOW,
    });
    let with = |base: &Value, key: &str, value: Value| {
        let mut v = base.clone();
        v[key] = value;
        v
    };
    let without = |base: &Value, key: &str| {
        let mut v = base.clone();
        v.as_object_mut().unwrap().remove(key);
        v
    };
    let dataset_dp = with(
        &dataset,
        "budget",
        json!({"epsilon": 3, "delta": 1e-6, "order": 8, "rdp_epsilon": 1.2}),
    );
    let mechanism = json!({"kind": "dirichlet", "pricing": "exact", "r": 0.3, "alpha": 1.9, "prior": 1, "calibration": {"order": 2, "epsilon": 0.25}});
    let record = json!({
        "kind": "release", "id": UUID2, "dataset_id": UUID, "seq": 1, "created_at": NOW, "created_by": "admin",
        "distribution": [0.25, 0.75], "mechanism": mechanism, "cost": {"order": 2, "epsilon": 0.25},
    });
    let release = with(&record, "budget", budget.clone());
    let forecast = json!({"l2_bound": 0.3, "l2_bound_confidence": 0.95, "max_cell_variance": 0.01, "kl_tail": {"eta": 0.1, "probability": 0.05}});
    let summary = json!({"id": UUID2, "dataset_id": UUID, "seq": 1, "created_at": NOW, "created_by": "admin", "cost": {"order": 2, "epsilon": 0.25}});
    let preview = json!({"mechanism": mechanism, "cost": {"order": 2, "epsilon": 0.25}, "admissible": true, "budget_after": budget, "forecast": forecast});
    let selection = json!({"hellinger_bound": 0.258, "hellinger_bound_confidence": 0.95});
    let token = json!({"id": "9f86d081884c7d65", "token": "dra_9f86d081884c7d65_q-Z_s3cr3t", "role": "analyst", "datasets": [UUID], "created_at": NOW, "expires_at": null});
    let problem = |slug: &str, status: u16| json!({"type": format!("/problems/{slug}"), "title": "t", "status": status, "detail": "d"});
    let valid: Vec<(&str, Value, &str)> = vec![
        ("Health", json!({"status": "ok"}), "healthz"),
        (
            "Ready",
            json!({"status": "ready", "database": "postgres"}),
            "readyz",
        ),
        ("Dataset", dataset.clone(), "RDP dataset"),
        ("Dataset", dataset_dp.clone(), "(eps, delta) dataset"),
        (
            "Dataset",
            with(&dataset, "neighbouring", json!("custom")),
            "custom neighbouring",
        ),
        (
            "DatasetList",
            json!({"items": [dataset, dataset_dp]}),
            "list",
        ),
        ("Budget", budget.clone(), "budget"),
        ("Budget", budget_dp, "budget with dp"),
        ("Release", release.clone(), "release"),
        (
            "Release",
            with(
                &release,
                "mechanism",
                json!({"kind": "explicit", "pricing": "exact", "r": 1, "alpha": [1, 2]}),
            ),
            "explicit release",
        ),
        (
            "Release",
            with(
                &release,
                "mechanism",
                json!({"kind": "diffuse", "pricing": "exact", "r": 0.2, "alpha": [10, 10], "calibration": {"order": 2, "epsilon": 1}}),
            ),
            "diffuse release",
        ),
        (
            "Release",
            with(
                &release,
                "mechanism",
                json!({"kind": "laplace", "pricing": "exact", "scale": 2}),
            ),
            "laplace release, scale given",
        ),
        (
            "Release",
            with(
                &release,
                "mechanism",
                json!({"kind": "gaussian", "pricing": "bound", "sigma": 2, "calibration": {"order": 2, "epsilon": 1}}),
            ),
            "gaussian release",
        ),
        (
            "Release",
            with(
                &without(&release, "distribution"),
                "distributions",
                json!([[0.5, 0.5], [0.1, 0.9]]),
            ),
            "table release",
        ),
        ("ReleaseRecord", record.clone(), "record"),
        (
            "ReleaseList",
            json!({"items": [record], "next_before": 1}),
            "page with more",
        ),
        (
            "ReleaseList",
            json!({"items": [], "next_before": null}),
            "last page",
        ),
        ("ReleaseSummary", summary.clone(), "summary"),
        (
            "ReleaseSummary",
            with(&summary, "label", json!("by age band")),
            "labelled summary",
        ),
        (
            "ReleaseList",
            json!({"items": [summary, with(&summary, "seq", json!(2))], "next_before": null}),
            "page of summaries",
        ),
        ("Preview", preview.clone(), "preview"),
        (
            "Preview",
            with(&preview, "forecast", Value::Null),
            "preview without forecast",
        ),
        (
            "Preview",
            with(
                &preview,
                "forecast",
                with(&forecast, "kl_tail", Value::Null),
            ),
            "forecast without KL tail",
        ),
        (
            "Preview",
            with(&preview, "forecast", selection.clone()),
            "exponential forecast",
        ),
        (
            "Preview",
            with(
                &without(&preview, "forecast"),
                "forecasts",
                json!([forecast, null]),
            ),
            "table forecasts",
        ),
        ("TokenCreated", token.clone(), "token"),
    ];
    let invalid: Vec<(&str, Value, &str)> = vec![
        (
            "Ready",
            json!({"status": "ready", "database": "mysql"}),
            "unknown backend",
        ),
        (
            "Dataset",
            with(&dataset, "id", json!("42")),
            "id not a uuid",
        ),
        (
            "Dataset",
            with(&dataset, "created_at", json!("yesterday")),
            "created_at not a date-time",
        ),
        (
            "Dataset",
            with(
                &dataset,
                "budget",
                json!({"order": 2, "epsilon": 1, "delta": 1e-6}),
            ),
            "half an (eps, delta) spec",
        ),
        (
            "Budget",
            with(&budget, "remaining", json!(-1)),
            "negative remaining",
        ),
        (
            "Budget",
            with(&budget, "releases", json!(1.5)),
            "fractional releases",
        ),
        ("Release", record.clone(), "release without budget"),
        (
            "Release",
            with(&release, "distribution", json!([1.5, -0.5])),
            "distribution off the simplex box",
        ),
        (
            "Release",
            with(&release, "distributions", json!([[0.5, 0.5]])),
            "both distribution and distributions",
        ),
        ("Release", without(&release, "distribution"), "no output"),
        (
            "Release",
            with(
                &release,
                "mechanism",
                json!({"kind": "explicit", "pricing": "exact", "r": 1, "alpha": 1, "calibration": {"order": 2, "epsilon": 1}}),
            ),
            "explicit with a calibration",
        ),
        (
            "Release",
            with(
                &release,
                "mechanism",
                json!({"kind": "gaussian", "pricing": "exact", "scale": 2}),
            ),
            "gaussian with a scale",
        ),
        ("ReleaseRecord", release.clone(), "record with budget"),
        (
            "ReleaseList",
            json!({"items": [], "next_before": 0}),
            "next_before 0",
        ),
        (
            "ReleaseList",
            json!({"items": [with(&record, "distribution", Value::Null)], "next_before": null}),
            "record without its output",
        ),
        (
            "ReleaseSummary",
            with(&summary, "distribution", json!([0.25, 0.75])),
            "summary with an output",
        ),
        (
            "ReleaseSummary",
            with(&summary, "mechanism", mechanism.clone()),
            "summary with a mechanism",
        ),
        (
            "Preview",
            with(&preview, "forecast", json!({})),
            "forecast object without fields",
        ),
        (
            "Preview",
            with(&preview, "admissible", json!("yes")),
            "admissible not a boolean",
        ),
        (
            "Preview",
            with(
                &preview,
                "forecast",
                with(&selection, "hellinger_bound", json!(1.5)),
            ),
            "hellinger bound above 1",
        ),
        (
            "Preview",
            with(
                &preview,
                "forecast",
                with(&selection, "l2_bound", json!(0.3)),
            ),
            "two forecasts in one",
        ),
        (
            "Preview",
            with(&preview, "forecast", json!({"hellinger_bound": 0.2})),
            "hellinger bound without confidence",
        ),
        (
            "Preview",
            without(&preview, "forecast"),
            "neither forecast nor forecasts",
        ),
        (
            "TokenCreated",
            with(&token, "role", json!("admin")),
            "admin role",
        ),
    ];
    let mut failures = Vec::new();
    for (name, body, why) in valid {
        failures.extend(misjudged(&spec, &schema(name), &[(body, why)], true));
    }
    for (name, body, why) in invalid {
        failures.extend(misjudged(&spec, &schema(name), &[(body, why)], false));
    }
    let problems_valid = [
        (
            "NotFound",
            {
                let mut p = problem("not-found", 404);
                p["instance"] = json!(format!("/v1/datasets/{UUID}"));
                p
            },
            "404",
        ),
        ("Unauthorized", problem("unauthorized", 401), "401"),
        (
            "InvalidRequest",
            with(&problem("invalid-request", 422), "field", json!("name")),
            "422 with field",
        ),
        (
            "ReleaseRejected",
            problem("no-guarantee", 422),
            "no-guarantee",
        ),
        (
            "ReleaseConflict",
            with(&problem("budget-exhausted", 409), "budget", budget.clone()),
            "409",
        ),
        (
            "ReleaseConflict",
            problem("output-quota-exceeded", 409),
            "quota",
        ),
        ("ServiceUnavailable", problem("timeout", 503), "timeout"),
        ("HeadersTooLarge", problem("headers-too-large", 431), "431"),
        ("Internal", problem("internal", 500), "500"),
        (
            "Internal",
            with(&problem("internal", 500), "trace_id", json!("abc")),
            "extension member",
        ),
    ];
    let problems_invalid = [
        (
            "NotFound",
            problem("forbidden", 404),
            "404 with another type",
        ),
        (
            "NotFound",
            problem("not-found", 403),
            "not-found with another status",
        ),
        (
            "ReleaseRejected",
            problem("budget-exhausted", 422),
            "409 type under 422",
        ),
        (
            "PreviewRejected",
            problem("idempotency-key-reused", 422),
            "a key on a preview",
        ),
        (
            "ReleaseConflict",
            problem("budget-exhausted", 409),
            "409 without budget",
        ),
        (
            "HeadersTooLarge",
            problem("payload-too-large", 431),
            "431 with another type",
        ),
        (
            "Internal",
            json!({"title": "oops", "status": 500, "detail": "d"}),
            "problem without type",
        ),
    ];
    for (response, body, why) in problems_valid {
        failures.extend(misjudged(
            &spec,
            &problem_schema(response),
            &[(body, why)],
            true,
        ));
    }
    for (response, body, why) in problems_invalid {
        failures.extend(misjudged(
            &spec,
            &problem_schema(response),
            &[(body, why)],
            false,
        ));
    }
    assert!(failures.is_empty(), "\n  - {}", failures.join("\n  - "));
}

/// The problem schemas are the problem types of `ProblemType`, one each, with its status.
#[test]
fn each_problem_type_has_its_schema() {
    let spec = Spec::load();
    let mut declared = spec.problem_types();
    declared.sort();
    let mut types: Vec<String> = ProblemType::ALL.iter().map(|t| t.uri()).collect();
    types.sort();
    assert_eq!(declared, types);
    for problem in ProblemType::ALL {
        let schema = spec.at(&schema(problem.schema_name()));
        assert_eq!(
            schema["properties"]["status"]["const"],
            json!(problem.status().as_u16()),
            "{}",
            problem.schema_name()
        );
    }
}

/// What each operation can answer besides its success: every route can meet the header
/// limits, a panic and the database (431, 500, 503); an authenticated one a bad token (401) and,
/// with single sign-on, a valid token without a known role (403); one on a dataset an unknown id (404); one with a body a
/// malformed, oversized, mistyped or invalid body (400, 413, 415, 422); a release the ledger
/// (409). Every error is problem+json, and each problem type a response declares has its status.
#[test]
fn every_operation_declares_the_problems_its_route_can_return() {
    let spec = Spec::load();
    let open = [
        "healthz",
        "readyz",
        "metrics",
        "openapi",
        "listMechanisms",
        "console",
        "consoleAsset",
    ];
    let mut failures = Vec::new();
    let operations = spec.operations();
    assert!(operations.len() >= 18, "{}", operations.len());
    for operation in operations {
        let op = spec.at(&operation.pointer);
        let id = operation.id.as_str();
        let codes: Vec<&str> = op["responses"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut need = vec!["431", "500", "503"];
        let security = &op["security"];
        if open.contains(&id) {
            let anonymous = security == &json!([])
                || security.as_array().is_some_and(|s| s.contains(&json!({})));
            if !anonymous {
                failures.push(format!("{id}: open, but does not say so in `security`"));
            }
        } else {
            need.extend(["401", "403"]);
            if !security.is_null() {
                failures.push(format!("{id}: authenticated, but overrides `security`"));
            }
        }
        if operation.path.contains("{id}") && !operation.path.starts_with("/v1/tokens") {
            need.push("404");
        }
        if let Some(body) = op.get("requestBody") {
            need.extend(["400", "413", "415", "422"]);
            let request = format!(
                "{}/requestBody/content/application~1json/schema",
                operation.pointer
            );
            let (_, schema) = spec.resolve(&request);
            let shapes: Vec<&Value> = match schema.get("oneOf").and_then(Value::as_array) {
                Some(arms) => arms.iter().map(|arm| spec.resolve_schema(arm)).collect(),
                None => vec![schema],
            };
            for shape in shapes {
                if shape["additionalProperties"] != json!(false) {
                    failures.push(format!("{id}: a request shape allows unknown fields"));
                }
            }
            assert_eq!(body["required"], json!(true), "{id}");
        }
        if id == "createRelease" || id == "previewRelease" {
            need.push("409");
        }
        for code in need {
            if !codes.contains(&code) {
                failures.push(format!("{id}: {code} not declared"));
            }
        }
        for code in codes
            .iter()
            .filter(|c| c.starts_with('4') || c.starts_with('5'))
        {
            let (pointer, response) =
                spec.resolve(&format!("{}/responses/{code}", operation.pointer));
            let content = response["content"].as_object().unwrap();
            if content.keys().collect::<Vec<_>>() != ["application/problem+json"] {
                failures.push(format!("{id} {code}: not application/problem+json"));
                continue;
            }
            let schema = &content["application/problem+json"]["schema"];
            let arms: Vec<&Value> = match schema.get("oneOf").and_then(Value::as_array) {
                Some(arms) => arms.iter().collect(),
                None => vec![schema],
            };
            for arm in arms {
                let problem = spec.resolve_schema(arm);
                if problem["properties"]["status"]["const"] != json!(code.parse::<u16>().unwrap()) {
                    failures.push(format!(
                        "{id} {code} ({pointer}): a problem type of status {}",
                        problem["properties"]["status"]["const"]
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n  - {}", failures.join("\n  - "));
}
