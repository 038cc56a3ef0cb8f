//! `/v1/populations`: budgets that span datasets (src/ledger/population.rs), and placing datasets
//! and populations in the tree. Admin only: a population's figures are about every dataset under
//! it. (An analyst sees the nodes above its own datasets in `GET /v1/datasets/{id}/budget`.)

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::Required;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::datasets::{parse_budget, population_entry, BudgetRequest};
use super::error::{problems, ApiError};
use super::extract::{Admin, ApiJson, ApiPath};
use super::paths::DatasetId;
use super::views::{path_views, BudgetSpecView, DatasetView, PathNodeView, SortedJson};
use super::AppState;
use crate::ledger::population::{self, PathEntry};
use crate::ledger::{
    Children, DatasetName, NewPopulation, NodeRefusal, Placement, Population, Units,
};
use crate::schema;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(create, list))
        .routes(routes!(show))
        .routes(routes!(budget))
        .routes(routes!(move_population))
        .routes(routes!(place_dataset))
}

/// The path parameter `id` of the population routes.
pub struct PopulationId;

impl IntoParams for PopulationId {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![ParameterBuilder::new()
            .name("id")
            .parameter_in(ParameterIn::Path)
            .required(Required::True)
            .description(Some(
                "Population id (a malformed id is 404, like an unknown one).",
            ))
            .schema(Some(schema::formatted("uuid")))
            .build()]
    }
}

#[derive(Deserialize, ToSchema)]
#[schema(as = PopulationCreate)]
#[serde(deny_unknown_fields)]
pub struct CreatePopulation {
    /// Same rules as a dataset's name.
    name: String,
    #[schema(value_type = Object)]
    budget: BudgetRequest,
    /// The parent population (omitted: a root). It must have the same ledger order.
    #[serde(default, deserialize_with = "crate::wire::non_null")]
    parent: Option<Uuid>,
    /// `shared` (default): the node is charged the sum of its children's charges (a person may
    /// be in several children); `disjoint`: their maximum (each person is in at most one child).
    #[serde(default, deserialize_with = "crate::wire::non_null")]
    #[schema(value_type = Option<String>)]
    children: Option<ChildrenRequest>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(try_from = "String")]
pub struct ChildrenRequest(Children);

impl TryFrom<String> for ChildrenRequest {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        Children::parse(&name)
            .map(ChildrenRequest)
            .ok_or_else(|| "expected shared or disjoint".into())
    }
}

