//! `/v1/datasets`: register datasets with a budget, list them, read their ledger.

use std::borrow::Cow;
use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::auth::Caller;
use super::error::{problems, ApiError};
use super::extract::{parse_json, Admin, ApiJson, ApiPath, ApiQuery};
use super::paths::{self, DatasetId};
use super::views::{
    path_views, AllocationView, BlockBudgetView, BlockListView, BlockView, BudgetView,
    DatasetListView, DatasetView, SortedJson,
};
use super::AppState;
use crate::ledger::charge::{MAX_EPSILON, QUANTUM_BITS};
use crate::ledger::population::PathEntry;
use crate::ledger::{
    Dataset, DatasetName, DpTarget, Names, NewDataset, Period, Population, Units, UnitsError,
};
use crate::privacy::convert::{default_order, dp_to_rdp_budget};
use crate::privacy::{Delta, Epsilon, Order, ParamError, Sensitivity};
use crate::schema::{self, SchemaRef};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(create, list))
        .routes(routes!(show))
        .routes(routes!(budget))
        .routes(routes!(blocks))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateDataset {
    name: String,
    budget: BudgetRequest,
    #[serde(default, deserialize_with = "crate::wire::non_null")]
    sensitivity: Option<SensitivityRequest>,
    #[serde(default, deserialize_with = "crate::wire::non_null")]
    neighbouring: Option<Neighbouring>,
    /// Public names of the cells: every release must then have exactly this many.
    #[serde(default, deserialize_with = "crate::wire::non_null")]
    cells: Option<Vec<String>>,
    /// The population the dataset joins (src/ledger/population.rs).
    #[serde(default, deserialize_with = "crate::wire::non_null")]
    population: Option<Uuid>,
    /// Split into blocks over time (src/ledger/blocks.rs): `budget` is then each block's cap.
    #[serde(default, deserialize_with = "crate::wire::non_null")]
    blocks: Option<BlocksRequest>,
}

/// `{"period": "hour" | "day" | "week" | "month"}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlocksRequest {
    period: String,
}

/// `{order, epsilon}` (an RDP budget) or `{epsilon, delta, order?}` (an (ε, δ) target).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetRequest {
    epsilon: f64,
    #[serde(default, deserialize_with = "crate::wire::non_null")]
    order: Option<f64>,
    #[serde(default, deserialize_with = "crate::wire::non_null")]
    delta: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SensitivityRequest {
    l2_squared: f64,
    linf: f64,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(try_from = "String")]
pub enum Neighbouring {
    ReplaceOne,
    AddRemoveOne,
}

impl TryFrom<String> for Neighbouring {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        match name.as_str() {
            "replace_one" => Ok(Neighbouring::ReplaceOne),
            "add_remove_one" => Ok(Neighbouring::AddRemoveOne),
            // Never quote `name`: problem documents echo nothing that was sent.
            _ => Err("expected replace_one or add_remove_one".into()),
        }
    }
}

