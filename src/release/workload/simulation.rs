//! Simulation checks of every forecast the planner uses: for each mechanism, at small
//! and large n and d, the planner picks ε for a target; releases are then drawn at that ε by the
//! samplers the service runs (`release::execute_release`'s functions, with a seeded generator),
//! at adversarial count vectors of the public total — one-hot, uniform, a two-cell split and a
//! random one — and
//!
//! - the ℓ2 error ‖y − x/n‖₂ must exceed the forecast in at most the number of draws a correct
//!   bound at confidence 1 − β could show except with probability 10⁻⁶ (the 1 − 10⁻⁶ quantile of
//!   Binomial(draws, β)), and
//! - every cell's mean squared deviation from the truth, (1/N)Σ(yᵢ − pᵢ)², must be below
//!   cell_sd² up to a sampling margin (a mean of N squares exceeds its expectation by 6 of its
//!   standard errors only with negligible probability; the margin is stated at [`sd_margin`]).
//!
//! Each run prints its observed coverage and how tight the bound is (the observed 1 − β
//! quantile over the bound), so `cargo test workload::simulation -- --nocapture` is the table
//! docs/PRIVACY.md quotes. A halved bound fails these checks: see
//! `halved_bounds_are_caught`.

use super::item::{parse as parse_item, Item};
use super::tests::{ctx, reachable, release_plan};
use super::*;
use crate::privacy::exponential::{draw_index, BetaCandidates};
use crate::privacy::sampler::{test_rng, CsRng};
use crate::privacy::{Counts, Sensitivity};
use crate::release::mechanism::Draw;
use crate::release::mechanisms::exponential::SelectionDrawParams;
use rand::RngExt;

/// The count vectors of total n the forecasts are checked at.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    OneHot,
    Uniform,
    TwoCell,
    Random,
}

const SHAPES: [Shape; 4] = [Shape::OneHot, Shape::Uniform, Shape::TwoCell, Shape::Random];

/// Whole counts summing to n (baselines and the exponential mechanism need integers).
fn counts(shape: Shape, n: u64, d: usize, rng: &mut CsRng) -> Vec<f64> {
    let mut x = vec![0u64; d];
    match shape {
        Shape::OneHot => x[d - 1] = n,
        Shape::Uniform => {
            for (i, v) in x.iter_mut().enumerate() {
                *v = n / d as u64 + u64::from((i as u64) < n % d as u64);
            }
        }
        Shape::TwoCell => {
            x[0] = n / 2;
            x[1] = n - n / 2;
        }
        Shape::Random => {
            // Skewed random weights, rounded down, the remainder to the first cell.
            let w: Vec<f64> = (0..d).map(|_| rng.random::<f64>().powi(3)).collect();
            let total: f64 = w.iter().sum();
            for (v, wi) in x.iter_mut().zip(&w) {
                *v = (wi / total * n as f64).floor() as u64;
            }
            let placed: u64 = x.iter().sum();
            x[0] += n - placed;
        }
    }
    x.into_iter().map(|v| v as f64).collect()
}

/// One release drawn as the service draws it: the draw's own sampler with a seeded generator.
/// The exponential mechanism takes its integer weights, computed once per count vector by
/// `BetaCandidates::weights` (what its `select` computes on every call).
fn draw_once(
    draw: &dyn Draw,
    x: &Counts,
    weights: Option<&(BetaCandidates, Vec<u128>)>,
    rng: &mut CsRng,
) -> Vec<f64> {
    match weights {
        Some((candidates, weights)) => {
            let j = draw_index(weights, rng) as u64;
            // As the exponential draw's `sample`: the selected posterior's mean.
            let (a, b) = candidates.candidate(j);
            vec![a / (a + b), b / (a + b)]
        }
        None => draw.sample(x, rng).unwrap().0,
    }
}

/// The 1 − 10⁻⁶ quantile of Binomial(draws, β): more exceedances than this refute the bound.
fn allowed_failures(draws: usize, beta: f64) -> usize {
    let n = draws as f64;
    let ln_pmf = |k: usize| {
        let k = k as f64;
        crate::privacy::special::ln_gamma(n + 1.0)
            - crate::privacy::special::ln_gamma(k + 1.0)
            - crate::privacy::special::ln_gamma(n - k + 1.0)
            + k * beta.ln()
            + (n - k) * (-beta).ln_1p()
    };
    let mut tail = 0.0;
    for f in (0..=draws).rev() {
        tail += ln_pmf(f).exp();
        if tail > 1e-6 {
            return f;
        }
    }
    0
}

