//! `/v1/datasets`: register datasets with a budget, list them, read their ledger.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{parse_json, Admin, ApiJson, ApiPath};
use super::views::{AllocationView, BudgetView, DatasetView};
use super::AppState;
use crate::ledger::charge::MAX_EPSILON;
use crate::ledger::{DpTarget, Names, NewDataset, Units, UnitsError};
use crate::privacy::convert::{default_order, dp_to_rdp_budget};
use crate::privacy::{Delta, Epsilon, Order, ParamError, Sensitivity};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/datasets", get(list).post(create))
        .route("/v1/datasets/{id}", get(show))
        .route("/v1/datasets/{id}/budget", get(budget))
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

/// The parsed registration: everything validated, the budget resolved to the ledger grid.
fn parse(req: CreateDataset, created_by: String, max_cells: usize) -> Result<NewDataset, ApiError> {
    let name = req.name.trim().to_string();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(ApiError::invalid_field(
            "name",
            "name must have 1 to 200 characters",
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(ApiError::invalid_field(
            "name",
            "name must not contain control characters",
        ));
    }
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
    let epsilon = Epsilon::new(req.budget.epsilon).map_err(|e| param_error("budget.epsilon", e))?;
    let (order, total, dp_target) = match req.budget.delta {
        None => {
            let order = req.budget.order.ok_or_else(|| {
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
            let order = match req.budget.order {
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
    })
}

async fn create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    ApiJson(req): ApiJson<CreateDataset>,
) -> Result<Response, ApiError> {
    let new = parse(req, caller.name(), state.settings.max_dimension)?;
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

async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<serde_json::Value>, ApiError> {
    let datasets = match &caller {
        Caller::Admin => state.store.list_datasets(None).await?,
        Caller::Analyst { datasets, .. } => state.store.list_datasets(Some(datasets)).await?,
    };
    let items: Vec<DatasetView> = datasets.iter().map(DatasetView::from).collect();
    Ok(Json(json!({ "items": items })))
}

async fn show(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<DatasetView>, ApiError> {
    let dataset = state.dataset_for(&caller, id).await?;
    Ok(Json(DatasetView::from(&dataset)))
}

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
    Ok(Json(view))
}