impl PartialSchema for CreateDataset {
    fn schema() -> RefOr<Schema> {
        let name = schema::name().description(Some(format!(
            "The dataset's name. {} The name stored is the trimmed, normalised one.",
            schema::NAME_RULE
        )));
        let neighbouring = schema::string()
            .enum_values(Some(["replace_one", "add_remove_one"]))
            .default(Some(json!("replace_one")));
        schema::asserting(
            schema::closed()
                .description(Some(
                    "`sensitivity` (custom) and `neighbouring` are mutually exclusive; with \
                     neither, the dataset is `replace_one` (Δ2² = 2, Δ∞ = 1). A custom sensitivity \
                     needs `linf² ≤ l2_squared`.",
                ))
                .property("name", name)
                .property("budget", schema::component("BudgetRequest"))
                .property("sensitivity", schema::component("SensitivityRequest"))
                .property("neighbouring", neighbouring)
                .property(
                    "cells",
                    schema::array(schema::component("Label"))
                        .min_items(Some(2))
                        .unique_items(true)
                        .description(Some(
                            "Public names of the cells, distinct once trimmed and normalised \
                             (at least 2, at most `max_dimension`, 1 MiB in all; each a `Label`, \
                             stored trimmed and in NFC): every release of the dataset must \
                             then have exactly this many cells, and releases, listings and \
                             previews carry them. Never derive them from the private counts (the \
                             values observed in the data leave out the empty cells).",
                        )),
                )
                .property(
                    "population",
                    schema::formatted("uuid").description(Some(
                        "The population the dataset joins (it must have the dataset's order).",
                    )),
                )
                .property(
                    "blocks",
                    schema::closed()
                        .description(Some(
                            "Split the dataset into blocks over time: each record belongs, \
                             forever, to the block of the UTC period of the event it records, \
                             and `budget` is then the cap of EACH block. Every release, preview \
                             and charge then names the blocks it reads (`blocks: {from, to}` or \
                             `block`) and is charged its full cost on every one of them, all or \
                             nothing (docs/PRIVACY.md, \"Budgets over time\").",
                        ))
                        .property("period", schema::block_period())
                        .required("period"),
                )
                .required("name")
                .required("budget"),
            [json!({"not": {"required": ["sensitivity", "neighbouring"]}})],
        )
        .into()
    }
}

impl ToSchema for CreateDataset {
    fn name() -> Cow<'static, str> {
        "DatasetCreate".into()
    }

    fn schemas(schemas: &mut Vec<(String, SchemaRef)>) {
        schemas.push((
            crate::ledger::Names::name().into(),
            crate::ledger::Names::schema(),
        ));
        schemas.push((
            "BudgetRequest".into(),
            schema::one_of([
                schema::component("RdpBudgetRequest"),
                schema::component("DpBudgetRequest"),
            ])
            .into(),
        ));
        schemas.push((
            "RdpBudgetRequest".into(),
            schema::closed()
                .description(Some(
                    "A Rényi-DP budget of `epsilon` at order `order` (the ledger order λ₀). The \
                     budget is rounded down to the ledger grid (multiples of 2⁻⁴⁰), so it must be \
                     at least 2⁻⁴⁰.",
                ))
                .property("order", schema::above(1.0))
                .property(
                    "epsilon",
                    schema::between(2f64.powi(-QUANTUM_BITS), MAX_EPSILON),
                )
                .required("order")
                .required("epsilon")
                .into(),
        ));
        schemas.push((
            "DpBudgetRequest".into(),
            schema::closed()
                .description(Some(
                    "An (ε, δ)-DP target, converted to the RDP budget at `order` (chosen by the \
                     server when absent). A target that leaves no RDP budget at the order (or one \
                     above 8192) is 422.",
                ))
                .property("epsilon", schema::above(0.0))
                .property("delta", schema::above(0.0).exclusive_maximum(Some(1.0)))
                .property("order", schema::above(1.0))
                .required("epsilon")
                .required("delta")
                .into(),
        ));
        schemas.push((
            "SensitivityRequest".into(),
            schema::closed()
                .description(Some(
                    "Custom neighbour sensitivities Δ2² and Δ∞; `linf²` above `l2_squared` is 422.",
                ))
                .property("l2_squared", schema::above(0.0))
                .property("linf", schema::above(0.0))
                .required("l2_squared")
                .required("linf")
                .into(),
        ));
    }
}

pub(super) fn param_error(field: &str, e: ParamError) -> ApiError {
    ApiError::invalid_field(field, e.to_string())
}

fn units_error(field: &str, e: UnitsError) -> ApiError {
    ApiError::invalid_field(field, format!("{field}: {e}"))
}

/// A registration body, validated and resolved to the ledger grid. Pure and total: any bytes give
/// a dataset to store or an [`ApiError`], never a panic (fuzzed with the release bodies).
pub fn parse_registration(
    body: &[u8],
    created_by: String,
    max_cells: usize,
) -> Result<NewDataset, ApiError> {
    parse(parse_json(body)?, created_by, max_cells)
}

