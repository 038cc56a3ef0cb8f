//! The release request in openapi.yaml: `ReleaseRequest`, a `oneOf` of one request shape per
//! mechanism (`<Kind>Request`), each a closed object with exactly the fields its mechanism takes,
//! and the wire values they are made of (`Counts`, `Table`, `Label`, `Alpha`...).
//!
//! The parser ([`super::Request::parse`]) is the authority; these shapes describe it, and
//! tests/it/openapi/examples.rs holds them to it: bodies the parser accepts must be valid for
//! the schema, and bodies the schema refuses must be refused by the parser. What JSON Schema
//! cannot say (a per-cell `alpha` as long as `counts`, integer counts for the discrete noise...)
//! is said in the descriptions and refused by the parser alone.

use std::borrow::Cow;

use serde_json::json;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use super::{Kind, RequestBody, MAX_COUNT};
use crate::ledger::{Label, Names};
use crate::schema::{self, SchemaRef};

const RELEASE_REQUEST: &str = "\
`counts` (one vector) or `table` (rows of counts, released for the price of one vector; exactly
one of the two; with a per-cell prior the table is priced with the smallest prior entry in both
changed cells, since a record may move to the same cell of another row), an optional `label`
(and a table's `row_names`), and a mechanism with its parameters: one of the shapes below, chosen by `mechanism` (default
`dirichlet`). A parameter that does not belong to the mechanism is 422. `epsilon` with `order`
is the calibration target of a calibrated mechanism (`order` defaults to the ledger order and is
accepted only with `epsilon`); the cost is always charged at the ledger order. For `explicit`,
and for `gaussian`/`laplace` with `sigma`/`scale` given, the mechanism is priced at the ledger
order, `order` does not apply and `epsilon` is an optional cap (422 `cost-exceeds-epsilon` above
it). A per-cell `alpha` must have as many cells as `counts` (or as each row of `table`).
`gaussian` and `laplace` add exact integer noise (discrete Gaussian / discrete Laplace,
Canonne–Kamath–Steinke 2020) and therefore need integer counts: a count with a fractional part
is 422 `invalid-request` (the detail names the cell, never its value), as is a noise scale
(given or calibrated) above 2^52 or, on a dataset with a custom sensitivity, a `linf` below 1
(no integer change fits it).";