/// A population node, its budget and what it was charged.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Population)]
#[serde(deny_unknown_fields)]
pub struct PopulationView {
    pub id: Uuid,
    pub name: String,
    pub budget: BudgetSpecView,
    pub parent: Option<Uuid>,
    /// `shared` or `disjoint`.
    pub children: String,
    #[schema(minimum = 0, maximum = 8192)]
    pub spent: f64,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

impl From<&Population> for PopulationView {
    fn from(p: &Population) -> Self {
        PopulationView {
            id: p.id,
            name: p.name.clone(),
            budget: BudgetSpecView::new(p.order, p.total, p.dp_target),
            parent: p.parent,
            children: p.children.as_str().into(),
            spent: p.spent.to_f64(),
            created_at: p.created_at,
        }
    }
}

/// The populations, oldest first.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = PopulationList)]
#[serde(deny_unknown_fields)]
pub struct PopulationListView {
    pub populations: Vec<PopulationView>,
}

/// A population node's ledger (the `budget` of a `population-budget-exhausted` problem).
#[derive(Debug, Serialize)]
pub struct PopulationLedgerView {
    pub order: f64,
    pub total: f64,
    pub spent: f64,
    pub remaining: f64,
}

/// A population's ledger and the path from it to the root.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = PopulationBudget)]
#[serde(deny_unknown_fields)]
pub struct PopulationBudgetView {
    #[schema(exclusive_minimum = 1)]
    pub order: f64,
    #[schema(minimum = 0, maximum = 8192)]
    pub total: f64,
    #[schema(minimum = 0, maximum = 8192)]
    pub spent: f64,
    #[schema(minimum = 0, maximum = 8192)]
    pub remaining: f64,
    /// This node, then its ancestors up to the root.
    pub path: Vec<PathNodeView>,
}

/// The 409 of a refusal by a population node.
pub fn population_exhausted(
    refusal: &NodeRefusal,
    order: crate::privacy::Order,
    charge: Units,
    what: &str,
) -> ApiError {
    let remaining = refusal.total.saturating_sub(refusal.spent);
    ApiError::PopulationExhausted {
        detail: format!(
            "{what} would exceed the budget of population {}: it costs {} at order {} but only {} \
             of the population's budget remains; nothing was charged",
            refusal.id,
            charge.to_f64(),
            order.get(),
            remaining.to_f64()
        ),
        population: refusal.id,
        budget: serde_json::to_value(PopulationLedgerView {
            order: order.get(),
            total: refusal.total.to_f64(),
            spent: refusal.spent.to_f64(),
            remaining: remaining.to_f64(),
        })
        .unwrap_or(serde_json::Value::Null),
    }
}

/// Create a population (admin only).
#[utoipa::path(
    post,
    path = "/v1/populations",
    operation_id = "createPopulation",
    tag = "populations",
    request_body(content = CreatePopulation, content_type = "application/json"),
    responses(
        (status = 201, description = "Created.", body = PopulationView),
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
    ApiJson(req): ApiJson<CreatePopulation>,
) -> Result<Response, ApiError> {
    let name = DatasetName::new(&req.name)
        .map_err(|e| ApiError::invalid_field("name", format!("name {e}")))?;
    let (order, total, dp_target) = parse_budget(&req.budget)?;
    if let Some(parent) = req.parent {
        // A node's order never changes and nodes are never deleted: this check stays true.
        let parent = state
            .store
            .get_population(parent)
            .await?
            .ok_or_else(|| ApiError::invalid_field("parent", "no such population"))?;
        if parent.order != order {
            return Err(ApiError::invalid_field(
                "parent",
                "order must equal the parent's ledger order",
            ));
        }
        if state.store.population_path(parent.id).await?.len() >= population::MAX_DEPTH {
            return Err(ApiError::invalid_field(
                "parent",
                format!(
                    "a path may hold at most {} populations",
                    population::MAX_DEPTH
                ),
            ));
        }
    }
    let new = NewPopulation {
        id: Uuid::now_v7(),
        name,
        order,
        total,
        dp_target,
        parent: req.parent,
        children: req.children.map_or(Children::Shared, |c| c.0),
        created_by: caller.name(),
    };
    let created = state.store.create_population(&new).await?;
    tracing::info!(population = %created.id, "population created");
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/v1/populations/{}", created.id))],
        Json(PopulationView::from(&created)),
    )
        .into_response())
}

