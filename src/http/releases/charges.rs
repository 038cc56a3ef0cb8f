//! `POST /v1/datasets/{id}/charges`: a differentially private computation run *outside* the
//! service on the dataset's people, recorded so that the dataset (and every population above it)
//! is charged for it. It is priced here, at the ledger order, from its description (the
//! mechanism and its parameters; src/privacy/external.rs), and committed exactly like a release:
//! one transaction checks the dataset, the caller's allocation and the population nodes, charges
//! them and records the charge — a release with kind `external` and no output, in the dataset's
//! release log and its hash chain. Retries use `Idempotency-Key` as releases do.

use std::borrow::Cow;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::Sha256;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};
use uuid::Uuid;

use super::super::auth::Caller;
use super::super::error::{problems, ApiError};
use super::super::extract::{ApiJson, ApiPath};
use super::super::limits::CommitGate;
use super::super::paths::{DatasetId, IdempotencyKey};
use super::super::populations::population_exhausted;
use super::super::views::ReleaseView;
use super::super::AppState;
use super::{allocation_exhausted, exhausted, idempotency};
use crate::ledger::{charge_for, CommitOutcome, Idempotency, Label, NewRelease, Output, Units};
use crate::privacy::external;
use crate::release::request::BlockSpan;
use crate::schema;

/// A parameter that must be a finite number above 0.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(try_from = "f64")]
pub struct Positive(f64);

impl TryFrom<f64> for Positive {
    type Error = &'static str;
    fn try_from(v: f64) -> Result<Self, Self::Error> {
        if v.is_finite() && v > 0.0 {
            Ok(Positive(v))
        } else {
            Err("expected a finite number above 0")
        }
    }
}

/// A parameter that must be a finite number ≥ 0.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(try_from = "f64")]
pub struct NonNegative(f64);

impl TryFrom<f64> for NonNegative {
    type Error = &'static str;
    fn try_from(v: f64) -> Result<Self, Self::Error> {
        if v.is_finite() && v >= 0.0 {
            Ok(NonNegative(v))
        } else {
            Err("expected a finite number at least 0")
        }
    }
}

/// How many times the event ran (self-composition): 1 to 2³².
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(try_from = "u64")]
pub struct Count(u64);

/// The most repetitions of one event; any more costs more than any ledger holds anyway.
const MAX_COUNT: u64 = 1 << 32;
/// The most events in one `composed` description.
pub const MAX_EVENTS: usize = 1000;

impl TryFrom<u64> for Count {
    type Error = &'static str;
    fn try_from(v: u64) -> Result<Self, Self::Error> {
        if (1..=MAX_COUNT).contains(&v) {
            Ok(Count(v))
        } else {
            Err("expected an integer from 1 to 4294967296")
        }
    }
}

fn one() -> Count {
    Count(1)
}

/// One DP event, as run elsewhere.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "mechanism", rename_all = "lowercase", deny_unknown_fields)]
pub enum Event {
    /// N(0, σ²) noise on a query of ℓ2-sensitivity Δ.
    Gaussian {
        sigma: Positive,
        sensitivity: Positive,
        #[serde(default = "one")]
        count: Count,
    },
    /// Lap(0, scale) noise on a query of ℓ1-sensitivity Δ.
    Laplace {
        scale: Positive,
        sensitivity: Positive,
        #[serde(default = "one")]
        count: Count,
    },
    /// Any ε-DP mechanism.
    Pure {
        epsilon: Positive,
        #[serde(default = "one")]
        count: Count,
    },
    /// Any ρ-zCDP mechanism.
    Zcdp {
        rho: Positive,
        #[serde(default = "one")]
        count: Count,
    },
    /// A mechanism whose RDP ε at the ledger order is known.
    Rdp {
        epsilon: NonNegative,
        #[serde(default = "one")]
        count: Count,
    },
}

