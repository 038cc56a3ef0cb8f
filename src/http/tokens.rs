//! `/v1/tokens`: analyst tokens confined to a list of datasets, with an optional expiry; listed
//! and revoked by the admin.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::openapi::path::{Parameter, ParameterIn};
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::error::{problems, ApiError};
use super::extract::{Admin, ApiJson, ApiPath};
use super::paths;
use super::views::SortedJson;
use super::AppState;
use crate::access::{generate_analyst_token, Role, TokenId, TokenRecord};
use crate::schema::{self, SchemaRef};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(create, list))
        .routes(routes!(revoke))
}

#[derive(Deserialize, ToSchema)]
#[schema(as = TokenCreate)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// Ids of existing datasets (an unknown one is 422 `invalid-request`).
    #[schema(min_items = 1)]
    datasets: Vec<Uuid>,
    /// RFC 3339 date-time (any offset; stored in UTC) after which the token is refused (401).
    /// Must be in the future (422 `invalid-request` otherwise). Absent or null: the token does
    /// not expire.
    #[serde(default)]
    expires_at: Option<DateTime<Utc>>,
}

/// The token's public id (the `<id>` of `dra_<id>_<secret>`, what releases record as
/// `created_by`).
fn token_id() -> SchemaRef {
    schema::string().pattern(Some("^[0-9a-f]+$")).into()
}

/// A new analyst token: the only time its secret is shown.
#[derive(Serialize, ToSchema)]
#[schema(as = TokenCreated)]
#[serde(deny_unknown_fields)]
pub struct TokenCreatedView {
    /// The token's public id (what releases record as `created_by`).
    #[schema(schema_with = token_id)]
    id: String,
    /// The bearer token `dra_<id>_<secret>`; shown only once.
    #[schema(pattern = "^dra_[0-9a-f]+_[A-Za-z0-9_-]+$")]
    token: String,
    #[schema(schema_with = analyst)]
    role: Role,
    #[schema(min_items = 1)]
    datasets: Vec<Uuid>,
    created_at: DateTime<Utc>,
    #[schema(required = true)]
    expires_at: Option<DateTime<Utc>>,
}

fn analyst() -> SchemaRef {
    schema::constant("analyst").into()
}

fn role() -> SchemaRef {
    schema::string()
        .enum_values(Some(["analyst", "admin"]))
        .into()
}

/// A listed token's id: an issued token's public id, or `oidc` and 32 hex digits for an analyst
/// signed in through the OpenID provider (src/http/oidc.rs, `principal_id`).
fn listed_token_id() -> SchemaRef {
    schema::string()
        .pattern(Some("^([0-9a-f]+|oidc[0-9a-f]{32})$"))
        .into()
}

/// A token as the admin sees it: never its secret or the secret's digest. With single sign-on,
/// also each analyst the provider signed in (id `oidc…`, created on first use, revocable here).
#[derive(Serialize, ToSchema)]
#[schema(as = TokenInfo)]
#[serde(deny_unknown_fields)]
pub struct TokenView {
    #[schema(schema_with = listed_token_id)]
    id: String,
    #[schema(schema_with = role)]
    role: Role,
    datasets: Vec<Uuid>,
    created_at: DateTime<Utc>,
    #[schema(required = true)]
    expires_at: Option<DateTime<Utc>>,
    /// The latest sign-in as last recorded: written at most about once a minute per token and
    /// server, so it may trail the true last use by up to a minute.
    #[schema(required = true)]
    last_used_at: Option<DateTime<Utc>>,
    #[schema(required = true)]
    revoked_at: Option<DateTime<Utc>>,
}

/// Every analyst token, oldest first.
#[derive(Serialize, ToSchema)]
#[schema(as = TokenList)]
#[serde(deny_unknown_fields)]
pub struct TokenListView {
    items: Vec<TokenView>,
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

/// The 201 of `createToken`, with links to the first of its datasets.
struct Created;

impl utoipa::IntoResponses for Created {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        let first = [("id", "$response.body#/datasets/0")];
        let response = paths::created(
            "Created.",
            &TokenCreatedView::name(),
            &[],
            &[
                ("GetDataset", paths::link("getDataset", &first)),
                ("ListReleases", paths::link("listReleases", &first)),
            ],
        );
        BTreeMap::from([("201".to_string(), response.into())])
    }
}

/// Create an analyst token limited to some datasets (admin only).
///
/// The secret is returned once and only its SHA-256 is stored.
#[utoipa::path(
    post,
    path = "/v1/tokens",
    operation_id = "createToken",
    tag = "tokens",
    request_body(content = CreateToken, content_type = "application/json"),
    responses(
        Created,
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
    Admin(_caller): Admin,
    ApiJson(req): ApiJson<CreateToken>,
) -> Result<(StatusCode, SortedJson<TokenCreatedView>), ApiError> {
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
        SortedJson(TokenCreatedView {
            id,
            token,
            role: Role::Analyst,
            datasets,
            created_at: record.created_at,
            expires_at: record.expires_at,
        }),
    ))
}

/// Every analyst token, revoked and expired ones included (admin only).
///
/// Never the secret or its digest.
#[utoipa::path(
    get,
    path = "/v1/tokens",
    operation_id = "listTokens",
    tag = "tokens",
    responses(
        (status = 200, description = "The tokens, oldest first.", body = TokenListView),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn list(
    State(state): State<AppState>,
    _admin: Admin,
) -> Result<SortedJson<TokenListView>, ApiError> {
    let items = state
        .store
        .list_tokens()
        .await?
        .into_iter()
        .map(TokenView::from)
        .collect();
    Ok(SortedJson(TokenListView { items }))
}

/// The path parameter `id` of a token.
struct TokenIdParam;

impl IntoParams for TokenIdParam {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![paths::token_id_param(
            "id",
            "The token's public id (the `<id>` of `dra_<id>_<secret>`).",
        )]
    }
}

/// Revoke an analyst token (admin only).
///
/// The token is refused (401) by this server at once and by every replica sharing the
/// database within one second (replicas re-read a token at least once a second). Revoking a
/// revoked token is a no-op that keeps the first `revoked_at`.
#[utoipa::path(
    delete,
    path = "/v1/tokens/{id}",
    operation_id = "revokeToken",
    tag = "tokens",
    params(TokenIdParam),
    responses(
        (status = 204, description = "Revoked."),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn revoke(
    State(state): State<AppState>,
    _admin: Admin,
    ApiPath(id): ApiPath<TokenId>,
) -> Result<StatusCode, ApiError> {
    if !state.store.revoke_token(id.as_str(), Utc::now()).await? {
        return Err(ApiError::not_found("token"));
    }
    // Recorded in the database, which every replica reads at least once per `cache::TOKEN_TTL`;
    // this replica also forgets the token at once.
    state.caches.forget_token(id.as_str());
    tracing::info!(token = %id, "analyst token revoked");
    Ok(StatusCode::NO_CONTENT)
}
