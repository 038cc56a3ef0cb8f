//! Wiring: configuration → store → state → listener, and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

use crate::access::{generate_admin_token, random_bytes, sha256};
use crate::config::Settings;
use crate::http::limits::WriteTimeout;
use crate::http::metrics::Metrics;
use crate::http::{router, AppState};
use crate::ledger::{LedgerStore, StoreError};
use crate::store::{self, StoreOptions};
use secrecy::ExposeSecret;

const ADMIN_SECRET: &str = "admin_token_sha256";
const FINGERPRINT_SECRET: &str = "fingerprint_key";

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot open the database: {0}")]
    Store(#[from] StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("invalid fingerprint_key: {0}")]
    FingerprintKey(String),
    #[error("cannot start the planner's threads: {0}")]
    Planner(String),
}

/// The planner's own thread pool (`Settings::planner_threads`).
fn planner_pool(threads: usize) -> Result<rayon::ThreadPool, StartupError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("planner-{i}"))
        .build()
        .map_err(|e| StartupError::Planner(e.to_string()))
}

pub struct Application {
    listener: TcpListener,
    state: AppState,
    /// The admin token, when this start generated it (to be shown once).
    pub generated_admin_token: Option<String>,
}

impl Application {
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        let options = StoreOptions {
            max_connections: settings.db_max_connections,
            acquire_timeout: settings.db_acquire_timeout(),
            max_stored_cells: settings.max_stored_cells,
            commit_slots: settings.db_commit_slots,
        };
        let store = store::connect(&settings.database_url, &options).await?;
        let (admin_digest, generated_admin_token) = admin_digest(&settings, store.as_ref()).await?;
        let fingerprint_key = fingerprint_key(&settings, store.as_ref()).await?;
        let listener =
            TcpListener::bind(settings.listen)
                .await
                .map_err(|source| StartupError::Bind {
                    addr: settings.listen,
                    source,
                })?;
        let settings_bodies = settings.max_inflight_body_bytes;
        let planner_threads = settings.planner_threads();
        let state = AppState {
            store,
            settings: Arc::new(settings),
            admin_digest,
            fingerprint_key,
            metrics: Metrics::new(),
            tasks: TaskTracker::new(),
            caches: Default::default(),
            bodies: Arc::new(crate::http::limits::Bodies::new(settings_bodies)),
            planner: Arc::new(planner_pool(planner_threads)?),
        };
        Ok(Application {
            listener,
            state,
            generated_admin_token,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn backend(&self) -> &'static str {
        self.state.store.backend()
    }

    /// Serve on a task of this process until the returned [`LocalServer`] is stopped or dropped:
    /// the one way the integration tests and the examples start a server in-process.
    pub fn spawn(self) -> LocalServer {
        let address = format!("http://{}", self.local_addr());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(self.run_until_stopped(async move {
            // A dropped sender stops the server too.
            let _ = stopped.await;
        }));
        LocalServer {
            address,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Serve until `shutdown` resolves, then stop accepting, finish in-flight requests and wait
    /// for release tasks whose clients went away.
    ///
    /// HTTP/1.1 served by hyper directly (what `axum::serve` does, plus limits it cannot set):
    /// the parser's caps on header lines and on the request head are set well above the
    /// configured `max_headers`/`max_header_bytes`, so that the router's header check answers
    /// an oversized request with a 431 problem document; only a head beyond the caps gets
    /// hyper's bare 431. A client that does not finish its request head within the request
    /// timeout is disconnected, and so is one that stops reading its response for the write
    /// timeout (which frees the response).
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let tasks = self.state.tasks.clone();
        let settings = self.state.settings.clone();
        let app = router(self.state);
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(settings.request_timeout())
            .max_headers(parser_max_headers(&settings))
            .max_buf_size(parser_max_head_bytes(&settings));
        let graceful = GracefulShutdown::new();
        let mut listener = self.listener;
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                accepted = axum::serve::Listener::accept(&mut listener) => accepted,
                () = &mut shutdown => break,
            };
            tracing::trace!(%peer, "connection accepted");
            let _ = stream.set_nodelay(true);
            let service = TowerToHyperService::new(app.clone());
            let stream = WriteTimeout::new(stream, settings.write_timeout());
            let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::trace!(error = %e, "connection ended with an error");
                }
            });
        }
        drop(listener);
        graceful.shutdown().await;
        tasks.close();
        tasks.wait().await;
        Ok(())
    }
}

