//! The Dirichlet calibrations: one target (λ, ε, sensitivity) and the solves for r, for the
//! prior, or for both (000 Algorithm 1, 001 Theorem 2 and Corollary 3), against the exact price.

use super::contract::{
    CalibrationError, ESTIMATE_TOLERANCE, EXACT_AIM, EXACT_TOLERANCE, RESIDUAL, START_RESIDUAL,
    TARGET_SHORTFALL,
};
use super::inverse::inverse_trigamma;
use super::roots::{finite_ln_or, nan_to, newton, settle_reach, solve_increasing, Unsettled};
use crate::privacy::curve::{dirichlet_rdp, Pricing};
use crate::privacy::exact::{
    estimate_rdp_two, exact_rdp_two, far_shift, realised_near_shift, realised_rdp_two, worst_pair,
};
use crate::privacy::special::{trigamma, trigamma_tetragamma};
use crate::privacy::types::{DirichletParams, Epsilon, Order, Prior, Sensitivity};

pub(super) struct Problem<'a> {
    pub(super) order: Order,
    pub(super) epsilon: Epsilon,
    pub(super) sens: &'a Sensitivity,
    /// Solve against the realised-shift price (`curve::dirichlet_price`, what is charged);
    /// false only in tests that compare with the real-number curve's roots.
    pub(super) realised: bool,
    /// The last exact evaluation, (r, α₁, α₂) → ε*: the solver's final iterate is the point
    /// `settle` checks first, and each evaluation is a ~50-node quadrature.
    pub(super) last: std::cell::Cell<[f64; 4]>,
}

