//! Bearer tokens. The admin token is compared by SHA-256 digest in constant time; analyst
//! tokens (`dra_<id>_<secret>`) are looked up by their public id and their secret's SHA-256 is
//! compared in constant time. Only digests are stored. Tokens carry 256 random bits, so a plain
//! SHA-256 (not a password hash) is the right tool: there is nothing to brute-force.
//!
//! Further admin tokens may come from a file (`admins`), and, with single sign-on configured,
//! JWT access tokens of the OpenID provider are accepted (`oidc`): an admin by its role claim;
//! an analyst as the principal its `iss` + `sub` name, stored as a token row (id
//! `oidc…`, no usable secret) created on first use, so that its spend and allocations follow the
//! person across token renewals under the same rules as an issued token's. Static tokens are
//! checked first and never wait on the provider.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use chrono::{DateTime, Utc};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use super::error::ApiError;
use super::oidc::{looks_like_jwt, Identity, Refusal, Verifier, PRINCIPAL_PREFIX};
use super::AppState;
use crate::access::{random_bytes, sha256, Role, TokenId, TokenRecord, ANALYST_PREFIX};

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
            // A single sign-on principal's row has no secret anyone holds; it signs in by JWT.
            if id.starts_with(PRINCIPAL_PREFIX) {
                return Err(ApiError::Unauthorized);
            }
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
        let configured = presented.ct_eq(&state.keys()?.admin_digest);
        if bool::from(configured) || state.admin_tokens.matches(&presented) {
            return Ok(Caller::Admin);
        }
        match &state.oidc {
            Some(verifier) if looks_like_jwt(token) => single_sign_on(state, verifier, token).await,
            _ => Err(ApiError::Unauthorized),
        }
    }
}

/// A caller by the provider's JWT. Refusals are logged at debug level only by their kind.
async fn single_sign_on(
    state: &AppState,
    verifier: &Verifier,
    token: &str,
) -> Result<Caller, ApiError> {
    let identity = verifier.verify(token).await.map_err(|refusal| {
        tracing::debug!(?refusal, "single sign-on token refused");
        match refusal {
            Refusal::Unauthorized(_) => ApiError::Unauthorized,
            Refusal::Forbidden(_) => ApiError::Forbidden,
            Refusal::Unavailable => ApiError::ProviderUnavailable,
        }
    })?;
    match identity.role {
        Role::Admin => Ok(Caller::Admin),
        Role::Analyst => {
            principal(state, &identity).await?;
            Ok(Caller::Analyst {
                token_id: identity.id,
                datasets: identity.datasets,
            })
        }
    }
}

/// The principal's row, created on first use, with a `token_datasets` row (its spend and
/// allocation) for each claimed dataset that exists: created before its first release there,
/// as an issued token's are with the token, so a release always finds it under its row lock.
/// Revoking the row (`DELETE /v1/tokens/{id}`) locks the person out whatever the provider says.
async fn principal(state: &AppState, identity: &Identity) -> Result<(), ApiError> {
    let id = identity.id.as_str();
    let (record, read_at) = match state.caches.token(id) {
        Some(record) => (Some(record), None),
        None => {
            let read_at = Instant::now();
            let record = state.store.find_token(id).await?.map(Arc::new);
            (record, Some(read_at))
        }
    };
    let now = Utc::now();
    if let Some(record) = &record {
        if record.revoked_at.is_some() || record.role != Role::Analyst {
            return Err(ApiError::Unauthorized);
        }
        if let Some(read_at) = read_at {
            state.caches.verified_token(record.clone(), read_at);
            record_use(state, record, now);
        }
    }
    // Claimed datasets without a row yet, which exist: a claim naming a dataset not (yet)
    // registered costs a read per request, never a write.
    let mut missing = Vec::new();
    for &dataset in &identity.datasets {
        if record
            .as_ref()
            .is_some_and(|record| record.datasets.contains(&dataset))
        {
            continue;
        }
        if state.caches.dataset(dataset).is_some()
            || state.store.get_dataset(dataset).await?.is_some()
        {
            missing.push(dataset);
        }
    }
    if record.is_none() || !missing.is_empty() {
        let row = TokenRecord {
            id: identity.id.clone(),
            // A digest of random bytes: no secret signs in as this row.
            secret_hash: sha256(&random_bytes()),
            role: Role::Analyst,
            datasets: missing,
            created_at: now,
            expires_at: None,
            last_used_at: None,
            revoked_at: None,
        };
        state.store.ensure_principal(&row).await?;
        state.caches.forget_token(id);
        if record.is_none() {
            tracing::info!(
                principal = %id,
                subject = %identity.subject,
                "single sign-on analyst seen for the first time"
            );
        }
    }
    Ok(())
}