/// The most bytes of cell names a dataset may hold: they come back with every release.
pub const MAX_CELL_NAME_BYTES: usize = 1 << 20;

/// `cells`: at least two distinct names (a release has d ≥ 2 cells), at most `max_cells` (the
/// largest dimension) and 1 MiB of names, each a valid label.
fn parse_cells(cells: Option<Vec<String>>, max_cells: usize) -> Result<Option<Names>, ApiError> {
    let Some(cells) = cells else {
        return Ok(None);
    };
    if cells.len() < 2 {
        return Err(ApiError::invalid_field(
            "cells",
            "cells must name at least 2 cells, as every release has",
        ));
    }
    if cells.iter().map(String::len).sum::<usize>() > MAX_CELL_NAME_BYTES {
        return Err(ApiError::invalid_field(
            "cells",
            format!("cells must hold at most {MAX_CELL_NAME_BYTES} bytes of names in all"),
        ));
    }
    Names::new(cells, max_cells)
        .map(Some)
        .map_err(|e| ApiError::invalid_field("cells", format!("cells {e}")))
}

/// The parsed registration: everything validated, the budget resolved to the ledger grid.
fn parse(req: CreateDataset, created_by: String, max_cells: usize) -> Result<NewDataset, ApiError> {
    let name = DatasetName::new(&req.name)
        .map_err(|e| ApiError::invalid_field("name", format!("name {e}")))?;
    let (sensitivity, neighbouring) = match (req.sensitivity, req.neighbouring) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "give either sensitivity or neighbouring, not both",
            ));
        }
        (Some(s), None) => (
            {
                if s.linf * s.linf == 0.0 {
                    return Err(ApiError::invalid_field(
                        "sensitivity.linf",
                        "linf is too small: linf² is 0 in f64",
                    ));
                }
                Sensitivity::new(s.l2_squared, s.linf).map_err(|e| param_error("sensitivity", e))?
            },
            "custom",
        ),
        (None, Some(Neighbouring::AddRemoveOne)) => (Sensitivity::ADD_REMOVE_ONE, "add_remove_one"),
        (None, Some(Neighbouring::ReplaceOne)) | (None, None) => {
            (Sensitivity::REPLACE_ONE, "replace_one")
        }
    };
    let (order, total, dp_target) = parse_budget(&req.budget)?;
    Ok(NewDataset {
        id: Uuid::now_v7(),
        name,
        order,
        total,
        dp_target,
        sensitivity,
        neighbouring: neighbouring.to_string(),
        created_by,
        cells: parse_cells(req.cells, max_cells)?,
        population: req.population,
        blocks: req
            .blocks
            .map(|b| {
                Period::parse(&b.period).ok_or_else(|| {
                    ApiError::invalid_field(
                        "blocks.period",
                        "blocks.period must be hour, day, week or month",
                    )
                })
            })
            .transpose()?,
    })
}

/// A budget request resolved to the ledger grid: its order, its total (rounded down, at least
/// one grid unit) and its (ε, δ) target if it was given as one.
pub(super) fn parse_budget(
    budget: &BudgetRequest,
) -> Result<(Order, Units, Option<DpTarget>), ApiError> {
    let epsilon = Epsilon::new(budget.epsilon).map_err(|e| param_error("budget.epsilon", e))?;
    let (order, total, dp_target) = match budget.delta {
        None => {
            let order = budget.order.ok_or_else(|| {
                ApiError::invalid_field(
                    "budget.order",
                    "an RDP budget needs an order (or give delta for an (epsilon, delta) target)",
                )
            })?;
            let order = Order::new(order).map_err(|e| param_error("budget.order", e))?;
            let total =
                Units::floor(epsilon.get()).map_err(|e| units_error("budget.epsilon", e))?;
            (order, total, None)
        }
        Some(delta) => {
            let delta = Delta::new(delta).map_err(|e| param_error("budget.delta", e))?;
            let order = match budget.order {
                Some(o) => Order::new(o).map_err(|e| param_error("budget.order", e))?,
                None => default_order(epsilon, delta, MAX_EPSILON),
            };
            let rdp = dp_to_rdp_budget(epsilon, delta, order)
                .map_err(|e| ApiError::invalid_field("budget.order", e.to_string()))?;
            let total = Units::floor(rdp.get()).map_err(|e| units_error("budget.epsilon", e))?;
            (
                order,
                total,
                Some(DpTarget {
                    epsilon: epsilon.get(),
                    delta: delta.get(),
                }),
            )
        }
    };
    if total == Units::ZERO {
        return Err(ApiError::invalid_field(
            "budget.epsilon",
            "the budget rounds to zero on the ledger grid",
        ));
    }
    Ok((order, total, dp_target))
}