/// How far above cell_sd² the mean of N squared deviations may land for a correct bound: 6 of
/// its standard errors, √(Var[e²]/N) ≤ √((κ + 2)/N)·E[e²] with κ + 3 = E[e⁴]/E[e²]² ≤ 9 for the
/// errors here (a Gaussian's is 3, a Laplace's 6), i.e. a relative 6·√(8/N).
fn sd_margin(draws: usize) -> f64 {
    6.0 * (8.0 / draws as f64).sqrt()
}

/// What one simulated case observed.
#[derive(Debug, Clone, Copy)]
struct Observed {
    exceed: usize,
    allowed: usize,
    /// The observed 1 − β quantile of the ℓ2 error over the forecast.
    tightness: f64,
    /// The largest mean squared deviation of a cell from the truth over cell_sd².
    variance_ratio: f64,
}

impl Observed {
    fn covers(&self, draws: usize) -> bool {
        self.exceed <= self.allowed && self.variance_ratio <= 1.0 + sd_margin(draws)
    }
}

/// Draw `draws` releases at x and compare with the forecast (per row total n_row).
fn observe(
    draw: &dyn Draw,
    x: &[f64],
    forecast: &Forecast,
    draws: usize,
    rng: &mut CsRng,
) -> Observed {
    let n: f64 = x.iter().sum();
    let counts = Counts::new(x.to_vec(), usize::MAX).unwrap();
    let any: &dyn std::any::Any = draw;
    let weights = any.downcast_ref::<SelectionDrawParams>().map(|s| {
        (
            s.candidates,
            s.candidates.weights(x[0] as u64, s.epsilon).unwrap(),
        )
    });
    let d = x.len();
    let mut errors = Vec::with_capacity(draws);
    let mut squares = vec![0.0; d];
    for _ in 0..draws {
        let y = draw_once(draw, &counts, weights.as_ref(), rng);
        let e: f64 = y
            .iter()
            .zip(x)
            .map(|(yi, xi)| (yi - xi / n).powi(2))
            .sum::<f64>()
            .sqrt();
        errors.push(e);
        for i in 0..d {
            squares[i] += (y[i] - x[i] / n).powi(2);
        }
    }
    let beta = 1.0 - forecast.confidence;
    let exceed = errors.iter().filter(|e| **e > forecast.l2).count();
    errors.sort_by(f64::total_cmp);
    let q = errors[((1.0 - beta) * draws as f64).ceil() as usize - 1];
    let max_var = squares
        .iter()
        .fold(0.0, |m: f64, v| m.max(v / draws as f64));
    Observed {
        exceed,
        allowed: allowed_failures(draws, beta),
        tightness: q / forecast.l2,
        variance_ratio: max_var / (forecast.cell_sd * forecast.cell_sd),
    }
}

/// Plan one item (relaxed as [`reachable`] does when out of reach), return the item's parse
/// and the release's own plan at the planned ε: what the service would draw.
fn planned(item: serde_json::Value, c: &Context) -> (Item, ItemAnswer, crate::release::Plan) {
    let (item, answer) = reachable(item, c);
    assert_eq!(answer.status, ItemStatus::Planned, "{answer:?}");
    let plan_item: PlanItem = serde_json::from_value(item).unwrap();
    let parsed = parse_item(0, &plan_item, c).unwrap();
    let plan = release_plan(&plan_item, &answer, c);
    assert_eq!(plan.charge.to_f64(), answer.cost.unwrap());
    (parsed, answer, plan)
}

