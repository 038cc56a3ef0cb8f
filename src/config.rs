//! Layered configuration: `config/default.toml` (compiled in) ← optional file named by
//! `DIRICHLET_CONFIG` ← environment (`DIRICHLET_<KEY>`, and `DATABASE_URL`).

use std::net::SocketAddr;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

const DEFAULTS: &str = include_str!("../config/default.toml");

use crate::access::ANALYST_PREFIX;

/// `Debug` is safe to log: the two secrets print as `[REDACTED]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub listen: SocketAddr,
    pub database_url: String,
    #[serde(default)]
    pub admin_token: Option<SecretString>,
    #[serde(default)]
    pub fingerprint_key: Option<SecretString>,
    pub max_dimension: usize,
    pub max_body_bytes: usize,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub request_timeout_ms: u64,
    pub db_acquire_timeout_ms: u64,
    pub db_max_connections: u32,
    pub db_commit_slots: usize,
    pub db_connect_backoff_ms: u64,
    pub db_connect_max_backoff_ms: u64,
    pub retry_after_secs: u64,
    pub log_format: LogFormat,
    pub log_level: String,
    pub max_page_size: u32,
    pub max_exponential_n: u64,
    pub max_page_bytes: usize,
    pub max_stored_cells: u64,
    pub max_inflight_body_bytes: usize,
    pub write_timeout_ms: u64,
    /// Threads of the planner's own pool (0: half the cores, at least one).
    pub planner_threads: usize,
    /// A file of further admin tokens, one a line (`#` starts a comment), re-read when it
    /// changes (polled every `admin_tokens_poll_ms`) and on SIGHUP: rotation without a restart.
    #[serde(default)]
    pub admin_tokens_file: Option<String>,
    pub admin_tokens_poll_ms: u64,
    /// Single sign-on: the OpenID provider whose JWT access tokens are accepted (unset: none).
    #[serde(default)]
    pub oidc_issuer: Option<String>,
    /// The `aud` an accepted JWT must carry (required with `oidc_issuer`).
    #[serde(default)]
    pub oidc_audience: Option<String>,
    pub oidc_role_claim: String,
    pub oidc_datasets_claim: String,
    /// The least time between two fetches of the provider's key set caused by an unknown `kid`.
    pub oidc_key_refresh_min_ms: u64,
    /// Most blocks one release may read (src/ledger/blocks.rs).
    pub max_block_range: u32,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid configuration in {origin}: {message}")]
    Invalid { origin: String, message: String },
}

impl Settings {
    /// Defaults only (what tests start from).
    pub fn defaults() -> Settings {
        Self::from_layers(&[], |_| None).expect("config/default.toml is valid")
    }

    /// Defaults ← `DIRICHLET_CONFIG` file ← process environment.
    pub fn load() -> Result<Settings, ConfigError> {
        let mut files = Vec::new();
        if let Ok(path) = std::env::var("DIRICHLET_CONFIG") {
            let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            files.push((path, text));
        }
        Self::from_layers(&files, |name| std::env::var(name).ok())
    }

