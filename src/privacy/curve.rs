//! Pricing: the RDP curve ε(λ) of every mechanism the service runs.
//!
//! Every function here fails closed: an argument outside its domain (non-finite, ≤ 0, an order
//! past the mechanism's range) prices at +∞, never at a finite value, so a ledger that refuses
//! non-finite charges refuses the release.
use serde::Serialize;

use super::exact::{far_shift, realised_rdp_two, scaled_trigamma, worst_pair};
use super::special::trigamma;
use super::types::{Order, Prior, Relation, Sensitivity};

/// Which curve priced a Dirichlet draw: the exact worst case ε* of the two histogram relations
/// ([`super::exact`]) or 001 Corollary 3, an upper bound, for custom sensitivities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pricing {
    Exact,
    Bound,
}

impl Pricing {
    pub fn for_sensitivity(sens: &Sensitivity) -> Pricing {
        match sens.relation() {
            Relation::ReplaceOne | Relation::AddRemoveOne => Pricing::Exact,
            Relation::Custom => Pricing::Bound,
        }
    }
}

/// The price of one draw y ~ Dir(r·x + α) at `order` on a dataset with `sens`: ε*(λ) for
/// `replace_one` / `add_remove_one` (exact worst case, per-cell priors included), 001
/// Corollary 3 for custom sensitivities — both for the shifts the f64 shapes fl(fl(r·x) + α)
/// actually realise once the draw passes `release::check_shapes` (docs/PRIVACY.md, "The
/// realised shift"): [`realised_rdp_two`], and Corollary 3 at r(1 + 2⁻¹⁷). The value is within
/// `ledger::charge::CURVE_RELATIVE_ERROR` of that curve (the charge inflates by that); +∞ past
/// the pole or for invalid input. This is the function every release is charged by, and every
/// calibration solves against. A table's sensitivity ([`Sensitivity::for_table`]) prices a
/// per-cell prior at its smallest entry in both cells.
pub fn dirichlet_price(order: Order, r: f64, alpha: &Prior, sens: &Sensitivity) -> (f64, Pricing) {
    let pricing = Pricing::for_sensitivity(sens);
    let value = match pricing {
        Pricing::Exact => {
            let (a1, a2) = worst_pair(alpha, sens.is_table());
            realised_rdp_two(order, r, a1, a2, sens.relation())
        }
        Pricing::Bound => dirichlet_rdp(order, far_shift(r), alpha.min(), sens),
    };
    (value, pricing)
}

/// 001 Corollary 3: ε(λ) = ½ λ r² Δ2² ψ′(α_m − (λ−1) r Δ∞); +∞ at and beyond λ = 1 + α_m/(rΔ∞).
///
/// The shifted argument α_m − (λ−1)rΔ∞ is rounded *down* (the product up by more than its
/// worst rounding error, the difference down by one ulp), so the value is an upper bound on
/// the exact curve up to ψ′'s own error; `ledger::charge::charge_for` covers that error. Close
/// to the pole the subtraction cancels, and rounding the other way could under-price by far more
/// than ψ′'s error. Returns +∞ for a non-finite or non-positive `r` or `alpha_min`. The value is
/// never below `f64::MIN_POSITIVE`, as the true cost is strictly positive even when the product
/// underflows.
pub fn dirichlet_rdp(order: Order, r: f64, alpha_min: f64, sens: &Sensitivity) -> f64 {
    if !(valid_positive(r) && valid_positive(alpha_min)) {
        return f64::INFINITY;
    }
    let lambda = order.get();
    let z = shifted_prior_lower_bound(lambda, r, alpha_min, sens.linf());
    if z.is_nan() || z <= 0.0 {
        return f64::INFINITY;
    }
    let mut value = 0.5 * lambda * sens.l2_squared() * trigamma(z) * r * r;
    if !(value.is_finite() && value > 0.0) {
        // Tiny r and α: r² underflows while ψ′(z) ≈ 1/z² overflows. (r/z)²·z²ψ′(z) is the
        // same number without either (the log-space pricing of `explicit`).
        let ratio = r / z;
        value = 0.5 * lambda * sens.l2_squared() * ratio * ratio * scaled_trigamma(z);
    }
    if value.is_nan() {
        return f64::INFINITY;
    }
    value.max(f64::MIN_POSITIVE)
}

