//! Releases and placements under populations (src/ledger/population.rs), on PostgreSQL.
//!
//! A release on a dataset under a population is one transaction: it locks the caller's
//! `token_datasets` row, then the dataset's row, then every population on the dataset's path in
//! ascending id order (one `SELECT … ORDER BY id FOR UPDATE`), and only then decides. Placing a
//! dataset locks the dataset's row, then the new path's nodes by id; moving a population locks
//! the node and its new ancestors together, by id. Every transaction that touches population
//! rows therefore takes them after any dataset row it needs and in one global order, so two
//! replicas can wait for each other but never deadlock (docs/ARCHITECTURE.md, "Lock order").
//!
//! The path is read before its rows are locked (a recursive read of the snapshot), so a move
//! committed in between could make the locked rows a different path: the locked rows are walked
//! again from the dataset's population, and if that walk leaves the locked set the transaction
//! rolls back and is retried ([`commit`] answers `None`). Under the locks the path cannot change.

use std::collections::HashMap;

use chrono::{SubsecRound, Utc};
use sha2::{Digest, Sha256};
use sqlx::{Connection, PgConnection, Row};
use uuid::Uuid;

use super::super::codec::{self, committed_release, output_columns, PopulationColumns};
use super::super::store_error;
use super::outcome_of;
use crate::ledger::audit;
use crate::ledger::population::{self, Node};
use crate::ledger::*;

const CONTEXT: &str = "commit_release";

/// The ids on the path from `start` up, as the snapshot shows them (bounded: a chain longer
/// than the deepest allowed is cut, and the walk under the locks then fails and retries).
async fn path_ids(conn: &mut PgConnection, start: Uuid) -> Result<Vec<Uuid>, StoreError> {
    sqlx::query_scalar(
        "WITH RECURSIVE path(id, parent_id, depth) AS ( \
             SELECT id, parent_id, 1 FROM populations WHERE id = $1 \
             UNION ALL \
             SELECT p.id, p.parent_id, path.depth + 1 FROM populations p \
               JOIN path ON p.id = path.parent_id WHERE path.depth <= $2) \
         SELECT id FROM path",
    )
    .bind(start)
    .bind(population::MAX_DEPTH as i64 + 1)
    .fetch_all(conn)
    .await
    .map_err(|e| store_error(CONTEXT, e))
}

/// Locks `ids` (and `extra`) in ascending id order and walks the path from `start` through the
/// locked rows: `None` if the walk leaves them (the tree moved since `ids` were read).
async fn lock_path(
    conn: &mut PgConnection,
    start: Uuid,
    ids: &[Uuid],
) -> Result<Option<Vec<Population>>, StoreError> {
    let sql = format!(
        "SELECT {} FROM populations WHERE id = ANY($1) ORDER BY id FOR UPDATE",
        codec::POPULATION_COLUMNS
    );
    let locked: HashMap<Uuid, Population> = sqlx::query_as::<_, PopulationColumns>(&sql)
        .bind(ids)
        .fetch_all(conn)
        .await
        .map_err(|e| store_error(CONTEXT, e))?
        .into_iter()
        .map(|c| Population::try_from(c).map(|p| (p.id, p)))
        .collect::<Result<_, _>>()?;
    let mut path = Vec::new();
    let mut next = Some(start);
    while let Some(id) = next {
        let Some(node) = locked.get(&id) else {
            return Ok(None);
        };
        if path.len() > population::MAX_DEPTH {
            return Err(StoreError::Corrupt(
                "populations.parent_id forms a cycle".into(),
            ));
        }
        next = node.parent;
        path.push(node.clone());
    }
    Ok(Some(path))
}

async fn write_nodes(
    conn: &mut PgConnection,
    path: &[Node],
    after: &[Units],
) -> Result<(), StoreError> {
    let (ids, spent): (Vec<Uuid>, Vec<i64>) = path
        .iter()
        .zip(after)
        .filter(|(node, spent)| node.spent != **spent)
        .map(|(node, spent)| (node.id, spent.raw()))
        .unzip();
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE populations SET spent_units = x.spent \
           FROM unnest($1::uuid[], $2::int8[]) AS x(id, spent) WHERE populations.id = x.id",
    )
    .bind(&ids)
    .bind(&spent)
    .execute(conn)
    .await
    .map(drop)
    .map_err(|e| store_error(CONTEXT, e))
}

