//! `/v1/tokens`: analyst tokens confined to a list of datasets.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::auth::generate_analyst_token;
use super::error::ApiError;
use super::extract::{Admin, ApiJson};
use super::AppState;
use crate::ledger::{Role, TokenRecord};

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/tokens", post(create))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateToken {
    datasets: Vec<Uuid>,
}

async fn create(
    State(state): State<AppState>,
    Admin(_caller): Admin,
    ApiJson(req): ApiJson<CreateToken>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    if req.datasets.is_empty() {
        return Err(ApiError::invalid_field(
            "datasets",
            "datasets must list at least one dataset",
        ));
    }
    let mut datasets = req.datasets;
    datasets.sort();
    datasets.dedup();
    for id in &datasets {
        if state.store.get_dataset(*id).await?.is_none() {
            return Err(ApiError::invalid_field(
                "datasets",
                format!("no dataset {id}"),
            ));
        }
    }
    let (id, token, secret_hash) = generate_analyst_token();
    let record = TokenRecord {
        id: id.clone(),
        secret_hash,
        role: Role::Analyst,
        datasets: datasets.clone(),
        created_at: Utc::now(),
    };
    state.store.create_token(&record).await?;
    tracing::info!(token = %id, datasets = datasets.len(), "analyst token created");
    Ok((
        StatusCode::CREATED,
        Json(
            json!({ "id": id, "token": token, "role": "analyst", "datasets": datasets, "created_at": record.created_at }),
        ),
    ))
}
