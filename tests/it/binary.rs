//! The binary's life cycle: the admin token generated on first start, graceful shutdown that
//! finishes an in-flight release, start-up that waits for its database, and configuration from
//! the environment.

use std::time::{Duration, Instant};

use crate::common::app::{fresh_database, Backend, ADMIN_TOKEN};
use crate::common::server::{free_port, Owner, Replica};
use reqwest::StatusCode;
use serde_json::{json, Value};

async fn admin_token_is_generated_once_and_only_its_digest_is_stored(backend: Backend) {
    let (database_url, _dir, sqlite_path) = fresh_database(backend).await;
    let logs = tempfile::tempdir().unwrap();
    let env = [("DIRICHLET_DATABASE_URL", database_url.as_str())];
    let mut first = Replica::start_bare("first", &env, logs.path());
    // The announcement follows the address line; give the drain thread a moment.
    let mut token = None;
    for _ in 0..100 {
        let text = first.stdout_text();
        if let Some(line) = text
            .lines()
            .find(|l| l.starts_with("Generated admin token"))
        {
            token = line.rsplit(' ').next().map(str::to_string);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let token = token.expect("the generated admin token is printed on first start");
    assert!(token.len() >= 40, "the token carries 256 random bits");
    let client = reqwest::Client::new();
    let create = |address: String, token: String| {
        let client = client.clone();
        async move {
            client
                .post(format!("{address}/v1/datasets"))
                .bearer_auth(token)
                .json(&json!({"name": "x", "budget": {"order": 2, "epsilon": 1}}))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(
        create(first.address(), token.clone()).await,
        StatusCode::CREATED
    );
    assert!(first.stop_with("INT").success(), "SIGINT stops it cleanly");

    // A second start finds the stored digest: nothing printed, the same token still works.
    let mut second = Replica::start_bare("second", &env, logs.path());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!second.stdout_text().contains("Generated admin token"));
    assert_eq!(
        create(second.address(), token.clone()).await,
        StatusCode::CREATED
    );
    assert_eq!(
        create(second.address(), "not-the-token".into()).await,
        StatusCode::UNAUTHORIZED
    );
    assert!(second.stop_with("TERM").success());
    assert!(!second.log().contains(&token), "the token is never logged");
    if let Some(path) = sqlite_path {
        let bytes = std::fs::read(path).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(&token),
            "only the digest is stored"
        );
    }
}

async fn sigterm_finishes_an_in_flight_release(backend: Backend) {
    let (database_url, _dir, _) = fresh_database(backend).await;
    let logs = tempfile::tempdir().unwrap();
    let admin = "in-flight-admin-token-0123456789";
    let mut server = Replica::start_bare(
        "server",
        &[
            ("DIRICHLET_DATABASE_URL", database_url.as_str()),
            ("DIRICHLET_ADMIN_TOKEN", admin),
            ("RUST_LOG", "info,tower_http=debug"),
        ],
        logs.path(),
    );
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{}/v1/datasets", server.address()))
        .bearer_auth(admin)
        .json(&json!({"name": "big", "budget": {"order": 2, "epsilon": 10}}))
        .send()
        .await
        .unwrap();
    let id = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    // A large release takes long enough (parse, sample, store, serialise) to be in flight
    // when the signal arrives.
    let counts: Vec<u32> = (0..400_000).map(|i| i % 97).collect();
    let url = format!("{}/v1/datasets/{id}/releases", server.address());
    let request = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .post(url)
                .bearer_auth(admin)
                .json(&json!({"counts": counts, "epsilon": 1.0}))
                .send()
                .await
                .unwrap()
        }
    });
    // Signal only once the server has the request (its headers at least): then it is in flight.
    for _ in 0..500 {
        if server.log().matches("started processing request").count() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        server.log().matches("started processing request").count() >= 2,
        "the release request reached the server"
    );
    assert!(server.is_running(), "still serving before the signal");
    server.signal("TERM");
    let response = request.await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::CREATED,
        "the in-flight release completes"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["distribution"].as_array().unwrap().len(), 400_000);
    let status = server.wait_stopped();
    assert!(status.success(), "graceful exit, got {status}");
    // New connections are refused after shutdown.
    assert!(client
        .get(format!("{}/healthz", server.address()))
        .send()
        .await
        .is_err());
}

