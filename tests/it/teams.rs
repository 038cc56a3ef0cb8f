//! Budgets for teams over the API, on SQLite and PostgreSQL: per-analyst allocations under the
//! dataset's cap (set, listed, audited, enforced, lowered, removed), and named cells and rows.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::app::{assert_problem, spawn_app, Backend, TestApp, ADMIN_TOKEN};

/// A token confined to `datasets`: (its id, its secret).
async fn token(app: &TestApp, datasets: &[&str]) -> (String, String) {
    let response = app
        .post("/v1/tokens", ADMIN_TOKEN, &json!({ "datasets": datasets }))
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    (
        body["id"].as_str().unwrap().to_owned(),
        body["token"].as_str().unwrap().to_owned(),
    )
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

async fn delete(app: &TestApp, path: &str, token: &str) -> reqwest::Response {
    app.client
        .delete(app.url(path))
        .bearer_auth(token)
        .send()
        .await
        .expect("request sent")
}

fn release(epsilon: f64) -> Value {
    json!({"counts": [30, 12, 5, 0], "epsilon": epsilon})
}

async fn allocations_share_a_dataset(backend: Backend) {
    let app = spawn_app(backend).await;
    let dataset = app.create_dataset(2.0, 1.0).await;
    let (a_id, a) = token(&app, &[&dataset]).await;
    let (b_id, b) = token(&app, &[&dataset]).await;
    let releases = format!("/v1/datasets/{dataset}/releases");
    let allocations = format!("/v1/datasets/{dataset}/allocations");

    // Only the admin sets allocations; an analyst is 403, an unknown token 404.
    let set = |token_id: &str| format!("{allocations}/{token_id}");
    let forbidden = put(&app, &set(&a_id), &a, &json!({"epsilon": 0.5})).await;
    assert_problem(forbidden, StatusCode::FORBIDDEN, "forbidden").await;
    let unknown = put(&app, &set("nobody"), ADMIN_TOKEN, &json!({"epsilon": 0.5})).await;
    assert_problem(unknown, StatusCode::NOT_FOUND, "not-found").await;
    for bad in [json!({"epsilon": -1}), json!({"epsilon": "x"}), json!({})] {
        let response = put(&app, &set(&a_id), ADMIN_TOKEN, &bad).await;
        assert_problem(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
    }

    // A spends 0.25 before any allocation; an allocation of 0.375 counts it.
    let first = app.post(&releases, &a, &release(0.25)).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let response = put(&app, &set(&a_id), ADMIN_TOKEN, &json!({"epsilon": 0.375})).await;
    assert_eq!(response.status(), StatusCode::OK);
    let view: Value = response.json().await.unwrap();
    assert_eq!(view["token_id"], a_id.as_str());
    assert_eq!(view["epsilon"], 0.375);
    assert_eq!(view["spent"], 0.25);
    assert_eq!(view["remaining"], 0.125);
    // Allocations may add up to more than the dataset: B gets 0.75, 0.375 + 0.75 > 1.
    let response = put(&app, &set(&b_id), ADMIN_TOKEN, &json!({"epsilon": 0.75})).await;
    assert_eq!(response.status(), StatusCode::OK);

    // A's budget shows A's allocation; the admin's does not carry one.
    let budget: Value = app
        .get(&format!("/v1/datasets/{dataset}/budget"), &a)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(budget["allocation"]["remaining"], 0.125, "{budget}");
    assert!(app.budget(&dataset).await.get("allocation").is_none());

    // A preview of 0.25 by A does not fit the allocation although it fits the dataset.
    let preview: Value = app
        .post(&format!("{releases}/preview"), &a, &release(0.25))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(preview["admissible"], false, "{preview}");
    assert_eq!(preview["allocation_after"]["remaining"], 0.125);

    // The release is refused with the allocation's own problem type, charging nothing.
    let refused = app.post(&releases, &a, &release(0.25)).await;
    let problem = assert_problem(refused, StatusCode::CONFLICT, "allocation-exhausted").await;
    assert_eq!(problem["allocation"]["remaining"], 0.125, "{problem}");
    assert_eq!(problem["budget"]["spent"], 0.25, "{problem}");
    assert_eq!(app.budget(&dataset).await["spent"], 0.25);
    // Refused again (this time before drawing: the replica remembers the refusal and re-reads
    // the allocation); raised by the admin, the same release is admitted at once, and lowered
    // back, what is left of it fits exactly.
    let again = app.post(&releases, &a, &release(0.25)).await;
    assert_problem(again, StatusCode::CONFLICT, "allocation-exhausted").await;
    let response = put(&app, &set(&a_id), ADMIN_TOKEN, &json!({"epsilon": 0.5})).await;
    assert_eq!(response.status(), StatusCode::OK);
    let raised = app.post(&releases, &a, &release(0.125)).await;
    assert_eq!(raised.status(), StatusCode::CREATED);
    let response = put(&app, &set(&a_id), ADMIN_TOKEN, &json!({"epsilon": 0.375})).await;
    assert_eq!(response.status(), StatusCode::OK);
    let over = app.post(&releases, &a, &release(0.125)).await;
    assert_problem(over, StatusCode::CONFLICT, "allocation-exhausted").await;

    // B draws on its own allocation; the dataset cap binds before B's allocation does.
    let b_release = app.post(&releases, &b, &release(0.5)).await;
    assert_eq!(b_release.status(), StatusCode::CREATED);
    let capped = app.post(&releases, &b, &release(0.25)).await;
    assert_problem(capped, StatusCode::CONFLICT, "budget-exhausted").await;

    // Lowering A's allocation below what A spent blocks A and loses nothing.
    let response = put(&app, &set(&a_id), ADMIN_TOKEN, &json!({"epsilon": 0.125})).await;
    let view: Value = response.json().await.unwrap();
    assert_eq!(
        (view["spent"].clone(), view["remaining"].clone()),
        (json!(0.375), json!(0.0))
    );

    // The admin lists every allocation and change; an analyst sees only their own.
    let listed: Value = app
        .get(&allocations, ADMIN_TOKEN)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["order"], 2.0);
    assert_eq!(
        listed["allocations"].as_array().unwrap().len(),
        2,
        "{listed}"
    );
    let changes = listed["changes"].as_array().unwrap();
    let trail: Vec<_> = changes
        .iter()
        .map(|c| {
            (
                c["token_id"].as_str().unwrap().to_owned(),
                c["old_epsilon"].clone(),
                c["new_epsilon"].clone(),
            )
        })
        .collect();
    assert_eq!(
        trail,
        vec![
            (a_id.clone(), Value::Null, json!(0.375)),
            (b_id.clone(), Value::Null, json!(0.75)),
            (a_id.clone(), json!(0.375), json!(0.5)),
            (a_id.clone(), json!(0.5), json!(0.375)),
            (a_id.clone(), json!(0.375), json!(0.125)),
        ]
    );
    assert!(changes
        .iter()
        .all(|c| c["changed_by"] == "admin" && c["changed_at"].is_string()));
    // A retried PUT of the same value changes nothing and is not recorded.
    let same = put(&app, &set(&b_id), ADMIN_TOKEN, &json!({"epsilon": 0.75})).await;
    assert_eq!(same.status(), StatusCode::OK);
    let own: Value = app.get(&allocations, &a).await.json().await.unwrap();
    assert_eq!(own["allocations"].as_array().unwrap().len(), 1);
    assert_eq!(own["allocations"][0]["token_id"], a_id.as_str());
    assert_eq!(own["changes"].as_array().unwrap().len(), 4);

    // Removing it: gone from the list, recorded, and a second removal is 404.
    let removed = delete(&app, &set(&a_id), ADMIN_TOKEN).await;
    assert_eq!(removed.status(), StatusCode::NO_CONTENT);
    let again = delete(&app, &set(&a_id), ADMIN_TOKEN).await;
    assert_problem(again, StatusCode::NOT_FOUND, "not-found").await;
    let listed: Value = app
        .get(&allocations, ADMIN_TOKEN)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["allocations"].as_array().unwrap().len(), 1);
    assert_eq!(listed["changes"].as_array().unwrap().len(), 6);
    // Without an allocation A draws on the dataset as before (0.125 of it is left).
    let free = app.post(&releases, &a, &release(0.125)).await;
    assert_eq!(free.status(), StatusCode::CREATED);
    assert_eq!(app.budget(&dataset).await["spent"], 1.0);
}

