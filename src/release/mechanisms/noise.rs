//! The additive baselines as one mechanism over a noise law: exact integer noise per cell on
//! integer counts (`privacy::discrete`, CKS20), the noisy counts projected onto the simplex
//! (`privacy::baseline`) — or, with a public pseudo-count `smoothing` k, y = (max(z, 0) + k)/Σ,
//! whose every cell is positive so that its KL divergence to x/n is finite (post-processing:
//! free). The noise's scale is given (`epsilon` is then an optional cap) or calibrated to
//! `epsilon` at `order`. `gaussian` and `laplace` are this mechanism with their [`Law`] (their
//! own modules), each registered once.

use std::marker::PhantomData;

use serde_json::{json, Map, Value};
use utoipa::openapi::schema::ObjectBuilder;

use crate::privacy::accuracy::{Bounds, Noise, NoiseTail, MAX_CELL_SD, MAX_L2};
use crate::privacy::baseline::{self, BaselineError};
use crate::privacy::curve::Pricing;
use crate::privacy::discrete::{integer_sensitivity, MAX_NOISE_SCALE};
use crate::privacy::sampler::CsRng;
use crate::privacy::{CalibrationError, Counts, Epsilon, Order, Sensitivity};
use crate::release::input::Input;
use crate::release::mechanism::{
    Aim, Cache, Components, Context, Draw, Drawn, EpsilonUse, FieldSpec, Mechanism, Need,
    Optimistic, Parameters, Params, PlanError, Properties, Record, RequestError, Setup, Shape,
    Strength, Supports, Target, TargetKind, Targeting, VectorForecast, MAX_UNITS,
};
use crate::schema::{self, SchemaRef};

/// What distinguishes one additive baseline from another.
pub trait Law: 'static + Send + Sync {
    const NAME: &'static str;
    const SUMMARY: &'static str;
    /// The noise's own field (`sigma`, `scale`).
    const FIELD: &'static str;
    /// Its fields: the noise field first.
    const FIELDS: &'static [FieldSpec];
    /// What `pricing` means for it (its record schema).
    const PRICING: &'static str;

    /// The noise scale whose price at `order` is ε (the calibration contract of
    /// `privacy::calibrate`).
    fn calibrate(
        order: Order,
        epsilon: Epsilon,
        sens: &Sensitivity,
        d: usize,
    ) -> Result<f64, CalibrationError>;
    /// Its RDP at `order` for a noise scale.
    fn rdp(order: Order, scale: f64, sens: &Sensitivity, d: usize) -> f64;
    fn pricing(order: Order, sens: &Sensitivity) -> Pricing;
    /// Counts plus the noise: the noisy integer counts.
    fn noisy(counts: &Counts, scale: f64, rng: &mut CsRng) -> Result<Vec<i64>, BaselineError>;
    /// The noise law's moments and tails, for the accuracy bounds.
    type Tail: NoiseTail;
    /// The law at a scale (None unless the scale is finite and positive).
    fn tail(scale: f64) -> Option<Self::Tail>;
    /// The search's ends in strength t = −ln(scale) (`Strength::ends`).
    fn ends(s: &Setup) -> (f64, f64);
}

/// An additive baseline with noise law `L`.
pub struct Additive<L>(PhantomData<L>);

/// The mechanism's own fields: the noise scale and the pseudo-count, when given.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Settings {
    pub scale: Option<f64>,
    pub smoothing: Option<f64>,
}

/// How the output is post-processed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Smoothing {
    /// Projected onto the simplex (the ℓ2-closest distribution).
    Projected,
    /// Smoothed with this pseudo-count.
    Given(f64),
    /// Smoothed with the pseudo-count that minimises the KL bound for a total n at confidence
    /// 1 − β (the planner's choice for a KL target: public inputs only).
    Planned { n: f64, beta: f64 },
}

/// A noise scale given, or calibrated to a target; and the post-processing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Spec {
    Given {
        scale: f64,
        cap: Option<Epsilon>,
        smoothing: Smoothing,
    },
    Calibrated {
        target: Target,
        smoothing: Smoothing,
    },
}

impl Spec {
    fn smoothing(&self) -> Smoothing {
        match self {
            Spec::Given { smoothing, .. } | Spec::Calibrated { smoothing, .. } => *smoothing,
        }
    }
}

