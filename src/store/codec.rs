//! Encodings shared by both backends, and the checks that turn stored columns back into ledger
//! types. A stored value the ledger cannot interpret is [`StoreError::Corrupt`], never a panic and
//! never a silently wrong number.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::ledger::audit::{self, LinkFields, LogEntry};
use crate::ledger::{
    Allocation, AllocationChange, BudgetState, Children, Dataset, DpTarget, Label, LedgerSummary,
    Names, NewRelease, Output, Population, Release, ReleaseSummary, StoreError, Table, Units,
};
use crate::ledger::{BlockKey, BlockRange, Blocking, Period};
use crate::privacy::{Order, Sensitivity};

const F64_BYTES: usize = std::mem::size_of::<f64>();

/// A probability vector as little-endian f64 bytes.
pub fn encode_distribution(values: &[f64]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(values.len() * F64_BYTES);
    for value in values {
        bytes.extend_from_slice(&value.to_le_bytes());
    }
    bytes
}

/// The inverse of [`encode_distribution`]; `None` if the length is not a multiple of 8.
pub fn decode_distribution(bytes: &[u8]) -> Option<Vec<f64>> {
    let chunks = bytes.chunks_exact(F64_BYTES);
    if !chunks.remainder().is_empty() {
        return None;
    }
    Some(
        chunks
            .map(|chunk| f64::from_le_bytes(chunk.try_into().expect("chunks_exact yields 8 bytes")))
            .collect(),
    )
}

/// The columns of a dataset, in the order both backends select them.
pub(crate) const DATASET_COLUMNS: &str = "id, name, budget_order, total_units, spent_units, \
     release_count, dp_epsilon, dp_delta, l2_squared, linf, neighbouring, created_at, created_by, \
     cells, population_id, block_period, block_total_units";

/// A population row's columns, in the order [`PopulationColumns`] reads them.
pub(crate) const POPULATION_COLUMNS: &str = "id, name, budget_order, total_units, spent_units, \
     dp_epsilon, dp_delta, parent_id, children, created_at, created_by";

/// A population row as stored, before its values are checked.
#[derive(sqlx::FromRow)]
pub(crate) struct PopulationColumns<Id = Uuid> {
    pub id: Id,
    pub name: String,
    pub budget_order: f64,
    pub total_units: i64,
    pub spent_units: i64,
    pub dp_epsilon: Option<f64>,
    pub dp_delta: Option<f64>,
    pub parent_id: Option<Id>,
    pub children: String,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
}

impl<Id: Into<Uuid>> TryFrom<PopulationColumns<Id>> for Population {
    type Error = StoreError;

    fn try_from(c: PopulationColumns<Id>) -> Result<Population, StoreError> {
        Ok(Population {
            id: c.id.into(),
            name: c.name,
            order: Order::new(c.budget_order)
                .map_err(|_| corrupt("populations.budget_order is not an order > 1"))?,
            total: units(c.total_units, "populations.total_units")?,
            spent: units(c.spent_units, "populations.spent_units")?,
            dp_target: match (c.dp_epsilon, c.dp_delta) {
                (Some(epsilon), Some(delta)) => Some(DpTarget { epsilon, delta }),
                (None, None) => None,
                _ => {
                    return Err(corrupt(
                        "populations.dp_epsilon and dp_delta must be both set or both null",
                    ))
                }
            },
            parent: c.parent_id.map(Into::into),
            children: Children::parse(&c.children)
                .ok_or_else(|| corrupt("populations.children is not shared or disjoint"))?,
            created_at: c.created_at,
            created_by: c.created_by,
        })
    }
}

/// The ledger columns of a dataset row, as stored.
#[derive(sqlx::FromRow)]
pub(crate) struct BudgetColumns {
    pub budget_order: f64,
    pub total_units: i64,
    pub spent_units: i64,
    pub release_count: i64,
    pub dp_epsilon: Option<f64>,
    pub dp_delta: Option<f64>,
}

impl TryFrom<BudgetColumns> for BudgetState {
    type Error = StoreError;

