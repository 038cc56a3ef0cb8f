//! The exact Rényi divergence between two Dirichlet distributions (proof of 001 Theorem 2,
//! eq. 19): the oracle the charged cost is tested against.
//!
//! With log B(u) = Σᵢ log Γ(uᵢ) − log Γ(Σᵢ uᵢ) and w = u + (λ−1)(u − v),
//! D_λ = [(λ−1)(log B(v) − log B(u)) + log B(w) − log B(u)] / (λ−1).
//! Both brackets are differences of nearly equal log-gammas (their first-order terms cancel
//! between the brackets, too), so they are formed cell by cell with [`ln_gamma_diff`], which
//! avoids subtracting two large log-gammas, and only cells that differ contribute.

use super::special::ln_gamma;

/// D_λ(Dir(u) ‖ Dir(v)) (proof of 001 Theorem 2, eq. 19); +∞ when some
/// wᵢ = uᵢ + (λ−1)(uᵢ − vᵢ) ≤ 0. NaN for malformed input (order not a finite number > 1,
/// lengths that differ or are 0, a shape that is not a finite number > 0).
pub fn renyi_dirichlet(order: f64, u: &[f64], v: &[f64]) -> f64 {
    let valid = |s: &[f64]| s.iter().all(|x| x.is_finite() && *x > 0.0);
    if !(order.is_finite() && order > 1.0)
        || u.len() != v.len()
        || u.is_empty()
        || !valid(u)
        || !valid(v)
    {
        return f64::NAN;
    }
    let lm1 = order - 1.0;
    // Σᵢ [ln Γ(vᵢ) − ln Γ(uᵢ)] and Σᵢ [ln Γ(wᵢ) − ln Γ(uᵢ)] over the cells that differ, and
    // Σᵢ (vᵢ − uᵢ), which fixes both totals (w₀ − u₀ = −(λ−1)(v₀ − u₀)).
    let mut cells_v = Compensated::default();
    let mut cells_w = Compensated::default();
    let mut dv = Compensated::default();
    for (&ui, &vi) in u.iter().zip(v) {
        if ui == vi {
            continue;
        }
        let diff = ui - vi;
        let wi = ui + lm1 * diff;
        if wi.is_nan() || wi <= 0.0 {
            return f64::INFINITY;
        }
        cells_v.add(ln_gamma_diff(vi, ui));
        cells_w.add(ln_gamma_diff(wi, ui));
        dv.add(-diff);
    }
    let mut total = Compensated::default();
    u.iter().for_each(|&x| total.add(x));
    let u0 = total.sum();
    let dv = dv.sum();
    let v0 = u0 + dv;
    let w0 = u0 - lm1 * dv;
    let log_b_v_minus_u = cells_v.sum() - ln_gamma_diff(v0, u0);
    let log_b_w_minus_u = cells_w.sum() - ln_gamma_diff(w0, u0);
    (lm1 * log_b_v_minus_u + log_b_w_minus_u) / lm1
}

/// ln Γ(a) − ln Γ(b) for a, b > 0, accurate relative to the difference rather than to the
/// log-gammas themselves when a and b are close.
///
/// Recurrence Γ(x + 1) = xΓ(x) and Stirling's series (Abramowitz & Stegun 6.1.15, 6.1.40).
/// Both arguments are lifted to ≥ 8 by the recurrence (the lifted log terms differ by
/// ln1p((a−b)/(b+k))), then Stirling's series is differenced term by term:
/// (x−½)ln x − (y−½)ln y − (x−y) = (y−½)·ln1p(h/y) + h·(ln x − 1), h = x − y, a sum of
/// same-signed terms for x, y ≥ 8.
pub fn ln_gamma_diff(a: f64, b: f64) -> f64 {
    if a == b {
        return 0.0;
    }
    if !(a.is_finite() && b.is_finite() && a > 0.0 && b > 0.0) {
        return f64::NAN;
    }
    if !(a <= 2.0 * b && b <= 2.0 * a) {
        // Far apart: the difference is of the size of the log-gammas, nothing cancels.
        return ln_gamma(a) - ln_gamma(b);
    }
    let lo = a.min(b);
    let steps = if lo < 8.0 {
        (8.0 - lo).ceil() as u32
    } else {
        0
    };
    let h = a - b; // exact (Sterbenz: b/2 ≤ a ≤ 2b)
    let mut lifted = Compensated::default();
    for k in 0..steps {
        lifted.add(-(h / (b + k as f64)).ln_1p());
    }
    let x = a + steps as f64;
    let y = b + steps as f64;
    let hx = x - y; // exact again; differs from h only by the rounding of the lifts
    lifted.add((y - 0.5) * (hx / y).ln_1p());
    lifted.add(hx * (x.ln() - 1.0));
    lifted.add(stirling_tail(x) - stirling_tail(y));
    lifted.sum()
}

