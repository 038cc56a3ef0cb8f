//! Wiring: configuration → store → state → listener, and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

use crate::access::{generate_admin_token, random_bytes, sha256};
use crate::config::Settings;
use crate::http::limits::WriteTimeout;
use crate::http::metrics::Metrics;
use crate::http::{router, AppState, Keys, Shared};
use crate::ledger::{LedgerStore, StoreError};
use crate::store::{self, deferred::Deferred, StoreOptions};
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
    #[error("cannot read admin_tokens_file {0}")]
    AdminTokens(String),
}

/// The planner's own thread pool (`Settings::planner_threads`).
fn planner_pool(threads: usize) -> Result<rayon::ThreadPool, StartupError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("planner-{i}"))
        .build()
        .map_err(|e| StartupError::Planner(e.to_string()))
}

/// Where start-up's connection to the database stands: `None` while it is trying.
type Progress = Option<Result<Connected, StoreError>>;

/// Start-up connected to the database.
#[derive(Debug, Clone)]
pub struct Connected {
    /// The admin token, when this start generated it (to be shown once).
    pub generated_admin_token: Option<String>,
}

/// Start-up's connection to the database, which [`Application::start`] runs in the background.
#[derive(Clone)]
pub struct Readiness(tokio::sync::watch::Receiver<Progress>);

impl Readiness {
    /// Resolves once start-up has connected to the database (and applied the migrations), or
    /// has given up on an error that no retry cures (a wrong password, a failed migration).
    pub async fn wait(mut self) -> Result<Connected, StoreError> {
        match self.0.wait_for(Option::is_some).await {
            Ok(progress) => progress.clone().expect("waited for Some"),
            // The task is gone without a word: it was stopped with the server.
            Err(_) => Err(StoreError::Unavailable(
                "start-up stopped before it connected to the database".into(),
            )),
        }
    }

    /// Resolves with start-up's error, if it gives up; never otherwise.
    async fn failed(mut self) -> StoreError {
        if let Ok(progress) = self.0.wait_for(|p| matches!(p, Some(Err(_)))).await {
            if let Some(Err(e)) = progress.clone() {
                return e;
            }
        }
        std::future::pending().await
    }
}

pub struct Application {
    listener: TcpListener,
    state: AppState,
    readiness: Readiness,
    connecting: tokio::task::JoinHandle<()>,
    /// Reads `admin_tokens_file` again when it changes (none without the file).
    watching: Option<tokio::task::JoinHandle<()>>,
    /// The admin token, when this start generated it (to be shown once): set by
    /// [`Application::build`]; after [`Application::start`], see [`Application::readiness`].
    pub generated_admin_token: Option<String>,
}

