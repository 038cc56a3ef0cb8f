//! From a parsed release request to a priced plan and a draw. Pure: no I/O, no async.
//!
//! A mechanism is a module of `mechanisms` implementing `mechanism::Mechanism`; this module runs
//! any of them the same way ([`plan`]): calibrate (a calibrated mechanism to the largest
//! ledger-grid value ≤ the asked ε), price the draw at the dataset's ledger order λ₀ by its own
//! curve, whatever order it was calibrated at, record it, and charge. A release calibrated at λ₀
//! to ε is charged exactly that grid value; every other one its price inflated and rounded *up*
//! to the grid; and every release at least one grid unit.

pub mod input;
pub mod mechanism;
pub mod mechanisms;
pub mod record;
pub mod request;
pub mod table;
pub mod workload;

use serde_json::{Map, Value};

pub use mechanism::{Aim, PlanError, Record, RequestError, Target, VectorForecast, FORECAST_BETA};
pub use mechanisms::{Calibrated, Kind, Registered, Spec, SpecVisitor};

use crate::ledger::{charge_for, Output, Units, UnitsError};
use crate::privacy::sampler::try_os_rng;
use crate::privacy::{CalibrationError, Epsilon, Order, Sensitivity};
use input::Input;
use mechanism::Draw;

/// A priced release, ready to be drawn and charged.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The mechanism's spec and the parameters it calibrated.
    pub calibrated: Calibrated,
    /// The price at the ledger order (before rounding).
    pub price: f64,
    /// What the ledger charges: `price` rounded up to the grid (at least one unit).
    pub charge: Units,
    /// The mechanism record returned to clients and stored with the release.
    pub record: Record,
}

impl Plan {
    pub fn kind(&self) -> Kind {
        self.calibrated.kind()
    }

    pub fn draw(&self) -> &dyn Draw {
        self.calibrated.draw()
    }
}

/// The largest ledger-grid value ≤ the asked ε (k releases asked at B/k fit a budget B
/// exactly). Calibrations solve for this value, never for more than was asked.
fn on_grid(t: &Target) -> Result<Target, PlanError> {
    let units = Units::floor(t.epsilon.get()).map_err(|_| too_large(t))?;
    let epsilon = Epsilon::new(units.to_f64()).map_err(|_| {
        PlanError::Infeasible(CalibrationError::Infeasible {
            order: t.order.get(),
            epsilon: t.epsilon.get(),
            reason: "epsilon is below the ledger's grid of 2^-40".to_string(),
        })
    })?;
    Ok(Target {
        epsilon,
        order: t.order,
    })
}

fn too_large(t: &Target) -> PlanError {
    PlanError::TooExpensive {
        price: t.epsilon.get(),
        order: t.order.get(),
    }
}

/// Calibrate (if needed) and price `spec` for a d-cell release on a dataset with `sens`,
/// charged at `ledger_order`.
///
/// A mechanism calibrated at the ledger order to ε is charged exactly the largest grid value
/// ≤ ε (it was solved so that its curve, inflated by the evaluation's error bound, is at most
/// that value: checked, not assumed). Every other release — calibrated at another order, given
/// parameters, a pure-DP ε — is charged its curve at the ledger order, inflated and rounded up,
/// and at least one grid unit: a release whose price rounds to nothing still spends, so an
/// exhausted ledger admits none.
pub fn plan(
    spec: &Spec,
    d: usize,
    ledger_order: Order,
    sens: &Sensitivity,
) -> Result<Plan, PlanError> {
    struct Planner<'a> {
        d: usize,
        ledger_order: Order,
        sens: &'a Sensitivity,
    }
    impl SpecVisitor for Planner<'_> {
        type Output = Result<Plan, PlanError>;
        fn visit<M: Registered>(self, spec: &M::Spec) -> Result<Plan, PlanError> {
            plan_with::<M>(spec, self.d, self.ledger_order, self.sens)
        }
    }
    spec.visit(Planner {
        d,
        ledger_order,
        sens,
    })
}

/// The parameters `spec` runs with for a d-cell release under `sens`: a calibrated spec solved
/// for the largest grid value ≤ its target (the planner's searches calibrate through this too,
/// so that what they try is what a release would draw).
pub fn calibrate<M: Registered>(
    spec: &M::Spec,
    d: usize,
    sens: &Sensitivity,
) -> Result<(M::Draw, Option<Target>), PlanError> {
    // The grid target of a calibrated spec: solved for, recorded as asked.
    let grid = match M::aim(spec) {
        Aim::Calibrated(target) => Some(on_grid(&target)?),
        Aim::Priced { .. } => None,
    };
    M::calibrate(spec, grid, d, sens).map(|draw| (draw, grid))
}

