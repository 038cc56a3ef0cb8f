//! `/v1/datasets/{id}/releases`: preview and release here; retries in [`idempotency`], the
//! history in [`list`].
//!
//! Order of a release: authorise → parse ([`RequestBody`] → [`Request`], `crate::release::request`)
//! → calibrate and price at the ledger order → idempotency fingerprint → budget pre-check (saves
//! drawing a sample that would be refused) → draw → `commit_release` (check the key, charge and
//! record in one transaction) → respond. A stored key is found by the commit (`Existing`, and
//! the stored release is replayed), or before the draw when the draw costs more than a look-up
//! (large outputs) or the pre-check would refuse. The output leaves the service only after the
//! commit returned `Committed`.

mod charges;
mod idempotency;
mod list;

use std::borrow::Cow;
use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Serialize;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

pub use idempotency::body_fingerprint;

use super::auth::Caller;
use super::error::{problems, ApiError};
use super::extract::{parse_json_bounded, ApiJson, ApiPath};
use super::limits::CommitGate;
use super::paths::{DatasetId, IdempotencyKey};
use super::views::{
    allocation_json, budget_json, names, AllocationView, BudgetView, CostView, ReleaseView,
    SortedJson,
};
use super::AppState;
use crate::ledger::{
    Allocation, BlockRange, BlockSpend, BudgetState, CommitOutcome, Dataset, Idempotency, Names,
    NewRelease, Units,
};
use crate::release::input::Input;
use crate::release::mechanism::Context;
use crate::release::request::{Request, RequestBody, RequestError};
use crate::release::table;
use crate::release::{self, Plan, PlanError, Record, VectorForecast};
use crate::schema::{self, SchemaRef};

/// Draws with fewer cells than this run inline; larger ones move to the blocking pool, and their
/// idempotency key is looked up before the draw.
const INLINE_DRAW_CELLS: usize = 4096;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(create, list::list))
        .routes(routes!(preview))
        .routes(routes!(list::show))
        .routes(routes!(charges::create))
}

impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> Self {
        ApiError::invalid_field(e.field, e.message)
    }
}

fn plan_error(e: PlanError, dataset: &Dataset) -> ApiError {
    match e {
        PlanError::Infeasible(err) => ApiError::CalibrationInfeasible(err.to_string()),
        PlanError::NoGuarantee { .. } => ApiError::NoGuarantee(e.to_string()),
        PlanError::CostExceedsCap { .. } => ApiError::CostExceedsEpsilon(e.to_string()),
        PlanError::TooExpensive { .. } => exhausted(&dataset.budget(), e.to_string()),
        PlanError::Parameter(message) => ApiError::invalid(message),
        PlanError::BeyondPrecision(message) => ApiError::BeyondPrecision(message),
    }
}

fn exhausted(budget: &BudgetState, detail: String) -> ApiError {
    ApiError::BudgetExhausted {
        detail,
        budget: budget_json(budget),
    }
}

/// The blocks a request names (`blocks` as `from`/`to`, or `block`), parsed against the
/// dataset's period: required on a blocked dataset, refused on another (422 naming the field).
pub(super) fn block_range(
    dataset: &Dataset,
    blocks: Option<(&str, &str)>,
    block: Option<&str>,
    max: u32,
) -> Result<Option<BlockRange>, ApiError> {
    BlockRange::from_request(dataset.blocks.map(|b| b.period), blocks, block, max)
        .map_err(|(field, e)| ApiError::invalid_field(field, e.to_string()))
}

/// The 409 of a release refused by a block of its range (`block`, as it refused): the block is
/// named in the detail and in `block`, and `budget` is that block's ledger.
pub(super) fn block_exhausted(
    block: &BlockSpend,
    cap: Units,
    budget: &BudgetState,
    charge: Units,
    what: &str,
) -> ApiError {
    let ledger = BudgetState {
        total: cap,
        spent: block.spent,
        ..*budget
    };
    ApiError::BlockExhausted {
        detail: format!(
            "{what} costs {} at order {} but block {} has only {} of its {} left; nothing was \
             charged on any block",
            charge.to_f64(),
            budget.order.get(),
            block.key,
            ledger.remaining().to_f64(),
            cap.to_f64()
        ),
        block: block.key.to_string(),
        budget: budget_json(&ledger),
    }
}

