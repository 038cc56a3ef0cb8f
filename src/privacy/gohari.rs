//! Seed 003 (Gohari, Wu, Hale, Topcu): the (ε, δ) guarantee of the prior-free Dirichlet
//! mechanism Dir(k·p) on the part of the simplex bounded away from 0. Informational only — the
//! ledger charges the RDP route (the lower bound turns Dir(k·p) into Dir(r·(x − L) + rL), priced
//! by the service's curve), which the research note finds 2–7× cheaper in every case computed.
//!
//! Theorem 1 (identity query), in the form used here (research note §3.2–3.3):
//!
//! ```text
//! ε(γ) = v₂ + v₁,
//! v₂ = ln B(kη, k(1−η̄−η)) − ln B(k(η+s), k(1−η̄−η−s)),   s = min(h, (1−η̄)/2 − η)
//! v₁ = k·h·ln((1 − (|W|−1)γ)/γ)
//! δ_U(γ) = |W|·I_γ(kη, k(1−η)),   γ* = the largest γ ≤ min(η, 1/|W|) with δ_U(γ) ≤ δ̂
//! ```
//!
//! with h the largest change of one entry (003's b/2; b/(2N) for Theorem 2's average query —
//! the text's b/(2n) is a misprint, and its eq. 16 "min γ" must be "max γ": ε falls and δ rises
//! with γ). Two departures from the text, both from the note: s caps v₂'s maximiser at the
//! middle of its range (003 silently assumes b/2 ≤ (1−η̄)/2 − η), and δ is the union bound
//! δ_U instead of 003's vertex minimum, whose proof (Lemma 2's joint log-concavity) does not
//! hold; δ_U needs no integral and no log-concavity, and is within a factor |W| of the exact δ.
//! The marginal of a cell is Beta(kp_i, k(1 − p_i)), stochastically increasing in p_i, so each
//! union term is largest at p_i = η.

use super::divergence::ln_gamma_diff;
use super::special::ln_gamma;

/// The domain and mechanism of 003 Theorem 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GohariSetting {
    /// k: the mechanism is Dir(k·p).
    pub k: f64,
    /// η: every protected entry is at least η.
    pub eta: f64,
    /// η̄: the entries outside W sum to at least η̄.
    pub eta_bar: f64,
    /// |W|: how many entries are protected.
    pub protected: u32,
    /// h = b/2: the largest change of one protected entry between neighbours.
    pub half_b: f64,
}

/// 003's guarantee at a given δ: (ε, δ_U(γ*)) with the γ* used.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GohariGuarantee {
    pub epsilon: f64,
    pub delta: f64,
    pub gamma: f64,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GohariError {
    #[error(
        "Gohari et al.'s theorem needs k > 0, 0 < η, 0 < η̄ < 1, |W| >= 1, b > 0 and η < (1 − η̄)/2"
    )]
    OutsideDomain,
    #[error("no gamma in (0, eta) meets delta")]
    DeltaUnreachable,
}

impl GohariSetting {
    fn check(&self) -> Result<(), GohariError> {
        let ok = self.k.is_finite()
            && self.k > 0.0
            && self.eta > 0.0
            && self.eta_bar > 0.0
            && self.eta_bar < 1.0
            && self.protected >= 1
            && self.half_b.is_finite()
            && self.half_b > 0.0
            && self.eta < 0.5 * (1.0 - self.eta_bar);
        if ok {
            Ok(())
        } else {
            Err(GohariError::OutsideDomain)
        }
    }

    /// v₂ from lnΓ differences: the two Beta totals are both k(1 − η̄), so their lnΓ cancel and
    /// each remaining pair is a difference of close arguments ([`ln_gamma_diff`]).
    pub fn v2(&self) -> f64 {
        let k = self.k;
        let s = self.half_b.min(0.5 * (1.0 - self.eta_bar) - self.eta);
        let rest = 1.0 - self.eta_bar - self.eta;
        ln_gamma_diff(k * self.eta, k * (self.eta + s)) + ln_gamma_diff(k * rest, k * (rest - s))
    }

    /// v₁ at γ.
    pub fn v1(&self, gamma: f64) -> f64 {
        let w = f64::from(self.protected);
        self.k * self.half_b * ((1.0 - (w - 1.0) * gamma) / gamma).ln()
    }

    /// δ_U(γ) = |W|·I_γ(kη, k(1 − η)).
    pub fn delta_union(&self, gamma: f64) -> f64 {
        f64::from(self.protected)
            * regularized_beta_small(gamma, self.k * self.eta, self.k * (1.0 - self.eta))
    }

