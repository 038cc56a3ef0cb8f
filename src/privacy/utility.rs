//! Utility forecasts before anything is spent.
use serde::Serialize;

/// Aggregate forecast of a Dirichlet release from (r, α, N, d) only; nothing per cell, so a
/// forecast never echoes counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Forecast {
    /// 001 Theorem 5 at the given β: ‖y − x/N‖₂ ≤ this with probability 1 − β.
    pub l2_bound: f64,
    pub l2_bound_confidence: f64,
    /// Upper bound on every cell's variance (000 §2.2).
    pub max_cell_variance: f64,
    /// 000 Theorem 2: Pr[KL(p‖q) > η] ≤ this, at the η reported (None when β·p + α's condition fails).
    pub kl_tail: Option<KlTail>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KlTail {
    pub eta: f64,
    pub probability: f64,
}

/// Forecast of seed 002's exponential mechanism from (n, prior, ε) only
/// ([`super::exponential::BetaCandidates::hellinger_bound`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SelectionForecast {
    /// H(selected posterior, exact posterior) ≤ this with probability
    /// `hellinger_bound_confidence`, whatever the counts.
    pub hellinger_bound: f64,
    pub hellinger_bound_confidence: f64,
}

/// Forecast for y ~ Dir(r·x + α) with N = Σx, α₀ = Σα (uniform α_m used for the KL condition).
///
/// - `l2_bound`: 001 Theorem 5 with N replaced by rN (the draw is Dir(r·x + α), so the
///   sub-Gaussian constant is 1/(4(rN + α₀ + 1)) and the bias bound 2α₀/(rN + α₀)):
///   √((3 log(1/β) + 2d)/(4(rN + α₀ + 1))) + 2α₀/(rN + α₀), capped at √2, the largest ℓ2
///   distance between two points of the simplex. With N = 0 there is no x/N to be close to and
///   the bound is √2.
/// - `max_cell_variance`: Var[yᵢ] = aᵢ(a₀ − aᵢ)/(a₀²(a₀ + 1)) ≤ 1/(4(a₀ + 1)) with a₀ = rN + α₀
///   (000 §2.2; the maximum of aᵢ(a₀ − aᵢ) is a₀²/4), which needs no cell value.
/// - `kl_tail`: KL(x/N ‖ y) ≤ η with probability ≥ 1 − β (`probability` = β), η the planner's
///   KL bound (`accuracy::dirichlet_kl`: the worst x's moment generating function for α_m ≥ 1,
///   seed 000 Theorem 2's chain for ½ ≤ α_m < 1), which holds for every x of total N. `None`
///   when α_m < ½ (no bound is proven), when rN = 0, or for invalid input.
///
/// Invalid input (non-finite or negative values, r or α ≤ 0, d = 0, β ∉ (0, 1)) gives NaN bounds
/// and no KL tail.
pub fn dirichlet_forecast(
    r: f64,
    alpha_total: f64,
    alpha_min: f64,
    n: f64,
    d: usize,
    beta: f64,
) -> Forecast {
    let valid = r.is_finite()
        && r > 0.0
        && alpha_total.is_finite()
        && alpha_total > 0.0
        && alpha_min.is_finite()
        && alpha_min > 0.0
        && n.is_finite()
        && n >= 0.0
        && d > 0
        && beta > 0.0
        && beta < 1.0;
    if !valid {
        return Forecast {
            l2_bound: f64::NAN,
            l2_bound_confidence: 1.0 - beta,
            max_cell_variance: f64::NAN,
            kl_tail: None,
        };
    }
    let rn = r * n;
    let a0 = rn + alpha_total;
    let d_f = d as f64;
    let spread = ((3.0 * (1.0 / beta).ln() + 2.0 * d_f) / (4.0 * (a0 + 1.0))).sqrt();
    let bias = 2.0 * alpha_total / a0;
    let l2_bound = if n > 0.0 {
        (spread + bias).min(std::f64::consts::SQRT_2)
    } else {
        std::f64::consts::SQRT_2
    };
    let max_cell_variance = 1.0 / (4.0 * (a0 + 1.0));
    let eta = super::accuracy::dirichlet_kl(rn, alpha_total, alpha_min, beta);
    let kl_tail = eta.is_finite().then_some(KlTail {
        eta,
        probability: beta,
    });
    Forecast {
        l2_bound,
        l2_bound_confidence: 1.0 - beta,
        max_cell_variance,
        kl_tail,
    }
}

/// 000 §2.2: E[y_i] = (r x_i + α_i)/(rN + α₀).
pub fn cell_mean(r: f64, x_i: f64, alpha_i: f64, n: f64, alpha_total: f64) -> f64 {
    (r * x_i + alpha_i) / (r * n + alpha_total)
}

