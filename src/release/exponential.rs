//! Seed 002's Hellinger exponential mechanism over the n + 1 Beta posteriors of a
//! (successes, failures) count: its plan (the candidates, the ε cap, the record) and its
//! selection. Pure, like the rest of `release`.

use super::record::{Mechanism, PriorRecord, Selection};
use super::request::Kind;
use super::{Draw, Drawn, PlanError};
use crate::privacy::exponential::{BetaCandidates, ExponentialError};
use crate::privacy::sampler::CsRng;
use crate::privacy::{Counts, Epsilon};

/// Seed 002's mechanism: n public, prior Beta(α, β).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExponentialSpec {
    pub epsilon: Epsilon,
    pub prior: (f64, f64),
    pub n: u64,
}

/// Plan seed 002's exponential mechanism.
pub fn plan_exponential(spec: &ExponentialSpec) -> Result<(Draw, Mechanism), PlanError> {
    let (a, b) = spec.prior;
    let candidates =
        BetaCandidates::new(spec.n, a, b).map_err(|e| PlanError::Parameter(e.to_string()))?;
    let epsilon = spec.epsilon.get();
    if epsilon > candidates.max_epsilon() {
        return Err(PlanError::Parameter(
            ExponentialError::EpsilonTooLarge {
                epsilon,
                max_epsilon: candidates.max_epsilon(),
            }
            .to_string(),
        ));
    }
    let record = Mechanism {
        epsilon: Some(epsilon),
        prior: Some(PriorRecord::Beta([a, b])),
        n: Some(spec.n),
        sensitivity: Some(candidates.global_sensitivity()),
        sensitivity_used: Some(candidates.sensitivity_used()),
        ..Mechanism::new(Kind::Exponential)
    };
    Ok((
        Draw::Exponential {
            candidates,
            epsilon,
        },
        record,
    ))
}

/// Select one of the n + 1 posteriors with probability ∝ exp(−ε·H/(2Δ)) for the counts; the
/// output is its mean, and the record gains the selected index and posterior.
pub fn execute_exponential(
    candidates: &BetaCandidates,
    epsilon: f64,
    counts: &Counts,
    rng: &mut CsRng,
) -> Result<Drawn, String> {
    let x = counts.as_slice();
    let n = candidates.n();
    let n1 = x[0];
    if x.len() != 2 || n1.fract() != 0.0 || x[1].fract() != 0.0 || n1 + x[1] != n as f64 {
        return Err("the counts do not match the planned exponential release".into());
    }
    candidates
        .select(n1 as u64, epsilon, rng)
        .map_err(|e| e.to_string())
        .map(|j| {
            let (a, b) = candidates.candidate(j);
            let total = a + b;
            (
                vec![a / total, b / total],
                Some(Selection {
                    selected: j,
                    posterior: [a, b],
                }),
            )
        })
}
