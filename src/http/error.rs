//! The one API error type. Every 4xx/5xx the service returns — including axum's own
//! rejections, unknown routes, wrong methods, timeouts and panics — is rendered here as an RFC
//! 9457 `application/problem+json` document with a stable `type` per kind. 5xx details are
//! logged once, here, and never returned.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{json, Value};

use crate::ledger::StoreError;

pub const PROBLEM_JSON: &str = "application/problem+json";

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    Malformed(String),
    #[error("{detail}")]
    Invalid {
        detail: String,
        field: Option<String>,
    },
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("the request body is larger than the configured limit")]
    PayloadTooLarge,
    #[error("the request headers exceed the configured limit of {max_headers} header lines and {max_bytes} bytes of names and values")]
    HeadersTooLarge {
        max_headers: usize,
        max_bytes: usize,
    },
    #[error("a valid bearer token is required")]
    Unauthorized,
    #[error("this token may not perform this operation")]
    Forbidden,
    #[error("{0}")]
    NotFound(String),
    #[error("this method is not allowed on this resource")]
    MethodNotAllowed,
    #[error("{detail}")]
    BudgetExhausted { detail: String, budget: Value },
    #[error("{detail}")]
    AllocationExhausted {
        detail: String,
        allocation: Value,
        budget: Value,
    },
    #[error("the dataset's stored releases would exceed the configured output quota of {quota} cells; nothing was charged")]
    OutputQuotaExceeded { quota: i64 },
    #[error("this Idempotency-Key was already used for a different request")]
    IdempotencyKeyReused,
    #[error("{0}")]
    CalibrationInfeasible(String),
    #[error("{0}")]
    NoGuarantee(String),
    #[error("{0}")]
    CostExceedsEpsilon(String),
    #[error("{0}")]
    BeyondPrecision(String),
    #[error("the database is unavailable; retry later")]
    Unavailable,
    #[error("the request took longer than the configured timeout")]
    Timeout,
    #[error("the release's commit started but its outcome is unknown (the database has not answered it in time, or the connection failed after it was sent); it may or may not have been charged: retry with the same Idempotency-Key, or read the ledger, to learn its outcome")]
    CommitUnanswered,
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    pub fn invalid(detail: impl Into<String>) -> Self {
        ApiError::Invalid {
            detail: detail.into(),
            field: None,
        }
    }
    pub fn invalid_field(field: &str, detail: impl Into<String>) -> Self {
        ApiError::Invalid {
            detail: detail.into(),
            field: Some(field.to_string()),
        }
    }
    pub fn not_found(what: &str) -> Self {
        ApiError::NotFound(format!("no such {what}"))
    }

    /// (status, slug, title) of each kind; the slug is the stable problem `type`.
    pub fn kind(&self) -> (StatusCode, &'static str, &'static str) {
        use ApiError::*;
        match self {
            Malformed(_) => (
                StatusCode::BAD_REQUEST,
                "malformed-request",
                "Malformed request",
            ),
            Invalid { .. } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-request",
                "Invalid request",
            ),
            UnsupportedMediaType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "Unsupported media type",
            ),
            PayloadTooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload-too-large",
                "Payload too large",
            ),
            HeadersTooLarge { .. } => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "headers-too-large",
                "Request header fields too large",
            ),
            Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized", "Unauthorized"),
            Forbidden => (StatusCode::FORBIDDEN, "forbidden", "Forbidden"),
            NotFound(_) => (StatusCode::NOT_FOUND, "not-found", "Not found"),
            MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                "Method not allowed",
            ),
            BudgetExhausted { .. } => (
                StatusCode::CONFLICT,
                "budget-exhausted",
                "Privacy budget exhausted",
            ),
            AllocationExhausted { .. } => (
                StatusCode::CONFLICT,
                "allocation-exhausted",
                "Allocation exhausted",
            ),
            OutputQuotaExceeded { .. } => (
                StatusCode::CONFLICT,
                "output-quota-exceeded",
                "Output quota exceeded",
            ),
            IdempotencyKeyReused => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency-key-reused",
                "Idempotency key reused",
            ),
            CalibrationInfeasible(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "calibration-infeasible",
                "Calibration infeasible",
            ),
            NoGuarantee(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "no-guarantee",
                "No privacy guarantee at the ledger order",
            ),
            CostExceedsEpsilon(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "cost-exceeds-epsilon",
                "Cost exceeds the given epsilon",
            ),
            BeyondPrecision(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "beyond-precision",
                "Beyond floating-point precision",
            ),
            Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "service-unavailable",
                "Service unavailable",
            ),
            Timeout => (
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                "Request timed out",
            ),
            CommitUnanswered => (
                StatusCode::GATEWAY_TIMEOUT,
                "commit-outcome-unknown",
                "Commit outcome unknown",
            ),
            Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal server error",
            ),
        }
    }
}

