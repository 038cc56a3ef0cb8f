//! PostgreSQL backend. Several replicas may share one database, so every decision that must be
//! serialised (admission, sequence numbers, first-writer-wins secrets) is made by the database
//! inside a single statement or transaction, never by a read in the service followed by a write.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures_util::TryStreamExt;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{Connection, FromRow, PgConnection, Row};
use uuid::Uuid;

use super::codec::{
    self, committed_release, output_columns, DatasetColumns, PopulationColumns, ReleaseColumns,
    ReleaseSummaryColumns, SummaryColumns, DATASET_COLUMNS, POPULATION_COLUMNS,
    RELEASE_SUMMARY_COLUMNS,
};
use super::{store_error, StoreOptions};
use crate::access::{Role, TokenRecord};
use crate::ledger::audit::{self, LogEntry, LogHead};
use crate::ledger::*;
pub use group::statement_texts as group_statement_texts;
use group::{Answer, Groups, Member};

mod group;
mod tree;

const TOKEN_COLUMNS: &str = "id, secret_hash, role, created_at, expires_at, last_used_at, \
     revoked_at, ARRAY(SELECT dataset_id FROM token_datasets WHERE token_id = tokens.id \
                       ORDER BY dataset_id) AS datasets";

fn token_record(row: &PgRow) -> Result<TokenRecord, StoreError> {
    const CONTEXT: &str = "tokens";
    let get = |e| store_error(CONTEXT, e);
    let role: String = row.try_get("role").map_err(get)?;
    Ok(TokenRecord {
        id: row.try_get("id").map_err(get)?,
        secret_hash: codec::hash32(
            row.try_get("secret_hash").map_err(get)?,
            "tokens.secret_hash",
        )?,
        role: Role::parse(&role)
            .ok_or_else(|| StoreError::Corrupt("tokens.role is not a known role".into()))?,
        datasets: row.try_get("datasets").map_err(get)?,
        created_at: row.try_get("created_at").map_err(get)?,
        expires_at: row.try_get("expires_at").map_err(get)?,
        last_used_at: row.try_get("last_used_at").map_err(get)?,
        revoked_at: row.try_get("revoked_at").map_err(get)?,
    })
}

/// The URL's certificate files (`sslrootcert`, `sslcert`, `sslkey`, or sqlx's spellings of them)
/// must be readable now: a path that is wrong is a configuration error that waiting does not cure,
/// and sqlx would report it as a bare "No such file or directory" on every retry. The check does
/// not read the files' contents (a key is read by the driver alone).
fn check_certificate_files(url: &str) -> Result<(), StoreError> {
    const KEYS: &[&str] = &[
        "sslrootcert",
        "ssl-root-cert",
        "ssl-ca",
        "sslcert",
        "ssl-cert",
        "sslkey",
        "ssl-key",
    ];
    let Ok(parsed) = url::Url::parse(url) else {
        // The driver's own parse reports it.
        return Ok(());
    };
    for (key, path) in parsed.query_pairs() {
        if KEYS.contains(&key.as_ref()) {
            std::fs::File::open(path.as_ref()).map_err(|e| {
                StoreError::Internal(format!(
                    "connect: cannot read the {key} file {path} named in the database URL: {e}"
                ))
            })?;
        }
    }
    Ok(())
}

/// A connection idle for longer than this is pinged before use, so that a pool that outlived a
/// database restart discards its dead connections instead of failing requests with them. Busy
/// connections skip the ping: the release path stays one round trip.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// Selected `FROM releases` (unaliased): `spent_after_units` falls back to the running sum for a
/// row stored without it (`codec::ReleaseColumns`).
const RELEASE_COLUMNS: &str = "id, dataset_id, seq, created_at, created_by, \
     mechanism::text AS mechanism, cost_units, distribution, dimension, idempotency_key, fingerprint, table_rows, label, \
     COALESCE(spent_after_units, (SELECT SUM(r.cost_units)::bigint FROM releases r \
              WHERE r.dataset_id = releases.dataset_id AND r.seq <= releases.seq)) \
         AS spent_after_units, row_names, block_from, block_to";

