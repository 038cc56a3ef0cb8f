//! The binary's life cycle: the admin token generated on first start, graceful shutdown that
//! finishes an in-flight release, and configuration from the environment.

use std::time::Duration;

use crate::common::app::{fresh_database, Backend};
use crate::common::server::Replica;
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