/// A lower bound on α_m − (λ−1)·r·Δ∞ (the argument of ψ′ in 001 Corollary 3) in floating point.
///
/// (λ−1)·r·Δ∞ takes three roundings (< 3·2⁻⁵³ relative); inflating it by 2⁻⁵⁰ more than covers
/// them and the inflating multiplication. The subtraction rounds to nearest, so the result is
/// deflated by one more 2⁻⁵² factor. Not positive means the order is at or past the pole.
pub(crate) fn shifted_prior_lower_bound(lambda: f64, r: f64, alpha_min: f64, linf: f64) -> f64 {
    let shift = (lambda - 1.0) * r * linf * (1.0 + 4.0 * f64::EPSILON);
    let z = alpha_min - shift;
    if z > 0.0 {
        z * (1.0 - f64::EPSILON)
    } else {
        z
    }
}

/// The supremum of orders with a finite guarantee: 1 + α_m/(rΔ∞) (001 Corollary 3's range).
/// Invalid `r` or `alpha_min` (non-finite or ≤ 0) give 1, the empty range.
pub fn dirichlet_max_order(r: f64, alpha_min: f64, sens: &Sensitivity) -> f64 {
    if !(valid_positive(r) && valid_positive(alpha_min)) {
        return 1.0;
    }
    1.0 + alpha_min / (r * sens.linf())
}

/// Gaussian noise σ per cell: ε(λ) = λΔ2²/(2σ²) (Mironov 2017, Prop. 7, with ℓ2-sensitivity
/// Δ2). +∞ for a non-finite or non-positive σ.
pub fn gaussian_rdp(order: Order, sigma: f64, sens: &Sensitivity) -> f64 {
    if !valid_positive(sigma) {
        return f64::INFINITY;
    }
    let value = order.get() * sens.l2_squared() / (2.0 * sigma * sigma);
    if value.is_nan() {
        f64::INFINITY
    } else {
        value.max(f64::MIN_POSITIVE)
    }
}

/// Mironov 2017 Prop. 6: the RDP of one Laplace cell whose mean moves by s, at u = s/b:
/// ε_s(λ) = 1/(λ−1) · log( λ/(2λ−1)·e^{(λ−1)u} + (λ−1)/(2λ−1)·e^{−λu} ).
///
/// Computed without overflow for large u and without cancellation for small u (where the two
/// exponentials' first-order terms cancel exactly). +∞ for a NaN, negative or infinite u.
///
/// The *continuous* Laplace's curve: no release is priced by it (the service draws the discrete
/// Laplace, `discrete::laplace_rdp`); the tests keep it as the reference the discrete curve is
/// compared with.
#[cfg(test)]
pub(crate) fn laplace_cell_rdp(order: Order, shift_over_scale: f64) -> f64 {
    laplace_shift_rdp(order.get(), shift_over_scale)
}

#[cfg(test)]
fn laplace_shift_rdp(lambda: f64, u: f64) -> f64 {
    if u.is_nan() || u < 0.0 || u == f64::INFINITY {
        return f64::INFINITY;
    }
    let lm1 = lambda - 1.0;
    let two_lm1 = lambda + lm1;
    let p = lambda / two_lm1;
    let q = lm1 / two_lm1;
    let x = lm1 * u;
    if x < 30.0 {
        // p·x = q·λu, so p·e^{x} + q·e^{−λu} − 1 = p·φ(x) + q·φ(−λu) with φ(z) = e^z − 1 − z ≥ 0:
        // a sum of non-negative terms, free of the cancellation the direct form suffers.
        let a = p * exp_minus_one_minus_id(x) + q * exp_minus_one_minus_id(-lambda * u);
        a.ln_1p() / lm1
    } else {
        // Factor out the dominant e^{(λ−1)u}: (λ−1)ε = x + log(p + q e^{−(2λ−1)u}).
        (x + (p + q * (-two_lm1 * u).exp()).ln()) / lm1
    }
}

/// 1/(k+2)! for k = 0…17.
const PHI_SERIES: [f64; 18] = {
    let mut out = [0.0; 18];
    let mut c = 1.0;
    let mut k = 0;
    while k < 18 {
        c /= (k + 2) as f64;
        out[k] = c;
        k += 1;
    }
    out
};