/// Whether `new`'s blocks fit, read under the dataset's row lock (every writer of a dataset's
/// blocks holds it, and each statement of the transaction reads what was committed before it):
/// `Some` is the refusal, nothing written.
async fn check_blocks(
    conn: &mut PgConnection,
    new: &NewRelease,
    blocking: Option<Blocking>,
    budget: BudgetState,
) -> Result<Option<CommitOutcome>, StoreError> {
    let (range, blocking) = match (new.blocks, blocking) {
        (None, None) => return Ok(None),
        (Some(range), Some(blocking)) if range.period() == blocking.period => (range, blocking),
        _ => return Ok(Some(CommitOutcome::BlocksMismatch)),
    };
    // A block never charged has spent nothing: only a stored one binds, unless the cost alone
    // passes the cap (then the range's first block does).
    let binding = sqlx::query_as::<_, (i64, i64)>(
        "SELECT $2::int8, COALESCE((SELECT spent_units FROM dataset_blocks \
                                     WHERE dataset_id = $1 AND block = $2), 0) WHERE $4 > $5 \
         UNION ALL \
         (SELECT block, spent_units FROM dataset_blocks \
           WHERE dataset_id = $1 AND block BETWEEN $2 AND $3 AND spent_units + $4 > $5 \
           ORDER BY block LIMIT 1) \
         LIMIT 1",
    )
    .bind(new.dataset_id)
    .bind(range.first().index())
    .bind(range.last().index())
    .bind(new.cost.raw())
    .bind(blocking.cap.raw())
    .fetch_optional(conn)
    .await
    .map_err(|e| store_error(CONTEXT, e))?;
    Ok(match binding {
        Some((block, spent)) => Some(CommitOutcome::BlockExhausted {
            block: BlockSpend {
                key: BlockKey::from_index(blocking.period, block),
                spent: codec::units(spent, "dataset_blocks.spent_units")?,
            },
            cap: blocking.cap,
            budget,
        }),
        None => None,
    })
}