    fn try_from(c: BudgetColumns) -> Result<BudgetState, StoreError> {
        Ok(BudgetState {
            order: Order::new(c.budget_order)
                .map_err(|_| corrupt("datasets.budget_order is not an order > 1"))?,
            total: units(c.total_units, "total_units")?,
            spent: units(c.spent_units, "spent_units")?,
            releases: c.release_count,
            dp_target: match (c.dp_epsilon, c.dp_delta) {
                (Some(epsilon), Some(delta)) => Some(DpTarget { epsilon, delta }),
                (None, None) => None,
                _ => {
                    return Err(corrupt(
                        "datasets.dp_epsilon and dp_delta must be both set or both null",
                    ))
                }
            },
        })
    }
}

/// A dataset row as stored, before its values are checked. `Id` is how the backend stores a UUID.
#[derive(sqlx::FromRow)]
pub(crate) struct DatasetColumns<Id = Uuid> {
    pub id: Id,
    pub name: String,
    #[sqlx(flatten)]
    pub budget: BudgetColumns,
    pub l2_squared: f64,
    pub linf: f64,
    pub neighbouring: String,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub cells: Option<String>,
    pub population_id: Option<Id>,
    pub block_period: Option<String>,
    pub block_total_units: Option<i64>,
}

impl<Id: Into<Uuid>> TryFrom<DatasetColumns<Id>> for Dataset {
    type Error = StoreError;

    fn try_from(c: DatasetColumns<Id>) -> Result<Dataset, StoreError> {
        let budget = BudgetState::try_from(c.budget)?;
        Ok(Dataset {
            id: c.id.into(),
            name: c.name,
            order: budget.order,
            total: budget.total,
            dp_target: budget.dp_target,
            sensitivity: Sensitivity::for_relation(&c.neighbouring, c.l2_squared, c.linf)
                .map_err(|_| corrupt("datasets.l2_squared/linf are not a valid sensitivity"))?,
            neighbouring: c.neighbouring,
            created_at: c.created_at,
            created_by: c.created_by,
            spent: budget.spent,
            releases: budget.releases,
            cells: names(c.cells, "datasets.cells")?,
            population: c.population_id.map(Into::into),
            blocks: blocking(c.block_period, c.block_total_units)?,
        })
    }
}

/// A dataset's `block_period` and `block_total_units`, both set or both null.
pub(crate) fn blocking(
    period: Option<String>,
    total: Option<i64>,
) -> Result<Option<Blocking>, StoreError> {
    match (period, total) {
        (None, None) => Ok(None),
        (Some(period), Some(total)) => Ok(Some(Blocking {
            period: Period::parse(&period)
                .ok_or_else(|| corrupt("datasets.block_period is not a known period"))?,
            cap: units(total, "datasets.block_total_units")?,
        })),
        _ => Err(corrupt(
            "datasets.block_period and block_total_units must be both set or both null",
        )),
    }
}

/// A release's stored `block_from` and `block_to`.
pub(crate) fn block_range(
    from: Option<String>,
    to: Option<String>,
) -> Result<Option<BlockRange>, StoreError> {
    let bad = || corrupt("releases.block_from/block_to are not a range of block keys");
    match (from, to) {
        (None, None) => Ok(None),
        (Some(from), Some(to)) => {
            let first = BlockKey::parse_any(&from).map_err(|_| bad())?;
            let last = BlockKey::parse_any(&to).map_err(|_| bad())?;
            BlockRange::new(first, last, u32::MAX)
                .map(Some)
                .map_err(|_| bad())
        }
        _ => Err(bad()),
    }
}

/// The `block_from` and `block_to` columns of a release about to be stored.
pub(crate) fn block_columns(range: Option<BlockRange>) -> (Option<String>, Option<String>) {
    match range {
        Some(r) => (Some(r.first().to_string()), Some(r.last().to_string())),
        None => (None, None),
    }
}

/// An allocation row of `token_datasets`, as stored (read only where one is set).
#[derive(sqlx::FromRow)]
pub(crate) struct AllocationColumns {
    pub token_id: String,
    pub allocation_units: i64,
    pub spent_units: i64,
}

impl TryFrom<AllocationColumns> for Allocation {
    type Error = StoreError;

