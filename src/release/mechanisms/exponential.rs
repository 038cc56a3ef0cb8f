//! `exponential`: seed 002's Hellinger exponential mechanism over the n + 1 Beta posteriors
//! Beta(α + j, β + n − j) of a (successes, failures) count, released as the selected posterior's
//! mean. Pure ε-DP with the global sensitivity Δ_g (`privacy::exponential`), charged
//! min(ε, λ₀ε²/8) at the ledger order (ε-bounded range ⇒ ε²/8-zCDP). `replace_one` only (n is
//! public: the candidate set reveals it), one vector only.

use serde_json::{json, Map, Value};
use utoipa::openapi::schema::ObjectBuilder;

use crate::ledger::charge_for;
use crate::privacy::accuracy::{Bounds, SelectionDraw};
use crate::privacy::curve::Pricing;
use crate::privacy::exponential::{
    exponential_rdp, hellinger_beta, priced_epsilon, BetaCandidates, ExponentialError, MIN_EPSILON,
};
use crate::privacy::sampler::CsRng;
use crate::privacy::types::Relation;
use crate::privacy::utility::SelectionForecast;
use crate::privacy::{Counts, Epsilon, Order, Sensitivity};
use crate::release::input::Input;
use crate::release::mechanism::{
    positive, Aim, Cache, Components, Context, Default, Draw, Drawn, EpsilonUse, FieldSpec,
    ForecastShape, Mechanism, Need, Optimistic, Parameters, Params, PlanError, Properties, Record,
    RequestError, Setup, Shape, Strength, Supports, Target, TargetKind, Targeting, VectorForecast,
    Wire, FORECAST_BETA, GRID, MAX_UNITS,
};
use crate::schema::{self, SchemaRef};
use crate::wire::ScalarOrCells;

pub struct Exponential;

/// The Beta prior (α, β).
pub type Settings = (f64, f64);

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spec {
    /// The mechanism's pure-DP ε.
    pub epsilon: Epsilon,
    /// n and the prior, with the sensitivity computed (O(n)).
    pub candidates: BetaCandidates,
}

/// A selection at ε among the candidates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SelectionDrawParams {
    pub candidates: BetaCandidates,
    pub epsilon: f64,
}

fn prior_schema() -> SchemaRef {
    schema::described("BetaPrior", "The Beta prior [α, β] (default [1, 1]).")
}

fn candidates(n: u64, (a, b): Settings) -> Result<BetaCandidates, String> {
    BetaCandidates::new(n, a, b).map_err(|e| e.to_string())
}

/// The candidates of a planned item, computed once per plan for each (n, prior).
fn cached(settings: &Settings, shape: &Shape, cache: &Cache) -> Result<BetaCandidates, String> {
    let n = shape.n as u64;
    let key = vec![n, settings.0.to_bits(), settings.1.to_bits()];
    let found = cache.get_or_insert(Exponential::NAME, key, || candidates(n, *settings));
    found.as_ref().clone()
}

impl Draw for SelectionDrawParams {
    /// min(ε, λε²/8) at the ε the selection is priced at (`priced_epsilon`), a bound.
    fn price(&self, order: Order, _sens: &Sensitivity, _d: usize) -> (f64, Pricing) {
        (
            exponential_rdp(order.get(), priced_epsilon(self.epsilon)),
            Pricing::Bound,
        )
    }

    fn max_order(&self, _sens: &Sensitivity) -> f64 {
        f64::INFINITY
    }

    fn check(&self, _counts: &Counts, _sens: &Sensitivity) -> Result<(), PlanError> {
        Ok(())
    }

    /// Select one of the n + 1 posteriors with probability ∝ exp(−ε·H/(2Δ̃)) for the counts; the
    /// output is its mean, and the record gains the selected index and posterior.
    fn sample(&self, counts: &Counts, rng: &mut CsRng) -> Result<Drawn, String> {
        let x = counts.as_slice();
        let c = &self.candidates;
        let n = c.n();
        if x.len() != 2 || x[0].fract() != 0.0 || x[1].fract() != 0.0 || x[0] + x[1] != n as f64 {
            return Err("the counts do not match the planned exponential release".into());
        }
        let j = c
            .select(x[0] as u64, self.epsilon, rng)
            .map_err(|e| e.to_string())?;
        let (a, b) = c.candidate(j);
        let total = a + b;
        let mut selection = Map::new();
        selection.insert("selected".into(), Value::from(j));
        selection.insert("posterior".into(), json!([a, b]));
        Ok((vec![a / total, b / total], Some(selection)))
    }

