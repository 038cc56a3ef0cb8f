//! The choice among mechanisms for one item, and its answer: every candidate at the ε given
//! (the best forecast wins), or every candidate's search for the target (the cheapest wins),
//! with `"auto"` planning a costly candidate only once its cheap bounds say it could win.

use super::item::{Goal, Item};
use super::search::{candidate, Candidate, Exact, Found, Frame};
use super::{
    Cancel, Cancelled, CandidateAnswer, CandidateStatus, ItemAnswer, ItemStatus, MechanismChoice,
    Shortfall,
};
use crate::ledger::Units;
use crate::privacy::accuracy::Bounds;
use crate::privacy::Epsilon;
use crate::release::mechanism::{Cache, Context, Optimistic, Params, Setup, GRID};
use crate::release::mechanisms::{self, Kind, KindVisitor, Registered};

/// Whether mechanism `k` can run this item at all (the field at fault and why not): the rules
/// of the registry (tables), its own fields, and its own planning rules.
pub fn applicable(k: Kind, item: &Item, ctx: &Context) -> Result<(), (&'static str, String)> {
    struct Applicable<'a> {
        item: &'a Item,
        ctx: &'a Context,
    }
    impl KindVisitor for Applicable<'_> {
        type Output = Result<(), (&'static str, String)>;
        fn visit<M: Registered>(self) -> Self::Output {
            if let Some(refusal) = mechanisms::table_refusal(M::KIND, &self.item.shape) {
                return Err(refusal);
            }
            let settings = M::settings(&own_params::<M>(&self.item.params), self.ctx)
                .map_err(|e| (e.field, e.message))?;
            M::plannable(&settings, &self.item.shape, self.ctx)
        }
    }
    k.visit(Applicable { item, ctx })
}

/// The item's fields `M` takes.
fn own_params<M: Registered>(params: &Params) -> Params {
    Params::new(
        params
            .iter()
            .filter(|(name, _)| M::KIND.takes(name))
            .cloned()
            .collect(),
    )
}

/// A candidate mechanism: ready to plan, deferred until the others are planned (its cheap
/// bounds first), or not applicable.
enum Cand<'a> {
    Ready(Box<dyn Candidate + 'a>),
    Deferred(Box<dyn Optimistic>),
    No(String),
}

/// The candidates of an item, in the registry's order (the tie-break order: the Dirichlet
/// family first, the service's default). `"auto"` considers every mechanism that says so whose
/// needed fields the item has.
fn candidates<'a>(
    item: &Item,
    frame: &'a Frame<'a>,
    ctx: &Context,
    cache: &'a Cache,
) -> Vec<(Kind, Cand<'a>)> {
    let kinds: Vec<Kind> = match item.choice {
        MechanismChoice::Named(k) => vec![k],
        MechanismChoice::Auto => Kind::ALL
            .into_iter()
            .filter(|k| k.in_auto())
            .filter(|k| {
                k.fields()
                    .iter()
                    .filter(|f| f.required)
                    .all(|f| item.params.has(f.name))
            })
            .collect(),
    };
    let auto = item.choice == MechanismChoice::Auto;
    struct Make<'a, 'b> {
        item: &'b Item,
        frame: &'a Frame<'a>,
        ctx: &'b Context,
        cache: &'a Cache,
        auto: bool,
    }
    impl<'a> KindVisitor for Make<'a, '_> {
        type Output = Cand<'a>;
        fn visit<M: Registered>(self) -> Cand<'a> {
            if let Err((_, reason)) = applicable(M::KIND, self.item, self.ctx) {
                return Cand::No(reason);
            }
            if self.auto {
                let settings = M::settings(&own_params::<M>(&self.item.params), self.ctx);
                if let Some(o) = settings
                    .ok()
                    .and_then(|s| M::optimistic(&s, &self.frame.setup))
                {
                    return Cand::Deferred(o);
                }
            }
            ready::<M>(self.item, self.frame, self.ctx, self.cache)
        }
    }
    kinds
        .into_iter()
        .map(|k| {
            let cand = k.visit(Make {
                item,
                frame,
                ctx,
                cache,
                auto,
            });
            (k, cand)
        })
        .collect()
}