async fn cells_and_rows_have_names(backend: Backend) {
    let app = spawn_app(backend).await;
    let cells = json!(["flu", "asthma", "measles", "other"]);
    let response = app
        .post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &json!({"name": "named", "budget": {"order": 2, "epsilon": 2.0}, "cells": cells}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let dataset: Value = response.json().await.unwrap();
    assert_eq!(dataset["cells"], cells);
    let id = dataset["id"].as_str().unwrap();
    let releases = format!("/v1/datasets/{id}/releases");

    // A release of another length is refused, naming the field.
    let wrong = app
        .post(
            &releases,
            ADMIN_TOKEN,
            &json!({"counts": [1, 2, 3], "epsilon": 0.1}),
        )
        .await;
    let problem = assert_problem(wrong, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
    assert_eq!(problem["field"], "counts");
    let wrong_rows = app
        .post(
            &releases,
            ADMIN_TOKEN,
            &json!({"table": [[1, 2, 3], [4, 5, 6]], "epsilon": 0.1}),
        )
        .await;
    let problem = assert_problem(
        wrong_rows,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    assert_eq!(problem["field"], "table");

    // Previews, releases, listings and single releases carry the names.
    let preview: Value = app
        .post(&format!("{releases}/preview"), ADMIN_TOKEN, &release(0.1))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(preview["cells"], cells);
    let vector: Value = app
        .post(&releases, ADMIN_TOKEN, &release(0.1))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(vector["cells"], cells);
    assert!(vector.get("row_names").is_none());
    let table_body = json!({
        "table": [[30, 12, 5, 0], [0, 0, 0, 0], [8, 1, 0, 2]],
        "row_names": ["0-17", "18-64", "65+"],
        "epsilon": 0.2,
    });
    let previewed: Value = app
        .post(&format!("{releases}/preview"), ADMIN_TOKEN, &table_body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(previewed["row_names"], json!(["0-17", "18-64", "65+"]));
    assert_eq!(previewed["forecasts"].as_array().unwrap().len(), 3);
    let response = app
        .post_with_key(&releases, ADMIN_TOKEN, "named-table", &table_body)
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let table: Value = response.json().await.unwrap();
    assert_eq!(table["row_names"], json!(["0-17", "18-64", "65+"]));
    assert_eq!(table["cells"], cells);
    assert_eq!(table["distributions"].as_array().unwrap().len(), 3);
    // A replay returns the names too; the same key with other row names is another request.
    let replay: Value = app
        .post_with_key(&releases, ADMIN_TOKEN, "named-table", &table_body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(replay, table);
    let renamed = json!({
        "table": [[30, 12, 5, 0], [0, 0, 0, 0], [8, 1, 0, 2]],
        "row_names": ["kids", "adults", "seniors"],
        "epsilon": 0.2,
    });
    let reused = app
        .post_with_key(&releases, ADMIN_TOKEN, "named-table", &renamed)
        .await;
    assert_problem(
        reused,
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency-key-reused",
    )
    .await;
    let one: Value = app
        .get(
            &format!("{releases}/{}", table["id"].as_str().unwrap()),
            ADMIN_TOKEN,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (one["cells"].clone(), one["row_names"].clone()),
        (cells.clone(), table["row_names"].clone())
    );
    let page: Value = app.get(&releases, ADMIN_TOKEN).await.json().await.unwrap();
    assert_eq!(page["cells"], cells, "{page}");
    assert_eq!(page["items"][0]["row_names"], table["row_names"]);
    assert!(
        page["items"][0].get("cells").is_none(),
        "a page names the cells once"
    );

    // Row names: only with a table, one distinct valid name per row.
    for (bad, why) in [
        (
            json!({"counts": [1, 2, 3, 4], "row_names": ["a"], "epsilon": 0.1}),
            "with counts",
        ),
        (
            json!({"table": [[1, 2, 3, 4]], "row_names": ["a", "b"], "epsilon": 0.1}),
            "too many",
        ),
        (
            json!({"table": [[1, 2, 3, 4], [1, 1, 1, 1]], "row_names": ["a", "a"], "epsilon": 0.1}),
            "repeated",
        ),
        (
            json!({"table": [[1, 2, 3, 4]], "row_names": ["a\nb"], "epsilon": 0.1}),
            "control",
        ),
        (
            json!({"table": [[1, 2, 3, 4]], "row_names": [""], "epsilon": 0.1}),
            "empty",
        ),
    ] {
        let response = app.post(&releases, ADMIN_TOKEN, &bad).await;
        let problem = assert_problem(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
        assert_eq!(problem["field"], "row_names", "{why}: {problem}");
    }
    // Cell names at registration: distinct, valid, at least two.
    for bad in [
        json!(["a"]),
        json!(["a", "a"]),
        json!(["a", ""]),
        json!(["a", 1]),
        json!([]),
    ] {
        let response = app
            .post(
                "/v1/datasets",
                ADMIN_TOKEN,
                &json!({"name": "bad", "budget": {"order": 2, "epsilon": 1}, "cells": bad}),
            )
            .await;
        let problem = assert_problem(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
        assert_eq!(
            problem["field"].as_str().map(|f| f.starts_with("cells")),
            Some(true),
            "{problem}"
        );
    }
    // A dataset without names answers without them.
    let plain = app.create_dataset(2.0, 1.0).await;
    let shown: Value = app
        .get(&format!("/v1/datasets/{plain}"), ADMIN_TOKEN)
        .await
        .json()
        .await
        .unwrap();
    assert!(shown.get("cells").is_none());
}

/// Accuracy-first planning over the API: from public inputs only, nothing charged; the plan's
/// costs are what the releases made at its ε are then charged; an analyst's plan fits what the
/// analyst may spend (their allocation, when lower than the dataset's remaining budget).
async fn plans_cost_what_releases_are_charged(backend: Backend) {
    let app = spawn_app(backend).await;
    let dataset = app.create_dataset(2.0, 2.0).await;
    let plan_path = format!("/v1/datasets/{dataset}/plan");
    let items = json!({"items": [
        {"d": 6, "n": 5000, "mechanism": "auto", "target": {"l2": 0.05, "confidence": 0.95}},
        {"d": 6, "n_lower_bound": 1000, "mechanism": "dirichlet", "target": {"cell_sd": 0.05}},
        {"d": 3, "rows": 4, "n": 100, "mechanism": "gaussian", "epsilon": 0.25},
        {"d": 40, "n": 10, "mechanism": "dirichlet", "target": {"l2": 0.001}},
    ]});
    let response = app.post(&plan_path, ADMIN_TOKEN, &items).await;
    assert_eq!(response.status(), StatusCode::OK);
    let plan: Value = response.json().await.unwrap();
    assert_eq!(plan["order"], 2.0);
    assert_eq!(plan["remaining"], 2.0);
    let answers = plan["items"].as_array().unwrap();
    assert_eq!(answers.len(), 4);
    // A target no mechanism reaches with 10 records is unreachable, with what would reach it.
    assert_eq!(answers[3]["status"], "unreachable", "{}", answers[3]);
    assert!(answers[3]["shortfall"]["best"]["l2"].as_f64().unwrap() > 0.001);
    assert_eq!(plan["unreachable"], 1, "{plan:#}");
    assert_eq!(plan["fits"], false, "an unreachable item does not fit");
    // Planning charged nothing.
    assert_eq!(app.budget(&dataset).await["spent"], 0.0);

    // Release the three planned items at their ε and mechanism: each is charged its planned cost.
    let releases = format!("/v1/datasets/{dataset}/releases");
    let mut charged = 0.0;
    for (answer, input) in answers[..3].iter().zip([
        json!({"counts": [2000, 1500, 900, 400, 150, 50]}),
        json!({"counts": [500, 250, 125, 75, 35, 15]}),
        json!({"table": [[40, 30, 30], [5, 0, 0], [0, 0, 0], [20, 20, 0]]}),
    ]) {
        assert_eq!(answer["status"], "planned", "{answer}");
        let mut body = input.clone();
        body["mechanism"] = answer["mechanism"].clone();
        body["epsilon"] = answer["epsilon"].clone();
        let response = app.post(&releases, ADMIN_TOKEN, &body).await;
        assert_eq!(response.status(), StatusCode::CREATED, "{body}");
        let release: Value = response.json().await.unwrap();
        assert_eq!(release["cost"]["epsilon"], answer["cost"], "{answer}");
        charged += release["cost"]["epsilon"].as_f64().unwrap();
    }
    assert_eq!(plan["total_cost"].as_f64().unwrap(), charged);

    // An analyst with an allocation below the dataset's remaining budget plans against it.
    let (id, analyst) = token(&app, &[&dataset]).await;
    let response = put(
        &app,
        &format!("/v1/datasets/{dataset}/allocations/{id}"),
        ADMIN_TOKEN,
        &json!({"epsilon": 0.125}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let one = json!({"items": [{"d": 6, "n": 5000, "mechanism": "dirichlet", "epsilon": 0.25}]});
    let mine: Value = app
        .post(&plan_path, &analyst, &one)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(mine["remaining"], 0.125);
    assert_eq!(mine["fits"], false);
    let fitting =
        json!({"items": [{"d": 6, "n": 5000, "mechanism": "dirichlet", "epsilon": 0.125}]});
    let mine: Value = app
        .post(&plan_path, &analyst, &fitting)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(mine["fits"], true, "{mine}");

    // Refusals name the item's field; another dataset's analyst gets 404.
    for (bad, field) in [
        (json!({"items": []}), "items"),
        (
            json!({"items": [{"d": 1, "n": 10, "epsilon": 1}]}),
            "items[0].d",
        ),
        (json!({"items": [{"d": 4, "epsilon": 1}]}), "items[0].n"),
        (json!({"items": [{"d": 4, "n": 10}]}), "items[0].target"),
        (
            json!({"items": [{"d": 4, "n": 10, "target": {"l2": 0.1, "confidence": 1.5}}]}),
            "items[0].target.confidence",
        ),
    ] {
        let response = app.post(&plan_path, ADMIN_TOKEN, &bad).await;
        let problem = assert_problem(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
        assert_eq!(problem["field"], field, "{bad}: {problem}");
    }
    let elsewhere = app.create_dataset(2.0, 1.0).await;
    let response = app
        .post(&format!("/v1/datasets/{elsewhere}/plan"), &analyst, &one)
        .await;
    assert_problem(response, StatusCode::NOT_FOUND, "not-found").await;
}

on_both_backends!(
    allocations_share_a_dataset,
    cells_and_rows_have_names,
    plans_cost_what_releases_are_charged
);
