//! The PostgreSQL server every test uses, found or started once per test process.
//!
//! `cargo test` must exercise PostgreSQL on any machine that has it installed, and must fail
//! loudly when it cannot, never skip. In order of preference:
//! 1. `DIRICHLET_TEST_POSTGRES_URL`, an admin URL (a role that may create databases), if set;
//! 2. `postgres://postgres@127.0.0.1:5432/postgres`, if it answers (and
//!    `DIRICHLET_TEST_FORCE_THROWAWAY_PG` is not `1`);
//! 3. a throwaway server: `initdb` + `postgres` (from PATH, else `/usr/lib/postgresql/*/bin`) in
//!    a temporary directory on a free port, run as `postgres` (or `nobody`) when the tests run
//!    as root, and removed by a watchdog process once the test process has exited.
//!
//! Every test gets a brand-new database on that server from [`fresh_database`]. Each
//! `#[tokio::test]` has its own runtime, so nothing here keeps a connection or pool across
//! calls: only the server's URL is shared.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sqlx::{Connection, Executor, PgConnection};
use tokio::sync::OnceCell;

pub const ADMIN_URL_ENV: &str = "DIRICHLET_TEST_POSTGRES_URL";
/// `1`: skip the local server and start a throwaway one (scripts/ci/check-throwaway-pg.sh).
pub const FORCE_THROWAWAY_ENV: &str = "DIRICHLET_TEST_FORCE_THROWAWAY_PG";
const LOCAL_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const DATABASE_PREFIX: &str = "dr_test_";
/// Test databases older than this are left over from crashed or interrupted runs.
const STALE_AFTER: Duration = Duration::from_secs(3600);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const READY_TIMEOUT: Duration = Duration::from_secs(60);

static SERVER: OnceCell<Result<String, String>> = OnceCell::const_new();

/// The URL of a new, empty database, created for the caller alone.
pub async fn fresh_database() -> String {
    let admin = admin_url().await;
    create_database(admin)
        .await
        .unwrap_or_else(|e| panic!("cannot create a test database on the PostgreSQL server: {e}"))
}

/// The admin URL of this process's test server. Panics, saying what was tried, if there is none.
pub async fn admin_url() -> &'static str {
    match SERVER.get_or_init(discover).await {
        Ok(url) => url,
        Err(message) => panic!("{message}"),
    }
}

/// Creates `dr_test_<unix seconds>_<random>` on the server and returns its URL.
pub async fn create_database(admin_url: &str) -> Result<String, String> {
    let name = format!(
        "{DATABASE_PREFIX}{}_{}",
        unix_now().as_secs(),
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let mut conn = connect(admin_url).await?;
    let created = conn
        .execute(format!("CREATE DATABASE \"{name}\"").as_str())
        .await;
    let _ = conn.close().await;
    created.map_err(|e| format!("CREATE DATABASE {name}: {e}"))?;
    with_database(admin_url, &name)
}

async fn discover() -> Result<String, String> {
    if let Ok(url) = std::env::var(ADMIN_URL_ENV) {
        // An explicit choice is never silently replaced by another server.
        check(&url).await.map_err(|e| {
            format!("{ADMIN_URL_ENV} is set, but that PostgreSQL server cannot be used: {e}")
        })?;
        drop_stale_databases(&url).await;
        return Ok(url);
    }
    let local = if std::env::var(FORCE_THROWAWAY_ENV).is_ok_and(|v| v == "1") {
        Err(format!("skipped, {FORCE_THROWAWAY_ENV}=1"))
    } else {
        check(LOCAL_ADMIN_URL).await
    };
    if local.is_ok() {
        drop_stale_databases(LOCAL_ADMIN_URL).await;
        return Ok(LOCAL_ADMIN_URL.to_owned());
    }
    let local = local.unwrap_err();
    let server = Throwaway::start(std::process::id())
        .await
        .map_err(|throwaway| {
            format!(
                "no PostgreSQL server for the tests. Tried: (1) {ADMIN_URL_ENV}: not set; \
             (2) {LOCAL_ADMIN_URL}: {local}; (3) a throwaway server: {throwaway}. \
             Install PostgreSQL (initdb and postgres on PATH or in /usr/lib/postgresql/*/bin) \
             or set {ADMIN_URL_ENV} to the URL of a role that may create databases."
            )
        })?;
    // A new server has nothing stale. The watchdog, not this process, stops it: statics are
    // never dropped.
    Ok(server.admin_url.clone())
}

async fn connect(url: &str) -> Result<PgConnection, String> {
    match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect(url)).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {CONNECT_TIMEOUT:?}")),
    }
}

