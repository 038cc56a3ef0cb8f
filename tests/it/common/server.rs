//! The real binary as a child process — the one way the tests run it: replicas that can be
//! started (with the test configuration, or with exactly the environment given), killed with
//! SIGKILL, stopped with a signal and restarted on the same port with the same configuration.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use super::app::ADMIN_TOKEN;

const START_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// One server process (and its successors after restarts), logging to `<log_dir>/<name>.log`.
pub struct Replica {
    pub name: String,
    pub port: u16,
    env: Vec<(String, String)>,
    log_path: PathBuf,
    child: Option<Child>,
    /// How many processes this replica has been (1 + restarts).
    pub starts: u32,
    /// Everything the processes printed on standard output.
    pub stdout: Arc<Mutex<Vec<String>>>,
    /// Whether a start waits for the database to be connected (the binary's "ready" line) or
    /// only for the listener (its address line).
    wait_ready: bool,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Replica {
    /// Starts the binary on a free port with `DIRICHLET_DATABASE_URL = database_url`, the test
    /// admin token, JSON logs at `log_level`, and `env` on top. Panics if it does not announce
    /// its address within a minute.
    pub fn start(
        name: &str,
        database_url: &str,
        env: &[(&str, &str)],
        log_dir: &Path,
        log_level: &str,
    ) -> Replica {
        let mut env = env.to_vec();
        env.insert(0, ("DIRICHLET_ADMIN_TOKEN", ADMIN_TOKEN));
        Replica::start_without_admin_token(name, database_url, &env, log_dir, log_level)
    }

    /// One attempt at [`Replica::start`]: the error says why the process did not come up (its
    /// exit status and the tail of its log).
    pub fn try_start(
        name: &str,
        database_url: &str,
        env: &[(&str, &str)],
        log_dir: &Path,
        log_level: &str,
    ) -> Result<Replica, String> {
        let mut env = env.to_vec();
        env.insert(0, ("DIRICHLET_ADMIN_TOKEN", ADMIN_TOKEN));
        let mut replica = Replica::configure(name, database_url, &env, log_dir, log_level);
        replica.port = free_port();
        replica.launch().map(|()| replica)
    }

    /// As [`Replica::start`], without configuring an admin token (unless `env` does): the
    /// first start against a database generates one and prints it.
    pub fn start_without_admin_token(
        name: &str,
        database_url: &str,
        env: &[(&str, &str)],
        log_dir: &Path,
        log_level: &str,
    ) -> Replica {
        Replica::configure(name, database_url, env, log_dir, log_level).launch_on_a_free_port()
    }

    /// As [`Replica::start`], returning as soon as the process listens, without waiting for its
    /// database to be connected.
    pub fn start_listening(
        name: &str,
        database_url: &str,
        env: &[(&str, &str)],
        log_dir: &Path,
        log_level: &str,
    ) -> Replica {
        let mut env = env.to_vec();
        env.insert(0, ("DIRICHLET_ADMIN_TOKEN", ADMIN_TOKEN));
        let mut replica = Replica::configure(name, database_url, &env, log_dir, log_level);
        replica.wait_ready = false;
        replica.launch_on_a_free_port()
    }

    /// The binary with exactly `env` (and PATH), nothing else set for it: how a user starts it
    /// (the admin token generated on first start, configuration from the environment).
    pub fn start_bare(name: &str, env: &[(&str, &str)], log_dir: &Path) -> Replica {
        let replica = Replica {
            name: name.into(),
            port: 0,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            log_path: log_dir.join(format!("{name}.log")),
            child: None,
            starts: 0,
            stdout: Arc::new(Mutex::new(Vec::new())),
            wait_ready: true,
        };
        replica.launch_on_a_free_port()
    }

    /// A port found free may be taken before the server binds it; try a few.
    fn launch_on_a_free_port(mut self) -> Replica {
        let mut last = String::new();
        for _ in 0..3 {
            self.port = free_port();
            match self.launch() {
                Ok(()) => return self,
                Err(e) => last = e,
            }
        }
        panic!("replica {} did not start: {last}", self.name);
    }

    fn configure(
        name: &str,
        database_url: &str,
        env: &[(&str, &str)],
        log_dir: &Path,
        log_level: &str,
    ) -> Replica {
        let mut all: Vec<(String, String)> = vec![
            ("DIRICHLET_DATABASE_URL".into(), database_url.into()),
            ("DIRICHLET_LOG_FORMAT".into(), "json".into()),
            ("RUST_LOG".into(), log_level.into()),
        ];
        all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Replica {
            name: name.into(),
            port: 0,
            env: all,
            log_path: log_dir.join(format!("{name}.log")),
            child: None,
            starts: 0,
            stdout: Arc::new(Mutex::new(Vec::new())),
            wait_ready: true,
        }
    }

    pub fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn launch(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| format!("cannot open {}: {e}", self.log_path.display()))?;
        let mut child = Command::new(env!("CARGO_BIN_EXE_dirichlet-release"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("DIRICHLET_LISTEN", format!("127.0.0.1:{}", self.port))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| format!("cannot start the binary: {e}"))?;
        self.starts += 1;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        let lines = self.stdout.clone();
        // The address line, or the ready line (printed once the database is connected).
        let awaited = if self.wait_ready {
            "dirichlet-release ready"
        } else {
            "dirichlet-release listening on "
        };
        // Reads the announcement, then keeps draining so the child never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut announced = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let announcement = line.starts_with(awaited);
                lines.lock().unwrap().push(line);
                if !announced && announcement {
                    announced = true;
                    let _ = tx.send(());
                }
            }
        });
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(()) => {
                    self.child = Some(child);
                    return Ok(());
                }
                Err(mpsc::RecvTimeoutError::Timeout)
                | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                        return Err(format!(
                            "exited with {status} before announcing it was up; log tail: {}",
                            self.log_tail(5)
                        ));
                    }
                    if Instant::now() > deadline {
                        let _ = child.kill();
                        let _ = child.wait();
                        return Err("did not announce it was up within a minute".into());
                    }
                }
            }
        }
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            // `Child::kill` sends SIGKILL on Unix.
            child.kill().expect("SIGKILL delivered");
            child.wait().expect("the killed child is reaped");
        }
    }

    /// SIGTERM, and the exit status once the process has stopped (bounded).
    pub fn terminate(&mut self) -> ExitStatus {
        self.stop_with("TERM")
    }

    /// Send `signal` ("TERM", "INT", …) and return the exit status once the process has stopped
    /// (bounded).
    pub fn stop_with(&mut self, signal: &str) -> ExitStatus {
        self.signal(signal);
        self.wait_stopped()
    }

    /// Send `signal` to the running process, without waiting.
    pub fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("the replica is running");
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "SIG{signal} delivered");
    }

    /// The exit status once the process has stopped (it is killed after a bound).
    pub fn wait_stopped(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("the replica is running");
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "replica {} did not stop within {STOP_TIMEOUT:?} of a signal",
                    self.name
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the replica again on the same port with the same configuration.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart a stopped replica");
        let mut last = String::new();
        // The port was ours a moment ago; the new process binds it with SO_REUSEADDR.
        for _ in 0..3 {
            match self.launch() {
                Ok(()) => return,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("replica {} did not restart: {last}", self.name);
    }

    /// Still the process that was started (it did not exit on its own)?
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => child.try_wait().ok().flatten().is_none(),
            None => false,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Everything the processes printed on standard output, a line each.
    pub fn stdout_text(&self) -> String {
        self.stdout
            .lock()
            .unwrap()
            .iter()
            .map(|line| format!("{line}\n"))
            .collect()
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let tail: Vec<&str> = log.lines().rev().take(lines).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A log must show no panic and no 500: the failures under test are all meant to be handled.
pub fn assert_log_clean(replica: &Replica) {
    let log = replica.log();
    assert!(
        !log.contains("panicked"),
        "replica {} panicked: {}",
        replica.name,
        replica.log_path().display()
    );
    assert!(
        !log.contains("\"status\":500") && !log.contains("internal error"),
        "replica {} answered 500: {}",
        replica.name,
        replica.log_path().display()
    );
}

/// Stands in for the test process a throwaway PostgreSQL server belongs to: it exits when the
/// test ends, pass or fail, and the server's watchdog then removes the server.
pub struct Owner(Child);

impl Owner {
    pub fn spawn() -> Owner {
        let child = Command::new("sleep")
            .arg("3600")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sleep");
        Owner(child)
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `pg_dump` of a database (plain SQL), from PATH or `/usr/lib/postgresql/*/bin`.
pub fn pg_dump(database_url: &str) -> Vec<u8> {
    let on_path = Command::new("sh")
        .arg("-c")
        .arg("command -v pg_dump")
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let binary = on_path.unwrap_or_else(|| {
        let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.path().join("bin/pg_dump"))
                    .filter(|p| p.exists())
                    .collect()
            })
            .unwrap_or_default();
        candidates.sort();
        candidates
            .pop()
            .expect("pg_dump is installed (Debian package postgresql-client)")
    });
    let out = Command::new(binary)
        .arg("--dbname")
        .arg(database_url)
        .output()
        .expect("pg_dump runs");
    assert!(
        out.status.success(),
        "pg_dump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The SQLite file with its WAL and shared-memory files, concatenated.
pub fn sqlite_bytes(path: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        if let Ok(b) = std::fs::read(format!("{}{suffix}", path.display())) {
            bytes.extend(b);
        }
    }
    bytes
}

/// Whether `needle` occurs in `haystack` as bytes.
pub fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}