/// One release, charged to its dataset and every node above it, or refused; `None`: the tree
/// above the dataset moved while its rows were being locked (nothing written; retry).
pub(super) async fn commit(
    pool: &sqlx::PgPool,
    new: &NewRelease,
    max_stored_cells: i64,
) -> Result<Option<CommitOutcome>, StoreError> {
    let fail = |e| store_error(CONTEXT, e);
    let mut conn = pool.acquire().await.map_err(fail)?;
    let mut tx = conn.begin().await.map_err(fail)?;

    let scope = sqlx::query(
        "SELECT spent_units, allocation_units FROM token_datasets \
          WHERE token_id = $1 AND dataset_id = $2 FOR UPDATE",
    )
    .bind(&new.created_by)
    .bind(new.dataset_id)
    .fetch_optional(&mut *tx)
    .await
    .map_err(fail)?;
    let row = sqlx::query(&format!(
        "SELECT {}, stored_cells, chain_head FROM datasets WHERE id = $1 FOR UPDATE",
        codec::DATASET_COLUMNS
    ))
    .bind(new.dataset_id)
    .fetch_optional(&mut *tx)
    .await
    .map_err(fail)?;
    let Some(row) = row else {
        return Ok(Some(CommitOutcome::DatasetNotFound));
    };
    let dataset = Dataset::try_from(
        <codec::DatasetColumns as sqlx::FromRow<_>>::from_row(&row).map_err(fail)?,
    )?;
    let stored_cells: i64 = row.try_get("stored_cells").map_err(fail)?;
    let prev = codec::hash32(
        row.try_get("chain_head").map_err(fail)?,
        "datasets.chain_head",
    )?;

    // Under the dataset's lock no other transaction is storing a release of it, so the key as
    // read now stays free until this one commits.
    if let Some(idempotency) = &new.idempotency {
        let sql = format!(
            "SELECT {} FROM releases WHERE dataset_id = $1 AND idempotency_key = $2",
            super::RELEASE_COLUMNS
        );
        if let Some((release, fingerprint)) = sqlx::query_as::<_, codec::ReleaseColumns>(&sql)
            .bind(new.dataset_id)
            .bind(&idempotency.key)
            .fetch_optional(&mut *tx)
            .await
            .map_err(fail)?
            .map(codec::ReleaseColumns::into_keyed_release)
            .transpose()?
        {
            return Ok(Some(CommitOutcome::Existing {
                release,
                fingerprint,
            }));
        }
    }

    let budget = dataset.budget();
    if !budget.admits(new.cost) {
        return Ok(Some(CommitOutcome::Exhausted { budget }));
    }
    if let Some(scope) = &scope {
        if let Some(total) = scope
            .try_get::<Option<i64>, _>("allocation_units")
            .map_err(fail)?
        {
            let allocation = Allocation {
                token_id: new.created_by.clone(),
                total: codec::units(total, "token_datasets.allocation_units")?,
                spent: codec::units(
                    scope.try_get("spent_units").map_err(fail)?,
                    "token_datasets.spent_units",
                )?,
            };
            if !allocation.admits(new.cost) {
                return Ok(Some(CommitOutcome::AllocationExhausted {
                    allocation,
                    budget,
                }));
            }
        }
    }
    let (distribution, dimension, table_rows) = output_columns(&new.output)?;
    if stored_cells.saturating_add(dimension) > max_stored_cells {
        return Ok(Some(CommitOutcome::OutputQuotaExceeded {
            quota: max_stored_cells,
        }));
    }
    let spent = budget
        .spent
        .checked_add(new.cost)
        .ok_or_else(|| StoreError::Internal("commit_release: spent overflows".into()))?;
    if let Some(outcome) = check_blocks(&mut tx, new, dataset.blocks, budget).await? {
        return Ok(Some(outcome));
    }

    let mut nodes: Vec<Node> = Vec::new();
    let mut after: Vec<Units> = Vec::new();
    if let Some(start) = dataset.population {
        let ids = path_ids(&mut tx, start).await?;
        let Some(path) = lock_path(&mut tx, start, &ids).await? else {
            return Ok(None);
        };
        nodes = path.iter().map(Population::node).collect();
        match population::charge_path(&nodes, spent, new.cost) {
            Ok(a) => after = a,
            Err(refusal) => {
                return Ok(Some(CommitOutcome::PopulationExhausted { refusal, budget }));
            }
        }
    }

    let seq = budget.releases + 1;
    let created_at = Utc::now().trunc_subsecs(6);
    let mut link = Sha256::new();
    link.update(audit::link_prefix(new.dataset_id, new.id));
    link.update(seq.to_be_bytes());
    link.update(prev);
    link.update(created_at.timestamp_micros().to_be_bytes());
    link.update(codec::link_suffix(new));
    let chain_hash: [u8; 32] = link.finalize().into();

    sqlx::query(
        "UPDATE datasets SET spent_units = $2, release_count = $3, \
                stored_cells = stored_cells + $4, chain_head = $5 WHERE id = $1",
    )
    .bind(new.dataset_id)
    .bind(spent.raw())
    .bind(seq)
    .bind(dimension)
    .bind(&chain_hash[..])
    .execute(&mut *tx)
    .await
    .map_err(fail)?;
    write_nodes(&mut tx, &nodes, &after).await?;
    if let Some(range) = new.blocks {
        sqlx::query(
            "INSERT INTO dataset_blocks (dataset_id, block, spent_units) \
             SELECT $1, block, $4 FROM generate_series($2::int8, $3::int8) AS block \
             ON CONFLICT (dataset_id, block) \
             DO UPDATE SET spent_units = dataset_blocks.spent_units + excluded.spent_units",
        )
        .bind(new.dataset_id)
        .bind(range.first().index())
        .bind(range.last().index())
        .bind(new.cost.raw())
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    }
    let (block_from, block_to) = codec::block_columns(new.blocks);
    sqlx::query(
        "INSERT INTO releases (id, dataset_id, seq, created_at, created_by, mechanism, cost_units, \
                               distribution, dimension, idempotency_key, fingerprint, \
                               table_rows, label, chain_hash, spent_after_units, row_names, \
                               block_from, block_to) \
         VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
                 $17, $18)",
    )
    .bind(new.id)
    .bind(new.dataset_id)
    .bind(seq)
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
    .bind(spent.raw())
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
        .bind(new.dataset_id)
        .bind(new.cost.raw())
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    }
    tx.commit().await.map_err(|e| match outcome_of(e) {
        Ok(e) => store_error(CONTEXT, e),
        Err(unknown) => StoreError::OutcomeUnknown(unknown),
    })?;
    let budget = BudgetState {
        spent,
        releases: seq,
        ..budget
    };
    Ok(Some(CommitOutcome::Committed {
        release: committed_release(new, seq, created_at, spent),
        budget,
    }))
}

