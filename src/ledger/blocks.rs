//! Data blocks: a dataset whose records arrive over time, split by the UTC period of the event
//! each record describes (docs/PRIVACY.md, "Budgets over time"). Each block has its own cap; a
//! release names the blocks it reads and is charged its full cost on every one of them.
//!
//! A block is named by its key (`2026-12-05T13` an hour, `2026-12-05` a day, `2026-W49` an ISO
//! week, `2026-12` a month) and numbered by its index: hours, days, weeks (from a Monday) or
//! months since the Unix epoch, so that a range of blocks is a range of integers. Keys are only
//! ever parsed from what a client sent, never derived from the server's clock.

use std::fmt;

use chrono::{Datelike, Duration, NaiveDate, Weekday};

/// How a blocked dataset's records are split, by the UTC time of their event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Period {
    Hour,
    Day,
    Week,
    Month,
}

impl Period {
    pub const ALL: [Period; 4] = [Period::Hour, Period::Day, Period::Week, Period::Month];

    pub fn as_str(self) -> &'static str {
        match self {
            Period::Hour => "hour",
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
        }
    }

    pub fn parse(name: &str) -> Option<Period> {
        Period::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// What a key of this period looks like, for error messages.
    pub fn example(self) -> &'static str {
        match self {
            Period::Hour => "2026-12-05T13",
            Period::Day => "2026-12-05",
            Period::Week => "2026-W49",
            Period::Month => "2026-12",
        }
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn epoch() -> NaiveDate {
    NaiveDate::from_ymd_opt(1970, 1, 1).expect("1970-01-01 is a date")
}

/// 1970-01-05, the first Monday after the epoch: week 0.
fn first_monday() -> NaiveDate {
    NaiveDate::from_ymd_opt(1970, 1, 5).expect("1970-01-05 is a date")
}

/// One block of a period, by index. Only [`BlockKey::parse`] and arithmetic on a parsed key make
/// one, so every key names a real period of a year between 1000 and 9999.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey {
    period: Period,
    index: i64,
}

/// Why a key or a range was refused; the message never quotes what was sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BlockError(pub String);

fn digits(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl BlockKey {
    /// The key `text` of a block of `period`: exactly the form of that period (zero-padded,
    /// four-digit year from 1000 to 9999), naming a period that exists (no 2026-02-30, no week
    /// 53 in a year without one).
    pub fn parse(period: Period, text: &str) -> Result<BlockKey, BlockError> {
        let wrong = || {
            BlockError(format!(
                "a {period} block key has the form {} (UTC) and names a real {period}",
                period.example()
            ))
        };
        let year = |s: &str| -> Option<i32> {
            let y = digits(s)?;
            (s.len() == 4 && (1000..=9999).contains(&y)).then_some(y as i32)
        };
        let two = |s: &str| -> Option<u32> { (s.len() == 2).then(|| digits(s)).flatten() };
        let date = |s: &str| -> Option<NaiveDate> {
            let b = s.as_bytes();
            if s.len() != 10 || b[4] != b'-' || b[7] != b'-' {
                return None;
            }
            NaiveDate::from_ymd_opt(year(&s[..4])?, two(&s[5..7])?, two(&s[8..10])?)
        };
        let index = match period {
            Period::Day => date(text).map(|d| (d - epoch()).num_days()),
            Period::Hour => (|| {
                if text.len() != 13 || text.as_bytes()[10] != b'T' {
                    return None;
                }
                let hour = two(&text[11..13]).filter(|h| *h < 24)?;
                Some((date(&text[..10])? - epoch()).num_days() * 24 + i64::from(hour))
            })(),
            Period::Week => (|| {
                if text.len() != 8 || &text[4..6] != "-W" {
                    return None;
                }
                let monday =
                    NaiveDate::from_isoywd_opt(year(&text[..4])?, two(&text[6..8])?, Weekday::Mon)?;
                Some((monday - first_monday()).num_days().div_euclid(7))
            })(),
            Period::Month => (|| {
                if text.len() != 7 || text.as_bytes()[4] != b'-' {
                    return None;
                }
                let month = two(&text[5..7]).filter(|m| (1..=12).contains(m))?;
                Some(i64::from(year(&text[..4])?) * 12 + i64::from(month) - 1 - 1970 * 12)
            })(),
        };
        index
            .map(|index| BlockKey { period, index })
            .ok_or_else(wrong)
    }

    /// A key of any period, told apart by its form (the four forms differ in length).
    pub fn parse_any(text: &str) -> Result<BlockKey, BlockError> {
        let period = match text.len() {
            13 => Period::Hour,
            10 => Period::Day,
            8 => Period::Week,
            7 => Period::Month,
            _ => return Err(BlockError("not a block key".into())),
        };
        BlockKey::parse(period, text)
    }

    /// The block of `period` numbered `index` (as stored).
    pub fn from_index(period: Period, index: i64) -> BlockKey {
        BlockKey { period, index }
    }

    pub fn period(self) -> Period {
        self.period
    }

    pub fn index(self) -> i64 {
        self.index
    }
}

impl fmt::Display for BlockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.period {
            Period::Day => write!(f, "{}", epoch() + Duration::days(self.index)),
            Period::Hour => {
                let day = epoch() + Duration::days(self.index.div_euclid(24));
                write!(f, "{day}T{:02}", self.index.rem_euclid(24))
            }
            Period::Week => {
                let week = (first_monday() + Duration::weeks(self.index)).iso_week();
                write!(f, "{:04}-W{:02}", week.year(), week.week())
            }
            Period::Month => {
                let months = self.index + 1970 * 12;
                write!(
                    f,
                    "{:04}-{:02}",
                    months.div_euclid(12),
                    months.rem_euclid(12) + 1
                )
            }
        }
    }
}

