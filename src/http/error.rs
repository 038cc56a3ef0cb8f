//! The one API error type. Every 4xx/5xx the service returns — including axum's own
//! rejections, unknown routes, wrong methods, timeouts and panics — is rendered here as an RFC
//! 9457 `application/problem+json` document with a stable `type` per kind. 5xx details are
//! logged once, here, and never returned.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{json, Value};

use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaFormat, Type};

use crate::ledger::StoreError;
use crate::schema;

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
    /// A block of the release's range had no room: `budget-exhausted` naming the block.
    #[error("{detail}")]
    BlockExhausted {
        detail: String,
        block: String,
        budget: Value,
    },
    #[error("{detail}")]
    AllocationExhausted {
        detail: String,
        allocation: Value,
        budget: Value,
    },
    #[error("{detail}")]
    PopulationExhausted {
        detail: String,
        population: uuid::Uuid,
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
    /// Single sign-on: the provider's keys are needed to check a token and cannot be fetched.
    #[error("the OpenID provider's keys cannot be fetched to check this token; retry later")]
    ProviderUnavailable,
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
        let problem = self.problem_type();
        (problem.status(), problem.slug(), problem.title())
    }

    /// The problem type this error is answered with.
    pub fn problem_type(&self) -> ProblemType {
        use ApiError::*;
        match self {
            Malformed(_) => ProblemType::MalformedRequest,
            Invalid { .. } => ProblemType::InvalidRequest,
            UnsupportedMediaType(_) => ProblemType::UnsupportedMediaType,
            PayloadTooLarge => ProblemType::PayloadTooLarge,
            HeadersTooLarge { .. } => ProblemType::HeadersTooLarge,
            Unauthorized => ProblemType::Unauthorized,
            Forbidden => ProblemType::Forbidden,
            NotFound(_) => ProblemType::NotFound,
            MethodNotAllowed => ProblemType::MethodNotAllowed,
            BudgetExhausted { .. } | BlockExhausted { .. } => ProblemType::BudgetExhausted,
            AllocationExhausted { .. } => ProblemType::AllocationExhausted,
            PopulationExhausted { .. } => ProblemType::PopulationBudgetExhausted,
            OutputQuotaExceeded { .. } => ProblemType::OutputQuotaExceeded,
            IdempotencyKeyReused => ProblemType::IdempotencyKeyReused,
            CalibrationInfeasible(_) => ProblemType::CalibrationInfeasible,
            NoGuarantee(_) => ProblemType::NoGuarantee,
            CostExceedsEpsilon(_) => ProblemType::CostExceedsEpsilon,
            BeyondPrecision(_) => ProblemType::BeyondPrecision,
            Unavailable | ProviderUnavailable => ProblemType::ServiceUnavailable,
            Timeout => ProblemType::Timeout,
            CommitUnanswered => ProblemType::CommitOutcomeUnknown,
            Internal(_) => ProblemType::Internal,
        }
    }
}

/// The problem types: one line each (status, slug, title, what it means). The problem documents,
/// the schemas of openapi.yaml (one per type, `<Name>Problem`) and the metrics' refusal labels
/// are all read from here.
macro_rules! problem_types {
    ($($name:ident: $status:ident, $slug:literal, $title:literal, $meaning:literal;)+) => {
        /// A problem type: the stable `type` of a problem document, `/problems/<slug>`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ProblemType {
            $($name,)+
        }

        impl ProblemType {
            pub const ALL: &'static [ProblemType] = &[$(ProblemType::$name,)+];

            pub fn status(self) -> StatusCode {
                match self {
                    $(ProblemType::$name => StatusCode::$status,)+
                }
            }

            /// The stable part of the `type` URI.
            pub fn slug(self) -> &'static str {
                match self {
                    $(ProblemType::$name => $slug,)+
                }
            }

            pub fn title(self) -> &'static str {
                match self {
                    $(ProblemType::$name => $title,)+
                }
            }

            /// What the problem means, for the description.
            pub fn meaning(self) -> &'static str {
                match self {
                    $(ProblemType::$name => $meaning,)+
                }
            }

            /// The name of its schema in openapi.yaml.
            pub fn schema_name(self) -> &'static str {
                match self {
                    $(ProblemType::$name => concat!(stringify!($name), "Problem"),)+
                }
            }
        }
    };
}

