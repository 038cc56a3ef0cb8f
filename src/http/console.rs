//! The browser console at `/console`: static HTML, CSS and JavaScript modules compiled into the
//! binary (no build step, no external origin), plus `GET /v1/whoami`, which tells the console
//! which role a token has so it can show the admin forms only to the admin.
//!
//! The console is a client of the public API and nothing more: it holds the bearer token in the
//! tab's `sessionStorage` and sends it only in the `Authorization` header, so it can do nothing
//! the API would refuse. Its pages carry a strict Content-Security-Policy (scripts, styles and
//! connections from this origin only, no inline code, no framing, no form submission) so that a
//! dataset name or a problem `detail` shown on a page cannot become script.

use axum::extract::Request;
use axum::http::{header, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use uuid::Uuid;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::ApiPath;
use super::AppState;

/// `form-action 'none'`: every form is handled by script; should the script not run, pressing
/// Enter in the sign-in form must not submit the token as a query string.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
    style-src 'self'; img-src 'self'; connect-src 'self'; font-src 'self'; object-src 'none'; \
    base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The headers every console response carries, success or problem.
pub const SECURITY_HEADERS: [(&str, &str); 6] = [
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cross-origin-opener-policy", "same-origin"),
    // Assets are compiled in, so a stale copy is only ever one reload old; revalidating keeps
    // an upgraded binary from being paired with an old script.
    ("cache-control", "no-cache"),
];

const INDEX: &str = include_str!("console/assets/index.html");

/// (file name, media type, contents) of every asset under `/console/`.
pub const ASSETS: [(&str, &str, &str); 6] = [
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("console/assets/console.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("console/assets/app.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_str!("console/assets/api.js"),
    ),
    (
        "charts.js",
        "text/javascript; charset=utf-8",
        include_str!("console/assets/charts.js"),
    ),
    (
        "dom.js",
        "text/javascript; charset=utf-8",
        include_str!("console/assets/dom.js"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("console/assets/favicon.svg"),
    ),
];

/// The console's routes. Its security headers are added by [`security_headers`], which
/// `http::router` installs outside every other layer.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console", get(index))
        .route("/console/{asset}", get(asset))
        .route("/v1/whoami", get(whoami))
}

/// Whether `path` is the console's: `/console` and everything under it, routed or not.
fn is_console(path: &str) -> bool {
    path.strip_prefix("/console")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Adds [`SECURITY_HEADERS`] to every response under `/console`. It is a router-wide layer
/// keyed on the path rather than a layer on the console's routes because the responses a
/// browser may still render there are made outside those routes: the 431 of the header limits
/// (before routing), the router's 404 for an unrouted path such as `/console/a/b`, its 405, the
/// request timeout's 503 and a caught panic's 500.
pub async fn security_headers(req: Request, next: Next) -> Response {
    let console = is_console(req.uri().path());
    let mut response = next.run(req).await;
    if console {
        let headers = response.headers_mut();
        for (name, value) in SECURITY_HEADERS {
            headers.insert(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
    }
    response
}

async fn index() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX).into_response()
}

async fn asset(ApiPath(name): ApiPath<String>) -> Result<Response, ApiError> {
    let (_, media_type, body) = ASSETS
        .iter()
        .find(|(file, _, _)| *file == name)
        .ok_or_else(|| ApiError::not_found("console file"))?;
    Ok(([(header::CONTENT_TYPE, *media_type)], *body).into_response())
}

#[derive(Serialize)]
struct WhoAmI {
    role: &'static str,
    /// The analyst token's public id (what releases record as `created_by`).
    #[serde(skip_serializing_if = "Option::is_none")]
    token_id: Option<String>,
    /// The datasets an analyst token may use; absent for the admin, who may use all.
    #[serde(skip_serializing_if = "Option::is_none")]
    datasets: Option<Vec<Uuid>>,
}

async fn whoami(caller: Caller) -> Json<WhoAmI> {
    Json(match caller {
        Caller::Admin => WhoAmI {
            role: "admin",
            token_id: None,
            datasets: None,
        },
        Caller::Analyst { token_id, datasets } => WhoAmI {
            role: "analyst",
            token_id: Some(token_id),
            datasets: Some(datasets),
        },
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn console_paths() {
        for path in ["/console", "/console/", "/console/app.js", "/console/a/b"] {
            assert!(super::is_console(path), "{path}");
        }
        for path in ["/", "/consoles", "/console.js", "/v1/console", "/v1/whoami"] {
            assert!(!super::is_console(path), "{path}");
        }
    }
}