/// The 422 of a release whose blocks do not fit its dataset (caught by the parser before; the
/// stores refuse it again under their locks).
pub(super) fn blocks_mismatch() -> ApiError {
    ApiError::invalid_field(
        "blocks",
        "the blocks named do not match the dataset's split into blocks",
    )
}

/// A release request validated and priced: what to draw from, the plan, the label.
pub struct Planned {
    pub input: Input,
    pub plan: Plan,
    pub label: Option<crate::ledger::Label>,
}

/// Parse `body` against `dataset` and plan it: the request and its priced plan.
fn parse_and_plan(
    body: &RequestBody,
    dataset: &Dataset,
    max_dimension: usize,
    max_exponential_n: u64,
) -> Result<(Request, Plan), ApiError> {
    let ctx = Context {
        ledger_order: dataset.order,
        sensitivity: dataset.sensitivity,
        max_dimension,
        max_exponential_n,
        cells: dataset.cells.as_ref().map(Names::len),
    };
    let request = Request::parse(body, &ctx)?;
    let plan = request
        .plan(dataset.order, &dataset.sensitivity)
        .map_err(|e| plan_error(e, dataset))?;
    Ok((request, plan))
}

async fn load_and_plan(
    state: &AppState,
    caller: &Caller,
    id: Uuid,
    body: &RequestBody,
    cached: bool,
) -> Result<(Arc<Dataset>, Request, Plan, Option<BlockRange>), ApiError> {
    caller.require_dataset(id)?;
    // With `cached`, the ledger figures may be behind (see `super::cache`); the parameters
    // that planning uses are exact.
    let dataset = match cached.then(|| state.caches.dataset(id)).flatten() {
        Some(dataset) => dataset,
        None => state.caches.put_dataset(
            state
                .store
                .get_dataset(id)
                .await?
                .ok_or_else(|| ApiError::not_found("dataset"))?,
        ),
    };
    let (blocks, block) = body.blocks();
    let range = block_range(&dataset, blocks, block, state.settings.max_block_range)?;
    let (request, plan) = parse_and_plan(
        body,
        &dataset,
        state.settings.max_dimension,
        state.settings.max_exponential_n,
    )?;
    Ok((dataset, request, plan, range))
}

/// A release request body, validated and priced against a dataset's ledger: the counts (or
/// table) and the plan that would be drawn and charged. Pure (no store, no randomness) and
/// total: any bytes give a plan or an [`ApiError`], never a panic (`fuzz/fuzz_targets/requests.rs`
/// holds it to that). The handlers run the same steps on the body their extractor parsed, with
/// the configured limits; this uses config/default.toml's `max_exponential_n`.
pub fn plan_release(
    body: &[u8],
    dataset: &Dataset,
    max_dimension: usize,
) -> Result<Planned, ApiError> {
    let body: RequestBody = parse_json_bounded(body, max_dimension)?;
    let (request, plan) = parse_and_plan(
        &body,
        dataset,
        max_dimension,
        crate::config::Settings::defaults().max_exponential_n,
    )?;
    Ok(Planned {
        input: request.input,
        plan,
        label: request.label,
    })
}

/// A preview: what the release would run, cost and give.
#[derive(Serialize)]
struct PreviewView {
    mechanism: Record,
    cost: CostView,
    admissible: bool,
    budget_after: BudgetView,
    /// The calling analyst's allocation after the release, when the admin set one; `admissible`
    /// needs both the dataset's budget and this allocation to have room.
    #[serde(skip_serializing_if = "Option::is_none")]
    allocation_after: Option<AllocationView>,
    /// The dataset's cell names, when it has them.
    #[serde(skip_serializing_if = "Option::is_none")]
    cells: Option<Vec<String>>,
    /// A table's row names, when the request gave them: the rows of `forecasts`.
    #[serde(skip_serializing_if = "Option::is_none")]
    row_names: Option<Vec<String>>,
    /// Vectors: the forecast (null for baselines). Absent for tables.
    #[serde(skip_serializing_if = "Option::is_none")]
    forecast: Option<Option<VectorForecast>>,
    /// Tables: one forecast per row, rows in order. Absent for vectors.
    #[serde(skip_serializing_if = "Option::is_none")]
    forecasts: Option<Vec<Option<VectorForecast>>>,
    /// The mechanism's own comparisons (`without_bound`, `gohari`: `Mechanism::preview_extras`).
    #[serde(flatten)]
    extras: serde_json::Map<String, serde_json::Value>,
}

