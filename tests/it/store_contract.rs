//! The `LedgerStore` contract, checked against both backends: every test in `contract_tests!`
//! runs once on a fresh SQLite file and once on a fresh PostgreSQL database. Backend-specific
//! behaviour (read-only files, row locks, migration races, the test server itself) follows.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{SubsecRound, Utc};
use dirichlet_release::access::{Role, TokenRecord};
use dirichlet_release::ledger::*;
use dirichlet_release::privacy::{Order, Sensitivity};
use dirichlet_release::store::{connect, StoreOptions};
use serde_json::json;
use sqlx::{Connection, Executor};
use uuid::Uuid;

use crate::common::pg;

struct Fixture {
    store: Arc<dyn LedgerStore>,
    url: String,
    _dir: Option<tempfile::TempDir>,
}

fn options() -> StoreOptions {
    StoreOptions {
        max_connections: 8,
        acquire_timeout: Duration::from_secs(5),
        max_stored_cells: u64::MAX,
        commit_slots: 4,
    }
}

async fn sqlite() -> Fixture {
    let dir = tempfile::tempdir().expect("temporary directory");
    let url = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let store = connect(&url, &options())
        .await
        .expect("open the SQLite store");
    assert_eq!(store.backend(), "sqlite");
    Fixture {
        store,
        url,
        _dir: Some(dir),
    }
}

async fn postgres() -> Fixture {
    let url = pg::fresh_database().await;
    let store = connect(&url, &options())
        .await
        .expect("open the PostgreSQL store");
    assert_eq!(store.backend(), "postgres");
    Fixture {
        store,
        url,
        _dir: None,
    }
}