    fn try_from(c: AllocationColumns) -> Result<Allocation, StoreError> {
        Ok(Allocation {
            token_id: c.token_id,
            total: units(c.allocation_units, "token_datasets.allocation_units")?,
            spent: units(c.spent_units, "token_datasets.spent_units")?,
        })
    }
}

/// A row of `allocation_changes`, as stored.
#[derive(sqlx::FromRow)]
pub(crate) struct AllocationChangeColumns {
    pub token_id: String,
    pub changed_at: DateTime<Utc>,
    pub changed_by: String,
    pub old_units: Option<i64>,
    pub new_units: Option<i64>,
}

impl TryFrom<AllocationChangeColumns> for AllocationChange {
    type Error = StoreError;

    fn try_from(c: AllocationChangeColumns) -> Result<AllocationChange, StoreError> {
        let amount = |raw: Option<i64>, column| raw.map(|raw| units(raw, column)).transpose();
        Ok(AllocationChange {
            token_id: c.token_id,
            changed_at: c.changed_at,
            changed_by: c.changed_by,
            old: amount(c.old_units, "allocation_changes.old_units")?,
            new: amount(c.new_units, "allocation_changes.new_units")?,
        })
    }
}

/// A dataset's ledger figures, as stored.
#[derive(sqlx::FromRow)]
pub(crate) struct SummaryColumns<Id = Uuid> {
    pub id: Id,
    pub total_units: i64,
    pub spent_units: i64,
    pub release_count: i64,
}

impl<Id: Into<Uuid>> TryFrom<SummaryColumns<Id>> for LedgerSummary {
    type Error = StoreError;

    fn try_from(c: SummaryColumns<Id>) -> Result<LedgerSummary, StoreError> {
        Ok(LedgerSummary {
            dataset_id: c.id.into(),
            total: units(c.total_units, "total_units")?,
            spent: units(c.spent_units, "spent_units")?,
            releases: c.release_count,
        })
    }
}

/// What `new` became once committed as number `seq` at `created_at`, leaving the dataset's
/// spent at `spent_after`.
pub(crate) fn committed_release(
    new: &NewRelease,
    seq: i64,
    created_at: DateTime<Utc>,
    spent_after: Units,
) -> Release {
    Release {
        id: new.id,
        dataset_id: new.dataset_id,
        seq,
        created_at,
        created_by: new.created_by.clone(),
        mechanism: new.mechanism.clone(),
        cost: new.cost,
        output: new.output.clone(),
        label: new.label.clone(),
        row_names: new.row_names.clone(),
        idempotency_key: new.idempotency.as_ref().map(|i| i.key.clone()),
        spent_after,
        blocks: new.blocks,
    }
}

/// The link bytes after created_at (src/ledger/audit.rs) of the release about to be committed.
pub(crate) fn link_suffix(new: &NewRelease) -> Vec<u8> {
    audit::link_suffix(
        new.cost.raw(),
        &new.created_by,
        &audit::json_digest(&new.mechanism),
        &audit::release_output_digest(&new.output, new.label.as_ref(), new.row_names.as_ref()),
    )
}

/// A stored release reduced to what the log verifier needs: its output is digested here and
/// dropped, so a page of entries is small whatever the releases' dimension.
pub(crate) fn log_entry<Id: Into<Uuid>>(
    columns: ReleaseColumns<Id>,
    chain_hash: Option<Vec<u8>>,
) -> LogEntry {
    let seq = columns.seq;
    let cost_units = columns.cost_units;
    let fields = columns
        .into_release()
        .map(|release| LinkFields {
            dataset_id: release.dataset_id,
            id: release.id,
            seq: release.seq,
            created_at: release.created_at,
            cost_units: release.cost.raw(),
            mechanism_digest: audit::json_digest(&release.mechanism),
            output_digest: audit::release_output_digest(
                &release.output,
                release.label.as_ref(),
                release.row_names.as_ref(),
            ),
            created_by: release.created_by,
        })
        .map_err(|e| e.to_string());
    LogEntry {
        seq,
        cost_units,
        chain_hash,
        fields,
    }
}