/// φ(z) = e^z − 1 − z, accurate to a few ulps relative for every finite z.
pub(crate) fn exp_minus_one_minus_id(z: f64) -> f64 {
    if z.abs() <= 1.0 {
        // φ(z)/z² = Σₖ zᵏ/(k+2)!, ≥ 1/3 on [−1, 1]: no cancellation. 18 terms reach 1/20! < 1e-18.
        let sum = PHI_SERIES.iter().rev().fold(0.0, |acc, &c| acc * z + c);
        sum * z * z
    } else {
        // |z| > 1: e^z − 1 and z differ enough (ratio ≥ 1.7 or of opposite sign) that the
        // subtraction loses at most ~2 bits.
        z.exp_m1() - z
    }
}

#[inline]
fn valid_positive(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn order(v: f64) -> Order {
        Order::new(v).unwrap()
    }

    #[test]
    fn dirichlet_curve_at_the_worked_example() {
        // 001 §3.3: λ = 2, Δ2² = 2, Δ∞ = 1, r = 1, α_m = 3.46 gives ε ≈ ψ′(2.46) ≈ 1.
        let e = dirichlet_rdp(order(2.0), 1.0, 3.46, &Sensitivity::REPLACE_ONE);
        let exact = 2.0 * trigamma(2.46);
        assert!(
            (e - exact).abs() <= 1e-15 * exact && e >= exact,
            "{e} vs {exact}"
        );
        assert!((e - 1.0).abs() < 0.01);
    }

    #[test]
    fn dirichlet_curve_is_infinite_at_and_past_the_pole_and_for_bad_input() {
        let s = Sensitivity::REPLACE_ONE;
        let max = dirichlet_max_order(2.0, 3.0, &s);
        assert_eq!(max, 2.5);
        assert_eq!(dirichlet_rdp(order(max), 2.0, 3.0, &s), f64::INFINITY);
        assert_eq!(dirichlet_rdp(order(3.0), 2.0, 3.0, &s), f64::INFINITY);
        assert!(dirichlet_rdp(order(2.4999), 2.0, 3.0, &s).is_finite());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(dirichlet_rdp(order(2.0), bad, 3.0, &s), f64::INFINITY);
            assert_eq!(dirichlet_rdp(order(2.0), 1.0, bad, &s), f64::INFINITY);
            assert_eq!(dirichlet_max_order(bad, 3.0, &s), 1.0);
            assert_eq!(gaussian_rdp(order(2.0), bad, &s), f64::INFINITY);
        }
    }

    #[test]
    fn dirichlet_curve_near_the_pole_never_rounds_down() {
        // α_m − (λ−1)rΔ∞ cancels almost completely here; the computed value must not drop
        // below the exact one (evaluated with the exact, tiny shifted argument).
        let s = Sensitivity::ADD_REMOVE_ONE;
        let (r, alpha) = (3.0, 1.0);
        let lambda = 1.0 + (1.0 - 1e-12) / 3.0;
        // λ − 1 is exact (Sterbenz, λ < 2); the FMA recovers the product's rounding error.
        let lm1 = lambda - 1.0;
        let exact_z = two_product_difference(alpha, lm1, r);
        let z = shifted_prior_lower_bound(lambda, r, alpha, 1.0);
        assert!(z > 0.0 && z <= exact_z, "{z} vs {exact_z}");
        let e = dirichlet_rdp(order(lambda), r, alpha, &s);
        assert!(e >= 0.5 * lambda * r * r * trigamma(exact_z) * (1.0 - 1e-15));
    }

    /// α − a·b with the product's rounding error recovered by an FMA.
    fn two_product_difference(alpha: f64, a: f64, b: f64) -> f64 {
        let p = a * b;
        let err = a.mul_add(b, -p);
        (alpha - p) - err
    }

    #[test]
    fn gaussian_curve_at_known_values() {
        assert_eq!(
            gaussian_rdp(order(2.0), 1.0, &Sensitivity::REPLACE_ONE),
            2.0
        );
        assert_eq!(
            gaussian_rdp(order(10.0), 2.0, &Sensitivity::ADD_REMOVE_ONE),
            1.25
        );
    }

    #[test]
    fn laplace_cell_at_known_values() {
        // λ = 2, u = 1: log(2/3·e + 1/3·e^{−2}).
        let want = (2.0 / 3.0 * 1f64.exp() + 1.0 / 3.0 * (-2f64).exp()).ln();
        let got = laplace_cell_rdp(order(2.0), 1.0);
        assert!((got - want).abs() <= 1e-15 * want, "{got} vs {want}");
        // λ = 3, u = 0.5: ½·log(3/5·e^{1} + 2/5·e^{−1.5}).
        let want = 0.5 * (0.6 * 1f64.exp() + 0.4 * (-1.5f64).exp()).ln();
        let got = laplace_cell_rdp(order(3.0), 0.5);
        assert!((got - want).abs() <= 1e-15 * want, "{got} vs {want}");
        assert_eq!(laplace_cell_rdp(order(2.0), 0.0), 0.0);
    }

    #[test]
    fn laplace_cell_matches_mpmath() {
        // Small u (first-order cancellation), λ → 1 and the branch switch at (λ−1)u = 30.
        let rows = include_str!("fixtures/laplace.csv");
        let mut n = 0;
        for line in rows.lines().skip(1) {
            let f: Vec<f64> = line.split(',').map(|v| v.parse().unwrap()).collect();
            let got = laplace_cell_rdp(order(f[0]), f[1]);
            let e = ((got - f[2]) / f[2]).abs();
            assert!(
                e < 1e-14,
                "λ={} u={}: {got} vs {} ({e:e})",
                f[0],
                f[1],
                f[2]
            );
            n += 1;
        }
        assert!(n >= 90);
    }

    #[test]
    fn laplace_cell_large_shifts_are_stable() {
        // Far out, ε_s → u + log(λ/(2λ−1))/(λ−1); no overflow even where e^{(λ−1)u} would.
        for lambda in [1.01, 2.0, 64.0] {
            for u in [50.0, 1e3, 1e6, 1e300] {
                let got = laplace_cell_rdp(order(lambda), u);
                let want = u + (lambda / (2.0 * lambda - 1.0)).ln() / (lambda - 1.0);
                assert!(got.is_finite(), "λ={lambda} u={u}");
                assert!(
                    ((got - want) / want).abs() < 1e-13,
                    "λ={lambda} u={u}: {got} vs {want}"
                );
            }
        }
        assert_eq!(laplace_cell_rdp(order(2.0), f64::INFINITY), f64::INFINITY);
        assert_eq!(laplace_cell_rdp(order(2.0), f64::NAN), f64::INFINITY);
    }

    #[test]
    fn laplace_cell_is_below_the_pure_dp_and_zcdp_bounds() {
        // ε₀ = u-DP implies D_λ ≤ min(u, λu²/2) (Bun & Steinke 2016, Prop. 3.3).
        let mut u = 1e-6;
        while u < 1e4 {
            for lambda in [1.0001, 1.3, 2.0, 7.0, 300.0] {
                let e = laplace_cell_rdp(order(lambda), u);
                assert!(e <= u * (1.0 + 1e-14), "λ={lambda} u={u}");
                assert!(
                    e <= lambda * u * u / 2.0 * (1.0 + 1e-14),
                    "λ={lambda} u={u}"
                );
                assert!(e > 0.0);
            }
            u *= 1.9;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn dirichlet_curve_is_monotone_in_order_and_r(
            r in 0.01f64..10.0, alpha in 0.01f64..100.0, t in 0.01f64..0.98,
        ) {
            let s = Sensitivity::REPLACE_ONE;
            let max = dirichlet_max_order(r, alpha, &s);
            let l1 = 1.0 + (max - 1.0) * t;
            let l2 = 1.0 + (max - 1.0) * (t + 0.01);
            prop_assume!(l1 > 1.0 && l2 > l1);
            let (e1, e2) = (dirichlet_rdp(order(l1), r, alpha, &s), dirichlet_rdp(order(l2), r, alpha, &s));
            prop_assert!(e1.is_finite() && e2 >= e1);
            prop_assert!(dirichlet_rdp(order(l1), r * 1.01, alpha, &s) >= e1);
        }
    }

    #[test]
    fn a_custom_declaration_is_never_priced_as_a_histogram_relation() {
        use crate::privacy::discrete::laplace_rdp;
        let custom = Sensitivity::new(2.0, 1.0).unwrap();
        assert_ne!(custom, Sensitivity::REPLACE_ONE);
        for d in [2usize, 10, 1000] {
            let preset = laplace_rdp(order(3.0), 2.0, &Sensitivity::REPLACE_ONE, d);
            let ball = laplace_rdp(order(3.0), 2.0, &custom, d);
            assert!(
                ball >= preset,
                "d = {d}: custom {ball} < replace-one {preset}"
            );
        }
        assert_eq!(
            Sensitivity::for_relation("replace_one", 2.0, 1.0).unwrap(),
            Sensitivity::REPLACE_ONE
        );
        assert_eq!(
            Sensitivity::for_relation("custom", 2.0, 1.0).unwrap(),
            custom
        );
    }
}
