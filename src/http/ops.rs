//! Operational endpoints: liveness, readiness, metrics (per-dataset series for the admin token
//! only), the API description.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::auth::Caller;
use super::error::ApiError;
use super::AppState;

/// The API description, compiled in so the binary serves exactly the file it was built with.
pub const OPENAPI_YAML: &str = include_str!("../../openapi.yaml");

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.yaml", get(openapi))
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state.store.ping().await?;
    Ok(Json(
        json!({"status": "ready", "database": state.store.backend()}),
    ))
}

/// Aggregate series for anyone; the per-dataset ledger series (which name every dataset) only
/// for the admin token. A request with any other credentials is refused rather than quietly
/// given less, so a misconfigured scraper is noticed.
async fn metrics(
    State(state): State<AppState>,
    request: Request,
) -> Result<impl IntoResponse, ApiError> {
    let (mut parts, _) = request.into_parts();
    let ledger = if parts.headers.contains_key(header::AUTHORIZATION) {
        Caller::from_request_parts(&mut parts, &state)
            .await?
            .require_admin()?;
        state.store.ledger_summaries().await?
    } else {
        Vec::new()
    };
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(&ledger),
    ))
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI_YAML)
}
