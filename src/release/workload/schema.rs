//! The planner in openapi.yaml: `PlanRequest` (the items, each a shape, a public total, a
//! mechanism or `auto`, and ε or an accuracy target) and `Plan` (the answer). Like the release
//! request's (`super::super::request::schema`), the parser is the authority and these shapes
//! describe it; tests/it/openapi.rs checks live answers against them.

use std::borrow::Cow;

use serde_json::json;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use super::{PlanAnswer, PlanRequest, MAX_PLAN_ITEMS, MAX_TOTAL};
use crate::release::mechanisms::Kind;
use crate::schema::{self, SchemaRef};

fn mechanism_names() -> Vec<&'static str> {
    Kind::ALL.iter().map(|k| k.name()).collect()
}

fn forecast() -> SchemaRef {
    schema::closed()
        .description(Some(
            "The worst-case forecast: for every count vector with the item's total (or any \
             larger total, for `n_lower_bound`), per row for a table.",
        ))
        .property(
            "l2",
            schema::number()
                .minimum(Some(0.0))
                .description(Some("‖y − x/n‖₂ ≤ l2 with probability ≥ `confidence`.")),
        )
        .property(
            "confidence",
            schema::number()
                .minimum(Some(0.5))
                .exclusive_maximum(Some(1.0)),
        )
        .property(
            "cell_sd",
            schema::number().minimum(Some(0.0)).description(Some(
                "Every output cell's root-mean-square deviation from the truth, \
                 √E[(yᵢ − xᵢ/n)²], is at most this (so is its standard deviation).",
            )),
        )
        .property(
            "kl",
            schema::number().minimum(Some(0.0)).description(Some(
                "D_KL(x/n ‖ y) ≤ kl with probability ≥ `confidence`; absent where no bound is \
                 proven (the projected `gaussian` and `laplace`, whose zero cells leave it \
                 unbounded, and `exponential`).",
            )),
        )
        .required("l2")
        .required("confidence")
        .required("cell_sd")
        .into()
}

fn shortfall() -> SchemaRef {
    schema::closed()
        .description(Some(
            "Why the target is out of reach, and what would reach it.",
        ))
        .property(
            "max_epsilon",
            schema::above(0.0).description(Some(
                "The largest ε the mechanism is planned at: the ledger's maximum (8192) or, for \
                 a mechanism with a pole (`posterior`, `diffuse`), where more ε no longer buys \
                 accuracy.",
            )),
        )
        .property(
            "best",
            schema::described("AccuracyForecast", "The forecast at `max_epsilon`."),
        )
        .property(
            "min_n",
            schema::number().minimum(Some(0.0)).description(Some(
                "The smallest public total at which `max_epsilon` meets the target; absent when \
                 none up to 2⁵³ does, and for `exponential`.",
            )),
        )
        .required("max_epsilon")
        .required("best")
        .into()
}

fn values() -> SchemaRef {
    schema::one_of([
        schema::number().into(),
        schema::array(schema::number()).min_items(Some(2)).into(),
    ])
    .description(Some("One number (every cell) or one per cell."))
    .into()
}

/// Open: each mechanism's draw names its own parameters (`Draw::parameters`).
fn parameters() -> SchemaRef {
    schema::object()
        .description(Some(
            "The calibrated parameters a release at the planned ε would run with, named as in              the mechanism's record (`r` and `alpha` for the Dirichlet family, `sigma`, `scale`,              the exponential mechanism's Beta `prior` [α, β]...): each a number, or an array              of numbers (one per cell, or a pair).",
        ))
        .additional_properties(Some(utoipa::openapi::schema::AdditionalProperties::RefOr(
            values(),
        )))
        .into()
}