impl PartialSchema for PreviewView {
    fn schema() -> RefOr<Schema> {
        let preview = schema::closed()
            .description(Some(
                "The price, whether the ledger would admit it, and a forecast. A vector request \
                 gets `forecast`, a table request `forecasts` (one per row, in order).",
            ))
            .property("mechanism", schema::component(&Record::name()))
            .property("cost", schema::component(&CostView::name()))
            .property(
                "admissible",
                schema::boolean().description(Some(
                    "Whether the ledger would admit this release now: the dataset's budget and, \
                     for an analyst with an allocation, the allocation.",
                )),
            )
            .property(
                "budget_after",
                schema::described(
                    &BudgetView::name(),
                    "The ledger as it would be after this release (the current one when not \
                     admissible).",
                ),
            )
            .property(
                "forecast",
                release::mechanisms::forecast_schema()
                    .item(schema::null())
                    .description(Some(
                        "The mechanism's forecast, of the shape `GET /v1/mechanisms` names for it \
                         (the Dirichlet family's `Forecast`; for `exponential` a \
                         `SelectionForecast`). Null for a mechanism without one (the Gaussian and \
                         Laplace mechanisms), and for a `lower_bound` release whose counts break \
                         the bound or whose α is 0 in a cell.",
                    )),
            )
            .property(
                "allocation_after",
                schema::described(
                    "Allocation",
                    "The calling analyst's allocation as it would be after this release (the \
                     current one when not admissible); only for an analyst with an allocation.",
                ),
            )
            .property(
                "cells",
                schema::described(
                    &crate::ledger::Names::name(),
                    "The dataset's cell names, when it has them.",
                ),
            )
            .property(
                "row_names",
                schema::described(
                    &crate::ledger::Names::name(),
                    "A table request's row names, when it gave them: the rows of `forecasts`.",
                ),
            )
            .property(
                "forecasts",
                schema::array(release::mechanisms::forecast_schema().item(schema::null()))
                    .min_items(Some(1))
                    .description(Some(
                        "One forecast per row of the table, in order; each null for the baselines.",
                    )),
            )
            .required("mechanism")
            .required("cost")
            .required("admissible")
            .required("budget_after");
        let (extras, _) = release::mechanisms::preview_schemas();
        let preview = extras
            .into_iter()
            .fold(preview, |p, (name, schema)| p.property(name, schema));
        schema::asserting(preview, [schema::exactly_one_of("forecast", "forecasts")]).into()
    }
}

impl ToSchema for PreviewView {
    fn name() -> Cow<'static, str> {
        "Preview".into()
    }

    fn schemas(schemas: &mut Vec<(String, SchemaRef)>) {
        schemas.push((Record::name().into(), Record::schema()));
        Record::schemas(schemas);
        schemas.push((CostView::name().into(), CostView::schema()));
        schemas.push((BudgetView::name().into(), BudgetView::schema()));
        BudgetView::schemas(schemas);
        schemas.push((
            crate::ledger::Names::name().into(),
            crate::ledger::Names::schema(),
        ));
        release::mechanisms::forecast_schemas(schemas);
        schemas.extend(release::mechanisms::preview_schemas().1);
    }
}

