//! The browser console at `/console`: static HTML, CSS and JavaScript modules compiled into the
//! binary (no build step, no external origin), plus `GET /v1/whoami`, which tells the console
//! which role a token has so it can show the admin forms only to the admin.
//!
//! The console is a client of the public API and nothing more: it holds the bearer token in the
//! tab's `sessionStorage` and sends it only in the `Authorization` header, so it can do nothing
//! the API would refuse. What it knows of the mechanisms (which exist, their fields, how each
//! reads ε, tables, plan targets) it reads from `GET /v1/mechanisms`, so its release and plan
//! forms follow the service without an edit here. Its pages carry a strict Content-Security-Policy (scripts, styles and
//! connections from this origin only, no inline code, no framing, no form submission) so that a
//! dataset name or a problem `detail` shown on a page cannot become script.

use std::collections::BTreeMap;

use axum::extract::Request;
use axum::http::{header, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{ContentBuilder, RefOr, Required, ResponseBuilder};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::auth::Caller;
use super::error::{problems, ApiError};
use super::extract::ApiPath;
use super::paths::header_ref;
use super::AppState;
use crate::schema::{self, SchemaRef};

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
pub const ASSETS: [(&str, &str, &str); 7] = [
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
        "populations.js",
        "text/javascript; charset=utf-8",
        include_str!("console/assets/populations.js"),
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
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(whoami))
        .routes(routes!(index))
        .routes(routes!(asset))
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

/// A console response: its media types and the security headers every console response carries.
struct Page {
    description: &'static str,
    media: &'static [(&'static str, Option<&'static str>)],
}

impl Page {
    fn responses(&self) -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        let mut response = self
            .media
            .iter()
            .fold(
                ResponseBuilder::new().description(self.description),
                |response, (media, pattern)| {
                    let body = schema::string().pattern(*pattern);
                    response.content(*media, ContentBuilder::new().schema(Some(body)).build())
                },
            )
            .build();
        for (name, component) in [
            ("Content-Security-Policy", "ContentSecurityPolicy"),
            ("X-Content-Type-Options", "NoSniff"),
            ("Referrer-Policy", "NoReferrer"),
        ] {
            response.headers.insert(name.into(), header_ref(component));
        }
        BTreeMap::from([("200".to_string(), response.into())])
    }
}

/// The 200 of `GET /console`.
struct IndexPage;

impl utoipa::IntoResponses for IndexPage {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        Page {
            description: "The console's page.",
            media: &[("text/html", Some("^<!doctype html>"))],
        }
        .responses()
    }
}

/// The 200 of `GET /console/{asset}`.
struct AssetFile;

impl utoipa::IntoResponses for AssetFile {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        Page {
            description: "The file.",
            media: &[
                ("text/css", None),
                ("text/javascript", None),
                ("image/svg+xml", None),
            ],
        }
        .responses()
    }
}

/// The browser console (an HTML page; sign in there with a bearer token).
///
/// Static and public: the page holds no data. Its scripts call this API with the token the
/// user types, kept in the tab's `sessionStorage` and sent only in the `Authorization`
/// header. Every `/console` response carries a strict Content-Security-Policy,
/// `X-Content-Type-Options: nosniff` and `Referrer-Policy: no-referrer`.
#[utoipa::path(
    get,
    path = "/console",
    operation_id = "console",
    tag = "console",
    security(),
    responses(
        IndexPage,
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn index() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX).into_response()
}

/// The path parameter `asset`.
struct AssetName;

impl IntoParams for AssetName {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![ParameterBuilder::new()
            .name("asset")
            .parameter_in(ParameterIn::Path)
            .required(Required::True)
            .description(Some("A file name such as `app.js` or `console.css`."))
            .schema(Some(schema::string()))
            .build()]
    }
}

/// A stylesheet, script module or icon of the console (compiled into the binary).
#[utoipa::path(
    get,
    path = "/console/{asset}",
    operation_id = "consoleAsset",
    tag = "console",
    security(),
    params(AssetName),
    responses(
        AssetFile,
        (status = 404, response = problems::NotFound),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn asset(name: Result<ApiPath<String>, ApiError>) -> Result<Response, ApiError> {
    // A name that is not even text (a NUL, bytes that are not UTF-8) is no console file either.
    let (_, media_type, body) = name
        .ok()
        .and_then(|ApiPath(name)| ASSETS.iter().find(|(file, _, _)| *file == name))
        .ok_or_else(|| ApiError::not_found("console file"))?;
    Ok(([(header::CONTENT_TYPE, *media_type)], *body).into_response())
}

/// The caller: the role of the presented token (and an analyst token's datasets).
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WhoAmI {
    #[schema(schema_with = role)]
    role: &'static str,
    /// An analyst token's public id (what its releases record as `created_by`); for an analyst
    /// signed in through the OpenID provider, `oidc` and 32 hex digits, the same for every token
    /// of that person.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^([0-9a-f]+|oidc[0-9a-f]{32})$", nullable = false)]
    token_id: Option<String>,
    /// The datasets an analyst token may use (absent for the admin, who may use all).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    datasets: Option<Vec<Uuid>>,
}

fn role() -> SchemaRef {
    schema::string()
        .enum_values(Some(["admin", "analyst"]))
        .into()
}

/// The role of the presented token (and an analyst token's datasets).
///
/// What the console asks after sign-in to decide which forms to show; the API itself
/// enforces the role on every call, so the answer grants nothing.
#[utoipa::path(
    get,
    path = "/v1/whoami",
    operation_id = "whoami",
    tag = "tokens",
    responses(
        (status = 200, description = "The caller.", body = WhoAmI),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
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