/// The draw: integer noise of this scale in every cell, and the pseudo-count of a smoothed
/// output.
pub struct NoiseDraw<L> {
    pub scale: f64,
    pub smoothing: Option<f64>,
    law: PhantomData<L>,
}

impl<L> NoiseDraw<L> {
    pub fn new(scale: f64) -> Self {
        NoiseDraw::smoothed(scale, None)
    }

    pub fn smoothed(scale: f64, smoothing: Option<f64>) -> Self {
        NoiseDraw {
            scale,
            smoothing,
            law: PhantomData,
        }
    }
}

impl<L> Clone for NoiseDraw<L> {
    fn clone(&self) -> Self {
        NoiseDraw::smoothed(self.scale, self.smoothing)
    }
}

impl<L> PartialEq for NoiseDraw<L> {
    fn eq(&self, other: &Self) -> bool {
        self.scale == other.scale && self.smoothing == other.smoothing
    }
}

impl<L: Law> std::fmt::Debug for NoiseDraw<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "{} {{ {}: {}, smoothing: {:?} }}",
            L::NAME,
            L::FIELD,
            self.scale,
            self.smoothing
        )
    }
}

/// The pseudo-count of a smoothed draw of `scale` over d cells.
fn pseudo_count<L: Law>(smoothing: Smoothing, scale: f64, d: usize) -> Option<f64> {
    match smoothing {
        Smoothing::Projected => None,
        Smoothing::Given(k) => Some(k),
        Smoothing::Planned { n, beta } => {
            Some(Noise::new(L::tail(scale)).best_smoothing(d, n, beta))
        }
    }
}

fn smoothing_schema() -> SchemaRef {
    schema::described(
        "PositiveNumber",
        "A public pseudo-count k: the output is (max(z, 0) + k)/Σ instead of the projection, \
         every cell positive (post-processing, free). Makes the KL divergence to x/n finite; \
         the planner chooses it for a `kl` target.",
    )
}

/// `smoothing`, a field of every additive law.
pub const SMOOTHING: FieldSpec = FieldSpec {
    name: "smoothing",
    wire: crate::release::mechanism::Wire::Number,
    planned: true,
    required: false,
    default: None,
    description: "A public pseudo-count k > 0: the output is (max(z, 0) + k)/Σ, every cell \
                  positive (post-processing, free of privacy cost), instead of the projection onto \
                  the simplex. Makes D_KL(x/n ‖ y) finite; the planner chooses k for a `kl` \
                  target when it is absent.",
    schema: smoothing_schema,
};

/// The discrete samplers take noise scales up to 2⁵² (`discrete::MAX_NOISE_SCALE`); beyond
/// that the noise is ~4.5e15, larger than any count the API admits.
fn check_scale(name: &str, value: f64) -> Result<(), PlanError> {
    if value <= MAX_NOISE_SCALE {
        Ok(())
    } else {
        Err(PlanError::Parameter(format!(
            "the {name} this release needs ({value:e}) is above 2^52, the largest noise scale the gaussian and laplace mechanisms support; ask for a larger epsilon or a smaller {name}"
        )))
    }
}

impl<L: Law> Draw for NoiseDraw<L> {
    fn price(&self, order: Order, sens: &Sensitivity, d: usize) -> (f64, Pricing) {
        (L::rdp(order, self.scale, sens, d), L::pricing(order, sens))
    }

    fn max_order(&self, _sens: &Sensitivity) -> f64 {
        f64::INFINITY
    }

    /// Integer counts only: the noise is discrete (the error names the cell, never its value).
    fn check(&self, counts: &Counts, _sens: &Sensitivity) -> Result<(), PlanError> {
        baseline::integer_counts(counts)
            .map(|_| ())
            .map_err(|e| PlanError::Parameter(e.to_string()))
    }

    fn sample(&self, counts: &Counts, rng: &mut CsRng) -> Result<Drawn, String> {
        let z = L::noisy(counts, self.scale, rng).map_err(|e| e.to_string())?;
        let y = match self.smoothing {
            None => baseline::project_to_simplex(&z),
            Some(k) => baseline::smooth(&z, k),
        };
        Ok((y, None))
    }

    fn forecast(&self, _counts: &Counts) -> Option<VectorForecast> {
        None
    }

