//! The release history: a dataset's releases page by page (newest first), and one release.

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::Required;
use utoipa::IntoParams;
use uuid::Uuid;

use super::super::auth::Caller;
use super::super::error::{problems, ApiError};
use super::super::extract::{ApiPath, ApiQuery};
use super::super::paths::DatasetId;
use super::super::views::{
    names, ReleaseItems, ReleaseListView, ReleaseRecordView, ReleaseSummaryView, SortedJson,
};
use super::super::AppState;
use crate::schema;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    #[serde(default, deserialize_with = "crate::wire::non_null")]
    limit: Option<u32>,
    #[serde(default, deserialize_with = "crate::wire::non_null")]
    before: Option<i64>,
    #[serde(default, deserialize_with = "crate::wire::non_null")]
    fields: Option<Fields>,
}

/// `fields=summary` lists releases without their outputs and mechanism records: a client that
/// wants only who spent what when (the console's spend chart) need not fetch every output.
#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
pub(super) enum Fields {
    Summary,
}

const DEFAULT_PAGE: u32 = 100;

impl IntoParams for ListQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let query = |name: &str, description: &str, schema: schema::SchemaRef| {
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Query)
                .required(Required::False)
                .description(Some(description))
                .schema(Some(schema))
                .build()
        };
        vec![
            query(
                "limit",
                "Page size (at most the configured `max_page_size`, 10000 by default); out of range \
                 is 422.",
                schema::integer()
                    .minimum(Some(1))
                    .maximum(Some(10000))
                    .default(Some(DEFAULT_PAGE.into()))
                    .into(),
            ),
            query(
                "before",
                "Only releases with `seq` below this (the `next_before` of the previous page).",
                schema::integer()
                    .minimum(Some(1))
                    .maximum(Some(i64::MAX as f64))
                    .into(),
            ),
            query(
                "fields",
                "`summary` lists each release without its output and mechanism record (either can \
                 hold a value per cell): `id`, `dataset_id`, `seq`, `created_at`, `created_by`, \
                 `label` and `cost`, enough to draw the spend over time. Outputs are not read, and \
                 a page holds up to `max_page_bytes` / 2048 summaries (4096 by default) whatever \
                 the releases' sizes.",
                schema::string().enum_values(Some(["summary"])).into(),
            ),
        ]
    }
}

/// An upper bound on the JSON of one release of `cells` cells and `name_bytes` bytes of stored
/// row names: 25 bytes per number (the longest f64 in shortest form, `-2.2250738585072014e-308`,
/// and a comma), twice the names' bytes (JSON escapes at most double a name without control
/// characters) and 2 KiB for the rest.
fn listed_bytes(cells: i64, name_bytes: i64) -> usize {
    let count = |n: i64| usize::try_from(n).unwrap_or(usize::MAX);
    count(cells)
        .saturating_mul(25)
        .saturating_add(count(name_bytes).saturating_mul(2))
        .saturating_add(2048)
}

/// How many of the releases of `sizes` (newest first) fit in `max_bytes`; at least one when there
/// is one, so that any release can be listed.
fn page_fits(sizes: &[(i64, i64, i64)], max_bytes: usize) -> usize {
    let mut total = 0usize;
    for (n, (_, cells, name_bytes)) in sizes.iter().enumerate() {
        total = total.saturating_add(listed_bytes(*cells, *name_bytes));
        if total > max_bytes {
            return n.max(1);
        }
    }
    sizes.len()
}

/// The dataset's releases, newest first.
#[utoipa::path(
    get,
    path = "/v1/datasets/{id}/releases",
    operation_id = "listReleases",
    tag = "releases",
    params(DatasetId, ListQuery),
    responses(
        (status = 200, description = "One page of releases (of release summaries with `fields=summary`).", body = ReleaseListView),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 422, response = problems::InvalidRequest),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
