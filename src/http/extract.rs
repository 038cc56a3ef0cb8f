//! Extractors whose rejections are [`ApiError`]s, so axum's own failures speak problem+json.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// JSON body. Unlike `axum::Json`, a data error never echoes the offending value (it could be a
/// count): the detail names the JSON path only, plus serde's reason for non-count fields.
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
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
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(bytes_rejection)?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// Deserialize a JSON document into `T` with problem-shaped, count-free errors.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Syntax first, so a data error never hides broken JSON after it.
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        return Err(ApiError::Malformed(format!(
            "the body is not valid JSON: {e}"
        )));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        match inner.classify() {
            serde_json::error::Category::Syntax
            | serde_json::error::Category::Eof
            | serde_json::error::Category::Io => {
                // Syntax messages carry a position, never a value.
                ApiError::Malformed(format!("the body is not valid JSON: {inner}"))
            }
            serde_json::error::Category::Data => {
                if path.starts_with("counts") {
                    ApiError::invalid_field(
                        "counts",
                        format!("{path} must be a finite number >= 0"),
                    )
                } else if path == "." {
                    ApiError::invalid(data_reason(&inner))
                } else {
                    ApiError::invalid_field(&path, format!("{path}: {}", data_reason(&inner)))
                }
            }
        }
    })?;
    de.end()
        .map_err(|e| ApiError::Malformed(format!("the body is not valid JSON: {e}")))?;
    Ok(value)
}

/// serde's message without its " at line L column C" suffix.
fn data_reason(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

fn bytes_rejection(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::PayloadTooLarge
    } else {
        ApiError::Malformed("the request body could not be read".into())
    }
}

/// Path parameters; a malformed id is simply a resource that does not exist.
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e: PathRejection| {
                ApiError::NotFound(format!("no such resource ({})", e.body_text()))
            })
    }
}

/// Query string parameters.
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|e: QueryRejection| ApiError::invalid(e.body_text()))
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
        assert!(detail(err).contains("unknown field `seed`"));
    }

    #[test]
    fn non_finite_literals_are_refused() {
        assert!(parse_json::<Body>(br#"{"counts": [NaN, 1]}"#).is_err());
        assert!(parse_json::<Body>(br#"{"counts": [1e400, 1]}"#).is_err());
    }
}