    /// The projected release's ℓ2 and cell bounds (its zeros leave KL unbounded); a smoothed
    /// release's KL bound (`Noise::smoothed_kl`), and no ℓ2 or cell claim for it.
    fn bounds(&self, n: f64, d: usize, beta: f64, need: Need) -> Bounds {
        let noise = Noise::new(L::tail(self.scale));
        match self.smoothing {
            None => Bounds {
                l2: if need.l2 { noise.l2(d, n, beta) } else { 0.0 },
                cell_sd: if need.cell_sd {
                    noise.cell_sd(d, n)
                } else {
                    0.0
                },
                kl: f64::INFINITY,
            },
            Some(k) => Bounds {
                l2: MAX_L2,
                cell_sd: MAX_CELL_SD,
                kl: if need.kl {
                    noise.smoothed_kl(d, n, beta, k)
                } else {
                    0.0
                },
            },
        }
    }

    fn feasible(&self, _n: f64, _d: usize, _sens: &Sensitivity) -> Result<(), String> {
        Ok(())
    }

    fn parameters(&self) -> Parameters {
        let mut p = Parameters::new();
        p.insert(L::FIELD.into(), Value::from(self.scale));
        if let Some(k) = self.smoothing {
            p.insert("smoothing".into(), Value::from(k));
        }
        p
    }
}

impl<L: Law> Mechanism for Additive<L> {
    const NAME: &'static str = L::NAME;
    const SUMMARY: &'static str = L::SUMMARY;
    const FIELDS: &'static [FieldSpec] = L::FIELDS;
    const TAKES_ORDER: bool = true;
    const EPSILON: EpsilonUse = EpsilonUse::TargetUnless(L::FIELD);
    const SUPPORTS: Supports = Supports {
        tables: true,
        targets: &[TargetKind::L2, TargetKind::CellSd, TargetKind::Kl],
        auto: true,
        forecast: None,
    };

    type Settings = Settings;
    type Spec = Spec;
    type Draw = NoiseDraw<L>;