/// Register a dataset and its privacy budget (admin only).
#[utoipa::path(
    post,
    path = "/v1/datasets",
    operation_id = "createDataset",
    tag = "datasets",
    request_body(content = CreateDataset, content_type = "application/json"),
    responses(
        Registered,
        (status = 400, response = problems::MalformedRequest),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 413, response = problems::PayloadTooLarge),
        (status = 415, response = problems::UnsupportedMediaType),
        (status = 422, response = problems::InvalidRequest),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    ApiJson(req): ApiJson<CreateDataset>,
) -> Result<Response, ApiError> {
    let new = parse(req, caller.name(), state.settings.max_dimension)?;
    if let Some(population) = new.population {
        let node = state
            .store
            .get_population(population)
            .await?
            .ok_or_else(|| ApiError::invalid_field("population", "no such population"))?;
        if node.order != new.order {
            return Err(ApiError::invalid_field(
                "population",
                "the dataset's order must equal the population's ledger order",
            ));
        }
    }
    let dataset = state.store.create_dataset(&new).await?;
    tracing::info!(dataset = %dataset.id, order = dataset.order.get(), total = dataset.total.to_f64(), "dataset registered");
    let location = format!("/v1/datasets/{}", dataset.id);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(DatasetView::from(&dataset)),
    )
        .into_response())
}

/// The 201 of `createDataset`: the dataset, where it is, and links to what is done with it next.
struct Registered;

impl utoipa::IntoResponses for Registered {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        let id = "$response.body#/id";
        let on = |operation| paths::link(operation, &[("id", id)]);
        let response = paths::created(
            "Registered.",
            &DatasetView::name(),
            &[("Location", "Location")],
            &[
                ("GetDataset", on("getDataset")),
                ("GetBudget", on("getBudget")),
                ("CreateRelease", on("createRelease")),
                ("PreviewRelease", on("previewRelease")),
                ("ListReleases", on("listReleases")),
                (
                    "CreateToken",
                    LinkBuilder::new()
                        .operation_id("createToken")
                        .request_body(Some(json!({"datasets": [id]})))
                        .build(),
                ),
            ],
        );
        BTreeMap::from([("201".to_string(), response.into())])
    }
}

