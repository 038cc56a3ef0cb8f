use super::problem::pole_scale;
use super::roots::solve_increasing;
use super::*;
use crate::privacy::curve::{dirichlet_rdp, gaussian_rdp};
use crate::privacy::special::trigamma;
use proptest::prelude::*;

fn order(v: f64) -> Order {
    Order::new(v).unwrap()
}

fn eps(v: f64) -> Epsilon {
    Epsilon::new(v).unwrap()
}

/// The root solver on the shapes it meets: ln ε* next to a pole (≈ ln(c + t), from far
/// below), a steep exponential, and a curve that is +∞ past a pole; each root is found to
/// the tolerance, in few evaluations, whatever the first slope guess.
#[test]
fn solve_increasing_finds_curved_roots() {
    type Case = (&'static str, fn(f64) -> f64, f64, f64);
    let cases: [Case; 3] = [
        ("log-log", |t| (0.7 + t).ln() - 10f64.ln(), 0.7, 9.3),
        (
            "exponential",
            |t| (3.0 * t).exp() - 50.0,
            -2.0,
            50f64.ln() / 3.0,
        ),
        (
            "pole",
            |t| {
                if t < 2.0 {
                    -(2.0 - t).ln() - 3.0
                } else {
                    f64::INFINITY
                }
            },
            0.0,
            2.0 - (-3f64).exp(),
        ),
    ];
    for (name, f, t0, root) in cases {
        for slope in [0.1, 1.0, 10.0] {
            let mut n = 0;
            let t = solve_increasing(
                |t| {
                    n += 1;
                    f(t)
                },
                t0,
                |_| slope,
                1e-12,
                100,
            );
            assert!(
                f(t).abs() <= 1e-12,
                "{name}, slope {slope}: f({t}) = {}",
                f(t)
            );
            assert!((t - root).abs() < 1e-9, "{name}: {t} vs {root}");
            assert!(n <= 30, "{name}, slope {slope}: {n} evaluations");
        }
    }
}

/// The contract, with the near-pole fallback's wider spend tolerance.
fn assert_contract_near_pole(curve: f64, epsilon: f64) {
    assert!(
        curve * (1.0 + CHARGE_INFLATION) <= epsilon,
        "{curve} over {epsilon}"
    );
    assert!(
        curve >= epsilon * (1.0 - POLE_SPEND_TOLERANCE),
        "{curve} under {epsilon}"
    );
}

fn assert_contract(curve: f64, epsilon: f64) {
    assert!(
        curve * (1.0 + CHARGE_INFLATION) <= epsilon,
        "curve {curve} over ε = {epsilon}"
    );
    assert!(
        curve >= epsilon * (1.0 - SPEND_TOLERANCE),
        "curve {curve} under ε = {epsilon}"
    );
}

/// The price the ledger charges (exact for the histogram relations, Cor. 3 otherwise).
fn price(p: &DirichletParams, lambda: f64, s: &Sensitivity) -> f64 {
    crate::privacy::curve::dirichlet_price(order(lambda), p.r, &p.alpha, s).0
}

#[test]
fn worked_example_of_001_exact_and_bound() {
    // Exact curve, replace-one, λ = 2, r = 1: ε* = ln((α+1)/(α−1)), so ε = 1 needs
    // α = coth(½) = 2.16395341374 (mpmath), not the bound's 3.46.
    let p = calibrate(
        &Calibration::Posterior { r: 1.0 },
        order(2.0),
        eps(1.0),
        &Sensitivity::REPLACE_ONE,
    )
    .unwrap();
    let coth_half = 1.0 / 0.5f64.tanh();
    assert!(
        (p.alpha.min() / coth_half - 1.0).abs() < 1e-9,
        "{:?}",
        p.alpha
    );
    assert_contract(price(&p, 2.0, &Sensitivity::REPLACE_ONE), 1.0);
    // The bound (custom sensitivity with the same numbers):
    // λ = 2, ε = 1, Δ2² = 2, Δ∞ = 1, r = 1 ⇒ ψ′(α_m − 1) = 1 ⇒ α_m ≈ 3.46 (eq. 9 gives 4).
    // The paper's root is the real-number curve's (the charged price is at r(1 + 2⁻¹⁷)).
    let s = Sensitivity::new(2.0, 1.0).unwrap();
    let p = calibrate_ideal(&Calibration::Posterior { r: 1.0 }, order(2.0), eps(1.0), &s).unwrap();
    assert_eq!(p.r, 1.0);
    let a = p.alpha.min();
    assert!((a - 3.46).abs() < 0.005, "α_m = {a}");
    // ½·2·1²·2·ψ′(α_m − 1) = 1 ⇔ ψ′(α_m − 1) = ½ (the paper's text says 1, its 3.46 is ½).
    assert!((trigamma(a - 1.0) - 0.5).abs() < 1e-9);
    let closed_form = 2.0 * 2.0 / (2.0 * 1.0) + 1.0 + 1.0;
    assert_eq!(closed_form, 4.0);
    assert!(a < closed_form);
    assert_contract(dirichlet_rdp(order(2.0), 1.0, a, &s), 1.0);
    let p = calibrate(&Calibration::Posterior { r: 1.0 }, order(2.0), eps(1.0), &s).unwrap();
    assert_contract(price(&p, 2.0, &s), 1.0);
}

#[test]
fn two_releases_at_half_fit_a_budget_of_one_exactly() {
    use crate::ledger::charge::{charge_for, Units};
    let s = Sensitivity::REPLACE_ONE;
    for cal in [
        Calibration::Dirichlet { prior: 1.0 },
        Calibration::Posterior { r: 1.0 },
        Calibration::Diffuse {
            alpha: Prior::Uniform(10.0),
        },
    ] {
        for lambda in [1.5, 2.0, 8.0, 32.0] {
            let p = calibrate(&cal, order(lambda), eps(0.5), &s).unwrap();
            let charge = charge_for(price(&p, lambda, &s)).unwrap();
            let total = charge.checked_add(charge).unwrap();
            assert!(total <= Units::ceil(1.0).unwrap(), "{cal:?} at λ={lambda}");
            assert!(charge.to_f64() <= 0.5);
        }
    }
}

#[test]
fn algorithm_1_matches_the_paper_identity() {
    // With α = a₀ + 4(λ−1)rΔ∞ the curve is ½λr²Δ2²ψ′(a₀ + 3(λ−1)rΔ∞) = ε — on the bound,
    // which custom sensitivities are priced by (the histogram relations solve against ε*).
    let s = Sensitivity::new(2.0, 1.0).unwrap();
    for (lambda, e) in [(2.0, 1.0), (20.0, 0.1), (200.0, 5.0), (1.01, 1e-4)] {
        let cal = Calibration::Dirichlet { prior: 1.0 };
        assert_contract(
            price(
                &calibrate(&cal, order(lambda), eps(e), &s).unwrap(),
                lambda,
                &s,
            ),
            e,
        );
        let p = calibrate_ideal(
            &Calibration::Dirichlet { prior: 1.0 },
            order(lambda),
            eps(e),
            &s,
        )
        .unwrap();
        let alpha = p.alpha.min();
        assert!((alpha - (1.0 + 4.0 * (lambda - 1.0) * p.r)).abs() <= 1e-12 * alpha);
        let paper = 0.5 * lambda * p.r * p.r * 2.0 * trigamma(1.0 + 3.0 * (lambda - 1.0) * p.r);
        assert!((paper / e - 1.0).abs() < 1e-9, "λ={lambda} ε={e}: {paper}");
        assert_contract(dirichlet_rdp(order(lambda), p.r, alpha, &s), e);
    }
}

#[test]
fn explicit_is_returned_as_given_and_validated() {
    let s = Sensitivity::REPLACE_ONE;
    let cal = Calibration::Explicit {
        r: 2.0,
        alpha: Prior::PerCell(vec![1.0, 2.0, 3.0]),
    };
    let p = calibrate(&cal, order(2.0), eps(1.0), &s).unwrap();
    assert_eq!(
        p,
        DirichletParams {
            r: 2.0,
            alpha: Prior::PerCell(vec![1.0, 2.0, 3.0])
        }
    );
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = calibrate(
            &Calibration::Explicit {
                r: bad,
                alpha: Prior::Uniform(1.0),
            },
            order(2.0),
            eps(1.0),
            &s,
        );
        assert_eq!(e, Err(CalibrationError::NotFinite("r")));
        let e = calibrate(
            &Calibration::Explicit {
                r: 1.0,
                alpha: Prior::Uniform(bad),
            },
            order(2.0),
            eps(1.0),
            &s,
        );
        assert_eq!(e, Err(CalibrationError::NotFinite("alpha")));
        let e = calibrate(
            &Calibration::Dirichlet { prior: bad },
            order(2.0),
            eps(1.0),
            &s,
        );
        assert_eq!(e, Err(CalibrationError::NotFinite("prior")));
        let e = calibrate(&Calibration::Posterior { r: bad }, order(2.0), eps(1.0), &s);
        assert_eq!(e, Err(CalibrationError::NotFinite("r")));
        let e = calibrate(
            &Calibration::Diffuse {
                alpha: Prior::PerCell(vec![1.0, bad]),
            },
            order(2.0),
            eps(1.0),
            &s,
        );
        assert_eq!(e, Err(CalibrationError::NotFinite("alpha")));
    }
}