/// The HTTP/1 parser's cap on header lines: well above the configured limit (and never below
/// hyper's default of 100).
fn parser_max_headers(settings: &Settings) -> usize {
    settings.max_headers.saturating_mul(4).max(100)
}

/// The HTTP/1 parser's cap on its read buffer, which must hold the request line and the whole
/// header section: well above the configured limit (and never below hyper's default, ~400 KiB).
fn parser_max_head_bytes(settings: &Settings) -> usize {
    settings
        .max_header_bytes
        .saturating_mul(4)
        .max(8192 + 4096 * 100)
}

/// The configured admin token wins. Otherwise the digest stored by an earlier start is used, or
/// a token is generated, its digest stored (first replica wins) and the token returned once.
async fn admin_digest(
    settings: &Settings,
    store: &dyn LedgerStore,
) -> Result<([u8; 32], Option<String>), StartupError> {
    if let Some(token) = &settings.admin_token {
        return Ok((sha256(token.expose_secret().as_bytes()), None));
    }
    if let Some(stored) = store.get_secret(ADMIN_SECRET).await? {
        return Ok((to_key(&stored)?, None));
    }
    let token = generate_admin_token();
    let digest = sha256(token.as_bytes());
    let stored = store.secret_or_init(ADMIN_SECRET, &digest).await?;
    let stored = to_key(&stored)?;
    // Another replica may have won the race: then its token is the admin token, not ours.
    let generated = (stored == digest).then_some(token);
    Ok((stored, generated))
}

async fn fingerprint_key(
    settings: &Settings,
    store: &dyn LedgerStore,
) -> Result<[u8; 32], StartupError> {
    if let Some(hex_key) = &settings.fingerprint_key {
        let bytes = hex::decode(hex_key.expose_secret().trim())
            .map_err(|e| StartupError::FingerprintKey(e.to_string()))?;
        return bytes.try_into().map_err(|_| {
            StartupError::FingerprintKey("it must be 32 bytes (64 hex digits)".into())
        });
    }
    let stored = store
        .secret_or_init(FINGERPRINT_SECRET, &random_bytes())
        .await?;
    to_key(&stored)
}

fn to_key(bytes: &[u8]) -> Result<[u8; 32], StartupError> {
    bytes.try_into().map_err(|_| {
        StartupError::Store(StoreError::Corrupt(
            "a stored secret is not 32 bytes".into(),
        ))
    })
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed when this is called, not when the
/// future is first polled: called before the address is announced, a signal sent as soon as the
/// announcement is seen stops the server gracefully instead of killing it (the default action).
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::terminate()).ok(),
            signal(SignalKind::interrupt()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let (mut terminate, mut interrupt) = signals;
            let wait = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = wait(terminate.take()) => {},
                _ = wait(interrupt.take()) => {},
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("shutdown requested: finishing in-flight requests");
    }
}

/// A server running on a task of this process ([`Application::spawn`]).
pub struct LocalServer {
    /// `http://IP:PORT`
    pub address: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl LocalServer {
    /// Stop accepting, finish in-flight requests and release tasks, then return.
    pub async fn stop(mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.map_err(std::io::Error::other)?,
            None => Ok(()),
        }
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        // Dropping the sender resolves the shutdown future: the server stops gracefully on its
        // own task.
        self.stop.take();
    }
}
