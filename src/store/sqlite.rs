//! SQLite backend: one file, one service process. Writes that must be serialised take the
//! database's write lock up front (`BEGIN IMMEDIATE`), so a transaction never discovers halfway
//! through that another writer got there first.

use std::str::FromStr;

use async_trait::async_trait;
use chrono::{DateTime, SubsecRound, Utc};
use futures_util::TryStreamExt;
use sha2::{Digest, Sha256};
use sqlx::pool::PoolConnection;
use sqlx::sqlite::SqliteRow;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{Connection, FromRow, Row, Sqlite, SqliteConnection};
use uuid::fmt::Hyphenated;
use uuid::Uuid;

use super::codec::{
    self, committed_release, output_columns, BudgetColumns, DatasetColumns, PopulationColumns,
    ReleaseColumns, ReleaseSummaryColumns, SummaryColumns, DATASET_COLUMNS, POPULATION_COLUMNS,
    RELEASE_SUMMARY_COLUMNS,
};
use super::{store_error, StoreOptions};
use crate::access::{Role, TokenRecord};
use crate::ledger::audit::{self, LogEntry, LogHead};
use crate::ledger::population;
use crate::ledger::*;

const TOKEN_COLUMNS: &str = "id, secret_hash, role, created_at, expires_at, last_used_at, \
     revoked_at, (SELECT json_group_array(dataset_id) FROM \
                     (SELECT dataset_id FROM token_datasets WHERE token_id = tokens.id \
                      ORDER BY dataset_id)) AS datasets";

fn token_record(row: &SqliteRow) -> Result<TokenRecord, StoreError> {
    const CONTEXT: &str = "tokens";
    let get = |e| store_error(CONTEXT, e);
    let role: String = row.try_get("role").map_err(get)?;
    let datasets: String = row.try_get("datasets").map_err(get)?;
    Ok(TokenRecord {
        id: row.try_get("id").map_err(get)?,
        secret_hash: codec::hash32(
            row.try_get("secret_hash").map_err(get)?,
            "tokens.secret_hash",
        )?,
        role: Role::parse(&role)
            .ok_or_else(|| StoreError::Corrupt("tokens.role is not a known role".into()))?,
        datasets: serde_json::from_str(&datasets)
            .map_err(|_| StoreError::Corrupt("token_datasets.dataset_id is not a UUID".into()))?,
        created_at: row.try_get("created_at").map_err(get)?,
        expires_at: row.try_get("expires_at").map_err(get)?,
        last_used_at: row.try_get("last_used_at").map_err(get)?,
        revoked_at: row.try_get("revoked_at").map_err(get)?,
    })
}

/// Selected `FROM releases` (unaliased): `spent_after_units` falls back to the running sum for a
/// row stored without it (`codec::ReleaseColumns`).
const RELEASE_COLUMNS: &str =
    "id, dataset_id, seq, created_at, created_by, mechanism, cost_units, \
     distribution, dimension, idempotency_key, fingerprint, table_rows, label, \
     COALESCE(spent_after_units, (SELECT SUM(r.cost_units) FROM releases r \
              WHERE r.dataset_id = releases.dataset_id AND r.seq <= releases.seq)) \
         AS spent_after_units, row_names, block_from, block_to";

pub struct SqliteStore {
    pool: sqlx::SqlitePool,
    /// The per-dataset output quota, in cells.
    max_stored_cells: i64,
    /// See [`LedgerStore::commit_answer_bound`].
    commit_answer_bound: std::time::Duration,
}

impl SqliteStore {
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        let connect = SqliteConnectOptions::from_str(url).map_err(|e| store_error("connect", e))?;
        create_private(connect.get_filename())?;
        let connect = connect
            .create_if_missing(true)
            // Readers do not block the writer and the writer does not block readers.
            .journal_mode(SqliteJournalMode::Wal)
            // Waiting for another connection's write lock is bounded like waiting for a connection.
            .busy_timeout(options.acquire_timeout)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await
            .map_err(|e| store_error("connect", e))?;
        sqlx::migrate!("migrations/sqlite")
            .run(&pool)
            .await
            .map_err(|e| store_error("connect", e.into()))?;
        Ok(Self {
            pool,
            max_stored_cells: options.stored_cells_quota(),
            // A connection within the acquire timeout, the write lock within the busy timeout
            // (the same), and as long again, at least a second, for the write itself.
            commit_answer_bound: options.acquire_timeout.saturating_mul(2).saturating_add(
                options
                    .acquire_timeout
                    .max(std::time::Duration::from_secs(1)),
            ),
        })
    }

    pub fn pool(&self) -> &sqlx::SqlitePool {
        &self.pool
    }
}

/// Creates a missing database file readable by its owner only. SQLite gives the WAL and shared
/// memory files the database file's permissions, so all three hold token digests (and, without
/// `DIRICHLET_FINGERPRINT_KEY`, the HMAC key) away from other local users. An existing file
/// keeps the permissions it has.
fn create_private(path: &std::path::Path) -> Result<(), StoreError> {
    if path.as_os_str().is_empty() || path.as_os_str() == ":memory:" {
        return Ok(());
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(StoreError::Unavailable(format!(
            "connect: cannot create the database file: {}",
            e.kind()
        ))),
    }
}

/// PostgreSQL keeps microseconds; so does this backend, so that both return the same instants.
fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

