//! Where each mechanism wins, measured: a sweep over the ledger order λ₀, the number of cells d
//! and the public total n, for each kind of accuracy target (ℓ2, cell sd, KL).
//!
//! Two questions, answered with the service's own code (the library, no HTTP: the planner is
//! pure, and every draw goes through the release path — a release body parsed, calibrated and
//! priced by `release::request`, drawn by the mechanism's own sampler from the OS-seeded CSPRNG):
//!
//! 1. **For this target, who is cheapest?** Every item is planned by `POST …/plan`'s function,
//!    once per mechanism and once with `"auto"`, giving each mechanism's own ε for the same
//!    target (or why it cannot reach it). Each distinct planned release is then drawn `--draws`
//!    times at its planned ε and parameters (`smoothing` included) at four count vectors of the
//!    total — uniform, Zipf (xᵢ ∝ 1/i), "small cells" (half the records 3 to a cell, where the
//!    smoothed baselines' KL bound is derived to be worst) and one-hot (the KL worst case of the
//!    Dirichlet family) — and its forecast must hold: the ℓ2 or KL bound exceeded in no more draws
//!    than a correct bound at its confidence could show except with probability 10⁻⁷, every
//!    cell's mean squared error below cell_sd² up to a sampling margin. The example exits
//!    non-zero if any does not, so the sweep is also a coverage check of the planner.
//! 2. **At the same privacy cost, who is more accurate?** Every mechanism released at each ε of a
//!    fixed grid (the same charge at λ₀ for all of them: each is calibrated to it at the ledger
//!    order), at the same count vectors, with the error measured in each metric: the ℓ2 error's
//!    and the KL divergence's 95 % quantiles, and the largest per-cell root-mean-square error. For
//!    KL the additive baselines are smoothed with the pseudo-count the planner would choose for
//!    their noise (`Noise::best_smoothing` at 95 %): projected, their zeros make KL infinite.
//!
//! The Dirichlet family is `dirichlet` (prior 1), `posterior` (r = 1) and `diffuse` with α = 1
//! (which `"auto"` does not consider: its α is the user's choice); the baselines are `gaussian`
//! and `laplace`; `exponential` releases two cells only, so no item of the grid can use it
//! (`"auto"` lists it not applicable). The dataset relation is `replace_one`. Draws are not
//! seeded (no release can be), so the simulated columns move by their sampling error from run
//! to run; the planned ones are exact.
//!
//! ```sh
//! scripts/research/sweep.sh                                   # full grid, release build, then the figure
//! cargo run --release --example sweep                # full grid: target/sweep/sweep.csv
//! cargo run --example sweep -- --short               # a small grid, 200 draws (CI)
//! ```

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{value_parser, Arg, ArgAction, Command};
use dirichlet_release::privacy::accuracy::{gaussian_noise, laplace_noise};
use dirichlet_release::privacy::sampler::os_rng;
use dirichlet_release::privacy::special::ln_gamma;
use dirichlet_release::privacy::{Counts, Order, Sensitivity};
use dirichlet_release::release::mechanism::{Context, Draw};
use dirichlet_release::release::request::{Request, RequestBody};
use dirichlet_release::release::workload::{
    plan_workload, CandidateStatus, ItemAnswer, ItemStatus, PlanRequest,
};
use dirichlet_release::release::Plan;
use rayon::prelude::*;
use serde_json::{json, Map, Value};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// The mechanisms each item is planned with by name, before `"auto"`, and released. (The
/// planner refuses `exponential` by name for d > 2; `"auto"` reports it not applicable.)
const NAMED: [&str; 5] = ["dirichlet", "posterior", "diffuse", "gaussian", "laplace"];
const FAMILY: [&str; 3] = ["dirichlet", "posterior", "diffuse"];
const BASELINES: [&str; 2] = ["gaussian", "laplace"];
/// The confidence of every ℓ2 and KL target, and of the quantiles simulated.
const CONFIDENCE: f64 = 0.95;
/// A forecast is refuted when its bound is exceeded more often than a correct bound would be
/// except with this probability (per check; a full run makes a few thousand checks).
const REFUTE_AT: f64 = 1e-7;

/// What a target asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Metric {
    L2,
    CellSd,
    Kl,
}