/// Price a release and forecast its utility without drawing or charging anything.
#[utoipa::path(
    post,
    path = "/v1/datasets/{id}/releases/preview",
    operation_id = "previewRelease",
    tag = "releases",
    params(DatasetId),
    request_body(content = RequestBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The price, whether the ledger would admit it, and a forecast.", body = PreviewView),
        (status = 400, response = problems::MalformedRequest),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 409, response = problems::PriceBeyondAnyBudget),
        (status = 413, response = problems::PayloadTooLarge),
        (status = 415, response = problems::UnsupportedMediaType),
        (status = 422, response = problems::PreviewRejected),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn preview(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(body): ApiJson<RequestBody>,
) -> Result<SortedJson<PreviewView>, ApiError> {
    let (dataset, request, plan, range) = load_and_plan(&state, &caller, id, &body, false).await?;
    let budget = dataset.budget();
    // Every block of the range must have room, as the commit would require.
    let blocks_fit = match (range, dataset.blocks) {
        (Some(range), Some(blocking)) => {
            let stored = state.store.block_spends(id, range).await?;
            plan.charge <= blocking.cap
                && stored.iter().all(|b| {
                    b.spent
                        .checked_add(plan.charge)
                        .is_some_and(|after| after <= blocking.cap)
                })
        }
        _ => true,
    };
    let allocation = match &caller {
        Caller::Analyst { token_id, .. } => state
            .store
            .list_allocations(id, Some(token_id))
            .await?
            .pop(),
        Caller::Admin => None,
    };
    let admissible = blocks_fit
        && budget.admits(plan.charge)
        && allocation.as_ref().is_none_or(|a| a.admits(plan.charge));
    let allocation_after = allocation.map(|mut a| {
        if admissible {
            a.spent = a.spent.checked_add(plan.charge).unwrap_or(a.total);
        }
        AllocationView::from(&a)
    });
    let mut after = budget;
    if admissible {
        after.spent = budget
            .spent
            .checked_add(plan.charge)
            .unwrap_or(budget.total);
        after.releases += 1;
    }
    let (forecast, forecasts) = match &request.input {
        Input::Vector(counts) => (Some(plan.draw().forecast(counts)), None),
        Input::Table(t) => (None, Some(table::forecasts(plan.draw(), t))),
    };
    let extras = release::preview_extras(
        &plan,
        &request.input,
        dataset.order,
        &request.input.priced_under(&dataset.sensitivity),
        dataset.dp_target.map(|t| t.delta),
    );
    let view = PreviewView {
        forecast,
        forecasts,
        extras,
        mechanism: plan.record,
        cost: CostView {
            order: dataset.order.get(),
            epsilon: plan.charge.to_f64(),
        },
        admissible,
        budget_after: BudgetView::from(&after),
        allocation_after,
        cells: names(dataset.cells.as_ref()),
        row_names: names(request.row_names.as_ref()),
    };
    Ok(SortedJson(view))
}

