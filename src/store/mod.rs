//! Storage backends: the SQL of each dialect behind [`crate::ledger::LedgerStore`].
//! Migrations live in `migrations/postgres` and `migrations/sqlite` and are applied at start-up.

pub mod codec;
pub mod deferred;
pub mod postgres;
pub mod sqlite;

use std::sync::Arc;
use std::time::Duration;

use sqlx::error::DatabaseError;
use sqlx::migrate::MigrateError;

use crate::ledger::{LedgerStore, StoreError};

/// Connection settings shared by both backends.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub max_connections: u32,
    /// How long a request waits for a connection (or, on SQLite, for the write lock) before the
    /// store reports `Unavailable`: the service fails fast instead of hanging when the database is down.
    pub acquire_timeout: Duration,
    /// Most output cells stored per dataset over all its releases; a release that would pass it
    /// is refused (`CommitOutcome::OutputQuotaExceeded`) and charges nothing.
    pub max_stored_cells: u64,
    /// PostgreSQL: how many release statements run at once through group commit
    /// (`store::postgres::group`); releases arriving while all are busy commit together. 0
    /// turns group commit off: every release commits alone as soon as it has a connection.
    pub commit_slots: usize,
}

impl StoreOptions {
    /// The quota as the databases compare it.
    pub(crate) fn stored_cells_quota(&self) -> i64 {
        i64::try_from(self.max_stored_cells).unwrap_or(i64::MAX)
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
            max_stored_cells: u64::MAX,
            commit_slots: 1,
        }
    }
}

/// The backend a database URL names (`"postgres"` or `"sqlite"`), before connecting: a URL of
/// neither kind is a configuration error that no retry cures.
pub fn backend_of(url: &str) -> Result<&'static str, StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok("postgres")
    } else if url.starts_with("sqlite:") {
        Ok("sqlite")
    } else {
        Err(StoreError::Internal(
            "database URL must start with postgres://, postgresql:// or sqlite:".into(),
        ))
    }
}

/// The database a URL names, for logs: `postgres://USER@HOST:PORT/DB` rebuilt from the parsed
/// options (so neither a password in the URL nor one in its query can appear), or the SQLite
/// file. A URL that does not parse is described by its scheme alone.
pub fn describe(url: &str) -> String {
    match backend_of(url) {
        Ok("postgres") => match url.parse::<sqlx::postgres::PgConnectOptions>() {
            Ok(o) => format!(
                "postgres://{}@{}:{}/{}",
                o.get_username(),
                o.get_host(),
                o.get_port(),
                o.get_database().unwrap_or(o.get_username())
            ),
            Err(_) => "postgres://(a URL that does not parse)".into(),
        },
        Ok(_) => match url.parse::<sqlx::sqlite::SqliteConnectOptions>() {
            Ok(o) => format!("sqlite://{}", o.get_filename().display()),
            Err(_) => "sqlite:(a URL that does not parse)".into(),
        },
        Err(_) => "(not a postgres:// or sqlite: URL)".into(),
    }
}

/// Open the store named by `url` (`postgres://…`/`postgresql://…` or `sqlite://…`/`sqlite:…`),
/// creating a SQLite file if needed, and apply that backend's migrations.
pub async fn connect(
    url: &str,
    options: &StoreOptions,
) -> Result<Arc<dyn LedgerStore>, StoreError> {
    match backend_of(url)? {
        "postgres" => Ok(Arc::new(postgres::PgStore::connect(url, options).await?)),
        _ => Ok(Arc::new(sqlite::SqliteStore::connect(url, options).await?)),
    }
}

/// Classifies a sqlx error for the HTTP layer: `Unavailable` is what a retry may cure (503),
/// `Corrupt` is stored data that cannot be read, everything else is `Internal`. `context` names the
/// operation. Messages are built from error kinds, codes and schema names only, never from a
/// driver's free text that may quote a bound value (PostgreSQL's data and constraint errors do)
/// or from the connection URL (which may hold a password).
pub(crate) fn store_error(context: &str, error: sqlx::Error) -> StoreError {
    use sqlx::Error as E;
    match error {
        E::PoolTimedOut => StoreError::Unavailable(format!(
            "{context}: timed out waiting for a database connection"
        )),
        E::PoolClosed => {
            StoreError::Unavailable(format!("{context}: the connection pool is closed"))
        }
        E::WorkerCrashed => {
            StoreError::Unavailable(format!("{context}: the database worker thread stopped"))
        }
        // rustls reports a failed handshake (an unknown issuer, a host name the certificate
        // does not name, a refused client certificate) as an I/O error wrapping its own: named
        // as TLS here, so that the retry lines say why. Still `Unavailable`: a certificate can
        // be renewed or a server fixed while start-up waits, and it never falls back to clear text.
        E::Io(io) => match tls_failure(&io) {
            Some(tls) => StoreError::Unavailable(format!(
                "{context}: TLS handshake with the database failed: {tls}"
            )),
            None => StoreError::Unavailable(format!(
                "{context}: I/O error talking to the database: {io}"
            )),
        },
        // sqlx's own TLS errors ("server does not support TLS", an unreadable certificate):
        // their text names no secret.
        E::Tls(tls) => StoreError::Unavailable(format!(
            "{context}: TLS error talking to the database: {tls}"
        )),
        // The driver could not make sense of what came over the connection (e.g. a server going
        // away mid-message): that connection is unusable, a fresh one may work. A commit whose
        // statement was sent never gets here (`postgres::outcome_of` makes it unknown first).
        E::Protocol(_) => {
            StoreError::Unavailable(format!("{context}: protocol error talking to the database"))
        }
        E::Database(db) => database_error(context, db.as_ref()),
        E::ColumnDecode { index, .. } => StoreError::Corrupt(format!(
            "{context}: stored column {index} cannot be decoded"
        )),
        E::Decode(_) => StoreError::Corrupt(format!("{context}: a stored value cannot be decoded")),
        E::Migrate(migrate) => match *migrate {
            MigrateError::Execute(inner) | MigrateError::ExecuteMigration(inner, _) => {
                store_error(&format!("{context}: migrations"), inner)
            }
            // Version bookkeeping only: no values in these messages.
            other => StoreError::Internal(format!("{context}: migrations: {other}")),
        },
        E::Configuration(_) => {
            StoreError::Internal(format!("{context}: invalid database URL or options"))
        }
        E::RowNotFound
        | E::TypeNotFound { .. }
        | E::ColumnIndexOutOfBounds { .. }
        | E::ColumnNotFound(_)
        | E::BeginFailed
        | E::InvalidSavePointStatement => StoreError::Internal(format!("{context}: {error}")),
        _ => StoreError::Internal(format!("{context}: unexpected database driver error")),
    }
}