/// One simulated case: plan `item`, draw at every adversarial shape of total n (or `totals`,
/// for lower bounds: the totals the data may have), return what was observed.
fn run_case(
    label: &str,
    item: serde_json::Value,
    c: &Context,
    totals: &[u64],
    draws: usize,
    seed: u64,
) -> Vec<(Shape, u64, Observed)> {
    let (parsed, answer, plan) = planned(item, c);
    let forecast = answer.forecast.unwrap();
    let mut rng = test_rng(seed);
    let mut out = Vec::new();
    for &n in totals {
        for shape in SHAPES {
            if parsed.shape.d == 2 && shape == Shape::TwoCell {
                continue; // the same as uniform
            }
            let x = counts(shape, n, parsed.shape.d, &mut rng);
            let o = observe(plan.draw(), &x, &forecast, draws, &mut rng);
            eprintln!(
                "{label:<34} {:<11} n={n:<8} d={:<5} eps={:<10.4e} l2<={:.4} ({:.1}%): exceed {:>4}/{draws} (allowed {:>3}), q/l2={:.3}; sd<={:.3e}: max mse/sd²={:.3}",
                answer.mechanism.unwrap().name(),
                parsed.shape.d,
                answer.epsilon.unwrap(),
                forecast.l2,
                100.0 * forecast.confidence,
                o.exceed,
                o.allowed,
                o.tightness,
                forecast.cell_sd,
                o.variance_ratio,
            );
            out.push((shape, n, o));
        }
    }
    out
}

fn assert_covered(label: &str, results: &[(Shape, u64, Observed)], draws: usize) {
    for (shape, n, o) in results {
        assert!(
            o.covers(draws),
            "{label}: {shape:?} at n = {n}: {o:?} (sd margin {})",
            sd_margin(draws)
        );
    }
}

const DRAWS: usize = 1000;

/// (label, item, totals drawn at): every mechanism at small and large n and d.
fn cases() -> Vec<(&'static str, serde_json::Value, Vec<u64>)> {
    use serde_json::json;
    let mut v = Vec::new();
    for mech in ["dirichlet", "posterior", "diffuse", "gaussian", "laplace"] {
        let extra = |mut item: serde_json::Value| {
            item["mechanism"] = json!(mech);
            if mech == "diffuse" {
                item["alpha"] = json!(1.0);
            }
            item
        };
        // small n, small d
        v.push((
            "small n, small d",
            extra(json!({"d": 3, "n": 60, "target": {"l2": 0.6, "cell_sd": 0.2}})),
            vec![60],
        ));
        // small n, large d
        v.push((
            "small n, large d",
            extra(json!({"d": 100, "n": 200, "target": {"l2": 0.7}})),
            vec![200],
        ));
        // large n, small d, 99 %
        v.push((
            "large n, small d, 99%",
            extra(json!({"d": 2, "n": 100000, "target": {"l2": 0.02, "confidence": 0.99, "cell_sd": 0.01}})),
            vec![100_000],
        ));
        // large n, large d, 90 %; a lower bound: drawn at the bound and at 4 times it
        v.push((
            "large n, large d, lower bound",
            extra(json!({"d": 100, "n_lower_bound": 50000, "target": {"l2": 0.15, "confidence": 0.9}})),
            vec![50_000, 200_000],
        ));
    }
    v.push((
        "exponential small n",
        json!({"d": 2, "n": 30, "mechanism": "exponential", "target": {"l2": 0.4}}),
        vec![30],
    ));
    v.push((
        "exponential large n",
        json!({"d": 2, "n": 2000, "mechanism": "exponential", "target": {"l2": 0.05, "cell_sd": 0.02}}),
        vec![2000],
    ));
    v
}

/// Every mechanism at small and large n and d (1,000 draws at each of the adversarial count
/// vectors, at the planned ε), on a replace_one dataset at λ₀ = 8.
#[test]
fn forecasts_hold_at_the_planned_epsilon() {
    let c = ctx(8.0, Sensitivity::REPLACE_ONE);
    for (i, (label, item, totals)) in cases().into_iter().enumerate() {
        let start = std::time::Instant::now();
        let results = run_case(label, item, &c, &totals, DRAWS, 1000 + i as u64);
        eprintln!("  ({:?})", start.elapsed());
        assert_covered(label, &results, DRAWS);
    }
}