/// `name => name_sqlite, name_postgres;` runs `name(fixture)` on each backend.
macro_rules! contract_tests {
    ($($test:ident => $on_sqlite:ident, $on_postgres:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $on_sqlite() {
            $test(sqlite().await).await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $on_postgres() {
            $test(postgres().await).await
        }
    )*};
}

contract_tests! {
    tables_and_labels_round_trip => tables_and_labels_round_trip_sqlite, tables_and_labels_round_trip_postgres;
    datasets_round_trip => datasets_round_trip_sqlite, datasets_round_trip_postgres;
    commits_until_exhausted => commits_until_exhausted_sqlite, commits_until_exhausted_postgres;
    grid_rounding_never_admits_more => grid_rounding_never_admits_more_sqlite, grid_rounding_never_admits_more_postgres;
    unknown_dataset => unknown_dataset_sqlite, unknown_dataset_postgres;
    idempotent_retries => idempotent_retries_sqlite, idempotent_retries_postgres;
    concurrent_commits_respect_the_budget => concurrent_commits_respect_the_budget_sqlite, concurrent_commits_respect_the_budget_postgres;
    concurrent_retries_commit_once => concurrent_retries_commit_once_sqlite, concurrent_retries_commit_once_postgres;
    releases_round_trip => releases_round_trip_sqlite, releases_round_trip_postgres;
    tokens_round_trip => tokens_round_trip_sqlite, tokens_round_trip_postgres;
    secrets_first_writer_wins => secrets_first_writer_wins_sqlite, secrets_first_writer_wins_postgres;
    ledger_summaries => ledger_summaries_sqlite, ledger_summaries_postgres;
    errors_never_echo_values => errors_never_echo_values_sqlite, errors_never_echo_values_postgres;
    token_lifecycle => token_lifecycle_sqlite, token_lifecycle_postgres;
    release_log_chains => release_log_chains_sqlite, release_log_chains_postgres;
    releases_keep_the_ledger_after_them => releases_keep_the_ledger_after_them_sqlite, releases_keep_the_ledger_after_them_postgres;
    allocations_bound_their_token_under_the_dataset_cap => allocations_bound_their_token_under_the_dataset_cap_sqlite, allocations_bound_their_token_under_the_dataset_cap_postgres;
    concurrent_releases_never_overrun_an_allocation => concurrent_releases_never_overrun_an_allocation_sqlite, concurrent_releases_never_overrun_an_allocation_postgres;
    names_round_trip => names_round_trip_sqlite, names_round_trip_postgres;
    a_stale_population_hint_still_charges_the_population => a_stale_population_hint_still_charges_the_population_sqlite, a_stale_population_hint_still_charges_the_population_postgres;
    replicas_share_a_hot_dataset => replicas_share_a_hot_dataset_sqlite, replicas_share_a_hot_dataset_postgres;
}

/// A release whose caller read its dataset before the dataset joined a population (its
/// `population` hint says none) is still charged to the population, and refused once the
/// population is spent, although the dataset alone has room: the stores read the population
/// under the dataset's lock. On PostgreSQL such a release goes to the group statement without
/// population steps, which must leave it to the statement that charges the nodes.
async fn a_stale_population_hint_still_charges_the_population(f: Fixture) {
    let store = f.store;
    let population = store
        .create_population(&new_population("joined later", 1.0))
        .await
        .unwrap();
    let id = store
        .create_dataset(&new_dataset("standalone at first", 10.0))
        .await
        .unwrap()
        .id;
    store
        .set_dataset_population(id, Some(population.id))
        .await
        .unwrap();
    let charge = cost(0.25);
    let mut committed = 0;
    for _ in 0..5 {
        // The hint as a caller that read the dataset before the move holds it.
        match store
            .commit_release(&new_release(id, charge, None))
            .await
            .unwrap()
        {
            CommitOutcome::Committed { .. } => committed += 1,
            CommitOutcome::PopulationExhausted { refusal, .. } => {
                assert_eq!(refusal.id, population.id)
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(committed, 4, "1.0 / 0.25 releases fit the population");
    let node = store.get_population(population.id).await.unwrap().unwrap();
    assert_eq!(node.spent.raw(), 4 * charge.raw());
    assert_eq!(dataset(&*store, id).await.spent.raw(), 4 * charge.raw());
}

// ----- fixtures -----

fn new_dataset(name: &str, budget: f64) -> NewDataset {
    NewDataset {
        id: Uuid::now_v7(),
        name: DatasetName::new(name).unwrap(),
        order: Order::new(8.0).unwrap(),
        total: Units::floor(budget).unwrap(),
        dp_target: Some(DpTarget {
            epsilon: 1.5,
            delta: 1e-6,
        }),
        sensitivity: Sensitivity::REPLACE_ONE,
        neighbouring: "replace_one".to_owned(),
        created_by: "admin-token".to_owned(),
        cells: None,
        population: None,
        blocks: None,
    }
}

fn fingerprint(seed: &str) -> [u8; 32] {
    let mut bytes = [0u8; 32];
    for (i, b) in seed.bytes().cycle().take(32).enumerate() {
        bytes[i] = b.wrapping_add(i as u8);
    }
    bytes
}

/// A root population of `total` ε at order 8 (the datasets' order), shared by its children.
fn new_population(name: &str, total: f64) -> NewPopulation {
    NewPopulation {
        id: Uuid::now_v7(),
        name: DatasetName::new(name).unwrap(),
        order: Order::new(8.0).unwrap(),
        total: Units::floor(total).unwrap(),
        dp_target: None,
        parent: None,
        children: Children::Shared,
        created_by: "admin".into(),
    }
}

fn new_release(dataset_id: Uuid, cost: Units, key: Option<&str>) -> NewRelease {
    NewRelease {
        id: Uuid::now_v7(),
        dataset_id,
        created_by: "analyst-token".to_owned(),
        mechanism: json!({
            "kind": "dirichlet",
            "r": 12.5,
            "alpha": [0.5, 0.1, 1e-7],
            "sigma": null,
            "calibration": {"target_epsilon": 1.5, "iterations": 17, "note": "ünïcode"}
        }),
        cost,
        output: Output::Vector(vec![0.125, 0.375, 0.5]),
        label: None,
        row_names: None,
        idempotency: key.map(|key| Idempotency {
            key: key.to_owned(),
            fingerprint: fingerprint(key),
        }),
        population: None,
        blocks: None,
    }
}

fn cost(value: f64) -> Units {
    Units::ceil(value).unwrap()
}

async fn commit(store: &dyn LedgerStore, new: &NewRelease) -> CommitOutcome {
    store.commit_release(new).await.expect("commit_release")
}

fn committed(outcome: CommitOutcome) -> (Release, BudgetState) {
    match outcome {
        CommitOutcome::Committed { release, budget } => (release, budget),
        other => panic!("expected Committed, got {other:?}"),
    }
}

/// The token's allocation on the dataset (it has one).
async fn allocation_of(store: &dyn LedgerStore, id: Uuid, token: &str) -> Allocation {
    store
        .list_allocations(id, Some(token))
        .await
        .expect("list_allocations")
        .pop()
        .expect("the token has an allocation")
}

async fn dataset(store: &dyn LedgerStore, id: Uuid) -> Dataset {
    store
        .get_dataset(id)
        .await
        .expect("get_dataset")
        .expect("the dataset exists")
}

fn bits(values: &[f64]) -> Vec<u64> {
    values.iter().map(|v| v.to_bits()).collect()
}

// ----- the contract -----

async fn datasets_round_trip(f: Fixture) {
    let store = &*f.store;
    let a = store
        .create_dataset(&new_dataset("first", 2.5))
        .await
        .unwrap();
    let b_new = NewDataset {
        order: Order::new(1.5).unwrap(),
        dp_target: None,
        sensitivity: Sensitivity::new(3.0, 1.5).unwrap(),
        neighbouring: "custom".to_owned(),
        total: Units::floor(0.1).unwrap(),
        ..new_dataset("second", 0.0)
    };
    let b = store.create_dataset(&b_new).await.unwrap();
    let c = store
        .create_dataset(&new_dataset("third", 8192.0))
        .await
        .unwrap();

    assert_eq!(b.id, b_new.id);
    assert_eq!(b.name, "second");
    assert_eq!(b.order.get(), 1.5);
    assert_eq!(b.total, Units::floor(0.1).unwrap());
    assert_eq!(b.dp_target, None);
    assert_eq!(b.sensitivity, Sensitivity::new(3.0, 1.5).unwrap());
    assert_eq!(b.neighbouring, "custom");
    assert_eq!(b.created_by, "admin-token");
    assert_eq!((b.spent, b.releases), (Units::ZERO, 0));
    assert_eq!(
        a.dp_target,
        Some(DpTarget {
            epsilon: 1.5,
            delta: 1e-6
        })
    );
    assert_eq!(c.total.to_f64(), 8192.0);
    assert!(
        (Utc::now() - a.created_at).num_seconds().abs() < 60,
        "created_at is now"
    );

    assert_eq!(dataset(store, a.id).await, a);
    assert_eq!(dataset(store, b.id).await, b);
    assert_eq!(store.get_dataset(Uuid::new_v4()).await.unwrap(), None);

    assert_eq!(
        store.list_datasets(None).await.unwrap(),
        vec![a.clone(), b.clone(), c.clone()]
    );
    assert_eq!(
        store.list_datasets(Some(&[c.id, a.id])).await.unwrap(),
        vec![a.clone(), c.clone()]
    );
    assert_eq!(
        store
            .list_datasets(Some(&[b.id, Uuid::new_v4()]))
            .await
            .unwrap(),
        vec![b]
    );
    assert_eq!(store.list_datasets(Some(&[])).await.unwrap(), vec![]);
}

async fn commits_until_exhausted(f: Fixture) {
    let store = &*f.store;
    let d = store
        .create_dataset(&new_dataset("quarterly", 1.0))
        .await
        .unwrap();
    let quarter = cost(0.25);
    for k in 1..=4i64 {
        let new = new_release(d.id, quarter, None);
        let (release, budget) = committed(commit(store, &new).await);
        assert_eq!(release.seq, k);
        assert_eq!(release.id, new.id);
        assert_eq!(release.cost, quarter);
        assert_eq!(budget.releases, k);
        assert_eq!(budget.spent.raw(), k * quarter.raw());
        assert_eq!(budget.total, d.total);
        assert_eq!(budget.order, d.order);
        assert_eq!(budget.dp_target, d.dp_target);
    }
    let full = dataset(store, d.id).await;
    assert_eq!(
        full.spent, full.total,
        "four quarters spend the budget exactly"
    );
    assert_eq!(full.spent.to_f64(), 1.0);
    assert_eq!(full.releases, 4);

    for refused_cost in [quarter, cost(1e-9)] {
        match commit(store, &new_release(d.id, refused_cost, Some("late"))).await {
            CommitOutcome::Exhausted { budget } => {
                assert_eq!(budget, full.budget());
                assert!(!budget.admits(refused_cost));
            }
            other => panic!("expected Exhausted, got {other:?}"),
        }
    }
    assert_eq!(dataset(store, d.id).await, full, "a refusal writes nothing");
    assert_eq!(store.list_releases(d.id, None, 100).await.unwrap().len(), 4);
    assert_eq!(
        store.find_by_idempotency_key(d.id, "late").await.unwrap(),
        None
    );
}

async fn grid_rounding_never_admits_more(f: Fixture) {
    // 0.1 is not on the grid: each charge is rounded up, so ten of them exceed a budget of 1.0
    // (a floating-point ledger would admit the tenth).
    let store = &*f.store;
    let d = store
        .create_dataset(&new_dataset("tenths", 1.0))
        .await
        .unwrap();
    let tenth = cost(0.1);
    assert!(tenth.to_f64() > 0.1);
    for k in 1..=9i64 {
        let (_, budget) = committed(commit(store, &new_release(d.id, tenth, None)).await);
        assert_eq!(budget.spent.raw(), k * tenth.raw());
    }
    assert!(matches!(
        commit(store, &new_release(d.id, tenth, None)).await,
        CommitOutcome::Exhausted { .. }
    ));
    let after = dataset(store, d.id).await;
    assert_eq!(after.spent.raw(), 9 * tenth.raw());
    assert_eq!(after.releases, 9);
}

async fn unknown_dataset(f: Fixture) {
    let store = &*f.store;
    let missing = Uuid::new_v4();
    for key in [None, Some("k")] {
        assert_eq!(
            commit(store, &new_release(missing, cost(0.1), key)).await,
            CommitOutcome::DatasetNotFound
        );
    }
    assert_eq!(
        store.list_releases(missing, None, 10).await.unwrap(),
        vec![]
    );
    assert_eq!(
        store.find_by_idempotency_key(missing, "k").await.unwrap(),
        None
    );
    assert_eq!(
        store.get_release(missing, Uuid::new_v4()).await.unwrap(),
        None
    );
    assert_eq!(store.list_datasets(None).await.unwrap(), vec![]);
    assert_eq!(store.ledger_summaries().await.unwrap(), vec![]);
}

async fn idempotent_retries(f: Fixture) {
    let store = &*f.store;
    let d = store
        .create_dataset(&new_dataset("retries", 1.0))
        .await
        .unwrap();
    let first = new_release(d.id, cost(0.25), Some("request-1"));
    let (original, _) = committed(commit(store, &first).await);
    assert_eq!(original.idempotency_key.as_deref(), Some("request-1"));
    let stored = store.get_release(d.id, original.id).await.unwrap().unwrap();
    assert_eq!(stored, original);

    // A retry (new release id, same key and request) gets the stored release back.
    let retry = NewRelease {
        output: Output::Vector(vec![0.9, 0.1]),
        ..new_release(d.id, cost(0.25), Some("request-1"))
    };
    match commit(store, &retry).await {
        CommitOutcome::Existing {
            release,
            fingerprint: fp,
        } => {
            assert_eq!(release, stored);
            assert_eq!(fp, fingerprint("request-1"));
        }
        other => panic!("expected Existing, got {other:?}"),
    }
    // A different request under the same key: the store reports the stored fingerprint and the
    // caller tells them apart.
    let conflicting = NewRelease {
        idempotency: Some(Idempotency {
            key: "request-1".into(),
            fingerprint: [0xee; 32],
        }),
        ..new_release(d.id, cost(0.5), None)
    };
    match commit(store, &conflicting).await {
        CommitOutcome::Existing {
            release,
            fingerprint: fp,
        } => {
            assert_eq!(release.id, original.id);
            assert_eq!(fp, fingerprint("request-1"));
        }
        other => panic!("expected Existing, got {other:?}"),
    }
    let after = dataset(store, d.id).await;
    assert_eq!(
        (after.spent, after.releases),
        (cost(0.25), 1),
        "retries charge nothing"
    );
    assert_eq!(store.get_release(d.id, retry.id).await.unwrap(), None);
    assert_eq!(
        store
            .find_by_idempotency_key(d.id, "request-1")
            .await
            .unwrap(),
        Some((stored.clone(), fingerprint("request-1")))
    );

    // Keys are per dataset.
    let other = store
        .create_dataset(&new_dataset("other", 1.0))
        .await
        .unwrap();
    let (elsewhere, _) =
        committed(commit(store, &new_release(other.id, cost(0.25), Some("request-1"))).await);
    assert_eq!(elsewhere.seq, 1);

    // A retry of the release that spent the budget is still answered with that release.
    let (last, budget) =
        committed(commit(store, &new_release(d.id, cost(0.75), Some("request-2"))).await);
    assert_eq!(budget.spent, budget.total);
    match commit(store, &new_release(d.id, cost(0.75), Some("request-2"))).await {
        CommitOutcome::Existing { release, .. } => assert_eq!(release, last),
        other => panic!("expected Existing, got {other:?}"),
    }
    assert!(matches!(
        commit(store, &new_release(d.id, cost(0.75), Some("request-3"))).await,
        CommitOutcome::Exhausted { .. }
    ));
}

/// Runs `sql` on the fixture's database from a connection of its own.
async fn execute_raw(f: &Fixture, sql: &str) {
    match f.store.backend() {
        "sqlite" => {
            let mut raw = sqlx::SqliteConnection::connect(&f.url).await.unwrap();
            raw.execute(sql).await.unwrap();
            raw.close().await.unwrap();
        }
        _ => {
            let mut raw = sqlx::PgConnection::connect(&f.url).await.unwrap();
            raw.execute(sql).await.unwrap();
            raw.close().await.unwrap();
        }
    }
}

/// Every release carries the dataset's `spent` right after its charge, so that
/// a replay can answer the original 201's budget (`Dataset::budget_after`), however many
/// releases came since — also for a row stored without the column (by a replica that predates
/// migration 0005), which is read as the running sum of the costs.
async fn releases_keep_the_ledger_after_them(f: Fixture) {
    let store = &*f.store;
    let d = store
        .create_dataset(&new_dataset("after", 1.0))
        .await
        .unwrap();
    let (a, after_a) = committed(commit(store, &new_release(d.id, cost(0.25), Some("a"))).await);
    let (b, after_b) = committed(commit(store, &new_release(d.id, cost(0.125), None)).await);
    let (c, after_c) = committed(commit(store, &new_release(d.id, cost(0.5), Some("c"))).await);
    assert_eq!(a.spent_after, after_a.spent);
    assert_eq!(b.spent_after, after_b.spent);
    assert_eq!(c.spent_after, after_c.spent);
    assert_eq!(after_c.spent.to_f64(), 0.875);

    let check = || async {
        let (found, _) = store
            .find_by_idempotency_key(d.id, "a")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found, a);
        let d = dataset(store, d.id).await;
        assert_eq!(d.budget_after(&found), after_a);
        assert_ne!(d.budget(), after_a, "the ledger moved on");
        assert_eq!(store.get_release(d.id, b.id).await.unwrap().unwrap(), b);
        assert_eq!(
            store.list_releases(d.id, None, 10).await.unwrap(),
            vec![c.clone(), b.clone(), a.clone()]
        );
        // A concurrent retry's outcome carries it too.
        match commit(store, &new_release(d.id, cost(0.25), Some("a"))).await {
            CommitOutcome::Existing { release, .. } => {
                assert_eq!(d.budget_after(&release), after_a)
            }
            other => panic!("expected Existing, got {other:?}"),
        }
    };
    check().await;
    execute_raw(&f, "UPDATE releases SET spent_after_units = NULL").await;
    check().await;
}

async fn concurrent_commits_respect_the_budget(f: Fixture) {
    const N: usize = 32;
    const K: i64 = 10;
    let charge = cost(0.1);
    let new = NewDataset {
        total: Units::from_raw(K * charge.raw()).unwrap(),
        ..new_dataset("contended", 0.0)
    };
    let d = f.store.create_dataset(&new).await.unwrap();

    let tasks: Vec<_> = (0..N)
        .map(|i| {
            let store = Arc::clone(&f.store);
            // Half with keys, half without: both paths must serialise.
            let key = (i % 2 == 0).then(|| format!("key-{i}"));
            let new = new_release(d.id, charge, key.as_deref());
            tokio::spawn(async move { store.commit_release(&new).await })
        })
        .collect();
    let mut seqs = BTreeSet::new();
    let mut committed_ids = BTreeSet::new();
    let mut exhausted = 0;
    for task in tasks {
        match task.await.unwrap().expect("no commit fails") {
            CommitOutcome::Committed { release, budget } => {
                assert!(budget.spent <= budget.total);
                assert!(seqs.insert(release.seq), "seq {} given twice", release.seq);
                committed_ids.insert(release.id);
            }
            CommitOutcome::Exhausted { budget } => {
                assert!(!budget.admits(charge));
                exhausted += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seqs, (1..=K).collect::<BTreeSet<_>>());
    assert_eq!(exhausted, N - K as usize);

    let after = dataset(&*f.store, d.id).await;
    assert_eq!(after.spent.raw(), K * charge.raw());
    assert_eq!(after.spent, after.total);
    assert_eq!(after.releases, K);
    let listed = f.store.list_releases(d.id, None, 100).await.unwrap();
    assert_eq!(
        listed.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (1..=K).rev().collect::<Vec<_>>()
    );
    assert_eq!(
        listed.iter().map(|r| r.id).collect::<BTreeSet<_>>(),
        committed_ids
    );
}

/// Four replicas (stores) on one database, 32 closed-loop clients sending releases of one dataset
/// until its budget is spent: exactly the budget's worth is admitted, with seqs 1..k, `spent` equal to the
/// sum of the stored costs and a release log that verifies. Half the releases carry a key, and
/// each keyed one is sent again at the same moment through another replica (a client retrying
/// elsewhere): one of the two is committed and the other answered with it, or both refused. On
/// PostgreSQL the replicas' releases still share transactions (group commit across replicas;
/// releases written by one transaction share `xmin`): at least two per transaction on average.
async fn replicas_share_a_hot_dataset(f: Fixture) {
    const REPLICAS: usize = 4;
    const WORKERS: usize = 8;
    const K: i64 = 160;
    let charge = cost(0.125);
    let d = f
        .store
        .create_dataset(&NewDataset {
            total: Units::from_raw(K * charge.raw()).unwrap(),
            ..new_dataset("hot across replicas", 0.0)
        })
        .await
        .unwrap();
    let mut stores = Vec::new();
    for _ in 0..REPLICAS {
        let options = StoreOptions {
            commit_slots: 1,
            ..options()
        };
        stores.push(
            connect(&f.url, &options)
                .await
                .expect("a replica opens the store"),
        );
    }
    // Closed-loop clients, as under sustained load: each sends its next release when the last
    // is answered, until the budget is spent.
    let mut workers = Vec::new();
    for w in 0..REPLICAS * WORKERS {
        let stores = stores.clone();
        workers.push(tokio::spawn(async move {
            let mut answered = Vec::new();
            for n in 0.. {
                let i = w * 1000 + n;
                let key = (i % 2 == 0).then(|| format!("key-{i}"));
                let mut sends = Vec::new();
                for send in 0..if key.is_some() { 2 } else { 1 } {
                    let store = Arc::clone(&stores[(w + send) % REPLICAS]);
                    let new = new_release(d.id, charge, key.as_deref());
                    sends.push(tokio::spawn(
                        async move { store.commit_release(&new).await },
                    ));
                }
                let mut outcomes = Vec::new();
                for send in sends {
                    outcomes.push(send.await.unwrap().expect("no commit fails"));
                }
                let spent = outcomes
                    .iter()
                    .all(|o| matches!(o, CommitOutcome::Exhausted { .. }));
                answered.push((i, outcomes));
                if spent {
                    return answered;
                }
            }
            answered
        }));
    }
    let mut by_request = std::collections::BTreeMap::<usize, Vec<CommitOutcome>>::new();
    for worker in workers {
        by_request.extend(worker.await.unwrap());
    }
    let mut committed = BTreeSet::new();
    for (i, outcomes) in &by_request {
        let mut ids = BTreeSet::new();
        let (mut new, mut refused) = (0, 0);
        for outcome in outcomes {
            match outcome {
                CommitOutcome::Committed { release, .. } => {
                    new += 1;
                    ids.insert(release.id);
                }
                CommitOutcome::Existing { release, .. } => {
                    ids.insert(release.id);
                }
                CommitOutcome::Exhausted { budget } => {
                    assert!(!budget.admits(charge));
                    refused += 1;
                }
                other => panic!("request {i}: unexpected {other:?}"),
            }
        }
        assert!(
            (new == 1 && refused == 0 && ids.len() == 1) || refused == outcomes.len(),
            "request {i}: charged once and answered with that release, or refused: {outcomes:?}"
        );
        committed.extend(ids);
    }
    assert_eq!(
        committed.len(),
        K as usize,
        "exactly the budget's worth admitted"
    );
    let after = dataset(&*f.store, d.id).await;
    assert_eq!((after.spent, after.releases), (after.total, K));
    let mut stored = Vec::new();
    let mut before = None;
    loop {
        let page = f.store.list_releases(d.id, before, 40).await.unwrap();
        let Some(last) = page.last() else { break };
        before = Some(last.seq);
        stored.extend(page);
    }
    assert_eq!(
        stored.iter().map(|r| r.id).collect::<BTreeSet<_>>(),
        committed
    );
    assert_eq!(
        stored.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (1..=K).rev().collect::<Vec<_>>()
    );
    let sum: i64 = stored.iter().map(|r| r.cost.raw()).sum();
    assert_eq!(
        sum,
        after.spent.raw(),
        "spent is the sum of the stored costs"
    );
    let verdict = verify_log(&*f.store, d.id, 16).await;
    assert_eq!((verdict.checked, verdict.failure), (K, None));
    if f.store.backend() == "postgres" {
        let transactions = transactions(&f.url, Some(d.id)).await;
        assert!(
            transactions * 2 <= K as usize,
            "{K} releases in {transactions} transactions: the replicas' groups fell apart"
        );
    }
}

async fn concurrent_retries_commit_once(f: Fixture) {
    // With budget to spare, late retries collide with the stored key; with budget for exactly
    // one release, they find the budget spent, and must still be answered with the release.
    for budget in [1.0, 0.25] {
        retry_storm(&f, budget).await;
    }
}

async fn retry_storm(f: &Fixture, budget: f64) {
    const N: usize = 16;
    let d = f
        .store
        .create_dataset(&new_dataset("retried", budget))
        .await
        .unwrap();
    let tasks: Vec<_> = (0..N)
        .map(|_| {
            let store = Arc::clone(&f.store);
            let new = new_release(d.id, cost(0.25), Some("the-only-key"));
            tokio::spawn(async move { store.commit_release(&new).await })
        })
        .collect();
    let mut winners = Vec::new();
    let mut replays = Vec::new();
    for task in tasks {
        match task.await.unwrap().expect("no commit fails") {
            CommitOutcome::Committed { release, .. } => winners.push(release),
            CommitOutcome::Existing {
                release,
                fingerprint: fp,
            } => {
                assert_eq!(fp, fingerprint("the-only-key"));
                replays.push(release);
            }
            other => panic!("budget {budget}: unexpected {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one request commits");
    assert_eq!(replays.len(), N - 1);
    assert!(replays.iter().all(|r| r.id == winners[0].id && r.seq == 1));
    let after = dataset(&*f.store, d.id).await;
    assert_eq!((after.spent, after.releases), (cost(0.25), 1));
}

async fn releases_round_trip(f: Fixture) {
    let store = &*f.store;
    let d = store
        .create_dataset(&new_dataset("bits", 100.0))
        .await
        .unwrap();
    let awkward = vec![
        0.0,
        -0.0,
        1.0 / 3.0,
        f64::MIN_POSITIVE,
        f64::MIN_POSITIVE / 3.0, // subnormal
        1e-300,
        0.1 + 0.2,
        1.0 - f64::EPSILON / 2.0,
        f64::from_bits(0x7ff8_0000_dead_beef), // NaN with a payload
    ];
    let mut releases = Vec::new();
    for i in 0..5 {
        let mut new = new_release(d.id, cost(0.5), Some(&format!("k{i}")));
        new.output = Output::Vector(
            (0..1000)
                .map(|j| awkward[(i + j) % awkward.len()] * (j as f64 + 1.0))
                .collect(),
        );
        let (release, _) = committed(commit(store, &new).await);
        assert_eq!(bits(release.output.values()), bits(new.output.values()));
        assert_eq!(release.mechanism, new.mechanism);
        releases.push(release);
    }

    let fetched = store
        .get_release(d.id, releases[2].id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        bits(fetched.output.values()),
        bits(releases[2].output.values())
    );
    assert_eq!(fetched.mechanism, releases[2].mechanism);
    assert_eq!(fetched.mechanism["alpha"][2].as_f64(), Some(1e-7));
    assert_eq!(
        (
            fetched.id,
            fetched.dataset_id,
            fetched.seq,
            fetched.created_at,
            &fetched.created_by,
            fetched.cost
        ),
        (
            releases[2].id,
            d.id,
            3,
            releases[2].created_at,
            &releases[2].created_by,
            cost(0.5)
        )
    );
    assert_eq!(fetched.idempotency_key.as_deref(), Some("k2"));

    let other = store
        .create_dataset(&new_dataset("other", 1.0))
        .await
        .unwrap();
    assert_eq!(
        store.get_release(other.id, releases[2].id).await.unwrap(),
        None
    );
    assert_eq!(store.get_release(d.id, Uuid::new_v4()).await.unwrap(), None);

    let seqs = |rs: Vec<Release>| rs.iter().map(|r| r.seq).collect::<Vec<_>>();
    let all = store.list_releases(d.id, None, 100).await.unwrap();
    assert_eq!(seqs(all.clone()), vec![5, 4, 3, 2, 1]);
    for (listed, original) in all.iter().zip(releases.iter().rev()) {
        assert_eq!(listed.id, original.id);
        assert_eq!(bits(listed.output.values()), bits(original.output.values()));
    }
    assert_eq!(
        seqs(store.list_releases(d.id, Some(4), 2).await.unwrap()),
        vec![3, 2]
    );
    assert_eq!(
        seqs(store.list_releases(d.id, None, 1).await.unwrap()),
        vec![5]
    );
    assert_eq!(
        seqs(store.list_releases(d.id, Some(1), 10).await.unwrap()),
        Vec::<i64>::new()
    );
    assert_eq!(
        seqs(store.list_releases(d.id, None, 0).await.unwrap()),
        Vec::<i64>::new()
    );

    // An empty vector and a large one survive too.
    let mut big = new_release(d.id, cost(0.5), None);
    big.output = Output::Vector((0..200_000).map(|i| (i as f64).sqrt() / 7.0).collect());
    let (big_release, _) = committed(commit(store, &big).await);
    let big_back = store
        .get_release(d.id, big_release.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(bits(big_back.output.values()), bits(big.output.values()));
    let empty = NewRelease {
        output: Output::Vector(vec![]),
        ..new_release(d.id, cost(0.5), None)
    };
    let (empty_release, _) = committed(commit(store, &empty).await);
    assert_eq!(
        store
            .get_release(d.id, empty_release.id)
            .await
            .unwrap()
            .unwrap()
            .output,
        Output::Vector(vec![])
    );
}

/// A table comes back as the same rows, bit for bit, and a label as the same text, from the
/// commit, by id, by idempotency key and in listings; a vector without a label stays one.
async fn tables_and_labels_round_trip(f: Fixture) {
    let store = &*f.store;
    let d = store
        .create_dataset(&new_dataset("tables", 100.0))
        .await
        .unwrap();
    let rows: Vec<Vec<f64>> = (0..600)
        .map(|i| {
            (0..10)
                .map(|j| ((i * 10 + j) as f64).sqrt() / 97.0)
                .collect()
        })
        .collect();
    let label = Label::new("NB feature 7 | by class — ünïcode".to_owned()).unwrap();
    let new = NewRelease {
        output: Output::Table(Table::from_rows(rows.clone()).unwrap()),
        label: Some(label.clone()),
        ..new_release(d.id, cost(0.5), Some("table-1"))
    };
    let (committed_table, _) = committed(commit(store, &new).await);
    let single = NewRelease {
        output: Output::Table(Table::from_rows(vec![vec![0.25, 0.75]]).unwrap()),
        ..new_release(d.id, cost(0.5), None)
    };
    let (committed_single, _) = committed(commit(store, &single).await);
    let (plain, _) = committed(commit(store, &new_release(d.id, cost(0.5), None)).await);

    let check_table = |r: &Release| {
        let Output::Table(t) = &r.output else {
            panic!("a table came back as {:?}", r.output.rows());
        };
        assert_eq!((t.rows(), t.cells()), (600, 10));
        for (back, original) in t.iter_rows().zip(&rows) {
            assert_eq!(bits(back), bits(original));
        }
        assert_eq!(r.label.as_ref(), Some(&label));
    };
    check_table(&committed_table);
    let by_id = store
        .get_release(d.id, committed_table.id)
        .await
        .unwrap()
        .unwrap();
    check_table(&by_id);
    assert_eq!(by_id, committed_table);
    let (by_key, _) = store
        .find_by_idempotency_key(d.id, "table-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(by_key, committed_table);
    let listed = store.list_releases(d.id, None, 10).await.unwrap();
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[0], plain);
    assert_eq!(listed[0].output, Output::Vector(vec![0.125, 0.375, 0.5]));
    assert_eq!(listed[0].label, None);
    // A one-row table is still a table, not a vector.
    assert_eq!(listed[1], committed_single);
    assert_eq!(listed[1].output.rows(), Some(1));
    check_table(&listed[2]);
}

async fn tokens_round_trip(f: Fixture) {
    let store = &*f.store;
    let a = store.create_dataset(&new_dataset("a", 1.0)).await.unwrap();
    let b = store.create_dataset(&new_dataset("b", 1.0)).await.unwrap();
    let created_at = Utc::now().trunc_subsecs(6);
    let analyst = TokenRecord {
        id: "tok_analyst".into(),
        secret_hash: fingerprint("secret"),
        role: Role::Analyst,
        datasets: vec![b.id, a.id, b.id],
        created_at,
        expires_at: None,
        last_used_at: None,
        revoked_at: None,
    };
    store.create_token(&analyst).await.unwrap();
    let found = store.find_token("tok_analyst").await.unwrap().unwrap();
    let mut scope = vec![a.id, b.id];
    scope.sort();
    assert_eq!(
        found,
        TokenRecord {
            datasets: scope,
            ..analyst.clone()
        }
    );

    let admin = TokenRecord {
        id: "tok_admin".into(),
        role: Role::Admin,
        datasets: vec![],
        ..analyst.clone()
    };
    store.create_token(&admin).await.unwrap();
    assert_eq!(store.find_token("tok_admin").await.unwrap(), Some(admin));
    assert_eq!(store.find_token("tok_nobody").await.unwrap(), None);

    // A token is stored with its whole scope or not at all.
    let broken = TokenRecord {
        id: "tok_broken".into(),
        datasets: vec![a.id, Uuid::new_v4()],
        ..analyst.clone()
    };
    assert!(store.create_token(&broken).await.is_err());
    assert_eq!(store.find_token("tok_broken").await.unwrap(), None);
    assert!(
        store.create_token(&analyst).await.is_err(),
        "token ids are unique"
    );
}

async fn token_lifecycle(f: Fixture) {
    let store = &*f.store;
    let a = store.create_dataset(&new_dataset("a", 1.0)).await.unwrap();
    let created_at = Utc::now().trunc_subsecs(6);
    let first = TokenRecord {
        id: "tok_first".into(),
        secret_hash: fingerprint("first"),
        role: Role::Analyst,
        datasets: vec![a.id],
        created_at,
        expires_at: Some(created_at + chrono::TimeDelta::hours(1)),
        last_used_at: None,
        revoked_at: None,
    };
    let second = TokenRecord {
        id: "tok_second".into(),
        expires_at: None,
        created_at: created_at + chrono::TimeDelta::seconds(1),
        ..first.clone()
    };
    store.create_token(&first).await.unwrap();
    store.create_token(&second).await.unwrap();
    assert_eq!(
        store.find_token("tok_first").await.unwrap(),
        Some(first.clone())
    );
    assert_eq!(
        store.list_tokens().await.unwrap(),
        vec![first.clone(), second.clone()]
    );

    let used = created_at + chrono::TimeDelta::seconds(5);
    store.touch_token("tok_first", used).await.unwrap();
    let touched = store.find_token("tok_first").await.unwrap().unwrap();
    assert_eq!(touched.last_used_at, Some(used));

    let revoked = created_at + chrono::TimeDelta::seconds(10);
    assert!(store.revoke_token("tok_first", revoked).await.unwrap());
    // A second revocation keeps the first time; an unknown id is reported.
    assert!(store
        .revoke_token("tok_first", revoked + chrono::TimeDelta::seconds(1))
        .await
        .unwrap());
    assert!(!store.revoke_token("tok_nobody", revoked).await.unwrap());
    let gone = store.find_token("tok_first").await.unwrap().unwrap();
    assert_eq!(gone.revoked_at, Some(revoked));
    assert!(!gone.usable_at(created_at));
    // A revoked token's last use is not moved by a late write.
    store
        .touch_token("tok_first", revoked + chrono::TimeDelta::seconds(2))
        .await
        .unwrap();
    assert_eq!(
        store
            .find_token("tok_first")
            .await
            .unwrap()
            .unwrap()
            .last_used_at,
        Some(used)
    );
    assert!(store
        .find_token("tok_second")
        .await
        .unwrap()
        .unwrap()
        .usable_at(created_at));
    let listed = store.list_tokens().await.unwrap();
    assert_eq!(listed[0].revoked_at, Some(revoked));
    assert_eq!(listed[1].revoked_at, None);
}

/// Walks the whole log with `page`-sized pages, as the audit route does.
async fn verify_log(store: &dyn LedgerStore, id: Uuid, page: u32) -> audit::Verdict {
    let head = store
        .log_head(id)
        .await
        .unwrap()
        .expect("the dataset exists");
    let upto = head.seq;
    let mut verifier = audit::Verifier::new(head);
    while !verifier.failed() && verifier.after_seq() < upto {
        let entries = store
            .log_entries(id, verifier.after_seq(), upto, page)
            .await
            .unwrap();
        assert!(entries.len() <= page as usize);
        if entries.is_empty() {
            break;
        }
        for entry in &entries {
            verifier.push(entry);
        }
    }
    verifier.finish()
}

async fn release_log_chains(f: Fixture) {
    let store = &*f.store;
    let d = store
        .create_dataset(&new_dataset("log", 8.0))
        .await
        .unwrap();
    let other = store
        .create_dataset(&new_dataset("other", 8.0))
        .await
        .unwrap();
    let empty = store.log_head(d.id).await.unwrap().unwrap();
    assert_eq!(
        empty,
        audit::LogHead {
            seq: 0,
            hash: audit::GENESIS,
            chained_after: 0,
            spent_units: 0
        }
    );
    assert_eq!(store.log_head(Uuid::new_v4()).await.unwrap(), None);

    // The mechanism has 1e-7 and non-ASCII text: PostgreSQL's jsonb rewrites both spellings.
    let mut prev = audit::GENESIS;
    let mut spent = 0;
    for i in 0..5 {
        let mut new = new_release(d.id, cost(0.25), None);
        new.mechanism["r"] = json!(1e17 + f64::from(i) * 1e3);
        let (release, _) = committed(commit(store, &new).await);
        committed(commit(store, &new_release(other.id, cost(0.5), None)).await);
        let fields = audit::LinkFields {
            dataset_id: d.id,
            id: release.id,
            seq: release.seq,
            created_at: release.created_at,
            cost_units: release.cost.raw(),
            created_by: release.created_by.clone(),
            mechanism_digest: audit::json_digest(&new.mechanism),
            output_digest: audit::release_output_digest(&new.output, new.label.as_ref(), None),
        };
        prev = audit::link_hash(&fields, &prev);
        spent += release.cost.raw();
    }
    // A refused release leaves the chain alone.
    assert!(matches!(
        commit(store, &new_release(d.id, cost(100.0), None)).await,
        CommitOutcome::Exhausted { .. }
    ));
    let head = store.log_head(d.id).await.unwrap().unwrap();
    assert_eq!(
        head,
        audit::LogHead {
            seq: 5,
            hash: prev,
            chained_after: 0,
            spent_units: spent
        }
    );
    let entries = store.log_entries(d.id, 1, 4, 100).await.unwrap();
    assert_eq!(
        entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![2, 3, 4]
    );
    assert_eq!(store.log_entries(d.id, 0, 5, 2).await.unwrap().len(), 2);
    for page in [1, 2, 1000] {
        let verdict = verify_log(store, d.id, page).await;
        assert_eq!(verdict.failure, None, "page {page}");
        assert_eq!(verdict.checked, 5);
    }
    assert_eq!(verify_log(store, other.id, 3).await.failure, None);
}

async fn secrets_first_writer_wins(f: Fixture) {
    let store = &*f.store;
    assert_eq!(store.get_secret("fingerprint_key").await.unwrap(), None);
    assert_eq!(
        store
            .secret_or_init("fingerprint_key", b"first")
            .await
            .unwrap(),
        b"first"
    );
    assert_eq!(
        store
            .secret_or_init("fingerprint_key", b"second")
            .await
            .unwrap(),
        b"first"
    );
    assert_eq!(
        store
            .get_secret("fingerprint_key")
            .await
            .unwrap()
            .as_deref(),
        Some(&b"first"[..])
    );

    let tasks: Vec<_> = (0..8u8)
        .map(|i| {
            let store = Arc::clone(&f.store);
            tokio::spawn(async move { store.secret_or_init("admin_token_hash", &[i; 32]).await })
        })
        .collect();
    let mut values = BTreeSet::new();
    for task in tasks {
        values.insert(task.await.unwrap().unwrap());
    }
    assert_eq!(values.len(), 1, "every replica sees the same secret");
    let value = values.into_iter().next().unwrap();
    assert!(value.len() == 32 && value.iter().all(|b| *b == value[0]));
    assert_eq!(
        store.get_secret("admin_token_hash").await.unwrap(),
        Some(value)
    );
}

async fn ledger_summaries(f: Fixture) {
    let store = &*f.store;
    let a = store.create_dataset(&new_dataset("a", 1.0)).await.unwrap();
    let b = store.create_dataset(&new_dataset("b", 3.0)).await.unwrap();
    for _ in 0..3 {
        committed(commit(store, &new_release(b.id, cost(0.5), None)).await);
    }
    committed(commit(store, &new_release(a.id, cost(0.25), None)).await);
    assert_eq!(
        store.ledger_summaries().await.unwrap(),
        vec![
            LedgerSummary {
                dataset_id: a.id,
                total: a.total,
                spent: cost(0.25),
                releases: 1
            },
            LedgerSummary {
                dataset_id: b.id,
                total: b.total,
                spent: cost(1.5),
                releases: 3
            },
        ]
    );
}

async fn errors_never_echo_values(f: Fixture) {
    let store = &*f.store;
    let marker = "name-7f3a9c-private";
    let new = new_dataset(marker, 1.0);
    store.create_dataset(&new).await.unwrap();
    let error = store
        .create_dataset(&new)
        .await
        .expect_err("the id is taken");
    assert!(matches!(error, StoreError::Internal(_)), "{error}");
    let text = error.to_string();
    assert!(
        !text.contains(marker) && !text.contains(&new.id.to_string()),
        "{text}"
    );

    let missing = Uuid::new_v4();
    let token = TokenRecord {
        id: "tok-9d2e61-private".into(),
        secret_hash: [1; 32],
        role: Role::Analyst,
        datasets: vec![missing],
        created_at: Utc::now(),
        expires_at: None,
        last_used_at: None,
        revoked_at: None,
    };
    let text = store
        .create_token(&token)
        .await
        .expect_err("unknown dataset")
        .to_string();
    assert!(
        !text.contains("9d2e61") && !text.contains(&missing.to_string()),
        "{text}"
    );
}

// ----- failures -----

fn assert_unavailable<T: std::fmt::Debug>(result: Result<T, StoreError>) {
    match result {
        Err(StoreError::Unavailable(_)) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn unreachable_database_is_unavailable_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}",
        dir.path().join("missing-dir/ledger.db").display()
    );
    assert_unavailable(connect(&url, &options()).await.map(|_| ()));
}

#[tokio::test]
async fn unreachable_database_is_unavailable_postgres() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let url = format!("postgres://postgres@127.0.0.1:{port}/nothing");
    assert_unavailable(connect(&url, &options()).await.map(|_| ()));
    assert!(started.elapsed() < Duration::from_secs(6), "fails fast");
}

#[tokio::test]
async fn sqlite_url_forms_open_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let d = {
        let store = connect(&format!("sqlite://{}", path.display()), &options())
            .await
            .unwrap();
        store
            .create_dataset(&new_dataset("shared", 1.0))
            .await
            .unwrap()
    };
    let store = connect(&format!("sqlite:{}", path.display()), &options())
        .await
        .unwrap();
    assert_eq!(dataset(&*store, d.id).await, d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_database_is_unavailable_sqlite() {
    let f = sqlite().await;
    let d = f
        .store
        .create_dataset(&new_dataset("frozen", 1.0))
        .await
        .unwrap();
    let read_only = connect(&format!("{}?mode=ro", f.url), &options())
        .await
        .expect("a read-only file still opens");

    assert_eq!(dataset(&*read_only, d.id).await, d, "reads work");
    assert_unavailable(
        read_only
            .commit_release(&new_release(d.id, cost(0.25), Some("k")))
            .await,
    );
    assert_unavailable(read_only.create_dataset(&new_dataset("new", 1.0)).await);
    assert_unavailable(read_only.secret_or_init("key", b"value").await);

    let after = dataset(&*f.store, d.id).await;
    assert_eq!(
        (after.spent, after.releases),
        (Units::ZERO, 0),
        "nothing was written"
    );
    assert_eq!(f.store.list_releases(d.id, None, 10).await.unwrap(), vec![]);
    assert_eq!(f.store.list_datasets(None).await.unwrap().len(), 1);
    assert_eq!(f.store.get_secret("key").await.unwrap(), None);
}

/// Another writer holds the lock past the store's timeout: the commit gives up as unavailable
/// (a 503 the client may retry) instead of hanging, and charges nothing.
async fn assert_lock_wait_is_bounded(store: &dyn LedgerStore, d: &Dataset) {
    let started = Instant::now();
    assert_unavailable(
        store
            .commit_release(&new_release(d.id, cost(0.25), None))
            .await,
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "waited for the lock ({waited:?})"
    );
    assert!(
        waited < Duration::from_secs(5),
        "gave up in time ({waited:?})"
    );
}

fn short_timeout() -> StoreOptions {
    StoreOptions {
        max_connections: 4,
        acquire_timeout: Duration::from_secs(1),
        max_stored_cells: u64::MAX,
        commit_slots: 4,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_lock_held_elsewhere_is_unavailable_sqlite() {
    let f = sqlite().await;
    let d = f
        .store
        .create_dataset(&new_dataset("locked", 1.0))
        .await
        .unwrap();
    let store = connect(&f.url, &short_timeout()).await.unwrap();
    let mut other = sqlx::SqliteConnection::connect(&f.url).await.unwrap();
    other.execute("BEGIN IMMEDIATE").await.unwrap();
    assert_lock_wait_is_bounded(&*store, &d).await;
    other.execute("ROLLBACK").await.unwrap();
    let (release, _) = committed(commit(&*store, &new_release(d.id, cost(0.25), None)).await);
    assert_eq!(release.seq, 1, "the refused attempt left no trace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_lock_held_elsewhere_is_unavailable_postgres() {
    let f = postgres().await;
    let d = f
        .store
        .create_dataset(&new_dataset("locked", 1.0))
        .await
        .unwrap();
    let store = connect(&f.url, &short_timeout()).await.unwrap();
    let mut other = sqlx::PgConnection::connect(&f.url).await.unwrap();
    other.execute("BEGIN").await.unwrap();
    sqlx::query("SELECT 1 FROM datasets WHERE id = $1 FOR UPDATE")
        .bind(d.id)
        .execute(&mut other)
        .await
        .unwrap();
    assert_lock_wait_is_bounded(&*store, &d).await;
    other.execute("ROLLBACK").await.unwrap();
    let (release, budget) = committed(commit(&*store, &new_release(d.id, cost(0.25), None)).await);
    assert_eq!(
        (release.seq, budget.spent),
        (1, cost(0.25)),
        "the refused attempt left no trace"
    );
}

/// A TCP proxy in front of PostgreSQL that, once a client message carries `marker`, still passes
/// the client's bytes on but swallows every answer, and closes both sides when `release` is
/// notified (or, with `cut_after`, that long after the marker): a statement sent and left to run
/// that the database does not answer (frozen or cut off), then a lost connection.
async fn muting_proxy(
    upstream: std::net::SocketAddr,
    marker: Vec<u8>,
    release: Arc<tokio::sync::Notify>,
    cut_after: Option<Duration>,
) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let marker = Arc::new(marker);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (marker, release) = (marker.clone(), release.clone());
            tokio::spawn(async move {
                let server = tokio::net::TcpStream::connect(upstream).await.unwrap();
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_server, mut to_server) = server.into_split();
                let muted = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let answers = {
                    let muted = muted.clone();
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n @ 1..) = from_server.read(&mut buf).await {
                            if muted.load(std::sync::atomic::Ordering::SeqCst) {
                                continue;
                            }
                            if to_client.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    })
                };
                let mut cut_at = None;
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let cut = async {
                        match cut_at {
                            Some(at) => tokio::time::sleep_until(at).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        read = from_client.read(&mut buf) => {
                            let Ok(n @ 1..) = read else { break };
                            if buf[..n].windows(marker.len()).any(|w| w == &marker[..]) {
                                muted.store(true, std::sync::atomic::Ordering::SeqCst);
                                cut_at = cut_after.map(|after| tokio::time::Instant::now() + after);
                            }
                            if to_server.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        () = release.notified(), if muted.load(std::sync::atomic::Ordering::SeqCst) => break,
                        () = cut => break,
                    }
                }
                answers.abort();
                // Dropping every half closes both connections.
            });
        }
    });
    port
}

/// A database URL and the address of its server, to put a proxy between them.
fn upstream_of(url: &str) -> (url::Url, std::net::SocketAddr) {
    let mut url = url::Url::parse(url).unwrap();
    // The proxies read statements in clear text: no TLS through them (a server that offers it
    // would otherwise get it, `sslmode=prefer` being the default).
    url.query_pairs_mut().append_pair("sslmode", "disable");
    let upstream = std::net::SocketAddr::new(
        url.host_str().unwrap().parse().unwrap(),
        url.port().unwrap_or(5432),
    );
    (url, upstream)
}

/// A release queued behind a group statement the database does not answer is refused after its
/// queue wait (half the acquire timeout) as unavailable — never sent, nothing charged — while the
/// statement still hangs: it used to wait for the commit slot as long as the statement did (here
/// for ever; with a frozen server, up to the commit answer bound, and then 504 for a release that
/// was never sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_queued_behind_an_unanswered_group_is_refused_in_time_postgres() {
    let f = postgres().await;
    let d = f
        .store
        .create_dataset(&new_dataset("stalled", 1.0))
        .await
        .unwrap();
    let other = f
        .store
        .create_dataset(&new_dataset("queued", 1.0))
        .await
        .unwrap();
    let (mut url, upstream) = upstream_of(&f.url);
    let stalled = new_release(d.id, cost(0.25), None);
    let release = Arc::new(tokio::sync::Notify::new());
    let marker = stalled.id.as_bytes().to_vec();
    let port = muting_proxy(upstream, marker, release.clone(), None).await;
    url.set_port(Some(port)).unwrap();
    let store = connect(
        url.as_str(),
        &StoreOptions {
            commit_slots: 1,
            acquire_timeout: Duration::from_millis(1000),
            ..options()
        },
    )
    .await
    .unwrap();
    let first = {
        let store = Arc::clone(&store);
        tokio::spawn(async move { store.commit_release(&stalled).await })
    };
    // The stalled statement holds the only slot.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!first.is_finished());
    let queued = new_release(other.id, cost(0.25), None);
    match tokio::time::timeout(Duration::from_secs(10), store.commit_release(&queued)).await {
        Ok(Err(StoreError::Unavailable(message))) => {
            assert!(message.contains("commit slot"), "{message}")
        }
        Ok(other) => panic!("expected Unavailable, got {other:?}"),
        Err(_) => panic!("still queued 10 s behind a statement that is not answered"),
    }
    assert!(
        !first.is_finished(),
        "the stalled statement is still unanswered"
    );
    release.notify_one();
    // The group's transaction lost its connection before its COMMIT was sent: rolled back.
    assert!(matches!(
        first.await.unwrap(),
        Err(StoreError::Unavailable(_))
    ));
    assert_eq!(
        dataset(&*f.store, other.id).await.releases,
        0,
        "nothing charged"
    );
    assert_eq!(
        dataset(&*f.store, d.id).await.releases,
        0,
        "the cut-off group charged nothing"
    );
}

/// A connection lost once the group's COMMIT is sent is `OutcomeUnknown` (504), not
/// `Unavailable` (503, "not charged"): here the transaction committed and charged the release.
/// (Lost before the COMMIT, during the group's statement, it is `Unavailable` and charges
/// nothing: `a_release_queued_behind_an_unanswered_group_is_refused_in_time_postgres`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_connection_during_a_commit_is_outcome_unknown_postgres() {
    let f = postgres().await;
    let d = f
        .store
        .create_dataset(&new_dataset("cut", 1.0))
        .await
        .unwrap();
    let (mut url, upstream) = upstream_of(&f.url);
    let new = new_release(d.id, cost(0.25), None);
    // The group's COMMIT, a simple query; no other message the store sends carries it.
    let marker = b"COMMIT\0".to_vec();
    let never = Arc::new(tokio::sync::Notify::new());
    let port = muting_proxy(upstream, marker, never, Some(Duration::from_millis(800))).await;
    url.set_port(Some(port)).unwrap();
    let through_proxy = connect(url.as_str(), &options()).await.unwrap();
    match through_proxy.commit_release(&new).await {
        Err(StoreError::OutcomeUnknown(message)) => {
            assert!(message.starts_with("commit_release"), "{message}")
        }
        other => panic!("expected OutcomeUnknown, got {other:?}"),
    }
    // What a 503 would have denied: the statement committed.
    let after = dataset(&*f.store, d.id).await;
    assert_eq!(
        (after.releases, after.spent),
        (1, cost(0.25)),
        "the lost commit was charged"
    );
}

/// How [`restarting_proxy`] treats a new connection: what a PostgreSQL server going down or
/// coming up does to a client that connects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Restart {
    /// Pass it on to the server.
    Up,
    /// Accept, then close at once (the client reads end-of-file).
    Closed,
    /// Accept, then reset (the client reads ECONNRESET).
    Reset,
    /// Answer the SSL request and the start-up message with FATAL 57P01 (a backend terminated
    /// as it started), then close.
    Terminated,
}

/// A TCP proxy in front of PostgreSQL whose new connections meet `mode`.
async fn restarting_proxy(
    upstream: std::net::SocketAddr,
    mode: Arc<std::sync::Mutex<Restart>>,
) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let mode = *mode.lock().unwrap();
            tokio::spawn(async move {
                match mode {
                    Restart::Up => {
                        let mut server = tokio::net::TcpStream::connect(upstream).await.unwrap();
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                    Restart::Closed => drop(client),
                    Restart::Reset => {
                        client.set_zero_linger().unwrap();
                        drop(client);
                    }
                    Restart::Terminated => {
                        // The start-up message (its length, then the rest), after an SSL
                        // request (answered "no") if the client sends one first.
                        let mut head = [0u8; 8];
                        if client.read_exact(&mut head).await.is_err() {
                            return;
                        }
                        if head[4..] == 80_877_103u32.to_be_bytes() {
                            let _ = client.write_all(b"N").await;
                            if client.read_exact(&mut head).await.is_err() {
                                return;
                            }
                        }
                        let length = u32::from_be_bytes(head[..4].try_into().unwrap()) as usize;
                        let mut rest = vec![0u8; length.saturating_sub(8)];
                        let _ = client.read_exact(&mut rest).await;
                        let mut fields = Vec::new();
                        for (tag, value) in [
                            (b'S', "FATAL"),
                            (b'V', "FATAL"),
                            (b'C', "57P01"),
                            (b'M', "terminating connection due to administrator command"),
                        ] {
                            fields.push(tag);
                            fields.extend_from_slice(value.as_bytes());
                            fields.push(0);
                        }
                        fields.push(0);
                        let mut message = vec![b'E'];
                        message.extend_from_slice(&(fields.len() as u32 + 4).to_be_bytes());
                        message.extend_from_slice(&fields);
                        let _ = client.write_all(&message).await;
                    }
                }
            });
        }
    });
    port
}