fn plan_with<M: Registered>(
    spec: &M::Spec,
    d: usize,
    ledger_order: Order,
    sens: &Sensitivity,
) -> Result<Plan, PlanError> {
    let aim = M::aim(spec);
    let (draw, grid) = calibrate::<M>(spec, d, sens)?;
    let (price, pricing) = draw.price(ledger_order, sens, d);
    let mut record = M::record(spec, &draw);
    record.set("pricing", pricing);
    if !price.is_finite() {
        return Err(PlanError::NoGuarantee {
            ledger_order: ledger_order.get(),
            max_order: draw.max_order(sens),
        });
    }
    let charge = match charge_for(price) {
        // Calibrated at the ledger order: charged the grid target, which the calibration
        // contract puts at or above the inflated curve.
        Ok(units) => match grid.filter(|g| g.order == ledger_order) {
            Some(g) => {
                let asked = Units::floor(g.epsilon.get()).map_err(|_| too_large(&g))?;
                if units > asked {
                    return Err(PlanError::Infeasible(CalibrationError::Infeasible {
                        order: g.order.get(),
                        epsilon: g.epsilon.get(),
                        reason: "the calibrated curve exceeds the target".to_string(),
                    }));
                }
                asked
            }
            None => units.max(Units::QUANTUM),
        },
        Err(UnitsError::TooLarge) => {
            return Err(PlanError::TooExpensive {
                price,
                order: ledger_order.get(),
            })
        }
        Err(UnitsError::NotFinite) => {
            return Err(PlanError::NoGuarantee {
                ledger_order: ledger_order.get(),
                max_order: f64::NAN,
            })
        }
    };
    if let Aim::Priced { cap: Some(cap) } = aim {
        // The cap is checked against what the ledger would charge, not the raw curve.
        if charge.to_f64() > cap.get() {
            return Err(PlanError::CostExceedsCap {
                price: charge.to_f64(),
                cap: cap.get(),
                order: ledger_order.get(),
            });
        }
    }
    Ok(Plan {
        calibrated: M::wrap(spec.clone(), draw),
        price,
        charge,
        record,
    })
}

/// Draw the release from the OS-seeded CSPRNG: the vector, or every row of the table
/// independently; plus what the draw adds to the mechanism record (a selection). CPU-bound:
/// large draws belong on a blocking thread. Fails closed (never panics).
pub fn draw(plan: &Plan, input: &Input) -> Result<(Output, Option<Map<String, Value>>), String> {
    let mut rng = try_os_rng().map_err(|e| format!("the OS random source failed: {e}"))?;
    match input {
        Input::Vector(counts) => plan
            .draw()
            .sample(counts, &mut rng)
            .map(|(y, drawn)| (Output::Vector(y), drawn)),
        Input::Table(t) => {
            table::sample(plan.draw(), t, &mut rng).map(|t| (Output::Table(t), None))
        }
    }
}

/// The preview's mechanism-specific keys (the Dirichlet family's `without_bound` and
/// `gohari`), for `input` priced under `sens` (the table form for a table).
pub fn preview_extras(
    plan: &Plan,
    input: &Input,
    ledger_order: Order,
    sens: &Sensitivity,
    dataset_delta: Option<f64>,
) -> Map<String, Value> {
    struct Extras<'a> {
        input: &'a Input,
        ledger_order: Order,
        sens: &'a Sensitivity,
        dataset_delta: Option<f64>,
    }
    impl mechanisms::CalibratedVisitor for Extras<'_> {
        type Output = Map<String, Value>;
        fn visit<M: Registered>(self, spec: &M::Spec, draw: &M::Draw) -> Map<String, Value> {
            M::preview_extras(
                spec,
                draw,
                self.input,
                self.ledger_order,
                self.sens,
                self.dataset_delta,
            )
        }
    }
    plan.calibrated.visit(Extras {
        input,
        ledger_order,
        sens,
        dataset_delta,
    })
}

impl utoipa::PartialSchema for VectorForecast {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        mechanisms::forecast_schema().into()
    }
}

