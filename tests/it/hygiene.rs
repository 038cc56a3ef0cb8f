//! Raw counts never reach the database or the logs: the real binary, at trace level, is sent
//! releases, previews and failing requests containing a marker count; then its logs, the SQLite
//! file (with its WAL) and a pg_dump of the PostgreSQL database are searched for the marker, as
//! text and as the bytes of an f64.

use std::path::PathBuf;

use crate::common::app::{fresh_database, Backend, ADMIN_TOKEN};
use crate::common::server::Replica;
use reqwest::StatusCode;
use serde_json::{json, Value};

const MARKER: f64 = 987_654_321.0;
const MARKER_TEXT: &str = "987654321";
/// A release label: stored and returned, but never logged.
const LABEL: &str = "hygiene-label-5c1e7a";

async fn exercise(address: &str) {
    let client = reqwest::Client::new();
    let url = |p: &str| format!("{address}{p}");
    let response = client
        .post(url("/v1/datasets"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"name": "hygiene", "budget": {"order": 2, "epsilon": 5}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let id = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let releases = url(&format!("/v1/datasets/{id}/releases"));
    let good = json!({"counts": [MARKER, 12, 3], "epsilon": 0.5});
    let r = client
        .post(&releases)
        .bearer_auth(ADMIN_TOKEN)
        .header("Idempotency-Key", "k1")
        .json(&good)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = client
        .post(&releases)
        .bearer_auth(ADMIN_TOKEN)
        .header("Idempotency-Key", "k1")
        .json(&good)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = client
        .post(format!("{releases}/preview"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&good)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let gaussian = json!({"counts": [MARKER, 1, 1], "epsilon": 0.5, "mechanism": "gaussian"});
    assert_eq!(
        client
            .post(&releases)
            .bearer_auth(ADMIN_TOKEN)
            .json(&gaussian)
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::CREATED
    );
    // A table release (and its preview) with the marker in a row, and a label.
    let table = json!({"table": [[MARKER, 12, 3], [4, 5, 6]], "epsilon": 0.5, "label": LABEL});
    for path in [releases.clone(), format!("{releases}/preview")] {
        let r = client
            .post(&path)
            .bearer_auth(ADMIN_TOKEN)
            .json(&table)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }
    // Failing requests that carry the marker: bad neighbour cell, a marker as a string, unknown field.
    for body in [
        json!({"counts": [MARKER, -1, 3], "epsilon": 0.5}),
        json!({"counts": [1, MARKER_TEXT], "epsilon": 0.5}),
        json!({"counts": [MARKER, 1], "epsilon": 0.5, "seed": MARKER}),
        json!({"counts": [MARKER, 1], "epsilon": 50}),
        json!({"table": [[MARKER, 1], [1, 1, 1]], "epsilon": 0.5}),
        // (A row of zeros is released now; the exponential mechanism refuses tables.)
        json!({"table": [[MARKER, 1], [0, 0]], "epsilon": 0.5, "mechanism": "exponential"}),
        json!({"table": [[MARKER, 1]], "counts": [MARKER, 1], "epsilon": 0.5}),
    ] {
        let r = client
            .post(&releases)
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_client_error());
        let text = r.text().await.unwrap();
        assert!(
            !text.contains(MARKER_TEXT),
            "an error echoed the marker: {text}"
        );
    }
    let raw = format!("{{\"counts\": [{MARKER_TEXT}, 1, ], \"epsilon\": 0.5}}");
    let r = client
        .post(&releases)
        .bearer_auth(ADMIN_TOKEN)
        .header("content-type", "application/json")
        .body(raw)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(!r.text().await.unwrap().contains(MARKER_TEXT));
}

fn assert_clean(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    assert!(
        !text.contains(MARKER_TEXT),
        "{what} contains the marker count as text"
    );
    let le = MARKER.to_le_bytes();
    assert!(
        !bytes.windows(8).any(|w| w == le),
        "{what} contains the marker count as f64 bytes"
    );
    let hex = hex_lower(&le);
    assert!(
        !text.to_ascii_lowercase().contains(&hex),
        "{what} contains the marker count as hex f64 bytes"
    );
}

fn hex_lower(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn counts_never_reach_storage_or_logs(backend: Backend) {
    let (database_url, _dir, sqlite_path) = fresh_database(backend).await;
    let logs = tempfile::tempdir().unwrap();
    let mut server = Replica::start_bare(
        "server",
        &[
            ("DIRICHLET_DATABASE_URL", &database_url),
            ("DIRICHLET_ADMIN_TOKEN", ADMIN_TOKEN),
            ("DIRICHLET_LOG_FORMAT", "json"),
            ("RUST_LOG", "trace"),
        ],
        logs.path(),
    );
    exercise(&server.address()).await;
    // SIGTERM: a graceful shutdown must exit 0.
    let status = server.stop_with("TERM");
    assert!(status.success(), "graceful shutdown exits 0, got {status}");

    let stderr = server.log().into_bytes();
    let log_text = String::from_utf8_lossy(&stderr);
    assert!(
        log_text.contains("\"level\":\"TRACE\""),
        "trace logging was on"
    );
    assert!(
        log_text.contains("release committed"),
        "the releases were logged (without their counts)"
    );
    assert_clean("the logs", &stderr);
    assert!(
        !log_text.contains(LABEL),
        "a release label reached the logs"
    );
    assert_clean("the standard output", server.stdout_text().as_bytes());

    match backend {
        Backend::Sqlite => {
            let path = sqlite_path.unwrap();
            for suffix in ["", "-wal", "-shm"] {
                let file = PathBuf::from(format!("{}{suffix}", path.display()));
                if let Ok(bytes) = std::fs::read(&file) {
                    assert_clean(&format!("{}", file.display()), &bytes);
                }
            }
            assert!(std::fs::metadata(&path).unwrap().len() > 0);
        }
        Backend::Postgres => {
            let dump = crate::common::server::pg_dump(&database_url);
            assert!(
                String::from_utf8_lossy(&dump).contains("releases"),
                "the dump has the releases table"
            );
            assert_clean("the PostgreSQL dump", &dump);
        }
    }
}

on_both_backends!(counts_never_reach_storage_or_logs);