on_both_backends!(
    admin_token_is_generated_once_and_only_its_digest_is_stored,
    sigterm_finishes_an_in_flight_release,
);

/// The JSON log lines of `replica` whose message is `message`.
fn log_events(replica: &Replica, message: &str) -> Vec<Value> {
    replica
        .log()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["message"] == message)
        .collect()
}

const RETRYING: &str = "database unreachable at start-up; retrying";

/// GET `path` without credentials unless `token`; (status, Retry-After, content type, body).
async fn probe(
    client: &reqwest::Client,
    replica: &Replica,
    path: &str,
    token: Option<&str>,
) -> (StatusCode, Option<String>, Option<String>, String) {
    let mut request = client.get(format!("{}{path}", replica.address()));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("the server answers");
    let header = |name| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (retry_after, content_type) = (header("retry-after"), header("content-type"));
    (
        response.status(),
        retry_after,
        content_type,
        response.text().await.unwrap(),
    )
}

/// The service listens before its database is up (as under compose, where the database
/// container starts alongside): `/healthz` 200, `/readyz` and every route that needs the database
/// 503 problem+json with Retry-After, one log line per retry; once PostgreSQL starts, the same
/// process becomes ready and serves a release, without a restart.
#[tokio::test]
async fn start_up_waits_for_a_database_that_is_not_up_yet() {
    let owner = Owner::spawn();
    let server = crate::common::pg::Throwaway::start(owner.pid())
        .await
        .expect("a throwaway PostgreSQL server starts");
    let database_url = crate::common::pg::create_database(&server.admin_url)
        .await
        .unwrap();
    server.stop().await.expect("the server stops");

    let logs = tempfile::tempdir().unwrap();
    let mut replica = Replica::start_listening(
        "waiting",
        &database_url,
        &[
            ("DIRICHLET_DB_CONNECT_BACKOFF_MS", "50"),
            ("DIRICHLET_DB_CONNECT_MAX_BACKOFF_MS", "400"),
        ],
        logs.path(),
        "info",
    );
    let client = reqwest::Client::new();
    // Until start-up has retried a few times.
    let deadline = Instant::now() + Duration::from_secs(30);
    while log_events(&replica, RETRYING).len() < 3 {
        assert!(
            Instant::now() < deadline,
            "no retries logged: {}",
            replica.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(replica.is_running(), "start-up waits instead of exiting");

    let (status, _, _, body) = probe(&client, &replica, "/healthz", None).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, r#"{"status":"ok"}"#)
    );
    // The container's HEALTHCHECK: alive, not ready.
    assert_eq!(healthcheck(&replica, &[]), Some(0));
    assert_eq!(healthcheck(&replica, &["--ready"]), Some(1));
    for (path, token) in [
        ("/readyz", None),
        ("/v1/datasets", Some(ADMIN_TOKEN)),
        ("/metrics", Some(ADMIN_TOKEN)),
    ] {
        let (status, retry_after, content_type, body) = probe(&client, &replica, path, token).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {body}");
        assert_eq!(retry_after.as_deref(), Some("1"), "{path}");
        assert_eq!(
            content_type.as_deref(),
            Some("application/problem+json"),
            "{path}"
        );
        let problem: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(problem["type"], "/problems/service-unavailable", "{path}");
    }
    let create = client
        .post(format!("{}/v1/datasets", replica.address()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"name": "early", "budget": {"order": 2, "epsilon": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(create.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(create.headers().contains_key("retry-after"));

    server.restart().await.expect("the server starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _, _, body) = probe(&client, &replica, "/readyz", None).await;
        if status == StatusCode::OK {
            assert_eq!(body, r#"{"database":"postgres","status":"ready"}"#);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not ready 30 s after the database started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(healthcheck(&replica, &["--ready"]), Some(0));
    let connected = log_events(&replica, "database connected");
    assert_eq!(connected.len(), 1, "{}", replica.log());
    assert!(connected[0]["retries"].as_u64().unwrap() >= 3);

    let dataset = client
        .post(format!("{}/v1/datasets", replica.address()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"name": "late", "budget": {"order": 2, "epsilon": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(dataset.status(), StatusCode::CREATED);
    let id = dataset.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let release = client
        .post(format!("{}/v1/datasets/{id}/releases", replica.address()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"counts": [3, 1, 4], "epsilon": 0.5}))
        .send()
        .await
        .unwrap();
    assert_eq!(release.status(), StatusCode::CREATED);
    assert_eq!(replica.starts, 1, "the same process, never restarted");
    assert!(replica.terminate().success());
    assert_eq!(
        healthcheck(&replica, &[]),
        Some(1),
        "nothing listens any more"
    );
}

/// `dirichlet-release healthcheck ARGS` as the image's HEALTHCHECK runs it: the environment the
/// server got (its DIRICHLET_LISTEN), no curl. Its exit status.
fn healthcheck(replica: &Replica, args: &[&str]) -> Option<i32> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dirichlet-release"))
        .arg("healthcheck")
        .args(args)
        .env_clear()
        .env("DIRICHLET_LISTEN", format!("0.0.0.0:{}", replica.port))
        .output()
        .expect("the binary runs");
    assert!(
        out.stdout.is_empty(),
        "a health check prints nothing on stdout"
    );
    out.status.code()
}

/// A database that never comes up (a wrong port): start-up keeps trying with capped exponential
/// backoff instead of exiting, logs one line per retry, never the URL's password, and stops
/// promptly and cleanly on SIGTERM meanwhile.
#[tokio::test]
async fn a_database_that_never_comes_up_is_retried_without_exiting_or_logging_the_password() {
    let password = format!("pw-{}", uuid::Uuid::new_v4().simple());
    // Nothing listens there: the port was free a moment ago and is never bound by this test.
    let url = format!(
        "postgres://ledger:{password}@127.0.0.1:{}/ledger?password={password}",
        free_port()
    );
    let logs = tempfile::tempdir().unwrap();
    let mut replica = Replica::start_listening(
        "never",
        &url,
        &[
            ("DIRICHLET_DB_CONNECT_BACKOFF_MS", "20"),
            ("DIRICHLET_DB_CONNECT_MAX_BACKOFF_MS", "160"),
        ],
        logs.path(),
        "info",
    );
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while log_events(&replica, RETRYING).len() < 8 {
        assert!(replica.is_running(), "exited: {}", replica.log());
        assert!(
            Instant::now() < deadline,
            "too few retries: {}",
            replica.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, _, _, _) = probe(&client, &replica, "/readyz", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let stopping = Instant::now();
    let status = replica.terminate();
    assert!(status.success(), "SIGTERM while waiting: {status}");
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "stopped {:?} after SIGTERM",
        stopping.elapsed()
    );

    let retries = log_events(&replica, RETRYING);
    // One line per retry, numbered in order.
    let numbers: Vec<u64> = retries
        .iter()
        .map(|r| r["retry"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>());
    // Each wait is drawn from [half, all] of 20 ms doubled per retry, capped at 160 ms.
    for r in &retries {
        let n = r["retry"].as_u64().unwrap();
        let full = (20u64 << (n - 1).min(10)).min(160);
        let wait = r["retry_in_ms"].as_u64().unwrap();
        assert!(
            full / 2 <= wait && wait <= full,
            "retry {n} waited {wait} ms"
        );
        assert_eq!(
            r["database"],
            format!("postgres://ledger@127.0.0.1:{}/ledger", url_port(&url))
        );
        assert!(
            r["error"].as_str().unwrap().contains("Connection refused"),
            "{r}"
        );
    }
    assert!(
        !replica.log().contains(&password) && !replica.stdout_text().contains(&password),
        "the password was printed"
    );
}

fn url_port(url: &str) -> u16 {
    url::Url::parse(url).unwrap().port().unwrap()
}
