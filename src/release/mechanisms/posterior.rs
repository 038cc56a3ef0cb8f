//! `posterior`: r fixed (1 by default: a true posterior draw), the prior solved (seed 001
//! Theorem 2, "concentrated sampling"). With a `prior_shape` s the prior is α = m·s and the scale
//! m is solved (seed 004 Algorithm 3); with a `lower_bound` the scale is solved against the price
//! with the effective prior α + rL, and may come out 0 (the bound alone pays for ε).

use serde_json::{Map, Value};
use utoipa::openapi::schema::ObjectBuilder;

use super::family::{self, preview, DirichletDraw, Pricer};
use crate::privacy::bounded::{solve_monotone, CellValues};
use crate::privacy::calibrate::CHARGE_INFLATION;
use crate::privacy::{calibrate, Calibration, Epsilon, Order, Prior, Sensitivity};
use crate::release::input::Input;
use crate::release::mechanism::{
    Aim, Cache, Components, Context, Default, EpsilonUse, FieldSpec, Mechanism, Optimistic, Params,
    PlanError, Properties, Record, RequestError, Setup, Shape, Strength, Supports, Target,
    TargetKind, Targeting, Wire, GRID, MAX_UNITS,
};
use crate::schema::{self, SchemaRef};

/// The default concentration r (001 Theorem 2 with r = 1: the posterior itself).
pub const DEFAULT_R: f64 = 1.0;

pub struct Posterior;

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub r: f64,
    /// The prior's shape s (α = m·s), when given.
    pub shape: Option<CellValues>,
    pub lower: Option<CellValues>,
}

impl Settings {
    /// With a shape or a bound, the scale m is solved against the price; otherwise α by
    /// `privacy::calibrate`.
    fn scaled(&self) -> bool {
        self.shape.is_some() || self.lower.is_some()
    }

    fn shape(&self) -> CellValues {
        self.shape.clone().unwrap_or(CellValues::Uniform(1.0))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub settings: Settings,
    pub target: Target,
}

fn r_schema() -> SchemaRef {
    schema::described("PositiveNumber", "The fixed r (default 1).")
}

fn shape_schema() -> SchemaRef {
    schema::described("NonNegativeCells", "The prior's shape s: α = m·s.")
}

/// α = m·s with m solved (also the preview's `without_bound`, with a zero bound).
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
    let (r, shape) = (settings.r, settings.shape());
    let eps = target.epsilon.get();
    let at = |m: f64| pricer.at(target.order, r, &shape.combine(m, &shape, 0.0, d));
    // m = 0 is Gohari's prior-free draw: used when the bound alone pays for ε.
    let zero = at(0.0);
    let m = if zero.is_finite() && zero * (1.0 + CHARGE_INFLATION) <= eps {
        0.0
    } else {
        solve_monotone(at, false, eps, 1.0)
            .ok_or_else(|| family::infeasible(target, "no prior scale meets the target"))?
    };
    Ok((r, shape.combine(m, &shape, 0.0, d)))
}