/// Admission, charge and record in one statement. The UPDATE's row lock serialises releases of a
/// dataset: under READ COMMITTED a waiting UPDATE re-evaluates its WHERE clause against the
/// row as committed by the previous holder, so `spent + cost <= total` and `release_count` are
/// always current. The INSERT runs only if the UPDATE matched; a duplicate idempotency key makes
/// it fail, which aborts the whole statement, charge included.
///
/// The same UPDATE extends the release log (src/ledger/audit.rs): the service binds the link's
/// bytes before seq ($13) and after created_at ($14); seq, the previous hash (the old
/// `chain_head`, read under the row lock) and the time are spliced in here, so the chain stays one
/// statement and single whatever the number of replicas. `now()` is the transaction's time, the
/// one the INSERT stores as `created_at`; EXTRACT returns an exact numeric (PostgreSQL ≥ 14).
///
/// An analyst's release also passes its token's allocation on the dataset: the
/// token's row of `token_datasets` (created with the token, so it exists before the token's
/// first request and no snapshot can miss it) is locked first, and read as last committed,
/// by the MATERIALIZED `allocation`; the dataset's UPDATE admits only if the allocation, when
/// there is one, also has room; `allocated` adds the cost to the token's spend only when the
/// dataset was charged. Every writer of that row (a release by the token, `set_allocation`) locks
/// it before the dataset's row, so the two locks are always taken in that order. The admin has
/// no such row, and its releases skip both steps. The statement answers one row either way: the
/// charge and record when committed, and the allocation as read under its lock, so that a
/// refusal by the allocation is named from what the statement saw, not from a later read that
/// a concurrent change of the allocation could contradict.
const COMMIT_RELEASE: &str = "\
WITH allocation AS MATERIALIZED (
    SELECT spent_units, allocation_units FROM token_datasets
     WHERE token_id = $4 AND dataset_id = $1
       FOR UPDATE
), charged AS (
    UPDATE datasets
       SET spent_units = spent_units + $2, release_count = release_count + 1,
           stored_cells = stored_cells + $7,
           chain_head = sha256($13 || int8send(release_count + 1) || chain_head
                               || int8send((EXTRACT(EPOCH FROM now()) * 1000000)::bigint) || $14)
     WHERE id = $1 AND spent_units + $2 <= total_units AND stored_cells + $7 <= $12
       AND population_id IS NULL AND block_period IS NULL
       AND NOT EXISTS (SELECT 1 FROM allocation
                        WHERE allocation.spent_units + $2 > allocation.allocation_units)
 RETURNING id, budget_order, total_units, spent_units, release_count, dp_epsilon, dp_delta,
           chain_head
), allocated AS (
    UPDATE token_datasets SET spent_units = token_datasets.spent_units + $2
      FROM charged
     WHERE token_datasets.token_id = $4 AND token_datasets.dataset_id = charged.id
), recorded AS (
    INSERT INTO releases (id, dataset_id, seq, created_at, created_by, mechanism, cost_units,
                          distribution, dimension, idempotency_key, fingerprint, table_rows,
                          label, chain_hash, spent_after_units, row_names)
    SELECT $3, charged.id, charged.release_count, now(), $4, $5::jsonb, $2, $6, $7, $8, $9, $10,
           $11, charged.chain_head, charged.spent_units, $15 FROM charged
 RETURNING seq, created_at
)
SELECT charged.budget_order, charged.total_units, charged.spent_units, charged.release_count,
       charged.dp_epsilon, charged.dp_delta, recorded.seq, recorded.created_at,
       allocation.allocation_units, allocation.spent_units AS allocation_spent_units
  FROM (SELECT 1) AS answer
  LEFT JOIN allocation ON true
  LEFT JOIN (charged CROSS JOIN recorded) ON true";

pub struct PgStore {
    pool: sqlx::PgPool,
    /// The per-dataset output quota, in cells.
    max_stored_cells: i64,
    /// See [`LedgerStore::commit_answer_bound`].
    commit_answer_bound: Duration,
    /// Group commit; `None` when `StoreOptions::commit_slots` is 0.
    groups: Option<Groups>,
}

impl PgStore {
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        check_certificate_files(url)?;
        let base = PgConnectOptions::from_str(url)
            .map_err(|e| store_error("connect", e))?
            .application_name("dirichlet-release");