#[test]
fn extreme_inputs_give_typed_errors_or_meet_the_contract() {
    let s = Sensitivity::REPLACE_ONE;
    let orders = [1.0 + 1e-12, 1.0001, 2.0, 1e3, 1e8, 1e300];
    let epsilons = [1e-300, 1e-12, 1e-3, 1.0, 8192.0, 1e300];
    let cals = [
        Calibration::Dirichlet { prior: 1.0 },
        Calibration::Dirichlet { prior: 1e-6 },
        Calibration::Dirichlet { prior: 1e12 },
        Calibration::Posterior { r: 1.0 },
        Calibration::Posterior { r: 1e-150 },
        Calibration::Posterior { r: 1e150 },
        Calibration::Diffuse {
            alpha: Prior::Uniform(10.0),
        },
        Calibration::Diffuse {
            alpha: Prior::Uniform(1e-6),
        },
        Calibration::Diffuse {
            alpha: Prior::PerCell(vec![1e12, 3.0]),
        },
    ];
    let mut solved = 0;
    for cal in &cals {
        for &lambda in &orders {
            for &e in &epsilons {
                match calibrate(cal, order(lambda), eps(e), &s) {
                    Ok(p) => {
                        assert_contract_near_pole(price(&p, lambda, &s), e);
                        solved += 1;
                    }
                    Err(CalibrationError::Infeasible { .. }) => {}
                    Err(other) => panic!("{other:?}"),
                }
            }
        }
    }
    // Most of the grid is solvable; the errors are the genuinely unrepresentable corners.
    assert!(
        solved > cals.len() * orders.len() * epsilons.len() / 2,
        "{solved}"
    );
}