impl Metric {
    fn name(self) -> &'static str {
        match self {
            Metric::L2 => "l2",
            Metric::CellSd => "cell_sd",
            Metric::Kl => "kl",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Vector {
    Uniform,
    Zipf,
    /// Half the records spread 3 to a cell over the other cells (as many as that fills), the
    /// rest in the first: cells about as large as the noise, where the smoothed baselines' KL
    /// bound is derived to be worst (docs/PRIVACY.md, "KL").
    SmallCells,
    OneHot,
}

const VECTORS: [Vector; 4] = [
    Vector::Uniform,
    Vector::Zipf,
    Vector::SmallCells,
    Vector::OneHot,
];

impl Vector {
    fn name(self) -> &'static str {
        match self {
            Vector::Uniform => "uniform",
            Vector::Zipf => "zipf",
            Vector::SmallCells => "small_cells",
            Vector::OneHot => "one_hot",
        }
    }

    /// Whole counts of total n over d cells (the baselines take integers only).
    fn counts(self, n: u64, d: usize) -> Vec<f64> {
        let mut x = vec![0u64; d];
        match self {
            Vector::Uniform => {
                for (i, v) in x.iter_mut().enumerate() {
                    *v = n / d as u64 + u64::from((i as u64) < n % d as u64);
                }
            }
            Vector::Zipf => {
                let h: f64 = (1..=d).map(|i| 1.0 / i as f64).sum();
                for (i, v) in x.iter_mut().enumerate() {
                    *v = (n as f64 / ((i + 1) as f64 * h)).floor() as u64;
                }
            }
            Vector::SmallCells => {
                let small = (d as u64 - 1).min(n / 6);
                for v in &mut x[1..=small as usize] {
                    *v = 3;
                }
            }
            Vector::OneHot => {}
        }
        let placed: u64 = x.iter().sum();
        x[0] += n - placed;
        x.into_iter().map(|v| v as f64).collect()
    }
}

/// The grid swept.
struct Grid {
    orders: Vec<f64>,
    dims: Vec<u64>,
    totals: Vec<u64>,
    targets: Vec<(Metric, f64)>,
    epsilons: Vec<f64>,
    draws: usize,
}

/// The target levels: a tight, a middle and a loose one per kind, so that every kind shows both
/// targets the Dirichlet family reaches and targets it reaches at no ε — ℓ2 0.02 and 0.1 (the
/// levels a first trial of the planner used) and 0.3 (a fifth of the simplex's diameter √2); cell
/// sd a tenth of those (an ℓ2 error spread over about 100 cells); KL 0.01, 0.1 and a coarse 0.5
/// nats. The common ε grid, 0.01 to 1, runs from a small share of a budget of 1 to all of it.
fn grid(short: bool, draws: Option<usize>) -> Grid {
    if short {
        return Grid {
            orders: vec![2.0, 22.0],
            dims: vec![6, 40],
            totals: vec![500, 5_000],
            targets: vec![(Metric::L2, 0.1), (Metric::CellSd, 0.01), (Metric::Kl, 0.1)],
            epsilons: vec![0.1],
            draws: draws.unwrap_or(200),
        };
    }
    Grid {
        orders: vec![2.0, 22.0],
        dims: vec![6, 40, 1000],
        totals: vec![500, 5_000, 100_000],
        targets: vec![
            (Metric::L2, 0.02),
            (Metric::L2, 0.1),
            (Metric::L2, 0.3),
            (Metric::CellSd, 0.002),
            (Metric::CellSd, 0.01),
            (Metric::CellSd, 0.03),
            (Metric::Kl, 0.01),
            (Metric::Kl, 0.1),
            (Metric::Kl, 0.5),
        ],
        epsilons: vec![0.01, 0.1, 1.0],
        draws: draws.unwrap_or(1000),
    }
}

fn context(order: f64) -> Context {
    Context {
        ledger_order: Order::new(order).expect("a valid order"),
        sensitivity: Sensitivity::REPLACE_ONE,
        max_dimension: 1 << 20,
        max_exponential_n: 10_000,
        cells: None,
    }
}

/// The mechanism's own fields, beside `epsilon`.
fn own_fields(mechanism: &str) -> Map<String, Value> {
    let mut m = Map::new();
    if mechanism == "diffuse" {
        m.insert("alpha".into(), json!(1.0));
    }
    m
}

// ---------------------------------------------------------------------------------------------
// Releases, as the service makes them

/// A release of `x` as the service would make it from this body: parsed against the dataset,
/// calibrated and priced at λ₀, its shapes checked.
fn release_plan(
    ctx: &Context,
    mechanism: &str,
    epsilon: f64,
    fields: &Map<String, Value>,
    x: &[f64],
) -> Result<Plan> {
    let mut body = fields.clone();
    body.insert("counts".into(), json!(x));
    body.insert("epsilon".into(), json!(epsilon));
    body.insert("mechanism".into(), json!(mechanism));
    let body: RequestBody = serde_json::from_value(Value::Object(body))?;
    let request = Request::parse(&body, ctx).map_err(|e| format!("{mechanism}: {e:?}"))?;
    Ok(request
        .plan(ctx.ledger_order, &ctx.sensitivity)
        .map_err(|e| format!("{mechanism} at ε {epsilon}: {e}"))?)
}

/// Every error of `draws` releases of x.
struct Sample {
    /// ‖y − x/n‖₂, sorted.
    l2: Vec<f64>,
    /// D_KL(x/n ‖ y), sorted (∞ where y has a zero in a cell with records).
    kl: Vec<f64>,
    /// The largest mean over the draws of a cell's (yᵢ − xᵢ/n)².
    cell_mse: f64,
}

impl Sample {
    fn quantile(v: &[f64]) -> f64 {
        v[((CONFIDENCE * v.len() as f64).ceil() as usize).max(1) - 1]
    }