    /// The layering itself, with the environment injected so it can be tested.
    pub fn from_layers(
        files: &[(String, String)],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Settings, ConfigError> {
        let mut table: toml::Table =
            DEFAULTS
                .parse()
                .map_err(|e: toml::de::Error| ConfigError::Invalid {
                    origin: "config/default.toml".into(),
                    message: e.to_string(),
                })?;
        for (origin, text) in files {
            let layer: toml::Table =
                text.parse()
                    .map_err(|e: toml::de::Error| ConfigError::Invalid {
                        origin: origin.clone(),
                        message: e.to_string(),
                    })?;
            table.extend(layer);
        }
        const KEYS: &[&str] = &[
            "listen",
            "database_url",
            "admin_token",
            "fingerprint_key",
            "max_dimension",
            "max_body_bytes",
            "max_header_bytes",
            "max_headers",
            "request_timeout_ms",
            "db_acquire_timeout_ms",
            "db_max_connections",
            "db_commit_slots",
            "db_connect_backoff_ms",
            "db_connect_max_backoff_ms",
            "retry_after_secs",
            "log_format",
            "log_level",
            "max_page_size",
            "max_exponential_n",
            "max_page_bytes",
            "max_stored_cells",
            "max_inflight_body_bytes",
            "write_timeout_ms",
            "planner_threads",
            "admin_tokens_file",
            "admin_tokens_poll_ms",
            "oidc_issuer",
            "oidc_audience",
            "oidc_role_claim",
            "oidc_datasets_claim",
            "oidc_key_refresh_min_ms",
            "max_block_range",
        ];
        const NUMERIC_KEYS: &[&str] = &[
            "max_dimension",
            "max_body_bytes",
            "max_header_bytes",
            "max_headers",
            "request_timeout_ms",
            "db_acquire_timeout_ms",
            "db_max_connections",
            "db_commit_slots",
            "db_connect_backoff_ms",
            "db_connect_max_backoff_ms",
            "retry_after_secs",
            "max_page_size",
            "max_exponential_n",
            "max_page_bytes",
            "max_stored_cells",
            "max_inflight_body_bytes",
            "write_timeout_ms",
            "planner_threads",
            "admin_tokens_poll_ms",
            "oidc_key_refresh_min_ms",
            "max_block_range",
        ];
        if let Some(url) = env("DATABASE_URL") {
            table.insert("database_url".into(), toml::Value::String(url));
        }
        for key in KEYS {
            let var = format!("DIRICHLET_{}", key.to_uppercase());
            if let Some(raw) = env(&var) {
                // Numeric settings parse as numbers; tokens and URLs stay strings even if all digits.
                let numeric = NUMERIC_KEYS.contains(key);
                let value = match raw.parse::<i64>() {
                    Ok(n) if numeric => toml::Value::Integer(n),
                    _ => toml::Value::String(raw),
                };
                table.insert((*key).into(), value);
            }
        }
        let settings: Settings =
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError::Invalid {
                    origin: "configuration".into(),
                    message: e.to_string(),
                })?;
        settings.check()?;
        Ok(settings)
    }

    fn check(&self) -> Result<(), ConfigError> {
        let invalid = |message: &str| ConfigError::Invalid {
            origin: "configuration".into(),
            message: message.into(),
        };
        if self.max_dimension < 2 {
            return Err(invalid("max_dimension must be at least 2"));
        }
        if self.max_header_bytes < 1024 {
            return Err(invalid("max_header_bytes must be at least 1024"));
        }
        if self.max_headers < 8 {
            return Err(invalid("max_headers must be at least 8"));
        }
        if self.max_page_size == 0 {
            return Err(invalid("max_page_size must be at least 1"));
        }
        if self.max_block_range == 0 {
            return Err(invalid("max_block_range must be at least 1"));
        }
        if self.max_exponential_n == 0 {
            return Err(invalid("max_exponential_n must be at least 1"));
        }
        if self.db_max_connections == 0 {
            return Err(invalid("db_max_connections must be at least 1"));
        }
        if self.max_inflight_body_bytes < self.max_body_bytes {
            return Err(invalid(
                "max_inflight_body_bytes must be at least max_body_bytes",
            ));
        }
        if self.db_connect_backoff_ms == 0 {
            return Err(invalid("db_connect_backoff_ms must be at least 1"));
        }
        if self.db_connect_max_backoff_ms < self.db_connect_backoff_ms {
            return Err(invalid(
                "db_connect_max_backoff_ms must be at least db_connect_backoff_ms",
            ));
        }
        if self.write_timeout_ms == 0 {
            return Err(invalid("write_timeout_ms must be at least 1"));
        }
        if self.admin_tokens_poll_ms == 0 {
            return Err(invalid("admin_tokens_poll_ms must be at least 1"));
        }
        self.check_oidc().map_err(|message| invalid(&message))?;
        if let Some(token) = &self.admin_token {
            let token = token.expose_secret();
            // Such a token could never sign in: the bearer value is trimmed, and one that
            // starts with the analyst prefix is looked up as an analyst token.
            if token.trim() != token || token.trim().is_empty() {
                return Err(invalid(
                    "admin_token must not be blank or start or end with white space",
                ));
            }
            if token.starts_with(ANALYST_PREFIX) {
                return Err(invalid(&format!(
                    "admin_token must not start with the analyst token prefix `{ANALYST_PREFIX}`"
                )));
            }
            if token.len() < 16 {
                return Err(invalid("admin_token must be at least 16 characters"));
            }
        }
        Ok(())
    }

