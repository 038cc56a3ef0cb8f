//! One mechanism's search for one item: the cheapest grid ε whose release meets the target,
//! written once for any mechanism (generic over `M: Registered`) on its `Strength` (a closed-form
//! path through its parameters) and its own calibration — `release::calibrate`, what a release
//! runs — and answered with `release::plan`, what a release is charged.

use super::item::{Goal, Item};
use super::{Cancel, Forecast, Shortfall, MAX_TOTAL};
use crate::ledger::charge::MAX_EPSILON;
use crate::ledger::{charge_for, Units};
use crate::privacy::accuracy::Bounds;
use crate::privacy::Epsilon;
use crate::release::mechanism::{
    Cache, Draw, EpsilonUse, Need, Parameters, Setup, Strength, GRID, MAX_UNITS,
};
use crate::release::mechanisms::{Kind, Registered};

/// An item as one mechanism is planned for it: the priced shape and what is asked.
pub struct Frame<'a> {
    pub setup: Setup,
    pub goal: Goal,
    pub cancel: &'a Cancel,
}

impl Frame<'_> {
    pub fn forecast(&self, b: Bounds) -> Forecast {
        Forecast {
            l2: b.l2,
            confidence: 1.0 - self.setup.beta,
            cell_sd: b.cell_sd,
            kl: b.kl.is_finite().then_some(b.kl),
        }
    }

    /// Whether bounds meet the item's target, and by how much in log terms (≤ 0: met).
    pub fn gap(&self, b: Bounds) -> f64 {
        let Goal::Target { l2, cell_sd, kl } = self.goal else {
            return 0.0;
        };
        let mut g = f64::NEG_INFINITY;
        if let Some(t) = l2 {
            g = g.max((b.l2 / t).ln());
        }
        if let Some(t) = cell_sd {
            g = g.max((b.cell_sd / t).ln());
        }
        if let Some(t) = kl {
            g = g.max((b.kl / t).ln());
        }
        if g.is_nan() {
            f64::INFINITY
        } else {
            g
        }
    }

    pub fn meets(&self, b: Bounds) -> bool {
        self.gap(b) <= 0.0
    }

    /// The bounds the target asks about (the others are 0 and must not be read).
    fn need(&self) -> Need {
        self.setup.need
    }

    fn cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

/// What the search found for one mechanism.
#[derive(Debug, Clone)]
pub enum Found {
    /// Meets the target; `units` is exact once refined.
    Reaches {
        estimate: f64,
        units: Option<u64>,
        lo: u64,
        hi: u64,
    },
    Short(Shortfall),
    Fails(String),
}

/// A candidate planned exactly: the release's own plan at its ε.
pub struct Exact {
    pub epsilon: Option<f64>,
    pub cost: Units,
    pub parameters: Parameters,
    pub bounds: Bounds,
}

/// One mechanism, ready to be searched and answered for an item.
pub trait Candidate {
    fn kind(&self) -> Kind;
    /// The search: reaches the target (a grid bracket), falls short, or cannot run.
    fn found(&self) -> Found;
    /// The exact grid value of a [`Found::Reaches`].
    fn units(&self, found: &Found) -> Result<u64, String>;
    /// The release planned at `units` (`release::plan`), checked against f64 at the total.
    fn exact(&self, units: u64) -> Result<Exact, String>;
    /// The largest grid value whose charge is at most `spend`.
    fn units_within(&self, spend: u64) -> Option<u64>;
    /// Whether a release asked at `units` (calibrated as a release is) meets the target at the
    /// item's total (the tests' view of the search).
    #[cfg(test)]
    fn meets_at(&self, units: u64) -> bool;
    /// The bounds at total `n` of a release asked at `units`; `None` where none is possible.
    #[cfg(test)]
    fn bounds_at(&self, units: u64, n: f64) -> Option<Bounds>;
}