fn candidate() -> SchemaRef {
    schema::closed()
        .description(Some("One mechanism as the planner saw it."))
        .property("mechanism", schema::component("MechanismName"))
        .property(
            "status",
            schema::string()
                .enum_values(Some([
                    "chosen",
                    "planned",
                    "unreachable",
                    "not_applicable",
                    "outranked",
                ]))
                .description(Some(
                    "`chosen` (its `epsilon` and `cost` are the item's), `planned` (meets the \
                     target, not chosen), `unreachable`, `not_applicable` (`reason` says why), \
                     `outranked` (ruled out by a lower bound on its cost before its exact plan).",
                )),
        )
        .property(
            "estimated_cost",
            schema::number().minimum(Some(0.0)).description(Some(
                "The price of the continuous optimum before grid rounding (what `auto` ranks \
                 by); with `epsilon` given, its cost.",
            )),
        )
        .property("forecast", schema::component("AccuracyForecast"))
        .property("shortfall", schema::component("Shortfall"))
        .property("reason", schema::string())
        .required("mechanism")
        .required("status")
        .into()
}

fn item_answer() -> SchemaRef {
    schema::closed()
        .description(Some(
            "The answer for one item: the mechanism chosen with its ε, cost, parameters and \
             forecast; or, when nothing reaches the target, the mechanism that comes closest \
             with its `shortfall`.",
        ))
        .property(
            "status",
            schema::string().enum_values(Some(["planned", "unreachable"])),
        )
        .property("mechanism", schema::component("MechanismName"))
        .property(
            "epsilon",
            schema::above(0.0).description(Some(
                "The `epsilon` to send in the release request (a ledger-grid value).",
            )),
        )
        .property(
            "cost",
            schema::between(0.0, 8192.0).description(Some(
                "What the release would be charged at the ledger order.",
            )),
        )
        .property("parameters", schema::component("PlanParameters"))
        .property("forecast", schema::component("AccuracyForecast"))
        .property("shortfall", schema::component("Shortfall"))
        .property(
            "candidates",
            schema::array(schema::component("PlanCandidate"))
                .description(Some("Every mechanism considered, in the tie-break order.")),
        )
        .required("status")
        .required("candidates")
        .into()
}

fn target() -> SchemaRef {
    schema::asserting(
        schema::closed()
            .description(Some(
                "The accuracy to reach: at least one of `l2` (at `confidence`) and `cell_sd`.",
            ))
            .property(
                "l2",
                schema::above(0.0).description(Some(
                    "‖y − x/n‖₂ ≤ l2 with probability ≥ `confidence`, for every count vector of \
                     the total.",
                )),
            )
            .property(
                "confidence",
                schema::number()
                    .minimum(Some(0.5))
                    .exclusive_maximum(Some(1.0))
                    .default(Some(json!(0.95)))
                    .description(Some(
                        "The probability of the `l2` and `kl` bounds (only with one of them).",
                    )),
            )
            .property(
                "cell_sd",
                schema::above(0.0).description(Some(
                    "Every output cell's root-mean-square deviation from the truth, \
                     √E[(yᵢ − xᵢ/n)²], at most this.",
                )),
            )
            .property(
                "kl",
                schema::above(0.0).description(Some(
                    "D_KL(x/n ‖ y) ≤ kl with probability ≥ `confidence`, for every count vector \
                     of the total: the divergence the Dirichlet mechanism minimises (a \
                     likelihood's, a classifier's cross-entropy). The `gaussian` and `laplace` \
                     baselines meet it only smoothed (their `smoothing`, chosen by the planner \
                     when absent).",
                )),
            ),
        [json!({
            "anyOf": [{"required": ["l2"]}, {"required": ["cell_sd"]}, {"required": ["kl"]}],
            "if": {"required": ["confidence"]},
            "then": {"anyOf": [{"required": ["l2"]}, {"required": ["kl"]}]}
        })],
    )
    .into()
}

