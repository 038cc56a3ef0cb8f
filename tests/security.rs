//! Security properties, against the real server: tokens are stored only as digests (searched for
//! in the SQLite file and in a pg_dump, and in trace-level logs), header sections are bounded
//! (431 problem), analysts cannot reach another dataset's releases, and no seed or generator
//! state is accepted or returned.

mod common;

use std::time::{Duration, Instant};

use common::app::{
    assert_problem, fresh_database, spawn_app, spawn_app_with, Backend, ADMIN_TOKEN,
};
use common::server::{contains_bytes, pg_dump, sqlite_bytes, Replica};
use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `secret` appears in `bytes` neither as text nor as the hex of its text.
fn assert_absent(what: &str, bytes: &[u8], secret: &str) {
    assert!(
        !contains_bytes(bytes, secret.as_bytes()),
        "{what} contains a token in clear"
    );
    let text = String::from_utf8_lossy(bytes).to_ascii_lowercase();
    assert!(
        !text.contains(&hex(secret.as_bytes())),
        "{what} contains a token as hex"
    );
}

/// The stored form of a 32-byte digest: raw in SQLite, hex in a pg_dump.
fn assert_digest_present(what: &str, bytes: &[u8], digest: &[u8; 32], backend: Backend) {
    let found = match backend {
        Backend::Sqlite => contains_bytes(bytes, digest),
        Backend::Postgres => String::from_utf8_lossy(bytes).contains(&hex(digest)),
    };
    assert!(
        found,
        "{what} holds the digest (the search can find stored bytes)"
    );
}

