//! `diffuse`: the prior α fixed by the caller, r solved (seed 001 §5, seed 004 Algorithm 2).
//! With a public `lower_bound`, α may be 0 in a cell and r is solved against the price with the
//! effective prior α + rL.

use serde_json::{json, Map, Value};
use utoipa::openapi::schema::ObjectBuilder;

use super::family::{self, preview, DirichletDraw, Pricer};
use crate::privacy::bounded::CellValues;
use crate::privacy::{calibrate, Calibration, Epsilon, Order, Prior, Sensitivity};
use crate::release::input::Input;
use crate::release::mechanism::{
    Aim, Cache, Components, Context, EpsilonUse, FieldSpec, Mechanism, Optimistic, Params,
    PlanError, Properties, Record, RequestError, Setup, Shape, Strength, Supports, Target,
    TargetKind, Targeting, GRID, MAX_UNITS,
};
use crate::schema;

pub struct Diffuse;

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// > 0 in every cell, or ≥ 0 with a bound.
    pub alpha: CellValues,
    pub lower: Option<CellValues>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub settings: Settings,
    pub target: Target,
}

/// r solved for the fixed α (also the preview's `without_bound`, with a zero bound).
fn solve(
    settings: &Settings,
    target: &Target,
    lower: &CellValues,
    sens: &Sensitivity,
    d: usize,
) -> Result<(f64, CellValues), PlanError> {
    let pricer = Pricer {
        lower: lower.clone(),
        sens,
        d,
    };
    let alpha = settings.alpha.clone();
    let r = pricer.solve_r(
        target,
        |_| alpha.clone(),
        "no concentration r meets the target (where alpha is 0, lower_bound must be well above (order − 1)·linf)",
    )?;
    Ok((r, alpha))
}

/// The prior without a bound (validated > 0 in every cell when parsed).
fn prior(alpha: &CellValues) -> Result<Prior, PlanError> {
    alpha
        .to_prior()
        .ok_or_else(|| PlanError::Parameter("alpha must be greater than 0 in every cell".into()))
}

impl Mechanism for Diffuse {
    const NAME: &'static str = "diffuse";
    const SUMMARY: &'static str = "`r` solved with the prior `alpha` fixed, calibrated to \
        `epsilon` at `order`. `alpha` is > 0 in every cell; with `lower_bound` it may be 0 in a \
        cell, and the release is calibrated with the effective prior α + rL.";
    const FIELDS: &'static [FieldSpec] = &[family::ALPHA, family::LOWER_BOUND];
    const TAKES_ORDER: bool = true;
    const EPSILON: EpsilonUse = EpsilonUse::Target;
    const SUPPORTS: Supports = Supports {
        tables: true,
        targets: &[TargetKind::L2, TargetKind::CellSd, TargetKind::Kl],
        auto: true,
        forecast: Some(family::FORECAST),
    };

    type Settings = Settings;
    type Spec = Spec;
    type Draw = DirichletDraw;

    fn settings(params: &Params, _ctx: &Context) -> Result<Settings, RequestError> {
        let lower = family::lower_bound(params)?;
        Ok(Settings {
            alpha: family::fixed_alpha(params, Self::NAME, lower.is_some())?,
            lower,
        })
    }

    fn request(
        settings: Settings,
        targeting: &Targeting,
        _input: &Input,
        _ctx: &Context,
    ) -> Result<Spec, RequestError> {
        Ok(Spec {
            target: targeting.target(Self::NAME)?,
            settings,
        })
    }

    fn aim(spec: &Spec) -> Aim {
        Aim::Calibrated(spec.target)
    }

    fn calibrate(
        spec: &Spec,
        grid: Option<Target>,
        d: usize,
        sens: &Sensitivity,
    ) -> Result<DirichletDraw, PlanError> {
        let target = grid.unwrap_or(spec.target);
        let settings = &spec.settings;
        settings
            .alpha
            .check_dimension(d)
            .map_err(family::parameter)?;
        match &settings.lower {
            None => {
                let p = calibrate(
                    &Calibration::Diffuse {
                        alpha: prior(&settings.alpha)?,
                    },
                    target.order,
                    target.epsilon,
                    sens,
                )?;
                Ok(DirichletDraw::new(p.r, p.alpha))
            }
            Some(lower) => {
                lower.check_dimension(d).map_err(family::parameter)?;
                let (r, alpha) = solve(settings, &target, lower, sens, d)?;
                family::bounded_draw(r, &alpha, &settings.lower, d)
            }
        }
    }