/// Calibrate, charge and draw one private release.
///
/// Admission, the charge and the stored release are one transaction: the output is returned
/// only if the charge was committed. With an `Idempotency-Key`, a retry of the same request
/// returns the stored release (header `Idempotent-Replayed: true`) and charges nothing: the
/// same 201 body as the original — the same release (id, seq, distribution, mechanism, cost)
/// and the same `budget`, the ledger right after that release was charged (not the ledger at
/// the time of the replay); the same key with a different request is 422
/// `idempotency-key-reused`, and two `Idempotency-Key` headers are 422 `invalid-request`.
///
/// The request timeout cuts a release only before its commit starts: a 503 `timeout` means
/// nothing was charged. A release whose commit started is answered with the commit's outcome
/// however long past the request timeout the commit takes: 201, 409, or 503
/// `service-unavailable` when the database refused or rolled it back (not charged), for as
/// long as a database that is up may take to answer (its own lock, busy and statement
/// deadlines, and the connection acquire timeout, plus a margin). Only a commit the database
/// has not answered by then (a frozen or unreachable database), or whose connection failed
/// after the commit was sent, is 504 `commit-outcome-unknown`: it may or may not have been
/// charged, and a retry with the same `Idempotency-Key` tells. A release that would take the
/// dataset's stored outputs past the configured quota (`max_stored_cells`) is 409
/// `output-quota-exceeded` and charges nothing.
#[utoipa::path(
    post,
    path = "/v1/datasets/{id}/releases",
    operation_id = "createRelease",
    tag = "releases",
    params(DatasetId, IdempotencyKey),
    request_body(content = RequestBody, content_type = "application/json"),
    responses(
        idempotency::Created,
        (status = 400, response = problems::MalformedRequest),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 409, response = problems::ReleaseConflict),
        (status = 413, response = problems::PayloadTooLarge),
        (status = 415, response = problems::UnsupportedMediaType),
        (status = 422, response = problems::ReleaseRejected),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
        (status = 504, response = problems::CommitOutcomeUnknown),
    )
)]
async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    gate: CommitGate,
    headers: HeaderMap,
    ApiJson(body): ApiJson<RequestBody>,
) -> Result<Response, ApiError> {
    let key = idempotency::key(&headers)?;
    let (
        dataset,
        Request {
            input,
            label,
            row_names,
            ..
        },
        plan,
        range,
    ) = match load_and_plan(&state, &caller, id, &body, true).await {
        Ok(parsed) => parsed,
        Err(e) => {
            state.metrics.refusal(&e);
            return Err(e);
        }
    };
    let idempotency = match key {
        Some(key) => Some(Idempotency {
            fingerprint: body.fingerprint(&state.keys()?.fingerprint_key, id, &caller.name()),
            key,
        }),
        None => None,
    };
    drop(body);
    // The commit checks the key in its transaction (a retry of a stored release is answered
    // `Existing` and replayed below), which saves every keyed release a round trip; a large draw
    // costs more than that round trip, so its retry is looked up first.
    if input.total_cells() >= INLINE_DRAW_CELLS {
        if let Some(replayed) = replay_stored(&state, &dataset, idempotency.as_ref()).await? {
            return Ok(replayed);
        }
    }
    if !dataset.budget().admits(plan.charge) {
        // A retry of a release stored while the budget had room is still its release.
        if let Some(replayed) = replay_stored(&state, &dataset, idempotency.as_ref()).await? {
            return Ok(replayed);
        }
        // The cached figures only lag behind, so this refusal stands; report current ones.
        let current = state
            .store
            .get_dataset(id)
            .await?
            .ok_or_else(|| ApiError::not_found("dataset"))?;
        let budget = current.budget();
        state.caches.put_dataset(current);
        let e = exhausted(&budget, refusal_detail(&plan, &budget));
        state.metrics.refusal(&e);
        return Err(e);
    }

    // An analyst whose allocation refused a release here: read it again before drawing (the
    // admin may have raised it on any replica), and refuse without a draw if it still has no
    // room. The commit decides either way; this only saves the sample.
    if let Caller::Analyst { token_id, .. } = &caller {
        if state.caches.allocation_exhausted(id, token_id) {
            match state
                .store
                .list_allocations(id, Some(token_id))
                .await?
                .pop()
            {
                Some(allocation) if !allocation.admits(plan.charge) => {
                    if let Some(replayed) =
                        replay_stored(&state, &dataset, idempotency.as_ref()).await?
                    {
                        return Ok(replayed);
                    }
                    let e = allocation_exhausted(&allocation, &dataset.budget(), plan.charge);
                    state.metrics.refusal(&e);
                    return Err(e);
                }
                _ => state.caches.set_allocation_exhausted(id, token_id, false),
            }
        }
    }

    // Draw and commit in a task of their own: if the client goes away or the request times
    // out, the commit still completes or rolls back as a whole (and a retry with the same
    // Idempotency-Key gets the stored release); it is never cut between "charged" and "stored".
    let task_state = state.clone();
    let dataset_population = dataset.population;
    let created_by = caller.name();
    let kind = plan.kind().name();
    let asked = plan.charge;
    let outcome = state
        .tasks
        .spawn(async move {
            let (output, drawn) = if input.total_cells() < INLINE_DRAW_CELLS {
                release::draw(&plan, &input)
            } else {
                let plan = plan.clone();
                tokio::task::spawn_blocking(move || release::draw(&plan, &input))
                    .await
                    .map_err(|e| ApiError::Internal(format!("sampler task failed: {e}")))?
            }
            .map_err(|e| ApiError::Internal(format!("sampling refused: {e}")))?;
            let Plan {
                charge, mut record, ..
            } = plan;
            if let Some(drawn) = drawn {
                record.merge(drawn);
            }
            // The request timeout answered while this was drawing: the client was told 503
            // (not charged), so nothing may be charged.
            if !gate.begin_commit() {
                return Err(ApiError::Timeout);
            }
            let new = NewRelease {
                id: Uuid::now_v7(),
                dataset_id: id,
                created_by,
                mechanism: record.to_value(),
                cost: charge,
                output,
                label,
                row_names,
                idempotency,
                population: dataset_population,
                blocks: range,
            };
            let fp = new.idempotency.as_ref().map(|i| i.fingerprint);
            Ok::<_, ApiError>((task_state.store.commit_release(&new).await?, fp))
        })
        .await
        .map_err(|e| ApiError::Internal(format!("release task failed: {e}")))?;
    let (outcome, fp) = outcome?;
    match outcome {
        CommitOutcome::Committed { release, budget } => {
            state.caches.observe_budget(id, &budget);
            tracing::info!(dataset = %id, release = %release.id, seq = release.seq, cost = release.cost.to_f64(), "release committed");
            state.metrics.release(kind);
            if let Some(rows) = release.output.rows() {
                state.metrics.table_release(kind, rows);
            }
            Ok(idempotency::created(
                ReleaseView::new(
                    release,
                    dataset.order.get(),
                    dataset.cells.as_ref(),
                    &budget,
                ),
                false,
            ))
        }
        CommitOutcome::Exhausted { budget } => {
            state.caches.observe_budget(id, &budget);
            let e = exhausted(
                &budget,
                "the release would exceed the dataset's remaining budget".into(),
            );
            state.metrics.refusal(&e);
            Err(e)
        }
        CommitOutcome::Existing {
            release,
            fingerprint,
        } => {
            let presented =
                fp.ok_or_else(|| ApiError::Internal("an idempotent outcome without a key".into()))?;
            idempotency::replay(&state, &dataset, release, fingerprint, presented)
        }
        CommitOutcome::AllocationExhausted { allocation, budget } => {
            state.caches.observe_budget(id, &budget);
            state
                .caches
                .set_allocation_exhausted(id, &allocation.token_id, true);
            let e = allocation_exhausted(&allocation, &budget, asked);
            state.metrics.refusal(&e);
            Err(e)
        }
        CommitOutcome::PopulationExhausted { refusal, budget } => {
            let e = super::populations::population_exhausted(
                &refusal,
                budget.order,
                asked,
                "the release",
            );
            state.metrics.refusal(&e);
            Err(e)
        }
        CommitOutcome::BlockExhausted { block, cap, budget } => {
            let e = block_exhausted(&block, cap, &budget, asked, "the release");
            state.metrics.refusal(&e);
            Err(e)
        }
        CommitOutcome::BlocksMismatch => Err(blocks_mismatch()),
        CommitOutcome::DatasetNotFound => Err(ApiError::not_found("dataset")),
        CommitOutcome::OutputQuotaExceeded { quota } => {
            let e = ApiError::OutputQuotaExceeded { quota };
            state.metrics.refusal(&e);
            Err(e)
        }
    }
}