/// What a client meets while PostgreSQL restarts — a connection closed or reset as soon as it is
/// made, a backend terminated as it starts — is 503 (`Unavailable`: nothing was sent, nothing
/// charged), with group commit on and off alike; and the same store commits once the server
/// takes connections again. (Group commit used to turn these into 500s: the group's connection
/// error was copied for its members as an unclassified driver error.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_refused_during_a_restart_are_unavailable_postgres() {
    let f = postgres().await;
    let d = f
        .store
        .create_dataset(&new_dataset("restart", 4.0))
        .await
        .unwrap();
    let (mut url, upstream) = upstream_of(&f.url);
    let mode = Arc::new(std::sync::Mutex::new(Restart::Up));
    url.set_port(Some(restarting_proxy(upstream, mode.clone()).await))
        .unwrap();
    for (charged, slots) in [(0, 4), (1, 0)] {
        // Connected while the server is up (the migrations check runs); the pool opens its
        // connections on demand, so every commit below needs a new one.
        *mode.lock().unwrap() = Restart::Up;
        let store = connect(
            url.as_str(),
            &StoreOptions {
                commit_slots: slots,
                ..options()
            },
        )
        .await
        .unwrap();
        for restart in [Restart::Closed, Restart::Reset, Restart::Terminated] {
            *mode.lock().unwrap() = restart;
            for key in [None, Some("k")] {
                let new = new_release(d.id, cost(0.25), key);
                match store.commit_release(&new).await {
                    Err(StoreError::Unavailable(message)) => {
                        assert!(message.starts_with("commit_release"), "{message}")
                    }
                    other => panic!(
                        "{slots} slots, {restart:?}, key {key:?}: expected Unavailable, got {other:?}"
                    ),
                }
            }
        }
        assert_eq!(
            dataset(&*f.store, d.id).await.releases,
            charged,
            "nothing charged"
        );
        *mode.lock().unwrap() = Restart::Up;
        committed(commit(&*store, &new_release(d.id, cost(0.25), None)).await);
    }
    assert_eq!(dataset(&*f.store, d.id).await.releases, 2);
}

