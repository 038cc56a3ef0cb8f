//! `/v1/datasets/{id}/allocations`: per-analyst allocations under the dataset's budget. The admin
//! gives an analyst token a share of a dataset's budget (RDP at the dataset's order); a release
//! by that token is then admitted only if it fits both the allocation and the dataset, in the
//! release's own commit (`LedgerStore::commit_release`). Allocations may add up to more than the
//! dataset's budget: the dataset's cap still binds, and protects the people in the data.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::openapi::path::{Parameter, ParameterIn};

use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::auth::Caller;
use super::error::{problems, ApiError};
use super::extract::{Admin, ApiJson, ApiPath};
use super::paths::DatasetId;
use super::views::{AllocationView, SortedJson};
use super::AppState;
use crate::access::TokenId;
use crate::ledger::charge::MAX_EPSILON;
use crate::ledger::{AllocationChange, AllocationOutcome, Units};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(list))
        .routes(routes!(set, remove))
}

/// An allocation to set.
#[derive(Deserialize, ToSchema)]
#[schema(as = AllocationSet)]
#[serde(deny_unknown_fields)]
pub struct SetAllocation {
    /// RDP at the dataset's order λ₀, rounded down to the ledger grid; 0 blocks the token's
    /// releases on the dataset.
    #[schema(minimum = 0, maximum = 8192)]
    epsilon: f64,
}

/// One change of an allocation: who made it, when, from what to what (`null`: no allocation).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = AllocationChange)]
#[serde(deny_unknown_fields)]
pub struct AllocationChangeView {
    #[schema(min_length = 1)]
    pub token_id: String,
    pub changed_at: DateTime<Utc>,
    /// `admin`.
    #[schema(min_length = 1)]
    pub changed_by: String,
    #[schema(minimum = 0, maximum = 8192, required = true)]
    pub old_epsilon: Option<f64>,
    #[schema(minimum = 0, maximum = 8192, required = true)]
    pub new_epsilon: Option<f64>,
}

impl From<AllocationChange> for AllocationChangeView {
    fn from(c: AllocationChange) -> Self {
        AllocationChangeView {
            token_id: c.token_id,
            changed_at: c.changed_at,
            changed_by: c.changed_by,
            old_epsilon: c.old.map(Units::to_f64),
            new_epsilon: c.new.map(Units::to_f64),
        }
    }
}

/// A dataset's allocations and their audit trail (an analyst's only, for an analyst token).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AllocationList {
    /// The dataset's order λ₀, at which the allocations are.
    #[schema(exclusive_minimum = 1)]
    pub order: f64,
    /// By token id.
    pub allocations: Vec<AllocationView>,
    /// Every change of these allocations, oldest first.
    pub changes: Vec<AllocationChangeView>,
}

/// The path parameter `token_id`.
struct TokenIdParam;

impl IntoParams for TokenIdParam {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![super::paths::token_id_param(
            "token_id",
            "An analyst token's public id (the `<id>` of `dra_<id>_<secret>`) whose scope \
             includes the dataset.",
        )]
    }
}

/// The allocation to store for `epsilon`: rounded *down* to the ledger grid, so an allocation
/// never admits more than was set.
fn parse_epsilon(epsilon: f64) -> Result<Units, ApiError> {
    if !epsilon.is_finite() || epsilon < 0.0 {
        return Err(ApiError::invalid_field(
            "epsilon",
            "epsilon must be a finite number ≥ 0",
        ));
    }
    if epsilon > MAX_EPSILON {
        return Err(ApiError::invalid_field(
            "epsilon",
            format!("epsilon must be at most {MAX_EPSILON}, the most a ledger holds"),
        ));
    }
    Units::floor(epsilon).map_err(|e| ApiError::invalid_field("epsilon", e.to_string()))
}

fn not_in_scope() -> ApiError {
    ApiError::NotFound("no analyst token with this id may use this dataset".into())
}

