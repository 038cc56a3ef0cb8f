//! Single sign-on: JWT access tokens of one configured OpenID provider.
//!
//! The provider's key set is found through its discovery document and cached; a token signed by
//! a key not in the cache (the provider rotated its keys) makes the key set be fetched again, at
//! most once per `oidc_key_refresh_min_ms`, and the cache is refreshed anyway once it is
//! [`KEYS_MAX_AGE`] old, so a key the provider withdrew stops being accepted. When the provider
//! cannot be reached and no cached key verifies the token, the caller gets 503 (fail closed):
//! never a token accepted unverified. Static tokens never reach this module.
//!
//! The checks: only asymmetric signatures (RS*, PS*, ES256/384, EdDSA; `none` and HMAC are
//! refused before any key is looked at, so the public key can never serve as an HMAC secret),
//! the key's own `alg` (when the key set names one) must be the token's, `exp` and `nbf` with
//! [`LEEWAY_SECS`] of clock skew, `iss` exactly the configured issuer, `aud` containing the
//! configured audience, and `sub` present.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use crate::access::{sha256, Role};
use crate::config::{check_provider_url, Settings};

/// Clock skew tolerated on `exp` and `nbf`.
pub const LEEWAY_SECS: u64 = 60;
/// A cached key set older than this is fetched again before it verifies a token.
pub const KEYS_MAX_AGE: Duration = Duration::from_secs(600);
/// How long a fetch of the discovery document or of the key set may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The most dataset ids a token's claim may list.
const MAX_DATASETS: usize = 10_000;
/// The prefix of the ids under which single sign-on analysts are stored (in the tokens table):
/// never an issued analyst token's id, which is hex.
pub const PRINCIPAL_PREFIX: &str = "oidc";

/// Signature algorithms accepted: asymmetric only.
const ACCEPTED: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Why a JWT was not accepted. Nothing of the token is kept: problem documents echo nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 401: not a token of the provider's, or not valid now.
    Unauthorized(&'static str),
    /// 403: a valid token whose role (or scope claim) is not one this service knows.
    Forbidden(&'static str),
    /// 503: the provider's keys are needed and the provider cannot be reached.
    Unavailable,
}

/// Who a verified token names.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// The stable id of `iss` + `sub` ([`principal_id`]).
    pub id: String,
    /// The token's `sub` (logged when the principal is first seen, so the admin can tell whose
    /// id it is).
    pub subject: String,
    pub role: Role,
    /// The datasets claim, sorted and deduplicated (an admin's is empty).
    pub datasets: Vec<Uuid>,
}

/// The id under which the person `sub` of issuer `iss` is known here (allocations, spend,
/// `created_by`): `oidc` then 32 hex digits of SHA-256(`iss` LF `sub`). Stable across token
/// renewals; never an issued token's id (those are hex only).
pub fn principal_id(iss: &str, sub: &str) -> String {
    let digest = sha256(format!("{iss}\n{sub}").as_bytes());
    format!("{PRINCIPAL_PREFIX}{}", &hex::encode(digest)[..32])
}

/// Whether a bearer value has the shape of a JWS compact serialisation (three base64url parts).
pub fn looks_like_jwt(token: &str) -> bool {
    let mut parts = 0;
    for part in token.split('.') {
        parts += 1;
        if (part.is_empty() && parts < 3)
            || !part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return false;
        }
    }
    parts == 3
}

struct Key {
    decoding: DecodingKey,
    alg: Option<Algorithm>,
}

#[derive(Default)]
struct Keys {
    by_kid: HashMap<String, Arc<Key>>,
    /// Keys without a `kid`: used only for a token without one, and only if there is exactly one.
    anonymous: Vec<Arc<Key>>,
    fetched_at: Option<Instant>,
}

/// When a fetch was last tried, and whether it failed (fetches are serialised by this lock).
#[derive(Default)]
struct Attempt {
    at: Option<Instant>,
    failed: bool,
}

