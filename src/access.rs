//! Who may do what: the two roles, the stored token record, and the token formats. Used by the
//! ledger's storage trait (tokens are stored beside the ledger), the HTTP layer (sign-in) and
//! the configuration (an admin token must not look like an analyst token).

use base64::Engine;
use chrono::{DateTime, Utc};
use rand::TryRng;
use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The prefix of analyst tokens: `dra_<id>_<secret>`.
pub const ANALYST_PREFIX: &str = "dra_";

/// Role of an API token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Admin,
    Analyst,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Analyst => "analyst",
        }
    }
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "admin" => Some(Role::Admin),
            "analyst" => Some(Role::Analyst),
            _ => None,
        }
    }
}

/// The most characters of a token's public id. Issued ids are 16 lowercase hex digits; the limit
/// leaves room without letting an id be arbitrary text.
pub const MAX_TOKEN_ID_CHARS: usize = 64;

/// A token's public id (the `<id>` of `dra_<id>_<secret>`) as a client names it: 1 to
/// [`MAX_TOKEN_ID_CHARS`] ASCII letters and digits. Anything else names no token, so it is
/// refused where it arrives (a path segment, a bearer token) and never reaches the database as
/// text: a NUL, for one, is an error in PostgreSQL, not an unknown id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct TokenId(String);

impl TokenId {
    pub fn parse(id: &str) -> Option<TokenId> {
        let well_formed = !id.is_empty()
            && id.len() <= MAX_TOKEN_ID_CHARS
            && id.bytes().all(|b| b.is_ascii_alphanumeric());
        well_formed.then(|| TokenId(id.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl TryFrom<String> for TokenId {
    type Error = &'static str;
    fn try_from(id: String) -> Result<Self, Self::Error> {
        // Never quote `id`: problem documents echo nothing that was sent.
        TokenId::parse(&id).ok_or("expected a token id (ASCII letters and digits)")
    }
}

impl std::fmt::Display for TokenId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A stored token: its public id, SHA-256 of its secret part, role and dataset scope.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRecord {
    pub id: String,
    pub secret_hash: [u8; 32],
    pub role: Role,
    pub datasets: Vec<Uuid>,
    pub created_at: DateTime<Utc>,
    /// After this instant the token is refused (401).
    pub expires_at: Option<DateTime<Utc>>,
    /// When the token last signed in, recorded at most about once a minute.
    pub last_used_at: Option<DateTime<Utc>>,
    /// Set by `DELETE /v1/tokens/{id}`; a revoked token is refused (401).
    pub revoked_at: Option<DateTime<Utc>>,
}

impl TokenRecord {
    /// Whether the token may sign in at `now`.
    pub fn usable_at(&self, now: DateTime<Utc>) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|at| now < at)
    }
}

pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// 32 random bytes from the OS generator.
pub fn random_bytes() -> [u8; 32] {
    let mut bytes = [0u8; 32];
    rand::rngs::SysRng
        .try_fill_bytes(&mut bytes)
        .expect("the operating system's random source failed");
    bytes
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A fresh admin token (when none is configured).
pub fn generate_admin_token() -> String {
    format!("dradmin_{}", b64(&random_bytes()))
}

/// A fresh analyst token: (public id, full token, digest of the secret part).
pub fn generate_analyst_token() -> (String, String, [u8; 32]) {
    let id = hex::encode(&random_bytes()[..8]);
    let secret = b64(&random_bytes());
    let digest = sha256(secret.as_bytes());
    (id.clone(), format!("{ANALYST_PREFIX}{id}_{secret}"), digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn analyst_tokens_parse_back_to_their_parts() {
        let (id, token, digest) = generate_analyst_token();
        let rest = token.strip_prefix(ANALYST_PREFIX).unwrap();
        let (pid, secret) = rest.split_once('_').unwrap();
        assert_eq!(pid, id);
        assert_eq!(sha256(secret.as_bytes()), digest);
        assert!(secret.len() >= 43, "256 bits of secret");
        // base64url has '-' and '_'? URL_SAFE uses '_' — the id is hex, so split_once on the
        // first '_' still finds the id/secret boundary.
        assert!(!id.contains('_'));
    }

    #[test]
    fn token_ids_are_ascii_letters_and_digits() {
        let (id, _, _) = generate_analyst_token();
        assert_eq!(TokenId::parse(&id).unwrap().as_str(), id);
        assert!(TokenId::parse(&"a".repeat(MAX_TOKEN_ID_CHARS)).is_some());
        for bad in [
            "",
            "\0",
            "ab\0cd",
            "ab cd",
            "ab_cd",
            "ab%00",
            "é",
            "ab\u{200b}",
            &"a".repeat(MAX_TOKEN_ID_CHARS + 1),
        ] {
            assert_eq!(TokenId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn tokens_are_unique() {
        assert_ne!(generate_admin_token(), generate_admin_token());
    }
}