/// Set an analyst token's allocation on the dataset (admin only): its releases there must then
/// fit both the allocation and the dataset's budget. The token's spend counts from its first
/// release, before the allocation too; a value lower than that blocks its further releases. A
/// change is recorded with who made it and when (setting the value already set records nothing).
#[utoipa::path(
    put,
    path = "/v1/datasets/{id}/allocations/{token_id}",
    operation_id = "setAllocation",
    tag = "allocations",
    params(DatasetId, TokenIdParam),
    request_body(content = SetAllocation, content_type = "application/json"),
    responses(
        (status = 200, description = "The allocation as set, with the token's spend.", body = AllocationView),
        (status = 400, response = problems::MalformedRequest),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 413, response = problems::PayloadTooLarge),
        (status = 415, response = problems::UnsupportedMediaType),
        (status = 422, response = problems::InvalidRequest),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn set(
    State(state): State<AppState>,
    Admin(caller): Admin,
    ApiPath((id, token_id)): ApiPath<(Uuid, TokenId)>,
    ApiJson(req): ApiJson<SetAllocation>,
) -> Result<Json<AllocationView>, ApiError> {
    let dataset = state.dataset_for(&caller, id).await?;
    let total = parse_epsilon(req.epsilon)?;
    let outcome = state
        .store
        .set_allocation(
            id,
            token_id.as_str(),
            Some(total),
            &caller.name(),
            Utc::now(),
        )
        .await?;
    let AllocationOutcome::Changed { old, spent, .. } = outcome else {
        return Err(not_in_scope());
    };
    tracing::info!(
        dataset = %dataset.id,
        token = %token_id,
        old = old.map(Units::to_f64),
        new = total.to_f64(),
        "allocation set"
    );
    Ok(Json(AllocationView::from(&crate::ledger::Allocation {
        token_id: token_id.into_string(),
        total,
        spent,
    })))
}

/// Remove an analyst token's allocation on the dataset (admin only): its releases draw on the
/// dataset's budget alone again; what it spent stays spent. Recorded like a change.
#[utoipa::path(
    delete,
    path = "/v1/datasets/{id}/allocations/{token_id}",
    operation_id = "removeAllocation",
    tag = "allocations",
    params(DatasetId, TokenIdParam),
    responses(
        (status = 204, description = "Removed."),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn remove(
    State(state): State<AppState>,
    Admin(caller): Admin,
    ApiPath((id, token_id)): ApiPath<(Uuid, TokenId)>,
) -> Result<StatusCode, ApiError> {
    state.dataset_for(&caller, id).await?;
    match state
        .store
        .set_allocation(id, token_id.as_str(), None, &caller.name(), Utc::now())
        .await?
    {
        AllocationOutcome::Changed { old: Some(old), .. } => {
            tracing::info!(dataset = %id, token = %token_id, old = old.to_f64(), "allocation removed");
            Ok(StatusCode::NO_CONTENT)
        }
        AllocationOutcome::Changed { old: None, .. } => Err(ApiError::NotFound(
            "this token has no allocation on this dataset".into(),
        )),
        AllocationOutcome::NotInScope => Err(not_in_scope()),
    }
}

/// The dataset's allocations, with spent and remaining, and their audit trail: all of them for
/// the admin, an analyst's own for an analyst token.
#[utoipa::path(
    get,
    path = "/v1/datasets/{id}/allocations",
    operation_id = "listAllocations",
    tag = "allocations",
    params(DatasetId),
    responses(
        (status = 200, description = "The allocations and every change of them.", body = AllocationList),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<SortedJson<AllocationList>, ApiError> {
    let dataset = state.dataset_for(&caller, id).await?;
    let only = match &caller {
        Caller::Admin => None,
        Caller::Analyst { token_id, .. } => Some(token_id.as_str()),
    };
    let allocations = state.store.list_allocations(id, only).await?;
    let changes = state.store.allocation_changes(id, only).await?;
    Ok(SortedJson(AllocationList {
        order: dataset.order.get(),
        allocations: allocations.iter().map(AllocationView::from).collect(),
        changes: changes
            .into_iter()
            .map(AllocationChangeView::from)
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_round_down_and_refuse_what_no_ledger_holds() {
        assert_eq!(parse_epsilon(0.0).unwrap(), Units::ZERO);
        let third = parse_epsilon(1.0 / 3.0).unwrap();
        assert!(third.to_f64() <= 1.0 / 3.0, "never more than was set");
        assert!(1.0 / 3.0 - third.to_f64() < 1e-12);
        for bad in [-0.1, f64::NAN, f64::INFINITY, MAX_EPSILON * 2.0] {
            assert!(parse_epsilon(bad).is_err(), "{bad}");
        }
    }
}
