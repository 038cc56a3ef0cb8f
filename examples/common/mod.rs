//! Shared by `examples/naive_bayes.rs` and `examples/bayes_net.rs`: the command line, reading a
//! CSV, the seeded 70/30 split, quantile binning on training edges, a client of the service
//! (speaking only HTTP, as any client would), fitting a model's count tables through it under
//! one dataset budget — split evenly, or by the service's planner for one common KL target — and
//! the results table both examples print and write.
//!
//! Each example uses all of it except a helper or two, hence the module-wide allowance.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::error::Error;
use std::path::PathBuf;
use std::time::Instant;

use clap::{value_parser, Arg, ArgAction, ArgMatches, Command};
use dirichlet_release::access::generate_admin_token;
use dirichlet_release::config::Settings;
use dirichlet_release::startup::Application;
use rand::rngs::ChaCha8Rng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::{json, Value};

pub type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// The seed paper's ε grid (000 §5: 10⁻³ to 10, λ = 5), in half-decade steps.
pub const FULL_EPSILONS: [f64; 9] = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0];
pub const SHORT_EPSILONS: [f64; 3] = [0.1, 1.0, 10.0];
pub const FULL_REPETITIONS: usize = 10;
/// The paper's Rényi order λ.
pub const PAPER_ORDER: f64 = 5.0;
pub const BINS: usize = 10;
pub const TRAIN_FRACTION: f64 = 0.7;
pub const PRIVATE_MECHANISMS: [&str; 3] = ["dirichlet", "gaussian", "laplace"];

/// A zero probability would make a test loss infinite (an additive mechanism projected to the
/// simplex puts exact zeros in cells; so does the unsmoothed maximum-likelihood model). Every
/// probability a loss takes the log of is clipped below at f64's machine epsilon, the clipping
/// scikit-learn's `log_loss` applies, so one impossible test record costs at most
/// −ln(2.2·10⁻¹⁶) ≈ 36 nats. The same rule applies to every model.
pub const PROBABILITY_FLOOR: f64 = f64::EPSILON;

pub fn ln_clipped(p: f64) -> f64 {
    p.max(PROBABILITY_FLOOR).ln()
}

// ---------------------------------------------------------------------------------------------
// Command line

/// The options both examples take; each example adds its own before calling `Args::parse`.
pub fn command(name: &'static str, about: &'static str) -> Command {
    Command::new(name)
        .about(about)
        .arg(
            Arg::new("url")
                .long("url")
                .help("Base URL of a running service; without it, one is started in-process on a temporary SQLite file"),
        )
        .arg(
            Arg::new("admin-token")
                .long("admin-token")
                .help("Admin token for --url (default: $DIRICHLET_ADMIN_TOKEN)"),
        )
        .arg(
            Arg::new("data")
                .long("data")
                .default_value("examples/data/breast_cancer.csv")
                .value_parser(value_parser!(PathBuf))
                .help("CSV file with a header line"),
        )
        .arg(
            Arg::new("seed")
                .long("seed")
                .default_value("2024")
                .value_parser(value_parser!(u64))
                .help("Seed of the 70/30 train/test split (not of any privacy noise)"),
        )
        .arg(
            Arg::new("epsilon")
                .long("epsilon")
                .value_delimiter(',')
                .value_parser(value_parser!(f64))
                .help("Total ε per model, comma-separated (default: 0.001,0.003,…,10; --short: 0.1,1,10)"),
        )
        .arg(
            Arg::new("repetitions")
                .long("repetitions")
                .value_parser(value_parser!(usize))
                .help("Models fitted per mechanism and ε (default 10; --short: 1)"),
        )
        .arg(
            Arg::new("order")
                .long("order")
                .default_value("5")
                .value_parser(value_parser!(f64))
                .help("Rényi order λ of every dataset's budget (the paper's λ = 5)"),
        )
        .arg(
            Arg::new("short")
                .long("short")
                .action(ArgAction::SetTrue)
                .help("Few ε values and one repetition (for CI)"),
        )
        .arg(
            Arg::new("row-by-row")
                .long("row-by-row")
                .action(ArgAction::SetTrue)
                .help("Release each table row as its own vector (charges every row); for servers without table releases"),
        )
        .arg(
            Arg::new("out")
                .long("out")
                .value_parser(value_parser!(PathBuf))
                .help("Also write the summary as CSV to this file"),
        )
}

#[derive(Clone)]
pub struct Args {
    /// `--short` was given.
    pub short: bool,
    pub url: Option<String>,
    pub admin_token: Option<String>,
    pub data: PathBuf,
    pub seed: u64,
    pub epsilons: Vec<f64>,
    pub repetitions: usize,
    pub order: f64,
    pub row_by_row: bool,
    pub out: Option<PathBuf>,
}

