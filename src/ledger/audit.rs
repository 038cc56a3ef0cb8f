//! The tamper-evident release log: every release row carries a SHA-256 chained over the previous
//! release of its dataset, and the dataset row carries the chain head. Pure functions only; the
//! stores compute the same link inside the transaction that charges the release, and
//! [`Verifier`] folds over the stored rows in seq order (one page at a time) to check them.
//!
//! Link encoding, version 1 (all integers big-endian; documented in SECURITY.md):
//!
//! ```text
//! hash_n = SHA-256( "dirichlet-release/release-log/v1"   32 bytes of ASCII
//!                 ‖ dataset id                            16 bytes (UUID)
//!                 ‖ release id                            16 bytes (UUID)
//!                 ‖ seq                                   i64
//!                 ‖ hash_{n-1}                            32 bytes; 32 zero bytes for the first
//!                 ‖ created_at                            i64, microseconds since the Unix epoch
//!                 ‖ cost                                  i64, ledger units of 2^-40
//!                 ‖ len(created_by) ‖ created_by           u32 ‖ UTF-8
//!                 ‖ SHA-256(canonical mechanism JSON)      32 bytes
//!                 ‖ SHA-256(canonical output JSON)         32 bytes )
//! ```
//!
//! seq and the previous hash sit together in the middle so that PostgreSQL can splice them in
//! from the locked dataset row within the one statement that charges the release.
//!
//! Canonical JSON: serde_json's compact form with object keys in byte order, every number
//! written as the IEEE double it denotes (shortest round-trip form). PostgreSQL's `jsonb`
//! rewrites number text (`1e17` comes back as `100000000000000000`), so the digest must depend on
//! a number's value, not its spelling; as in RFC 8785, integers beyond 2^53 are not told apart.

use std::io::Write;

use chrono::{DateTime, Utc};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

pub const TAG: &[u8; 32] = b"dirichlet-release/release-log/v1";
pub const GENESIS: [u8; 32] = [0; 32];

/// A `Write` that feeds SHA-256, so large outputs are hashed without a buffer of their JSON.
struct HashWriter(Sha256);

impl Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A JSON value serialised canonically (see the module comment).
struct Canonical<'a>(&'a Value);

impl Serialize for Canonical<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Number(n) => match n.as_f64() {
                Some(x) => s.serialize_f64(x),
                None => s.serialize_none(),
            },
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Canonical(item))?;
                }
                seq.end()
            }
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                let mut out = s.serialize_map(Some(keys.len()))?;
                for key in keys {
                    out.serialize_entry(key, &Canonical(&map[key]))?;
                }
                out.end()
            }
            other => other.serialize(s),
        }
    }
}

fn digest_of<T: Serialize + ?Sized>(value: &T) -> [u8; 32] {
    let mut writer = HashWriter(Sha256::new());
    serde_json::to_writer(&mut writer, value).expect("writing to a hasher cannot fail");
    writer.0.finalize().into()
}

/// SHA-256 of the canonical JSON of `value`.
pub fn json_digest(value: &Value) -> [u8; 32] {
    digest_of(&Canonical(value))
}

/// The stored output as the JSON value the log digests. Today a release stores one probability
/// vector, digested as a JSON array of numbers; the bytes equal `json_digest` of that array.
pub fn output_digest(distribution: &[f64]) -> [u8; 32] {
    digest_of(distribution)
}

/// What the log digests of a release's stored output and label. A vector without a label is the
/// plain JSON array of its numbers (the log's first format, so older links still verify); a
/// table or a labelled release is the canonical JSON object
/// `{"distribution" | "distributions": …, "label": …, "row_names": …}` (label and row names only
/// when present), so a table's shape, a label and row names are covered too.
pub fn release_output_digest(
    output: &super::Output,
    label: Option<&super::Label>,
    row_names: Option<&super::Names>,
) -> [u8; 32] {
    match (output, label, row_names) {
        (super::Output::Vector(v), None, None) => output_digest(v),
        _ => {
            let mut object = serde_json::Map::new();
            match output {
                super::Output::Vector(v) => object.insert("distribution".into(), v.clone().into()),
                super::Output::Table(t) => object.insert(
                    "distributions".into(),
                    t.iter_rows().map(|row| Value::from(row.to_vec())).collect(),
                ),
            };
            if let Some(label) = label {
                object.insert("label".into(), label.as_str().into());
            }
            if let Some(names) = row_names {
                object.insert("row_names".into(), names.as_slice().into());
            }
            json_digest(&Value::Object(object))
        }
    }
}