pub struct Verifier {
    issuer: String,
    audience: String,
    role_claim: String,
    datasets_claim: String,
    refresh_min: Duration,
    http: reqwest::Client,
    keys: RwLock<Arc<Keys>>,
    attempt: tokio::sync::Mutex<Attempt>,
}

#[derive(Deserialize)]
struct KeySet {
    keys: Vec<Value>,
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

impl Verifier {
    /// The verifier the settings ask for, if any (the settings were checked when loaded).
    pub fn from_settings(settings: &Settings) -> Option<Verifier> {
        let issuer = settings.oidc_issuer.clone()?;
        let audience = settings.oidc_audience.clone()?;
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .connect_timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client with rustls builds");
        Some(Verifier {
            issuer,
            audience,
            role_claim: settings.oidc_role_claim.clone(),
            datasets_claim: settings.oidc_datasets_claim.clone(),
            refresh_min: Duration::from_millis(settings.oidc_key_refresh_min_ms),
            http,
            keys: RwLock::new(Arc::new(Keys::default())),
            attempt: Default::default(),
        })
    }

    fn cached(&self) -> Arc<Keys> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Verify `token` and read who it names.
    pub async fn verify(&self, token: &str) -> Result<Identity, Refusal> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|_| Refusal::Unauthorized("malformed"))?;
        if !ACCEPTED.contains(&header.alg) {
            return Err(Refusal::Unauthorized("algorithm not accepted"));
        }
        let kid = header.kid.as_deref();
        let mut keys = self.cached();
        let stale = keys
            .fetched_at
            .is_none_or(|at| at.elapsed() >= KEYS_MAX_AGE);
        if stale || find(&keys, kid).is_none() {
            self.refresh(stale).await?;
            keys = self.cached();
        }
        let key = find(&keys, kid).ok_or(Refusal::Unauthorized("unknown key"))?;
        if key.alg.is_some_and(|alg| alg != header.alg) {
            return Err(Refusal::Unauthorized("algorithm is not the key's"));
        }
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = LEEWAY_SECS;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(
            token,
            &key.decoding,
            &validation,
        )
        .map_err(|e| {
            tracing::debug!(error = %e, "JWT refused");
            Refusal::Unauthorized("invalid token")
        })?;
        self.identity(&data.claims)
    }

    fn identity(&self, claims: &serde_json::Map<String, Value>) -> Result<Identity, Refusal> {
        let sub = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or(Refusal::Unauthorized("no subject"))?;
        let role = role_of(claims.get(&self.role_claim)).ok_or(Refusal::Forbidden("role"))?;
        let datasets = match role {
            Role::Admin => Vec::new(),
            Role::Analyst => datasets_of(claims.get(&self.datasets_claim))
                .ok_or(Refusal::Forbidden("datasets"))?,
        };
        Ok(Identity {
            id: principal_id(&self.issuer, sub),
            subject: sub.to_owned(),
            role,
            datasets,
        })
    }

    /// Fetch the key set again unless another request just did, or one was tried less than
    /// `refresh_min` ago (then a failure is reported again without knocking on the provider).
    /// `stale`: the cache is too old to use, so a recent success does not excuse a fetch.
    async fn refresh(&self, stale: bool) -> Result<(), Refusal> {
        let asked_at = Instant::now();
        let mut attempt = self.attempt.lock().await;
        if let Some(at) = attempt.at {
            // Another request fetched while this one waited for the lock.
            if at >= asked_at {
                return if attempt.failed {
                    Err(Refusal::Unavailable)
                } else {
                    Ok(())
                };
            }
            if at.elapsed() < self.refresh_min {
                if attempt.failed {
                    return Err(Refusal::Unavailable);
                }
                if !stale {
                    return Ok(());
                }
            }
        }
        let result = self.fetch().await;
        attempt.at = Some(Instant::now());
        attempt.failed = result.is_err();
        match result {
            Ok(keys) => {
                *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(keys);
                Ok(())
            }
            Err(reason) => {
                tracing::warn!(issuer = %self.issuer, error = %reason, "cannot fetch the OpenID provider's keys");
                Err(Refusal::Unavailable)
            }
        }
    }

    async fn fetch(&self) -> Result<Keys, String> {
        let discovery_url = format!(
            "{}/.well-known/openid-configuration",
            self.issuer.trim_end_matches('/')
        );
        let discovery: Discovery = self.get_json(&discovery_url).await?;
        // OpenID Connect Discovery 1.0, 4.3: the document must name the issuer it was asked for.
        if discovery.issuer != self.issuer {
            return Err(format!(
                "the discovery document names issuer {:?}, not the configured one",
                discovery.issuer
            ));
        }
        check_provider_url(&discovery.jwks_uri).map_err(|e| format!("jwks_uri {e}"))?;
        let set: KeySet = self.get_json(&discovery.jwks_uri).await?;
        let mut keys = Keys {
            fetched_at: Some(Instant::now()),
            ..Keys::default()
        };
        // Key by key: one of a kind this crate does not read (an encryption key with an
        // algorithm it does not know) must not take the signature keys down with it.
        for value in set.keys {
            let Ok(jwk) = serde_json::from_value::<Jwk>(value) else {
                continue;
            };
            let Some(key) = usable(&jwk) else { continue };
            match &jwk.common.key_id {
                Some(kid) => {
                    keys.by_kid.insert(kid.clone(), Arc::new(key));
                }
                None => keys.anonymous.push(Arc::new(key)),
            }
        }
        if keys.by_kid.is_empty() && keys.anonymous.is_empty() {
            return Err("the key set holds no signature key this service accepts".into());
        }
        Ok(keys)
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, String> {
        let response = self
            .http
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{url}: HTTP {}", response.status()));
        }
        response.json().await.map_err(|e| format!("{url}: {e}"))
    }
}

