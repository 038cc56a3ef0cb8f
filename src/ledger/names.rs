//! Public names: a dataset's name, its cells' names, a release's label and its table's row names.
//!
//! They are chosen by clients, stored, and shown back to people (listings, the console, CSV
//! exports), so two names that look the same must be the same name, and no name may hide text a
//! reader cannot see. One rule for all of them ([`parse_name`]):
//!
//! - surrounding whitespace (Unicode `White_Space`: spaces, tabs, line breaks) is trimmed, as a
//!   form field would;
//! - what is left is 1 to [`MAX_NAME_CHARS`] characters (Unicode scalar values), counted both as
//!   sent and once normalised;
//! - it holds no control character (general category Cc), no format character (Cf: zero-width
//!   space and joiners, the byte order mark, soft hyphen, the bidirectional embeddings, overrides
//!   and isolates U+202A–U+202E and U+2066–U+2069, tag characters...), and no line or paragraph
//!   separator (Zl, Zp: U+2028, U+2029);
//! - it is stored in Normalization Form C, so that "é" sent precomposed (U+00E9) or decomposed
//!   (e + U+0301) is one name, and lists of names are told apart after normalisation.
//!
//! Stored names are read back as they were stored ([`Label::stored`], [`Names::stored`]): names
//! stored under the earlier rule (no Cc only, nothing normalised) are neither rewritten nor
//! refused, since the release log digests them as stored.

use std::collections::HashMap;

use unicode_normalization::UnicodeNormalization;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// The most characters of any public name or label.
pub const MAX_NAME_CHARS: usize = 200;

/// The most characters of a release's label (the same as any name).
pub const MAX_LABEL_CHARS: usize = MAX_NAME_CHARS;

/// Why a text is not a name. The messages name no field (the caller does) and quote nothing of
/// the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error(
        "must have 1 to {MAX_NAME_CHARS} characters once surrounding whitespace is trimmed \
         (it is blank or too long)"
    )]
    Length,
    #[error("must not contain control characters")]
    Control,
    #[error(
        "must not contain invisible format characters (such as zero-width spaces, byte order \
         marks or bidirectional controls) or line and paragraph separators"
    )]
    Format,
}

/// What a character does to a name: `None` if it may be in one.
fn refusal(c: char) -> Option<NameError> {
    match c.general_category() {
        GeneralCategory::Control => Some(NameError::Control),
        GeneralCategory::Format
        | GeneralCategory::LineSeparator
        | GeneralCategory::ParagraphSeparator => Some(NameError::Format),
        _ => None,
    }
}

fn check(text: &str) -> Result<(), NameError> {
    let mut chars = 0usize;
    for c in text.chars() {
        if let Some(e) = refusal(c) {
            return Err(e);
        }
        chars += 1;
    }
    if chars == 0 || chars > MAX_NAME_CHARS {
        return Err(NameError::Length);
    }
    Ok(())
}

/// The name `text` stands for: trimmed, checked, in NFC (see the module docs).
pub fn parse_name(text: &str) -> Result<String, NameError> {
    let trimmed = text.trim();
    // Length first: an empty or blank name is reported as such, whatever else it holds.
    let sent = trimmed.chars().count();
    if sent == 0 || sent > MAX_NAME_CHARS {
        return Err(NameError::Length);
    }
    check(trimmed)?;
    let normal: String = trimmed.nfc().collect();
    // Normalisation can lengthen a text (a few characters decompose and do not recompose), and
    // the checked form is the stored one.
    check(&normal)?;
    Ok(normal)
}

/// The earlier rule, which every stored name and label satisfies: 1 to 200 characters, no
/// control character. Reading checks this much, so that a damaged row is still noticed.
fn stored_ok(text: &str) -> bool {
    let chars = text.chars().count();
    chars > 0 && chars <= MAX_NAME_CHARS && !text.chars().any(char::is_control)
}

/// A dataset's name, as registered (see the module docs for the rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetName(String);