/// The fields of one link, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkFields {
    pub dataset_id: Uuid,
    pub id: Uuid,
    pub seq: i64,
    pub created_at: DateTime<Utc>,
    pub cost_units: i64,
    pub created_by: String,
    pub mechanism_digest: [u8; 32],
    pub output_digest: [u8; 32],
}

/// The bytes before seq: tag, dataset id, release id.
pub fn link_prefix(dataset_id: Uuid, id: Uuid) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(64);
    bytes.extend_from_slice(TAG);
    bytes.extend_from_slice(dataset_id.as_bytes());
    bytes.extend_from_slice(id.as_bytes());
    bytes
}

/// The bytes after created_at: cost, creator, mechanism and output digests.
pub fn link_suffix(
    cost_units: i64,
    created_by: &str,
    mechanism_digest: &[u8; 32],
    output_digest: &[u8; 32],
) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(76 + created_by.len());
    bytes.extend_from_slice(&cost_units.to_be_bytes());
    // A creator is a token id or "admin"; a length beyond u32 cannot be stored anyway.
    let len = u32::try_from(created_by.len()).unwrap_or(u32::MAX);
    bytes.extend_from_slice(&len.to_be_bytes());
    bytes.extend_from_slice(created_by.as_bytes());
    bytes.extend_from_slice(mechanism_digest);
    bytes.extend_from_slice(output_digest);
    bytes
}

/// hash_n from its fields and hash_{n-1}.
pub fn link_hash(fields: &LinkFields, prev: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(link_prefix(fields.dataset_id, fields.id));
    h.update(fields.seq.to_be_bytes());
    h.update(prev);
    h.update(fields.created_at.timestamp_micros().to_be_bytes());
    h.update(link_suffix(
        fields.cost_units,
        &fields.created_by,
        &fields.mechanism_digest,
        &fields.output_digest,
    ));
    h.finalize().into()
}

/// A dataset's chain head as stored on the dataset row, read in one statement.
#[derive(Debug, Clone, PartialEq)]
pub struct LogHead {
    /// The dataset's release count: the seq of the newest release.
    pub seq: i64,
    pub hash: [u8; 32],
    /// Releases with `seq <= chained_after` predate the log (migration 0003) and carry no hash;
    /// they are only counted and summed.
    pub chained_after: i64,
    pub spent_units: i64,
}

/// One stored release as the verifier sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    pub seq: i64,
    pub cost_units: i64,
    pub chain_hash: Option<Vec<u8>>,
    /// The link's fields, or why the row cannot be read back.
    pub fields: Result<LinkFields, String>,
}

/// Why verification stopped, and at which seq.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub seq: i64,
    /// `missing`, `altered`, `unreadable`, `head_mismatch` or `ledger_mismatch`.
    pub reason: &'static str,
    pub detail: String,
}

/// Checks a dataset's releases in seq order against the head read before them. Holds O(1) state,
/// so the caller may page through the log in any page size.
#[derive(Debug)]
pub struct Verifier {
    head: LogHead,
    next_seq: i64,
    prev: [u8; 32],
    cost_sum: i128,
    checked: i64,
    failure: Option<Failure>,
}

impl Verifier {
    pub fn new(head: LogHead) -> Self {
        Verifier {
            head,
            next_seq: 1,
            prev: GENESIS,
            cost_sum: 0,
            checked: 0,
            failure: None,
        }
    }

    /// The seq after which the next page starts.
    pub fn after_seq(&self) -> i64 {
        self.next_seq - 1
    }

    pub fn failed(&self) -> bool {
        self.failure.is_some()
    }