fn find<'a>(keys: &'a Keys, kid: Option<&str>) -> Option<&'a Arc<Key>> {
    match kid {
        Some(kid) => keys.by_kid.get(kid),
        None => match keys.anonymous.as_slice() {
            [only] => Some(only),
            _ => None,
        },
    }
}

/// A key of the set as a verification key: public signature keys only (a symmetric `oct` key
/// is never loaded, whatever its `use`).
fn usable(jwk: &Jwk) -> Option<Key> {
    if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
        return None;
    }
    if jwk
        .common
        .public_key_use
        .as_ref()
        .is_some_and(|u| *u != PublicKeyUse::Signature)
    {
        return None;
    }
    let alg = match jwk.common.key_algorithm {
        None => None,
        Some(alg) => Some(signature_algorithm(alg)?),
    };
    let decoding = DecodingKey::from_jwk(jwk).ok()?;
    Some(Key { decoding, alg })
}

/// The accepted signature algorithm a key set's `alg` names (none for HMAC or encryption).
fn signature_algorithm(alg: KeyAlgorithm) -> Option<Algorithm> {
    let alg = match alg {
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        _ => return None,
    };
    Some(alg)
}

/// The role a claim grants: `admin` or `analyst`, or a list holding one of them (`admin` wins);
/// anything else, or no claim, grants nothing.
fn role_of(claim: Option<&Value>) -> Option<Role> {
    match claim? {
        Value::String(role) => Role::parse(role),
        Value::Array(roles) => {
            let has = |name: &str| roles.iter().any(|r| r.as_str() == Some(name));
            if has("admin") {
                Some(Role::Admin)
            } else if has("analyst") {
                Some(Role::Analyst)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// An analyst's datasets: a list of dataset ids (none when the claim is absent). A claim of
/// another shape, or holding anything but dataset ids, is refused rather than partly read.
fn datasets_of(claim: Option<&Value>) -> Option<Vec<Uuid>> {
    let Some(claim) = claim else {
        return Some(Vec::new());
    };
    let list = claim.as_array()?;
    if list.len() > MAX_DATASETS {
        return None;
    }
    let mut ids = list
        .iter()
        .map(|v| v.as_str().and_then(|s| Uuid::parse_str(s).ok()))
        .collect::<Option<Vec<Uuid>>>()?;
    ids.sort();
    ids.dedup();
    Some(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn principal_ids_are_stable_distinct_and_never_an_issued_tokens() {
        let a = principal_id("https://id.example.com", "alice");
        assert_eq!(a, principal_id("https://id.example.com", "alice"));
        assert_ne!(a, principal_id("https://id.example.com", "bob"));
        assert_ne!(a, principal_id("https://other.example.com", "alice"));
        assert_eq!(a.len(), PRINCIPAL_PREFIX.len() + 32);
        assert!(crate::access::TokenId::parse(&a).is_some());
        assert!(!a.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn roles_come_from_a_string_or_a_list() {
        assert_eq!(role_of(Some(&json!("admin"))), Some(Role::Admin));
        assert_eq!(role_of(Some(&json!("analyst"))), Some(Role::Analyst));
        assert_eq!(
            role_of(Some(&json!(["x", "analyst", "admin"]))),
            Some(Role::Admin)
        );
        assert_eq!(role_of(Some(&json!(["x", "analyst"]))), Some(Role::Analyst));
        for bad in [
            json!("Admin"),
            json!("root"),
            json!(["x"]),
            json!(1),
            json!(null),
        ] {
            assert_eq!(role_of(Some(&bad)), None, "{bad}");
        }
        assert_eq!(role_of(None), None);
    }

    #[test]
    fn datasets_are_a_list_of_ids_or_nothing_is_read() {
        let a = Uuid::now_v7();
        let b = Uuid::now_v7();
        assert_eq!(
            datasets_of(Some(&json!([b.to_string(), a.to_string(), b.to_string()]))),
            Some(vec![a, b])
        );
        assert_eq!(datasets_of(None), Some(vec![]));
        assert_eq!(datasets_of(Some(&json!([a.to_string(), "x"]))), None);
        assert_eq!(datasets_of(Some(&json!(a.to_string()))), None);
        assert_eq!(datasets_of(Some(&json!([1]))), None);
    }

    #[test]
    fn jwt_shapes() {
        assert!(looks_like_jwt("eyJh.eyJz.c2ln"));
        assert!(
            looks_like_jwt("eyJh.eyJz."),
            "an unsigned token is still refused later"
        );
        assert!(!looks_like_jwt("dradmin_abc"));
        assert!(!looks_like_jwt("a.b"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(!looks_like_jwt("a b.c.d"));
    }

    fn verifier(refresh_min_ms: u64) -> Verifier {
        let mut settings = Settings::defaults();
        // Nothing listens on port 9 of the loopback: every fetch fails at once.
        settings.oidc_issuer = Some("http://127.0.0.1:9".into());
        settings.oidc_audience = Some("dirichlet".into());
        settings.oidc_key_refresh_min_ms = refresh_min_ms;
        Verifier::from_settings(&settings).unwrap()
    }

    /// A token header with `alg` and a kid, and any payload: refused before any key is fetched.
    #[tokio::test]
    async fn none_and_hmac_are_refused_before_any_key_is_looked_at() {
        use base64::Engine;
        let b64 = |v: Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string().as_bytes())
        };
        let v = verifier(0);
        for alg in ["none", "HS256", "HS384", "HS512"] {
            let token = format!(
                "{}.{}.",
                b64(json!({"alg": alg, "kid": "k"})),
                b64(json!({}))
            );
            let refusal = v.verify(&format!("{token}c2ln")).await.unwrap_err();
            assert!(
                matches!(refusal, Refusal::Unauthorized(_)),
                "{alg}: {refusal:?}"
            );
        }
        assert!(v.attempt.lock().await.at.is_none(), "no fetch was tried");
    }

    /// An unreachable provider is 503, and tried again only after the refresh interval.
    #[tokio::test]
    async fn an_unreachable_provider_is_unavailable_and_not_hammered() {
        let v = verifier(60_000);
        assert_eq!(v.refresh(false).await, Err(Refusal::Unavailable));
        let first = v.attempt.lock().await.at.unwrap();
        assert_eq!(v.refresh(false).await, Err(Refusal::Unavailable));
        assert_eq!(
            v.attempt.lock().await.at.unwrap(),
            first,
            "not fetched again"
        );
    }
}
