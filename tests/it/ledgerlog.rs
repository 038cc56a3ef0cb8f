//! Token lifecycle (list, revoke, expiry, last use) and the tamper-evident release log with its
//! `/audit` route, on SQLite and PostgreSQL against the real server; revocation across two server
//! processes sharing one PostgreSQL database.

use std::time::{Duration, Instant};

use crate::common::app::{
    assert_problem, assert_problem_about, spawn_app, Backend, TestApp, ADMIN_TOKEN,
};
use crate::common::server::Replica;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::{Connection, Executor};

async fn release(app: &TestApp, dataset: &str, token: &str) -> Value {
    let response = app
        .post(
            &format!("/v1/datasets/{dataset}/releases"),
            token,
            &json!({"counts": [120, 45, 3, 0], "epsilon": 0.25}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json().await.unwrap()
}

async fn audit(app: &TestApp, dataset: &str, token: &str) -> Value {
    let response = app
        .get(&format!("/v1/datasets/{dataset}/audit"), token)
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

/// Runs `sql` (several statements) directly on the test server's database.
async fn tamper(app: &TestApp, sql: &str) {
    match app.backend {
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(&app.database_url)
                .await
                .unwrap();
            conn.execute(sql).await.unwrap();
            conn.close().await.unwrap();
        }
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(&app.database_url)
                .await
                .unwrap();
            conn.execute(sql).await.unwrap();
            conn.close().await.unwrap();
        }
    }
}

fn failure(report: &Value) -> (i64, String) {
    assert_eq!(report["ok"], false, "{report}");
    (
        report["failure"]["seq"].as_i64().unwrap(),
        report["failure"]["reason"].as_str().unwrap().to_string(),
    )
}

async fn tampering_is_found_at_the_tampered_row(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(2.0, 10.0).await;
    let fresh = audit(&app, &id, ADMIN_TOKEN).await;
    assert_eq!(
        fresh,
        json!({"dataset_id": id, "head": {"seq": 0, "hash": "0".repeat(64)},
               "chained_from_seq": 1, "checked": 0, "ok": true, "failure": null})
    );
    for _ in 0..5 {
        release(&app, &id, ADMIN_TOKEN).await;
    }
    let analyst = app.analyst_token(&[&id]).await;
    let clean = audit(&app, &id, &analyst).await;
    assert_eq!(clean["ok"], true, "{clean}");
    assert_eq!(clean["checked"], 5);
    assert_eq!(clean["head"]["seq"], 5);
    assert_eq!(clean["head"]["hash"].as_str().unwrap().len(), 64);
    assert_ne!(clean["head"]["hash"], fresh["head"]["hash"]);

    let row = |seq: u32| format!("dataset_id = '{id}' AND seq = {seq}");
    tamper(&app, "CREATE TABLE saved AS SELECT * FROM releases").await;
    let restore = "UPDATE releases SET distribution = (SELECT distribution FROM saved WHERE saved.id = releases.id), \
                   cost_units = (SELECT cost_units FROM saved WHERE saved.id = releases.id)";

    // Another release's output in row 3 (same dimension, so every constraint still holds).
    tamper(
        &app,
        &format!(
            "UPDATE releases SET distribution = (SELECT distribution FROM saved WHERE {}) WHERE {}",
            row(1),
            row(3)
        ),
    )
    .await;
    assert_eq!(
        failure(&audit(&app, &id, ADMIN_TOKEN).await),
        (3, "altered".into())
    );
    tamper(&app, restore).await;
    assert_eq!(audit(&app, &id, ADMIN_TOKEN).await["ok"], true);

    // A cheaper release 2, with the dataset's spent lowered to match (so only the chain sees it).
    tamper(
        &app,
        &format!(
            "UPDATE releases SET cost_units = cost_units - 1 WHERE {}; \
             UPDATE datasets SET spent_units = spent_units - 1 WHERE id = '{id}'",
            row(2)
        ),
    )
    .await;
    assert_eq!(
        failure(&audit(&app, &id, ADMIN_TOKEN).await),
        (2, "altered".into())
    );
    tamper(
        &app,
        &format!("{restore}; UPDATE datasets SET spent_units = spent_units + 1 WHERE id = '{id}'"),
    )
    .await;
    assert_eq!(audit(&app, &id, ADMIN_TOKEN).await["ok"], true);

    // The ledger's spent no longer the sum of the charges.
    tamper(
        &app,
        &format!("UPDATE datasets SET spent_units = spent_units - 1 WHERE id = '{id}'"),
    )
    .await;
    assert_eq!(
        failure(&audit(&app, &id, ADMIN_TOKEN).await),
        (5, "ledger_mismatch".into())
    );
    tamper(
        &app,
        &format!("UPDATE datasets SET spent_units = spent_units + 1 WHERE id = '{id}'"),
    )
    .await;

    // A deleted row, in the middle and at the end.
    tamper(&app, &format!("DELETE FROM releases WHERE {}", row(4))).await;
    let report = audit(&app, &id, ADMIN_TOKEN).await;
    assert_eq!(failure(&report), (4, "missing".into()));
    assert_eq!(report["checked"], 3);
    let other = app.create_dataset(2.0, 10.0).await;
    release(&app, &other, ADMIN_TOKEN).await;
    release(&app, &other, ADMIN_TOKEN).await;
    assert_eq!(audit(&app, &other, ADMIN_TOKEN).await["ok"], true);
    tamper(
        &app,
        &format!("DELETE FROM releases WHERE dataset_id = '{other}' AND seq = 2"),
    )
    .await;
    assert_eq!(
        failure(&audit(&app, &other, ADMIN_TOKEN).await),
        (2, "missing".into())
    );

    // Scope: the dataset's analysts and the admin only.
    let outsider = app.analyst_token(&[&other]).await;
    assert_problem(
        app.get(&format!("/v1/datasets/{id}/audit"), &outsider)
            .await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    assert_problem(
        app.get(&format!("/v1/datasets/{id}/audit"), "nope").await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
}

async fn concurrent_releases_keep_one_chain(backend: Backend) {
    let app = std::sync::Arc::new(spawn_app(backend).await);
    let id = app.create_dataset(2.0, 100.0).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let (app, id) = (app.clone(), id.clone());
        tasks.spawn(async move { release(&app, &id, ADMIN_TOKEN).await });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let report = audit(&app, &id, ADMIN_TOKEN).await;
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["checked"], 20);
    assert_eq!(report["head"]["seq"], 20);
}

async fn token_lifecycle(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(2.0, 10.0).await;

    let past = (chrono::Utc::now() - chrono::TimeDelta::seconds(1)).to_rfc3339();
    assert_problem_about(
        app.post(
            "/v1/tokens",
            ADMIN_TOKEN,
            &json!({"datasets": [id], "expires_at": past}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
        "expires_at",
    )
    .await;

    // Expiry: usable until expires_at, 401 from then on (also while cached).
    let soon = chrono::Utc::now() + chrono::TimeDelta::milliseconds(1500);
    let response = app
        .post(
            "/v1/tokens",
            ADMIN_TOKEN,
            &json!({"datasets": [id], "expires_at": soon.to_rfc3339()}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let created: Value = response.json().await.unwrap();
    let expiring = created["token"].as_str().unwrap().to_string();
    let expiring_id = created["id"].as_str().unwrap().to_string();
    assert_eq!(
        created["expires_at"]
            .as_str()
            .map(|s| s.parse::<chrono::DateTime<chrono::Utc>>().unwrap()),
        Some(soon)
    );
    let budget = format!("/v1/datasets/{id}/budget");
    assert_eq!(app.get(&budget, &expiring).await.status(), StatusCode::OK);
    tokio::time::sleep((soon - chrono::Utc::now()).to_std().unwrap_or_default()).await;
    assert_problem(
        app.get(&budget, &expiring).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;

    // Listing: admin only, never the secret or its digest.
    let token = app.analyst_token(&[&id]).await;
    let token_id = token.split('_').nth(1).unwrap().to_string();
    let secret = token.splitn(3, '_').nth(2).unwrap().to_string();
    let started = chrono::Utc::now();
    assert_eq!(app.get(&budget, &token).await.status(), StatusCode::OK);
    assert_problem(
        app.get("/v1/tokens", &token).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
    // last_used_at is written off the request path: poll briefly.
    let deadline = Instant::now() + Duration::from_secs(5);
    let listed = loop {
        let response = app.get("/v1/tokens", ADMIN_TOKEN).await;
        assert_eq!(response.status(), StatusCode::OK);
        let text = response.text().await.unwrap();
        assert!(
            !text.contains(&secret) && !text.contains("secret"),
            "{text}"
        );
        let listed: Value = serde_json::from_str(&text).unwrap();
        let item = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == token_id.as_str())
            .unwrap()
            .clone();
        if !item["last_used_at"].is_null() || Instant::now() > deadline {
            break listed;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    let item = items.iter().find(|t| t["id"] == token_id.as_str()).unwrap();
    let mut keys: Vec<&str> = item
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "created_at",
            "datasets",
            "expires_at",
            "id",
            "last_used_at",
            "revoked_at",
            "role"
        ]
    );
    assert_eq!(item["role"], "analyst");
    assert_eq!(item["datasets"], json!([id]));
    let used: chrono::DateTime<chrono::Utc> =
        item["last_used_at"].as_str().unwrap().parse().unwrap();
    assert!(
        used >= started - chrono::TimeDelta::milliseconds(1),
        "{item}"
    );
    assert!(item["revoked_at"].is_null() && item["expires_at"].is_null());
    let other = items
        .iter()
        .find(|t| t["id"] == expiring_id.as_str())
        .unwrap();
    assert!(other["expires_at"].is_string());

    // Revocation: admin only, effective at once on this server, unknown ids are 404.
    let path = format!("/v1/tokens/{token_id}");
    let delete = |path: String, bearer: String| {
        let client = app.client.clone();
        let url = app.url(&path);
        async move { client.delete(url).bearer_auth(bearer).send().await.unwrap() }
    };
    assert_problem(
        delete(path.clone(), token.clone()).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
    assert_eq!(app.get(&budget, &token).await.status(), StatusCode::OK);
    let response = delete(path.clone(), ADMIN_TOKEN.into()).await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_problem(
        app.get(&budget, &token).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    assert_eq!(
        delete(path.clone(), ADMIN_TOKEN.into()).await.status(),
        StatusCode::NO_CONTENT
    );
    assert_problem(
        delete("/v1/tokens/0123456789abcdef".into(), ADMIN_TOKEN.into()).await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    let listed: Value = app
        .get("/v1/tokens", ADMIN_TOKEN)
        .await
        .json()
        .await
        .unwrap();
    let item = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == token_id.as_str())
        .unwrap()
        .clone();
    assert!(item["revoked_at"].is_string(), "{item}");
}

on_both_backends!(
    tampering_is_found_at_the_tampered_row,
    concurrent_releases_keep_one_chain,
    token_lifecycle,
);

/// A token revoked through one replica is refused by another that had it cached, within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_reaches_another_replica_within_a_second_postgres() {
    let database_url = crate::common::pg::fresh_database().await;
    let logs = tempfile::tempdir().unwrap();
    let a = Replica::start("a", &database_url, &[], logs.path(), "info");
    let b = Replica::start("b", &database_url, &[], logs.path(), "info");
    let client = reqwest::Client::new();
    let post = |address: String, path: &str, body: Value| {
        let request = client
            .post(format!("{address}{path}"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let dataset = post(
        a.address(),
        "/v1/datasets",
        json!({"name": "shared", "budget": {"order": 2, "epsilon": 1.0}}),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let created = post(a.address(), "/v1/tokens", json!({"datasets": [dataset]})).await;
    let token = created["token"].as_str().unwrap().to_string();
    let budget = format!("{}/v1/datasets/{dataset}/budget", b.address());
    let on_b = || async {
        client
            .get(&budget)
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .status()
    };

    for _ in 0..3 {
        let status = on_b().await;
        assert_eq!(status, StatusCode::OK, "B serves the token (and caches it)");
    }
    let response = client
        .delete(format!(
            "{}/v1/tokens/{}",
            a.address(),
            created["id"].as_str().unwrap()
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let revoked = Instant::now();
    // Every request B receives from one second after the revocation on must be refused.
    let mut last_ok = None;
    while revoked.elapsed() < Duration::from_millis(1500) {
        let sent = revoked.elapsed();
        match on_b().await {
            StatusCode::OK => last_ok = Some(sent),
            StatusCode::UNAUTHORIZED => {}
            other => panic!("unexpected {other}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if let Some(sent) = last_ok {
        assert!(
            sent < Duration::from_secs(1),
            "B admitted a request sent {sent:?} after revocation"
        );
    }
    println!("revocation window on the other replica: last 200 sent {last_ok:?} after the 204");
    drop((a, b));
}
