//! Conversions between RDP and (ε, δ)-DP.
//!
//! All conversions round towards the conservative side: a DP ε derived from an RDP cost is
//! nudged up by a few ulps of its terms, an RDP budget derived from a DP target nudged down.
use super::types::{Delta, Epsilon, Order};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConversionError {
    #[error("the (epsilon, delta) target leaves no RDP budget at order {order}")]
    NoBudgetAtOrder { order: f64 },
}

/// Relative slack added to (or removed from) conversions: a few ulps of the terms' magnitude.
const ROUNDING_SLACK: f64 = 8.0 * f64::EPSILON;

/// log(1 − 1/λ) without cancellation for every λ > 1.
fn log_one_minus_inverse(lambda: f64) -> f64 {
    if lambda < 2.0 {
        (lambda - 1.0).ln() - lambda.ln()
    } else {
        (-1.0 / lambda).ln_1p()
    }
}

/// The conversion's additive term log(1 − 1/λ) − (log δ + log λ)/(λ − 1), and the sum of its
/// terms' magnitudes (for the rounding slack).
fn conversion_offset(lambda: f64, delta: f64) -> (f64, f64) {
    // log(1 − 1/λ) = log((λ−1)/λ). Near λ = 1, 1/λ is rounded before ln_1p sees it and
    // 1 − 1/λ cancels (1.1e-9 of budget lost at λ = 1.00000001); λ − 1 is exact there
    // (Sterbenz), so ln(λ−1) − ln λ keeps every digit. For λ ≥ 2 the two logs nearly cancel
    // instead, and −1/λ is accurate: ln_1p.
    let a = log_one_minus_inverse(lambda);
    let b = (delta.ln() + lambda.ln()) / (lambda - 1.0);
    (a - b, a.abs() + b.abs())
}

/// 001 Lemma 1 (CKS20): (λ, ε̂)-RDP ⇒ (ε, δ)-DP with ε = ε̂ + log(1 − 1/λ) − (log δ + log λ)/(λ − 1).
///
/// Rounded up by a few ulps of the terms. A negative result is reported as 0 ((ε, δ)-DP with
/// ε < 0 implies (0, δ)-DP). +∞ for a NaN, negative or infinite ε̂.
pub fn rdp_to_dp(order: Order, rdp_epsilon: f64, delta: Delta) -> f64 {
    if rdp_epsilon.is_nan() || rdp_epsilon < 0.0 || rdp_epsilon == f64::INFINITY {
        return f64::INFINITY;
    }
    let (offset, magnitude) = conversion_offset(order.get(), delta.get());
    let eps = rdp_epsilon + offset + ROUNDING_SLACK * (rdp_epsilon + magnitude);
    if eps.is_nan() {
        f64::INFINITY
    } else {
        eps.max(0.0)
    }
}

/// The RDP budget at `order` implied by an (ε, δ) target (the inverse of [`rdp_to_dp`], 001
/// Lemma 1): B = ε − log(1 − 1/λ) + (log δ + log λ)/(λ − 1), rounded down by a few ulps.
/// Spending at most B at order λ keeps the whole ledger (ε, δ)-DP. An error if B ≤ 0.
pub fn dp_to_rdp_budget(
    epsilon: Epsilon,
    delta: Delta,
    order: Order,
) -> Result<Epsilon, ConversionError> {
    let budget = rdp_budget(epsilon.get(), delta.get(), order.get());
    Epsilon::new(budget).map_err(|_| ConversionError::NoBudgetAtOrder { order: order.get() })
}

fn rdp_budget(eps: f64, delta: f64, lambda: f64) -> f64 {
    let (offset, magnitude) = conversion_offset(lambda, delta);
    eps - offset - ROUNDING_SLACK * (eps + magnitude)
}

