//! JSON shapes returned to clients, and their schemas in openapi.yaml (derived here, so a field
//! renamed or added is described as it is served).
//!
//! The response schemas are closed (`additionalProperties: false`): `#[serde(deny_unknown_fields)]`
//! on a type that is only serialised changes nothing on the wire, and is what utoipa reads as
//! "closed".

use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};
use uuid::Uuid;

use super::error::ApiError;
use crate::ledger::population::{self, PathEntry};
use crate::ledger::{
    Allocation, BlockRange, BlockSpend, Blocking, BudgetState, Dataset, Names, Output, Release,
    ReleaseSummary, Units,
};
use crate::release::Record as Mechanism;
use crate::schema::{self, SchemaRef};

/// A typed answer serialised with its object keys sorted, as the `json!` values it replaced were
/// (serde_json's maps are sorted): the same bytes on the wire as before the types existed.
pub struct SortedJson<T>(pub T);

impl<T: Serialize> IntoResponse for SortedJson<T> {
    fn into_response(self) -> Response {
        match serde_json::to_value(self.0) {
            Ok(value) => Json(value).into_response(),
            Err(e) => ApiError::Internal(e.to_string()).into_response(),
        }
    }
}

/// Present only for datasets registered with an (ε, δ) target.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DpView {
    #[schema(exclusive_minimum = 0, exclusive_maximum = 1)]
    pub delta: f64,
    #[schema(minimum = 0)]
    pub total_epsilon: f64,
    #[schema(minimum = 0)]
    pub spent_epsilon: f64,
}

/// A dataset's ledger at one instant, at its order λ₀.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Budget)]
#[serde(deny_unknown_fields)]
pub struct BudgetView {
    #[schema(exclusive_minimum = 1)]
    pub order: f64,
    #[schema(minimum = 0, maximum = 8192)]
    pub total: f64,
    #[schema(minimum = 0, maximum = 8192)]
    pub spent: f64,
    #[schema(minimum = 0, maximum = 8192)]
    pub remaining: f64,
    #[schema(minimum = 0)]
    pub releases: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub dp: Option<DpView>,
    /// The calling analyst's allocation on the dataset, when the admin set one (the budget
    /// endpoint only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub allocation: Option<AllocationView>,
    /// The dataset, then every population above it up to the root (the budget endpoint only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub path: Option<Vec<PathNodeView>>,
    /// The id of the node on `path` with the least remaining budget (the budget endpoint only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub binding: Option<Uuid>,
    /// A dataset split into blocks: its period, the cap of each block and its most-spent block
    /// (the budget endpoint only). The dataset's own `total` is then the ledger's maximum and
    /// `spent` what all its releases cost (what populations above it are charged).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub blocks: Option<BlockBudgetView>,
}

/// A blocked dataset's blocks, in its budget view.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = BlockBudget)]
#[serde(deny_unknown_fields)]
pub struct BlockBudgetView {
    #[schema(schema_with = block_period)]
    pub period: &'static str,
    /// The cap of each block, RDP at the dataset's order.
    #[schema(minimum = 0, maximum = 8192)]
    pub total: f64,
    /// The block that has spent the most (the earliest of equals); null before any charge.
    pub most_spent: Option<BlockView>,
}

fn block_period() -> SchemaRef {
    schema::block_period().into()
}

fn block_key() -> SchemaRef {
    schema::component("BlockKey")
}

/// One block's ledger.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Block)]
#[serde(deny_unknown_fields)]
pub struct BlockView {
    #[schema(schema_with = block_key)]
    pub key: String,
    /// The block's cap (every block of a dataset has the same).
    #[schema(minimum = 0, maximum = 8192)]
    pub total: f64,
    /// What the releases that read the block were charged in all.
    #[schema(minimum = 0, maximum = 8192)]
    pub spent: f64,
    #[schema(minimum = 0, maximum = 8192)]
    pub remaining: f64,
}

impl BlockView {
    pub fn new(block: &BlockSpend, cap: Units) -> Self {
        BlockView {
            key: block.key.to_string(),
            total: cap.to_f64(),
            spent: block.spent.to_f64(),
            remaining: cap.saturating_sub(block.spent).to_f64(),
        }
    }
}