async fn check(url: &str) -> Result<(), String> {
    let mut conn = connect(url).await?;
    let answered = conn
        .execute("SELECT 1")
        .await
        .map(drop)
        .map_err(|e| e.to_string());
    let _ = conn.close().await;
    answered
}

fn with_database(admin_url: &str, name: &str) -> Result<String, String> {
    let mut url =
        url::Url::parse(admin_url).map_err(|e| format!("the admin URL does not parse: {e}"))?;
    url.set_path(&format!("/{name}"));
    Ok(url.into())
}

fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
}

/// Best effort: another run's leftovers must not fail this one.
async fn drop_stale_databases(admin_url: &str) {
    let Ok(mut conn) = connect(admin_url).await else {
        return;
    };
    let names: Vec<String> =
        sqlx::query_scalar("SELECT datname FROM pg_database WHERE starts_with(datname, $1)")
            .bind(DATABASE_PREFIX)
            .fetch_all(&mut conn)
            .await
            .unwrap_or_default();
    let now = unix_now().as_secs();
    for name in names {
        let created = name
            .strip_prefix(DATABASE_PREFIX)
            .and_then(|rest| rest.split('_').next())
            .and_then(|secs| secs.parse::<u64>().ok());
        if created.is_some_and(|secs| now.saturating_sub(secs) > STALE_AFTER.as_secs()) {
            let _ = conn
                .execute(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)").as_str())
                .await;
        }
    }
    let _ = conn.close().await;
}

/// A private PostgreSQL server in a temporary directory, owned by a process: once that process
/// has exited, a watchdog stops the server and deletes the directory.
pub struct Throwaway {
    pub admin_url: String,
    /// Holds `data/` (the cluster), the unix socket and `server.log`; gone after cleanup.
    pub root: PathBuf,
    pub port: u16,
    bin_dir: PathBuf,
    run_as: Option<User>,
    server: Mutex<Option<Child>>,
}

#[derive(Clone)]
struct User {
    name: String,
    uid: u32,
    gid: u32,
}

impl Throwaway {
    /// Creates and starts a server whose lifetime is tied to process `owner`.
    pub async fn start(owner: u32) -> Result<Throwaway, String> {
        Throwaway::start_configured(owner, |_| Ok(())).await
    }

    /// As [`Throwaway::start`], with `configure` run on the new cluster's data directory before
    /// the server first starts (certificates, `postgresql.conf`, `pg_hba.conf`); what it writes
    /// there is then handed to the server's user.
    pub async fn start_configured(
        owner: u32,
        configure: impl FnOnce(&Path) -> Result<(), String>,
    ) -> Result<Throwaway, String> {
        let bin_dir = find_bin_dir()?;
        let run_as = if running_as_root() {
            Some(unprivileged_user()?)
        } else {
            None
        };
        let root = tempfile::Builder::new()
            .prefix("dirichlet-pg-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?
            .keep();
        // From here on the directory is the watchdog's to remove, whatever happens next.
        spawn_watchdog(owner, &root)?;
        if let Some(user) = &run_as {
            std::os::unix::fs::chown(&root, Some(user.uid), Some(user.gid)).map_err(|e| {
                format!("cannot hand {} to user {}: {e}", root.display(), user.name)
            })?;
        }

        let data = root.join("data");
        let mut args: Vec<OsString> = vec!["-D".into(), data.clone().into()];
        args.extend(
            [
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ]
            .map(OsString::from),
        );
        let initdb =
            tokio::process::Command::from(as_user(run_as.as_ref(), &bin_dir.join("initdb"), &args))
                .stdin(Stdio::null())
                .output()
                .await
                .map_err(|e| format!("cannot run {}: {e}", bin_dir.join("initdb").display()))?;
        if !initdb.status.success() {
            return Err(format!(
                "initdb failed ({}): {}",
                initdb.status,
                String::from_utf8_lossy(&initdb.stderr).trim()
            ));
        }

        configure(&data)?;
        if let Some(user) = &run_as {
            chown_tree(&data, user)?;
        }

        // A port found free may be taken before the server binds it; try a few.
        let mut last_error = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            let mut server = Throwaway {
                admin_url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
                root: root.clone(),
                port,
                bin_dir: bin_dir.clone(),
                run_as: run_as.clone(),
                server: Mutex::new(None),
            };
            match server.launch().await {
                Ok(()) => return Ok(server),
                Err(e) => {
                    last_error = e;
                    server.server.get_mut().expect("not poisoned").take();
                }
            }
        }
        Err(last_error)
    }

