//! Group commit: keyless releases of different datasets that arrive while the database is busy
//! commit together, in one statement and one transaction.
//!
//! Why: on PostgreSQL a release's commit is dominated by what every statement and transaction
//! costs whatever it does (a round trip, executor start-up, the commit record and its WAL
//! flush), not by the rows it writes. Under load many releases wait for a connection at once;
//! committing them as one statement pays that fixed cost once (BENCHMARKS.md, "Group commit").
//!
//! How: [`Groups::commit`] queues a release; one runner task takes the queue as soon as one of
//! [`Groups`]' slots is free, up to [`MAX_GROUP`] releases, and commits them on a connection of
//! its own while it forms the next group. At low load a slot is always free, so every release is
//! a group of one and goes at once; groups grow only while every slot is busy. A release whose
//! dataset is already in a running group is handed back to commit alone with the one-release
//! statement (`COMMIT_RELEASE`), queueing on the row lock as releases always did, so a hot
//! dataset keeps its pipeline and no slot ever waits for a lock.
//!
//! The ledger's rules hold member by member, as in the one-release statement: each member is
//! admitted only if its dataset's budget, the output quota and its token's allocation all have
//! room, as read under the rows' locks; its charge, its token's spend, the release log's link and
//! its record are written in the same statement, so a member is charged exactly when it is
//! stored, and nothing is answered before the transaction has committed. A member refused by the
//! ledger writes nothing and does not stop the others. The group never waits for a lock: rows
//! held by another transaction (another replica's release, an allocation change) are skipped
//! (`SKIP LOCKED`), and those members commit alone afterwards with the one-release statement,
//! which waits for the lock as always. A group therefore cannot deadlock with anyone, and since
//! it holds at most one member per dataset, its members' charges never depend on each other.
//! Keyed releases always commit alone: a duplicate key aborts its statement, which must not take
//! other members with it.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{FromRow, PgPool, Row};
use tokio::sync::{mpsc, oneshot, Semaphore};
use uuid::Uuid;

use super::{outcome_of, store_error};
use crate::ledger::{BudgetState, StoreError};
use crate::store::codec::BudgetColumns;

/// Most members in one group. A group's statement holds its datasets' row locks until it
/// commits, so a bigger group makes other replicas' releases of those datasets wait longer.
pub(super) const MAX_GROUP: usize = 64;

/// One release's bound values, owned so that it can wait in the queue.
#[derive(Debug)]
pub(super) struct Member {
    pub dataset_id: Uuid,
    pub cost: i64,
    pub id: Uuid,
    pub created_by: String,
    pub mechanism: String,
    pub distribution: Vec<u8>,
    pub dimension: i64,
    pub table_rows: Option<i64>,
    pub label: Option<String>,
    pub link_prefix: Vec<u8>,
    pub link_suffix: Vec<u8>,
    pub row_names: Option<String>,
    pub idempotency_key: Option<String>,
    pub fingerprint: Option<Vec<u8>>,
}

/// What the statement that carried a member said of it.
#[derive(Debug)]
pub(super) enum Answer {
    Committed {
        budget: BudgetState,
        seq: i64,
        created_at: DateTime<Utc>,
    },
    /// Not admitted, nothing written. The caller's allocation on the dataset and its spend, as
    /// the statement read them under the row's lock (`None`: no allocation, or no token row).
    Refused { allocation: Option<(i64, i64)> },
    /// A release with the member's idempotency key exists (a concurrent retry committed first);
    /// nothing written. Only a keyed release, which always commits alone, can meet this.
    KeyConflict,
    /// Not attempted by its group (a row it needs was locked by another transaction, or the
    /// group's statement failed and rolled back as a whole): commit it alone.
    Alone(Box<Member>),
}

struct Queued {
    member: Member,
    queued_at: Instant,
    answer: oneshot::Sender<Result<Answer, StoreError>>,
}

/// The queue and its runner (one per [`super::PgStore`]).
pub(super) struct Groups {
    queue: mpsc::UnboundedSender<Queued>,
}

impl Groups {
    /// Starts the runner on the current Tokio runtime. `slots` statements run at once; a queued
    /// release not taken by a group within `max_wait` is refused as unavailable (never sent, not
    /// charged), so that a commit's answer stays within the store's commit bound.
    pub(super) fn start(
        pool: PgPool,
        slots: usize,
        max_wait: Duration,
        max_stored_cells: i64,
    ) -> Self {
        let (queue, receiver) = mpsc::unbounded_channel();
        tokio::spawn(run(
            receiver,
            Runner {
                pool,
                in_flight: Arc::default(),
                slots: Arc::new(Semaphore::new(slots.max(1))),
                max_wait,
                max_stored_cells,
            },
        ));
        Self { queue }
    }