#[test]
fn regression_diffuse_with_a_tiny_prior_near_order_one() {
    // Once failed: the diffuse bracket used an upper bound of the root as a lower one.
    let s = Sensitivity::new(0.1 * 0.1, 0.1).unwrap();
    let cal = Calibration::Diffuse {
        alpha: Prior::PerCell(vec![0.001, 0.002, 1.001]),
    };
    let p = calibrate(&cal, order(1.0001), eps(1.0), &s).unwrap();
    assert_contract(price(&p, 1.0001, &s), 1.0);
    let p = calibrate(
        &Calibration::Diffuse {
            alpha: Prior::Uniform(10.0),
        },
        order(1.5),
        eps(0.5),
        &s,
    )
    .unwrap();
    assert_contract(price(&p, 1.5, &s), 0.5);
}

#[test]
fn exact_calibrations_match_mpmath() {
    let rows = include_str!("../fixtures/exact_calibrations.csv");
    for line in rows.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let s = match f[0] {
            "replace_one" => Sensitivity::REPLACE_ONE,
            _ => Sensitivity::ADD_REMOVE_ONE,
        };
        let num = |i: usize| f[i].parse::<f64>().unwrap();
        let (lambda, e, fixed, want) = (num(2), num(3), num(4), num(5));
        let cal = match f[1] {
            "posterior" => Calibration::Posterior { r: fixed },
            "diffuse" => Calibration::Diffuse {
                alpha: Prior::Uniform(fixed),
            },
            _ => Calibration::Dirichlet { prior: fixed },
        };
        let p = calibrate(&cal, order(lambda), eps(e), &s).unwrap();
        let got = match f[1] {
            "posterior" => p.alpha.min(),
            _ => p.r,
        };
        // The solver aims 5e-10 below ε and may stop anywhere in the 1e-9 window.
        assert!((got / want - 1.0).abs() < 2e-9, "{line}: {got}");
        assert_contract(price(&p, lambda, &s), e);
    }
}

