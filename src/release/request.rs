//! The release request: its wire body, and the typed request it parses into.
//!
//! [`RequestBody`] is the JSON as it arrives: the common fields (`counts` or `table`, `epsilon`,
//! `order`, `mechanism`, `label`, `row_names`) and the mechanisms' own fields, whichever the
//! registry declares (`mechanisms::field_wire`), every one optional and read with number
//! sequences bounded (`crate::wire`). It is also the *canonical form* of a request: re-serialised,
//! it is what the idempotency fingerprint hashes, so its layout is part of every stored
//! fingerprint (tests/it/golden.rs pins it; see [`CANONICAL`]). Never logged or stored; no
//! `Debug`.
//!
//! [`Request::parse`] turns a body into a [`Request`]: the input (a vector or a table), the
//! mechanism's own spec (parsed by the mechanism, after the rules every mechanism shares), and
//! the label. Everything a request can get wrong is a [`RequestError`] naming the field. Pure: no
//! HTTP, no store, no randomness.

use std::fmt;
use std::sync::OnceLock;

use hmac::{Hmac, Mac};
use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::Sha256;

use super::mechanism::{Params, Targeting, Wire};
use super::mechanisms::{self, Kind, Spec};
use super::{Plan, PlanError};
use crate::ledger::{Label, Names};
use crate::privacy::{Epsilon, Order, Sensitivity};
use crate::wire::{cells, rows, ScalarOrCells};

use super::input::{check_relation, CountTable, TableError};
pub use super::input::{Input, MAX_COUNT};
pub use super::mechanism::{Context, RequestError};
use crate::privacy::Counts;

mod schema;