/// A release row as stored, before its values are checked. `Id` is how the backend stores a UUID.
#[derive(sqlx::FromRow)]
pub(crate) struct ReleaseColumns<Id = Uuid> {
    pub id: Id,
    pub dataset_id: Id,
    pub seq: i64,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    /// JSON text: both backends hand the mechanism over as text (`jsonb::text` on PostgreSQL).
    pub mechanism: String,
    pub cost_units: i64,
    pub distribution: Vec<u8>,
    pub dimension: i64,
    pub idempotency_key: Option<String>,
    pub fingerprint: Option<Vec<u8>>,
    /// `None` for a vector; a table's row count (migration 0002).
    pub table_rows: Option<i64>,
    pub label: Option<String>,
    /// The dataset's spent right after this release (migration 0005). Each backend's
    /// `RELEASE_COLUMNS` reads the stored value or, for a row stored without it (by a replica
    /// that predates the migration, still running while another applied it), the sum of the
    /// costs up to its seq: the same number, since `spent` only ever grows by a stored
    /// release's cost.
    pub spent_after_units: i64,
    pub row_names: Option<String>,
    pub block_from: Option<String>,
    pub block_to: Option<String>,
}

/// The columns of a [`ReleaseSummary`], in the order both backends select them.
pub(crate) const RELEASE_SUMMARY_COLUMNS: &str =
    "id, dataset_id, seq, created_at, created_by, cost_units, label";

/// A release row without its output and mechanism, as stored.
#[derive(sqlx::FromRow)]
pub(crate) struct ReleaseSummaryColumns<Id = Uuid> {
    pub id: Id,
    pub dataset_id: Id,
    pub seq: i64,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub cost_units: i64,
    pub label: Option<String>,
}

impl<Id: Into<Uuid>> TryFrom<ReleaseSummaryColumns<Id>> for ReleaseSummary {
    type Error = StoreError;

    fn try_from(c: ReleaseSummaryColumns<Id>) -> Result<ReleaseSummary, StoreError> {
        Ok(ReleaseSummary {
            id: c.id.into(),
            dataset_id: c.dataset_id.into(),
            seq: c.seq,
            created_at: c.created_at,
            created_by: c.created_by,
            cost: units(c.cost_units, "cost_units")?,
            label: label(c.label)?,
        })
    }
}

/// The columns an output is stored in: (`distribution`, `dimension`, `table_rows`).
pub(crate) fn output_columns(output: &Output) -> Result<(Vec<u8>, i64, Option<i64>), StoreError> {
    let values = output.values();
    let too_long = || StoreError::Internal("commit_release: output too long".into());
    let dimension = i64::try_from(values.len()).map_err(|_| too_long())?;
    let rows = output
        .rows()
        .map(|rows| i64::try_from(rows).map_err(|_| too_long()))
        .transpose()?;
    Ok((encode_distribution(values), dimension, rows))
}

impl<Id: Into<Uuid>> ReleaseColumns<Id> {
    pub fn into_release(self) -> Result<Release, StoreError> {
        Ok(self.into_parts()?.0)
    }

    /// The release and its stored fingerprint, which must be there (it was looked up by key).
    pub fn into_keyed_release(self) -> Result<(Release, [u8; 32]), StoreError> {
        match self.into_parts()? {
            (release, Some(fingerprint)) => Ok((release, fingerprint)),
            (_, None) => Err(corrupt(
                "a release with an idempotency key has no fingerprint",
            )),
        }
    }

    fn into_parts(self) -> Result<(Release, Option<[u8; 32]>), StoreError> {
        let distribution = decode_distribution(&self.distribution)
            .filter(|values| i64::try_from(values.len()).ok() == Some(self.dimension))
            .ok_or_else(|| corrupt("releases.distribution does not hold `dimension` f64 values"))?;
        let output = match self.table_rows {
            None => Output::Vector(distribution),
            Some(rows) => usize::try_from(rows)
                .ok()
                .and_then(|rows| Table::from_flat(distribution, rows))
                .map(Output::Table)
                .ok_or_else(|| corrupt("releases.table_rows does not divide `dimension`"))?,
        };
        let label = label(self.label)?;
        let row_names = names(self.row_names, "releases.row_names")?;
        let mechanism = serde_json::from_str(&self.mechanism)
            .map_err(|_| corrupt("releases.mechanism is not valid JSON"))?;
        let fingerprint = self
            .fingerprint
            .map(|bytes| hash32(bytes, "releases.fingerprint"))
            .transpose()?;
        let release = Release {
            id: self.id.into(),
            dataset_id: self.dataset_id.into(),
            seq: self.seq,
            created_at: self.created_at,
            created_by: self.created_by,
            mechanism,
            cost: units(self.cost_units, "cost_units")?,
            output,
            label,
            row_names,
            idempotency_key: self.idempotency_key,
            spent_after: units(self.spent_after_units, "spent_after_units")?,
            blocks: block_range(self.block_from, self.block_to)?,
        };
        Ok((release, fingerprint))
    }
}