impl utoipa::ToSchema for VectorForecast {
    fn schemas(schemas: &mut Vec<(String, crate::schema::SchemaRef)>) {
        mechanisms::forecast_schemas(schemas);
    }
}

/// Typed specs for the tests of every module (as a request would parse them).
#[cfg(test)]
pub(crate) mod specs {
    use super::mechanisms::{diffuse, dirichlet, explicit, noise, posterior, DirichletDraw};
    use super::{Plan, Spec, Target};
    use crate::privacy::bounded::CellValues;
    use crate::privacy::{Epsilon, Prior};

    pub fn dirichlet(target: Target, prior: f64) -> Spec {
        dirichlet_bounded(target, prior, None)
    }

    pub fn dirichlet_bounded(target: Target, prior: f64, lower: Option<CellValues>) -> Spec {
        Spec::Dirichlet(dirichlet::Spec {
            settings: dirichlet::Settings { prior, lower },
            target,
        })
    }

    pub fn posterior(target: Target, r: f64) -> Spec {
        posterior_shaped(target, r, None, None)
    }

    pub fn posterior_shaped(
        target: Target,
        r: f64,
        shape: Option<CellValues>,
        lower: Option<CellValues>,
    ) -> Spec {
        Spec::Posterior(posterior::Spec {
            settings: posterior::Settings { r, shape, lower },
            target,
        })
    }

    pub fn diffuse(target: Target, alpha: Prior) -> Spec {
        diffuse_bounded(target, CellValues::from(&alpha), None)
    }

    pub fn diffuse_bounded(target: Target, alpha: CellValues, lower: Option<CellValues>) -> Spec {
        Spec::Diffuse(diffuse::Spec {
            settings: diffuse::Settings { alpha, lower },
            target,
        })
    }

    pub fn explicit(r: f64, alpha: Prior, cap: Option<Epsilon>) -> Spec {
        Spec::Explicit(explicit::Spec {
            settings: explicit::Settings {
                r,
                alpha: CellValues::from(&alpha),
                lower: None,
            },
            cap,
        })
    }

    pub fn gaussian(target: Target) -> Spec {
        Spec::Gaussian(noise::Spec::Calibrated {
            target,
            smoothing: noise::Smoothing::Projected,
        })
    }

    pub fn laplace(target: Target) -> Spec {
        Spec::Laplace(noise::Spec::Calibrated {
            target,
            smoothing: noise::Smoothing::Projected,
        })
    }

    /// The Dirichlet draw of a plan of the family.
    pub fn dirichlet_draw(plan: &Plan) -> &DirichletDraw {
        let any: &dyn std::any::Any = plan.draw();
        any.downcast_ref().expect("a Dirichlet-family plan")
    }
}

#[cfg(test)]
mod tests {
    use super::specs::*;
    use super::*;
    use crate::ledger::charge::CURVE_RELATIVE_ERROR;
    use crate::privacy::bounded::CellValues;
    use crate::privacy::curve::Pricing;
    use crate::privacy::exact::exact_rdp;
    use crate::privacy::types::Relation;
    use crate::privacy::Prior;

    /// The figures quoted in docs/PRIVACY.md ("Public lower bound", "Gain"): at λ₀ = 22,
    /// ε = 0.5, replace one, d = 3, a bound L = 5 buys a larger r for `dirichlet` and
    /// `diffuse` and a smaller α for `posterior` (α + rL unchanged), each still priced at ε.
    #[test]
    fn lower_bound_gain_at_l_5() {
        let t = Target {
            epsilon: Epsilon::new(0.5).unwrap(),
            order: Order::new(22.0).unwrap(),
        };
        let s = Sensitivity::REPLACE_ONE;
        let l5 = || Some(CellValues::Uniform(5.0));
        let solved = |spec: Spec| {
            let p = plan(&spec, 3, t.order, &s).unwrap();
            assert!((0.5 * (1.0 - 1e-9)..=0.5).contains(&p.price), "{}", p.price);
            let d = dirichlet_draw(&p);
            (d.r, d.base.at(0))
        };
        let near = |got: f64, quoted: f64| {
            assert!((got / quoted - 1.0).abs() < 5e-4, "{got} is not {quoted}");
        };
        let one = || CellValues::Uniform(1.0);
        let (r0, _) = solved(dirichlet_bounded(t, 1.0, None));
        let (r5, _) = solved(dirichlet_bounded(t, 1.0, l5()));
        near(r0, 1.9054);
        near(r5, 2.0199);
        let (d0, _) = solved(diffuse_bounded(t, one(), None));
        let (d5, _) = solved(diffuse_bounded(t, one(), l5()));
        near(d0, 0.04762);
        near(d5, 0.06250);
        let (_, a0) = solved(posterior_shaped(t, 1.0, Some(one()), None));
        let (_, a5) = solved(posterior_shaped(t, 1.0, Some(one()), l5()));
        near(a0, 45.78);
        near(a5, 40.78);
        assert!((a5 + 5.0 - a0).abs() < 1e-9 * a0, "{a0} {a5}");
    }

