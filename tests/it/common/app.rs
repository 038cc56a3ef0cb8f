//! `spawn_app`: the real server on port 0 with a fresh database (a temp SQLite file, or a
//! brand-new PostgreSQL database), spoken to over HTTP.

use std::path::PathBuf;

use dirichlet_release::config::Settings;
use dirichlet_release::startup::{Application, LocalServer};
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub struct TestApp {
    pub address: String,
    pub client: reqwest::Client,
    pub backend: Backend,
    pub database_url: String,
    /// The SQLite file, when the backend is SQLite.
    pub sqlite_path: Option<PathBuf>,
    /// Stops the server when the test's app goes away (before its database directory does).
    _server: LocalServer,
    _dir: Option<tempfile::TempDir>,
}

/// A fresh database URL for `backend` (and the temp dir that owns a SQLite file).
pub async fn fresh_database(
    backend: Backend,
) -> (String, Option<tempfile::TempDir>, Option<PathBuf>) {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("ledger.db");
            (
                format!("sqlite://{}", path.display()),
                Some(dir),
                Some(path),
            )
        }
        Backend::Postgres => (super::pg::fresh_database().await, None, None),
    }
}

pub fn test_settings(database_url: &str) -> Settings {
    let mut settings = Settings::defaults();
    settings.listen = "127.0.0.1:0".parse().unwrap();
    settings.database_url = database_url.to_string();
    settings.admin_token = Some(ADMIN_TOKEN.into());
    settings.db_acquire_timeout_ms = 2000;
    settings
}

pub async fn spawn_app(backend: Backend) -> TestApp {
    spawn_app_with(backend, |_| {}).await
}

pub async fn spawn_app_with(backend: Backend, tweak: impl FnOnce(&mut Settings)) -> TestApp {
    let (database_url, dir, sqlite_path) = fresh_database(backend).await;
    let mut settings = test_settings(&database_url);
    tweak(&mut settings);
    let server = Application::build(settings)
        .await
        .expect("the application starts")
        .spawn();
    TestApp {
        address: server.address.clone(),
        _server: server,
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .build()
            .unwrap(),
        backend,
        database_url,
        sqlite_path,
        _dir: dir,
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.address, path)
    }

    pub async fn get(&self, path: &str, token: &str) -> Response {
        self.client
            .get(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .expect("request sent")
    }

    /// The JSON body of a `GET` that must answer 200.
    pub async fn get_json(&self, path: &str, token: &str) -> Value {
        let response = self.get(path, token).await;
        assert_eq!(response.status(), StatusCode::OK, "GET {path}");
        response.json().await.expect("a JSON body")
    }

    pub async fn post(&self, path: &str, token: &str, body: &Value) -> Response {
        self.client
            .post(self.url(path))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .expect("request sent")
    }

    pub async fn post_with_key(
        &self,
        path: &str,
        token: &str,
        key: &str,
        body: &Value,
    ) -> Response {
        self.client
            .post(self.url(path))
            .bearer_auth(token)
            .header("Idempotency-Key", key)
            .json(body)
            .send()
            .await
            .expect("request sent")
    }

    /// Register a dataset with an RDP budget `epsilon` at `order`; returns its id.
    pub async fn create_dataset(&self, order: f64, epsilon: f64) -> String {
        let response = self
            .post(
                "/v1/datasets",
                ADMIN_TOKEN,
                &json!({"name": "test", "budget": {"order": order, "epsilon": epsilon}}),
            )
            .await;
        assert_eq!(response.status(), StatusCode::CREATED);
        let body: Value = response.json().await.unwrap();
        body["id"].as_str().unwrap().to_string()
    }

    pub async fn budget(&self, dataset: &str) -> Value {
        let response = self
            .get(&format!("/v1/datasets/{dataset}/budget"), ADMIN_TOKEN)
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    /// A token confined to `datasets`.
    pub async fn analyst_token(&self, datasets: &[&str]) -> String {
        let response = self
            .post("/v1/tokens", ADMIN_TOKEN, &json!({ "datasets": datasets }))
            .await;
        assert_eq!(response.status(), StatusCode::CREATED);
        let body: Value = response.json().await.unwrap();
        body["token"].as_str().unwrap().to_string()
    }
}

/// Assert a problem+json response with this status and type slug; returns the body.
pub async fn assert_problem(response: Response, status: StatusCode, slug: &str) -> Value {
    assert_eq!(response.status(), status, "unexpected status for {slug}");
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    assert_eq!(content_type, "application/problem+json");
    let body: Value = response.json().await.expect("problem body is JSON");
    assert_eq!(body["type"], format!("/problems/{slug}"), "{body}");
    assert_eq!(body["status"], status.as_u16());
    assert!(
        body["title"].is_string() && body["detail"].is_string(),
        "{body}"
    );
    body
}

/// [`assert_problem`], and its `detail` names `needle` (what the client is told to fix).
pub async fn assert_problem_about(
    response: Response,
    status: StatusCode,
    slug: &str,
    needle: &str,
) -> Value {
    let problem = assert_problem(response, status, slug).await;
    assert!(
        problem["detail"].as_str().unwrap().contains(needle),
        "{needle} not in {problem}"
    );
    problem
}

/// Generate a `#[tokio::test]` per backend for each listed async fn taking a `Backend`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::app::Backend::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::app::Backend::Postgres).await;
                }
            )*
        }
    };
}