    /// The single sign-on settings hang together: an issuer needs an audience (a token meant
    /// for another service must not be accepted here), and keys are fetched over TLS unless
    /// the provider is on this machine.
    fn check_oidc(&self) -> Result<(), String> {
        let (issuer, audience) = match (&self.oidc_issuer, &self.oidc_audience) {
            (None, None) => return Ok(()),
            (Some(issuer), Some(audience)) => (issuer, audience),
            (Some(_), None) => return Err("oidc_issuer needs oidc_audience".into()),
            (None, Some(_)) => return Err("oidc_audience needs oidc_issuer".into()),
        };
        if audience.trim().is_empty() {
            return Err("oidc_audience must not be blank".into());
        }
        check_provider_url(issuer).map_err(|e| format!("oidc_issuer {e}"))?;
        for (name, claim) in [
            ("oidc_role_claim", &self.oidc_role_claim),
            ("oidc_datasets_claim", &self.oidc_datasets_claim),
        ] {
            if claim.trim().is_empty() {
                return Err(format!("{name} must not be blank"));
            }
        }
        Ok(())
    }

    /// The planner pool's threads: `planner_threads`, or half the cores (at least one), so that
    /// plans never take every core from the sampler.
    pub fn planner_threads(&self) -> usize {
        match self.planner_threads {
            0 => std::thread::available_parallelism()
                .map_or(1, |n| n.get() / 2)
                .max(1),
            n => n,
        }
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
    pub fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.write_timeout_ms)
    }
    pub fn db_acquire_timeout(&self) -> Duration {
        Duration::from_millis(self.db_acquire_timeout_ms)
    }

    /// How long start-up waits before its `retry`-th new attempt to reach the database (the
    /// first retry is 1): `db_connect_backoff_ms` doubled at each retry, capped at
    /// `db_connect_max_backoff_ms`. Jitter is the caller's.
    pub fn db_connect_backoff(&self, retry: u32) -> Duration {
        let doubled = self.db_connect_backoff_ms.saturating_mul(
            1u64.checked_shl(retry.saturating_sub(1))
                .unwrap_or(u64::MAX),
        );
        Duration::from_millis(doubled.min(self.db_connect_max_backoff_ms))
    }
}

