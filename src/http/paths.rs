//! Path and header parameters and response pieces the route modules share: they sit below both
//! the routes (which name them in their `#[utoipa::path]`s) and the document (`openapi.rs`, which
//! assembles the routes), so that neither imports the other for them.

use utoipa::openapi::header::Header;
use utoipa::openapi::link::{Link, LinkBuilder};
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{ContentBuilder, RefOr, Required, Response, ResponseBuilder};
use utoipa::IntoParams;

use crate::schema;

/// `#/components/headers/<name>`.
pub fn header_ref(name: &str) -> RefOr<Header> {
    RefOr::Ref(utoipa::openapi::Ref::new(format!(
        "#/components/headers/{name}"
    )))
}

/// The path parameter `id` of the dataset routes.
pub struct DatasetId;

impl IntoParams for DatasetId {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![ParameterBuilder::new()
            .name("id")
            .parameter_in(ParameterIn::Path)
            .required(Required::True)
            .description(Some(
                "Dataset id (a malformed id is 404, like an unknown one).",
            ))
            .schema(Some(schema::formatted("uuid")))
            .build()]
    }
}

/// A path parameter naming an analyst token by its public id; what is not an id (see
/// [`crate::access::TokenId`]) is 404, like an unknown one.
pub fn token_id_param(name: &str, description: &str) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .description(Some(format!(
            "{description} A malformed id (anything but 1 to {} ASCII letters and digits) is 404, \
             like an unknown one.",
            crate::access::MAX_TOKEN_ID_CHARS
        )))
        .schema(Some(
            schema::string()
                .pattern(Some(format!(
                    "^[0-9A-Za-z]{{1,{}}}$",
                    crate::access::MAX_TOKEN_ID_CHARS
                )))
                .max_length(Some(crate::access::MAX_TOKEN_ID_CHARS)),
        ))
        .build()
}

/// The `Idempotency-Key` header of `createRelease`.
pub struct IdempotencyKey;

impl IntoParams for IdempotencyKey {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![ParameterBuilder::new()
            .name("Idempotency-Key")
            .parameter_in(ParameterIn::Header)
            .required(Required::False)
            .description(Some(
                "Makes retries of a release safe; 1 to 255 visible ASCII characters. Keys are per \
                 dataset and belong to the token that first used them: a retry by that token with \
                 the same body returns the stored release (`Idempotent-Replayed: true`) without a \
                 new charge; the same key with another body, or from another token, is refused \
                 with 422 `idempotency-key-reused`.",
            ))
            .schema(Some(
                schema::string()
                    .min_length(Some(1))
                    .max_length(Some(255))
                    .pattern(Some("^[!-~]+$")),
            ))
            .build()]
    }
}

/// A success response with what `#[utoipa::path]`'s tuples cannot say: required headers
/// (`(name, component)` of `#/components/headers`) and links. Its body, the component schema
/// `body`, must be registered by `openapi::base` (the route registers only what its tuples
/// name).
pub fn created(
    description: &str,
    body: &str,
    headers: &[(&str, &str)],
    links: &[(&str, Link)],
) -> Response {
    let mut response = ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(schema::component(body)))
                .build(),
        )
        .build();
    for (name, component) in headers {
        response
            .headers
            .insert(name.to_string(), header_ref(component));
    }
    for (name, link) in links {
        response
            .links
            .insert(name.to_string(), RefOr::T(link.clone()));
    }
    response
}

/// A link to `operation` with its `parameters` taken from the response (runtime expressions).
pub fn link(operation: &str, parameters: &[(&str, &str)]) -> Link {
    parameters
        .iter()
        .fold(
            LinkBuilder::new().operation_id(operation),
            |link, (name, value)| link.parameter(*name, *value),
        )
        .build()
}