    /// Commits `member` in the next group, or hands it back ([`Answer::Alone`]) when the runner
    /// is gone (its runtime ended): the caller commits it alone.
    pub(super) async fn commit(&self, member: Member) -> Result<Answer, StoreError> {
        let (answer, answered) = oneshot::channel();
        let queued = Queued {
            member,
            queued_at: Instant::now(),
            answer,
        };
        if let Err(mpsc::error::SendError(queued)) = self.queue.send(queued) {
            return Ok(Answer::Alone(Box::new(queued.member)));
        }
        // The runner answers every member it takes; a group task that ended without answering
        // (a panic) may have sent its statement.
        answered.await.unwrap_or_else(|_| {
            Err(StoreError::OutcomeUnknown(
                "commit_release: the group commit ended without an answer".into(),
            ))
        })
    }
}

#[derive(Clone)]
struct Runner {
    pool: PgPool,
    /// Datasets with a member in a running group.
    in_flight: Arc<Mutex<HashSet<Uuid>>>,
    slots: Arc<Semaphore>,
    max_wait: Duration,
    max_stored_cells: i64,
}

async fn run(mut receiver: mpsc::UnboundedReceiver<Queued>, runner: Runner) {
    let mut pending: VecDeque<Queued> = VecDeque::new();
    loop {
        if pending.is_empty() {
            match receiver.recv().await {
                Some(queued) => pending.push_back(queued),
                None => return,
            }
        }
        let Ok(slot) = runner.slots.clone().acquire_owned().await else {
            return;
        };
        // Whatever queued while every slot was busy joins this group.
        while let Ok(queued) = receiver.try_recv() {
            pending.push_back(queued);
        }
        let mut group = Vec::new();
        let mut later = VecDeque::new();
        {
            let mut in_flight = runner.in_flight.lock().expect("in_flight lock");
            for queued in pending.drain(..) {
                if queued.queued_at.elapsed() > runner.max_wait {
                    let _ = queued.answer.send(Err(StoreError::Unavailable(
                        "commit_release: timed out waiting for a commit slot".into(),
                    )));
                } else if in_flight.contains(&queued.member.dataset_id) {
                    // Its dataset is being committed by a group (maybe this one): waiting here
                    // would hold a slot for a row lock, so it commits alone, queueing on the
                    // lock as a release always did (a hot dataset keeps its pipeline).
                    let _ = queued
                        .answer
                        .send(Ok(Answer::Alone(Box::new(queued.member))));
                } else if group.len() < MAX_GROUP {
                    in_flight.insert(queued.member.dataset_id);
                    group.push(queued);
                } else {
                    later.push_back(queued);
                }
            }
        }
        pending = later;
        if group.is_empty() {
            continue;
        }
        let runner = runner.clone();
        tokio::spawn(async move {
            let datasets: Vec<Uuid> = group.iter().map(|q| q.member.dataset_id).collect();
            runner.commit(group).await;
            let mut in_flight = runner.in_flight.lock().expect("in_flight lock");
            for id in datasets {
                in_flight.remove(&id);
            }
            drop(in_flight);
            drop(slot);
        });
    }
}

impl Runner {
    /// Even a group of one runs the group's statement: it never waits for a lock, so a slot is
    /// never held by a release queueing on another transaction's row lock.
    async fn commit(&self, group: Vec<Queued>) {
        let (answers, members): (Vec<_>, Vec<_>) = group
            .into_iter()
            .map(|queued| (queued.answer, queued.member))
            .unzip();
        match self.statement(&members).await {
            Ok(rows) => {
                let mut by_ord: Vec<Option<PgRow>> = (0..members.len()).map(|_| None).collect();
                for row in rows {
                    if let Ok(ord) = row.try_get::<i64, _>("ord") {
                        if let Some(slot) = usize::try_from(ord - 1)
                            .ok()
                            .and_then(|i| by_ord.get_mut(i))
                        {
                            *slot = Some(row);
                        }
                    }
                }
                for ((answer, member), row) in answers.into_iter().zip(members).zip(by_ord) {
                    let _ = answer.send(match row {
                        Some(row) => member_answer(&row, member),
                        None => Err(StoreError::Internal(
                            "commit_release: the group statement answered no row for a member"
                                .into(),
                        )),
                    });
                }
            }
            Err(GroupError::NotSent(e)) => {
                for answer in answers {
                    let _ = answer.send(Err(store_error("commit_release", clone_error(&e))));
                }
            }
            // Rolled back as a whole: each member commits alone and meets its own outcome.
            Err(GroupError::RolledBack(e)) => {
                tracing::warn!(error = %e, members = members.len(), "group commit rolled back; its members commit alone");
                for (answer, member) in answers.into_iter().zip(members) {
                    let _ = answer.send(Ok(Answer::Alone(Box::new(member))));
                }
            }
            Err(GroupError::Unknown(e)) => {
                for answer in answers {
                    let _ = answer.send(Err(StoreError::OutcomeUnknown(e.clone())));
                }
            }
        }
    }

