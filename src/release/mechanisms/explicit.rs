//! `explicit`: r and α given (chosen elsewhere), only priced at the ledger order; `epsilon` is
//! an optional cap. With a `lower_bound`, α may be 0 in a cell and the release is priced with
//! α + rL: `alpha: 0` everywhere is Gohari et al.'s prior-free mechanism (seed 003).

use serde_json::{Map, Value};
use utoipa::openapi::schema::ObjectBuilder;

use super::family::{self, preview, DirichletDraw};
use crate::privacy::bounded::CellValues;
use crate::privacy::{Epsilon, Order, Sensitivity};
use crate::release::input::Input;
use crate::release::mechanism::{
    Aim, Cache, Components, Context, EpsilonUse, FieldSpec, ForecastKind, Mechanism, Optimistic,
    Params, PlanError, Properties, Record, RequestError, Setup, Shape, Strength, Supports, Target,
    TargetKind, Targeting, Wire,
};
use crate::schema::{self, SchemaRef};

pub struct Explicit;

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub r: f64,
    pub alpha: CellValues,
    pub lower: Option<CellValues>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub settings: Settings,
    pub cap: Option<Epsilon>,
}

fn r_schema() -> SchemaRef {
    schema::described("PositiveNumber", "The r of the draw Dir(r·x + α).")
}

impl Mechanism for Explicit {
    const NAME: &'static str = "explicit";
    const SUMMARY: &'static str = "`r` and `alpha` given and only priced, at the ledger order; \
        `epsilon` is an optional cap. `alpha` is > 0 in every cell; with `lower_bound` it may be \
        0 in a cell (α + rL must be > 0 in every cell) and the release is priced with α + rL: \
        `alpha: 0` is Gohari et al.'s prior-free mechanism.";
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec {
            name: "r",
            wire: Wire::Number,
            required: true,
            default: None,
            description: "The concentration r > 0 of the draw Dir(r·x + α).",
            schema: r_schema,
        },
        family::ALPHA,
        family::LOWER_BOUND,
    ];
    const TAKES_ORDER: bool = false;
    const EPSILON: EpsilonUse = EpsilonUse::Cap;
    const SUPPORTS: Supports = Supports {
        tables: true,
        targets: &[TargetKind::L2, TargetKind::CellSd, TargetKind::Kl],
        // Its parameters are given: `"auto"` has nothing to choose.
        auto: false,
        forecast: Some(ForecastKind::Dirichlet),
    };

    type Settings = Settings;
    type Spec = Spec;
    type Draw = DirichletDraw;

    fn settings(params: &Params, _ctx: &Context) -> Result<Settings, RequestError> {
        let r = params.positive("r", Self::NAME)?;
        let lower = family::lower_bound(params)?;
        Ok(Settings {
            r,
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
            cap: targeting.cap(
                "the explicit mechanism is priced at the ledger order; order does not apply",
            )?,
            settings,
        })
    }

    fn aim(spec: &Spec) -> Aim {
        Aim::Priced { cap: spec.cap }
    }

    fn calibrate(
        spec: &Spec,
        _grid: Option<Target>,
        d: usize,
        _sens: &Sensitivity,
    ) -> Result<DirichletDraw, PlanError> {
        let s = &spec.settings;
        s.alpha.check_dimension(d).map_err(family::parameter)?;
        if let Some(lower) = &s.lower {
            lower.check_dimension(d).map_err(family::parameter)?;
        }
        family::bounded_draw(s.r, &s.alpha, &s.lower, d)
    }

    fn record(_spec: &Spec, draw: &DirichletDraw) -> Record {
        family::record(Self::NAME, draw)
    }

    fn preview_extras(
        spec: &Spec,
        draw: &DirichletDraw,
        input: &Input,
        ledger_order: Order,
        sens: &Sensitivity,
        dataset_delta: Option<f64>,
    ) -> Map<String, Value> {
        let s = &spec.settings;
        preview::extras(
            draw,
            || Ok((s.r, s.alpha.clone())),
            input.cells(),
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
        assertions.push(super::diffuse::alpha_positive_unless_bounded());
        shape
    }

    fn record_schema(record: ObjectBuilder) -> ObjectBuilder {
        family::record_schema_with(record, schema::component("NonNegativeCells"))
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

    /// Nothing to calibrate: the parameters given, uncapped (the plan reports their cost).
    fn at_epsilon(settings: &Settings, _: &Setup, _: Epsilon, _: &Cache) -> Result<Spec, String> {
        Ok(Spec {
            settings: settings.clone(),
            cap: None,
        })
    }

    fn units_within(_: &Settings, _: &Setup, spend: u64, _: &Cache) -> Option<u64> {
        Some(spend)
    }

    fn strength(
        _: &Settings,
        _: &Setup,
        _: &Cache,
    ) -> Result<Option<Box<dyn Strength<DirichletDraw>>>, String> {
        Ok(None)
    }

    fn optimistic(_: &Settings, _: &Setup) -> Option<Box<dyn Optimistic>> {
        None
    }
}