impl Kind {
    /// The name of this mechanism's request shape in openapi.yaml.
    pub fn request_schema_name(self) -> &'static str {
        match self {
            Kind::Dirichlet => "DirichletRequest",
            Kind::Posterior => "PosteriorRequest",
            Kind::Diffuse => "DiffuseRequest",
            Kind::Explicit => "ExplicitRequest",
            Kind::Gaussian => "GaussianRequest",
            Kind::Laplace => "LaplaceRequest",
            Kind::Exponential => "ExponentialRequest",
        }
    }

    fn request_description(self) -> &'static str {
        match self {
            Kind::Dirichlet => {
                "The default mechanism: 000 Algorithm 1 with base prior `prior` (default 1), \
                 calibrated to `epsilon` at `order`."
            }
            Kind::Posterior => {
                "The prior solved with `r` fixed (default 1), calibrated to `epsilon` at `order`. \
                 With `prior_shape` s (seed 004 Algorithm 3) the prior is α = m·s and the scale m \
                 is solved; without it s = 1. Each cell of s must be > 0, or ≥ 0 where \
                 `lower_bound` > 0. With `lower_bound`, m may come out 0 (the bound alone pays for \
                 ε). If the prior solved at `order` leaves no guarantee at the ledger order (004 \
                 Corollary 1: direct sampling is RDP only for λ < 1 + min α/(rΔ∞)), the request is \
                 422 `no-guarantee`."
            }
            Kind::Diffuse => {
                "`r` solved with the prior `alpha` fixed, calibrated to `epsilon` at `order`. \
                 `alpha` is > 0 in every cell; with `lower_bound` it may be 0 in a cell, and the \
                 release is calibrated with the effective prior α + rL."
            }
            Kind::Explicit => {
                "`r` and `alpha` given and only priced, at the ledger order; `epsilon` is an \
                 optional cap. `alpha` is > 0 in every cell; with `lower_bound` it may be 0 in a \
                 cell (α + rL must be > 0 in every cell) and the release is priced with α + rL: \
                 `alpha: 0` is Gohari et al.'s prior-free mechanism."
            }
            Kind::Gaussian => {
                "Discrete Gaussian noise N_ℤ(0, sigma²) per cell on integer counts: `sigma` given \
                 (`epsilon` is then an optional cap and `order` does not apply), or calibrated to \
                 `epsilon` at `order`."
            }
            Kind::Laplace => {
                "Discrete Laplace noise of scale `scale` (P(y) ∝ e^{−|y|/scale}) per cell on \
                 integer counts: `scale` given (`epsilon` is then an optional cap and `order` does \
                 not apply), or calibrated to `epsilon` at `order`."
            }
            Kind::Exponential => {
                "Seed 002's exponential mechanism over the n + 1 Beta posteriors Beta(α + j, \
                 β + n − j) with Hellinger utility, for `counts` = [successes, failures] (whole \
                 numbers, n = their sum, 0 ≤ n ≤ the configured `max_exponential_n`) on a \
                 `replace_one` dataset only (n is public: the candidate set reveals it). n = 0 (an \
                 empty group) has one candidate, the prior itself: the output is the prior mean, \
                 whatever ε. Pure `epsilon`-DP, charged min(ε, λ₀ε²/8) at the ledger order λ₀ \
                 (ε-bounded range ⇒ ε²/8-zCDP). `prior` defaults to [1, 1]. 422 \
                 `invalid-request`: an `epsilon` so large that the least likely candidate falls \
                 below what the sampler represents exactly (37 for Beta(1, 1) at n = 100, about \
                 100·Δ_g at n = 10⁴), and a `prior` with α + β + n above 2⁵⁰ or whose Hellinger \
                 distances are not finite numbers in f64 (`field: prior`). One vector only: a \
                 `table` is 422 (under `replace_one` a record moving between two rows changes \
                 both rows' n, a change the one-vector, fixed-n charge does not cover)."
            }
        }
    }

    /// This mechanism's request shape.
    fn request_schema(self) -> Schema {
        let target = "The calibration target ε, at `order`.";
        let cap = "An optional cap: a mechanism that costs more at the ledger order is 422 \
                   `cost-exceeds-epsilon`.";
        let mut shape = schema::closed().description(Some(self.request_description()));
        shape = match self {
            Kind::Exponential => shape.property(
                "counts",
                schema::array(schema::integer().minimum(Some(0)))
                    .min_items(Some(2))
                    .max_items(Some(2))
                    .description(Some("[successes, failures], whole numbers.")),
            ),
            _ => shape
                .property("counts", schema::component("Counts"))
                .property("table", schema::component("Table"))
                .property(
                    "row_names",
                    schema::described(
                        "Names",
                        "Public names of the table's rows, one per row (only with `table`): \
                         stored with the release and returned with it.",
                    ),
                ),
        };
        shape = shape
            .property("label", schema::component("Label"))
            .property("mechanism", {
                let name = schema::constant(self.name());
                match self {
                    Kind::Dirichlet => name.default(Some(json!(self.name()))),
                    _ => name,
                }
            });
        let positive = |description: &str| schema::described("PositiveNumber", description);
        let order = || {
            schema::described(
                "Order",
                "The order of the calibration target (default: the ledger order); only with \
                 `epsilon`.",
            )
        };
        let mut all = Vec::new();
        if self != Kind::Exponential {
            all.push(schema::exactly_one_of("counts", "table"));
            all.push(json!({"if": {"required": ["row_names"]}, "then": {"required": ["table"]}}));
        }
        // Without a lower bound, a prior must be > 0 in every cell.
        let alpha_positive_unless_bounded = json!({
            "if": {"not": {"required": ["lower_bound"]}},
            "then": {"properties": {"alpha": {"$ref": "#/components/schemas/Alpha"}}}
        });
        // `sigma`/`scale` given: priced at the ledger order (no `order`); else calibrated (needs
        // `epsilon`).
        let given_or_calibrated = |own: &str| {
            json!({
                "if": {"required": [own]},
                "then": {"not": {"required": ["order"]}},
                "else": {"required": ["epsilon"]}
            })
        };
        shape = match self {
            Kind::Dirichlet => shape
                .property("epsilon", positive(target))
                .property("order", order())
                .property(
                    "prior",
                    positive("The base prior a₀ (default 1): α = a₀ in every cell."),
                )
                .property("lower_bound", schema::component("LowerBound"))
                .required("epsilon"),
            Kind::Posterior => shape
                .property("epsilon", positive(target))
                .property("order", order())
                .property("r", positive("The fixed r (default 1)."))
                .property(
                    "prior_shape",
                    schema::described("NonNegativeCells", "The prior's shape s: α = m·s."),
                )
                .property("lower_bound", schema::component("LowerBound"))
                .required("mechanism")
                .required("epsilon"),
            Kind::Diffuse => {
                all.push(alpha_positive_unless_bounded);
                shape
                    .property("epsilon", positive(target))
                    .property("order", order())
                    .property(
                        "alpha",
                        schema::described(
                            "NonNegativeCells",
                            "The prior α, fixed: > 0 in every cell (≥ 0 with `lower_bound`).",
                        ),
                    )
                    .property("lower_bound", schema::component("LowerBound"))
                    .required("mechanism")
                    .required("epsilon")
                    .required("alpha")
            }
            Kind::Explicit => {
                all.push(alpha_positive_unless_bounded);
                shape
                    .property("epsilon", positive(cap))
                    .property("r", positive("The r of the draw Dir(r·x + α)."))
                    .property(
                        "alpha",
                        schema::described(
                            "NonNegativeCells",
                            "The prior α: > 0 in every cell (≥ 0 with `lower_bound`).",
                        ),
                    )
                    .property("lower_bound", schema::component("LowerBound"))
                    .required("mechanism")
                    .required("r")
                    .required("alpha")
            }
            Kind::Gaussian => {
                all.push(given_or_calibrated("sigma"));
                shape
                    .property(
                        "epsilon",
                        positive(
                            "The calibration target ε at `order` without `sigma`; a cap with it.",
                        ),
                    )
                    .property("order", order())
                    .property("sigma", positive("The noise's σ (calibrated when absent)."))
                    .required("mechanism")
            }
            Kind::Laplace => {
                all.push(given_or_calibrated("scale"));
                shape
                    .property(
                        "epsilon",
                        positive(
                            "The calibration target ε at `order` without `scale`; a cap with it.",
                        ),
                    )
                    .property("order", order())
                    .property(
                        "scale",
                        positive("The noise's scale (calibrated when absent)."),
                    )
                    .required("mechanism")
            }
            Kind::Exponential => shape
                .property("epsilon", positive("The mechanism's pure-DP ε."))
                .property(
                    "prior",
                    schema::described("BetaPrior", "The Beta prior [α, β] (default [1, 1])."),
                )
                .required("mechanism")
                .required("counts")
                .required("epsilon"),
        };
        if all.is_empty() {
            shape.into()
        } else {
            schema::asserting(shape, all).into()
        }
    }
}