impl serde::Serialize for BlockKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The blocks a release reads: `first` to `last`, both included, of one period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockRange {
    first: BlockKey,
    last: BlockKey,
}

impl BlockRange {
    /// `first` to `last` of `period` (parsed), at most `max` blocks.
    pub fn new(first: BlockKey, last: BlockKey, max: u32) -> Result<BlockRange, BlockError> {
        if first.period != last.period {
            return Err(BlockError(
                "from and to must name blocks of one period".into(),
            ));
        }
        if last.index < first.index {
            return Err(BlockError("to must not come before from".into()));
        }
        let len = last.index - first.index + 1;
        if len > i64::from(max) {
            return Err(BlockError(format!(
                "a range reads at most {max} blocks; this one reads {len}"
            )));
        }
        Ok(BlockRange { first, last })
    }

    /// The range a request names on a dataset split by `period` (`None`: not split): `blocks`
    /// (`from`, `to`) or `block`, exactly one of them on a blocked dataset, neither on another.
    /// The error names the field to blame.
    pub fn from_request(
        period: Option<Period>,
        blocks: Option<(&str, &str)>,
        block: Option<&str>,
        max: u32,
    ) -> Result<Option<BlockRange>, (&'static str, BlockError)> {
        let Some(period) = period else {
            return match (blocks, block) {
                (None, None) => Ok(None),
                (Some(_), _) => Err((
                    "blocks",
                    BlockError("the dataset is not split into blocks".into()),
                )),
                (None, Some(_)) => Err((
                    "block",
                    BlockError("the dataset is not split into blocks".into()),
                )),
            };
        };
        match (blocks, block) {
            (Some(_), Some(_)) => Err((
                "blocks",
                BlockError("give blocks or block, not both".into()),
            )),
            (None, None) => Err((
                "blocks",
                BlockError(format!(
                    "the dataset is split by {period}: name the blocks read, as blocks \
                     {{from, to}} or block"
                )),
            )),
            (None, Some(key)) => {
                let key = BlockKey::parse(period, key).map_err(|e| ("block", e))?;
                Ok(Some(
                    BlockRange::new(key, key, max).map_err(|e| ("block", e))?,
                ))
            }
            (Some((from, to)), None) => {
                let first = BlockKey::parse(period, from).map_err(|e| ("blocks.from", e))?;
                let last = BlockKey::parse(period, to).map_err(|e| ("blocks.to", e))?;
                Ok(Some(
                    BlockRange::new(first, last, max).map_err(|e| ("blocks", e))?,
                ))
            }
        }
    }

    pub fn first(self) -> BlockKey {
        self.first
    }

    pub fn last(self) -> BlockKey {
        self.last
    }

    pub fn period(self) -> Period {
        self.first.period
    }

    /// How many blocks it reads.
    pub fn len(self) -> i64 {
        self.last.index - self.first.index + 1
    }

    pub fn is_empty(self) -> bool {
        false
    }

