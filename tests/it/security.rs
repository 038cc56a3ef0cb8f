//! Security properties, against the real server: tokens are stored only as digests (searched for
//! in the SQLite file and in a pg_dump, and in trace-level logs), header sections are bounded
//! (431 problem), analysts cannot reach another dataset's releases, and no seed or generator
//! state is accepted or returned.

use std::time::{Duration, Instant};

use crate::common::app::{
    assert_problem, fresh_database, spawn_app, spawn_app_with, Backend, ADMIN_TOKEN,
};
use crate::common::server::{contains_bytes, pg_dump, sqlite_bytes, Replica};
use reqwest::header::HeaderValue;
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
                "kind",
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

// ------------------------------------------------------------- requests from an attacker

/// The digits of this marker must appear in no problem document.
const MARKER: &str = "31415926";

async fn assert_unquoted(response: reqwest::Response, status: StatusCode, slug: &str) -> Value {
    let problem = assert_problem(response, status, slug).await;
    assert!(
        !problem.to_string().contains(MARKER),
        "the problem quotes a sent value: {problem}"
    );
    problem
}

/// Problem documents quote nothing that was sent. Each case is one a lenient parser gets wrong:
/// `[31415926, 1, 2]` parsed positionally, its 422 quoting "integer `31415926`";
/// `[[120,45,3],0.4]` making a release, `["x",[0.5,2]]` a dataset and `[["<id>"]]` a token; an
/// unknown mechanism or field name quoted back; `1e999` a 400; a malformed id's 404 quoting the
/// path and the parser's complaint; ε = 5e-324 giving a 419-character detail.
async fn bodies_are_objects_and_problems_quote_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(2.0, 4.0).await;
    let releases = format!("/v1/datasets/{id}/releases");
    let preview = format!("{releases}/preview");
    let marker: u64 = MARKER.parse().unwrap();

    // Positional arrays are not objects, on every body route.
    for (path, body) in [
        (&preview, json!([marker, 1, 2])),
        (&releases, json!([[120, 45, 3], 0.4])),
        (&releases, json!([[marker, 45, 3], 0.4])),
        (&"/v1/datasets".to_string(), json!(["x", [0.5, 2]])),
        (&"/v1/tokens".to_string(), json!([[id]])),
        (&releases, json!(marker)),
        (&releases, json!(MARKER)),
    ] {
        let problem = assert_unquoted(
            app.post(path, ADMIN_TOKEN, &body).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
        assert!(
            problem["detail"].as_str().unwrap().contains("JSON object"),
            "{problem}"
        );
    }
    assert_eq!(app.budget(&id).await["releases"], 0, "no release was made");
    let listed: Value = app
        .get("/v1/datasets", ADMIN_TOKEN)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        listed["items"].as_array().unwrap().len(),
        1,
        "no dataset was made"
    );

    // Objects whose errors used to quote the value, whatever the path.
    for body in [
        json!({"counts": [1, 2], "epsilon": 0.5, "mechanism": MARKER}),
        json!({"counts": [1, 2], "epsilon": 0.5, "mechanism": marker}),
        json!({"counts": [1, 2], "epsilon": MARKER}),
        json!({"counts": [1, 2], "epsilon": 0.5, MARKER: 1}),
        json!({"counts": [1, 2], "epsilon": 0.5, "alpha": {"x": marker}, "mechanism": "diffuse"}),
        json!({"counts": [1, MARKER], "epsilon": 0.5}),
        json!({"counts": {"a": marker}, "epsilon": 0.5}),
    ] {
        for path in [&releases, &preview] {
            assert_unquoted(
                app.post(path, ADMIN_TOKEN, &body).await,
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-request",
            )
            .await;
        }
    }
    assert_unquoted(
        app.post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &json!({"name": "x", "budget": {"order": 2, "epsilon": 1}, "neighbouring": MARKER}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;

    // 1e999 is well-formed JSON with an out-of-range value: 422 at its field, as openapi says.
    let response = app
        .client
        .post(app.url(&preview))
        .bearer_auth(ADMIN_TOKEN)
        .header("content-type", "application/json")
        .body(r#"{"counts": [1, 2, 3], "epsilon": 1e999}"#)
        .send()
        .await
        .unwrap();
    let problem = assert_unquoted(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    assert_eq!(problem["field"], "epsilon");

    // A malformed id is a resource that does not exist; the detail says no more.
    for path in [
        format!("/v1/datasets/{MARKER}"),
        format!("/v1/datasets/{id}/releases/{MARKER}-x"),
    ] {
        let problem = assert_unquoted(
            app.get(&path, ADMIN_TOKEN).await,
            StatusCode::NOT_FOUND,
            "not-found",
        )
        .await;
        assert_eq!(problem["detail"], "no such resource");
    }
    // Query strings too.
    let problem = assert_unquoted(
        app.get(&format!("{releases}?limit={MARKER}x"), ADMIN_TOKEN)
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    assert_eq!(problem["field"], "limit");

    // Extreme values are printed in shortest round-trip form.
    let problem = assert_problem(
        app.post(
            &preview,
            ADMIN_TOKEN,
            &json!({"counts": [1, 2, 3], "epsilon": 5e-324}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "calibration-infeasible",
    )
    .await;
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.len() < 200, "{} characters: {detail}", detail.len());
    assert!(detail.contains("5e-324"), "{detail}");
}

/// Odd bytes in a path id name no resource: 404 `not-found`, never a 500, on every route that
/// takes an id (`PUT`/`DELETE …/allocations/%00` must not reach PostgreSQL as text, where it is
/// "invalid byte sequence for encoding UTF8", a 500). A bearer token's id, which
/// reaches the database too, is refused before it does (an `Idempotency-Key`: see
/// `idempotency_keys_sent_twice_or_not_ascii_are_refused`).
async fn odd_bytes_in_path_ids_name_no_resource(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(2.0, 4.0).await;
    let token = app.analyst_token(&[&id]).await;
    let token_id = token.split('_').nth(1).unwrap().to_string();
    let allocation = format!("/v1/datasets/{id}/allocations/{token_id}");
    // NUL, bytes that are not UTF-8 (an overlong NUL among them), C0 and C1 controls, DEL, and
    // the format characters a name refuses (zero-width space, BOM, right-to-left override).
    let odd = [
        "%00",
        "ab%00cd",
        "%FF",
        "%C0%80",
        "%0A",
        "%C2%85",
        "%7F",
        "%E2%80%8B",
        "%EF%BB%BF",
        "%E2%80%AE",
    ];
    let epsilon = json!({"epsilon": 1});
    for segment in odd {
        let mut calls = vec![
            ("PUT", format!("/v1/datasets/{id}/allocations/{segment}")),
            ("DELETE", format!("/v1/datasets/{id}/allocations/{segment}")),
            ("PUT", format!("{allocation}{segment}")),
            ("DELETE", format!("{allocation}{segment}")),
            ("DELETE", format!("/v1/tokens/{segment}")),
            ("DELETE", format!("/v1/tokens/{token_id}{segment}")),
            ("GET", format!("/v1/datasets/{id}/releases/{segment}")),
            ("GET", format!("/console/{segment}")),
        ];
        for tail in [
            "",
            "/budget",
            "/audit",
            "/allocations",
            "/releases",
            "/releases/preview",
            "/plan",
        ] {
            let method = if tail == "/releases/preview" || tail == "/plan" {
                "POST"
            } else {
                "GET"
            };
            calls.push((method, format!("/v1/datasets/{segment}{tail}")));
            calls.push((method, format!("/v1/datasets/{id}{segment}{tail}")));
        }
        calls.push(("POST", format!("/v1/datasets/{segment}/releases")));
        for (method, path) in calls {
            let request = app
                .client
                .request(method.parse().unwrap(), app.url(&path))
                .bearer_auth(ADMIN_TOKEN);
            let request = if method == "GET" || method == "DELETE" {
                request
            } else {
                request.json(&epsilon)
            };
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{method} {path}");
            assert_problem(response, StatusCode::NOT_FOUND, "not-found").await;
        }
    }
    // Nothing was set or revoked, and the well-formed id still works.
    let listed = app
        .get_json(&format!("/v1/datasets/{id}/allocations"), ADMIN_TOKEN)
        .await;
    assert_eq!(listed["allocations"], json!([]), "{listed}");
    assert_eq!(listed["changes"], json!([]), "{listed}");
    let response = app
        .client
        .put(app.url(&allocation))
        .bearer_auth(ADMIN_TOKEN)
        .json(&epsilon)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        app.get(&format!("/v1/datasets/{id}/budget"), &token)
            .await
            .status(),
        StatusCode::OK,
        "the token was not revoked"
    );

    // A bearer token's id that is not ASCII letters and digits is refused (401) before any
    // lookup; a NUL cannot be sent in a header at all.
    for bearer in [
        &b"Bearer dra_ab\xffcd_secret"[..],
        b"Bearer dra_ab%00cd_secret",
        b"Bearer dra_ab cd_secret",
        b"Bearer dra_ab\tcd_secret",
    ] {
        let response = app
            .client
            .get(app.url(&format!("/v1/datasets/{id}")))
            .header("authorization", HeaderValue::from_bytes(bearer).unwrap())
            .send()
            .await
            .unwrap();
        assert_problem(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
    }
}

/// Two `Idempotency-Key` headers are refused, not resolved by taking the first. A key with
/// bytes outside visible ASCII is refused too, before it could reach the database as text.
async fn idempotency_keys_sent_twice_or_not_ascii_are_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(2.0, 4.0).await;
    let twice = [
        HeaderValue::from_static("first"),
        HeaderValue::from_static("second"),
    ];
    let not_ascii = [HeaderValue::from_bytes(b"key\xff").unwrap()];
    for keys in [&twice[..], &not_ascii[..]] {
        let mut request = app
            .client
            .post(app.url(&format!("/v1/datasets/{id}/releases")))
            .bearer_auth(ADMIN_TOKEN);
        for key in keys {
            request = request.header("Idempotency-Key", key.clone());
        }
        let response = request
            .json(&json!({"counts": [1, 2, 3], "epsilon": 0.5}))
            .send()
            .await
            .unwrap();
        let problem = assert_problem(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
        assert_eq!(problem["field"], "Idempotency-Key");
    }
    assert_eq!(app.budget(&id).await["releases"], 0);
}

/// An analyst posting a bad body to an admin-only route gets 403, not the 415, 400 or 422 of a
/// body parsed before the role was checked.
async fn admin_routes_check_the_role_before_the_body(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(2.0, 4.0).await;
    let analyst = app.analyst_token(&[&id]).await;
    for path in ["/v1/datasets", "/v1/tokens"] {
        for (content_type, body) in [
            (Some("text/plain"), "hello"),
            (Some("application/json"), "{not json"),
            (Some("application/json"), "[1, 2]"),
            (None, ""),
        ] {
            let mut request = app.client.post(app.url(path)).bearer_auth(&analyst);
            if let Some(content_type) = content_type {
                request = request.header("content-type", content_type);
            }
            let response = request.body(body).send().await.unwrap();
            assert_problem(response, StatusCode::FORBIDDEN, "forbidden").await;
        }
    }
}

/// A request declaring a 40 MB body (and sending none) is refused at once, rather than waiting
/// the whole request timeout (30 s) for a 503 `timeout`.
async fn a_declared_oversized_body_is_refused_at_once(backend: Backend) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = spawn_app(backend).await;
    let id = app.create_dataset(2.0, 4.0).await;
    let address = app.address.strip_prefix("http://").unwrap().to_string();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /v1/datasets/{id}/releases HTTP/1.1\r\nhost: {address}\r\n\
         authorization: Bearer {ADMIN_TOKEN}\r\ncontent-type: application/json\r\n\
         content-length: 40000000\r\n\r\n"
    );
    let started = Instant::now();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(Duration::from_secs(5), async {
        while !String::from_utf8_lossy(&answer).contains("\r\n\r\n{") {
            let n = stream.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("answered within 5 s, not after the request timeout");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("payload-too-large"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(app.budget(&id).await["releases"], 0);
}

/// `/metrics` stays bounded (a method is not a label value: 40 requests with 4 KB methods would
/// add ~2.7 MB), and only the admin token sees per-dataset series (ids).
async fn metrics_are_bounded_and_dataset_series_need_the_admin_token(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(2.0, 4.0).await;
    let analyst = app.analyst_token(&[&id]).await;
    let before = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(before.status(), StatusCode::OK);
    let before = before.text().await.unwrap();
    for i in 0..40 {
        let method = format!("X{i}{}", "M".repeat(4000));
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let _ = app
            .client
            .request(method, app.url(&format!("/v1/datasets/{id}/x{i}")))
            .send()
            .await
            .unwrap();
    }
    let after = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        after.len() < before.len() + 4096,
        "/metrics grew from {} to {} bytes",
        before.len(),
        after.len()
    );
    assert!(!after.contains("MMMM"));
    assert!(after.contains("method=\"other\""), "{after}");
    // Public: aggregate series only, no dataset named.
    assert!(!after.contains(&id), "the public /metrics names a dataset");
    assert!(after.contains("http_requests_total"));
    // The admin token sees the ledger series.
    let admin = app.get("/metrics", ADMIN_TOKEN).await;
    assert_eq!(admin.status(), StatusCode::OK);
    let admin = admin.text().await.unwrap();
    assert!(
        admin.contains(&format!("dirichlet_budget_total{{dataset=\"{id}\"}}")),
        "{admin}"
    );
    // Other credentials are refused rather than silently given less.
    assert_problem(
        app.get("/metrics", &analyst).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
    assert_problem(
        app.get("/metrics", "not-a-token").await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
}

/// The SQLite database, WAL and SHM files are created owner-only (0600), not 0644.
#[cfg(unix)]
#[tokio::test]
async fn sqlite_files_are_created_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let app = spawn_app(Backend::Sqlite).await;
    let id = app.create_dataset(2.0, 4.0).await;
    let response = app
        .post(
            &format!("/v1/datasets/{id}/releases"),
            ADMIN_TOKEN,
            &json!({"counts": [1, 2, 3], "epsilon": 0.5}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let db = app.sqlite_path.clone().unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let path = format!("{}{suffix}", db.display());
        let mode = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{path} has mode {mode:o}");
    }
}

/// Admin tokens that could never sign in are refused at start-up (the bearer value is trimmed;
/// a `dra_` token is looked up as an analyst token).
#[tokio::test]
async fn admin_tokens_that_cannot_sign_in_are_refused_at_start_up() {
    let (database_url, _dir, _) = fresh_database(Backend::Sqlite).await;
    let logs = tempfile::tempdir().unwrap();
    for token in [
        "dra_0123456789abcdef_0123456789",
        " padded-admin-token-0123456789 ",
        "                    ",
    ] {
        let started = Replica::try_start(
            "bad-admin",
            &database_url,
            &[("DIRICHLET_ADMIN_TOKEN", token)],
            logs.path(),
            "info",
        );
        let error = started
            .err()
            .unwrap_or_else(|| panic!("{token:?} was accepted"));
        assert!(error.contains("exit status: 2"), "{error}");
    }
}

/// A plan whose request ends first stops: its work is cancelled, not left running on cores the
/// sampler needs (without it, three 10,000-item plans kept two cores busy for 36 CPU-seconds
/// after their 503s). The plan here would take far longer than the request's 300 ms;
/// the service answers 503 `timeout` and the planner reports the cancellation.
async fn a_plan_whose_request_ends_is_cancelled(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.request_timeout_ms = 300).await;
    let id = app.create_dataset(4.0, 10.0).await;
    // Distinct items (identical ones are planned once), each a full search of every mechanism.
    let items: Vec<Value> = (0..10_000)
        .map(|i| json!({"d": 40, "n": 5000 + i, "target": {"l2": 0.02}}))
        .collect();
    let response = app
        .post(
            &format!("/v1/datasets/{id}/plan"),
            ADMIN_TOKEN,
            &json!({ "items": items }),
        )
        .await;
    assert_problem(response, StatusCode::SERVICE_UNAVAILABLE, "timeout").await;
    // The planner notices at its next step; wait for it (an event, not a duration).
    let started = Instant::now();
    loop {
        let metrics = app.get("/metrics", ADMIN_TOKEN).await.text().await.unwrap();
        if metrics.contains("dirichlet_plans_cancelled_total 1") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the plan was never cancelled"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

on_both_backends!(
    bodies_are_objects_and_problems_quote_nothing,
    odd_bytes_in_path_ids_name_no_resource,
    idempotency_keys_sent_twice_or_not_ascii_are_refused,
    admin_routes_check_the_role_before_the_body,
    a_declared_oversized_body_is_refused_at_once,
    metrics_are_bounded_and_dataset_series_need_the_admin_token,
    idempotency_keys_are_bound_to_their_caller,
    tokens_are_stored_only_as_digests,
    header_sections_are_bounded,
    analysts_cannot_reach_other_releases_through_their_dataset,
    no_seed_is_accepted_or_exposed,
    a_plan_whose_request_ends_is_cancelled,
);