/// Σₖ B₂ₖ/(2k(2k−1)x^{2k−1}) for k = 1…8: the part of ln Γ(x) beyond (x−½)ln x − x + ½ln 2π.
/// At x ≥ 8 the first omitted term is below 1e-19.
fn stirling_tail(x: f64) -> f64 {
    const C: [f64; 8] = [
        1.0 / 12.0,
        -1.0 / 360.0,
        1.0 / 1260.0,
        -1.0 / 1680.0,
        1.0 / 1188.0,
        -691.0 / 360360.0,
        1.0 / 156.0,
        -3617.0 / 122400.0,
    ];
    let t = 1.0 / x;
    let w = t * t;
    t * C.iter().rev().fold(0.0, |acc, &c| acc * w + c)
}

/// Neumaier's compensated summation.
#[derive(Default, Clone, Copy)]
pub(crate) struct Compensated {
    sum: f64,
    carry: f64,
}

impl Compensated {
    #[inline]
    pub(crate) fn add(&mut self, x: f64) {
        let t = self.sum + x;
        if self.sum.abs() >= x.abs() {
            self.carry += (self.sum - t) + x;
        } else {
            self.carry += (x - t) + self.sum;
        }
        self.sum = t;
    }

    #[inline]
    pub(crate) fn merge(&mut self, other: Compensated) {
        self.add(other.sum);
        self.carry += other.carry;
    }

    #[inline]
    pub(crate) fn sum(self) -> f64 {
        self.sum + self.carry
    }
}

#[cfg(test)]
mod tests {
    use super::super::curve::{dirichlet_max_order, dirichlet_rdp};
    use super::super::types::{Order, Sensitivity};
    use super::*;
    use proptest::prelude::*;

    fn parse_vec(s: &str) -> Vec<f64> {
        s.split(' ').map(|v| v.parse().unwrap()).collect()
    }

