//! Prometheus metrics. Request counters and latencies are per replica; ledger figures are read
//! from the database at scrape time, so every replica reports the same shared ledger.

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use super::error::ApiError;
use crate::ledger::LedgerSummary;

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub requests: IntCounterVec,
    pub latency: HistogramVec,
    pub releases: IntCounterVec,
    pub table_releases: IntCounterVec,
    pub table_rows: IntCounterVec,
    pub refusals: IntCounterVec,
    pub replays: IntCounter,
    /// Plans stopped because their request ended before they finished.
    pub plans_cancelled: IntCounter,
    spent: GaugeVec,
    total: GaugeVec,
    release_count: IntGaugeVec,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new("http_requests_total", "HTTP requests by route and status"),
            &["method", "route", "status"],
        )
        .unwrap();
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "http_request_duration_seconds",
                "HTTP request latency by route",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            &["method", "route"],
        )
        .unwrap();
        let releases = IntCounterVec::new(
            Opts::new(
                "dirichlet_releases_total",
                "Releases committed by this replica, by mechanism",
            ),
            &["mechanism"],
        )
        .unwrap();
        let table_releases = IntCounterVec::new(
            Opts::new(
                "dirichlet_table_releases_total",
                "Table releases (also counted in dirichlet_releases_total) committed by this replica, by mechanism",
            ),
            &["mechanism"],
        )
        .unwrap();
        let table_rows = IntCounterVec::new(
            Opts::new(
                "dirichlet_table_rows_total",
                "Rows drawn in table releases committed by this replica, by mechanism",
            ),
            &["mechanism"],
        )
        .unwrap();
        let refusals = IntCounterVec::new(
            Opts::new(
                "dirichlet_refusals_total",
                "Release requests refused, by problem type",
            ),
            &["reason"],
        )
        .unwrap();
        let replays = IntCounter::new(
            "dirichlet_idempotent_replays_total",
            "Releases answered from storage for a retried Idempotency-Key",
        )
        .unwrap();
        let plans_cancelled = IntCounter::new(
            "dirichlet_plans_cancelled_total",
            "Plans stopped because their request ended (timed out, client gone) first",
        )
        .unwrap();
        let spent = GaugeVec::new(
            Opts::new(
                "dirichlet_budget_spent",
                "RDP budget spent per dataset (at its ledger order)",
            ),
            &["dataset"],
        )
        .unwrap();
        let total = GaugeVec::new(
            Opts::new(
                "dirichlet_budget_total",
                "RDP budget per dataset (at its ledger order)",
            ),
            &["dataset"],
        )
        .unwrap();
        let release_count = IntGaugeVec::new(
            Opts::new(
                "dirichlet_dataset_releases",
                "Releases recorded per dataset",
            ),
            &["dataset"],
        )
        .unwrap();
        for c in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(latency.clone()),
            Box::new(releases.clone()),
            Box::new(table_releases.clone()),
            Box::new(table_rows.clone()),
            Box::new(refusals.clone()),
            Box::new(replays.clone()),
            Box::new(plans_cancelled.clone()),
            Box::new(spent.clone()),
            Box::new(total.clone()),
            Box::new(release_count.clone()),
        ] {
            registry.register(c).expect("metric names are unique");
        }
        Metrics {
            registry,
            requests,
            latency,
            releases,
            table_releases,
            table_rows,
            refusals,
            replays,
            plans_cancelled,
            spent,
            total,
            release_count,
        }
    }

    pub fn release(&self, mechanism: &str) {
        self.releases.with_label_values(&[mechanism]).inc();
    }

    /// A committed table release of `rows` rows (after [`Metrics::release`] counted it).
    pub fn table_release(&self, mechanism: &str, rows: usize) {
        self.table_releases.with_label_values(&[mechanism]).inc();
        self.table_rows
            .with_label_values(&[mechanism])
            .inc_by(u64::try_from(rows).unwrap_or(u64::MAX));
    }

    pub fn refusal(&self, error: &ApiError) {
        self.refusals.with_label_values(&[error.kind().1]).inc();
    }

    /// The exposition text, with the ledger gauges set from `ledger`.
    pub fn render(&self, ledger: &[LedgerSummary]) -> String {
        self.spent.reset();
        self.total.reset();
        self.release_count.reset();
        for s in ledger {
            let id = s.dataset_id.to_string();
            self.spent.with_label_values(&[&id]).set(s.spent.to_f64());
            self.total.with_label_values(&[&id]).set(s.total.to_f64());
            self.release_count.with_label_values(&[&id]).set(s.releases);
        }
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding cannot fail");
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