    fn cell_rmse(&self) -> f64 {
        self.cell_mse.sqrt()
    }
}

fn simulate(draw: &dyn Draw, x: &[f64], draws: usize) -> Result<Sample> {
    let n: f64 = x.iter().sum();
    let p: Vec<f64> = x.iter().map(|v| v / n).collect();
    let counts = Counts::new(x.to_vec(), usize::MAX)?;
    let mut rng = os_rng();
    let mut l2 = Vec::with_capacity(draws);
    let mut kl = Vec::with_capacity(draws);
    let mut squares = vec![0.0; x.len()];
    for _ in 0..draws {
        let (y, _) = draw.sample(&counts, &mut rng)?;
        let mut e2 = 0.0;
        let mut k = 0.0;
        for i in 0..p.len() {
            let e = y[i] - p[i];
            e2 += e * e;
            squares[i] += e * e;
            if p[i] > 0.0 {
                k += if y[i] > 0.0 {
                    p[i] * (p[i] / y[i]).ln()
                } else {
                    f64::INFINITY
                };
            }
        }
        l2.push(e2.sqrt());
        kl.push(k);
    }
    l2.sort_by(f64::total_cmp);
    kl.sort_by(f64::total_cmp);
    let cell_mse = squares.iter().fold(0.0f64, |m, s| m.max(s / draws as f64));
    Ok(Sample { l2, kl, cell_mse })
}

/// The 1 − `REFUTE_AT` quantile of Binomial(draws, β): more exceedances refute a bound at
/// confidence 1 − β.
fn allowed_failures(draws: usize, beta: f64) -> usize {
    let n = draws as f64;
    let ln_pmf = |k: usize| {
        let k = k as f64;
        ln_gamma(n + 1.0) - ln_gamma(k + 1.0) - ln_gamma(n - k + 1.0)
            + k * beta.ln()
            + (n - k) * (-beta).ln_1p()
    };
    let mut tail = 0.0;
    for f in (0..=draws).rev() {
        tail += ln_pmf(f).exp();
        if tail > REFUTE_AT {
            return f;
        }
    }
    0
}

/// How far above cell_sd² the mean of N squared errors may land for a correct bound: 6.5 of its
/// standard errors, relative 6.5·√(8/N) (as `workload::simulation::sd_margin`, whose kurtosis
/// bound E[e⁴] ≤ 9E[e²]² it takes; 6.5 rather than 6 for the smaller `REFUTE_AT`).
fn sd_margin(draws: usize) -> f64 {
    6.5 * (8.0 / draws as f64).sqrt()
}

/// A forecast checked against a sample.
struct Check {
    /// Draws above an ℓ2 or KL bound, and how many a correct bound may show.
    exceed: Option<usize>,
    allowed: Option<usize>,
    covered: bool,
}

/// Whether `bound` (the forecast of `metric` at confidence 1 − β) holds on these draws: an ℓ2 or
/// KL bound exceeded in at most `allowed_failures` draws; a cell bound (on every cell's
/// root-mean-square error) above the largest cell's within `sd_margin`.
fn check(metric: Metric, s: &Sample, bound: f64, beta: f64) -> Check {
    let draws = s.l2.len();
    let tail = |v: &[f64]| {
        let exceed = v.iter().filter(|e| **e > bound).count();
        let allowed = allowed_failures(draws, beta);
        Check {
            exceed: Some(exceed),
            allowed: Some(allowed),
            covered: exceed <= allowed,
        }
    };
    match metric {
        Metric::L2 => tail(&s.l2),
        Metric::Kl => tail(&s.kl),
        Metric::CellSd => Check {
            exceed: None,
            allowed: None,
            covered: s.cell_mse <= bound * bound * (1.0 + sd_margin(draws)),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// The sweep

/// One planned item: a target cell and the mechanism asked for.
struct Planned {
    order: f64,
    d: u64,
    n: u64,
    metric: Metric,
    level: f64,
    requested: &'static str,
    answer: ItemAnswer,
}

/// What was released: the case, the mechanism and its ε.
#[derive(Clone, Copy)]
struct Release {
    /// "planned" (at the item's planned ε) or "fixed" (at an ε of the grid).
    section: &'static str,
    order: f64,
    d: u64,
    n: u64,
    /// The target (planned rows) or none (fixed rows).
    target: Option<(Metric, f64)>,
    requested: &'static str,
    mechanism: &'static str,
    epsilon: f64,
    cost: f64,
    smoothing: Option<f64>,
}

impl Release {
    /// `mechanism` asked by name at ε in case (λ₀, d, n), for no target.
    fn fixed(
        (order, d, n): (f64, u64, u64),
        mechanism: &'static str,
        epsilon: f64,
        cost: f64,
        smoothing: Option<f64>,
    ) -> Release {
        Release {
            section: "fixed",
            order,
            d,
            n,
            target: None,
            requested: mechanism,
            mechanism,
            epsilon,
            cost,
            smoothing,
        }
    }
}

/// One simulated release, at a count vector.
struct Simulated {
    release: Release,
    vector: Vector,
    draws: usize,
    l2_q: f64,
    cell_rmse: f64,
    kl_q: f64,
    /// The forecast of the target's metric and the coverage check (planned rows).
    bound: Option<f64>,
    exceed: Option<usize>,
    allowed: Option<usize>,
    covered: Option<bool>,
}

impl Simulated {
    /// The errors of `s` (and the KL quantile given: a smoothed baseline's own draws).
    fn new(release: Release, vector: Vector, s: &Sample, kl_q: f64) -> Simulated {
        Simulated {
            release,
            vector,
            draws: s.l2.len(),
            l2_q: Sample::quantile(&s.l2),
            cell_rmse: s.cell_rmse(),
            kl_q,
            bound: None,
            exceed: None,
            allowed: None,
            covered: None,
        }
    }
}

fn plan_all(grid: &Grid) -> Result<Vec<Planned>> {
    let mut out = Vec::new();
    for &order in &grid.orders {
        let ctx = context(order);
        let mut items = Vec::new();
        let mut keys = Vec::new();
        for &d in &grid.dims {
            for &n in &grid.totals {
                for &(metric, level) in &grid.targets {
                    for requested in NAMED.into_iter().chain(std::iter::once("auto")) {
                        let mut target = Map::new();
                        target.insert(metric.name().into(), json!(level));
                        if metric != Metric::CellSd {
                            target.insert("confidence".into(), json!(CONFIDENCE));
                        }
                        let mut item = own_fields(requested);
                        item.insert("d".into(), json!(d));
                        item.insert("n".into(), json!(n));
                        item.insert("mechanism".into(), json!(requested));
                        item.insert("target".into(), Value::Object(target));
                        items.push(Value::Object(item));
                        keys.push((d, n, metric, level, requested));
                    }
                }
            }
        }
        let request: PlanRequest = serde_json::from_value(json!({ "items": items }))?;
        let answer = plan_workload(&request, &ctx, None).map_err(|e| e.to_string())?;
        for ((d, n, metric, level, requested), answer) in keys.into_iter().zip(answer.items) {
            out.push(Planned {
                order,
                d,
                n,
                metric,
                level,
                requested,
                answer,
            });
        }
    }
    Ok(out)
}

/// Release a planned item at every count vector, with the request a client would send for it
/// (the planned ε, the item's fields, the planned `smoothing`), and check its forecast (times
/// `shrink`: 1 but to check that the check can fail).
fn simulate_planned(p: &Planned, draws: usize, shrink: f64) -> Result<Vec<Simulated>> {
    let ctx = context(p.order);
    let a = &p.answer;
    let mechanism = a
        .mechanism
        .expect("a planned item names its mechanism")
        .name();
    let epsilon = a.epsilon.ok_or("a planned target has an epsilon")?;
    let forecast = a.forecast.ok_or("a planned item has a forecast")?;
    let parameters = a.parameters.clone().unwrap_or_default();
    let mut fields = own_fields(mechanism);
    let smoothing = parameters.get("smoothing").and_then(Value::as_f64);
    if let Some(k) = smoothing {
        fields.insert("smoothing".into(), json!(k));
    }
    let d = p.d as usize;
    let plan = release_plan(
        &ctx,
        mechanism,
        epsilon,
        &fields,
        &Vector::Uniform.counts(p.n, d),
    )?;
    // What the plan said is what a release runs with and is charged.
    if Some(plan.charge.to_f64()) != a.cost {
        return Err(format!(
            "{mechanism} at ε {epsilon}: charged {} but planned at {:?}",
            plan.charge.to_f64(),
            a.cost
        )
        .into());
    }
    if plan.draw().parameters() != parameters {
        return Err(format!(
            "{mechanism} at ε {epsilon}: released with {:?}, planned with {parameters:?}",
            plan.draw().parameters()
        )
        .into());
    }
    let beta = 1.0 - forecast.confidence;
    let release = Release {
        section: "planned",
        target: Some((p.metric, p.level)),
        requested: p.requested,
        ..Release::fixed(
            (p.order, p.d, p.n),
            mechanism,
            epsilon,
            plan.charge.to_f64(),
            smoothing,
        )
    };
    let mut out = Vec::new();
    for v in VECTORS {
        let x = v.counts(p.n, d);
        plan.draw()
            .check(&Counts::new(x.clone(), usize::MAX)?, &ctx.sensitivity)
            .map_err(|e| e.to_string())?;
        let s = simulate(plan.draw(), &x, draws)?;
        let bound = shrink
            * match p.metric {
                Metric::L2 => forecast.l2,
                Metric::CellSd => forecast.cell_sd,
                Metric::Kl => forecast.kl.ok_or("a KL target is forecast")?,
            };
        let check = check(p.metric, &s, bound, beta);
        let mut row = Simulated::new(release, v, &s, Sample::quantile(&s.kl));
        row.bound = Some(bound);
        row.exceed = check.exceed;
        row.allowed = check.allowed;
        row.covered = Some(check.covered);
        out.push(row);
    }
    Ok(out)
}

/// Every mechanism at ε, every count vector: ℓ2 and cell errors of the release as it is, KL of
/// the baselines smoothed as the planner would smooth them.
fn simulate_fixed(
    order: f64,
    d: u64,
    n: u64,
    epsilon: f64,
    mechanism: &'static str,
    draws: usize,
) -> Result<Vec<Simulated>> {
    let ctx = context(order);
    let du = d as usize;
    let fields = own_fields(mechanism);
    let plan = release_plan(
        &ctx,
        mechanism,
        epsilon,
        &fields,
        &Vector::Uniform.counts(n, du),
    )?;
    let params = plan.draw().parameters();
    let beta = 1.0 - CONFIDENCE;
    let smoothing = match mechanism {
        "gaussian" => params
            .get("sigma")
            .and_then(Value::as_f64)
            .map(|sigma| gaussian_noise(sigma).best_smoothing(du, n as f64, beta)),
        "laplace" => params
            .get("scale")
            .and_then(Value::as_f64)
            .map(|scale| laplace_noise(scale).best_smoothing(du, n as f64, beta)),
        _ => None,
    };
    let smoothed = match smoothing {
        Some(k) => {
            let mut f = fields.clone();
            f.insert("smoothing".into(), json!(k));
            Some(release_plan(
                &ctx,
                mechanism,
                epsilon,
                &f,
                &Vector::Uniform.counts(n, du),
            )?)
        }
        None => None,
    };
    let release = Release::fixed(
        (order, d, n),
        mechanism,
        epsilon,
        plan.charge.to_f64(),
        smoothing,
    );
    let mut out = Vec::new();
    for v in VECTORS {
        let x = v.counts(n, du);
        let s = simulate(plan.draw(), &x, draws)?;
        let kl_q = match &smoothed {
            Some(sp) => Sample::quantile(&simulate(sp.draw(), &x, draws)?.kl),
            None => Sample::quantile(&s.kl),
        };
        out.push(Simulated::new(release, v, &s, kl_q));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Output

fn opt(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v:e}"))
}

fn csv(planned: &[Planned], simulated: &[Simulated]) -> String {
    let mut s = String::from(
        "section,order,d,n,target,level,requested,mechanism,status,epsilon,cost,smoothing,\
         forecast_l2,forecast_cell_sd,forecast_kl,vector,draws,l2_q95,cell_rmse,kl_q95,bound,\
         exceed,allowed,covered,note\n",
    );
    for p in planned {
        let a = &p.answer;
        let status = match a.status {
            ItemStatus::Planned => "planned",
            ItemStatus::Unreachable => "unreachable",
        };
        // A named mechanism's own status: not applicable is not the same as out of reach.
        let own = a
            .candidates
            .iter()
            .find(|c| c.mechanism.name() == p.requested);
        let (status, note) = match own {
            Some(c) if c.status == CandidateStatus::NotApplicable => (
                "not_applicable",
                c.reason
                    .clone()
                    .unwrap_or_default()
                    .replace([',', '\n'], ";"),
            ),
            _ => (status, String::new()),
        };
        let f = a.forecast;
        let smoothing = a
            .parameters
            .as_ref()
            .and_then(|p| p.get("smoothing"))
            .and_then(Value::as_f64);
        let _ = writeln!(
            s,
            "plan,{},{},{},{},{},{},{},{},{},{},{},{},{},{},,,,,,,,,,{}",
            p.order,
            p.d,
            p.n,
            p.metric.name(),
            p.level,
            p.requested,
            a.mechanism.map_or("", |m| m.name()),
            status,
            opt(a.epsilon),
            opt(a.cost),
            opt(smoothing),
            opt(f.map(|f| f.l2)),
            opt(f.map(|f| f.cell_sd)),
            opt(f.and_then(|f| f.kl)),
            note,
        );
    }
    for r in simulated {
        let (target, level) = r
            .release
            .target
            .map_or((String::new(), String::new()), |(m, l)| {
                (m.name().into(), l.to_string())
            });
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},,{:e},{:e},{},,,,{},{},{:e},{:e},{:e},{},{},{},{},",
            r.release.section,
            r.release.order,
            r.release.d,
            r.release.n,
            target,
            level,
            r.release.requested,
            r.release.mechanism,
            r.release.epsilon,
            r.release.cost,
            opt(r.release.smoothing),
            r.vector.name(),
            r.draws,
            r.l2_q,
            r.cell_rmse,
            r.kl_q,
            opt(r.bound),
            r.exceed.map_or(String::new(), |e| e.to_string()),
            r.allowed.map_or(String::new(), |e| e.to_string()),
            r.covered.map_or(String::new(), |c| c.to_string()),
        );
    }
    s
}

fn short_eps(e: Option<f64>) -> String {
    match e {
        None => "—".into(),
        Some(e) if e >= 100.0 => format!("{e:.0}"),
        Some(e) if e >= 0.01 => format!("{e:.3}"),
        Some(e) => format!("{e:.1e}"),
    }
}

/// The cheapest planned ε among `names` for one target cell, and who.
fn cheapest<'a>(cell: &[&'a Planned], names: &[&str]) -> Option<(f64, &'a str)> {
    cell.iter()
        .filter(|p| names.contains(&p.requested) && p.answer.status == ItemStatus::Planned)
        .filter_map(|p| p.answer.epsilon.map(|e| (e, p.requested)))
        .min_by(|a, b| a.0.total_cmp(&b.0))
}

fn summary(grid: &Grid, planned: &[Planned], simulated: &[Simulated]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nFor each target, the cheapest ε (charged at λ₀) of the Dirichlet family \
         (dirichlet, posterior, diffuse α=1) and of the baselines (gaussian, laplace); \
         — = out of reach at any ε.\n"
    );
    let _ = writeln!(
        s,
        "{:>3} {:>5} {:>7} {:<13} {:<12} {:>9} {:<10} {:>9} {:<9} {:>9}",
        "λ₀", "d", "n", "target", "auto", "auto ε", "family", "ε", "baseline", "ε"
    );
    let mut cells: BTreeMap<(u64, u64, u64, Metric, u64), Vec<&Planned>> = BTreeMap::new();
    for p in planned {
        cells
            .entry((p.order as u64, p.d, p.n, p.metric, p.level.to_bits()))
            .or_default()
            .push(p);
    }
    let (mut family_wins, mut baseline_wins, mut family_only, mut baseline_only, mut neither) =
        (0, 0, 0, 0, 0);
    for ((order, d, n, metric, level), cell) in &cells {
        let auto = cell
            .iter()
            .find(|p| p.requested == "auto")
            .expect("auto is planned");
        let fam = cheapest(cell, &FAMILY);
        let base = cheapest(cell, &BASELINES);
        match (fam, base) {
            (Some(f), Some(b)) if f.0 < b.0 => family_wins += 1,
            (Some(_), Some(_)) => baseline_wins += 1,
            (Some(_), None) => family_only += 1,
            (None, Some(_)) => baseline_only += 1,
            (None, None) => neither += 1,
        }
        let _ = writeln!(
            s,
            "{order:>3} {d:>5} {n:>7} {:<13} {:<12} {:>9} {:<10} {:>9} {:<9} {:>9}",
            format!("{} {}", metric.name(), f64::from_bits(*level)),
            match auto.answer.status {
                ItemStatus::Planned => auto.answer.mechanism.map_or("?", |m| m.name()),
                ItemStatus::Unreachable => "unreachable",
            },
            short_eps(auto.answer.epsilon),
            fam.map_or("—", |f| f.1),
            short_eps(fam.map(|f| f.0)),
            base.map_or("—", |b| b.1),
            short_eps(base.map(|b| b.0)),
        );
    }
    let _ = writeln!(
        s,
        "\n{} target cells: the Dirichlet family cheapest in {family_wins}, the baselines in \
         {baseline_wins}; only the family reaches {family_only}, only the baselines \
         {baseline_only}, neither {neither}.",
        cells.len()
    );
    // Per metric and λ₀: who is more accurate at the same ε (worst count vector).
    let _ = writeln!(
        s,
        "\nAt the same ε, simulated ({} draws; the worst of the count vectors): cells where the \
         best of the Dirichlet family is more accurate than the best baseline.",
        grid.draws
    );
    let mut fixed: BTreeMap<(u64, u64, u64, u64, &str), Vec<&Simulated>> = BTreeMap::new();
    for r in simulated.iter().filter(|r| r.release.section == "fixed") {
        fixed
            .entry((
                r.release.order as u64,
                r.release.d,
                r.release.n,
                r.release.epsilon.to_bits(),
                r.release.mechanism,
            ))
            .or_default()
            .push(r);
    }
    for metric in [Metric::L2, Metric::CellSd, Metric::Kl] {
        for &order in &grid.orders {
            let (mut wins, mut total) = (0, 0);
            for &d in &grid.dims {
                for &n in &grid.totals {
                    for &e in &grid.epsilons {
                        let worst = |m: &str| {
                            fixed
                                .get(&(order as u64, d, n, e.to_bits(), m))
                                .map(|rs| {
                                    rs.iter()
                                        .map(|r| match metric {
                                            Metric::L2 => r.l2_q,
                                            Metric::CellSd => r.cell_rmse,
                                            Metric::Kl => r.kl_q,
                                        })
                                        .fold(0.0f64, f64::max)
                                })
                                .unwrap_or(f64::INFINITY)
                        };
                        let best = |names: &[&str]| {
                            names.iter().map(|m| worst(m)).fold(f64::INFINITY, f64::min)
                        };
                        total += 1;
                        if best(&FAMILY) < best(&BASELINES) {
                            wins += 1;
                        }
                    }
                }
            }
            let _ = writeln!(
                s,
                "  {:<8} λ₀ = {order:>2}: the family more accurate in {wins} of {total} (d, n, ε)",
                metric.name()
            );
        }
    }
    let checks: Vec<&Simulated> = simulated
        .iter()
        .filter(|r| r.release.section == "planned")
        .collect();
    let failed: Vec<&&Simulated> = checks.iter().filter(|r| r.covered == Some(false)).collect();
    let _ = writeln!(
        s,
        "\nCoverage: {} planned releases simulated at their planned ε ({} count vectors each): \
         {} forecasts refuted.",
        checks.len() / VECTORS.len(),
        VECTORS.len(),
        failed.len()
    );
    for r in failed {
        let _ = writeln!(
            s,
            "  REFUTED: λ₀ {} d {} n {} {:?} {} at ε {:e} ({}): bound {:?}, exceed {:?} > {:?}; \
             l2_q {:e} cell_rmse {:e} kl_q {:e}",
            r.release.order,
            r.release.d,
            r.release.n,
            r.release.target,
            r.release.mechanism,
            r.release.epsilon,
            r.vector.name(),
            r.bound,
            r.exceed,
            r.allowed,
            r.l2_q,
            r.cell_rmse,
            r.kl_q
        );
    }
    s
}