    fn order(v: f64) -> Order {
        Order::new(v).unwrap()
    }

    fn calibrated_specs(target: Target) -> Vec<Spec> {
        vec![
            dirichlet(target, 1.0),
            posterior(target, 1.0),
            diffuse(target, Prior::PerCell(vec![10.0, 12.0, 30.0, 11.0])),
            gaussian(target),
            laplace(target),
            dirichlet_bounded(target, 0.5, Some(CellValues::Uniform(2.0))),
            posterior_shaped(
                target,
                1.0,
                Some(CellValues::PerCell(vec![1.0, 2.0, 1.0, 3.0])),
                None,
            ),
            diffuse_bounded(
                target,
                CellValues::Uniform(0.5),
                Some(CellValues::PerCell(vec![4.0, 3.0, 5.0, 4.5])),
            ),
        ]
    }

    fn relations() -> [Sensitivity; 3] {
        [
            Sensitivity::REPLACE_ONE,
            Sensitivity::ADD_REMOVE_ONE,
            Sensitivity::new(3.0, 1.5).unwrap(),
        ]
    }

    /// A budget B admits exactly k releases asked at B/k, for every k ≤ 10,000,
    /// every calibrated mechanism and every relation — by the ledger's own rule
    /// (`BudgetState::admits` is `spent + charge ≤ total`), and each charge is the largest grid
    /// value ≤ B/k and at least the inflated curve.
    #[test]
    fn budget_admits_exactly_k_releases_at_b_over_k() {
        let ledger = order(4.0);
        let d = 4;
        for budget in [1.0, 3.0] {
            let total = Units::floor(budget).unwrap();
            for k in 1..=10_000u32 {
                // Every k for B = 1, every 5th for B = 3 (the test runs ~100 s in debug).
                if budget != 1.0 && k % 5 != 0 {
                    continue;
                }
                let asked = budget / k as f64;
                let target = Target {
                    epsilon: Epsilon::new(asked).unwrap(),
                    order: ledger,
                };
                let grid = Units::floor(asked).unwrap();
                for sens in relations() {
                    // Every k for the Dirichlet calibrations; the baselines' solvers are the
                    // same `settle` contract, so every 7th k keeps the test fast.
                    for (i, spec) in calibrated_specs(target).iter().enumerate() {
                        // The bounded family's bisection solver is slower still: every 49th k.
                        if (i >= 3 && k % 7 != 0) || (i >= 5 && k % 49 != 0) {
                            continue;
                        }
                        let plan = plan(spec, d, ledger, &sens)
                            .unwrap_or_else(|e| panic!("B={budget} k={k} {spec:?} {sens:?}: {e}"));
                        assert_eq!(plan.charge, grid, "B={budget} k={k} {spec:?}");
                        assert!(plan.charge.to_f64() <= asked);
                        assert!(
                            plan.price * (1.0 + CURVE_RELATIVE_ERROR) <= plan.charge.to_f64(),
                            "B={budget} k={k} {spec:?}: {} > {}",
                            plan.price,
                            plan.charge.to_f64()
                        );
                    }
                }
                let mut spent = Units::ZERO;
                for _ in 0..k {
                    spent = spent.checked_add(grid).unwrap();
                }
                assert!(spent <= total, "B={budget} k={k}: k releases do not fit");
                assert!(
                    spent.checked_add(grid).unwrap() > total,
                    "B={budget} k={k}: a (k+1)-th release fits"
                );
            }
        }
    }