async fn fetch_dataset(
    conn: &mut SqliteConnection,
    context: &str,
    id: Uuid,
) -> Result<Option<Dataset>, StoreError> {
    let sql = format!("SELECT {DATASET_COLUMNS} FROM datasets WHERE id = $1");
    sqlx::query_as::<_, DatasetColumns<Hyphenated>>(&sql)
        .bind(id.hyphenated())
        .fetch_optional(conn)
        .await
        .map_err(|e| store_error(context, e))?
        .map(Dataset::try_from)
        .transpose()
}

async fn fetch_keyed(
    conn: &mut SqliteConnection,
    context: &str,
    dataset_id: Uuid,
    key: &str,
) -> Result<Option<(Release, [u8; 32])>, StoreError> {
    let sql = format!(
        "SELECT {RELEASE_COLUMNS} FROM releases WHERE dataset_id = $1 AND idempotency_key = $2"
    );
    sqlx::query_as::<_, ReleaseColumns<Hyphenated>>(&sql)
        .bind(dataset_id.hyphenated())
        .bind(key)
        .fetch_optional(conn)
        .await
        .map_err(|e| store_error(context, e))?
        .map(ReleaseColumns::into_keyed_release)
        .transpose()
}

/// A connection whose transaction failed is closed rather than returned to the pool. After some
/// failures (SQLITE_FULL or SQLITE_IOERR on COMMIT, for instance) SQLite has already rolled the
/// transaction back; the driver's ROLLBACK on drop then fails, and the driver would go on
/// counting the connection as inside a transaction and refuse every later `BEGIN` on it — a
/// 500 on every release that drew that connection, long after the disk had space again.
fn discard_on_error<T>(
    conn: &mut PoolConnection<Sqlite>,
    result: Result<T, StoreError>,
) -> Result<T, StoreError> {
    if result.is_err() {
        conn.close_on_drop();
    }
    result
}

