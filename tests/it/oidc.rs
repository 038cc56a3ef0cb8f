//! Single sign-on against a real OpenID provider (`common::oidc`, the `oidc-provider` package,
//! client-credentials grant, JWT access tokens), on SQLite and PostgreSQL: a provider's tokens
//! work end to end and an analyst's spend and allocation follow its `sub` across tokens; every
//! bad token is a 401/403 problem that echoes nothing of it; the provider's key rotation needs
//! no restart; an unreachable provider is 503 for JWT callers only. And admin tokens rotated
//! through a file, polled and on SIGHUP.

use std::time::{Duration, Instant};

use base64::Engine;
use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use serde_json::{json, Value};

use dirichlet_release::http::oidc::principal_id;

use crate::common::app::{assert_problem, spawn_app_with, Backend, TestApp, ADMIN_TOKEN};
use crate::common::oidc::{Provider, AUDIENCE};
use crate::common::server::Replica;

async fn app_for(backend: Backend, provider: &Provider) -> TestApp {
    let issuer = provider.issuer.clone();
    spawn_app_with(backend, move |s| {
        s.oidc_issuer = Some(issuer);
        s.oidc_audience = Some(AUDIENCE.into());
        // Every unknown key is fetched at once (the interval itself is a unit test's).
        s.oidc_key_refresh_min_ms = 0;
    })
    .await
}

fn release(epsilon: f64) -> Value {
    json!({"counts": [30, 12, 5, 0], "epsilon": epsilon})
}

async fn put(app: &TestApp, path: &str, token: &str, body: &Value) -> reqwest::Response {
    app.client
        .put(app.url(path))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .expect("request sent")
}

fn analyst(datasets: &str) -> Vec<(&'static str, &str)> {
    vec![
        ("dirichlet_role", "analyst"),
        ("dirichlet_datasets", datasets),
    ]
}