    /// The ledger arithmetic alone, for more budgets (cheap): k·⌊B/k⌋ ≤ ⌊B⌋ < (k+1)·⌊B/k⌋.
    #[test]
    fn grid_splits_for_many_budgets() {
        for budget in [0.1, 0.5, 0.7, 2.0, 10.0, 22.5, 100.0, 1000.0, 8192.0] {
            let total = Units::floor(budget).unwrap();
            for k in 1..=10_000u64 {
                let grid = Units::floor(budget / k as f64).unwrap();
                let fits = grid.raw() as u64 * k;
                assert!(fits <= total.raw() as u64, "B={budget} k={k}");
                assert!(
                    fits + grid.raw() as u64 > total.raw() as u64,
                    "B={budget} k={k}"
                );
            }
        }
    }

    /// Calibrated at another order, or explicit: charged the curve rounded up, which may exceed
    /// the asked ε at the ledger order, and never falls below the exact worst case.
    #[test]
    fn other_orders_and_explicit_are_priced_by_their_curve() {
        let ledger = order(4.0);
        let target = Target {
            epsilon: Epsilon::new(0.5).unwrap(),
            order: order(2.0),
        };
        for sens in [Sensitivity::REPLACE_ONE, Sensitivity::ADD_REMOVE_ONE] {
            let p = plan(&dirichlet(target, 1.0), 4, ledger, &sens).unwrap();
            assert_eq!(p.record.get("pricing"), Some(&serde_json::json!("exact")));
            let draw = dirichlet_draw(&p);
            let star = exact_rdp(ledger, draw.r, &draw.alpha, sens.relation());
            assert!(p.charge.to_f64() >= star * (1.0 + 1.4e-13));
            assert!(p.charge.to_f64() > 0.5);
            let e = plan(&explicit(0.1, Prior::Uniform(5.0), None), 4, ledger, &sens).unwrap();
            let star = exact_rdp(ledger, 0.1, &Prior::Uniform(5.0), sens.relation());
            assert_eq!(e.charge, charge_for(star).unwrap());
        }
        let custom = Sensitivity::new(2.0, 1.0).unwrap();
        assert_eq!(custom.relation(), Relation::Custom);
        let e = plan(
            &explicit(0.1, Prior::Uniform(5.0), None),
            4,
            ledger,
            &custom,
        )
        .unwrap();
        assert_eq!(
            e.record.get("pricing"),
            Some(&serde_json::to_value(Pricing::Bound).unwrap())
        );
    }
}

#[cfg(test)]
mod precision_tests {
    use super::mechanisms::family::{min_shift_ulps, MIN_SHIFT_ULPS};
    use super::specs::*;
    use super::*;
    use crate::privacy::{Counts, Prior};

    fn order(v: f64) -> Order {
        Order::new(v).unwrap()
    }

    fn counts(v: &[f64]) -> Counts {
        Counts::new(v.to_vec(), 1000).unwrap()
    }

    fn planned(spec: Spec, ledger: f64, sens: &Sensitivity, x: &[f64]) -> Result<Plan, PlanError> {
        let p = plan(&spec, x.len(), order(ledger), sens)?;
        p.draw().check(&counts(x), sens)?;
        Ok(p)
    }

    /// The price's large-shape bound r(1 + 2⁻¹⁷) is 4 ulps of the larger shape, at most 2·2⁻²⁰r
    /// by the guard (docs/PRIVACY.md, "The realised shift"): the constants move together.
    #[test]
    fn realised_shift_bound_matches_the_guard() {
        use crate::privacy::exact::{REALISED_FAR, SHIFT_ERROR_ULPS};
        assert_eq!(REALISED_FAR, SHIFT_ERROR_ULPS * 2.0 / MIN_SHIFT_ULPS);
        assert_eq!(REALISED_FAR, 2f64.powi(-17));
    }