#[test]
fn exact_calibration_is_monotone_in_epsilon() {
    // Unique roots: a larger ε buys a larger r (dirichlet, diffuse) or smaller α (posterior).
    for s in [Sensitivity::REPLACE_ONE, Sensitivity::ADD_REMOVE_ONE] {
        let mut last = (0.0, 0.0, f64::INFINITY);
        // Up to ε ≈ 4.7; beyond ~7 the posterior's α sits within 1e-14 of the pole, where
        // one ulp of α moves ε* by more than 1e-6 (the calibration then takes the best
        // float, `calibration_reaches_next_to_the_pole`), and strict monotonicity in ulps
        // no longer holds.
        for k in 0..42 {
            let e = 1e-4 * 1.3f64.powi(k);
            let d = calibrate(
                &Calibration::Dirichlet { prior: 1.0 },
                order(5.0),
                eps(e),
                &s,
            )
            .unwrap();
            let f = calibrate(
                &Calibration::Diffuse {
                    alpha: Prior::PerCell(vec![2.0, 3.0, 50.0]),
                },
                order(5.0),
                eps(e),
                &s,
            )
            .unwrap();
            let q = calibrate(&Calibration::Posterior { r: 1.0 }, order(5.0), eps(e), &s).unwrap();
            assert!(
                d.r > last.0 && f.r > last.1 && q.alpha.min() < last.2,
                "ε={e}"
            );
            last = (d.r, f.r, q.alpha.min());
            for p in [&d, &f, &q] {
                assert_contract_near_pole(price(p, 5.0, &s), e);
            }
        }
    }
}

/// The estimate's pole scale: ln(e^{(λ−1)ε} − 1) − ln(λ − 1) where that can be formed,
/// finite from the smallest ε to the largest, and never flatter than ln ε (the solver's
/// tolerance on it bounds the residual of ln ε*).
#[test]
fn pole_scale_is_ln_expm1_and_steeper_than_ln() {
    for lm1 in [1e-8_f64, 0.5, 1.0, 7.0, 1e3] {
        for e in [1e-6_f64, 0.01, 0.5, 1.0, 10.0, 50.0] {
            if lm1 * e > 700.0 {
                continue;
            }
            let want = (lm1 * e).exp_m1().ln() - lm1.ln();
            let got = pole_scale(lm1, e);
            assert!(
                (got - want).abs() <= 1e-12 * want.abs().max(1.0),
                "{lm1} {e}: {got} vs {want}"
            );
        }
        let mut e = 5e-324_f64;
        let mut last = (f64::NEG_INFINITY, f64::NEG_INFINITY);
        // Up to where (λ − 1)ε itself overflows (then +∞, which the solver takes as "above").
        while e < f64::MAX / 4.0 / lm1.max(1.0) {
            let v = pole_scale(lm1, e);
            assert!(v.is_finite(), "{lm1} {e}: {v}");
            assert!(v - last.0 >= (e.ln() - last.1) * (1.0 - 1e-12), "{lm1} {e}");
            last = (v, e.ln());
            e *= 3.7;
        }
        assert_eq!(pole_scale(lm1, f64::INFINITY), f64::INFINITY);
    }
}

#[test]
fn inverse_trigamma_inverts() {
    let mut y = 1e-12;
    while y < 1e14 {
        let z = inverse_trigamma(y);
        assert!((trigamma(z) / y - 1.0).abs() < 1e-14, "y={y}: z={z}");
        y *= 3.7;
    }
}

#[test]
fn gaussian_sigma_at_known_values_and_contract() {
    let s = Sensitivity::REPLACE_ONE;
    let sigma = gaussian_sigma(order(2.0), eps(2.0), &s);
    assert!((sigma - 1.0).abs() < 1e-11, "{sigma}");
    for lambda in [1.01, 2.0, 64.0, 1e6] {
        for e in [1e-6, 0.5, 1.0, 3.0, 8000.0] {
            let sigma = gaussian_sigma(order(lambda), eps(e), &s);
            assert_contract(gaussian_rdp(order(lambda), sigma, &s), e);
        }
    }
}

#[test]
fn laplace_scale_contract_presets_and_custom() {
    // The discrete Laplace's calibration, held to this module's contract on a wide grid.
    use crate::privacy::discrete::{laplace_rdp, laplace_scale};
    let custom = Sensitivity::new(3.0, 1.5).unwrap();
    for s in [
        Sensitivity::REPLACE_ONE,
        Sensitivity::ADD_REMOVE_ONE,
        custom,
    ] {
        for lambda in [1.001, 2.0, 10.0, 500.0] {
            for e in [1e-6, 0.1, 1.0, 10.0, 8000.0] {
                for d in [2, 10, 100_000] {
                    let b = laplace_scale(order(lambda), eps(e), &s, d).unwrap();
                    assert_contract(laplace_rdp(order(lambda), b, &s, d), e);
                }
            }
        }
    }
    assert!(laplace_scale(order(2.0), eps(1.0), &Sensitivity::REPLACE_ONE, 0).is_err());
}