/// Build mechanism `M`'s candidate for an item, with its own fields parsed by its own parser.
pub fn candidate<'a, M: Registered>(
    item: &Item,
    frame: &'a Frame<'a>,
    cache: &'a Cache,
    ctx: &crate::release::mechanism::Context,
) -> Result<Box<dyn Candidate + 'a>, String> {
    let own: Vec<_> = item
        .params
        .iter()
        .filter(|(name, _)| M::KIND.takes(name))
        .cloned()
        .collect();
    let settings =
        M::settings(&crate::release::mechanism::Params::new(own), ctx).map_err(|e| e.message)?;
    let strength = M::strength(&settings, &frame.setup, cache)?;
    let calibrated = match M::EPSILON {
        EpsilonUse::Target => true,
        EpsilonUse::TargetUnless(_) => strength.is_some(),
        EpsilonUse::Cap | EpsilonUse::Pure => false,
    };
    Ok(Box::new(Typed::<M> {
        settings,
        frame,
        cache,
        strength,
        calibrated,
    }))
}

struct Typed<'a, M: Registered> {
    settings: M::Settings,
    frame: &'a Frame<'a>,
    cache: &'a Cache,
    /// `None`: the parameters are given, nothing to search.
    strength: Option<Box<dyn Strength<M::Draw>>>,
    /// Whether a release at a grid ε is calibrated to it (and charged it), or priced.
    calibrated: bool,
}

/// Illinois (regula falsi with halving) on g over [a, b] with g(a) > 0 ≥ g(b): the point at
/// which the target is just met, from the meeting side.
fn illinois(
    g: impl Fn(f64) -> f64,
    mut a: f64,
    mut ga: f64,
    mut b: f64,
    mut gb: f64,
    cancel: &Cancel,
) -> f64 {
    let mut side = 0;
    for _ in 0..100 {
        if cancel.is_cancelled() || (b - a).abs() <= 1e-13 * (1.0 + a.abs().max(b.abs())) {
            break;
        }
        let mut c = (a * gb - b * ga) / (gb - ga);
        if !(c > a.min(b) && c < a.max(b)) {
            c = 0.5 * (a + b);
        }
        let gc = g(c);
        if gc > 0.0 {
            a = c;
            ga = gc;
            if side == -1 {
                gb *= 0.5;
            }
            side = -1;
        } else {
            b = c;
            gb = gc;
            if side == 1 {
                ga *= 0.5;
            }
            side = 1;
        }
    }
    b
}

