//! A bounded load driver for the reliability tests: many concurrent clients sending release
//! requests (each with its own `Idempotency-Key`) to several replicas, recording every attempt,
//! and a checker that holds the ledger to what the clients were told.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::app::ADMIN_TOKEN;

/// Reads a positive integer from the environment (the scripts scale the runs with these).
pub fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a non-negative integer")),
        Err(_) => default,
    }
}

/// A comma-separated list of positive integers from the environment.
pub fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(v) => v
            .split(',')
            .map(|x| {
                x.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{name}={v}: not a list of integers"))
            })
            .collect(),
        Err(_) => default.to_vec(),
    }
}

/// A dataset under load: its budget admits exactly `k` releases of `cost`.
#[derive(Debug, Clone)]
pub struct Target {
    pub id: String,
    pub k: usize,
    pub cost: f64,
}

/// Registers a dataset whose RDP budget at order 2 is exactly `k · cost` (`cost` a power of two,
/// so that every amount is exact on the ledger grid).
pub async fn register(client: &reqwest::Client, address: &str, k: usize, cost: f64) -> Target {
    let response = client
        .post(format!("{address}/v1/datasets"))
        .bearer_auth(ADMIN_TOKEN)
        .json(
            &json!({"name": format!("k={k}"), "budget": {"order": 2, "epsilon": k as f64 * cost}}),
        )
        .send()
        .await
        .expect("register a dataset");
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    Target {
        id: body["id"].as_str().unwrap().to_string(),
        k,
        cost,
    }
}

/// One logical release request; every attempt at it carries the same key and body.
#[derive(Debug, Clone)]
pub struct Request {
    pub index: usize,
    pub dataset: usize,
    pub dataset_id: String,
    pub key: String,
    pub body: Value,
    /// Sent twice at once to two replicas (a client's duplicate, e.g. a retry that raced).
    pub twin: bool,
}

