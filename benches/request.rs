//! Reading a release request: JSON bytes → the typed request → its priced plan, at d = 10⁶ (the
//! default `max_dimension`) and d = 6, through `http::releases::plan_release`, the steps the
//! handlers run on a body. Run with `cargo bench --bench request`.
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dirichlet_release::http::releases::plan_release;
use dirichlet_release::ledger::{Dataset, Units};
use dirichlet_release::privacy::{Order, Sensitivity};

fn dataset() -> Dataset {
    Dataset {
        id: uuid::Uuid::nil(),
        name: "bench".into(),
        order: Order::new(2.0).unwrap(),
        total: Units::floor(100.0).unwrap(),
        dp_target: None,
        sensitivity: Sensitivity::REPLACE_ONE,
        neighbouring: "replace_one".into(),
        created_at: chrono::DateTime::UNIX_EPOCH,
        created_by: "bench".into(),
        spent: Units::ZERO,
        releases: 0,
        cells: None,
        population: None,
        blocks: None,
    }
}

/// Counts as clients send them: integers of mixed width.
fn body(d: usize) -> Vec<u8> {
    let counts: Vec<String> = (0..d).map(|i| ((i * 7919) % 5000).to_string()).collect();
    format!(r#"{{"counts": [{}], "epsilon": 0.5}}"#, counts.join(", ")).into_bytes()
}

fn parse_and_plan(c: &mut Criterion) {
    let dataset = dataset();
    let mut g = c.benchmark_group("parse_and_plan");
    g.sample_size(20);
    for d in [6usize, 1_000_000] {
        let body = body(d);
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_with_input(BenchmarkId::from_parameter(d), &body, |b, body| {
            b.iter(|| {
                plan_release(black_box(body), &dataset, 1_000_000)
                    .map(|planned| planned.plan.charge)
                    .expect("a valid request")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, parse_and_plan);
criterion_main!(benches);
