//! Golden tests: what existing databases hold must keep meaning the same after a refactor.
//!
//! A release stores its mechanism record and cost, and a keyed release its idempotency
//! fingerprint (an HMAC over the canonical re-serialisation of the request). A retry of a request
//! made before an upgrade must match its stored fingerprint after it, so the canonical form of
//! every request shape is pinned here, as are the mechanism records and charges the planner
//! produces for them (stored, and returned again by replays and listings).
//!
//! Refresh: `UPDATE_GOLDEN=1 cargo test --test it golden::`, and review the diff of
//! tests/golden/releases.json. A fingerprint or the shape of a record (its fields, their names)
//! must never change without a migration story for stored rows. Calibrated values (r, α) may
//! change when the pricing does (stored rows keep theirs; only new releases get the new ones):
//! pricing the realised f64 shifts moved some r in the 15th digit, and nothing else.

use dirichlet_release::http::releases::{body_fingerprint, plan_release};
use dirichlet_release::ledger::{Dataset, Units};
use dirichlet_release::privacy::{Order, Sensitivity};
use serde_json::{json, Value};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/releases.json");
const MAX_DIMENSION: usize = 1_000_000;
const KEY: [u8; 32] = *b"golden-fingerprint-key-32-bytes!";
const CALLER: &str = "admin";

fn dataset(order: f64, relation: &str) -> Dataset {
    let sensitivity = match relation {
        "replace_one" => Sensitivity::REPLACE_ONE,
        "add_remove_one" => Sensitivity::ADD_REMOVE_ONE,
        _ => Sensitivity::new(8.0, 2.0).expect("a valid sensitivity"),
    };
    Dataset {
        id: uuid::Uuid::from_u128(0x0193_0000_0000_7000_8000_0000_0000_0001),
        name: "golden".into(),
        order: Order::new(order).expect("a valid order"),
        total: Units::floor(100.0).expect("a valid budget"),
        dp_target: None,
        sensitivity,
        neighbouring: relation.into(),
        created_at: chrono::DateTime::UNIX_EPOCH,
        created_by: CALLER.into(),
        spent: Units::ZERO,
        releases: 0,
        cells: None,
        population: None,
        blocks: None,
    }
}

