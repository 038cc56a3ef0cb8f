//! The API description, generated from the code.
//!
//! Every route is registered with `utoipa_axum`'s `routes!` from its handler's
//! `#[utoipa::path]`, so the router and the description are one value ([`super::routes`]): a route
//! cannot be served without being described, nor described without being served. Schemas come
//! from the wire types (`ToSchema`), problem types from `error::ProblemType`. This module adds what
//! belongs to no route: the document's head, the shared headers and the problem responses; and
//! renders it as YAML: the committed openapi.yaml is this text (tests/it/openapi.rs fails when it
//! is stale and says how to refresh it), and `GET /openapi.yaml` serves it.

use axum::body::Bytes;
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::json;
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::header::{Header, HeaderBuilder};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::tag::TagBuilder;
use utoipa::openapi::{
    ComponentsBuilder, InfoBuilder, LicenseBuilder, OpenApi, OpenApiBuilder, ServerBuilder,
};
use utoipa::ToSchema;

use super::error::{problems, ProblemType};
use crate::schema::{self, SchemaRef};

const DESCRIPTION: &str = "\
Releases one draw y ~ Dirichlet(r·x + α) of a count vector x, charged to a per-dataset
Rényi-DP ledger kept at one order λ₀ (a privacy filter: a release is admitted only if
`spent + cost ≤ total` at λ₀). Baselines (exact discrete Gaussian and discrete Laplace noise
on integer counts, the noisy counts' Euclidean projection onto the simplex) are priced on the
same ledger. A `table` of count vectors over disjoint groups of records (one row per group) is
released row by row under one calibration and one charge, the price of a single vector.

Authentication: `Authorization: Bearer <token>` with the admin token (from configuration) or an
analyst token `dra_<id>_<secret>` created by `POST /v1/tokens`, which is limited to the datasets
it lists. An analyst asking for a dataset outside its list gets 404, exactly as for a dataset
that does not exist.

With single sign-on configured, a JWT access token of the service's OpenID provider is accepted
too: its role and an analyst's datasets come from its claims (`dirichlet_role`,
`dirichlet_datasets` by default), and an analyst's spend and allocations are kept under the id
`oidc<32 hex digits>` of its issuer and subject, the same across token renewals. A token that
is not valid is 401; a valid one without a known role 403; 503 (with `Retry-After`) when the
provider's keys are needed and the provider cannot be reached.

Every error is an RFC 9457 `application/problem+json` document whose `type` is a relative URI
reference `/problems/<slug>`; each problem type has a schema of its own (`<Name>Problem`), and
each operation lists, per status, the problem types it may answer. JSON syntax errors are 400
`malformed-request`; well-formed JSON of the wrong shape (a body that is not a JSON object,
wrong types, unknown fields, missing or out-of-range values such as `1e999`, invalid
combinations) is 422 `invalid-request`. No problem document quotes a value that was sent: a
detail names the field by its path and the kind of error.