pub(super) async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<SortedJson<ReleaseListView>, ApiError> {
    caller.require_dataset(id)?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > state.settings.max_page_size {
        return Err(ApiError::invalid_field(
            "limit",
            format!(
                "limit must be between 1 and {}",
                state.settings.max_page_size
            ),
        ));
    }
    if query.before.is_some_and(|b| b < 1) {
        return Err(ApiError::invalid_field(
            "before",
            "before must be at least 1",
        ));
    }
    let dataset = state
        .store
        .get_dataset(id)
        .await?
        .ok_or_else(|| ApiError::not_found("dataset"))?;
    if query.fields == Some(Fields::Summary) {
        // A summary's JSON is bounded whatever the release's size (a label is at most 200
        // characters, 800 bytes), so the page bound is a count: 4096 at the default 8 MiB.
        let fits = (state.settings.max_page_bytes / listed_bytes(0, 0)).clamp(1, limit as usize);
        let summaries = state
            .store
            .list_release_summaries(id, query.before, fits as u32)
            .await?;
        let next_before = match summaries.last() {
            Some(last) if summaries.len() == fits && last.seq > 1 => Some(last.seq),
            _ => None,
        };
        let items = summaries
            .into_iter()
            .map(|r| ReleaseSummaryView::new(r, dataset.order.get()))
            .collect();
        return Ok(SortedJson(ReleaseListView {
            items: ReleaseItems::Summaries(items),
            next_before,
            cells: None,
        }));
    }
    // Sizes first: the page stops before the release that would take it past max_page_bytes
    // (one release always fits), so neither the outputs read nor the answer exceed that bound.
    let sizes = state.store.release_sizes(id, query.before, limit).await?;
    // The page names the dataset's cells once, within the same bound.
    let cells = names(dataset.cells.as_ref());
    let names_bytes = cells
        .as_ref()
        .map_or(0, |n| serde_json::to_vec(n).map_or(0, |json| json.len()));
    let fits = page_fits(
        &sizes,
        state.settings.max_page_bytes.saturating_sub(names_bytes),
    );
    // Pinned below the newest release measured, so one committed meanwhile cannot slip in.
    let before = query.before.or(sizes.first().map(|(seq, _, _)| seq + 1));
    let releases = state
        .store
        .list_releases(id, before, fits.max(1) as u32)
        .await?;
    let releases = if sizes.is_empty() {
        Vec::new()
    } else {
        releases
    };
    let next_before = match releases.last() {
        Some(last) if fits < sizes.len() => Some(last.seq),
        Some(last) if releases.len() == limit as usize && last.seq > 1 => Some(last.seq),
        _ => None,
    };
    let items = releases
        .into_iter()
        .map(|r| ReleaseRecordView::new(r, dataset.order.get(), None))
        .collect();
    Ok(SortedJson(ReleaseListView {
        items: ReleaseItems::Records(items),
        next_before,
        cells,
    }))
}

/// The path parameter `release_id`.
struct ReleaseId;

impl IntoParams for ReleaseId {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![ParameterBuilder::new()
            .name("release_id")
            .parameter_in(ParameterIn::Path)
            .required(Required::True)
            .description(Some(
                "Release id (a malformed id is 404, like an unknown one).",
            ))
            .schema(Some(schema::formatted("uuid")))
            .build()]
    }
}

/// One stored release.
#[utoipa::path(
    get,
    path = "/v1/datasets/{id}/releases/{release_id}",
    operation_id = "getRelease",
    tag = "releases",
    params(DatasetId, ReleaseId),
    responses(
        (status = 200, description = "The release.", body = ReleaseRecordView),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
pub(super) async fn show(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((id, release_id)): ApiPath<(Uuid, Uuid)>,
) -> Result<Json<ReleaseRecordView>, ApiError> {
    let dataset = state.dataset_for(&caller, id).await?;
    let release = state
        .store
        .get_release(id, release_id)
        .await?
        .ok_or_else(|| ApiError::not_found("release"))?;
    Ok(Json(ReleaseRecordView::new(
        release,
        dataset.order.get(),
        dataset.cells.as_ref(),
    )))
}
