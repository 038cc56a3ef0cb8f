//! One plan item, parsed: its public shape, what it asks for (ε, an accuracy target, or — for
//! given parameters — nothing), and the mechanisms' own fields, which each mechanism reads with
//! its own parser when it is planned.

use super::{MechanismChoice, PlanItem, WorkloadError, DEFAULT_CONFIDENCE, MAX_TOTAL};
use crate::ledger::charge::MAX_EPSILON;
use crate::privacy::Epsilon;
use crate::release::input::check_relation;
use crate::release::mechanism::{Context, EpsilonUse, Need, Params, Shape};
use crate::release::mechanisms::{self, Kind, KindVisitor, Registered};

/// What an item asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    Epsilon(Epsilon),
    Target {
        l2: Option<f64>,
        cell_sd: Option<f64>,
        kl: Option<f64>,
    },
    /// Given parameters (`explicit`, `gaussian` with `sigma`...) without a target: their
    /// forecast and cost only.
    Given,
}

impl Goal {
    /// Which bounds the item asks about: a target's, or every one for a forecast at ε.
    pub fn need(&self) -> Need {
        match *self {
            Goal::Target { l2, cell_sd, kl } => Need {
                l2: l2.is_some(),
                cell_sd: cell_sd.is_some(),
                kl: kl.is_some(),
            },
            Goal::Epsilon(_) | Goal::Given => Need::ALL,
        }
    }
}

/// A parsed item: every common value valid, every mechanism field taken by the mechanism(s) it
/// names (checked again, with their own parsers, when each is planned).
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub shape: Shape,
    pub choice: MechanismChoice,
    pub goal: Goal,
    /// β = 1 − confidence.
    pub beta: f64,
    pub params: Params,
}

fn finite_positive(item: usize, field: &str, v: f64) -> Result<f64, WorkloadError> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(WorkloadError::at(
            item,
            field,
            "must be a finite number greater than 0",
        ))
    }
}

/// Whether a mechanism runs with its parameters given (nothing to search) for these fields:
/// its ε is a cap, or the field that turns its target into a cap is present.
pub fn given(kind: Kind, params: &Params) -> bool {
    struct Given<'a>(&'a Params);
    impl KindVisitor for Given<'_> {
        type Output = bool;
        fn visit<M: Registered>(self) -> bool {
            match M::EPSILON {
                EpsilonUse::Cap => true,
                EpsilonUse::TargetUnless(field) => self.0.has(field),
                EpsilonUse::Target | EpsilonUse::Pure => false,
            }
        }
    }
    kind.visit(Given(params))
}

