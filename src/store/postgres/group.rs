//! Group commit: releases that arrive while the database is busy commit together, in one
//! statement and one transaction, keyed (`Idempotency-Key`) or not.
//!
//! Why: on PostgreSQL a release's commit is dominated by what every statement and transaction
//! costs whatever it does (a round trip, executor start-up, the commit record and its WAL
//! flush), not by the rows it writes; and releases of one dataset serialise on its row lock,
//! one commit (and WAL flush) after another. Under load many releases wait for a connection at
//! once; committing them as one statement pays that fixed cost once, and a hot dataset's row is
//! locked and flushed once for all its waiting releases (BENCHMARKS.md, "End to end" and "The
//! group statement alone").
//!
//! How: [`Groups::commit`] queues a release; one runner task takes the queue as soon as one of
//! [`Groups`]' slots is free, up to [`MAX_GROUP`] releases, and commits them on a connection of
//! its own while it forms the next group. At low load a slot is always free, so every release is
//! a group of one and goes at once; groups grow only while every slot is busy. A release whose
//! dataset is in a running group waits for the next group (that group holds the row's lock), so
//! a slot never waits for a lock of its own replica's making. A release of a dataset in a
//! population queues by the population instead: every release under it locks the population's
//! rows, so two groups with its members would only run one after the other, each holding a slot
//! and its datasets' locks while it waits; instead the population's newcomers wait for the next
//! group and share it. (Datasets in sibling populations still meet on their common ancestors'
//! rows, in two groups.)
//!
//! The ledger's rules hold member by member, as in the one-release statement: each member is
//! admitted only if its dataset's budget, the output quota and its token's allocation all have
//! room, as read under the rows' locks plus what the group's earlier members of the same dataset
//! (and token) were charged; its charge, its token's spend, the release log's link and its
//! record are written in the same statement, so a member is charged exactly when it is stored,
//! and nothing is answered before the transaction has committed. A dataset's members are
//! admitted in order as a prefix, as if they had committed one after another: the first that
//! does not fit is refused and writes nothing, and those after it commit alone. The group waits
//! for no dataset or token lock: rows held by another transaction (another replica's release, an
//! allocation change) are skipped (`SKIP LOCKED`), and those members commit alone afterwards with
//! the one-release statement (`COMMIT_RELEASE`), which waits for the lock as always. Population
//! rows are the one exception (below): the group waits for them, last and in ascending id order,
//! as every transaction that locks them does, so a group still cannot deadlock with anyone.
//!
//! Replicas: every replica forms its own groups, and two replicas' groups of one dataset would
//! meet on its row. Skipping the row there sent the later group's members to commit alone, each
//! queueing on the lock, so that every later group found the row locked too: with all load on
//! one dataset, two replicas committed 0.35 × and four 0.13 × what one did (docs/SCALING.md).
//! So a group first takes its turn on each of its datasets: a transaction-level advisory lock
//! per dataset (`pg_advisory_xact_lock`, [`TURN_CLASS`] and [`turn_key`]), all in key order in
//! one statement, waited for at most `max_wait` (`lock_timeout`; past it the members are
//! answered unavailable, never charged); once it has them, the releases its replica received for
//! those datasets while it waited join it (`Runner::join_late`); then the statement, with a
//! snapshot taken after the turn (so the previous group's commit is visible and the keys'
//! `fresh` check holds), then COMMIT, which ends the turn. The groups of one dataset, from any
//! replica, so run one after another, each with all the releases its replica gathered meanwhile. Only groups take turns, and they
//! take them before any row lock, in one order: a group waiting for a turn holds no row lock,
//! and whatever holds a row lock never waits for a turn, so the turns add no deadlock
//! (docs/ARCHITECTURE.md, "Lock order"). Releases alone and other writers take no turn; the
//! statement still skips the rows they hold, as below.
//!
//! Idempotency keys are checked in the statement, so that a key never aborts it (the unique
//! index `releases_idempotency_unique` would abort the whole statement, every member's charge
//! with it). A key is unique per dataset, and every transaction that stores a release of a
//! dataset holds that dataset's row lock and adds one to its `release_count` (both statements
//! do; nothing else writes `releases`). So once the group holds a dataset's row lock, no other
//! transaction can be storing a release of it, and the releases the statement's snapshot shows
//! are all the dataset has, *if* the row it locked has the `release_count` the snapshot shows
//! (`fresh`): a transaction that committed a release between the statement's start and the lock
//! changed it. For each keyed member of a locked dataset:
//!
//! - a release with its key is stored: the member is not charged and is answered
//!   [`Answer::KeyConflict`] (the caller reads the stored release and replays it, or refuses a
//!   different body, exactly as for a release alone);
//! - an earlier member of the group has the same key: only the first can be charged; the later
//!   one is answered [`Answer::KeyConflict`] if the first was stored, and commits alone otherwise
//!   (the first was refused or not attempted);
//! - the dataset is not `fresh`: the snapshot cannot say whether the key is free, so the member
//!   is not attempted and commits alone, where the unique index decides (a violation aborts only
//!   its own statement: [`Answer::KeyConflict`]);
//! - otherwise the key is free and stays free until the group commits: the member is admitted
//!   like any other, and its key is stored with it.
//!
//! Two replicas racing with one key therefore never roll a group back: the replica whose group
//! (or release alone) takes the dataset's lock first stores the key. The other's group either
//! skips the locked dataset (its member commits alone, waits for the lock, and meets the unique
//! index: [`Answer::KeyConflict`]), or finds the key stored (answered with it), or finds its
//! snapshot stale (its member commits alone, as in the first case). Should the unique index fire
//! in a group all the same, the group rolls back as a whole and every member commits alone:
//! slower, never charged twice.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgRow;
use sqlx::{Executor, FromRow, PgPool, Postgres, Row};
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
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
    /// What the member queues behind: its dataset's population (as the handler read it), else
    /// its dataset. While a group holds one, the queue's newcomers wait for the next group.
    pub queue: Uuid,
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
    /// The blocks it reads (src/ledger/blocks.rs): the period, the first and last index, and
    /// the first and last key as stored.
    pub block_period: Option<&'static str>,
    pub block_first: Option<i64>,
    pub block_last: Option<i64>,
    pub block_from: Option<String>,
    pub block_to: Option<String>,
}