#[tokio::test]
async fn postgres_sessions_carry_server_timeouts() {
    let url = pg::fresh_database().await;
    let store = dirichlet_release::store::postgres::PgStore::connect(
        &url,
        &StoreOptions {
            max_connections: 2,
            acquire_timeout: Duration::from_millis(2500),
            max_stored_cells: u64::MAX,
            commit_slots: 4,
        },
    )
    .await
    .unwrap();
    let show = |name: &'static str| {
        let pool = store.pool().clone();
        async move {
            sqlx::query_scalar::<_, String>(&format!("SHOW {name}"))
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(show("lock_timeout").await, "2500ms");
    assert_eq!(show("statement_timeout").await, "5s");
    assert_eq!(show("idle_in_transaction_session_timeout").await, "5s");
}

// ----- corruption -----

fn assert_corrupt<T: std::fmt::Debug>(result: Result<T, StoreError>) {
    match result {
        Err(StoreError::Corrupt(_)) => {}
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

async fn two_releases(f: &Fixture) -> (Dataset, Release, Dataset) {
    let d = f
        .store
        .create_dataset(&new_dataset("victim", 1.0))
        .await
        .unwrap();
    let (release, _) =
        committed(commit(&*f.store, &new_release(d.id, cost(0.25), Some("k"))).await);
    let bystander = f
        .store
        .create_dataset(&new_dataset("bystander", 1.0))
        .await
        .unwrap();
    (d, release, bystander)
}

async fn assert_damage_is_reported(
    f: &Fixture,
    d: &Dataset,
    release: &Release,
    bystander: &Dataset,
) {
    let store = &*f.store;
    assert_corrupt(store.get_release(d.id, release.id).await);
    assert_corrupt(store.list_releases(d.id, None, 10).await);
    assert_corrupt(store.find_by_idempotency_key(d.id, "k").await);
    assert_corrupt(
        store
            .commit_release(&new_release(d.id, cost(0.25), Some("k")))
            .await,
    );
    assert_corrupt(store.get_dataset(bystander.id).await);
    assert_corrupt(store.list_datasets(None).await);
    assert_corrupt(store.ledger_summaries().await);
    assert_eq!(dataset(store, d.id).await.releases, 1);
}

#[tokio::test]
async fn damaged_rows_are_corrupt_sqlite() {
    let f = sqlite().await;
    let (d, release, bystander) = two_releases(&f).await;
    let mut raw = sqlx::SqliteConnection::connect(&f.url).await.unwrap();
    raw.execute("PRAGMA ignore_check_constraints = ON")
        .await
        .unwrap();
    sqlx::query(
        "UPDATE releases SET distribution = x'00010203040506', mechanism = '{' WHERE id = $1",
    )
    .bind(release.id.hyphenated())
    .execute(&mut raw)
    .await
    .unwrap();
    sqlx::query("UPDATE datasets SET budget_order = 0.5, spent_units = -1 WHERE id = $1")
        .bind(bystander.id.hyphenated())
        .execute(&mut raw)
        .await
        .unwrap();
    raw.close().await.unwrap();
    assert_damage_is_reported(&f, &d, &release, &bystander).await;
}

#[tokio::test]
async fn damaged_rows_are_corrupt_postgres() {
    let f = postgres().await;
    let (d, release, bystander) = two_releases(&f).await;
    let mut raw = sqlx::PgConnection::connect(&f.url).await.unwrap();
    raw.execute(
        "ALTER TABLE releases DROP CONSTRAINT releases_distribution_length; \
         ALTER TABLE datasets DROP CONSTRAINT datasets_order_valid; \
         ALTER TABLE datasets DROP CONSTRAINT datasets_spent_nonnegative",
    )
    .await
    .unwrap();
    sqlx::query("UPDATE releases SET distribution = '\\x00010203040506' WHERE id = $1")
        .bind(release.id)
        .execute(&mut raw)
        .await
        .unwrap();
    sqlx::query("UPDATE datasets SET budget_order = 0.5, spent_units = -1 WHERE id = $1")
        .bind(bystander.id)
        .execute(&mut raw)
        .await
        .unwrap();
    raw.close().await.unwrap();
    assert_damage_is_reported(&f, &d, &release, &bystander).await;
}

/// Migration 0002's CHECKs: a row count that does not divide the stored cells, or a label that
/// is empty or too long, never reaches the table, whatever the service does.
#[tokio::test]
async fn schema_refuses_bad_tables_and_labels_sqlite() {
    let f = sqlite().await;
    let (_, release, _) = two_releases(&f).await;
    let mut raw = sqlx::SqliteConnection::connect(&f.url).await.unwrap();
    let id = release.id.hyphenated().to_string();
    for (sql, allowed) in schema_cases() {
        let result = sqlx::query(&sql).bind(&id).execute(&mut raw).await;
        assert_eq!(result.is_ok(), allowed, "{sql}: {result:?}");
    }
}

#[tokio::test]
async fn schema_refuses_bad_tables_and_labels_postgres() {
    let f = postgres().await;
    let (_, release, _) = two_releases(&f).await;
    let mut raw = sqlx::PgConnection::connect(&f.url).await.unwrap();
    for (sql, allowed) in schema_cases() {
        let result = sqlx::query(&sql).bind(release.id).execute(&mut raw).await;
        assert_eq!(result.is_ok(), allowed, "{sql}: {result:?}");
    }
}

/// Updates of a stored 3-cell release, and whether the schema allows each.
fn schema_cases() -> Vec<(String, bool)> {
    let label = |text: &str| format!("UPDATE releases SET label = '{text}' WHERE id = $1");
    let rows = |n: i64| format!("UPDATE releases SET table_rows = {n} WHERE id = $1");
    vec![
        (rows(3), true),
        (rows(1), true),
        (rows(2), false),
        (rows(0), false),
        (rows(6), false),
        (label("NB | class"), true),
        (label(""), false),
        (label(&"é".repeat(200)), true),
        (label(&"é".repeat(201)), false),
    ]
}

/// Migration 0005 fills `spent_after_units` of the releases stored before it with the running sum
/// of their dataset's costs in seq order — what `spent` was right after each of them.
async fn migration_0005_fills_the_ledger_after_each_release(backend: &str) {
    use sqlx::migrate::Migrator;
    let dir = tempfile::tempdir().unwrap();
    let url = match backend {
        "sqlite" => format!("sqlite://{}", dir.path().join("ledger.db").display()),
        _ => pg::fresh_database().await,
    };
    let mut migrator = Migrator::new(std::path::Path::new(&format!(
        "{}/migrations/{backend}",
        env!("CARGO_MANIFEST_DIR")
    )))
    .await
    .unwrap();
    migrator.migrations = migrator
        .migrations
        .iter()
        .filter(|m| m.version < 5)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    let blob = |hex: &str| match backend {
        "sqlite" => format!("x'{hex}'"),
        _ => format!("'\\x{hex}'"),
    };
    let half = "000000000000e03f";
    let (d1, d2) = (Uuid::new_v4(), Uuid::new_v4());
    let mut sql = String::new();
    for d in [d1, d2] {
        sql.push_str(&format!(
            "INSERT INTO datasets (id, name, budget_order, total_units, l2_squared, linf, \
                                   neighbouring, created_at, created_by) \
             VALUES ('{d}', 'old', 8, {}, 2, 1, 'replace_one', '2026-01-01T00:00:00Z', 'admin');",
            1u64 << 42
        ));
    }
    // Interleaved, and out of seq order, so that the sum must follow dataset and seq.
    let releases = [
        (d1, 2, 3u64 << 38),
        (d2, 1, 5 << 38),
        (d1, 1, 1 << 38),
        (d1, 3, 0),
        (d2, 2, 7 << 38),
    ];
    for (i, (d, seq, cost)) in releases.iter().enumerate() {
        let (key, fingerprint) = if i == 0 {
            ("'k'".to_string(), blob(&"07".repeat(32)))
        } else {
            ("NULL".to_string(), "NULL".to_string())
        };
        sql.push_str(&format!(
            "INSERT INTO releases (id, dataset_id, seq, created_at, created_by, mechanism, \
                                   cost_units, distribution, dimension, idempotency_key, \
                                   fingerprint) \
             VALUES ('{}', '{d}', {seq}, '2026-01-01T00:00:00Z', 'analyst', \
                     '{{\"kind\":\"dirichlet\"}}', {cost}, {}, 2, {key}, {fingerprint});",
            Uuid::new_v4(),
            blob(&half.repeat(2)),
        ));
    }
    let read = "SELECT seq, spent_after_units FROM releases ORDER BY dataset_id = '{d2}', seq";
    let read = read.replace("{d2}", &d2.to_string());
    let rows: Vec<(i64, Option<i64>)> = match backend {
        "sqlite" => {
            use std::str::FromStr;
            let create = sqlx::sqlite::SqliteConnectOptions::from_str(&url)
                .unwrap()
                .create_if_missing(true);
            let mut raw = sqlx::SqliteConnection::connect_with(&create).await.unwrap();
            migrator.run(&mut raw).await.unwrap();
            raw.execute(sql.as_str()).await.unwrap();
            raw.close().await.unwrap();
            let store = connect(&url, &options()).await.unwrap();
            let (release, _) = store
                .find_by_idempotency_key(d1, "k")
                .await
                .unwrap()
                .unwrap();
            assert_eq!(release.spent_after.raw(), 4 << 38);
            let mut raw = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::query_as(&read).fetch_all(&mut raw).await.unwrap()
        }
        _ => {
            let mut raw = sqlx::PgConnection::connect(&url).await.unwrap();
            migrator.run(&mut raw).await.unwrap();
            raw.execute(sql.as_str()).await.unwrap();
            raw.close().await.unwrap();
            let store = connect(&url, &options()).await.unwrap();
            let (release, _) = store
                .find_by_idempotency_key(d1, "k")
                .await
                .unwrap()
                .unwrap();
            assert_eq!(release.spent_after.raw(), 4 << 38);
            let mut raw = sqlx::PgConnection::connect(&url).await.unwrap();
            sqlx::query_as(&read).fetch_all(&mut raw).await.unwrap()
        }
    };
    assert_eq!(
        rows,
        vec![
            (1, Some(1 << 38)),
            (2, Some(4 << 38)),
            (3, Some(4 << 38)),
            (1, Some(5 << 38)),
            (2, Some(12 << 38)),
        ]
    );
}

#[tokio::test]
async fn migration_0005_fills_the_ledger_after_each_release_sqlite() {
    migration_0005_fills_the_ledger_after_each_release("sqlite").await;
}

#[tokio::test]
async fn migration_0005_fills_the_ledger_after_each_release_postgres() {
    migration_0005_fills_the_ledger_after_each_release("postgres").await;
}

// ----- PostgreSQL deployment -----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_together_migrate_once_postgres() {
    let url = pg::fresh_database().await;
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { connect(&url, &options()).await })
        })
        .collect();
    let mut stores = Vec::new();
    for start in starts {
        stores.push(start.await.unwrap().expect("every replica starts"));
    }
    let d = stores[0]
        .create_dataset(&new_dataset("shared", 1.0))
        .await
        .unwrap();
    committed(commit(&*stores[1], &new_release(d.id, cost(0.25), None)).await);
    assert_eq!(dataset(&*stores[3], d.id).await.releases, 1);

    let mut raw = sqlx::PgConnection::connect(&url).await.unwrap();
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(&mut raw)
        .await
        .unwrap();
    let expected = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/postgres"))
        .unwrap()
        .count();
    assert_eq!(applied as usize, expected);
}

