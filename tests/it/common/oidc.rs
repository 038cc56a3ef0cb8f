//! A real OpenID provider for the tests: `tests/oidc-provider/provider.js` (the certified
//! `oidc-provider` package from npm) as a child process. Its node modules are installed with
//! `npm ci` on first use when missing; no node or npm is a test failure, never a skip.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use serde_json::Value;

/// The `aud` the provider puts in a token unless another resource is asked for.
pub const AUDIENCE: &str = "https://dirichlet.test";

fn provider_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/oidc-provider")
}

/// `npm ci` once per test process, when the modules are not there (tests run in parallel).
fn install_modules() {
    static INSTALLED: Mutex<bool> = Mutex::new(false);
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    let dir = provider_dir();
    if *installed || dir.join("node_modules/oidc-provider/package.json").exists() {
        *installed = true;
        return;
    }
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(&dir)
        .status()
        .unwrap_or_else(|e| {
            panic!("the single sign-on tests need npm (Node.js 20 or later) on PATH: {e}")
        });
    assert!(status.success(), "npm ci in {} failed", dir.display());
    *installed = true;
}

pub struct Provider {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The issuer the service is configured with.
    pub issuer: String,
    /// Another issuer, signing with the same keys.
    pub other: String,
    http: reqwest::Client,
}

impl Provider {
    pub fn start() -> Provider {
        install_modules();
        let mut child = Command::new("node")
            .arg("provider.js")
            .current_dir(provider_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("the single sign-on tests need node (Node.js 20 or later) on PATH: {e}")
            });
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        let ready = loop {
            line.clear();
            let n = stdout.read_line(&mut line).expect("the provider's output");
            assert!(n > 0, "the provider exited before it was ready");
            if let Some(json) = line.trim().strip_prefix("ready ") {
                break serde_json::from_str::<Value>(json).expect("the ready line is JSON");
            }
        };
        Provider {
            child,
            stdin,
            stdout,
            issuer: ready["main"].as_str().unwrap().to_owned(),
            other: ready["other"].as_str().unwrap().to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// Send a command and return the provider's one-line answer.
    fn command(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").expect("the provider reads commands");
        self.stdin.flush().unwrap();
        loop {
            let mut line = String::new();
            let n = self
                .stdout
                .read_line(&mut line)
                .expect("the provider's answer");
            assert!(n > 0, "the provider exited");
            let line = line.trim().to_owned();
            if line.starts_with("rotated") || line == "stopped" {
                return line;
            }
        }
    }

    /// A new signing key; the old one leaves the key set.
    pub fn rotate(&mut self) {
        assert!(self.command("rotate").starts_with("rotated "));
    }

    /// Both issuers stop answering.
    pub fn stop(&mut self) {
        assert_eq!(self.command("stop"), "stopped");
    }

    /// An access token of `issuer` for client `client` (its `sub`), with the form `params`
    /// (`dirichlet_role`, `dirichlet_datasets`, `resource`, `exp_offset`, …).
    pub async fn token_from(&self, issuer: &str, client: &str, params: &[(&str, &str)]) -> String {
        let mut form = vec![("grant_type", "client_credentials")];
        form.extend_from_slice(params);
        let response = self
            .http
            .post(format!("{issuer}/token"))
            .basic_auth(client, Some("secret"))
            .form(&form)
            .send()
            .await
            .expect("the provider answers");
        let status = response.status();
        let body: Value = response.json().await.expect("a JSON token response");
        assert!(status.is_success(), "token request refused: {body}");
        body["access_token"].as_str().unwrap().to_owned()
    }

    pub async fn token(&self, client: &str, params: &[(&str, &str)]) -> String {
        self.token_from(&self.issuer, client, params).await
    }

    /// The issuer's key set, as published.
    pub async fn jwks(&self) -> String {
        self.http
            .get(format!("{}/jwks", self.issuer))
            .send()
            .await
            .expect("the provider answers")
            .text()
            .await
            .unwrap()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
