//! Serde helpers of the JSON wire format, shared by the HTTP layer and the release request:
//! optional fields that may be absent but never `null`, and number sequences bounded while they
//! are read (a body cannot make the parser allocate more than the dimension limit per sequence).

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

/// `#[serde(default, deserialize_with = "wire::non_null")]`: an optional field may be absent, but
/// not `null` (the API description does not allow null, and silently reading `null` as "absent"
/// would hide client bugs such as a lost variable).
pub fn non_null<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

thread_local! {
    /// (per-sequence limit, numbers left for the whole document) of the parse running on this
    /// thread; `None` outside a [`CellLimit`]. Parsing is synchronous, so the parse that
    /// set it is the only reader.
    static CELLS: std::cell::Cell<Option<(usize, usize)>> = const { std::cell::Cell::new(None) };
}

pub struct CellLimit(Option<(usize, usize)>);

impl CellLimit {
    /// Bounds every [`cells`] sequence parsed on this thread until the guard drops.
    pub fn set(max_cells: usize) -> CellLimit {
        CellLimit(CELLS.replace(Some((max_cells, max_cells.saturating_mul(2)))))
    }
}

impl Drop for CellLimit {
    fn drop(&mut self) {
        CELLS.set(self.0);
    }
}

/// One more number for the current sequence, which holds `len` already.
fn take_cell<E: serde::de::Error>(len: usize) -> Result<(), E> {
    let Some((per_sequence, left)) = CELLS.get() else {
        return Ok(());
    };
    if len >= per_sequence {
        return Err(E::custom(format!(
            "expected at most {per_sequence} numbers"
        )));
    }
    if left == 0 {
        return Err(E::custom(format!(
            "expected at most {} numbers in the whole body",
            per_sequence.saturating_mul(2)
        )));
    }
    CELLS.set(Some((per_sequence, left - 1)));
    Ok(())
}

/// `#[serde(deserialize_with = "cells")]`: an array of numbers, refused as soon as it grows past
/// the dimension limit of the parse (see [`CellLimit`]) instead of after it was read
/// whole. Reusable for any list of cells (counts, per-cell alpha, a table row).
pub fn cells<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<f64>, D::Error> {
    deserializer.deserialize_seq(CellsVisitor)
}

/// `#[serde(deserialize_with = "rows")]`: an array of [`cells`] arrays (a table), bounded the
/// same way while it is read: every row counts as one more entry of the body's budget (so
/// millions of empty rows cannot amplify memory either), no more rows than the dimension limit,
/// and every number of every row against the per-list and whole-body limits.
pub fn rows<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Vec<f64>>, D::Error> {
    struct Row(Vec<f64>);
    impl<'de> Deserialize<'de> for Row {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Row, D::Error> {
            cells(deserializer).map(Row)
        }
    }
    struct RowsVisitor;
    impl<'de> Visitor<'de> for RowsVisitor {
        type Value = Vec<Vec<f64>>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an array of arrays of numbers")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Vec<f64>>, A::Error> {
            let mut out = Vec::new();
            loop {
                take_cell::<A::Error>(out.len())?;
                match seq.next_element::<Row>()? {
                    Some(Row(row)) => out.push(row),
                    None => return Ok(out),
                }
            }
        }
    }
    deserializer.deserialize_seq(RowsVisitor)
}

struct CellsVisitor;

impl<'de> Visitor<'de> for CellsVisitor {
    type Value = Vec<f64>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of numbers")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<f64>, A::Error> {
        let mut out = Vec::new();
        while let Some(x) = seq.next_element::<f64>()? {
            take_cell::<A::Error>(out.len())?;
            out.push(x);
        }
        Ok(out)
    }
}

/// A number, or an array of numbers bounded like [`cells`] (serde's `untagged` would buffer the
/// whole array as generic values first, ~5× its size, before any limit applies).
#[derive(Clone, Debug, PartialEq)]
pub enum ScalarOrCells {
    Scalar(f64),
    Cells(Vec<f64>),
}

/// Written as it was read: a number, or an array of numbers.
impl serde::Serialize for ScalarOrCells {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ScalarOrCells::Scalar(v) => s.serialize_f64(*v),
            ScalarOrCells::Cells(v) => v.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ScalarOrCells {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ScalarOrCells;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number or an array of numbers")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<ScalarOrCells, E> {
                Ok(ScalarOrCells::Scalar(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ScalarOrCells, E> {
                Ok(ScalarOrCells::Scalar(v as f64))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ScalarOrCells, E> {
                Ok(ScalarOrCells::Scalar(v as f64))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<ScalarOrCells, A::Error> {
                CellsVisitor.visit_seq(seq).map(ScalarOrCells::Cells)
            }
        }
        deserializer.deserialize_any(V)
    }
}

#[cfg(test)]
mod non_null_tests {
    #[derive(serde::Deserialize, Debug)]
    struct Body {
        #[serde(default, deserialize_with = "super::non_null")]
        x: Option<f64>,
    }

    #[test]
    fn absent_is_none_null_is_an_error() {
        assert_eq!(serde_json::from_str::<Body>("{}").unwrap().x, None);
        assert_eq!(
            serde_json::from_str::<Body>(r#"{"x": 2}"#).unwrap().x,
            Some(2.0)
        );
        assert!(serde_json::from_str::<Body>(r#"{"x": null}"#).is_err());
    }
}