/// The default ledger order for an (ε, δ) target: the order maximising the number of
/// releases with linear-in-λ cost that the target admits, i.e. argmax B(λ)/λ.
///
/// Why B(λ)/λ: the Gaussian mechanism and, for moderate orders, the Dirichlet mechanism
/// (ε(λ) ≈ ½λr²Δ2²ψ′(α_m), 001 Corollary 3 away from the pole) cost c·λ at order λ, so a
/// ledger at order λ admits B(λ)/(cλ) of them whatever c is. B comes from 001 Lemma 1
/// ([`dp_to_rdp_budget`]). The maximiser is found on a grid in log(λ − 1) refined by
/// golden-section search, then rounded to 3 significant digits so that budgets read well
/// (λ − 1 is rounded instead when λ itself would round to 1, and the better of the two
/// neighbouring 3-digit values is kept, provided its budget stays positive).
///
/// The ledger holds budgets up to `max_budget` only, and B(λ) can exceed ε (by
/// log(λ/(λ−1)) and, for δ near 1, more), so a large target's unconstrained optimum may
/// convert to a budget the ledger refuses. The score is therefore min(B, max)/λ: beyond the
/// order where B reaches the maximum the score falls as 1/λ, so the maximiser is the order
/// whose budget is at most `max_budget` — the same order whenever the maximum does not bind.
pub fn default_order(epsilon: Epsilon, delta: Delta, max_budget: f64) -> Order {
    let (eps, delta) = (epsilon.get(), delta.get());
    let score = |s: f64| {
        let lambda = 1.0 + s.exp();
        let b = rdp_budget(eps, delta, lambda);
        if b.is_finite() {
            b.min(max_budget) / lambda
        } else {
            f64::NEG_INFINITY
        }
    };
    let s_star = maximise(score, -30.0, 60.0, 0.25);
    let exact = 1.0 + s_star.exp();
    let admits = |lambda: f64| {
        let b = rdp_budget(eps, delta, lambda);
        lambda > 1.0 && lambda.is_finite() && b > 0.0 && b <= max_budget
    };
    let value = |lambda: f64| rdp_budget(eps, delta, lambda) / lambda;
    let mut candidates = round_3_significant(exact).to_vec();
    if candidates.iter().all(|&c| c <= 1.0) || exact < 1.01 {
        candidates = round_3_significant(exact - 1.0)
            .iter()
            .map(|c| 1.0 + c)
            .collect();
    }
    let mut best = candidates
        .into_iter()
        .filter(|&c| admits(c))
        .max_by(|a, b| value(*a).total_cmp(&value(*b)))
        .unwrap_or(exact);
    // Very large ε with δ near 1 puts the optimum at λ − 1 ≈ 1e-9, where B moves by ~0.1 per
    // ulp of λ and neither 3-digit neighbour admits: step down from the optimum an ulp at a
    // time to the first order whose budget fits (B falls as λ → 1 there).
    for _ in 0..256 {
        if admits(best) {
            break;
        }
        best = f64::from_bits(best.to_bits() - 1);
    }
    // B(λ) → ε > 0 as λ → ∞, so a positive-budget order always exists and `exact` is one.
    Order::new(best).unwrap_or_else(|_| Order::new(2.0).expect("2 is a valid order"))
}

/// The two 3-significant-digit neighbours of x > 0 (floor and ceiling at that precision).
fn round_3_significant(x: f64) -> [f64; 2] {
    let exponent = x.log10().floor() as i32 - 2;
    let unit = 10f64.powi(exponent);
    let lo = (x / unit).floor();
    // Dividing/multiplying by a power of ten in f64 leaves ulp noise; format through the
    // decimal representation to get the shortest value with these digits.
    let to_value = |m: f64| format!("{m}e{exponent}").parse::<f64>().unwrap_or(m * unit);
    [to_value(lo), to_value(lo + 1.0)]
}

