//! Request parsing and validation on arbitrary bytes: the release body (read as the wire
//! `RequestBody`, parsed into the typed `Request`, calibrated and priced by `Request::plan`, then
//! drawn) and the dataset registration body.
//! Never a panic; every refusal renders as a problem document; every admitted plan charges at
//! least its price and draws a finite probability vector.
//!
//! Input layout: byte 0 picks the body kind (bit 0), the dataset's ledger order (bits 1-3) and
//! neighbouring relation (bits 4-5); the rest is the body.

#![no_main]

use dirichlet_release::config::Settings;
use dirichlet_release::http::datasets::parse_registration;
use dirichlet_release::http::error::{problem_response, ApiError};
use dirichlet_release::http::extract::parse_json_bounded;
use dirichlet_release::ledger::{Dataset, Output, Units};
use dirichlet_release::privacy::{Order, Sensitivity};
use dirichlet_release::release::draw;
use dirichlet_release::release::request::{Context, Request, RequestBody};
use libfuzzer_sys::fuzz_target;

const ORDERS: [f64; 8] = [1.01, 1.5, 2.0, 3.0, 5.0, 8.0, 32.0, 256.0];
/// config/default.toml's, read once.
static MAX_EXPONENTIAL_N: std::sync::LazyLock<u64> =
    std::sync::LazyLock::new(|| Settings::defaults().max_exponential_n);
/// Small enough that a draw per input stays fast.
const MAX_DIMENSION: usize = 64;

fn dataset(selector: u8) -> Dataset {
    let sensitivity = match (selector >> 4) & 3 {
        0 => Sensitivity::REPLACE_ONE,
        1 => Sensitivity::ADD_REMOVE_ONE,
        2 => Sensitivity::new(8.0, 2.0).expect("a valid sensitivity"),
        _ => Sensitivity::new(0.5, 0.5).expect("a valid sensitivity"),
    };
    Dataset {
        id: uuid::Uuid::nil(),
        name: "fuzz".into(),
        order: Order::new(ORDERS[usize::from((selector >> 1) & 7)]).expect("a valid order"),
        total: Units::floor(4.0).expect("a valid budget"),
        dp_target: None,
        sensitivity,
        neighbouring: "replace_one".into(),
        created_at: chrono::DateTime::UNIX_EPOCH,
        created_by: "fuzz".into(),
        spent: Units::ZERO,
        releases: 0,
        cells: None,
        population: None,
        blocks: None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    if selector & 1 == 0 {
        if let Err(e) = parse_registration(body, "fuzz".into(), MAX_DIMENSION) {
            let _ = problem_response(&e);
        }
        return;
    }
    let dataset = dataset(selector);
    let refused = |e: ApiError| {
        let response = problem_response(&e);
        assert!(response.status().is_client_error(), "{e:?}");
    };
    let body: RequestBody = match parse_json_bounded(body, MAX_DIMENSION) {
        Ok(body) => body,
        Err(e) => return refused(e),
    };
    let ctx = Context {
        ledger_order: dataset.order,
        sensitivity: dataset.sensitivity,
        max_dimension: MAX_DIMENSION,
        max_exponential_n: *MAX_EXPONENTIAL_N,
        // Half the datasets name their cells (four of them), so the check runs too.
        cells: (selector & 0x10 != 0).then_some(4),
    };
    let request = match Request::parse(&body, &ctx) {
        Ok(request) => request,
        Err(e) => return refused(e.into()),
    };
    // A plan error (infeasible, beyond precision, …) is a refusal too; the handlers render it.
    let Ok(plan) = request.plan(dataset.order, &dataset.sensitivity) else {
        return;
    };
    assert!(plan.price.is_finite() && plan.price >= 0.0, "{plan:?}");
    assert!(
        plan.charge.to_f64() >= plan.price,
        "charged below the price: {plan:?}"
    );
    serde_json::to_string(&plan.record).expect("the mechanism record serialises");
    // The draw the service makes (from an OS-seeded generator): an admitted plan has
    // passed the shape check, so it must succeed, for a vector and every row of a table.
    let (output, _drawn) = draw(&plan, &request.input)
        .unwrap_or_else(|e| panic!("an admitted plan failed to draw ({e}): {plan:?}"));
    assert_eq!(output.values().len(), request.input.total_cells());
    let rows: Vec<&[f64]> = match &output {
        Output::Vector(y) => vec![y],
        Output::Table(t) => t.iter_rows().collect(),
    };
    for y in rows {
        assert!(
            y.iter().all(|v| v.is_finite() && (0.0..=1.0).contains(v)),
            "not a probability vector: {plan:?}"
        );
        let sum: f64 = y.iter().sum();
        assert!((sum - 1.0).abs() < 1e-9, "sums to {sum}: {plan:?}");
    }
});
