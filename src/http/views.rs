//! JSON shapes returned to clients (documented in openapi.yaml).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::ledger::{Allocation, BudgetState, Dataset, Names, Output, Release, ReleaseSummary};

#[derive(Debug, Serialize)]
pub struct DpView {
    pub delta: f64,
    pub total_epsilon: f64,
    pub spent_epsilon: f64,
}

#[derive(Debug, Serialize)]
pub struct BudgetView {
    pub order: f64,
    pub total: f64,
    pub spent: f64,
    pub remaining: f64,
    pub releases: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dp: Option<DpView>,
    /// The calling analyst's allocation on the dataset, when one is set (the budget endpoint).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocation: Option<AllocationView>,
}

impl From<&BudgetState> for BudgetView {
    fn from(b: &BudgetState) -> Self {
        let dp = b.dp_target.and_then(|t| {
            Some(DpView {
                delta: t.delta,
                total_epsilon: b.dp_view(b.total)?,
                spent_epsilon: b.dp_view(b.spent)?,
            })
        });
        BudgetView {
            order: b.order.get(),
            total: b.total.to_f64(),
            spent: b.spent.to_f64(),
            remaining: b.remaining().to_f64(),
            releases: b.releases,
            dp,
            allocation: None,
        }
    }
}

/// An analyst token's allocation on a dataset, at the dataset's order.
#[derive(Debug, Serialize)]
pub struct AllocationView {
    pub token_id: String,
    pub epsilon: f64,
    pub spent: f64,
    pub remaining: f64,
}

impl From<&Allocation> for AllocationView {
    fn from(a: &Allocation) -> Self {
        AllocationView {
            token_id: a.token_id.clone(),
            epsilon: a.total.to_f64(),
            spent: a.spent.to_f64(),
            remaining: a.remaining().to_f64(),
        }
    }
}

pub fn allocation_json(a: &Allocation) -> Value {
    serde_json::to_value(AllocationView::from(a)).unwrap_or(Value::Null)
}

pub fn budget_json(b: &BudgetState) -> Value {
    serde_json::to_value(BudgetView::from(b)).unwrap_or(Value::Null)
}

#[derive(Debug, Serialize)]
pub struct SensitivityView {
    pub l2_squared: f64,
    pub linf: f64,
}

#[derive(Debug, Serialize)]
pub struct BudgetSpecView {
    pub order: f64,
    pub epsilon: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rdp_epsilon: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct DatasetView {
    pub id: Uuid,
    pub name: String,
    pub neighbouring: String,
    pub sensitivity: SensitivityView,
    pub budget: BudgetSpecView,
    pub spent: f64,
    pub releases: i64,
    pub created_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cells: Option<Vec<String>>,
}

impl From<&Dataset> for DatasetView {
    fn from(d: &Dataset) -> Self {
        let budget = match d.dp_target {
            Some(t) => BudgetSpecView {
                order: d.order.get(),
                epsilon: t.epsilon,
                delta: Some(t.delta),
                rdp_epsilon: Some(d.total.to_f64()),
            },
            None => BudgetSpecView {
                order: d.order.get(),
                epsilon: d.total.to_f64(),
                delta: None,
                rdp_epsilon: None,
            },
        };
        DatasetView {
            id: d.id,
            name: d.name.clone(),
            neighbouring: d.neighbouring.clone(),
            sensitivity: SensitivityView {
                l2_squared: d.sensitivity.l2_squared(),
                linf: d.sensitivity.linf(),
            },
            budget,
            spent: d.spent.to_f64(),
            releases: d.releases,
            created_at: d.created_at,
            cells: names(d.cells.as_ref()),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct CostView {
    pub order: f64,
    pub epsilon: f64,
}

#[derive(Debug, Serialize)]
pub struct ReleaseView {
    pub id: Uuid,
    pub dataset_id: Uuid,
    pub seq: i64,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    /// A vector release's output; absent for tables.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distribution: Option<Vec<f64>>,
    /// A table release's rows, in request order; absent for vectors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distributions: Option<Vec<Vec<f64>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The dataset's cell names, when it has them: the columns of `distribution(s)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cells: Option<Vec<String>>,
    /// A table's row names, when the release was made with them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub row_names: Option<Vec<String>>,
    pub mechanism: Value,
    pub cost: CostView,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetView>,
}

/// Names as listed in JSON.
pub fn names(names: Option<&Names>) -> Option<Vec<String>> {
    names.map(|n| n.as_slice().to_vec())
}

impl ReleaseView {
    /// `cells` are the dataset's cell names; a listing gives them once for its page instead.
    pub fn new(
        r: Release,
        order: f64,
        cells: Option<&Names>,
        budget: Option<&BudgetState>,
    ) -> Self {
        let (distribution, distributions) = match r.output {
            Output::Vector(v) => (Some(v), None),
            Output::Table(t) => (None, Some(t.iter_rows().map(<[f64]>::to_vec).collect())),
        };
        ReleaseView {
            id: r.id,
            dataset_id: r.dataset_id,
            seq: r.seq,
            created_at: r.created_at,
            created_by: r.created_by,
            distribution,
            distributions,
            label: r.label.map(|l| l.as_str().to_owned()),
            cells: names(cells),
            row_names: names(r.row_names.as_ref()),
            mechanism: r.mechanism,
            cost: CostView {
                order,
                epsilon: r.cost.to_f64(),
            },
            budget: budget.map(BudgetView::from),
        }
    }
}

/// A listed release with `fields=summary`: who, when, what it cost and its label.
#[derive(Debug, Serialize)]
pub struct ReleaseSummaryView {
    pub id: Uuid,
    pub dataset_id: Uuid,
    pub seq: i64,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub cost: CostView,
}

impl ReleaseSummaryView {
    pub fn new(r: ReleaseSummary, order: f64) -> Self {
        ReleaseSummaryView {
            id: r.id,
            dataset_id: r.dataset_id,
            seq: r.seq,
            created_at: r.created_at,
            created_by: r.created_by,
            label: r.label.map(|l| l.as_str().to_owned()),
            cost: CostView {
                order,
                epsilon: r.cost.to_f64(),
            },
        }
    }
}