impl Member {
    /// Its dataset had a population when the handler read it (a hint: the statements read the
    /// dataset's population under its lock).
    fn under_population(&self) -> bool {
        self.queue != self.dataset_id
    }
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
    /// A release with the member's idempotency key exists (committed before, by a concurrent
    /// retry, or by an earlier member of the same group); nothing written for this member.
    KeyConflict,
    /// Not attempted by its group (a row it needs was locked by another transaction, an earlier
    /// member of its dataset was refused, its key could not be checked in the group, or the
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
                finished: Arc::default(),
                pending: Arc::default(),
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
    /// Queues ([`Member::queue`]: datasets, populations) with a member in a running group.
    in_flight: Arc<Mutex<HashSet<Uuid>>>,
    slots: Arc<Semaphore>,
    /// Signalled when a group ends, so that releases waiting for its datasets go next.
    finished: Arc<Notify>,
    /// Releases not yet in a group, in arrival order: the runner forms groups from them, and a
    /// group that has its turns takes those that arrived meanwhile for its datasets.
    pending: Arc<Mutex<VecDeque<Queued>>>,
    max_wait: Duration,
    max_stored_cells: i64,
}

async fn run(mut receiver: mpsc::UnboundedReceiver<Queued>, runner: Runner) {
    let push = |queued| runner.pending().push_back(queued);
    loop {
        if runner.pending().is_empty() {
            match receiver.recv().await {
                Some(queued) => push(queued),
                None => return,
            }
        }
        // A free slot. Meanwhile newcomers queue, and a release that has waited too long is
        // refused (never sent), even while every slot is held by a statement the database does
        // not answer (frozen, cut off): its commit's answer stays within the store's bound.
        let deadline = oldest_deadline(&runner.pending(), runner.max_wait);
        let slot = tokio::select! {
            biased;
            slot = runner.slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
            queued = receiver.recv() => {
                match queued {
                    Some(queued) => push(queued),
                    None => return,
                }
                continue;
            }
            () = sleep_until(deadline) => {
                let mut pending = runner.pending();
                *pending = runner.refuse_expired(std::mem::take(&mut *pending));
                continue;
            }
        };
        // Whatever queued while every slot was busy joins this group.
        while let Ok(queued) = receiver.try_recv() {
            push(queued);
        }
        let mut group = Vec::new();
        {
            let mut later = VecDeque::new();
            let mut in_flight = runner.in_flight.lock().expect("in_flight lock");
            let mut pending = runner.pending();
            let mut joined = HashSet::new();
            for queued in runner.refuse_expired(std::mem::take(&mut *pending)) {
                let queue = queued.member.queue;
                if in_flight.contains(&queue) && !joined.contains(&queue) {
                    // Its dataset (or population) is being committed by a running group, which
                    // holds the row's lock: it waits for the next group, with the other
                    // newcomers of its queue, so that a hot dataset's releases (or a
                    // population's, which all lock its rows) share one transaction instead of
                    // queueing on the lock one transaction each.
                    later.push_back(queued);
                } else if group.len() < MAX_GROUP {
                    if in_flight.insert(queue) {
                        joined.insert(queue);
                    }
                    group.push(queued);
                } else {
                    later.push_back(queued);
                }
            }
            *pending = later;
        }
        if group.is_empty() {
            drop(slot);
            // Everything pending waits for a running group: wake when one ends, when something
            // new arrives, or just after the oldest has waited too long.
            let deadline = oldest_deadline(&runner.pending(), runner.max_wait);
            tokio::select! {
                () = runner.finished.notified() => {}
                queued = receiver.recv() => match queued {
                    Some(queued) => push(queued),
                    None => return,
                },
                () = sleep_until(deadline) => {}
            }
            continue;
        }
        let runner = runner.clone();
        tokio::spawn(async move {
            let queues: Vec<Uuid> = group.iter().map(|q| q.member.queue).collect();
            runner.commit(group).await;
            let mut in_flight = runner.in_flight.lock().expect("in_flight lock");
            for id in queues {
                in_flight.remove(&id);
            }
            drop(in_flight);
            drop(slot);
            runner.finished.notify_one();
        });
    }
}

