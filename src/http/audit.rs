//! `GET /v1/datasets/{id}/audit`: the release log's head and a fresh verification of the chain
//! (src/ledger/audit.rs), for the admin and the dataset's analysts.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use uuid::Uuid;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::ApiPath;
use super::AppState;
use crate::ledger::audit::Verifier;

/// Releases per page. Entries hold digests, not outputs, and the stores read the rows of a page
/// one at a time, so memory is one stored output plus this many ~200-byte entries.
const PAGE: u32 = 1000;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/datasets/{id}/audit", get(audit))
}

async fn audit(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<Value>, ApiError> {
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
    let failure = verdict
        .failure
        .map(|f| json!({ "seq": f.seq, "reason": f.reason, "detail": f.detail }));
    Ok(Json(json!({
        "dataset_id": id,
        "head": { "seq": verdict.head.seq, "hash": hex::encode(verdict.head.hash) },
        "chained_from_seq": verdict.head.chained_after + 1,
        "checked": verdict.checked,
        "ok": failure.is_none(),
        "failure": failure,
    })))
}