/// The transaction of [`LedgerStore::commit_release`], on one connection.
async fn commit_release_on(
    conn: &mut SqliteConnection,
    new: &NewRelease,
    max_stored_cells: i64,
) -> Result<CommitOutcome, StoreError> {
    const CONTEXT: &str = "commit_release";
    let fail = |e| store_error(CONTEXT, e);
    // Taking the write lock first makes the key check, the admission and the record one
    // serial step: no other writer can interleave, in this process or another.
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(fail)?;

    if let Some(idempotency) = &new.idempotency {
        if let Some((release, fingerprint)) =
            fetch_keyed(&mut tx, CONTEXT, new.dataset_id, &idempotency.key).await?
        {
            tx.rollback().await.map_err(fail)?;
            return Ok(CommitOutcome::Existing {
                release,
                fingerprint,
            });
        }
    }

    // The caller's row of its token's scope (none for the admin): its spend on the dataset and
    // its allocation, if one is set.
    let scope = sqlx::query(
        "SELECT spent_units, allocation_units FROM token_datasets \
          WHERE token_id = $1 AND dataset_id = $2",
    )
    .bind(&new.created_by)
    .bind(new.dataset_id.hyphenated())
    .fetch_optional(&mut *tx)
    .await
    .map_err(fail)?;
    let allocation = match &scope {
        Some(row) => row
            .try_get::<Option<i64>, _>("allocation_units")
            .map_err(fail)?
            .map(|total| -> Result<Allocation, StoreError> {
                Ok(Allocation {
                    token_id: new.created_by.clone(),
                    total: codec::units(total, "token_datasets.allocation_units")?,
                    spent: codec::units(
                        row.try_get("spent_units").map_err(fail)?,
                        "token_datasets.spent_units",
                    )?,
                })
            })
            .transpose()?,
        None => None,
    };
    if let Some(allocation) = allocation.filter(|a| !a.admits(new.cost)) {
        // The dataset's own budget is named first when both refuse, as on PostgreSQL.
        let outcome = match fetch_dataset(&mut tx, CONTEXT, new.dataset_id).await? {
            None => CommitOutcome::DatasetNotFound,
            Some(dataset) if !dataset.budget().admits(new.cost) => CommitOutcome::Exhausted {
                budget: dataset.budget(),
            },
            Some(dataset) => CommitOutcome::AllocationExhausted {
                allocation,
                budget: dataset.budget(),
            },
        };
        tx.rollback().await.map_err(fail)?;
        return Ok(outcome);
    }

    let (distribution, dimension, table_rows) = output_columns(&new.output)?;
    let charged = sqlx::query(
        "UPDATE datasets SET spent_units = spent_units + $2, release_count = release_count + 1, \
                             stored_cells = stored_cells + $3 \
         WHERE id = $1 AND spent_units + $2 <= total_units AND stored_cells + $3 <= $4 \
         RETURNING budget_order, total_units, spent_units, release_count, dp_epsilon, dp_delta, \
                   chain_head, population_id, block_period, block_total_units",
    )
    .bind(new.dataset_id.hyphenated())
    .bind(new.cost.raw())
    .bind(dimension)
    .bind(max_stored_cells)
    .fetch_optional(&mut *tx)
    .await
    .map_err(fail)?;
    let Some(charged) = charged else {
        let outcome = match fetch_dataset(&mut tx, CONTEXT, new.dataset_id).await? {
            None => CommitOutcome::DatasetNotFound,
            // Under the write lock nothing changed since the UPDATE: the quota refused it.
            Some(dataset) if dataset.budget().admits(new.cost) => {
                CommitOutcome::OutputQuotaExceeded {
                    quota: max_stored_cells,
                }
            }
            Some(dataset) => CommitOutcome::Exhausted {
                budget: dataset.budget(),
            },
        };
        tx.rollback().await.map_err(fail)?;
        return Ok(outcome);
    };
    let budget = BudgetState::try_from(BudgetColumns::from_row(&charged).map_err(fail)?)?;
    let prev = codec::hash32(
        charged.try_get("chain_head").map_err(fail)?,
        "datasets.chain_head",
    )?;

    // The blocks it reads, each charged its cost (src/ledger/blocks.rs), under the same lock.
    let blocking = codec::blocking(
        charged.try_get("block_period").map_err(fail)?,
        charged.try_get("block_total_units").map_err(fail)?,
    )?;
    let refused_budget = BudgetState {
        spent: budget.spent.saturating_sub(new.cost),
        releases: budget.releases - 1,
        ..budget
    };
    if let Some(outcome) = charge_blocks(&mut tx, CONTEXT, new, blocking, refused_budget).await? {
        tx.rollback().await.map_err(fail)?;
        return Ok(outcome);
    }

    // Every population node on the dataset's path, under the same write lock (src/ledger/population.rs).
    let population: Option<Hyphenated> = charged.try_get("population_id").map_err(fail)?;
    if let Some(population) = population {
        let path = path_nodes(&mut tx, CONTEXT, population.into()).await?;
        match population::charge_path(&path, budget.spent, new.cost) {
            Ok(after) => write_nodes(&mut tx, CONTEXT, &path, &after).await?,
            Err(refusal) => {
                tx.rollback().await.map_err(fail)?;
                return Ok(CommitOutcome::PopulationExhausted {
                    refusal,
                    budget: BudgetState {
                        spent: budget.spent.saturating_sub(new.cost),
                        releases: budget.releases - 1,
                        ..budget
                    },
                });
            }
        }
    }

    let created_at = now();
    // The log link (src/ledger/audit.rs), under the write lock that also orders the charges.
    let mut link = Sha256::new();
    link.update(audit::link_prefix(new.dataset_id, new.id));
    link.update(budget.releases.to_be_bytes());
    link.update(prev);
    link.update(created_at.timestamp_micros().to_be_bytes());
    link.update(codec::link_suffix(new));
    let chain_hash: [u8; 32] = link.finalize().into();
    let (block_from, block_to) = codec::block_columns(new.blocks);
    sqlx::query(
        "INSERT INTO releases (id, dataset_id, seq, created_at, created_by, mechanism, cost_units, \
                               distribution, dimension, idempotency_key, fingerprint, \
                               table_rows, label, chain_hash, spent_after_units, row_names, \
                               block_from, block_to) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)",
    )
    .bind(new.id.hyphenated())
    .bind(new.dataset_id.hyphenated())
    .bind(budget.releases)
    .bind(created_at)
    .bind(&new.created_by)
    .bind(new.mechanism.to_string())
    .bind(new.cost.raw())
    .bind(distribution)
    .bind(dimension)
    .bind(new.idempotency.as_ref().map(|i| i.key.as_str()))
    .bind(new.idempotency.as_ref().map(|i| &i.fingerprint[..]))
    .bind(table_rows)
    .bind(new.label.as_ref().map(Label::as_str))
    .bind(&chain_hash[..])
    .bind(budget.spent.raw())
    .bind(codec::names_json(new.row_names.as_ref()))
    .bind(block_from)
    .bind(block_to)
    .execute(&mut *tx)
    .await
    .map_err(fail)?;
    if scope.is_some() {
        sqlx::query(
            "UPDATE token_datasets SET spent_units = spent_units + $3 \
              WHERE token_id = $1 AND dataset_id = $2",
        )
        .bind(&new.created_by)
        .bind(new.dataset_id.hyphenated())
        .bind(new.cost.raw())
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    }
    sqlx::query("UPDATE datasets SET chain_head = $2 WHERE id = $1")
        .bind(new.dataset_id.hyphenated())
        .bind(&chain_hash[..])
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    // SQLite's own error on COMMIT means it did not commit (it rolled back, or the transaction
    // is still open and is rolled back when dropped). Losing the connection's worker thread with
    // the COMMIT handed over leaves no answer either way.
    tx.commit().await.map_err(|e| match e {
        e @ sqlx::Error::Database(_) => fail(e),
        e => StoreError::OutcomeUnknown(format!(
            "{CONTEXT}: no answer to COMMIT: {}",
            store_error(CONTEXT, e)
        )),
    })?;

    let release = committed_release(new, budget.releases, created_at, budget.spent);
    Ok(CommitOutcome::Committed { release, budget })
}