pub fn parse(i: usize, it: &PlanItem, ctx: &Context) -> Result<Item, WorkloadError> {
    let err = |field: &str, msg: &str| WorkloadError::at(i, field, msg);
    let max = ctx.max_dimension as u64;
    if it.d < 2 {
        return Err(err("d", "must be at least 2"));
    }
    if it.d > max {
        return Err(err(
            "d",
            &format!("exceeds the configured maximum of {max} cells"),
        ));
    }
    let d = it.d as usize;
    if let Some(cells) = ctx.cells.filter(|&cells| cells != d) {
        return Err(err(
            "d",
            &format!("the dataset names {cells} cells, so every release has {cells}"),
        ));
    }
    let rows = match it.rows {
        None => None,
        Some(0) => return Err(err("rows", "a table has at least 1 row")),
        Some(rows) => {
            if rows.saturating_mul(it.d) > max {
                return Err(err(
                    "rows",
                    &format!("rows × d exceeds the configured maximum of {max} cells"),
                ));
            }
            if check_relation(&ctx.sensitivity).is_err() {
                return Err(err(
                    "rows",
                    "tables need the replace_one or add_remove_one relation",
                ));
            }
            Some(rows as usize)
        }
    };
    let (n, n_is_lower_bound, n_field) =
        match (it.n, it.n_lower_bound) {
            (Some(n), None) => (n, false, "n"),
            (None, Some(n)) => (n, true, "n_lower_bound"),
            (Some(_), Some(_)) => return Err(err(
                "n_lower_bound",
                "give n (the public total) or n_lower_bound (a public lower bound of it), not both",
            )),
            (None, None) => return Err(err(
                "n",
                "n (the public total) or n_lower_bound (a public lower bound of it) is required",
            )),
        };
    // Below 2⁵³, where every total is exact in f64 (a JSON number above it may round down to it).
    if !(n.is_finite() && (0.0..MAX_TOTAL).contains(&n)) {
        return Err(err(n_field, "must be a finite number ≥ 0 and below 2^53"));
    }
    let shape = Shape {
        d,
        rows,
        n,
        n_is_lower_bound,
    };
    let named = match it.mechanism {
        MechanismChoice::Named(k) => Some(k),
        MechanismChoice::Auto => None,
    };
    // The mechanism fields: each taken by the mechanism named, or by some mechanism `"auto"`
    // considers.
    for (field, _) in it.params.iter() {
        let taken = match named {
            Some(k) => k.takes(field),
            None => Kind::ALL.iter().any(|k| k.in_auto() && k.takes(field)),
        };
        if !taken {
            let message = match named {
                Some(k) => mechanisms::not_taken(k, field).message,
                None => format!("{field} does not apply to the auto mechanism"),
            };
            return Err(err(field, &message));
        }
    }
    let goal = match (it.epsilon, it.target, named) {
        (Some(_), _, Some(k)) if given(k, &it.params) => {
            return Err(err(
                "epsilon",
                &format!(
                    "{} runs with the parameters given; give a target to check, or nothing",
                    k.name()
                ),
            ))
        }
        (None, None, Some(k)) if given(k, &it.params) => Goal::Given,
        (Some(_), Some(_), _) => {
            return Err(err("target", "give epsilon or target, not both"));
        }
        (None, None, _) => return Err(err("target", "epsilon or target is required")),
        (Some(e), None, _) => {
            let e = Epsilon::new(e).map_err(|e| WorkloadError::at(i, "epsilon", e.to_string()))?;
            if e.get() > MAX_EPSILON {
                return Err(err(
                    "epsilon",
                    &format!("exceeds the ledger's maximum of {MAX_EPSILON}"),
                ));
            }
            Goal::Epsilon(e)
        }
        (None, Some(t), _) => {
            if t.l2.is_none() && t.cell_sd.is_none() && t.kl.is_none() {
                return Err(err("target", "give l2, cell_sd, kl or several"));
            }
            if t.l2.is_none() && t.kl.is_none() && t.confidence.is_some() {
                return Err(err(
                    "target.confidence",
                    "confidence applies to l2 and kl (cell_sd bounds a standard deviation)",
                ));
            }
            Goal::Target {
                l2: t
                    .l2
                    .map(|v| finite_positive(i, "target.l2", v))
                    .transpose()?,
                cell_sd: t
                    .cell_sd
                    .map(|v| finite_positive(i, "target.cell_sd", v))
                    .transpose()?,
                kl: t
                    .kl
                    .map(|v| finite_positive(i, "target.kl", v))
                    .transpose()?,
            }
        }
    };
    let confidence = it
        .target
        .and_then(|t| t.confidence)
        .unwrap_or(DEFAULT_CONFIDENCE);
    // A bound that holds less often than not bounds nothing; and β = 1 − confidence must be
    // exact enough to report the confidence back.
    if !((0.5..1.0).contains(&confidence)) {
        return Err(err(
            "target.confidence",
            "must be a number ≥ 0.5 and below 1",
        ));
    }
    let item = Item {
        shape,
        choice: it.mechanism,
        goal,
        beta: 1.0 - confidence,
        params: it.params.clone(),
    };
    match named {
        // A named mechanism must be able to run the item: its own fields, its own rules.
        Some(k) => {
            super::choose::applicable(k, &item, ctx)
                .map_err(|(field, reason)| err(field, &reason))?;
        }
        // `"auto"`: a field every mechanism that takes it refuses for its value is a mistake
        // in the item, not a reason to drop those mechanisms.
        None => {
            for (field, _) in item.params.iter() {
                let refusals: Vec<(&'static str, String)> = Kind::ALL
                    .into_iter()
                    .filter(|k| k.in_auto() && k.takes(field))
                    .map(|k| super::choose::applicable(k, &item, ctx).err())
                    .collect::<Option<_>>()
                    .unwrap_or_default();
                if let Some((_, reason)) = refusals
                    .iter()
                    .find(|(at, _)| at == field)
                    .filter(|_| refusals.iter().all(|(at, _)| at == field))
                {
                    return Err(err(field, reason));
                }
            }
        }
    }
    Ok(item)
}
