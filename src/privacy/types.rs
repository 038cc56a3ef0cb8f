//! Parsed domain values. Constructing one is the validation: a value of these types is always
//! finite and inside its mathematical domain. Error messages never contain count values.

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    #[error("{name} must be a finite number")]
    NotFinite { name: &'static str },
    #[error("{name} must be {constraint}")]
    OutOfRange {
        name: &'static str,
        constraint: &'static str,
    },
    #[error("counts must have at least 2 cells")]
    TooFewCells,
    #[error("counts have {got} cells, more than the configured maximum of {max}")]
    TooManyCells { got: usize, max: usize },
    #[error("counts must be finite numbers >= 0 (cell {index} is not)")]
    InvalidCount { index: usize },
    #[error("alpha has {got} cells but counts have {expected}")]
    DimensionMismatch { got: usize, expected: usize },
}

/// A Rényi order λ > 1, finite.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Order(f64);

impl Order {
    pub fn new(value: f64) -> Result<Self, ParamError> {
        if !value.is_finite() {
            return Err(ParamError::NotFinite { name: "order" });
        }
        if value <= 1.0 {
            return Err(ParamError::OutOfRange {
                name: "order",
                constraint: "greater than 1",
            });
        }
        Ok(Self(value))
    }
    pub fn get(self) -> f64 {
        self.0
    }
}

/// A privacy cost or budget ε > 0, finite.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Epsilon(f64);

impl Epsilon {
    pub fn new(value: f64) -> Result<Self, ParamError> {
        if !value.is_finite() {
            return Err(ParamError::NotFinite { name: "epsilon" });
        }
        if value <= 0.0 {
            return Err(ParamError::OutOfRange {
                name: "epsilon",
                constraint: "greater than 0",
            });
        }
        Ok(Self(value))
    }
    pub fn get(self) -> f64 {
        self.0
    }
}

/// δ ∈ (0, 1).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Delta(f64);

impl Delta {
    pub fn new(value: f64) -> Result<Self, ParamError> {
        if !value.is_finite() {
            return Err(ParamError::NotFinite { name: "delta" });
        }
        if value <= 0.0 || value >= 1.0 {
            return Err(ParamError::OutOfRange {
                name: "delta",
                constraint: "strictly between 0 and 1",
            });
        }
        Ok(Self(value))
    }
    pub fn get(self) -> f64 {
        self.0
    }
}

/// Neighbour sensitivities of a dataset's statistic: Δ2² = max ‖x − x'‖₂², Δ∞ = max ‖x − x'‖∞.
///
/// The two histogram relations are kept distinct from a custom declaration with the same
/// numbers: a histogram neighbour moves whole records (two cells by 1, or one cell by 1), while
/// a custom (Δ2², Δ∞) admits every change inside that ball, which some mechanisms (Laplace) price
/// higher. Equality therefore compares the relation too.
///
/// [`Sensitivity::for_table`] is the same relation applied to a *table* of disjoint groups'
/// rows drawn with one plan: under replace-one a record may then leave cell k of one row and
/// join the same cell k of another, a move no single vector has, so a per-cell prior is priced
/// at its smallest entry in both changed cells (docs/PRIVACY.md, "Tables").
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sensitivity {
    l2_squared: f64,
    linf: f64,
    #[serde(skip)]
    relation: Relation,
    #[serde(skip)]
    table: bool,
}

/// Which neighbouring relation a [`Sensitivity`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    ReplaceOne,
    AddRemoveOne,
    Custom,
}

impl Sensitivity {
    /// Replace one record in a histogram: Δ2² = 2, Δ∞ = 1.
    pub const REPLACE_ONE: Sensitivity = Sensitivity {
        l2_squared: 2.0,
        linf: 1.0,
        relation: Relation::ReplaceOne,
        table: false,
    };
    /// Add or remove one record: Δ2² = 1, Δ∞ = 1.
    pub const ADD_REMOVE_ONE: Sensitivity = Sensitivity {
        l2_squared: 1.0,
        linf: 1.0,
        relation: Relation::AddRemoveOne,
        table: false,
    };