#[derive(Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    type_: String,
    title: &'a str,
    status: u16,
    detail: String,
    #[serde(flatten)]
    extensions: serde_json::Map<String, Value>,
}

/// A problem+json response for a status and slug (used by layers that have no ApiError).
pub fn problem_response(error: &ApiError) -> Response {
    let (status, slug, title) = error.kind();
    let mut extensions = serde_json::Map::new();
    let detail = match error {
        ApiError::Internal(message) => {
            // The one place a 5xx's cause is logged; the client gets no detail.
            tracing::error!(error = %message, "internal error");
            "the server could not complete the request".to_string()
        }
        ApiError::Invalid {
            field: Some(field), ..
        } => {
            extensions.insert("field".into(), json!(field));
            error.to_string()
        }
        ApiError::BudgetExhausted { budget, .. } => {
            extensions.insert("budget".into(), budget.clone());
            error.to_string()
        }
        ApiError::AllocationExhausted {
            allocation, budget, ..
        } => {
            extensions.insert("allocation".into(), allocation.clone());
            extensions.insert("budget".into(), budget.clone());
            error.to_string()
        }
        _ => error.to_string(),
    };
    let body = Problem {
        type_: format!("/problems/{slug}"),
        title,
        status: status.as_u16(),
        detail: shortest_numbers(&detail),
        extensions,
    };
    let mut response = (status, axum::Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    if status == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

/// Decimal numbers of more than 20 characters rewritten in shortest round-trip form (`5e-324`, not
/// 324 digits), whichever message formatted them with `{}`.
pub fn shortest_numbers(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let starts_number = bytes[i].is_ascii_digit()
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'));
        if !starts_number {
            let next = text[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[i..i + next]);
            i += next;
            continue;
        }
        let mut j = i;
        while j < bytes.len() && bytes[j].is_ascii_digit() {
            j += 1;
        }
        if j + 1 < bytes.len() && bytes[j] == b'.' && bytes[j + 1].is_ascii_digit() {
            j += 1;
            while j < bytes.len() && bytes[j].is_ascii_digit() {
                j += 1;
            }
        }
        let number = &text[i..j];
        match number.parse::<f64>() {
            Ok(value) if number.len() > 20 && value.is_finite() => {
                out.push_str(&format!("{value:?}"))
            }
            _ => out.push_str(number),
        }
        i = j;
    }
    out
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        problem_response(&self)
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Unavailable(message) => {
                tracing::warn!(error = %message, "database unavailable");
                ApiError::Unavailable
            }
            // Not a 503: that would tell the client "not charged", which may be false.
            StoreError::OutcomeUnknown(message) => {
                tracing::warn!(error = %message, "commit outcome unknown");
                ApiError::CommitUnanswered
            }
            other => ApiError::Internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::shortest_numbers;

    /// Issue 13 item 14: ε = 5e-324 printed with `{}` is 326 characters.
    #[test]
    fn long_numbers_are_printed_shortest() {
        let long = format!("no parameters achieve epsilon {} at order 2", 5e-324);
        assert!(long.len() > 300);
        assert_eq!(
            shortest_numbers(&long),
            "no parameters achieve epsilon 5e-324 at order 2"
        );
        let big = format!("costs {} of {}", 1e300, 0.25);
        assert_eq!(shortest_numbers(&big), "costs 1e300 of 0.25");
        for kept in [
            "counts[12] must be",
            "seq 3, order 1.5",
            "id 0190d5c3-7f1a",
            "α₂ = 1.0000000001",
        ] {
            assert_eq!(shortest_numbers(kept), kept);
        }
    }
}