    #[test]
    fn matches_mpmath_fixtures() {
        let mut n = 0;
        for line in include_str!("fixtures/renyi.csv").lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            let (order, u, v) = (
                f[0].parse::<f64>().unwrap(),
                parse_vec(f[1]),
                parse_vec(f[2]),
            );
            let got = renyi_dirichlet(order, &u, &v);
            if f[3] == "inf" {
                assert_eq!(got, f64::INFINITY, "{line}");
            } else {
                let want: f64 = f[3].parse().unwrap();
                assert!(((got - want) / want).abs() < 1e-11, "{line}: got {got}");
            }
            n += 1;
        }
        assert!(n >= 20);
    }

    #[test]
    fn ln_gamma_diff_matches_plain_differences_where_nothing_cancels() {
        for (a, b) in [
            (0.5, 0.7),
            (3.0, 5.0),
            (10.0, 12.5),
            (1e-3, 1.5e-3),
            (100.0, 150.0),
            (2.0, 9.0),
        ] {
            let want = ln_gamma(a) - ln_gamma(b);
            let got = ln_gamma_diff(a, b);
            assert!(
                (got - want).abs() < 1e-13 * (1.0 + want.abs()),
                "{a} {b}: {got} vs {want}"
            );
        }
        // lnΓ(x+1) − lnΓ(x) = ln x exactly, also where lnΓ(x) itself is huge.
        for x in [0.3, 7.5, 8.0, 1e3, 1e6, 1e10] {
            let got = ln_gamma_diff(x + 1.0, x);
            assert!(
                (got - x.ln()).abs() <= 1e-14 * x.ln().abs().max(1.0),
                "{x}: {got}"
            );
        }
    }

    #[test]
    fn malformed_input_is_nan_and_equal_inputs_are_zero() {
        assert!(renyi_dirichlet(1.0, &[1.0, 2.0], &[1.0, 2.0]).is_nan());
        assert!(renyi_dirichlet(2.0, &[1.0, 2.0], &[1.0]).is_nan());
        assert!(renyi_dirichlet(2.0, &[1.0, 0.0], &[1.0, 2.0]).is_nan());
        assert!(renyi_dirichlet(2.0, &[], &[]).is_nan());
        assert_eq!(renyi_dirichlet(2.0, &[1.0, 2.0], &[1.0, 2.0]), 0.0);
    }

    /// The oracle's error: each ln Γ difference is accurate to a few ulps of its own size
    /// (≤ |Δ|·|ψ| ≲ 10·Δ∞·r·λ here), and the numerator's first-order terms cancel, so
    /// the divergence carries an absolute error of order 1e-15·(that size)·(cells changed).
    /// 1e-11 absolute (plus 1e-12 relative) is orders of magnitude above that error and
    /// orders of magnitude below the gap between the bound and the divergence in the
    /// generated cases.
    const ORACLE_TOLERANCE: f64 = 1e-11;

    fn check(
        order: f64,
        r: f64,
        alpha: &[f64],
        x: &[f64],
        xp: &[f64],
        sens: &Sensitivity,
    ) -> Result<(), TestCaseError> {
        let alpha_min = alpha.iter().copied().fold(f64::INFINITY, f64::min);
        let price = dirichlet_rdp(Order::new(order).unwrap(), r, alpha_min, sens);
        let u: Vec<f64> = x.iter().zip(alpha).map(|(x, a)| r * x + a).collect();
        let v: Vec<f64> = xp.iter().zip(alpha).map(|(x, a)| r * x + a).collect();
        for (p, q) in [(&u, &v), (&v, &u)] {
            let d = renyi_dirichlet(order, p, q);
            prop_assert!(d.is_finite(), "divergence {} inside the range", d);
            prop_assert!(d >= -ORACLE_TOLERANCE);
            prop_assert!(
                price >= d * (1.0 - 1e-12) - ORACLE_TOLERANCE,
                "λ={} r={} price {} < divergence {}",
                order,
                r,
                price,
                d
            );
        }
        Ok(())
    }

    fn neighbour(x: &[f64], direction: &[f64], sens: &Sensitivity) -> Vec<f64> {
        // A move inside the (Δ2², Δ∞) box-ball; clipping at 0 only shrinks it.
        let mut step: Vec<f64> = direction.iter().map(|d| d * sens.linf()).collect();
        let norm2: f64 = step.iter().map(|s| s * s).sum();
        if norm2 > sens.l2_squared() {
            let f = (sens.l2_squared() / norm2).sqrt() * (1.0 - 1e-15);
            step.iter_mut().for_each(|s| *s *= f);
        }
        x.iter().zip(&step).map(|(x, s)| (x + s).max(0.0)).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Random data, random neighbours inside the sensitivity ball, both directions, orders
        /// across (1, max order): the charged curve dominates the exact divergence.
        #[test]
        fn curve_dominates_divergence_for_random_neighbours(
            d in 2usize..7,
            r in 0.05f64..5.0,
            alpha_base in 0.3f64..30.0,
            alpha_extra in proptest::collection::vec(0.0f64..20.0, 7),
            x in proptest::collection::vec(0u32..40, 7),
            direction in proptest::collection::vec(-1.0f64..1.0, 7),
            l2_extra in 1.0f64..3.0,
            linf in 0.2f64..2.0,
            t in 0.001f64..0.999,
        ) {
            let sens = Sensitivity::new(linf * linf * l2_extra, linf).unwrap();
            let alpha: Vec<f64> = alpha_extra[..d].iter().map(|e| alpha_base + e).collect();
            let x: Vec<f64> = x[..d].iter().map(|&c| c as f64).collect();
            let xp = neighbour(&x, &direction[..d], &sens);
            let alpha_min = alpha.iter().copied().fold(f64::INFINITY, f64::min);
            let order = 1.0 + (dirichlet_max_order(r, alpha_min, &sens) - 1.0) * t;
            prop_assume!(order > 1.0);
            check(order, r, &alpha, &x, &xp, &sens)?;
        }

        /// The worst cases of 001 §3.3: the cell with the smallest prior and no data moves
        /// 0 → Δ∞ (add/remove, custom), or it and another cell swap a record (replace-one).
        #[test]
        fn curve_dominates_divergence_in_the_worst_cases(
            d in 2usize..7,
            r in 0.05f64..5.0,
            alpha_min in 0.3f64..30.0,
            others in proptest::collection::vec(0u32..40, 7),
            t in 0.001f64..0.999,
            linf in 0.2f64..2.0,
            preset in 0usize..3,
        ) {
            let sens = match preset {
                0 => Sensitivity::REPLACE_ONE,
                1 => Sensitivity::ADD_REMOVE_ONE,
                _ => Sensitivity::new(linf * linf, linf).unwrap(),
            };
            let mut alpha = vec![alpha_min; d];
            alpha[1..].iter_mut().for_each(|a| *a += 1.0);
            let mut x: Vec<f64> = others[..d].iter().map(|&c| c as f64 + 1.0).collect();
            x[0] = 0.0;
            let mut xp = x.clone();
            xp[0] = sens.linf();
            if preset == 0 {
                xp[1] -= 1.0;
            }
            let order = 1.0 + (dirichlet_max_order(r, alpha_min, &sens) - 1.0) * t;
            prop_assume!(order > 1.0);
            check(order, r, &alpha, &x, &xp, &sens)?;
        }
    }

    #[test]
    fn paper_figure_3_neighbours_stay_below_algorithm_1() {
        // 000 Figure 3: x = (11, 8, 65, 25, 38, 1), x' = (11, 7, 65, 25, 38, 0),
        // α = 1 + 4(λ−1)r; Algorithm 1's ε is the curve at that α.
        let x = [11.0, 8.0, 65.0, 25.0, 38.0, 1.0];
        let xp = [11.0, 7.0, 65.0, 25.0, 38.0, 0.0];
        for lambda in [2.0, 20.0, 200.0] {
            for r in [0.01, 0.1, 1.0, 10.0] {
                let a = 1.0 + 4.0 * (lambda - 1.0) * r;
                check(lambda, r, &[a; 6], &x, &xp, &Sensitivity::REPLACE_ONE).unwrap();
            }
        }
    }
}