/// `ChargeBody`: each variant with the optional `label`, `blocks` and `block`, written once here. serde's `flatten`
/// would say it once without a macro, but refuses `deny_unknown_fields`, which a body must keep.
macro_rules! labelled_variants {
    ($($variant:ident { $($(#[$field_meta:meta])* $field:ident: $ty:ty,)* })*) => {
        /// A charge's body: one event with an optional label, or a composition of events.
        #[derive(Debug, Clone, Deserialize, Serialize)]
        #[serde(tag = "mechanism", rename_all = "lowercase", deny_unknown_fields)]
        pub enum ChargeBody {
            $($variant {
                $($(#[$field_meta])* $field: $ty,)*
                #[serde(
                    default,
                    deserialize_with = "crate::wire::non_null",
                    skip_serializing_if = "Option::is_none"
                )]
                label: Option<String>,
                #[serde(
                    default,
                    deserialize_with = "crate::wire::non_null",
                    skip_serializing_if = "Option::is_none"
                )]
                blocks: Option<BlockSpan>,
                #[serde(
                    default,
                    deserialize_with = "crate::wire::non_null",
                    skip_serializing_if = "Option::is_none"
                )]
                block: Option<String>,
            },)*
        }
    };
}

labelled_variants! {
    Gaussian {
        sigma: Positive,
        sensitivity: Positive,
        #[serde(default = "one")]
        count: Count,
    }
    Laplace {
        scale: Positive,
        sensitivity: Positive,
        #[serde(default = "one")]
        count: Count,
    }
    Pure {
        epsilon: Positive,
        #[serde(default = "one")]
        count: Count,
    }
    Zcdp {
        rho: Positive,
        #[serde(default = "one")]
        count: Count,
    }
    Rdp {
        epsilon: NonNegative,
        #[serde(default = "one")]
        count: Count,
    }
    Composed {
        events: Vec<Event>,
    }
}

/// Where a charge goes beyond its events: its label and the blocks it read.
struct Tail {
    label: Option<String>,
    blocks: Option<BlockSpan>,
    block: Option<String>,
}

impl ChargeBody {
    /// The events, the label and the blocks.
    fn split(self) -> (Vec<Event>, Tail) {
        use ChargeBody as B;
        match self {
            B::Gaussian {
                sigma,
                sensitivity,
                count,
                label,
                blocks,
                block,
            } => (
                vec![Event::Gaussian {
                    sigma,
                    sensitivity,
                    count,
                }],
                Tail {
                    label,
                    blocks,
                    block,
                },
            ),
            B::Laplace {
                scale,
                sensitivity,
                count,
                label,
                blocks,
                block,
            } => (
                vec![Event::Laplace {
                    scale,
                    sensitivity,
                    count,
                }],
                Tail {
                    label,
                    blocks,
                    block,
                },
            ),
            B::Pure {
                epsilon,
                count,
                label,
                blocks,
                block,
            } => (
                vec![Event::Pure { epsilon, count }],
                Tail {
                    label,
                    blocks,
                    block,
                },
            ),
            B::Zcdp {
                rho,
                count,
                label,
                blocks,
                block,
            } => (
                vec![Event::Zcdp { rho, count }],
                Tail {
                    label,
                    blocks,
                    block,
                },
            ),
            B::Rdp {
                epsilon,
                count,
                label,
                blocks,
                block,
            } => (
                vec![Event::Rdp { epsilon, count }],
                Tail {
                    label,
                    blocks,
                    block,
                },
            ),
            B::Composed {
                events,
                label,
                blocks,
                block,
            } => (
                events,
                Tail {
                    label,
                    blocks,
                    block,
                },
            ),
        }
    }
}

impl Event {
    /// One run's RDP ε at `order` (an upper bound) and the number of runs.
    fn curve(&self, order: f64) -> (f64, u64) {
        match *self {
            Event::Gaussian {
                sigma,
                sensitivity,
                count,
            } => (
                external::gaussian_rdp(sigma.0, sensitivity.0, order),
                count.0,
            ),
            Event::Laplace {
                scale,
                sensitivity,
                count,
            } => (
                external::laplace_rdp(scale.0, sensitivity.0, order),
                count.0,
            ),
            Event::Pure { epsilon, count } => (external::pure_rdp(epsilon.0, order), count.0),
            Event::Zcdp { rho, count } => (external::zcdp_rdp(rho.0, order), count.0),
            Event::Rdp { epsilon, count } => (epsilon.0, count.0),
        }
    }
}