/// Stands in for the test process a throwaway server belongs to; it exits when the test ends,
/// pass or fail, and holds none of the test's output pipes.
struct Owner(std::process::Child);

impl Owner {
    fn spawn() -> Owner {
        let child = std::process::Command::new("sleep")
            .arg("300")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn sleep");
        Owner(child)
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The throwaway-server path of the test harness, for real: it answers, the store rides out a
/// restart without being rebuilt, and the watchdog removes everything once the owner is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throwaway_postgres_serves_survives_a_restart_and_is_removed() {
    let owner = Owner::spawn();
    let server = pg::Throwaway::start(owner.0.id())
        .await
        .expect("a throwaway server starts");
    assert!(server.root.join("data/PG_VERSION").is_file());

    let url = pg::create_database(&server.admin_url).await.unwrap();
    let store = connect(&url, &short_timeout()).await.unwrap();
    let d = store
        .create_dataset(&new_dataset("durable", 1.0))
        .await
        .unwrap();
    committed(commit(&*store, &new_release(d.id, cost(0.25), None)).await);

    // A restart while the service is idle: every pooled connection is dead, and the first
    // request afterwards must not be the one to find out (idle connections are pinged after 1 s).
    server.stop().await.unwrap();
    server.restart().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(dataset(&*store, d.id).await.releases, 1);

    // An outage under traffic: requests fail fast, then the same store recovers.
    server.stop().await.unwrap();
    let started = Instant::now();
    assert_unavailable(store.ping().await);
    assert_unavailable(
        store
            .commit_release(&new_release(d.id, cost(0.25), None))
            .await,
    );
    assert_unavailable(store.get_dataset(d.id).await);
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "fails fast: {:?}",
        started.elapsed()
    );

    server.restart().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while store.ping().await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the store reconnects after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (release, budget) = committed(commit(&*store, &new_release(d.id, cost(0.25), None)).await);
    assert_eq!(
        (release.seq, budget.spent),
        (2, cost(0.5)),
        "the outage wrote nothing"
    );
    drop(store);

    drop(owner);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let gone = !server.root.exists()
            && std::net::TcpStream::connect(("127.0.0.1", server.port)).is_err();
        if gone {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the watchdog stops the server and removes {}",
            server.root.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ----- allocations and names -----

async fn analyst_token(store: &dyn LedgerStore, id: &str, datasets: &[Uuid]) {
    store
        .create_token(&TokenRecord {
            id: id.to_owned(),
            secret_hash: fingerprint(id),
            role: Role::Analyst,
            datasets: datasets.to_vec(),
            created_at: Utc::now().trunc_subsecs(6),
            expires_at: None,
            last_used_at: None,
            revoked_at: None,
        })
        .await
        .expect("create_token");
}

fn by(token: &str, dataset_id: Uuid, charge: Units) -> NewRelease {
    NewRelease {
        created_by: token.to_owned(),
        ..new_release(dataset_id, charge, None)
    }
}

async fn allocations_bound_their_token_under_the_dataset_cap(f: Fixture) {
    let store = &*f.store;
    let d = store
        .create_dataset(&new_dataset("team", 1.0))
        .await
        .unwrap();
    let other = store
        .create_dataset(&new_dataset("elsewhere", 1.0))
        .await
        .unwrap();
    analyst_token(store, "tok_a", &[d.id]).await;
    analyst_token(store, "tok_b", &[d.id, other.id]).await;

    // Spent before any allocation counts against the allocation set later.
    committed(commit(store, &by("tok_a", d.id, cost(0.25))).await);
    let at = Utc::now().trunc_subsecs(6);
    let set = store
        .set_allocation(d.id, "tok_a", Some(cost(0.375)), "admin", at)
        .await
        .unwrap();
    assert_eq!(
        set,
        AllocationOutcome::Changed {
            old: None,
            new: Some(cost(0.375)),
            spent: cost(0.25)
        }
    );
    // 0.25 + 0.25 > 0.375: refused by the allocation although the dataset has 0.75 left.
    let refused = commit(store, &by("tok_a", d.id, cost(0.25))).await;
    match refused {
        CommitOutcome::AllocationExhausted { allocation, budget } => {
            assert_eq!(allocation.token_id, "tok_a");
            assert_eq!(
                (allocation.total, allocation.spent),
                (cost(0.375), cost(0.25))
            );
            assert_eq!(allocation.remaining(), cost(0.125));
            assert_eq!(budget.spent, cost(0.25));
        }
        other => panic!("expected AllocationExhausted, got {other:?}"),
    }
    assert_eq!(
        dataset(store, d.id).await.spent,
        cost(0.25),
        "a refusal charges nothing"
    );
    // Exactly the rest fits.
    committed(commit(store, &by("tok_a", d.id, cost(0.125))).await);
    assert_eq!(
        store.list_allocations(d.id, None).await.unwrap(),
        vec![Allocation {
            token_id: "tok_a".into(),
            total: cost(0.375),
            spent: cost(0.375)
        }]
    );
    // Tokens without an allocation, and the admin, draw on the dataset as before; their spend
    // is kept too, so an allocation set later starts from it.
    committed(commit(store, &by("tok_b", d.id, cost(0.25))).await);
    committed(commit(store, &by("admin", d.id, cost(0.125))).await);
    assert_eq!(
        store
            .set_allocation(d.id, "tok_b", Some(cost(2.0)), "admin", at)
            .await
            .unwrap(),
        AllocationOutcome::Changed {
            old: None,
            new: Some(cost(2.0)),
            spent: cost(0.25)
        }
    );
    // Allocations may add up to more than the dataset (0.375 + 2 > 1): the dataset cap binds,
    // and is named first when both refuse.
    match commit(store, &by("tok_b", d.id, cost(0.5))).await {
        CommitOutcome::Exhausted { budget } => assert_eq!(budget.spent, cost(0.75)),
        other => panic!("expected Exhausted, got {other:?}"),
    }
    match commit(store, &by("tok_a", d.id, cost(0.5))).await {
        CommitOutcome::Exhausted { .. } => {}
        other => panic!("both refuse: expected the dataset's Exhausted, got {other:?}"),
    }
    // Lowering below what was spent blocks further releases and loses nothing.
    store
        .set_allocation(d.id, "tok_b", Some(cost(0.125)), "admin", at)
        .await
        .unwrap();
    match commit(store, &by("tok_b", d.id, cost(0.0625))).await {
        CommitOutcome::AllocationExhausted { allocation, .. } => {
            assert_eq!(allocation.spent, cost(0.25));
            assert_eq!(allocation.remaining(), Units::ZERO);
        }
        other => panic!("expected AllocationExhausted, got {other:?}"),
    }
    // Another dataset of the same token is not bound by this allocation.
    committed(commit(store, &by("tok_b", other.id, cost(0.5))).await);
    // Removing it: the token behaves as without one, and its spend is kept.
    assert_eq!(
        store
            .set_allocation(d.id, "tok_b", None, "admin", at)
            .await
            .unwrap(),
        AllocationOutcome::Changed {
            old: Some(cost(0.125)),
            new: None,
            spent: cost(0.25)
        }
    );
    committed(commit(store, &by("tok_b", d.id, cost(0.0625))).await);
    // Removing what is not there, or setting what is set, records nothing; a token outside
    // the scope is refused.
    store
        .set_allocation(d.id, "tok_b", None, "admin", at)
        .await
        .unwrap();
    assert_eq!(
        store
            .set_allocation(d.id, "tok_a", Some(cost(0.375)), "admin", at)
            .await
            .unwrap(),
        AllocationOutcome::Changed {
            old: Some(cost(0.375)),
            new: Some(cost(0.375)),
            spent: cost(0.375)
        }
    );
    assert_eq!(
        store
            .set_allocation(other.id, "tok_a", Some(cost(0.1)), "admin", at)
            .await
            .unwrap(),
        AllocationOutcome::NotInScope
    );
    assert_eq!(
        store
            .set_allocation(d.id, "tok_nobody", Some(cost(0.1)), "admin", at)
            .await
            .unwrap(),
        AllocationOutcome::NotInScope
    );
    assert_eq!(
        store.list_allocations(d.id, Some("tok_b")).await.unwrap(),
        vec![]
    );
    assert_eq!(
        store
            .list_allocations(d.id, Some("tok_a"))
            .await
            .unwrap()
            .len(),
        1
    );

    // The audit trail: who, when, old, new, in order; only real changes.
    let changes = store.allocation_changes(d.id, None).await.unwrap();
    let summary: Vec<_> = changes
        .iter()
        .map(|c| (c.token_id.as_str(), c.old, c.new))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("tok_a", None, Some(cost(0.375))),
            ("tok_b", None, Some(cost(2.0))),
            ("tok_b", Some(cost(2.0)), Some(cost(0.125))),
            ("tok_b", Some(cost(0.125)), None),
        ]
    );
    assert!(changes
        .iter()
        .all(|c| c.changed_by == "admin" && c.changed_at == at));
    assert_eq!(
        store
            .allocation_changes(d.id, Some("tok_a"))
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        store.allocation_changes(other.id, None).await.unwrap(),
        vec![]
    );
    let after = dataset(store, d.id).await;
    assert_eq!(after.spent, cost(0.25 + 0.125 + 0.25 + 0.125 + 0.0625));
}

