//! SQLite storage failures a user really meets, with the real binary: the database on a
//! read-only mount, and a full disk. Both need `mount` (root or CAP_SYS_ADMIN): a tmpfs of a
//! few hundred KiB for the full disk, a read-only bind mount for the read-only file (as root,
//! `chmod` changes nothing). Without that permission these tests say so and pass, unless
//! `DIRICHLET_TEST_REQUIRE_MOUNT=1` (set by scripts/ci/reliability.sh and CI), which makes them fail.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::app::{assert_problem, ADMIN_TOKEN};
use crate::common::load::{read_ledger, report, Received};
use crate::common::server::{assert_log_clean, Replica};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A mount point that is unmounted (lazily) when dropped.
struct Mount {
    target: PathBuf,
}

impl Mount {
    fn run(args: &[&str]) -> Result<(), String> {
        let out = Command::new("mount")
            .args(args)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "mount {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    fn tmpfs(target: &Path, size: &str) -> Result<Mount, String> {
        let t = target.to_str().unwrap();
        Mount::run(&["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", t])?;
        Ok(Mount {
            target: target.into(),
        })
    }

    /// `source` seen read-only at `target`, as a read-only volume of a container is.
    fn read_only_bind(source: &Path, target: &Path) -> Result<Mount, String> {
        let (s, t) = (source.to_str().unwrap(), target.to_str().unwrap());
        Mount::run(&["--bind", s, t])?;
        let mount = Mount {
            target: target.into(),
        };
        Mount::run(&["-o", "remount,bind,ro", t])?;
        Ok(mount)
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.target).status();
    }
}

/// Whether this process may mount; panics instead when mounts are required.
fn mounts_allowed() -> bool {
    let probe = tempfile::tempdir().unwrap();
    match Mount::tmpfs(probe.path(), "64k") {
        Ok(_mount) => true,
        Err(e) => {
            if std::env::var("DIRICHLET_TEST_REQUIRE_MOUNT").is_ok_and(|v| v == "1") {
                panic!("DIRICHLET_TEST_REQUIRE_MOUNT=1 but mounting is not permitted: {e}");
            }
            eprintln!("NOT RUN: this test needs mount (root or CAP_SYS_ADMIN): {e}");
            false
        }
    }
}

async fn post(
    client: &reqwest::Client,
    url: String,
    key: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    let mut request = client.post(url).bearer_auth(ADMIN_TOKEN).json(body);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.send().await.expect("an answer")
}