    /// Every block, in order.
    pub fn keys(self) -> impl Iterator<Item = BlockKey> {
        let period = self.period();
        (self.first.index..=self.last.index).map(move |index| BlockKey { period, index })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(p: Period, s: &str) -> BlockKey {
        BlockKey::parse(p, s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn keys_round_trip_at_the_boundaries() {
        for (p, s) in [
            (Period::Day, "1970-01-01"),
            (Period::Day, "2024-02-29"),
            (Period::Day, "2026-12-31"),
            (Period::Day, "1969-12-31"),
            (Period::Hour, "2026-12-05T13"),
            (Period::Hour, "2026-12-31T23"),
            (Period::Hour, "1969-12-31T23"),
            (Period::Week, "2026-W49"),
            (Period::Week, "2026-W53"),
            (Period::Week, "2020-W53"),
            (Period::Week, "2027-W01"),
            (Period::Week, "1970-W01"),
            (Period::Month, "2026-12"),
            (Period::Month, "1970-01"),
            (Period::Month, "1969-12"),
        ] {
            assert_eq!(key(p, s).to_string(), s);
            assert_eq!(BlockKey::parse_any(s), Ok(key(p, s)));
        }
        assert_eq!(key(Period::Day, "1970-01-01").index(), 0);
        assert_eq!(key(Period::Hour, "1970-01-01T05").index(), 5);
        assert_eq!(key(Period::Month, "1971-02").index(), 13);
        assert_eq!(key(Period::Week, "1970-W02").index(), 0);
        assert_eq!(key(Period::Week, "1970-W01").index(), -1);
        // ISO 2026-W53 runs from Monday 2026-12-28; 2027-W01 is the week after it.
        assert_eq!(
            key(Period::Week, "2027-W01").index() - key(Period::Week, "2026-W53").index(),
            1
        );
    }

    #[test]
    fn impossible_or_misshapen_keys_are_refused() {
        for (p, s) in [
            (Period::Day, "2026-02-29"),
            (Period::Day, "2023-02-29"),
            (Period::Day, "2026-13-01"),
            (Period::Day, "2026-12-32"),
            (Period::Day, "2026-12-5"),
            (Period::Day, "2026/12/05"),
            (Period::Day, "+026-12-05"),
            (Period::Day, "2026-12-05T13"),
            (Period::Day, ""),
            (Period::Hour, "2026-12-05T24"),
            (Period::Hour, "2026-12-05 13"),
            (Period::Week, "2021-W53"),
            (Period::Week, "2026-W00"),
            (Period::Week, "2026-W54"),
            (Period::Week, "2026-w49"),
            (Period::Month, "2026-00"),
            (Period::Month, "2026-13"),
            (Period::Month, "0999-12"),
            (Period::Month, "2026-1 "),
        ] {
            assert!(BlockKey::parse(p, s).is_err(), "{p} {s:?} was accepted");
        }
        assert!(BlockKey::parse_any("2026").is_err());
    }

    #[test]
    fn ranges_are_ordered_single_period_and_capped() {
        let d = |s| key(Period::Day, s);
        let week = BlockRange::new(d("2026-12-01"), d("2026-12-07"), 400).unwrap();
        assert_eq!(week.len(), 7);
        assert_eq!(
            week.keys().map(|k| k.to_string()).collect::<Vec<_>>()[6],
            "2026-12-07"
        );
        assert!(BlockRange::new(d("2026-12-07"), d("2026-12-01"), 400).is_err());
        assert!(BlockRange::new(d("2026-01-01"), d("2026-12-31"), 364).is_err());
        assert!(BlockRange::new(d("2026-01-01"), d("2026-12-31"), 365).is_ok());
        assert!(BlockRange::new(d("2026-01-01"), key(Period::Month, "2026-01"), 400).is_err());

        let get = |blocks, block| BlockRange::from_request(Some(Period::Day), blocks, block, 400);
        assert_eq!(get(None, None).unwrap_err().0, "blocks");
        assert_eq!(get(None, Some("2026-12")).unwrap_err().0, "block");
        assert_eq!(
            get(Some(("2026-12-01", "x")), None).unwrap_err().0,
            "blocks.to"
        );
        assert_eq!(
            get(Some(("2026-12-02", "2026-12-01")), None).unwrap_err().0,
            "blocks"
        );
        assert_eq!(get(None, Some("2026-12-05")).unwrap().unwrap().len(), 1);
        assert_eq!(
            BlockRange::from_request(None, None, Some("2026-12-05"), 400)
                .unwrap_err()
                .0,
            "block"
        );
        assert_eq!(BlockRange::from_request(None, None, None, 400), Ok(None));
    }

    proptest! {
        /// Every index is a key that parses back to it, for every period, across centuries.
        #[test]
        fn every_index_round_trips(index in -300_000i64..600_000, p in 0usize..4) {
            let period = Period::ALL[p];
            let key = BlockKey::from_index(period, index);
            let text = key.to_string();
            if let Ok(parsed) = BlockKey::parse(period, &text) {
                prop_assert_eq!(parsed, key);
            } else {
                // Only years outside 1000..=9999 may be refused.
                let year = text.split('-').next().unwrap_or("");
                prop_assert!(year.len() != 4 || !(1000..=9999).contains(&year.parse::<i32>().unwrap_or(0)));
            }
        }

        /// Consecutive indices are consecutive periods: days a day apart, and so on.
        #[test]
        fn consecutive_days_are_a_day_apart(index in -10_000i64..30_000) {
            let a = BlockKey::from_index(Period::Day, index).to_string();
            let b = BlockKey::from_index(Period::Day, index + 1).to_string();
            let a = NaiveDate::parse_from_str(&a, "%Y-%m-%d").unwrap();
            let b = NaiveDate::parse_from_str(&b, "%Y-%m-%d").unwrap();
            prop_assert_eq!(b - a, Duration::days(1));
        }
    }
}