/// The realised-shift price costs what the real-number one did on the calibrations'
/// common path: the same number of one-cell quadratures on the benchmark's grid and more
/// orders and relations, and never its second (large-shape) case.
#[test]
fn realised_price_adds_no_exact_evaluations_on_the_common_path() {
    use crate::privacy::exact::counters;
    let mut cases: Vec<(Calibration, f64, f64, Sensitivity)> = Vec::new();
    for cal in [
        Calibration::Dirichlet { prior: 1.0 },
        Calibration::Posterior { r: 1.0 },
        Calibration::Diffuse {
            alpha: Prior::Uniform(10.0),
        },
    ] {
        for e in [0.01, 1.0, 10.0] {
            cases.push((cal.clone(), 2.0, e, Sensitivity::REPLACE_ONE));
        }
        for lambda in [1.5, 5.0, 22.0] {
            for s in [Sensitivity::REPLACE_ONE, Sensitivity::ADD_REMOVE_ONE] {
                cases.push((cal.clone(), lambda, 0.1, s));
            }
        }
    }
    let (mut real, mut realised) = (0, 0);
    for (cal, lambda, e, s) in &cases {
        counters::reset();
        calibrate_ideal(cal, order(*lambda), eps(*e), s).unwrap();
        real += counters::get().0;
        counters::reset();
        calibrate(cal, order(*lambda), eps(*e), s).unwrap();
        let (cells, far) = counters::get();
        assert_eq!(far, 0, "{cal:?} λ {lambda} ε {e}");
        realised += cells;
    }
    println!(
        "{} calibrations: {realised} quadratures, {real} on the real-number curve",
        cases.len()
    );
    assert!(realised <= real, "{realised} quadratures, were {real}");
}

/// Next to ε*'s logarithmic pole one ulp of the solved parameter moves
/// the price by more than the spend tolerance, and the calibration used to give up —
/// though the curve goes on to ~12.9 at order 3.7 (α = 1). It now settles on the best f64
/// parameter, and refuses only beyond the curve's reach, naming that reach.
#[test]
fn calibration_reaches_next_to_the_pole() {
    let s = Sensitivity::REPLACE_ONE;
    let (lambda, e) = (3.7, 10.0);
    let diffuse = Calibration::Diffuse {
        alpha: Prior::Uniform(1.0),
    };
    let posterior = Calibration::Posterior { r: 0.001 };
    for cal in [&diffuse, &posterior] {
        let p = calibrate(cal, order(lambda), eps(e), &s)
            .unwrap_or_else(|err| panic!("{cal:?}: {err}"));
        let v = price(&p, lambda, &s);
        assert!(v * (1.0 + CHARGE_INFLATION) <= e, "{cal:?}: {v}");
        assert!(best_representable(cal, &p, lambda, e, &s), "{cal:?}: {v}");
        // Beyond the reach: refused, with the reach and what reaches more in the detail.
        let err = calibrate(cal, order(lambda), eps(30.0), &s).unwrap_err();
        let CalibrationError::Infeasible { reason, .. } = &err else {
            panic!("{err:?}")
        };
        let reach: f64 = reason
            .split(" is ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{reason}"));
        assert!(reach > 12.0 && reach < 30.0, "{reason}");
        assert!(reason.contains("lower order"), "{reason}");
        let last = last_parameter(cal, lambda, &s);
        assert!(
            (price(&last, lambda, &s) / reach - 1.0).abs() < 1e-6,
            "{reason}"
        );
    }
}

/// The solved parameter is the best f64 offers: the next float towards the pole prices
/// over ε (or the price is within the spend tolerance anyway).
use crate::privacy::exact::{next_down, next_up};

fn best_representable(
    cal: &Calibration,
    p: &DirichletParams,
    lambda: f64,
    e: f64,
    s: &Sensitivity,
) -> bool {
    let v = price(p, lambda, s);
    if v >= e * (1.0 - SPEND_TOLERANCE) {
        return true;
    }
    let next = match cal {
        Calibration::Posterior { .. } => DirichletParams {
            r: p.r,
            alpha: Prior::Uniform(next_down(p.alpha.min())),
        },
        _ => DirichletParams {
            r: next_up(p.r),
            alpha: p.alpha.clone(),
        },
    };
    let w = price(&next, lambda, s);
    // NaN or +∞ (past the pole) counts as over.
    w.is_nan() || w * (1.0 + CHARGE_INFLATION) > e
}

