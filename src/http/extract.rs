//! Extractors whose rejections are [`ApiError`]s, so axum's own failures speak problem+json.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, RawPathParamsRejection};
use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::wire::CellLimit;
#[cfg(test)]
use crate::wire::{cells, rows, ScalarOrCells};

use super::auth::Caller;
use super::error::ApiError;
use super::AppState;

/// JSON body. The body must be a JSON object; a data error never echoes what was sent (it could
/// be a count): the detail names the JSON path and a generic description of what is wrong.
/// Sequences of numbers are bounded while they are parsed ([`crate::wire::cells`]), at the dataset dimension
/// limit, so a body cannot make the parser allocate more than that per sequence.
pub struct ApiJson<T>(pub T);

impl<T> FromRequest<AppState> for ApiJson<T>
where
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let is_json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<mime_lite::Mime>().ok())
            .is_some_and(|m| m.is_json());
        if !is_json {
            return Err(ApiError::UnsupportedMediaType(
                "expected a body with Content-Type: application/json".into(),
            ));
        }
        // Large bodies take a share of a server-wide byte allowance for as long as they are read
        // and parsed, so that many at once queue instead of multiplying the peak memory.
        let declared = super::limits::content_length(req.headers());
        let _permit = state
            .bodies
            .admit(declared, state.settings.max_body_bytes)
            .await?;
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(bytes_rejection)?;
        parse_json_bounded(&bytes, state.settings.max_dimension).map(ApiJson)
    }
}

/// Deserialize a JSON document into `T` with problem-shaped errors that quote nothing sent,
/// with number sequences unbounded (callers that know the dimension limit use
/// [`parse_json_bounded`]).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    parse_json_bounded(bytes, usize::MAX)
}

/// [`parse_json`] with every [`crate::wire::cells`] sequence limited to `max_cells` numbers while it is
/// parsed, and all of them together to twice that.
pub fn parse_json_bounded<T: DeserializeOwned>(
    bytes: &[u8],
    max_cells: usize,
) -> Result<T, ApiError> {
    // Syntax first, so a data error never hides broken JSON after it. An out-of-range number
    // (`1e999`) is valid syntax with an unrepresentable value: the typed pass reports it (422).
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        if !is_out_of_range(&e) {
            return Err(syntax_error(&e));
        }
    }
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(ApiError::invalid("the request body must be a JSON object"));
    }
    let _limit = CellLimit::set(max_cells);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let inner = err.inner().to_string();
        let path = render_path(err.path(), unknown_key(&inner));
        let inner = err.into_inner();
        match inner.classify() {
            _ if is_out_of_range(&inner) => data_error(&path, "number out of range"),
            serde_json::error::Category::Syntax
            | serde_json::error::Category::Eof
            | serde_json::error::Category::Io => syntax_error(&inner),
            serde_json::error::Category::Data => data_error(&path, &inner.to_string()),
        }
    })?;
    de.end().map_err(|e| syntax_error(&e))?;
    Ok(value)
}

/// The key an "unknown field" error is about (serde words it ``unknown field `key`, …``).
fn unknown_key(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.find('`').map(|end| &rest[..end])
}

/// The path as `a.b[2].c`. For an unknown field the error names the object that has it: when the
/// path ends with the sent key itself (a derived `deny_unknown_fields` reads the key as part of the
/// path), that segment is left out; a hand-written visitor that refuses a key it has read ends its
/// path at the object already.
fn render_path(path: &serde_path_to_error::Path, unknown: Option<&str>) -> String {
    use serde_path_to_error::Segment;
    let segments: Vec<&Segment> = path.iter().collect();
    let ends_with_key = matches!(
        (segments.last(), unknown),
        (Some(Segment::Map { key }), Some(unknown)) if key == unknown
    );
    let keep = if ends_with_key {
        segments.len() - 1
    } else {
        segments.len()
    };
    let mut out = String::new();
    for segment in &segments[..keep] {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push('?');
            }
        }
    }
    if out.is_empty() {
        ".".into()
    } else {
        out
    }
}

fn is_out_of_range(e: &serde_json::Error) -> bool {
    e.to_string().starts_with("number out of range")
}