    async fn statement(&self, members: &[Member]) -> Result<Vec<PgRow>, GroupError> {
        let mut conn = self.pool.acquire().await.map_err(GroupError::NotSent)?;
        let result = sqlx::query(COMMIT_GROUP)
            .bind(members.iter().map(|m| m.dataset_id).collect::<Vec<_>>())
            .bind(members.iter().map(|m| m.cost).collect::<Vec<_>>())
            .bind(members.iter().map(|m| m.id).collect::<Vec<_>>())
            .bind(
                members
                    .iter()
                    .map(|m| m.created_by.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(
                members
                    .iter()
                    .map(|m| m.mechanism.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(
                members
                    .iter()
                    .map(|m| m.distribution.as_slice())
                    .collect::<Vec<_>>(),
            )
            .bind(members.iter().map(|m| m.dimension).collect::<Vec<_>>())
            .bind(members.iter().map(|m| m.table_rows).collect::<Vec<_>>())
            .bind(
                members
                    .iter()
                    .map(|m| m.label.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(
                members
                    .iter()
                    .map(|m| m.link_prefix.as_slice())
                    .collect::<Vec<_>>(),
            )
            .bind(
                members
                    .iter()
                    .map(|m| m.link_suffix.as_slice())
                    .collect::<Vec<_>>(),
            )
            .bind(
                members
                    .iter()
                    .map(|m| m.row_names.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(self.max_stored_cells)
            .fetch_all(&mut *conn)
            .await;
        drop(conn);
        result.map_err(|e| match outcome_of(e) {
            Ok(e) => GroupError::RolledBack(e),
            Err(unknown) => GroupError::Unknown(unknown),
        })
    }
}

enum GroupError {
    /// No connection: nothing was sent.
    NotSent(sqlx::Error),
    /// The database answered with an error: the statement, a transaction of its own, rolled back.
    RolledBack(sqlx::Error),
    /// The connection failed once the statement was sent.
    Unknown(String),
}

/// sqlx errors are not `Clone`; every member of a group without a connection gets the same one.
fn clone_error(e: &sqlx::Error) -> sqlx::Error {
    match e {
        sqlx::Error::PoolTimedOut => sqlx::Error::PoolTimedOut,
        sqlx::Error::PoolClosed => sqlx::Error::PoolClosed,
        other => sqlx::Error::Protocol(other.to_string()),
    }
}

fn member_answer(row: &PgRow, member: Member) -> Result<Answer, StoreError> {
    if !row
        .try_get::<bool, _>("attempted")
        .map_err(|e| store_error("commit_release", e))?
    {
        return Ok(Answer::Alone(Box::new(member)));
    }
    decode(row)
}

/// A commit's answer row, as both statements name its columns: committed when it has a `seq`,
/// else refused, with the caller's allocation as the statement read it under the row's lock.
pub(super) fn decode(row: &PgRow) -> Result<Answer, StoreError> {
    let get = |e| store_error("commit_release", e);
    match row.try_get::<Option<i64>, _>("seq").map_err(get)? {
        Some(seq) => Ok(Answer::Committed {
            budget: BudgetColumns::from_row(row).map_err(get)?.try_into()?,
            seq,
            created_at: row.try_get("created_at").map_err(get)?,
        }),
        None => {
            let total: Option<i64> = row.try_get("allocation_units").map_err(get)?;
            let spent: Option<i64> = row.try_get("allocation_spent_units").map_err(get)?;
            Ok(Answer::Refused {
                allocation: total.map(|total| (total, spent.unwrap_or(0))),
            })
        }
    }
}

/// The group's statement: `COMMIT_RELEASE` (see there) for many members at once, one member per
/// dataset. `input` numbers the members; `tokens` and `ledgers` lock the rows the members need,
/// token rows first as everywhere, skipping rows another transaction holds; a member whose
/// dataset row, or existing token row, was not locked is not `attempted` (it commits alone).
/// `charged` admits and charges each attempted member against its own dataset's row and its
/// token's allocation as locked; `allocated` adds the charge to the token's spend; `recorded`
/// stores the release with the chain link computed from the row it charged. The answer has a
/// row per member, by `ord`.
const COMMIT_GROUP: &str = "\
WITH input AS MATERIALIZED (
    SELECT * FROM unnest($1::uuid[], $2::int8[], $3::uuid[], $4::text[], $5::text[], $6::bytea[],
                         $7::int8[], $8::int8[], $9::text[], $10::bytea[], $11::bytea[], $12::text[])
           WITH ORDINALITY AS m(dataset_id, cost, release_id, created_by, mechanism, distribution,
                                dimension, table_rows, label, link_prefix, link_suffix, row_names, ord)
), tokens AS MATERIALIZED (
    SELECT td.token_id, td.dataset_id, td.spent_units, td.allocation_units
      FROM token_datasets td JOIN input ON td.token_id = input.created_by
                                       AND td.dataset_id = input.dataset_id
     ORDER BY td.token_id, td.dataset_id
       FOR UPDATE OF td SKIP LOCKED
), ledgers AS MATERIALIZED (
    SELECT d.id FROM datasets d JOIN input ON d.id = input.dataset_id
     WHERE NOT EXISTS (SELECT 1 FROM token_datasets td
                        WHERE td.token_id = input.created_by AND td.dataset_id = input.dataset_id
                          AND NOT EXISTS (SELECT 1 FROM tokens t
                                           WHERE t.token_id = td.token_id
                                             AND t.dataset_id = td.dataset_id))
     ORDER BY d.id
       FOR UPDATE OF d SKIP LOCKED
), attempted AS MATERIALIZED (
    SELECT input.*, tokens.allocation_units, tokens.spent_units AS allocation_spent_units
      FROM input JOIN ledgers ON ledgers.id = input.dataset_id
      LEFT JOIN tokens ON tokens.token_id = input.created_by AND tokens.dataset_id = input.dataset_id
), charged AS (
    UPDATE datasets d
       SET spent_units = d.spent_units + a.cost, release_count = d.release_count + 1,
           stored_cells = d.stored_cells + a.dimension,
           chain_head = sha256(a.link_prefix || int8send(d.release_count + 1) || d.chain_head
                               || int8send((EXTRACT(EPOCH FROM now()) * 1000000)::bigint)
                               || a.link_suffix)
      FROM attempted a
     WHERE d.id = a.dataset_id AND d.spent_units + a.cost <= d.total_units
       AND d.stored_cells + a.dimension <= $13
       AND (a.allocation_units IS NULL OR a.allocation_spent_units + a.cost <= a.allocation_units)
 RETURNING a.ord, d.id, d.budget_order, d.total_units, d.spent_units, d.release_count,
           d.dp_epsilon, d.dp_delta, d.chain_head
), allocated AS (
    UPDATE token_datasets td SET spent_units = td.spent_units + a.cost
      FROM charged c JOIN attempted a ON a.ord = c.ord
     WHERE td.token_id = a.created_by AND td.dataset_id = c.id
), recorded AS (
    INSERT INTO releases (id, dataset_id, seq, created_at, created_by, mechanism, cost_units,
                          distribution, dimension, table_rows, label, chain_hash,
                          spent_after_units, row_names)
    SELECT a.release_id, c.id, c.release_count, now(), a.created_by, a.mechanism::jsonb, a.cost,
           a.distribution, a.dimension, a.table_rows, a.label, c.chain_head, c.spent_units,
           a.row_names
      FROM charged c JOIN attempted a ON a.ord = c.ord
 RETURNING id, seq, created_at
)
SELECT input.ord, (a.ord IS NOT NULL) AS attempted,
       c.budget_order, c.total_units, c.spent_units, c.release_count, c.dp_epsilon, c.dp_delta,
       r.seq, r.created_at, a.allocation_units, a.allocation_spent_units
  FROM input
  LEFT JOIN attempted a ON a.ord = input.ord
  LEFT JOIN charged c ON c.ord = input.ord
  LEFT JOIN recorded r ON r.id = input.release_id
 ORDER BY input.ord";