fn mix(mut x: u64) -> u64 {
    // splitmix64
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The body of request `index` to a dataset whose releases cost `cost`: 3 to 8 cells of
/// pseudo-random counts, mostly the Dirichlet mechanism, some posterior and Gaussian ones (all
/// calibrated to `cost`, so every charge lies in (cost·(1 − 1e-9), cost]).
pub fn body(index: usize, cost: f64) -> Value {
    let h = mix(index as u64);
    let d = 3 + (h % 6) as usize;
    let counts: Vec<u64> = (0..d).map(|c| mix(h ^ (c as u64 + 1)) % 500).collect();
    match h % 10 {
        0 => json!({"counts": counts, "epsilon": cost, "mechanism": "gaussian"}),
        1 => json!({"counts": counts, "epsilon": cost, "mechanism": "posterior"}),
        _ => json!({"counts": counts, "epsilon": cost}),
    }
}

/// `total` requests spread over `targets`: the first target (the hot one) gets `hot_share`
/// percent of them, the others share the rest equally; interleaved pseudo-randomly. Every
/// `twin_every`-th request (0: none) is a twin.
pub fn schedule(
    run: &str,
    targets: &[Target],
    total: usize,
    hot_share: usize,
    twin_every: usize,
) -> Vec<Request> {
    let hot = total * hot_share / 100;
    let cold = targets.len().saturating_sub(1);
    let mut per: Vec<usize> = vec![hot];
    for i in 0..cold {
        let rest = total - hot;
        per.push(rest / cold + usize::from(i < rest % cold));
    }
    let mut order: Vec<usize> = per
        .iter()
        .enumerate()
        .flat_map(|(dataset, n)| std::iter::repeat_n(dataset, *n))
        .collect();
    // Fisher–Yates with the mixer: deterministic, interleaved.
    for i in (1..order.len()).rev() {
        let j = (mix(i as u64 ^ 0x5eed) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
        .into_iter()
        .enumerate()
        .map(|(index, dataset)| Request {
            index,
            dataset,
            dataset_id: targets[dataset].id.clone(),
            key: format!(
                "{}-{index}",
                run.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
            ),
            body: body(index, targets[dataset].cost),
            twin: twin_every > 0 && index % twin_every == twin_every - 1,
        })
        .collect()
}

/// What one HTTP attempt ended with.
#[derive(Debug, Clone)]
pub enum Answer {
    Status {
        code: u16,
        content_type: String,
        problem_type: Option<String>,
        retry_after: Option<String>,
        replayed: bool,
        release: Option<Received>,
    },
    /// No HTTP answer: connection refused or reset, or the client's own timeout.
    Transport(String),
}

impl Answer {
    pub fn code(&self) -> Option<u16> {
        match self {
            Answer::Status { code, .. } => Some(*code),
            Answer::Transport(_) => None,
        }
    }
}

/// A release as a client received it.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub id: String,
    pub seq: i64,
    pub cost: f64,
    pub distribution: Vec<f64>,
}

impl Received {
    pub fn from_json(v: &Value) -> Received {
        Received {
            id: v["id"].as_str().expect("release id").to_string(),
            seq: v["seq"].as_i64().expect("seq"),
            cost: v["cost"]["epsilon"].as_f64().expect("cost"),
            distribution: v["distribution"]
                .as_array()
                .expect("distribution")
                .iter()
                .map(|x| x.as_f64().expect("a number"))
                .collect(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Attempt {
    pub request: usize,
    pub replica: usize,
    pub started: Instant,
    pub latency: Duration,
    pub answer: Answer,
}

/// How a logical request ended for its client.
#[derive(Debug, Clone)]
pub enum Outcome {
    Created(Received),
    Refused,
    /// Out of attempts or out of time; the last answer.
    GaveUp(Answer),
}

#[derive(Clone)]
pub struct Driver {
    pub client: reqwest::Client,
    pub addresses: Arc<Vec<String>>,
    pub clients: usize,
    /// Attempts per logical request (1 = never retry).
    pub max_attempts: usize,
    /// Retry after a transport failure (and after 503 when `retry_503`), on the next replica.
    pub retry_503: bool,
    pub backoff: Duration,
    /// The client's own per-attempt timeout (a hang shows up as a transport failure).
    pub attempt_timeout: Duration,
    /// No new request starts after this.
    pub deadline: Instant,
    pub stop: Arc<AtomicBool>,
    pub done: Arc<AtomicUsize>,
    pub attempts: Arc<Mutex<Vec<Attempt>>>,
}

impl Driver {
    pub fn new(addresses: Vec<String>, clients: usize, budget: Duration) -> Driver {
        Driver {
            // The server closes a keep-alive connection that has waited for its next request for
            // the request timeout (hyper's header read timeout starts while idle); a client that
            // picks such a connection from its pool at that instant sends into a closing socket
            // and gets a transport error although the server did nothing wrong. Dropping idle
            // connections after one second, below every request timeout the tests configure,
            // keeps that race out of the figures (a CI run under load hit it once in the frozen
            // outage test).
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(clients)
                .pool_idle_timeout(Duration::from_secs(1))
                .build()
                .unwrap(),
            addresses: Arc::new(addresses),
            clients,
            max_attempts: 1,
            retry_503: false,
            backoff: Duration::from_millis(20),
            attempt_timeout: Duration::from_secs(30),
            deadline: Instant::now() + budget,
            stop: Arc::new(AtomicBool::new(false)),
            done: Arc::new(AtomicUsize::new(0)),
            attempts: Arc::new(Mutex::new(Vec::new())),
        }
    }

    async fn attempt(&self, request: &Request, replica: usize) -> Attempt {
        let address = &self.addresses[replica % self.addresses.len()];
        let started = Instant::now();
        let sent = self
            .client
            .post(format!(
                "{address}/v1/datasets/{}/releases",
                request.dataset_id
            ))
            .bearer_auth(ADMIN_TOKEN)
            .header("Idempotency-Key", &request.key)
            .json(&request.body)
            .timeout(self.attempt_timeout)
            .send()
            .await;
        let answer = match sent {
            Err(e) => Answer::Transport(transport_kind(&e)),
            Ok(response) => {
                let code = response.status().as_u16();
                let header = |name: &str| {
                    response
                        .headers()
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string)
                };
                let content_type = header("content-type").unwrap_or_default();
                let retry_after = header("retry-after");
                let replayed = header("idempotent-replayed").is_some_and(|v| v == "true");
                match response.json::<Value>().await {
                    Err(e) => Answer::Transport(format!("body: {}", transport_kind(&e))),
                    Ok(body) => {
                        let problem_type = body["type"].as_str().map(str::to_string);
                        let release = (code == 201).then(|| Received::from_json(&body));
                        Answer::Status {
                            code,
                            content_type,
                            problem_type,
                            retry_after,
                            replayed,
                            release,
                        }
                    }
                }
            }
        };
        Attempt {
            request: request.index,
            replica: replica % self.addresses.len(),
            started,
            latency: started.elapsed(),
            answer,
        }
    }

    /// All attempts at one request, retrying as configured, the first on replica
    /// `index + shift` and each retry on the next one; the outcome of the last.
    async fn drive(&self, request: &Request, shift: usize) -> Outcome {
        let mut last = Answer::Transport("not attempted".into());
        for n in 0..self.max_attempts {
            if n > 0 {
                if Instant::now() > self.deadline + Duration::from_secs(30) {
                    break;
                }
                tokio::time::sleep(self.backoff).await;
            }
            let attempt = self.attempt(request, request.index + shift + n).await;
            self.attempts.lock().unwrap().push(attempt.clone());
            let retry = match &attempt.answer {
                Answer::Status {
                    code: 201, release, ..
                } => return Outcome::Created(release.clone().unwrap()),
                Answer::Status { code: 409, .. } => return Outcome::Refused,
                Answer::Status { code: 503, .. } => self.retry_503,
                Answer::Status { .. } => false,
                Answer::Transport(_) => true,
            };
            last = attempt.answer;
            if !retry {
                break;
            }
        }
        Outcome::GaveUp(last)
    }

    /// Runs `requests` (in order, `clients` at a time) until all are done, the deadline passes
    /// or `stop` is set. Returns each started request's outcome(s): two for a twin.
    pub async fn run(&self, requests: Arc<Vec<Request>>) -> Vec<(usize, Outcome)> {
        let next = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..self.clients {
            let (driver, requests, next) = (self.clone(), requests.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                let mut outcomes = Vec::new();
                loop {
                    if driver.stop.load(Ordering::Relaxed) || Instant::now() > driver.deadline {
                        break;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(request) = requests.get(i) else {
                        break;
                    };
                    if request.twin {
                        // The same key and body at once on two replicas.
                        let (a, b) =
                            tokio::join!(driver.drive(request, 0), driver.drive(request, 1));
                        outcomes.push((i, a));
                        outcomes.push((i, b));
                    } else {
                        outcomes.push((i, driver.drive(request, 0).await));
                    }
                    driver.done.fetch_add(1, Ordering::Relaxed);
                }
                outcomes
            }));
        }
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.expect("a client task"));
        }
        all
    }
}

fn transport_kind(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connect() {
        "connect".into()
    } else {
        // The whole chain of causes ("connection closed before message completed", a reset, …):
        // reqwest's own message says only that sending failed.
        let mut text = if e.is_request() || e.is_body() || e.is_decode() {
            format!("request: {e}")
        } else {
            format!("{e}")
        };
        let mut source = std::error::Error::source(e);
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        text
    }
}

/// Figures of one run.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Tally {
    pub requests: usize,
    pub attempts: usize,
    pub created: usize,
    pub replayed: usize,
    pub refused: usize,
    pub gave_up: usize,
    pub transport_failures: usize,
    pub status_503: usize,
    pub other_statuses: BTreeMap<u16, usize>,
}

pub fn tally(outcomes: &[(usize, Outcome)], attempts: &[Attempt]) -> Tally {
    let mut t = Tally {
        requests: outcomes
            .iter()
            .map(|(i, _)| *i)
            .collect::<HashSet<_>>()
            .len(),
        attempts: attempts.len(),
        ..Tally::default()
    };
    for (_, o) in outcomes {
        match o {
            Outcome::Created(_) => t.created += 1,
            Outcome::Refused => t.refused += 1,
            Outcome::GaveUp(_) => t.gave_up += 1,
        }
    }
    for a in attempts {
        match &a.answer {
            Answer::Transport(_) => t.transport_failures += 1,
            Answer::Status { code: 503, .. } => t.status_503 += 1,
            Answer::Status {
                code: 201,
                replayed: true,
                ..
            } => t.replayed += 1,
            Answer::Status { code, .. } if ![201, 409].contains(code) => {
                *t.other_statuses.entry(*code).or_default() += 1
            }
            _ => {}
        }
    }
    t
}

/// What the ledger holds for one dataset, read through the API.
#[derive(Debug)]
pub struct Ledger {
    pub total: f64,
    pub spent: f64,
    pub releases: i64,
    pub stored: Vec<Received>,
}

/// The budget and every stored release of `dataset` (paged newest first, as a client would).
pub async fn read_ledger(client: &reqwest::Client, address: &str, dataset: &str) -> Ledger {
    let budget: Value = client
        .get(format!("{address}/v1/datasets/{dataset}/budget"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut stored = Vec::new();
    let mut before: Option<i64> = None;
    for _ in 0..1000 {
        let mut url = format!("{address}/v1/datasets/{dataset}/releases?limit=1000");
        if let Some(b) = before {
            url.push_str(&format!("&before={b}"));
        }
        let page: Value = client
            .get(url)
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        stored.extend(
            page["items"]
                .as_array()
                .expect("a page of releases")
                .iter()
                .map(Received::from_json),
        );
        match page["next_before"].as_i64() {
            Some(b) => before = Some(b),
            None => break,
        }
    }
    Ledger {
        total: budget["total"].as_f64().unwrap(),
        spent: budget["spent"].as_f64().unwrap(),
        releases: budget["releases"].as_i64().unwrap(),
        stored,
    }
}

/// Per-dataset result of [`check_ledgers`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct DatasetFigures {
    pub k: usize,
    pub requests: usize,
    pub created: usize,
    pub refused: usize,
    pub stored: usize,
    /// Stored releases no client was told about (committed, then the answer was lost).
    pub unacknowledged: usize,
    pub spent: f64,
    pub total: f64,
}

/// The ledger invariants, through the API, for every target:
/// - the budget's `releases` equals the number of stored releases, and `spent` equals the exact
///   sum of their costs and is at most `total`; sequence numbers are 1..=n without gaps;
/// - every release a client received (201) is stored, with the same id, seq, cost and
///   distribution (bit for bit), and two clients never received different releases for one key;
/// - when `exact` is set, exactly `k` distinct releases were created per dataset and every other
///   request was refused with 409 (no request may have given up).
///
/// Returns, per dataset, the figures and the stored releases nobody received.
pub async fn check_ledgers(
    client: &reqwest::Client,
    address: &str,
    targets: &[Target],
    requests: &[Request],
    outcomes: &[(usize, Outcome)],
    exact: bool,
) -> Vec<DatasetFigures> {
    let mut by_dataset: HashMap<usize, Vec<(usize, &Outcome)>> = HashMap::new();
    for (i, o) in outcomes {
        by_dataset
            .entry(requests[*i].dataset)
            .or_default()
            .push((*i, o));
    }
    let mut figures = Vec::new();
    for (d, target) in targets.iter().enumerate() {
        let ledger = read_ledger(client, address, &target.id).await;
        let mine = by_dataset.remove(&d).unwrap_or_default();
        // Per key: the release the client(s) received.
        let mut received: HashMap<usize, Received> = HashMap::new();
        let mut refused = HashSet::new();
        let mut gave_up = 0;
        for (i, o) in &mine {
            match o {
                Outcome::Created(r) => {
                    if let Some(previous) = received.insert(*i, r.clone()) {
                        assert_eq!(
                            previous, *r,
                            "two answers for key {} disagree",
                            requests[*i].key
                        );
                    }
                }
                Outcome::Refused => {
                    refused.insert(*i);
                }
                Outcome::GaveUp(_) => gave_up += 1,
            }
        }
        for i in &refused {
            assert!(
                !received.contains_key(i),
                "key {} was both created and refused",
                requests[*i].key
            );
        }
        let stored: HashMap<&str, &Received> =
            ledger.stored.iter().map(|r| (r.id.as_str(), r)).collect();
        assert_eq!(stored.len(), ledger.stored.len(), "release ids are unique");
        assert_eq!(
            ledger.releases as usize,
            ledger.stored.len(),
            "dataset k={}: the budget's release count equals the stored releases",
            target.k
        );
        let sum: f64 = ledger.stored.iter().map(|r| r.cost).sum();
        assert_eq!(
            ledger.spent, sum,
            "dataset k={}: spent is exactly the sum of the stored costs",
            target.k
        );
        assert!(ledger.spent <= ledger.total, "never overspent");
        let mut seqs: Vec<i64> = ledger.stored.iter().map(|r| r.seq).collect();
        seqs.sort_unstable();
        assert_eq!(
            seqs,
            (1..=ledger.stored.len() as i64).collect::<Vec<_>>(),
            "seq is 1..=n"
        );
        let mut ids = HashSet::new();
        for (i, r) in &received {
            let s = stored.get(r.id.as_str()).unwrap_or_else(|| {
                panic!(
                    "key {}: release {} was received but is not in the ledger",
                    requests[*i].key, r.id
                )
            });
            assert_eq!(*s, r, "the stored release is the one received");
            assert_eq!(
                s.distribution
                    .iter()
                    .map(|x| x.to_bits())
                    .collect::<Vec<_>>(),
                r.distribution
                    .iter()
                    .map(|x| x.to_bits())
                    .collect::<Vec<_>>(),
                "bit for bit"
            );
            assert!(ids.insert(r.id.clone()), "one release per key");
        }
        let unacknowledged = ledger.stored.len() - ids.len();
        if exact {
            assert_eq!(
                gave_up, 0,
                "dataset k={}: every request got an answer",
                target.k
            );
            assert_eq!(
                ids.len(),
                target.k,
                "dataset k={}: exactly k releases",
                target.k
            );
            assert_eq!(unacknowledged, 0, "every stored release was received");
            assert_eq!(ledger.spent, ledger.total, "the budget is used up exactly");
        }
        figures.push(DatasetFigures {
            k: target.k,
            requests: mine.iter().map(|(i, _)| *i).collect::<HashSet<_>>().len(),
            created: ids.len(),
            refused: refused.len(),
            stored: ledger.stored.len(),
            unacknowledged,
            spent: ledger.spent,
            total: ledger.total,
        });
    }
    figures
}

/// The same invariants in SQL, on PostgreSQL: per dataset, `release_count` and `spent_units`
/// agree with the releases table, and `spent_units <= total_units`. Returns the offending rows.
pub async fn postgres_inconsistencies(database_url: &str) -> Vec<String> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(database_url).await.unwrap();
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT d.id::text FROM datasets d \
         LEFT JOIN (SELECT dataset_id, count(*) AS n, sum(cost_units)::bigint AS s, max(seq) AS m \
                    FROM releases GROUP BY dataset_id) r ON r.dataset_id = d.id \
         WHERE d.release_count <> coalesce(r.n, 0) OR d.spent_units <> coalesce(r.s, 0) \
            OR d.spent_units > d.total_units OR coalesce(r.m, 0) <> d.release_count",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    // Each analyst token's spend on a dataset is what its stored releases there cost.
    let spends: Vec<(String,)> = sqlx::query_as(
        "SELECT t.token_id || ' on ' || t.dataset_id::text FROM token_datasets t \
         LEFT JOIN (SELECT dataset_id, created_by, sum(cost_units)::bigint AS s \
                    FROM releases GROUP BY dataset_id, created_by) r \
                ON r.dataset_id = t.dataset_id AND r.created_by = t.token_id \
         WHERE t.spent_units <> coalesce(r.s, 0)",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let _ = conn.close().await;
    rows.into_iter().chain(spends).map(|(id,)| id).collect()
}

/// Percentiles of a set of durations, in milliseconds: (p50, p99, max).
pub fn percentiles(mut v: Vec<Duration>) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    v.sort_unstable();
    let at = |q: f64| {
        let i = ((v.len() - 1) as f64 * q).round() as usize;
        v[i].as_secs_f64() * 1000.0
    };
    (at(0.5), at(0.99), at(1.0))
}

/// Prints one line of figures for RELIABILITY.md (and scripts/ci/reliability.sh) to collect, and
/// appends it to `$DIRICHLET_REL_REPORT` when set.
pub fn report(name: &str, figures: Value) {
    let line = json!({"test": name, "figures": figures}).to_string();
    println!("RELIABILITY {line}");
    if let Ok(path) = std::env::var("DIRICHLET_REL_REPORT") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}
