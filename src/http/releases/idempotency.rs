//! Retries: the `Idempotency-Key` header, the request fingerprint it is bound to, and the
//! replay of a stored release (never a fresh sample: that would leak more than was paid for).

use std::collections::BTreeMap;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use subtle::ConstantTimeEq;
use utoipa::openapi::RefOr;
use utoipa::ToSchema;
use uuid::Uuid;

use super::super::error::ApiError;
use super::super::extract::parse_json_bounded;
use super::super::paths;
use super::super::views::ReleaseView;
use super::super::AppState;
use crate::ledger::Dataset;
use crate::release::request::RequestBody;

/// `Idempotency-Key`: 1 to 255 visible ASCII characters, at most once.
pub(super) fn key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::invalid_field(
            "Idempotency-Key",
            "Idempotency-Key must be sent at most once",
        ));
    }
    let key = value
        .to_str()
        .ok()
        .filter(|k| !k.is_empty() && k.len() <= 255 && k.bytes().all(|b| b.is_ascii_graphic()));
    key.map(|k| Some(k.to_string())).ok_or_else(|| {
        ApiError::invalid_field(
            "Idempotency-Key",
            "Idempotency-Key must be 1 to 255 visible ASCII characters",
        )
    })
}

/// The idempotency fingerprint of a release body, as `create` computes and stores it: pure, so
/// that a golden test (tests/it/golden.rs) can pin the stored fingerprints of existing databases.
pub fn body_fingerprint(
    key: &[u8; 32],
    dataset: Uuid,
    caller: &str,
    body: &[u8],
    max_dimension: usize,
) -> Result<[u8; 32], ApiError> {
    let body: RequestBody = parse_json_bounded(body, max_dimension)?;
    Ok(body.fingerprint(key, dataset, caller))
}

pub(super) fn created(view: ReleaseView, replayed: bool) -> Response {
    let location = format!(
        "/v1/datasets/{}/releases/{}",
        view.record.dataset_id, view.record.id
    );
    let mut response = (
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(view),
    )
        .into_response();
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}

/// The 201 of `createRelease`: the release, where it is, whether it is a replay, and links to
/// what a client reads next.
pub(super) struct Created;

impl utoipa::IntoResponses for Created {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        let dataset = "$response.body#/dataset_id";
        let response = paths::created(
            "Charged and drawn (or, with `Idempotent-Replayed: true`, replayed).",
            &ReleaseView::name(),
            &[
                ("Location", "Location"),
                ("Idempotent-Replayed", "IdempotentReplayed"),
            ],
            &[
                (
                    "GetRelease",
                    paths::link(
                        "getRelease",
                        &[("id", dataset), ("release_id", "$response.body#/id")],
                    ),
                ),
                ("GetBudget", paths::link("getBudget", &[("id", dataset)])),
                (
                    "ListReleases",
                    paths::link("listReleases", &[("id", dataset)]),
                ),
            ],
        );
        BTreeMap::from([("201".to_string(), response.into())])
    }
}

/// The answer to a retry: the 201 the release got when it was committed — the stored release
/// and the ledger right after its charge (not the ledger now) — charging nothing; or a refusal
/// when the key was used for a different request. Never a fresh sample.
pub(super) fn replay(
    state: &AppState,
    dataset: &Dataset,
    release: crate::ledger::Release,
    stored: [u8; 32],
    presented: [u8; 32],
) -> Result<Response, ApiError> {
    if !bool::from(stored.ct_eq(&presented)) {
        return Err(ApiError::IdempotencyKeyReused);
    }
    state.metrics.replays.inc();
    let budget = dataset.budget_after(&release);
    Ok(created(
        ReleaseView::new(
            release,
            dataset.order.get(),
            dataset.cells.as_ref(),
            &budget,
        ),
        true,
    ))
}