impl DatasetName {
    pub fn new(text: &str) -> Result<DatasetName, NameError> {
        parse_name(text).map(DatasetName)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// A client's free-text name for a release (e.g. "NB feature 7 | by class"), so that the
/// tables of a model can be found again. It is echoed in listings and must not break a log line
/// or a terminal, nor pass for another label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label(String);

impl Label {
    pub fn new(text: String) -> Result<Label, NameError> {
        parse_name(&text).map(Label)
    }

    /// A label read back from the store, as it was stored; `None` if it breaks even the earlier
    /// rule (then the row is damaged).
    pub fn stored(text: String) -> Option<Label> {
        stored_ok(&text).then_some(Label(text))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Public names of cells (a dataset's `cells`) or of a table's rows (a release's `row_names`):
/// at least one, each a name by the rule of the module docs, all different once normalised (a
/// name must pick out one cell). Names are public metadata the caller chose; they are stored
/// and echoed, so they must never be derived from the private counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names(Vec<String>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamesError {
    #[error("must name at least one")]
    Empty,
    #[error("has {got} names, more than the maximum of {max}")]
    TooMany { got: usize, max: usize },
    #[error("name {index} {source}")]
    Name { index: usize, source: NameError },
    #[error("names {first} and {second} are the same (once surrounding whitespace is trimmed and both are normalised to NFC)")]
    Duplicate { first: usize, second: usize },
}

impl Names {
    pub fn new(names: Vec<String>, max: usize) -> Result<Names, NamesError> {
        if names.is_empty() {
            return Err(NamesError::Empty);
        }
        if names.len() > max {
            return Err(NamesError::TooMany {
                got: names.len(),
                max,
            });
        }
        let names = names
            .iter()
            .enumerate()
            .map(|(index, name)| {
                parse_name(name).map_err(|source| NamesError::Name { index, source })
            })
            .collect::<Result<Vec<String>, NamesError>>()?;
        if let Some((first, second)) = first_duplicate(&names) {
            return Err(NamesError::Duplicate { first, second });
        }
        Ok(Names(names))
    }

    /// Names read back from the store, as they were stored; `None` if they break even the
    /// earlier rule (then the row is damaged).
    pub fn stored(names: Vec<String>) -> Option<Names> {
        let ok = !names.is_empty()
            && names.iter().all(|n| stored_ok(n))
            && first_duplicate(&names).is_none();
        ok.then_some(Names(names))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }
}

fn first_duplicate(names: &[String]) -> Option<(usize, usize)> {
    let mut seen = HashMap::with_capacity(names.len());
    names.iter().enumerate().find_map(|(index, name)| {
        seen.insert(name.as_str(), index)
            .map(|first| (first, index))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_trimmed_and_kept() {
        assert_eq!(
            Label::new("NB feature 7 | by class".into())
                .unwrap()
                .as_str(),
            "NB feature 7 | by class"
        );
        assert_eq!(parse_name("  flu \t\n").unwrap(), "flu");
        // Whitespace inside a name is kept, as are the marks and symbols of real names.
        assert_eq!(parse_name("a  b").unwrap(), "a  b");
        assert_eq!(parse_name("ünïcode | ☃ 日本").unwrap(), "ünïcode | ☃ 日本");
        assert_eq!(parse_name("a\u{a0}b").unwrap(), "a\u{a0}b");
        assert!(parse_name(&"é".repeat(200)).is_ok());
        // Line breaks and separators around the name are whitespace, trimmed.
        assert_eq!(parse_name("\u{2028}flu\u{2029}\u{85}").unwrap(), "flu");
    }

    #[test]
    fn blank_and_long_names_are_refused() {
        for blank in ["", " ", " \t ", "\n", "\u{3000}", "\u{a0}\u{2003}"] {
            assert_eq!(parse_name(blank), Err(NameError::Length), "{blank:?}");
        }
        assert_eq!(parse_name(&"é".repeat(201)), Err(NameError::Length));
        assert_eq!(parse_name(&"x".repeat(201)), Err(NameError::Length));
        // 200 once trimmed.
        assert!(parse_name(&format!("  {}  ", "x".repeat(200))).is_ok());
        // Counted once normalised too: U+0958 (a composition exclusion) becomes two characters.
        assert_eq!("\u{958}".nfc().count(), 2);
        assert_eq!(parse_name(&"\u{958}".repeat(101)), Err(NameError::Length));
        assert!(parse_name(&"\u{958}".repeat(100)).is_ok());
    }

    #[test]
    fn control_characters_are_refused() {
        for bad in [
            "a\nb",
            "tab\there",
            "\u{7f}",
            "a\u{85}b",
            "\0",
            "a\u{1f}",
            "\u{1c}a",
        ] {
            assert_eq!(parse_name(bad), Err(NameError::Control), "{bad:?}");
        }
    }

    #[test]
    fn format_characters_and_separators_are_refused() {
        for bad in [
            "flu\u{200b}", // zero-width space
            "\u{feff}flu", // byte order mark
            "fl\u{ad}u",   // soft hyphen
            "fl\u{200c}u", // zero-width non-joiner
            "fl\u{200d}u", // zero-width joiner
            "fl\u{2060}u", // word joiner
            "\u{202e}ulf", // right-to-left override
            "a\u{202a}b",  // left-to-right embedding
            "a\u{2066}b",  // left-to-right isolate
            "a\u{2069}b",  // pop directional isolate
            "a\u{200e}b",  // left-to-right mark
            "a\u{61c}b",   // Arabic letter mark
            "a\u{e0041}b", // tag latin capital letter A
            "a\u{2028}b",  // line separator (inside the name)
            "a\u{2029}b",  // paragraph separator
            "a\u{1d173}b", // musical symbol begin beam
        ] {
            assert_eq!(parse_name(bad), Err(NameError::Format), "{bad:?}");
        }
    }

    #[test]
    fn names_are_stored_in_nfc() {
        let nfd = "Cafe\u{301}";
        assert_eq!(parse_name(nfd).unwrap(), "Café");
        assert_eq!(parse_name("Café").unwrap(), "Café");
        assert_eq!(Label::new(nfd.into()).unwrap().as_str(), "Café");
        assert_eq!(DatasetName::new(nfd).unwrap().as_str(), "Café");
        // Ångström sign and Ohm sign are canonically equivalent to the letters (NFC), while
        // compatibility forms (ligatures, superscripts) keep their meaning.
        assert_eq!(parse_name("\u{212b}").unwrap(), "\u{c5}");
        assert_eq!(parse_name("m²").unwrap(), "m²");
        assert_eq!(parse_name("ﬁle").unwrap(), "ﬁle");
    }

    #[test]
    fn names_are_compared_once_normalised() {
        let names = |list: &[&str]| Names::new(list.iter().map(|s| s.to_string()).collect(), 10);
        assert_eq!(
            names(&["flu", "caf\u{e9}", "cafe\u{301}"]),
            Err(NamesError::Duplicate {
                first: 1,
                second: 2
            })
        );
        assert_eq!(
            names(&["flu", " flu "]),
            Err(NamesError::Duplicate {
                first: 0,
                second: 1
            })
        );
        assert_eq!(
            names(&["flu", "flu\u{200b}"]),
            Err(NamesError::Name {
                index: 1,
                source: NameError::Format
            })
        );
        assert_eq!(
            names(&["a", " "]),
            Err(NamesError::Name {
                index: 1,
                source: NameError::Length
            })
        );
        let ok = names(&[" flu", "cafe\u{301}", "Flu"]).unwrap();
        assert_eq!(ok.as_slice(), ["flu", "café", "Flu"]);
        assert_eq!(names(&[]), Err(NamesError::Empty));
        assert_eq!(
            names(&["a"; 11]),
            Err(NamesError::TooMany { got: 11, max: 10 })
        );
    }

    /// What the earlier rule accepted is read back unchanged, and what it refused is damage.
    #[test]
    fn stored_names_are_read_as_stored() {
        for legacy in [" flu", "flu\u{200b}", "cafe\u{301}", "\u{202e}ulf"] {
            assert_eq!(Label::stored(legacy.into()).unwrap().as_str(), legacy);
        }
        let legacy = vec!["caf\u{e9}".to_string(), "cafe\u{301}".to_string()];
        assert_eq!(Names::stored(legacy.clone()).unwrap().as_slice(), legacy);
        assert_eq!(Label::stored(String::new()), None);
        assert_eq!(Label::stored("a\nb".into()), None);
        assert_eq!(Names::stored(vec![]), None);
        assert_eq!(Names::stored(vec!["a".into(), "a".into()]), None);
    }

    /// The messages name no field and quote nothing of the name.
    #[test]
    fn errors_quote_nothing() {
        for (text, error) in [
            ("31415926\u{200b}", NameError::Format),
            ("31415926\n", NameError::Control),
        ] {
            let refused = parse_name(&format!("{text}x"));
            assert_eq!(refused, Err(error));
            assert!(!error.to_string().contains("31415926"));
        }
    }
}