fn ready<'a, M: Registered>(
    item: &Item,
    frame: &'a Frame<'a>,
    ctx: &Context,
    cache: &'a Cache,
) -> Cand<'a> {
    match candidate::<M>(item, frame, cache, ctx) {
        Ok(c) => Cand::Ready(c),
        Err(reason) => Cand::No(reason),
    }
}

/// A deferred candidate made ready.
fn undefer<'a>(
    k: Kind,
    item: &Item,
    frame: &'a Frame<'a>,
    ctx: &Context,
    cache: &'a Cache,
) -> Result<Box<dyn Candidate + 'a>, String> {
    struct Ready<'a, 'b> {
        item: &'b Item,
        frame: &'a Frame<'a>,
        ctx: &'b Context,
        cache: &'a Cache,
    }
    impl<'a> KindVisitor for Ready<'a, '_> {
        type Output = Result<Box<dyn Candidate + 'a>, String>;
        fn visit<M: Registered>(self) -> Self::Output {
            candidate::<M>(self.item, self.frame, self.cache, self.ctx)
        }
    }
    k.visit(Ready {
        item,
        frame,
        ctx,
        cache,
    })
}

fn not_applicable(k: Kind, reason: String) -> CandidateAnswer {
    CandidateAnswer {
        mechanism: k,
        status: CandidateStatus::NotApplicable,
        estimated_cost: None,
        forecast: None,
        shortfall: None,
        reason: Some(reason),
    }
}

fn outranked(k: Kind, reason: String) -> CandidateAnswer {
    CandidateAnswer {
        status: CandidateStatus::Outranked,
        ..not_applicable(k, reason)
    }
}

/// The answer slot of a candidate about to be analysed (overwritten by [`analysed`]).
fn pending(k: Kind) -> CandidateAnswer {
    not_applicable(k, "not analysed".into())
}

/// Plan one item; `Err(Cancelled)` if its plan was cancelled meanwhile.
pub fn plan_item(
    item: &Item,
    ctx: &Context,
    cache: &Cache,
    cancel: &Cancel,
) -> Result<ItemAnswer, Cancelled> {
    if cancel.is_cancelled() {
        return Err(Cancelled);
    }
    let sens = if item.shape.rows.is_some() {
        ctx.sensitivity.for_table()
    } else {
        ctx.sensitivity
    };
    let frame = Frame {
        setup: Setup {
            shape: item.shape,
            order: ctx.ledger_order,
            sens,
            beta: item.beta,
            need: item.goal.need(),
            kl_target: matches!(item.goal, Goal::Target { kl: Some(_), .. }),
        },
        goal: item.goal,
        cancel,
    };
    let cands = candidates(item, &frame, ctx, cache);
    let answer = match item.goal {
        Goal::Target { l2, cell_sd, kl } => {
            plan_target(cands, &frame, item, ctx, cache, (l2, cell_sd, kl))
        }
        Goal::Epsilon(e) => plan_epsilon(cands, e, &frame, item, ctx, cache),
        Goal::Given => plan_epsilon(
            cands,
            Epsilon::new(GRID).expect("2^-40 > 0"),
            &frame,
            item,
            ctx,
            cache,
        ),
    };
    if cancel.is_cancelled() {
        return Err(Cancelled);
    }
    Ok(answer)
}