/// The same on add_remove_one at λ₀ = 2, with `"auto"` (whichever mechanism it picks), and a
/// table whose rows hold different totals above the public per-row lower bound.
#[test]
fn auto_and_tables_hold_on_add_remove_one() {
    use serde_json::json;
    let c = ctx(2.0, Sensitivity::ADD_REMOVE_ONE);
    let items = [
        (
            "auto d=10",
            json!({"d": 10, "n": 2000, "target": {"l2": 0.1, "cell_sd": 0.03}}),
            vec![2000],
        ),
        (
            "auto d=300",
            json!({"d": 300, "n": 100000, "target": {"l2": 0.05}}),
            vec![100_000],
        ),
        // Rows of a table, each with at least 500 records: drawn at 500 and 3000.
        (
            "table rows>=500",
            json!({"d": 6, "rows": 4, "n_lower_bound": 500, "mechanism": "dirichlet", "target": {"l2": 0.25}}),
            vec![500, 3000],
        ),
        (
            "table gaussian",
            json!({"d": 6, "rows": 4, "n_lower_bound": 500, "mechanism": "gaussian", "target": {"l2": 0.1}}),
            vec![500, 3000],
        ),
    ];
    for (i, (label, item, totals)) in items.into_iter().enumerate() {
        let results = run_case(label, item, &c, &totals, DRAWS, 2000 + i as u64);
        assert_covered(label, &results, DRAWS);
    }
}

/// The checks can fail: with the ℓ2 forecast halved, the same draws refute it at an
/// adversarial count vector, for the Dirichlet family and the Gaussian. The Laplace bound
/// (Cantelli on a heavy-tailed quadratic form) is about 1.7 times its observed worst 95 %
/// quantile at d = 2, so 0.45 times it is what is refuted there; the exponential mechanism's
/// (its utility theorem, a union bound over the n + 1 candidates) about four times, so a
/// fifth of it. Where the cell bound is attained (the Dirichlet family, at a cell holding half
/// of the concentration) a halved cell_sd is refuted too.
#[test]
fn shrunken_bounds_are_caught() {
    use serde_json::json;
    let c = ctx(8.0, Sensitivity::REPLACE_ONE);
    let items = [
        (
            json!({"d": 3, "n": 60, "mechanism": "dirichlet", "target": {"l2": 0.6, "cell_sd": 0.2}}),
            0.5,
        ),
        (
            json!({"d": 3, "n": 60, "mechanism": "posterior", "target": {"l2": 0.6, "cell_sd": 0.2}}),
            0.5,
        ),
        (
            json!({"d": 3, "n": 60, "mechanism": "diffuse", "alpha": 1.0, "target": {"l2": 0.6, "cell_sd": 0.2}}),
            0.5,
        ),
        (
            json!({"d": 2, "n": 100000, "mechanism": "gaussian", "target": {"l2": 0.02}}),
            0.5,
        ),
        (
            json!({"d": 2, "n": 100000, "mechanism": "laplace", "target": {"l2": 0.02}}),
            0.45,
        ),
        (
            json!({"d": 2, "n": 30, "mechanism": "exponential", "target": {"l2": 0.4}}),
            0.2,
        ),
    ];
    for (i, (item, factor)) in items.into_iter().enumerate() {
        let (parsed, answer, plan) = planned(item, &c);
        let mut rng = test_rng(3000 + i as u64);
        let mut forecast = answer.forecast.unwrap();
        forecast.l2 *= factor;
        forecast.cell_sd *= 0.5;
        let (mut l2_caught, mut sd_caught) = (false, false);
        for shape in SHAPES {
            let x = counts(shape, parsed.shape.n as u64, parsed.shape.d, &mut rng);
            let o = observe(plan.draw(), &x, &forecast, DRAWS, &mut rng);
            eprintln!("{:?} {shape:?}: {o:?}", answer.mechanism);
            l2_caught |= o.exceed > o.allowed;
            sd_caught |= o.variance_ratio > 1.0 + sd_margin(DRAWS);
        }
        let kind = answer.mechanism.unwrap();
        assert!(
            l2_caught,
            "{kind:?}: an l2 bound times {factor} went unnoticed"
        );
        if matches!(kind, Kind::Dirichlet | Kind::Posterior | Kind::Diffuse) {
            assert!(sd_caught, "{kind:?}: a halved cell_sd went unnoticed");
        }
    }
}

