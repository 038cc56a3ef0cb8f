//! Budgets over time, over the API on SQLite and PostgreSQL: datasets split into blocks, releases
//! and charges that name the blocks they read and are charged on every one of them (all or
//! nothing), the blocks listing and the budget view, and a population above a blocked dataset.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::app::{
    assert_problem, assert_problem_about, spawn_app, Backend, TestApp, ADMIN_TOKEN,
};

/// A dataset split by `period`, each block capped at `epsilon` (RDP at order 2).
async fn blocked(app: &TestApp, period: &str, epsilon: f64) -> String {
    let response = app
        .post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &json!({"name": "visits", "budget": {"order": 2.0, "epsilon": epsilon},
                    "blocks": {"period": period}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["blocks"], json!({"period": period}), "{body}");
    assert_eq!(
        body["budget"]["epsilon"], epsilon,
        "the budget is each block's cap"
    );
    body["id"].as_str().unwrap().to_owned()
}

/// A release of cost exactly `epsilon` (a fully specified mechanism, priced at the ledger order)
/// reading `blocks`.
fn charge(epsilon: f64, blocks: Value) -> Value {
    let mut body = json!({"mechanism": "rdp", "epsilon": epsilon});
    body.as_object_mut()
        .unwrap()
        .extend(blocks.as_object().unwrap().clone());
    body
}

async fn spends(app: &TestApp, d: &str, from: &str, to: &str) -> Vec<(String, f64)> {
    let list = app
        .get_json(
            &format!("/v1/datasets/{d}/blocks?from={from}&to={to}"),
            ADMIN_TOKEN,
        )
        .await;
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            assert_eq!(
                b["remaining"].as_f64().unwrap(),
                b["total"].as_f64().unwrap() - b["spent"].as_f64().unwrap()
            );
            (
                b["key"].as_str().unwrap().to_owned(),
                b["spent"].as_f64().unwrap(),
            )
        })
        .collect()
}

async fn registration_refuses_bad_periods(backend: Backend) {
    let app = spawn_app(backend).await;
    for blocks in [
        json!({"period": "year"}),
        json!({}),
        json!({"period": "day", "x": 1}),
    ] {
        let response = app
            .post(
                "/v1/datasets",
                ADMIN_TOKEN,
                &json!({"name": "x", "budget": {"order": 2.0, "epsilon": 1.0}, "blocks": blocks}),
            )
            .await;
        assert!(
            response.status() == StatusCode::UNPROCESSABLE_ENTITY,
            "{blocks}: {}",
            response.status()
        );
    }
}