impl Mechanism for Posterior {
    const NAME: &'static str = "posterior";
    const SUMMARY: &'static str = "The prior solved with `r` fixed (default 1), calibrated to \
        `epsilon` at `order`. With `prior_shape` s (seed 004 Algorithm 3) the prior is α = m·s \
        and the scale m is solved; without it s = 1. Each cell of s must be > 0, or ≥ 0 where \
        `lower_bound` > 0. With `lower_bound`, m may come out 0 (the bound alone pays for ε). \
        If the prior solved at `order` leaves no guarantee at the ledger order (004 Corollary \
        1: direct sampling is RDP only for λ < 1 + min α/(rΔ∞)), the request is 422 \
        `no-guarantee`.";
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec {
            name: "r",
            wire: Wire::Number,
            planned: true,
            required: false,
            default: Some(Default::Number(DEFAULT_R)),
            description: "The concentration r > 0 of the draw Dir(r·x + α), fixed.",
            schema: r_schema,
        },
        FieldSpec {
            name: "prior_shape",
            wire: Wire::NumberOrNumbers,
            planned: false,
            required: false,
            default: Some(Default::Number(1.0)),
            description: "The prior's shape s (a number, or one per cell): α = m·s with the \
                          scale m solved; > 0 in every cell, ≥ 0 with `lower_bound`.",
            schema: shape_schema,
        },
        family::LOWER_BOUND,
    ];
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
        let shape = params
            .get("prior_shape")
            .map(|s| family::cell_values("prior_shape", s))
            .transpose()?;
        if shape.as_ref().is_some_and(|s| s.min() <= 0.0) && lower.is_none() {
            return Err(RequestError::new(
                "prior_shape",
                "prior_shape must be greater than 0 in every cell (0 is allowed only with lower_bound)",
            ));
        }
        Ok(Settings {
            r: params.positive_or("r", DEFAULT_R)?,
            shape,
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
        if !settings.scaled() {
            let p = calibrate(
                &Calibration::Posterior { r: settings.r },
                target.order,
                target.epsilon,
                sens,
            )?;
            return Ok(DirichletDraw::new(p.r, p.alpha));
        }
        let zero = CellValues::Uniform(0.0);
        let lower = settings.lower.as_ref().unwrap_or(&zero);
        lower.check_dimension(d).map_err(family::parameter)?;
        settings
            .shape()
            .check_dimension(d)
            .map_err(family::parameter)?;
        let (r, alpha) = solve(settings, &target, lower, sens, d)?;
        family::bounded_draw(r, &alpha, &settings.lower, d)
    }

    fn record(spec: &Spec, draw: &DirichletDraw) -> Record {
        let settings = &spec.settings;
        family::record(Self::NAME, draw)
            .with_some("prior_shape", settings.scaled().then(|| settings.shape()))
            .calibrated(&Self::aim(spec))
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

    fn request_schema(shape: ObjectBuilder, _assertions: &mut Vec<Value>) -> ObjectBuilder {
        shape
    }

    fn record_schema(record: ObjectBuilder) -> ObjectBuilder {
        family::record_schema(record)
            .property("calibration", schema::component("Calibration"))
            .property("prior_shape", shape_schema())
            .required("calibration")
    }

    fn plannable(
        settings: &Settings,
        _shape: &Shape,
        _ctx: &Context,
    ) -> Result<(), (&'static str, String)> {
        family::no_lower_bound(&settings.lower)?;
        match settings.shape {
            Some(_) => Err((
                "prior_shape",
                "the planner does not plan a prior_shape (its search runs on a uniform prior)"
                    .into(),
            )),
            None => Ok(()),
        }
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
        Ok(Some(Box::new(Concentrated {
            r: settings.r,
            s: *s,
        })))
    }

    fn optimistic(_: &Settings, _: &Setup) -> Option<Box<dyn Optimistic>> {
        None
    }
}

/// α = pole + e^{−t} with r fixed: more strength, a prior closer to the pole (λ − 1)rΔ∞.
struct Concentrated {
    r: f64,
    s: Setup,
}

impl Concentrated {
    fn pole(&self) -> f64 {
        family::pole_factor(&self.s) * self.r
    }
}

impl Strength<DirichletDraw> for Concentrated {
    fn params_at(&self, t: f64) -> DirichletDraw {
        DirichletDraw::new(self.r, Prior::Uniform(self.pole() + (-t).exp()))
    }

    fn strength(&self, params: &DirichletDraw) -> f64 {
        -(params.alpha.min() - self.pole()).ln()
    }

    fn ends(&self) -> (f64, f64) {
        let lambda = self.s.lambda();
        let l2 = self.s.sens.l2_squared().max(1.0);
        // ε ≈ ½λr²Δ2²/(α − pole) far from the pole; 1e-9 of the pole near it.
        let far = 10.0 * lambda * self.r * self.r * l2 / (2.0 * GRID);
        (-far.ln(), -(self.pole() * 1e-9).ln())
    }

    /// Next to the pole ε* grows only logarithmically, usually far below the ledger's top: the
    /// prior a relative 1e-9 above it (further ε moves the forecast by less than 1e-9).
    fn near_pole(&self) -> Option<(DirichletDraw, f64)> {
        let p = DirichletDraw::new(self.r, Prior::Uniform(self.pole() * (1.0 + 1e-9)));
        let price = family::price_at_ledger(&p, &self.s);
        (price.is_finite() && price < crate::ledger::charge::MAX_EPSILON).then_some((p, price))
    }

    fn request_epsilon(&self, params: &DirichletDraw) -> f64 {
        family::price_at_ledger(params, &self.s)
    }

    fn max_units(&self) -> u64 {
        MAX_UNITS
    }

    /// Its prior shrinks the draw towards uniform as ε falls: docs/PRIVACY.md, "The search".
    fn kl_monotone(&self) -> bool {
        false
    }
}