    /// The Hellinger bound of the selection, from n, the prior and ε only.
    fn forecast(&self, _counts: &Counts) -> Option<VectorForecast> {
        VectorForecast::new(&SelectionForecast {
            hellinger_bound: self.candidates.hellinger_bound(self.epsilon, FORECAST_BETA),
            hellinger_bound_confidence: 1.0 - FORECAST_BETA,
        })
    }

    /// The selection's bounds (its n is the candidates' own).
    fn bounds(&self, _n: f64, _d: usize, beta: f64, need: Need) -> Bounds {
        let law = SelectionDraw::new(&self.candidates);
        Bounds {
            l2: if need.l2 {
                law.l2(self.epsilon, beta)
            } else {
                0.0
            },
            cell_sd: if need.cell_sd {
                law.cell_sd(self.epsilon)
            } else {
                0.0
            },
            // No KL bound is proven for the selection's point estimate.
            kl: f64::INFINITY,
        }
    }

    fn feasible(&self, _n: f64, _d: usize, _sens: &Sensitivity) -> Result<(), String> {
        Ok(())
    }

    fn parameters(&self) -> Parameters {
        let (a, b) = self.candidates.prior();
        let mut p = Parameters::new();
        p.insert("prior".into(), json!([a, b]));
        p
    }
}