impl Problem<'_> {
    fn lambda(&self) -> f64 {
        self.order.get()
    }

    fn eps(&self) -> f64 {
        self.epsilon.get()
    }

    fn target(&self) -> f64 {
        self.eps() * (1.0 - TARGET_SHORTFALL)
    }

    /// ½λΔ2², the curve's constant factor.
    fn half_lambda_l2(&self) -> f64 {
        0.5 * self.lambda() * self.sens.l2_squared()
    }

    fn infeasible(&self, reason: &str) -> CalibrationError {
        CalibrationError::Infeasible {
            order: self.lambda(),
            epsilon: self.eps(),
            reason: reason.to_string(),
        }
    }

    fn pricing(&self) -> Pricing {
        Pricing::for_sensitivity(self.sens)
    }

    /// The Corollary 3 solve's residual: the root itself for the bound, a start for ε*.
    fn start_residual(&self) -> f64 {
        match self.pricing() {
            Pricing::Exact => START_RESIDUAL,
            Pricing::Bound => RESIDUAL,
        }
    }

    /// The curve the release will be charged by (`curve::dirichlet_price`), from the prior's
    /// two smallest entries (found once, not per evaluation).
    fn curve(&self, r: f64, alpha_1: f64, alpha_2: f64) -> f64 {
        match self.pricing() {
            Pricing::Exact => {
                let [lr, la1, la2, value] = self.last.get();
                let same = |a: f64, b: f64| a.to_bits() == b.to_bits();
                if same(lr, r) && same(la1, alpha_1) && same(la2, alpha_2) {
                    return value;
                }
                let relation = self.sens.relation();
                let value = if self.realised {
                    realised_rdp_two(self.order, r, alpha_1, alpha_2, relation)
                } else {
                    exact_rdp_two(self.order, r, alpha_1, alpha_2, relation)
                };
                self.last.set([r, alpha_1, alpha_2, value]);
                value
            }
            Pricing::Bound => {
                let r = if self.realised { far_shift(r) } else { r };
                dirichlet_rdp(self.order, r, alpha_1, self.sens)
            }
        }
    }

    /// The shift the lnΓ estimate is evaluated at: the one the price's near case uses.
    fn estimate_shift(&self, r: f64, alpha_2: f64) -> f64 {
        if self.realised {
            realised_near_shift(r, alpha_2)
        } else {
            r
        }
    }

    /// The refusal of a target beyond the curve's reach: the price at the last parameter
    /// before the pole, and what reaches further.
    fn unreached(&self, reach: f64, more: &str) -> CalibrationError {
        self.infeasible(&format!(
            "the largest epsilon this calibration reaches at order {} is {reach:.6e} (the price \
             at the last f64 parameter before the curve's pole); {more} reaches more",
            self.lambda()
        ))
    }

    fn unsettled(&self, e: Unsettled, more: &str) -> CalibrationError {
        match e {
            Unsettled::Beyond { reach } => self.unreached(reach, more),
            Unsettled::Unrepresentable => {
                self.infeasible("the solution is not representable in f64 precision")
            }
        }
    }

    /// Refine a Corollary 3 solution t₀ (where ε* ≤ the bound ≈ ε, so t₀ is at or below the
    /// root) to the root of the exact curve, ε*(`params(t)`) increasing in t, where `params`
    /// gives (r, α₁, α₂). Skipped for the bound, whose solution t₀ already is.
    ///
    /// The exact curve aims at ε(1 − [`EXACT_AIM`]) and stops within [`EXACT_TOLERANCE`] of it:
    /// the middle of the contract's window [ε(1 − SPEND_TOLERANCE), ε/(1 + CHARGE_INFLATION)],
    /// far from both ends compared with the curve's own error (1.5e-13), so `settle` accepts
    /// the result at its first check (which the memo in [`Problem::curve`] answers) instead
    /// of chasing a 1e-14 residual through the quadrature's rounding noise.
    ///
    /// Each exact evaluation is a ~30–250-node quadrature, so the root is first found on the
    /// lnΓ estimate ([`estimate_rdp_two`], ~20× cheaper), whose error for every moderate prior
    /// is far inside the tolerance: the exact solve then stops at its first evaluation. Where
    /// the estimate is off (large priors, whose lnΓ differences cancel), the exact solve
    /// carries on from it as it would from t₀. The estimate only chooses where to look; what
    /// is charged is checked on the exact curve.
    ///
    /// `first_slope` guesses the estimate's slope at t₀ from its value there, `slope` the exact
    /// curve's d ln ε*/dt. With `pole` (posterior, whose prior a large ε drives to the pole)
    /// the estimate's solve runs on [`pole_scale`] ≈ ln(e^{(λ−1)ε*} − 1) instead of ln ε*:
    /// next to the pole (λ − 1)ε* ≈ −ln z + const in the prior's distance z to it, so ln ε*
    /// bends like ln ln(1/z) and secant steps creep up on the root, while pole_scale is nearly
    /// linear in ln z both there and far from the pole (where it is ln ε* + const). Its slope
    /// in ln ε* is ≥ 1, so its tolerance bounds the residual of ln ε*. Posterior, λ = 2, r = 1:
    /// 2 evaluations of the estimate at every ε from 0.01 to 10, where ln ε* took 4–8.
    fn refine(
        &self,
        t0: f64,
        pole: bool,
        first_slope: impl FnOnce(f64) -> f64,
        slope: f64,
        params: impl Fn(f64) -> (f64, f64, f64),
    ) -> f64 {
        match self.pricing() {
            Pricing::Exact => {
                let aim_eps = self.eps() * (1.0 - EXACT_AIM);
                let aim = aim_eps.ln();
                let relation = self.sens.relation();
                let lm1 = self.lambda() - 1.0;
                let scale = |e: f64| {
                    if pole {
                        pole_scale(lm1, e)
                    } else {
                        e.ln()
                    }
                };
                let aim_scaled = scale(aim_eps);
                let estimate = |t: f64| {
                    let (r, a1, a2) = params(t);
                    let r = self.estimate_shift(r, a2);
                    let e = estimate_rdp_two(self.order, r, a1, a2, relation);
                    scale(e) - aim_scaled
                };
                let t1 = solve_increasing(estimate, t0, first_slope, ESTIMATE_TOLERANCE, 20);
                let start = if t1.is_finite() { t1 } else { t0 };
                let exact = |t: f64| {
                    let (r, a1, a2) = params(t);
                    self.curve(r, a1, a2).ln() - aim
                };
                solve_increasing(exact, start, |_| slope, EXACT_TOLERANCE, 100)
            }
            // The closed-form roots are Corollary 3's at the nominal r; the price is at
            // r(1 + 2⁻¹⁷), a few secant steps away on a curve that costs one ψ′.
            Pricing::Bound if self.realised => {
                let aim = (self.eps() * (1.0 - EXACT_AIM)).ln();
                let curve = |t: f64| {
                    let (r, a1, a2) = params(t);
                    self.curve(r, a1, a2).ln() - aim
                };
                solve_increasing(curve, t0, |_| slope, EXACT_TOLERANCE, 40)
            }
            Pricing::Bound => t0,
        }
    }

    /// 000 Algorithm 1: h(r) = c r² ψ′(a₀ + k r) = ε with c = ½λΔ2², k = 3(λ−1)Δ∞; Newton in
    /// t = ln r on ln h(eᵗ) − ln ε, whose slope 2 + k r ψ″/ψ′ lies in (0, 2] (000 Lemma 2).
    pub(super) fn algorithm_1(&self, a0: f64) -> Result<DirichletParams, CalibrationError> {
        let lambda = self.lambda();
        let linf = self.sens.linf();
        let c = self.half_lambda_l2();
        let k = 3.0 * (lambda - 1.0) * linf;
        let target = self.target();
        let ln_rhs = target.ln() - c.ln();
        // Bracket from ψ′(z) < ψ′(a₀) (root ≥ r_lo), and ψ′(z) > 1/z, ψ′(z) > 1/z² (root ≤ r_hi).
        // In logs: target/(c·ψ′) can be subnormal (and imprecise) when ε is tiny.
        let r_lo = (0.5 * (ln_rhs - trigamma(a0).ln())).exp();
        let r_hi_1 =
            (target * k + (target * target * k * k + 4.0 * c * target * a0).sqrt()) / (2.0 * c);
        let (sc, st) = (c.sqrt(), target.sqrt());
        let r_hi_2 = if sc > k * st {
            a0 * st / (sc - k * st)
        } else {
            f64::INFINITY
        };
        let r_hi = r_hi_1.min(r_hi_2);
        let lo = finite_ln_or(r_lo, f64::NEG_INFINITY);
        let hi = finite_ln_or(r_hi, f64::INFINITY);
        let start = match (lo.is_finite(), hi.is_finite()) {
            (true, true) => 0.5 * (lo + hi),
            (true, false) => lo,
            (false, true) => hi,
            (false, false) => 0.0,
        };
        let t = newton(
            |t| {
                let r = t.exp();
                let (p1, p2) = trigamma_tetragamma(a0 + k * r);
                (2.0 * t + p1.ln() - ln_rhs, 2.0 + k * r * p2 / p1)
            },
            start,
            lo,
            hi,
            self.start_residual(),
        );
        let alpha_of = |r: f64| a0 + 4.0 * (lambda - 1.0) * r * linf;
        let exact = |r: f64| {
            let a = alpha_of(r);
            self.curve(r, a, a)
        };
        // ε* = r²·(kernel integral of ψ′ at arguments a₀ + r·cᵤ, cᵤ > 0) rises in r like the
        // bound (2ψ′ + tψ″ > 0), with slope ≤ 2 in ln r.
        let t = self.refine(
            t,
            false,
            |_| 2.0,
            2.0,
            |t| {
                let r = t.exp();
                let a = alpha_of(r);
                (r, a, a)
            },
        );
        let r0 = t.exp();
        let r = settle_reach(r0, true, self.eps(), exact)
            .map_err(|e| self.unsettled(e, "a larger prior or a lower order"))?;
        let alpha = alpha_of(r);
        if !(r.is_finite() && alpha.is_finite()) {
            return Err(self.infeasible("the parameters overflow"));
        }
        Ok(DirichletParams {
            r,
            alpha: Prior::Uniform(alpha),
        })
    }

    /// 001 Theorem 2 for the prior: ψ′(z) = 2ε/(λr²Δ2²), α_m = z + (λ−1)rΔ∞.
    pub(super) fn posterior(&self, r: f64) -> Result<DirichletParams, CalibrationError> {
        let c = self.half_lambda_l2() * r * r;
        let level = self.target() / c;
        if !(c.is_finite() && c > 0.0 && level.is_finite() && level > 0.0) {
            return Err(self.infeasible("the curve's scale overflows for this r"));
        }
        let z = inverse_trigamma(level);
        let shift = (self.lambda() - 1.0) * r * self.sens.linf();
        // ε* falls in α (ψ′ decreases), so the exact root is at or below the bound's: solve in
        // t = −ln(α − shift), where ε* rises (≈ λr²/z far from the pole, slope 1).
        let t = self.refine(
            -z.ln(),
            true,
            |_| 1.0,
            1.0,
            |t| {
                let a = (-t).exp() + shift;
                (r, a, a)
            },
        );
        let alpha0 = (-t).exp() + shift;
        if !(alpha0.is_finite() && alpha0 > 0.0) {
            return Err(self.infeasible("the prior overflows"));
        }
        let alpha = settle_reach(alpha0, false, self.eps(), |a| self.curve(r, a, a))
            .map_err(|e| self.unsettled(e, "a larger r or a lower order"))?;
        Ok(DirichletParams {
            r,
            alpha: Prior::Uniform(alpha),
        })
    }

    /// The prior is fixed; r ∈ (0, α_m/k), k = (λ−1)Δ∞. Newton in u = ln(r/z), z = α_m − kr,
    /// which maps the open interval onto ℝ and makes ln h nearly linear (slope in (1, 2)):
    /// r = α_m/(k + e^{−u}), z = α_m e^{−u}/(k + e^{−u}).
    pub(super) fn diffuse(&self, alpha: &Prior) -> Result<DirichletParams, CalibrationError> {
        let (alpha_min, alpha_2) = worst_pair(alpha, self.sens.is_table());
        let k = (self.lambda() - 1.0) * self.sens.linf();
        let c = self.half_lambda_l2();
        let target = self.target();
        let ln_rhs = target.ln() - c.ln();
        let u_of = |r: f64| (r / (alpha_min - k * r)).ln();
        // ψ′(α_m − kr) exceeds ψ′(α_m), 1/z² and 1/z, so h(r) exceeds each of c r² ψ′(α_m),
        // c r²/z², c r²/z: where any of those equals the target, h is above it, and the
        // smallest such r bounds the root from above. (No cheap lower bound is needed: the
        // slope of ln h in u is in (1, 2), so Newton walks down quickly.)
        let r_hi_0 = (0.5 * (ln_rhs - trigamma(alpha_min).ln())).exp();
        let (sc, st) = (c.sqrt(), target.sqrt());
        let r_hi_1 = st * alpha_min / (sc + k * st);
        let r_hi_2 = (-target * k
            + (target * target * k * k + 4.0 * c * target * alpha_min).sqrt())
            / (2.0 * c);
        let hi = nan_to(u_of(r_hi_0.min(r_hi_1).min(r_hi_2)), f64::INFINITY);
        let lo = f64::NEG_INFINITY;
        let start = if hi.is_finite() { hi } else { 0.0 };
        let split = |u: f64| {
            let e = (-u.clamp(-700.0, 700.0)).exp();
            let r = alpha_min / (k + e);
            let z = alpha_min * (e / (k + e));
            let s = e / (k + e);
            (r, z, s, e)
        };
        // For ε* the Corollary 3 root is only a start, and a poor one at large ε (α = 10, λ = 2,
        // ε = 10: 35 % below ε*'s root in r). ε*'s own second-order term at r = 0 is
        // c r² ψ′(α_m), whose root r_hi_0 was 7 % below it there: the estimate's solve starts
        // from r_hi_0 when that lies inside the pole.
        let taylor = u_of(r_hi_0);
        let u = if self.pricing() == Pricing::Exact && taylor.is_finite() {
            taylor
        } else {
            newton(
                |u| {
                    let (_, z, s, e) = split(u);
                    let (p1, p2) = trigamma_tetragamma(z);
                    let ln_r = alpha_min.ln() - (k + e).ln();
                    (
                        2.0 * ln_r + p1.ln() - ln_rhs,
                        2.0 * s - (1.0 - s) * z * p2 / p1,
                    )
                },
                start,
                lo,
                hi,
                self.start_residual(),
            )
        };
        // ε* ≈ r²·const away from the pole: the first step follows that in ln r, then maps
        // back to u, where the steps stay inside the pole (α = 10, λ = 2: 4–5 evaluations of
        // the estimate from ε = 0.01 to 10, where the Corollary 3 start and a first slope of 2
        // in u took 4–7).
        let first_slope = |f0: f64| {
            let (r0, ..) = split(u);
            let r1 = r0 * (-0.5 * f0).exp();
            let u1 = u_of(r1);
            let slope = -f0 / (u1 - u);
            if slope.is_finite() && slope > 0.0 {
                slope
            } else {
                1.0
            }
        };
        let u = self.refine(u, false, first_slope, 2.0, |u| {
            (split(u).0, alpha_min, alpha_2)
        });
        let r0 = split(u).0;
        if !(r0.is_finite() && r0 > 0.0) {
            return Err(self.infeasible("r underflows"));
        }
        let r = settle_reach(r0, true, self.eps(), |r| self.curve(r, alpha_min, alpha_2))
            .map_err(|e| self.unsettled(e, "a larger alpha or a lower order"))?;
        Ok(DirichletParams {
            r,
            alpha: alpha.clone(),
        })
    }
}

/// ln(e^{(λ−1)ε} − 1) − ln(λ − 1) as a function of ε, without overflow or cancellation: ln ε
/// plus ln((e^x − 1)/x), x = (λ − 1)ε, which is ≈ x/2 for small x and x − ln x for large.
/// Increasing, with slope x/(1 − e^{−x}) ≥ 1 in ln ε.
pub(super) fn pole_scale(lm1: f64, epsilon: f64) -> f64 {
    let x = lm1 * epsilon;
    let correction = if x.is_nan() || x <= 1e-300 {
        0.0
    } else if x < 700.0 {
        (x.exp_m1() / x).ln()
    } else if x.is_finite() {
        x - x.ln()
    } else {
        f64::INFINITY
    };
    epsilon.ln() + correction
}