/// The larger sweep, too slow for every `cargo test` in a debug build (minutes: d = 1,000 cells
/// × 1,000 draws × four count vectors per case): run it with
/// `cargo test --release --lib workload::simulation::larger_sweep -- --ignored --nocapture`.
/// Every mechanism at d = 1,000 and n = 10⁶, at 80 % and 99.9 %, on replace_one at λ₀ = 32 and
/// on a custom sensitivity (Δ2² = 4, Δ∞ = 2: Corollary 3 and the integer-shift baseline prices).
#[test]
#[ignore = "minutes in a debug build; run with --release --ignored"]
fn larger_sweep() {
    use serde_json::json;
    let contexts = [
        ctx(32.0, Sensitivity::REPLACE_ONE),
        ctx(3.0, Sensitivity::new(4.0, 2.0).unwrap()),
    ];
    let mut seed = 4000;
    for c in &contexts {
        for mech in ["dirichlet", "posterior", "diffuse", "gaussian", "laplace"] {
            for (d, n, target) in [
                (1000, 1_000_000u64, json!({"l2": 0.02, "confidence": 0.999})),
                (
                    1000,
                    1_000_000,
                    json!({"l2": 0.01, "confidence": 0.8, "cell_sd": 0.002}),
                ),
                (30, 1_000, json!({"l2": 0.3, "confidence": 0.999})),
            ] {
                let mut item = json!({"d": d, "n": n, "mechanism": mech, "target": target});
                if mech == "diffuse" {
                    item["alpha"] = json!(0.5);
                }
                seed += 1;
                let results = run_case("larger sweep", item, c, &[n], DRAWS, seed);
                assert_covered("larger sweep", &results, DRAWS);
            }
        }
    }
    for n in [5u64, 10_000] {
        seed += 1;
        let item = json!({"d": 2, "n": n, "mechanism": "exponential", "target": {"l2": 0.5, "confidence": 0.999}});
        let results = run_case("larger sweep", item, &contexts[0], &[n], DRAWS, seed);
        assert_covered("larger sweep", &results, DRAWS);
    }
}

// ------------------------------------------------------------------------------ KL

/// D_KL(p ‖ y) over the cells where p > 0.
fn kl(x: &[f64], n: f64, y: &[f64]) -> f64 {
    x.iter()
        .zip(y)
        .filter(|(xi, _)| **xi > 0.0)
        .map(|(xi, yi)| (xi / n) * ((xi / n) / yi).ln())
        .sum()
}

/// Whole counts of total n with every cell but the first at `small` (the count vector where a
/// smoothed baseline's KL is largest: cells about as large as the noise), or one-hot if n is too
/// small for it.
fn small_cells(n: u64, d: usize, small: u64) -> Vec<f64> {
    let rest = small * (d as u64 - 1);
    let mut x = vec![small as f64; d];
    if rest >= n {
        return counts(Shape::OneHot, n, d, &mut test_rng(0));
    }
    x[0] = (n - rest) as f64;
    x
}

/// (exceedances of the KL bound, allowed, observed 1 − β quantile over the bound).
fn observe_kl(
    draw: &dyn Draw,
    x: &[f64],
    bound: f64,
    beta: f64,
    draws: usize,
    rng: &mut CsRng,
) -> (usize, usize, f64) {
    let n: f64 = x.iter().sum();
    let counts = Counts::new(x.to_vec(), usize::MAX).unwrap();
    let mut divergences: Vec<f64> = (0..draws)
        .map(|_| kl(x, n, &draw.sample(&counts, rng).unwrap().0))
        .collect();
    let exceed = divergences.iter().filter(|k| **k > bound).count();
    divergences.sort_by(f64::total_cmp);
    let q = divergences[((1.0 - beta) * draws as f64).ceil() as usize - 1];
    (exceed, allowed_failures(draws, beta), q / bound)
}