        // Migrations get a connection of their own: the migrator holds an advisory lock (so that
        // replicas starting together take turns), which must not stay behind on a pooled
        // connection if a migration fails, and waiting for another replica's migration is not a
        // request to time out.
        let mut conn =
            tokio::time::timeout(options.acquire_timeout, PgConnection::connect_with(&base))
                .await
                .map_err(|_| {
                    StoreError::Unavailable("connect: timed out connecting to PostgreSQL".into())
                })?
                .map_err(|e| store_error("connect", e))?;
        sqlx::migrate!("migrations/postgres")
            .run_direct(&mut conn)
            .await
            .map_err(|e| store_error("connect", e.into()))?;
        // A failed goodbye changes nothing: the migrations are committed.
        let _ = conn.close().await;

        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_IF_IDLE_FOR {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_lazy_with(base.options(server_timeouts(options.acquire_timeout)));
        let max_stored_cells = options.stored_cells_quota();
        // A release waits in the group queue at most half an acquire timeout, so that its whole
        // commit still answers within `commit_answer_bound`.
        let groups = (options.commit_slots > 0).then(|| {
            Groups::start(
                pool.clone(),
                options.commit_slots,
                options.acquire_timeout / 2,
                max_stored_cells,
            )
        });
        Ok(Self {
            pool,
            max_stored_cells,
            commit_answer_bound: commit_answer_bound(options.acquire_timeout),
            groups,
        })
    }

    pub fn pool(&self) -> &sqlx::PgPool {
        &self.pool
    }

    /// A release's bound values (see `COMMIT_RELEASE`).
    fn member(&self, new: &NewRelease) -> Result<Member, StoreError> {
        let (distribution, dimension, table_rows) = output_columns(&new.output)?;
        let (block_from, block_to) = codec::block_columns(new.blocks);
        Ok(Member {
            dataset_id: new.dataset_id,
            queue: new.population.unwrap_or(new.dataset_id),
            cost: new.cost.raw(),
            id: new.id,
            created_by: new.created_by.clone(),
            mechanism: new.mechanism.to_string(),
            distribution,
            dimension,
            table_rows,
            label: new.label.as_ref().map(|l| l.as_str().to_owned()),
            link_prefix: audit::link_prefix(new.dataset_id, new.id),
            link_suffix: codec::link_suffix(new),
            row_names: codec::names_json(new.row_names.as_ref()),
            idempotency_key: new.idempotency.as_ref().map(|i| i.key.clone()),
            fingerprint: new.idempotency.as_ref().map(|i| i.fingerprint.to_vec()),
            block_period: new.blocks.map(|b| b.period().as_str()),
            block_first: new.blocks.map(|b| b.first().index()),
            block_last: new.blocks.map(|b| b.last().index()),
            block_from,
            block_to,
        })
    }

    async fn fetch_dataset(&self, context: &str, id: Uuid) -> Result<Option<Dataset>, StoreError> {
        let sql = format!("SELECT {DATASET_COLUMNS} FROM datasets WHERE id = $1");
        sqlx::query_as::<_, DatasetColumns>(&sql)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| store_error(context, e))?
            .map(Dataset::try_from)
            .transpose()
    }

    async fn fetch_keyed(
        &self,
        context: &str,
        dataset_id: Uuid,
        key: &str,
    ) -> Result<Option<(Release, [u8; 32])>, StoreError> {
        let sql = format!(
            "SELECT {RELEASE_COLUMNS} FROM releases WHERE dataset_id = $1 AND idempotency_key = $2"
        );
        sqlx::query_as::<_, ReleaseColumns>(&sql)
            .bind(dataset_id)
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| store_error(context, e))?
            .map(ReleaseColumns::into_keyed_release)
            .transpose()
    }

    /// Why the commit statement charged nothing (`answer` is its row). The budget's answer cannot
    /// go stale: `spent` only grows, a dataset is never deleted and an idempotency key, once
    /// stored, stays; the allocation's comes from the statement itself.
    async fn refused(
        &self,
        new: &NewRelease,
        allocation: Option<(i64, i64)>,
    ) -> Result<CommitOutcome, StoreError> {
        const CONTEXT: &str = "commit_release";
        // A concurrent retry may have taken the last of the budget with this very key.
        if let Some(idempotency) = &new.idempotency {
            if let Some((release, fingerprint)) = self
                .fetch_keyed(CONTEXT, new.dataset_id, &idempotency.key)
                .await?
            {
                return Ok(CommitOutcome::Existing {
                    release,
                    fingerprint,
                });
            }
        }
        let Some(dataset) = self.fetch_dataset(CONTEXT, new.dataset_id).await? else {
            return Ok(CommitOutcome::DatasetNotFound);
        };
        let budget = dataset.budget();
        if !budget.admits(new.cost) {
            return Ok(CommitOutcome::Exhausted { budget });
        }
        // The one-release statement charges no dataset under a population or with blocks (it
        // has no step for the nodes or the blocks), and a group may hand such a member back
        // refused: decide it exactly (a release whose blocks do not match its dataset's is
        // refused there).
        if dataset.population.is_some() || dataset.blocks.is_some() || new.blocks.is_some() {
            return self.commit_with_population(new).await;
        }
        // `spent` only grows, so the budget admitted the release at the statement too: the
        // caller's allocation, as the statement read it under its lock, or the output quota
        // refused it.
        if let Some((total, spent)) = allocation {
            let allocation = Allocation {
                token_id: new.created_by.clone(),
                total: codec::units(total, "token_datasets.allocation_units")?,
                spent: codec::units(spent, "token_datasets.spent_units")?,
            };
            if !allocation.admits(new.cost) {
                return Ok(CommitOutcome::AllocationExhausted { allocation, budget });
            }
        }
        Ok(CommitOutcome::OutputQuotaExceeded {
            quota: self.max_stored_cells,
        })
    }
}