/// Raw counts as they arrive. No `Debug`: they must never reach a log.
#[derive(Deserialize, Serialize, Clone)]
#[serde(transparent)]
pub struct RawCounts(#[serde(deserialize_with = "cells")] Vec<f64>);

/// A raw table (rows of counts) as it arrives. No `Debug`, like [`RawCounts`].
#[derive(Deserialize, Serialize, Clone)]
#[serde(transparent)]
pub struct RawTable(#[serde(deserialize_with = "rows")] Vec<Vec<f64>>);

/// The release request body on the wire, and its canonical form (see the module docs).
#[derive(Clone, Default)]
pub struct RequestBody {
    counts: Option<RawCounts>,
    table: Option<RawTable>,
    epsilon: Option<f64>,
    order: Option<f64>,
    mechanism: Kind,
    label: Option<String>,
    /// Public names of a table's rows, stored with the release.
    row_names: Option<Vec<String>>,
    /// The mechanism's own fields, in the order they arrived.
    params: Params,
    /// On a blocked dataset, the blocks the release reads (src/ledger/blocks.rs): a range, or
    /// one block.
    blocks: Option<BlockSpan>,
    block: Option<String>,
}

/// `blocks: {from, to}` as sent (keys parsed against the dataset's period by the caller).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockSpan {
    pub from: String,
    pub to: String,
}

/// The canonical form's layout, frozen: the fields that existed when the first fingerprints were
/// stored, in their order, and whether an absent one is written `null` (the fields of that first
/// version) or left out (every field added since, so that older requests keep their bytes).
/// Mechanism fields not listed here follow, sorted by name, left out when absent.
const CANONICAL: [(&str, bool); 16] = [
    ("counts", false),
    ("table", false),
    ("epsilon", true),
    ("order", true),
    ("mechanism", true),
    ("prior", true),
    ("r", true),
    ("alpha", true),
    ("sigma", true),
    ("scale", true),
    ("label", false),
    ("lower_bound", false),
    ("prior_shape", false),
    ("row_names", false),
    ("blocks", false),
    ("block", false),
];

/// The common fields of a release request body.
const COMMON: [&str; 9] = [
    "counts",
    "table",
    "epsilon",
    "order",
    "mechanism",
    "label",
    "row_names",
    "blocks",
    "block",
];

impl RequestBody {
    /// HMAC-SHA-256 of the dataset id, the caller and the canonical request under the server's
    /// key. The caller is part of it so that a key is a retry handle of the caller that made the
    /// request only: another token presenting the same key is refused whatever its body, instead
    /// of being told (by a replay) that it guessed the counts right.
    pub fn fingerprint(&self, key: &[u8; 32], dataset: uuid::Uuid, caller: &str) -> [u8; 32] {
        // Serialising plain numbers, strings and arrays cannot fail.
        let body = serde_json::to_vec(self).expect("a request body serialises");
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
        mac.update(dataset.as_bytes());
        mac.update(&(caller.len() as u64).to_le_bytes());
        mac.update(caller.as_bytes());
        mac.update(&body);
        mac.finalize().into_bytes().into()
    }

    pub fn mechanism(&self) -> Kind {
        self.mechanism
    }

    /// The blocks it names, as sent: `blocks` (`from`, `to`) and `block`.
    pub fn blocks(&self) -> (Option<(&str, &str)>, Option<&str>) {
        (
            self.blocks
                .as_ref()
                .map(|b| (b.from.as_str(), b.to.as_str())),
            self.block.as_deref(),
        )
    }
}

impl Serialize for RequestBody {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for (name, nullable) in CANONICAL {
            match name {
                "counts" => write(&mut map, name, self.counts.as_ref(), nullable)?,
                "table" => write(&mut map, name, self.table.as_ref(), nullable)?,
                "epsilon" => write(&mut map, name, self.epsilon.as_ref(), nullable)?,
                "order" => write(&mut map, name, self.order.as_ref(), nullable)?,
                "mechanism" => map.serialize_entry(name, &self.mechanism)?,
                "label" => write(&mut map, name, self.label.as_ref(), nullable)?,
                "row_names" => write(&mut map, name, self.row_names.as_ref(), nullable)?,
                "blocks" => write(&mut map, name, self.blocks.as_ref(), nullable)?,
                "block" => write(&mut map, name, self.block.as_ref(), nullable)?,
                param => write(&mut map, param, self.params.get(param), nullable)?,
            }
        }
        let mut rest: Vec<&(&str, ScalarOrCells)> = self
            .params
            .iter()
            .filter(|(name, _)| !CANONICAL.iter().any(|(c, _)| c == name))
            .collect();
        rest.sort_by_key(|(name, _)| *name);
        for (name, value) in rest {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

fn write<M: SerializeMap, T: Serialize>(
    map: &mut M,
    name: &str,
    value: Option<&T>,
    nullable: bool,
) -> Result<(), M::Error> {
    match value {
        Some(v) => map.serialize_entry(name, v),
        None if nullable => map.serialize_entry(name, &()),
        None => Ok(()),
    }
}

/// Every field name a body may carry: the common ones, then every mechanism's (computed once
/// per kind of body, for serde's "expected one of").
pub(crate) fn expected(
    common: &[&'static str],
    cell: &'static OnceLock<&'static [&'static str]>,
) -> &'static [&'static str] {
    cell.get_or_init(|| {
        let mut all: Vec<&'static str> = common.to_vec();
        all.extend(mechanisms::field_names());
        Box::leak(all.into_boxed_slice())
    })
}

/// A mechanism field's value, read as the registry declares it: a number, or a number or an
/// array of numbers (bounded as it is read). `None` for a name no mechanism declares.
pub(crate) fn next_param<'de, A: MapAccess<'de>>(
    map: &mut A,
    key: &str,
    params: &mut Vec<(&'static str, ScalarOrCells)>,
) -> Result<bool, A::Error> {
    let Some(name) = mechanisms::field_names()
        .iter()
        .copied()
        .find(|n| *n == key)
    else {
        return Ok(false);
    };
    if params.iter().any(|(n, _)| *n == name) {
        return Err(de::Error::duplicate_field(name));
    }
    let value = match mechanisms::field_wire(name) {
        Some(Wire::Number) => ScalarOrCells::Scalar(map.next_value::<f64>()?),
        Some(Wire::NumberOrNumbers) | None => map.next_value::<ScalarOrCells>()?,
    };
    params.push((name, value));
    Ok(true)
}

/// A common field read once (serde's "duplicate field" otherwise).
pub(crate) fn once<'de, A: MapAccess<'de>, T: Deserialize<'de>>(
    map: &mut A,
    slot: &mut Option<T>,
    name: &'static str,
) -> Result<(), A::Error> {
    if slot.is_some() {
        return Err(de::Error::duplicate_field(name));
    }
    *slot = Some(map.next_value()?);
    Ok(())
}

/// The refusal of a key no field has (naming the object, never the key: `crate::http::extract`).
pub(crate) fn unknown<E: de::Error>(key: &str, expected: &'static [&'static str]) -> E {
    de::Error::unknown_field(key, expected)
}

impl<'de> Deserialize<'de> for RequestBody {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Body;
        impl<'de> Visitor<'de> for Body {
            type Value = RequestBody;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a release request object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RequestBody, A::Error> {
                let mut b = RequestBody::default();
                let mut mechanism = None;
                let mut params = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "counts" => once(&mut map, &mut b.counts, "counts")?,
                        "table" => once(&mut map, &mut b.table, "table")?,
                        "epsilon" => once(&mut map, &mut b.epsilon, "epsilon")?,
                        "order" => once(&mut map, &mut b.order, "order")?,
                        "mechanism" => once(&mut map, &mut mechanism, "mechanism")?,
                        "label" => once(&mut map, &mut b.label, "label")?,
                        "row_names" => once(&mut map, &mut b.row_names, "row_names")?,
                        "blocks" => once(&mut map, &mut b.blocks, "blocks")?,
                        "block" => once(&mut map, &mut b.block, "block")?,
                        other => {
                            if !next_param(&mut map, other, &mut params)? {
                                static EXPECTED: OnceLock<&'static [&'static str]> =
                                    OnceLock::new();
                                return Err(unknown(other, expected(&COMMON, &EXPECTED)));
                            }
                        }
                    }
                }
                b.mechanism = mechanism.unwrap_or_default();
                b.params = Params::new(params);
                Ok(b)
            }
        }
        d.deserialize_map(Body)
    }
}