    /// Fast shutdown, as an operator would do; returns once the server has exited.
    pub async fn stop(&self) -> Result<(), String> {
        self.shut_down("INT").await
    }

    /// Immediate shutdown (`pg_ctl stop -m immediate`: every backend killed at once, no
    /// checkpoint, crash recovery at the next start); returns once the server has exited.
    pub async fn stop_immediately(&self) -> Result<(), String> {
        self.shut_down("QUIT").await
    }

    /// Sends `signal` to the postmaster and waits for it to exit.
    async fn shut_down(&self, signal: &str) -> Result<(), String> {
        let mut child = self
            .server
            .lock()
            .expect("not poisoned")
            .take()
            .ok_or("the server is not running")?;
        let pid = std::fs::read_to_string(self.root.join("data/postmaster.pid"))
            .map_err(|e| format!("cannot read postmaster.pid: {e}"))?;
        let pid = pid.lines().next().unwrap_or_default().trim().to_owned();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("kill -{signal} {pid} failed"));
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        while child.try_wait().map_err(|e| e.to_string())?.is_none() {
            if Instant::now() > deadline {
                return Err("the server did not stop".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Starts the stopped server again, on the same port with the same data.
    pub async fn restart(&self) -> Result<(), String> {
        self.launch().await
    }

    async fn launch(&self) -> Result<(), String> {
        let log_path = self.root.join("server.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
        let err_log = log.try_clone().map_err(|e| e.to_string())?;
        let mut args: Vec<OsString> = vec![
            "-D".into(),
            self.root.join("data").into(),
            "-p".into(),
            self.port.to_string().into(),
            "-k".into(),
            self.root.clone().into(),
        ];
        for setting in [
            "listen_addresses=127.0.0.1",
            "max_connections=200",
            // Nothing here needs to survive a crash, and tests should not wait for disks.
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
        ] {
            args.extend(["-c", setting].map(OsString::from));
        }
        let mut command = as_user(self.run_as.as_ref(), &self.bin_dir.join("postgres"), &args);
        command.stdin(Stdio::null()).stdout(log).stderr(err_log);
        // Its own process group: a Ctrl-C aimed at `cargo test` must leave the cleanup to the
        // watchdog instead of killing the server under it.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start postgres: {e}"))?;
        *self.server.lock().expect("not poisoned") = Some(child);

        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let exited = self
                .server
                .lock()
                .expect("not poisoned")
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                return Err(format!(
                    "postgres exited ({status}) on port {}: {}",
                    self.port,
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                ));
            }
            if check(&self.admin_url).await.is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "postgres did not answer on port {} within {READY_TIMEOUT:?}",
                    self.port
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Hands `dir` and everything under it to `user` (files written there by a test running as root).
fn chown_tree(dir: &Path, user: &User) -> Result<(), String> {
    std::os::unix::fs::lchown(dir, Some(user.uid), Some(user.gid))
        .map_err(|e| format!("cannot hand {} to user {}: {e}", dir.display(), user.name))?;
    if dir.is_dir() && !dir.is_symlink() {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries {
            chown_tree(&entry.map_err(|e| e.to_string())?.path(), user)?;
        }
    }
    Ok(())
}

/// A shell loop that outlives the owner: statics never run `Drop`, and a killed test process
/// runs nothing at all.
fn spawn_watchdog(owner: u32, root: &Path) -> Result<(), String> {
    const SCRIPT: &str = r#"
owner="$1"; root="$2"
while kill -0 "$owner" 2>/dev/null; do sleep 1; done
pid=$(head -n 1 "$root/data/postmaster.pid" 2>/dev/null)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -QUIT "$pid" 2>/dev/null
    n=0
    while kill -0 "$pid" 2>/dev/null && [ "$n" -lt 10 ]; do sleep 1; n=$((n + 1)); done
    kill -KILL "$pid" 2>/dev/null
fi
rm -rf "$root"
"#;
    let mut command = Command::new("sh");
    command
        .args(["-c", SCRIPT, "watchdog", &owner.to_string()])
        .arg(root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    command
        .spawn()
        .map(drop)
        .map_err(|e| format!("cannot start the cleanup watchdog: {e}"))
}

fn find_bin_dir() -> Result<PathBuf, String> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    let mut versioned: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| {
                    let version = entry.file_name().to_str()?.parse().ok()?;
                    Some((version, entry.path().join("bin")))
                })
                .collect()
        })
        .unwrap_or_default();
    versioned.sort_by_key(|(version, _)| std::cmp::Reverse(*version));
    candidates.extend(versioned.into_iter().map(|(_, dir)| dir));
    candidates
        .into_iter()
        .find(|dir| dir.join("initdb").is_file() && dir.join("postgres").is_file())
        .ok_or_else(|| {
            "initdb and postgres are neither on PATH nor in /usr/lib/postgresql/*/bin".into()
        })
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's effective user.
    match std::fs::metadata("/proc/self") {
        Ok(meta) => meta.uid() == 0,
        Err(_) => Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0"),
    }
}

/// PostgreSQL refuses to run as root. Debian's package creates `postgres`; `nobody` is the
/// fallback.
fn unprivileged_user() -> Result<User, String> {
    let passwd = std::fs::read_to_string("/etc/passwd")
        .map_err(|e| format!("cannot read /etc/passwd: {e}"))?;
    let find = |wanted: &str| {
        passwd.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            if fields.len() < 4 || fields[0] != wanted {
                return None;
            }
            Some(User {
                name: wanted.to_owned(),
                uid: fields[2].parse().ok()?,
                gid: fields[3].parse().ok()?,
            })
        })
    };
    find("postgres")
        .or_else(|| find("nobody"))
        .ok_or_else(|| "running as root, and there is neither a `postgres` nor a `nobody` user to run PostgreSQL as".into())
}

/// `program args…` run as `user` (or as ourselves when `None`).
fn as_user(user: Option<&User>, program: &Path, args: &[OsString]) -> Command {
    let Some(user) = user else {
        let mut command = Command::new(program);
        command.args(args);
        return command;
    };
    let mut command;
    if let Some(runuser) = find_tool("runuser") {
        command = Command::new(runuser);
        command.args(["-u", &user.name, "--"]);
    } else if let Some(setpriv) = find_tool("setpriv") {
        command = Command::new(setpriv);
        command.args([
            "--reuid",
            &user.uid.to_string(),
            "--regid",
            &user.gid.to_string(),
        ]);
        command.args(["--clear-groups", "--"]);
    } else {
        // su takes one shell command line.
        let line = std::iter::once(program.as_os_str())
            .chain(args.iter().map(OsString::as_os_str))
            .map(|word| format!("'{}'", word.to_string_lossy().replace('\'', r"'\''")))
            .collect::<Vec<_>>()
            .join(" ");
        command = Command::new("su");
        command.args([&user.name, "-s", "/bin/sh", "-c", &format!("exec {line}")]);
        return command;
    }
    command.arg(program).args(args);
    command
}

fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}