    /// Both must be finite and > 0, and Δ∞² ≤ Δ2² (one cell cannot move further than the whole vector).
    pub fn new(l2_squared: f64, linf: f64) -> Result<Self, ParamError> {
        if !l2_squared.is_finite() {
            return Err(ParamError::NotFinite { name: "l2_squared" });
        }
        if !linf.is_finite() {
            return Err(ParamError::NotFinite { name: "linf" });
        }
        if l2_squared <= 0.0 {
            return Err(ParamError::OutOfRange {
                name: "l2_squared",
                constraint: "greater than 0",
            });
        }
        if linf <= 0.0 {
            return Err(ParamError::OutOfRange {
                name: "linf",
                constraint: "greater than 0",
            });
        }
        if linf * linf > l2_squared {
            return Err(ParamError::OutOfRange {
                name: "linf",
                constraint: "at most sqrt(l2_squared)",
            });
        }
        Ok(Self {
            l2_squared,
            linf,
            relation: Relation::Custom,
            table: false,
        })
    }
    /// A stored sensitivity: the named histogram relations map to their constants, anything
    /// else is a custom declaration.
    pub fn for_relation(name: &str, l2_squared: f64, linf: f64) -> Result<Self, ParamError> {
        let custom = Self::new(l2_squared, linf)?;
        Ok(match name {
            "replace_one" if (l2_squared, linf) == (2.0, 1.0) => Self::REPLACE_ONE,
            "add_remove_one" if (l2_squared, linf) == (1.0, 1.0) => Self::ADD_REMOVE_ONE,
            _ => custom,
        })
    }

    pub fn relation(&self) -> Relation {
        self.relation
    }

    /// This relation on a table of disjoint rows released under one plan (see the type's docs).
    /// The sensitivities (Δ2², Δ∞) of the whole table are those of one vector.
    pub fn for_table(self) -> Self {
        Self {
            table: true,
            ..self
        }
    }

    /// Whether this prices a table ([`Sensitivity::for_table`]) rather than one vector.
    pub fn is_table(&self) -> bool {
        self.table
    }

    pub fn l2_squared(&self) -> f64 {
        self.l2_squared
    }
    pub fn linf(&self) -> f64 {
        self.linf
    }
}

/// A count vector: d ≥ 2 finite, non-negative cells, d ≤ a configured cap. Deliberately not
/// `Debug`/`Serialize`: raw counts must never reach a log, a trace, an error or the database.
#[derive(Clone)]
pub struct Counts(Vec<f64>);

impl Counts {
    pub fn new(values: Vec<f64>, max_cells: usize) -> Result<Self, ParamError> {
        if values.len() < 2 {
            return Err(ParamError::TooFewCells);
        }
        if values.len() > max_cells {
            return Err(ParamError::TooManyCells {
                got: values.len(),
                max: max_cells,
            });
        }
        if let Some(index) = values.iter().position(|v| !v.is_finite() || *v < 0.0) {
            return Err(ParamError::InvalidCount { index });
        }
        Ok(Self(values))
    }
    pub fn as_slice(&self) -> &[f64] {
        &self.0
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// N = Σ x_i.
    pub fn total(&self) -> f64 {
        self.0.iter().sum()
    }
}

impl std::fmt::Debug for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counts(<{} cells redacted>)", self.0.len())
    }
}

/// The Dirichlet prior α: one value for every cell, or one per cell. All finite and > 0.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Prior {
    Uniform(f64),
    PerCell(Vec<f64>),
}

impl Prior {
    pub fn uniform(value: f64) -> Result<Self, ParamError> {
        check_positive("alpha", value)?;
        Ok(Prior::Uniform(value))
    }
    pub fn per_cell(values: Vec<f64>) -> Result<Self, ParamError> {
        if values.len() < 2 {
            return Err(ParamError::OutOfRange {
                name: "alpha",
                constraint: "a number or an array of at least 2 numbers",
            });
        }
        for v in &values {
            check_positive("alpha", *v)?;
        }
        Ok(Prior::PerCell(values))
    }
    /// α_m = min_i α_i.
    pub fn min(&self) -> f64 {
        match self {
            Prior::Uniform(a) => *a,
            Prior::PerCell(v) => v.iter().copied().fold(f64::INFINITY, f64::min),
        }
    }
    /// α₀ = Σ α_i over d cells.
    pub fn total(&self, d: usize) -> f64 {
        match self {
            Prior::Uniform(a) => a * d as f64,
            Prior::PerCell(v) => v.iter().sum(),
        }
    }
    pub fn at(&self, i: usize) -> f64 {
        match self {
            Prior::Uniform(a) => *a,
            Prior::PerCell(v) => v[i],
        }
    }
    /// A per-cell prior must have exactly d cells.
    pub fn check_dimension(&self, d: usize) -> Result<(), ParamError> {
        match self {
            Prior::PerCell(v) if v.len() != d => Err(ParamError::DimensionMismatch {
                got: v.len(),
                expected: d,
            }),
            _ => Ok(()),
        }
    }
}

/// The parameters of one Dirichlet release: y ~ Dirichlet(r·x + α).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirichletParams {
    pub r: f64,
    pub alpha: Prior,
}

pub(crate) fn check_positive(name: &'static str, value: f64) -> Result<f64, ParamError> {
    if !value.is_finite() {
        return Err(ParamError::NotFinite { name });
    }
    if value <= 0.0 {
        return Err(ParamError::OutOfRange {
            name,
            constraint: "greater than 0",
        });
    }
    Ok(value)
}