impl Mechanism for Exponential {
    const NAME: &'static str = "exponential";
    const SUMMARY: &'static str = "Seed 002's exponential mechanism over the n + 1 Beta \
        posteriors Beta(α + j, β + n − j) with Hellinger utility, for `counts` = [successes, \
        failures] (whole numbers, n = their sum, 0 ≤ n ≤ the configured `max_exponential_n`) on \
        a `replace_one` dataset only (n is public: the candidate set reveals it). n = 0 (an \
        empty group) has one candidate, the prior itself: the output is the prior mean, \
        whatever ε. Pure `epsilon`-DP, charged min(ε, λ₀ε²/8) at the ledger order λ₀ \
        (ε-bounded range ⇒ ε²/8-zCDP). `prior` defaults to [1, 1]. 422 `invalid-request`: an \
        `epsilon` below 2e-10 (the selection would run at no ε at all), an `epsilon` so large \
        that the least likely candidate falls below what the sampler represents exactly (37 \
        for Beta(1, 1) at n = 100, about 100·Δ_g at n = 10⁴), and a `prior` with α + β + n \
        above 2⁵⁰ or whose Hellinger distances are not finite numbers in f64 (`field: \
        prior`). One vector only: a `table` is 422 (under `replace_one` a record moving \
        between two rows changes both rows' n, a change the one-vector, fixed-n charge does \
        not cover).";
    const FIELDS: &'static [FieldSpec] = &[FieldSpec {
        name: "prior",
        wire: Wire::NumberOrNumbers,
        planned: true,
        required: false,
        default: Some(Default::Numbers(&[1.0, 1.0])),
        description: "The Beta prior [α, β], two numbers > 0.",
        schema: prior_schema,
    }];
    const TAKES_ORDER: bool = false;
    const EPSILON: EpsilonUse = EpsilonUse::Pure;
    const SUPPORTS: Supports = Supports {
        tables: false,
        targets: &[TargetKind::L2, TargetKind::CellSd],
        auto: true,
        forecast: Some(FORECAST),
    };

    type Settings = Settings;
    type Spec = Spec;
    type Draw = SelectionDrawParams;

    fn settings(params: &Params, _ctx: &Context) -> Result<Settings, RequestError> {
        match params.get("prior") {
            None => Ok((1.0, 1.0)),
            Some(ScalarOrCells::Cells(v)) if v.len() == 2 => {
                Ok((positive("prior", v[0])?, positive("prior", v[1])?))
            }
            Some(_) => Err(RequestError::new(
                "prior",
                "prior must be [alpha, beta] (two numbers > 0) for the exponential mechanism",
            )),
        }
    }

    /// Two whole-number cells (successes, failures) on a `replace_one` dataset, n = their sum at
    /// most `max_exponential_n` (the selection is O(n)).
    fn request(
        settings: Settings,
        targeting: &Targeting,
        input: &Input,
        ctx: &Context,
    ) -> Result<Spec, RequestError> {
        if ctx.sensitivity.relation() != Relation::ReplaceOne {
            return Err(RequestError::new(
                "mechanism",
                "the exponential mechanism needs a replace_one dataset (seed 002's neighbours replace one record and keep n fixed)",
            ));
        }
        let epsilon = targeting.epsilon.ok_or_else(|| {
            RequestError::new("epsilon", "the exponential mechanism needs epsilon")
        })?;
        let Input::Vector(counts) = input else {
            return Err(RequestError::new(
                "table",
                "the exponential mechanism releases one vector (counts), not a table",
            ));
        };
        let x = counts.as_slice();
        if x.len() != 2 {
            return Err(RequestError::new(
                "counts",
                "the exponential mechanism needs exactly 2 cells (successes, failures)",
            ));
        }
        if x.iter().any(|v| v.fract() != 0.0) {
            return Err(RequestError::new(
                "counts",
                "the exponential mechanism needs whole-number counts",
            ));
        }
        // n = 0 (an empty group) is released like any other: one candidate, the prior
        // (`privacy::exponential`, "Parameters").
        let n = x[0] + x[1];
        let max_n = ctx.max_exponential_n;
        if n > max_n as f64 {
            return Err(RequestError::new(
                "counts",
                format!("the exponential mechanism needs counts[0] + counts[1] <= {max_n} (the configured max_exponential_n)"),
            ));
        }
        // The prior is checked here, with its field, rather than later as a bare plan error.
        let candidates = candidates(n as u64, settings)
            .map_err(|e| RequestError::new("prior", format!("prior [alpha, beta]: {e}")))?;
        if epsilon.get() < MIN_EPSILON {
            return Err(RequestError::new(
                "epsilon",
                format!(
                    "the exponential mechanism needs epsilon of at least {MIN_EPSILON:e}: below it the selection would run at no epsilon at all, ignoring the counts"
                ),
            ));
        }
        Ok(Spec {
            epsilon,
            candidates,
        })
    }

    fn aim(_spec: &Spec) -> Aim {
        Aim::Priced { cap: None }
    }

    fn calibrate(
        spec: &Spec,
        _grid: Option<Target>,
        _d: usize,
        _sens: &Sensitivity,
    ) -> Result<SelectionDrawParams, PlanError> {
        let epsilon = spec.epsilon.get();
        let max_epsilon = spec.candidates.max_epsilon();
        if epsilon > max_epsilon {
            return Err(PlanError::Parameter(
                ExponentialError::EpsilonTooLarge {
                    epsilon,
                    max_epsilon,
                }
                .to_string(),
            ));
        }
        Ok(SelectionDrawParams {
            candidates: spec.candidates,
            epsilon,
        })
    }

    fn record(spec: &Spec, _draw: &SelectionDrawParams) -> Record {
        let c = &spec.candidates;
        let (a, b) = c.prior();
        Record::new(Self::NAME)
            .with("epsilon", spec.epsilon.get())
            .with("prior", [a, b])
            .with("n", c.n())
            .with("sensitivity", c.global_sensitivity())
            .with("sensitivity_used", c.sensitivity_used())
    }

    fn preview_extras(
        _: &Spec,
        _: &SelectionDrawParams,
        _: &Input,
        _: Order,
        _: &Sensitivity,
        _: Option<f64>,
    ) -> Map<String, Value> {
        Map::new()
    }

    fn preview_schemas(_: &mut Properties, _: &mut Components) {}

    fn request_schema(shape: ObjectBuilder, _assertions: &mut Vec<Value>) -> ObjectBuilder {
        shape
            .property(
                "counts",
                schema::array(schema::integer().minimum(Some(0)))
                    .min_items(Some(2))
                    .max_items(Some(2))
                    .description(Some("[successes, failures], whole numbers.")),
            )
            .required("counts")
    }

    fn record_schema(record: ObjectBuilder) -> ObjectBuilder {
        record
            .property("pricing", schema::component("Pricing"))
            .property("epsilon", schema::component("PositiveNumber"))
            .property("prior", schema::component("BetaPrior"))
            .property(
                "n",
                schema::integer()
                    .minimum(Some(0))
                    .description(Some("successes + failures (public for this mechanism).")),
            )
            .property(
                "sensitivity",
                schema::between(0.0, 1.0).description(Some(
                    "Δ_g = max_j H(r_j, r_{j+1}), the global sensitivity of the Hellinger \
                     utility (0 when n = 0, a single candidate).",
                )),
            )
            .property(
                "sensitivity_used",
                schema::above(0.0).description(Some(
                    "Δ_g rounded up by the bound on the floating-point error of every computed \
                     H (the selection divides by this).",
                )),
            )
            .property(
                "selected",
                schema::integer().minimum(Some(0)).description(Some(
                    "The selected candidate j* (absent in a preview, which draws nothing).",
                )),
            )
            .property(
                "posterior",
                schema::described(
                    "BetaPrior",
                    "The selected posterior Beta(α + j*, β + n − j*); `distribution` is its \
                     mean.",
                ),
            )
            .required("epsilon")
            .required("prior")
            .required("n")
            .required("sensitivity")
            .required("sensitivity_used")
    }

    fn plannable(
        _settings: &Settings,
        shape: &Shape,
        ctx: &Context,
    ) -> Result<(), (&'static str, String)> {
        let no = |field: &'static str, reason: &str| Err((field, reason.to_string()));
        if shape.d != 2 {
            return no(
                "d",
                "the exponential mechanism releases one two-cell vector (d = 2)",
            );
        }
        if ctx.sensitivity.relation() != Relation::ReplaceOne {
            return no(
                "mechanism",
                "the exponential mechanism needs the replace_one relation",
            );
        }
        if shape.n_is_lower_bound {
            return no(
                "n_lower_bound",
                "the exponential mechanism needs the exact public total n: its candidates are the n + 1 posteriors",
            );
        }
        if shape.n.fract() != 0.0 {
            return no("n", "the exponential mechanism needs a whole number n");
        }
        if shape.n > ctx.max_exponential_n as f64 {
            return no(
                "n",
                &format!(
                    "the exponential mechanism takes n up to {}",
                    ctx.max_exponential_n
                ),
            );
        }
        Ok(())
    }

    fn at_epsilon(
        settings: &Settings,
        s: &Setup,
        epsilon: Epsilon,
        cache: &Cache,
    ) -> Result<Spec, String> {
        Ok(Spec {
            epsilon,
            candidates: cached(settings, &s.shape, cache)?,
        })
    }

    /// Its ε is priced below itself (min(ε, λ₀ε²/8)): the largest grid ε in (0, its cap] whose
    /// charge is at most the spend.
    fn units_within(settings: &Settings, s: &Setup, spend: u64, cache: &Cache) -> Option<u64> {
        let c = cached(settings, &s.shape, cache).ok()?;
        units_within(spend, c.max_epsilon(), s.lambda())
    }

    fn strength(
        settings: &Settings,
        s: &Setup,
        cache: &Cache,
    ) -> Result<Option<Box<dyn Strength<SelectionDrawParams>>>, String> {
        let candidates = cached(settings, &s.shape, cache)?;
        Ok(Some(Box::new(Selection { candidates })))
    }

    /// Its exact plan takes the O(n) sensitivity: `"auto"` first bounds it in O(1).
    fn optimistic(settings: &Settings, s: &Setup) -> Option<Box<dyn Optimistic>> {
        Some(Box::new(Floor {
            law: optimistic_selection(settings, &s.shape),
            lambda: s.lambda(),
            beta: s.beta,
        }))
    }
}