async fn a_providers_tokens_work_end_to_end(backend: Backend) {
    let provider = Provider::start();
    let app = app_for(backend, &provider).await;
    let a = app.create_dataset(2.0, 1.0).await;
    let b = app.create_dataset(2.0, 1.0).await;
    let alice_id = principal_id(&provider.issuer, "alice");

    // An admin by its role claim: an admin-only route.
    let admin = provider.token("bob", &[("dirichlet_role", "admin")]).await;
    assert_eq!(app.get("/v1/tokens", &admin).await.status(), StatusCode::OK);

    // Alice, an analyst on `a`: a release commits and is recorded under her stable id.
    let first = provider.token("alice", &analyst(&a)).await;
    let releases = format!("/v1/datasets/{a}/releases");
    let response = app.post(&releases, &first, &release(0.25)).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let created: Value = response.json().await.unwrap();
    assert_eq!(created["created_by"], alice_id.as_str(), "{created}");
    assert_eq!(app.budget(&a).await["spent"], 0.25);
    // What the console asks at sign-in, with the provider's token pasted in.
    let me: Value = app.get_json("/v1/whoami", &first).await;
    assert_eq!(
        me,
        json!({"role": "analyst", "token_id": alice_id, "datasets": [a]})
    );
    let me: Value = app.get_json("/v1/whoami", &admin).await;
    assert_eq!(me, json!({"role": "admin"}));

    // The admin (by JWT) gives her an allocation; a second token for the same `sub` spends it.
    let allocation = format!("/v1/datasets/{a}/allocations/{alice_id}");
    let response = put(&app, &allocation, &admin, &json!({"epsilon": 0.5})).await;
    assert_eq!(response.status(), StatusCode::OK);
    let view: Value = response.json().await.unwrap();
    assert_eq!(view["spent"], 0.25, "{view}");
    let second = provider.token("alice", &analyst(&a)).await;
    assert_ne!(first, second, "two tokens");
    let response = app.post(&releases, &second, &release(0.125)).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let own: Value = app
        .get_json(&format!("/v1/datasets/{a}/allocations"), &second)
        .await;
    assert_eq!(own["allocations"].as_array().unwrap().len(), 1, "{own}");
    assert_eq!(own["allocations"][0]["token_id"], alice_id.as_str());
    assert_eq!(own["allocations"][0]["spent"], 0.375, "{own}");
    assert_eq!(own["allocations"][0]["remaining"], 0.125, "{own}");
    let budget: Value = app
        .get_json(&format!("/v1/datasets/{a}/budget"), &first)
        .await;
    assert_eq!(budget["allocation"]["remaining"], 0.125, "{budget}");
    // Past her allocation, whichever token she holds.
    let refused = app.post(&releases, &first, &release(0.25)).await;
    assert_problem(refused, StatusCode::CONFLICT, "allocation-exhausted").await;

    // Bob as an analyst is someone else: his own allocation listing, empty of hers.
    // His claim also names a dataset not registered here: skipped, not an error.
    let unregistered = uuid::Uuid::now_v7();
    let bob = provider
        .token("bob", &analyst(&format!("{a},{unregistered}")))
        .await;
    let response = app.post(&releases, &bob, &release(0.125)).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let his: Value = app
        .get_json(&format!("/v1/datasets/{a}/allocations"), &bob)
        .await;
    assert_eq!(his["allocations"].as_array().unwrap().len(), 0, "{his}");
    let all: Value = app
        .get_json(&format!("/v1/datasets/{a}/allocations"), ADMIN_TOKEN)
        .await;
    assert_eq!(
        all["allocations"][0]["token_id"],
        alice_id.as_str(),
        "{all}"
    );
    assert_eq!(app.budget(&a).await["spent"], 0.5);

    // A dataset outside her claim is as absent as for an issued token; admin routes are 403.
    let outside = app.get(&format!("/v1/datasets/{b}"), &second).await;
    assert_problem(outside, StatusCode::NOT_FOUND, "not-found").await;
    let response = app
        .post(
            &format!("/v1/datasets/{b}/releases"),
            &second,
            &release(0.1),
        )
        .await;
    assert_problem(response, StatusCode::NOT_FOUND, "not-found").await;
    assert_eq!(app.budget(&b).await["spent"], 0.0);
    let response = app
        .post("/v1/tokens", &second, &json!({"datasets": [a]}))
        .await;
    assert_problem(response, StatusCode::FORBIDDEN, "forbidden").await;

    // A claim that later names `b` too opens it, under the same id.
    let both = provider.token("alice", &analyst(&format!("{a},{b}"))).await;
    let response = app
        .post(
            &format!("/v1/datasets/{b}/releases"),
            &both,
            &release(0.125),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let created: Value = response.json().await.unwrap();
    assert_eq!(created["created_by"], alice_id.as_str());

    // The principal is listed among the tokens; revoked there, the provider's word is not
    // enough any more.
    let tokens: Value = app.get_json("/v1/tokens", ADMIN_TOKEN).await;
    let listed = |id: &str| {
        tokens["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} not in {tokens}"))
    };
    assert_eq!(listed(&alice_id)["role"], "analyst");
    let bob_id = principal_id(&provider.issuer, "bob");
    assert_eq!(
        listed(&bob_id)["datasets"],
        json!([a]),
        "registered datasets only"
    );
    let revoked = app
        .client
        .delete(app.url(&format!("/v1/tokens/{alice_id}")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::NO_CONTENT);
    let response = app.get(&format!("/v1/datasets/{a}"), &both).await;
    assert_problem(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64(part: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .unwrap()
}

/// A refusal: `status` with its problem document, which quotes nothing of the token.
async fn assert_refused(app: &TestApp, token: &str, status: StatusCode, what: &str) {
    let response = app.get("/v1/datasets", token).await;
    assert_eq!(response.status(), status, "{what}");
    let slug = match status {
        StatusCode::UNAUTHORIZED => "unauthorized",
        _ => "forbidden",
    };
    let body = assert_problem(response, status, slug).await.to_string();
    for part in token.split('.').filter(|p| p.len() > 8) {
        assert!(!body.contains(part), "{what}: the problem quotes the token");
    }
}

async fn every_bad_token_is_refused(backend: Backend) {
    let provider = Provider::start();
    let app = app_for(backend, &provider).await;
    let a = app.create_dataset(2.0, 1.0).await;
    let good = provider.token("alice", &analyst(&a)).await;
    assert_eq!(
        app.get("/v1/datasets", &good).await.status(),
        StatusCode::OK
    );
    let unauthorized = StatusCode::UNAUTHORIZED;

    // Lifetimes: `exp` past by more than the 60 s leeway, `nbf` ahead by more; within it, fine.
    let mut params = analyst(&a);
    params.push(("exp_offset", "-120"));
    let expired = provider.token("alice", &params).await;
    assert_refused(&app, &expired, unauthorized, "expired").await;
    params.pop();
    params.push(("exp_offset", "-30"));
    let within_leeway = provider.token("alice", &params).await;
    let response = app.get("/v1/datasets", &within_leeway).await;
    assert_eq!(response.status(), StatusCode::OK, "30 s past exp");
    params.pop();
    params.push(("nbf_offset", "120"));
    let early = provider.token("alice", &params).await;
    assert_refused(&app, &early, unauthorized, "not yet valid").await;
    params.pop();

    // Another audience; another issuer signing with the very same keys.
    params.push(("resource", "https://elsewhere.test"));
    let elsewhere = provider.token("alice", &params).await;
    assert_refused(&app, &elsewhere, unauthorized, "wrong aud").await;
    params.pop();
    let other = provider.token_from(&provider.other, "alice", &params).await;
    assert_refused(&app, &other, unauthorized, "wrong iss").await;

    // Forgeries from a valid token's parts: `alg: none`, HS256 keyed with the public key set
    // (and with the RSA modulus), a payload changed under the signature.
    let parts: Vec<&str> = good.split('.').collect();
    let header: Value = serde_json::from_slice(&unb64(parts[0])).unwrap();
    let kid = header["kid"].as_str().unwrap();
    let none = format!(
        "{}.{}.",
        b64(json!({"alg": "none", "typ": "at+jwt", "kid": kid})
            .to_string()
            .as_bytes()),
        parts[1]
    );
    assert_refused(&app, &none, unauthorized, "alg none").await;
    let jwks = provider.jwks().await;
    let jwk: Value = serde_json::from_str::<Value>(&jwks).unwrap()["keys"][0].clone();
    for secret in [jwks.as_bytes().to_vec(), unb64(jwk["n"].as_str().unwrap())] {
        let signing_input = format!(
            "{}.{}",
            b64(json!({"alg": "HS256", "typ": "at+jwt", "kid": kid})
                .to_string()
                .as_bytes()),
            parts[1]
        );
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&secret).unwrap();
        mac.update(signing_input.as_bytes());
        let hs256 = format!("{signing_input}.{}", b64(&mac.finalize().into_bytes()));
        assert_refused(&app, &hs256, unauthorized, "HS256 with the public key").await;
    }
    let mut claims: Value = serde_json::from_slice(&unb64(parts[1])).unwrap();
    claims["dirichlet_role"] = json!("admin");
    let tampered = format!(
        "{}.{}.{}",
        parts[0],
        b64(claims.to_string().as_bytes()),
        parts[2]
    );
    assert_refused(&app, &tampered, unauthorized, "payload changed").await;
    assert_refused(
        &app,
        "eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl",
        unauthorized,
        "garbage",
    )
    .await;

    // A valid token without a role this service knows.
    let unknown = provider
        .token("alice", &[("dirichlet_role", "superuser")])
        .await;
    assert_refused(&app, &unknown, StatusCode::FORBIDDEN, "unknown role").await;
    let missing = provider.token("alice", &[]).await;
    assert_refused(&app, &missing, StatusCode::FORBIDDEN, "no role").await;
    let bad_scope = provider.token("alice", &analyst("not-a-dataset-id")).await;
    assert_refused(&app, &bad_scope, StatusCode::FORBIDDEN, "datasets not ids").await;

    // Nothing was charged, and the static tokens still work.
    assert_eq!(app.budget(&a).await["spent"], 0.0);
}

async fn the_providers_key_rotation_needs_no_restart(backend: Backend) {
    let mut provider = Provider::start();
    let app = app_for(backend, &provider).await;
    let a = app.create_dataset(2.0, 1.0).await;
    let before = provider.token("alice", &analyst(&a)).await;
    assert_eq!(
        app.get("/v1/datasets", &before).await.status(),
        StatusCode::OK
    );

    provider.rotate();
    let after = provider.token("alice", &analyst(&a)).await;
    let kid = |token: &str| -> Value {
        serde_json::from_slice::<Value>(&unb64(token.split('.').next().unwrap())).unwrap()["kid"]
            .clone()
    };
    assert_ne!(kid(&before), kid(&after), "signed by a new key");
    let response = app
        .post(
            &format!("/v1/datasets/{a}/releases"),
            &after,
            &release(0.125),
        )
        .await;
    assert_eq!(
        response.status(),
        StatusCode::CREATED,
        "the new key, no restart"
    );
    // The withdrawn key left the cache with the key set it was fetched with.
    assert_refused(&app, &before, StatusCode::UNAUTHORIZED, "withdrawn key").await;
}

async fn an_unreachable_provider_is_503_for_its_tokens_only(backend: Backend) {
    let mut provider = Provider::start();
    let app = app_for(backend, &provider).await;
    let a = app.create_dataset(2.0, 1.0).await;
    let issued = app.analyst_token(&[&a]).await;
    let token = provider.token("alice", &analyst(&a)).await;
    provider.stop();
    for attempt in ["first", "again"] {
        let response = app.get("/v1/datasets", &token).await;
        let retry_after = response.headers().get("retry-after").cloned();
        let problem = assert_problem(
            response,
            StatusCode::SERVICE_UNAVAILABLE,
            "service-unavailable",
        )
        .await;
        assert!(retry_after.is_some(), "{attempt}: Retry-After");
        // The detail names what is missing: the provider, not the database.
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("OpenID provider"), "{attempt}: {problem}");
    }
    assert_eq!(
        app.get("/v1/datasets", ADMIN_TOKEN).await.status(),
        StatusCode::OK
    );
    let response = app
        .post(
            &format!("/v1/datasets/{a}/releases"),
            &issued,
            &release(0.125),
        )
        .await;
    assert_eq!(
        response.status(),
        StatusCode::CREATED,
        "static tokens unaffected"
    );
}

on_both_backends!(
    a_providers_tokens_work_end_to_end,
    every_bad_token_is_refused,
    the_providers_key_rotation_needs_no_restart,
    an_unreachable_provider_is_503_for_its_tokens_only,
);

/// Wait until `token`'s admin access is `wanted` (the file is polled).
async fn until_admin(app_url: &str, token: &str, wanted: StatusCode) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = client
            .get(format!("{app_url}/v1/tokens"))
            .bearer_auth(token)
            .send()
            .await
            .expect("request sent")
            .status();
        if status == wanted {
            return;
        }
        assert!(Instant::now() < deadline, "{token}: {status}, not {wanted}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const OLD: &str = "old-admin-token-0123456789";
const NEW: &str = "new-admin-token-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_tokens_rotate_through_a_polled_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("admin-tokens");
    std::fs::write(&file, format!("# rotated by hand\n{OLD}\n")).unwrap();
    let path = file.to_str().unwrap().to_owned();
    let app = spawn_app_with(Backend::Sqlite, move |s| {
        s.admin_tokens_file = Some(path);
        s.admin_tokens_poll_ms = 50;
    })
    .await;
    until_admin(&app.address, OLD, StatusCode::OK).await;
    assert_eq!(
        app.get("/v1/tokens", NEW).await.status(),
        StatusCode::UNAUTHORIZED
    );
    // Both while clients move over, then the new one only.
    std::fs::write(&file, format!("{OLD}\n{NEW}\n")).unwrap();
    until_admin(&app.address, NEW, StatusCode::OK).await;
    std::fs::write(&file, format!("{NEW}\n")).unwrap();
    until_admin(&app.address, OLD, StatusCode::UNAUTHORIZED).await;
    until_admin(&app.address, NEW, StatusCode::OK).await;
    // A file that turns bad keeps the tokens last read; the configured token never moves.
    std::fs::write(&file, "short\n").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    until_admin(&app.address, NEW, StatusCode::OK).await;
    until_admin(&app.address, ADMIN_TOKEN, StatusCode::OK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_tokens_are_read_again_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("admin-tokens");
    std::fs::write(&file, format!("{OLD}\n")).unwrap();
    let database = format!("sqlite://{}", dir.path().join("ledger.db").display());
    // Polled once an hour: only the signal can explain a change within the test.
    let replica = Replica::start(
        "sighup",
        &database,
        &[
            ("DIRICHLET_ADMIN_TOKENS_FILE", file.to_str().unwrap()),
            ("DIRICHLET_ADMIN_TOKENS_POLL_MS", "3600000"),
        ],
        dir.path(),
        "info",
    );
    let url = replica.address();
    until_admin(&url, OLD, StatusCode::OK).await;
    std::fs::write(&file, format!("{NEW}\n")).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    until_admin(&url, NEW, StatusCode::UNAUTHORIZED).await;
    replica.signal("HUP");
    until_admin(&url, NEW, StatusCode::OK).await;
    until_admin(&url, OLD, StatusCode::UNAUTHORIZED).await;
    assert!(replica.log().contains("SIGHUP"), "the reload is logged");
}