/// Everything a sweep produced.
struct Outcome {
    planned: Vec<Planned>,
    simulated: Vec<Simulated>,
    plan_time: Duration,
    sim_time: Duration,
}

impl Outcome {
    fn refuted(&self) -> usize {
        self.simulated
            .iter()
            .filter(|r| r.covered == Some(false))
            .count()
    }
}

/// Plan the grid, simulate every planned item at its ε (checking its forecast times `shrink`)
/// and every mechanism at every ε of the grid.
fn run(grid: &Grid, shrink: f64) -> Result<Outcome> {
    let started = Instant::now();
    let planned = plan_all(grid)?;
    let plan_time = started.elapsed();
    eprintln!("planned {} items in {plan_time:.1?}", planned.len());

    let sim_started = Instant::now();
    // `"auto"` plans the same release as the mechanism it chooses, named: each distinct release
    // (target, mechanism, ε, parameters) is drawn once, under the name it was asked by.
    let mut seen = std::collections::HashSet::new();
    let distinct: Vec<&Planned> = planned
        .iter()
        .filter(|p| p.answer.status == ItemStatus::Planned)
        .filter(|p| {
            seen.insert(format!(
                "{} {} {} {:?} {} {:?} {:?} {:?}",
                p.order,
                p.d,
                p.n,
                p.metric,
                p.level,
                p.answer.mechanism,
                p.answer.epsilon,
                p.answer.parameters
            ))
        })
        .collect();
    let mut simulated: Vec<Simulated> = distinct
        .par_iter()
        .map(|p| simulate_planned(p, grid.draws, shrink))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    let mut fixed_jobs = Vec::new();
    for &order in &grid.orders {
        for &d in &grid.dims {
            for &n in &grid.totals {
                for &e in &grid.epsilons {
                    for m in NAMED {
                        fixed_jobs.push((order, d, n, e, m));
                    }
                }
            }
        }
    }
    simulated.extend(
        fixed_jobs
            .par_iter()
            .map(|&(order, d, n, e, m)| simulate_fixed(order, d, n, e, m, grid.draws))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten(),
    );
    Ok(Outcome {
        planned,
        simulated,
        plan_time,
        sim_time: sim_started.elapsed(),
    })
}

