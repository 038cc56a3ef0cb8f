//! The real `dirichlet-release` binary as a child process: started with a given environment,
//! its announced address parsed from standard output, stopped with a signal.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    /// `http://IP:PORT`
    pub address: String,
    pub stderr_path: PathBuf,
    /// Everything printed on standard output so far (drained by a thread).
    pub stdout: Arc<Mutex<Vec<String>>>,
}

/// Start the binary with only PATH plus `env` in its environment; stderr goes to
/// `logs/stderr.log`. Waits (up to 60 s) for the "listening on" line.
pub fn start(env: &[(&str, &str)], logs: &Path) -> Server {
    let stderr_path = logs.join("stderr.log");
    let stderr = std::fs::File::create(&stderr_path).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_dirichlet-release"));
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .current_dir(logs);
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .spawn()
        .expect("the binary starts");
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let stdout = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + Duration::from_secs(60);
    let address = loop {
        let mut line = String::new();
        assert!(
            Instant::now() < deadline,
            "the server did not announce its address"
        );
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!(
                "the server exited early: {}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        stdout.lock().unwrap().push(line.clone());
        if let Some(rest) = line.trim().strip_prefix("dirichlet-release listening on ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    let sink = stdout.clone();
    std::thread::spawn(move || {
        // `lines()` strips the newline `read_line` kept above: put it back, or two lines
        // after the address would run together in `stdout_text`.
        for line in reader.lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line + "\n");
        }
    });
    Server {
        child,
        address,
        stderr_path,
        stdout,
    }
}

impl Server {
    /// Send `signal` (e.g. "TERM", "INT") and wait up to 30 s for the exit status.
    pub fn stop_with(&mut self, signal: &str) -> ExitStatus {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
        self.wait(Duration::from_secs(30))
    }

    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stdout_text(&self) -> String {
        self.stdout.lock().unwrap().concat()
    }

    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