    /// Theorem 1 at δ̂: γ* by bisection (δ_U increases with γ), then ε(γ*).
    pub fn guarantee(&self, delta: f64) -> Result<GohariGuarantee, GohariError> {
        self.check()?;
        if !(delta > 0.0 && delta < 1.0) {
            return Err(GohariError::DeltaUnreachable);
        }
        let top = self.eta.min(1.0 / f64::from(self.protected));
        let gamma = if self.delta_union(top) <= delta {
            top
        } else {
            let (mut lo, mut hi) = (0.0f64, top);
            for _ in 0..200 {
                let mid = 0.5 * (lo + hi);
                if mid <= lo || mid >= hi {
                    break;
                }
                if self.delta_union(mid) <= delta {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        if gamma <= 0.0 {
            return Err(GohariError::DeltaUnreachable);
        }
        let epsilon = self.v2() + self.v1(gamma);
        if !epsilon.is_finite() {
            return Err(GohariError::DeltaUnreachable);
        }
        Ok(GohariGuarantee {
            epsilon,
            delta: self.delta_union(gamma),
            gamma,
        })
    }
}

/// I_x(a, b) for x below the mean a/(a + b) by the all-positive series (research note §3.3)
///
/// I_x(a,b) = exp(a ln x + b ln(1−x) − ln a − ln B(a,b)) · Σ_{m≥0} (a+b)_m/(a+1)_m · x^m,
///
/// which never forms 1 − (something close to 1): 000 §2.4's floor on δ is that subtraction.
/// The terms decrease once (a+b+m)x < a+1+m, true from the start when x < (a+1)/(a+b). NaN
/// outside that range or when the series does not settle.
pub fn regularized_beta_small(x: f64, a: f64, b: f64) -> f64 {
    if !(x > 0.0 && x < 1.0 && a > 0.0 && b > 0.0 && a.is_finite() && b.is_finite()) {
        return f64::NAN;
    }
    if x * (a + b) >= a + 1.0 {
        return f64::NAN;
    }
    let ln_beta = ln_gamma(a) + ln_gamma(b) - ln_gamma(a + b);
    let prefix = (a * x.ln() + b * (-x).ln_1p() - a.ln() - ln_beta).exp();
    let (mut term, mut sum) = (1.0f64, 1.0f64);
    for m in 0..1_000_000u32 {
        let m = f64::from(m);
        term *= (a + b + m) / (a + 1.0 + m) * x;
        sum += term;
        if term <= 1e-17 * sum {
            return prefix * sum;
        }
    }
    f64::NAN
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(a: f64, b: f64) -> f64 {
        ((a - b) / b).abs()
    }

    #[test]
    fn series_matches_mpmath_betainc() {
        // Research note §3.6; recomputed with mpmath.betainc(1.2, 22.8, 0, 0.002, regularized=True).
        let got = regularized_beta_small(0.002, 1.2, 22.8);
        assert!(rel(got, 0.021_908_530_855_902_27) < 1e-13, "{got}");
        // 000 Fig. 2 parameters (note §3.3): I_γ(kη, k(1−η)) with k = 171.87, η = 0.028.
        let (a, b) = (171.87 * 0.028, 171.87 * (1.0 - 0.028));
        for (g, want) in [
            (0.01, 0.03706),
            (0.003, 2.885e-4),
            (0.001, 1.917e-6),
            (0.0003, 6.428e-9),
        ] {
            let got = regularized_beta_small(g, a, b);
            assert!(rel(got, want) < 2e-3, "γ={g}: {got}");
        }
        assert!(regularized_beta_small(0.5, 1.0, 10.0).is_nan());
    }

    #[test]
    fn section_vi_example_with_the_union_bound() {
        // 003 §VI: k = 24, W = {1, 2}, η = η̄ = 0.05, N = 100, b = 1, δ = 0.05, average query
        // (h = b/(2N)). The note computes γ* = 0.0022377954, ε = 1.1235443 with δ_U; the paper
        // prints 1.18 (not reproducible; conservative), the exact δ gives 1.1223179.
        let s = GohariSetting {
            k: 24.0,
            eta: 0.05,
            eta_bar: 0.05,
            protected: 2,
            half_b: 1.0 / 200.0,
        };
        let g = s.guarantee(0.05).unwrap();
        assert!(rel(g.gamma, 0.0022377954) < 1e-7, "{g:?}");
        assert!(rel(g.epsilon, 1.1235442961085) < 1e-10, "{g:?}");
        assert!(g.delta <= 0.05 && g.delta > 0.05 * (1.0 - 1e-9));
        assert!((1.12..=1.18).contains(&g.epsilon));
        assert!(rel(s.v2(), 0.39154144) < 1e-7, "{}", s.v2());
    }

    #[test]
    fn figure_1_settings() {
        // 003 Fig. 1: |W| = 3, b = 0.1, η = η̄; ε at δ = 0.02, 0.05, 0.1 (note §3.6, δ_U).
        for (eta, k, want) in [
            (0.15, 6.7, [2.82888, 2.52082, 2.28534]),
            (0.20, 5.1, [1.92871, 1.69723, 1.51994]),
            (0.25, 4.1, [1.38852, 1.20302, 1.06066]),
        ] {
            let s = GohariSetting {
                k,
                eta,
                eta_bar: eta,
                protected: 3,
                half_b: 0.05,
            };
            for (delta, w) in [0.02, 0.05, 0.1].iter().zip(want) {
                let g = s.guarantee(*delta).unwrap();
                assert!(rel(g.epsilon, w) < 5e-6, "η={eta} δ={delta}: {g:?}");
            }
        }
    }

    #[test]
    fn histogram_comparison_rows_of_the_note() {
        // Note §3.5: N = 1000, d = 3, η = 0.05, replace one (h = 1/N), W = [d−1], η̄ = η.
        for (k, delta, want) in [
            (100.0, 1e-3, 0.8006),
            (100.0, 1e-5, 0.8994),
            (1000.0, 1e-5, 6.552),
        ] {
            let s = GohariSetting {
                k,
                eta: 0.05,
                eta_bar: 0.05,
                protected: 2,
                half_b: 1e-3,
            };
            let g = s.guarantee(delta).unwrap();
            assert!(rel(g.epsilon, want) < 1e-3, "k={k} δ={delta}: {g:?}");
        }
    }

    #[test]
    fn outside_the_domain_is_an_error() {
        let base = GohariSetting {
            k: 24.0,
            eta: 0.05,
            eta_bar: 0.05,
            protected: 2,
            half_b: 0.005,
        };
        for bad in [
            GohariSetting { k: 0.0, ..base },
            GohariSetting { eta: 0.0, ..base },
            GohariSetting { eta: 0.5, ..base },
            GohariSetting {
                protected: 0,
                ..base
            },
        ] {
            assert_eq!(bad.guarantee(0.05), Err(GohariError::OutsideDomain));
        }
        assert!(base.guarantee(0.0).is_err());
    }
}
