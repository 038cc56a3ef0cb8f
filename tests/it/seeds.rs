//! The seeds' other systems over the API, each story on SQLite and on PostgreSQL: the public
//! lower bound (seed 000 Remark 2 / seed 003), prior shapes for `posterior` (seed 004 Alg. 3)
//! and the Hellinger exponential mechanism (seed 002).

use crate::common::app::{
    assert_problem, assert_problem_about, spawn_app, spawn_app_with, Backend, ADMIN_TOKEN,
};
use reqwest::StatusCode;
use serde_json::{json, Value};

fn spends_exactly(charge: f64, target: f64) -> bool {
    (target * (1.0 - 1e-9)..=target).contains(&charge)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

async fn json_of(response: reqwest::Response, status: StatusCode) -> Value {
    let got = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(got, status, "{body}");
    body
}

async fn exponential_releases_a_selected_posterior(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.max_exponential_n = 50).await;
    let id = app.create_dataset(22.0, 10.0).await;
    let path = format!("/v1/datasets/{id}/releases");
    let body = json!({"counts": [3, 7], "mechanism": "exponential", "epsilon": 1.0});

    // Preview: Δ_g of note §2.5 (n = 10, Beta(1, 1)), charge min(ε, λ₀ε²/8) = ε at λ₀ = 22.
    let preview = json_of(
        app.post(&format!("{path}/preview"), ADMIN_TOKEN, &body)
            .await,
        StatusCode::OK,
    )
    .await;
    let m = &preview["mechanism"];
    assert_eq!(m["kind"], "exponential");
    assert_eq!(m["n"], 10);
    assert_eq!(m["prior"], json!([1.0, 1.0]));
    assert!((f(&m["sensitivity"]) - 0.353238470947).abs() < 1e-11, "{m}");
    let used = f(&m["sensitivity_used"]);
    assert!(used > f(&m["sensitivity"]) && used < 0.3533, "{m}");
    assert!(m.get("selected").is_none(), "a preview draws nothing");
    assert!(
        spends_exactly(f(&preview["cost"]["epsilon"]), 1.0),
        "{preview}"
    );
    // The forecast: the utility theorem's H bound at 95 %, (2Δ̃/ε′)·ln((n + 1)/β), capped at 1 —
    // vacuous at ε = 1, informative at ε = 30, and the same whatever the counts (n alone).
    assert_eq!(
        preview["forecast"],
        json!({"hellinger_bound": 1.0, "hellinger_bound_confidence": 0.95}),
        "{preview}"
    );
    let mut sharp = Vec::new();
    for counts in [json!([3, 7]), json!([10, 0]), json!([0, 10])] {
        let p = json_of(
            app.post(
                &format!("{path}/preview"),
                ADMIN_TOKEN,
                &json!({"counts": counts, "mechanism": "exponential", "epsilon": 30.0}),
            )
            .await,
            StatusCode::OK,
        )
        .await;
        sharp.push(p["forecast"].clone());
    }
    assert!(sharp.iter().all(|s| *s == sharp[0]), "{sharp:?}");
    let bound = f(&sharp[0]["hellinger_bound"]);
    let theorem = 2.0 * used / 30.0 * (11.0f64 / 0.05).ln();
    assert!(
        (theorem..theorem + 1e-5).contains(&bound),
        "{bound} vs {theorem}"
    );
    assert!(bound < 0.13, "{bound}");
    assert_eq!(f(&sharp[0]["hellinger_bound_confidence"]), 0.95);
    assert_eq!(
        app.budget(&id).await["releases"],
        0,
        "previews charge nothing"
    );

    // Release with a key; the record carries j*, its posterior; the distribution is its mean.
    let first = app.post_with_key(&path, ADMIN_TOKEN, "exp-1", &body).await;
    let first = json_of(first, StatusCode::CREATED).await;
    let m = &first["mechanism"];
    let j = m["selected"].as_u64().unwrap();
    assert!(j <= 10);
    let (a, b) = (1.0 + j as f64, 1.0 + (10 - j) as f64);
    assert_eq!(m["posterior"], json!([a, b]));
    let dist: Vec<f64> = first["distribution"]
        .as_array()
        .unwrap()
        .iter()
        .map(f)
        .collect();
    assert!((dist[0] - a / 12.0).abs() < 1e-15 && (dist[1] - b / 12.0).abs() < 1e-15);
    let charged = f(&first["cost"]["epsilon"]);
    assert!(spends_exactly(charged, 1.0), "{first}");
    assert_eq!(f(&first["budget"]["spent"]), charged);

    // A retry replays the stored selection and charges nothing more.
    let again = app.post_with_key(&path, ADMIN_TOKEN, "exp-1", &body).await;
    let again = json_of(again, StatusCode::CREATED).await;
    assert_eq!(again["mechanism"], first["mechanism"]);
    assert_eq!(app.budget(&id).await["releases"], 1);
    let shown = json_of(
        app.get(
            &format!("{path}/{}", first["id"].as_str().unwrap()),
            ADMIN_TOKEN,
        )
        .await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(shown["mechanism"]["selected"], j);

    // Small ε: the zCDP term λ₀ε²/8 = 22·0.01/8 = 0.0275 is the charge.
    let small = json_of(
        app.post(
            &path,
            ADMIN_TOKEN,
            &json!({"counts": [20, 30], "mechanism": "exponential", "epsilon": 0.1, "prior": [6, 12]}),
        )
        .await,
        StatusCode::CREATED,
    )
    .await;
    let c = f(&small["cost"]["epsilon"]);
    assert!((0.0275 * (1.0 - 1e-8)..=0.0275).contains(&c), "{c}");
    assert_eq!(small["mechanism"]["prior"], json!([6.0, 12.0]));

    // Refusals charge nothing.
    let before = app.budget(&id).await;
    for (bad, field) in [
        (
            json!({"counts": [3, 7, 1], "mechanism": "exponential", "epsilon": 1.0}),
            "counts",
        ),
        (
            json!({"counts": [3.5, 7], "mechanism": "exponential", "epsilon": 1.0}),
            "counts",
        ),
        (
            json!({"counts": [30, 30], "mechanism": "exponential", "epsilon": 1.0}),
            "counts",
        ),
        // (n = 0 is released: one candidate, the prior.) A prior whose lnΓ
        // overflows is refused with its field.
        (
            json!({"counts": [3, 7], "mechanism": "exponential", "epsilon": 1.0, "prior": [5e-324, 4.79e307]}),
            "prior",
        ),
        (
            json!({"counts": [3, 7], "mechanism": "exponential"}),
            "epsilon",
        ),
        (
            json!({"counts": [3, 7], "mechanism": "exponential", "epsilon": 1.0, "order": 2}),
            "order",
        ),
        (
            json!({"counts": [3, 7], "mechanism": "exponential", "epsilon": 1.0, "prior": [0, 1]}),
            "prior",
        ),
        (
            json!({"counts": [3, 7], "mechanism": "exponential", "epsilon": 1.0, "prior": 2}),
            "prior",
        ),
        (
            json!({"counts": [3, 7], "mechanism": "exponential", "epsilon": 1.0, "lower_bound": 1}),
            "lower_bound",
        ),
        (
            json!({"counts": [3, 7], "mechanism": "exponential", "epsilon": 500.0}),
            "",
        ),
        // A record moving between rows changes both rows' n: not 002's fixed-n neighbours.
        (
            json!({"table": [[3, 7], [20, 30]], "mechanism": "exponential", "epsilon": 1.0}),
            "table",
        ),
    ] {
        let problem = assert_problem(
            app.post(&path, ADMIN_TOKEN, &bad).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
        if !field.is_empty() {
            assert_eq!(problem["field"], field, "{bad}: {problem}");
        }
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            !detail.contains("3.5") && !detail.contains("30"),
            "{detail}"
        );
    }
    assert_eq!(app.budget(&id).await, before);

    // Only for replace_one datasets (002's neighbours keep n fixed).
    let other = json_of(
        app.post("/v1/datasets", ADMIN_TOKEN, &json!({"name": "ar", "budget": {"order": 3, "epsilon": 1}, "neighbouring": "add_remove_one"})).await,
        StatusCode::CREATED,
    )
    .await;
    assert_problem_about(
        app.post(
            &format!("/v1/datasets/{}/releases", other["id"].as_str().unwrap()),
            ADMIN_TOKEN,
            &body,
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
        "replace_one",
    )
    .await;
}

async fn lower_bound_releases_are_priced_with_the_effective_prior(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(22.0, 100.0).await;
    let path = format!("/v1/datasets/{id}/releases");
    let counts = json!([120, 150, 230]);

    // Gohari's prior-free draw Dir(r·x) with every cell ≥ L = 50: priced exactly like the
    // service's mechanism with prior α + rL = 5.
    let gohari =
        json!({"counts": counts, "mechanism": "explicit", "r": 0.1, "alpha": 0, "lower_bound": 50});
    let preview = json_of(
        app.post(&format!("{path}/preview"), ADMIN_TOKEN, &gohari)
            .await,
        StatusCode::OK,
    )
    .await;
    let plain = json_of(
        app.post(
            &format!("{path}/preview"),
            ADMIN_TOKEN,
            &json!({"counts": counts, "mechanism": "explicit", "r": 0.1, "alpha": 5.0}),
        )
        .await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(preview["cost"], plain["cost"]);
    assert_eq!(preview["mechanism"]["effective_alpha"], 5.0);
    assert_eq!(preview["mechanism"]["lower_bound"], 50.0);
    assert_eq!(
        preview["without_bound"]["epsilon"],
        Value::Null,
        "α = 0 alone has no guarantee"
    );
    // 001 Theorem 5's forecast needs α > 0: none for the prior-free draw.
    assert!(preview["forecast"].is_null(), "{preview}");
    // 003's own (ε, δ) for k = rN = 50, η = L/N = 0.1, at the default δ (no dp target),
    // next to the RDP route's CKS conversion, which is smaller (note §3.5).
    let g = &preview["gohari"];
    assert_eq!(g["prior_free"], true);
    assert!(
        (f(&g["k"]) - 50.0).abs() < 1e-12 && (f(&g["eta"]) - 0.1).abs() < 1e-15,
        "{g}"
    );
    assert!(f(&g["delta"]) <= 1e-5 && f(&g["delta"]) > 0.99e-5, "{g}");
    let (eg, er) = (f(&g["epsilon"]), f(&g["rdp_route"]["epsilon"]));
    println!("gohari {g}");
    assert!(er > 0.0 && er < eg, "RDP route {er} vs Gohari {eg}");

    let release = json_of(
        app.post(&path, ADMIN_TOKEN, &gohari).await,
        StatusCode::CREATED,
    )
    .await;
    assert_eq!(release["mechanism"]["lower_bound"], 50.0);
    assert!(release.get("gohari").is_none() && release["mechanism"].get("gohari").is_none());
    assert_eq!(release["cost"], plain["cost"]);
    // Data below the bound is still protected (the clamp), at the same price.
    let below = json_of(
        app.post(
            &path,
            ADMIN_TOKEN,
            &json!({"counts": [0, 3, 497], "mechanism": "explicit", "r": 0.1, "alpha": 0, "lower_bound": 50}),
        )
        .await,
        StatusCode::CREATED,
    )
    .await;
    assert_eq!(below["cost"], plain["cost"]);

    // Calibrated modes: the bound buys a larger r (dirichlet, diffuse) or a smaller α
    // (posterior) at the same ε.
    for (body, gain) in [
        (
            json!({"counts": counts, "epsilon": 0.5, "mechanism": "dirichlet", "lower_bound": 5}),
            "r",
        ),
        (
            json!({"counts": counts, "epsilon": 0.5, "mechanism": "diffuse", "alpha": 1, "lower_bound": 5}),
            "r",
        ),
        (
            json!({"counts": counts, "epsilon": 0.5, "mechanism": "diffuse", "alpha": 0, "lower_bound": [50, 50, 60]}),
            "r",
        ),
        (
            json!({"counts": counts, "epsilon": 0.5, "mechanism": "posterior", "lower_bound": 5}),
            "alpha",
        ),
    ] {
        let p = json_of(
            app.post(&format!("{path}/preview"), ADMIN_TOKEN, &body)
                .await,
            StatusCode::OK,
        )
        .await;
        let prior_free = body["alpha"] == 0;
        assert_eq!(p["forecast"].is_object(), !prior_free, "{p}");
        let with = f(&p["mechanism"][gain]);
        let without = &p["without_bound"][gain];
        if gain == "r" && !without.is_null() {
            assert!(with > f(without), "{body}: {p}");
        }
        if gain == "alpha" {
            assert!(with < f(without), "{body}: {p}");
        }
        let r = json_of(
            app.post(&path, ADMIN_TOKEN, &body).await,
            StatusCode::CREATED,
        )
        .await;
        assert!(spends_exactly(f(&r["cost"]["epsilon"]), 0.5), "{body}: {r}");
        assert_eq!(r["mechanism"]["kind"], body["mechanism"]);
    }

    let before = app.budget(&id).await;
    for bad in [
        json!({"counts": counts, "mechanism": "explicit", "r": 0.1, "alpha": 0, "lower_bound": [50, 50, 0]}),
        json!({"counts": counts, "mechanism": "explicit", "r": 0.1, "alpha": 0, "lower_bound": -1}),
        json!({"counts": counts, "mechanism": "explicit", "r": 0.1, "alpha": 1, "lower_bound": [1, 2]}),
        json!({"counts": counts, "mechanism": "gaussian", "epsilon": 0.5, "lower_bound": 5}),
    ] {
        assert_problem(
            app.post(&path, ADMIN_TOKEN, &bad).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
    }
    assert_eq!(app.budget(&id).await, before);
}

async fn posterior_takes_a_prior_shape(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(22.0, 100.0).await;
    let path = format!("/v1/datasets/{id}/releases");
    let counts = json!([30, 5, 0, 12]);
    let body = json!({"counts": counts, "epsilon": 0.5, "mechanism": "posterior", "prior_shape": [1, 2, 3, 4]});
    let release = json_of(
        app.post_with_key(&path, ADMIN_TOKEN, "shape-1", &body)
            .await,
        StatusCode::CREATED,
    )
    .await;
    let alpha: Vec<f64> = release["mechanism"]["alpha"]
        .as_array()
        .unwrap()
        .iter()
        .map(f)
        .collect();
    for (i, a) in alpha.iter().enumerate() {
        assert!((a / alpha[0] - (i + 1) as f64).abs() < 1e-12, "{alpha:?}");
    }
    assert_eq!(
        release["mechanism"]["prior_shape"],
        json!([1.0, 2.0, 3.0, 4.0])
    );
    assert!(
        spends_exactly(f(&release["cost"]["epsilon"]), 0.5),
        "{release}"
    );
    let again = json_of(
        app.post_with_key(&path, ADMIN_TOKEN, "shape-1", &body)
            .await,
        StatusCode::CREATED,
    )
    .await;
    assert_eq!(again["distribution"], release["distribution"]);
    assert_eq!(app.budget(&id).await["releases"], 1);

    let before = app.budget(&id).await;
    // 004 Corollary 1: calibrated at order 1.5 for a large ε, the prior is too small for the
    // ledger's order 22 (λ₀ ≥ 1 + min α/r): refused with a clear problem.
    assert_problem_about(
        app.post(
            &path,
            ADMIN_TOKEN,
            &json!({"counts": counts, "epsilon": 5.0, "order": 1.5, "mechanism": "posterior", "prior_shape": [1, 2, 3, 4]}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "no-guarantee", "order").await;
    for bad in [
        json!({"counts": counts, "epsilon": 0.5, "mechanism": "posterior", "prior_shape": [1, 0, 3, 4]}),
        json!({"counts": counts, "epsilon": 0.5, "mechanism": "posterior", "prior_shape": [1, 2]}),
        json!({"counts": counts, "epsilon": 0.5, "mechanism": "dirichlet", "prior_shape": 1}),
    ] {
        assert_problem(
            app.post(&path, ADMIN_TOKEN, &bad).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
    }
    assert_eq!(app.budget(&id).await, before);
}

/// `lower_bound` and `prior_shape` on tables: calibrated under the table form of the relation
/// (`Sensitivity::for_table`), so each is released at exactly the asked ε; a per-cell prior or
/// bound gets a smaller r (or a larger prior scale m) than the same request on one vector, a
/// uniform one the same parameters. The preview's `without_bound` is priced as the table is.
async fn bounded_and_shaped_tables_are_charged_exactly(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.create_dataset(22.0, 100.0).await;
    let path = format!("/v1/datasets/{id}/releases");
    let table = json!([[120, 150, 230], [60, 75, 90], [55, 300, 70]]);
    let row = json!([120, 150, 230]);
    let with = |base: &Value, key: &str, value: &Value| {
        let mut body = base.clone();
        body[key] = value.clone();
        body
    };
    let preview = |body: Value| {
        let (app, path) = (&app, &path);
        async move {
            json_of(
                app.post(&format!("{path}/preview"), ADMIN_TOKEN, &body)
                    .await,
                StatusCode::OK,
            )
            .await
        }
    };
    // (request, whether a cell-wise prior makes the table dearer than one vector)
    let cases = [
        // uniform L, α > 0
        (
            json!({"epsilon": 0.5, "mechanism": "dirichlet", "lower_bound": 5}),
            false,
        ),
        // per-cell L, α > 0 (per cell too)
        (
            json!({"epsilon": 0.5, "mechanism": "diffuse", "alpha": [1, 2, 3], "lower_bound": [5, 6, 7]}),
            true,
        ),
        // uniform L, α = 0 (Gohari's prior-free draw)
        (
            json!({"epsilon": 0.5, "mechanism": "diffuse", "alpha": 0, "lower_bound": 50}),
            false,
        ),
        // per-cell L, α = 0
        (
            json!({"epsilon": 0.5, "mechanism": "diffuse", "alpha": 0, "lower_bound": [50, 55, 60]}),
            true,
        ),
        (
            json!({"epsilon": 0.5, "mechanism": "posterior", "prior_shape": 2}),
            false,
        ),
        (
            json!({"epsilon": 0.5, "mechanism": "posterior", "prior_shape": [1, 2, 3]}),
            true,
        ),
    ];
    for (i, (case, per_cell)) in cases.iter().enumerate() {
        let body = with(case, "table", &table);
        let tp = preview(body.clone()).await;
        let vp = preview(with(case, "counts", &row)).await;
        assert_eq!(tp["forecasts"].as_array().unwrap().len(), 3, "{tp}");
        assert!(
            tp.get("forecast").is_none() && tp.get("gohari").is_none(),
            "{tp}"
        );
        for p in [&tp, &vp] {
            assert!(spends_exactly(f(&p["cost"]["epsilon"]), 0.5), "{case}: {p}");
        }
        let (tm, vm) = (&tp["mechanism"], &vp["mechanism"]);
        if case["mechanism"] == "posterior" {
            // α = m·s: compare the scale m through the first cell.
            let (ta, va) = (&tm["alpha"], &vm["alpha"]);
            let first = |a: &Value| a.as_array().map_or_else(|| f(a), |v| f(&v[0]));
            if *per_cell {
                assert!(first(ta) > first(va), "{case}: table {ta}, vector {va}");
            } else {
                assert_eq!(ta, va, "{case}");
            }
        } else if *per_cell {
            assert!(f(&tm["r"]) < f(&vm["r"]), "{case}: table {tm}, vector {vm}");
        } else {
            assert_eq!(tm, vm, "{case}");
        }

        // `without_bound`: the table request without the bound, priced as a table.
        if case.get("lower_bound").is_some() {
            let wb = &tp["without_bound"];
            let mut plain = body.clone();
            plain.as_object_mut().unwrap().remove("lower_bound");
            if case["alpha"] == 0 {
                assert_eq!(
                    *wb,
                    json!({"r": null, "alpha": null, "epsilon": null}),
                    "{tp}"
                );
            } else {
                let pp = preview(plain).await;
                let (r, want) = (f(&wb["r"]), f(&pp["mechanism"]["r"]));
                assert!((r - want).abs() <= 1e-9 * want, "{case}: {wb} vs {pp}");
                let eps = f(&wb["epsilon"]);
                assert!((0.5 * (1.0 - 1e-6)..=0.5).contains(&eps), "{wb}");
                assert!(f(&tm["r"]) > r, "the bound buys a larger r: {tm} vs {wb}");
                let vector_wb = &vp["without_bound"];
                if *per_cell {
                    assert!(r < f(&vector_wb["r"]), "{wb} vs one vector's {vector_wb}");
                } else {
                    assert_eq!(wb, vector_wb);
                }
            }
        } else {
            assert!(tp.get("without_bound").is_none(), "{tp}");
        }

        // Released at exactly the asked ε, replayed, listed.
        let key = format!("table-bounded-{i}");
        let before = app.budget(&id).await;
        let released = json_of(
            app.post_with_key(&path, ADMIN_TOKEN, &key, &body).await,
            StatusCode::CREATED,
        )
        .await;
        let rows = released["distributions"].as_array().unwrap();
        assert_eq!(rows.len(), 3, "{released}");
        for r in rows {
            let cells: Vec<f64> = r.as_array().unwrap().iter().map(f).collect();
            assert_eq!(cells.len(), 3);
            assert!((cells.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{r}");
        }
        assert!(released.get("distribution").is_none());
        assert_eq!(released["mechanism"]["kind"], case["mechanism"]);
        assert_eq!(
            released["mechanism"]["r"], tm["r"],
            "the preview's plan was drawn"
        );
        // The seeds' calibrations stop within 1e-9 below ε (`bounded::SPEND_TOLERANCE`).
        let charged = f(&released["cost"]["epsilon"]);
        assert!(spends_exactly(charged, 0.5), "{released}");
        let after = app.budget(&id).await;
        assert_eq!(f(&after["spent"]), f(&before["spent"]) + charged);
        let response = app.post_with_key(&path, ADMIN_TOKEN, &key, &body).await;
        assert_eq!(response.headers()["idempotent-replayed"], "true");
        let again = json_of(response, StatusCode::CREATED).await;
        assert_eq!(again["id"], released["id"]);
        assert_eq!(again["distributions"], released["distributions"]);
        assert_eq!(app.budget(&id).await, after, "a replay charges nothing");
        let listed = json_of(app.get(&path, ADMIN_TOKEN).await, StatusCode::OK).await;
        let item = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|item| item["id"] == released["id"])
            .unwrap_or_else(|| panic!("{key} is not listed: {listed}"));
        assert_eq!(item["distributions"], released["distributions"]);
    }
    assert_eq!(app.budget(&id).await["releases"], cases.len());
}

on_both_backends!(
    exponential_releases_a_selected_posterior,
    lower_bound_releases_are_priced_with_the_effective_prior,
    posterior_takes_a_prior_shape,
    bounded_and_shaped_tables_are_charged_exactly,
);