    fn record(spec: &Spec, draw: &DirichletDraw) -> Record {
        family::record(Self::NAME, draw).calibrated(&Self::aim(spec))
    }

    fn preview_extras(
        spec: &Spec,
        draw: &DirichletDraw,
        input: &Input,
        ledger_order: Order,
        sens: &Sensitivity,
        dataset_delta: Option<f64>,
    ) -> Map<String, Value> {
        let d = input.cells();
        let zero = CellValues::Uniform(0.0);
        preview::extras(
            draw,
            || solve(&spec.settings, &spec.target, &zero, sens, d),
            d,
            input,
            ledger_order,
            sens,
            dataset_delta,
        )
    }

    fn preview_schemas(properties: &mut Properties, components: &mut Components) {
        preview::schemas(properties, components);
    }

    fn request_schema(shape: ObjectBuilder, assertions: &mut Vec<Value>) -> ObjectBuilder {
        assertions.push(alpha_positive_unless_bounded());
        shape
    }

    fn record_schema(record: ObjectBuilder) -> ObjectBuilder {
        family::record_schema(record)
            .property("calibration", schema::component("Calibration"))
            .required("calibration")
    }

    fn plannable(
        settings: &Settings,
        shape: &Shape,
        _ctx: &Context,
    ) -> Result<(), (&'static str, String)> {
        family::no_lower_bound(&settings.lower)?;
        settings
            .alpha
            .check_dimension(shape.d)
            .map_err(|e| ("alpha", e.to_string()))
    }

    fn at_epsilon(
        settings: &Settings,
        s: &Setup,
        epsilon: Epsilon,
        _cache: &Cache,
    ) -> Result<Spec, String> {
        Ok(Spec {
            settings: settings.clone(),
            target: Target {
                epsilon,
                order: s.order,
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
    ) -> Result<Option<Box<dyn Strength<DirichletDraw>>>, String> {
        let alpha = prior(&settings.alpha).map_err(|e| e.to_string())?;
        Ok(Some(Box::new(Scaled { alpha, s: *s })))
    }

    fn optimistic(_: &Settings, _: &Setup) -> Option<Box<dyn Optimistic>> {
        None
    }
}

/// Without a bound, a prior must be > 0 in every cell.
pub fn alpha_positive_unless_bounded() -> Value {
    json!({
        "if": {"not": {"required": ["lower_bound"]}},
        "then": {"properties": {"alpha": {"$ref": "#/components/schemas/Alpha"}}}
    })
}

/// r = pole/(1 + e^{−t}) with α fixed: more strength, r closer to the pole α/((λ − 1)Δ∞).
struct Scaled {
    alpha: Prior,
    s: Setup,
}

impl Scaled {
    fn pole(&self) -> f64 {
        family::worst_alpha(&self.alpha, &self.s) / family::pole_factor(&self.s)
    }
}

impl Strength<DirichletDraw> for Scaled {
    fn params_at(&self, t: f64) -> DirichletDraw {
        DirichletDraw::new(self.pole() / (1.0 + (-t).exp()), self.alpha.clone())
    }

    fn strength(&self, params: &DirichletDraw) -> f64 {
        (params.r / (self.pole() - params.r)).ln()
    }

    fn ends(&self) -> (f64, f64) {
        let pole = self.pole();
        let r = family::r_at(&self.s, GRID, self.alpha.min()).min(0.5 * pole);
        ((r / (pole - r)).ln(), 1e9f64.ln())
    }

    /// r a relative 1e-9 short of the pole (see `posterior`'s).
    fn near_pole(&self) -> Option<(DirichletDraw, f64)> {
        let p = DirichletDraw::new(self.pole() * (1.0 - 1e-9), self.alpha.clone());
        let price = family::price_at_ledger(&p, &self.s);
        (price.is_finite() && price < crate::ledger::charge::MAX_EPSILON).then_some((p, price))
    }

    fn request_epsilon(&self, params: &DirichletDraw) -> f64 {
        family::price_at_ledger(params, &self.s)
    }

    fn max_units(&self) -> u64 {
        MAX_UNITS
    }

    fn kl_monotone(&self) -> bool {
        true
    }
}