/// List populations, oldest first (admin only).
#[utoipa::path(
    get,
    path = "/v1/populations",
    operation_id = "listPopulations",
    tag = "populations",
    responses(
        (status = 200, description = "The populations.", body = PopulationListView),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn list(
    State(state): State<AppState>,
    Admin(_): Admin,
) -> Result<SortedJson<PopulationListView>, ApiError> {
    let populations = state.store.list_populations().await?;
    Ok(SortedJson(PopulationListView {
        populations: populations.iter().map(PopulationView::from).collect(),
    }))
}

async fn load(state: &AppState, id: Uuid) -> Result<Population, ApiError> {
    state
        .store
        .get_population(id)
        .await?
        .ok_or_else(|| ApiError::not_found("population"))
}

/// One population (admin only).
#[utoipa::path(
    get,
    path = "/v1/populations/{id}",
    operation_id = "getPopulation",
    tag = "populations",
    params(PopulationId),
    responses(
        (status = 200, description = "The population.", body = PopulationView),
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
    Admin(_): Admin,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<PopulationView>, ApiError> {
    Ok(Json(PopulationView::from(&load(&state, id).await?)))
}

/// A population's ledger and the path from it to the root (admin only).
#[utoipa::path(
    get,
    path = "/v1/populations/{id}/budget",
    operation_id = "getPopulationBudget",
    tag = "populations",
    params(PopulationId),
    responses(
        (status = 200, description = "The ledger and its path.", body = PopulationBudgetView),
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
    Admin(_): Admin,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<PopulationBudgetView>, ApiError> {
    let path = state.store.population_path(id).await?;
    let Some(node) = path.first() else {
        return Err(ApiError::not_found("population"));
    };
    let entries: Vec<PathEntry> = path.iter().map(population_entry).collect();
    Ok(Json(PopulationBudgetView {
        order: node.order.get(),
        total: node.total.to_f64(),
        spent: node.spent.to_f64(),
        remaining: node.remaining().to_f64(),
        path: path_views(&entries).0,
    }))
}

#[derive(Deserialize, ToSchema)]
#[schema(as = PopulationParent)]
#[serde(deny_unknown_fields)]
pub struct SetParent {
    /// The new parent (null: make the node a root).
    parent: Option<Uuid>,
}

#[derive(Deserialize, ToSchema)]
#[schema(as = DatasetPopulation)]
#[serde(deny_unknown_fields)]
pub struct SetPopulation {
    /// The population the dataset moves to (null: none).
    population: Option<Uuid>,
}

/// The answer to a refused placement; `field` names the request's field.
fn placement_error(
    placement: Placement,
    field: &str,
    what: &str,
    order: crate::privacy::Order,
    spent: Units,
) -> ApiError {
    match placement {
        Placement::Placed => ApiError::Internal("a placement answered as refused".into()),
        Placement::NotFound => ApiError::not_found(what),
        Placement::TargetNotFound => ApiError::invalid_field(field, "no such population"),
        Placement::OrderMismatch => ApiError::invalid_field(
            field,
            format!("the {what}'s order must equal the population's ledger order"),
        ),
        Placement::Cycle => ApiError::invalid_field(
            field,
            "cycle: the new parent is the population itself or under it",
        ),
        Placement::TooDeep => ApiError::invalid_field(
            field,
            format!(
                "a path may hold at most {} populations",
                population::MAX_DEPTH
            ),
        ),
        Placement::Exhausted(refusal) => population_exhausted(
            &refusal,
            order,
            spent,
            &format!("what the {what} already spent"),
        ),
    }
}

/// Move a population under another (or make it a root), admin only. Admitted only if what the
/// node already spent fits every new ancestor (each is then charged with it); the old ancestors
/// keep what they were charged.
#[utoipa::path(
    put,
    path = "/v1/populations/{id}/parent",
    operation_id = "movePopulation",
    tag = "populations",
    params(PopulationId),
    request_body(content = SetParent, content_type = "application/json"),
    responses(
        (status = 200, description = "Moved.", body = PopulationView),
        (status = 400, response = problems::MalformedRequest),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 409, response = problems::PlacementConflict),
        (status = 413, response = problems::PayloadTooLarge),
        (status = 415, response = problems::UnsupportedMediaType),
        (status = 422, response = problems::InvalidRequest),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn move_population(
    State(state): State<AppState>,
    Admin(_): Admin,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(req): ApiJson<SetParent>,
) -> Result<Json<PopulationView>, ApiError> {
    let node = load(&state, id).await?;
    match state.store.set_population_parent(id, req.parent).await? {
        Placement::Placed => Ok(Json(PopulationView::from(&load(&state, id).await?))),
        refused => Err(placement_error(
            refused,
            "parent",
            "population",
            node.order,
            node.spent,
        )),
    }
}

/// Put a dataset in a population, move it to another, or take it out (`null`), admin only.
/// Admitted only if what the dataset already spent fits every node of the new path (each is
/// then charged with it); the old path keeps what it was charged.
#[utoipa::path(
    put,
    path = "/v1/datasets/{id}/population",
    operation_id = "setDatasetPopulation",
    tag = "datasets",
    params(DatasetId),
    request_body(content = SetPopulation, content_type = "application/json"),
    responses(
        (status = 200, description = "Placed.", body = DatasetView),
        (status = 400, response = problems::MalformedRequest),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 409, response = problems::PlacementConflict),
        (status = 413, response = problems::PayloadTooLarge),
        (status = 415, response = problems::UnsupportedMediaType),
        (status = 422, response = problems::InvalidRequest),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn place_dataset(
    State(state): State<AppState>,
    Admin(caller): Admin,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(req): ApiJson<SetPopulation>,
) -> Result<Json<DatasetView>, ApiError> {
    let dataset = state.dataset_for(&caller, id).await?;
    let placement = state
        .store
        .set_dataset_population(id, req.population)
        .await?;
    if placement != Placement::Placed {
        return Err(placement_error(
            placement,
            "population",
            "dataset",
            dataset.order,
            dataset.spent,
        ));
    }
    let current = state
        .store
        .get_dataset(id)
        .await?
        .ok_or_else(|| ApiError::not_found("dataset"))?;
    let view = DatasetView::from(&current);
    state.caches.put_dataset(current);
    Ok(Json(view))
}
