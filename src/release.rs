//! From a parsed release request to a priced plan and a draw. Pure: no I/O, no async.
//!
//! Every plan is priced by the RDP curve of the mechanism it actually runs, at the dataset's
//! ledger order λ₀, whatever order it was calibrated at (PRIVACY-MATH.md: "this single formula
//! prices every release"). The charge is that price rounded *up* to the ledger grid.

pub mod seeds;

use serde::Serialize;
use serde_json::{json, Value};

use crate::ledger::{charge_for, Units, UnitsError};
use crate::privacy::calibrate::{gaussian_sigma, laplace_scale};
use crate::privacy::curve::{dirichlet_max_order, dirichlet_rdp, gaussian_rdp, laplace_rdp};
use crate::privacy::sampler::{release_shapes, try_os_rng, try_sample_dirichlet};
use crate::privacy::utility::{dirichlet_forecast, Forecast};
use crate::privacy::{
    baseline, calibrate, Calibration, CalibrationError, Counts, DirichletParams, Epsilon, Order,
    Prior, Sensitivity,
};

/// The default base prior a₀ of the `dirichlet` calibration (000 Algorithm 1 uses 1).
pub const DEFAULT_PRIOR: f64 = 1.0;
/// The default concentration r of the `posterior` calibration (001 Theorem 2 with r = 1).
pub const DEFAULT_R: f64 = 1.0;
/// Confidence level 1 − β of the ℓ2 forecast.
pub const FORECAST_BETA: f64 = 0.05;

/// A calibration target: spend ε at order λ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    pub epsilon: Epsilon,
    pub order: Order,
}

/// Noise of a baseline mechanism: given, or calibrated to a target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Noise {
    Given { value: f64, cap: Option<Epsilon> },
    Calibrated(Target),
}

/// A fully parsed mechanism choice.
#[derive(Debug, Clone, PartialEq)]
pub enum Spec {
    Dirichlet {
        target: Target,
        prior: f64,
    },
    Posterior {
        target: Target,
        r: f64,
    },
    Diffuse {
        target: Target,
        alpha: Prior,
    },
    Explicit {
        r: f64,
        alpha: Prior,
        cap: Option<Epsilon>,
    },
    Gaussian(Noise),
    Laplace(Noise),
    /// The Dirichlet family with a public lower bound or a prior shape (`seeds`).
    Bounded(seeds::BoundedSpec),
    /// Seed 002's Hellinger exponential mechanism (`seeds`).
    Exponential(seeds::ExponentialSpec),
}

/// What to draw.
#[derive(Debug, Clone, PartialEq)]
pub enum Draw {
    Dirichlet {
        r: f64,
        alpha: Prior,
    },
    Gaussian {
        sigma: f64,
    },
    Laplace {
        scale: f64,
    },
    /// Dir(r·max(x − L, 0) + alpha), alpha the effective prior α + rL (`privacy::bounded`).
    Bounded {
        r: f64,
        alpha: Prior,
        lower: crate::privacy::bounded::CellValues,
    },
    /// Seed 002: j* over Beta(α + j, β + n − j), released as the posterior mean.
    Exponential {
        candidates: crate::privacy::exponential::BetaCandidates,
        epsilon: f64,
    },
}

/// A priced release, ready to be drawn and charged.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub draw: Draw,
    /// The RDP curve at the ledger order (before rounding).
    pub price: f64,
    /// What the ledger charges: `price` rounded up to the grid.
    pub charge: Units,
    /// The mechanism record returned to clients and stored with the release.
    pub record: Value,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Infeasible(#[from] CalibrationError),
    #[error("the mechanism has no RDP guarantee at the ledger order {ledger_order:?} (its curve is finite only below order {max_order:?})")]
    NoGuarantee { ledger_order: f64, max_order: f64 },
    #[error(
        "the mechanism costs {price:?} at order {order:?}, more than the epsilon {cap:?} given"
    )]
    CostExceedsCap { price: f64, cap: f64, order: f64 },
    /// The price exceeds anything the ledger can hold, so no budget admits it.
    #[error("the mechanism costs {price:?} at order {order:?}, more than any budget")]
    TooExpensive { price: f64, order: f64 },
    #[error("{0}")]
    Parameter(String),
}

#[derive(Serialize)]
struct CalibrationRecord {
    order: f64,
    epsilon: f64,
}

pub(crate) fn target_record(t: &Target) -> Value {
    json!(CalibrationRecord {
        order: t.order.get(),
        epsilon: t.epsilon.get()
    })
}