    /// A custom neighbour may change every cell, so its guard asks for 2^⌈log₂(d)/2⌉ ≥ √d times
    /// more ulps; the histogram relations' stays at 2²⁰.
    #[test]
    fn custom_guard_scales_with_the_square_root_of_d() {
        let custom = Sensitivity::new(2.0, 1.0).unwrap();
        for (d, factor) in [
            (2usize, 2.0),
            (4, 2.0),
            (5, 4.0),
            (16, 4.0),
            (17, 8.0),
            (1 << 20, 1024.0),
        ] {
            assert_eq!(
                min_shift_ulps(&custom, d),
                MIN_SHIFT_ULPS * factor,
                "d = {d}"
            );
            assert!(factor * factor >= d as f64);
            assert_eq!(min_shift_ulps(&Sensitivity::REPLACE_ONE, d), MIN_SHIFT_ULPS);
        }
        // Shapes 2⁴⁰ (ulp 2⁻¹²) with r = 2⁸ = 2²⁰ ulps: a histogram draw passes, a custom one of
        // 4 cells needs 2²¹ ulps and is refused, and passes at r = 2⁹.
        let explicit = |r: f64| explicit(r, Prior::Uniform(2f64.powi(40)), None);
        let x = [0.0; 4];
        let ok = plan(&explicit(256.0), 4, order(1.5), &Sensitivity::REPLACE_ONE).unwrap();
        ok.draw()
            .check(&counts(&x), &Sensitivity::REPLACE_ONE)
            .unwrap();
        let p = plan(&explicit(256.0), 4, order(1.5), &custom).unwrap();
        assert!(matches!(
            p.draw().check(&counts(&x), &custom),
            Err(PlanError::BeyondPrecision(_))
        ));
        let p = plan(&explicit(512.0), 4, order(1.5), &custom).unwrap();
        p.draw().check(&counts(&x), &custom).unwrap();
    }

    /// The cases of the exact-pricing audit.
    #[test]
    fn audit_cases_are_refused_or_priced_safely() {
        let s = Sensitivity::REPLACE_ONE;
        // posterior r = 1000 at ε = 1e-6, λ₀ = 22: α ≈ 5e12, rΔ∞ = 1000 < 2²⁰·ulp(α).
        let target = Target {
            epsilon: Epsilon::new(1e-6).unwrap(),
            order: order(22.0),
        };
        let e = planned(posterior(target, 1000.0), 22.0, &s, &[5.0, 3.0]);
        assert!(matches!(e, Err(PlanError::BeyondPrecision(_))), "{e:?}");
        // explicit r = 1, α = 1e30, counts near 2⁴⁶: shapes beyond 2⁵⁰.
        let explicit = |r: f64, a: f64| explicit(r, Prior::Uniform(a), None);
        let e = planned(explicit(1.0, 1e30), 2.0, &s, &[7e13, 7e13 + 1.0]);
        assert!(matches!(e, Err(PlanError::BeyondPrecision(_))), "{e:?}");
        // Dir(1e33, 1e33, 1e33): the sampler returned one fixed vector.
        let e = planned(explicit(1.0, 1e33), 2.0, &s, &[0.0, 0.0, 0.0]);
        assert!(matches!(e, Err(PlanError::BeyondPrecision(_))), "{e:?}");
        // Shapes at the cap with a shift of 2²⁰ ulps pass; one ulp less fails.
        let big = 2f64.powi(49);
        let ok = planned(
            explicit(1.0, big),
            2.0,
            &Sensitivity::ADD_REMOVE_ONE,
            &[0.0, 0.0],
        );
        // ulp(2⁴⁹) = 2⁻³, 2²⁰·2⁻³ = 2¹⁷ > r = 1: refused; r = 2¹⁷ at the same shape passes.
        assert!(matches!(ok, Err(PlanError::BeyondPrecision(_))), "{ok:?}");
        let r = 2f64.powi(17);
        let p = plan(
            &explicit(r, 4.0 * big),
            2,
            order(1.5),
            &Sensitivity::ADD_REMOVE_ONE,
        )
        .unwrap();
        assert!(p
            .draw()
            .check(&counts(&[0.0, 0.0]), &Sensitivity::ADD_REMOVE_ONE)
            .is_err());
        let p = plan(
            &explicit(r, big),
            2,
            order(1.5),
            &Sensitivity::ADD_REMOVE_ONE,
        )
        .unwrap();
        p.draw()
            .check(&counts(&[0.0, 0.0]), &Sensitivity::ADD_REMOVE_ONE)
            .unwrap();
        // explicit with tiny r and α: priced (≈ λr²/α² scale), not refused as "no guarantee".
        for sens in [s, Sensitivity::new(2.0, 1.0).unwrap()] {
            let p = planned(explicit(1e-170, 1e-168), 2.0, &sens, &[3.0, 0.0]).unwrap();
            assert!(p.price > 1e-5 && p.price < 1.0, "{sens:?}: {}", p.price);
        }
    }
}