/// The blocks of a range, in order, every one of them (a block never charged has spent 0).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = BlockList)]
#[serde(deny_unknown_fields)]
pub struct BlockListView {
    pub items: Vec<BlockView>,
}

impl BlockListView {
    /// Every block of `range`, from the stored spends of those that were charged.
    pub fn new(range: BlockRange, stored: &[BlockSpend], cap: Units) -> Self {
        let mut stored = stored.iter().peekable();
        let items = range
            .keys()
            .map(|key| {
                let spent = match stored.peek() {
                    Some(b) if b.key == key => stored.next().map_or(Units::ZERO, |b| b.spent),
                    _ => Units::ZERO,
                };
                BlockView::new(&BlockSpend { key, spent }, cap)
            })
            .collect();
        BlockListView { items }
    }
}

/// A dataset's split into blocks, as registered.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Blocks)]
#[serde(deny_unknown_fields)]
pub struct BlocksSpecView {
    #[schema(schema_with = block_period)]
    pub period: &'static str,
}

impl From<&Blocking> for BlocksSpecView {
    fn from(b: &Blocking) -> Self {
        BlocksSpecView {
            period: b.period.as_str(),
        }
    }
}

impl From<&BudgetState> for BudgetView {
    fn from(b: &BudgetState) -> Self {
        let dp = b.dp_target.and_then(|t| {
            Some(DpView {
                delta: t.delta,
                total_epsilon: b.dp_view(b.total)?,
                spent_epsilon: b.dp_view(b.spent)?,
            })
        });
        BudgetView {
            order: b.order.get(),
            total: b.total.to_f64(),
            spent: b.spent.to_f64(),
            remaining: b.remaining().to_f64(),
            releases: b.releases,
            dp,
            allocation: None,
            path: None,
            binding: None,
            blocks: None,
        }
    }
}

/// An analyst token's allocation on a dataset, at the dataset's order λ₀: the most its releases
/// there may cost in all, under the dataset's budget (which still binds).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Allocation)]
#[serde(deny_unknown_fields)]
pub struct AllocationView {
    /// The analyst token's id.
    #[schema(min_length = 1)]
    pub token_id: String,
    /// The allocation, RDP at the dataset's order (rounded down to the ledger grid).
    #[schema(minimum = 0, maximum = 8192)]
    pub epsilon: f64,
    /// What the token's releases on the dataset were charged in all (also before the allocation
    /// was set; it may exceed `epsilon` after the allocation was lowered).
    #[schema(minimum = 0, maximum = 8192)]
    pub spent: f64,
    /// `epsilon − spent`, or 0.
    #[schema(minimum = 0, maximum = 8192)]
    pub remaining: f64,
}

impl From<&Allocation> for AllocationView {
    fn from(a: &Allocation) -> Self {
        AllocationView {
            token_id: a.token_id.clone(),
            epsilon: a.total.to_f64(),
            spent: a.spent.to_f64(),
            remaining: a.remaining().to_f64(),
        }
    }
}

pub fn allocation_json(a: &Allocation) -> Value {
    serde_json::to_value(AllocationView::from(a)).unwrap_or(Value::Null)
}

/// Names as listed in JSON.
pub fn names(names: Option<&Names>) -> Option<Vec<String>> {
    names.map(|n| n.as_slice().to_vec())
}

pub fn budget_json(b: &BudgetState) -> Value {
    serde_json::to_value(BudgetView::from(b)).unwrap_or(Value::Null)
}

/// The neighbour sensitivities Δ2² and Δ∞ of the dataset's relation.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Sensitivity)]
#[serde(deny_unknown_fields)]
pub struct SensitivityView {
    #[schema(exclusive_minimum = 0)]
    pub l2_squared: f64,
    #[schema(exclusive_minimum = 0)]
    pub linf: f64,
}

/// The budget as registered: an RDP budget, or an (ε, δ) target with the RDP budget it converts
/// to (then `delta` and `rdp_epsilon` are present).
#[derive(Debug, Serialize)]
pub struct BudgetSpecView {
    pub order: f64,
    pub epsilon: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rdp_epsilon: Option<f64>,
}

impl PartialSchema for BudgetSpecView {
    fn schema() -> RefOr<Schema> {
        schema::one_of([
            schema::component("RdpBudgetSpec"),
            schema::component("DpBudgetSpec"),
        ])
        .description(Some("The budget as registered."))
        .into()
    }
}