/// Calibrate (if needed) and price `spec` for a d-cell release on a dataset with `sens`,
/// charged at `ledger_order`.
pub fn plan(
    spec: &Spec,
    d: usize,
    ledger_order: Order,
    sens: &Sensitivity,
) -> Result<Plan, PlanError> {
    let (draw, record, cap) = match spec {
        Spec::Dirichlet { target, prior } => {
            let p = calibrate(
                &Calibration::Dirichlet { prior: *prior },
                target.order,
                target.epsilon,
                sens,
            )?;
            let record = json!({"kind": "dirichlet", "r": p.r, "alpha": p.alpha, "prior": prior, "calibration": target_record(target)});
            (
                Draw::Dirichlet {
                    r: p.r,
                    alpha: p.alpha,
                },
                record,
                None,
            )
        }
        Spec::Posterior { target, r } => {
            let p = calibrate(
                &Calibration::Posterior { r: *r },
                target.order,
                target.epsilon,
                sens,
            )?;
            let record = json!({"kind": "posterior", "r": p.r, "alpha": p.alpha, "calibration": target_record(target)});
            (
                Draw::Dirichlet {
                    r: p.r,
                    alpha: p.alpha,
                },
                record,
                None,
            )
        }
        Spec::Diffuse { target, alpha } => {
            alpha
                .check_dimension(d)
                .map_err(|e| PlanError::Parameter(e.to_string()))?;
            let p = calibrate(
                &Calibration::Diffuse {
                    alpha: alpha.clone(),
                },
                target.order,
                target.epsilon,
                sens,
            )?;
            let record = json!({"kind": "diffuse", "r": p.r, "alpha": p.alpha, "calibration": target_record(target)});
            (
                Draw::Dirichlet {
                    r: p.r,
                    alpha: p.alpha,
                },
                record,
                None,
            )
        }
        Spec::Explicit { r, alpha, cap } => {
            alpha
                .check_dimension(d)
                .map_err(|e| PlanError::Parameter(e.to_string()))?;
            let record = json!({"kind": "explicit", "r": r, "alpha": alpha});
            (
                Draw::Dirichlet {
                    r: *r,
                    alpha: alpha.clone(),
                },
                record,
                *cap,
            )
        }
        Spec::Gaussian(noise) => {
            let (sigma, cap, calibration) = match noise {
                Noise::Given { value, cap } => (*value, *cap, None),
                Noise::Calibrated(t) => (
                    gaussian_sigma(t.order, t.epsilon, sens),
                    None,
                    Some(target_record(t)),
                ),
            };
            let mut record = json!({"kind": "gaussian", "sigma": sigma});
            if let Some(c) = calibration {
                record["calibration"] = c;
            }
            (Draw::Gaussian { sigma }, record, cap)
        }
        Spec::Laplace(noise) => {
            let (scale, cap, calibration) = match noise {
                Noise::Given { value, cap } => (*value, *cap, None),
                Noise::Calibrated(t) => (
                    laplace_scale(t.order, t.epsilon, sens, d)?,
                    None,
                    Some(target_record(t)),
                ),
            };
            let mut record = json!({"kind": "laplace", "scale": scale});
            if let Some(c) = calibration {
                record["calibration"] = c;
            }
            (Draw::Laplace { scale }, record, cap)
        }
        Spec::Bounded(b) => seeds::plan_bounded(b, d, sens)?,
        Spec::Exponential(e) => {
            let (draw, record) = seeds::plan_exponential(e)?;
            (draw, record, None)
        }
    };
    let price = price(&draw, ledger_order, sens, d);
    if !price.is_finite() {
        let max_order = match &draw {
            Draw::Dirichlet { r, alpha } | Draw::Bounded { r, alpha, .. } => {
                dirichlet_max_order(*r, alpha.min(), sens)
            }
            _ => f64::INFINITY,
        };
        return Err(PlanError::NoGuarantee {
            ledger_order: ledger_order.get(),
            max_order,
        });
    }
    if let Some(cap) = cap {
        // The cap is checked against the price the ledger would charge, not the raw curve.
        let charged = charge_for(price)
            .map(Units::to_f64)
            .unwrap_or(f64::INFINITY);
        if charged > cap.get() {
            return Err(PlanError::CostExceedsCap {
                price: charged,
                cap: cap.get(),
                order: ledger_order.get(),
            });
        }
    }
    let charge = match charge_for(price) {
        Ok(units) => units,
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
    Ok(Plan {
        draw,
        price,
        charge,
        record,
    })
}

/// The RDP cost of running `draw` once, at `order`.
pub fn price(draw: &Draw, order: Order, sens: &Sensitivity, d: usize) -> f64 {
    match draw {
        Draw::Dirichlet { r, alpha } => dirichlet_rdp(order, *r, alpha.min(), sens),
        Draw::Gaussian { sigma } => gaussian_rdp(order, *sigma, sens),
        Draw::Laplace { scale } => laplace_rdp(order, *scale, sens, d),
        // The bounded draw is the Dirichlet mechanism on max(x − L, 0) with prior α + rL.
        Draw::Bounded { r, alpha, .. } => price(
            &Draw::Dirichlet {
                r: *r,
                alpha: alpha.clone(),
            },
            order,
            sens,
            d,
        ),
        Draw::Exponential { epsilon, .. } => crate::privacy::exponential::exponential_rdp(
            order.get(),
            crate::privacy::exponential::priced_epsilon(*epsilon),
        ),
    }
}

/// Draw the release. CPU-bound: large draws belong on a blocking thread. Fails closed (never
/// panics) on a shape that is not finite and positive or an OS entropy failure.
pub fn execute(draw: &Draw, counts: &Counts) -> Result<Vec<f64>, String> {
    execute_release(draw, counts).map(|(y, _)| y)
}

/// [`execute`], plus what the draw adds to the mechanism record (the exponential mechanism's
/// selected candidate); the caller stores both together.
pub fn execute_release(draw: &Draw, counts: &Counts) -> Result<(Vec<f64>, Option<Value>), String> {
    let mut rng = try_os_rng().map_err(|e| format!("the OS random source failed: {e}"))?;
    if let Some(out) = seeds::execute_seed(draw, counts, &mut rng) {
        return out;
    }
    let y = match draw {
        Draw::Dirichlet { r, alpha } => {
            let params = DirichletParams {
                r: *r,
                alpha: alpha.clone(),
            };
            let shapes = release_shapes(counts, &params).map_err(|e| e.to_string())?;
            try_sample_dirichlet(&shapes, &mut rng).map_err(|e| e.to_string())
        }
        Draw::Gaussian { sigma } => Ok(baseline::gaussian_release(counts, *sigma, &mut rng)),
        Draw::Laplace { scale } => Ok(baseline::laplace_release(counts, *scale, &mut rng)),
        Draw::Bounded { .. } | Draw::Exponential { .. } => {
            Err("a seeds draw reached the Dirichlet sampler".into())
        }
    }?;
    Ok((y, None))
}

/// Check, before anything is drawn, that every Gamma shape r·x_i + α_i of a Dirichlet draw is
/// finite and positive (huge counts times a huge explicit r could overflow). Baselines have no
/// shapes.
pub fn check_shapes(draw: &Draw, counts: &Counts) -> Result<(), PlanError> {
    if let Draw::Dirichlet { r, alpha } = draw {
        let params = DirichletParams {
            r: *r,
            alpha: alpha.clone(),
        };
        release_shapes(counts, &params).map_err(|e| PlanError::Parameter(e.to_string()))?;
    }
    seeds::check_bounded_shapes(draw, counts)
}

/// The utility forecast of a plan (Dirichlet draws only; baselines have none).
pub fn forecast(draw: &Draw, counts: &Counts) -> Option<Forecast> {
    if let Draw::Bounded { r, alpha, lower } = draw {
        // On data that respects the bound the draw is Dir(r·x + α), α = alpha − rL; forecast
        // that. Data below the bound (or α = 0 somewhere) gets no forecast.
        let d = counts.len();
        let respects = counts
            .as_slice()
            .iter()
            .enumerate()
            .all(|(i, &x)| x >= lower.at(i));
        // α may be 0 (Gohari's draw); the forecasts' formulas hold for α ≥ 0.
        let base: Vec<f64> = (0..d)
            .map(|i| (alpha.at(i) - r * lower.at(i)).max(0.0))
            .collect();
        if !respects {
            return None;
        }
        let min = base.iter().copied().fold(f64::INFINITY, f64::min);
        let f = dirichlet_forecast(*r, base.iter().sum(), min, counts.total(), d, FORECAST_BETA);
        let finite = [f.l2_bound, f.l2_bound_confidence, f.max_cell_variance]
            .iter()
            .all(|v| v.is_finite());
        return finite.then_some(f);
    }
    match draw {
        Draw::Dirichlet { r, alpha } => {
            let d = counts.len();
            let f = dirichlet_forecast(
                *r,
                alpha.total(d),
                alpha.min(),
                counts.total(),
                d,
                FORECAST_BETA,
            );
            let finite = [f.l2_bound, f.l2_bound_confidence, f.max_cell_variance]
                .iter()
                .all(|v| v.is_finite())
                && f.kl_tail
                    .as_ref()
                    .is_none_or(|k| k.eta.is_finite() && k.probability.is_finite());
            finite.then_some(f)
        }
        _ => None,
    }
}
