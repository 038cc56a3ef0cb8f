//! Operational endpoints: liveness, readiness, metrics (per-dataset series for the admin token
//! only), the API description.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use serde::Serialize;
use utoipa::openapi::{ContentBuilder, RefOr, ResponseBuilder};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::error::{problems, ApiError};
use super::openapi::Served;
use super::views::SortedJson;
use super::AppState;
use crate::schema::{self, SchemaRef};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
        .routes(routes!(openapi))
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Health {
    #[schema(schema_with = ok)]
    status: &'static str,
}

fn ok() -> SchemaRef {
    schema::constant("ok").into()
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Ready {
    #[schema(schema_with = ready)]
    status: &'static str,
    #[schema(schema_with = backend)]
    database: &'static str,
}

fn ready() -> SchemaRef {
    schema::constant("ready").into()
}

fn backend() -> SchemaRef {
    schema::string()
        .enum_values(Some(["postgres", "sqlite"]))
        .into()
}

/// Liveness; does not touch the database.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "operations",
    security(),
    responses(
        (status = 200, description = "The process is serving.", body = Health),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Readiness; one round trip to the database.
///
/// 503 until start-up has connected to the database and applied its migrations: the service
/// listens, and answers `/healthz`, while it waits for a database that is not up yet.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "operations",
    security(),
    responses(
        (status = 200, description = "Start-up has connected to the database, which answers.", body = Ready),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn readyz(State(state): State<AppState>) -> Result<SortedJson<Ready>, ApiError> {
    // Start-up logs its own attempts: a probe meanwhile logs nothing.
    if !state.is_ready() {
        return Err(ApiError::Unavailable);
    }
    state.store.ping().await?;
    Ok(SortedJson(Ready {
        status: "ready",
        database: state.store.backend(),
    }))
}

/// Prometheus metrics (text exposition format).
///
/// Without credentials: the aggregate series only (requests and latencies by method and
/// route template, releases by mechanism, refusals by problem type). With the admin token:
/// also the per-dataset ledger series (`dirichlet_budget_total`, `dirichlet_budget_spent`,
/// `dirichlet_dataset_releases`, labelled by dataset id). Any other credentials are refused.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "operations",
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "Prometheus text exposition format 0.0.4.", body = String, content_type = "text/plain"),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn metrics(
    State(state): State<AppState>,
    request: Request,
) -> Result<impl IntoResponse, ApiError> {
    // Aggregate series for anyone; the per-dataset ledger series (which name every dataset) only
    // for the admin token. A request with any other credentials is refused rather than quietly
    // given less, so a misconfigured scraper is noticed.
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

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.yaml",
    operation_id = "openapi",
    tag = "operations",
    security(),
    responses(
        Description,
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn openapi(Extension(description): Extension<Served>) -> Served {
    description
}

/// The 200 of `GET /openapi.yaml`.
struct Description;

impl utoipa::IntoResponses for Description {
    fn responses() -> std::collections::BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        // Parsed (YAML is JSON's superset), an object; as text, for a client without a YAML
        // parser (openapi-python-client reads it as `text/plain`, scripts/ci/openapi-client.sh), a
        // string.
        let parsed = schema::object()
            .property("openapi", schema::string().pattern(Some(r"^3\.1\.")))
            .required("openapi")
            .required("info")
            .required("paths")
            .required("components");
        let text = schema::string().pattern(Some(r"^openapi: 3\.1\."));
        let document = schema::one_of([parsed.into(), text.into()]);
        let response = ResponseBuilder::new()
            .description("The OpenAPI 3.1 description of this API (this document).")
            .content(
                "application/yaml",
                ContentBuilder::new().schema(Some(document)).build(),
            )
            .build();
        [("200".to_string(), response.into())].into()
    }
}