/// The answer to a retry whose release is stored (its replay, or the refusal of a different
/// request under the key), if the key has one; nothing for a new key or no key.
async fn replay_stored(
    state: &AppState,
    dataset: &Dataset,
    idempotency: Option<&Idempotency>,
) -> Result<Option<Response>, ApiError> {
    let Some(idempotency) = idempotency else {
        return Ok(None);
    };
    match state
        .store
        .find_by_idempotency_key(dataset.id, &idempotency.key)
        .await?
    {
        Some((release, stored)) => {
            idempotency::replay(state, dataset, release, stored, idempotency.fingerprint).map(Some)
        }
        None => Ok(None),
    }
}

fn allocation_exhausted(allocation: &Allocation, budget: &BudgetState, charge: Units) -> ApiError {
    ApiError::AllocationExhausted {
        detail: format!(
            "the release would exceed this token's allocation on the dataset: it costs {} at order {} but only {} of the allocation remains",
            charge.to_f64(),
            budget.order.get(),
            allocation.remaining().to_f64()
        ),
        allocation: allocation_json(allocation),
        budget: budget_json(budget),
    }
}

fn refusal_detail(plan: &Plan, budget: &BudgetState) -> String {
    format!(
        "the release costs {} at order {} but only {} of the budget remains",
        plan.charge.to_f64(),
        budget.order.get(),
        budget.remaining().to_f64()
    )
}