/// Many releases of one token race, on a dataset whose budget is larger than the allocation,
/// while the allocation is lowered and raised: the token's spend never passes the allocation in
/// force when each release committed, and the dataset is charged exactly what was admitted.
async fn concurrent_releases_never_overrun_an_allocation(f: Fixture) {
    const N: usize = 40;
    let charge = cost(0.0625);
    let d = f
        .store
        .create_dataset(&new_dataset("raced", 4.0))
        .await
        .unwrap();
    analyst_token(&*f.store, "tok_race", &[d.id]).await;
    analyst_token(&*f.store, "tok_free", &[d.id]).await;
    let at = Utc::now().trunc_subsecs(6);
    f.store
        .set_allocation(d.id, "tok_race", Some(cost(0.5)), "admin", at)
        .await
        .unwrap();

    let tasks: Vec<_> = (0..N)
        .map(|i| {
            let store = Arc::clone(&f.store);
            let token = if i % 4 == 3 { "tok_free" } else { "tok_race" };
            let new = by(token, d.id, charge);
            tokio::spawn(async move { (token, store.commit_release(&new).await) })
        })
        .collect();
    // The admin changes the allocation while they run: down to 0.25, then back to 0.5.
    let setter = {
        let store = Arc::clone(&f.store);
        tokio::spawn(async move {
            for total in [0.25, 0.5] {
                store
                    .set_allocation(d.id, "tok_race", Some(cost(total)), "admin", at)
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    let (mut race_committed, mut free_committed, mut allocation_refusals) = (0i64, 0i64, 0);
    for task in tasks {
        match task.await.unwrap() {
            (token, Ok(CommitOutcome::Committed { .. })) => {
                if token == "tok_race" {
                    race_committed += 1;
                } else {
                    free_committed += 1;
                }
            }
            ("tok_race", Ok(CommitOutcome::AllocationExhausted { allocation, .. })) => {
                assert!(!allocation.admits(charge), "{allocation:?}");
                allocation_refusals += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    setter.await.unwrap();
    // 30 releases asked for 0.0625 each (1.875) against an allocation of at most 0.5.
    assert!(
        race_committed * charge.raw() <= cost(0.5).raw(),
        "{race_committed} releases of the allocated token committed"
    );
    assert_eq!(race_committed + allocation_refusals, 30);
    assert_eq!(
        free_committed, 10,
        "the token without an allocation is not held back"
    );
    let allocation = f
        .store
        .list_allocations(d.id, Some("tok_race"))
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(allocation.spent.raw(), race_committed * charge.raw());
    let after = dataset(&*f.store, d.id).await;
    assert_eq!(
        after.spent.raw(),
        (race_committed + free_committed) * charge.raw(),
        "the dataset is charged exactly what was admitted"
    );
    // Once the setter is done the allocation is 0.5: releases one at a time fill exactly what
    // is left of it, and the next is refused.
    assert_eq!(allocation.total, cost(0.5));
    let mut more = 0;
    while let CommitOutcome::Committed { .. } =
        commit(&*f.store, &by("tok_race", d.id, charge)).await
    {
        more += 1;
        assert!(more <= 8, "the allocation admitted more than it holds");
    }
    assert_eq!(race_committed + more, 8);
}

async fn names_round_trip(f: Fixture) {
    let store = &*f.store;
    let names =
        |list: &[&str]| Names::new(list.iter().map(|s| s.to_string()).collect(), 100).unwrap();
    let d = store
        .create_dataset(&NewDataset {
            cells: Some(names(&["flu", "asthma", "ünïcode | ☃"])),
            ..new_dataset("named", 1.0)
        })
        .await
        .unwrap();
    assert_eq!(d.cells, Some(names(&["flu", "asthma", "ünïcode | ☃"])));
    assert_eq!(dataset(store, d.id).await.cells, d.cells);
    let plain = store
        .create_dataset(&new_dataset("plain", 1.0))
        .await
        .unwrap();
    assert_eq!(dataset(store, plain.id).await.cells, None);

    let table = NewRelease {
        output: Output::Table(
            Table::from_rows(vec![vec![0.5, 0.25, 0.25], vec![0.0, 0.5, 0.5]]).unwrap(),
        ),
        row_names: Some(names(&["0-17", "18+"])),
        ..new_release(d.id, cost(0.125), Some("named-table"))
    };
    let (release, _) = committed(commit(store, &table).await);
    assert_eq!(release.row_names, table.row_names);
    let stored = store.get_release(d.id, release.id).await.unwrap().unwrap();
    assert_eq!(stored, release);
    let (keyed, _) = store
        .find_by_idempotency_key(d.id, "named-table")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(keyed.row_names, table.row_names);
    assert_eq!(
        store.list_releases(d.id, None, 10).await.unwrap()[0].row_names,
        table.row_names
    );
    // A listing's page bound counts the bytes of the names as stored (JSON text).
    let stored_json = r#"["0-17","18+"]"#;
    assert_eq!(
        store.release_sizes(d.id, None, 10).await.unwrap(),
        vec![(1, 6, stored_json.len() as i64)]
    );
    // Row names are covered by the release log: the chain verifies.
    let verdict = verify_log(store, d.id, 10).await;
    assert_eq!((verdict.checked, verdict.failure), (1, None));

    // Names stored under the earlier rule (only controls refused, nothing trimmed or normalised)
    // are read back as stored, not refused as damage nor rewritten (the log digests them so).
    let (nfc, nfd) = ("caf\u{e9}", "cafe\u{301}");
    let legacy_label = " flu\u{200b}";
    execute_raw(
        &f,
        &format!(
            "UPDATE releases SET label = '{legacy_label}', row_names = '[\"{nfc}\",\"{nfd}\"]' \
             WHERE id = '{}'; UPDATE datasets SET cells = '[\"{nfd}\",\"\u{202e}x\",\"{nfc}\"]' \
             WHERE id = '{}'",
            release.id, d.id
        ),
    )
    .await;
    let read = store.get_release(d.id, release.id).await.unwrap().unwrap();
    assert_eq!(read.label.unwrap().as_str(), legacy_label);
    assert_eq!(read.row_names.unwrap().as_slice(), [nfc, nfd]);
    let summaries = store.list_release_summaries(d.id, None, 10).await.unwrap();
    assert_eq!(summaries[0].label.as_ref().unwrap().as_str(), legacy_label);
    assert_eq!(
        dataset(store, d.id).await.cells.unwrap().as_slice(),
        [nfd, "\u{202e}x", nfc]
    );
}

// ----- group commit (PostgreSQL) -----

/// How many transactions wrote the releases (of one dataset, or all): rows inserted by one
/// transaction share `xmin`, its id.
async fn transactions(url: &str, dataset: Option<Uuid>) -> usize {
    let mut raw = sqlx::PgConnection::connect(url).await.unwrap();
    let n: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT xmin::text) FROM releases WHERE $1::uuid IS NULL OR dataset_id = $1",
    )
    .bind(dataset)
    .fetch_one(&mut raw)
    .await
    .unwrap();
    usize::try_from(n).unwrap()
}

/// A store whose commits all go through one slot, so that releases arriving together wait and
/// commit as groups.
async fn one_slot(url: &str) -> Arc<dyn LedgerStore> {
    connect(
        url,
        &StoreOptions {
            commit_slots: 1,
            ..options()
        },
    )
    .await
    .expect("open the PostgreSQL store")
}

/// Datasets holding `budgets` (in ε at order 8), an analyst token "tok_free" and one "tok_alloc"
/// with an allocation of 0.375 on each.
async fn datasets_for_two_analysts(
    store: &dyn LedgerStore,
    name: &str,
    budgets: impl Iterator<Item = f64>,
) -> Vec<Uuid> {
    let mut ids = Vec::new();
    for (i, budget) in budgets.enumerate() {
        let d = new_dataset(&format!("{name} {i}"), budget);
        ids.push(store.create_dataset(&d).await.unwrap().id);
    }
    analyst_token(store, "tok_alloc", &ids).await;
    analyst_token(store, "tok_free", &ids).await;
    let at = Utc::now().trunc_subsecs(6);
    for id in &ids {
        store
            .set_allocation(*id, "tok_alloc", Some(cost(0.375)), "admin", at)
            .await
            .unwrap();
    }
    ids
}

/// Dataset `id` (the `i`th) after releases of `charge` each, `by_alloc` of them by "tok_alloc"
/// (at most 3: its allocation) and `by_free` by "tok_free": the ledger, the allocation's spend,
/// seqs 1..n, each release's `spent_after` the charges up to it (as if each had committed alone),
/// and a release log that verifies. Returns the releases, newest first.
async fn assert_every_rule_held(
    store: &dyn LedgerStore,
    (i, id): (usize, Uuid),
    charge: Units,
    by_alloc: i64,
    by_free: i64,
) -> Vec<Release> {
    assert!(
        by_alloc <= 3,
        "dataset {i}: {by_alloc} releases under an allocation of 3"
    );
    let after = dataset(store, id).await;
    assert_eq!(after.spent.raw(), (by_alloc + by_free) * charge.raw());
    assert_eq!(after.releases, by_alloc + by_free);
    let allocation = allocation_of(store, id, "tok_alloc").await;
    assert_eq!(allocation.spent.raw(), by_alloc * charge.raw());
    let listed = store.list_releases(id, None, 100).await.unwrap();
    assert_eq!(
        listed.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (1..=after.releases).rev().collect::<Vec<_>>()
    );
    for r in &listed {
        assert_eq!(r.spent_after.raw(), r.seq * charge.raw(), "dataset {i}");
    }
    let verdict = verify_log(store, id, 7).await;
    assert_eq!(
        (verdict.checked, verdict.failure),
        (after.releases, None),
        "dataset {i}: the release log verifies"
    );
    listed
}

/// Many releases over many datasets at once, through one commit slot, with budgets and an
/// allocation that run out: every member of every group meets the same rules as a release
/// alone. Each dataset admits exactly what its budget holds, with seqs 1..k, each release's
/// `spent_after` what the releases before it were charged, and a release log that verifies; the
/// allocated token stops exactly at its allocation; keyed releases interleave; and groups did
/// form, with several releases of one dataset in one of them (releases written by one
/// transaction share `xmin`), or the test would prove nothing about them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_releases_keep_every_rule_postgres() {
    const DATASETS: usize = 12;
    const PER_DATASET: usize = 12;
    let url = pg::fresh_database().await;
    let store = one_slot(&url).await;
    let charge = cost(0.125);
    // Dataset i holds i + 2 releases (so most refuse some); the token "tok_alloc" may spend 3
    // releases' worth on each dataset.
    let ids = datasets_for_two_analysts(
        &*store,
        "group",
        (0..DATASETS).map(|i| 0.125 * (i + 2) as f64),
    )
    .await;

    let mut tasks = Vec::new();
    for round in 0..PER_DATASET {
        for (i, id) in ids.iter().enumerate() {
            let store = Arc::clone(&store);
            let mut new = by(
                if round % 2 == 0 {
                    "tok_alloc"
                } else {
                    "tok_free"
                },
                *id,
                charge,
            );
            if (round + i) % 5 == 0 {
                new.idempotency = Some(Idempotency {
                    key: format!("k-{round}-{i}"),
                    fingerprint: fingerprint(&format!("k-{round}-{i}")),
                });
            }
            tasks.push(tokio::spawn(async move {
                let outcome = store.commit_release(&new).await;
                (new.dataset_id, new.created_by.clone(), outcome)
            }));
        }
    }
    let mut admitted = std::collections::HashMap::<(Uuid, String), i64>::new();
    let mut refused = 0;
    for task in tasks {
        let (dataset_id, token, outcome) = task.await.unwrap();
        match outcome.expect("no commit fails") {
            CommitOutcome::Committed { release, budget } => {
                assert!(budget.spent <= budget.total);
                assert_eq!(release.spent_after, budget.spent);
                *admitted.entry((dataset_id, token)).or_default() += 1;
            }
            CommitOutcome::Exhausted { budget } => {
                assert!(!budget.admits(charge));
                refused += 1;
            }
            CommitOutcome::AllocationExhausted { allocation, budget } => {
                assert_eq!(token, "tok_alloc");
                assert!(!allocation.admits(charge) && budget.admits(charge));
                refused += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let mut shared_in_a_dataset = false;
    let mut total_committed = 0;
    for (i, id) in ids.iter().enumerate() {
        let capacity = (i + 2) as i64;
        let count = |token: &str| admitted.get(&(*id, token.into())).copied().unwrap_or(0);
        let (by_alloc, by_free) = (count("tok_alloc"), count("tok_free"));
        // Six releases of each token were asked for: the dataset fills to its capacity unless the
        // allocation stopped the first token first.
        assert_eq!(by_alloc + by_free, capacity.min(3 + 6), "dataset {i}");
        let listed = assert_every_rule_held(&*store, (i, *id), charge, by_alloc, by_free).await;
        shared_in_a_dataset |= transactions(&url, Some(*id)).await < listed.len();
        total_committed += listed.len();
    }
    assert_eq!(total_committed + refused, DATASETS * PER_DATASET);
    assert!(
        transactions(&url, None).await < total_committed,
        "no two releases shared a transaction: no group formed ({total_committed} releases)"
    );
    assert!(
        shared_in_a_dataset,
        "no group held two releases of one dataset"
    );
}

/// One hot dataset, releases of two sizes from two tokens (one with an allocation) arriving at
/// once through one slot: its releases share transactions, and each is admitted exactly as if
/// they had committed one after another. Seqs run 1..k, each `spent_after` is the sum of the
/// charges up to it, the allocation is never exceeded, the log verifies, and nothing refused would
/// fit what is left (a refusal was never caused by a member that was itself refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_dataset_commits_in_order_in_groups_postgres() {
    let url = pg::fresh_database().await;
    let store = one_slot(&url).await;
    let (small, large) = (cost(0.125), cost(0.375));
    let d = store
        .create_dataset(&new_dataset("hot", 9.0))
        .await
        .unwrap();
    analyst_token(&*store, "tok_alloc", &[d.id]).await;
    analyst_token(&*store, "tok_free", &[d.id]).await;
    let at = Utc::now().trunc_subsecs(6);
    store
        .set_allocation(d.id, "tok_alloc", Some(cost(1.5)), "admin", at)
        .await
        .unwrap();
    let tasks: Vec<_> = (0..48)
        .map(|i| {
            let store = Arc::clone(&store);
            let token = if i % 3 == 0 { "tok_alloc" } else { "tok_free" };
            let charge = if i % 4 < 2 { small } else { large };
            let new = by(token, d.id, charge);
            tokio::spawn(async move {
                let outcome = store.commit_release(&new).await;
                (new.id, token, charge, outcome)
            })
        })
        .collect();
    let mut charged = std::collections::HashMap::new();
    let mut refused_by_budget = Vec::new();
    let mut refused_by_allocation = Vec::new();
    for task in tasks {
        let (id, token, charge, outcome) = task.await.unwrap();
        match outcome.expect("no commit fails") {
            CommitOutcome::Committed { release, budget } => {
                assert_eq!(release.spent_after, budget.spent);
                charged.insert(id, (token, charge));
            }
            CommitOutcome::Exhausted { budget } => {
                assert!(!budget.admits(charge));
                refused_by_budget.push(charge);
            }
            CommitOutcome::AllocationExhausted { allocation, .. } => {
                assert_eq!(token, "tok_alloc");
                assert!(!allocation.admits(charge));
                refused_by_allocation.push(charge);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let after = dataset(&*store, d.id).await;
    let listed = store.list_releases(d.id, None, 100).await.unwrap();
    assert_eq!(listed.len(), charged.len());
    assert_eq!(after.releases, listed.len() as i64);
    let mut running = 0;
    let mut by_alloc = 0;
    for r in listed.iter().rev() {
        let (token, charge) = charged[&r.id];
        running += charge.raw();
        assert_eq!(r.spent_after.raw(), running, "seq {}", r.seq);
        if token == "tok_alloc" {
            by_alloc += charge.raw();
        }
    }
    assert_eq!(
        listed.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (1..=after.releases).rev().collect::<Vec<_>>()
    );
    assert_eq!(after.spent.raw(), running);
    assert!(by_alloc <= cost(1.5).raw());
    let allocation = allocation_of(&*store, d.id, "tok_alloc").await;
    assert_eq!(allocation.spent.raw(), by_alloc);
    // The budget ran out (48 releases ask for 12 of 9), and so did the allocation (16 ask for 4
    // of 1.5): whatever either refused would not fit now.
    assert!(!refused_by_budget.is_empty() && !refused_by_allocation.is_empty());
    let left = after.total.raw() - after.spent.raw();
    assert!(refused_by_budget.iter().all(|c| c.raw() > left));
    for c in &refused_by_allocation {
        assert!(by_alloc + c.raw() > cost(1.5).raw());
    }
    let verdict = verify_log(&*store, d.id, 9).await;
    assert_eq!((verdict.checked, verdict.failure), (after.releases, None));
    assert!(
        transactions(&url, Some(d.id)).await < listed.len(),
        "every release of the hot dataset had a transaction of its own"
    );
}

/// A group never waits for a lock: a dataset row held by another transaction is skipped, the
/// rest of the group commits at once, and the skipped release commits alone once the lock is
/// released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_skips_a_locked_dataset_postgres() {
    let url = pg::fresh_database().await;
    let store = one_slot(&url).await;
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(
            store
                .create_dataset(&new_dataset(&format!("skip {i}"), 1.0))
                .await
                .unwrap()
                .id,
        );
    }
    let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
    other.execute("BEGIN").await.unwrap();
    sqlx::query("SELECT 1 FROM datasets WHERE id = $1 FOR UPDATE")
        .bind(ids[0])
        .execute(&mut other)
        .await
        .unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = ids
        .iter()
        .map(|id| {
            let store = Arc::clone(&store);
            let new = new_release(*id, cost(0.25), None);
            tokio::spawn(async move {
                let outcome = store.commit_release(&new).await;
                (new.dataset_id, outcome, started.elapsed())
            })
        })
        .collect();
    // The five free datasets commit while the lock is held.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for id in &ids[1..] {
        assert_eq!(
            dataset(&*store, *id).await.releases,
            1,
            "a free dataset waited"
        );
    }
    assert_eq!(dataset(&*store, ids[0]).await.releases, 0);
    other.execute("ROLLBACK").await.unwrap();
    for task in tasks {
        let (id, outcome, elapsed) = task.await.unwrap();
        let (release, _) = committed(outcome.expect("commit_release"));
        assert_eq!(release.seq, 1);
        if id == ids[0] {
            assert!(
                elapsed >= Duration::from_millis(1500),
                "committed under the lock"
            );
        }
    }
}

/// Keyed and keyless releases of many datasets at once through one slot, each keyed request sent
/// once or three times at once (a client retrying while its first attempt is still in flight),
/// with budgets, an allocation and the output quota running out: every member meets the same
/// rules as a release alone. Each dataset admits exactly what its budget or quota holds, seqs
/// 1..k, each `spent_after` the charges up to it, the allocated token stops at its allocation, the
/// release log verifies; a keyed request is charged at most once, every copy of it answered with
/// that one release (or all refused alike); and keyed releases shared transactions with others
/// (`xmin`), or the test would prove nothing about keys in groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_and_keyless_releases_share_groups_and_keep_every_rule_postgres() {
    const DATASETS: usize = 8;
    const PER_DATASET: usize = 12;
    // The outputs have 3 cells: the quota holds 5 releases per dataset.
    const QUOTA_RELEASES: usize = 5;
    let url = pg::fresh_database().await;
    let store = connect(
        &url,
        &StoreOptions {
            commit_slots: 1,
            max_stored_cells: 3 * QUOTA_RELEASES as u64,
            ..options()
        },
    )
    .await
    .expect("open the PostgreSQL store");
    let charge = cost(0.125);
    // Dataset i's budget holds i + 2 releases: the budget binds on the first ones, the quota on
    // the last ones; "tok_alloc" may spend 3 releases' worth on each.
    let ids = datasets_for_two_analysts(
        &*store,
        "keyed group",
        (0..DATASETS).map(|i| 0.125 * (i + 2) as f64),
    )
    .await;

    // (dataset, round, copy): rounds alternate tokens; two rounds in three are keyed, and every
    // fourth round's request is sent three times.
    let mut tasks = Vec::new();
    for round in 0..PER_DATASET {
        for (i, id) in ids.iter().enumerate() {
            let token = if round % 2 == 0 {
                "tok_alloc"
            } else {
                "tok_free"
            };
            let key = (round % 3 != 2).then(|| format!("k-{i}-{round}"));
            let copies = if key.is_some() && round % 4 == 0 {
                3
            } else {
                1
            };
            for _ in 0..copies {
                let store = Arc::clone(&store);
                let mut new = by(token, *id, charge);
                new.idempotency = key.as_ref().map(|key| Idempotency {
                    key: key.clone(),
                    fingerprint: fingerprint(key),
                });
                tasks.push(tokio::spawn(async move {
                    let outcome = store.commit_release(&new).await;
                    (i, round, new, outcome)
                }));
            }
        }
    }
    // Per request: the release it was charged for, and how its copies were answered.
    let mut charged = std::collections::HashMap::<(usize, usize), Release>::new();
    let mut answers = std::collections::HashMap::<(usize, usize), Vec<&'static str>>::new();
    let mut existing = Vec::new();
    for task in tasks {
        let (i, round, new, outcome) = task.await.unwrap();
        let answer = match outcome.expect("no commit fails") {
            CommitOutcome::Committed { release, budget } => {
                assert!(budget.spent <= budget.total);
                assert_eq!(release.spent_after, budget.spent);
                assert!(
                    charged.insert((i, round), release).is_none(),
                    "dataset {i} round {round}: charged twice"
                );
                "committed"
            }
            CommitOutcome::Existing {
                release,
                fingerprint: stored,
            } => {
                let key = new.idempotency.as_ref().expect("only a keyed request");
                assert_eq!(release.idempotency_key.as_deref(), Some(key.key.as_str()));
                assert_eq!(stored, key.fingerprint);
                existing.push(((i, round), release));
                "existing"
            }
            CommitOutcome::Exhausted { budget } => {
                assert!(!budget.admits(charge));
                assert!(i <= 3, "dataset {i}: its quota binds before its budget");
                "refused"
            }
            CommitOutcome::AllocationExhausted { allocation, budget } => {
                assert_eq!(new.created_by, "tok_alloc");
                assert!(!allocation.admits(charge) && budget.admits(charge));
                "refused"
            }
            CommitOutcome::OutputQuotaExceeded { quota } => {
                assert_eq!(quota, 3 * QUOTA_RELEASES as i64);
                assert!(i >= 3, "dataset {i}: its budget binds before its quota");
                "refused"
            }
            other => panic!("unexpected {other:?}"),
        };
        answers.entry((i, round)).or_default().push(answer);
    }
    // A request is charged once and every other copy gets that release, or every copy is refused
    // (spend, allocation spend and stored cells only grow).
    for ((i, round), release) in existing {
        let first = charged.get(&(i, round)).unwrap_or_else(|| {
            panic!("dataset {i} round {round}: a copy found a release never charged")
        });
        assert_eq!(
            (release.id, release.seq, bits(release.output.values())),
            (first.id, first.seq, bits(first.output.values()))
        );
    }
    for ((i, round), mut got) in answers {
        got.sort_unstable();
        let n = got.len();
        assert!(
            got == vec!["refused"; n]
                || got == [vec!["committed"], vec!["existing"; n - 1]].concat(),
            "dataset {i} round {round}: {got:?}"
        );
    }

    let mut keyed_total = 0;
    for (i, id) in ids.iter().enumerate() {
        let capacity = (i + 2).min(QUOTA_RELEASES) as i64;
        let count = |token: &str| {
            charged
                .iter()
                .filter(|((d, _), r)| *d == i && r.created_by == token)
                .count() as i64
        };
        let (by_alloc, by_free) = (count("tok_alloc"), count("tok_free"));
        // Six requests of each token: the dataset fills to its capacity.
        assert_eq!(by_alloc + by_free, capacity, "dataset {i}");
        let listed = assert_every_rule_held(&*store, (i, *id), charge, by_alloc, by_free).await;
        keyed_total += listed
            .iter()
            .filter(|r| r.idempotency_key.is_some())
            .count();
    }
    assert!(
        keyed_sharing_a_transaction(&url).await > 0,
        "no keyed release shared a transaction ({keyed_total} keyed releases): keys kept out of groups"
    );
}

/// Keyed releases written by a transaction that also wrote another release.
async fn keyed_sharing_a_transaction(url: &str) -> i64 {
    let mut raw = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query_scalar(
        "SELECT count(*) FROM releases r \
          WHERE r.idempotency_key IS NOT NULL \
            AND EXISTS (SELECT 1 FROM releases o WHERE o.xmin::text = r.xmin::text AND o.id <> r.id)",
    )
    .fetch_one(&mut raw)
    .await
    .unwrap()
}

/// Transactions rolled back in the database so far, once every other session on it has ended
/// (`pool` closed, and what is left of it terminated): a backend reports its counts when it ends
/// at the latest.
async fn rollbacks_after_closing(url: &str, pool: &sqlx::PgPool) -> i64 {
    pool.close().await;
    let mut raw = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
          WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .execute(&mut raw)
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (others, rollbacks): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM pg_stat_activity \
                      WHERE datname = current_database() AND pid <> pg_backend_pid()), \
                    (SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database())",
        )
        .fetch_one(&mut raw)
        .await
        .unwrap();
        if others == 0 {
            return rollbacks;
        }
        assert!(Instant::now() < deadline, "the other sessions ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One key sent many times at once, with other keyed and keyless releases, through one slot:
/// the copies share a group, the first is charged and the others are answered with its release,
/// and no statement rolled back — a key repeated in a group is settled inside the group's
/// statement, not by a unique violation (which would roll the whole group back, or fail each
/// copy's own statement). A retry afterwards gets the same release; a different body under the
/// key gets the stored fingerprint (the handler refuses it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_repeated_in_a_group_is_charged_once_without_rolling_back_postgres() {
    let url = pg::fresh_database().await;
    let setup = dirichlet_release::store::postgres::PgStore::connect(&url, &options())
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..4 {
        let d = new_dataset(&format!("repeated {i}"), 100.0);
        ids.push(setup.create_dataset(&d).await.unwrap().id);
    }
    let before = rollbacks_after_closing(&url, setup.pool()).await;

    let store = Arc::new(
        dirichlet_release::store::postgres::PgStore::connect(
            &url,
            &StoreOptions {
                commit_slots: 1,
                ..options()
            },
        )
        .await
        .unwrap(),
    );
    let mut tasks = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        for k in 0..3 {
            for _copy in 0..4 {
                let store = Arc::clone(&store);
                let new = new_release(*id, cost(0.25), Some(&format!("key-{i}-{k}")));
                tasks.push(tokio::spawn(async move {
                    (new.clone(), store.commit_release(&new).await)
                }));
            }
        }
        for _ in 0..3 {
            let store = Arc::clone(&store);
            let new = new_release(*id, cost(0.25), None);
            tasks.push(tokio::spawn(async move {
                (new.clone(), store.commit_release(&new).await)
            }));
        }
    }
    let mut by_key = std::collections::BTreeMap::<String, (Vec<Release>, Vec<Release>)>::new();
    for task in tasks {
        let (new, outcome) = task.await.unwrap();
        let Some(key) = new.idempotency.map(|i| i.key) else {
            committed(outcome.expect("commit_release"));
            continue;
        };
        let entry = by_key.entry(key.clone()).or_default();
        match outcome.expect("commit_release") {
            CommitOutcome::Committed { release, .. } => entry.0.push(release),
            CommitOutcome::Existing {
                release,
                fingerprint: stored,
            } => {
                assert_eq!(stored, fingerprint(&key));
                entry.1.push(release);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(by_key.len(), 12);
    for (key, (charged, answered)) in &by_key {
        assert_eq!(charged.len(), 1, "{key}: charged once");
        assert_eq!(answered.len(), 3, "{key}");
        for r in answered {
            assert_eq!(
                (r.id, r.seq, bits(r.output.values())),
                (
                    charged[0].id,
                    charged[0].seq,
                    bits(charged[0].output.values())
                )
            );
        }
    }
    for id in &ids {
        let after = dataset(&*store, *id).await;
        assert_eq!((after.releases, after.spent), (6, cost(1.5)));
    }
    assert!(
        keyed_sharing_a_transaction(&url).await > 0,
        "no keyed release shared a transaction: keys kept out of groups"
    );

    // Retries, one at a time: the release each key was charged for, nothing charged again.
    for (key, (charged, _)) in &by_key {
        let retry = new_release(charged[0].dataset_id, cost(0.25), Some(key));
        match commit(&*store, &retry).await {
            CommitOutcome::Existing {
                release,
                fingerprint: stored,
            } => {
                assert_eq!(release, charged[0]);
                assert_eq!(stored, fingerprint(key));
            }
            other => panic!("{key}: expected Existing, got {other:?}"),
        }
    }
    // A different request under a stored key: the stored fingerprint, which is not its own.
    let mut other = new_release(ids[0], cost(0.25), Some("key-0-0"));
    other.idempotency.as_mut().unwrap().fingerprint = fingerprint("another body");
    match commit(&*store, &other).await {
        CommitOutcome::Existing {
            fingerprint: stored,
            ..
        } => assert_ne!(stored, fingerprint("another body")),
        other => panic!("expected Existing, got {other:?}"),
    }
    assert_eq!(dataset(&*store, ids[0]).await.releases, 6);
    assert_eq!(
        rollbacks_after_closing(&url, store.pool()).await,
        before,
        "a statement rolled back"
    );
}

/// Releases on six datasets of one shared population, through one commit slot: the group
/// statement admits them against the population's cap too. Exactly what the population holds is
/// admitted (each dataset alone would admit more), its `spent` is exactly the sum of what its
/// datasets were charged, every refusal names the population, every dataset's log verifies,
/// and releases under the population did share transactions (`xmin`), or the test would prove
/// nothing about groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_releases_under_a_population_postgres() {
    const DATASETS: usize = 6;
    const PER_DATASET: usize = 8;
    let url = pg::fresh_database().await;
    let store = one_slot(&url).await;
    let charge = cost(0.125);
    let population = store
        .create_population(&new_population("everyone", 2.0))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..DATASETS {
        let d = NewDataset {
            population: Some(population.id),
            ..new_dataset(&format!("member {i}"), 1.0)
        };
        ids.push(store.create_dataset(&d).await.unwrap().id);
    }
    let mut tasks = Vec::new();
    for _ in 0..PER_DATASET {
        for id in &ids {
            let store = Arc::clone(&store);
            let new = NewRelease {
                population: Some(population.id),
                ..new_release(*id, charge, None)
            };
            tasks.push(tokio::spawn(
                async move { store.commit_release(&new).await },
            ));
        }
    }
    let mut committed = 0;
    for task in tasks {
        match task.await.unwrap().expect("no commit fails") {
            CommitOutcome::Committed { budget, .. } => {
                assert!(budget.spent <= budget.total);
                committed += 1;
            }
            CommitOutcome::PopulationExhausted { refusal, .. } => {
                assert_eq!(refusal.id, population.id);
                assert!(refusal.spent.checked_add(charge).unwrap() > refusal.total);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(committed, 16, "2.0 / 0.125 releases fit the population");
    let node = store.get_population(population.id).await.unwrap().unwrap();
    assert_eq!(node.spent.raw(), 16 * charge.raw());
    let mut datasets_spent = 0;
    for id in &ids {
        let d = dataset(&*store, *id).await;
        datasets_spent += d.spent.raw();
        let verdict = verify_log(&*store, *id, 7).await;
        assert_eq!((verdict.checked, verdict.failure), (d.releases, None));
    }
    assert_eq!(datasets_spent, node.spent.raw());
    assert!(
        transactions(&url, None).await < committed,
        "no two releases under the population shared a transaction"
    );
}

// Data blocks (src/ledger/blocks.rs).

contract_tests! {
    blocked_releases_charge_every_block_or_none => blocked_releases_charge_every_block_or_none_sqlite, blocked_releases_charge_every_block_or_none_postgres;
    three_stores_racing_over_overlapping_blocks_never_overspend => three_stores_racing_over_overlapping_blocks_never_overspend_sqlite, three_stores_racing_over_overlapping_blocks_never_overspend_postgres;
}

fn day(key: &str) -> BlockKey {
    BlockKey::parse(Period::Day, key).unwrap()
}

fn days(from: &str, to: &str) -> BlockRange {
    BlockRange::new(day(from), day(to), 400).unwrap()
}

/// A dataset split by day, each day capped at `cap`.
async fn blocked_dataset(store: &dyn LedgerStore, cap: f64) -> Dataset {
    store
        .create_dataset(&NewDataset {
            blocks: Some(Period::Day),
            ..new_dataset("daily", cap)
        })
        .await
        .unwrap()
}

fn over(dataset_id: Uuid, charge: Units, range: BlockRange, key: Option<&str>) -> NewRelease {
    NewRelease {
        blocks: Some(range),
        ..new_release(dataset_id, charge, key)
    }
}

/// The spend of every block of `range` (0 for a block never charged).
async fn spent_by_day(store: &dyn LedgerStore, id: Uuid, range: BlockRange) -> Vec<i64> {
    let stored = store.block_spends(id, range).await.unwrap();
    range
        .keys()
        .map(|k| {
            stored
                .iter()
                .find(|b| b.key == k)
                .map_or(0, |b| b.spent.raw())
        })
        .collect()
}

async fn blocked_releases_charge_every_block_or_none(f: Fixture) {
    let store = f.store;
    let d = blocked_dataset(&*store, 1.0).await;
    assert_eq!(
        d.blocks,
        Some(Blocking {
            period: Period::Day,
            cap: Units::floor(1.0).unwrap()
        })
    );
    assert_eq!(dataset(&*store, d.id).await.blocks, d.blocks);
    let q = cost(0.25);
    let week = days("2026-12-01", "2026-12-07");

    // Every block of the range is charged the full cost; the release records its range.
    let (release, budget) = committed(commit(&*store, &over(d.id, q, week, Some("w"))).await);
    assert_eq!(release.blocks, Some(week));
    assert_eq!(budget.spent, q, "the dataset's own ledger sums the costs");
    let stored = store.get_release(d.id, release.id).await.unwrap().unwrap();
    assert_eq!(stored.blocks, Some(week));
    let wide = days("2026-11-30", "2026-12-08");
    let mut expected = vec![
        0,
        q.raw(),
        q.raw(),
        q.raw(),
        q.raw(),
        q.raw(),
        q.raw(),
        q.raw(),
        0,
    ];
    assert_eq!(spent_by_day(&*store, d.id, wide).await, expected);

    // A retry with the key charges nothing.
    assert!(matches!(
        commit(&*store, &over(d.id, q, week, Some("w"))).await,
        CommitOutcome::Existing { .. }
    ));
    assert_eq!(spent_by_day(&*store, d.id, wide).await, expected);

    // The last day of the week gets two more quarters, then is full.
    for _ in 0..3 {
        committed(
            commit(
                &*store,
                &over(d.id, q, days("2026-12-07", "2026-12-07"), None),
            )
            .await,
        );
    }
    expected[7] = 4 * q.raw();

    // A range reaching the full day: refused, naming it; nothing charged anywhere.
    let before = dataset(&*store, d.id).await;
    match commit(
        &*store,
        &over(d.id, q, days("2026-12-05", "2026-12-08"), None),
    )
    .await
    {
        CommitOutcome::BlockExhausted { block, cap, .. } => {
            assert_eq!(block.key, day("2026-12-07"));
            assert_eq!(block.spent.raw(), 4 * q.raw());
            assert_eq!(cap, Units::floor(1.0).unwrap());
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(spent_by_day(&*store, d.id, wide).await, expected);
    let after = dataset(&*store, d.id).await;
    assert_eq!(
        (after.spent, after.releases),
        (before.spent, before.releases)
    );

    // A cost above the cap binds on the range's first block, charged or not.
    match commit(
        &*store,
        &over(d.id, cost(1.5), days("2026-12-10", "2026-12-11"), None),
    )
    .await
    {
        CommitOutcome::BlockExhausted { block, .. } => {
            assert_eq!((block.key, block.spent), (day("2026-12-10"), Units::ZERO));
        }
        other => panic!("unexpected {other:?}"),
    }

    // Blocks that do not match the dataset's split are refused, whichever way.
    let plain = store
        .create_dataset(&new_dataset("plain", 1.0))
        .await
        .unwrap();
    let month = BlockKey::parse(Period::Month, "2026-12").unwrap();
    for new in [
        over(plain.id, q, week, None),
        new_release(d.id, q, None),
        new_release(d.id, q, Some("no blocks")),
        over(d.id, q, BlockRange::new(month, month, 400).unwrap(), None),
    ] {
        assert!(
            matches!(commit(&*store, &new).await, CommitOutcome::BlocksMismatch),
            "{:?} on {}",
            new.blocks,
            new.dataset_id
        );
    }
    assert_eq!(spent_by_day(&*store, d.id, wide).await, expected);
    assert_eq!(dataset(&*store, plain.id).await.releases, 0);

    // The most-spent block, and the log: its spent is the sum of the costs.
    let most = store
        .most_spent_block(d.id, Period::Day)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (most.key, most.spent.raw()),
        (day("2026-12-07"), 4 * q.raw())
    );
    let head = store.log_head(d.id).await.unwrap().unwrap();
    let entries = store.log_entries(d.id, 0, head.seq, 100).await.unwrap();
    let mut verifier = audit::Verifier::new(head);
    for entry in &entries {
        verifier.push(entry);
    }
    assert!(verifier.finish().failure.is_none());
    assert!(store
        .most_spent_block(plain.id, Period::Day)
        .await
        .unwrap()
        .is_none());
}

/// Three stores on one database (three replicas' pools), each releasing concurrently over
/// overlapping ranges of days: no block ever passes its cap, the number admitted is exactly
/// what the caps allow, and each block's spend is the sum of the stored releases that read it.
async fn three_stores_racing_over_overlapping_blocks_never_overspend(f: Fixture) {
    let stores: Vec<Arc<dyn LedgerStore>> = vec![
        f.store.clone(),
        connect(&f.url, &options()).await.unwrap(),
        connect(&f.url, &options()).await.unwrap(),
    ];
    let d = blocked_dataset(&*f.store, 1.0).await;
    let q = cost(0.25);
    // Ranges over days 1–6: day 3 and 4 are read by the most, so they bind.
    let ranges = [
        days("2026-12-01", "2026-12-03"),
        days("2026-12-02", "2026-12-04"),
        days("2026-12-03", "2026-12-05"),
        days("2026-12-04", "2026-12-06"),
    ];
    let mut tasks = Vec::new();
    for i in 0..48usize {
        let store = stores[i % 3].clone();
        let range = ranges[i % ranges.len()];
        tasks.push(tokio::spawn(async move {
            let outcome = store
                .commit_release(&over(d.id, q, range, None))
                .await
                .unwrap();
            let admitted = match outcome {
                CommitOutcome::Committed { .. } => true,
                CommitOutcome::BlockExhausted { .. } => false,
                other => panic!("unexpected {other:?}"),
            };
            (range, admitted)
        }));
    }
    let mut admitted = 0;
    let mut refused = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            (_, true) => admitted += 1,
            (range, false) => refused.push(range),
        }
    }
    let all = days("2026-12-01", "2026-12-06");
    let spent = spent_by_day(&*f.store, d.id, all).await;
    assert!(spent.iter().all(|s| *s <= 4 * q.raw()), "{spent:?}");
    // Sum over the stored releases of their cost on each block they read.
    let releases = f.store.list_releases(d.id, None, 1000).await.unwrap();
    assert_eq!(releases.len(), admitted);
    let mut summed = vec![0i64; 6];
    for r in &releases {
        for key in r.blocks.unwrap().keys() {
            summed[(key.index() - day("2026-12-01").index()) as usize] += r.cost.raw();
        }
    }
    assert_eq!(spent, summed);
    // Exact admission: a release was refused only when a block of its range had no room (and
    // blocks only fill up, so it still has none).
    let first = day("2026-12-01").index();
    for range in refused {
        assert!(
            range
                .keys()
                .any(|k| spent[(k.index() - first) as usize] + q.raw() > 4 * q.raw()),
            "{range:?} was refused with room on every block: {spent:?}"
        );
    }
    assert!((4..=8).contains(&admitted), "{admitted}");
}

/// Blocked releases join group commit on PostgreSQL: a hot blocked dataset's releases over
/// overlapping ranges share transactions, every block stays within its cap, a release is
/// refused only by a full block, and the spend of each block is what the stored releases that
/// read it were charged. Half the datasets are under a population, so the group's population
/// steps and block steps run together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_releases_commit_in_groups_postgres() {
    let url = pg::fresh_database().await;
    let store = one_slot(&url).await;
    let population = store
        .create_population(&new_population("patients", 100.0))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..2 {
        let d = blocked_dataset(&*store, 1.0).await;
        if i == 1 {
            store
                .set_dataset_population(d.id, Some(population.id))
                .await
                .unwrap();
        }
        ids.push((d.id, (i == 1).then_some(population.id)));
    }
    let q = cost(0.125);
    let ranges = [
        days("2026-12-01", "2026-12-07"),
        days("2026-12-05", "2026-12-05"),
        days("2026-12-03", "2026-12-09"),
    ];
    let tasks: Vec<_> = (0..72usize)
        .map(|i| {
            let store = Arc::clone(&store);
            let (id, population) = ids[i % 2];
            let range = ranges[i % 3];
            let new = NewRelease {
                population,
                ..over(
                    id,
                    q,
                    range,
                    (i % 5 == 0).then(|| format!("key-{i}")).as_deref(),
                )
            };
            tokio::spawn(async move {
                let outcome = store.commit_release(&new).await.expect("no commit fails");
                (id, range, outcome)
            })
        })
        .collect();
    let mut refused = Vec::new();
    for task in tasks {
        let (id, range, outcome) = task.await.unwrap();
        match outcome {
            CommitOutcome::Committed { release, .. } => assert_eq!(release.blocks, Some(range)),
            CommitOutcome::BlockExhausted { .. } => refused.push((id, range)),
            other => panic!("unexpected {other:?}"),
        }
    }
    let all = days("2026-12-01", "2026-12-09");
    let first = day("2026-12-01").index();
    let mut stored_releases = 0;
    for (id, _) in &ids {
        let spent = spent_by_day(&*store, *id, all).await;
        assert!(spent.iter().all(|s| *s <= cost(1.0).raw()), "{spent:?}");
        let releases = store.list_releases(*id, None, 1000).await.unwrap();
        stored_releases += releases.len();
        let mut summed = vec![0i64; 9];
        for r in &releases {
            for key in r.blocks.unwrap().keys() {
                summed[(key.index() - first) as usize] += r.cost.raw();
            }
        }
        assert_eq!(spent, summed, "each block's spend is its releases' costs");
        for (_, range) in refused.iter().filter(|(d, _)| d == id) {
            assert!(
                range
                    .keys()
                    .any(|k| spent[(k.index() - first) as usize] + q.raw() > cost(1.0).raw()),
                "{range:?} refused with room: {spent:?}"
            );
        }
        let verdict = verify_log(&*store, *id, 8).await;
        assert_eq!(verdict.failure, None);
    }
    let node = store.get_population(population.id).await.unwrap().unwrap();
    let under = store.list_releases(ids[1].0, None, 1000).await.unwrap();
    assert_eq!(
        node.spent.raw(),
        under.len() as i64 * q.raw(),
        "full cost per release"
    );
    assert!(!refused.is_empty(), "the caps bound");
    assert!(
        transactions(&url, None).await < stored_releases,
        "every blocked release had a transaction of its own"
    );
}