impl ToSchema for BudgetSpecView {
    fn name() -> std::borrow::Cow<'static, str> {
        "BudgetSpec".into()
    }

    fn schemas(schemas: &mut Vec<(String, SchemaRef)>) {
        let grid = || schema::between(0.0, 8192.0);
        schemas.push((
            "RdpBudgetSpec".into(),
            schema::closed()
                .description(Some(
                    "An RDP budget of `epsilon` at the ledger order `order`.",
                ))
                .property("order", schema::above(1.0))
                .property("epsilon", grid())
                .required("order")
                .required("epsilon")
                .into(),
        ));
        schemas.push((
            "DpBudgetSpec".into(),
            schema::closed()
                .description(Some(
                    "An (ε, δ)-DP target and the RDP budget at the ledger order it converts to.",
                ))
                .property(
                    "epsilon",
                    schema::above(0.0).description(Some("The (ε, δ) target's ε.")),
                )
                .property("delta", schema::above(0.0).exclusive_maximum(Some(1.0)))
                .property(
                    "order",
                    schema::above(1.0).description(Some("The ledger order λ₀.")),
                )
                .property(
                    "rdp_epsilon",
                    grid().description(Some(
                        "The RDP budget at `order` that the target converts to.",
                    )),
                )
                .required("epsilon")
                .required("delta")
                .required("order")
                .required("rdp_epsilon")
                .into(),
        ));
    }
}

/// A dataset, its relation and its budget.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Dataset)]
#[serde(deny_unknown_fields)]
pub struct DatasetView {
    pub id: Uuid,
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    #[schema(schema_with = neighbouring)]
    pub neighbouring: String,
    pub sensitivity: SensitivityView,
    pub budget: BudgetSpecView,
    #[schema(minimum = 0, maximum = 8192)]
    pub spent: f64,
    #[schema(minimum = 0)]
    pub releases: i64,
    pub created_at: DateTime<Utc>,
    /// The public names of the cells, when the dataset was registered with them: every release
    /// has exactly this many cells.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Names>, nullable = false, min_items = 2)]
    pub cells: Option<Vec<String>>,
    /// The population the dataset is in (null: none).
    pub population: Option<Uuid>,
    /// How the dataset is split into blocks over time, when it is: `budget` is then the cap of
    /// each block.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub blocks: Option<BlocksSpecView>,
}

fn neighbouring() -> SchemaRef {
    schema::string()
        .enum_values(Some(["replace_one", "add_remove_one", "custom"]))
        .into()
}

impl BudgetSpecView {
    pub fn new(
        order: crate::privacy::Order,
        total: crate::ledger::Units,
        dp_target: Option<crate::ledger::DpTarget>,
    ) -> Self {
        match dp_target {
            Some(t) => BudgetSpecView {
                order: order.get(),
                epsilon: t.epsilon,
                delta: Some(t.delta),
                rdp_epsilon: Some(total.to_f64()),
            },
            None => BudgetSpecView {
                order: order.get(),
                epsilon: total.to_f64(),
                delta: None,
                rdp_epsilon: None,
            },
        }
    }
}

impl From<&Dataset> for DatasetView {
    fn from(d: &Dataset) -> Self {
        let total = d.blocks.map_or(d.total, |b| b.cap);
        let budget = BudgetSpecView::new(d.order, total, d.dp_target);
        DatasetView {
            id: d.id,
            name: d.name.clone(),
            neighbouring: d.neighbouring.clone(),
            sensitivity: SensitivityView {
                l2_squared: d.sensitivity.l2_squared(),
                linf: d.sensitivity.linf(),
            },
            budget,
            spent: d.spent.to_f64(),
            releases: d.releases,
            created_at: d.created_at,
            cells: names(d.cells.as_ref()),
            population: d.population,
            blocks: d.blocks.as_ref().map(BlocksSpecView::from),
        }
    }
}

/// The datasets, oldest first.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = DatasetList)]
#[serde(deny_unknown_fields)]
pub struct DatasetListView {
    pub items: Vec<DatasetView>,
}

