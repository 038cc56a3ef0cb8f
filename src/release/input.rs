//! What a release draws from: one count vector, or a table of disjoint groups' vectors over the
//! same cells (a naive-Bayes feature by class, a CPT by parent configuration), each count
//! checked as it is parsed (`release::request` parses a request's `counts` or `table` into one).
//! Below the mechanism vocabulary (`release::mechanism` takes an `Input`), so it imports none of
//! it. Not `Debug`: counts must never reach a log.

use crate::privacy::types::Relation;
use crate::privacy::{Counts, ParamError, Sensitivity};

/// Counts above this lose integer precision in f64 and push Gamma shapes towards overflow; the
/// service refuses them rather than sample from a distorted distribution.
pub const MAX_COUNT: f64 = 1e15;

/// What a release draws from: one count vector, or a table of disjoint groups' vectors.
pub enum Input {
    Vector(Counts),
    Table(CountTable),
}

impl Input {
    /// Every cell of the input (rows × cells for a table).
    pub fn total_cells(&self) -> usize {
        match self {
            Input::Vector(counts) => counts.len(),
            Input::Table(table) => table.total_cells(),
        }
    }

    /// The cells that price the release: the vector's, or a table row's.
    pub fn cells(&self) -> usize {
        match self {
            Input::Vector(counts) => counts.len(),
            Input::Table(table) => table.cells(),
        }
    }

    /// The relation a release of this input is priced under: a table is priced as one vector
    /// of its row length under the table form of the dataset's relation (`release::table`).
    pub fn priced_under(&self, sensitivity: &Sensitivity) -> Sensitivity {
        match self {
            Input::Vector(_) => *sensitivity,
            Input::Table(_) => sensitivity.for_table(),
        }
    }
}

/// Rows of counts over the same d ≥ 2 cells: at least one row, rows × d at most a configured
/// cap. A row may be all zeros: a group with no records is released like any other (its draw is
/// Dir(α), the baselines' noise on zeros), since refusing it, or leaving it out, would publish
/// that the group is empty (docs/PRIVACY.md, "Tables"). Not `Debug`: counts must never reach a
/// log.
pub struct CountTable {
    rows: Vec<Counts>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TableError {
    #[error("table must have at least one row")]
    Empty,
    #[error("table rows must all have the same number of cells: row 0 has {expected}, row {row} has {got}")]
    Ragged {
        row: usize,
        got: usize,
        expected: usize,
    },
    #[error("table row {row}: {source}")]
    Row { row: usize, source: ParamError },
    #[error(
        "table has {got} cells in all (rows × cells), more than the configured maximum of {max}"
    )]
    TooManyCells { got: usize, max: usize },
    #[error("table releases need the replace_one or add_remove_one relation: a custom sensitivity bounds how one record moves one vector, not a whole table")]
    CustomRelation,
}

impl CountTable {
    pub fn new(rows: Vec<Vec<f64>>, max_cells: usize) -> Result<CountTable, TableError> {
        let expected = rows.first().ok_or(TableError::Empty)?.len();
        if let Some(row) = rows.iter().position(|r| r.len() != expected) {
            return Err(TableError::Ragged {
                row,
                got: rows[row].len(),
                expected,
            });
        }
        // Before any per-row work, so a huge table is refused in O(1).
        let total = rows.len().saturating_mul(expected);
        if total > max_cells {
            return Err(TableError::TooManyCells {
                got: total,
                max: max_cells,
            });
        }
        let rows = rows
            .into_iter()
            .enumerate()
            .map(|(row, values)| {
                Counts::new(values, max_cells).map_err(|source| TableError::Row { row, source })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CountTable { rows })
    }

    /// Cells per row: the d that prices the table.
    pub fn cells(&self) -> usize {
        self.rows[0].len()
    }

    pub fn rows(&self) -> &[Counts] {
        &self.rows
    }

    /// rows × cells.
    pub fn total_cells(&self) -> usize {
        self.rows.len() * self.cells()
    }
}

/// Refuse relations under which a table has no sound one-vector price.
pub fn check_relation(sens: &Sensitivity) -> Result<(), TableError> {
    match sens.relation() {
        Relation::ReplaceOne | Relation::AddRemoveOne => Ok(()),
        Relation::Custom => Err(TableError::CustomRelation),
    }
}