/// An OpenID provider's URL (issuer, key set): `https://`, or `http://` on a loopback address
/// (a provider on the same machine, as in the tests), never anything else.
pub fn check_provider_url(raw: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(raw).map_err(|e| format!("is not a URL: {e}"))?;
    match url.scheme() {
        "https" => {}
        "http" => {
            let loopback = match url.host() {
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
                None => false,
            };
            if !loopback {
                return Err("must be https:// (http:// only on a loopback address)".into());
            }
        }
        _ => return Err("must be https:// (http:// only on a loopback address)".into()),
    }
    if url.host().is_none() || url.query().is_some() || url.fragment().is_some() {
        return Err("must name a host and have no query or fragment".into());
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse() {
        let s = Settings::defaults();
        assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
        assert!(s.database_url.starts_with("sqlite://"));
        assert!(s.admin_token.is_none());
    }

    #[test]
    fn environment_overrides_file_overrides_defaults() {
        let files = vec![(
            "f.toml".to_string(),
            "listen = \"0.0.0.0:9000\"\nmax_dimension = 50\n".to_string(),
        )];
        let s = Settings::from_layers(&files, |k| match k {
            "DIRICHLET_MAX_DIMENSION" => Some("70".into()),
            "DATABASE_URL" => Some("postgres://x@h/db".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(s.listen.to_string(), "0.0.0.0:9000");
        assert_eq!(s.max_dimension, 70);
        assert_eq!(s.database_url, "postgres://x@h/db");
    }

    #[test]
    fn dirichlet_database_url_wins_over_database_url() {
        let s = Settings::from_layers(&[], |k| match k {
            "DIRICHLET_DATABASE_URL" => Some("sqlite://a.db".into()),
            "DATABASE_URL" => Some("sqlite://b.db".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(s.database_url, "sqlite://a.db");
    }

    #[test]
    fn an_all_digit_admin_token_stays_a_string() {
        let s = Settings::from_layers(&[], |k| {
            (k == "DIRICHLET_ADMIN_TOKEN").then(|| "12345678901234567890".into())
        })
        .unwrap();
        assert_eq!(
            s.admin_token.as_ref().map(|t| t.expose_secret()),
            Some("12345678901234567890")
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        let files = vec![("f.toml".to_string(), "lisen = \"x\"\n".to_string())];
        assert!(Settings::from_layers(&files, |_| None).is_err());
        assert!(
            Settings::from_layers(&[], |k| (k == "DIRICHLET_LISTEN").then(|| "nope".into()))
                .is_err()
        );
        assert!(
            Settings::from_layers(&[], |k| (k == "DIRICHLET_ADMIN_TOKEN")
                .then(|| "short".into()))
            .is_err()
        );
    }

    #[test]
    fn debug_never_prints_the_secrets() {
        let token = "an-admin-token-that-must-not-leak";
        let key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        let s = Settings::from_layers(&[], |k| match k {
            "DIRICHLET_ADMIN_TOKEN" => Some(token.into()),
            "DIRICHLET_FINGERPRINT_KEY" => Some(key.into()),
            _ => None,
        })
        .expect("valid");
        let printed = format!("{s:?} {s:#?}");
        assert!(
            !printed.contains(token) && !printed.contains(key),
            "{printed}"
        );
        assert!(printed.contains("REDACTED"), "{printed}");
        assert_eq!(
            s.fingerprint_key.as_ref().map(|k| k.expose_secret()),
            Some(key)
        );
    }

    #[test]
    fn the_connect_backoff_doubles_up_to_its_cap() {
        let s = Settings::from_layers(&[], |k| match k {
            "DIRICHLET_DB_CONNECT_BACKOFF_MS" => Some("100".into()),
            "DIRICHLET_DB_CONNECT_MAX_BACKOFF_MS" => Some("1000".into()),
            _ => None,
        })
        .unwrap();
        let waits: Vec<u64> = [1, 2, 3, 4, 5, 6, 64, 200, u32::MAX]
            .map(|retry| s.db_connect_backoff(retry).as_millis() as u64)
            .to_vec();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000, 1000, 1000, 1000]);
        let defaults = Settings::defaults();
        assert!(defaults.db_connect_backoff(1) < defaults.db_connect_backoff(2));
        assert!(
            Settings::from_layers(&[], |k| (k == "DIRICHLET_DB_CONNECT_BACKOFF_MS")
                .then(|| "0".into()))
            .is_err()
        );
        assert!(
            Settings::from_layers(&[], |k| (k == "DIRICHLET_DB_CONNECT_MAX_BACKOFF_MS")
                .then(|| "1".into()))
            .is_err(),
            "a cap below the first wait is refused"
        );
    }

    #[test]
    fn single_sign_on_needs_an_audience_and_tls_off_this_machine() {
        let with = |pairs: &'static [(&'static str, &'static str)]| {
            Settings::from_layers(&[], move |k| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            })
        };
        let ok = with(&[
            ("DIRICHLET_OIDC_ISSUER", "https://id.example.com/realms/x"),
            ("DIRICHLET_OIDC_AUDIENCE", "dirichlet"),
        ])
        .unwrap();
        assert_eq!(ok.oidc_role_claim, "dirichlet_role");
        assert_eq!(ok.oidc_datasets_claim, "dirichlet_datasets");
        for issuer in [
            "http://127.0.0.1:9000",
            "http://[::1]:9",
            "http://localhost:1/x",
        ] {
            assert!(check_provider_url(issuer).is_ok(), "{issuer}");
        }
        for issuer in [
            "http://id.example.com",
            "http://10.0.0.1",
            "ftp://id.example.com",
            "https://id.example.com/?q=1",
            "not a url",
        ] {
            assert!(check_provider_url(issuer).is_err(), "{issuer}");
        }
        assert!(with(&[("DIRICHLET_OIDC_ISSUER", "https://id.example.com")]).is_err());
        assert!(with(&[("DIRICHLET_OIDC_AUDIENCE", "dirichlet")]).is_err());
        assert!(with(&[
            ("DIRICHLET_OIDC_ISSUER", "http://id.example.com"),
            ("DIRICHLET_OIDC_AUDIENCE", "dirichlet"),
        ])
        .is_err());
    }

    /// Tokens that pass a length check but could never sign in.
    #[test]
    fn admin_tokens_that_cannot_sign_in_are_refused() {
        for token in [
            "dra_0123456789abcdef_secret",
            " 0123456789abcdefghij",
            "0123456789abcdefghij ",
            "                        ",
            "\t0123456789abcdefghij",
        ] {
            let result = Settings::from_layers(&[], |k| {
                (k == "DIRICHLET_ADMIN_TOKEN").then(|| token.into())
            });
            assert!(result.is_err(), "{token:?} was accepted");
        }
        assert!(
            Settings::from_layers(&[], |k| (k == "DIRICHLET_ADMIN_TOKEN")
                .then(|| "a-token-with-inner space".into()))
            .is_ok()
        );
    }
}