impl Application {
    /// [`Application::start`], then wait until the database is connected: how the tests and
    /// examples start a server in-process, on a database that is up.
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        let mut app = Self::start(settings).await?;
        let connected = app.readiness().wait().await?;
        app.generated_admin_token = connected.generated_admin_token;
        Ok(app)
    }

    /// Check the configuration, bind the listener, and connect to the database in the
    /// background: while PostgreSQL is unreachable, start-up tries again after a capped
    /// exponential backoff (`db_connect_backoff_ms` doubling up to `db_connect_max_backoff_ms`),
    /// logging one line per retry, and the server (once run) answers `/healthz` but 503 on
    /// `/readyz` and on every route that needs the database. Errors that no retry cures (a URL
    /// of neither kind, an invalid fingerprint key, a port taken) are returned here; those the
    /// database reports (a wrong password, a failed migration) end the server's run.
    pub async fn start(settings: Settings) -> Result<Self, StartupError> {
        let backend = store::backend_of(&settings.database_url)?;
        let configured_fingerprint = configured_fingerprint_key(&settings)?;
        let listener =
            TcpListener::bind(settings.listen)
                .await
                .map_err(|source| StartupError::Bind {
                    addr: settings.listen,
                    source,
                })?;
        // Before the connection task starts, so that a failure here leaves nothing running.
        let planner = Arc::new(planner_pool(settings.planner_threads())?);
        let admin_tokens = Arc::new(
            crate::http::admins::AdminTokens::load(settings.admin_tokens_file.as_deref())
                .map_err(StartupError::AdminTokens)?,
        );
        let oidc = crate::http::oidc::Verifier::from_settings(&settings).map(Arc::new);
        let watching = admin_tokens.is_watched().then(|| {
            tokio::spawn(
                admin_tokens
                    .clone()
                    .watch(Duration::from_millis(settings.admin_tokens_poll_ms)),
            )
        });
        let store = Arc::new(Deferred::new(backend));
        let keys = Arc::new(OnceLock::new());
        let settings = Arc::new(settings);
        let (progress, readiness) = tokio::sync::watch::channel(None);
        let connecting = tokio::spawn(connect_with_retry(
            settings.clone(),
            configured_fingerprint,
            store.clone(),
            keys.clone(),
            progress,
        ));
        let state = AppState::new(Shared {
            store,
            keys,
            bodies: Arc::new(crate::http::limits::Bodies::new(
                settings.max_inflight_body_bytes,
            )),
            settings,
            metrics: Metrics::new(),
            tasks: TaskTracker::new(),
            caches: Default::default(),
            planner,
            admin_tokens,
            oidc,
        });
        Ok(Application {
            listener,
            state,
            readiness: Readiness(readiness),
            connecting,
            watching,
            generated_admin_token: None,
        })
    }

    /// Start-up's connection to the database.
    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
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
        let mut failed = std::pin::pin!(self.readiness.failed());
        let mut outcome = Ok(());
        loop {
            let (stream, peer) = tokio::select! {
                accepted = axum::serve::Listener::accept(&mut listener) => accepted,
                () = &mut shutdown => break,
                error = &mut failed => {
                    outcome = Err(std::io::Error::other(StartupError::Store(error)));
                    break;
                }
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
        // Stopped while still trying to reach the database: stop trying.
        self.connecting.abort();
        if let Some(watching) = &self.watching {
            watching.abort();
        }
        graceful.shutdown().await;
        tasks.close();
        tasks.wait().await;
        outcome
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

/// Start-up's connection to the database: tries until it succeeds or fails on an error that no
/// retry cures (anything but `Unavailable` from PostgreSQL), and reports the outcome on
/// `progress`. The store and the keys are filled in on
/// success, the store first: the service is ready once the keys are known.
async fn connect_with_retry(
    settings: Arc<Settings>,
    configured_fingerprint: Option<[u8; 32]>,
    deferred: Arc<Deferred>,
    keys: Arc<OnceLock<Keys>>,
    progress: tokio::sync::watch::Sender<Progress>,
) {
    let options = StoreOptions {
        max_connections: settings.db_max_connections,
        acquire_timeout: settings.db_acquire_timeout(),
        max_stored_cells: settings.max_stored_cells,
        commit_slots: settings.db_commit_slots,
    };
    // Rebuilt from the parsed URL: never its password.
    let database = store::describe(&settings.database_url);
    let started = std::time::Instant::now();
    let mut retries = 0u32;
    loop {
        let attempt = async {
            let store = store::connect(&settings.database_url, &options).await?;
            let (admin_digest, generated) = admin_digest(&settings, store.as_ref()).await?;
            let fingerprint_key = match configured_fingerprint {
                Some(key) => key,
                None => stored_fingerprint_key(store.as_ref()).await?,
            };
            let keys = Keys {
                admin_digest,
                fingerprint_key,
            };
            Ok::<_, StoreError>((store, keys, generated))
        };
        match attempt.await {
            Ok((store, found, generated_admin_token)) => {
                deferred.connect(store);
                let _ = keys.set(found);
                if retries > 0 {
                    tracing::info!(
                        %database,
                        retries,
                        waited_ms = started.elapsed().as_millis() as u64,
                        "database connected"
                    );
                }
                progress.send_replace(Some(Ok(Connected {
                    generated_admin_token,
                })));
                return;
            }
            // A SQLite file that cannot be opened now (a read-only mount, a missing directory)
            // is a configuration error that waiting does not cure, as before.
            Err(StoreError::Unavailable(reason)) if deferred.backend() == "postgres" => {
                retries = retries.saturating_add(1);
                let wait = jittered(settings.db_connect_backoff(retries));
                tracing::warn!(
                    %database,
                    retry = retries,
                    retry_in_ms = wait.as_millis() as u64,
                    error = %reason,
                    "database unreachable at start-up; retrying"
                );
                tokio::time::sleep(wait).await;
            }
            Err(error) => {
                tracing::error!(%database, %error, "start-up cannot use the database; giving up");
                progress.send_replace(Some(Err(error)));
                return;
            }
        }
    }
}

/// A wait drawn uniformly between half of `wait` and all of it: replicas that started together
/// (compose, a rollout) do not knock on the database in step.
fn jittered(wait: Duration) -> Duration {
    let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    let half = ms / 2;
    let bytes: [u8; 8] = random_bytes()[..8].try_into().expect("8 bytes");
    let spread = u64::from_le_bytes(bytes) % (ms - half + 1);
    Duration::from_millis(half + spread)
}

/// The configured admin token wins. Otherwise the digest stored by an earlier start is used, or
/// a token is generated, its digest stored (first replica wins) and the token returned once.
async fn admin_digest(
    settings: &Settings,
    store: &dyn LedgerStore,
) -> Result<([u8; 32], Option<String>), StoreError> {
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

/// The configured fingerprint key, checked before anything else starts.
fn configured_fingerprint_key(settings: &Settings) -> Result<Option<[u8; 32]>, StartupError> {
    let Some(hex_key) = &settings.fingerprint_key else {
        return Ok(None);
    };
    let bytes = hex::decode(hex_key.expose_secret().trim())
        .map_err(|e| StartupError::FingerprintKey(e.to_string()))?;
    bytes
        .try_into()
        .map(Some)
        .map_err(|_| StartupError::FingerprintKey("it must be 32 bytes (64 hex digits)".into()))
}

/// The key stored by an earlier start (any replica's), or a new random one.
async fn stored_fingerprint_key(store: &dyn LedgerStore) -> Result<[u8; 32], StoreError> {
    let stored = store
        .secret_or_init(FINGERPRINT_SECRET, &random_bytes())
        .await?;
    to_key(&stored)
}

fn to_key(bytes: &[u8]) -> Result<[u8; 32], StoreError> {
    bytes
        .try_into()
        .map_err(|_| StoreError::Corrupt("a stored secret is not 32 bytes".into()))
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