impl<M: Registered> Typed<'_, M> {
    fn s(&self) -> &Setup {
        &self.frame.setup
    }

    /// The parameters a release asked at `units`·2⁻⁴⁰ runs with (`None` where no release is
    /// possible): its spec at that ε, calibrated as a release is.
    fn calibrated(&self, units: u64) -> Option<M::Draw> {
        let s = self.s();
        let epsilon = Epsilon::new(units as f64 * GRID).ok()?;
        let spec = M::at_epsilon(&self.settings, s, epsilon, self.cache).ok()?;
        crate::release::calibrate::<M>(&spec, s.shape.d, &s.sens)
            .ok()
            .map(|(draw, _)| draw)
    }

    fn price(&self, p: &M::Draw) -> f64 {
        let s = self.s();
        p.price(s.order, &s.sens, s.shape.d).0
    }

    fn bounds(&self, p: &M::Draw, n: f64) -> Bounds {
        let s = self.s();
        p.bounds(n, s.shape.d, s.beta, Need::ALL)
    }

    fn target_bounds(&self, p: &M::Draw, n: f64) -> Bounds {
        let s = self.s();
        p.bounds(n, s.shape.d, s.beta, self.frame.need())
    }

    /// The target's bounds at the item's total, checked against what f64 can carry at that
    /// total (a release the service would refuse meets nothing).
    fn exact_bounds(&self, p: &M::Draw) -> Option<Bounds> {
        let s = self.s();
        p.feasible(s.shape.n, s.shape.d, &s.sens).ok()?;
        Some(self.target_bounds(p, s.shape.n))
    }

    /// What the ledger charges for a release whose continuous optimum prices at `price`: a
    /// calibrated release is charged the grid value it is asked at (≥ the price); any other its
    /// price inflated and rounded up.
    fn cost_of_price(&self, price: f64) -> f64 {
        if self.calibrated {
            price
        } else {
            charge_for(price).map_or(f64::INFINITY, Units::to_f64)
        }
    }

    fn max_units(&self) -> u64 {
        self.strength
            .as_ref()
            .map_or(MAX_UNITS, |st| st.max_units())
    }

    /// The strongest parameters the plan considers: next to a pole where the mechanism has one
    /// (further ε moves the forecast by less than 1e-9 and the price up only logarithmically),
    /// else calibrated at the largest grid value it can be asked at.
    fn strongest(&self) -> Option<(M::Draw, f64)> {
        if let Some(near) = self.strength.as_ref().and_then(|st| st.near_pole()) {
            return Some(near);
        }
        let top = self.max_units();
        self.calibrated(top).map(|p| (p, top as f64 * GRID))
    }

    /// The smallest public total at which `p` meets the target (bisection; the bounds fall with
    /// n), rounded up to a whole number; `None` if none up to 2⁵³ does (as for a selection,
    /// whose candidates, and so bounds, are fixed by the item's n).
    fn min_n(&self, p: &M::Draw) -> Option<f64> {
        let meets = |n: f64| self.frame.meets(self.target_bounds(p, n));
        let mut lo = self.s().shape.n.max(0.0);
        let mut hi = (2.0 * lo).max(1.0);
        while !meets(hi) {
            lo = hi;
            hi *= 4.0;
            if hi > MAX_TOTAL || self.frame.cancelled() {
                return None;
            }
        }
        while hi - lo > 0.5 && hi > lo * (1.0 + 1e-12) {
            let mid = 0.5 * (lo + hi);
            if meets(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi.ceil())
    }

    /// Out of reach: what the strongest parameters do. A forecast that f64 cannot carry there
    /// (an overflow at extreme totals or priors) says nothing, so the mechanism is not
    /// applicable rather than short of a non-number.
    fn shortfall(&self, best: &M::Draw, max_epsilon: f64) -> Found {
        let forecast = self.frame.forecast(self.bounds(best, self.s().shape.n));
        let kl_asked = matches!(self.frame.goal, Goal::Target { kl: Some(_), .. });
        if !(forecast.l2.is_finite()
            && forecast.cell_sd.is_finite()
            && (forecast.kl.is_some() || !kl_asked))
        {
            return Found::Fails(
                "its forecast at the largest ε is not finite in f64 for this total and prior"
                    .into(),
            );
        }
        Found::Short(Shortfall {
            max_epsilon,
            best: forecast,
            min_n: self.min_n(best),
        })
    }

    /// Meets the target at this grid value (calibrated exactly as the release would be)?
    fn meets_at(&self, units: u64) -> bool {
        self.calibrated(units)
            .and_then(|p| self.exact_bounds(&p))
            .is_some_and(|b| self.frame.meets(b))
    }

    /// Where the continuous search cannot bracket the answer (an end rounds the wrong way, or
    /// f64's limits refuse a release the bounds would accept), the grid is searched whole,
    /// with the release's own calibrations.
    fn whole_grid(&self) -> Found {
        // From the strongest grid value the mechanism reaches (the top, or next to its pole),
        // which must meet the target.
        let top = self.strongest().map_or(0, |(_, e)| {
            ((e / GRID).floor() as u64).min(self.max_units())
        });
        if top == 0 || !self.meets_at(top) {
            return Found::Fails(
                "no grid value meets the target with a release f64 can carry at this total".into(),
            );
        }
        // The weakest carried value first: the bisection below finds a crossing, which is the
        // cheapest only where the bounds are monotone in ε.
        let weakest = self.weakest_feasible();
        if let Some(found) = weakest.and_then(|w| self.reaches_at(w)) {
            return found;
        }
        let found = self.refine(weakest.map_or(0, |w| w.min(top)), top);
        match found {
            Some(units) => Found::Reaches {
                estimate: self.cost_of_price(units as f64 * GRID),
                units: Some(units),
                lo: units - 1,
                hi: units,
            },
            None => Found::Fails(
                "no grid value meets the target with a release f64 can carry at this total".into(),
            ),
        }
    }

    /// The gap at strength t, clamped (the search only needs its sign and a slope).
    fn gap_at(&self, st: &dyn Strength<M::Draw>, t: f64) -> f64 {
        let p = st.params_at(t);
        self.frame
            .gap(self.target_bounds(&p, self.s().shape.n))
            .clamp(-50.0, 50.0)
    }

    /// The continuous search: the cheapest ε at which the target is met, before grid rounding,
    /// and a bracket of grid values around it. Illinois in the strength t on the bounds of the
    /// parameters at t, between analytic ends; the answer's price is the continuous optimum.
    fn analyse(&self, st: &dyn Strength<M::Draw>) -> Found {
        let g = |t: f64| self.gap_at(st, t);
        let (tw, ts) = st.ends();
        let gs = g(ts);
        if !(tw.is_finite() && ts.is_finite() && tw < ts && gs <= 0.0) {
            // Possibly out of reach: decide with the release's own calibration at the top.
            return self.analyse_exactly(st);
        }
        let gw = g(tw);
        if gw <= 0.0 {
            // Met even at the weakest strength: the grid's first value, if f64 carries it.
            return self.at_the_bottom();
        }
        let root = st.params_at(illinois(g, tw, gw, ts, gs, self.frame.cancel));
        // Beyond the ledger's top: decide with the release's own calibration there.
        self.bracket(st, root)
            .unwrap_or_else(|| self.analyse_exactly(st))
    }

    /// The grid bracket around a continuous optimum `root`; `None` if it lies above the
    /// largest grid value.
    fn bracket(&self, st: &dyn Strength<M::Draw>, root: M::Draw) -> Option<Found> {
        let s = self.s();
        if let Err(reason) = root.feasible(s.shape.n, s.shape.d, &s.sens) {
            return Some(Found::Fails(reason));
        }
        let (epsilon, price) = (st.request_epsilon(&root), self.price(&root));
        if !(epsilon.is_finite() && epsilon > 0.0 && price.is_finite()) {
            return Some(self.whole_grid());
        }
        let max_units = self.max_units();
        if epsilon / GRID > max_units as f64 {
            return None;
        }
        // A release asked at ε is calibrated to a price in ε·[1 − 9e-10, 1 − 1e-10]
        // (`calibrate`'s contract), so the cheapest grid value lies just above the optimum's
        // price; `refine` widens the bracket if it does not.
        let lo = ((epsilon * (1.0 - 1e-11) / GRID).floor() as u64).min(max_units);
        let hi = ((epsilon * (1.0 + 1e-9) / GRID).ceil() as u64).clamp(1, max_units);
        Some(Found::Reaches {
            estimate: self.cost_of_price(price),
            units: None,
            lo,
            hi,
        })
    }

    /// The smallest grid value whose release f64 can carry at the item's total: 1 where it
    /// can, else the boundary found by bisection (a release too weak to carry — a Gamma shape
    /// that underflows — fails below it), `None` if not even the top can.
    fn weakest_feasible(&self) -> Option<u64> {
        let carried = |units: u64| {
            self.calibrated(units)
                .and_then(|p| self.exact_bounds(&p))
                .is_some()
        };
        if carried(1) {
            return Some(1);
        }
        let top = self.max_units();
        if top <= 1 || !carried(top) {
            return None;
        }
        let (mut lo, mut hi) = (1u64, top);
        while hi - lo > 1 && !self.frame.cancelled() {
            let mid = lo + (hi - lo) / 2;
            if carried(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }

    /// The answer at `units` when it is the cheapest value the release can carry and meets
    /// the target.
    fn reaches_at(&self, units: u64) -> Option<Found> {
        let p = self.calibrated(units)?;
        let b = self.exact_bounds(&p)?;
        self.frame.meets(b).then(|| Found::Reaches {
            estimate: self.cost_of_price(self.price(&p)),
            units: Some(units),
            lo: units - 1,
            hi: units,
        })
    }

    /// The weakest value the release can carry, if it meets the target; else the whole grid.
    /// Bounds need not be monotone in ε (posterior's, near uniform counts, dip and rise again:
    /// docs/PRIVACY.md), so a target met at the weak end is answered there, never at a
    /// crossing further up.
    fn at_the_bottom(&self) -> Found {
        self.weakest_feasible()
            .and_then(|w| self.reaches_at(w))
            .unwrap_or_else(|| self.whole_grid())
    }

    /// The continuous search between the release's own calibrations at the grid's ends (or the
    /// pole): reports the shortfall at the top when the target is out of reach.
    fn analyse_exactly(&self, st: &dyn Strength<M::Draw>) -> Found {
        let Some((strong, max_epsilon)) = self.strongest() else {
            return Found::Fails(
                "no parameters of this mechanism have a finite price at the ledger order".into(),
            );
        };
        if !self
            .frame
            .meets(self.target_bounds(&strong, self.s().shape.n))
        {
            return self.shortfall(&strong, max_epsilon);
        }
        let Some(weak) = self.weakest_feasible().and_then(|w| self.calibrated(w)) else {
            return self.whole_grid();
        };
        if self
            .exact_bounds(&weak)
            .is_some_and(|b| self.frame.meets(b))
        {
            return self.at_the_bottom();
        }
        let g = |t: f64| self.gap_at(st, t);
        let (ta, tb) = (st.strength(&weak), st.strength(&strong));
        let (ga, gb) = (g(ta), g(tb));
        if !(ta.is_finite() && tb.is_finite() && ga > 0.0 && gb <= 0.0) {
            return self.whole_grid();
        }
        let root = st.params_at(illinois(g, ta, ga, tb, gb, self.frame.cancel));
        // Past the top only by rounding (the top meets): the grid below it.
        self.bracket(st, root).unwrap_or_else(|| self.whole_grid())
    }

    /// The cheapest grid value in (lo, hi] that meets the target, widening the bracket until
    /// lo fails and hi meets, then bisecting. `None` if even the largest fails.
    fn refine(&self, mut lo: u64, mut hi: u64) -> Option<u64> {
        let top = self.max_units();
        let mut widen = 64u64;
        while !self.meets_at(hi) {
            if hi >= top || self.frame.cancelled() {
                return None;
            }
            lo = hi;
            hi = hi
                .saturating_add(hi.div_ceil(1 << 20).max(1).saturating_mul(widen))
                .min(top);
            widen = widen.saturating_mul(64);
        }
        let mut widen = 64u64;
        while lo > 0 && self.meets_at(lo) {
            hi = lo;
            lo = lo.saturating_sub(lo.div_ceil(1 << 20).max(1).saturating_mul(widen));
            widen = widen.saturating_mul(64);
        }
        // lo fails (or is 0, below the grid), hi meets.
        while hi - lo > 1 && !self.frame.cancelled() {
            let mid = lo + (hi - lo) / 2;
            if self.meets_at(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }

    /// A bound that is not monotone in ε can meet the target in a band below the crossing
    /// the search found: the grid is scanned downwards by halves from the answer, and the
    /// lowest value that meets is refined against the half below it (which fails).
    fn cheaper_band(&self, found: Found) -> Found {
        let Ok(answer) = self.units(&found) else {
            return found;
        };
        let lowest = (1..u64::BITS)
            .map(|j| answer >> j)
            .take_while(|&u| u > 0 && !self.frame.cancelled())
            .filter(|&u| self.meets_at(u))
            .last();
        let Some(lowest) = lowest else {
            return found;
        };
        match self.refine(lowest / 2, lowest) {
            Some(units) if units < answer => {
                self.calibrated(units).map_or(found, |p| Found::Reaches {
                    estimate: self.cost_of_price(self.price(&p)),
                    units: Some(units),
                    lo: units - 1,
                    hi: units,
                })
            }
            _ => found,
        }
    }

    /// Given parameters with a target: they either meet it or not.
    fn given_found(&self) -> Found {
        let Some(p) = self.calibrated(1) else {
            return Found::Fails("invalid parameters".into());
        };
        let price = self.price(&p);
        if !(price.is_finite() && price <= MAX_EPSILON) {
            return Found::Fails("the release has no finite price at the ledger order".into());
        }
        if self.exact_bounds(&p).is_some_and(|b| self.frame.meets(b)) {
            Found::Reaches {
                estimate: self.cost_of_price(price),
                units: Some(1),
                lo: 0,
                hi: 1,
            }
        } else {
            self.shortfall(&p, self.cost_of_price(price))
        }
    }
}

impl<M: Registered> Candidate for Typed<'_, M> {
    fn kind(&self) -> Kind {
        M::KIND
    }

    fn found(&self) -> Found {
        match &self.strength {
            Some(st) => {
                let found = self.analyse(st.as_ref());
                let kl_asked = matches!(self.frame.goal, Goal::Target { kl: Some(_), .. });
                if kl_asked && !st.kl_monotone() {
                    self.cheaper_band(found)
                } else {
                    found
                }
            }
            None => self.given_found(),
        }
    }

    fn units(&self, found: &Found) -> Result<u64, String> {
        let Found::Reaches { units, lo, hi, .. } = found else {
            return Err("the target is not met at any grid value".into());
        };
        match units {
            Some(u) => Ok(*u),
            // (A bracket past a pole's reach: from the strongest value reached.)
            None => self
                .refine(*lo, *hi)
                .or_else(|| match self.whole_grid() {
                    Found::Reaches { units, .. } => units,
                    Found::Short(_) | Found::Fails(_) => None,
                })
                .ok_or_else(|| "the target is not met at any grid value".into()),
        }
    }

    /// Plan the release at `units` with `release::plan` (what the release would run and be
    /// charged) and check it against f64's limits at the item's total.
    fn exact(&self, units: u64) -> Result<Exact, String> {
        let s = self.s();
        let epsilon = Epsilon::new(units as f64 * GRID).map_err(|e| e.to_string())?;
        let spec = M::at_epsilon(&self.settings, s, epsilon, self.cache)?;
        let plan = crate::release::plan(&M::wrap_spec(spec), s.shape.d, s.order, &s.sens)
            .map_err(|e| e.to_string())?;
        let draw = plan.draw();
        draw.feasible(s.shape.n, s.shape.d, &s.sens)?;
        Ok(Exact {
            epsilon: self.strength.as_ref().map(|_| epsilon.get()),
            cost: plan.charge,
            parameters: draw.parameters(),
            bounds: draw.bounds(s.shape.n, s.shape.d, s.beta, Need::ALL),
        })
    }

    fn units_within(&self, spend: u64) -> Option<u64> {
        M::units_within(&self.settings, self.s(), spend, self.cache)
    }

    #[cfg(test)]
    fn meets_at(&self, units: u64) -> bool {
        Typed::meets_at(self, units)
    }

    #[cfg(test)]
    fn bounds_at(&self, units: u64, n: f64) -> Option<Bounds> {
        self.calibrated(units).map(|p| self.bounds(&p, n))
    }
}