/// 000 §2.2: Var[y_i] = a_i(a₀ − a_i)/(a₀²(a₀ + 1)) with a_i = r x_i + α_i, a₀ = rN + α₀.
pub fn cell_variance(r: f64, x_i: f64, alpha_i: f64, n: f64, alpha_total: f64) -> f64 {
    let a_i = r * x_i + alpha_i;
    let a0 = r * n + alpha_total;
    // a₀ − aᵢ = r(N − xᵢ) + (α₀ − αᵢ): formed from the differences so that a tiny cell of a
    // huge total does not lose its complement to rounding.
    let rest = r * (n - x_i) + (alpha_total - alpha_i);
    a_i * rest / (a0 * a0 * (a0 + 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_moments_match_000_section_2_2() {
        // x = (3, 1), α = 1 each, r = 2: a = (7, 3), a₀ = 10.
        assert_eq!(cell_mean(2.0, 3.0, 1.0, 4.0, 2.0), 0.7);
        let v = cell_variance(2.0, 3.0, 1.0, 4.0, 2.0);
        assert!((v - 7.0 * 3.0 / (100.0 * 11.0)).abs() < 1e-17);
        // The forecast's bound dominates every cell.
        let f = dirichlet_forecast(2.0, 2.0, 1.0, 4.0, 2, 0.05);
        assert!(f.max_cell_variance >= v);
        assert_eq!(f.max_cell_variance, 1.0 / 44.0);
    }

    #[test]
    fn l2_bound_is_theorem_5_with_rn() {
        let (r, a0, n, d, beta) = (0.5, 20.0, 1000.0, 10usize, 0.05);
        let f = dirichlet_forecast(r, a0, 2.0, n, d, beta);
        let rn: f64 = r * n;
        let want =
            ((3.0 * 20f64.ln() + 20.0) / (4.0 * (rn + a0 + 1.0))).sqrt() + 2.0 * a0 / (rn + a0);
        assert!((f.l2_bound - want).abs() < 1e-15);
        assert_eq!(f.l2_bound_confidence, 0.95);
        // small N: capped at √2
        let f = dirichlet_forecast(1.0, 1e4, 1e3, 3.0, 10, 0.05);
        assert_eq!(f.l2_bound, std::f64::consts::SQRT_2);
        assert_eq!(
            dirichlet_forecast(1.0, 20.0, 2.0, 0.0, 10, 0.05).l2_bound,
            std::f64::consts::SQRT_2
        );
    }

    /// The KL tail is the planner's bound at the forecast's confidence, for uniform and
    /// per-cell priors alike; none below α_m = ½ (no bound proven) or at N = 0.
    #[test]
    fn kl_tail_is_the_planners_bound() {
        let f = dirichlet_forecast(1.0, 10.0, 1.0, 1e5, 10, 0.05);
        let t = f.kl_tail.expect("α_m ≥ 1");
        assert_eq!(t.probability, 0.05);
        assert_eq!(
            t.eta,
            crate::privacy::accuracy::dirichlet_kl(1e5, 10.0, 1.0, 0.05)
        );
        // About the bias (d − 1)α/(rN) plus its fluctuation: far below Theorem 2's closed form.
        assert!(t.eta > 9.0 / 1e5 && t.eta < 5.0 * 9.0 / 1e5, "{t:?}");
        // A per-cell prior (α₀ ≠ dα_m) has a bound too; α_m in [½, 1) Theorem 2's chain.
        assert!(dirichlet_forecast(1.0, 12.0, 1.0, 1e5, 10, 0.05)
            .kl_tail
            .is_some());
        assert!(dirichlet_forecast(1.0, 6.0, 0.6, 1e5, 10, 0.05)
            .kl_tail
            .is_some());
        assert!(dirichlet_forecast(1.0, 4.0, 0.4, 1e5, 10, 0.05)
            .kl_tail
            .is_none());
        assert!(dirichlet_forecast(1.0, 10.0, 1.0, 0.0, 10, 0.05)
            .kl_tail
            .is_none());
    }

    /// An empty group (N = 0) gets a finite forecast that claims nothing about x/N
    /// (which does not exist): ℓ2 bound √2, Dir(α)'s variance bound, no KL tail — for any valid
    /// r and prior, tiny or huge.
    #[test]
    fn an_empty_group_has_a_finite_forecast_that_claims_nothing() {
        for r in [1e-300, 1e-6, 1.0, 1e12] {
            for (total, min, d) in [(2.0, 1.0, 2), (1e-300, 1e-301, 10), (3e15, 1e15, 3)] {
                let f = dirichlet_forecast(r, total, min, 0.0, d, 0.05);
                assert_eq!(f.l2_bound, std::f64::consts::SQRT_2);
                assert_eq!(f.max_cell_variance, 1.0 / (4.0 * (total + 1.0)));
                assert!(f.max_cell_variance.is_finite() && f.max_cell_variance > 0.0);
                assert!(f.kl_tail.is_none());
            }
        }
    }

    #[test]
    fn invalid_input_is_nan_not_a_finite_guess() {
        for f in [
            dirichlet_forecast(f64::NAN, 10.0, 1.0, 10.0, 10, 0.05),
            dirichlet_forecast(1.0, 10.0, 1.0, -1.0, 10, 0.05),
            dirichlet_forecast(1.0, 10.0, 1.0, 10.0, 0, 0.05),
            dirichlet_forecast(1.0, 10.0, 1.0, 10.0, 10, 1.0),
        ] {
            assert!(f.l2_bound.is_nan() && f.max_cell_variance.is_nan() && f.kl_tail.is_none());
        }
    }
}