    fn settings(params: &Params, _ctx: &Context) -> Result<Settings, RequestError> {
        let positive = |name: &'static str| {
            params
                .number(name)
                .map(|v| crate::release::mechanism::positive(name, v))
                .transpose()
        };
        Ok(Settings {
            scale: positive(L::FIELD)?,
            smoothing: positive("smoothing")?,
        })
    }

    fn request(
        settings: Settings,
        targeting: &Targeting,
        _input: &Input,
        _ctx: &Context,
    ) -> Result<Spec, RequestError> {
        let smoothing = settings
            .smoothing
            .map_or(Smoothing::Projected, Smoothing::Given);
        Ok(match settings.scale {
            Some(scale) => Spec::Given {
                scale,
                cap: targeting.cap(&format!(
                    "with {} given, the mechanism is priced at the ledger order; order does not apply",
                    L::FIELD
                ))?,
                smoothing,
            },
            None => Spec::Calibrated {
                target: targeting.target(L::NAME).map_err(|_| {
                    RequestError::new(
                        "epsilon",
                        format!("the {} mechanism needs {} or epsilon", L::NAME, L::FIELD),
                    )
                })?,
                smoothing,
            },
        })
    }

    fn aim(spec: &Spec) -> Aim {
        match spec {
            Spec::Given { cap, .. } => Aim::Priced { cap: *cap },
            Spec::Calibrated { target, .. } => Aim::Calibrated(*target),
        }
    }

    fn calibrate(
        spec: &Spec,
        grid: Option<Target>,
        d: usize,
        sens: &Sensitivity,
    ) -> Result<NoiseDraw<L>, PlanError> {
        integer_sensitivity(sens).map_err(PlanError::Parameter)?;
        let scale = match spec {
            Spec::Given { scale, .. } => *scale,
            Spec::Calibrated { target, .. } => {
                let t = grid.unwrap_or(*target);
                L::calibrate(t.order, t.epsilon, sens, d)?
            }
        };
        check_scale(L::FIELD, scale)?;
        Ok(NoiseDraw::smoothed(
            scale,
            pseudo_count::<L>(spec.smoothing(), scale, d),
        ))
    }

    fn record(spec: &Spec, draw: &NoiseDraw<L>) -> Record {
        Record::new(L::NAME)
            .with(L::FIELD, draw.scale)
            .with_some("smoothing", draw.smoothing)
            .calibrated(&Self::aim(spec))
    }

    fn preview_extras(
        _: &Spec,
        _: &NoiseDraw<L>,
        _: &Input,
        _: Order,
        _: &Sensitivity,
        _: Option<f64>,
    ) -> Map<String, Value> {
        Map::new()
    }

    fn preview_schemas(_: &mut Properties, _: &mut Components) {}

    /// `sigma`/`scale` given: priced at the ledger order (no `order`); else calibrated (needs
    /// `epsilon`).
    fn request_schema(shape: ObjectBuilder, assertions: &mut Vec<Value>) -> ObjectBuilder {
        assertions.push(json!({
            "if": {"required": [L::FIELD]},
            "then": {"not": {"required": ["order"]}},
            "else": {"required": ["epsilon"]}
        }));
        shape
    }

    fn record_schema(record: ObjectBuilder) -> ObjectBuilder {
        record
            .property(L::FIELD, schema::component("PositiveNumber"))
            .property(
                "smoothing",
                schema::described("PositiveNumber", "The pseudo-count of a smoothed output."),
            )
            .property("calibration", schema::component("Calibration"))
            .property("pricing", schema::described("Pricing", L::PRICING))
            .required(L::FIELD)
    }

    fn plannable(_: &Settings, _: &Shape, ctx: &Context) -> Result<(), (&'static str, String)> {
        integer_sensitivity(&ctx.sensitivity)
            .map(|_| ())
            .map_err(|reason| ("mechanism", reason))
    }

    /// A KL target with no `smoothing` given: the output smoothed with the pseudo-count the
    /// KL bound prefers at this total and confidence.
    fn at_epsilon(
        settings: &Settings,
        s: &Setup,
        epsilon: Epsilon,
        _: &Cache,
    ) -> Result<Spec, String> {
        let smoothing = planned_smoothing(settings, s);
        Ok(match settings.scale {
            Some(scale) => Spec::Given {
                scale,
                cap: None,
                smoothing,
            },
            None => Spec::Calibrated {
                target: Target {
                    epsilon,
                    order: s.order,
                },
                smoothing,
            },
        })
    }

    fn units_within(_: &Settings, _: &Setup, spend: u64, _: &Cache) -> Option<u64> {
        Some(spend)
    }

    fn strength(
        settings: &Settings,
        s: &Setup,
        _cache: &Cache,
    ) -> Result<Option<Box<dyn Strength<NoiseDraw<L>>>>, String> {
        Ok(match settings.scale {
            Some(_) => None,
            None => Some(Box::new(Scale::<L> {
                s: *s,
                smoothing: planned_smoothing(settings, s),
                law: PhantomData,
            })),
        })
    }

    fn optimistic(_: &Settings, _: &Setup) -> Option<Box<dyn Optimistic>> {
        None
    }
}

/// The post-processing a plan runs: the `smoothing` given, or for a KL target one chosen for
/// the item's total and confidence, else the projection.
fn planned_smoothing(settings: &Settings, s: &Setup) -> Smoothing {
    match settings.smoothing {
        Some(k) => Smoothing::Given(k),
        None if s.kl_target => Smoothing::Planned {
            n: s.shape.n,
            beta: s.beta,
        },
        None => Smoothing::Projected,
    }
}

/// The noise scale e^{−t} (with the pseudo-count it plans for that scale).
struct Scale<L> {
    s: Setup,
    smoothing: Smoothing,
    law: PhantomData<L>,
}

impl<L: Law> Strength<NoiseDraw<L>> for Scale<L> {
    fn params_at(&self, t: f64) -> NoiseDraw<L> {
        let scale = (-t).exp();
        NoiseDraw::smoothed(
            scale,
            pseudo_count::<L>(self.smoothing, scale, self.s.shape.d),
        )
    }

    fn strength(&self, params: &NoiseDraw<L>) -> f64 {
        -params.scale.ln()
    }

    fn ends(&self) -> (f64, f64) {
        L::ends(&self.s)
    }

    fn near_pole(&self) -> Option<(NoiseDraw<L>, f64)> {
        None
    }

    fn request_epsilon(&self, params: &NoiseDraw<L>) -> f64 {
        params.price(self.s.order, &self.s.sens, self.s.shape.d).0
    }

    fn max_units(&self) -> u64 {
        MAX_UNITS
    }

    fn kl_monotone(&self) -> bool {
        true
    }
}

/// The noise field's description in a request shape.
pub fn scale_schema(description: &'static str) -> SchemaRef {
    schema::described("PositiveNumber", description)
}
