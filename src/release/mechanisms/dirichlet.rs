//! `dirichlet`, the default: seed 000 Algorithm 1 with a base prior a₀ — r solved so that the
//! draw costs ε at the target order, α = a₀ + 4(λ − 1)rΔ∞ in every cell (docs/PRIVACY.md,
//! "Calibration"). With a public `lower_bound` the same rule is solved against the price with
//! the effective prior α + rL.

use serde_json::{Map, Value};
use utoipa::openapi::schema::ObjectBuilder;

use super::family::{self, preview, DirichletDraw, Pricer};
use crate::privacy::bounded::CellValues;
use crate::privacy::{calibrate, Calibration, Epsilon, Order, Prior, Sensitivity};
use crate::release::input::Input;
use crate::release::mechanism::{
    Aim, Cache, Components, Context, Default, EpsilonUse, FieldSpec, Mechanism, Optimistic, Params,
    PlanError, Properties, Record, RequestError, Setup, Shape, Strength, Supports, Target,
    TargetKind, Targeting, Wire, GRID, MAX_UNITS,
};
use crate::schema::{self, SchemaRef};
use crate::wire::ScalarOrCells;

/// The default base prior a₀ (000 Algorithm 1 uses 1).
pub const DEFAULT_PRIOR: f64 = 1.0;

pub struct Dirichlet;

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The base prior a₀.
    pub prior: f64,
    pub lower: Option<CellValues>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub settings: Settings,
    pub target: Target,
}

fn prior_schema() -> SchemaRef {
    schema::described(
        "PositiveNumber",
        "The base prior a₀ (default 1): α = a₀ in every cell.",
    )
}

/// α = a₀ + 4(λ − 1)rΔ∞, every cell.
fn alpha_of(prior: f64, order: Order, sens: &Sensitivity, r: f64) -> CellValues {
    CellValues::Uniform(prior + 4.0 * (order.get() - 1.0) * r * sens.linf())
}

/// The bounded calibration (also the preview's `without_bound`, with a zero bound).
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
    let alpha = |r: f64| alpha_of(settings.prior, target.order, sens, r);
    let r = pricer.solve_r(target, alpha, "no concentration r meets the target")?;
    Ok((r, alpha(r)))
}

impl Mechanism for Dirichlet {
    const NAME: &'static str = "dirichlet";
    const SUMMARY: &'static str = "The default mechanism: 000 Algorithm 1 with base prior \
        `prior` (default 1), calibrated to `epsilon` at `order`.";
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec {
            name: "prior",
            wire: Wire::Number,
            planned: true,
            required: false,
            default: Some(Default::Number(DEFAULT_PRIOR)),
            description: "The base prior a₀ > 0: α = a₀ + 4(λ − 1)rΔ∞ in every cell.",
            schema: prior_schema,
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
        let prior = match params.get("prior") {
            None => DEFAULT_PRIOR,
            Some(ScalarOrCells::Scalar(p)) => crate::release::mechanism::positive("prior", *p)?,
            Some(ScalarOrCells::Cells(_)) => {
                return Err(RequestError::new(
                    "prior",
                    "prior must be a number for the dirichlet mechanism",
                ))
            }
        };
        Ok(Settings {
            prior,
            lower: family::lower_bound(params)?,
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
        match &spec.settings.lower {
            None => {
                let p = calibrate(
                    &Calibration::Dirichlet {
                        prior: spec.settings.prior,
                    },
                    target.order,
                    target.epsilon,
                    sens,
                )?;
                Ok(DirichletDraw::new(p.r, p.alpha))
            }
            Some(lower) => {
                lower.check_dimension(d).map_err(family::parameter)?;
                let (r, alpha) = solve(&spec.settings, &target, lower, sens, d)?;
                family::bounded_draw(r, &alpha, &spec.settings.lower, d)
            }
        }
    }

    fn record(spec: &Spec, draw: &DirichletDraw) -> Record {
        family::record(Self::NAME, draw)
            .with("prior", spec.settings.prior)
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
        family::record_schema_with(record, schema::component("Alpha"))
            .property(
                "prior",
                schema::described("PositiveNumber", "The base prior a₀."),
            )
            .property("calibration", schema::component("Calibration"))
            .required("prior")
            .required("calibration")
    }

    fn plannable(
        settings: &Settings,
        _shape: &Shape,
        _ctx: &Context,
    ) -> Result<(), (&'static str, String)> {
        family::no_lower_bound(&settings.lower)
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
        Ok(Some(Box::new(Rule {
            a0: settings.prior,
            s: *s,
        })))
    }

    fn optimistic(_: &Settings, _: &Setup) -> Option<Box<dyn Optimistic>> {
        None
    }
}

/// Algorithm 1's rule along r = eᵗ.
struct Rule {
    a0: f64,
    s: Setup,
}

impl Strength<DirichletDraw> for Rule {
    fn params_at(&self, t: f64) -> DirichletDraw {
        let r = t.exp();
        let a = self.a0 + 4.0 * (self.s.lambda() - 1.0) * r * self.s.sens.linf();
        DirichletDraw::new(r, Prior::Uniform(a))
    }

    fn strength(&self, params: &DirichletDraw) -> f64 {
        params.r.ln()
    }

    fn ends(&self) -> (f64, f64) {
        let (lambda, linf) = (self.s.lambda(), self.s.sens.linf());
        let l2 = self.s.sens.l2_squared().max(1.0);
        // Far out ε ≈ λΔ2²r/(6(λ − 1)Δ∞) (ψ′(z) ≈ 1/z); ten times that r.
        let strong =
            10.0 * crate::ledger::charge::MAX_EPSILON * 6.0 * (lambda - 1.0) * linf / (lambda * l2);
        (
            family::r_at(&self.s, GRID, self.a0).ln(),
            strong.max(1.0).ln(),
        )
    }

    fn near_pole(&self) -> Option<(DirichletDraw, f64)> {
        None
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