/// Charges `new` on every block of its range, inside the caller's write transaction, or says why
/// not (`Some`: nothing may be written; the caller rolls back). `budget` is the dataset's ledger
/// before this release, for the refusal.
async fn charge_blocks(
    conn: &mut SqliteConnection,
    context: &str,
    new: &NewRelease,
    blocking: Option<Blocking>,
    budget: BudgetState,
) -> Result<Option<CommitOutcome>, StoreError> {
    let fail = |e| store_error(context, e);
    let (range, blocking) = match (new.blocks, blocking) {
        (None, None) => return Ok(None),
        (Some(range), Some(blocking)) if range.period() == blocking.period => (range, blocking),
        _ => return Ok(Some(CommitOutcome::BlocksMismatch)),
    };
    // The first block without room: a block never charged has spent nothing, so only a stored
    // one can bind, unless the cost alone passes the cap.
    let binding = if new.cost > blocking.cap {
        let spent: Option<i64> = sqlx::query_scalar(
            "SELECT spent_units FROM dataset_blocks WHERE dataset_id = $1 AND block = $2",
        )
        .bind(new.dataset_id.hyphenated())
        .bind(range.first().index())
        .fetch_optional(&mut *conn)
        .await
        .map_err(fail)?;
        Some((range.first().index(), spent.unwrap_or(0)))
    } else {
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT block, spent_units FROM dataset_blocks \
              WHERE dataset_id = $1 AND block BETWEEN $2 AND $3 AND spent_units + $4 > $5 \
              ORDER BY block LIMIT 1",
        )
        .bind(new.dataset_id.hyphenated())
        .bind(range.first().index())
        .bind(range.last().index())
        .bind(new.cost.raw())
        .bind(blocking.cap.raw())
        .fetch_optional(&mut *conn)
        .await
        .map_err(fail)?
    };
    if let Some((block, spent)) = binding {
        return Ok(Some(CommitOutcome::BlockExhausted {
            block: BlockSpend {
                key: BlockKey::from_index(blocking.period, block),
                spent: codec::units(spent, "dataset_blocks.spent_units")?,
            },
            cap: blocking.cap,
            budget,
        }));
    }
    sqlx::query(
        "WITH RECURSIVE range(block) AS ( \
             SELECT $2 UNION ALL SELECT block + 1 FROM range WHERE block < $3) \
         INSERT INTO dataset_blocks (dataset_id, block, spent_units) \
         SELECT $1, block, $4 FROM range WHERE true \
         ON CONFLICT (dataset_id, block) DO UPDATE SET spent_units = spent_units + excluded.spent_units",
    )
    .bind(new.dataset_id.hyphenated())
    .bind(range.first().index())
    .bind(range.last().index())
    .bind(new.cost.raw())
    .execute(&mut *conn)
    .await
    .map_err(fail)?;
    Ok(None)
}

/// The nodes of the path from `start` to the root, leaf first, as read in the caller's
/// transaction (which holds the write lock).
async fn path_nodes(
    conn: &mut SqliteConnection,
    context: &str,
    start: Uuid,
) -> Result<Vec<Node>, StoreError> {
    Ok(path_populations(conn, context, start)
        .await?
        .iter()
        .map(Population::node)
        .collect())
}

async fn path_populations(
    conn: &mut SqliteConnection,
    context: &str,
    start: Uuid,
) -> Result<Vec<Population>, StoreError> {
    let sql = format!("SELECT {POPULATION_COLUMNS} FROM populations WHERE id = $1");
    let mut path: Vec<Population> = Vec::new();
    let mut next = Some(start);
    while let Some(id) = next {
        if path.len() > population::MAX_DEPTH || path.iter().any(|p| p.id == id) {
            return Err(StoreError::Corrupt(
                "populations.parent_id forms a cycle".into(),
            ));
        }
        let node: Population = sqlx::query_as::<_, PopulationColumns<Hyphenated>>(&sql)
            .bind(id.hyphenated())
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| store_error(context, e))?
            .ok_or_else(|| StoreError::Corrupt("a population's parent does not exist".into()))?
            .try_into()?;
        next = node.parent;
        path.push(node);
    }
    Ok(path)
}

async fn write_nodes(
    conn: &mut SqliteConnection,
    context: &str,
    path: &[Node],
    after: &[Units],
) -> Result<(), StoreError> {
    for (node, spent) in path.iter().zip(after) {
        if *spent != node.spent {
            sqlx::query("UPDATE populations SET spent_units = $2 WHERE id = $1")
                .bind(node.id.hyphenated())
                .bind(spent.raw())
                .execute(&mut *conn)
                .await
                .map_err(|e| store_error(context, e))?;
        }
    }
    Ok(())
}

/// The transaction of [`LedgerStore::set_dataset_population`] or
/// [`LedgerStore::set_population_parent`]: `child` is the dataset (`is_dataset`) or population
/// to place under `target`.
async fn place_on(
    conn: &mut SqliteConnection,
    child: Uuid,
    is_dataset: bool,
    target: Option<Uuid>,
) -> Result<Placement, StoreError> {
    const CONTEXT: &str = "place";
    let fail = |e| store_error(CONTEXT, e);
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(fail)?;
    let table = if is_dataset {
        "datasets"
    } else {
        "populations"
    };
    let row = sqlx::query(&format!(
        "SELECT budget_order, spent_units FROM {table} WHERE id = $1"
    ))
    .bind(child.hyphenated())
    .fetch_optional(&mut *tx)
    .await
    .map_err(fail)?;
    let Some(row) = row else {
        tx.rollback().await.map_err(fail)?;
        return Ok(Placement::NotFound);
    };
    let order: f64 = row.try_get("budget_order").map_err(fail)?;
    let spent = codec::units(row.try_get("spent_units").map_err(fail)?, "spent_units")?;
    let column = if is_dataset {
        "population_id"
    } else {
        "parent_id"
    };
    if let Some(target) = target {
        let exists: Option<i64> = sqlx::query_scalar("SELECT 1 FROM populations WHERE id = $1")
            .bind(target.hyphenated())
            .fetch_optional(&mut *tx)
            .await
            .map_err(fail)?;
        let path = match exists {
            Some(_) => path_populations(&mut tx, CONTEXT, target).await?,
            None => Vec::new(),
        };
        let below = if is_dataset {
            0
        } else {
            depth_below(&mut tx, child).await?
        };
        let verdict = match path.first() {
            None => Some(Placement::TargetNotFound),
            _ if !is_dataset && path.iter().any(|p| p.id == child) => Some(Placement::Cycle),
            Some(first) if first.order.get() != order => Some(Placement::OrderMismatch),
            _ if path.len() + below > population::MAX_DEPTH => Some(Placement::TooDeep),
            _ => None,
        };
        if let Some(verdict) = verdict {
            tx.rollback().await.map_err(fail)?;
            return Ok(verdict);
        }
        let nodes: Vec<Node> = path.iter().map(Population::node).collect();
        match population::charge_path(&nodes, spent, spent) {
            Ok(after) => write_nodes(&mut tx, CONTEXT, &nodes, &after).await?,
            Err(refusal) => {
                tx.rollback().await.map_err(fail)?;
                return Ok(Placement::Exhausted(refusal));
            }
        }
    }
    sqlx::query(&format!("UPDATE {table} SET {column} = $2 WHERE id = $1"))
        .bind(child.hyphenated())
        .bind(target.map(|t| t.hyphenated()))
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    tx.commit().await.map_err(fail)?;
    Ok(Placement::Placed)
}

