//! The console's server side, on SQLite and PostgreSQL, without a browser: every `/console`
//! response (page, assets, HEAD, unknown file or path, wrong method, oversized headers) carries
//! the security headers; the
//! assets reference only each other and use no inline code; `GET /v1/whoami` names the role.
//! The browser scenario is `scripts/ci/console-test.sh`.

use crate::common::app::*;
use dirichlet_release::http::console::{ASSETS, CONTENT_SECURITY_POLICY, SECURITY_HEADERS};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

fn assert_security_headers(response: &reqwest::Response, what: &str) {
    let headers = response.headers();
    for (name, value) in SECURITY_HEADERS {
        assert_eq!(
            headers.get(name).and_then(|v| v.to_str().ok()),
            Some(value),
            "{what}: header {name}"
        );
    }
}

async fn console_responses_carry_the_security_headers(backend: Backend) {
    let app = spawn_app(backend).await;
    let client = &app.client;

    let page = client.get(app.url("/console")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_security_headers(&page, "GET /console");
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let html = page.text().await.unwrap();
    assert!(html.contains(r#"<script type="module" src="/console/app.js"></script>"#));

    for (name, media_type, body) in ASSETS {
        let path = format!("/console/{name}");
        let response = client.get(app.url(&path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_security_headers(&response, &path);
        assert_eq!(response.headers()["content-type"], media_type, "{path}");
        assert_eq!(response.text().await.unwrap(), body, "{path}");
    }

    // A token is neither needed nor looked at: the pages are public, the data is behind the API.
    let with_token = client
        .get(app.url("/console"))
        .bearer_auth("not-a-token")
        .send()
        .await
        .unwrap();
    assert_eq!(with_token.status(), StatusCode::OK);
    assert_security_headers(&with_token, "GET /console with a bad token");

    let head = client
        .request(Method::HEAD, app.url("/console/app.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert_security_headers(&head, "HEAD /console/app.js");

    for path in [
        "/console/nope.js",
        "/console/..%2fopenapi.yaml",
        "/console/app.js%00",
    ] {
        let missing = client.get(app.url(path)).send().await.unwrap();
        assert_security_headers(&missing, path);
        let body = assert_problem(missing, StatusCode::NOT_FOUND, "not-found").await;
        assert_eq!(body["detail"], "no such console file", "{path}");
    }

    // Paths under /console that no console route serves are answered by the router's fallback,
    // outside the console's routes; they are still console pages to a browser.
    for path in ["/console/", "/console/a/b", "/console/app.js/x"] {
        let missing = client.get(app.url(path)).send().await.unwrap();
        assert_security_headers(&missing, path);
        assert_problem(missing, StatusCode::NOT_FOUND, "not-found").await;
    }

    // The header limits answer before any route is matched.
    let oversized = client
        .get(app.url("/console"))
        .header("x-big", "v".repeat(20 * 1024))
        .send()
        .await
        .unwrap();
    assert_security_headers(&oversized, "GET /console with a 20 KiB header");
    assert_problem(
        oversized,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers-too-large",
    )
    .await;
    let mut many = client.get(app.url("/console/app.js"));
    for i in 0..120 {
        many = many.header(format!("x-filler-{i}"), "v");
    }
    let many = many.send().await.unwrap();
    assert_security_headers(&many, "GET /console/app.js with 120 header lines");
    assert_problem(
        many,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers-too-large",
    )
    .await;

    let post = client
        .post(app.url("/console"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_security_headers(&post, "POST /console");
    assert_problem(post, StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed").await;

    // The API keeps its own headers: the console's policy is for pages, not for JSON.
    let api = app.get("/v1/datasets", ADMIN_TOKEN).await;
    assert!(api.headers().get("content-security-policy").is_none());
}

#[test]
fn the_policy_is_strict() {
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ] {
        assert!(
            CONTENT_SECURITY_POLICY.contains(directive),
            "{directive} is missing"
        );
    }
    for loose in [
        "unsafe-inline",
        "unsafe-eval",
        "http:",
        "https:",
        "data:",
        "*",
    ] {
        assert!(
            !CONTENT_SECURITY_POLICY.contains(loose),
            "{loose} in the policy"
        );
    }
}

/// What the CSP enforces in the browser, checked on the sources too: no inline script or
/// style, no references outside the console's own files, and none of the APIs the console must
/// not use for tokens or markup.
#[test]
fn the_assets_use_no_inline_code_and_reference_only_each_other() {
    let index = include_str!("../../src/http/console/assets/index.html");
    let names: Vec<&str> = ASSETS.iter().map(|(name, _, _)| *name).collect();
    assert!(!index.contains("<style"), "an inline stylesheet");
    assert!(!index.contains("style="), "an inline style attribute");
    for handler in ["onclick=", "onload=", "onerror=", "onsubmit="] {
        assert!(
            !index.contains(handler),
            "an inline event handler {handler}"
        );
    }
    for script in index.split("<script").skip(1) {
        let tag = &script[..script.find('>').unwrap()];
        assert!(
            tag.contains("src=\"/console/"),
            "an inline script: <script{tag}>"
        );
    }
    let mut referenced = Vec::new();
    for part in index.split("\"/console/").skip(1) {
        referenced.push(&part[..part.find('"').unwrap()]);
    }
    for (name, _, body) in ASSETS {
        if name.ends_with(".js") {
            for part in body.split("from './").skip(1) {
                referenced.push(&part[..part.find('\'').unwrap()]);
            }
            for forbidden in [
                "localStorage.",
                "document.cookie",
                "innerHTML",
                "outerHTML =",
                "eval(",
                "new Function",
                "?token",
            ] {
                assert!(!body.contains(forbidden), "{name} uses {forbidden}");
            }
            let without_namespace = body.replace("http://www.w3.org/2000/svg", "");
            assert!(
                !without_namespace.contains("http://") && !without_namespace.contains("https://"),
                "{name} names another origin"
            );
        }
    }
    for name in &referenced {
        assert!(names.contains(name), "{name} is referenced but not served");
    }
    for name in &names {
        assert!(
            referenced.contains(name),
            "{name} is served but nothing uses it"
        );
    }
}

async fn whoami_names_the_role(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin: Value = app
        .get("/v1/whoami", ADMIN_TOKEN)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(admin, json!({"role": "admin"}));

    let first = app.create_dataset(2.0, 1.0).await;
    let _second = app.create_dataset(2.0, 1.0).await;
    let token = app.analyst_token(&[&first]).await;
    let response = app.get("/v1/whoami", &token).await;
    assert_eq!(response.status(), StatusCode::OK);
    let analyst: Value = response.json().await.unwrap();
    let token_id = token
        .strip_prefix("dra_")
        .unwrap()
        .split('_')
        .next()
        .unwrap();
    assert_eq!(
        analyst,
        json!({"role": "analyst", "token_id": token_id, "datasets": [first]})
    );

    for bad in ["", "not-a-token", &format!("{token}x")] {
        let response = app.get("/v1/whoami", bad).await;
        assert_problem(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
    }
}

on_both_backends!(
    console_responses_carry_the_security_headers,
    whoami_names_the_role
);