    fn fail(&mut self, seq: i64, reason: &'static str, detail: impl Into<String>) {
        if self.failure.is_none() {
            self.failure = Some(Failure {
                seq,
                reason,
                detail: detail.into(),
            });
        }
    }

    /// Feed the next stored release (entries must come in increasing seq, none above the head).
    pub fn push(&mut self, entry: &LogEntry) {
        if self.failed() {
            return;
        }
        if entry.seq != self.next_seq {
            let seq = self.next_seq;
            self.fail(seq, "missing", format!("release {seq} is not in the log"));
            return;
        }
        self.next_seq += 1;
        self.cost_sum += i128::from(entry.cost_units);
        if entry.seq <= self.head.chained_after {
            return;
        }
        let fields = match &entry.fields {
            Ok(fields) => fields,
            Err(why) => return self.fail(entry.seq, "unreadable", why.clone()),
        };
        let expected = link_hash(fields, &self.prev);
        if entry.chain_hash.as_deref() != Some(&expected[..]) {
            return self.fail(
                entry.seq,
                "altered",
                "the stored release does not match its chain hash",
            );
        }
        self.prev = expected;
        self.checked += 1;
    }

    /// The verdict once every entry up to the head has been pushed.
    pub fn finish(mut self) -> Verdict {
        if !self.failed() {
            if self.next_seq <= self.head.seq {
                let seq = self.next_seq;
                self.fail(seq, "missing", format!("release {seq} is not in the log"));
            } else if self.head.seq > self.head.chained_after && self.prev != self.head.hash {
                let seq = self.head.seq;
                self.fail(
                    seq,
                    "head_mismatch",
                    "the dataset's chain head is not the hash of its newest release",
                );
            } else if self.cost_sum != i128::from(self.head.spent_units) {
                let seq = self.head.seq;
                self.fail(
                    seq,
                    "ledger_mismatch",
                    "the dataset's spent budget is not the sum of its releases' costs",
                );
            }
        }
        Verdict {
            head: self.head,
            checked: self.checked,
            failure: self.failure,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub head: LogHead,
    /// Chained releases whose hash was recomputed and matched.
    pub checked: i64,
    pub failure: Option<Failure>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(seq: i64) -> LinkFields {
        LinkFields {
            dataset_id: Uuid::from_u128(1),
            id: Uuid::from_u128(100 + seq as u128),
            seq,
            created_at: DateTime::from_timestamp_micros(1_700_000_000_123_456).unwrap(),
            cost_units: 1 << 40,
            created_by: "admin".into(),
            mechanism_digest: json_digest(&json!({"kind": "dirichlet", "r": 2.5})),
            output_digest: output_digest(&[0.25, 0.75]),
        }
    }

    /// A valid chain of `n` entries and its head.
    fn chain(n: i64) -> (Vec<LogEntry>, LogHead) {
        let mut prev = GENESIS;
        let mut entries = Vec::new();
        for seq in 1..=n {
            let f = fields(seq);
            prev = link_hash(&f, &prev);
            entries.push(LogEntry {
                seq,
                cost_units: f.cost_units,
                chain_hash: Some(prev.to_vec()),
                fields: Ok(f),
            });
        }
        let head = LogHead {
            seq: n,
            hash: prev,
            chained_after: 0,
            spent_units: n << 40,
        };
        (entries, head)
    }

    fn verify(entries: &[LogEntry], head: LogHead) -> Verdict {
        let mut v = Verifier::new(head);
        for e in entries {
            v.push(e);
        }
        v.finish()
    }

    #[test]
    fn the_encoding_is_pinned() {
        // A change to this value is a change of log format: bump the tag, keep v1 verifiable.
        let f = fields(1);
        let mut manual = Vec::new();
        manual.extend_from_slice(b"dirichlet-release/release-log/v1");
        manual.extend_from_slice(&[0; 15]);
        manual.push(1);
        manual.extend_from_slice(&[0; 15]);
        manual.push(101);
        manual.extend_from_slice(&1i64.to_be_bytes());
        manual.extend_from_slice(&[0; 32]);
        manual.extend_from_slice(&1_700_000_000_123_456i64.to_be_bytes());
        manual.extend_from_slice(&(1i64 << 40).to_be_bytes());
        manual.extend_from_slice(&5u32.to_be_bytes());
        manual.extend_from_slice(b"admin");
        manual.extend_from_slice(&Sha256::digest(br#"{"kind":"dirichlet","r":2.5}"#));
        manual.extend_from_slice(&Sha256::digest(b"[0.25,0.75]"));
        assert_eq!(
            link_hash(&f, &GENESIS),
            <[u8; 32]>::from(Sha256::digest(&manual))
        );
    }

    #[test]
    fn canonical_json_ignores_key_order_and_number_spelling() {
        let a: Value = serde_json::from_str(r#"{"b": 1e17, "a": [2, 0.5]}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"a": [2.0, 5e-1], "b": 100000000000000000}"#).unwrap();
        assert_eq!(json_digest(&a), json_digest(&b));
        assert_ne!(
            json_digest(&a),
            json_digest(&json!({"a": [2, 0.5], "b": 1e16}))
        );
    }

    #[test]
    fn output_digest_is_the_canonical_digest_of_the_array() {
        let values = [0.1, 1e-300, 0.5, 1.0, 3e17];
        assert_eq!(output_digest(&values), json_digest(&json!(values)));
    }

    #[test]
    fn a_valid_chain_verifies() {
        let (entries, head) = chain(5);
        let verdict = verify(&entries, head);
        assert_eq!(verdict.failure, None);
        assert_eq!(verdict.checked, 5);
        let empty = verify(
            &[],
            LogHead {
                seq: 0,
                hash: GENESIS,
                chained_after: 0,
                spent_units: 0,
            },
        );
        assert_eq!(empty.failure, None);
    }

    #[test]
    fn tampering_fails_at_the_tampered_row() {
        let (entries, head) = chain(5);
        let reason = |entries: &[LogEntry], head: &LogHead| {
            let f = verify(entries, head.clone()).failure.expect("a failure");
            (f.seq, f.reason)
        };

        let mut edited = entries.clone();
        edited[2].fields.as_mut().unwrap().output_digest = output_digest(&[0.5, 0.5]);
        assert_eq!(reason(&edited, &head), (3, "altered"));

        let mut cheaper = entries.clone();
        cheaper[1].fields.as_mut().unwrap().cost_units -= 1;
        cheaper[1].cost_units -= 1;
        assert_eq!(reason(&cheaper, &head), (2, "altered"));

        let mut deleted = entries.clone();
        deleted.remove(3);
        assert_eq!(reason(&deleted, &head), (4, "missing"));

        assert_eq!(reason(&entries[..4], &head), (5, "missing"));

        let mut unreadable = entries.clone();
        unreadable[0].fields = Err("bad".into());
        assert_eq!(reason(&unreadable, &head), (1, "unreadable"));

        let moved = LogHead {
            hash: [7; 32],
            ..head.clone()
        };
        assert_eq!(reason(&entries, &moved), (5, "head_mismatch"));

        let overspent = LogHead {
            spent_units: head.spent_units - 1,
            ..head.clone()
        };
        assert_eq!(reason(&entries, &overspent), (5, "ledger_mismatch"));
    }

    #[test]
    fn releases_before_the_log_are_counted_not_hashed() {
        let (mut entries, _) = chain(2);
        let legacy = LogEntry {
            seq: 1,
            cost_units: 7,
            chain_hash: None,
            fields: Err("never read".into()),
        };
        // Re-chain 2 and 3 after one legacy release.
        let mut prev = GENESIS;
        for (i, e) in entries.iter_mut().enumerate() {
            let f = e.fields.as_mut().unwrap();
            f.seq = i as i64 + 2;
            e.seq = f.seq;
            prev = link_hash(f, &prev);
            e.chain_hash = Some(prev.to_vec());
        }
        entries.insert(0, legacy);
        let head = LogHead {
            seq: 3,
            hash: prev,
            chained_after: 1,
            spent_units: 7 + (2 << 40),
        };
        let verdict = verify(&entries, head);
        assert_eq!(verdict.failure, None);
        assert_eq!(verdict.checked, 2);
    }
}