/// The charge covers the divergence of the Gamma shapes the f64 code actually
/// forms, fl(fl(r·x) + α), not only of the real-number shapes r·x + α.
#[cfg(test)]
mod realised_shift_tests {
    use super::mechanisms::DirichletDraw;
    use super::specs::*;
    use super::*;
    use crate::privacy::bounded::{clamp_excess, CellValues};
    use crate::privacy::exact::{cell_divergences, EXACT_RELATIVE_ERROR};
    use crate::privacy::sampler::release_shapes;
    use crate::privacy::types::Relation;
    use crate::privacy::{Counts, DirichletParams, Prior};

    fn order(v: f64) -> Order {
        Order::new(v).unwrap()
    }

    /// What the sampler is handed for `counts` (as `execute_release` and the seeds' draw do).
    fn drawn_shapes(draw: &DirichletDraw, counts: &Counts) -> Vec<f64> {
        let counts = match &draw.lower {
            None => counts.clone(),
            Some(lower) => clamp_excess(counts, lower),
        };
        let params = DirichletParams {
            r: draw.r,
            alpha: draw.alpha.clone(),
        };
        release_shapes(&counts, &params).unwrap()
    }

    /// The realised shift hi − lo, rounded up when the subtraction is not exact.
    fn shift(lo: f64, hi: f64) -> f64 {
        let d = hi - lo;
        if lo + d == hi && hi - d == lo {
            d
        } else {
            crate::privacy::exact::next_up(d)
        }
    }

    /// Counts of the changing cell: every one up to 300, then ×1.37 steps to 10¹⁶ (the guard
    /// stops them long before).
    fn cell_counts() -> Vec<f64> {
        let mut xs: Vec<f64> = (0..=300).map(f64::from).collect();
        let mut x = 301.0f64;
        while x < 1e16 {
            xs.push(x.floor());
            x *= 1.37;
        }
        xs
    }

    /// The f64-emulating brute force: over every count x of a changing cell (x → x + 1) that the
    /// guard admits, the exact one-cell terms of the realised shapes — h(u_k → v_k) for the cell
    /// that loses a record, h(u_l → v_l) for the one that gains it (docs/PRIVACY.md, "The
    /// realised shift": every other cell cancels and the total's term is ≤ 0) — and the exact
    /// divergence of the worst two-cell pair, total term included. Returns (bound, exact pair).
    fn brute_force(draw: &DirichletDraw, ledger: Order, sens: &Sensitivity) -> (f64, f64) {
        let (mut minus, mut plus) = ((0.0f64, 0.0, 0.0, 0.0), (0.0f64, 0.0, 0.0, 0.0));
        for x in cell_counts() {
            let counts = Counts::new(vec![x, x + 1.0], usize::MAX).unwrap();
            if draw.check(&counts, sens).is_err() {
                continue;
            }
            let s = drawn_shapes(draw, &counts);
            let (lo, hi) = (s[0], s[1]);
            let (m, p) = cell_divergences(ledger, lo, shift(lo, hi));
            if m > minus.0 {
                minus = (m, lo, hi, x);
            }
            if p > plus.0 {
                plus = (p, lo, hi, x);
            }
        }
        match sens.relation() {
            Relation::AddRemoveOne => {
                // One cell, and the total moves with it: D = h(cell) − h(total) ≤ h(cell).
                let bound = minus.0.max(plus.0);
                (bound, bound)
            }
            _ => {
                // Cell k (count x_k → x_k − 1) loses, cell l (x_l → x_l + 1) gains.
                let (u_k, v_k) = (minus.2, minus.1);
                let (u_l, v_l) = (plus.1, plus.2);
                let (big_u, big_v) = (u_k + u_l, v_k + v_l);
                let total = if big_v > big_u {
                    cell_divergences(ledger, big_u, shift(big_u, big_v)).1
                } else if big_v < big_u {
                    cell_divergences(ledger, big_v, shift(big_v, big_u)).0
                } else {
                    0.0
                };
                (minus.0 + plus.0, minus.0 + plus.0 - total)
            }
        }
    }