/// Where the JSON broke, never what it said.
fn syntax_error(e: &serde_json::Error) -> ApiError {
    ApiError::Malformed(format!(
        "the body is not valid JSON (line {}, column {})",
        e.line(),
        e.column()
    ))
}

/// A 422 naming the field by its path (our field names and array indexes only) and the kind of
/// error; serde's message is read only to tell the kind, since it quotes the offending value.
fn data_error(path: &str, message: &str) -> ApiError {
    let message = match message.rfind(" at line ") {
        Some(i) => &message[..i],
        None => message,
    };
    let reason = describe(message);
    let field = if path.starts_with("counts") {
        "counts"
    } else {
        path
    };
    if path == "." || path.is_empty() {
        ApiError::invalid(format!("the body {reason}"))
    } else {
        ApiError::invalid_field(field, format!("{path} {reason}"))
    }
}

/// A generic description of a serde data error. What comes after serde's last ", expected " is
/// the `expecting` text of this crate's types, never input; messages of this crate's own
/// `TryFrom` and visitor errors start with "expected " and say only what is accepted.
fn describe(message: &str) -> String {
    let expected = |rest: &str| match rest.rfind(", expected ") {
        Some(i) => format!(" (expected {})", &rest[i + ", expected ".len()..]),
        None => String::new(),
    };
    const KINDS: [(&str, &str); 5] = [
        ("invalid type", "has the wrong type"),
        ("invalid value", "has an invalid value"),
        ("invalid length", "has the wrong number of elements"),
        ("unknown variant", "is not one of the accepted values"),
        ("unknown field", "has an unknown field"),
    ];
    for (prefix, kind) in KINDS {
        if let Some(rest) = message.strip_prefix(prefix) {
            return format!("{kind}{}", expected(rest));
        }
    }
    if message.starts_with("number out of range") {
        return "is out of range: it must be a finite number".into();
    }
    // "missing field `x`" and "duplicate field `x`" name one of this crate's fields.
    if message.starts_with("missing field") || message.starts_with("duplicate field") {
        return format!("is invalid: {message}");
    }
    if message.starts_with("expected ") {
        return format!("is invalid ({message})");
    }
    "is invalid".into()
}

fn bytes_rejection(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::PayloadTooLarge
    } else {
        ApiError::Malformed("the request body could not be read".into())
    }
}

/// An admin caller, checked before anything else of the request is read: an analyst gets 403
/// for an admin-only route whatever its body.
pub struct Admin(pub Caller);

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        caller.require_admin()?;
        Ok(Admin(caller))
    }
}

/// Path parameters; a malformed id is simply a resource that does not exist. Ids are parsed into
/// their domain types (`Uuid`, [`crate::access::TokenId`]) by `T`; before that, a segment that is
/// not UTF-8 once percent-decoded, or holds a control character (`%00` among them), is refused
/// here whatever `T` is, so that no such text reaches a handler, a log line or the database.
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        // The rejections' texts quote the path and the parser's complaint: say neither.
        let no_such = || ApiError::NotFound("no such resource".into());
        let raw = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|_: RawPathParamsRejection| no_such())?;
        if raw
            .iter()
            .any(|(_, value)| value.chars().any(char::is_control))
        {
            return Err(no_such());
        }
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|_: PathRejection| no_such())
    }
}

/// Query string parameters, with the same value-free errors as bodies.
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(de)
            .map(ApiQuery)
            .map_err(|err| {
                let path = err.path().to_string();
                let message = err.into_inner().to_string();
                if path == "." || path.is_empty() {
                    ApiError::invalid(format!("the query string {}", describe(&message)))
                } else {
                    ApiError::invalid_field(&path, format!("{path} {}", describe(&message)))
                }
            })
    }
}

