//! The accuracy-first planner (`release::workload::plan_workload`) on a plan of 1,000 items
//! (target: ≤ 50 ms in a release build). Run with `cargo bench --bench planner`.
//!
//! `distinct`: 1,000 different items (no two alike, so the planner's cache of identical items
//! does not help): d from 2 to 1,000, totals from 50 to 10⁶ (exact or lower bounds), `"auto"`
//! (most), named mechanisms, tables, ℓ2 and per-cell targets at 90–99 %, some given ε, some
//! unreachable. `repeated`: the same 1,000 items drawn from 50 distinct ones (a workload of many
//! releases of few shapes). On a replace_one dataset at λ₀ = 22 and on add_remove_one at λ₀ = 4.
//! `plan_kl_1000`: 1,000 distinct KL-target items (`auto` and each mechanism that takes one).
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use dirichlet_release::ledger::Units;
use dirichlet_release::privacy::{Order, Sensitivity};
use dirichlet_release::release::request::Context;
use dirichlet_release::release::workload::{plan_workload, PlanRequest};
use serde_json::{json, Value};

/// The i-th item of the mix (deterministic; `salt` makes items distinct).
fn item(i: usize, salt: f64) -> Value {
    let ds = [2u64, 3, 5, 10, 20, 40, 100, 300, 1000];
    let d = ds[i % ds.len()];
    let n = [50.0, 200.0, 1000.0, 5000.0, 20_000.0, 100_000.0, 1e6][i % 7] + salt;
    let l2 = [0.01, 0.02, 0.05, 0.1, 0.2][i % 5];
    let confidence = [0.9, 0.95, 0.99][i % 3];
    let mut v = match i % 10 {
        // A given ε.
        0 => json!({"d": d, "n": n, "epsilon": 0.1 + (i % 13) as f64 * 0.05}),
        // Both targets.
        1 => {
            json!({"d": d, "n": n, "target": {"l2": l2, "confidence": confidence, "cell_sd": l2 / 4.0}})
        }
        // A per-cell target only.
        2 => json!({"d": d, "n_lower_bound": n, "target": {"cell_sd": l2 / 3.0}}),
        // A table of disjoint groups.
        3 => json!({"d": d, "rows": 1 + i % 17, "n_lower_bound": n, "target": {"l2": l2}}),
        // Named mechanisms.
        4 => json!({"d": d, "n": n, "mechanism": "gaussian", "target": {"l2": l2}}),
        5 => {
            json!({"d": d, "n": n, "mechanism": "posterior", "r": 0.5, "target": {"l2": 2.0 * l2}})
        }
        6 => {
            json!({"d": d, "n": n, "mechanism": "auto", "alpha": 2.0, "target": {"l2": l2, "confidence": confidence}})
        }
        _ => json!({"d": d, "n": n, "target": {"l2": l2, "confidence": confidence}}),
    };
    // The exponential mechanism's items: d = 2 with a whole n up to 10,000.
    if d == 2 && i % 10 != 3 {
        v["n"] = json!(((n as u64) % 10_000).max(10));
        v.as_object_mut().unwrap().remove("n_lower_bound");
    }
    v
}

/// The i-th KL item: `auto` and every mechanism that takes a KL target, d from 3 to 1,000,
/// whole totals from 80 to 10⁶, targets of 0.02 to 0.5 nats at 90–99 %. Posterior's bound is not
/// monotone in ε, so its items run the planner's band scan (`release::workload::search`).
fn kl_item(i: usize) -> Value {
    let ds = [3u64, 6, 10, 40, 100, 1000];
    let d = ds[i % ds.len()];
    let n = [80u64, 500, 5_000, 100_000, 1_000_000][i % 5] + i as u64;
    let kl = [0.02, 0.05, 0.1, 0.3, 0.5][(i / 5) % 5];
    let confidence = [0.9, 0.95, 0.99][i % 3];
    let mechanism = [
        "auto",
        "posterior",
        "dirichlet",
        "gaussian",
        "laplace",
        "posterior",
    ][(i / 7) % 6];
    json!({"d": d, "n": n, "mechanism": mechanism, "target": {"kl": kl, "confidence": confidence}})
}

fn plan(items: Vec<Value>) -> PlanRequest {
    serde_json::from_value(json!({ "items": items })).unwrap()
}

fn context(order: f64, sensitivity: Sensitivity) -> Context {
    Context {
        ledger_order: Order::new(order).unwrap(),
        sensitivity,
        max_dimension: 1 << 20,
        max_exponential_n: 10_000,
        cells: None,
    }
}

fn bench(c: &mut Criterion) {
    let remaining = Some(Units::floor(10.0).unwrap());
    let groups = [
        (
            "plan_1000",
            vec![
                (
                    "distinct",
                    plan((0..1000).map(|i| item(i, i as f64)).collect()),
                ),
                (
                    "repeated",
                    plan((0..1000).map(|i| item(i % 50, (i % 50) as f64)).collect()),
                ),
            ],
        ),
        // The cost of KL planning, posterior's band scan included.
        (
            "plan_kl_1000",
            vec![("distinct", plan((0..1000).map(kl_item).collect()))],
        ),
    ];
    for (group, plans) in &groups {
        let mut g = c.benchmark_group(*group);
        g.sample_size(20);
        for (name, order, sens) in [
            ("replace_one_l22", 22.0, Sensitivity::REPLACE_ONE),
            ("add_remove_one_l4", 4.0, Sensitivity::ADD_REMOVE_ONE),
        ] {
            let ctx = context(order, sens);
            for (kind, items) in plans {
                g.bench_function(format!("{kind}/{name}"), |b| {
                    b.iter(|| plan_workload(black_box(items), &ctx, remaining).unwrap())
                });
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
