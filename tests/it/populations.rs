//! Budgets that follow people, over the API on SQLite and PostgreSQL: populations whose cap spans
//! datasets (shared = sum, disjoint = max), placing datasets and populations in the tree, the
//! budget paths, and external charges (priced, idempotent, listed, in the audited hash chain).

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::app::{
    assert_problem, assert_problem_about, spawn_app, Backend, TestApp, ADMIN_TOKEN,
};

async fn put(app: &TestApp, path: &str, token: &str, body: &Value) -> reqwest::Response {
    app.client
        .put(app.url(path))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .expect("request sent")
}

async fn population(app: &TestApp, body: Value) -> Value {
    let response = app.post("/v1/populations", ADMIN_TOKEN, &body).await;
    assert_eq!(response.status(), StatusCode::CREATED, "{body}");
    response.json().await.unwrap()
}

async fn dataset_in(app: &TestApp, epsilon: f64, population: &str) -> String {
    let response = app
        .post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &json!({"name": "member", "budget": {"order": 2.0, "epsilon": epsilon},
                    "population": population}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["population"], population);
    body["id"].as_str().unwrap().to_owned()
}

fn release(epsilon: f64) -> Value {
    json!({"counts": [30, 12, 5, 0], "epsilon": epsilon})
}

async fn spent(app: &TestApp, population: &str) -> f64 {
    app.get_json(&format!("/v1/populations/{population}"), ADMIN_TOKEN)
        .await["spent"]
        .as_f64()
        .unwrap()
}