/// The release's RDP cost at the ledger order (rounded up to the ledger grid).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Cost)]
#[serde(deny_unknown_fields)]
pub struct CostView {
    #[schema(exclusive_minimum = 1)]
    pub order: f64,
    #[schema(minimum = 0, maximum = 8192)]
    pub epsilon: f64,
}

/// A stored release (a `Release` without `budget`).
#[derive(Debug, Serialize)]
pub struct ReleaseRecordView {
    /// `release` (drawn here) or `external` (a computation run elsewhere, charged here).
    pub kind: &'static str,
    pub id: Uuid,
    pub dataset_id: Uuid,
    pub seq: i64,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distribution: Option<Vec<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distributions: Option<Vec<Vec<f64>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The dataset's cell names, when it has them: the columns of `distribution(s)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cells: Option<Vec<String>>,
    /// A table's row names, when the release was made with them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub row_names: Option<Vec<String>>,
    /// The mechanism record as stored with the release.
    pub mechanism: Value,
    pub cost: CostView,
    /// The blocks it read, on a dataset split into blocks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<BlockSpanView>,
}

/// `{from, to}`, inclusive.
#[derive(Debug, Serialize)]
pub struct BlockSpanView {
    pub from: String,
    pub to: String,
}

impl From<BlockRange> for BlockSpanView {
    fn from(r: BlockRange) -> Self {
        BlockSpanView {
            from: r.first().to_string(),
            to: r.last().to_string(),
        }
    }
}

impl PartialSchema for ReleaseRecordView {
    fn schema() -> RefOr<Schema> {
        let who_and_when = schema::closed()
            .description(Some(
                "A stored release (a `Release` without `budget`). A vector release carries \
                 `distribution`, a table release `distributions`.",
            ))
            .property(
                "kind",
                schema::string()
                    .enum_values(Some(["release", "external"]))
                    .description(Some(
                        "`release`: drawn here, with its output; `external`: a DP computation \
                         run elsewhere and charged here (`POST /v1/datasets/{id}/charges`), with \
                         no output and its description in `mechanism`.",
                    )),
            )
            .property("id", schema::formatted("uuid"))
            .property("dataset_id", schema::formatted("uuid"))
            .property("seq", schema::integer().minimum(Some(1)))
            .property("created_at", schema::formatted("date-time"))
            .property(
                "created_by",
                schema::string()
                    .min_length(Some(1))
                    .description(Some("`admin` or the id of the analyst token.")),
            )
            .property(
                "distribution",
                schema::described("Distribution", "A vector release's output."),
            )
            .property(
                "distributions",
                schema::described("Distributions", "A table release's rows, in request order."),
            )
            .property("label", schema::component(&crate::ledger::Label::name()))
            .property(
                "cells",
                schema::described(
                    &Names::name(),
                    "The dataset's cell names, when it has them (not in listings: a page names \
                     them once).",
                ),
            )
            .property(
                "row_names",
                schema::described(
                    &Names::name(),
                    "A table release's row names, when it was made with them.",
                ),
            )
            .property(
                "mechanism",
                schema::one_of([
                    schema::component(&Mechanism::name()),
                    schema::object()
                        .description(Some(
                            "An external charge's description (`kind: external`), as sent.",
                        ))
                        .property("kind", schema::constant("external"))
                        .required("kind")
                        .into(),
                ]),
            )
            .property("cost", schema::component(&CostView::name()))
            .property(
                "blocks",
                schema::described("BlockSpan", "The blocks it read (a blocked dataset only)."),
            );
        let required = [
            "kind",
            "id",
            "dataset_id",
            "seq",
            "created_at",
            "created_by",
            "mechanism",
            "cost",
        ];
        schema::asserting(
            required
                .into_iter()
                .fold(who_and_when, |o, r| o.required(r)),
            [serde_json::json!({"oneOf": [
                {"properties": {"kind": {"const": "release"}}, "required": ["kind"],
                 "allOf": [schema::exactly_one_of("distribution", "distributions")]},
                {"properties": {"kind": {"const": "external"}}, "required": ["kind"],
                 "not": {"anyOf": [{"required": ["distribution"]}, {"required": ["distributions"]}]}}
            ]})],
        )
        .into()
    }
}