/// The rustls error inside an I/O error, if that is what it is.
fn tls_failure(io: &std::io::Error) -> Option<&rustls::Error> {
    io.get_ref()?.downcast_ref::<rustls::Error>()
}

fn database_error(context: &str, db: &dyn DatabaseError) -> StoreError {
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return postgres_error(context, pg);
    }
    if let Some(sqlite) = db.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
        return sqlite_error(context, sqlite);
    }
    StoreError::Internal(format!("{context}: database error"))
}

fn postgres_error(context: &str, pg: &sqlx::postgres::PgDatabaseError) -> StoreError {
    let code = pg.code();
    let mut message = format!("{context}: SQLSTATE {code}");
    if let Some(constraint) = pg.constraint() {
        message.push_str(&format!(" (constraint {constraint})"));
    }
    // Classes 22 (data exception) and 23 (integrity violation) quote values in their text;
    // the others speak of the server and the schema.
    if !(code.starts_with("22") || code.starts_with("23")) {
        message.push_str(&format!(": {}", pg.message()));
    }
    let class = &code[..code.len().min(2)];
    let unavailable = matches!(class, "08" | "53")
        || matches!(
            code,
            // shutdown, crash, cannot connect now, database dropped, idle-session timeout:
            // the session ended
            "57P01" | "57P02" | "57P03" | "57P04" | "57P05"
            // serialization failure, deadlock: the transaction did nothing and may be retried
            | "40001" | "40P01"
            // read-only transaction (a standby or default_transaction_read_only)
            | "25006"
            // statement_timeout and lock_timeout: busy past the time we are willing to wait
            | "57014" | "55P03"
        );
    // The server's pg_hba.conf has no line for a connection without encryption (only
    // `hostssl`): say how to ask for TLS instead of leaving the operator to decode it.
    if code == "28000" && pg.message().ends_with("no encryption") {
        message.push_str(
            " (the server accepts this connection only over SSL/TLS: set sslmode=verify-full \
             and sslrootcert=CA-FILE in the database URL, or at least sslmode=require)",
        );
    }
    if unavailable {
        StoreError::Unavailable(message)
    } else if matches!(code, "XX001" | "XX002") {
        StoreError::Corrupt(message)
    } else {
        StoreError::Internal(message)
    }
}

fn sqlite_error(context: &str, sqlite: &sqlx::sqlite::SqliteError) -> StoreError {
    // Extended result code; its low byte is the primary code.
    let code = sqlite
        .code()
        .and_then(|c| c.parse::<i32>().ok())
        .unwrap_or(-1);
    // SQLite's messages name tables, columns and constraints, never bound values.
    let message = format!("{context}: SQLite error {code}: {}", sqlite.message());
    match code & 0xff {
        // BUSY, LOCKED, NOMEM, READONLY, IOERR, FULL, CANTOPEN, PROTOCOL
        5 | 6 | 7 | 8 | 10 | 13 | 14 | 15 => StoreError::Unavailable(message),
        // CORRUPT, NOTADB
        11 | 26 => StoreError::Corrupt(message),
        _ => StoreError::Internal(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_described_without_their_passwords() {
        for (url, described) in [
            (
                "postgres://ledger:s3cret@db.internal:6543/dirichlet?sslmode=disable",
                "postgres://ledger@db.internal:6543/dirichlet",
            ),
            (
                "postgresql://ledger@db/dirichlet?password=s3cret",
                "postgres://ledger@db:5432/dirichlet",
            ),
            (
                "sqlite:///var/lib/x/ledger.db",
                "sqlite:///var/lib/x/ledger.db",
            ),
            (
                "mysql://root:s3cret@h/db",
                "(not a postgres:// or sqlite: URL)",
            ),
        ] {
            assert_eq!(describe(url), described, "{url}");
            assert!(!describe(url).contains("s3cret"));
        }
        assert_eq!(backend_of("postgresql://h/db").unwrap(), "postgres");
        assert_eq!(backend_of("sqlite::memory:").unwrap(), "sqlite");
        assert!(matches!(
            backend_of("mysql://h/db"),
            Err(StoreError::Internal(_))
        ));
    }
}
