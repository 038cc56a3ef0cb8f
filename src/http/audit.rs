//! `GET /v1/datasets/{id}/audit`: the release log's head and a fresh verification of the chain
//! (src/ledger/audit.rs), for the admin and the dataset's analysts.

use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::auth::Caller;
use super::error::{problems, ApiError};
use super::extract::ApiPath;
use super::paths::DatasetId;
use super::views::SortedJson;
use super::AppState;
use crate::ledger::audit::Verifier;
use crate::schema::{self, SchemaRef};

/// Releases per page. Entries hold digests, not outputs, and the stores read the rows of a page
/// one at a time, so memory is one stored output plus this many ~200-byte entries.
const PAGE: u32 = 1000;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::default().routes(routes!(audit))
}

/// The release log's head and the verdict of a fresh verification of its chain.
#[derive(Serialize, ToSchema)]
#[schema(as = Audit)]
#[serde(deny_unknown_fields)]
pub struct AuditView {
    dataset_id: Uuid,
    head: HeadView,
    /// The first chained release. Releases stored before the log existed (migration 0003) are
    /// counted and their costs summed, but carry no hash.
    #[schema(minimum = 1)]
    chained_from_seq: i64,
    /// Chained releases whose hash was recomputed and matched.
    #[schema(minimum = 0)]
    checked: i64,
    ok: bool,
    #[schema(required = true)]
    failure: Option<FailureView>,
}

/// The newest release's seq and chain hash (seq 0 and 64 zeros before the first).
#[derive(Serialize, ToSchema)]
#[schema(as = AuditHead)]
#[serde(deny_unknown_fields)]
pub struct HeadView {
    #[schema(minimum = 0)]
    seq: i64,
    #[schema(pattern = "^[0-9a-f]{64}$")]
    hash: String,
}

/// The first release at which the log does not verify, and why.
#[derive(Serialize, ToSchema)]
#[schema(as = AuditFailure)]
#[serde(deny_unknown_fields)]
pub struct FailureView {
    /// The first release at which the log does not verify.
    #[schema(minimum = 1)]
    seq: i64,
    /// `missing`: no row with this seq (deleted); `altered`: the row's content does not hash to
    /// its stored chain hash; `unreadable`: the row cannot be decoded; `head_mismatch`: the
    /// dataset's head is not the newest row's hash; `ledger_mismatch`: the dataset's spent budget
    /// is not the sum of its releases' costs.
    #[schema(schema_with = reason)]
    reason: &'static str,
    detail: String,
}

fn reason() -> SchemaRef {
    schema::string()
        .enum_values(Some([
            "missing",
            "altered",
            "unreadable",
            "head_mismatch",
            "ledger_mismatch",
        ]))
        .into()
}

/// The release log's chain head and a fresh verification of the whole chain.
///
/// Every release row carries a SHA-256 chained over the previous release of its dataset
/// (encoding in SECURITY.md, "The release log"); the dataset row carries the head. This
/// recomputes every link from the stored rows, oldest first, and reports the first seq where
/// the log and its hashes disagree. Publish `head` somewhere the database's writers cannot
/// reach: a writer who recomputes the whole chain is only caught against a published head.
/// For the admin and the dataset's analysts.
#[utoipa::path(
    get,
    path = "/v1/datasets/{id}/audit",
    operation_id = "getAudit",
    tag = "datasets",
    params(DatasetId),
    responses(
        (status = 200, description = "The head and the verdict (a failed verification is still a 200).", body = AuditView),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
    )
)]
async fn audit(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<SortedJson<AuditView>, ApiError> {
    caller.require_dataset(id)?;
    // The head first: every release up to it is committed, so the pages below see all of them,
    // and releases committed meanwhile (above it) are left for the next audit.
    let head = state
        .store
        .log_head(id)
        .await?
        .ok_or_else(|| ApiError::not_found("dataset"))?;
    let upto = head.seq;
    let mut verifier = Verifier::new(head);
    while !verifier.failed() && verifier.after_seq() < upto {
        let entries = state
            .store
            .log_entries(id, verifier.after_seq(), upto, PAGE)
            .await?;
        if entries.is_empty() {
            break;
        }
        for entry in &entries {
            verifier.push(entry);
        }
    }
    let verdict = verifier.finish();
    let failure = verdict.failure.map(|f| FailureView {
        seq: f.seq,
        reason: f.reason,
        detail: f.detail,
    });
    Ok(SortedJson(AuditView {
        dataset_id: id,
        head: HeadView {
            seq: verdict.head.seq,
            hash: hex::encode(verdict.head.hash),
        },
        chained_from_seq: verdict.head.chained_after + 1,
        checked: verdict.checked,
        ok: failure.is_none(),
        failure,
    }))
}