impl ToSchema for ReleaseRecordView {
    fn name() -> std::borrow::Cow<'static, str> {
        "ReleaseRecord".into()
    }

    fn schemas(schemas: &mut Vec<(String, SchemaRef)>) {
        schemas.push(("Distribution".into(), Distribution::schema()));
        schemas.push(("Distributions".into(), Distributions::schema()));
        schemas.push((
            crate::ledger::Label::name().into(),
            crate::ledger::Label::schema(),
        ));
        schemas.push((Names::name().into(), Names::schema()));
        schemas.push((Mechanism::name().into(), Mechanism::schema()));
        Mechanism::schemas(schemas);
        schemas.push((CostView::name().into(), CostView::schema()));
        schemas.push(("BlockSpan".into(), schema::block_span().into()));
        schemas.push(("BlockKey".into(), schema::block_key().into()));
    }
}

/// Whether a stored mechanism record is an external charge's (src/http/releases/charges.rs).
pub fn is_external(mechanism: &Value) -> bool {
    mechanism.get("kind").and_then(Value::as_str) == Some("external")
}

impl ReleaseRecordView {
    /// `cells` are the dataset's cell names; a listing gives them once for its page instead.
    pub fn new(r: Release, order: f64, cells: Option<&Names>) -> Self {
        let external = is_external(&r.mechanism);
        let (distribution, distributions) = match r.output {
            _ if external => (None, None),
            Output::Vector(v) => (Some(v), None),
            Output::Table(t) => (None, Some(t.iter_rows().map(<[f64]>::to_vec).collect())),
        };
        ReleaseRecordView {
            kind: if external { "external" } else { "release" },
            id: r.id,
            dataset_id: r.dataset_id,
            seq: r.seq,
            created_at: r.created_at,
            created_by: r.created_by,
            distribution,
            distributions,
            label: r.label.map(|l| l.as_str().to_owned()),
            cells: names(cells),
            row_names: names(r.row_names.as_ref()),
            mechanism: r.mechanism,
            cost: CostView {
                order,
                epsilon: r.cost.to_f64(),
            },
            blocks: r.blocks.map(BlockSpanView::from),
        }
    }
}

/// A release as its creation answers it: the stored release and the ledger right after its
/// charge.
#[derive(Debug, Serialize)]
pub struct ReleaseView {
    #[serde(flatten)]
    pub record: ReleaseRecordView,
    pub budget: BudgetView,
}

impl ReleaseView {
    pub fn new(r: Release, order: f64, cells: Option<&Names>, budget: &BudgetState) -> Self {
        ReleaseView {
            record: ReleaseRecordView::new(r, order, cells),
            budget: BudgetView::from(budget),
        }
    }
}

impl PartialSchema for ReleaseView {
    /// `ReleaseRecord`'s schema with `budget`: the same fields by construction.
    fn schema() -> RefOr<Schema> {
        let RefOr::T(Schema::Object(mut release)) = ReleaseRecordView::schema() else {
            unreachable!("a derived struct schema is an object")
        };
        release.description = Some(
            "A release as created (or replayed): the stored release and `budget`, the ledger \
             right after this release was charged. A vector release carries `distribution`, a \
             table release `distributions`."
                .into(),
        );
        release.properties.insert(
            "budget".into(),
            schema::described("Budget", "The ledger right after this release was charged."),
        );
        release.required.push("budget".into());
        RefOr::T(Schema::Object(release))
    }
}

impl ToSchema for ReleaseView {
    fn name() -> std::borrow::Cow<'static, str> {
        "Release".into()
    }

    fn schemas(schemas: &mut Vec<(String, SchemaRef)>) {
        ReleaseRecordView::schemas(schemas);
        schemas.push((BudgetView::name().into(), BudgetView::schema()));
        BudgetView::schemas(schemas);
    }
}

/// A stored release without its output and mechanism record (`fields=summary`).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = ReleaseSummary)]
#[serde(deny_unknown_fields)]
pub struct ReleaseSummaryView {
    pub id: Uuid,
    pub dataset_id: Uuid,
    #[schema(minimum = 1)]
    pub seq: i64,
    pub created_at: DateTime<Utc>,
    /// `admin` or the id of the analyst token.
    #[schema(min_length = 1)]
    pub created_by: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<crate::ledger::Label>, nullable = false)]
    pub label: Option<String>,
    pub cost: CostView,
}