/// List datasets, oldest first (an analyst sees only the datasets of its token).
#[utoipa::path(
    get,
    path = "/v1/datasets",
    operation_id = "listDatasets",
    tag = "datasets",
    responses(
        (status = 200, description = "The datasets.", body = DatasetListView),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<SortedJson<DatasetListView>, ApiError> {
    let datasets = match &caller {
        Caller::Admin => state.store.list_datasets(None).await?,
        Caller::Analyst { datasets, .. } => state.store.list_datasets(Some(datasets)).await?,
    };
    let items = datasets.iter().map(DatasetView::from).collect();
    Ok(SortedJson(DatasetListView { items }))
}

/// One dataset.
#[utoipa::path(
    get,
    path = "/v1/datasets/{id}",
    operation_id = "getDataset",
    tag = "datasets",
    params(DatasetId),
    responses(
        (status = 200, description = "The dataset.", body = DatasetView),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn show(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<DatasetView>, ApiError> {
    let dataset = state.dataset_for(&caller, id).await?;
    Ok(Json(DatasetView::from(&dataset)))
}

/// The dataset's ledger now.
#[utoipa::path(
    get,
    path = "/v1/datasets/{id}/budget",
    operation_id = "getBudget",
    tag = "datasets",
    params(DatasetId),
    responses(
        (status = 200, description = "The ledger (with the calling analyst's `allocation`, when \
                                       the admin set one).", body = BudgetView),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn budget(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<BudgetView>, ApiError> {
    let dataset = state.dataset_for(&caller, id).await?;
    let mut view = BudgetView::from(&dataset.budget());
    // An analyst sees their own allocation on the dataset, when the admin set one.
    if let Caller::Analyst { token_id, .. } = &caller {
        view.allocation = state
            .store
            .list_allocations(id, Some(token_id))
            .await?
            .first()
            .map(AllocationView::from);
    }
    let (path, binding) = path_views(&dataset_path(&state, &dataset).await?);
    view.path = Some(path);
    view.binding = binding;
    if let Some(blocking) = dataset.blocks {
        let most_spent = state
            .store
            .most_spent_block(id, blocking.period)
            .await?
            .map(|b| BlockView::new(&b, blocking.cap));
        view.blocks = Some(BlockBudgetView {
            period: blocking.period.as_str(),
            total: blocking.cap.to_f64(),
            most_spent,
        });
    }
    Ok(Json(view))
}

pub fn population_entry(p: &Population) -> PathEntry {
    PathEntry {
        kind: "population",
        id: p.id,
        name: p.name.clone(),
        total: p.total,
        spent: p.spent,
    }
}

/// The dataset and every population above it, leaf first.
pub async fn dataset_path(state: &AppState, d: &Dataset) -> Result<Vec<PathEntry>, ApiError> {
    let mut path = vec![PathEntry {
        kind: "dataset",
        id: d.id,
        name: d.name.clone(),
        total: d.total,
        spent: d.spent,
    }];
    if let Some(p) = d.population {
        path.extend(
            state
                .store
                .population_path(p)
                .await?
                .iter()
                .map(population_entry),
        );
    }
    Ok(path)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlocksQuery {
    from: String,
    to: String,
}

impl utoipa::IntoParams for BlocksQuery {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
        ["from", "to"]
            .into_iter()
            .map(|name| {
                ParameterBuilder::new()
                    .name(name)
                    .parameter_in(ParameterIn::Query)
                    .required(utoipa::openapi::Required::True)
                    .description(Some(if name == "from" {
                        "The first block (in the dataset's period's form)."
                    } else {
                        "The last block, included (at most `max_block_range` blocks in all)."
                    }))
                    .schema(Some(schema::component("BlockKey")))
                    .build()
            })
            .collect()
    }
}

/// The ledger of every block of a range of a dataset split into blocks, in order: a block never
/// charged has spent 0. A dataset without blocks, a key of another form or an impossible date,
/// and a range of more than `max_block_range` blocks are 422.
#[utoipa::path(
    get,
    path = "/v1/datasets/{id}/blocks",
    operation_id = "listBlocks",
    tag = "datasets",
    params(DatasetId, BlocksQuery),
    responses(
        (status = 200, description = "Every block of the range, in order.", body = BlockListView),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 422, response = problems::InvalidRequest),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn blocks(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<BlocksQuery>,
) -> Result<SortedJson<BlockListView>, ApiError> {
    let dataset = state.dataset_for(&caller, id).await?;
    let Some(blocking) = dataset.blocks else {
        return Err(ApiError::invalid("the dataset is not split into blocks"));
    };
    let range = crate::ledger::BlockRange::from_request(
        Some(blocking.period),
        Some((&query.from, &query.to)),
        None,
        state.settings.max_block_range,
    )
    .map_err(|(field, e)| {
        let field = match field {
            "blocks.from" => "from",
            "blocks.to" => "to",
            _ => "to",
        };
        ApiError::invalid_field(field, e.to_string())
    })?
    .ok_or_else(|| ApiError::Internal("a blocked dataset's range parsed to none".into()))?;
    let stored = state.store.block_spends(id, range).await?;
    Ok(SortedJson(BlockListView::new(range, &stored, blocking.cap)))
}