fn item() -> SchemaRef {
    let mut names = vec!["auto"];
    names.extend(mechanism_names());
    let item = schema::closed()
        .description(Some(
            "One planned release: `d` cells (per row, with `rows` for a table of disjoint \
                 groups); the public total `n` or a public `n_lower_bound` of it (per row for a \
                 table) — public because choosing ε from the private counts would itself leak; \
                 a mechanism (default `auto`: every one that applies, the cheapest meeting the \
                 target); and either `epsilon` or a `target`. The mechanisms' own fields \
                 (`prior`, `r`, `alpha`, `smoothing`…: `GET /v1/mechanisms`) are as in a release \
                 request; each mechanism reads those it takes.",
        ))
        .property("d", schema::integer().minimum(Some(2.0)))
        .property("rows", schema::integer().minimum(Some(1.0)))
        .property(
            "n",
            schema::number()
                .minimum(Some(0.0))
                .exclusive_maximum(Some(MAX_TOTAL))
                .description(Some("The public total (per row for a table).")),
        )
        .property(
            "n_lower_bound",
            schema::number()
                .minimum(Some(0.0))
                .exclusive_maximum(Some(MAX_TOTAL))
                .description(Some(
                    "A public lower bound of the total (per row for a table).",
                )),
        )
        .property(
            "mechanism",
            schema::string()
                .enum_values(Some(names))
                .default(Some(json!("auto"))),
        )
        .property(
            "epsilon",
            schema::described(
                "PositiveNumber",
                "Plan at this ε (RDP at the ledger order) instead of a target.",
            ),
        )
        .property("target", schema::component("AccuracyTarget"))
        .required("d");
    let item = crate::release::mechanisms::field_schemas()
        .into_iter()
        .fold(item, |item, (name, schema)| item.property(name, schema));
    schema::asserting(
        item,
        [
            schema::exactly_one_of("n", "n_lower_bound"),
            schema::exactly_one_of("epsilon", "target"),
        ],
    )
    .into()
}

impl PartialSchema for PlanRequest {
    fn schema() -> RefOr<Schema> {
        schema::closed()
            .description(Some(
                "The releases one intends to make, from public inputs only: no counts are sent, \
                 and nothing is charged.",
            ))
            .property(
                "items",
                schema::array(schema::component("PlanItem"))
                    .min_items(Some(1))
                    .max_items(Some(MAX_PLAN_ITEMS)),
            )
            .required("items")
            .into()
    }
}

impl ToSchema for PlanRequest {
    fn name() -> Cow<'static, str> {
        "PlanRequest".into()
    }

    fn schemas(schemas: &mut Vec<(String, SchemaRef)>) {
        schemas.push(("PlanItem".into(), item()));
        schemas.push(("AccuracyTarget".into(), target()));
    }
}

impl PartialSchema for PlanAnswer {
    fn schema() -> RefOr<Schema> {
        schema::closed()
            .description(Some(
                "The plan: per item, the mechanism, the cheapest ε on the ledger grid that meets \
                 the target, the calibrated parameters and the forecast; for the whole list, the \
                 cost and whether it fits what the caller may still spend.",
            ))
            .property(
                "order",
                schema::above(1.0).description(Some(
                    "The dataset's ledger order λ₀, at which every cost is charged.",
                )),
            )
            .property("items", schema::array(schema::component("PlannedItem")))
            .property(
                "total_cost",
                schema::between(0.0, 8192.0 * MAX_PLAN_ITEMS as f64).description(Some(
                    "The sum of the planned items' costs: what the releases would be charged, \
                     exact on the ledger grid. Each cost is at most the ledger's maximum (8192), \
                     the sum of many may exceed it (and `fits` is then false).",
                )),
            )
            .property(
                "remaining",
                schema::between(0.0, 8192.0).description(Some(
                    "What the caller may still spend on the dataset: its remaining budget, or \
                     less under the calling analyst's allocation.",
                )),
            )
            .property(
                "fits",
                schema::boolean()
                    .description(Some("Every item planned and `total_cost ≤ remaining`.")),
            )
            .property(
                "unreachable",
                schema::integer()
                    .minimum(Some(0.0))
                    .description(Some("How many items no mechanism can plan.")),
            )
            .required("order")
            .required("items")
            .required("total_cost")
            .required("remaining")
            .required("fits")
            .required("unreachable")
            .into()
    }
}

impl ToSchema for PlanAnswer {
    fn name() -> Cow<'static, str> {
        "Plan".into()
    }

    fn schemas(schemas: &mut Vec<(String, SchemaRef)>) {
        schemas.push(("PlannedItem".into(), item_answer()));
        schemas.push(("PlanCandidate".into(), candidate()));
        schemas.push(("PlanParameters".into(), parameters()));
        schemas.push(("AccuracyForecast".into(), forecast()));
        schemas.push(("Shortfall".into(), shortfall()));
        schemas.push((
            "MechanismName".into(),
            schema::string().enum_values(Some(mechanism_names())).into(),
        ));
    }
}