async fn generated_admin_token(replica: &Replica) -> String {
    const PREFIX: &str = "Generated admin token (shown once; only its SHA-256 is stored): ";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(token) = replica
            .stdout
            .lock()
            .unwrap()
            .iter()
            .find_map(|l| l.strip_prefix(PREFIX))
        {
            return token.trim().to_string();
        }
        assert!(Instant::now() < deadline, "the generated token was printed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn tokens_are_stored_only_as_digests(backend: Backend) {
    let (database_url, _dir, sqlite_path) = fresh_database(backend).await;
    let logs = tempfile::tempdir().unwrap();
    let mut replica =
        Replica::start_without_admin_token("tokens", &database_url, &[], logs.path(), "trace");
    let admin = generated_admin_token(&replica).await;
    assert!(admin.len() >= 40, "a long random admin token");
    let client = reqwest::Client::new();
    let base = replica.address();
    let dataset: Value = client
        .post(format!("{base}/v1/datasets"))
        .bearer_auth(&admin)
        .json(&json!({"name": "tokens", "budget": {"order": 2, "epsilon": 4}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = dataset["id"].as_str().unwrap();
    let created: Value = client
        .post(format!("{base}/v1/tokens"))
        .bearer_auth(&admin)
        .json(&json!({"datasets": [id]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let analyst = created["token"].as_str().unwrap().to_string();
    let secret = analyst
        .strip_prefix("dra_")
        .and_then(|rest| rest.split_once('_'))
        .unwrap()
        .1
        .to_string();
    assert!(secret.len() >= 43);
    let response = client
        .post(format!("{base}/v1/datasets/{id}/releases"))
        .bearer_auth(&analyst)
        .json(&json!({"counts": [3, 4, 5], "epsilon": 0.5}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    // A wrong token, in the logs' way.
    let response = client
        .get(format!("{base}/v1/datasets/{id}"))
        .bearer_auth(format!("{analyst}x"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(replica.terminate().success());

    // The digest survives a restart: the same token still works, and no new one is printed.
    replica.restart();
    let response = client
        .get(format!("{}/v1/datasets/{id}", replica.address()))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(replica.terminate().success());
    let printed = replica
        .stdout
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.starts_with("Generated admin token"))
        .count();
    assert_eq!(printed, 1, "the admin token is shown once");

    let stored = match backend {
        Backend::Sqlite => sqlite_bytes(sqlite_path.as_ref().unwrap()),
        Backend::Postgres => pg_dump(&database_url),
    };
    let what = match backend {
        Backend::Sqlite => "the SQLite file",
        Backend::Postgres => "the pg_dump",
    };
    assert_absent(what, &stored, &admin);
    assert_absent(what, &stored, &analyst);
    assert_absent(what, &stored, &secret);
    let admin_digest: [u8; 32] = Sha256::digest(admin.as_bytes()).into();
    let secret_digest: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
    assert_digest_present(what, &stored, &admin_digest, backend);
    assert_digest_present(what, &stored, &secret_digest, backend);

    let log = std::fs::read(replica.log_path()).unwrap();
    assert!(
        String::from_utf8_lossy(&log).contains("\"level\":\"TRACE\""),
        "trace logging was on"
    );
    assert_absent("the trace-level log", &log, &admin);
    assert_absent("the trace-level log", &log, &secret);
}

/// Header sections beyond `max_headers` lines or `max_header_bytes` bytes are refused with a
/// 431 problem, before the token is looked at; smaller ones pass.
async fn header_sections_are_bounded(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(2.0, 1.0).await;
    let path = format!("/v1/datasets/{id}");
    let with_headers = |n: usize, size: usize| {
        let mut request = app.client.get(app.url(&path)).bearer_auth(ADMIN_TOKEN);
        for i in 0..n {
            request = request.header(format!("x-filler-{i}"), "v".repeat(size));
        }
        request
    };
    // reqwest sends host, accept and authorization besides these.
    assert_eq!(
        with_headers(90, 10).send().await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        with_headers(1, 15 * 1024).send().await.unwrap().status(),
        StatusCode::OK
    );
    for (lines, size) in [(101, 10), (150, 10), (390, 1), (1, 17 * 1024), (4, 5000)] {
        let response = with_headers(lines, size).send().await.unwrap();
        let problem = assert_problem(
            response,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
        )
        .await;
        assert!(problem["detail"]
            .as_str()
            .unwrap()
            .contains("100 header lines"));
    }
    // Refused before authentication: no token needed to be told, no store lookup made.
    let response = app
        .client
        .get(app.url(&path))
        .header("x-big", "v".repeat(20 * 1024))
        .send()
        .await
        .unwrap();
    assert_problem(
        response,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers-too-large",
    )
    .await;
    // Beyond the parser's caps (4 × the limits: 400 lines, ~400 KiB) hyper itself answers 431
    // (without a problem document) or closes the connection; either way nothing is served.
    let huge = app
        .client
        .get(app.url(&path))
        .bearer_auth(ADMIN_TOKEN)
        .header("x-huge", "v".repeat(1024 * 1024))
        .send()
        .await;
    if let Ok(response) = huge {
        assert_eq!(
            response.status(),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        );
    }
    // The service is unharmed.
    assert_eq!(app.get(&path, ADMIN_TOKEN).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn header_limits_are_configurable() {
    let app = spawn_app_with(Backend::Sqlite, |s| {
        s.max_headers = 20;
        s.max_header_bytes = 2048;
    })
    .await;
    let request = |n: usize, size: usize| {
        let mut r = app.client.get(app.url("/healthz"));
        for i in 0..n {
            r = r.header(format!("x-filler-{i}"), "v".repeat(size));
        }
        r
    };
    assert_eq!(
        request(15, 10).send().await.unwrap().status(),
        StatusCode::OK
    );
    assert_problem(
        request(25, 10).send().await.unwrap(),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers-too-large",
    )
    .await;
    assert_problem(
        request(1, 3000).send().await.unwrap(),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers-too-large",
    )
    .await;
}

/// A release id of another dataset, asked for under the analyst's own dataset, is not found;
/// the analyst's listing holds only its dataset's releases.
async fn analysts_cannot_reach_other_releases_through_their_dataset(backend: Backend) {
    let app = spawn_app(backend).await;
    let mine = app.create_dataset(2.0, 4.0).await;
    let other = app.create_dataset(2.0, 4.0).await;
    let token = app.analyst_token(&[&mine]).await;
    let body = json!({"counts": [4, 2, 9], "epsilon": 0.5});
    let theirs: Value = app
        .post(
            &format!("/v1/datasets/{other}/releases"),
            ADMIN_TOKEN,
            &body,
        )
        .await
        .json()
        .await
        .unwrap();
    let theirs = theirs["id"].as_str().unwrap();
    assert_eq!(
        app.post(&format!("/v1/datasets/{mine}/releases"), &token, &body)
            .await
            .status(),
        StatusCode::CREATED
    );
    assert_problem(
        app.get(&format!("/v1/datasets/{mine}/releases/{theirs}"), &token)
            .await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    let listed: Value = app
        .get(&format!("/v1/datasets/{mine}/releases"), &token)
        .await
        .json()
        .await
        .unwrap();
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert!(items.iter().all(|r| r["dataset_id"] == mine.as_str()));
    // Paging parameters do not widen the scope.
    for query in ["?limit=10000", "?before=1000000"] {
        assert_problem(
            app.get(&format!("/v1/datasets/{other}/releases{query}"), &token)
                .await,
            StatusCode::NOT_FOUND,
            "not-found",
        )
        .await;
    }
    // Metrics are public and name datasets (ids and budgets, never outputs): SECURITY.md.
    assert_eq!(app.budget(&other).await["releases"], 1);
}

/// No request field or header chooses the randomness, and no answer describes it; the same
/// request twice gets two independent draws.
async fn no_seed_is_accepted_or_exposed(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(2.0, 8.0).await;
    let path = format!("/v1/datasets/{id}/releases");
    for field in ["seed", "rng", "rng_state", "nonce"] {
        let mut body = json!({"counts": [1, 2, 3], "epsilon": 0.5});
        body[field] = json!(42);
        let problem = assert_problem(
            app.post(&path, ADMIN_TOKEN, &body).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
        assert!(problem["detail"]
            .as_str()
            .unwrap()
            .contains("unknown field"));
    }
    let body = json!({"counts": [10, 20, 30, 40], "epsilon": 0.5});
    let mut seen = Vec::new();
    for _ in 0..2 {
        let response = app
            .client
            .post(app.url(&path))
            .bearer_auth(ADMIN_TOKEN)
            .header("x-seed", "42")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        assert!(response
            .headers()
            .keys()
            .all(|k| !k.as_str().contains("seed") && !k.as_str().contains("rng")));
        let release: Value = response.json().await.unwrap();
        let keys: Vec<&str> = release
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "budget",
                "cost",
                "created_at",
                "created_by",
                "dataset_id",
                "distribution",
                "id",
                "mechanism",
                "seq"
            ]
        );
        let mechanism: Vec<&str> = release["mechanism"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            mechanism,
            ["alpha", "calibration", "kind", "pricing", "prior", "r"]
        );
        seen.push(release["distribution"].clone());
    }
    assert_ne!(seen[0], seen[1], "two releases are two independent draws");
}

/// An Idempotency-Key is the retry handle of the caller that made the request. Another token on
/// the same dataset presenting the same key is refused alike whether or not its body matches —
/// otherwise the key would be an oracle confirming guesses of another caller's counts (a replay
/// for the right guess, a refusal for a wrong one) without spending any budget.
async fn idempotency_keys_are_bound_to_their_caller(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(2.0, 4.0).await;
    let alice = app.analyst_token(&[&id]).await;
    let bob = app.analyst_token(&[&id]).await;
    let path = format!("/v1/datasets/{id}/releases");
    let body = json!({"counts": [12, 0, 5], "epsilon": 0.5});
    let first = app.post_with_key(&path, &alice, "weekly", &body).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    let retry = app.post_with_key(&path, &alice, "weekly", &body).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.json::<Value>().await.unwrap()["id"], first["id"]);
    // The right guess and a wrong one get the same answer.
    for (token, guess) in [
        (&bob, json!([12, 0, 5])),
        (&bob, json!([12, 1, 5])),
        (&ADMIN_TOKEN.to_string(), json!([12, 0, 5])),
    ] {
        let guess = json!({"counts": guess, "epsilon": 0.5});
        assert_problem(
            app.post_with_key(&path, token, "weekly", &guess).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency-key-reused",
        )
        .await;
    }
    assert_eq!(app.budget(&id).await["releases"], 1);
}

on_both_backends!(
    idempotency_keys_are_bound_to_their_caller,
    tokens_are_stored_only_as_digests,
    header_sections_are_bounded,
    analysts_cannot_reach_other_releases_through_their_dataset,
    no_seed_is_accepted_or_exposed,
);