/// The charge of `events` at the ledger order, in ledger units: each event's curve value is
/// inflated and rounded up to the grid exactly as a release's cost is (`charge_for`), then the
/// repetitions and the events are summed on the integer grid, where that is exact; the sum is
/// at least one grid unit, the least any release is charged. `None`: more than any ledger holds.
pub fn price(events: &[Event], order: f64) -> Result<Units, PriceError> {
    let mut total = Units::ZERO;
    for event in events {
        let (value, count) = event.curve(order);
        let one = charge_for(value).map_err(|_| PriceError::TooLarge)?;
        let raw = u64::try_from(one.raw())
            .ok()
            .and_then(|r| r.checked_mul(count))
            .and_then(|r| i64::try_from(r).ok())
            .ok_or(PriceError::TooLarge)?;
        let units = Units::from_raw(raw).map_err(|_| PriceError::TooLarge)?;
        total = total.checked_add(units).ok_or(PriceError::TooLarge)?;
    }
    Ok(total.max(Units::QUANTUM))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriceError {
    /// The charge exceeds the ledger's maximum of 8192 at the order.
    TooLarge,
}

/// The event shapes of a charge body, each with `label` or without (inside `composed`).
fn event_variants(label: bool) -> Vec<RefOr<Schema>> {
    let variant = |name: &str, fields: &[(&str, bool)]| {
        let mut o = schema::closed()
            .property("mechanism", schema::string().enum_values(Some([name])))
            .required("mechanism");
        for &(field, non_negative) in fields {
            let range = if non_negative {
                schema::between(0.0, f64::MAX)
            } else {
                schema::above(0.0)
            };
            o = o.property(field, range).required(field);
        }
        o = o.property(
            "count",
            schema::integer()
                .minimum(Some(1))
                .maximum(Some(MAX_COUNT as f64))
                .description(Some("Runs of the event (self-composition); default 1.")),
        );
        if label {
            o = o
                .property("label", schema::component(&Label::name()))
                .property("blocks", schema::component("BlockSpan"))
                .property("block", schema::component("BlockKey"));
        }
        RefOr::from(o)
    };
    vec![
        variant("gaussian", &[("sigma", false), ("sensitivity", false)]),
        variant("laplace", &[("scale", false), ("sensitivity", false)]),
        variant("pure", &[("epsilon", false)]),
        variant("zcdp", &[("rho", false)]),
        variant("rdp", &[("epsilon", true)]),
    ]
}

impl PartialSchema for ChargeBody {
    fn schema() -> RefOr<Schema> {
        let composed = schema::closed()
            .property(
                "mechanism",
                schema::string().enum_values(Some(["composed"])),
            )
            .property(
                "events",
                schema::array(schema::component("ChargeEvent"))
                    .min_items(Some(1))
                    .max_items(Some(MAX_EVENTS)),
            )
            .property("label", schema::component(&Label::name()))
            .property("blocks", schema::component("BlockSpan"))
            .property("block", schema::component("BlockKey"))
            .required("mechanism")
            .required("events");
        let mut all = event_variants(true);
        all.push(composed.into());
        schema::one_of(all)
            .description(Some(
                "A DP computation run elsewhere, priced at the ledger order: `gaussian` \
                 λΔ²/(2σ²); `laplace` the exact RDP of the Laplace mechanism with b = \
                 scale/sensitivity; `pure` any ε-DP mechanism, at the RDP of \
                 randomized response (the largest of any ε-DP mechanism, below min(ε, λε²/2)); `zcdp` λρ; `rdp` the \
                 ε given (at the ledger order); `composed` the sum of its events; `count` \
                 multiplies. Each event's value is rounded up to the ledger grid as a release's \
                 cost is, and the charge is at least one grid unit.",
            ))
            .into()
    }
}

impl ToSchema for ChargeBody {
    fn name() -> Cow<'static, str> {
        "ChargeCreate".into()
    }

    /// A composition's events are a named schema of their own: generators read a union nested
    /// inline in another union's array badly.
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((
            "ChargeEvent".into(),
            schema::one_of(event_variants(false))
                .description(Some("One event of a `composed` charge (no `label`)."))
                .into(),
        ));
    }
}

impl ChargeBody {
    /// The keyed hash a retry is told apart by: the canonical body, the dataset and the caller.
    fn fingerprint(&self, key: &[u8; 32], dataset: Uuid, caller: &str) -> [u8; 32] {
        let body = serde_json::to_vec(self).expect("a charge body serialises");
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
        mac.update(b"external-charge");
        mac.update(dataset.as_bytes());
        mac.update(&(caller.len() as u64).to_le_bytes());
        mac.update(caller.as_bytes());
        mac.update(&body);
        mac.finalize().into_bytes().into()
    }
}