Numbers: every privacy amount (`total`, `spent`, `remaining`, a cost's `epsilon`) lies on the
ledger's grid of multiples of 2⁻⁴⁰ and is at most 8192, so it is exactly representable and sums
exactly. Counts are never echoed into logs, error messages or the database.

This document is generated from the service's code (`UPDATE_OPENAPI=1 cargo test --test it
openapi::` refreshes the committed copy).
";

/// What belongs to no route: the head, the security scheme, tags, shared headers, and the problem
/// types with their responses.
pub fn base() -> OpenApi {
    let info = InfoBuilder::new()
        .title("dirichlet-release")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(DESCRIPTION))
        .license(Some(
            LicenseBuilder::new()
                .name("MIT OR Apache-2.0")
                .identifier(Some("MIT OR Apache-2.0"))
                .build(),
        ))
        // OpenAPI 3.1's `summary`, a field utoipa's model lacks.
        .extensions(Some(Extensions::from_iter([(
            "summary",
            json!("Differentially private release of distributions with the Dirichlet mechanism."),
        )])))
        .build();
    let tags = [
        ("operations", "Liveness, readiness, metrics and this document (no authentication; the per-dataset metrics need the admin token)."),
        ("datasets", "Datasets and their privacy ledgers."),
        ("allocations", "Analysts' shares of a dataset's budget, under the dataset's cap."),
        ("planning", "Accuracy-first planning from public inputs: no counts, no charge."),
        (
            "mechanisms",
            "The release mechanisms, their fields and what each supports, for clients to build on.",
        ),
        ("releases", "Private releases of a dataset's distribution."),
        ("populations", "Budgets that span datasets: populations in a tree, each node capping what the datasets and populations under it are charged."),
        ("tokens", "Analyst tokens."),
        ("console", "The browser console's page and files (no authentication; the data stays behind the API)."),
    ]
    .map(|(name, description)| TagBuilder::new().name(name).description(Some(description)).build());
    let mut components = ComponentsBuilder::new().security_scheme(
        "bearer",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "The admin token (or one from the admin tokens file), an analyst token \
                     `dra_<id>_<secret>`, or, with single sign-on, a JWT access token of the \
                     configured OpenID provider (asymmetric signature, `iss`, `aud`, `exp`).",
                ))
                .build(),
        ),
    );
    for (name, header) in headers() {
        components = components.header(name, header);
    }
    for problem in ProblemType::ALL {
        components = components.schema(problem.schema_name(), problem.schema());
    }
    for (name, response) in problems::all() {
        components = components.response(name, response);
    }
    // The bodies of the responses built by hand: a problem's `budget`, the 201s of
    // `createRelease` and `createToken`.
    components = register::<super::views::BudgetView>(components);
    components = register::<super::views::AllocationView>(components);
    components = register::<super::views::ReleaseView>(components);
    components = register::<super::tokens::TokenCreatedView>(components);
    OpenApiBuilder::new()
        .json_schema_dialect(Some("https://spec.openapis.org/oas/3.1/dialect/base"))
        .info(info)
        .servers(Some([ServerBuilder::new().url("/").build()]))
        .security(Some([SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]))
        .tags(Some(tags))
        .components(Some(components.build()))
        .build()
}

/// `T`'s schema and those it refers to, for responses built by hand (a route's `#[utoipa::path]`
/// registers the schemas of its own bodies).
pub fn register<T: ToSchema>(components: ComponentsBuilder) -> ComponentsBuilder {
    let mut nested = Vec::new();
    T::schemas(&mut nested);
    components
        .schema(T::name(), T::schema())
        .schemas_from_iter(nested)
}

/// A response header of `#/components/headers`.
fn header(description: Option<&str>, schema: impl Into<SchemaRef>, required: bool) -> Header {
    let mut header = HeaderBuilder::new()
        .description(description)
        .schema(Some(schema))
        .build();
    if required {
        // `required`, a field of OpenAPI's Header Object that utoipa's model lacks.
        header.extensions = Some(Extensions::from_iter([("required", json!(true))]));
    }
    header
}

fn headers() -> Vec<(&'static str, Header)> {
    vec![
        (
            "Location",
            header(
                Some("URI reference of the created resource."),
                schema::formatted("uri-reference"),
                true,
            ),
        ),
        (
            "IdempotentReplayed",
            header(
                Some("Present, with value `true`, when the response replays a stored release."),
                schema::string().enum_values(Some(["true"])),
                false,
            ),
        ),
        (
            "WwwAuthenticate",
            header(
                Some("The authentication scheme to use."),
                schema::string().pattern(Some("^Bearer")),
                true,
            ),
        ),
        (
            "RetryAfter",
            header(
                Some("Seconds to wait before retrying (set on every 503)."),
                schema::string().pattern(Some("^[0-9]+$")),
                true,
            ),
        ),
        (
            "Allow",
            header(
                Some("The methods the resource supports."),
                schema::string(),
                false,
            ),
        ),
        (
            "ContentSecurityPolicy",
            header(
                Some("The console's policy; scripts, styles and connections from this origin only, no framing."),
                schema::asserting(
                    schema::string(),
                    [
                        json!({"pattern": "default-src 'self'"}),
                        json!({"pattern": "frame-ancestors 'none'"}),
                        json!({"not": {"pattern": "unsafe-inline|unsafe-eval"}}),
                    ],
                ),
                true,
            ),
        ),
        (
            "NoSniff",
            header(None, schema::constant("nosniff"), true),
        ),
        (
            "NoReferrer",
            header(None, schema::constant("no-referrer"), true),
        ),
    ]
}

/// The description: the one of the router [`super::routes`] serves.
pub fn document() -> OpenApi {
    super::routes().into_openapi()
}

/// The description as YAML: the text of openapi.yaml.
pub fn to_yaml(api: &OpenApi) -> String {
    // Serialising plain data cannot fail.
    api.to_yaml().expect("the description serialises")
}

/// The description as served at `GET /openapi.yaml`: rendered once, from the router's own value.
#[derive(Clone)]
pub struct Served(Bytes);

impl Served {
    pub fn new(api: &OpenApi) -> Served {
        Served(Bytes::from(to_yaml(api)))
    }
}

impl IntoResponse for Served {
    fn into_response(self) -> axum::response::Response {
        ([(header::CONTENT_TYPE, "application/yaml")], self.0).into_response()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn refs<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(target)) = map.get("$ref") {
                    out.push(target);
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    /// Responses built by hand register their bodies in `base`; a body forgotten there would be
    /// a dangling `$ref`.
    #[test]
    fn every_reference_resolves() {
        let document = serde_json::to_value(document()).unwrap();
        let mut found = Vec::new();
        refs(&document, &mut found);
        assert!(found.len() > 100, "{}", found.len());
        for target in found {
            let pointer = target.strip_prefix('#').expect("a local reference");
            assert!(
                document.pointer(pointer).is_some(),
                "{target} resolves to nothing"
            );
        }
    }

    /// Extension keywords live in hash maps: the rendering must still be the same every time.
    #[test]
    fn the_rendering_is_deterministic() {
        let first = to_yaml(&document());
        for _ in 0..8 {
            assert_eq!(to_yaml(&document()), first);
        }
    }
}