fn main() -> Result<()> {
    let args = Command::new("sweep")
        .about("Where each mechanism wins: plans and simulated errors over (λ₀, d, n, ε) per target kind")
        .arg(
            Arg::new("short")
                .long("short")
                .action(ArgAction::SetTrue)
                .help("A small grid (λ₀ 2 and 22, d 6 and 40, n 500 and 5,000, one level per target kind, ε 0.1) at 200 draws: seconds, for CI"),
        )
        .arg(
            Arg::new("draws")
                .long("draws")
                .value_parser(value_parser!(usize))
                .help("Releases per simulated case (default 1,000; 200 with --short)"),
        )
        .arg(
            Arg::new("shrink-forecasts")
                .long("shrink-forecasts")
                .default_value("1")
                .value_parser(value_parser!(f64))
                .help("Check the simulations against the forecasts times this factor: below 1 (0.5), the check must fail — a check of the check"),
        )
        .arg(
            Arg::new("out")
                .long("out")
                .default_value("target/sweep/sweep.csv")
                .value_parser(value_parser!(PathBuf))
                .help("The CSV written"),
        )
        .get_matches();
    let grid = grid(
        args.get_flag("short"),
        args.get_one::<usize>("draws").copied(),
    );
    if grid.draws < 100 {
        return Err("--draws: at least 100 (the coverage check needs them)".into());
    }
    let shrink = *args.get_one::<f64>("shrink-forecasts").expect("a default");
    if !(shrink > 0.0 && shrink.is_finite()) {
        return Err("--shrink-forecasts: a finite number above 0".into());
    }
    let out: &PathBuf = args.get_one("out").expect("a default");

    let outcome = run(&grid, shrink)?;
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(out, csv(&outcome.planned, &outcome.simulated))?;
    print!("{}", summary(&grid, &outcome.planned, &outcome.simulated));
    println!(
        "\nwrote {} ({} plan rows, {} simulated rows); planning {:.1?}, simulation {:.1?}",
        out.display(),
        outcome.planned.len(),
        outcome.simulated.len(),
        outcome.plan_time,
        outcome.sim_time,
    );
    let refuted = outcome.refuted();
    if refuted > 0 {
        return Err(format!("{refuted} forecasts refuted by the simulation (see above)").into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Grid {
        Grid {
            orders: vec![2.0],
            dims: vec![6],
            totals: vec![500],
            targets: vec![(Metric::L2, 0.1), (Metric::CellSd, 0.03), (Metric::Kl, 0.1)],
            epsilons: vec![],
            draws: 200,
        }
    }

    /// The sweep is a coverage check that can fail: the forecasts hold on the simulations, and
    /// the same sweep against forecasts shrunk to 0.4 of themselves is refuted, for every target
    /// kind (the Dirichlet family's bounds are nearly attained at the one-hot count; the
    /// baselines' ℓ2 and cell bounds are about twice their observed worst, their KL bound at
    /// least as far).
    #[test]
    fn the_sweep_refutes_shrunken_forecasts() {
        let grid = tiny();
        let outcome = run(&grid, 1.0).unwrap();
        assert!(!outcome.simulated.is_empty());
        assert_eq!(outcome.refuted(), 0);
        let shrunk = run(&grid, 0.4).unwrap();
        for metric in [Metric::L2, Metric::CellSd, Metric::Kl] {
            assert!(
                shrunk
                    .simulated
                    .iter()
                    .any(|r| r.release.target.map(|t| t.0) == Some(metric)
                        && r.covered == Some(false)),
                "a shrunken {} forecast went unnoticed",
                metric.name()
            );
        }
        assert!(shrunk.refuted() > 0);
    }

    #[test]
    fn count_vectors_have_the_total() {
        for (n, d) in [(500u64, 6usize), (500, 1000), (5_000, 40), (100_000, 1000)] {
            for v in VECTORS {
                let x = v.counts(n, d);
                assert_eq!(x.len(), d);
                assert_eq!(x.iter().sum::<f64>(), n as f64, "{v:?} {n} {d}");
                assert!(x.iter().all(|c| *c >= 0.0 && c.fract() == 0.0));
            }
        }
        assert_eq!(
            Vector::SmallCells.counts(500, 1000)[1..]
                .iter()
                .filter(|c| **c == 3.0)
                .count(),
            83
        );
    }

    #[test]
    fn allowed_failures_is_a_far_binomial_quantile() {
        // Binomial(1000, 0.05): mean 50, sd 6.9; its 1 − 1e-7 quantile lies near 5.2 sd above.
        let a = allowed_failures(1000, 0.05);
        assert!((80..=95).contains(&a), "{a}");
        assert_eq!(allowed_failures(200, 1e-12), 0);
    }
}