/// The mechanism record stored with an external charge: its kind and its description.
fn record(body: &ChargeBody) -> Value {
    let mut value = serde_json::to_value(body).unwrap_or(Value::Null);
    if let Some(object) = value.as_object_mut() {
        object.remove("label");
        object.insert("kind".into(), json!("external"));
    }
    value
}

/// Record an external DP computation on the dataset's people (admin, or an analyst whose token
/// covers the dataset), charging the dataset, the caller's allocation and every population above
/// the dataset, or nothing.
#[utoipa::path(
    post,
    path = "/v1/datasets/{id}/charges",
    operation_id = "createCharge",
    tag = "releases",
    params(DatasetId, IdempotencyKey),
    request_body(content = ChargeBody, content_type = "application/json"),
    responses(
        (status = 201, description = "Charged and recorded (or, with `Idempotent-Replayed: true`, \
                                      replayed): a `Release` with `kind: external` and no output.",
         body = ReleaseView),
        (status = 400, response = problems::MalformedRequest),
        (status = 401, response = problems::Unauthorized),
        (status = 403, response = problems::Forbidden),
        (status = 404, response = problems::NotFound),
        (status = 409, response = problems::ReleaseConflict),
        (status = 413, response = problems::PayloadTooLarge),
        (status = 415, response = problems::UnsupportedMediaType),
        (status = 422, response = problems::ReleaseRejected),
        (status = 431, response = problems::HeadersTooLarge),
        (status = 500, response = problems::Internal),
        (status = 503, response = problems::ServiceUnavailable),
        (status = 504, response = problems::CommitOutcomeUnknown),
    )
)]
pub(super) async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    gate: CommitGate,
    headers: HeaderMap,
    ApiJson(body): ApiJson<ChargeBody>,
) -> Result<Response, ApiError> {
    let key = idempotency::key(&headers)?;
    let dataset = state.dataset_for(&caller, id).await?;
    let mechanism = record(&body);
    let fingerprint = match &key {
        Some(_) => Some(body.fingerprint(&state.keys()?.fingerprint_key, id, &caller.name())),
        None => None,
    };
    let (events, tail) = body.split();
    let label = tail.label;
    let range = super::block_range(
        &dataset,
        tail.blocks
            .as_ref()
            .map(|b| (b.from.as_str(), b.to.as_str())),
        tail.block.as_deref(),
        state.settings.max_block_range,
    )?;
    if events.is_empty() || events.len() > MAX_EVENTS {
        return Err(ApiError::invalid_field(
            "events",
            format!("events must hold 1 to {MAX_EVENTS} events"),
        ));
    }
    let label = label
        .map(|l| Label::new(l).map_err(|e| ApiError::invalid_field("label", format!("label {e}"))))
        .transpose()?;
    let cost = price(&events, dataset.order.get()).map_err(|PriceError::TooLarge| {
        ApiError::invalid(
            "the charge costs more than any ledger holds (above 8192 at the ledger order)",
        )
    })?;
    if !gate.begin_commit() {
        return Err(ApiError::Timeout);
    }
    let new = NewRelease {
        id: Uuid::now_v7(),
        dataset_id: id,
        created_by: caller.name(),
        mechanism,
        cost,
        output: Output::Vector(Vec::new()),
        label,
        row_names: None,
        idempotency: key
            .zip(fingerprint)
            .map(|(key, fingerprint)| Idempotency { key, fingerprint }),
        population: dataset.population,
        blocks: range,
    };
    let presented = new.idempotency.as_ref().map(|i| i.fingerprint);
    let task_state = state.clone();
    let outcome = state
        .tasks
        .spawn(async move { task_state.store.commit_release(&new).await })
        .await
        .map_err(|e| ApiError::Internal(format!("charge task failed: {e}")))??;
    match outcome {
        CommitOutcome::Committed { release, budget } => {
            state.caches.observe_budget(id, &budget);
            tracing::info!(dataset = %id, release = %release.id, seq = release.seq, cost = release.cost.to_f64(), "external charge committed");
            Ok(idempotency::created(
                ReleaseView::new(release, dataset.order.get(), None, &budget),
                false,
            ))
        }
        CommitOutcome::Exhausted { budget } => {
            state.caches.observe_budget(id, &budget);
            Err(exhausted(
                &budget,
                format!(
                    "the charge costs {} at order {} but only {} of the budget remains; nothing was charged",
                    cost.to_f64(),
                    budget.order.get(),
                    budget.remaining().to_f64()
                ),
            ))
        }
        CommitOutcome::AllocationExhausted { allocation, budget } => {
            Err(allocation_exhausted(&allocation, &budget, cost))
        }
        CommitOutcome::PopulationExhausted { refusal, budget } => Err(population_exhausted(
            &refusal,
            budget.order,
            cost,
            "the charge",
        )),
        CommitOutcome::Existing {
            release,
            fingerprint,
        } => {
            let presented = presented
                .ok_or_else(|| ApiError::Internal("an idempotent outcome without a key".into()))?;
            idempotency::replay(&state, &dataset, release, fingerprint, presented)
        }
        CommitOutcome::BlockExhausted { block, cap, budget } => Err(super::block_exhausted(
            &block,
            cap,
            &budget,
            cost,
            "the charge",
        )),
        CommitOutcome::BlocksMismatch => Err(super::blocks_mismatch()),
        CommitOutcome::DatasetNotFound => Err(ApiError::not_found("dataset")),
        CommitOutcome::OutputQuotaExceeded { quota } => {
            Err(ApiError::OutputQuotaExceeded { quota })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaussian(sigma: f64, count: u64) -> Event {
        Event::Gaussian {
            sigma: Positive(sigma),
            sensitivity: Positive(1.0),
            count: Count(count),
        }
    }

    #[test]
    fn composition_is_summed_on_the_grid_and_never_below_the_curve() {
        let order = 8.0;
        let one = price(&[gaussian(4.0, 1)], order).unwrap();
        // λΔ²/(2σ²) = 8/32 = 0.25, rounded up.
        assert!(one.to_f64() >= 0.25 && one.to_f64() < 0.25 + 1e-9);
        let ten = price(&[gaussian(4.0, 10)], order).unwrap();
        assert_eq!(ten.raw(), 10 * one.raw());
        let both = price(&[gaussian(4.0, 10), gaussian(4.0, 1)], order).unwrap();
        assert_eq!(both.raw(), 11 * one.raw());
        let zero = price(
            &[Event::Rdp {
                epsilon: NonNegative(0.0),
                count: Count(1),
            }],
            order,
        )
        .unwrap();
        assert_eq!(zero, Units::QUANTUM);
        assert_eq!(
            price(&[gaussian(1e-6, 1)], order),
            Err(PriceError::TooLarge)
        );
    }

    #[test]
    fn parameters_are_refused_at_the_edge() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(Positive::try_from(bad).is_err());
        }
        assert!(NonNegative::try_from(0.0).is_ok());
        assert!(NonNegative::try_from(-0.5).is_err());
        assert!(Count::try_from(0).is_err());
        let unknown =
            serde_json::from_str::<ChargeBody>(r#"{"mechanism":"exponential","epsilon":1}"#);
        assert!(unknown.is_err());
        let extra =
            serde_json::from_str::<ChargeBody>(r#"{"mechanism":"pure","epsilon":1,"sigma":2}"#);
        assert!(extra.is_err());
        let nested_label = serde_json::from_str::<ChargeBody>(
            r#"{"mechanism":"composed","events":[{"mechanism":"pure","epsilon":1,"label":"x"}]}"#,
        );
        assert!(nested_label.is_err());
        // The schema says a label is a string when present; null is not "absent".
        for body in [
            r#"{"mechanism":"pure","epsilon":1,"label":null}"#,
            r#"{"mechanism":"composed","events":[{"mechanism":"pure","epsilon":1}],"label":null}"#,
        ] {
            assert!(serde_json::from_str::<ChargeBody>(body).is_err(), "{body}");
        }
        let labelled = serde_json::from_str::<ChargeBody>(
            r#"{"mechanism":"composed","events":[{"mechanism":"pure","epsilon":1}],"label":"x"}"#,
        )
        .unwrap();
        assert_eq!(labelled.split().1.label.as_deref(), Some("x"));
    }
}
