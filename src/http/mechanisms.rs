//! `GET /v1/mechanisms`: every mechanism the service runs, as the registry describes it — its
//! fields with their types, defaults and meaning, how it reads `epsilon`, whether it releases
//! tables, takes a lower bound, which planning targets it meets and what a preview forecasts.
//! Clients (the console, the Python client) build their forms and checks from this listing
//! instead of keeping copies. Public, like the API description: it says nothing about any
//! dataset.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::problems;
use super::views::SortedJson;
use super::AppState;
use crate::release::mechanisms::{describe, Description};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::default().routes(routes!(list))
}

/// The listing.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(as = MechanismList)]
#[serde(deny_unknown_fields)]
pub struct MechanismList {
    /// Every mechanism, in the registry's order (the planner's tie-break order); exactly one is
    /// the `default`.
    pub mechanisms: Vec<Description>,
}

/// List the release mechanisms and what each takes and supports.
#[utoipa::path(
    get,
    path = "/v1/mechanisms",
    operation_id = "listMechanisms",
    tag = "mechanisms",
    security(),
    responses(
        (status = 200, description = "Every mechanism the service runs.", body = MechanismList),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn list() -> SortedJson<MechanismList> {
    SortedJson(MechanismList {
        mechanisms: describe(),
    })
}
