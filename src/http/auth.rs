//! Bearer tokens. The admin token is compared by SHA-256 digest in constant time; analyst
//! tokens (`dra_<id>_<secret>`) are looked up by their public id and their secret's SHA-256 is
//! compared in constant time. Only digests are stored. Tokens carry 256 random bits, so a plain
//! SHA-256 (not a password hash) is the right tool: there is nothing to brute-force.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use chrono::{DateTime, Utc};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use super::error::ApiError;
use super::AppState;
use crate::access::{sha256, Role, TokenId, TokenRecord, ANALYST_PREFIX};

/// Who is calling.
#[derive(Debug, Clone, PartialEq)]
pub enum Caller {
    Admin,
    Analyst {
        token_id: String,
        datasets: Vec<Uuid>,
    },
}

impl Caller {
    /// The name stored as `created_by`.
    pub fn name(&self) -> String {
        match self {
            Caller::Admin => "admin".into(),
            Caller::Analyst { token_id, .. } => token_id.clone(),
        }
    }

    pub fn require_admin(&self) -> Result<(), ApiError> {
        match self {
            Caller::Admin => Ok(()),
            Caller::Analyst { .. } => Err(ApiError::Forbidden),
        }
    }

    /// An analyst outside its scope gets the same 404 as for a dataset that does not exist, so
    /// a token cannot probe which datasets exist.
    pub fn require_dataset(&self, dataset: Uuid) -> Result<(), ApiError> {
        match self {
            Caller::Admin => Ok(()),
            Caller::Analyst { datasets, .. } if datasets.contains(&dataset) => Ok(()),
            Caller::Analyst { .. } => Err(ApiError::not_found("dataset")),
        }
    }

    pub fn role(&self) -> Role {
        match self {
            Caller::Admin => Role::Admin,
            Caller::Analyst { .. } => Role::Analyst,
        }
    }
}

/// How stale a token's `last_used_at` may get: sign-ins are written at most this often per token
/// and replica, and only when the database read of a cache miss shows an older time.
pub const LAST_USED_INTERVAL: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// Record a sign-in without making the request wait for (or fail on) the write.
fn record_use(state: &AppState, record: &TokenRecord, now: DateTime<Utc>) {
    if record
        .last_used_at
        .is_some_and(|at| now - at < LAST_USED_INTERVAL)
    {
        return;
    }
    let store = state.store.clone();
    let id = record.id.clone();
    tokio::spawn(async move {
        if let Err(error) = store.touch_token(&id, now).await {
            tracing::warn!(token = %id, %error, "could not record the token's last use");
        }
    });
}

fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|t| !t.is_empty())
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let token = bearer(parts).ok_or(ApiError::Unauthorized)?;
        if let Some(rest) = token.strip_prefix(ANALYST_PREFIX) {
            let (id, secret) = rest.split_once('_').ok_or(ApiError::Unauthorized)?;
            let id = TokenId::parse(id).ok_or(ApiError::Unauthorized)?;
            let id = id.as_str();
            let (record, read_at) = match state.caches.token(id) {
                Some(record) => (record, None),
                None => {
                    let read_at = Instant::now();
                    let record = state
                        .store
                        .find_token(id)
                        .await?
                        .ok_or(ApiError::Unauthorized)?;
                    (Arc::new(record), Some(read_at))
                }
            };
            let presented = sha256(secret.as_bytes());
            if !bool::from(presented.ct_eq(&record.secret_hash)) {
                return Err(ApiError::Unauthorized);
            }
            let now = Utc::now();
            if !record.usable_at(now) {
                return Err(ApiError::Unauthorized);
            }
            if let Some(read_at) = read_at {
                state.caches.verified_token(record.clone(), read_at);
                record_use(state, &record, now);
            }
            return match record.role {
                Role::Analyst => Ok(Caller::Analyst {
                    token_id: record.id.clone(),
                    datasets: record.datasets.clone(),
                }),
                Role::Admin => Ok(Caller::Admin),
            };
        }
        let presented = sha256(token.as_bytes());
        if bool::from(presented.ct_eq(&state.keys()?.admin_digest)) {
            Ok(Caller::Admin)
        } else {
            Err(ApiError::Unauthorized)
        }
    }
}
