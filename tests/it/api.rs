//! The release service's story, run on SQLite and on PostgreSQL against the real server.

use crate::common::app::{
    assert_problem, assert_problem_about, spawn_app, spawn_app_with, Backend, TestApp, ADMIN_TOKEN,
};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// The charge of a release calibrated to `target`: never above it, and within 1e-9 of it.
fn spends_exactly(charge: f64, target: f64) -> bool {
    (target * (1.0 - 1e-9)..=target).contains(&charge)
}

fn assert_distribution(v: &Value, d: usize) {
    let dist = v.as_array().expect("distribution is an array");
    assert_eq!(dist.len(), d);
    let values: Vec<f64> = dist.iter().map(|x| x.as_f64().unwrap()).collect();
    assert!(values
        .iter()
        .all(|x| x.is_finite() && *x >= 0.0 && *x <= 1.0));
    let sum: f64 = values.iter().sum();
    assert!((sum - 1.0).abs() < 1e-9, "sums to {sum}");
}

async fn story(backend: Backend) {
    let app = spawn_app(backend).await;
    // Register.
    let response = app
        .post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &json!({"name": "visits per diagnosis", "budget": {"order": 2, "epsilon": 1.0}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    let dataset: Value = response.json().await.unwrap();
    let id = dataset["id"].as_str().unwrap().to_string();
    assert_eq!(location, format!("/v1/datasets/{id}"));
    assert_eq!(dataset["budget"], json!({"order": 2.0, "epsilon": 1.0}));
    assert_eq!(
        dataset["sensitivity"],
        json!({"l2_squared": 2.0, "linf": 1.0})
    );
    assert_eq!(dataset["neighbouring"], "replace_one");

    let listed: Value = app
        .get("/v1/datasets", ADMIN_TOKEN)
        .await
        .json()
        .await
        .unwrap();
    assert!(listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["id"] == id.as_str()));
    let shown: Value = app
        .get(&format!("/v1/datasets/{id}"), ADMIN_TOKEN)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(shown["name"], "visits per diagnosis");

    let counts = json!([120, 45, 3, 0, 17, 9]);
    let body = json!({"counts": counts, "epsilon": 0.25});

    // Preview: priced and forecast, nothing charged.
    let response = app
        .post(
            &format!("/v1/datasets/{id}/releases/preview"),
            ADMIN_TOKEN,
            &body,
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let preview: Value = response.json().await.unwrap();
    assert_eq!(preview["admissible"], true);
    let cost = preview["cost"]["epsilon"].as_f64().unwrap();
    assert!(spends_exactly(cost, 0.25), "preview cost {cost}");
    assert_eq!(preview["cost"]["order"], 2.0);
    assert_eq!(preview["mechanism"]["kind"], "dirichlet");
    assert!(preview["forecast"]["l2_bound"].as_f64().unwrap() > 0.0);
    assert_eq!(preview["budget_after"]["spent"].as_f64().unwrap(), cost);
    let budget = app.budget(&id).await;
    assert_eq!(budget["spent"], 0.0);
    assert_eq!(budget["releases"], 0);

    // Four releases of 0.25 fit a budget of 1.
    let mut spent = 0.0;
    let mut ids = Vec::new();
    for i in 1..=4 {
        let response = app
            .post(&format!("/v1/datasets/{id}/releases"), ADMIN_TOKEN, &body)
            .await;
        assert_eq!(response.status(), StatusCode::CREATED, "release {i}");
        let release: Value = response.json().await.unwrap();
        assert_distribution(&release["distribution"], 6);
        let c = release["cost"]["epsilon"].as_f64().unwrap();
        assert!(spends_exactly(c, 0.25));
        spent += c;
        assert_eq!(
            release["budget"]["spent"].as_f64().unwrap(),
            spent,
            "spent is the exact sum of charges"
        );
        assert_eq!(release["budget"]["releases"], i);
        assert_eq!(release["seq"], i);
        assert_eq!(release["created_by"], "admin");
        assert!(release["mechanism"]["r"].as_f64().unwrap() > 0.0);
        ids.push(release["id"].as_str().unwrap().to_string());
    }

    // The fifth is refused, and refusing charges nothing.
    let response = app
        .post(&format!("/v1/datasets/{id}/releases"), ADMIN_TOKEN, &body)
        .await;
    let problem = assert_problem(response, StatusCode::CONFLICT, "budget-exhausted").await;
    assert_eq!(problem["budget"]["spent"].as_f64().unwrap(), spent);
    assert!(problem.get("distribution").is_none());
    let budget = app.budget(&id).await;
    assert_eq!(budget["spent"].as_f64().unwrap(), spent);
    assert_eq!(budget["releases"], 4);
    assert_eq!(budget["total"], 1.0);
    assert_eq!(budget["remaining"].as_f64().unwrap(), 1.0 - spent);
    assert!(budget.get("dp").is_none());
    // A preview now says it is not admissible.
    let preview: Value = app
        .post(
            &format!("/v1/datasets/{id}/releases/preview"),
            ADMIN_TOKEN,
            &body,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(preview["admissible"], false);

    // History: newest first, paginated.
    let page: Value = app
        .get(&format!("/v1/datasets/{id}/releases?limit=3"), ADMIN_TOKEN)
        .await
        .json()
        .await
        .unwrap();
    let items = page["items"].as_array().unwrap();
    assert_eq!(
        items
            .iter()
            .map(|r| r["seq"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        vec![4, 3, 2]
    );
    assert_eq!(page["next_before"], 2);
    let max_page = app
        .get(
            &format!("/v1/datasets/{id}/releases?limit=10000"),
            ADMIN_TOKEN,
        )
        .await;
    assert_eq!(max_page.status(), StatusCode::OK);
    let rest: Value = app
        .get(
            &format!("/v1/datasets/{id}/releases?limit=3&before=2"),
            ADMIN_TOKEN,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
    assert_eq!(rest["next_before"], Value::Null);
    let one: Value = app
        .get(
            &format!("/v1/datasets/{id}/releases/{}", ids[0]),
            ADMIN_TOKEN,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(one["id"], ids[0].as_str());
    assert_eq!(one["seq"], 1);
    assert_eq!(one["distribution"], rest["items"][0]["distribution"]);
    let missing = app
        .get(
            &format!("/v1/datasets/{id}/releases/{}", uuid::Uuid::new_v4()),
            ADMIN_TOKEN,
        )
        .await;
    assert_problem(missing, StatusCode::NOT_FOUND, "not-found").await;
}

async fn every_mechanism_releases_and_is_charged_at_the_ledger_order(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(4.0, 100.0).await;
    let path = format!("/v1/datasets/{id}/releases");
    let counts = json!([30, 5, 0, 12]);
    let cases = [
        json!({"counts": counts, "epsilon": 0.5, "mechanism": "dirichlet", "prior": 2.0}),
        json!({"counts": counts, "epsilon": 0.5, "mechanism": "posterior", "r": 0.5}),
        json!({"counts": counts, "epsilon": 0.5, "mechanism": "diffuse", "alpha": 10.0}),
        json!({"counts": counts, "epsilon": 0.5, "mechanism": "diffuse", "alpha": [10.0, 11.0, 12.0, 13.0]}),
        json!({"counts": counts, "mechanism": "explicit", "r": 0.1, "alpha": 5.0}),
        json!({"counts": counts, "epsilon": 0.5, "mechanism": "gaussian"}),
        json!({"counts": counts, "mechanism": "gaussian", "sigma": 3.0}),
        json!({"counts": counts, "epsilon": 0.5, "mechanism": "laplace"}),
        json!({"counts": counts, "mechanism": "laplace", "scale": 4.0}),
    ];
    let mut spent = 0.0;
    for case in &cases {
        let response = app.post(&path, ADMIN_TOKEN, case).await;
        assert_eq!(response.status(), StatusCode::CREATED, "{case}");
        let release: Value = response.json().await.unwrap();
        assert_distribution(&release["distribution"], 4);
        assert_eq!(release["mechanism"]["kind"], case["mechanism"]);
        assert_eq!(release["cost"]["order"], 4.0);
        let c = release["cost"]["epsilon"].as_f64().unwrap();
        assert!(c > 0.0);
        if case.get("epsilon").is_some() {
            assert!(spends_exactly(c, 0.5), "{case}: {c}");
        }
        spent += c;
        assert_eq!(release["budget"]["spent"].as_f64().unwrap(), spent);
    }
    // Calibrated at another order, charged at the ledger's by the curve: not the asked epsilon.
    let response = app
        .post(
            &path,
            ADMIN_TOKEN,
            &json!({"counts": counts, "epsilon": 0.5, "order": 2.0}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let release: Value = response.json().await.unwrap();
    assert_eq!(
        release["mechanism"]["calibration"],
        json!({"order": 2.0, "epsilon": 0.5})
    );
    assert!(
        release["cost"]["epsilon"].as_f64().unwrap() > 0.5,
        "ε(λ) grows with λ, so charging at 4 costs more than 0.5"
    );

    // Outside the curve's validity at the ledger order: refused, nothing charged.
    let before = app.budget(&id).await;
    let response = app
        .post(
            &path,
            ADMIN_TOKEN,
            &json!({"counts": counts, "mechanism": "explicit", "r": 1.0, "alpha": 0.5}),
        )
        .await;
    assert_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "no-guarantee").await;
    let response = app
        .post(&path, ADMIN_TOKEN, &json!({"counts": counts, "mechanism": "explicit", "r": 0.1, "alpha": 5.0, "epsilon": 1e-6}))
        .await;
    assert_problem(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "cost-exceeds-epsilon",
    )
    .await;
    assert_eq!(app.budget(&id).await, before);
}

async fn dp_target_datasets_report_both_views(backend: Backend) {
    let app = spawn_app(backend).await;
    let response = app
        .post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &json!({"name": "survey", "budget": {"epsilon": 1.0, "delta": 1e-6}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let dataset: Value = response.json().await.unwrap();
    let order = dataset["budget"]["order"].as_f64().unwrap();
    let rdp = dataset["budget"]["rdp_epsilon"].as_f64().unwrap();
    assert!(order > 1.0 && rdp > 0.0 && rdp < 1.0, "{dataset}");
    assert_eq!(dataset["budget"]["epsilon"], 1.0);
    assert_eq!(dataset["budget"]["delta"], 1e-6);
    let id = dataset["id"].as_str().unwrap();
    let budget = app.budget(id).await;
    assert_eq!(budget["order"].as_f64().unwrap(), order);
    assert_eq!(budget["total"].as_f64().unwrap(), rdp);
    assert_eq!(budget["dp"]["delta"], 1e-6);
    let total_eps = budget["dp"]["total_epsilon"].as_f64().unwrap();
    assert!(
        total_eps <= 1.0 && total_eps > 0.99,
        "the budget converts back to at most the target: {total_eps}"
    );
    assert_eq!(budget["dp"]["spent_epsilon"], 0.0);

    // An explicit order that leaves no budget is refused.
    let response = app
        .post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &json!({"name": "x", "budget": {"epsilon": 0.01, "delta": 1e-9, "order": 1.01}}),
        )
        .await;
    assert_problem(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    // Declared sensitivities are echoed.
    let response = app
        .post("/v1/datasets", ADMIN_TOKEN, &json!({"name": "x", "budget": {"order": 3, "epsilon": 1}, "sensitivity": {"l2_squared": 8, "linf": 2}}))
        .await;
    let dataset: Value = response.json().await.unwrap();
    assert_eq!(dataset["neighbouring"], "custom");
    assert_eq!(
        dataset["sensitivity"],
        json!({"l2_squared": 8.0, "linf": 2.0})
    );
    let response = app
        .post("/v1/datasets", ADMIN_TOKEN, &json!({"name": "x", "budget": {"order": 3, "epsilon": 1}, "neighbouring": "add_remove_one"}))
        .await;
    let dataset: Value = response.json().await.unwrap();
    assert_eq!(
        dataset["sensitivity"],
        json!({"l2_squared": 1.0, "linf": 1.0})
    );
}

async fn invalid_requests_are_refused_and_charge_nothing(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.max_dimension = 10;
        s.max_body_bytes = 4096;
    })
    .await;
    let id = app.create_dataset(2.0, 1.0).await;
    let path = format!("/v1/datasets/{id}/releases");
    let ok = json!([5, 3, 1]);
    let unprocessable = [
        json!({"counts": [5, -1, 2], "epsilon": 0.1}),
        json!({"counts": [5, "x", 2], "epsilon": 0.1}),
        json!({"counts": [5, null], "epsilon": 0.1}),
        json!({"counts": [5], "epsilon": 0.1}),
        json!({"counts": [], "epsilon": 0.1}),
        json!({"counts": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], "epsilon": 0.1}),
        json!({"counts": ok, "epsilon": 0}),
        json!({"counts": ok, "epsilon": -1}),
        json!({"counts": ok}),
        json!({"counts": ok, "epsilon": 0.1, "order": 1}),
        json!({"counts": ok, "epsilon": 0.1, "order": 0.5}),
        json!({"counts": ok, "epsilon": 0.1, "mechanism": "posterior", "r": 0}),
        json!({"counts": ok, "epsilon": 0.1, "mechanism": "diffuse", "alpha": -1}),
        json!({"counts": ok, "epsilon": 0.1, "mechanism": "diffuse", "alpha": [1, 2]}),
        json!({"counts": ok, "mechanism": "explicit", "r": 1}),
        json!({"counts": ok, "mechanism": "gaussian", "sigma": 0}),
        json!({"counts": ok, "mechanism": "laplace", "scale": -2}),
        json!({"counts": ok, "epsilon": 0.1, "mechanism": "dirichlet", "sigma": 1}),
        json!({"counts": ok, "epsilon": 0.1, "mechanism": "telepathy"}),
        json!({"counts": ok, "epsilon": 0.1, "seed": 42}),
        json!({"counts": ok, "epsilon": 0.1, "rng_state": "00"}),
        json!({"counts": [2e15, 1], "epsilon": 0.1}),
    ];
    for body in &unprocessable {
        let response = app.post(&path, ADMIN_TOKEN, body).await;
        assert_problem(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
    }
    let send_raw = |body: &'static str, content_type: &'static str| {
        app.client
            .post(app.url(&path))
            .bearer_auth(ADMIN_TOKEN)
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    assert_problem(
        send_raw("{\"counts\": [1, 2", "application/json")
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "malformed-request",
    )
    .await;
    assert_problem(
        send_raw("{\"counts\": [NaN, 2], \"epsilon\": 1}", "application/json")
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "malformed-request",
    )
    .await;
    // Well-formed JSON whose number is out of f64's range: 422, as openapi.yaml says (found by an
    // outside attack).
    assert_problem(
        send_raw(
            "{\"counts\": [1e999, 2], \"epsilon\": 1}",
            "application/json",
        )
        .await
        .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    assert_problem(
        send_raw("counts=1,2", "text/plain").await.unwrap(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported-media-type",
    )
    .await;
    let big = json!({"counts": vec![1.5; 2000], "epsilon": 0.1});
    assert_problem(
        app.post(&path, ADMIN_TOKEN, &big).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
    )
    .await;
    let long_key = "k".repeat(256);
    let response = app
        .post_with_key(
            &path,
            ADMIN_TOKEN,
            &long_key,
            &json!({"counts": ok, "epsilon": 0.1}),
        )
        .await;
    assert_problem(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    // Dataset registration.
    for budget in [
        json!({"epsilon": 1, "delta": 0}),
        json!({"epsilon": 1, "delta": 1}),
        json!({"epsilon": 1, "delta": 1.5}),
        json!({"epsilon": 1}),
        json!({"epsilon": 0, "order": 2}),
        json!({"epsilon": 1, "order": 1}),
        json!({"epsilon": 1e6, "order": 2}),
    ] {
        let response = app
            .post(
                "/v1/datasets",
                ADMIN_TOKEN,
                &json!({"name": "x", "budget": budget}),
            )
            .await;
        assert_problem(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
    }
    let response = app
        .post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &json!({"name": "", "budget": {"epsilon": 1, "order": 2}}),
        )
        .await;
    assert_problem(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    let response = app
        .post("/v1/datasets", ADMIN_TOKEN, &json!({"name": "x", "budget": {"epsilon": 1, "order": 2}, "sensitivity": {"l2_squared": 1, "linf": 2}}))
        .await;
    assert_problem(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    // Auth, routes, methods.
    let response = app
        .client
        .get(app.url("/v1/datasets"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    assert_problem(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_problem(
        app.get("/v1/datasets", "wrong-token").await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    assert_problem(
        app.get("/v1/datasets", "dra_nope_nope").await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    assert_problem(
        app.get("/v1/nowhere", ADMIN_TOKEN).await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    assert_problem(
        app.get("/v1/datasets/not-a-uuid", ADMIN_TOKEN).await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    let response = app
        .client
        .delete(app.url(&format!("/v1/datasets/{id}")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_problem(
        response,
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
    )
    .await;
    assert_problem(
        app.get(&format!("{path}?limit=0"), ADMIN_TOKEN).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    assert_problem(
        app.get(&format!("{path}?limit=abc"), ADMIN_TOKEN).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;

    let budget = app.budget(&id).await;
    assert_eq!(budget["spent"], 0.0, "no refused request charged anything");
    assert_eq!(budget["releases"], 0);
}

async fn analysts_are_confined_to_their_datasets(backend: Backend) {
    let app = spawn_app(backend).await;
    let mine = app.create_dataset(2.0, 10.0).await;
    let other = app.create_dataset(2.0, 10.0).await;
    let token = app.analyst_token(&[&mine]).await;
    let body = json!({"counts": [4, 2, 9], "epsilon": 0.5});

    let response = app
        .post(&format!("/v1/datasets/{mine}/releases"), &token, &body)
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let release: Value = response.json().await.unwrap();
    assert_ne!(release["created_by"], "admin");
    assert_eq!(
        app.post(
            &format!("/v1/datasets/{mine}/releases/preview"),
            &token,
            &body
        )
        .await
        .status(),
        StatusCode::OK
    );
    assert_eq!(
        app.get(&format!("/v1/datasets/{mine}/budget"), &token)
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        app.get(&format!("/v1/datasets/{mine}"), &token)
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        app.get(&format!("/v1/datasets/{mine}/releases"), &token)
            .await
            .status(),
        StatusCode::OK
    );
    let rid = release["id"].as_str().unwrap();
    assert_eq!(
        app.get(&format!("/v1/datasets/{mine}/releases/{rid}"), &token)
            .await
            .status(),
        StatusCode::OK
    );
    let listed: Value = app.get("/v1/datasets", &token).await.json().await.unwrap();
    let ids: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![mine.as_str()]);

    // Every dataset endpoint on someone else's dataset: 404, indistinguishable from absence.
    for response in [
        app.post(&format!("/v1/datasets/{other}/releases"), &token, &body)
            .await,
        app.post(
            &format!("/v1/datasets/{other}/releases/preview"),
            &token,
            &body,
        )
        .await,
        app.get(&format!("/v1/datasets/{other}/budget"), &token)
            .await,
        app.get(&format!("/v1/datasets/{other}"), &token).await,
        app.get(&format!("/v1/datasets/{other}/releases"), &token)
            .await,
        app.get(&format!("/v1/datasets/{other}/releases/{rid}"), &token)
            .await,
    ] {
        assert_problem(response, StatusCode::NOT_FOUND, "not-found").await;
    }
    // Admin-only endpoints: 403.
    let response = app
        .post(
            "/v1/datasets",
            &token,
            &json!({"name": "x", "budget": {"order": 2, "epsilon": 1}}),
        )
        .await;
    assert_problem(response, StatusCode::FORBIDDEN, "forbidden").await;
    let response = app
        .post("/v1/tokens", &token, &json!({"datasets": [mine]}))
        .await;
    assert_problem(response, StatusCode::FORBIDDEN, "forbidden").await;
    assert_eq!(app.budget(&other).await["spent"], 0.0);
    // A token for an unknown dataset cannot be made.
    let response = app
        .post(
            "/v1/tokens",
            ADMIN_TOKEN,
            &json!({"datasets": [uuid::Uuid::new_v4()]}),
        )
        .await;
    assert_problem(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    // A tampered secret is refused.
    let tampered = format!("{}x", &token[..token.len() - 1]);
    assert_problem(
        app.get(&format!("/v1/datasets/{mine}"), &tampered).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
}

async fn idempotent_retries_return_the_stored_release(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(2.0, 1.0).await;
    let path = format!("/v1/datasets/{id}/releases");
    let body = json!({"counts": [10, 20, 30], "epsilon": 0.3});
    let first = app
        .post_with_key(&path, ADMIN_TOKEN, "retry-1", &body)
        .await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    let again = app
        .post_with_key(&path, ADMIN_TOKEN, "retry-1", &body)
        .await;
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["id"], first["id"]);
    assert_eq!(
        again["distribution"], first["distribution"],
        "never resampled"
    );
    assert_eq!(app.budget(&id).await["releases"], 1);
    // Same key, different body.
    let other = json!({"counts": [10, 20, 31], "epsilon": 0.3});
    assert_problem(
        app.post_with_key(&path, ADMIN_TOKEN, "retry-1", &other)
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency-key-reused",
    )
    .await;
    assert_eq!(app.budget(&id).await["releases"], 1);

    // Concurrent retries of one key: one release, one charge, everyone gets it.
    let mut handles = Vec::new();
    for _ in 0..8 {
        let (client, url, body) = (app.client.clone(), app.url(&path), body.clone());
        handles.push(tokio::spawn(async move {
            let r = client
                .post(url)
                .bearer_auth(ADMIN_TOKEN)
                .header("Idempotency-Key", "burst")
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::CREATED);
            r.json::<Value>().await.unwrap()
        }));
    }
    let mut seen = std::collections::HashSet::new();
    for h in handles {
        let v = h.await.unwrap();
        seen.insert((
            v["id"].as_str().unwrap().to_string(),
            v["distribution"].to_string(),
        ));
    }
    assert_eq!(seen.len(), 1, "all retries saw the same release");
    assert_eq!(app.budget(&id).await["releases"], 2);
}

/// A replay is the same 201 body as the original — `budget` included, which is
/// the ledger right after that release was charged, not the ledger at the time of the retry.
/// (The ledger now would count the releases made since: `releases` 2, not 1.)
async fn a_replay_answers_the_original_201(backend: Backend) {
    let app = spawn_app(backend).await;
    // A dataset with a δ, so that the budget's (ε, δ) view is compared too.
    let response = app
        .post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &json!({"name": "replay", "budget": {"epsilon": 3, "delta": 1e-6}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let id = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/v1/datasets/{id}/releases");
    let body = json!({"counts": [10, 20, 30], "epsilon": 0.3, "label": "first"});
    let first = app.post_with_key(&path, ADMIN_TOKEN, "K", &body).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["budget"]["releases"], 1);
    // Another release moves the ledger on.
    let other = app
        .post(
            &path,
            ADMIN_TOKEN,
            &json!({"counts": [1, 2], "epsilon": 0.25}),
        )
        .await;
    assert_eq!(other.status(), StatusCode::CREATED);
    let now = app.budget(&id).await;
    assert_eq!(now["releases"], 2);

    let again = app.post_with_key(&path, ADMIN_TOKEN, "K", &body).await;
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(
        again["budget"], first["budget"],
        "the budget right after the release"
    );
    assert_ne!(again["budget"], now, "not the ledger now");
    assert_eq!(again, first, "the same 201 body");
    assert_eq!(app.budget(&id).await, now, "the replay charged nothing");
}

/// Keyed releases sent together, each key twice at once (a client retrying while its first
/// attempt is still in flight): one charge per key, both answers the same 201 body (one marked
/// replayed); a retry later gets that body again; the key with another body is refused and
/// charges nothing. On PostgreSQL, through one commit slot, the keyed releases committed in
/// groups (releases written by one transaction share `xmin`): replay and refusal are the same
/// for a key stored by a group.
async fn keyed_releases_sent_together_are_charged_once_and_replayed(backend: Backend) {
    const KEYS: usize = 8;
    let app = spawn_app_with(backend, |s| s.db_commit_slots = 1).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(app.create_dataset(2.0, 10.0).await);
    }
    let mut handles = Vec::new();
    for (d, id) in ids.iter().enumerate() {
        for k in 0..KEYS {
            for _copy in 0..2 {
                let (client, url) = (
                    app.client.clone(),
                    app.url(&format!("/v1/datasets/{id}/releases")),
                );
                handles.push(tokio::spawn(async move {
                    let r = client
                        .post(url)
                        .bearer_auth(ADMIN_TOKEN)
                        .header("Idempotency-Key", format!("burst-{d}-{k}"))
                        .json(&json!({"counts": [k + 1, 2, 3], "epsilon": 0.125}))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(r.status(), StatusCode::CREATED);
                    let replayed = r.headers().get("idempotent-replayed").is_some();
                    ((d, k), replayed, r.json::<Value>().await.unwrap())
                }));
            }
        }
    }
    let mut answers = std::collections::BTreeMap::<(usize, usize), Vec<(bool, Value)>>::new();
    for h in handles {
        let (key, replayed, body) = h.await.unwrap();
        answers.entry(key).or_default().push((replayed, body));
    }
    for ((d, k), got) in &answers {
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].1, got[1].1, "burst-{d}-{k}: the same 201 body");
        assert_eq!(
            got.iter().filter(|(replayed, _)| *replayed).count(),
            1,
            "burst-{d}-{k}: one answer is the release, the other its replay"
        );
    }
    for id in &ids {
        assert_eq!(app.budget(id).await["releases"], KEYS);
    }
    // Retries, one at a time: the same 201 body, nothing charged.
    for ((d, k), got) in &answers {
        let again = app
            .post_with_key(
                &format!("/v1/datasets/{}/releases", ids[*d]),
                ADMIN_TOKEN,
                &format!("burst-{d}-{k}"),
                &json!({"counts": [k + 1, 2, 3], "epsilon": 0.125}),
            )
            .await;
        assert_eq!(again.status(), StatusCode::CREATED);
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.json::<Value>().await.unwrap(), got[0].1);
    }
    // The key with another body.
    assert_problem(
        app.post_with_key(
            &format!("/v1/datasets/{}/releases", ids[0]),
            ADMIN_TOKEN,
            "burst-0-0",
            &json!({"counts": [9, 9, 9], "epsilon": 0.125}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency-key-reused",
    )
    .await;
    for id in &ids {
        assert_eq!(app.budget(id).await["releases"], KEYS);
    }
    if backend == Backend::Postgres {
        use sqlx::Connection;
        let mut raw = sqlx::PgConnection::connect(&app.database_url)
            .await
            .unwrap();
        let shared: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM releases r WHERE EXISTS \
               (SELECT 1 FROM releases o WHERE o.xmin::text = r.xmin::text AND o.id <> r.id)",
        )
        .fetch_one(&mut raw)
        .await
        .unwrap();
        assert!(shared > 0, "no two keyed releases shared a transaction");
    }
}

/// A retry gets its stored release whatever the ledger says now: after the dataset's budget ran
/// out, after the analyst's allocation ran out (both refused before a draw), and for a large
/// output (looked up before its draw); the key is settled by the commit otherwise.
async fn a_retry_is_replayed_after_the_budget_or_the_allocation_ran_out(backend: Backend) {
    let app = spawn_app(backend).await;
    let retry = |path: String, token: String, key: &'static str, body: Value| {
        let app = &app;
        async move {
            let response = app.post_with_key(&path, &token, key, &body).await;
            assert_eq!(response.status(), StatusCode::CREATED, "{key}");
            let replayed = response.headers().get("idempotent-replayed").is_some();
            (replayed, response.json::<Value>().await.unwrap())
        }
    };
    // The whole budget in one release, then its retry.
    let full = app.create_dataset(2.0, 0.5).await;
    let path = format!("/v1/datasets/{full}/releases");
    let body = json!({"counts": [4, 5, 6], "epsilon": 0.5});
    let admin = ADMIN_TOKEN.to_string();
    let (replayed, first) = retry(path.clone(), admin.clone(), "all-of-it", body.clone()).await;
    assert!(!replayed);
    let (replayed, again) = retry(path.clone(), admin.clone(), "all-of-it", body).await;
    assert!(replayed);
    assert_eq!(again, first);
    assert_eq!(app.budget(&full).await["releases"], 1);

    // An analyst's allocation: one release takes it all, the next is refused (so the next
    // request is checked against the allocation before its draw), the first's retry replayed.
    let roomy = app.create_dataset(2.0, 4.0).await;
    let response = app
        .post("/v1/tokens", ADMIN_TOKEN, &json!({"datasets": [roomy]}))
        .await;
    let created: Value = response.json().await.unwrap();
    let (token_id, analyst) = (
        created["id"].as_str().unwrap().to_string(),
        created["token"].as_str().unwrap().to_string(),
    );
    let response = app
        .client
        .put(app.url(&format!("/v1/datasets/{roomy}/allocations/{token_id}")))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"epsilon": 0.25}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let path = format!("/v1/datasets/{roomy}/releases");
    let body = json!({"counts": [1, 2, 3], "epsilon": 0.25});
    let (_, first) = retry(path.clone(), analyst.clone(), "mine", body.clone()).await;
    assert_problem(
        app.post_with_key(&path, &analyst, "more", &body).await,
        StatusCode::CONFLICT,
        "allocation-exhausted",
    )
    .await;
    let (replayed, again) = retry(path.clone(), analyst.clone(), "mine", body).await;
    assert!(replayed);
    assert_eq!(again, first);

    // A large output.
    let counts: Vec<u32> = (0..5000).map(|i| i % 7).collect();
    let body = json!({"counts": counts, "epsilon": 0.25});
    let (_, first) = retry(path.clone(), admin.clone(), "large", body.clone()).await;
    let (replayed, again) = retry(path, admin, "large", body).await;
    assert!(replayed);
    assert_eq!(again, first);
    assert_eq!(app.budget(&roomy).await["releases"], 2);
}

async fn concurrent_releases_never_overspend(backend: Backend) {
    let app = spawn_app(backend).await;
    // Budget for exactly K releases of 0.125 (a grid value, so K·cost is exact).
    const K: usize = 6;
    const N: usize = 40;
    let id = app.create_dataset(3.0, 0.125 * K as f64).await;
    let path = app.url(&format!("/v1/datasets/{id}/releases"));
    let mut handles = Vec::new();
    for i in 0..N {
        let (client, path) = (app.client.clone(), path.clone());
        handles.push(tokio::spawn(async move {
            let body = json!({"counts": [i, 2 * i, 7], "epsilon": 0.125});
            client
                .post(path)
                .bearer_auth(ADMIN_TOKEN)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
        }));
    }
    let mut created = 0;
    let mut refused = 0;
    for h in handles {
        match h.await.unwrap() {
            StatusCode::CREATED => created += 1,
            StatusCode::CONFLICT => refused += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!((created, refused), (K, N - K));
    let budget = app.budget(&id).await;
    assert_eq!(budget["releases"], K);
    assert!(budget["spent"].as_f64().unwrap() <= budget["total"].as_f64().unwrap());
    let listed: Value = app
        .get(
            &format!("/v1/datasets/{id}/releases?limit=100"),
            ADMIN_TOKEN,
        )
        .await
        .json()
        .await
        .unwrap();
    let costs: f64 = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["cost"]["epsilon"].as_f64().unwrap())
        .sum();
    assert_eq!(listed["items"].as_array().unwrap().len(), K);
    assert_eq!(
        costs,
        budget["spent"].as_f64().unwrap(),
        "spent is exactly the sum of the stored charges"
    );
}

async fn operational_endpoints(backend: Backend) {
    let app: TestApp = spawn_app(backend).await;
    let health: Value = app
        .client
        .get(app.url("/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    let ready: Value = app
        .client
        .get(app.url("/readyz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        ready["database"],
        if backend == Backend::Sqlite {
            "sqlite"
        } else {
            "postgres"
        }
    );
    let id = app.create_dataset(2.0, 1.0).await;
    let response = app
        .post(
            &format!("/v1/datasets/{id}/releases"),
            ADMIN_TOKEN,
            &json!({"counts": [1, 2], "epsilon": 0.5}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let response = app
        .post(
            &format!("/v1/datasets/{id}/releases"),
            ADMIN_TOKEN,
            &json!({"counts": [1, 2], "epsilon": 0.75}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    // The per-dataset series need the admin token.
    let metrics = app.get("/metrics", ADMIN_TOKEN).await.text().await.unwrap();
    assert!(
        metrics.contains(&format!("dirichlet_budget_spent{{dataset=\"{id}\"}} 0.5")),
        "{metrics}"
    );
    assert!(metrics.contains("dirichlet_releases_total{mechanism=\"dirichlet\"} 1"));
    assert!(metrics.contains("dirichlet_refusals_total{reason=\"budget-exhausted\"} 1"));
    assert!(metrics.contains("http_request_duration_seconds_bucket"));
    assert!(metrics.contains("route=\"/v1/datasets/{id}/releases\""));
    let spec = app
        .client
        .get(app.url("/openapi.yaml"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(spec.starts_with("openapi: 3.1"));
    // Request ids are propagated.
    let response = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert!(response.headers().contains_key("x-request-id"));
}

async fn a_timed_out_release_is_a_problem_and_never_half_written(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.request_timeout_ms = 150).await;
    let id = app.create_dataset(2.0, 10.0).await;
    // 400,000 cells take longer than 150 ms in a debug build (parse, sample, store).
    let counts: Vec<u32> = (0..400_000).map(|i| i % 13).collect();
    // The timeout may answer (and close the connection) while the body is still being sent:
    // then the client sees a broken pipe. If it answers, it is 503 timeout (cut before the
    // commit started: not charged), or 201 if the commit had started (a started
    // commit is never answered 503).
    let sent = app
        .client
        .post(app.url(&format!("/v1/datasets/{id}/releases")))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"counts": counts, "epsilon": 1.0}))
        .send()
        .await;
    if let Ok(response) = sent {
        if response.status() != StatusCode::CREATED {
            assert!(response.headers().contains_key("retry-after"));
            assert_problem(response, StatusCode::SERVICE_UNAVAILABLE, "timeout").await;
        }
    }
    // The draw-and-commit task is never cut between charge and record: whether the timeout hit
    // before the draw (nothing written) or after (the release committed on its own), every
    // consistent snapshot of the ledger matches its history. Check snapshots until the task
    // has settled (two equal budget reads around the listing), a few times over.
    let mut consistent_snapshots = 0;
    for _ in 0..100 {
        let before = app.budget(&id).await;
        let listed: Value = app
            .get(&format!("/v1/datasets/{id}/releases"), ADMIN_TOKEN)
            .await
            .json()
            .await
            .unwrap();
        let after = app.budget(&id).await;
        if before != after {
            continue;
        }
        let stored = listed["items"].as_array().unwrap();
        assert_eq!(after["releases"], stored.len());
        let charged: f64 = stored
            .iter()
            .map(|r| r["cost"]["epsilon"].as_f64().unwrap())
            .sum();
        assert_eq!(after["spent"].as_f64().unwrap(), charged);
        consistent_snapshots += 1;
        if consistent_snapshots == 5 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(consistent_snapshots, 5);
}

/// On the live service: a budget of 1 admits exactly k releases asked at 1/k,
/// every calibrated mechanism, both histogram relations; the (k+1)-th is refused and charges
/// nothing. Histogram releases say they were priced exactly, custom ones by the bound;
/// a release f64 cannot carry is refused with `beyond-precision` and charges nothing.
async fn exact_splits_and_exact_pricing(backend: Backend) {
    let app = spawn_app(backend).await;
    let counts = json!([30, 5, 0, 12]);
    let mechanisms = [
        json!({"mechanism": "dirichlet"}),
        json!({"mechanism": "posterior"}),
        json!({"mechanism": "diffuse", "alpha": [10.0, 11.0, 12.0, 13.0]}),
        json!({"mechanism": "gaussian"}),
        json!({"mechanism": "laplace"}),
    ];
    for relation in ["replace_one", "add_remove_one"] {
        for mechanism in &mechanisms {
            for k in [3u32, 7] {
                let created: Value = app
                    .post(
                        "/v1/datasets",
                        ADMIN_TOKEN,
                        &json!({"name": "split", "budget": {"order": 2, "epsilon": 1}, "neighbouring": relation}),
                    )
                    .await
                    .json()
                    .await
                    .unwrap();
                let id = created["id"].as_str().unwrap().to_string();
                let path = format!("/v1/datasets/{id}/releases");
                let asked = 1.0 / k as f64;
                let mut body = mechanism.clone();
                body["counts"] = counts.clone();
                body["epsilon"] = json!(asked);
                let mut spent = 0.0;
                for _ in 0..k {
                    let response = app.post(&path, ADMIN_TOKEN, &body).await;
                    assert_eq!(
                        response.status(),
                        StatusCode::CREATED,
                        "{relation} {body} k={k}"
                    );
                    let release: Value = response.json().await.unwrap();
                    let cost = release["cost"]["epsilon"].as_f64().unwrap();
                    assert!(
                        cost <= asked && spends_exactly(cost, asked),
                        "{body}: {cost}"
                    );
                    assert_eq!(release["mechanism"]["pricing"], "exact", "{body}");
                    spent += cost;
                    assert_eq!(release["budget"]["spent"].as_f64().unwrap(), spent);
                }
                let response = app.post(&path, ADMIN_TOKEN, &body).await;
                assert_problem(response, StatusCode::CONFLICT, "budget-exhausted").await;
                assert_eq!(app.budget(&id).await["releases"], k);
            }
        }
    }
    // ε* at λ = 2, r = 1, α = coth(½) is 1 for replace-one (the bound would charge 2.0).
    let id = app.create_dataset(2.0, 10.0).await;
    let path = format!("/v1/datasets/{id}/releases");
    let coth_half = 1.0 / 0.5f64.tanh();
    let release: Value = app
        .post(
            &path,
            ADMIN_TOKEN,
            &json!({"counts": counts, "mechanism": "explicit", "r": 1.0, "alpha": coth_half}),
        )
        .await
        .json()
        .await
        .unwrap();
    let cost = release["cost"]["epsilon"].as_f64().unwrap();
    assert!((cost - 1.0).abs() < 1e-11 && cost >= 1.0 - 1e-15, "{cost}");
    // A custom sensitivity is priced by the bound.
    let custom: Value = app
        .post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &json!({"name": "custom", "budget": {"order": 2, "epsilon": 10}, "sensitivity": {"l2_squared": 2, "linf": 1}}),
        )
        .await
        .json()
        .await
        .unwrap();
    let custom_path = format!("/v1/datasets/{}/releases", custom["id"].as_str().unwrap());
    let release: Value = app
        .post(
            &custom_path,
            ADMIN_TOKEN,
            &json!({"counts": counts, "epsilon": 0.5}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(release["mechanism"]["pricing"], "bound");
    // Beyond precision: shapes above 2^50, and (λ₀ = 22) r·Δ∞ lost in the ulps of the prior
    // α ≈ 4.4e13 that posterior r = 1000 needs for ε = 1e-6.
    let high = app.create_dataset(22.0, 10.0).await;
    for (dataset, body) in [
        (
            &id,
            json!({"counts": counts, "mechanism": "explicit", "r": 1.0, "alpha": 1e33}),
        ),
        (
            &high,
            json!({"counts": counts, "mechanism": "posterior", "r": 1000.0, "epsilon": 1e-6}),
        ),
    ] {
        let before = app.budget(dataset).await;
        let path = format!("/v1/datasets/{dataset}/releases");
        let response = app.post(&path, ADMIN_TOKEN, &body).await;
        assert_problem(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "beyond-precision",
        )
        .await;
        assert_eq!(app.budget(dataset).await, before);
    }
}

async fn baselines_are_discrete_priced_and_projected(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(2.0, 8000.0).await;
    let path = format!("/v1/datasets/{id}/releases");
    // Discrete noise needs integer counts: a clear 422 that names the cell, not its value, and
    // charges nothing.
    for (mechanism, noise) in [("gaussian", "sigma"), ("laplace", "scale")] {
        let mut given = json!({"counts": [3, 1, 2.25], "mechanism": mechanism});
        given[noise] = json!(2.0);
        for body in [
            json!({"counts": [3, 0.5, 2], "epsilon": 1.0, "mechanism": mechanism}),
            given,
        ] {
            for route in [path.clone(), format!("{path}/preview")] {
                let response = app.post(&route, ADMIN_TOKEN, &body).await;
                let problem = assert_problem(
                    response,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid-request",
                )
                .await;
                let detail = problem["detail"].as_str().unwrap();
                assert!(detail.contains("integer"), "{detail}");
                assert!(
                    !detail.contains("0.5") && !detail.contains("2.25"),
                    "{detail}"
                );
            }
        }
    }
    let budget = app.budget(&id).await;
    assert_eq!(budget["spent"], 0.0);
    assert_eq!(budget["releases"], 0);
    // Noise this small is 0 with probability 1 − O(e⁻²⁰): the projection of x/N is x/N.
    for body in [
        json!({"counts": [100, 300, 600], "mechanism": "gaussian", "sigma": 0.05}),
        json!({"counts": [100, 300, 600], "mechanism": "laplace", "scale": 0.05}),
    ] {
        let response = app.post(&path, ADMIN_TOKEN, &body).await;
        assert_eq!(response.status(), StatusCode::CREATED, "{body}");
        let release: Value = response.json().await.unwrap();
        assert_eq!(release["distribution"], json!([0.1, 0.3, 0.6]), "{body}");
        // replace-one at the integer order 2: both curves are the exact worst case.
        assert_eq!(release["mechanism"]["pricing"], "exact", "{body}");
    }
    // The Gaussian at σ = 0.05 costs λΔ2²/(2σ²) = 800 on the ledger's 2⁻⁴⁰ grid; the discrete
    // Laplace at b = 0.05, 2·D₁(2, 20) = 2·(20 + ln((1 + e⁻⁶⁰)/(1 + e⁻²⁰))) ≈ 40 (not the
    // continuous curve's 40 − 2 ln(3/2)).
    let budget = app.budget(&id).await;
    let spent = budget["spent"].as_f64().unwrap();
    let laplace = 2.0 * (20.0 + ((1.0 + (-60f64).exp()) / (1.0 + (-20f64).exp())).ln());
    assert!((spent - 800.0 - laplace).abs() < 1e-9, "{spent}");

    // A non-integer ledger order prices the Gaussian by CKS20's bound.
    let id = app.create_dataset(2.5, 10.0).await;
    let response = app
        .post(
            &format!("/v1/datasets/{id}/releases"),
            ADMIN_TOKEN,
            &json!({"counts": [5, 3, 1], "epsilon": 1.0, "mechanism": "gaussian"}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let release: Value = response.json().await.unwrap();
    assert_eq!(release["mechanism"]["pricing"], "bound");
    assert!(spends_exactly(
        release["cost"]["epsilon"].as_f64().unwrap(),
        1.0
    ));

    // Custom sensitivities: integer shifts, priced by a bound; linf < 1 admits no integer
    // shift and is refused.
    let custom = |sensitivity: Value| json!({"name": "c", "budget": {"order": 3, "epsilon": 10}, "sensitivity": sensitivity});
    let response = app
        .post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &custom(json!({"l2_squared": 8, "linf": 2})),
        )
        .await;
    let dataset: Value = response.json().await.unwrap();
    let releases = format!("/v1/datasets/{}/releases", dataset["id"].as_str().unwrap());
    for mechanism in ["gaussian", "laplace"] {
        let response = app
            .post(
                &releases,
                ADMIN_TOKEN,
                &json!({"counts": [5, 3, 1], "epsilon": 0.5, "mechanism": mechanism}),
            )
            .await;
        assert_eq!(response.status(), StatusCode::CREATED, "{mechanism}");
        let release: Value = response.json().await.unwrap();
        assert_eq!(release["mechanism"]["pricing"], "bound");
        assert_distribution(&release["distribution"], 3);
        assert!(spends_exactly(
            release["cost"]["epsilon"].as_f64().unwrap(),
            0.5
        ));
    }
    let response = app
        .post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &custom(json!({"l2_squared": 0.25, "linf": 0.5})),
        )
        .await;
    let dataset: Value = response.json().await.unwrap();
    let releases = format!("/v1/datasets/{}/releases", dataset["id"].as_str().unwrap());
    for body in [
        json!({"counts": [5, 3, 1], "epsilon": 0.5, "mechanism": "gaussian"}),
        json!({"counts": [5, 3, 1], "mechanism": "laplace", "scale": 3.0}),
    ] {
        let response = app.post(&releases, ADMIN_TOKEN, &body).await;
        assert_problem_about(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
            "linf",
        )
        .await;
    }
    // Noise scales above 2⁵² are refused before anything is drawn.
    let response = app
        .post(
            &format!("/v1/datasets/{id}/releases"),
            ADMIN_TOKEN,
            &json!({"counts": [5, 3, 1], "mechanism": "gaussian", "sigma": 1e20}),
        )
        .await;
    assert_problem(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
}

fn assert_table(v: &Value, rows: usize, cells: usize) {
    let table = v.as_array().expect("distributions is an array");
    assert_eq!(table.len(), rows);
    for row in table {
        assert_distribution(row, cells);
    }
}

/// A table of disjoint groups is released, replayed, listed and shown as one release with one
/// charge: the price of one vector of its row length, for every mechanism.
async fn tables_are_released_for_the_price_of_one_vector(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(2.0, 100.0).await;
    let path = format!("/v1/datasets/{id}/releases");
    let table = json!([[12, 0, 3, 1], [0, 7, 7, 2], [1, 1, 1, 1]]);
    let counts = json!([12, 0, 3, 1]);

    // Preview: one forecast per row, priced as one 4-cell vector, nothing charged.
    let preview = |body: Value| {
        let app = &app;
        let id = &id;
        async move {
            let response = app
                .post(
                    &format!("/v1/datasets/{id}/releases/preview"),
                    ADMIN_TOKEN,
                    &body,
                )
                .await;
            assert_eq!(response.status(), StatusCode::OK, "{body}");
            response.json::<Value>().await.unwrap()
        }
    };
    let table_preview = preview(json!({"table": table, "epsilon": 0.5})).await;
    let vector_preview = preview(json!({"counts": counts, "epsilon": 0.5})).await;
    assert_eq!(table_preview["cost"], vector_preview["cost"]);
    assert!(table_preview.get("forecast").is_none(), "{table_preview}");
    let forecasts = table_preview["forecasts"].as_array().unwrap();
    assert_eq!(forecasts.len(), 3);
    // Rows in order, each forecast as the same request on that row alone would be.
    for (row, forecast) in table.as_array().unwrap().iter().zip(forecasts) {
        let alone = preview(json!({"counts": row, "epsilon": 0.5})).await;
        assert_eq!(*forecast, alone["forecast"], "{row}");
        assert!(forecast["l2_bound"].as_f64().unwrap() > 0.0);
    }
    assert_ne!(forecasts[0], forecasts[2]);
    let baseline = preview(json!({"table": table, "epsilon": 0.5, "mechanism": "laplace"})).await;
    assert_eq!(baseline["forecasts"], json!([null, null, null]));
    assert_eq!(app.budget(&id).await["releases"], 0);

    // Release with a label and a key.
    let label = "NB feature 7 | by class";
    let body = json!({"table": table, "epsilon": 0.5, "label": label});
    let response = app
        .post_with_key(&path, ADMIN_TOKEN, "table-1", &body)
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    let released: Value = response.json().await.unwrap();
    assert_table(&released["distributions"], 3, 4);
    assert!(released.get("distribution").is_none(), "{released}");
    assert_eq!(released["label"], label);
    assert_eq!(released["cost"], vector_preview["cost"]);
    assert!(spends_exactly(
        released["cost"]["epsilon"].as_f64().unwrap(),
        0.5
    ));
    let budget = app.budget(&id).await;
    assert_eq!(budget["releases"], 1);
    assert_eq!(budget["spent"], released["cost"]["epsilon"]);
    // Rows are drawn independently: no two rows are equal.
    let rows = released["distributions"].as_array().unwrap();
    assert!(rows[0] != rows[1] && rows[1] != rows[2]);

    // A retry replays the stored table and charges nothing.
    let again = app
        .post_with_key(&path, ADMIN_TOKEN, "table-1", &body)
        .await;
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["id"], released["id"]);
    assert_eq!(again["distributions"], released["distributions"]);
    assert_eq!(again["label"], label);
    // The label is part of the request: the same key with another label is another request.
    let relabelled = json!({"table": table, "epsilon": 0.5, "label": "other"});
    assert_problem(
        app.post_with_key(&path, ADMIN_TOKEN, "table-1", &relabelled)
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency-key-reused",
    )
    .await;
    assert_eq!(app.budget(&id).await["releases"], 1);

    // GET by id and the listing return the table and its label.
    let shown: Value = app.get(&location, ADMIN_TOKEN).await.json().await.unwrap();
    assert_eq!(shown["distributions"], released["distributions"]);
    assert_eq!(shown["label"], label);
    assert!(shown.get("distribution").is_none());

    // A labelled vector, and an unlabelled one (no label field at all).
    let response = app
        .post(
            &path,
            ADMIN_TOKEN,
            &json!({"counts": counts, "epsilon": 0.5, "label": "class prior"}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let vector: Value = response.json().await.unwrap();
    assert_eq!(vector["label"], "class prior");
    assert_distribution(&vector["distribution"], 4);
    assert!(vector.get("distributions").is_none());
    let response = app
        .post(
            &path,
            ADMIN_TOKEN,
            &json!({"counts": counts, "epsilon": 0.5}),
        )
        .await;
    let plain: Value = response.json().await.unwrap();
    assert!(plain.get("label").is_none(), "{plain}");

    let listed: Value = app.get(&path, ADMIN_TOKEN).await.json().await.unwrap();
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(items[2]["id"], released["id"]);
    assert_eq!(items[2]["distributions"], released["distributions"]);
    assert_eq!(items[2]["label"], label);
    assert_eq!(items[1]["label"], "class prior");
    assert_eq!(items[1]["distribution"], vector["distribution"]);

    // A per-cell prior on an exactly priced dataset: a record may move to the *same* cell of
    // another row, a move the vector's exact price (two distinct cells) does not cover, so a
    // table is calibrated against the table price (the smallest alpha in both changed cells):
    // charged exactly what was asked, with a smaller r than the same request on one vector.
    let per_cell =
        json!({"epsilon": 0.5, "mechanism": "diffuse", "alpha": [10.0, 11.0, 12.0, 13.0]});
    let mut as_table = per_cell.clone();
    as_table["table"] = table.clone();
    let mut as_vector = per_cell.clone();
    as_vector["counts"] = counts.clone();
    let before = app.budget(&id).await;
    let response = app.post(&path, ADMIN_TOKEN, &as_table).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let t: Value = response.json().await.unwrap();
    assert_table(&t["distributions"], 3, 4);
    assert_eq!(t["cost"]["epsilon"], 0.5);
    assert_eq!(t["mechanism"]["pricing"], "exact");
    let v = preview(as_vector).await;
    let (r_table, r_vector) = (
        t["mechanism"]["r"].as_f64().unwrap(),
        v["mechanism"]["r"].as_f64().unwrap(),
    );
    assert!(r_table < r_vector, "table r {r_table}, vector r {r_vector}");
    let after = app.budget(&id).await;
    assert_eq!(
        after["spent"].as_f64().unwrap(),
        before["spent"].as_f64().unwrap() + 0.5
    );

    // Every mechanism: the table costs exactly what the same request on one row costs.
    let mechanisms = [
        json!({"epsilon": 0.5, "mechanism": "dirichlet", "prior": 2.0}),
        json!({"epsilon": 0.5, "mechanism": "posterior", "r": 0.5}),
        json!({"epsilon": 0.5, "mechanism": "diffuse", "alpha": 10.0}),
        json!({"mechanism": "explicit", "r": 0.1, "alpha": 5.0}),
        json!({"epsilon": 0.5, "mechanism": "gaussian"}),
        json!({"mechanism": "gaussian", "sigma": 3.0}),
        json!({"epsilon": 0.5, "mechanism": "laplace"}),
        json!({"mechanism": "laplace", "scale": 4.0}),
    ];
    for m in mechanisms {
        let mut as_table = m.clone();
        as_table["table"] = table.clone();
        let mut as_vector = m.clone();
        as_vector["counts"] = counts.clone();
        let before = app.budget(&id).await;
        let response = app.post(&path, ADMIN_TOKEN, &as_table).await;
        assert_eq!(response.status(), StatusCode::CREATED, "{as_table}");
        let t: Value = response.json().await.unwrap();
        assert_table(&t["distributions"], 3, 4);
        assert_eq!(t["mechanism"]["kind"], m["mechanism"]);
        let v = preview(as_vector).await;
        assert_eq!(t["cost"], v["cost"], "{m}");
        let after = app.budget(&id).await;
        assert_eq!(
            after["releases"].as_i64(),
            before["releases"].as_i64().map(|n| n + 1)
        );
        assert_eq!(
            after["spent"].as_f64().unwrap(),
            before["spent"].as_f64().unwrap() + t["cost"]["epsilon"].as_f64().unwrap()
        );
    }

    let metrics = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("dirichlet_table_releases_total{mechanism=\"dirichlet\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("dirichlet_table_rows_total{mechanism=\"dirichlet\"} 6"));
    assert!(metrics.contains("dirichlet_table_releases_total{mechanism=\"laplace\"} 2"));
    assert!(metrics.contains("dirichlet_releases_total{mechanism=\"dirichlet\"} 4"));
    assert!(!metrics.contains(label), "labels never reach the metrics");
}

/// Malformed tables and labels are clear 422s that charge nothing.
async fn invalid_tables_and_labels_are_refused(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.max_dimension = 10).await;
    let id = app.create_dataset(2.0, 1.0).await;
    let path = format!("/v1/datasets/{id}/releases");
    let ok = json!([[5, 3], [1, 1]]);
    let cases = [
        (
            json!({"table": ok, "counts": [5, 3], "epsilon": 0.1}),
            "table",
            "not both",
        ),
        (json!({"epsilon": 0.1}), "counts", "is required"),
        (
            json!({"table": [], "epsilon": 0.1}),
            "table",
            "at least one row",
        ),
        (
            json!({"table": [[5, 3], [1, 1, 1]], "epsilon": 0.1}),
            "table",
            "row 1 has 3",
        ),
        (
            json!({"table": [[5], [3]], "epsilon": 0.1}),
            "table",
            "at least 2 cells",
        ),
        (
            json!({"table": [[5, -3], [1, 1]], "epsilon": 0.1}),
            "table",
            "row 0",
        ),
        (
            json!({"table": [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]], "epsilon": 0.1}),
            "table",
            "12 cells in all",
        ),
        (
            json!({"table": [[1, 1], [1, 2e15]], "epsilon": 0.1}),
            "table",
            "table[1][1]",
        ),
        (
            json!({"table": ok, "epsilon": 0.1, "mechanism": "diffuse", "alpha": [1, 2, 3]}),
            "alpha",
            "alpha",
        ),
        (
            json!({"table": ok, "epsilon": 0.1, "label": ""}),
            "label",
            "1 to 200",
        ),
        (
            json!({"table": ok, "epsilon": 0.1, "label": "x".repeat(201)}),
            "label",
            "1 to 200",
        ),
        (
            json!({"counts": [5, 3], "epsilon": 0.1, "label": "a\nb"}),
            "label",
            "control",
        ),
    ];
    for (body, field, detail) in &cases {
        let problem = assert_problem(
            app.post(&path, ADMIN_TOKEN, body).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
        if *field != "alpha" {
            assert_eq!(problem["field"], *field, "{body}: {problem}");
        }
        let text = problem["detail"].as_str().unwrap();
        assert!(text.contains(detail), "{body}: {problem}");
        assert!(
            !text.contains("2000000000000000"),
            "counts are never echoed: {problem}"
        );
        let preview = app
            .post(&format!("{path}/preview"), ADMIN_TOKEN, body)
            .await;
        assert_eq!(preview.status(), StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    }
    // null is not "absent", and a label of 200 characters is fine.
    for body in [
        json!({"table": null, "counts": [5, 3], "epsilon": 0.1}),
        json!({"table": ok, "epsilon": 0.1, "label": null}),
        json!({"table": [[5, "x"]], "epsilon": 0.1}),
    ] {
        let response = app.post(&path, ADMIN_TOKEN, &body).await;
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}"
        );
    }
    assert_eq!(app.budget(&id).await["releases"], 0);
    let long = "é".repeat(200);
    let response = app
        .post(
            &path,
            ADMIN_TOKEN,
            &json!({"table": ok, "epsilon": 0.1, "label": long}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let released: Value = response.json().await.unwrap();
    assert_eq!(released["label"], long.as_str());

    // A custom sensitivity does not say how one record moves a table: refused.
    let response = app
        .post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &json!({"name": "custom", "budget": {"order": 2, "epsilon": 1.0},
                    "sensitivity": {"l2_squared": 2.0, "linf": 1.0}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let custom: Value = response.json().await.unwrap();
    let custom_path = format!("/v1/datasets/{}/releases", custom["id"].as_str().unwrap());
    assert_problem_about(
        app.post(
            &custom_path,
            ADMIN_TOKEN,
            &json!({"table": ok, "epsilon": 0.1}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
        "custom",
    )
    .await;
    let response = app
        .post(
            &custom_path,
            ADMIN_TOKEN,
            &json!({"counts": [5, 3], "epsilon": 0.1}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
}

/// Names that look alike are one name, and names hiding invisible text are refused: dataset
/// names, cell names, labels and row names are trimmed and stored in NFC, compared after that,
/// and refused (422 at their field, quoting nothing) with format characters, separators, or
/// nothing but whitespace: `"flu"` and `"flu\u200b"`, NFC and NFD, a BOM prefix, U+2028,
/// whitespace-only names and U+202E are not accepted as they were sent.
async fn names_are_normalised_and_invisible_characters_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    let marker = "31415926";
    let budget = json!({"order": 2, "epsilon": 4.0});
    let refused = [
        (format!("{marker}\u{200b}"), "format"),
        (format!("\u{feff}{marker}"), "format"),
        (format!("{marker}\u{ad}"), "format"),
        (format!("\u{202e}{marker}"), "format"),
        (format!("{marker}\u{2066}x\u{2069}"), "format"),
        (format!("{marker}\u{2028}x"), "separators"),
        (" \t\u{3000}\u{a0} ".to_string(), "1 to 200"),
        (format!("{marker}\u{1}"), "control"),
    ];
    let assert_refused = |problem: &Value, field: &str, why: &str| {
        assert_eq!(problem["field"], field, "{problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(why), "{why}: {problem}");
        assert!(!problem.to_string().contains(marker), "quoted: {problem}");
    };
    for (name, why) in &refused {
        let problem = assert_problem(
            app.post(
                "/v1/datasets",
                ADMIN_TOKEN,
                &json!({"name": name, "budget": budget}),
            )
            .await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
        assert_refused(&problem, "name", why);
        let problem = assert_problem(
            app.post(
                "/v1/datasets",
                ADMIN_TOKEN,
                &json!({"name": "cells", "budget": budget, "cells": ["flu", name]}),
            )
            .await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
        assert_refused(&problem, "cells", why);
    }
    // Alike once trimmed and normalised: one name, said twice.
    for cells in [
        json!(["caf\u{e9}", "cafe\u{301}"]),
        json!(["flu", " flu\t"]),
        json!(["\u{212b}", "\u{c5}"]),
    ] {
        let problem = assert_problem(
            app.post(
                "/v1/datasets",
                ADMIN_TOKEN,
                &json!({"name": "alike", "budget": budget, "cells": cells}),
            )
            .await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
        assert_refused(&problem, "cells", "the same");
    }
    let listed = app.get_json("/v1/datasets", ADMIN_TOKEN).await;
    assert_eq!(listed["items"], json!([]), "no dataset was registered");

    // Accepted names are stored trimmed and in NFC, and come back so.
    let response = app
        .post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &json!({"name": "  Cafe\u{301} visits\n", "budget": budget,
                    "cells": [" flu", "ro\u{308}teln", "other "]}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let dataset: Value = response.json().await.unwrap();
    assert_eq!(dataset["name"], "Café visits");
    assert_eq!(dataset["cells"], json!(["flu", "röteln", "other"]));
    let id = dataset["id"].as_str().unwrap();
    let read = app
        .get_json(&format!("/v1/datasets/{id}"), ADMIN_TOKEN)
        .await;
    assert_eq!(read["name"], "Café visits");
    assert_eq!(read["cells"], dataset["cells"]);

    // Labels and row names, on releases and previews.
    let releases = format!("/v1/datasets/{id}/releases");
    let table = json!([[5, 3, 1], [1, 1, 2]]);
    for (text, why) in &refused {
        for (body, field) in [
            (
                json!({"counts": [5, 3, 1], "epsilon": 0.1, "label": text}),
                "label",
            ),
            (
                json!({"table": table, "epsilon": 0.1, "row_names": ["a", text]}),
                "row_names",
            ),
        ] {
            for path in [releases.clone(), format!("{releases}/preview")] {
                let problem = assert_problem(
                    app.post(&path, ADMIN_TOKEN, &body).await,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid-request",
                )
                .await;
                assert_refused(&problem, field, why);
            }
        }
    }
    let problem = assert_problem(
        app.post(
            &releases,
            ADMIN_TOKEN,
            &json!({"table": table, "epsilon": 0.1, "row_names": ["caf\u{e9}", "cafe\u{301}"]}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    assert_refused(&problem, "row_names", "the same");
    assert_eq!(app.budget(id).await["releases"], 0, "nothing was charged");

    // A keyed release with a decomposed, padded label: stored normalised, and its retry (the
    // same bytes) is the same request, answered by a replay.
    let body = json!({"table": table, "epsilon": 0.1, "label": " Cafe\u{301} | by age ",
                      "row_names": ["0\u{2013}17 ", "18+"]});
    let first = app
        .post_with_key(&releases, ADMIN_TOKEN, "nfd", &body)
        .await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["label"], "Café | by age");
    assert_eq!(first["row_names"], json!(["0\u{2013}17", "18+"]));
    let retry = app
        .post_with_key(&releases, ADMIN_TOKEN, "nfd", &body)
        .await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let retry: Value = retry.json().await.unwrap();
    assert_eq!(retry["id"], first["id"]);
    assert_eq!(retry["label"], "Café | by age");
    let listed: Value = app.get(&releases, ADMIN_TOKEN).await.json().await.unwrap();
    assert_eq!(listed["items"][0]["label"], "Café | by age");
    assert_eq!(listed["items"][0]["row_names"], first["row_names"]);
    assert_eq!(app.budget(id).await["releases"], 1);
}

/// `fields=summary` lists who spent what when, without outputs or mechanism records, paged
/// like the full listing (by count: a summary's size does not depend on the release's).
async fn a_summary_listing_omits_outputs_and_mechanisms(backend: Backend) {
    // Room for four summaries per page (and three six-cell releases in a full page).
    let app = spawn_app_with(backend, |s| s.max_page_bytes = 4 * 2048).await;
    let id = app.create_dataset(2.0, 10.0).await;
    let path = format!("/v1/datasets/{id}/releases");
    let analyst = app.analyst_token(&[&id]).await;
    let bodies = [
        json!({"counts": [120, 45, 3, 0, 17, 9], "epsilon": 0.4, "label": "visits | 2026-11"}),
        json!({"table": [[40, 12, 1, 0, 5, 2], [55, 20, 1, 0, 8, 4]], "epsilon": 0.5, "label": "by age band"}),
        json!({"counts": [1, 2, 3, 4, 5, 6], "epsilon": 0.1, "mechanism": "diffuse", "alpha": [1, 2, 3, 4, 5, 6]}),
        json!({"counts": [1, 2, 3, 4, 5, 6], "epsilon": 0.2, "mechanism": "laplace"}),
        json!({"counts": [6, 5, 4, 3, 2, 1], "epsilon": 0.3}),
    ];
    let mut released = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        let token = if i % 2 == 0 { ADMIN_TOKEN } else { &analyst };
        let response = app.post(&path, token, body).await;
        assert_eq!(response.status(), StatusCode::CREATED, "{body}");
        released.push(response.json::<Value>().await.unwrap());
    }
    released.reverse(); // newest first, as listed

    let summary = |query: &str| {
        let url = format!("{path}?fields=summary{query}");
        let app = &app;
        async move {
            let response = app.get(&url, ADMIN_TOKEN).await;
            assert_eq!(response.status(), StatusCode::OK, "{url}");
            response.json::<Value>().await.unwrap()
        }
    };
    let first = summary("").await;
    assert_eq!(
        first["next_before"], 2,
        "four summaries fit a page: {first}"
    );
    let rest = summary("&before=2").await;
    assert_eq!(rest["next_before"], Value::Null);
    let items: Vec<&Value> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .chain(rest["items"].as_array().unwrap())
        .collect();
    assert_eq!(items.len(), released.len());
    for (item, full) in items.iter().zip(&released) {
        let mut keys: Vec<&str> = item
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        let mut expected = vec![
            "cost",
            "created_at",
            "created_by",
            "dataset_id",
            "id",
            "seq",
        ];
        if full.get("label").is_some() {
            expected.push("label");
            expected.sort_unstable();
        }
        assert_eq!(keys, expected, "{item}");
        for key in &expected {
            assert_eq!(item[key], full[key], "{key} of {item}");
        }
    }
    assert_eq!(items[3]["label"], "by age band");
    assert_ne!(items[3]["created_by"], "admin");

    // The full listing pages by size, the summary by count; a limit applies to both.
    let full: Value = app.get(&path, ADMIN_TOKEN).await.json().await.unwrap();
    assert_eq!(full["items"].as_array().unwrap().len(), 3);
    assert!(full["items"][0].get("distribution").is_some());
    let limited = summary("&limit=2&before=5").await;
    let seqs: Vec<i64> = limited["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, vec![4, 3]);
    assert_eq!(limited["next_before"], 3);

    // An analyst of the dataset may ask; anything but `summary` is refused.
    let response = app.get(&format!("{path}?fields=summary"), &analyst).await;
    assert_eq!(response.status(), StatusCode::OK);
    for query in ["fields=full", "fields=", "fields=summary&fields=summary"] {
        let response = app.get(&format!("{path}?{query}"), ADMIN_TOKEN).await;
        assert_problem(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
    }
    let other = app.create_dataset(2.0, 1.0).await;
    let response = app
        .get(
            &format!("/v1/datasets/{other}/releases?fields=summary"),
            &analyst,
        )
        .await;
    assert_problem(response, StatusCode::NOT_FOUND, "not-found").await;
}

/// An empty group — a table row of zeros, or a vector of zeros — is released
/// like any other, by every mechanism, at the price of the same request on a table without it
/// (the price never depends on the counts); its forecast is finite and claims nothing
/// (`l2_bound` √2: x/N does not exist). The exponential mechanism's n = 0 has one candidate,
/// the prior, whose mean is the output.
async fn empty_groups_are_released_like_any_other(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(4.0, 1000.0).await;
    let releases = format!("/v1/datasets/{id}/releases");
    let preview_path = format!("{releases}/preview");
    let preview = |body: Value| {
        let app = &app;
        let path = &preview_path;
        async move {
            let response = app.post(path, ADMIN_TOKEN, &body).await;
            assert_eq!(response.status(), StatusCode::OK, "{body}");
            response.json::<Value>().await.unwrap()
        }
    };
    let with_empty = json!([[0, 0, 0, 0], [12, 0, 3, 1], [0, 0, 0, 0]]);
    let without = json!([[12, 0, 3, 1]]);
    let zeros = json!([0, 0, 0, 0]);
    // (mechanism, whether the empty rows get a Dirichlet forecast)
    let mechanisms = [
        (json!({"epsilon": 0.5}), true),
        (
            json!({"epsilon": 0.5, "mechanism": "posterior", "r": 0.5}),
            true,
        ),
        (
            json!({"epsilon": 0.5, "mechanism": "diffuse", "alpha": [1, 2, 3, 4]}),
            true,
        ),
        (
            json!({"mechanism": "explicit", "r": 0.1, "alpha": 5.0}),
            true,
        ),
        (
            json!({"epsilon": 0.5, "mechanism": "posterior", "prior_shape": [1, 2, 3, 4]}),
            true,
        ),
        // Empty rows are below a bound L > 0: no forecast, as for any row that breaks it.
        (
            json!({"epsilon": 0.5, "mechanism": "dirichlet", "lower_bound": 1}),
            false,
        ),
        (
            json!({"mechanism": "explicit", "r": 0.1, "alpha": 5, "lower_bound": [0, 1, 1, 1]}),
            false,
        ),
        (json!({"epsilon": 0.5, "mechanism": "gaussian"}), false),
        (json!({"mechanism": "gaussian", "sigma": 3.0}), false),
        (json!({"epsilon": 0.5, "mechanism": "laplace"}), false),
        (json!({"mechanism": "laplace", "scale": 4.0}), false),
    ];
    let with = |base: &Value, key: &str, value: &Value| {
        let mut body = base.clone();
        body[key] = value.clone();
        body
    };
    let mut spent = 0.0;
    for (mechanism, forecast) in &mechanisms {
        let kind = mechanism
            .get("mechanism")
            .cloned()
            .unwrap_or(json!("dirichlet"));
        let table = preview(with(mechanism, "table", &with_empty)).await;
        let reference = preview(with(mechanism, "table", &without)).await;
        assert_eq!(table["cost"], reference["cost"], "{mechanism}");
        assert_eq!(table["mechanism"], reference["mechanism"], "{mechanism}");
        let forecasts = table["forecasts"].as_array().unwrap();
        assert_eq!(forecasts.len(), 3);
        for row in [0, 2] {
            let f = &forecasts[row];
            if *forecast {
                assert_eq!(
                    f["l2_bound"],
                    json!(std::f64::consts::SQRT_2),
                    "{mechanism}"
                );
                let v = f["max_cell_variance"].as_f64().unwrap();
                assert!(v.is_finite() && v > 0.0, "{mechanism}: {f}");
                assert!(f["kl_tail"].is_null());
            } else {
                assert!(f.is_null(), "{mechanism}: {f}");
            }
        }
        let response = app
            .post(
                &releases,
                ADMIN_TOKEN,
                &with(mechanism, "table", &with_empty),
            )
            .await;
        assert_eq!(response.status(), StatusCode::CREATED, "{mechanism}");
        let released: Value = response.json().await.unwrap();
        assert_table(&released["distributions"], 3, 4);
        assert_eq!(released["mechanism"]["kind"], kind);
        assert_eq!(released["cost"], table["cost"]);
        spent += released["cost"]["epsilon"].as_f64().unwrap();

        // A vector of zeros, the same way (priced as a vector: a per-cell prior may price a
        // table higher, docs/PRIVACY.md "Tables").
        let vector = preview(with(mechanism, "counts", &zeros)).await;
        let reference = preview(with(mechanism, "counts", &without[0])).await;
        assert_eq!(vector["cost"], reference["cost"], "{mechanism}");
        if *forecast {
            let f = &vector["forecast"];
            assert_eq!(
                f["l2_bound"],
                json!(std::f64::consts::SQRT_2),
                "{mechanism}"
            );
            assert!(f["max_cell_variance"].as_f64().unwrap().is_finite());
        } else {
            assert!(vector["forecast"].is_null(), "{mechanism}");
        }
        let response = app
            .post(&releases, ADMIN_TOKEN, &with(mechanism, "counts", &zeros))
            .await;
        assert_eq!(response.status(), StatusCode::CREATED, "{mechanism}");
        let released: Value = response.json().await.unwrap();
        assert_distribution(&released["distribution"], 4);
        spent += released["cost"]["epsilon"].as_f64().unwrap();
    }
    assert!((app.budget(&id).await["spent"].as_f64().unwrap() - spent).abs() < 1e-9);

    // The exponential mechanism at n = 0: one candidate, the prior; its mean is the output.
    let body = json!({"counts": [0, 0], "mechanism": "exponential", "epsilon": 1, "prior": [2, 3]});
    let priced = preview(body.clone()).await;
    assert_eq!(priced["mechanism"]["n"], 0);
    assert_eq!(priced["mechanism"]["sensitivity"], 0.0);
    let bound = priced["forecast"]["hellinger_bound"].as_f64().unwrap();
    assert!(bound > 0.0 && bound <= 1.0, "{priced}");
    let response = app.post(&releases, ADMIN_TOKEN, &body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let released: Value = response.json().await.unwrap();
    assert_eq!(released["distribution"], json!([0.4, 0.6]));
    assert_eq!(released["mechanism"]["selected"], 0);
    assert_eq!(released["mechanism"]["posterior"], json!([2.0, 3.0]));
    assert_eq!(released["cost"], priced["cost"]);
}

/// Exponential parameters whose computation f64 cannot represent are refused
/// with the field named, before anything is drawn or charged.
async fn unrepresentable_exponential_parameters_are_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(4.0, 10.0).await;
    for (body, field) in [
        // schemathesis's case: lnΓ(4.79e307) overflows.
        (
            json!({"counts": [1, 0], "mechanism": "exponential", "epsilon": 9e-56, "prior": [5e-324, 4.79e307]}),
            "prior",
        ),
        (
            json!({"counts": [1, 0], "mechanism": "exponential", "epsilon": 1, "prior": [5e-324, 4.79e307]}),
            "prior",
        ),
        // Under the cap, but every distance cancels to 0 (Δ_g would be published as 0).
        (
            json!({"counts": [1, 0], "mechanism": "exponential", "epsilon": 1, "prior": [1, 562949953421312.0]}),
            "prior",
        ),
        (
            json!({"counts": [3, 7], "mechanism": "exponential", "epsilon": 1, "prior": [2, 1.2e15]}),
            "prior",
        ),
    ] {
        for path in ["releases/preview", "releases"] {
            let response = app
                .post(&format!("/v1/datasets/{id}/{path}"), ADMIN_TOKEN, &body)
                .await;
            let problem = assert_problem(
                response,
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-request",
            )
            .await;
            assert_eq!(problem["field"], field, "{body}: {problem}");
        }
    }
    assert_eq!(app.budget(&id).await["releases"], 0);
    // The case's ε alone: a selection so weak that it would run at ε_run = 0 (uniform,
    // ignoring the counts) and be charged 0 is refused — a release charged nothing would be
    // admitted by an exhausted ledger. Nothing is charged by the refusals.
    let exponential =
        |epsilon: f64| json!({"counts": [3, 7], "mechanism": "exponential", "epsilon": epsilon});
    for epsilon in [9e-56, 2f64.powi(-40), 1e-10] {
        for path in ["releases/preview", "releases"] {
            let response = app
                .post(
                    &format!("/v1/datasets/{id}/{path}"),
                    ADMIN_TOKEN,
                    &exponential(epsilon),
                )
                .await;
            let problem = assert_problem(
                response,
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-request",
            )
            .await;
            assert_eq!(problem["field"], "epsilon", "{epsilon}: {problem}");
        }
    }
    assert_eq!(app.budget(&id).await["releases"], 0);
    // The smallest ε it takes is charged something, never more than asked.
    let response = app
        .post(
            &format!("/v1/datasets/{id}/releases"),
            ADMIN_TOKEN,
            &exponential(2e-10),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let released: Value = response.json().await.unwrap();
    let cost = released["cost"]["epsilon"].as_f64().unwrap();
    assert!(cost > 0.0 && cost <= 2e-10, "{released}");
    // On a ledger of one grid unit: one such release fits, the next is refused.
    let tiny = app.create_dataset(4.0, 2f64.powi(-40)).await;
    let releases = format!("/v1/datasets/{tiny}/releases");
    let first = app.post(&releases, ADMIN_TOKEN, &exponential(2e-10)).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let second = app.post(&releases, ADMIN_TOKEN, &exponential(2e-10)).await;
    assert_problem(second, StatusCode::CONFLICT, "budget-exhausted").await;
    assert_eq!(app.budget(&tiny).await["releases"], 1);
}

/// Planning by KL through the API: a `kl` target is planned and forecast; the additive
/// baselines meet it smoothed, with the pseudo-count the plan reports; a release made as planned
/// (with that `smoothing`) is charged exactly the planned cost, records the pseudo-count and has
/// no zero cell; the listing says which mechanisms take `smoothing` and plan `kl`.
async fn kl_targets_and_smoothing_through_the_api(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(2.0, 10.0).await;
    let plan = |item: Value| {
        let app = &app;
        let id = id.clone();
        async move {
            let response = app
                .post(
                    &format!("/v1/datasets/{id}/plan"),
                    ADMIN_TOKEN,
                    &json!({ "items": [item] }),
                )
                .await;
            assert_eq!(response.status(), StatusCode::OK);
            let answer: Value = response.json().await.unwrap();
            answer["items"][0].clone()
        }
    };
    // `auto`: every mechanism with a KL bound is considered; the one chosen meets the target.
    let auto = plan(json!({"d": 6, "n": 500, "target": {"kl": 0.08}})).await;
    assert_eq!(auto["status"], "planned", "{auto}");
    assert!(auto["forecast"]["kl"].as_f64().unwrap() <= 0.08, "{auto}");
    let statuses: Vec<(&str, &str)> = auto["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["mechanism"].as_str().unwrap(),
                c["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        statuses.contains(&("laplace", "planned")) || statuses.contains(&("laplace", "chosen")),
        "{statuses:?}"
    );
    // The Laplace baseline alone: smoothed, with the pseudo-count in its parameters.
    let laplace =
        plan(json!({"d": 6, "n": 500, "mechanism": "laplace", "target": {"kl": 0.08}})).await;
    assert_eq!(laplace["status"], "planned", "{laplace}");
    let k = laplace["parameters"]["smoothing"]
        .as_f64()
        .expect("a pseudo-count");
    let epsilon = laplace["epsilon"].as_f64().unwrap();
    // Released as planned: the same cost, the pseudo-count recorded, no empty cell.
    let response = app
        .post(
            &format!("/v1/datasets/{id}/releases"),
            ADMIN_TOKEN,
            &json!({"counts": [400, 60, 30, 10, 0, 0], "mechanism": "laplace", "epsilon": epsilon, "smoothing": k}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let released: Value = response.json().await.unwrap();
    assert_eq!(released["cost"]["epsilon"], laplace["cost"], "{released}");
    assert_eq!(released["mechanism"]["smoothing"], json!(k));
    assert!(released["distribution"]
        .as_array()
        .unwrap()
        .iter()
        .all(|y| y.as_f64().unwrap() > 0.0));
    // Without smoothing a projected baseline has no KL bound: a KL target is out of its reach.
    let fixed = plan(
        json!({"d": 6, "n": 500, "mechanism": "gaussian", "sigma": 3, "target": {"kl": 0.08}}),
    )
    .await;
    assert_eq!(fixed["status"], "unreachable", "{fixed}");
    // A given `smoothing` is kept, not re-chosen.
    let given = plan(json!({"d": 6, "n": 500, "mechanism": "gaussian", "smoothing": 2.5, "target": {"kl": 0.08}})).await;
    assert_eq!(given["parameters"]["smoothing"], 2.5, "{given}");
    // A negative pseudo-count is refused, naming the field.
    let response = app
        .post(
            &format!("/v1/datasets/{id}/releases/preview"),
            ADMIN_TOKEN,
            &json!({"counts": [4, 6], "mechanism": "gaussian", "epsilon": 1, "smoothing": -1}),
        )
        .await;
    let problem = assert_problem(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    assert_eq!(problem["field"], "smoothing");
    // The listing.
    let listed: Value = app
        .get("/v1/mechanisms", ADMIN_TOKEN)
        .await
        .json()
        .await
        .unwrap();
    // (Named, not "every other mechanism": a new one says for itself what it takes.)
    let listed = listed["mechanisms"].as_array().unwrap();
    let listing = |name: &str| listed.iter().find(|m| m["name"] == name).unwrap();
    for (name, smoothing, kl) in [
        ("dirichlet", false, true),
        ("posterior", false, true),
        ("diffuse", false, true),
        ("explicit", false, true),
        ("gaussian", true, true),
        ("laplace", true, true),
        ("exponential", false, false),
    ] {
        let m = listing(name);
        let takes_smoothing = m["fields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["name"] == "smoothing");
        assert_eq!(takes_smoothing, smoothing, "{m}");
        let plans_kl = m["targets"].as_array().unwrap().contains(&json!("kl"));
        assert_eq!(plans_kl, kl, "{m}");
    }
    // Nothing was charged but the one release.
    assert_eq!(app.budget(&id).await["releases"], 1);
}

on_both_backends!(
    kl_targets_and_smoothing_through_the_api,
    exact_splits_and_exact_pricing,
    a_timed_out_release_is_a_problem_and_never_half_written,
    story,
    every_mechanism_releases_and_is_charged_at_the_ledger_order,
    dp_target_datasets_report_both_views,
    invalid_requests_are_refused_and_charge_nothing,
    analysts_are_confined_to_their_datasets,
    idempotent_retries_return_the_stored_release,
    a_replay_answers_the_original_201,
    keyed_releases_sent_together_are_charged_once_and_replayed,
    a_retry_is_replayed_after_the_budget_or_the_allocation_ran_out,
    concurrent_releases_never_overspend,
    operational_endpoints,
    baselines_are_discrete_priced_and_projected,
    tables_are_released_for_the_price_of_one_vector,
    invalid_tables_and_labels_are_refused,
    names_are_normalised_and_invisible_characters_refused,
    a_summary_listing_omits_outputs_and_mechanisms,
    empty_groups_are_released_like_any_other,
    unrepresentable_exponential_parameters_are_refused,
);