/// The most populations on a path from below `id` up to it (1: none below).
async fn depth_below(conn: &mut SqliteConnection, id: Uuid) -> Result<usize, StoreError> {
    let depth: i64 = sqlx::query_scalar(
        "WITH RECURSIVE below(id, depth) AS ( \
             SELECT $1, 1 \
             UNION ALL \
             SELECT p.id, below.depth + 1 FROM populations p JOIN below ON p.parent_id = below.id \
              WHERE below.depth <= 64) \
         SELECT max(depth) FROM below",
    )
    .bind(id.hyphenated())
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| store_error("place", e))?;
    Ok(usize::try_from(depth).unwrap_or(usize::MAX))
}

/// The transaction of [`LedgerStore::set_allocation`], on one connection.
async fn set_allocation_on(
    conn: &mut SqliteConnection,
    dataset_id: Uuid,
    token_id: &str,
    total: Option<Units>,
    by: &str,
    at: DateTime<Utc>,
) -> Result<AllocationOutcome, StoreError> {
    const CONTEXT: &str = "set_allocation";
    let fail = |e| store_error(CONTEXT, e);
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(fail)?;
    let Some(row) = sqlx::query(
        "SELECT spent_units, allocation_units FROM token_datasets \
          WHERE token_id = $1 AND dataset_id = $2",
    )
    .bind(token_id)
    .bind(dataset_id.hyphenated())
    .fetch_optional(&mut *tx)
    .await
    .map_err(fail)?
    else {
        tx.rollback().await.map_err(fail)?;
        return Ok(AllocationOutcome::NotInScope);
    };
    let old = row
        .try_get::<Option<i64>, _>("allocation_units")
        .map_err(fail)?
        .map(|raw| codec::units(raw, "token_datasets.allocation_units"))
        .transpose()?;
    let spent = codec::units(
        row.try_get("spent_units").map_err(fail)?,
        "token_datasets.spent_units",
    )?;
    sqlx::query(
        "UPDATE token_datasets SET allocation_units = $3 WHERE token_id = $1 AND dataset_id = $2",
    )
    .bind(token_id)
    .bind(dataset_id.hyphenated())
    .bind(total.map(Units::raw))
    .execute(&mut *tx)
    .await
    .map_err(fail)?;
    // Setting what is already set (a retried PUT), or removing an allocation that does not
    // exist, changes nothing and records nothing.
    if old != total {
        sqlx::query(
            "INSERT INTO allocation_changes \
                    (dataset_id, token_id, changed_at, changed_by, old_units, new_units) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(dataset_id.hyphenated())
        .bind(token_id)
        .bind(at.trunc_subsecs(6))
        .bind(by)
        .bind(old.map(Units::raw))
        .bind(total.map(Units::raw))
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    }
    tx.commit().await.map_err(fail)?;
    Ok(AllocationOutcome::Changed {
        old,
        new: total,
        spent,
    })
}

/// The transaction of [`LedgerStore::create_token`], on one connection.
async fn create_token_on(
    conn: &mut SqliteConnection,
    token: &TokenRecord,
) -> Result<(), StoreError> {
    const CONTEXT: &str = "create_token";
    let fail = |e| store_error(CONTEXT, e);
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(fail)?;
    sqlx::query(
        "INSERT INTO tokens (id, secret_hash, role, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(&token.id)
    .bind(&token.secret_hash[..])
    .bind(token.role.as_str())
    .bind(token.created_at.trunc_subsecs(6))
    .bind(token.expires_at.map(|at| at.trunc_subsecs(6)))
    .execute(&mut *tx)
    .await
    .map_err(fail)?;
    for dataset_id in &token.datasets {
        sqlx::query("INSERT OR IGNORE INTO token_datasets (token_id, dataset_id) VALUES ($1, $2)")
            .bind(&token.id)
            .bind(dataset_id.hyphenated())
            .execute(&mut *tx)
            .await
            .map_err(fail)?;
    }
    tx.commit().await.map_err(fail)
}

/// The transaction of [`LedgerStore::ensure_principal`], on one connection.
async fn ensure_principal_on(
    conn: &mut SqliteConnection,
    token: &TokenRecord,
) -> Result<(), StoreError> {
    const CONTEXT: &str = "ensure_principal";
    let fail = |e| store_error(CONTEXT, e);
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(fail)?;
    sqlx::query(
        "INSERT OR IGNORE INTO tokens (id, secret_hash, role, created_at) VALUES ($1, $2, $3, $4)",
    )
    .bind(&token.id)
    .bind(&token.secret_hash[..])
    .bind(token.role.as_str())
    .bind(token.created_at.trunc_subsecs(6))
    .execute(&mut *tx)
    .await
    .map_err(fail)?;
    for dataset_id in &token.datasets {
        sqlx::query(
            "INSERT OR IGNORE INTO token_datasets (token_id, dataset_id) \
             SELECT $1, id FROM datasets WHERE id = $2",
        )
        .bind(&token.id)
        .bind(dataset_id.hyphenated())
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    }
    tx.commit().await.map_err(fail)
}

#[async_trait]
impl LedgerStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn commit_answer_bound(&self) -> std::time::Duration {
        self.commit_answer_bound
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(|e| store_error("ping", e))
    }

    async fn create_dataset(&self, new: &NewDataset) -> Result<Dataset, StoreError> {
        let (total, block_period, block_total) = new.stored_totals();
        let sql = format!(
            "INSERT INTO datasets (id, name, budget_order, total_units, dp_epsilon, dp_delta, \
                                   l2_squared, linf, neighbouring, created_at, created_by, cells, \
                                   population_id, block_period, block_total_units) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
             RETURNING {DATASET_COLUMNS}"
        );
        sqlx::query_as::<_, DatasetColumns<Hyphenated>>(&sql)
            .bind(new.id.hyphenated())
            .bind(new.name.as_str())
            .bind(new.order.get())
            .bind(total)
            .bind(new.dp_target.map(|t| t.epsilon))
            .bind(new.dp_target.map(|t| t.delta))
            .bind(new.sensitivity.l2_squared())
            .bind(new.sensitivity.linf())
            .bind(&new.neighbouring)
            .bind(now())
            .bind(&new.created_by)
            .bind(codec::names_json(new.cells.as_ref()))
            .bind(new.population.map(|p| p.hyphenated()))
            .bind(block_period)
            .bind(block_total)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| store_error("create_dataset", e))?
            .try_into()
    }

    async fn get_dataset(&self, id: Uuid) -> Result<Option<Dataset>, StoreError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| store_error("get_dataset", e))?;
        fetch_dataset(&mut conn, "get_dataset", id).await
    }

    async fn list_datasets(&self, only: Option<&[Uuid]>) -> Result<Vec<Dataset>, StoreError> {
        // The id list travels as one JSON array, so the statement is the same for any length.
        let only = only.map(|ids| {
            serde_json::Value::from(
                ids.iter()
                    .map(|id| id.hyphenated().to_string())
                    .collect::<Vec<_>>(),
            )
            .to_string()
        });
        // rowid is insertion order: oldest first, ties impossible.
        let sql = format!(
            "SELECT {DATASET_COLUMNS} FROM datasets \
             WHERE $1 IS NULL OR id IN (SELECT value FROM json_each($1)) ORDER BY rowid"
        );
        sqlx::query_as::<_, DatasetColumns<Hyphenated>>(&sql)
            .bind(only)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| store_error("list_datasets", e))?
            .into_iter()
            .map(Dataset::try_from)
            .collect()
    }

    async fn commit_release(&self, new: &NewRelease) -> Result<CommitOutcome, StoreError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| store_error("commit_release", e))?;
        let result = commit_release_on(&mut conn, new, self.max_stored_cells).await;
        discard_on_error(&mut conn, result)
    }

    async fn set_allocation(
        &self,
        dataset_id: Uuid,
        token_id: &str,
        total: Option<Units>,
        by: &str,
        at: DateTime<Utc>,
    ) -> Result<AllocationOutcome, StoreError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| store_error("set_allocation", e))?;
        let result = set_allocation_on(&mut conn, dataset_id, token_id, total, by, at).await;
        discard_on_error(&mut conn, result)
    }

    async fn list_allocations(
        &self,
        dataset_id: Uuid,
        token_id: Option<&str>,
    ) -> Result<Vec<Allocation>, StoreError> {
        sqlx::query_as::<_, codec::AllocationColumns>(
            "SELECT token_id, allocation_units, spent_units FROM token_datasets \
              WHERE dataset_id = $1 AND allocation_units IS NOT NULL \
                AND ($2 IS NULL OR token_id = $2) \
              ORDER BY token_id",
        )
        .bind(dataset_id.hyphenated())
        .bind(token_id)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| store_error("list_allocations", e))?
        .into_iter()
        .map(Allocation::try_from)
        .collect()
    }

    async fn allocation_changes(
        &self,
        dataset_id: Uuid,
        token_id: Option<&str>,
    ) -> Result<Vec<AllocationChange>, StoreError> {
        sqlx::query_as::<_, codec::AllocationChangeColumns>(
            "SELECT token_id, changed_at, changed_by, old_units, new_units \
               FROM allocation_changes \
              WHERE dataset_id = $1 AND ($2 IS NULL OR token_id = $2) \
              ORDER BY id",
        )
        .bind(dataset_id.hyphenated())
        .bind(token_id)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| store_error("allocation_changes", e))?
        .into_iter()
        .map(AllocationChange::try_from)
        .collect()
    }

    async fn find_by_idempotency_key(
        &self,
        dataset_id: Uuid,
        key: &str,
    ) -> Result<Option<(Release, [u8; 32])>, StoreError> {
        const CONTEXT: &str = "find_by_idempotency_key";
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| store_error(CONTEXT, e))?;
        fetch_keyed(&mut conn, CONTEXT, dataset_id, key).await
    }

    async fn get_release(
        &self,
        dataset_id: Uuid,
        release_id: Uuid,
    ) -> Result<Option<Release>, StoreError> {
        let sql =
            format!("SELECT {RELEASE_COLUMNS} FROM releases WHERE dataset_id = $1 AND id = $2");
        sqlx::query_as::<_, ReleaseColumns<Hyphenated>>(&sql)
            .bind(dataset_id.hyphenated())
            .bind(release_id.hyphenated())
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| store_error("get_release", e))?
            .map(ReleaseColumns::into_release)
            .transpose()
    }

    async fn list_releases(
        &self,
        dataset_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<Release>, StoreError> {
        let sql = format!(
            "SELECT {RELEASE_COLUMNS} FROM releases \
             WHERE dataset_id = $1 AND seq < COALESCE($2, 9223372036854775807) \
             ORDER BY seq DESC LIMIT $3"
        );
        sqlx::query_as::<_, ReleaseColumns<Hyphenated>>(&sql)
            .bind(dataset_id.hyphenated())
            .bind(before)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| store_error("list_releases", e))?
            .into_iter()
            .map(ReleaseColumns::into_release)
            .collect()
    }

    async fn list_release_summaries(
        &self,
        dataset_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<ReleaseSummary>, StoreError> {
        let sql = format!(
            "SELECT {RELEASE_SUMMARY_COLUMNS} FROM releases \
             WHERE dataset_id = $1 AND seq < COALESCE($2, 9223372036854775807) \
             ORDER BY seq DESC LIMIT $3"
        );
        sqlx::query_as::<_, ReleaseSummaryColumns<Hyphenated>>(&sql)
            .bind(dataset_id.hyphenated())
            .bind(before)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| store_error("list_release_summaries", e))?
            .into_iter()
            .map(ReleaseSummary::try_from)
            .collect()
    }

    async fn release_sizes(
        &self,
        dataset_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(i64, i64, i64)>, StoreError> {
        sqlx::query_as::<_, (i64, i64, i64)>(
            "SELECT seq, dimension, COALESCE(length(CAST(row_names AS BLOB)), 0) FROM releases \
             WHERE dataset_id = $1 AND seq < COALESCE($2, 9223372036854775807) \
             ORDER BY seq DESC LIMIT $3",
        )
        .bind(dataset_id.hyphenated())
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| store_error("release_sizes", e))
    }

    async fn create_token(&self, token: &TokenRecord) -> Result<(), StoreError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| store_error("create_token", e))?;
        let result = create_token_on(&mut conn, token).await;
        discard_on_error(&mut conn, result)
    }

    async fn ensure_principal(&self, token: &TokenRecord) -> Result<(), StoreError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| store_error("ensure_principal", e))?;
        let result = ensure_principal_on(&mut conn, token).await;
        discard_on_error(&mut conn, result)
    }

    async fn find_token(&self, id: &str) -> Result<Option<TokenRecord>, StoreError> {
        let sql = format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = $1");
        sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| store_error("find_token", e))?
            .as_ref()
            .map(token_record)
            .transpose()
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        // rowid is insertion order: oldest first.
        let sql = format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY rowid");
        sqlx::query(&sql)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| store_error("list_tokens", e))?
            .iter()
            .map(token_record)
            .collect()
    }

    async fn revoke_token(&self, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        sqlx::query("UPDATE tokens SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1")
            .bind(id)
            .bind(at.trunc_subsecs(6))
            .execute(&self.pool)
            .await
            .map(|done| done.rows_affected() > 0)
            .map_err(|e| store_error("revoke_token", e))
    }

    async fn touch_token(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        // One process writes this file, and it rate-limits these writes per token: the last
        // write is the latest use.
        sqlx::query("UPDATE tokens SET last_used_at = $2 WHERE id = $1 AND revoked_at IS NULL")
            .bind(id)
            .bind(at.trunc_subsecs(6))
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(|e| store_error("touch_token", e))
    }

    async fn log_head(&self, dataset_id: Uuid) -> Result<Option<LogHead>, StoreError> {
        const CONTEXT: &str = "log_head";
        let row = sqlx::query(
            "SELECT release_count, chain_head, log_chained_after, spent_units \
             FROM datasets WHERE id = $1",
        )
        .bind(dataset_id.hyphenated())
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| store_error(CONTEXT, e))?;
        let Some(row) = row else { return Ok(None) };
        let get = |e| store_error(CONTEXT, e);
        Ok(Some(LogHead {
            seq: row.try_get("release_count").map_err(get)?,
            hash: codec::hash32(
                row.try_get("chain_head").map_err(get)?,
                "datasets.chain_head",
            )?,
            chained_after: row.try_get("log_chained_after").map_err(get)?,
            spent_units: row.try_get("spent_units").map_err(get)?,
        }))
    }

    async fn log_entries(
        &self,
        dataset_id: Uuid,
        after: i64,
        upto: i64,
        limit: u32,
    ) -> Result<Vec<LogEntry>, StoreError> {
        const CONTEXT: &str = "log_entries";
        let sql = format!(
            "SELECT {RELEASE_COLUMNS}, chain_hash FROM releases \
             WHERE dataset_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq LIMIT $4"
        );
        // Row by row: only one stored output is in memory at a time.
        let mut rows = sqlx::query(&sql)
            .bind(dataset_id.hyphenated())
            .bind(after)
            .bind(upto)
            .bind(i64::from(limit))
            .fetch(&self.pool);
        let mut entries = Vec::new();
        while let Some(row) = rows.try_next().await.map_err(|e| store_error(CONTEXT, e))? {
            let get = |e| store_error(CONTEXT, e);
            let chain_hash = row.try_get("chain_hash").map_err(get)?;
            let columns = ReleaseColumns::<Hyphenated>::from_row(&row).map_err(get)?;
            entries.push(codec::log_entry(columns, chain_hash));
        }
        Ok(entries)
    }

    async fn insert_secret_if_absent(&self, name: &str, value: &[u8]) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO server_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING")
            .bind(name)
            .bind(value)
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(|e| store_error("insert_secret_if_absent", e))
    }

    async fn get_secret(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        sqlx::query_scalar("SELECT value FROM server_secrets WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| store_error("get_secret", e))
    }

    async fn block_spends(
        &self,
        dataset_id: Uuid,
        range: BlockRange,
    ) -> Result<Vec<BlockSpend>, StoreError> {
        const CONTEXT: &str = "block_spends";
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT block, spent_units FROM dataset_blocks \
              WHERE dataset_id = $1 AND block BETWEEN $2 AND $3 ORDER BY block",
        )
        .bind(dataset_id.hyphenated())
        .bind(range.first().index())
        .bind(range.last().index())
        .fetch_all(&self.pool)
        .await
        .map_err(|e| store_error(CONTEXT, e))?
        .into_iter()
        .map(|(block, spent)| {
            Ok(BlockSpend {
                key: BlockKey::from_index(range.period(), block),
                spent: codec::units(spent, "dataset_blocks.spent_units")?,
            })
        })
        .collect()
    }

    async fn most_spent_block(
        &self,
        dataset_id: Uuid,
        period: Period,
    ) -> Result<Option<BlockSpend>, StoreError> {
        const CONTEXT: &str = "most_spent_block";
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT block, spent_units FROM dataset_blocks WHERE dataset_id = $1 \
              ORDER BY spent_units DESC, block LIMIT 1",
        )
        .bind(dataset_id.hyphenated())
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| store_error(CONTEXT, e))?
        .map(|(block, spent)| {
            Ok(BlockSpend {
                key: BlockKey::from_index(period, block),
                spent: codec::units(spent, "dataset_blocks.spent_units")?,
            })
        })
        .transpose()
    }

    async fn ledger_summaries(&self) -> Result<Vec<LedgerSummary>, StoreError> {
        sqlx::query_as::<_, SummaryColumns<Hyphenated>>(
            "SELECT id, total_units, spent_units, release_count FROM datasets ORDER BY rowid",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| store_error("ledger_summaries", e))?
        .into_iter()
        .map(LedgerSummary::try_from)
        .collect()
    }

    async fn create_population(&self, new: &NewPopulation) -> Result<Population, StoreError> {
        let sql = format!(
            "INSERT INTO populations (id, name, budget_order, total_units, dp_epsilon, dp_delta, \
                                      parent_id, children, created_at, created_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING {POPULATION_COLUMNS}"
        );
        sqlx::query_as::<_, PopulationColumns<Hyphenated>>(&sql)
            .bind(new.id.hyphenated())
            .bind(new.name.as_str())
            .bind(new.order.get())
            .bind(new.total.raw())
            .bind(new.dp_target.map(|t| t.epsilon))
            .bind(new.dp_target.map(|t| t.delta))
            .bind(new.parent.map(|p| p.hyphenated()))
            .bind(new.children.as_str())
            .bind(now())
            .bind(&new.created_by)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| store_error("create_population", e))?
            .try_into()
    }

    async fn get_population(&self, id: Uuid) -> Result<Option<Population>, StoreError> {
        let sql = format!("SELECT {POPULATION_COLUMNS} FROM populations WHERE id = $1");
        sqlx::query_as::<_, PopulationColumns<Hyphenated>>(&sql)
            .bind(id.hyphenated())
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| store_error("get_population", e))?
            .map(Population::try_from)
            .transpose()
    }

    async fn list_populations(&self) -> Result<Vec<Population>, StoreError> {
        let sql = format!("SELECT {POPULATION_COLUMNS} FROM populations ORDER BY rowid");
        sqlx::query_as::<_, PopulationColumns<Hyphenated>>(&sql)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| store_error("list_populations", e))?
            .into_iter()
            .map(Population::try_from)
            .collect()
    }

    async fn set_dataset_population(
        &self,
        dataset_id: Uuid,
        population: Option<Uuid>,
    ) -> Result<Placement, StoreError> {
        place(&self.pool, dataset_id, true, population).await
    }

    async fn set_population_parent(
        &self,
        id: Uuid,
        parent: Option<Uuid>,
    ) -> Result<Placement, StoreError> {
        place(&self.pool, id, false, parent).await
    }
}

/// Places a dataset (`is_dataset`) or a population under `target` on a connection of its own,
/// discarded if the placement failed midway.
async fn place(
    pool: &sqlx::SqlitePool,
    id: Uuid,
    is_dataset: bool,
    target: Option<Uuid>,
) -> Result<Placement, StoreError> {
    let mut conn = pool.acquire().await.map_err(|e| store_error("place", e))?;
    let result = place_on(&mut conn, id, is_dataset, target).await;
    discard_on_error(&mut conn, result)
}