/// A stored label, read as stored (see [`Label::stored`]).
fn label(text: Option<String>) -> Result<Option<Label>, StoreError> {
    text.map(|text| {
        Label::stored(text).ok_or_else(|| corrupt("releases.label is not a valid label"))
    })
    .transpose()
}

/// Names stored as JSON text (an array of strings), read as stored (see [`Names::stored`]).
pub(crate) fn names(json: Option<String>, column: &str) -> Result<Option<Names>, StoreError> {
    json.map(|text| {
        serde_json::from_str::<Vec<String>>(&text)
            .ok()
            .and_then(Names::stored)
            .ok_or_else(|| corrupt(&format!("{column} is not a list of valid, distinct names")))
    })
    .transpose()
}

/// The JSON text stored for names.
pub(crate) fn names_json(names: Option<&Names>) -> Option<String> {
    names.map(|n| serde_json::to_string(n.as_slice()).expect("strings serialise"))
}

pub(crate) fn units(raw: i64, column: &str) -> Result<Units, StoreError> {
    Units::from_raw(raw).map_err(|_| corrupt(&format!("{column} is outside the ledger's range")))
}

/// A SHA-256 or HMAC-SHA-256 value.
pub(crate) fn hash32(bytes: Vec<u8>, column: &str) -> Result<[u8; 32], StoreError> {
    <[u8; 32]>::try_from(bytes).map_err(|_| corrupt(&format!("{column} is not 32 bytes")))
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distributions_round_trip_bit_for_bit() {
        let values = [
            0.0,
            -0.0,
            0.1,
            1.0 / 3.0,
            f64::MIN_POSITIVE / 2.0,
            f64::MAX,
            f64::NAN,
            1.0,
        ];
        let bytes = encode_distribution(&values);
        assert_eq!(bytes.len(), 8 * values.len());
        assert_eq!(&bytes[8..16], &(-0.0f64).to_le_bytes());
        let back = decode_distribution(&bytes).unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&values));
        assert_eq!(decode_distribution(&[]), Some(vec![]));
    }

    #[test]
    fn ragged_bytes_are_refused() {
        assert_eq!(decode_distribution(&[0u8; 7]), None);
        assert_eq!(decode_distribution(&[0u8; 17]), None);
    }

    #[test]
    fn release_columns_are_checked() {
        let good = || ReleaseColumns {
            id: Uuid::nil(),
            dataset_id: Uuid::nil(),
            seq: 1,
            created_at: Utc::now(),
            created_by: "t".into(),
            mechanism: r#"{"kind":"dirichlet"}"#.into(),
            cost_units: 1 << 40,
            distribution: encode_distribution(&[0.25, 0.75]),
            dimension: 2,
            idempotency_key: Some("k".into()),
            fingerprint: Some(vec![7; 32]),
            table_rows: None,
            label: None,
            spent_after_units: 3 << 40,
            block_from: None,
            block_to: None,
            row_names: None,
        };
        let (release, fingerprint) = good().into_keyed_release().unwrap();
        assert_eq!(release.spent_after.to_f64(), 3.0);
        assert_eq!(release.output, Output::Vector(vec![0.25, 0.75]));
        assert_eq!(release.cost.to_f64(), 1.0);
        assert_eq!(fingerprint, [7; 32]);

        let is_corrupt =
            |c: ReleaseColumns| matches!(c.into_keyed_release(), Err(StoreError::Corrupt(_)));
        assert!(is_corrupt(ReleaseColumns {
            dimension: 3,
            ..good()
        }));
        assert!(is_corrupt(ReleaseColumns {
            distribution: vec![0; 12],
            ..good()
        }));
        assert!(is_corrupt(ReleaseColumns {
            mechanism: "{".into(),
            ..good()
        }));
        for bad_names in [r#"["a","a"]"#, "[]", r#"["a",1]"#, r#"["\n"]"#, "{"] {
            assert!(
                is_corrupt(ReleaseColumns {
                    row_names: Some(bad_names.into()),
                    ..good()
                }),
                "{bad_names}"
            );
        }
        assert!(is_corrupt(ReleaseColumns {
            cost_units: -1,
            ..good()
        }));
        assert!(is_corrupt(ReleaseColumns {
            spent_after_units: -1,
            ..good()
        }));
        assert!(is_corrupt(ReleaseColumns {
            fingerprint: Some(vec![0; 31]),
            ..good()
        }));
        assert!(is_corrupt(ReleaseColumns {
            fingerprint: None,
            ..good()
        }));
        for rows in [0, -1, 3] {
            assert!(is_corrupt(ReleaseColumns {
                table_rows: Some(rows),
                ..good()
            }));
        }
        for label in ["", "a\nb"] {
            assert!(is_corrupt(ReleaseColumns {
                label: Some(label.into()),
                ..good()
            }));
        }
    }

    #[test]
    fn tables_and_labels_are_read_back() {
        let values = vec![0.25, 0.75, 0.5, 0.5, 1.0, 0.0];
        let output = Output::Table(Table::from_flat(values.clone(), 3).unwrap());
        let (bytes, dimension, rows) = output_columns(&output).unwrap();
        assert_eq!((dimension, rows), (6, Some(3)));
        let columns = ReleaseColumns {
            id: Uuid::nil(),
            dataset_id: Uuid::nil(),
            seq: 1,
            created_at: Utc::now(),
            created_by: "t".into(),
            mechanism: "{}".into(),
            cost_units: 0,
            distribution: bytes,
            dimension,
            idempotency_key: None,
            fingerprint: None,
            table_rows: rows,
            label: Some("NB feature 7 | by class".into()),
            spent_after_units: 0,
            row_names: Some(r#"["a","b","c"]"#.into()),
            block_from: None,
            block_to: None,
        };
        let release = columns.into_release().unwrap();
        let Output::Table(table) = &release.output else {
            panic!("a table was read back as {:?}", release.output);
        };
        let rows: Vec<&[f64]> = table.iter_rows().collect();
        assert_eq!(rows, vec![&values[0..2], &values[2..4], &values[4..6]]);
        assert_eq!(
            release.label.as_ref().map(Label::as_str),
            Some("NB feature 7 | by class")
        );
        assert_eq!(
            release.row_names.as_ref().map(Names::as_slice),
            Some(&["a".to_string(), "b".into(), "c".into()][..])
        );
    }

    #[test]
    fn budget_columns_are_checked() {
        let good = || BudgetColumns {
            budget_order: 8.0,
            total_units: 1 << 40,
            spent_units: 1 << 39,
            release_count: 2,
            dp_epsilon: Some(1.0),
            dp_delta: Some(1e-6),
        };
        let budget = BudgetState::try_from(good()).unwrap();
        assert_eq!((budget.spent.to_f64(), budget.releases), (0.5, 2));
        assert_eq!(
            budget.dp_target,
            Some(DpTarget {
                epsilon: 1.0,
                delta: 1e-6
            })
        );

        let is_corrupt =
            |c: BudgetColumns| matches!(BudgetState::try_from(c), Err(StoreError::Corrupt(_)));
        assert!(is_corrupt(BudgetColumns {
            budget_order: 1.0,
            ..good()
        }));
        assert!(is_corrupt(BudgetColumns {
            total_units: 1 << 54,
            ..good()
        }));
        assert!(is_corrupt(BudgetColumns {
            spent_units: -1,
            ..good()
        }));
        assert!(is_corrupt(BudgetColumns {
            dp_delta: None,
            ..good()
        }));
        assert!(!is_corrupt(BudgetColumns {
            dp_epsilon: None,
            dp_delta: None,
            ..good()
        }));
    }
}