problem_types! {
    MalformedRequest: BAD_REQUEST, "malformed-request", "Malformed request",
        "The body is not syntactically valid JSON (or could not be read).";
    InvalidRequest: UNPROCESSABLE_ENTITY, "invalid-request", "Invalid request",
        "Well-formed JSON, but a value is missing, out of range, of the wrong type, unknown, or in an invalid combination; or a query parameter or header that is unknown or out of range. `field` names the offending field when there is one (e.g. `budget.epsilon`, `counts`, `Idempotency-Key`).";
    UnsupportedMediaType: UNSUPPORTED_MEDIA_TYPE, "unsupported-media-type", "Unsupported media type",
        "The body is not `application/json`.";
    PayloadTooLarge: PAYLOAD_TOO_LARGE, "payload-too-large", "Payload too large",
        "The body is larger than the configured limit.";
    HeadersTooLarge: REQUEST_HEADER_FIELDS_TOO_LARGE, "headers-too-large", "Request header fields too large",
        "The request has more header lines than `max_headers`, or more header bytes than `max_header_bytes`.";
    Unauthorized: UNAUTHORIZED, "unauthorized", "Unauthorized",
        "No valid bearer token.";
    Forbidden: FORBIDDEN, "forbidden", "Forbidden",
        "The operation is for the admin token only; or, with single sign-on, the provider's valid token carries no role this service knows (or a datasets claim that is not a list of dataset ids), on any authenticated operation.";
    NotFound: NOT_FOUND, "not-found", "Not found",
        "No such resource (including a malformed id), or the token may not see it.";
    MethodNotAllowed: METHOD_NOT_ALLOWED, "method-not-allowed", "Method not allowed",
        "The path exists but not with this method.";
    BudgetExhausted: CONFLICT, "budget-exhausted", "Privacy budget exhausted",
        "The release would take the ledger past its budget (`budget` is the ledger that refused it; on a dataset split into blocks, `block` is the first block of the range without room and `budget` that block's ledger); nothing was charged or drawn anywhere.";
    AllocationExhausted: CONFLICT, "allocation-exhausted", "Allocation exhausted",
        "The release fits the dataset's budget but not the calling analyst's allocation on the dataset (`allocation`, with the dataset's ledger in `budget`); nothing was charged or drawn.";
    PopulationBudgetExhausted: CONFLICT, "population-budget-exhausted", "Population budget exhausted",
        "The charge fits the dataset (and the caller's allocation) but would take a population node above the dataset past its budget (`population` is that node's id, `budget` its ledger when it refused); nothing was charged or drawn.";
    OutputQuotaExceeded: CONFLICT, "output-quota-exceeded", "Output quota exceeded",
        "The release would take the dataset's stored outputs past the per-dataset quota of `max_stored_cells` cells; nothing was charged or drawn.";
    IdempotencyKeyReused: UNPROCESSABLE_ENTITY, "idempotency-key-reused", "Idempotency key reused",
        "The `Idempotency-Key` was used for a different request, or by another token.";
    CalibrationInfeasible: UNPROCESSABLE_ENTITY, "calibration-infeasible", "Calibration infeasible",
        "No parameters reach the target.";
    NoGuarantee: UNPROCESSABLE_ENTITY, "no-guarantee", "No privacy guarantee at the ledger order",
        "The mechanism's RDP cost at the ledger order is infinite.";
    CostExceedsEpsilon: UNPROCESSABLE_ENTITY, "cost-exceeds-epsilon", "Cost exceeds the given epsilon",
        "A fully specified mechanism costs more than the `epsilon` given as a cap.";
    BeyondPrecision: UNPROCESSABLE_ENTITY, "beyond-precision", "Beyond floating-point precision",
        "The f64 arithmetic cannot carry the shift the price assumes: a Gamma shape r·count + α above 2⁵⁰, where the sampler stops being exact, or r·Δ∞ below 2²⁰ ulps of the largest shape (docs/PRIVACY.md, \"Floating point\").";
    ServiceUnavailable: SERVICE_UNAVAILABLE, "service-unavailable", "Service unavailable",
        "The database cannot be reached, is read-only or busy past its timeout, or refused or rolled back a release's commit; or, with single sign-on, the OpenID provider's keys are needed to check the token and cannot be fetched. Nothing was charged.";
    Timeout: SERVICE_UNAVAILABLE, "timeout", "Request timed out",
        "The request took longer than the configured limit before any commit started; nothing was charged.";
    CommitOutcomeUnknown: GATEWAY_TIMEOUT, "commit-outcome-unknown", "Commit outcome unknown",
        "A release's commit started but its outcome is unknown: it may or may not have been charged (retry with the same `Idempotency-Key`).";
    Internal: INTERNAL_SERVER_ERROR, "internal", "Internal server error",
        "An unexpected error; no details are given.";
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
        ApiError::BlockExhausted { block, budget, .. } => {
            extensions.insert("block".into(), json!(block));
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
        ApiError::PopulationExhausted {
            population, budget, ..
        } => {
            extensions.insert("population".into(), json!(population));
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

// ------------------------------------------------------------------------ in openapi.yaml

impl ProblemType {
    /// The `type` URI of its documents.
    pub fn uri(self) -> String {
        format!("/problems/{}", self.slug())
    }

    /// Its schema: the problem details every document of this type matches. `type` and `status`
    /// are constants, so a client generator gives each type a model of its own and tells them
    /// apart by those (a status with several types is a `oneOf` of their schemas). Open: RFC 9457
    /// lets members be added.
    pub fn schema(self) -> Schema {
        let status = self.status().as_u16();
        let mut problem = ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(format!(
                "`{}` ({status}): {} An RFC 9457 problem document; members other than those \
                 listed may be added.",
                self.uri(),
                self.meaning()
            )))
            .property(
                "type",
                schema::constant(self.uri())
                    .format(Some(SchemaFormat::Custom("uri-reference".into()))),
            )
            .property("title", schema::string().min_length(Some(1)))
            .property("status", schema::constant(status))
            .property(
                "detail",
                schema::string().description(Some(
                    "Human-readable explanation; never contains counts, a value that was sent or \
                     internal error text.",
                )),
            )
            .property("instance", schema::formatted("uri-reference"))
            .required("type")
            .required("title")
            .required("status")
            .required("detail");
        match self {
            ProblemType::InvalidRequest => {
                problem = problem.property(
                    "field",
                    schema::string()
                        .description(Some("The offending field (or header), when there is one.")),
                );
            }
            ProblemType::BudgetExhausted => {
                problem = problem
                    .property(
                        "budget",
                        schema::described("Budget", "The ledger that refused the release."),
                    )
                    .property(
                        "block",
                        schema::described(
                            "BlockKey",
                            "On a dataset split into blocks: the first block of the range that \
                             had no room for the cost.",
                        ),
                    )
                    .required("budget");
            }
            ProblemType::AllocationExhausted => {
                problem = problem
                    .property(
                        "allocation",
                        schema::described(
                            "Allocation",
                            "The calling analyst's allocation that refused the release.",
                        ),
                    )
                    .property(
                        "budget",
                        schema::described(
                            "Budget",
                            "The dataset's ledger (which would have admitted it).",
                        ),
                    )
                    .required("allocation")
                    .required("budget");
            }
            ProblemType::PopulationBudgetExhausted => {
                problem = problem
                    .property(
                        "population",
                        schema::formatted("uuid")
                            .description(Some("The population node that refused the charge.")),
                    )
                    .property(
                        "budget",
                        schema::closed()
                            .description(Some("That node's ledger when it refused."))
                            .property("order", schema::above(1.0))
                            .property("total", schema::between(0.0, 8192.0))
                            .property("spent", schema::between(0.0, 8192.0))
                            .property("remaining", schema::between(0.0, 8192.0))
                            .required("order")
                            .required("total")
                            .required("spent")
                            .required("remaining"),
                    )
                    .required("population")
                    .required("budget");
            }
            _ => {}
        }
        problem.into()
    }
}

/// The problem responses of openapi.yaml (`#/components/responses/<name>`), each a status, what
/// it means to the operations that declare it, a header it carries, and its problem types. An
/// operation declares one with `(status = .., response = problems::<Name>)` in its
/// `#[utoipa::path]`.
pub mod problems {
    use utoipa::openapi::header::Header;
    use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};

    use super::{ProblemType, PROBLEM_JSON};
    use crate::schema;

    macro_rules! problem_responses {
        ($($name:ident $([$header:literal = $header_ref:literal])?: [$($problem:ident),+] $description:literal;)+) => {
            $(
                pub struct $name;

                impl<'r> utoipa::ToResponse<'r> for $name {
                    fn response() -> (&'r str, RefOr<Response>) {
                        let headers: &[(&str, &str)] = &[$(($header, $header_ref))?];
                        (
                            stringify!($name),
                            response($description, headers, &[$(ProblemType::$problem),+]).into(),
                        )
                    }
                }
            )+

            /// Every problem response, for `#/components/responses`.
            pub fn all() -> Vec<(&'static str, RefOr<Response>)> {
                vec![$(<$name as utoipa::ToResponse>::response()),+]
            }
        };
    }

    fn response(description: &str, headers: &[(&str, &str)], types: &[ProblemType]) -> Response {
        let body = match types {
            [one] => schema::component(one.schema_name()),
            several => {
                schema::one_of(several.iter().map(|t| schema::component(t.schema_name()))).into()
            }
        };
        let mut response = ResponseBuilder::new()
            .description(description)
            .content(
                PROBLEM_JSON,
                ContentBuilder::new().schema(Some(body)).build(),
            )
            .build();
        for (name, location) in headers {
            response
                .headers
                .insert(name.to_string(), RefOr::<Header>::Ref(Ref::new(*location)));
        }
        response
    }

    problem_responses! {
        MalformedRequest: [MalformedRequest]
            "The body is not syntactically valid JSON (or could not be read).";
        Unauthorized["WWW-Authenticate" = "#/components/headers/WwwAuthenticate"]: [Unauthorized]
            "No valid bearer token.";
        Forbidden: [Forbidden]
            "The operation is for the admin token only (on the operations marked admin only); \
             or, with single sign-on, on every authenticated operation: the provider's token is \
             valid but carries no role this service knows (`dirichlet_role` missing or neither \
             `admin` nor `analyst`), or a datasets claim that is not a list of dataset ids.";
        NotFound: [NotFound]
            "No such resource (including a malformed id), or the token may not see it.";
        MethodNotAllowed["Allow" = "#/components/headers/Allow"]: [MethodNotAllowed]
            "The path exists but not with this method (any route).";
        ReleaseConflict: [BudgetExhausted, AllocationExhausted, PopulationBudgetExhausted, OutputQuotaExceeded]
            "Nothing was charged or drawn: the release would take the ledger past its budget \
             (`budget-exhausted`, with the ledger in `budget`), the calling analyst past their \
             allocation on the dataset (`allocation-exhausted`, with the allocation in \
             `allocation`), a population node above the dataset past its budget \
             (`population-budget-exhausted`, with the node in `population` and its ledger in \
             `budget`), or the dataset's stored outputs \
             past the per-dataset quota of `max_stored_cells` cells (`output-quota-exceeded`).";
        PriceBeyondAnyBudget: [BudgetExhausted]
            "The release costs more than any ledger can hold (above 8192 at the ledger order), so \
             no budget would ever admit it; a release that merely does not fit the remaining \
             budget is 200 with `admissible: false`.";
        PayloadTooLarge: [PayloadTooLarge]
            "The body is larger than the configured limit; a declared `Content-Length` above it is \
             refused before the body is read (and the connection is closed).";
        UnsupportedMediaType: [UnsupportedMediaType] "The body is not `application/json`.";
        InvalidRequest: [InvalidRequest]
            "Well-formed JSON, but a value is missing, out of range, of the wrong type, unknown, or \
             in an invalid combination; or a query parameter that is unknown or out of range. \
             `field` names the offending field when there is one (e.g. `budget.epsilon`, \
             `datasets`, `limit`).";
        ReleaseRejected: [InvalidRequest, IdempotencyKeyReused, CalibrationInfeasible, NoGuarantee, CostExceedsEpsilon, BeyondPrecision]
            "The request cannot be carried out: `invalid-request` (a value is missing, out of \
             range, of the wrong type, unknown, or does not belong to the mechanism; `alpha` of \
             another length than `counts`; both or neither of `counts` and `table`, a ragged or \
             empty table, a table on a custom sensitivity, a label or row name that is blank, too \
             long or holds control or format characters, row names that repeat once normalised; \
             an `Idempotency-Key` sent twice or not 1 to 255 visible ASCII characters), \
             `idempotency-key-reused` (the key was used for a different request, or \
             by another token), `calibration-infeasible` (no parameters reach the target), \
             `no-guarantee` (the mechanism's RDP cost at the ledger order is infinite), \
             `cost-exceeds-epsilon` (a fully specified mechanism costs more than the `epsilon` \
             given as a cap), or `beyond-precision` (the f64 arithmetic cannot carry the shift \
             the price assumes: a Gamma shape r·count + α above 2⁵⁰, where the sampler stops \
             being exact, or r·Δ∞ below 2²⁰ ulps of the largest shape; docs/PRIVACY.md, \
             \"Floating point\").";
        PreviewRejected: [InvalidRequest, CalibrationInfeasible, NoGuarantee, CostExceedsEpsilon, BeyondPrecision]
            "The request cannot be priced: `invalid-request`, `calibration-infeasible`, \
             `no-guarantee`, `cost-exceeds-epsilon` or `beyond-precision`, as for a release.";
        HeadersTooLarge: [HeadersTooLarge]
            "The request has more header lines than `max_headers` (default 100), or its header \
             names and values total more than `max_header_bytes` (default 16 KiB). Refused before \
             the token is checked. (A request head larger still — over 4× those limits, and at \
             least 100 lines or about 400 KiB — is refused by the HTTP parser with a bare 431 and \
             the connection closed.)";
        Internal: [Internal] "An unexpected error; no details are given.";
        ServiceUnavailable["Retry-After" = "#/components/headers/RetryAfter"]: [ServiceUnavailable, Timeout]
            "`service-unavailable`: the database cannot be reached, is read-only or busy past its \
             timeout, or refused or rolled back a release's commit; `timeout`: the request took \
             longer than the configured limit before any commit started. Neither charged \
             anything. Both carry `Retry-After`.";
        PlacementConflict: [PopulationBudgetExhausted]
            "What was already spent below the dataset (or population) being placed does not fit \
             a node of its new path; nothing was changed or charged.";
        CommitOutcomeUnknown: [CommitOutcomeUnknown]
            "The commit started but the database did not answer it within its own deadlines and \
             the connection acquire timeout (plus a margin), or the connection failed after the \
             commit was sent: the outcome cannot be known, so the release may or may not have been \
             charged (retry with the same Idempotency-Key).";
    }
}

#[cfg(test)]
mod tests {
    use super::shortest_numbers;

    /// ε = 5e-324 printed with `{}` is 326 characters.
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