/// One body per request shape the service accepts, written as clients write them (integers,
/// exponents, fields in any order), so the canonical form is exercised, not just echoed.
fn cases() -> Vec<(f64, &'static str, &'static str)> {
    vec![
        (
            2.0,
            "replace_one",
            r#"{"counts": [120, 45, 3, 0, 17, 9], "epsilon": 0.4}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"epsilon": 4e-1, "counts": [120.0, 45, 3, 0, 17, 9], "mechanism": "dirichlet", "prior": 2}"#,
        ),
        (
            5.0,
            "add_remove_one",
            r#"{"counts": [1, 2, 3], "epsilon": 0.1, "order": 3}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [10, 20, 30], "epsilon": 1, "mechanism": "posterior"}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [10, 20, 30], "epsilon": 1, "mechanism": "posterior", "r": 0.5}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [10, 20, 30], "epsilon": 1, "mechanism": "posterior", "prior_shape": [1, 2, 3]}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [10, 20, 30], "epsilon": 1, "mechanism": "diffuse", "alpha": 3}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [10, 20, 30], "epsilon": 1, "mechanism": "diffuse", "alpha": [1, 2, 3.5]}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [10, 20, 30], "mechanism": "explicit", "r": 0.25, "alpha": 2}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [10, 20, 30], "mechanism": "explicit", "r": 0.25, "alpha": [2, 2, 2], "epsilon": 5}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [10, 20, 30], "mechanism": "gaussian", "sigma": 3}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [10, 20, 30], "mechanism": "gaussian", "epsilon": 0.5}"#,
        ),
        (
            2.0,
            "add_remove_one",
            r#"{"counts": [10, 20, 30], "mechanism": "laplace", "scale": 2.5}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [10, 20, 30], "mechanism": "laplace", "epsilon": 0.5, "order": 4}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [7, 3], "mechanism": "exponential", "epsilon": 10}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [7, 3], "mechanism": "exponential", "epsilon": 10, "prior": [2, 3], "label": "rate"}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [10, 20, 30], "epsilon": 1, "lower_bound": 2}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [10, 20, 30], "epsilon": 1, "mechanism": "diffuse", "alpha": 0, "lower_bound": [4, 4, 6]}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [10, 20, 30], "epsilon": 1, "mechanism": "posterior", "r": 0.2, "lower_bound": 5, "prior_shape": [1, 0, 2]}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [10, 20, 30], "mechanism": "explicit", "r": 1, "alpha": 1, "lower_bound": 1}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"counts": [120, 45, 3], "epsilon": 0.4, "label": "visits | 2026-11"}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"table": [[40, 12, 1], [55, 20, 1]], "epsilon": 0.5, "label": "diagnosis | by age band"}"#,
        ),
        (
            2.0,
            "add_remove_one",
            r#"{"table": [[4, 1], [5, 2], [3, 3]], "epsilon": 0.5, "mechanism": "gaussian"}"#,
        ),
        (
            2.0,
            "replace_one",
            r#"{"table": [[4, 1], [5, 2]], "epsilon": 0.5, "mechanism": "diffuse", "alpha": 1, "lower_bound": 1}"#,
        ),
        (3.0, "custom", r#"{"counts": [10, 20, 30], "epsilon": 2}"#),
        // A label stored trimmed and in NFC, fingerprinted as sent: a retry of the same bytes
        // matches, whatever the stored form.
        (
            2.0,
            "replace_one",
            r#"{"counts": [120, 45, 3], "epsilon": 0.4, "label": " Cafe\u0301 | by age\t"}"#,
        ),
    ]
}

fn observe() -> Value {
    let mut out = Vec::new();
    for (order, relation, body) in cases() {
        let dataset = dataset(order, relation);
        let planned = plan_release(body.as_bytes(), &dataset, MAX_DIMENSION)
            .unwrap_or_else(|e| panic!("{body}: refused: {e:?}"));
        let fingerprint =
            body_fingerprint(&KEY, dataset.id, CALLER, body.as_bytes(), MAX_DIMENSION)
                .unwrap_or_else(|e| panic!("{body}: no fingerprint: {e:?}"));
        out.push(json!({
            "order": order,
            "relation": relation,
            "body": body,
            "fingerprint": hex::encode(fingerprint),
            // What is stored (`Mechanism::to_value`), as value and as text: stored rows hold the
            // text, and a serde_json feature flip (preserve_order) would reorder its keys.
            "mechanism_text": serde_json::to_string(&planned.plan.record.to_value()).expect("serialises"),
            "mechanism": planned.plan.record.to_value(),
            "charge_units": planned.plan.charge.raw(),
            "label": planned.label.as_ref().map(|l| l.as_str().to_string()),
        }));
    }
    Value::Array(out)
}

#[test]
fn stored_request_fingerprints_and_mechanism_records_are_unchanged() {
    let observed = observe();
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        let text = serde_json::to_string_pretty(&observed).expect("serialises") + "\n";
        std::fs::write(GOLDEN, text).expect("writes the golden file");
        return;
    }
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(GOLDEN).expect("tests/golden/releases.json exists"),
    )
    .expect("the golden file is JSON");
    let (golden, observed) = (
        golden.as_array().expect("an array"),
        observed.as_array().expect("an array"),
    );
    assert_eq!(golden.len(), observed.len(), "the number of cases changed");
    for (want, got) in golden.iter().zip(observed) {
        assert_eq!(
            want, got,
            "stored bytes changed for {} (refresh only with a migration story: see the module docs)",
            want["body"]
        );
    }
}

/// The canonical form, not the bytes sent, is fingerprinted: a retry that spells the same
/// request differently (field order, `4e-1` for `0.4`, `120` for `120.0`) is the same request.
#[test]
fn spelling_does_not_change_a_fingerprint_but_content_does() {
    let id = dataset(2.0, "replace_one").id;
    let fp = |body: &str| {
        body_fingerprint(&KEY, id, CALLER, body.as_bytes(), MAX_DIMENSION).expect("parses")
    };
    let a = fp(r#"{"counts": [120, 45, 3], "epsilon": 0.4}"#);
    assert_eq!(a, fp(r#"{"epsilon": 4e-1, "counts": [120.0, 45, 3]}"#));
    assert_ne!(a, fp(r#"{"counts": [120, 45, 4], "epsilon": 0.4}"#));
    assert_ne!(a, fp(r#"{"counts": [120, 45, 3], "epsilon": 0.5}"#));
    let other_caller = body_fingerprint(
        &KEY,
        id,
        "dra_other",
        br#"{"counts": [120, 45, 3], "epsilon": 0.4}"#,
        MAX_DIMENSION,
    )
    .expect("parses");
    assert_ne!(a, other_caller);
}