/// Just after the longest-waiting of `pending` has waited `max_wait` (`None`: nothing waits).
fn oldest_deadline(pending: &VecDeque<Queued>, max_wait: Duration) -> Option<tokio::time::Instant> {
    pending
        .iter()
        .map(|q| q.queued_at + max_wait + Duration::from_millis(1))
        .min()
        .map(tokio::time::Instant::from_std)
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Runner {
    fn pending(&self) -> std::sync::MutexGuard<'_, VecDeque<Queued>> {
        self.pending.lock().expect("pending lock")
    }

    /// Once `group` has its datasets' turns: the releases that arrived meanwhile for the same
    /// datasets (they were waiting for this group to end) join it, up to [`MAX_GROUP`], in
    /// arrival order. While another replica's group of those datasets runs, this one waits for
    /// its turns and so grows with everything its replica receives for them: the replicas'
    /// groups alternate on a hot dataset, each as large as the wait made it.
    fn join_late(&self, group: &mut Vec<Queued>) {
        let queues: HashSet<Uuid> = group.iter().map(|q| q.member.queue).collect();
        let turns: HashSet<Uuid> = group.iter().map(|q| q.member.dataset_id).collect();
        let mut pending = self.pending();
        let mut waiting = VecDeque::with_capacity(pending.len());
        for queued in pending.drain(..) {
            if group.len() < MAX_GROUP
                && queues.contains(&queued.member.queue)
                && turns.contains(&queued.member.dataset_id)
                && queued.queued_at.elapsed() <= self.max_wait
            {
                group.push(queued);
            } else {
                waiting.push_back(queued);
            }
        }
        *pending = waiting;
    }

    /// Answers every release of `pending` that has waited longer than `max_wait` as unavailable
    /// (it was never sent, so nothing was charged); returns the others, in order.
    fn refuse_expired(&self, pending: VecDeque<Queued>) -> VecDeque<Queued> {
        let (expired, waiting): (VecDeque<_>, VecDeque<_>) = pending
            .into_iter()
            .partition(|q| q.queued_at.elapsed() > self.max_wait);
        for queued in expired {
            let _ = queued.answer.send(Err(StoreError::Unavailable(
                "commit_release: timed out waiting for a commit slot".into(),
            )));
        }
        waiting
    }

    /// Even a group of one runs the group's statement: it waits for no row lock (only for its
    /// datasets' turns, bounded), so a slot is never held by a release queueing on another
    /// transaction's row lock.
    async fn commit(&self, mut group: Vec<Queued>) {
        let outcome = self.statement(&mut group).await;
        let (answers, members): (Vec<_>, Vec<_>) = group
            .into_iter()
            .map(|queued| (queued.answer, queued.member))
            .unzip();
        match outcome {
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
                    let _ = answer.send(Err(e.clone()));
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

    async fn statement(&self, group: &mut Vec<Queued>) -> Result<Vec<PgRow>, GroupError> {
        // Classified as a release alone classifies it: a connection that could not be had (the
        // server refusing, resetting or ending the connection while it restarts) is unavailable,
        // since nothing was sent.
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| GroupError::NotSent(store_error("commit_release", e)))?;
        // The group's own transaction: its datasets' turn first (module docs, "Replicas"), then
        // the statement, with a snapshot taken once the turn is had, then the commit. Until
        // COMMIT is sent nothing can be charged, so any failure before it is `NotSent`.
        let begin = self.begin_turn(group);
        if let Err(e) = conn.execute(begin.as_str()).await {
            abandon(conn).await;
            return Err(GroupError::NotSent(store_error("commit_release", e)));
        }
        self.join_late(group);
        let members = group.as_slice();
        // Most groups carry no dataset of a population: their statement leaves the population
        // steps out (BENCHMARKS.md, "The group statement alone").
        let sql = if members.iter().any(|q| q.member.under_population()) {
            COMMIT_GROUP
        } else {
            COMMIT_GROUP_STANDALONE.as_str()
        };
        let result = sqlx::query(sql)
            .bind(column(members, |m| m.dataset_id))
            .bind(column(members, |m| m.cost))
            .bind(column(members, |m| m.id))
            .bind(column(members, |m| m.created_by.as_str()))
            .bind(column(members, |m| m.mechanism.as_str()))
            .bind(column(members, |m| m.distribution.as_slice()))
            .bind(column(members, |m| m.dimension))
            .bind(column(members, |m| m.table_rows))
            .bind(column(members, |m| m.label.as_deref()))
            .bind(column(members, |m| m.link_prefix.as_slice()))
            .bind(column(members, |m| m.link_suffix.as_slice()))
            .bind(column(members, |m| m.row_names.as_deref()))
            .bind(self.max_stored_cells)
            .bind(column(members, |m| m.idempotency_key.as_deref()))
            .bind(column(members, |m| m.fingerprint.as_deref()))
            .bind(column(members, |m| m.block_period))
            .bind(column(members, |m| m.block_first))
            .bind(column(members, |m| m.block_last))
            .bind(column(members, |m| m.block_from.as_deref()))
            .bind(column(members, |m| m.block_to.as_deref()))
            .fetch_all(&mut *conn)
            .await;
        let rows = match result {
            Ok(rows) => rows,
            // The database refused the statement: its transaction is rolled back whole.
            Err(e @ sqlx::Error::Database(_)) if !is_panic(&e) => {
                abandon(conn).await;
                return Err(GroupError::RolledBack(e));
            }
            // The connection failed before COMMIT was sent: the server rolls the transaction
            // back when the session ends, so nothing was charged.
            Err(e) => {
                abandon(conn).await;
                return Err(GroupError::NotSent(store_error("commit_release", e)));
            }
        };
        match conn.execute("COMMIT").await {
            Ok(_) => Ok(rows),
            Err(e) => {
                conn.close_on_drop();
                Err(match outcome_of(e) {
                    Ok(e) => GroupError::RolledBack(e),
                    Err(unknown) => GroupError::Unknown(unknown),
                })
            }
        }
    }

    /// `BEGIN`, then the advisory lock of each of the group's datasets, in key order, waited for
    /// at most `max_wait`, then the session's `lock_timeout` back for the statement: one round
    /// trip. The keys are integers formatted here, never text from
    /// a request.
    fn begin_turn(&self, group: &[Queued]) -> String {
        let mut keys: Vec<i32> = group
            .iter()
            .map(|q| turn_key(q.member.dataset_id))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let locks: Vec<String> = keys
            .iter()
            .map(|key| format!("pg_advisory_xact_lock({TURN_CLASS}, {key})"))
            .collect();
        format!(
            "BEGIN; SET LOCAL lock_timeout = {}; SELECT {}; SET LOCAL lock_timeout TO DEFAULT",
            self.max_wait.as_millis().max(1),
            locks.join(", ")
        )
    }
}

/// The first key of every group turn's advisory lock (`pg_advisory_xact_lock(int4, int4)`), so
/// that its locks share no key with any other advisory lock (the migrator's takes one `int8`).
const TURN_CLASS: i32 = 0x5245_4c53;

/// A dataset's turn key: its id folded to 32 bits. Two datasets that share a key only take turns
/// they need not take; the locks are still taken in one order.
fn turn_key(dataset_id: Uuid) -> i32 {
    let id = dataset_id.as_u128();
    #[allow(clippy::cast_possible_truncation)]
    let folded = (id ^ (id >> 32) ^ (id >> 64) ^ (id >> 96)) as u32;
    i32::from_ne_bytes(folded.to_ne_bytes())
}

/// Ends the group's transaction before its connection goes back to the pool (a connection that
/// cannot say ROLLBACK is closed instead).
async fn abandon(mut conn: PoolConnection<Postgres>) {
    if conn.execute("ROLLBACK").await.is_err() {
        conn.close_on_drop();
    }
}

fn is_panic(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|db| db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>())
        .is_some_and(|pg| pg.severity() == sqlx::postgres::PgSeverity::Panic)
}