async fn create_dataset(client: &reqwest::Client, base: &str, epsilon: f64) -> String {
    let response = post(
        client,
        format!("{base}/v1/datasets"),
        None,
        &json!({"name": "disk", "budget": {"order": 2, "epsilon": epsilon}}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The 503 a storage failure must produce: a problem document with Retry-After.
async fn assert_unavailable(response: reqwest::Response) {
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let status = response.status();
    if status != StatusCode::SERVICE_UNAVAILABLE {
        panic!(
            "expected 503, got {status}: {}",
            response.text().await.unwrap_or_default()
        );
    }
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_problem(
        response,
        StatusCode::SERVICE_UNAVAILABLE,
        "service-unavailable",
    )
    .await;
}

/// The ledger through the API: count and spent agree with the stored releases, which are
/// exactly the ones received.
async fn assert_ledger(client: &reqwest::Client, base: &str, dataset: &str, received: &[Received]) {
    let ledger = read_ledger(client, base, dataset).await;
    assert_eq!(ledger.releases as usize, ledger.stored.len());
    assert_eq!(
        ledger.spent,
        ledger.stored.iter().map(|r| r.cost).sum::<f64>()
    );
    let mut stored = ledger.stored.clone();
    stored.sort_by_key(|r| r.seq);
    assert_eq!(
        stored, received,
        "the ledger holds exactly the releases received"
    );
}

/// A database on a read-only mount, as a container's read-only volume presents it. Which of two
/// things happens depends on the files the last writer left:
/// - after a crash (SIGKILL) its `-wal` and `-shm` files are there: the service starts, serves
///   every read (budgets, listings, previews, replays of stored releases) and refuses every
///   write at once with a 503 problem;
/// - after a clean close they are gone, and SQLite cannot read a WAL database without creating
///   them: the service refuses to start, at once, saying it cannot open the database.
///
/// Either way nothing is written, and with the mount writable again the ledger goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_on_a_read_only_mount_serves_reads_and_refuses_writes_with_503() {
    if !mounts_allowed() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let (writable, read_only) = (root.path().join("rw"), root.path().join("ro"));
    std::fs::create_dir_all(&writable).unwrap();
    std::fs::create_dir_all(&read_only).unwrap();
    let logs = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let body = json!({"counts": [7, 1, 4], "epsilon": 0.25});
    let rw_url = format!("sqlite://{}", writable.join("ledger.db").display());
    let ro_url = format!("sqlite://{}", read_only.join("ledger.db").display());

    // Yesterday: a writable volume, two releases, then a crash.
    let mut replica = Replica::start("rw", &rw_url, &[], logs.path(), "info");
    let base = replica.address();
    let id = create_dataset(&client, &base, 2.0).await;
    let releases = format!("{base}/v1/datasets/{id}/releases");
    let mut received = Vec::new();
    for key in ["a", "b"] {
        let response = post(&client, releases.clone(), Some(key), &body).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        received.push(Received::from_json(&response.json().await.unwrap()));
    }
    replica.kill9();
    assert!(
        writable.join("ledger.db-wal").exists(),
        "a crash leaves the WAL"
    );

    // Today: the same files, mounted read-only.
    let mount = Mount::read_only_bind(&writable, &read_only).expect("a read-only bind mount");
    assert!(
        std::fs::write(read_only.join("probe"), b"x").is_err(),
        "the mount is read-only (even for root)"
    );
    let mut replica = Replica::start("ro", &ro_url, &[], logs.path(), "info");
    let base = replica.address();
    let releases = format!("{base}/v1/datasets/{id}/releases");
    let ready = client.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK, "reads work, so it is ready");
    assert_ledger(&client, &base, &id, &received).await;

    let started = Instant::now();
    assert_unavailable(post(&client, releases.clone(), Some("c"), &body).await).await;
    let refusal = started.elapsed();
    assert!(
        refusal < Duration::from_secs(1),
        "refused at once: {refusal:?}"
    );
    assert_unavailable(post(&client, releases.clone(), None, &body).await).await;
    assert_unavailable(
        post(
            &client,
            format!("{base}/v1/datasets"),
            None,
            &json!({"name": "new", "budget": {"order": 2, "epsilon": 1}}),
        )
        .await,
    )
    .await;
    assert_unavailable(
        post(
            &client,
            format!("{base}/v1/tokens"),
            None,
            &json!({"datasets": [id]}),
        )
        .await,
    )
    .await;
    // Reading needs no write: a preview is priced, and a retry of a stored release replays it.
    let preview = post(&client, format!("{releases}/preview"), None, &body).await;
    assert_eq!(preview.status(), StatusCode::OK);
    let replay = post(&client, releases.clone(), Some("a"), &body).await;
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(
        Received::from_json(&replay.json().await.unwrap()),
        received[0]
    );
    assert_ledger(&client, &base, &id, &received).await;
    assert_log_clean(&replica);
    assert!(replica.terminate().success());
    drop(mount);

    // A clean close (the last connection checkpoints and removes the WAL), then read-only again.
    {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&rw_url).await.unwrap();
        // Reading opens the WAL; the last connection to close it checkpoints and removes it.
        let _: i64 = sqlx::query_scalar("SELECT count(*) FROM releases")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
    }
    // The driver's worker thread closes the file just after `close` returns.
    let deadline = Instant::now() + Duration::from_secs(5);
    while writable.join("ledger.db-wal").exists() {
        assert!(Instant::now() < deadline, "a clean close removes the WAL");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mount = Mount::read_only_bind(&writable, &read_only).expect("a read-only bind mount");
    let started = Instant::now();
    let error = match Replica::try_start("ro-clean", &ro_url, &[], logs.path(), "info") {
        Ok(_) => panic!("a clean WAL database on a read-only mount cannot be opened"),
        Err(e) => e,
    };
    let refused_start = started.elapsed();
    assert!(
        error.contains("exit status: 1") && error.contains("cannot open the database"),
        "{error}"
    );
    assert!(!error.contains("panicked"), "{error}");
    assert!(refused_start < Duration::from_secs(5), "{refused_start:?}");
    drop(mount);

    // Writable again: nothing was half-written, and releases go on.
    let replica = Replica::start("rw-again", &rw_url, &[], logs.path(), "info");
    let base = replica.address();
    assert_ledger(&client, &base, &id, &received).await;
    let response = post(
        &client,
        format!("{base}/v1/datasets/{id}/releases"),
        Some("c"),
        &body,
    )
    .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(response.json::<Value>().await.unwrap()["seq"], 3);
    report(
        "sqlite read-only mount",
        json!({
            "after_crash": {"starts": true, "write_refusal_ms": refusal.as_secs_f64() * 1000.0},
            "after_clean_close": {"starts": false, "exit_after_ms": refused_start.as_secs_f64() * 1000.0},
        }),
    );
}

/// Fills the file system with a filler file; returns its path.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let block = vec![0u8; 4096];
    // Bounded: the tmpfs is small.
    for _ in 0..100_000 {
        if file.write_all(&block).is_err() {
            break;
        }
    }
    let _ = file.flush();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_on_a_full_disk_refuses_with_503_and_recovers_without_restart() {
    if !mounts_allowed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let _mount = Mount::tmpfs(dir.path(), "1m").expect("a small tmpfs");
    let logs = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let mut replica = Replica::start("full", &url, &[], logs.path(), "info");
    let base = replica.address();
    let client = reqwest::Client::new();
    let id = create_dataset(&client, &base, 4000.0).await;
    let releases = format!("{base}/v1/datasets/{id}/releases");
    // 500 cells: about 4 KiB of distribution per release, so the disk fills quickly.
    let body = json!({"counts": vec![3; 500], "epsilon": 0.125});
    let mut received = Vec::new();
    for n in 0..3 {
        let response = post(
            &client,
            releases.clone(),
            Some(&format!("before-{n}")),
            &body,
        )
        .await;
        assert_eq!(response.status(), StatusCode::CREATED);
        received.push(Received::from_json(&response.json().await.unwrap()));
    }

    let filler = fill(dir.path());
    // Space the database already holds may take a few more releases; then it is full.
    let mut refused_after = None;
    let mut refusal_latency = Duration::ZERO;
    for n in 0..2000 {
        let started = Instant::now();
        let response = post(&client, releases.clone(), Some(&format!("full-{n}")), &body).await;
        match response.status() {
            StatusCode::CREATED => {
                received.push(Received::from_json(&response.json().await.unwrap()))
            }
            _ => {
                refusal_latency = started.elapsed();
                assert_unavailable(response).await;
                refused_after = Some(n);
                break;
            }
        }
    }
    let refused_after = refused_after.expect("the full disk refused a release");
    // It stays refused (503, never 500), and reads still work and agree.
    for n in 0..5 {
        assert_unavailable(
            post(
                &client,
                releases.clone(),
                Some(&format!("still-full-{n}")),
                &body,
            )
            .await,
        )
        .await;
    }
    assert_ledger(&client, &base, &id, &received).await;

    // Space returns: the same process writes again.
    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    let recovered = loop {
        let response = post(&client, releases.clone(), Some("after"), &body).await;
        if response.status() == StatusCode::CREATED {
            received.push(Received::from_json(&response.json().await.unwrap()));
            break freed.elapsed();
        }
        assert_unavailable(response).await;
        assert!(
            freed.elapsed() < Duration::from_secs(10),
            "recovers once space is back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The refused attempts left no trace: a retry of one is a new release, not a replay.
    let response = post(&client, releases.clone(), Some("still-full-0"), &body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert!(response.headers().get("idempotent-replayed").is_none());
    received.push(Received::from_json(&response.json().await.unwrap()));
    assert_ledger(&client, &base, &id, &received).await;
    assert_log_clean(&replica);
    assert!(
        replica.is_running() && replica.starts == 1,
        "no restart was needed"
    );
    assert!(replica.terminate().success());

    // And the file is sound.
    use sqlx::Connection;
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let check: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(check, "ok");
    conn.close().await.unwrap();
    report(
        "sqlite full disk",
        json!({
            "releases_before_full": 3 + refused_after,
            "refusal_ms": refusal_latency.as_secs_f64() * 1000.0,
            "recovery_after_space_freed_ms": recovered.as_secs_f64() * 1000.0,
        }),
    );
}