async fn releases_are_charged_on_every_block(backend: Backend) {
    let app = spawn_app(backend).await;
    let d = blocked(&app, "day", 1.0).await;
    let week = json!({"blocks": {"from": "2026-12-01", "to": "2026-12-07"}});

    // A week of days, each charged the full cost.
    let r = app
        .post(
            &format!("/v1/datasets/{d}/charges"),
            ADMIN_TOKEN,
            &charge(0.25, week.clone()),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let r: Value = r.json().await.unwrap();
    assert_eq!(
        r["blocks"],
        json!({"from": "2026-12-01", "to": "2026-12-07"})
    );
    // An external charge is inflated by a grid quantum or so, like every charge.
    let q = r["cost"]["epsilon"].as_f64().unwrap();
    assert!((0.25..0.2501).contains(&q));
    let s = spends(&app, &d, "2026-11-30", "2026-12-08").await;
    assert_eq!(s.len(), 9);
    assert_eq!(s[0], ("2026-11-30".into(), 0.0));
    assert!(s[1..8].iter().all(|(_, spent)| *spent == q), "{s:?}");
    assert_eq!(s[8], ("2026-12-08".into(), 0.0));

    // A drawn release on one block.
    let released = app
        .post(
            &format!("/v1/datasets/{d}/releases"),
            ADMIN_TOKEN,
            &json!({"counts": [30, 12, 5], "epsilon": 0.5, "block": "2026-12-07"}),
        )
        .await;
    assert_eq!(released.status(), StatusCode::CREATED);
    let released: Value = released.json().await.unwrap();
    assert_eq!(
        released["blocks"],
        json!({"from": "2026-12-07", "to": "2026-12-07"})
    );
    let cost = released["cost"]["epsilon"].as_f64().unwrap();
    assert!(cost <= 0.5 && cost > 0.0);
    let after = q + cost;
    assert_eq!(
        spends(&app, &d, "2026-12-07", "2026-12-07").await[0].1,
        after
    );

    // A range whose last day lacks room: 409 naming it, nothing charged on any day.
    let refused = app
        .post(
            &format!("/v1/datasets/{d}/charges"),
            ADMIN_TOKEN,
            &charge(
                0.5,
                json!({"blocks": {"from": "2026-12-05", "to": "2026-12-09"}}),
            ),
        )
        .await;
    let problem = assert_problem_about(
        refused,
        StatusCode::CONFLICT,
        "budget-exhausted",
        "2026-12-07",
    )
    .await;
    assert_eq!(problem["block"], "2026-12-07");
    assert_eq!(problem["budget"]["spent"], after);
    let s = spends(&app, &d, "2026-12-05", "2026-12-09").await;
    assert_eq!(
        s.iter().map(|(_, v)| *v).collect::<Vec<_>>(),
        vec![q, q, after, 0.0, 0.0],
        "a refused release charged nothing anywhere"
    );

    // The preview says the same without charging.
    let preview = app
        .post(
            &format!("/v1/datasets/{d}/releases/preview"),
            ADMIN_TOKEN,
            &json!({"counts": [30, 12, 5], "epsilon": 0.5,
                    "blocks": {"from": "2026-12-05", "to": "2026-12-09"}}),
        )
        .await;
    assert_eq!(preview.status(), StatusCode::OK);
    assert_eq!(preview.json::<Value>().await.unwrap()["admissible"], false);
    let preview = app
        .post(
            &format!("/v1/datasets/{d}/releases/preview"),
            ADMIN_TOKEN,
            &json!({"counts": [30, 12, 5], "epsilon": 0.5, "block": "2026-12-08"}),
        )
        .await;
    assert_eq!(preview.json::<Value>().await.unwrap()["admissible"], true);

    // The budget view: the period, each block's cap, the most-spent block.
    let budget = app
        .get_json(&format!("/v1/datasets/{d}/budget"), ADMIN_TOKEN)
        .await;
    assert_eq!(budget["blocks"]["period"], "day");
    assert_eq!(budget["blocks"]["total"], 1.0);
    assert_eq!(budget["blocks"]["most_spent"]["key"], "2026-12-07");
    assert_eq!(budget["blocks"]["most_spent"]["spent"], after);

    // The release log covers blocked releases like any other.
    let audit = app
        .get_json(&format!("/v1/datasets/{d}/audit"), ADMIN_TOKEN)
        .await;
    assert_eq!(audit["ok"], true, "{audit}");
}

async fn blocks_are_required_exactly_where_they_exist(backend: Backend) {
    let app = spawn_app(backend).await;
    let d = blocked(&app, "week", 1.0).await;
    let plain = app.create_dataset(2.0, 1.0).await;
    let release = |extra: Value| {
        let mut body = json!({"counts": [3, 4], "epsilon": 0.25});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let cases = [
        (&d, json!({}), "blocks"),
        (&d, json!({"block": "2026-12-05"}), "block"),
        (&d, json!({"block": "2026-W54"}), "block"),
        (&d, json!({"block": "2021-W53"}), "block"),
        (
            &d,
            json!({"blocks": {"from": "2026-W49", "to": "2026-W4"}}),
            "blocks.to",
        ),
        (
            &d,
            json!({"blocks": {"from": "2026-W49", "to": "2026-W48"}}),
            "blocks",
        ),
        (
            &d,
            json!({"block": "2026-W49", "blocks": {"from": "2026-W49", "to": "2026-W49"}}),
            "blocks",
        ),
        // 401 weeks (2020 and 2026 have 53): past the default cap of 400 blocks.
        (
            &d,
            json!({"blocks": {"from": "2020-W01", "to": "2027-W35"}}),
            "blocks",
        ),
        (&plain, json!({"block": "2026-W49"}), "block"),
        (
            &plain,
            json!({"blocks": {"from": "2026-W49", "to": "2026-W49"}}),
            "blocks",
        ),
    ];
    for (id, extra, field) in cases {
        for path in ["releases", "releases/preview"] {
            let response = app
                .post(
                    &format!("/v1/datasets/{id}/{path}"),
                    ADMIN_TOKEN,
                    &release(extra.clone()),
                )
                .await;
            let problem = assert_problem(
                response,
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-request",
            )
            .await;
            assert_eq!(problem["field"], field, "{extra} on {path}: {problem}");
        }
        let response = app
            .post(
                &format!("/v1/datasets/{id}/charges"),
                ADMIN_TOKEN,
                &charge(0.25, extra.clone()),
            )
            .await;
        let problem = assert_problem(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
        assert_eq!(problem["field"], field, "{extra} on charges: {problem}");
    }
    // 400 weeks is within the cap.
    let ok = app
        .post(
            &format!("/v1/datasets/{d}/releases"),
            ADMIN_TOKEN,
            &release(json!({"blocks": {"from": "2020-W01", "to": "2027-W34"}})),
        )
        .await;
    assert_eq!(ok.status(), StatusCode::CREATED);
    let edge = spends(&app, &d, "2027-W34", "2027-W35").await;
    assert!(edge[0].1 > 0.0 && edge[1].1 == 0.0, "{edge:?}");
    // The listing refuses what a release refuses.
    for query in [
        "from=2026-W49&to=2026-W48",
        "from=2026-12-01&to=2026-W49",
        "from=2020-W01&to=2027-W35",
    ] {
        let response = app
            .get(&format!("/v1/datasets/{d}/blocks?{query}"), ADMIN_TOKEN)
            .await;
        assert_problem(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
    }
    let response = app
        .get(
            &format!("/v1/datasets/{plain}/blocks?from=2026-W49&to=2026-W49"),
            ADMIN_TOKEN,
        )
        .await;
    assert_problem(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
}

/// A retry with the same key replays the release and charges no block twice.
async fn retries_charge_blocks_once(backend: Backend) {
    let app = spawn_app(backend).await;
    let d = blocked(&app, "month", 1.0).await;
    let body = json!({"counts": [3, 4], "epsilon": 0.25,
                      "blocks": {"from": "2026-11", "to": "2026-12"}});
    let mut ids = Vec::new();
    for _ in 0..2 {
        let response = app
            .client
            .post(app.url(&format!("/v1/datasets/{d}/releases")))
            .bearer_auth(ADMIN_TOKEN)
            .header("Idempotency-Key", "monthly-report")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        ids.push(response.json::<Value>().await.unwrap()["id"].clone());
    }
    assert_eq!(ids[0], ids[1]);
    let s = spends(&app, &d, "2026-11", "2026-12").await;
    let spent: Vec<f64> = s.iter().map(|(_, v)| *v).collect();
    assert!(
        spent[0] > 0.0 && spent[0] <= 0.25 && spent[0] == spent[1],
        "{spent:?}"
    );
    // The same key over other blocks is another request.
    let other = app
        .client
        .post(app.url(&format!("/v1/datasets/{d}/releases")))
        .bearer_auth(ADMIN_TOKEN)
        .header("Idempotency-Key", "monthly-report")
        .json(&json!({"counts": [3, 4], "epsilon": 0.25, "block": "2026-11"}))
        .send()
        .await
        .unwrap();
    assert_problem(
        other,
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency-key-reused",
    )
    .await;
}

/// A population above a blocked dataset is charged each release's full cost, whatever blocks it
/// reads: the people-level cap binds across blocks.
async fn a_population_caps_a_blocked_dataset_across_blocks(backend: Backend) {
    let app = spawn_app(backend).await;
    let people = app
        .post(
            "/v1/populations",
            ADMIN_TOKEN,
            &json!({"name": "patients", "budget": {"order": 2.0, "epsilon": 1.0}}),
        )
        .await;
    assert_eq!(people.status(), StatusCode::CREATED);
    let people = people.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let response = app
        .post(
            "/v1/datasets",
            ADMIN_TOKEN,
            &json!({"name": "daily", "budget": {"order": 2.0, "epsilon": 1.0},
                    "blocks": {"period": "day"}, "population": people}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let d = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Each day a fresh block, but the population holds only 1.0 in all: four charges of 0.24.
    for (i, day) in [
        "2026-12-01",
        "2026-12-02",
        "2026-12-03",
        "2026-12-04",
        "2026-12-05",
    ]
    .iter()
    .enumerate()
    {
        let r = app
            .post(
                &format!("/v1/datasets/{d}/charges"),
                ADMIN_TOKEN,
                &charge(0.24, json!({"block": day})),
            )
            .await;
        if i < 4 {
            assert_eq!(r.status(), StatusCode::CREATED, "day {day}");
        } else {
            assert_problem(r, StatusCode::CONFLICT, "population-budget-exhausted").await;
        }
    }
    let node = app
        .get_json(&format!("/v1/populations/{people}"), ADMIN_TOKEN)
        .await;
    let spent = node["spent"].as_f64().unwrap();
    assert!((0.96..0.9601).contains(&spent), "{spent}");
    assert_eq!(spends(&app, &d, "2026-12-05", "2026-12-05").await[0].1, 0.0);
}

/// A plan on a blocked dataset judges what is left on its fullest block.
async fn plans_judge_the_fullest_block(backend: Backend) {
    let app = spawn_app(backend).await;
    let d = blocked(&app, "day", 1.0).await;
    let plan = json!({"items": [{"d": 6, "n_lower_bound": 50, "mechanism": "dirichlet",
                                 "epsilon": 0.5}]});
    let before = app
        .post(&format!("/v1/datasets/{d}/plan"), ADMIN_TOKEN, &plan)
        .await;
    assert_eq!(before.status(), StatusCode::OK);
    let before: Value = before.json().await.unwrap();
    assert_eq!(before["remaining"], 1.0, "{before}");
    let r = app
        .post(
            &format!("/v1/datasets/{d}/charges"),
            ADMIN_TOKEN,
            &charge(0.75, json!({"block": "2026-12-03"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let after: Value = app
        .post(&format!("/v1/datasets/{d}/plan"), ADMIN_TOKEN, &plan)
        .await
        .json()
        .await
        .unwrap();
    assert!(after["remaining"].as_f64().unwrap() < 0.25, "{after}");
    assert_eq!(after["fits"], false, "{after}");
}

on_both_backends!(
    plans_judge_the_fullest_block,
    registration_refuses_bad_periods,
    releases_are_charged_on_every_block,
    blocks_are_required_exactly_where_they_exist,
    retries_charge_blocks_once,
    a_population_caps_a_blocked_dataset_across_blocks,
);
