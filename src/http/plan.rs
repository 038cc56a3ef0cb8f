//! `POST /v1/datasets/{id}/plan`: accuracy-first planning without the data. The caller describes
//! the releases they intend (shapes, public totals, a mechanism or `auto`, ε or an accuracy
//! target) and learns which mechanism, ε, parameters and forecast each would get and whether the
//! whole list fits what they may still spend. No counts are sent, nothing is drawn or charged,
//! and the answer depends only on the request and the dataset's public parameters
//! (`release::workload`).

use std::sync::Arc;

use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::auth::Caller;
use super::error::{problems, ApiError};
use super::extract::{ApiJson, ApiPath};
use super::paths::DatasetId;
use super::views::SortedJson;
use super::AppState;
use crate::ledger::{Names, Units};
use crate::release::request::Context;
use crate::release::workload::{plan_workload_until, Cancel, PlanAnswer, PlanRequest};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::default().routes(routes!(plan))
}

/// Plan releases for accuracy, before spending: for each planned release (its shape, a public
/// total `n` or a public lower bound of it, a mechanism or `auto`, and ε or an accuracy target),
/// the mechanism chosen, the cheapest ε on the ledger grid that meets the target (or why none
/// does, and what would), the calibrated parameters and the worst-case forecast; for the list,
/// the total cost and whether it fits what the caller may still spend (the dataset's remaining
/// budget, or less under the calling analyst's allocation). Nothing is charged and no counts are
/// sent. The totals must be public: choosing ε by looking at private counts would itself leak
/// (docs/PRIVACY.md, "Planning for accuracy").
#[utoipa::path(
    post,
    path = "/v1/datasets/{id}/plan",
    operation_id = "planReleases",
    tag = "planning",
    params(DatasetId),
    request_body(content = PlanRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The plan; nothing was charged.", body = PlanAnswer),
        (status = 400, response = problems::MalformedRequest),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 413, response = problems::PayloadTooLarge),
        (status = 415, response = problems::UnsupportedMediaType),
        (status = 422, response = problems::InvalidRequest),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn plan(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(request): ApiJson<PlanRequest>,
) -> Result<SortedJson<PlanAnswer>, ApiError> {
    let dataset = state.dataset_for(&caller, id).await?;
    let mut remaining = dataset.budget().remaining();
    // A dataset split into blocks: the plan's items name no blocks, so what is left is judged
    // on the fullest block, where a plan that fits fits every block (a sufficient condition).
    if let Some(blocking) = dataset.blocks {
        let fullest = state
            .store
            .most_spent_block(id, blocking.period)
            .await?
            .map_or(Units::ZERO, |b| b.spent);
        remaining = remaining.min(blocking.cap.saturating_sub(fullest));
    }
    if let Caller::Analyst { token_id, .. } = &caller {
        if let Some(allocation) = state
            .store
            .list_allocations(id, Some(token_id))
            .await?
            .pop()
        {
            remaining = remaining.min(allocation.remaining());
        }
    }
    let ctx = Context {
        ledger_order: dataset.order,
        sensitivity: dataset.sensitivity,
        max_dimension: state.settings.max_dimension,
        max_exponential_n: state.settings.max_exponential_n,
        cells: dataset.cells.as_ref().map(Names::len),
    };
    // CPU-bound (calibrations, and rayon across the distinct items): off the async workers, on
    // the planner's own pool (never the one large draws run on), and cancelled when this
    // handler is dropped — the request timed out or the client went away — so that nobody's
    // plan keeps the cores busy.
    let cancel = Arc::new(Cancel::default());
    let _cancel_on_drop = CancelOnDrop(cancel.clone());
    let (pool, metrics) = (state.planner.clone(), state.metrics.clone());
    let planned = tokio::task::spawn_blocking(move || {
        let planned =
            pool.install(|| plan_workload_until(&request, &ctx, Some(remaining), &cancel));
        if let Ok(Err(_)) = &planned {
            metrics.plans_cancelled.inc();
        }
        planned
    })
    .await
    .map_err(|e| ApiError::Internal(format!("planner task failed: {e}")))?
    .map_err(|e| ApiError::invalid_field(&e.field, e.message))?;
    match planned {
        Ok(answer) => Ok(SortedJson(answer)),
        // (Only after this handler was dropped, when nobody reads it.)
        Err(_cancelled) => Err(ApiError::Timeout),
    }
}

/// Cancels a plan when the handler that waits for it is dropped.
struct CancelOnDrop(Arc<Cancel>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.0.is_cancelled() {
            self.0.cancel();
        }
    }
}
