//! The additive baselines as one mechanism over a noise law: exact integer noise per cell on
//! integer counts (`privacy::discrete`, CKS20), the noisy counts projected onto the simplex
//! (`privacy::baseline`). The noise's scale is given (`epsilon` is then an optional cap) or
//! calibrated to `epsilon` at `order`. `gaussian` and `laplace` are this mechanism with their
//! [`Law`] (their own modules), each registered once.

use std::marker::PhantomData;

use serde_json::{json, Map, Value};
use utoipa::openapi::schema::ObjectBuilder;

use crate::privacy::accuracy::{Bounds, Noise};
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
    /// Counts plus the noise, projected to the simplex.
    fn release(counts: &Counts, scale: f64, rng: &mut CsRng) -> Result<Vec<f64>, BaselineError>;
    /// The noise law for the accuracy bounds.
    fn noise(scale: f64) -> Noise;
    /// The search's ends in strength t = −ln(scale) (`Strength::ends`).
    fn ends(s: &Setup) -> (f64, f64);
}

/// An additive baseline with noise law `L`.
pub struct Additive<L>(PhantomData<L>);

/// A noise scale given, or calibrated to a target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Spec {
    Given { scale: f64, cap: Option<Epsilon> },
    Calibrated(Target),
}

/// The draw: integer noise of this scale in every cell.
pub struct NoiseDraw<L> {
    pub scale: f64,
    law: PhantomData<L>,
}

impl<L> NoiseDraw<L> {
    pub fn new(scale: f64) -> Self {
        NoiseDraw {
            scale,
            law: PhantomData,
        }
    }
}

impl<L> Clone for NoiseDraw<L> {
    fn clone(&self) -> Self {
        NoiseDraw::new(self.scale)
    }
}

impl<L> PartialEq for NoiseDraw<L> {
    fn eq(&self, other: &Self) -> bool {
        self.scale == other.scale
    }
}

impl<L: Law> std::fmt::Debug for NoiseDraw<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{} {{ {}: {} }}", L::NAME, L::FIELD, self.scale)
    }
}

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
        L::release(counts, self.scale, rng)
            .map(|y| (y, None))
            .map_err(|e| e.to_string())
    }

    fn forecast(&self, _counts: &Counts) -> Option<VectorForecast> {
        None
    }

    fn bounds(&self, n: f64, d: usize, beta: f64, need: Need) -> Bounds {
        let noise = L::noise(self.scale);
        Bounds {
            l2: if need.l2 { noise.l2(d, n, beta) } else { 0.0 },
            cell_sd: if need.cell_sd {
                noise.cell_sd(d, n)
            } else {
                0.0
            },
        }
    }

    fn feasible(&self, _n: f64, _d: usize, _sens: &Sensitivity) -> Result<(), String> {
        Ok(())
    }

    fn parameters(&self) -> Parameters {
        let mut p = Parameters::new();
        p.insert(L::FIELD.into(), Value::from(self.scale));
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
        targets: &[TargetKind::L2, TargetKind::CellSd],
        auto: true,
        forecast: None,
    };

    /// The scale, when given.
    type Settings = Option<f64>;
    type Spec = Spec;
    type Draw = NoiseDraw<L>;

    fn settings(params: &Params, _ctx: &Context) -> Result<Option<f64>, RequestError> {
        params
            .number(L::FIELD)
            .map(|v| crate::release::mechanism::positive(L::FIELD, v))
            .transpose()
    }

    fn request(
        settings: Option<f64>,
        targeting: &Targeting,
        _input: &Input,
        _ctx: &Context,
    ) -> Result<Spec, RequestError> {
        Ok(match settings {
            Some(scale) => Spec::Given {
                scale,
                cap: targeting.cap(&format!(
                    "with {} given, the mechanism is priced at the ledger order; order does not apply",
                    L::FIELD
                ))?,
            },
            None => Spec::Calibrated(targeting.target(L::NAME).map_err(|_| {
                RequestError::new(
                    "epsilon",
                    format!("the {} mechanism needs {} or epsilon", L::NAME, L::FIELD),
                )
            })?),
        })
    }

    fn aim(spec: &Spec) -> Aim {
        match spec {
            Spec::Given { cap, .. } => Aim::Priced { cap: *cap },
            Spec::Calibrated(t) => Aim::Calibrated(*t),
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
            Spec::Calibrated(t) => {
                let t = grid.unwrap_or(*t);
                L::calibrate(t.order, t.epsilon, sens, d)?
            }
        };
        check_scale(L::FIELD, scale)?;
        Ok(NoiseDraw::new(scale))
    }

    fn record(spec: &Spec, draw: &NoiseDraw<L>) -> Record {
        Record::new(L::NAME)
            .with(L::FIELD, draw.scale)
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
            .property("calibration", schema::component("Calibration"))
            .property("pricing", schema::described("Pricing", L::PRICING))
            .required(L::FIELD)
    }

    fn plannable(_: &Option<f64>, _: &Shape, ctx: &Context) -> Result<(), (&'static str, String)> {
        integer_sensitivity(&ctx.sensitivity)
            .map(|_| ())
            .map_err(|reason| ("mechanism", reason))
    }

    fn at_epsilon(
        settings: &Option<f64>,
        _: &Shape,
        epsilon: Epsilon,
        ledger: Order,
        _: &Cache,
    ) -> Result<Spec, String> {
        Ok(match settings {
            Some(scale) => Spec::Given {
                scale: *scale,
                cap: None,
            },
            None => Spec::Calibrated(Target {
                epsilon,
                order: ledger,
            }),
        })
    }

    fn units_within(_: &Option<f64>, _: &Setup, spend: u64, _: &Cache) -> Option<u64> {
        Some(spend)
    }

    fn strength(
        settings: &Option<f64>,
        s: &Setup,
        _cache: &Cache,
    ) -> Result<Option<Box<dyn Strength<NoiseDraw<L>>>>, String> {
        Ok(match settings {
            Some(_) => None,
            None => Some(Box::new(Scale::<L> {
                s: *s,
                law: PhantomData,
            })),
        })
    }

    fn optimistic(_: &Option<f64>, _: &Setup) -> Option<Box<dyn Optimistic>> {
        None
    }
}

/// The noise scale e^{−t}.
struct Scale<L> {
    s: Setup,
    law: PhantomData<L>,
}

impl<L: Law> Strength<NoiseDraw<L>> for Scale<L> {
    fn params_at(&self, t: f64) -> NoiseDraw<L> {
        NoiseDraw::new((-t).exp())
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
}

/// The noise field's description in a request shape.
pub fn scale_schema(description: &'static str) -> SchemaRef {
    schema::described("PositiveNumber", description)
}