/// The last f64 parameter before the pole (largest finite-priced r of `diffuse`, smallest
/// finite-priced α of `posterior`), by bisection on the bit patterns — independent of the
/// calibration's own search.
fn last_parameter(cal: &Calibration, lambda: f64, s: &Sensitivity) -> DirichletParams {
    let params = |v: f64| match cal {
        Calibration::Posterior { r } => DirichletParams {
            r: *r,
            alpha: Prior::Uniform(v),
        },
        Calibration::Diffuse { alpha } => DirichletParams {
            r: v,
            alpha: alpha.clone(),
        },
        _ => unreachable!(),
    };
    let finite = |v: f64| price(&params(v), lambda, s).is_finite();
    let pole = match cal {
        Calibration::Posterior { r } => (lambda - 1.0) * r,
        Calibration::Diffuse { alpha } => alpha.min() / (lambda - 1.0),
        _ => unreachable!(),
    };
    let (mut ok, mut bad) = match cal {
        Calibration::Posterior { .. } => (4.0 * pole, 0.5 * pole),
        _ => (0.25 * pole, 2.0 * pole),
    };
    assert!(finite(ok) && !finite(bad));
    let (mut a, mut b) = (ok.to_bits(), bad.to_bits());
    while a.abs_diff(b) > 1 {
        let mid = a.min(b) + a.abs_diff(b) / 2;
        if finite(f64::from_bits(mid)) {
            a = mid;
        } else {
            b = mid;
        }
    }
    ok = f64::from_bits(a);
    bad = f64::from_bits(b);
    assert!(finite(ok) && !finite(bad));
    params(ok)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// For random orders, priors (or r) and ε, either the calibration
    /// succeeds — charged at most ε, at the best f64 parameter — or ε exceeds the price at
    /// the last representable parameter before the pole.
    #[test]
    fn calibration_succeeds_or_epsilon_is_beyond_reach(
        lambda in 1.05f64..40.0,
        a in 0.01f64..50.0,
        // ε relative to the reach: mostly within it, a third of the cases within 30 % of
        // it (the pole's few ulps), some beyond.
        log_fraction in -2.0f64..0.2,
        which in 0usize..2,
        add_remove in proptest::bool::ANY,
    ) {
        let s = if add_remove { Sensitivity::ADD_REMOVE_ONE } else { Sensitivity::REPLACE_ONE };
        let cal = if which == 0 {
            Calibration::Diffuse { alpha: Prior::Uniform(a) }
        } else {
            Calibration::Posterior { r: a }
        };
        let reach = price(&last_parameter(&cal, lambda, &s), lambda, &s);
        let e = reach * log_fraction.exp();
        match calibrate(&cal, order(lambda), eps(e), &s) {
            Ok(p) => {
                let v = price(&p, lambda, &s);
                prop_assert!(v * (1.0 + CHARGE_INFLATION) <= e, "over: {} vs {}", v, e);
                prop_assert!(best_representable(&cal, &p, lambda, e, &s), "under: {} vs {}", v, e);
            }
            Err(err) => {
                prop_assert!(e > reach, "{:?} refused at ε {} within reach {}: {}", cal, e, reach, err);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every calibration plugged back into the curve returns the target ε (the contract).
    #[test]
    fn calibrations_meet_the_contract(
        lambda in 1.0001f64..200.0,
        log_eps in -8.0f64..9.0,
        l2_extra in 1.0f64..4.0,
        linf in 0.1f64..3.0,
        a in 1e-3f64..100.0,
        which in 0usize..3,
    ) {
        let e = log_eps.exp();
        let s = Sensitivity::new(linf * linf * l2_extra, linf).unwrap();
        let cal = match which {
            0 => Calibration::Dirichlet { prior: a },
            1 => Calibration::Posterior { r: a },
            _ => Calibration::Diffuse { alpha: Prior::PerCell(vec![a, a * 2.0, a + 1.0]) },
        };
        let p = calibrate(&cal, order(lambda), eps(e), &s).unwrap();
        let curve = price(&p, lambda, &s);
        prop_assert!(curve * (1.0 + CHARGE_INFLATION) <= e, "over: {} vs {}", curve, e);
        prop_assert!(curve >= e * (1.0 - SPEND_TOLERANCE), "under: {} vs {}", curve, e);
    }
}