impl Args {
    pub fn from_matches(m: &ArgMatches) -> Result<Args> {
        let short = m.get_flag("short");
        let epsilons: Vec<f64> = match m.get_many::<f64>("epsilon") {
            Some(values) => values.copied().collect(),
            None if short => SHORT_EPSILONS.to_vec(),
            None => FULL_EPSILONS.to_vec(),
        };
        if epsilons.is_empty() || epsilons.iter().any(|e| !e.is_finite() || *e <= 0.0) {
            return Err("every --epsilon must be a finite number > 0".into());
        }
        let repetitions = m
            .get_one::<usize>("repetitions")
            .copied()
            .unwrap_or(if short { 1 } else { FULL_REPETITIONS });
        if repetitions == 0 {
            return Err("--repetitions must be at least 1".into());
        }
        Ok(Args {
            short,
            url: m.get_one::<String>("url").cloned(),
            admin_token: m
                .get_one::<String>("admin-token")
                .cloned()
                .or_else(|| std::env::var("DIRICHLET_ADMIN_TOKEN").ok()),
            data: m
                .get_one::<PathBuf>("data")
                .cloned()
                .expect("has a default"),
            seed: *m.get_one::<u64>("seed").expect("has a default"),
            epsilons,
            repetitions,
            order: *m.get_one::<f64>("order").expect("has a default"),
            row_by_row: m.get_flag("row-by-row"),
            out: m.get_one::<PathBuf>("out").cloned(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Data: CSV, split, binning

pub struct Frame {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Frame {
    pub fn read(path: &std::path::Path) -> Result<Frame> {
        let mut reader = csv::Reader::from_path(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let columns: Vec<String> = reader.headers()?.iter().map(str::to_string).collect();
        let mut rows = Vec::new();
        for record in reader.records() {
            let record = record?;
            rows.push(record.iter().map(|s| s.trim().to_string()).collect());
        }
        if rows.len() < 10 {
            return Err(format!(
                "{} has {} rows; too few to split",
                path.display(),
                rows.len()
            )
            .into());
        }
        Ok(Frame { columns, rows })
    }

    pub fn column(&self, name: &str) -> Result<usize> {
        self.columns
            .iter()
            .position(|c| c == name)
            .ok_or_else(|| format!("no column `{name}` in the CSV header").into())
    }
}

/// Row indices of the training and test sets: a shuffle by a seeded ChaCha8 (portable, so the
/// split is the same everywhere), the first 70 % for training. The seed only fixes the split;
/// all privacy noise is drawn by the service from its own OS-seeded generator.
pub fn split(n: usize, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let train = (n as f64 * TRAIN_FRACTION).round() as usize;
    let test = order.split_off(train);
    (order, test)
}

/// How one column becomes a cell index.
pub enum Encoding {
    /// Interior edges of quantile bins; a value's bin is the number of edges ≤ it (values
    /// outside the training range fall into the first or last bin), as scikit-learn's
    /// `KBinsDiscretizer(strategy="quantile")` does.
    Bins(Vec<f64>),
    /// The column's categories, sorted.
    Levels(Vec<String>),
}

impl Encoding {
    pub fn cells(&self) -> usize {
        match self {
            Encoding::Bins(edges) => edges.len() + 1,
            Encoding::Levels(levels) => levels.len(),
        }
    }

    pub fn encode(&self, value: &str) -> Result<usize> {
        match self {
            Encoding::Bins(edges) => {
                let x: f64 = value
                    .parse()
                    .map_err(|_| format!("`{value}` is not a number"))?;
                Ok(edges.partition_point(|e| *e <= x))
            }
            Encoding::Levels(levels) => levels
                .binary_search_by(|l| l.as_str().cmp(value))
                .map_err(|_| format!("unknown category `{value}`").into()),
        }
    }
}

/// `BINS` quantile bins of the training values: the numpy-default (linear) quantiles at
/// 1/BINS, …, (BINS−1)/BINS as interior edges, repeated edges merged (a column with ties may get
/// fewer bins).
pub fn quantile_edges(values: &[f64], bins: usize) -> Vec<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let mut edges: Vec<f64> = (1..bins)
        .map(|i| {
            let h = (n - 1) as f64 * i as f64 / bins as f64;
            let lo = h.floor() as usize;
            let hi = (lo + 1).min(n - 1);
            sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
        })
        .collect();
    edges.dedup();
    // An edge at the minimum would leave the first bin empty by construction.
    edges.retain(|e| *e > sorted[0]);
    edges
}

/// A data set as cell indices, split into training and test records.
pub struct Encoded {
    pub names: Vec<String>,
    pub encodings: Vec<Encoding>,
    pub train: Vec<Vec<usize>>,
    pub test: Vec<Vec<usize>>,
}

impl Encoded {
    /// Columns named in `categorical`, columns with a value that is not a number, and columns
    /// with at most `BINS` distinct values are categorical; their categories are the column's
    /// values in the whole file, taken as the public domain of the attribute. Every other column is cut into `BINS` quantile bins on
    /// the training rows only.
    pub fn new(frame: &Frame, seed: u64, categorical: &[&str]) -> Result<Encoded> {
        Self::with_edges(frame, seed, categorical, &[])
    }

    /// [`Encoded::new`], except that the columns named in `fixed` are cut at the edges given
    /// (public, chosen without looking at the data) instead of at training quantiles: some of
    /// their bins may then hold no training record — an empty group.
    pub fn with_edges(
        frame: &Frame,
        seed: u64,
        categorical: &[&str],
        fixed: &[(&str, Vec<f64>)],
    ) -> Result<Encoded> {
        let (train_rows, test_rows) = split(frame.rows.len(), seed);
        let mut encodings = Vec::with_capacity(frame.columns.len());
        for (j, name) in frame.columns.iter().enumerate() {
            if let Some((_, edges)) = fixed.iter().find(|(n, _)| n == name) {
                let increasing =
                    edges.iter().all(|e| e.is_finite()) && edges.windows(2).all(|w| w[0] < w[1]);
                if edges.is_empty() || !increasing {
                    return Err(format!("the edges of `{name}` must be increasing").into());
                }
                encodings.push(Encoding::Bins(edges.clone()));
                continue;
            }
            let column = || frame.rows.iter().map(move |r| r[j].as_str());
            let numeric = column().all(|v| v.parse::<f64>().is_ok_and(f64::is_finite));
            let mut levels: Vec<String> = column().map(str::to_string).collect();
            levels.sort();
            levels.dedup();
            if categorical.contains(&name.as_str()) || !numeric || levels.len() <= BINS {
                if levels.len() < 2 {
                    return Err(format!("column `{name}` has fewer than 2 categories").into());
                }
                encodings.push(Encoding::Levels(levels));
            } else {
                let values: Vec<f64> = train_rows
                    .iter()
                    .map(|&i| frame.rows[i][j].parse().expect("checked numeric"))
                    .collect();
                let edges = quantile_edges(&values, BINS);
                if edges.is_empty() {
                    return Err(format!("column `{name}` is constant on the training set").into());
                }
                encodings.push(Encoding::Bins(edges));
            }
        }
        let encode = |rows: &[usize]| -> Result<Vec<Vec<usize>>> {
            rows.iter()
                .map(|&i| {
                    frame.rows[i]
                        .iter()
                        .zip(&encodings)
                        .map(|(v, e)| e.encode(v))
                        .collect()
                })
                .collect()
        };
        Ok(Encoded {
            names: frame.columns.clone(),
            train: encode(&train_rows)?,
            test: encode(&test_rows)?,
            encodings,
        })
    }

    pub fn cells(&self, column: usize) -> usize {
        self.encodings[column].cells()
    }
}

// ---------------------------------------------------------------------------------------------
// The service

/// A server started by the example itself, in this process, through the library's own start-up
/// code (the same `Application` the binary runs): nothing to build or find on disk, and it is
/// stopped and its temporary SQLite file removed when the example ends.
/// The service started in-process (as the integration tests start it), with its SQLite file's
/// directory.
struct LocalServer {
    server: dirichlet_release::startup::LocalServer,
    _dir: tempfile::TempDir,
}

pub struct Service {
    pub base: String,
    token: String,
    http: reqwest::Client,
    local: Option<LocalServer>,
    pub row_by_row: bool,
    /// Requests that released something (for the timing line).
    pub releases: std::sync::atomic::AtomicUsize,
    /// Plan requests (for the timing line).
    pub plans: std::sync::atomic::AtomicUsize,
}

/// What a table release returned.
pub struct Released {
    pub rows: Vec<Vec<f64>>,
    /// `cost.epsilon` of the responses (the charge).
    pub charged: f64,
}

impl Service {
    pub async fn connect(args: &Args) -> Result<Service> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .build()?;
        let (base, token, local) = match &args.url {
            Some(url) => {
                let token = args
                    .admin_token
                    .clone()
                    .ok_or("--url needs --admin-token or DIRICHLET_ADMIN_TOKEN")?;
                (url.trim_end_matches('/').to_string(), token, None)
            }
            None => {
                let dir = tempfile::tempdir()?;
                let token = generate_admin_token();
                let mut settings = Settings::defaults();
                settings.listen = "127.0.0.1:0".parse()?;
                settings.database_url =
                    format!("sqlite://{}", dir.path().join("ledger.db").display());
                settings.admin_token = Some(token.as_str().into());
                let server = Application::build(settings).await?.spawn();
                let base = server.address.clone();
                eprintln!(
                    "started the service in-process at {base} (SQLite in a temporary directory)"
                );
                let local = LocalServer { server, _dir: dir };
                (base, token, Some(local))
            }
        };
        Ok(Service {
            base,
            token,
            http,
            local,
            row_by_row: args.row_by_row,
            releases: Default::default(),
            plans: Default::default(),
        })
    }

    /// Stop an in-process server and wait for it (so the SQLite file is closed before its
    /// directory goes).
    pub async fn shutdown(mut self) -> Result<()> {
        if let Some(local) = self.local.take() {
            local.server.stop().await?;
        }
        Ok(())
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value> {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            // A problem document never echoes counts (house rule), so it is safe to print.
            return Err(format!("{method} {path}: HTTP {status}: {text}").into());
        }
        Ok(serde_json::from_str(&text)?)
    }

    /// A dataset whose whole budget is `epsilon` of Rényi DP at `order`, neighbours differing by
    /// replacing one record (the paper's Δ₂² = 2, Δ∞ = 1).
    pub async fn create_dataset(&self, name: &str, order: f64, epsilon: f64) -> Result<String> {
        let body = json!({
            "name": name,
            "budget": {"order": order, "epsilon": epsilon},
            "neighbouring": "replace_one",
        });
        let created = self
            .call(reqwest::Method::POST, "/v1/datasets", Some(&body))
            .await?;
        created["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("no id in {created}").into())
    }

    /// Release a whole table — one charge, the price of one vector, since its rows count
    /// disjoint groups of records — or, with `row_by_row`, each row as its own vector release
    /// (the interim path for a server without table releases: every row is charged).
    /// `smoothing` is the `gaussian` and `laplace` pseudo-count (post-processing: the output
    /// is (max(z, 0) + k)/Σ instead of the projection, at the same price); `None` for the
    /// projection, and for `dirichlet`, which takes no such field.
    pub async fn release_table(
        &self,
        dataset: &str,
        rows: &[Vec<f64>],
        mechanism: &str,
        epsilon: f64,
        smoothing: Option<f64>,
        label: &str,
    ) -> Result<Released> {
        let path = format!("/v1/datasets/{dataset}/releases");
        let with_smoothing = |mut body: Value| {
            if let Some(k) = smoothing {
                body["smoothing"] = json!(k);
            }
            body
        };
        if self.row_by_row {
            let mut out = Vec::with_capacity(rows.len());
            let mut charged = 0.0;
            for row in rows {
                let body = with_smoothing(
                    json!({"counts": row, "epsilon": epsilon, "mechanism": mechanism}),
                );
                let released = self.call(reqwest::Method::POST, &path, Some(&body)).await?;
                self.releases
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                out.push(probabilities(&released["distribution"], row.len())?);
                charged += cost(&released)?;
            }
            return Ok(Released { rows: out, charged });
        }
        let body = with_smoothing(json!({
            "table": rows,
            "epsilon": epsilon,
            "mechanism": mechanism,
            "label": label,
        }));
        let released = self.call(reqwest::Method::POST, &path, Some(&body)).await?;
        self.releases
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let distributions = released["distributions"]
            .as_array()
            .ok_or_else(|| format!("no distributions in the response to {label}"))?;
        if distributions.len() != rows.len() {
            return Err(format!(
                "{label}: {} rows sent, {} returned",
                rows.len(),
                distributions.len()
            )
            .into());
        }
        let out = distributions
            .iter()
            .zip(rows)
            .map(|(d, row)| probabilities(d, row.len()))
            .collect::<Result<_>>()?;
        Ok(Released {
            rows: out,
            charged: cost(&released)?,
        })
    }

    /// `POST /v1/datasets/{id}/plan`: the planner's answer for `items` (public inputs only;
    /// nothing is charged).
    pub async fn plan(&self, dataset: &str, items: &[Value]) -> Result<Value> {
        self.plans
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.call(
            reqwest::Method::POST,
            &format!("/v1/datasets/{dataset}/plan"),
            Some(&json!({ "items": items })),
        )
        .await
    }

    /// `spent` of the dataset's budget, as the ledger reports it.
    pub async fn spent(&self, dataset: &str) -> Result<f64> {
        let budget = self
            .call(
                reqwest::Method::GET,
                &format!("/v1/datasets/{dataset}/budget"),
                None,
            )
            .await?;
        budget["spent"]
            .as_f64()
            .ok_or_else(|| format!("no spent in {budget}").into())
    }
}

fn probabilities(value: &Value, cells: usize) -> Result<Vec<f64>> {
    let row: Vec<f64> = value
        .as_array()
        .ok_or("a distribution is not an array")?
        .iter()
        .map(|v| v.as_f64().ok_or("a probability is not a number"))
        .collect::<std::result::Result<_, _>>()?;
    if row.len() != cells {
        return Err(format!("a distribution has {} cells, expected {cells}", row.len()).into());
    }
    Ok(row)
}

fn cost(released: &Value) -> Result<f64> {
    released["cost"]["epsilon"]
        .as_f64()
        .ok_or_else(|| "no cost.epsilon in a release response".into())
}

// ---------------------------------------------------------------------------------------------
// Fitting a model's tables

/// One table of a model: one row per disjoint group of training records (a class, a parent
/// configuration), one cell per value of the modelled variable.
pub struct CountTable {
    pub label: String,
    pub rows: Vec<Vec<f64>>,
}

/// Probabilities per table, in the order of the `CountTable`s.
pub type Fitted = Vec<Vec<Vec<f64>>>;

/// Row-normalised counts plus `pseudo` in every cell: `pseudo = 0` is the maximum-likelihood
/// estimate of the paper's eq. 10/12 (a row with no records is uniform), `pseudo = 1` the
/// add-one (Laplace-smoothed) estimate most naive Bayes libraries default to.
pub fn maximum_likelihood(tables: &[CountTable], pseudo: f64) -> Fitted {
    tables
        .iter()
        .map(|t| {
            t.rows
                .iter()
                .map(|row| {
                    let n: f64 = row.iter().map(|c| c + pseudo).sum();
                    if n > 0.0 {
                        row.iter().map(|c| (c + pseudo) / n).collect()
                    } else {
                        vec![1.0 / row.len() as f64; row.len()]
                    }
                })
                .collect()
        })
        .collect()
}

pub fn uniform(tables: &[CountTable]) -> Fitted {
    tables
        .iter()
        .map(|t| {
            t.rows
                .iter()
                .map(|row| vec![1.0 / row.len() as f64; row.len()])
                .collect()
        })
        .collect()
}

/// A model fitted through the service, and what its dataset was charged.
pub struct PrivateFit {
    pub tables: Fitted,
    /// The ledger's `spent` after all tables.
    pub spent: f64,
    /// The budget the dataset was registered with.
    pub budget: f64,
    /// Releases made (tables, or rows on the row-by-row path).
    pub releases: usize,
}

/// One step of the ledger's grid.
pub const GRID_STEP: f64 = 1.0 / (1u64 << dirichlet_release::ledger::charge::QUANTUM_BITS) as f64;

/// What one table of a model is released with: the ε asked for, and the `gaussian`/`laplace`
/// pseudo-count (`None`: the projection onto the simplex, and always for `dirichlet`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TableSpend {
    pub epsilon: f64,
    pub smoothing: Option<f64>,
}

/// The paper's even split: `epsilon / T` for each of the T tables, no smoothing.
pub fn even_split(tables: usize, epsilon: f64) -> Vec<TableSpend> {
    vec![
        TableSpend {
            epsilon: epsilon / tables as f64,
            smoothing: None,
        };
        tables
    ]
}

/// Register a dataset with budget `epsilon` and release every table at `epsilon / T` (the
/// paper's even split over the T tables: basic composition over tables, parallel composition
/// over the disjoint rows of each). On the row-by-row path every row is charged, so the
/// dataset needs `epsilon × rows / T`.
pub async fn fit_private(
    service: &Service,
    name: &str,
    tables: &[CountTable],
    mechanism: &str,
    epsilon: f64,
    order: f64,
) -> Result<PrivateFit> {
    let spends = even_split(tables.len(), epsilon);
    fit_split(service, name, tables, mechanism, epsilon, &spends, order).await
}

/// Register a dataset with budget `epsilon` and release table i with `spends[i]`, whose ε add
/// up to `epsilon`. On the row-by-row path every row is charged, so the dataset needs
/// Σᵢ εᵢ × rowsᵢ.
pub async fn fit_split(
    service: &Service,
    name: &str,
    tables: &[CountTable],
    mechanism: &str,
    epsilon: f64,
    spends: &[TableSpend],
    order: f64,
) -> Result<PrivateFit> {
    assert_eq!(spends.len(), tables.len());
    let budget = if service.row_by_row {
        tables
            .iter()
            .zip(spends)
            .map(|(t, s)| s.epsilon * t.rows.len() as f64)
            .sum()
    } else {
        epsilon
    };
    let releases = if service.row_by_row {
        tables.iter().map(|t| t.rows.len()).sum()
    } else {
        tables.len()
    };
    let dataset = service.create_dataset(name, order, budget).await?;
    let mut fitted = Vec::with_capacity(tables.len());
    let mut charged = 0.0;
    for (table, spend) in tables.iter().zip(spends) {
        let released = service
            .release_table(
                &dataset,
                &table.rows,
                mechanism,
                spend.epsilon,
                spend.smoothing,
                &table.label,
            )
            .await
            .map_err(|e| format!("{name}, {}: {e}", table.label))?;
        fitted.push(released.rows);
        charged += released.charged;
    }
    let spent = service.spent(&dataset).await?;
    if (charged - spent).abs() > GRID_STEP {
        return Err(format!(
            "{name}: the responses' costs add up to {charged}, the ledger says {spent}"
        )
        .into());
    }
    Ok(PrivateFit {
        tables: fitted,
        spent,
        budget,
        releases,
    })
}

// ---------------------------------------------------------------------------------------------
// Splitting a model's ε by the planner, for a common KL target

/// The confidence of every table's KL target: each row's D_KL(x/n ‖ y) ≤ t with probability
/// at least this (per row, as the planner states it).
pub const KL_CONFIDENCE: f64 = 0.95;
/// Plan requests per (mechanism, ε): the bracket's search and the bisection together.
pub const MAX_PLAN_CALLS: usize = 30;
/// The bisection stops when the bracket [lo, hi] of the target is this narrow (relative):
/// 10⁻⁴ for the experiments (about 15 halvings; the plan's cost within about 10⁻³ of ε), 10⁻²
/// for `--short` (about 8), whose point is that every path runs, not the last digits.
pub fn t_tolerance(short: bool) -> f64 {
    if short {
        1e-2
    } else {
        1e-4
    }
}

/// A model's ε split by the planner: the common KL target t whose plan costs at most ε, and
/// what each table is released with.
#[derive(Clone, Debug)]
pub struct KlPlan {
    /// The KL target every table was planned for (nats, per row, at `KL_CONFIDENCE`).
    pub target: f64,
    /// Per table: the planned ε scaled up so that they add up to the model's ε exactly, and
    /// the planner's pseudo-count for a baseline.
    pub spends: Vec<TableSpend>,
    /// The plan's `total_cost` over ε (at most 1; what the scaling spreads is the rest).
    pub planned_fraction: f64,
    pub calls: usize,
}

/// One plan item per table: d cells, its rows, a public total per row, `mechanism` named (the
/// planner calibrates it and, for a baseline, chooses its smoothing), target KL ≤ `kl`.
///
/// The per-row total is the training size over the rows, `n_total / rows`: the training size
/// is public under `replace_one` (neighbours keep it), the rows are the table's shape, and the
/// actual row totals (class sizes, parent configurations' counts) are private, so the plan is
/// for a row of average size rather than a floor under every row. A row smaller than that gets
/// less than the target; the split is what this experiment is about, not the guarantee.
pub fn kl_plan_items(tables: &[CountTable], n_total: f64, mechanism: &str, kl: f64) -> Vec<Value> {
    tables
        .iter()
        .map(|t| {
            json!({
                "d": t.rows[0].len(),
                "rows": t.rows.len(),
                "n": n_total / t.rows.len() as f64,
                "mechanism": mechanism,
                "target": {"kl": kl, "confidence": KL_CONFIDENCE},
            })
        })
        .collect()
}

/// The plan at KL target `kl`: its total cost and what each table gets, or `None` when some
/// table cannot reach it. Tables of the same shape are the same plan item, and the planner
/// answers every item on its own, so each distinct item is asked once (a naive Bayes model's 30
/// feature tables are two or three items): the answers are the planner's, the total is their
/// sum over the tables.
async fn plan_at(
    service: &Service,
    dataset: &str,
    tables: &[CountTable],
    n_total: f64,
    mechanism: &str,
    kl: f64,
) -> Result<Option<(f64, Vec<TableSpend>)>> {
    let items = kl_plan_items(tables, n_total, mechanism, kl);
    let mut unique: Vec<Value> = Vec::new();
    let index: Vec<usize> = items
        .iter()
        .map(|item| match unique.iter().position(|u| u == item) {
            Some(i) => i,
            None => {
                unique.push(item.clone());
                unique.len() - 1
            }
        })
        .collect();
    let plan = service.plan(dataset, &unique).await?;
    if plan["unreachable"].as_u64() != Some(0) {
        return Ok(None);
    }
    let answers = plan["items"]
        .as_array()
        .filter(|a| a.len() == unique.len())
        .ok_or_else(|| format!("not one answer per item in a plan: {plan}"))?
        .iter()
        .map(|item| {
            let epsilon = item["epsilon"]
                .as_f64()
                .ok_or_else(|| format!("a planned item without epsilon: {item}"))?;
            let cost = item["cost"]
                .as_f64()
                .ok_or_else(|| format!("a planned item without cost: {item}"))?;
            // The dataset's order is the ledger's, so a planned ε is its own cost.
            if (cost - epsilon).abs() > GRID_STEP {
                return Err(format!("a planned ε of {epsilon} costs {cost}").into());
            }
            let smoothing = item["parameters"]["smoothing"].as_f64();
            Ok(TableSpend { epsilon, smoothing })
        })
        .collect::<Result<Vec<_>>>()?;
    let spends: Vec<TableSpend> = index.iter().map(|&i| answers[i]).collect();
    Ok(Some((spends.iter().map(|s| s.epsilon).sum(), spends)))
}

/// Split `epsilon` over `tables` by the planner: bisect (in ln t) for the smallest common KL
/// target t whose plan — every table planned with `mechanism` for D_KL ≤ t — costs at most
/// `epsilon`, until the bracket is within a relative `tolerance` or after `MAX_PLAN_CALLS` plan
/// requests, then scale the planned ε up to add up to `epsilon` exactly (the plan's cost is
/// within about the bisection's last step of it).
/// `dataset` only gives the planner its order and relation; nothing is charged.
pub async fn kl_split(
    service: &Service,
    dataset: &str,
    tables: &[CountTable],
    n_total: f64,
    mechanism: &str,
    epsilon: f64,
    tolerance: f64,
) -> Result<KlPlan> {
    let mut calls = 0usize;
    let fits =
        |p: &Option<(f64, Vec<TableSpend>)>| matches!(p, Some((cost, _)) if *cost <= epsilon);
    // The bracket: `lo` does not fit (or nothing reaches it), `hi` fits.
    let mut t = 1.0f64;
    let first = plan_at(service, dataset, tables, n_total, mechanism, t).await?;
    calls += 1;
    let (mut lo, mut hi, mut best);
    if fits(&first) {
        hi = t;
        best = first.expect("fits").1;
        loop {
            t /= 8.0;
            let p = plan_at(service, dataset, tables, n_total, mechanism, t).await?;
            calls += 1;
            if !fits(&p) {
                lo = t;
                break;
            }
            hi = t;
            best = p.expect("fits").1;
            if calls >= MAX_PLAN_CALLS / 2 {
                return Err(format!(
                    "{mechanism} at ε = {epsilon}: even KL ≤ {t:e} fits; no bracket"
                )
                .into());
            }
        }
    } else {
        lo = t;
        loop {
            t *= 8.0;
            let p = plan_at(service, dataset, tables, n_total, mechanism, t).await?;
            calls += 1;
            if fits(&p) {
                hi = t;
                best = p.expect("fits").1;
                break;
            }
            lo = t;
            if calls >= MAX_PLAN_CALLS / 2 {
                return Err(format!(
                    "{mechanism} at ε = {epsilon}: no KL target up to {t} nats fits the budget"
                )
                .into());
            }
        }
    }
    // The plan's cost falls short of ε by about the bracket's last step (what the scaling
    // below spreads).
    while calls < MAX_PLAN_CALLS && hi / lo > 1.0 + tolerance {
        let mid = (lo * hi).sqrt();
        let p = plan_at(service, dataset, tables, n_total, mechanism, mid).await?;
        calls += 1;
        if fits(&p) {
            hi = mid;
            best = p.expect("fits").1;
        } else {
            lo = mid;
        }
    }
    let planned: f64 = best.iter().map(|s| s.epsilon).sum();
    let scale = epsilon / planned;
    Ok(KlPlan {
        target: hi,
        spends: best
            .into_iter()
            .map(|s| TableSpend {
                epsilon: s.epsilon * scale,
                ..s
            })
            .collect(),
        planned_fraction: planned / epsilon,
        calls,
    })
}

/// A label of at most 200 characters (the service's limit), cut on a character boundary.
pub fn label(text: String) -> String {
    text.chars().take(200).collect()
}

// ---------------------------------------------------------------------------------------------
// Results

/// Metrics of one fitted model.
pub type Scores = Vec<(&'static str, f64)>;

#[derive(Default)]
struct Cell {
    values: Vec<f64>,
    spent_ratio: Vec<f64>,
}

/// Everything measured, keyed by (model, ε, metric).
#[derive(Default)]
pub struct Results {
    cells: BTreeMap<(usize, u64, &'static str), Cell>,
    models: Vec<String>,
    /// Budget checks that failed (spent ≠ budget).
    pub budget_failures: Vec<String>,
}

impl Results {
    fn model_index(&mut self, model: &str) -> usize {
        match self.models.iter().position(|m| m == model) {
            Some(i) => i,
            None => {
                self.models.push(model.to_string());
                self.models.len() - 1
            }
        }
    }

    /// A model's scores at `epsilon` (None for the non-private and uniform references, which
    /// do not depend on ε).
    pub fn add(
        &mut self,
        model: &str,
        epsilon: Option<f64>,
        scores: &Scores,
        spent: Option<(f64, f64, usize)>,
    ) {
        let m = self.model_index(model);
        let key = epsilon.map_or(u64::MAX, f64::to_bits);
        for (metric, value) in scores {
            let cell = self.cells.entry((m, key, metric)).or_default();
            cell.values.push(*value);
            if let (Some((spent, _, _)), Some(eps)) = (spent, epsilon) {
                cell.spent_ratio.push(spent / eps);
            }
        }
        if let (Some((spent, budget, releases)), Some(eps)) = (spent, epsilon) {
            // Exact splits: each release is charged the largest grid value at or below what was
            // asked, and the budget is rounded down to the grid, so a model spends its budget
            // less at most one grid step per release and one for the budget. Anything else is a
            // real discrepancy between what was asked and what was charged.
            if spent > budget || budget - spent > (releases + 1) as f64 * GRID_STEP {
                self.budget_failures.push(format!(
                    "{model} at ε = {eps}: spent {spent} of a budget of {budget}"
                ));
            }
        }
    }

    /// Print the summary and, if asked, write it as CSV: one line per (model, ε, metric) with
    /// the mean, its standard error over repetitions, and spent/ε of the private models.
    pub fn report(&self, example: &str, out: Option<&std::path::Path>) -> Result<()> {
        let mut csv = String::from(
            "example,model,epsilon,metric,mean,stderr,repetitions,spent_over_epsilon_min,spent_over_epsilon_max\n",
        );
        println!(
            "{:<18} {:>8} {:<22} {:>12} {:>10} {:>5} {:>24}",
            "model", "epsilon", "metric", "mean", "stderr", "reps", "spent/epsilon (min..max)"
        );
        for ((m, key, metric), cell) in &self.cells {
            let eps = (*key != u64::MAX).then(|| f64::from_bits(*key));
            let n = cell.values.len() as f64;
            let mean = cell.values.iter().sum::<f64>() / n;
            let stderr = if cell.values.len() > 1 {
                let var = cell.values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
                (var / n).sqrt()
            } else {
                f64::NAN
            };
            let (lo, hi) = cell
                .spent_ratio
                .iter()
                .fold((f64::NAN, f64::NAN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
            let eps_text = eps.map_or("-".to_string(), |e| format!("{e}"));
            let ratio = if cell.spent_ratio.is_empty() {
                "-".to_string()
            } else {
                format!("{lo:.9}..{hi:.9}")
            };
            println!(
                "{:<18} {:>8} {:<22} {:>12.5} {:>10.5} {:>5} {:>24}",
                self.models[*m],
                eps_text,
                metric,
                mean,
                stderr,
                cell.values.len(),
                ratio
            );
            let opt = |v: f64| {
                if v.is_nan() {
                    String::new()
                } else {
                    format!("{v}")
                }
            };
            csv.push_str(&format!(
                "{example},{},{},{metric},{mean},{},{},{},{}\n",
                self.models[*m],
                eps.map_or(String::new(), |e| format!("{e}")),
                opt(stderr),
                cell.values.len(),
                opt(lo),
                opt(hi),
            ));
        }
        if let Some(path) = out {
            std::fs::write(path, csv)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        Ok(())
    }
}

/// Fit and score the non-private and uniform references, then every private mechanism at every
/// ε, `repetitions` times, each model on a dataset of its own with budget ε; print the summary.
/// Fails if any private model's ledger did not spend exactly its budget.
pub async fn run_experiment(
    example: &str,
    args: &Args,
    tables: &[CountTable],
    score: impl Fn(&Fitted) -> Scores,
) -> Result<()> {
    // Rows with no training records (empty groups) are released like any other: dropping them
    // would publish which groups are empty. Counted here for the summary line only.
    let empty = empty_rows(tables);
    let started = Instant::now();
    let service = Service::connect(args).await?;
    let mut results = Results::default();
    results.add(
        "non-private",
        None,
        &score(&maximum_likelihood(tables, 0.0)),
        None,
    );
    results.add(
        "non-private+1",
        None,
        &score(&maximum_likelihood(tables, 1.0)),
        None,
    );
    results.add("uniform", None, &score(&uniform(tables)), None);
    // Every table counts each training record once, so any table's sum is the training size
    // (public under `replace_one`: neighbours keep it).
    let n_total: f64 = tables[0].rows.iter().flatten().sum();
    let mut shapes: Vec<(usize, usize)> = tables
        .iter()
        .map(|t| (t.rows.len(), t.rows[0].len()))
        .collect();
    shapes.sort_unstable();
    shapes.dedup();
    eprintln!(
        "{} tables of {} distinct shapes (rows × cells): {} plan items per request",
        tables.len(),
        shapes.len(),
        shapes.len()
    );
    let largest = args.epsilons.iter().copied().fold(0.0, f64::max);
    // Plans see only the dataset's order, relation and public inputs; this one is never spent.
    let planning = service
        .create_dataset(&format!("{example} planning"), args.order, largest)
        .await?;
    for &epsilon in &args.epsilons {
        let mut plans = Vec::new();
        // The three searches are independent: run them side by side (the server plans on
        // every core), which is most of what `--short` spends time on.
        let tolerance = t_tolerance(args.short);
        let search = |mechanism: &'static str| {
            let (service, planning) = (&service, &planning);
            async move {
                kl_split(
                    service, planning, tables, n_total, mechanism, epsilon, tolerance,
                )
                .await
                .map_err(|e| format!("planning {mechanism} at ε = {epsilon}: {e}"))
            }
        };
        let [m0, m1, m2] = PRIVATE_MECHANISMS;
        let (p0, p1, p2) = tokio::join!(search(m0), search(m1), search(m2));
        for (mechanism, plan) in [(m0, p0?), (m1, p1?), (m2, p2?)] {
            results.add(
                &format!("{PLANNED}{mechanism}"),
                Some(epsilon),
                &plan_scores(&plan, epsilon),
                None,
            );
            plans.push((mechanism, plan));
        }
        let per_table = epsilon / tables.len() as f64;
        let mut variants: Vec<(String, &str, Vec<TableSpend>)> = PRIVATE_MECHANISMS
            .iter()
            .map(|&m| (m.to_string(), m, even_split(tables.len(), epsilon)))
            .collect();
        for (mechanism, plan) in &plans {
            variants.push((
                format!("{PLANNED}{mechanism}"),
                mechanism,
                plan.spends.clone(),
            ));
        }
        // The controls: the planner's pseudo-counts with the even split, so that what the
        // planned split adds can be told apart from what smoothing adds.
        for (mechanism, plan) in plans.iter().filter(|(m, _)| *m != "dirichlet") {
            let spends = plan
                .spends
                .iter()
                .map(|s| TableSpend {
                    epsilon: per_table,
                    smoothing: s.smoothing,
                })
                .collect();
            variants.push((format!("{SMOOTHED}{mechanism}"), mechanism, spends));
        }
        for (model, mechanism, spends) in &variants {
            for rep in 0..args.repetitions {
                let name = format!("{example} {model} eps={epsilon} rep={rep}");
                let fit = fit_split(
                    &service, &name, tables, mechanism, epsilon, spends, args.order,
                )
                .await?;
                results.add(
                    model,
                    Some(epsilon),
                    &score(&fit.tables),
                    Some((fit.spent, fit.budget, fit.releases)),
                );
            }
        }
        eprintln!(
            "ε = {epsilon} done ({:.1} s): KL targets planned {}",
            started.elapsed().as_secs_f64(),
            plans
                .iter()
                .map(|(m, p)| {
                    // Each shape's ε over the even split's (tables of a shape get the same).
                    let shares: Vec<String> = shapes
                        .iter()
                        .map(|&(rows, d)| {
                            let i = tables
                                .iter()
                                .position(|t| (t.rows.len(), t.rows[0].len()) == (rows, d))
                                .expect("a table of each shape");
                            format!("{rows}×{d}: {:.3}", p.spends[i].epsilon / per_table)
                        })
                        .collect();
                    format!(
                        "{m} {:.4} ({} plans; ε per table over ε/T by shape {})",
                        p.target,
                        p.calls,
                        shares.join(", ")
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let releases = service.releases.load(std::sync::atomic::Ordering::Relaxed);
    let plans = service.plans.load(std::sync::atomic::Ordering::Relaxed);
    service.shutdown().await?;
    println!(
        "\n{example}: {} tables per model ({empty} of their {} rows empty: no training record), split evenly or by the planner ({PLANNED}), {} per table; {} {} and {plans} plans in {:.1} s{}",
        tables.len(),
        tables.iter().map(|t| t.rows.len()).sum::<usize>(),
        if args.row_by_row {
            "row by row (every row charged)"
        } else {
            "one charge"
        },
        releases,
        if args.row_by_row {
            "row releases"
        } else {
            "table releases"
        },
        started.elapsed().as_secs_f64(),
        if args.row_by_row {
            " [interim path]"
        } else {
            ""
        },
    );
    results.report(example, args.out.as_deref())?;
    if !results.budget_failures.is_empty() {
        for failure in &results.budget_failures {
            eprintln!("budget check failed: {failure}");
        }
        return Err("a model's ledger did not spend exactly its budget".into());
    }
    Ok(())
}

/// The models whose ε is split by the planner for a common KL target (`kl_split`).
pub const PLANNED: &str = "planned:";
/// The baselines with the planner's pseudo-counts but the even split (the controls).
pub const SMOOTHED: &str = "smoothed:";

/// What a KL plan chose, as rows of the summary: the common target, the largest and smallest
/// table's ε relative to the even split's (ε/T), what the plan cost before scaling, and the
/// range of the baselines' pseudo-counts.
fn plan_scores(plan: &KlPlan, epsilon: f64) -> Scores {
    let even = epsilon / plan.spends.len() as f64;
    let shares = plan.spends.iter().map(|s| s.epsilon / even);
    let mut scores = vec![
        ("plan_kl_target", plan.target),
        (
            "plan_share_min",
            shares.clone().fold(f64::INFINITY, f64::min),
        ),
        ("plan_share_max", shares.fold(0.0, f64::max)),
        ("plan_cost_over_epsilon", plan.planned_fraction),
    ];
    let smoothing: Vec<f64> = plan.spends.iter().filter_map(|s| s.smoothing).collect();
    if !smoothing.is_empty() {
        scores.push((
            "plan_smoothing_min",
            smoothing.iter().copied().fold(f64::INFINITY, f64::min),
        ));
        scores.push((
            "plan_smoothing_max",
            smoothing.iter().copied().fold(0.0, f64::max),
        ));
    }
    scores
}

/// How many rows of `tables` count no training record.
pub fn empty_rows(tables: &[CountTable]) -> usize {
    tables
        .iter()
        .flat_map(|t| &t.rows)
        .filter(|row| row.iter().all(|&c| c == 0.0))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_edges_are_numpys_linear_percentiles() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        let edges = quantile_edges(&values, 10);
        // numpy.percentile(range(1, 101), [10, 20, …, 90]) = 10.9, 20.8, …, 90.1
        let expected: Vec<f64> = (1..10)
            .map(|i| 10.0 * i as f64 + 1.0 - 0.1 * i as f64)
            .collect();
        assert_eq!(edges.len(), 9);
        for (e, x) in edges.iter().zip(&expected) {
            assert!((e - x).abs() < 1e-12, "{edges:?}");
        }
    }

    #[test]
    fn tied_quantiles_merge_and_no_edge_sits_at_the_minimum() {
        let values = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0];
        let edges = quantile_edges(&values, 10);
        // Quantiles 0.1…0.7 are 0 (dropped: the minimum), 0.8 → 0.2, 0.9 → 1.1.
        assert_eq!(edges.len(), 2, "{edges:?}");
        assert!((edges[0] - 0.2).abs() < 1e-12 && (edges[1] - 1.1).abs() < 1e-12);
        let bins = Encoding::Bins(edges);
        assert_eq!(bins.cells(), 3);
        assert_eq!(bins.encode("0").unwrap(), 0);
        assert_eq!(bins.encode("1").unwrap(), 1);
        assert_eq!(bins.encode("2").unwrap(), 2);
    }

    #[test]
    fn a_value_on_an_edge_goes_up_and_outsiders_go_to_the_end_bins() {
        let bins = Encoding::Bins(vec![1.0, 2.0]);
        assert_eq!(bins.encode("-5").unwrap(), 0);
        assert_eq!(bins.encode("1").unwrap(), 1);
        assert_eq!(bins.encode("1.999").unwrap(), 1);
        assert_eq!(bins.encode("2").unwrap(), 2);
        assert_eq!(bins.encode("1e9").unwrap(), 2);
        assert!(bins.encode("abc").is_err());
        let levels = Encoding::Levels(vec!["benign".into(), "malignant".into()]);
        assert_eq!(levels.encode("malignant").unwrap(), 1);
        assert!(levels.encode("unknown").is_err());
    }

    #[test]
    fn the_split_is_70_30_disjoint_complete_and_fixed_by_the_seed() {
        let (train, test) = split(569, 2024);
        assert_eq!((train.len(), test.len()), (398, 171));
        let mut all: Vec<usize> = train.iter().chain(&test).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..569).collect::<Vec<_>>());
        assert_eq!(split(569, 2024), (train.clone(), test));
        assert_ne!(split(569, 2025).0, train);
    }

    #[test]
    fn the_shipped_data_encodes_as_documented() {
        let frame = Frame::read(std::path::Path::new("examples/data/breast_cancer.csv")).unwrap();
        assert_eq!((frame.rows.len(), frame.columns.len()), (569, 31));
        let data = Encoded::new(&frame, 2024, &["diagnosis"]).unwrap();
        let class = frame.column("diagnosis").unwrap();
        assert_eq!(data.cells(class), 2);
        for j in (0..31).filter(|&j| j != class) {
            assert!((2..=10).contains(&data.cells(j)), "{}", data.names[j]);
        }
        // 212 malignant, 357 benign in the file.
        let malignant = data
            .train
            .iter()
            .chain(&data.test)
            .filter(|r| r[class] == 1)
            .count();
        assert_eq!(malignant, 212);
    }

    #[test]
    fn maximum_likelihood_with_and_without_pseudo_counts() {
        let tables = [CountTable {
            label: "t".into(),
            rows: vec![vec![3.0, 1.0, 0.0], vec![0.0, 0.0, 0.0]],
        }];
        let mle = maximum_likelihood(&tables, 0.0);
        assert_eq!(mle[0][0], vec![0.75, 0.25, 0.0]);
        assert_eq!(mle[0][1], vec![1.0 / 3.0; 3]);
        let smoothed = maximum_likelihood(&tables, 1.0);
        assert_eq!(smoothed[0][0], vec![4.0 / 7.0, 2.0 / 7.0, 1.0 / 7.0]);
        assert_eq!(uniform(&tables)[0][0], vec![1.0 / 3.0; 3]);
    }

    /// Tables with empty rows (and an all-zero vector) go through an in-process
    /// service for every mechanism, as one release each and row by row: every row comes back a
    /// distribution and every ledger spends exactly its budget.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn empty_rows_are_released_through_the_service() {
        let tables = vec![
            CountTable {
                label: "with empty groups".into(),
                rows: vec![vec![0.0; 3], vec![5.0, 0.0, 2.0], vec![0.0; 3]],
            },
            CountTable {
                label: "no records at all".into(),
                rows: vec![vec![0.0, 0.0]],
            },
        ];
        assert_eq!(empty_rows(&tables), 3);
        for row_by_row in [false, true] {
            let args = Args {
                short: true,
                url: None,
                admin_token: None,
                data: PathBuf::new(),
                seed: 1,
                epsilons: vec![1.0],
                repetitions: 1,
                order: PAPER_ORDER,
                row_by_row,
                out: None,
            };
            let service = Service::connect(&args).await.unwrap();
            for mechanism in PRIVATE_MECHANISMS {
                let fit = fit_private(&service, mechanism, &tables, mechanism, 1.0, PAPER_ORDER)
                    .await
                    .unwrap();
                for (table, fitted) in tables.iter().zip(&fit.tables) {
                    assert_eq!(fitted.len(), table.rows.len());
                    for row in fitted {
                        assert_eq!(row.len(), table.rows[0].len());
                        assert!(row.iter().all(|p| p.is_finite() && *p >= 0.0));
                        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{row:?}");
                    }
                }
                let mut results = Results::default();
                results.add(
                    mechanism,
                    Some(1.0),
                    &vec![("m", 0.0)],
                    Some((fit.spent, fit.budget, fit.releases)),
                );
                assert!(
                    results.budget_failures.is_empty(),
                    "{mechanism}: {:?}",
                    results.budget_failures
                );
            }
            service.shutdown().await.unwrap();
        }
    }

    /// The planner's split: for each mechanism, a common KL target whose plan fits ε, the
    /// tables' ε adding up to ε exactly after the scaling, the baselines smoothed and the
    /// Dirichlet mechanism not, and the split uneven where the tables' shapes differ (a
    /// 2-cell vector of 400 records needs less ε for the same KL than 10 rows of 10 cells of 40).
    /// Then a model fitted with it spends exactly its budget.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_planners_split_spends_the_budget_for_one_kl_target() {
        let tables = vec![
            CountTable {
                label: "class".into(),
                rows: vec![vec![150.0, 250.0]],
            },
            CountTable {
                label: "feature | class".into(),
                rows: (0..10)
                    .map(|i| (0..10).map(|j| ((i + j) % 7) as f64).collect())
                    .collect(),
            },
        ];
        let args = Args {
            short: true,
            url: None,
            admin_token: None,
            data: PathBuf::new(),
            seed: 1,
            epsilons: vec![1.0],
            repetitions: 1,
            order: PAPER_ORDER,
            row_by_row: false,
            out: None,
        };
        let service = Service::connect(&args).await.unwrap();
        let planning = service
            .create_dataset("planning", PAPER_ORDER, 1.0)
            .await
            .unwrap();
        for mechanism in PRIVATE_MECHANISMS {
            let plan = kl_split(
                &service,
                &planning,
                &tables,
                400.0,
                mechanism,
                1.0,
                t_tolerance(false),
            )
            .await
            .unwrap();
            assert!(plan.calls <= MAX_PLAN_CALLS, "{mechanism}: {plan:?}");
            assert!(
                plan.planned_fraction <= 1.0 && plan.planned_fraction > 0.99,
                "{mechanism}: {plan:?}"
            );
            let total: f64 = plan.spends.iter().map(|s| s.epsilon).sum();
            assert!((total - 1.0).abs() < 1e-12, "{mechanism}: {plan:?}");
            assert!(
                plan.spends[0].epsilon < plan.spends[1].epsilon,
                "{mechanism}: {plan:?}"
            );
            let smoothed = plan.spends.iter().all(|s| s.smoothing.is_some());
            assert_eq!(smoothed, mechanism != "dirichlet", "{mechanism}: {plan:?}");
            let fit = fit_split(
                &service,
                mechanism,
                &tables,
                mechanism,
                1.0,
                &plan.spends,
                PAPER_ORDER,
            )
            .await
            .unwrap();
            let mut results = Results::default();
            results.add(
                mechanism,
                Some(1.0),
                &vec![("m", 0.0)],
                Some((fit.spent, fit.budget, fit.releases)),
            );
            assert!(
                results.budget_failures.is_empty(),
                "{mechanism}: {:?}",
                results.budget_failures
            );
        }
        service.shutdown().await.unwrap();
    }

    #[test]
    fn a_zero_probability_costs_at_most_36_nats() {
        assert!((ln_clipped(0.0) + 36.043_653_389_117_15).abs() < 1e-9);
        assert_eq!(ln_clipped(0.5), 0.5f64.ln());
    }

    #[test]
    fn a_ledger_that_spent_other_than_its_budget_is_reported() {
        let mut results = Results::default();
        let scores: Scores = vec![("m", 1.0)];
        results.add(
            "dirichlet",
            Some(1.0),
            &scores,
            Some((1.0 - 31.0 * GRID_STEP, 1.0, 31)),
        );
        assert!(results.budget_failures.is_empty());
        // A 10⁻⁹ shortfall at ε = 0.001 is a real 10⁻⁶ relative error: reported.
        results.add(
            "dirichlet",
            Some(1e-3),
            &scores,
            Some((1e-3 - 1e-9, 1e-3, 31)),
        );
        assert_eq!(results.budget_failures.len(), 1);
        results.add(
            "dirichlet",
            Some(1.0),
            &scores,
            Some((1.0 + GRID_STEP, 1.0, 31)),
        );
        assert_eq!(results.budget_failures.len(), 2);
    }
}