/// Plan a KL item and draw at the adversarial count vectors (and `small_cells`); the rows
/// printed are docs/PRIVACY.md's coverage table. Returns (label, mechanism, shape, exceed,
/// allowed, tightness) for each vector.
fn run_kl_case(
    label: &str,
    item: serde_json::Value,
    c: &Context,
    draws: usize,
    seed: u64,
) -> Vec<(String, usize, usize, f64)> {
    let (parsed, answer, plan) = planned(item, c);
    let forecast = answer.forecast.unwrap();
    let bound = forecast.kl.expect("a KL target is forecast");
    let beta = 1.0 - forecast.confidence;
    let n = parsed.shape.n as u64;
    let d = parsed.shape.d;
    let mut rng = test_rng(seed);
    let mut vectors: Vec<(String, Vec<f64>)> = SHAPES
        .iter()
        .filter(|s| !(d == 2 && **s == Shape::TwoCell))
        .map(|s| (format!("{s:?}"), counts(*s, n, d, &mut rng)))
        .collect();
    vectors.push(("SmallCells".into(), small_cells(n, d, 3)));
    let mut out = Vec::new();
    for (shape, x) in vectors {
        let (exceed, allowed, tightness) =
            observe_kl(plan.draw(), &x, bound, beta, draws, &mut rng);
        eprintln!(
            "| {label} | {} | {d} | {n} | {:.4} | {:.4e} | {:.1} % | {shape} | {exceed}/{draws} (≤ {allowed}) | {tightness:.3} |",
            answer.mechanism.unwrap().name(),
            answer.epsilon.unwrap(),
            bound,
            100.0 * forecast.confidence,
        );
        out.push((shape, exceed, allowed, tightness));
    }
    out
}

/// Every mechanism with a KL bound, planned for a KL target and drawn 1,000 times at each
/// adversarial count vector by the service's own samplers: the bound holds as often as its
/// confidence says (docs/PRIVACY.md, "KL", quotes the table this prints with
/// `cargo test --release --lib kl_forecasts_hold -- --nocapture`).
#[test]
fn kl_forecasts_hold_at_the_planned_epsilon() {
    use serde_json::json;
    let mut seed = 7000;
    for (order, relation) in [
        (2.0, Sensitivity::REPLACE_ONE),
        (8.0, Sensitivity::ADD_REMOVE_ONE),
    ] {
        let c = ctx(order, relation);
        for mech in [
            "dirichlet",
            "posterior",
            "diffuse",
            "gaussian",
            "laplace",
            "auto",
        ] {
            for (d, n, target) in [
                (6, 500u64, json!({"kl": 0.08})),
                (40, 5000, json!({"kl": 0.05, "confidence": 0.99})),
                (3, 80, json!({"kl": 0.3, "confidence": 0.9})),
            ] {
                let mut item = json!({"d": d, "n": n, "mechanism": mech, "target": target});
                if mech == "diffuse" {
                    item["alpha"] = json!(1.5);
                }
                seed += 1;
                let label = format!("λ₀ {order}");
                for (shape, exceed, allowed, _) in run_kl_case(&label, item, &c, DRAWS, seed) {
                    assert!(
                        exceed <= allowed,
                        "{mech} d {d} n {n} λ₀ {order} at {shape}: {exceed} > {allowed}"
                    );
                }
            }
        }
    }
}

/// The check can fail: the same draws against a shrunken KL bound exceed it far more often than
/// a bound at its confidence may — half the Dirichlet family's (nearly attained at the one-hot
/// count), 0.3 of a smoothed baseline's (about twice its observed quantile).
#[test]
fn shrunken_kl_bounds_are_caught() {
    use serde_json::json;
    let c = ctx(2.0, Sensitivity::REPLACE_ONE);
    for (i, (mech, factor)) in [("posterior", 0.5), ("laplace", 0.3)]
        .into_iter()
        .enumerate()
    {
        let item = json!({"d": 6, "n": 500, "mechanism": mech, "target": {"kl": 0.08}});
        let (parsed, answer, plan) = planned(item, &c);
        let f = answer.forecast.unwrap();
        let x = counts(
            Shape::OneHot,
            parsed.shape.n as u64,
            parsed.shape.d,
            &mut test_rng(1),
        );
        let (exceed, allowed, _) = observe_kl(
            plan.draw(),
            &x,
            factor * f.kl.unwrap(),
            1.0 - f.confidence,
            DRAWS,
            &mut test_rng(9000 + i as u64),
        );
        assert!(
            exceed > allowed,
            "{mech}: {factor} of the bound held ({exceed} ≤ {allowed})"
        );
    }
}