async fn populations_cap_their_datasets(backend: Backend) {
    let app = spawn_app(backend).await;
    let people = population(
        &app,
        json!({"name": "clinic patients", "budget": {"order": 2.0, "epsilon": 1.0}}),
    )
    .await;
    let people = people["id"].as_str().unwrap().to_owned();
    assert_eq!(
        app.get_json("/v1/populations", ADMIN_TOKEN).await["populations"][0]["children"],
        "shared"
    );
    let a = dataset_in(&app, 0.75, &people).await;
    let b = app.create_dataset(2.0, 0.75).await;
    // Attaching a dataset that spent nothing charges nothing.
    let placed = put(
        &app,
        &format!("/v1/datasets/{b}/population"),
        ADMIN_TOKEN,
        &json!({"population": people}),
    )
    .await;
    assert_eq!(placed.status(), StatusCode::OK);

    // Each dataset alone admits 0.5, but the population's 1.0 holds only two of them.
    for d in [&a, &b] {
        let r = app
            .post(
                &format!("/v1/datasets/{d}/releases"),
                ADMIN_TOKEN,
                &release(0.375),
            )
            .await;
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    assert_eq!(spent(&app, &people).await, 0.75);
    let refused = app
        .post(
            &format!("/v1/datasets/{a}/releases"),
            ADMIN_TOKEN,
            &release(0.3125),
        )
        .await;
    let problem =
        assert_problem(refused, StatusCode::CONFLICT, "population-budget-exhausted").await;
    assert_eq!(problem["population"], people.as_str());
    assert_eq!(problem["budget"]["remaining"], 0.25);
    // Nothing was charged by the refusal, anywhere.
    assert_eq!(spent(&app, &people).await, 0.75);
    let budget = app
        .get_json(&format!("/v1/datasets/{a}/budget"), ADMIN_TOKEN)
        .await;
    assert_eq!(budget["spent"], 0.375);
    let path = budget["path"].as_array().unwrap();
    assert_eq!(path.len(), 2);
    assert_eq!(path[0]["kind"], "dataset");
    assert_eq!(path[1]["kind"], "population");
    assert_eq!(path[1]["remaining"], 0.25);
    assert_eq!(path[1]["binding"], true);
    assert_eq!(path[0]["binding"], false);
    assert_eq!(budget["binding"], people.as_str());
    // What fits the population still goes.
    let fits = app
        .post(
            &format!("/v1/datasets/{a}/releases"),
            ADMIN_TOKEN,
            &release(0.25),
        )
        .await;
    assert_eq!(fits.status(), StatusCode::CREATED);
    assert_eq!(spent(&app, &people).await, 1.0);

    // A dataset that already spent 0.5 cannot join a population with 0.25 left; nothing changes.
    let spender = app.create_dataset(2.0, 1.0).await;
    let r = app
        .post(
            &format!("/v1/datasets/{spender}/releases"),
            ADMIN_TOKEN,
            &release(0.5),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let small = population(
        &app,
        json!({"name": "small", "budget": {"order": 2.0, "epsilon": 0.25}}),
    )
    .await;
    let small = small["id"].as_str().unwrap().to_owned();
    let refused = put(
        &app,
        &format!("/v1/datasets/{spender}/population"),
        ADMIN_TOKEN,
        &json!({"population": small}),
    )
    .await;
    assert_problem(refused, StatusCode::CONFLICT, "population-budget-exhausted").await;
    assert_eq!(spent(&app, &small).await, 0.0);
    assert_eq!(
        app.get_json(&format!("/v1/datasets/{spender}"), ADMIN_TOKEN)
            .await["population"],
        Value::Null
    );

    // Bad input: unknown parent, order mismatch, unknown population, bad children rule.
    for (body, field) in [
        (
            json!({"name": "x", "budget": {"order": 2.0, "epsilon": 1.0},
                   "parent": "00000000-0000-7000-8000-000000000000"}),
            "parent",
        ),
        (
            json!({"name": "x", "budget": {"order": 3.0, "epsilon": 1.0}, "parent": people}),
            "parent",
        ),
        (
            json!({"name": "x", "budget": {"order": 2.0, "epsilon": 1.0}, "children": "some"}),
            "children",
        ),
        (
            json!({"name": " ", "budget": {"order": 2.0, "epsilon": 1.0}}),
            "name",
        ),
    ] {
        let response = app.post("/v1/populations", ADMIN_TOKEN, &body).await;
        let problem = assert_problem(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
        assert_eq!(problem["field"], field, "{body}: {problem}");
    }
    let other_order = app.create_dataset(3.0, 1.0).await;
    let response = put(
        &app,
        &format!("/v1/datasets/{other_order}/population"),
        ADMIN_TOKEN,
        &json!({"population": people}),
    )
    .await;
    assert_problem(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    let response = app
        .post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &json!({"name": "x", "budget": {"order": 3.0, "epsilon": 1.0}, "population": people}),
        )
        .await;
    assert_problem(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;

    // Cycles: a node cannot move under itself or under its own child.
    let child = population(
        &app,
        json!({"name": "child", "budget": {"order": 2.0, "epsilon": 1.0}, "parent": small}),
    )
    .await;
    let child = child["id"].as_str().unwrap().to_owned();
    for parent in [&small, &child] {
        let response = put(
            &app,
            &format!("/v1/populations/{small}/parent"),
            ADMIN_TOKEN,
            &json!({"parent": parent}),
        )
        .await;
        assert_problem_about(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
            "cycle",
        )
        .await;
    }
    let path = app
        .get_json(&format!("/v1/populations/{child}/budget"), ADMIN_TOKEN)
        .await;
    assert_eq!(path["path"].as_array().unwrap().len(), 2);
    assert_eq!(path["path"][1]["id"], small.as_str());

    // Analysts may not create or list populations.
    let analyst = app
        .post("/v1/tokens", ADMIN_TOKEN, &json!({"datasets": [a]}))
        .await
        .json::<Value>()
        .await
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_problem(
        app.get("/v1/populations", &analyst).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
    // … but see the path above their dataset.
    let budget = app
        .get_json(&format!("/v1/datasets/{a}/budget"), &analyst)
        .await;
    assert_eq!(budget["path"][1]["id"], people.as_str());
}

async fn disjoint_nodes_take_the_maximum(backend: Backend) {
    let app = spawn_app(backend).await;
    let root = population(
        &app,
        json!({"name": "country", "budget": {"order": 2.0, "epsilon": 1.0},
               "children": "disjoint"}),
    )
    .await;
    let root = root["id"].as_str().unwrap().to_owned();
    let north = population(
        &app,
        json!({"name": "north", "budget": {"order": 2.0, "epsilon": 5.0}, "parent": root}),
    )
    .await;
    let north = north["id"].as_str().unwrap().to_owned();
    let south = dataset_in(&app, 5.0, &root).await;
    let n1 = dataset_in(&app, 5.0, &north).await;
    let n2 = dataset_in(&app, 5.0, &north).await;

    let go = |d: String, e: f64| {
        let app = &app;
        async move {
            app.post(
                &format!("/v1/datasets/{d}/releases"),
                ADMIN_TOKEN,
                &release(e),
            )
            .await
            .status()
        }
    };
    assert_eq!(go(n1.clone(), 0.5).await, StatusCode::CREATED);
    assert_eq!(go(n2.clone(), 0.25).await, StatusCode::CREATED);
    // north (shared) 0.75; the root is the max of its children: 0.75.
    assert_eq!(spent(&app, &north).await, 0.75);
    assert_eq!(spent(&app, &root).await, 0.75);
    // south up to 0.75 costs the root nothing more (max), beyond it only the excess.
    assert_eq!(go(south.clone(), 0.75).await, StatusCode::CREATED);
    assert_eq!(spent(&app, &root).await, 0.75);
    assert_eq!(go(south.clone(), 0.125).await, StatusCode::CREATED);
    assert_eq!(spent(&app, &root).await, 0.875);
    // north at 0.75 + 0.25 = 1.0 fits the root exactly; more does not.
    assert_eq!(go(n2.clone(), 0.125).await, StatusCode::CREATED);
    assert_eq!(spent(&app, &root).await, 0.875);
    assert_eq!(go(n1.clone(), 0.125).await, StatusCode::CREATED);
    assert_eq!(spent(&app, &root).await, 1.0);
    assert_eq!(go(n1.clone(), 0.125).await, StatusCode::CONFLICT);
    assert_eq!(spent(&app, &north).await, 1.0);
    // south may still grow to the root's 1.0.
    assert_eq!(go(south.clone(), 0.125).await, StatusCode::CREATED);
    assert_eq!(go(south.clone(), 0.125).await, StatusCode::CONFLICT);
    assert_eq!(spent(&app, &root).await, 1.0);

    let budget = app
        .get_json(&format!("/v1/datasets/{n1}/budget"), ADMIN_TOKEN)
        .await;
    let path = budget["path"].as_array().unwrap();
    assert_eq!(path.len(), 3);
    assert_eq!(path[2]["id"], root.as_str());
    assert_eq!(path[2]["remaining"], 0.0);
    assert_eq!(path[1]["remaining"], 4.0);
    assert_eq!(budget["binding"], root.as_str());

    // Detaching gives nothing back; moving a node brings its whole spend to the new parent.
    let placed = put(
        &app,
        &format!("/v1/datasets/{n1}/population"),
        ADMIN_TOKEN,
        &json!({"population": null}),
    )
    .await;
    assert_eq!(placed.status(), StatusCode::OK);
    assert_eq!(spent(&app, &north).await, 1.0);
    let other = population(
        &app,
        json!({"name": "elsewhere", "budget": {"order": 2.0, "epsilon": 2.0}}),
    )
    .await;
    let other = other["id"].as_str().unwrap().to_owned();
    let moved = put(
        &app,
        &format!("/v1/populations/{north}/parent"),
        ADMIN_TOKEN,
        &json!({"parent": other}),
    )
    .await;
    assert_eq!(moved.status(), StatusCode::OK);
    assert_eq!(spent(&app, &other).await, 1.0);
    assert_eq!(spent(&app, &root).await, 1.0);
}

async fn external_charges(backend: Backend) {
    let app = spawn_app(backend).await;
    let people = population(
        &app,
        json!({"name": "people", "budget": {"order": 2.0, "epsilon": 2.0}}),
    )
    .await;
    let people = people["id"].as_str().unwrap().to_owned();
    let d = dataset_in(&app, 1.5, &people).await;
    let charges = format!("/v1/datasets/{d}/charges");

    // Gaussian σ = 2, Δ = 1 at λ = 2: λΔ²/(2σ²) = 0.25, three times: 0.75 (rounded up to the
    // ledger grid, so at most a few grid units above).
    let body = json!({"mechanism": "gaussian", "sigma": 2.0, "sensitivity": 1.0, "count": 3,
                      "label": "dp-sgd run"});
    let first = app
        .post_with_key(&charges, ADMIN_TOKEN, "run-1", &body)
        .await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["kind"], "external");
    assert_eq!(first["mechanism"]["kind"], "external");
    assert_eq!(first["mechanism"]["mechanism"], "gaussian");
    assert!(first.get("distribution").is_none());
    let cost = first["cost"]["epsilon"].as_f64().unwrap();
    assert!((0.75..0.75 + 1e-9).contains(&cost), "{cost}");
    assert_eq!(spent(&app, &people).await, cost);
    // A retry replays, charging nothing; a different body under the key is refused.
    let again = app
        .post_with_key(&charges, ADMIN_TOKEN, "run-1", &body)
        .await;
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(again.headers().get("idempotent-replayed").unwrap(), "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["id"], first["id"]);
    assert_eq!(spent(&app, &people).await, cost);
    let other = json!({"mechanism": "gaussian", "sigma": 3.0, "sensitivity": 1.0});
    let reused = app
        .post_with_key(&charges, ADMIN_TOKEN, "run-1", &other)
        .await;
    assert_problem(
        reused,
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency-key-reused",
    )
    .await;

    // Composed: pure ε = 0.5 (at most what randomized response costs at λ = 2,
    // ln((e + e^−0.5)/(e^0.5 + 1)) ≈ 0.227) plus zCDP ρ = 0.125 (λρ = 0.25).
    let composed = json!({"mechanism": "composed", "events": [
        {"mechanism": "pure", "epsilon": 0.5},
        {"mechanism": "zcdp", "rho": 0.125}
    ]});
    let second = app.post(&charges, ADMIN_TOKEN, &composed).await;
    assert_eq!(second.status(), StatusCode::CREATED);
    let second: Value = second.json().await.unwrap();
    let cost2 = second["cost"]["epsilon"].as_f64().unwrap();
    let e = std::f64::consts::E;
    let want = ((e + (-0.5f64).exp()) / (0.5f64.exp() + 1.0)).ln() + 0.25;
    assert!((want..want + 1e-9).contains(&cost2), "{cost2} vs {want}");
    // Refused by the dataset: 1.5 − (0.75 + 0.48) < 0.5.
    let too_much = json!({"mechanism": "rdp", "epsilon": 0.5});
    assert_problem(
        app.post(&charges, ADMIN_TOKEN, &too_much).await,
        StatusCode::CONFLICT,
        "budget-exhausted",
    )
    .await;

    // Bad descriptions: 422, nothing charged.
    for bad in [
        json!({"mechanism": "exponential", "epsilon": 1.0}),
        json!({"mechanism": "gaussian", "sigma": 0.0, "sensitivity": 1.0}),
        json!({"mechanism": "gaussian", "sigma": -1.0, "sensitivity": 1.0}),
        json!({"mechanism": "laplace", "scale": 1.0}),
        json!({"mechanism": "pure", "epsilon": 1.0, "count": 0}),
        json!({"mechanism": "rdp", "epsilon": -0.1}),
        json!({"mechanism": "composed", "events": []}),
        json!({"mechanism": "zcdp", "rho": 1.0, "sigma": 1.0}),
    ] {
        let response = app.post(&charges, ADMIN_TOKEN, &bad).await;
        assert_problem(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
    }
    let budget = app
        .get_json(&format!("/v1/datasets/{d}/budget"), ADMIN_TOKEN)
        .await;
    assert_eq!(budget["spent"].as_f64().unwrap(), cost + cost2);

    // A release after the charges; all three are listed, and the chain verifies.
    let r = app
        .post(
            &format!("/v1/datasets/{d}/releases"),
            ADMIN_TOKEN,
            &release(0.125),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let list = app
        .get_json(&format!("/v1/datasets/{d}/releases"), ADMIN_TOKEN)
        .await;
    let items = list["items"].as_array().expect("items");
    let kinds: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["release", "external", "external"]);
    assert!(items[1].get("distribution").is_none());
    let audit = app
        .get_json(&format!("/v1/datasets/{d}/audit"), ADMIN_TOKEN)
        .await;
    assert_eq!(audit["ok"], true, "{audit}");

    // A population refuses an external charge the dataset alone would admit.
    let small = population(
        &app,
        json!({"name": "small", "budget": {"order": 2.0, "epsilon": 0.25}}),
    )
    .await;
    let small = small["id"].as_str().unwrap().to_owned();
    let d2 = dataset_in(&app, 1.0, &small).await;
    let refused = app
        .post(
            &format!("/v1/datasets/{d2}/charges"),
            ADMIN_TOKEN,
            &json!({"mechanism": "rdp", "epsilon": 0.5}),
        )
        .await;
    assert_problem(refused, StatusCode::CONFLICT, "population-budget-exhausted").await;
    assert_eq!(spent(&app, &small).await, 0.0);
}

on_both_backends!(
    populations_cap_their_datasets,
    disjoint_nodes_take_the_maximum,
    external_charges
);