/// A parsed release request. No `Debug`: it holds the counts.
pub struct Request {
    pub input: Input,
    pub spec: Spec,
    pub label: Option<Label>,
    /// A table's public row names, one per row.
    pub row_names: Option<Names>,
}

impl Request {
    /// Parse a body against a dataset: the input first (so a malformed count is reported before
    /// anything about the mechanism), then the label and row names, then the mechanism.
    pub fn parse(body: &RequestBody, ctx: &Context) -> Result<Request, RequestError> {
        let input = parse_input(
            body.counts.as_ref().map(|c| c.0.as_slice()),
            body.table.as_ref().map(|t| t.0.as_slice()),
            ctx,
        )?;
        let label = body
            .label
            .clone()
            .map(Label::new)
            .transpose()
            .map_err(|e| RequestError::new("label", format!("label {e}")))?;
        let row_names = parse_row_names(body, &input)?;
        let targeting = Targeting {
            epsilon: body
                .epsilon
                .map(|e| Epsilon::new(e).map_err(|err| RequestError::param("epsilon", err)))
                .transpose()?,
            order: body
                .order
                .map(|o| Order::new(o).map_err(|e| RequestError::param("order", e)))
                .transpose()?,
            ledger_order: ctx.ledger_order,
        };
        let spec = mechanisms::parse(body.mechanism, &body.params, &targeting, &input, ctx)?;
        Ok(Request {
            input,
            spec,
            label,
            row_names,
        })
    }

    /// Calibrate and price at the ledger order (a table as one vector of its row length under
    /// the table form of the relation, `release::table`), then check that the f64 draw can
    /// carry it.
    pub fn plan(&self, ledger_order: Order, sensitivity: &Sensitivity) -> Result<Plan, PlanError> {
        let sens = self.input.priced_under(sensitivity);
        let plan = super::plan(&self.spec, self.input.cells(), ledger_order, &sens)?;
        match &self.input {
            Input::Vector(counts) => plan.draw().check(counts, &sens),
            Input::Table(t) => super::table::check(plan.draw(), t, &sens),
        }?;
        Ok(plan)
    }
}

/// `counts` or `table` of a request, parsed against the dataset and the service limits.
fn parse_input(
    counts: Option<&[f64]>,
    table: Option<&[Vec<f64>]>,
    ctx: &Context,
) -> Result<Input, RequestError> {
    let too_large = |field: &'static str, at: String| {
        RequestError::new(
            field,
            format!("{field}{at} exceeds the largest supported count, {MAX_COUNT:e}"),
        )
    };
    match (counts, table) {
        (Some(counts), None) => {
            let counts = Counts::new(counts.to_vec(), ctx.max_dimension)
                .map_err(|e| RequestError::param("counts", e))?;
            if let Some(index) = counts.as_slice().iter().position(|&x| x > MAX_COUNT) {
                return Err(too_large("counts", format!("[{index}]")));
            }
            if let Some(cells) = ctx.cells.filter(|&n| n != counts.len()) {
                return Err(RequestError::new(
                    "counts",
                    format!(
                        "the dataset names {cells} cells, and counts has {}",
                        counts.len()
                    ),
                ));
            }
            Ok(Input::Vector(counts))
        }
        (None, Some(rows)) => {
            let table_error = |e: TableError| RequestError::param("table", e);
            check_relation(&ctx.sensitivity).map_err(table_error)?;
            let t = CountTable::new(rows.to_vec(), ctx.max_dimension).map_err(table_error)?;
            for (row, counts) in t.rows().iter().enumerate() {
                if let Some(index) = counts.as_slice().iter().position(|&x| x > MAX_COUNT) {
                    return Err(too_large("table", format!("[{row}][{index}]")));
                }
            }
            if let Some(cells) = ctx.cells.filter(|&n| n != t.cells()) {
                return Err(RequestError::new(
                    "table",
                    format!(
                        "the dataset names {cells} cells, and the table's rows have {}",
                        t.cells()
                    ),
                ));
            }
            Ok(Input::Table(t))
        }
        (Some(_), Some(_)) => Err(RequestError::new(
            "table",
            "give counts (one vector) or table (rows of counts), not both",
        )),
        (None, None) => Err(RequestError::new(
            "counts",
            "counts (one vector) or table (rows of counts) is required",
        )),
    }
}

/// `row_names`: only with a table, one distinct name per row.
fn parse_row_names(body: &RequestBody, input: &Input) -> Result<Option<Names>, RequestError> {
    let Some(names) = &body.row_names else {
        return Ok(None);
    };
    let Input::Table(t) = input else {
        return Err(RequestError::new(
            "row_names",
            "row_names names a table's rows: give it with table, not with counts",
        ));
    };
    if names.len() != t.rows().len() {
        return Err(RequestError::new(
            "row_names",
            format!(
                "row_names has {} names for a table of {} rows",
                names.len(),
                t.rows().len()
            ),
        ));
    }
    Names::new(names.clone(), t.rows().len())
        .map(Some)
        .map_err(|e| RequestError::new("row_names", format!("row_names {e}")))
}

#[cfg(test)]
mod tests;