/// One of the statement's array parameters: a field of every member, in order.
fn column<'a, T>(members: &'a [Queued], field: impl Fn(&'a Member) -> T) -> Vec<T> {
    members.iter().map(|q| field(&q.member)).collect()
}

enum GroupError {
    /// No connection: nothing was sent (the error as the store classifies it).
    NotSent(StoreError),
    /// The database answered with an error: the statement, a transaction of its own, rolled back.
    RolledBack(sqlx::Error),
    /// The connection failed once the statement was sent.
    Unknown(String),
}

fn member_answer(row: &PgRow, member: Member) -> Result<Answer, StoreError> {
    let get = |e| store_error("commit_release", e);
    if !row.try_get::<bool, _>("attempted").map_err(get)? {
        return Ok(Answer::Alone(Box::new(member)));
    }
    if row.try_get::<bool, _>("key_stored").map_err(get)? {
        return Ok(Answer::KeyConflict);
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

/// [`COMMIT_GROUP`] for a group none of whose members' datasets had a population when the
/// handler read them, with the population steps cut out: even with every path empty, they cost
/// a few per cent of the spread rate. It attempts only the datasets that have no population under
/// the lock (`population_id IS NULL`, where the full statement has `pathed`); a member whose
/// dataset joined a population after the handler's read is not attempted and commits alone,
/// where the dataset's population is read again (`PgStore::commit_release`).
static COMMIT_GROUP_STANDALONE: LazyLock<String> = LazyLock::new(|| standalone(COMMIT_GROUP));

/// `full` without its population steps (see [`COMMIT_GROUP_STANDALONE`]).
fn standalone(full: &str) -> String {
    fn cut(sql: &str, from: &str, to: &str) -> String {
        let start = sql
            .find(from)
            .unwrap_or_else(|| panic!("no {from:?} in COMMIT_GROUP"));
        let end = start
            + sql[start..]
                .find(to)
                .unwrap_or_else(|| panic!("no {to:?} after {from:?} in COMMIT_GROUP"));
        format!("{}{}", &sql[..start], &sql[end..])
    }
    fn replace(sql: &str, from: &str, to: &str) -> String {
        assert_eq!(
            sql.matches(from).count(),
            1,
            "{from:?} once in COMMIT_GROUP"
        );
        sql.replace(from, to)
    }
    let sql = cut(full, "), paths AS", "), keys AS");
    let sql = cut(&sql, "), node_sums AS", "), attempted AS");
    let sql = cut(&sql, "), pop_charged AS", "), recorded AS");
    let sql = replace(
        &sql,
        "NOT EXISTS (SELECT 1 FROM node_sums s WHERE s.ord = r.ord AND NOT s.fits)\n",
        "true\n",
    );
    replace(
        &sql,
        "l.id IN (SELECT id FROM pathed)",
        "l.population_id IS NULL",
    )
}

/// The group statement's texts as the service sends them, with its population steps (`full`)
/// and without them (`standalone`), so that a benchmark of the statement alone runs these bytes
/// rather than a copy of the cuts (`dirichlet-release group-statement`).
pub fn statement_texts() -> [(&'static str, &'static str); 2] {
    [
        ("full", COMMIT_GROUP),
        ("standalone", COMMIT_GROUP_STANDALONE.as_str()),
    ]
}

/// The group's statement: `COMMIT_RELEASE` (see there) for many members at once. Each step is a
/// CTE, read top to bottom:
///
/// - `input` numbers the members (`ord`, arrival order);
/// - `tokens` and `ledgers` lock the rows the members need, token rows first as everywhere,
///   skipping rows another transaction holds; `ready` drops a member whose existing token row was
///   not locked, and a member whose dataset row was not locked is not joined by `attempted`: such
///   members are not `attempted` and commit alone;
/// - `keys` judges each keyed member of a locked dataset (module docs): whether its key is
///   `stored` (a plain read: the statement's snapshot; a scalar subquery, so that it is one probe
///   of the unique index per member, never a hash of the whole table, whatever the planner
///   believes of its size), the `first` member of the group with that
///   key, and whether the dataset is `fresh` (the `release_count` of the row locked in `ledgers`,
///   the last committed, equals the snapshot's, so the snapshot shows every stored key);
///   `candidates` are the ready members the group may charge: keyless, or keyed with a free key
///   that they are the first to carry in a fresh dataset;
/// - the candidates of one dataset are admitted in `ord` order as a prefix, exactly as if they had
///   committed one after another: `attempted` reads the dataset's spend, output quota and the
///   token's allocation under the locks and adds the costs of the members before each one
///   (`fits`: running sums over the dataset, and over the dataset and token); `judged` finds the
///   first member that does not fit (`stop`), which is refused, and the members after it are not
///   attempted (they commit alone, against the ledger as this group left it);
/// - `chain` extends the release log link by link in the same order (`WITH RECURSIVE`: each link
///   hashes the one before);
/// - `charged` writes each dataset's row once with the prefix's sums and last link, and only if
///   the row is still the one read under the lock (`release_count`), else its members are not
///   attempted; `allocated` adds each token's part to its spend; `recorded` stores the releases
///   with their seqs, links, `spent_after` and keys.
///
/// The answer has a row per member, by `ord`: a committed member's budget is the ledger right
/// after its own charge, as a release alone answers; `key_stored` marks a keyed member answered by
/// the release already stored with its key (before, or by the group's first member with it).
/// Populations (src/ledger/population.rs): `paths` walks each locked dataset's population chain
/// in the snapshot, and `nodes` locks those rows after the datasets', by id — waiting for them,
/// unlike every other lock of the group: a population's rows are shared by all its datasets, so
/// skipping them sent every member under a busy population to commit alone (0.42 × the
/// standalone spread rate in a first measurement). It cannot deadlock: the group waits for no
/// other lock, and every transaction that locks population rows takes them last, in ascending
/// id order, in one statement. A dataset is `pathed` when it has no population, or when every
/// node of its chain still has the parent the snapshot showed (the chain did not move), and is
/// `shared`; the members of other datasets are not attempted and commit alone, in the
/// transaction that charges the nodes exactly (src/store/postgres/tree.rs). Under a shared node
/// the node's increase is the sum of the costs admitted below it, so `node_sums` adds, per node
/// and in `ord` order, the costs of every candidate below it — an upper bound of what the group
/// will charge it, since some of those may not be admitted — and a member is `pop_fits` when
/// every node of its chain stays within its total so. A member that is not `pop_fits` stops its
/// dataset's prefix like a refusal, but is not refused: it and those after it commit alone, where
/// the exact rule decides. `pop_charged` adds each node's share of the admitted costs. No node
/// is ever charged past its total: the admitted costs under it are at most the bound checked,
/// and the table's CHECK would roll the whole group back (every member then commits alone).
const COMMIT_GROUP: &str = "\
WITH RECURSIVE input AS MATERIALIZED (
    SELECT * FROM unnest($1::uuid[], $2::int8[], $3::uuid[], $4::text[], $5::text[], $6::bytea[],
                         $7::int8[], $8::int8[], $9::text[], $10::bytea[], $11::bytea[], $12::text[],
                         $14::text[], $15::bytea[], $16::text[], $17::int8[], $18::int8[],
                         $19::text[], $20::text[])
           WITH ORDINALITY AS m(dataset_id, cost, release_id, created_by, mechanism, distribution,
                                dimension, table_rows, label, link_prefix, link_suffix, row_names,
                                idempotency_key, fingerprint, block_period, block_first,
                                block_last, block_from, block_to, ord)
), tokens AS MATERIALIZED (
    SELECT td.token_id, td.dataset_id, td.spent_units, td.allocation_units
      FROM token_datasets td
     WHERE (td.token_id, td.dataset_id) IN (SELECT created_by, dataset_id FROM input)
     ORDER BY td.token_id, td.dataset_id
       FOR UPDATE OF td SKIP LOCKED
), ready AS MATERIALIZED (
    SELECT input.* FROM input
     WHERE NOT EXISTS (SELECT 1 FROM token_datasets td
                        WHERE td.token_id = input.created_by AND td.dataset_id = input.dataset_id
                          AND NOT EXISTS (SELECT 1 FROM tokens t
                                           WHERE t.token_id = td.token_id
                                             AND t.dataset_id = td.dataset_id))
), ledgers AS MATERIALIZED (
    SELECT d.id, d.spent_units, d.total_units, d.stored_cells, d.release_count, d.chain_head,
           d.population_id, d.block_period, d.block_total_units
      FROM datasets d
     WHERE d.id IN (SELECT dataset_id FROM ready)
     ORDER BY d.id
       FOR UPDATE OF d SKIP LOCKED
), paths AS MATERIALIZED (
    SELECT l.id AS dataset_id, p.id AS node_id, p.parent_id, 1 AS depth
      FROM ledgers l JOIN populations p ON p.id = l.population_id
    UNION ALL
    SELECT paths.dataset_id, p.id, p.parent_id, paths.depth + 1
      FROM paths JOIN populations p ON p.id = paths.parent_id
     WHERE paths.depth <= 33
), nodes AS MATERIALIZED (
    SELECT p.id, p.spent_units, p.total_units, p.children, p.parent_id
      FROM populations p
     WHERE p.id IN (SELECT node_id FROM paths)
     ORDER BY p.id
       FOR UPDATE OF p
), pathed AS MATERIALIZED (
    SELECT l.id FROM ledgers l
     WHERE l.population_id IS NULL
        OR NOT EXISTS (SELECT 1 FROM paths pa LEFT JOIN nodes n ON n.id = pa.node_id
                        WHERE pa.dataset_id = l.id
                          AND (n.id IS NULL OR n.children <> 'shared'
                               OR n.parent_id IS DISTINCT FROM pa.parent_id))
), keys AS MATERIALIZED (
    SELECT r.ord, r.release_id,
           (SELECT true FROM releases s
             WHERE s.dataset_id = r.dataset_id AND s.idempotency_key = r.idempotency_key)
               IS NOT NULL AS stored,
           first_value(r.release_id) OVER (PARTITION BY r.dataset_id, r.idempotency_key
                                           ORDER BY r.ord) AS first,
           l.release_count = (SELECT d.release_count FROM datasets d WHERE d.id = l.id) AS fresh
      FROM ready r JOIN ledgers l ON l.id = r.dataset_id
     WHERE r.idempotency_key IS NOT NULL
), candidates AS (
    SELECT r.* FROM ready r LEFT JOIN keys k ON k.ord = r.ord
     WHERE k.ord IS NULL OR (k.fresh AND NOT k.stored AND k.first = k.release_id)
), blocked AS MATERIALIZED (
    SELECT l.id FROM ledgers l
     WHERE l.block_period IS NOT NULL
       AND l.release_count = (SELECT d.release_count FROM datasets d WHERE d.id = l.id)
), block_sums AS MATERIALIZED (
    SELECT c.ord,
           COALESCE((SELECT b.spent_units FROM dataset_blocks b
                      WHERE b.dataset_id = c.dataset_id AND b.block = g.block), 0)
           + sum(c.cost) OVER (PARTITION BY c.dataset_id, g.block ORDER BY c.ord)
               <= l.block_total_units AS fits
      FROM candidates c JOIN ledgers l ON l.id = c.dataset_id
     CROSS JOIN LATERAL generate_series(c.block_first, c.block_last) AS g(block)
     WHERE c.block_first IS NOT NULL AND l.block_total_units IS NOT NULL
), node_sums AS MATERIALIZED (
    SELECT c.ord,
           n.spent_units + sum(c.cost) OVER (PARTITION BY n.id ORDER BY c.ord) <= n.total_units
               AS fits
      FROM candidates c JOIN pathed ON pathed.id = c.dataset_id
      JOIN paths pa ON pa.dataset_id = c.dataset_id JOIN nodes n ON n.id = pa.node_id
), attempted AS MATERIALIZED (
    SELECT r.*, l.release_count AS base_count, l.chain_head AS base_head,
           (l.spent_units + sum(r.cost) OVER per_dataset)::int8 AS spent_after,
           tokens.allocation_units,
           (tokens.spent_units + sum(r.cost) OVER per_token - r.cost)::int8
               AS allocation_spent_units,
           row_number() OVER per_dataset AS rank,
           NOT EXISTS (SELECT 1 FROM node_sums s WHERE s.ord = r.ord AND NOT s.fits)
           AND NOT EXISTS (SELECT 1 FROM block_sums s WHERE s.ord = r.ord AND NOT s.fits)
               AS pop_fits,
           l.spent_units + sum(r.cost) OVER per_dataset <= l.total_units
           AND l.stored_cells + sum(r.dimension) OVER per_dataset <= $13
           AND (tokens.allocation_units IS NULL
                OR tokens.spent_units + sum(r.cost) OVER per_token <= tokens.allocation_units)
               AS fits
      FROM candidates r JOIN ledgers l ON l.id = r.dataset_id AND l.id IN (SELECT id FROM pathed)
       AND r.block_period IS NOT DISTINCT FROM l.block_period
       AND (l.block_period IS NULL OR l.id IN (SELECT id FROM blocked))
      LEFT JOIN tokens ON tokens.token_id = r.created_by AND tokens.dataset_id = r.dataset_id
    WINDOW per_dataset AS (PARTITION BY r.dataset_id ORDER BY r.ord),
           per_token AS (PARTITION BY r.dataset_id, r.created_by ORDER BY r.ord)
), judged AS MATERIALIZED (
    SELECT a.*, min(a.rank) FILTER (WHERE NOT (a.fits AND a.pop_fits))
                    OVER (PARTITION BY a.dataset_id) AS stop
      FROM attempted a
), chain AS (
    SELECT j.dataset_id, j.rank, j.base_count + 1 AS seq,
           sha256(j.link_prefix || int8send(j.base_count + 1) || j.base_head
                  || int8send((EXTRACT(EPOCH FROM now()) * 1000000)::bigint) || j.link_suffix) AS head
      FROM judged j WHERE j.rank = 1 AND j.fits AND j.pop_fits
    UNION ALL
    SELECT j.dataset_id, j.rank, j.base_count + j.rank,
           sha256(j.link_prefix || int8send(j.base_count + j.rank) || c.head
                  || int8send((EXTRACT(EPOCH FROM now()) * 1000000)::bigint) || j.link_suffix)
      FROM chain c JOIN judged j ON j.dataset_id = c.dataset_id AND j.rank = c.rank + 1
     WHERE j.fits AND j.pop_fits AND (j.stop IS NULL OR j.rank < j.stop)
), admitted AS MATERIALIZED (
    SELECT j.*, c.seq, c.head FROM judged j JOIN chain c USING (dataset_id, rank)
), charged AS (
    UPDATE datasets d
       SET spent_units = d.spent_units + s.cost, release_count = d.release_count + s.n,
           stored_cells = d.stored_cells + s.cells, chain_head = s.head
      FROM (SELECT a.dataset_id, sum(a.cost)::int8 AS cost, count(*) AS n,
                   sum(a.dimension)::int8 AS cells, min(a.base_count) AS base_count,
                   (array_agg(a.head ORDER BY a.rank DESC))[1] AS head
              FROM admitted a GROUP BY a.dataset_id) s
     WHERE d.id = s.dataset_id AND d.release_count = s.base_count
 RETURNING d.id, d.budget_order, d.total_units, d.spent_units, d.release_count,
           d.dp_epsilon, d.dp_delta
), allocated AS (
    UPDATE token_datasets td SET spent_units = td.spent_units + s.cost
      FROM (SELECT a.created_by, a.dataset_id, sum(a.cost)::int8 AS cost
              FROM admitted a JOIN charged c ON c.id = a.dataset_id
             GROUP BY a.created_by, a.dataset_id) s
     WHERE td.token_id = s.created_by AND td.dataset_id = s.dataset_id
), block_charged AS (
    INSERT INTO dataset_blocks (dataset_id, block, spent_units)
    SELECT a.dataset_id, g.block, sum(a.cost)::int8
      FROM admitted a JOIN charged c ON c.id = a.dataset_id
     CROSS JOIN LATERAL generate_series(a.block_first, a.block_last) AS g(block)
     WHERE a.block_first IS NOT NULL
     GROUP BY a.dataset_id, g.block
    ON CONFLICT (dataset_id, block)
    DO UPDATE SET spent_units = dataset_blocks.spent_units + excluded.spent_units
), pop_charged AS (
    UPDATE populations p SET spent_units = p.spent_units + s.cost
      FROM (SELECT pa.node_id, sum(a.cost)::int8 AS cost
              FROM admitted a JOIN charged c ON c.id = a.dataset_id
              JOIN paths pa ON pa.dataset_id = a.dataset_id
             GROUP BY pa.node_id) s
     WHERE p.id = s.node_id
), recorded AS (
    INSERT INTO releases (id, dataset_id, seq, created_at, created_by, mechanism, cost_units,
                          distribution, dimension, idempotency_key, fingerprint, table_rows,
                          label, chain_hash, spent_after_units, row_names, block_from, block_to)
    SELECT a.release_id, a.dataset_id, a.seq, now(), a.created_by, a.mechanism::jsonb, a.cost,
           a.distribution, a.dimension, a.idempotency_key, a.fingerprint, a.table_rows,
           a.label, a.head, a.spent_after, a.row_names, a.block_from, a.block_to
      FROM admitted a JOIN charged c ON c.id = a.dataset_id
 RETURNING id, seq, created_at, spent_after_units
)
SELECT input.ord,
       (r.id IS NOT NULL OR k.stored OR f.id IS NOT NULL
        OR (j.rank = j.stop AND NOT j.fits AND (j.stop = 1 OR c.id IS NOT NULL))) IS TRUE
           AS attempted,
       (k.stored OR f.id IS NOT NULL) IS TRUE AS key_stored,
       c.budget_order, c.total_units, r.spent_after_units AS spent_units, r.seq AS release_count,
       c.dp_epsilon, c.dp_delta, r.seq, r.created_at,
       j.allocation_units, j.allocation_spent_units
  FROM input
  LEFT JOIN judged j ON j.ord = input.ord
  LEFT JOIN recorded r ON r.id = input.release_id
  LEFT JOIN charged c ON c.id = input.dataset_id
  LEFT JOIN keys k ON k.ord = input.ord
  LEFT JOIN recorded f ON f.id = k.first AND k.first <> input.release_id
 ORDER BY input.ord";

#[cfg(test)]
mod tests {
    use super::*;

    /// The standalone statement is the full one without a single population step: it names no
    /// population table or step, and keeps every other step.
    #[test]
    fn the_standalone_statement_has_no_population_step() {
        let lean = COMMIT_GROUP_STANDALONE.as_str();
        for gone in [
            "populations",
            "paths",
            "nodes",
            "pathed",
            "node_sums",
            "pop_charged",
        ] {
            assert!(
                COMMIT_GROUP.contains(gone),
                "{gone} is in the full statement"
            );
            assert!(
                !lean.contains(gone),
                "{gone} is left in the standalone statement"
            );
        }
        for kept in [
            "input AS",
            "tokens AS",
            "ready AS",
            "ledgers AS",
            "keys AS",
            "candidates AS",
            "attempted AS",
            "judged AS",
            "chain AS",
            "admitted AS",
            "charged AS",
            "allocated AS",
            "recorded AS",
            "AND l.population_id IS NULL",
        ] {
            assert!(lean.contains(kept), "{kept} is kept");
        }
        assert!(lean.len() < COMMIT_GROUP.len());
    }
}