/// Just enough media-type parsing to accept `application/json` and `application/*+json` with
/// parameters, without another dependency.
mod mime_lite {
    pub struct Mime(String);
    impl std::str::FromStr for Mime {
        type Err = ();
        fn from_str(s: &str) -> Result<Self, ()> {
            let essence = s
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            if essence.is_empty() {
                Err(())
            } else {
                Ok(Mime(essence))
            }
        }
    }
    impl Mime {
        pub fn is_json(&self) -> bool {
            self.0 == "application/json"
                || (self.0.starts_with("application/") && self.0.ends_with("+json"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        counts: Vec<f64>,
        epsilon: Option<f64>,
    }

    fn detail(e: ApiError) -> String {
        e.to_string()
    }

    /// A table is bounded while it is read: too many rows, too many numbers in a row, and
    /// too many numbers (or empty rows) in the whole body are refused; a table within the
    /// limits parses whole.
    #[test]
    fn tables_are_bounded_while_parsing() {
        #[derive(serde::Deserialize)]
        struct T {
            #[serde(deserialize_with = "rows")]
            table: Vec<Vec<f64>>,
        }
        let ok = parse_json_bounded::<T>(br#"{"table": [[1, 2, 3], [4, 5, 6]]}"#, 6).unwrap();
        assert_eq!(ok.table, vec![vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]]);
        let wide = parse_json_bounded::<T>(br#"{"table": [[1, 2, 3, 4]]}"#, 3);
        assert!(detail(wide.err().unwrap()).contains("at most 3 numbers"));
        let tall = parse_json_bounded::<T>(br#"{"table": [[1], [2], [3], [4]]}"#, 3);
        assert!(tall.is_err());
        let empty_rows = format!("{{\"table\": [{}[]]}}", "[],".repeat(100));
        let many = parse_json_bounded::<T>(empty_rows.as_bytes(), 10);
        assert!(many.is_err(), "empty rows count against the body's budget");
    }

    #[test]
    fn a_bad_count_is_never_echoed() {
        let err = parse_json::<Body>(br#"{"counts": [1, "987654321"]}"#).unwrap_err();
        assert!(matches!(err, ApiError::Invalid { .. }));
        let text = detail(err);
        assert!(!text.contains("987654321"), "{text}");
        assert!(text.contains("counts[1]"), "{text}");
    }

    #[test]
    fn syntax_errors_are_400_and_unknown_fields_422() {
        assert!(matches!(
            parse_json::<Body>(b"{\"counts\": [1,"),
            Err(ApiError::Malformed(_))
        ));
        assert!(matches!(
            parse_json::<Body>(br#"{"counts": [1]} trailing"#),
            Err(ApiError::Malformed(_))
        ));
        let err = parse_json::<Body>(br#"{"counts": [1, 2], "seed": 7}"#).unwrap_err();
        let text = detail(err);
        assert!(text.contains("unknown field"), "{text}");
        assert!(!text.contains("seed"), "a sent key is not quoted: {text}");
    }

    /// Nothing sent is quoted, whatever the path, and only objects
    /// are bodies.
    #[test]
    fn no_error_quotes_what_was_sent() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Nested {
            kind: Kind,
            inner: Option<Body>,
            labels: Vec<String>,
        }
        #[derive(serde::Deserialize, Debug)]
        #[serde(rename_all = "snake_case")]
        enum Kind {
            Dirichlet,
        }
        for body in [
            &br#"[31415926, 1, 2]"#[..],
            br#"31415926"#,
            br#""31415926""#,
            br#"{"kind": "31415926", "labels": []}"#,
            br#"{"kind": 31415926, "labels": []}"#,
            br#"{"kind": "dirichlet", "labels": [31415926]}"#,
            br#"{"kind": "dirichlet", "labels": [], "31415926": 1}"#,
            br#"{"kind": "dirichlet", "labels": [], "inner": {"counts": [1], "epsilon": "31415926"}}"#,
            br#"{"kind": "dirichlet", "labels": [], "inner": {"counts": [1], "x31415926": 1}}"#,
            br#"{"kind": "dirichlet", "labels": [], "inner": [[31415926]]}"#,
            br#"{"kind": "dirichlet", "labels": [], "inner": {"counts": [1], "epsilon": 31415926e999}}"#,
        ] {
            let err = parse_json::<Nested>(body).unwrap_err();
            let text = detail(err);
            assert!(!text.contains("31415926"), "{text}");
        }
        for body in [&b"[1, 2]"[..], b"[[120,45,3],0.4]", b"7", b"null", b"\"x\""] {
            let err = parse_json::<Body>(body).unwrap_err();
            assert!(matches!(err, ApiError::Invalid { .. }), "{err:?}");
            assert!(detail(err).contains("must be a JSON object"));
        }
    }

    /// An unknown field names the object that has it, whether the object's type derives its
    /// refusal (the key is then the path's last segment) or refuses the key in its own visitor
    /// (as the release and plan bodies do): `items[1]`, never `items`.
    #[test]
    fn an_unknown_field_names_its_object() {
        struct Strict;
        impl<'de> serde::Deserialize<'de> for Strict {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = Strict;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("an object")
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<Strict, A::Error> {
                        while let Some(key) = map.next_key::<String>()? {
                            if key != "d" {
                                return Err(serde::de::Error::unknown_field(&key, &["d"]));
                            }
                            map.next_value::<u64>()?;
                        }
                        Ok(Strict)
                    }
                }
                d.deserialize_map(V)
            }
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Items {
            items: Vec<Strict>,
            inner: Option<Body>,
        }
        let field = |body: &[u8]| match parse_json::<Items>(body) {
            Err(ApiError::Invalid { field, .. }) => field,
            other => panic!("{:?}", other.err()),
        };
        let hand = field(br#"{"items": [{"d": 2}, {"d": 2, "items": 1}]}"#);
        assert_eq!(hand.as_deref(), Some("items[1]"));
        let derived = field(br#"{"items": [], "inner": {"counts": [1], "items": 1}}"#);
        assert_eq!(derived.as_deref(), Some("inner"));
        assert_eq!(
            field(br#"{"items": [], "seed": 1}"#),
            None,
            "the body itself"
        );
    }

    #[test]
    fn an_out_of_range_number_is_422_at_its_path() {
        let err = parse_json::<Body>(br#"{"counts": [1, 2], "epsilon": 1e999}"#).unwrap_err();
        assert!(
            matches!(&err, ApiError::Invalid { field: Some(f), .. } if f == "epsilon"),
            "{err:?}"
        );
        let err = parse_json::<Body>(br#"{"counts": [1, -1e999]}"#).unwrap_err();
        assert!(
            matches!(&err, ApiError::Invalid { field: Some(f), .. } if f == "counts"),
            "{err:?}"
        );
    }

    #[test]
    fn cell_sequences_are_bounded_while_parsing() {
        #[derive(serde::Deserialize)]
        struct Cells {
            #[serde(deserialize_with = "cells")]
            a: Vec<f64>,
            #[serde(default)]
            b: Option<ScalarOrCells>,
        }
        let ok: Cells = parse_json_bounded(br#"{"a": [1, 2, 3], "b": [4, 5, 6]}"#, 3).unwrap();
        assert_eq!(ok.a, [1.0, 2.0, 3.0]);
        assert_eq!(ok.b, Some(ScalarOrCells::Cells(vec![4.0, 5.0, 6.0])));
        let ok: Cells = parse_json_bounded(br#"{"a": [1, 2], "b": 7}"#, 3).unwrap();
        assert_eq!(ok.b, Some(ScalarOrCells::Scalar(7.0)));
        for body in [
            &br#"{"a": [1, 2, 3, 4]}"#[..],
            br#"{"a": [1], "b": [1, 2, 3, 4]}"#,
        ] {
            let err = parse_json_bounded::<Cells>(body, 3).err().unwrap();
            let text = detail(err);
            assert!(text.contains("at most 3 numbers"), "{text}");
        }
        // Outside a bounded parse the visitor does not limit.
        let ok: Cells = parse_json(br#"{"a": [1, 2, 3, 4]}"#).unwrap();
        assert_eq!(ok.a.len(), 4);
    }

    #[test]
    fn non_finite_literals_are_refused() {
        assert!(parse_json::<Body>(br#"{"counts": [NaN, 1]}"#).is_err());
        assert!(parse_json::<Body>(br#"{"counts": [1e400, 1]}"#).is_err());
    }
}