impl PgStore {
    /// A release on a dataset under a population: the one-release statement has no step for the
    /// nodes, so this is a transaction of its own (src/store/postgres/tree.rs), retried while
    /// the tree above the dataset moves under it.
    async fn commit_with_population(&self, new: &NewRelease) -> Result<CommitOutcome, StoreError> {
        for _ in 0..8 {
            if let Some(outcome) = tree::commit(&self.pool, new, self.max_stored_cells).await? {
                return Ok(outcome);
            }
        }
        Err(StoreError::Unavailable(
            "commit_release: the populations above the dataset kept moving".into(),
        ))
    }
}

/// Server-side limits, so that a statement stuck behind a lock or a slow disk ends with an error
/// the service reports as unavailable instead of holding a connection indefinitely. Waiting for a
/// dataset's row lock is bounded like waiting for a connection.
fn server_timeouts(acquire_timeout: Duration) -> [(&'static str, u128); 3] {
    let lock = acquire_timeout.as_millis().max(1);
    let statement = (2 * acquire_timeout).as_millis().max(1000);
    [
        ("lock_timeout", lock),
        ("statement_timeout", statement),
        ("idle_in_transaction_session_timeout", statement),
    ]
}

/// A commit's connection comes within the acquire timeout; its one statement, lock wait included,
/// ends within `statement_timeout` (the server cancels it, rolled back, SQLSTATE 57014); one
/// more acquire timeout covers the reads that explain a refusal or a key conflict. A server that
/// is up has answered by then.
fn commit_answer_bound(acquire_timeout: Duration) -> Duration {
    let statement = server_timeouts(acquire_timeout)
        .iter()
        .find(|(name, _)| *name == "statement_timeout")
        .map_or(Duration::ZERO, |(_, ms)| {
            Duration::from_millis(u64::try_from(*ms).unwrap_or(u64::MAX))
        });
    acquire_timeout.saturating_mul(2).saturating_add(statement)
}

/// One release, alone, with `COMMIT_RELEASE`: every release when group commit is off, else a
/// member its group handed back. Waits for the rows' locks.
async fn commit_alone(
    pool: &sqlx::PgPool,
    m: &Member,
    max_stored_cells: i64,
) -> Result<Answer, StoreError> {
    const CONTEXT: &str = "commit_release";
    // Acquired apart from the statement: a failure to get a connection charged nothing
    // (503), while a connection lost once the statement is sent may have committed.
    let mut conn = pool.acquire().await.map_err(|e| store_error(CONTEXT, e))?;
    let result = sqlx::query(COMMIT_RELEASE)
        .bind(m.dataset_id)
        .bind(m.cost)
        .bind(m.id)
        .bind(&m.created_by)
        .bind(&m.mechanism)
        .bind(&m.distribution)
        .bind(m.dimension)
        .bind(m.idempotency_key.as_deref())
        .bind(m.fingerprint.as_deref())
        .bind(m.table_rows)
        .bind(m.label.as_deref())
        .bind(max_stored_cells)
        .bind(&m.link_prefix)
        .bind(&m.link_suffix)
        .bind(m.row_names.as_deref())
        .fetch_optional(&mut *conn)
        .await;
    drop(conn);
    match result {
        Ok(Some(row)) => group::decode(&row),
        Ok(None) => Err(StoreError::Internal(format!(
            "{CONTEXT}: the statement answered no row"
        ))),
        Err(e) if is_idempotency_conflict(&e) => Ok(Answer::KeyConflict),
        Err(e) => Err(match outcome_of(e) {
            Ok(e) => store_error(CONTEXT, e),
            Err(unknown) => StoreError::OutcomeUnknown(unknown),
        }),
    }
}

/// What a failed commit statement says of its outcome: `Ok` when the database answered with an
/// error (a cancel for statement_timeout included: the statement, a transaction of its own, was
/// rolled back) or nothing was sent; `Err` when the connection failed once the statement may
/// have been sent — a TLS or protocol failure, the connection lost — leaving no answer saying
/// whether it committed.
///
/// An error answer means the statement did not commit. An error inside the statement or its
/// implicit COMMIT aborts it. A FATAL that ends the session (`57P01` at a fast shutdown or from
/// `pg_terminate_backend`, `57P05` an idle-session timeout) is acted on only where the statement
/// can still abort (the commit itself holds interrupts) or once the backend waits for its client,
/// after the statement's whole answer: so it either aborted the statement, or was sent while the
/// connection sat idle in the pool, before the statement arrived, and is what the driver reads
/// as its answer. A backend killed without that (an immediate shutdown, a crash: a warning, then
/// the connection ends) is a lost connection, unknown. The exception is a PANIC: the server
/// crashes, and recovery replays a commit record already written.
fn outcome_of(e: sqlx::Error) -> Result<sqlx::Error, String> {
    const CONTEXT: &str = "commit_release";
    match e {
        sqlx::Error::Database(db)
            if db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some_and(|pg| pg.severity() == sqlx::postgres::PgSeverity::Panic) =>
        {
            Err(format!(
                "{CONTEXT}: the database server crashed (PANIC) while answering"
            ))
        }
        e @ (sqlx::Error::Database(_)
        | sqlx::Error::Encode(_)
        | sqlx::Error::TypeNotFound { .. }
        | sqlx::Error::InvalidArgument(_)) => Ok(e),
        sqlx::Error::Io(io) => Err(format!(
            "{CONTEXT}: I/O error after the statement was sent: {io}"
        )),
        e => Err(format!(
            "{CONTEXT}: the connection failed after the statement was sent: {}",
            store_error(CONTEXT, e)
        )),
    }
}

fn is_idempotency_conflict(error: &sqlx::Error) -> bool {
    error.as_database_error().is_some_and(|db| {
        db.is_unique_violation() && db.constraint() == Some("releases_idempotency_unique")
    })
}

#[async_trait]
impl LedgerStore for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn commit_answer_bound(&self) -> Duration {
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
                                   l2_squared, linf, neighbouring, created_by, cells, \
                                   population_id, block_period, block_total_units) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
             RETURNING {DATASET_COLUMNS}"
        );
        sqlx::query_as::<_, DatasetColumns>(&sql)
            .bind(new.id)
            .bind(new.name.as_str())
            .bind(new.order.get())
            .bind(total)
            .bind(new.dp_target.map(|t| t.epsilon))
            .bind(new.dp_target.map(|t| t.delta))
            .bind(new.sensitivity.l2_squared())
            .bind(new.sensitivity.linf())
            .bind(&new.neighbouring)
            .bind(&new.created_by)
            .bind(codec::names_json(new.cells.as_ref()))
            .bind(new.population)
            .bind(block_period)
            .bind(block_total)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| store_error("create_dataset", e))?
            .try_into()
    }

    async fn get_dataset(&self, id: Uuid) -> Result<Option<Dataset>, StoreError> {
        self.fetch_dataset("get_dataset", id).await
    }

    async fn list_datasets(&self, only: Option<&[Uuid]>) -> Result<Vec<Dataset>, StoreError> {
        let sql = format!(
            "SELECT {DATASET_COLUMNS} FROM datasets \
             WHERE $1::uuid[] IS NULL OR id = ANY($1) ORDER BY created_at, id"
        );
        sqlx::query_as::<_, DatasetColumns>(&sql)
            .bind(only)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| store_error("list_datasets", e))?
            .into_iter()
            .map(Dataset::try_from)
            .collect()
    }

    async fn commit_release(&self, new: &NewRelease) -> Result<CommitOutcome, StoreError> {
        const CONTEXT: &str = "commit_release";
        // No read of the key first: the release handler has just looked it up, so a stored key
        // is rare here and costs a read after the statement (which checks the key itself), while
        // every keyed release saves a round trip.
        let member = self.member(new)?;
        let answer = match &self.groups {
            Some(groups) => groups.commit(member).await?,
            // Without groups, a release over blocks or under a population is one transaction of
            // its own (src/store/postgres/tree.rs), which charges its blocks and nodes.
            None if new.population.is_some() || new.blocks.is_some() => {
                return self.commit_with_population(new).await
            }
            None => commit_alone(&self.pool, &member, self.max_stored_cells).await?,
        };
        let answer = match answer {
            // The one-release statement has no step for population nodes or blocks.
            Answer::Alone(_) if new.population.is_some() || new.blocks.is_some() => {
                return self.commit_with_population(new).await;
            }
            Answer::Alone(member) => {
                commit_alone(&self.pool, &member, self.max_stored_cells).await?
            }
            answer => answer,
        };
        match answer {
            Answer::Committed {
                budget,
                seq,
                created_at,
            } => Ok(CommitOutcome::Committed {
                release: committed_release(new, seq, created_at, budget.spent),
                budget,
            }),
            Answer::Refused { allocation } => self.refused(new, allocation).await,
            // A request with the same key committed first (before, concurrently, or earlier in
            // the same group); this one charged nothing.
            Answer::KeyConflict => {
                let key = new.idempotency.as_ref().map_or("", |i| i.key.as_str());
                match self.fetch_keyed(CONTEXT, new.dataset_id, key).await? {
                    Some((release, fingerprint)) => Ok(CommitOutcome::Existing {
                        release,
                        fingerprint,
                    }),
                    None => Err(StoreError::Internal(format!(
                        "{CONTEXT}: the idempotency key conflicted, but no release has it"
                    ))),
                }
            }
            Answer::Alone(_) => Err(StoreError::Internal(format!(
                "{CONTEXT}: a release was handed back twice"
            ))),
        }
    }

    async fn set_allocation(
        &self,
        dataset_id: Uuid,
        token_id: &str,
        total: Option<Units>,
        by: &str,
        at: DateTime<Utc>,
    ) -> Result<AllocationOutcome, StoreError> {
        const CONTEXT: &str = "set_allocation";
        // One statement: the old value is read under the row's lock (taken before any dataset
        // lock, as a release by the token takes it), the change and its audit record commit
        // together. Setting what is already set (a retried PUT), or removing an allocation that
        // does not exist, records nothing.
        let row = sqlx::query(
            "WITH old AS MATERIALIZED ( \
                 SELECT allocation_units FROM token_datasets \
                  WHERE token_id = $2 AND dataset_id = $1 FOR UPDATE \
             ), changed AS ( \
                 UPDATE token_datasets SET allocation_units = $3 FROM old \
                  WHERE token_id = $2 AND dataset_id = $1 RETURNING spent_units \
             ), logged AS ( \
                 INSERT INTO allocation_changes \
                        (dataset_id, token_id, changed_at, changed_by, old_units, new_units) \
                 SELECT $1, $2, $5, $4, old.allocation_units, $3 FROM old \
                  WHERE old.allocation_units IS DISTINCT FROM $3::bigint \
             ) \
             SELECT old.allocation_units AS old_units, changed.spent_units \
               FROM old CROSS JOIN changed",
        )
        .bind(dataset_id)
        .bind(token_id)
        .bind(total.map(Units::raw))
        .bind(by)
        .bind(at)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| store_error(CONTEXT, e))?;
        let Some(row) = row else {
            return Ok(AllocationOutcome::NotInScope);
        };
        let get = |e| store_error(CONTEXT, e);
        let old: Option<i64> = row.try_get("old_units").map_err(get)?;
        Ok(AllocationOutcome::Changed {
            old: old
                .map(|raw| codec::units(raw, "allocation_units"))
                .transpose()?,
            new: total,
            spent: codec::units(row.try_get("spent_units").map_err(get)?, "spent_units")?,
        })
    }

    async fn list_allocations(
        &self,
        dataset_id: Uuid,
        token_id: Option<&str>,
    ) -> Result<Vec<Allocation>, StoreError> {
        sqlx::query_as::<_, codec::AllocationColumns>(
            "SELECT token_id, allocation_units, spent_units FROM token_datasets \
              WHERE dataset_id = $1 AND allocation_units IS NOT NULL \
                AND ($2::text IS NULL OR token_id = $2) \
              ORDER BY token_id",
        )
        .bind(dataset_id)
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
              WHERE dataset_id = $1 AND ($2::text IS NULL OR token_id = $2) \
              ORDER BY id",
        )
        .bind(dataset_id)
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
        self.fetch_keyed("find_by_idempotency_key", dataset_id, key)
            .await
    }

    async fn get_release(
        &self,
        dataset_id: Uuid,
        release_id: Uuid,
    ) -> Result<Option<Release>, StoreError> {
        let sql =
            format!("SELECT {RELEASE_COLUMNS} FROM releases WHERE dataset_id = $1 AND id = $2");
        sqlx::query_as::<_, ReleaseColumns>(&sql)
            .bind(dataset_id)
            .bind(release_id)
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
        // COALESCE rather than `$2 IS NULL OR`, so that one plan walks the (dataset_id, seq) index.
        let sql = format!(
            "SELECT {RELEASE_COLUMNS} FROM releases \
             WHERE dataset_id = $1 AND seq < COALESCE($2, 9223372036854775807) \
             ORDER BY seq DESC LIMIT $3"
        );
        sqlx::query_as::<_, ReleaseColumns>(&sql)
            .bind(dataset_id)
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
        sqlx::query_as::<_, ReleaseSummaryColumns>(&sql)
            .bind(dataset_id)
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
            "SELECT seq, dimension, COALESCE(octet_length(row_names), 0)::bigint FROM releases \
             WHERE dataset_id = $1 AND seq < COALESCE($2, 9223372036854775807) \
             ORDER BY seq DESC LIMIT $3",
        )
        .bind(dataset_id)
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| store_error("release_sizes", e))
    }

    async fn create_token(&self, token: &TokenRecord) -> Result<(), StoreError> {
        // One statement, so the token never exists without its scope.
        sqlx::query(
            "WITH token AS ( \
                 INSERT INTO tokens (id, secret_hash, role, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $6) RETURNING id) \
             INSERT INTO token_datasets (token_id, dataset_id) \
             SELECT DISTINCT token.id, scope.dataset_id FROM token, unnest($5::uuid[]) AS scope(dataset_id)",
        )
        .bind(&token.id)
        .bind(&token.secret_hash[..])
        .bind(token.role.as_str())
        .bind(token.created_at)
        .bind(&token.datasets[..])
        .bind(token.expires_at)
        .execute(&self.pool)
        .await
        .map(drop)
        .map_err(|e| store_error("create_token", e))
    }

    async fn ensure_principal(&self, token: &TokenRecord) -> Result<(), StoreError> {
        // One statement, as create_token: the same locks (the datasets' rows FOR KEY SHARE by
        // the foreign key), taken in the same order.
        sqlx::query(
            "WITH token AS ( \
                 INSERT INTO tokens (id, secret_hash, role, created_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING) \
             INSERT INTO token_datasets (token_id, dataset_id) \
             SELECT $1, datasets.id FROM datasets WHERE datasets.id = ANY($5::uuid[]) \
             ORDER BY datasets.id \
             ON CONFLICT (token_id, dataset_id) DO NOTHING",
        )
        .bind(&token.id)
        .bind(&token.secret_hash[..])
        .bind(token.role.as_str())
        .bind(token.created_at)
        .bind(&token.datasets[..])
        .execute(&self.pool)
        .await
        .map(drop)
        .map_err(|e| store_error("ensure_principal", e))
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
        let sql = format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY created_at, id");
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
            .bind(at)
            .execute(&self.pool)
            .await
            .map(|done| done.rows_affected() > 0)
            .map_err(|e| store_error("revoke_token", e))
    }

    async fn touch_token(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE tokens SET last_used_at = GREATEST(last_used_at, $2) \
             WHERE id = $1 AND revoked_at IS NULL",
        )
        .bind(id)
        .bind(at)
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
        .bind(dataset_id)
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
            .bind(dataset_id)
            .bind(after)
            .bind(upto)
            .bind(i64::from(limit))
            .fetch(&self.pool);
        let mut entries = Vec::new();
        while let Some(row) = rows.try_next().await.map_err(|e| store_error(CONTEXT, e))? {
            let get = |e| store_error(CONTEXT, e);
            let chain_hash = row.try_get("chain_hash").map_err(get)?;
            let columns = ReleaseColumns::<Uuid>::from_row(&row).map_err(get)?;
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
        .bind(dataset_id)
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
        .bind(dataset_id)
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
        sqlx::query_as::<_, SummaryColumns>(
            "SELECT id, total_units, spent_units, release_count FROM datasets ORDER BY created_at, id",
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
                                      parent_id, children, created_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING {POPULATION_COLUMNS}"
        );
        sqlx::query_as::<_, PopulationColumns>(&sql)
            .bind(new.id)
            .bind(new.name.as_str())
            .bind(new.order.get())
            .bind(new.total.raw())
            .bind(new.dp_target.map(|t| t.epsilon))
            .bind(new.dp_target.map(|t| t.delta))
            .bind(new.parent)
            .bind(new.children.as_str())
            .bind(&new.created_by)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| store_error("create_population", e))?
            .try_into()
    }

    async fn get_population(&self, id: Uuid) -> Result<Option<Population>, StoreError> {
        let sql = format!("SELECT {POPULATION_COLUMNS} FROM populations WHERE id = $1");
        sqlx::query_as::<_, PopulationColumns>(&sql)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| store_error("get_population", e))?
            .map(Population::try_from)
            .transpose()
    }

    async fn list_populations(&self) -> Result<Vec<Population>, StoreError> {
        let sql = format!("SELECT {POPULATION_COLUMNS} FROM populations ORDER BY created_at, id");
        sqlx::query_as::<_, PopulationColumns>(&sql)
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
        tree::place(&self.pool, dataset_id, true, population).await
    }

    async fn set_population_parent(
        &self,
        id: Uuid,
        parent: Option<Uuid>,
    ) -> Result<Placement, StoreError> {
        tree::place(&self.pool, id, false, parent).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::postgres::PgSslMode;

    /// libpq's vocabulary, read by the driver: `prefer` when the URL says nothing (as libpq).
    #[test]
    fn the_url_carries_libpq_ssl_modes_and_prefer_is_the_default() {
        if std::env::var_os("PGSSLMODE").is_none() {
            let options = PgConnectOptions::from_str("postgres://u@db.internal/ledger").unwrap();
            assert!(matches!(options.get_ssl_mode(), PgSslMode::Prefer));
        }
        for (mode, expected) in [
            ("disable", PgSslMode::Disable),
            ("prefer", PgSslMode::Prefer),
            ("require", PgSslMode::Require),
            ("verify-ca", PgSslMode::VerifyCa),
            ("verify-full", PgSslMode::VerifyFull),
        ] {
            let url = format!("postgres://u@db.internal/ledger?sslmode={mode}");
            let options = PgConnectOptions::from_str(&url).unwrap();
            assert_eq!(
                std::mem::discriminant(&options.get_ssl_mode()),
                std::mem::discriminant(&expected),
                "{mode}"
            );
        }
        assert!(PgConnectOptions::from_str("postgres://u@h/db?sslmode=sometimes").is_err());
    }

    #[test]
    fn certificate_files_named_in_the_url_must_be_readable() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not read here").unwrap();
        let good = format!(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert={}",
            ca.display()
        );
        assert!(check_certificate_files(&good).is_ok());
        assert!(check_certificate_files("postgres://u@h/db").is_ok());
        for key in ["sslrootcert", "sslcert", "sslkey", "ssl-ca"] {
            let missing = dir.path().join("missing.pem");
            let url = format!("postgres://u@h/db?{key}={}", missing.display());
            match check_certificate_files(&url) {
                Err(StoreError::Internal(message)) => {
                    assert!(message.contains(key), "{message}");
                    assert!(message.contains("missing.pem"), "{message}");
                }
                other => panic!("{key}: {other:?}"),
            }
        }
    }
}