impl ReleaseSummaryView {
    pub fn new(r: ReleaseSummary, order: f64) -> Self {
        ReleaseSummaryView {
            id: r.id,
            dataset_id: r.dataset_id,
            seq: r.seq,
            created_at: r.created_at,
            created_by: r.created_by,
            label: r.label.map(|l| l.as_str().to_owned()),
            cost: CostView {
                order,
                epsilon: r.cost.to_f64(),
            },
        }
    }
}

/// One page of releases, newest first: every item a `ReleaseRecord`, or with `fields=summary`
/// every item a `ReleaseSummary`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = ReleaseList)]
#[serde(deny_unknown_fields)]
pub struct ReleaseListView {
    #[schema(inline)]
    pub items: ReleaseItems,
    /// Pass as `before` for the next page; null on the last page. A page ends early (with fewer
    /// than `limit` items) when the next release would take its JSON past the configured
    /// `max_page_bytes`; a single release always fits.
    #[schema(minimum = 1, required = true)]
    pub next_before: Option<i64>,
    /// The dataset's cell names, when it has them: the columns of every item's output.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Names>, nullable = false)]
    pub cells: Option<Vec<String>>,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum ReleaseItems {
    Records(Vec<ReleaseRecordView>),
    Summaries(Vec<ReleaseSummaryView>),
}

impl PartialSchema for ReleaseItems {
    fn schema() -> RefOr<Schema> {
        schema::array(schema::one_of([
            schema::component("ReleaseRecord"),
            schema::component("ReleaseSummary"),
        ]))
        .into()
    }
}

impl ToSchema for ReleaseItems {
    fn schemas(schemas: &mut Vec<(String, SchemaRef)>) {
        schemas.push((
            ReleaseRecordView::name().into(),
            ReleaseRecordView::schema(),
        ));
        ReleaseRecordView::schemas(schemas);
        schemas.push((
            ReleaseSummaryView::name().into(),
            ReleaseSummaryView::schema(),
        ));
        ReleaseSummaryView::schemas(schemas);
    }
}

/// The released point of the simplex, one value per cell. For `gaussian` and `laplace` it is
/// the Euclidean projection of z/Σz onto the simplex, z the integer noisy counts (uniform when
/// Σz ≤ 0).
pub struct Distribution;

impl PartialSchema for Distribution {
    fn schema() -> RefOr<Schema> {
        schema::array(schema::between(0.0, 1.0))
            .min_items(Some(2))
            .description(Some(
                "The released point of the simplex, one value per cell. For `gaussian` and \
                 `laplace` it is the Euclidean projection of z/Σz onto the simplex, z the integer \
                 noisy counts (uniform when Σz ≤ 0).",
            ))
            .into()
    }
}

impl ToSchema for Distribution {}

/// The released rows of a `table` request, in request order.
pub struct Distributions;

impl PartialSchema for Distributions {
    fn schema() -> RefOr<Schema> {
        schema::array(schema::component("Distribution"))
            .min_items(Some(1))
            .description(Some(
                "The released rows of a `table` request, in request order; each a point of the \
                 simplex.",
            ))
            .into()
    }
}

impl ToSchema for Distributions {}

/// One node of a budget path.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = PathNode)]
#[serde(deny_unknown_fields)]
pub struct PathNodeView {
    /// `dataset` or `population`.
    pub kind: String,
    pub id: Uuid,
    pub name: String,
    #[schema(minimum = 0, maximum = 8192)]
    pub total: f64,
    #[schema(minimum = 0, maximum = 8192)]
    pub spent: f64,
    #[schema(minimum = 0, maximum = 8192)]
    pub remaining: f64,
    /// Whether this node has the least remaining budget on the path (what limits the next
    /// charge; several may tie).
    pub binding: bool,
}

/// A path's nodes as views, with which binds.
pub fn path_views(path: &[PathEntry]) -> (Vec<PathNodeView>, Option<Uuid>) {
    let binding = population::binding(path);
    let views = path
        .iter()
        .enumerate()
        .map(|(i, e)| PathNodeView {
            kind: e.kind.into(),
            id: e.id,
            name: e.name.clone(),
            total: e.total.to_f64(),
            spent: e.spent.to_f64(),
            remaining: e.remaining().to_f64(),
            binding: binding.contains(&i),
        })
        .collect();
    (views, binding.first().map(|&i| path[i].id))
}
