//! HTTP layer: one `router()` per resource, each route registered with its description
//! (`openapi`), merged here under the shared layers (tracing, metrics, timeout, header and body
//! limits, panic catching) and one problem+json error type.

pub mod admins;
pub mod allocations;
pub mod audit;
pub mod auth;
pub mod cache;
pub mod console;
pub mod datasets;
pub mod error;
pub mod extract;
pub mod limits;
pub mod mechanisms;
pub mod metrics;
pub mod oidc;
pub mod openapi;
pub mod ops;
pub mod paths;
pub mod plan;
pub mod populations;
pub mod releases;
pub mod tokens;
pub mod views;

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};
use tokio_util::task::TaskTracker;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa_axum::router::OpenApiRouter;

use crate::config::Settings;
use crate::ledger::LedgerStore;
use error::ApiError;
use metrics::Metrics;

/// What every handler and middleware shares. Axum clones the state for each extractor and
/// layer that asks for it, several times a request: one reference count to bump, not the twenty
/// or so of the fields' own `Arc`s (their clones and drops were about a sixth of the server's
/// CPU under the spread benchmark, BENCHMARKS.md, "End to end").
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The fields of [`AppState`].
pub struct Shared {
    /// Answers `Unavailable` until start-up has connected to the database
    /// (`store::deferred::Deferred`).
    pub store: Arc<dyn LedgerStore>,
    pub settings: Arc<Settings>,
    /// Known once start-up has connected to the database (where they may be stored): the
    /// service is ready from then on.
    pub keys: Arc<OnceLock<Keys>>,
    pub metrics: Metrics,
    /// Release tasks that must finish before shutdown completes.
    pub tasks: TaskTracker,
    /// Verified analyst tokens and datasets (see `cache`).
    pub caches: Arc<cache::Caches>,
    /// The allowance of large request bodies read and parsed at once.
    pub bodies: Arc<limits::Bodies>,
    /// The planner's own threads (`plan`): plans never compete with the sampler's pool.
    pub planner: Arc<rayon::ThreadPool>,
    /// Admin tokens from `admin_tokens_file`, beside `Keys::admin_digest`.
    pub admin_tokens: Arc<admins::AdminTokens>,
    /// Single sign-on, when an OpenID provider is configured.
    pub oidc: Option<Arc<oidc::Verifier>>,
}

/// The keys start-up reads from the configuration or the database.
#[derive(Debug, Clone, Copy)]
pub struct Keys {
    /// SHA-256 of the admin token.
    pub admin_digest: [u8; 32],
    /// Key of the idempotency fingerprint HMAC.
    pub fingerprint_key: [u8; 32],
}

impl AppState {
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }

    /// The keys, or 503 while start-up has not connected to the database.
    pub fn keys(&self) -> Result<&Keys, ApiError> {
        self.keys.get().ok_or(ApiError::Unavailable)
    }

    /// Start-up is done: the database is connected and the keys are known.
    pub fn is_ready(&self) -> bool {
        self.keys.get().is_some()
    }

    /// The dataset `id` as `caller` may see it: 404 alike when it does not exist and when it is
    /// outside an analyst token's scope.
    pub async fn dataset_for(
        &self,
        caller: &auth::Caller,
        id: uuid::Uuid,
    ) -> Result<crate::ledger::Dataset, ApiError> {
        caller.require_dataset(id)?;
        self.store
            .get_dataset(id)
            .await?
            .ok_or_else(|| ApiError::not_found("dataset"))
    }
}

/// Every route with its description: one value, so that no route is served undescribed (each
/// resource's router registers its handlers with `utoipa_axum::routes!`, which reads the path and
/// method from the handler's `#[utoipa::path]`). In the description's order.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::base())
        .merge(ops::router())
        .merge(datasets::router())
        .merge(populations::router())
        .merge(allocations::router())
        .merge(plan::router())
        .merge(mechanisms::router())
        .merge(audit::router())
        .merge(releases::router())
        .merge(tokens::router())
        .merge(console::router())
}

pub fn router(state: AppState) -> Router {
    let body_limit = state.settings.max_body_bytes;
    let (routes, description) = routes().split_for_parts();
    routes
        .layer(Extension(openapi::Served::new(&description)))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn_with_state(state.clone(), header_limits))
        .layer(middleware::from_fn_with_state(state.clone(), limits::request_timeout))
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .layer(CatchPanicLayer::custom(|_| ApiError::Internal("a handler panicked".into()).into_response()))
        .layer(
            // Method, route template and request id only: never the body, never the query.
            TraceLayer::new_for_http().make_span_with(|req: &Request| {
                let route = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned()).unwrap_or_default();
                let id = req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                tracing::info_span!("request", method = method_label(req.method()), route = %route, request_id = %id)
            }),
        )
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        // Outermost, so that every answer under /console carries the console's headers,
        // including those made by the layers above (431, 413, 503, 500).
        .layer(middleware::from_fn(console::security_headers))
        .with_state(state)
}

/// The header limits: more than `max_headers` header lines, or more than `max_header_bytes` of
/// header names and values in total, is a 431 problem before any handler (or the token check)
/// runs. The HTTP/1 parser's own caps are set above these (see `startup`), so that every
/// oversized request within them gets this problem document rather than a bare 431.
async fn header_limits(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if headers.len() > state.settings.max_headers || bytes > state.settings.max_header_bytes {
        return ApiError::HeadersTooLarge {
            max_headers: state.settings.max_headers,
            max_bytes: state.settings.max_header_bytes,
        }
        .into_response();
    }
    // A declared body over the limit is refused before a byte of it is read, and the connection
    // is not kept: the client may still be sending it.
    if limits::content_length(headers).is_some_and(|n| n > state.settings.max_body_bytes as u64) {
        let mut response = ApiError::PayloadTooLarge.into_response();
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
    next.run(req).await
}

/// The method as a metric label: the standard ones by name, anything else as `other`, so that
/// clients cannot create label values (and series) at will.
fn method_label(method: &axum::http::Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "PATCH" => "PATCH",
        "OPTIONS" => "OPTIONS",
        "TRACE" => "TRACE",
        "CONNECT" => "CONNECT",
        _ => "other",
    }
}

/// Request metrics, plus `Retry-After` on every 503.
async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(req.method());
    // A matched route's template; every other path is one label.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let mut response = next.run(req).await;
    let status = response.status();
    if status == StatusCode::SERVICE_UNAVAILABLE
        && !response.headers().contains_key(header::RETRY_AFTER)
    {
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(state.settings.retry_after_secs),
        );
    }
    state
        .metrics
        .requests
        .with_label_values(&[method, &route, status.as_str()])
        .inc();
    state
        .metrics
        .latency
        .with_label_values(&[method, &route])
        .observe(started.elapsed().as_secs_f64());
    response
}