/// [`LedgerStore::set_dataset_population`] (`is_dataset`) or
/// [`LedgerStore::set_population_parent`], retried while the tree moves under it.
pub(super) async fn place(
    pool: &sqlx::PgPool,
    child: Uuid,
    is_dataset: bool,
    target: Option<Uuid>,
) -> Result<Placement, StoreError> {
    for _ in 0..8 {
        if let Some(placement) = place_once(pool, child, is_dataset, target).await? {
            return Ok(placement);
        }
    }
    Err(StoreError::Unavailable(
        "place: the populations kept moving".into(),
    ))
}

async fn place_once(
    pool: &sqlx::PgPool,
    child: Uuid,
    is_dataset: bool,
    target: Option<Uuid>,
) -> Result<Option<Placement>, StoreError> {
    let fail = |e| store_error("place", e);
    let mut conn = pool.acquire().await.map_err(fail)?;
    let mut tx = conn.begin().await.map_err(fail)?;
    let (table, column) = if is_dataset {
        ("datasets", "population_id")
    } else {
        ("populations", "parent_id")
    };
    // A dataset's row is locked before any population's; a population being moved is locked
    // with its new ancestors, in id order, below.
    let lock = if is_dataset { " FOR UPDATE" } else { "" };
    let row = sqlx::query(&format!(
        "SELECT budget_order, spent_units FROM {table} WHERE id = $1{lock}"
    ))
    .bind(child)
    .fetch_optional(&mut *tx)
    .await
    .map_err(fail)?;
    let Some(row) = row else {
        return Ok(Some(Placement::NotFound));
    };
    let order: f64 = row.try_get("budget_order").map_err(fail)?;
    let mut spent = codec::units(row.try_get("spent_units").map_err(fail)?, "spent_units")?;
    if let Some(target) = target {
        let mut ids = path_ids(&mut tx, target).await?;
        if ids.is_empty() {
            return Ok(Some(Placement::TargetNotFound));
        }
        if !is_dataset {
            if ids.contains(&child) {
                return Ok(Some(Placement::Cycle));
            }
            ids.push(child);
        }
        let Some(path) = lock_path(&mut tx, target, &ids).await? else {
            return Ok(None);
        };
        if !is_dataset {
            // Read again under its lock: its spend as of now.
            spent = codec::units(
                sqlx::query_scalar("SELECT spent_units FROM populations WHERE id = $1")
                    .bind(child)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(fail)?,
                "spent_units",
            )?;
            if path.iter().any(|p| p.id == child) {
                return Ok(Some(Placement::Cycle));
            }
            let below: i64 = sqlx::query_scalar(
                "WITH RECURSIVE below(id, depth) AS ( \
                     SELECT $1::uuid, 1 \
                     UNION ALL \
                     SELECT p.id, below.depth + 1 FROM populations p \
                       JOIN below ON p.parent_id = below.id WHERE below.depth <= $2) \
                 SELECT max(depth)::int8 FROM below",
            )
            .bind(child)
            .bind(population::MAX_DEPTH as i64 + 1)
            .fetch_one(&mut *tx)
            .await
            .map_err(fail)?;
            if path.len() + usize::try_from(below).unwrap_or(usize::MAX) > population::MAX_DEPTH {
                return Ok(Some(Placement::TooDeep));
            }
        }
        if path[0].order.get() != order {
            return Ok(Some(Placement::OrderMismatch));
        }
        let nodes: Vec<Node> = path.iter().map(Population::node).collect();
        match population::charge_path(&nodes, spent, spent) {
            Ok(after) => write_nodes(&mut tx, &nodes, &after).await?,
            Err(refusal) => return Ok(Some(Placement::Exhausted(refusal))),
        }
    }
    sqlx::query(&format!("UPDATE {table} SET {column} = $2 WHERE id = $1"))
        .bind(child)
        .bind(target)
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    tx.commit().await.map_err(fail)?;
    Ok(Some(Placement::Placed))
}
