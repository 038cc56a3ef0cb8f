//! `/v1/tokens`: analyst tokens confined to a list of datasets, with an optional expiry; listed
//! and revoked by the admin.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uuid::Uuid;

use super::error::ApiError;
use super::extract::{Admin, ApiJson, ApiPath};
use super::AppState;
use crate::access::{generate_analyst_token, Role, TokenRecord};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/tokens", post(create).get(list))
        .route("/v1/tokens/{id}", delete(revoke))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateToken {
    datasets: Vec<Uuid>,
    /// RFC 3339; any offset, stored in UTC.
    #[serde(default)]
    expires_at: Option<DateTime<Utc>>,
}

/// A token as the admin sees it: never its secret or the secret's digest.
#[derive(Serialize)]
struct TokenView {
    id: String,
    role: Role,
    datasets: Vec<Uuid>,
    created_at: DateTime<Utc>,
    expires_at: Option<DateTime<Utc>>,
    last_used_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
}

impl From<TokenRecord> for TokenView {
    fn from(t: TokenRecord) -> Self {
        TokenView {
            id: t.id,
            role: t.role,
            datasets: t.datasets,
            created_at: t.created_at,
            expires_at: t.expires_at,
            last_used_at: t.last_used_at,
            revoked_at: t.revoked_at,
        }
    }
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
    let created_at = Utc::now();
    if req.expires_at.is_some_and(|at| at <= created_at) {
        return Err(ApiError::invalid_field(
            "expires_at",
            "expires_at must be in the future",
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
        created_at,
        expires_at: req.expires_at,
        last_used_at: None,
        revoked_at: None,
    };
    state.store.create_token(&record).await?;
    tracing::info!(token = %id, datasets = datasets.len(), "analyst token created");
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "id": id,
            "token": token,
            "role": "analyst",
            "datasets": datasets,
            "created_at": record.created_at,
            "expires_at": record.expires_at,
        })),
    ))
}

async fn list(State(state): State<AppState>, _admin: Admin) -> Result<Json<Value>, ApiError> {
    let items: Vec<TokenView> = state
        .store
        .list_tokens()
        .await?
        .into_iter()
        .map(TokenView::from)
        .collect();
    Ok(Json(json!({ "items": items })))
}

/// Revocation is recorded in the database, which every replica reads at least once per
/// `cache::TOKEN_TTL`; this replica also forgets the token at once.
async fn revoke(
    State(state): State<AppState>,
    _admin: Admin,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    // Token ids are 16 hex digits; anything else cannot name a token.
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(ApiError::not_found("token"));
    }
    if !state.store.revoke_token(&id, Utc::now()).await? {
        return Err(ApiError::not_found("token"));
    }
    state.caches.forget_token(&id);
    tracing::info!(token = %id, "analyst token revoked");
    Ok(StatusCode::NO_CONTENT)
}