/// The largest grid ε in (0, max_epsilon] whose exponential charge is at most `spend` units.
fn units_within(spend: u64, max_epsilon: f64, lambda: f64) -> Option<u64> {
    let charge = |u: u64| {
        charge_for(exponential_rdp(lambda, priced_epsilon(u as f64 * GRID)))
            .map_or(u64::MAX, |c| c.raw() as u64)
    };
    let mut lo = 0u64;
    let mut hi = ((max_epsilon / GRID).floor() as u64).min(MAX_UNITS);
    if hi == 0 || charge(1) > spend {
        return None;
    }
    if charge(hi) <= spend {
        return Some(hi);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if charge(mid) <= spend {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo > 0).then_some(lo)
}

/// ε = eᵗ.
struct Selection {
    candidates: BetaCandidates,
}

impl Strength<SelectionDrawParams> for Selection {
    fn params_at(&self, t: f64) -> SelectionDrawParams {
        SelectionDrawParams {
            candidates: self.candidates,
            epsilon: t.exp(),
        }
    }

    fn strength(&self, params: &SelectionDrawParams) -> f64 {
        params.epsilon.ln()
    }

    fn ends(&self) -> (f64, f64) {
        (GRID.ln(), (self.max_units() as f64 * GRID).ln())
    }

    fn near_pole(&self) -> Option<(SelectionDrawParams, f64)> {
        None
    }

    fn request_epsilon(&self, params: &SelectionDrawParams) -> f64 {
        params.epsilon
    }

    /// Its ε is bounded by what the integer weights represent exactly.
    fn max_units(&self) -> u64 {
        ((self.candidates.max_epsilon() / GRID).floor() as u64).min(MAX_UNITS)
    }

    fn kl_monotone(&self) -> bool {
        true
    }
}

/// Lower bounds on the exponential mechanism's forecasts in O(1), for ruling it out without
/// its O(n) sensitivity (`SelectionDraw::from_parts`): Δ̃ replaced by the larger of the two
/// edge steps, which the computed Δ̂_g is the maximum of with others, and E by 0.
fn optimistic_selection(&(a, b): &Settings, shape: &Shape) -> SelectionDraw {
    let n = shape.n;
    let edge = if n >= 1.0 {
        hellinger_beta(a, b + n, a + 1.0, b + n - 1.0).max(hellinger_beta(
            a + n - 1.0,
            b + 1.0,
            a + n,
            b,
        ))
    } else {
        0.0
    };
    SelectionDraw::from_parts(n as u64, a, b, edge, 0.0)
}

struct Floor {
    law: SelectionDraw,
    lambda: f64,
    beta: f64,
}

impl Optimistic for Floor {
    fn bounds_within(&self, spend: u64) -> Option<Bounds> {
        // Its ε at this spend, ignoring its cap (a larger ε only forecasts better).
        units_within(spend, f64::INFINITY, self.lambda)
            .map(|u| self.law.bounds(u as f64 * GRID, self.beta))
    }

    /// The price of the smallest ε at which the optimistic forecasts meet the target, ignoring
    /// its ε cap; `None` if they never do (its bias alone exceeds the target).
    fn cost_floor(&self, l2: Option<f64>, cell_sd: Option<f64>) -> Option<f64> {
        let law = &self.law;
        // Only the bounds the target asks about (the cell bound is the costlier).
        let meets = |e: f64| {
            l2.is_none_or(|t| law.l2(e, self.beta) <= t)
                && cell_sd.is_none_or(|t| law.cell_sd(e) <= t)
        };
        let (mut lo, mut hi) = (GRID, 1e6);
        if !meets(hi) {
            return None;
        }
        if meets(lo) {
            return Some(0.0);
        }
        // Bisection in ln ε, keeping lo on the failing side: any ε below the threshold prices
        // below the cost, so a coarse bracket is still a valid floor.
        for _ in 0..30 {
            let mid = (lo * hi).sqrt();
            if meets(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(exponential_rdp(self.lambda, priced_epsilon(lo)))
    }
}

/// The selection's forecast: `SelectionForecast`.
pub const FORECAST: ForecastShape = ForecastShape {
    kind: "selection",
    component: "SelectionForecast",
    schemas: forecast_schemas,
};

fn forecast_schemas(schemas: &mut Components) {
    use crate::schema::{closed, number};
    schemas.push((
        "SelectionForecast".into(),
        closed()
            .description(Some(
                "The `exponential` mechanism's forecast from n, the prior and ε only (no count): \
                 with probability `hellinger_bound_confidence` (0.95) the selected posterior's \
                 Hellinger distance to the exact posterior Beta(α + n₁, β + n₀) is at most \
                 `hellinger_bound` = min(1, (2Δ̃/ε′)·ln((n + 1)/β) + √E) — the exponential \
                 mechanism's utility theorem (Dwork & Roth, Theorem 3.11) with OPT = 0 and n + 1 \
                 candidates, for the sensitivity Δ̃ (`sensitivity_used`) and the slightly reduced \
                 ε′ the selection runs at; √E covers the float error of the computed distances. 1 \
                 means no information (small ε).",
            ))
            .property(
                "hellinger_bound",
                number().exclusive_minimum(Some(0.0)).maximum(Some(1.0)),
            )
            .property(
                "hellinger_bound_confidence",
                number()
                    .exclusive_minimum(Some(0.0))
                    .exclusive_maximum(Some(1.0)),
            )
            .required("hellinger_bound")
            .required("hellinger_bound_confidence")
            .into(),
    ));
}
