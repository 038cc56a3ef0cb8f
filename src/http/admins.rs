//! Admin tokens from a file (`admin_tokens_file`), accepted beside the configured (or generated)
//! admin token and read again when the file changes, so that admin tokens are rotated without a
//! restart. Only their SHA-256 digests are kept.

use std::path::PathBuf;
use std::sync::RwLock;
use std::time::Duration;

use subtle::ConstantTimeEq;

use crate::access::{sha256, ANALYST_PREFIX};

#[derive(Default)]
struct Loaded {
    digests: Vec<[u8; 32]>,
    /// SHA-256 of the file's bytes as last read: an unchanged file is not parsed again.
    content: Option<[u8; 32]>,
}

#[derive(Default)]
pub struct AdminTokens {
    path: Option<PathBuf>,
    loaded: RwLock<Loaded>,
}

/// The tokens of a file: one a line, blank lines and `#` comments skipped. A line that could
/// never sign in (shorter than 16 characters, or shaped as an analyst token) refuses the whole
/// file, so a typo never silently drops an admin.
fn parse(text: &str) -> Result<Vec<[u8; 32]>, String> {
    let mut digests = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let token = line.trim();
        if token.is_empty() || token.starts_with('#') {
            continue;
        }
        if token.len() < 16 || token.starts_with(ANALYST_PREFIX) {
            return Err(format!(
                "line {}: an admin token has at least 16 characters and does not start with `{ANALYST_PREFIX}`",
                n + 1
            ));
        }
        digests.push(sha256(token.as_bytes()));
    }
    Ok(digests)
}

impl AdminTokens {
    /// The file's tokens, read now (start-up refuses a file it cannot read or parse); no file:
    /// no further tokens.
    pub fn load(path: Option<&str>) -> Result<AdminTokens, String> {
        let tokens = AdminTokens {
            path: path.map(PathBuf::from),
            loaded: RwLock::default(),
        };
        tokens.reload()?;
        Ok(tokens)
    }

    pub fn is_watched(&self) -> bool {
        self.path.is_some()
    }

    /// Read the file again; `Ok(true)` when its tokens changed. On an error the tokens last
    /// read stay (a mounted secret being swapped can be missing for a moment).
    pub fn reload(&self) -> Result<bool, String> {
        let Some(path) = &self.path else {
            return Ok(false);
        };
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let content = sha256(&bytes);
        if self.read().content == Some(content) {
            return Ok(false);
        }
        let text =
            std::str::from_utf8(&bytes).map_err(|_| format!("{}: not UTF-8", path.display()))?;
        let digests = parse(text).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut loaded = self.loaded.write().unwrap_or_else(|e| e.into_inner());
        *loaded = Loaded {
            digests,
            content: Some(content),
        };
        Ok(true)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Loaded> {
        self.loaded.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn count(&self) -> usize {
        self.read().digests.len()
    }

    /// Whether `presented` (a token's SHA-256) is one of the file's: every digest is compared,
    /// in constant time, so the answer's timing does not tell which matched.
    pub fn matches(&self, presented: &[u8; 32]) -> bool {
        let loaded = self.read();
        let mut found = subtle::Choice::from(0);
        for digest in &loaded.digests {
            found |= presented.ct_eq(digest);
        }
        bool::from(found)
    }

    fn reload_logged(&self, why: &str) {
        match self.reload() {
            Ok(true) => tracing::info!(tokens = self.count(), why, "admin tokens file read again"),
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(%error, why, "admin tokens file unreadable; keeping the tokens last read")
            }
        }
    }

    /// Read the file again every `every`, and at once on SIGHUP; runs until aborted.
    pub async fn watch(self: std::sync::Arc<Self>, every: Duration) {
        #[cfg(unix)]
        let mut hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            #[cfg(unix)]
            {
                let signal = async {
                    match hangup.as_mut() {
                        Some(s) => s.recv().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = tick.tick() => self.reload_logged("changed"),
                    _ = signal => self.reload_logged("SIGHUP"),
                }
            }
            #[cfg(not(unix))]
            {
                tick.tick().await;
                self.reload_logged("changed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_of_tokens_is_read_again_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admins");
        std::fs::write(&path, "# admins\n\nfirst-admin-token-0001\n").unwrap();
        let tokens = AdminTokens::load(Some(path.to_str().unwrap())).unwrap();
        assert!(tokens.matches(&sha256(b"first-admin-token-0001")));
        assert!(!tokens.matches(&sha256(b"second-admin-token-002")));
        assert_eq!(tokens.reload(), Ok(false), "unchanged");

        std::fs::write(&path, "first-admin-token-0001\nsecond-admin-token-002\n").unwrap();
        assert_eq!(tokens.reload(), Ok(true));
        assert!(tokens.matches(&sha256(b"second-admin-token-002")));

        std::fs::write(&path, "second-admin-token-002\n").unwrap();
        assert_eq!(tokens.reload(), Ok(true));
        assert!(
            !tokens.matches(&sha256(b"first-admin-token-0001")),
            "removed"
        );

        // A bad file, or none, keeps what was read last.
        std::fs::write(&path, "short\n").unwrap();
        assert!(tokens.reload().is_err());
        std::fs::remove_file(&path).unwrap();
        assert!(tokens.reload().is_err());
        assert!(tokens.matches(&sha256(b"second-admin-token-002")));
    }

    #[test]
    fn tokens_that_could_never_sign_in_refuse_the_file() {
        assert!(parse("dra_0123456789abcdef_secret\n").is_err());
        assert!(parse("tooshort\n").is_err());
        assert_eq!(parse("# only a comment\n\n").unwrap().len(), 0);
        assert!(AdminTokens::load(Some("/nonexistent/admin-tokens")).is_err());
        assert_eq!(AdminTokens::load(None).unwrap().count(), 0);
    }
}
