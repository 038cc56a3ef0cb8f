//! `/v1/datasets/{id}/allocations`: per-analyst allocations under the dataset's budget. The admin
//! gives an analyst token a share of a dataset's budget (RDP at the dataset's order); a release
//! by that token is then admitted only if it fits both the allocation and the dataset, in the
//! release's own commit (`LedgerStore::commit_release`). Allocations may add up to more than the
//! dataset's budget: the dataset's cap still binds, and protects the people in the data.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, put};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Admin, ApiJson, ApiPath};
use super::views::AllocationView;
use super::AppState;
use crate::ledger::charge::MAX_EPSILON;
use crate::ledger::{AllocationChange, AllocationOutcome, Units};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/datasets/{id}/allocations", get(list))
        .route(
            "/v1/datasets/{id}/allocations/{token_id}",
            put(set).delete(remove),
        )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetAllocation {
    /// RDP at the dataset's order; 0 blocks the token's releases on the dataset.
    epsilon: f64,
}

/// One change of an allocation: who made it, when, from what to what (`null`: none).
#[derive(Debug, Serialize)]
pub struct AllocationChangeView {
    pub token_id: String,
    pub changed_at: DateTime<Utc>,
    pub changed_by: String,
    pub old_epsilon: Option<f64>,
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

#[derive(Debug, Serialize)]
pub struct AllocationList {
    pub order: f64,
    pub allocations: Vec<AllocationView>,
    /// The audit trail of these allocations, oldest first.
    pub changes: Vec<AllocationChangeView>,
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

async fn set(
    State(state): State<AppState>,
    Admin(caller): Admin,
    ApiPath((id, token_id)): ApiPath<(Uuid, String)>,
    ApiJson(req): ApiJson<SetAllocation>,
) -> Result<Json<AllocationView>, ApiError> {
    let dataset = state.dataset_for(&caller, id).await?;
    let total = parse_epsilon(req.epsilon)?;
    let outcome = state
        .store
        .set_allocation(id, &token_id, Some(total), &caller.name(), Utc::now())
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
        token_id,
        total,
        spent,
    })))
}

async fn remove(
    State(state): State<AppState>,
    Admin(caller): Admin,
    ApiPath((id, token_id)): ApiPath<(Uuid, String)>,
) -> Result<StatusCode, ApiError> {
    state.dataset_for(&caller, id).await?;
    match state
        .store
        .set_allocation(id, &token_id, None, &caller.name(), Utc::now())
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

/// The admin sees every allocation of the dataset and every change; an analyst only their own.
async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<AllocationList>, ApiError> {
    let dataset = state.dataset_for(&caller, id).await?;
    let only = match &caller {
        Caller::Admin => None,
        Caller::Analyst { token_id, .. } => Some(token_id.as_str()),
    };
    let allocations = state.store.list_allocations(id, only).await?;
    let changes = state.store.allocation_changes(id, only).await?;
    Ok(Json(AllocationList {
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