/// Maximise a unimodal-ish function on [a, b]: scan a grid of spacing `h`, then golden-section
/// search on the two cells around the best grid point. Robust to flat or −∞ regions at the
/// ends of the range.
fn maximise(f: impl Fn(f64) -> f64, a: f64, b: f64, h: f64) -> f64 {
    let steps = ((b - a) / h).ceil() as usize;
    let (mut best_s, mut best_v) = (a, f64::NEG_INFINITY);
    for i in 0..=steps {
        let s = a + h * i as f64;
        let v = f(s);
        if v > best_v {
            best_v = v;
            best_s = s;
        }
    }
    let (mut lo, mut hi) = ((best_s - h).max(a), (best_s + h).min(b));
    let g = 0.5 * (5f64.sqrt() - 1.0);
    let mut x1 = hi - g * (hi - lo);
    let mut x2 = lo + g * (hi - lo);
    let (mut f1, mut f2) = (f(x1), f(x2));
    for _ in 0..80 {
        if f1 >= f2 {
            hi = x2;
            x2 = x1;
            f2 = f1;
            x1 = hi - g * (hi - lo);
            f1 = f(x1);
        } else {
            lo = x1;
            x1 = x2;
            f1 = f2;
            x2 = lo + g * (hi - lo);
            f2 = f(x2);
        }
        if hi - lo <= 1e-12 * (1.0 + lo.abs()) {
            break;
        }
    }
    let mid = 0.5 * (lo + hi);
    if f(mid) >= best_v {
        mid
    } else {
        best_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn order(v: f64) -> Order {
        Order::new(v).unwrap()
    }

    fn delta(v: f64) -> Delta {
        Delta::new(v).unwrap()
    }

    /// The ledger's largest budget (`ledger::charge::MAX_EPSILON`).
    const MAX: f64 = 8192.0;

    #[test]
    fn lemma_1_at_a_known_value() {
        // λ = 2, ε̂ = 1, δ = 1e-5: ε = 1 + log ½ − (log 1e-5 + log 2)/1.
        let want = 1.0 + 0.5f64.ln() - (1e-5f64.ln() + 2f64.ln());
        let got = rdp_to_dp(order(2.0), 1.0, delta(1e-5));
        assert!(got >= want && got - want < 1e-13, "{got} vs {want}");
        assert_eq!(rdp_to_dp(order(2.0), f64::NAN, delta(1e-5)), f64::INFINITY);
        assert_eq!(
            rdp_to_dp(order(2.0), f64::INFINITY, delta(1e-5)),
            f64::INFINITY
        );
        assert_eq!(rdp_to_dp(order(1e6), 0.0, delta(0.9)), 0.0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn budget_round_trips_and_stays_on_the_safe_side(
            eps in 0.01f64..50.0, log_delta in -30.0f64..-1.0, lambda in 1.01f64..500.0,
        ) {
            let d = delta(log_delta.exp());
            if let Ok(b) = dp_to_rdp_budget(Epsilon::new(eps).unwrap(), d, order(lambda)) {
                let back = rdp_to_dp(order(lambda), b.get(), d);
                // Spending the whole budget converts back to ε, up to the two roundings' slack.
                prop_assert!((back - eps).abs() <= 1e-12 * (1.0 + eps), "{} vs {}", back, eps);
                // the budget is below the exact inverse
                let (offset, _) = conversion_offset(lambda, d.get());
                prop_assert!(b.get() <= eps - offset);
            }
        }
    }

    #[test]
    fn no_budget_is_an_error() {
        // ε = 0.1, δ = 1e-10 at λ = 2: 0.1 − log ½ + (log 1e-10 + log 2) < 0.
        let e = dp_to_rdp_budget(Epsilon::new(0.1).unwrap(), delta(1e-10), order(2.0));
        assert_eq!(e, Err(ConversionError::NoBudgetAtOrder { order: 2.0 }));
    }

    #[test]
    fn default_order_is_sane_for_1_and_1e_minus_6() {
        let o = default_order(Epsilon::new(1.0).unwrap(), delta(1e-6), MAX).get();
        // B(λ)/λ peaks in the low twenties for (1, 1e-6) (hand computation: B(20)/20 ≈ 0.024,
        // B(15)/15 ≈ 0.018, B(30)/30 ≈ 0.022).
        assert!(o > 15.0 && o < 30.0, "{o}");
        // three significant digits
        let digits = format!("{o}").replace('.', "");
        assert!(digits.trim_start_matches('0').len() <= 3, "{o}");
        let budget = dp_to_rdp_budget(Epsilon::new(1.0).unwrap(), delta(1e-6), order(o))
            .unwrap()
            .get();
        // it beats its neighbours at the same rounding
        for other in [o * 0.8, o * 1.25] {
            if let Ok(b) = dp_to_rdp_budget(Epsilon::new(1.0).unwrap(), delta(1e-6), order(other)) {
                assert!(budget / o >= b.get() / other);
            }
        }
    }

    #[test]
    #[allow(clippy::excessive_precision)] // mpmath's digits, as printed
    fn log_one_minus_inverse_order_matches_mpmath() {
        // mpmath, 50 digits, at the exact doubles. ln_1p(−1/λ) was 1e-8 relative off at the
        // first (1.1e-9 of budget).
        for (lambda, want) in [
            (1.00000001, -18.420680760029836351),
            (1.0000000000001, -29.934405806352890568),
            (1.5, -1.0986122886681096914),
            (1.999999, -0.69314768056032026858),
            (2.0, -std::f64::consts::LN_2),
            (3.0, -0.40546510810816438198),
            (1e6, -1.0000005000003333336e-6),
        ] {
            let got = log_one_minus_inverse(lambda);
            assert!(
                ((got - want) / want).abs() < 4e-16,
                "λ={lambda}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn the_ledger_maximum_binds_only_where_it_must() {
        // (8192, 0.999): B(λ) exceeds ε near the unconstrained optimum, past the ledger's
        // maximum; the capped order's budget sits just below it.
        let (eps, d) = (Epsilon::new(8192.0).unwrap(), delta(0.999));
        let free = default_order(eps, d, f64::INFINITY);
        assert!(dp_to_rdp_budget(eps, d, free).unwrap().get() > MAX);
        let capped = default_order(eps, d, MAX);
        let b = dp_to_rdp_budget(eps, d, capped).unwrap().get();
        assert!(b <= MAX && b > 0.99 * MAX, "{b} at {}", capped.get());
        // Where the maximum does not bind, it changes nothing.
        let (eps, d) = (Epsilon::new(1.0).unwrap(), delta(1e-6));
        assert_eq!(
            default_order(eps, d, MAX),
            default_order(eps, d, f64::INFINITY)
        );
    }

    #[test]
    fn default_order_is_valid_across_targets() {
        for eps in [1e-4, 0.01, 0.1, 1.0, 10.0, 100.0, 8192.0, 10_000.0, 1e6] {
            for d in [1e-15, 1e-9, 1e-6, 1e-3, 0.5, 0.999] {
                let o = default_order(Epsilon::new(eps).unwrap(), delta(d), MAX);
                assert!(o.get() > 1.0);
                let b = dp_to_rdp_budget(Epsilon::new(eps).unwrap(), delta(d), o);
                assert!(
                    b.as_ref().is_ok_and(|b| b.get() <= MAX),
                    "ε={eps} δ={d} λ={}: {b:?}",
                    o.get()
                );
            }
        }
    }

    #[test]
    fn three_significant_digits() {
        assert_eq!(round_3_significant(21.74), [21.7, 21.8]);
        assert_eq!(round_3_significant(1.0004), [1.0, 1.01]);
        assert_eq!(round_3_significant(0.000123456), [0.000123, 0.000124]);
        assert_eq!(round_3_significant(123456.0), [123000.0, 124000.0]);
    }
}