impl PartialSchema for RequestBody {
    fn schema() -> RefOr<Schema> {
        schema::one_of(
            Kind::ALL
                .iter()
                .map(|kind| schema::component(kind.request_schema_name())),
        )
        .description(Some(RELEASE_REQUEST))
        .into()
    }
}

impl ToSchema for RequestBody {
    fn name() -> Cow<'static, str> {
        "ReleaseRequest".into()
    }

    fn schemas(schemas: &mut Vec<(String, SchemaRef)>) {
        for kind in Kind::ALL {
            schemas.push((
                kind.request_schema_name().into(),
                kind.request_schema().into(),
            ));
        }
        schemas.extend(values());
        schemas.push((Names::name().into(), Names::schema()));
    }
}

/// The wire values the request shapes are made of.
fn values() -> Vec<(String, SchemaRef)> {
    let cells = |one: schema::SchemaRef, many: schema::SchemaRef, description: &str| {
        schema::one_of([one, schema::array(many).min_items(Some(2)).into()])
            .description(Some(description))
            .into()
    };
    vec![
        ("PositiveNumber".into(), schema::above(0.0).into()),
        ("Order".into(), schema::above(1.0).into()),
        (
            "Counts".into(),
            schema::array(schema::between(0.0, MAX_COUNT))
                .min_items(Some(2))
                .description(Some(
                    "The statistic x, d ≥ 2 cells (at most the configured `max_dimension`, \
                     1,000,000 by default), each at most 10¹⁵ (above it a count loses integer \
                     precision in f64).",
                ))
                .into(),
        ),
        (
            "Table".into(),
            schema::array(schema::component("Counts"))
                .min_items(Some(1))
                .description(Some(
                    "Rows of counts over the same cells, one row per *disjoint* group of records \
                     (a naive-Bayes feature by class, a conditional probability table by parent \
                     configuration): at least one row, every row a `Counts` of the same length d, \
                     and rows × d at most `max_dimension`. A row may be all zeros: a group with no \
                     records is released like any other (its draw is Dir(α), the baselines add \
                     noise to its zeros, its forecast's `l2_bound` is √2), at the same price — \
                     refusing it or leaving it out would publish that the group is empty. One \
                     calibration for the whole table, every row drawn independently, and ONE \
                     charge: the price of a single d-cell vector under the dataset's relation \
                     (docs/PRIVACY.md, \"Tables\"). Ragged rows, an empty table and a table on a \
                     dataset with a custom `sensitivity` (which does not say how one record moves \
                     a whole table) are 422 `invalid-request` with `field: table`.",
                ))
                .into(),
        ),
        (Label::name().into(), Label::schema()),
        (
            "Alpha".into(),
            cells(
                schema::above(0.0).into(),
                schema::above(0.0).into(),
                "The prior α, one value for every cell or one per cell (as many as `counts`).",
            ),
        ),
        (
            "NonNegativeCells".into(),
            cells(
                schema::number().minimum(Some(0.0)).into(),
                schema::number().minimum(Some(0.0)).into(),
                "One number ≥ 0 for every cell, or one per cell (as many as `counts`).",
            ),
        ),
        (
            "LowerBound".into(),
            cells(
                schema::number().minimum(Some(0.0)).into(),
                schema::number().minimum(Some(0.0)).into(),
                "A public lower bound L on every cell (seed 000 Remark 2, seed 003), one value \
                 for every cell or one per cell: public knowledge such as a floor the data owner \
                 guarantees, never computed from the counts. The release draws Dir(r·max(x, L) + \
                 α), which is the mechanism on max(x − L, 0) with the prior α + rL, and is priced \
                 and calibrated with that effective prior; `alpha` may then be 0 in cells where \
                 L > 0 (α = 0 everywhere is Gohari et al.'s prior-free Dir(k·p), k = rN). Data \
                 below the bound is clamped, so the guarantee holds for every dataset.",
            ),
        ),
        (
            "BetaPrior".into(),
            schema::array(schema::above(0.0))
                .min_items(Some(2))
                .max_items(Some(2))
                .description(Some("A Beta prior [α, β]."))
                .into(),
        ),
    ]
}

impl PartialSchema for Label {
    fn schema() -> RefOr<Schema> {
        schema::name()
            .description(Some(format!(
                "Free text naming the release so that a model's tables can be found again (e.g. \
                 `NB feature 7 | by class`). {} Stored (trimmed, in NFC) and returned with the \
                 release (201, GET by id, listings); part of the request an `Idempotency-Key` \
                 identifies, as sent; never logged.",
                schema::NAME_RULE
            )))
            .into()
    }
}

impl ToSchema for Label {}

/// A list of public names: a dataset's `cells`, a table's `row_names`.
impl PartialSchema for Names {
    fn schema() -> RefOr<Schema> {
        schema::array(schema::name())
            .min_items(Some(1))
            .unique_items(true)
            .description(Some(format!(
                "Public names, distinct once trimmed and normalised (`é` precomposed and `e` + \
                 U+0301 are the same name). Each name: {} They are stored (trimmed, in NFC) and \
                 returned: never derive them from the private counts (a list of the groups or \
                 values observed in the data leaves out the empty ones, and so reveals them).",
                schema::NAME_RULE
            )))
            .into()
    }
}

impl ToSchema for Names {
    fn name() -> Cow<'static, str> {
        "Names".into()
    }
}