    #[test]
    fn charge_covers_the_realised_shapes_of_every_neighbour() {
        let target = |e: f64, o: f64| Target {
            epsilon: Epsilon::new(e).unwrap(),
            order: order(o),
        };
        let mut checked = 0;
        for sens in [Sensitivity::REPLACE_ONE, Sensitivity::ADD_REMOVE_ONE] {
            for ledger in [1.01, 2.0, 22.0] {
                let t = target(1e-6, ledger);
                let specs = [
                    // The audit's case: α ≈ 1.5e10, where fl(r·x + α) moves the shift by ~2e-6.
                    posterior(t, 123.456),
                    posterior(t, 1000.0),
                    dirichlet(target(0.05, ledger), 1.0),
                    diffuse(target(0.5, ledger), Prior::Uniform(3.3)),
                    posterior_shaped(
                        t,
                        77.7,
                        Some(CellValues::Uniform(1.0)),
                        Some(CellValues::Uniform(2.5)),
                    ),
                ];
                for spec in specs {
                    let p = match plan(&spec, 2, order(ledger), &sens) {
                        Ok(p) => p,
                        Err(e) => panic!("{spec:?}: {e}"),
                    };
                    let (bound, pair) = brute_force(dirichlet_draw(&p), order(ledger), &sens);
                    let charge = p.charge.to_f64();
                    assert!(
                        pair * (1.0 - EXACT_RELATIVE_ERROR) <= charge,
                        "{sens:?} λ₀ {ledger} {spec:?}: the realised pair's divergence {pair} \
                         exceeds the charge {charge} by {:e}",
                        pair / charge - 1.0
                    );
                    assert!(
                        bound * (1.0 - EXACT_RELATIVE_ERROR) <= charge,
                        "{sens:?} λ₀ {ledger} {spec:?}: {bound} > {charge}"
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 30);
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Random calibrations (large priors included, where ulp(α) is a visible part of r, and
        /// ε next to the pole): the charge covers the f64-emulated brute force over neighbours.
        #[test]
        fn charge_covers_realised_shapes_for_random_calibrations(
            lambda in 1.01f64..30.0,
            log_eps in -14.0f64..2.5,
            log_fixed in -2.0f64..7.0,
            which in 0usize..4,
            add_remove in proptest::bool::ANY,
        ) {
            let sens = if add_remove { Sensitivity::ADD_REMOVE_ONE } else { Sensitivity::REPLACE_ONE };
            let target = Target {
                epsilon: Epsilon::new(log_eps.exp()).unwrap(),
                order: order(lambda),
            };
            let fixed = log_fixed.exp();
            let spec = match which {
                0 => posterior(target, fixed),
                1 => diffuse(target, Prior::Uniform(fixed)),
                2 => dirichlet(target, fixed),
                _ => posterior_shaped(
                    target,
                    fixed,
                    Some(CellValues::Uniform(1.0)),
                    Some(CellValues::Uniform(1.7)),
                ),
            };
            // Refusals (beyond the curve's reach, or the guard) charge nothing.
            if let Ok(p) = plan(&spec, 2, order(lambda), &sens) {
                let (bound, pair) = brute_force(dirichlet_draw(&p), order(lambda), &sens);
                let charge = p.charge.to_f64();
                prop_assert!(pair * (1.0 - EXACT_RELATIVE_ERROR) <= charge, "{:?}: {} > {}", spec, pair, charge);
                prop_assert!(bound * (1.0 - EXACT_RELATIVE_ERROR) <= charge, "{:?}: {} > {}", spec, bound, charge);
            }
        }
    }

    /// Next to the pole (diffuse α = 1, order 3.7, ε = 10: r within ~1e-11 of α/(λ − 1)) one
    /// rounding of fl(r + α) is a large part of the distance to the pole; the calibration
    /// solves against the realised price, so the charge still covers the realised shapes.
    #[test]
    fn near_the_pole_the_charge_covers_the_realised_shapes() {
        for sens in [Sensitivity::REPLACE_ONE, Sensitivity::ADD_REMOVE_ONE] {
            for (alpha, e) in [(1.0, 10.0), (0.37, 9.0), (5.0, 11.0)] {
                let t = Target {
                    epsilon: Epsilon::new(e).unwrap(),
                    order: order(3.7),
                };
                let spec = diffuse(t, Prior::Uniform(alpha));
                let p = plan(&spec, 2, order(3.7), &sens).unwrap();
                let (bound, _) = brute_force(dirichlet_draw(&p), order(3.7), &sens);
                assert!(
                    bound * (1.0 - EXACT_RELATIVE_ERROR) <= p.charge.to_f64(),
                    "{sens:?} α {alpha} ε {e}: {bound} > {}",
                    p.charge.to_f64()
                );
            }
        }
    }
}