/// ε given: every candidate at that spend (a mechanism priced below its ε runs at the largest
/// grid ε whose charge is at most the same spend); the chosen one forecasts best (ℓ2, then
/// cell_sd, then the registry's order). In `"auto"` a deferred candidate is planned only if its
/// cheap forecast could beat the best.
fn plan_epsilon<'a>(
    cands: Vec<(Kind, Cand<'a>)>,
    e: Epsilon,
    frame: &'a Frame<'a>,
    item: &Item,
    ctx: &Context,
    cache: &'a Cache,
) -> ItemAnswer {
    let asked = Units::floor(e.get()).map_or(0, |u| u.raw() as u64).max(1);
    let mut answers = Vec::new();
    let mut best: Option<(usize, Exact, Kind)> = None;
    let key = |b: &Bounds| (b.l2, b.cell_sd);
    for (k, cand) in cands {
        let c = match cand {
            Cand::Ready(c) => c,
            Cand::No(reason) => {
                answers.push(not_applicable(k, reason));
                continue;
            }
            Cand::Deferred(o) => {
                let optimistic = o.bounds_within(asked);
                let beaten = match (&best, optimistic) {
                    (Some((_, b, _)), Some(o)) => key(&o) >= key(&b.bounds),
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                if beaten {
                    answers.push(outranked(
                        k,
                        "less accurate at this spend than the chosen mechanism, even with the \
                         lower bound of its sensitivity (not planned exactly)"
                            .into(),
                    ));
                    continue;
                }
                match undefer(k, item, frame, ctx, cache) {
                    Ok(c) => c,
                    Err(reason) => {
                        answers.push(not_applicable(k, reason));
                        continue;
                    }
                }
            }
        };
        let planned = c
            .units_within(asked)
            .ok_or_else(|| "no epsilon of this mechanism fits this spend".to_string())
            .and_then(|u| c.exact(u));
        match planned {
            Err(reason) => answers.push(not_applicable(k, reason)),
            Ok(x) => {
                answers.push(CandidateAnswer {
                    mechanism: k,
                    status: CandidateStatus::Planned,
                    estimated_cost: Some(x.cost.to_f64()),
                    forecast: Some(frame.forecast(x.bounds)),
                    shortfall: None,
                    reason: None,
                });
                let better = best
                    .as_ref()
                    .is_none_or(|(_, b, _)| key(&x.bounds) < key(&b.bounds));
                if better {
                    best = Some((answers.len() - 1, x, k));
                }
            }
        }
    }
    match best {
        Some((i, x, k)) => {
            answers[i].status = CandidateStatus::Chosen;
            chosen_answer(k, x, frame, answers)
        }
        None => ItemAnswer {
            status: ItemStatus::Unreachable,
            mechanism: None,
            epsilon: None,
            cost: None,
            parameters: None,
            forecast: None,
            shortfall: None,
            candidates: answers,
        },
    }
}

fn chosen_answer(k: Kind, x: Exact, frame: &Frame, candidates: Vec<CandidateAnswer>) -> ItemAnswer {
    let meets = !matches!(frame.goal, Goal::Target { .. }) || frame.meets(x.bounds);
    ItemAnswer {
        status: if meets {
            ItemStatus::Planned
        } else {
            ItemStatus::Unreachable
        },
        mechanism: Some(k),
        epsilon: x.epsilon,
        cost: Some(x.cost.to_f64()),
        parameters: Some(x.parameters),
        forecast: Some(frame.forecast(x.bounds)),
        shortfall: None,
        candidates,
    }
}

/// A target: every candidate's continuous optimum, then the cheapest refined on the grid (with
/// any other within the refinement's tolerance of it). A deferred candidate is analysed last,
/// and only if a lower bound on its cost does not already exceed the chosen cost.
fn plan_target<'a>(
    cands: Vec<(Kind, Cand<'a>)>,
    frame: &'a Frame<'a>,
    item: &Item,
    ctx: &Context,
    cache: &'a Cache,
    (l2, cell_sd, kl): (Option<f64>, Option<f64>, Option<f64>),
) -> ItemAnswer {
    let mut answers = Vec::new();
    let mut found: Vec<(usize, Box<dyn Candidate + 'a>, Found)> = Vec::new();
    let mut deferred = Vec::new();
    for (k, cand) in cands {
        match cand {
            Cand::No(reason) => answers.push(not_applicable(k, reason)),
            Cand::Deferred(o) => {
                answers.push(pending(k));
                deferred.push((answers.len() - 1, k, o));
            }
            Cand::Ready(c) => {
                answers.push(pending(k));
                let slot = answers.len() - 1;
                let f = analysed(c.as_ref(), frame, &mut answers[slot]);
                found.push((slot, c, f));
            }
        }
    }
    let mut best: Option<(usize, Kind, Exact)> = None;
    refine_cheapest(&found, frame, &mut answers, &mut best);
    for (slot, k, o) in deferred {
        // (A KL target: no cheap bound, and no KL bound at all for the mechanisms deferred.)
        let floor = if kl.is_some() {
            None
        } else {
            o.cost_floor(l2, cell_sd)
        };
        let beaten = match (&best, floor) {
            (Some((_, _, b)), Some(floor)) => floor >= b.cost.to_f64(),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if beaten {
            answers[slot] = outranked(
                k,
                match floor {
                    Some(floor) => format!(
                        "costs at least {floor:e} (from the lower bound of its sensitivity), \
                         not less than the chosen mechanism (not planned exactly)"
                    ),
                    None => "out of reach: its bias alone exceeds the target".into(),
                },
            );
        } else {
            match undefer(k, item, frame, ctx, cache) {
                Err(reason) => answers[slot] = not_applicable(k, reason),
                Ok(c) => {
                    let f = analysed(c.as_ref(), frame, &mut answers[slot]);
                    let more = [(slot, c, f)];
                    refine_cheapest(&more, frame, &mut answers, &mut best);
                }
            }
        }
    }
    if let Some((slot, k, x)) = best {
        answers[slot].status = CandidateStatus::Chosen;
        return chosen_answer(k, x, frame, answers);
    }
    // Nothing reaches: the candidate that needs the smallest total comes closest.
    let closest = answers
        .iter()
        .filter_map(|a| a.shortfall.map(|sh| (a.mechanism, sh)))
        .min_by(|a, b| {
            let key = |s: &Shortfall| s.min_n.unwrap_or(f64::INFINITY);
            key(&a.1).total_cmp(&key(&b.1))
        });
    ItemAnswer {
        status: ItemStatus::Unreachable,
        mechanism: closest.map(|c| c.0),
        epsilon: None,
        cost: None,
        parameters: None,
        forecast: None,
        shortfall: closest.map(|c| c.1),
        candidates: answers,
    }
}

/// Analyse one candidate and write what was found into its answer.
fn analysed(c: &dyn Candidate, _frame: &Frame, answer: &mut CandidateAnswer) -> Found {
    let f = c.found();
    let k = c.kind();
    *answer = match &f {
        Found::Reaches { estimate, .. } => CandidateAnswer {
            mechanism: k,
            status: CandidateStatus::Planned,
            estimated_cost: Some(*estimate),
            forecast: None,
            shortfall: None,
            reason: None,
        },
        Found::Short(short) => CandidateAnswer {
            mechanism: k,
            status: CandidateStatus::Unreachable,
            estimated_cost: None,
            forecast: None,
            shortfall: Some(*short),
            reason: None,
        },
        Found::Fails(reason) => not_applicable(k, reason.clone()),
    };
    f
}

/// Refine the candidates that reach the target, cheapest estimate first, into `best` (the
/// cheapest exact cost, ties to the earlier slot). A refined cost exceeds its estimate by at
/// most the bracket (~1e-9), so once a refined cost is below every remaining estimate it wins.
fn refine_cheapest<'a>(
    found: &[(usize, Box<dyn Candidate + 'a>, Found)],
    frame: &Frame,
    answers: &mut [CandidateAnswer],
    best: &mut Option<(usize, Kind, Exact)>,
) {
    let estimate = |i: usize| match found[i].2 {
        Found::Reaches { estimate, .. } => estimate,
        Found::Short(_) | Found::Fails(_) => f64::INFINITY,
    };
    let mut order: Vec<usize> = (0..found.len())
        .filter(|i| matches!(found[*i].2, Found::Reaches { .. }))
        .collect();
    order.sort_by(|a, b| estimate(*a).total_cmp(&estimate(*b)).then(a.cmp(b)));
    for i in order {
        if let Some((_, _, b)) = best.as_ref() {
            if estimate(i) > b.cost.to_f64() {
                break;
            }
        }
        let (slot, c, f) = &found[i];
        match c.units(f).and_then(|u| c.exact(u)) {
            Ok(x) => {
                answers[*slot].forecast = Some(frame.forecast(x.bounds));
                let better = best
                    .as_ref()
                    .is_none_or(|(j, _, b)| (x.cost, *slot) < (b.cost, *j));
                if better {
                    *best = Some((*slot, c.kind(), x));
                }
            }
            Err(reason) => {
                answers[*slot].status = CandidateStatus::NotApplicable;
                answers[*slot].reason = Some(reason);
            }
        }
    }
}
