//! The release request in openapi.yaml: `ReleaseRequest`, a `oneOf` of one request shape per
//! mechanism (`<Name>Request`, written by the registry from each mechanism's fields:
//! `release::mechanisms::request_schemas`), each a closed object with exactly the fields its
//! mechanism takes, and the wire values they are made of (`Counts`, `Table`, `Label`, `Alpha`...).
//!
//! The parser ([`super::Request::parse`]) is the authority; these shapes describe it, and
//! tests/it/openapi/examples.rs holds them to it: bodies the parser accepts must be valid for
//! the schema, and bodies the schema refuses must be refused by the parser. What JSON Schema
//! cannot say (a per-cell `alpha` as long as `counts`, integer counts for the discrete noise...)
//! is said in the descriptions and refused by the parser alone.

use std::borrow::Cow;

use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use super::{RequestBody, MAX_COUNT};
use crate::ledger::{Label, Names};
use crate::release::mechanisms::{self, Kind};
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

impl PartialSchema for RequestBody {
    fn schema() -> RefOr<Schema> {
        schema::one_of(
            Kind::ALL
                .iter()
                .map(|kind| schema::component(&kind.request_schema_name())),
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
        schemas.extend(mechanisms::request_schemas());
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
        ("BlockKey".into(), schema::block_key().into()),
        ("BlockSpan".into(), schema::block_span().into()),
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
