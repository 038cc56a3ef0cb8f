//! From a parsed release request to a priced plan and a draw. Pure: no I/O, no async.
//!
//! Every plan is priced at the dataset's ledger order λ₀ by the curve of the mechanism it
//! actually runs, whatever order it was calibrated at: the exact worst case ε* for Dirichlet
//! draws on the histogram relations, 001 Corollary 3 on custom sensitivities
//! (`privacy::curve::dirichlet_price`). A release calibrated at λ₀ to ε is charged the largest
//! ledger-grid value ≤ ε; every other one its price inflated and rounded *up* to the grid.

pub mod bounded;
pub mod exponential;
pub mod record;
pub mod request;
pub mod table;
pub mod workload;

use serde::Serialize;

use record::{Mechanism, PriorRecord, Selection};
use request::Kind;

use crate::ledger::{charge_for, Units, UnitsError};
use crate::privacy::curve::{dirichlet_max_order, dirichlet_price, Pricing};
use crate::privacy::discrete::{self, MAX_NOISE_SCALE};
use crate::privacy::sampler::{release_shapes, try_os_rng, try_sample_dirichlet, SampleError};
use crate::privacy::utility::{dirichlet_forecast, Forecast, SelectionForecast};
use crate::privacy::{
    baseline, calibrate, Calibration, CalibrationError, Counts, DirichletParams, Epsilon, Order,
    Prior, Sensitivity,
};

/// The default base prior a₀ of the `dirichlet` calibration (000 Algorithm 1 uses 1).
pub const DEFAULT_PRIOR: f64 = 1.0;
/// The default concentration r of the `posterior` calibration (001 Theorem 2 with r = 1).
pub const DEFAULT_R: f64 = 1.0;
/// β of the forecasts: each bound holds with probability 1 − β.
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
    /// The Dirichlet family with a public lower bound or a prior shape (`bounded`).
    Bounded(bounded::BoundedSpec),
    /// Seed 002's Hellinger exponential mechanism (`exponential`).
    Exponential(exponential::ExponentialSpec),
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
    pub record: Mechanism,
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
    /// The release's f64 arithmetic cannot carry the shift the price assumes
    /// (docs/PRIVACY.md, "Floating point").
    #[error("{0}")]
    BeyondPrecision(String),
}

/// rΔ∞ must be at least this many ulps of the largest shape (2²⁰): the shapes r·x + α are
/// formed in f64, so a neighbour's shift of rΔ∞ arrives as rΔ∞ ± ½ulp; at 2²⁰ ulps that is a
/// relative error below 2⁻²¹ of the shift, and the shift spans ≥ 2²⁰/3 of the sampler's
/// resolution steps (`sampler::MAX_SHAPE`). Below it the divergence can exceed the charge by
/// orders of magnitude (posterior r = 1000 at ε = 1e-6: 268×).
pub const MIN_SHIFT_ULPS: f64 = 1_048_576.0;

/// The largest ledger-grid value ≤ the asked ε (issue 11: k releases asked at B/k fit a budget
/// B exactly). Calibrations solve for this value, never for more than was asked.
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
/// that value). Every other release — calibrated at another order, explicit, given noise — is
/// charged its curve at the ledger order, inflated and rounded up.
pub fn plan(
    spec: &Spec,
    d: usize,
    ledger_order: Order,
    sens: &Sensitivity,
) -> Result<Plan, PlanError> {
    // The grid target of a calibrated spec, when it is charged at its own order.
    let split = match spec {
        Spec::Dirichlet { target, .. }
        | Spec::Posterior { target, .. }
        | Spec::Diffuse { target, .. }
        | Spec::Gaussian(Noise::Calibrated(target))
        | Spec::Laplace(Noise::Calibrated(target)) => Some(on_grid(target)?),
        Spec::Bounded(b) => b.target().map(on_grid).transpose()?,
        _ => None,
    };
    let grid = |t: &Target| {
        split
            .filter(|g| g.order == t.order && g.epsilon <= t.epsilon)
            .unwrap_or(*t)
    };
    let (draw, record, cap) = match spec {
        Spec::Dirichlet { target, prior } => {
            let p = calibrate(
                &Calibration::Dirichlet { prior: *prior },
                target.order,
                grid(target).epsilon,
                sens,
            )?;
            let record = Mechanism {
                prior: Some(PriorRecord::Base(*prior)),
                ..Mechanism::dirichlet(Kind::Dirichlet, p.r, &p.alpha).calibrated(Some(target))
            };
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
                grid(target).epsilon,
                sens,
            )?;
            let record =
                Mechanism::dirichlet(Kind::Posterior, p.r, &p.alpha).calibrated(Some(target));
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
                grid(target).epsilon,
                sens,
            )?;
            let record =
                Mechanism::dirichlet(Kind::Diffuse, p.r, &p.alpha).calibrated(Some(target));
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
            let record = Mechanism::dirichlet(Kind::Explicit, *r, alpha);
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
            discrete::integer_sensitivity(sens).map_err(PlanError::Parameter)?;
            let (sigma, cap, calibration) = match noise {
                Noise::Given { value, cap } => (*value, *cap, None),
                Noise::Calibrated(t) => (
                    discrete::gaussian_sigma(t.order, grid(t).epsilon, sens)?,
                    None,
                    Some(t),
                ),
            };
            check_noise_scale("sigma", sigma)?;
            let record = Mechanism {
                sigma: Some(sigma),
                ..Mechanism::new(Kind::Gaussian).calibrated(calibration)
            };
            (Draw::Gaussian { sigma }, record, cap)
        }
        Spec::Laplace(noise) => {
            discrete::integer_sensitivity(sens).map_err(PlanError::Parameter)?;
            let (scale, cap, calibration) = match noise {
                Noise::Given { value, cap } => (*value, *cap, None),
                Noise::Calibrated(t) => (
                    discrete::laplace_scale(t.order, grid(t).epsilon, sens, d)?,
                    None,
                    Some(t),
                ),
            };
            check_noise_scale("scale", scale)?;
            let record = Mechanism {
                scale: Some(scale),
                ..Mechanism::new(Kind::Laplace).calibrated(calibration)
            };
            (Draw::Laplace { scale }, record, cap)
        }
        Spec::Bounded(b) => match b.target() {
            // Solved for the grid value, recorded with the target asked.
            Some(target) => {
                let (draw, record, cap) =
                    bounded::plan_bounded(&b.with_target(grid(target)), d, sens)?;
                (draw, record.calibrated(Some(target)), cap)
            }
            None => bounded::plan_bounded(b, d, sens)?,
        },
        Spec::Exponential(e) => {
            let (draw, record) = exponential::plan_exponential(e)?;
            (draw, record, None)
        }
    };
    let (price, pricing) = price_with_curve(&draw, ledger_order, sens, d);
    let mut record = record;
    record.pricing = Some(pricing);
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
        // Calibrated at the ledger order: charged the grid target, which the calibration
        // contract puts at or above the inflated curve (checked, not assumed).
        Ok(units) => match split.filter(|g| g.order == ledger_order) {
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
            None => units,
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
    Ok(Plan {
        draw,
        price,
        charge,
        record,
    })
}

/// The RDP cost of running `draw` once, at `order` (within `CURVE_RELATIVE_ERROR`; the
/// charge inflates by it and rounds up).
pub fn price(draw: &Draw, order: Order, sens: &Sensitivity, d: usize) -> f64 {
    price_with_curve(draw, order, sens, d).0
}

/// [`price`] and which curve gave it. A Dirichlet draw on `replace_one`/`add_remove_one` is
/// priced by the exact worst case ε* (`privacy::exact`), on a custom sensitivity by 001
/// Corollary 3 (a bound). The Gaussian curve is exact for the declared Δ2; the Laplace curve
/// is exact for the histogram relations and a worst-case bound for custom ones.
pub fn price_with_curve(draw: &Draw, order: Order, sens: &Sensitivity, d: usize) -> (f64, Pricing) {
    match draw {
        Draw::Dirichlet { r, alpha } => dirichlet_price(order, *r, alpha, sens),
        Draw::Gaussian { sigma } => (
            discrete::gaussian_rdp(order, *sigma, sens),
            discrete::gaussian_pricing(order, sens),
        ),
        Draw::Laplace { scale } => (
            discrete::laplace_rdp(order, *scale, sens, d),
            discrete::laplace_pricing(sens),
        ),
        // The bounded draw is the Dirichlet mechanism on max(x − L, 0) with prior α + rL.
        Draw::Bounded { r, alpha, .. } => dirichlet_price(order, *r, alpha, sens),
        // min(ε, λε²/8) bounds the selection's divergence (module `privacy::exponential`).
        Draw::Exponential { epsilon, .. } => (
            crate::privacy::exponential::exponential_rdp(
                order.get(),
                crate::privacy::exponential::priced_epsilon(*epsilon),
            ),
            Pricing::Bound,
        ),
    }
}

/// Draw the release. CPU-bound: large draws belong on a blocking thread. Fails closed (never
/// panics) on a shape that is not finite and positive or an OS entropy failure.
pub fn execute(draw: &Draw, counts: &Counts) -> Result<Vec<f64>, String> {
    execute_release(draw, counts).map(|(y, _)| y)
}

/// A drawn output and what the draw adds to the mechanism record.
pub type Drawn = (Vec<f64>, Option<Selection>);

/// [`execute`], plus what the draw adds to the mechanism record (the exponential mechanism's
/// selected candidate); the caller stores both together.
pub fn execute_release(draw: &Draw, counts: &Counts) -> Result<Drawn, String> {
    let mut rng = try_os_rng().map_err(|e| format!("the OS random source failed: {e}"))?;
    match draw {
        Draw::Bounded { r, alpha, lower } => {
            return bounded::execute_bounded(*r, alpha, lower, counts, &mut rng).map(|y| (y, None))
        }
        Draw::Exponential {
            candidates,
            epsilon,
        } => return exponential::execute_exponential(candidates, *epsilon, counts, &mut rng),
        _ => {}
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
        Draw::Gaussian { sigma } => {
            baseline::gaussian_release(counts, *sigma, &mut rng).map_err(|e| e.to_string())
        }
        Draw::Laplace { scale } => {
            baseline::laplace_release(counts, *scale, &mut rng).map_err(|e| e.to_string())
        }
        Draw::Bounded { .. } | Draw::Exponential { .. } => {
            Err("a bounded or exponential draw reached the Dirichlet sampler".into())
        }
    }?;
    Ok((y, None))
}

/// Check, before anything is drawn, that every Gamma shape r·x_i + α_i of a Dirichlet draw is
/// finite and positive (huge counts times a huge explicit r could overflow), and that the
/// counts of a baseline are integers (its noise is discrete; the error names the cell, never
/// its value).
///
/// Also the floating-point rules: every shape ≤ `sampler::MAX_SHAPE` (2⁵⁰, where the Gamma
/// sampler is still exact) and rΔ∞ ≥ 2²⁰·ulp(largest shape) ([`MIN_SHIFT_ULPS`]), or the
/// release is refused as `BeyondPrecision`: nothing drawn, nothing charged.
pub fn check_shapes(draw: &Draw, counts: &Counts, sens: &Sensitivity) -> Result<(), PlanError> {
    match draw {
        Draw::Bounded { r, alpha, lower } => {
            let excess = crate::privacy::bounded::clamp_excess(counts, lower);
            let same = Draw::Dirichlet {
                r: *r,
                alpha: alpha.clone(),
            };
            check_shapes(&same, &excess, sens)?;
        }
        Draw::Dirichlet { r, alpha } => {
            let params = DirichletParams {
                r: *r,
                alpha: alpha.clone(),
            };
            let shapes = release_shapes(counts, &params).map_err(|e| match e {
                SampleError::ShapeTooLarge { .. } => PlanError::BeyondPrecision(format!(
                    "{e}; lower r or alpha (the largest supported shape r*count + alpha is 2^50)"
                )),
                _ => PlanError::Parameter(e.to_string()),
            })?;
            let largest = shapes.iter().copied().fold(0.0, f64::max);
            // rΔ∞ rounded down (the price assumes the real product clears the bar).
            let shift = r * sens.linf();
            let shift = if r.mul_add(sens.linf(), -shift) < 0.0 {
                crate::privacy::exact::next_down(shift)
            } else {
                shift
            };
            let needed = min_shift_ulps(sens, counts.len()) * ulp(largest);
            if shift.is_nan() || shift < needed {
                return Err(PlanError::BeyondPrecision(
                    "r times the sensitivity is below 2^20 ulps (times 2^ceil(log2(d)/2) for a custom \
                     sensitivity) of the largest shape r*count + alpha, so a neighbouring dataset's \
                     shift is lost to rounding; raise r or lower alpha"
                        .to_string(),
                ));
            }
        }
        Draw::Gaussian { .. } | Draw::Laplace { .. } => {
            baseline::integer_counts(counts).map_err(|e| PlanError::Parameter(e.to_string()))?;
        }
        Draw::Exponential { .. } => {}
    }
    Ok(())
}

/// The guard's bar in ulps of the largest shape: [`MIN_SHIFT_ULPS`] for the histogram
/// relations (a neighbour changes at most two cells, each priced by its own realised shift);
/// times 2^⌈log₂(d)/2⌉ ≥ √d for a custom sensitivity, whose neighbour may change every cell:
/// Corollary 3 needs ‖realised shifts‖₂ ≤ r(1 + 2⁻¹⁷)·√Δ2², and d cells each off by
/// 8·ulp/√d-ish add up to that (docs/PRIVACY.md, "The realised shift").
fn min_shift_ulps(sens: &Sensitivity, d: usize) -> f64 {
    match sens.relation() {
        crate::privacy::types::Relation::Custom => {
            let log2_d = usize::BITS - d.max(1).saturating_sub(1).leading_zeros();
            MIN_SHIFT_ULPS * 2f64.powi(log2_d.div_ceil(2) as i32)
        }
        _ => MIN_SHIFT_ULPS,
    }
}

/// The gap between `x` (finite, > 0) and the next larger f64.
fn ulp(x: f64) -> f64 {
    f64::from_bits(x.to_bits() + 1) - x
}

/// The discrete samplers take noise scales up to 2⁵² (`discrete::MAX_NOISE_SCALE`); beyond
/// that the noise is ~4.5e15, larger than any count the API admits.
fn check_noise_scale(name: &str, value: f64) -> Result<(), PlanError> {
    if value <= MAX_NOISE_SCALE {
        Ok(())
    } else {
        Err(PlanError::Parameter(format!(
            "the {name} this release needs ({value:e}) is above 2^52, the largest noise scale the gaussian and laplace mechanisms support; ask for a larger epsilon or a smaller {name}"
        )))
    }
}

/// A vector preview's `forecast`: the Dirichlet family's, or the exponential mechanism's.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum VectorForecast {
    Dirichlet(Forecast),
    Exponential(SelectionForecast),
}

impl utoipa::PartialSchema for VectorForecast {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        crate::schema::one_of([
            crate::schema::component("Forecast"),
            crate::schema::component("SelectionForecast"),
        ])
        .into()
    }
}

impl utoipa::ToSchema for VectorForecast {
    fn schemas(schemas: &mut Vec<(String, crate::schema::SchemaRef)>) {
        forecast_schemas(schemas);
    }
}

/// The forecasts' schemas in openapi.yaml (`privacy::utility` holds their math, not their wire
/// form).
pub fn forecast_schemas(schemas: &mut Vec<(String, crate::schema::SchemaRef)>) {
    use crate::schema::{between, closed, component, nullable, number};
    schemas.push((
        "Forecast".into(),
        closed()
            .description(Some(
                "Aggregate utility forecast of a Dirichlet release from (r, α, N, d) only, never \
                 per cell (the Gaussian and Laplace baselines have none: `forecast` is null).",
            ))
            .property(
                "l2_bound",
                number().minimum(Some(0.0)).description(Some(
                    "‖y − x/N‖₂ ≤ l2_bound with probability l2_bound_confidence. For an empty \
                     group (N = 0) x/N does not exist and l2_bound is √2, the diameter of the \
                     simplex: no claim.",
                )),
            )
            .property("l2_bound_confidence", between(0.0, 1.0))
            .property("max_cell_variance", number().minimum(Some(0.0)))
            .property(
                "kl_tail",
                nullable(component("KlTail")).description(Some(
                    "Null when the condition of the KL bound does not hold.",
                )),
            )
            .required("l2_bound")
            .required("l2_bound_confidence")
            .required("max_cell_variance")
            .required("kl_tail")
            .into(),
    ));
    schemas.push((
        "KlTail".into(),
        closed()
            .description(Some("Pr[KL(x/N ‖ y) > eta] ≤ probability."))
            .property("eta", number().minimum(Some(0.0)))
            .property("probability", between(0.0, 1.0))
            .required("eta")
            .required("probability")
            .into(),
    ));
    schemas.push((
        "SelectionForecast".into(),
        closed()
            .description(Some(
                "The `exponential` mechanism's forecast from n, the prior and ε only (no count): \
                 with probability `hellinger_bound_confidence` (0.95) the selected posterior's \
                 Hellinger distance to the exact posterior Beta(α + n₁, β + n₀) is at most \
                 `hellinger_bound` = min(1, (2Δ̃/ε′)·ln((n + 1)/β) + √E) — the exponential \
                 mechanism's utility theorem (Dwork & Roth, Theorem 3.11) with OPT = 0 and n + 1 \
                 candidates, for the sensitivity Δ̃ (`sensitivity_used`) and the slightly reduced \
                 ε′ the selection runs at; √E covers the float error of the computed distances. 1 \
                 means no information (small ε).",
            ))
            .property(
                "hellinger_bound",
                number().exclusive_minimum(Some(0.0)).maximum(Some(1.0)),
            )
            .property(
                "hellinger_bound_confidence",
                number()
                    .exclusive_minimum(Some(0.0))
                    .exclusive_maximum(Some(1.0)),
            )
            .required("hellinger_bound")
            .required("hellinger_bound_confidence")
            .into(),
    ));
}

/// The forecast of a one-vector plan: [`forecast`], and for the exponential mechanism the
/// Hellinger bound of its selection, which needs only n (= N), the prior and ε.
pub fn vector_forecast(draw: &Draw, counts: &Counts) -> Option<VectorForecast> {
    match draw {
        Draw::Exponential {
            candidates,
            epsilon,
        } => Some(VectorForecast::Exponential(SelectionForecast {
            hellinger_bound: candidates.hellinger_bound(*epsilon, FORECAST_BETA),
            hellinger_bound_confidence: 1.0 - FORECAST_BETA,
        })),
        _ => forecast(draw, counts).map(VectorForecast::Dirichlet),
    }
}

/// The utility forecast of a Dirichlet-family plan (baselines and the exponential mechanism
/// have none here; tables forecast each row with it).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::charge::CURVE_RELATIVE_ERROR;
    use crate::privacy::bounded::CellValues;
    use crate::privacy::exact::exact_rdp;
    use crate::privacy::types::Relation;

    fn order(v: f64) -> Order {
        Order::new(v).unwrap()
    }

    fn calibrated_specs(target: Target) -> Vec<Spec> {
        vec![
            Spec::Dirichlet {
                target,
                prior: DEFAULT_PRIOR,
            },
            Spec::Posterior {
                target,
                r: DEFAULT_R,
            },
            Spec::Diffuse {
                target,
                alpha: Prior::PerCell(vec![10.0, 12.0, 30.0, 11.0]),
            },
            Spec::Gaussian(Noise::Calibrated(target)),
            Spec::Laplace(Noise::Calibrated(target)),
            Spec::Bounded(bounded::BoundedSpec {
                mode: bounded::BoundedMode::Dirichlet { target, prior: 0.5 },
                lower: Some(CellValues::Uniform(2.0)),
            }),
            Spec::Bounded(bounded::BoundedSpec {
                mode: bounded::BoundedMode::Posterior {
                    target,
                    r: 1.0,
                    shape: CellValues::PerCell(vec![1.0, 2.0, 1.0, 3.0]),
                },
                lower: None,
            }),
            Spec::Bounded(bounded::BoundedSpec {
                mode: bounded::BoundedMode::Diffuse {
                    target,
                    alpha: CellValues::Uniform(0.5),
                },
                lower: Some(CellValues::PerCell(vec![4.0, 3.0, 5.0, 4.5])),
            }),
        ]
    }

    fn relations() -> [Sensitivity; 3] {
        [
            Sensitivity::REPLACE_ONE,
            Sensitivity::ADD_REMOVE_ONE,
            Sensitivity::new(3.0, 1.5).unwrap(),
        ]
    }

    /// Issue 11 item 1: a budget B admits exactly k releases asked at B/k, for every k ≤ 10,000,
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
            let p = plan(&Spec::Dirichlet { target, prior: 1.0 }, 4, ledger, &sens).unwrap();
            assert_eq!(p.record.pricing, Some(Pricing::Exact));
            let Draw::Dirichlet { r, alpha } = &p.draw else {
                panic!()
            };
            let star = exact_rdp(ledger, *r, alpha, sens.relation());
            assert!(p.charge.to_f64() >= star * (1.0 + 1.4e-13));
            assert!(p.charge.to_f64() > 0.5);
            let e = plan(
                &Spec::Explicit {
                    r: 0.1,
                    alpha: Prior::Uniform(5.0),
                    cap: None,
                },
                4,
                ledger,
                &sens,
            )
            .unwrap();
            let star = exact_rdp(ledger, 0.1, &Prior::Uniform(5.0), sens.relation());
            assert_eq!(e.charge, charge_for(star).unwrap());
        }
        let custom = Sensitivity::new(2.0, 1.0).unwrap();
        assert_eq!(custom.relation(), Relation::Custom);
        let e = plan(
            &Spec::Explicit {
                r: 0.1,
                alpha: Prior::Uniform(5.0),
                cap: None,
            },
            4,
            ledger,
            &custom,
        )
        .unwrap();
        assert_eq!(e.record.pricing, Some(Pricing::Bound));
    }
}

#[cfg(test)]
mod precision_tests {
    use super::*;

    fn order(v: f64) -> Order {
        Order::new(v).unwrap()
    }

    fn counts(v: &[f64]) -> Counts {
        Counts::new(v.to_vec(), 1000).unwrap()
    }

    fn planned(spec: Spec, ledger: f64, sens: &Sensitivity, x: &[f64]) -> Result<Plan, PlanError> {
        let p = plan(&spec, x.len(), order(ledger), sens)?;
        check_shapes(&p.draw, &counts(x), sens)?;
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
        let explicit = |r: f64| Spec::Explicit {
            r,
            alpha: Prior::Uniform(2f64.powi(40)),
            cap: None,
        };
        let x = [0.0; 4];
        let ok = plan(&explicit(256.0), 4, order(1.5), &Sensitivity::REPLACE_ONE).unwrap();
        check_shapes(&ok.draw, &counts(&x), &Sensitivity::REPLACE_ONE).unwrap();
        let p = plan(&explicit(256.0), 4, order(1.5), &custom).unwrap();
        assert!(matches!(
            check_shapes(&p.draw, &counts(&x), &custom),
            Err(PlanError::BeyondPrecision(_))
        ));
        let p = plan(&explicit(512.0), 4, order(1.5), &custom).unwrap();
        check_shapes(&p.draw, &counts(&x), &custom).unwrap();
    }

    /// The audit cases of issue 10 item 3.
    #[test]
    fn audit_cases_are_refused_or_priced_safely() {
        let s = Sensitivity::REPLACE_ONE;
        // posterior r = 1000 at ε = 1e-6, λ₀ = 22: α ≈ 5e12, rΔ∞ = 1000 < 2²⁰·ulp(α).
        let target = Target {
            epsilon: Epsilon::new(1e-6).unwrap(),
            order: order(22.0),
        };
        let e = planned(Spec::Posterior { target, r: 1000.0 }, 22.0, &s, &[5.0, 3.0]);
        assert!(matches!(e, Err(PlanError::BeyondPrecision(_))), "{e:?}");
        // explicit r = 1, α = 1e30, counts near 2⁴⁶: shapes beyond 2⁵⁰.
        let explicit = |r: f64, a: f64| Spec::Explicit {
            r,
            alpha: Prior::Uniform(a),
            cap: None,
        };
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
        assert!(check_shapes(&p.draw, &counts(&[0.0, 0.0]), &Sensitivity::ADD_REMOVE_ONE).is_err());
        let p = plan(
            &explicit(r, big),
            2,
            order(1.5),
            &Sensitivity::ADD_REMOVE_ONE,
        )
        .unwrap();
        check_shapes(&p.draw, &counts(&[0.0, 0.0]), &Sensitivity::ADD_REMOVE_ONE).unwrap();
        // explicit with tiny r and α: priced (≈ λr²/α² scale), not refused as "no guarantee".
        for sens in [s, Sensitivity::new(2.0, 1.0).unwrap()] {
            let p = planned(explicit(1e-170, 1e-168), 2.0, &sens, &[3.0, 0.0]).unwrap();
            assert!(p.price > 1e-5 && p.price < 1.0, "{sens:?}: {}", p.price);
        }
    }
}

/// Issue 21 item 4: the charge covers the divergence of the Gamma shapes the f64 code actually
/// forms, fl(fl(r·x) + α), not only of the real-number shapes r·x + α.
#[cfg(test)]
mod realised_shift_tests {
    use super::*;
    use crate::privacy::bounded::{clamp_excess, CellValues};
    use crate::privacy::exact::{cell_divergences, EXACT_RELATIVE_ERROR};
    use crate::privacy::types::Relation;

    fn order(v: f64) -> Order {
        Order::new(v).unwrap()
    }

    /// What the sampler is handed for `counts` (as `execute_release` and the seeds' draw do).
    fn drawn_shapes(draw: &Draw, counts: &Counts) -> Vec<f64> {
        let (r, alpha, counts) = match draw {
            Draw::Dirichlet { r, alpha } => (*r, alpha.clone(), counts.clone()),
            Draw::Bounded { r, alpha, lower } => (*r, alpha.clone(), clamp_excess(counts, lower)),
            _ => unreachable!(),
        };
        release_shapes(&counts, &DirichletParams { r, alpha }).unwrap()
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
    fn brute_force(draw: &Draw, ledger: Order, sens: &Sensitivity) -> (f64, f64) {
        let (mut minus, mut plus) = ((0.0f64, 0.0, 0.0, 0.0), (0.0f64, 0.0, 0.0, 0.0));
        for x in cell_counts() {
            let counts = Counts::new(vec![x, x + 1.0], usize::MAX).unwrap();
            if check_shapes(draw, &counts, sens).is_err() {
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
                    Spec::Posterior {
                        target: t,
                        r: 123.456,
                    },
                    Spec::Posterior {
                        target: t,
                        r: 1000.0,
                    },
                    Spec::Dirichlet {
                        target: target(0.05, ledger),
                        prior: 1.0,
                    },
                    Spec::Diffuse {
                        target: target(0.5, ledger),
                        alpha: Prior::Uniform(3.3),
                    },
                    Spec::Bounded(bounded::BoundedSpec {
                        mode: bounded::BoundedMode::Posterior {
                            target: t,
                            r: 77.7,
                            shape: CellValues::Uniform(1.0),
                        },
                        lower: Some(CellValues::Uniform(2.5)),
                    }),
                ];
                for spec in specs {
                    let p = match plan(&spec, 2, order(ledger), &sens) {
                        Ok(p) => p,
                        Err(e) => panic!("{spec:?}: {e}"),
                    };
                    let (bound, pair) = brute_force(&p.draw, order(ledger), &sens);
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
                0 => Spec::Posterior { target, r: fixed },
                1 => Spec::Diffuse { target, alpha: Prior::Uniform(fixed) },
                2 => Spec::Dirichlet { target, prior: fixed },
                _ => Spec::Bounded(bounded::BoundedSpec {
                    mode: bounded::BoundedMode::Posterior {
                        target,
                        r: fixed,
                        shape: CellValues::Uniform(1.0),
                    },
                    lower: Some(CellValues::Uniform(1.7)),
                }),
            };
            // Refusals (beyond the curve's reach, or the guard) charge nothing.
            if let Ok(p) = plan(&spec, 2, order(lambda), &sens) {
                let (bound, pair) = brute_force(&p.draw, order(lambda), &sens);
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
                let spec = Spec::Diffuse {
                    target: t,
                    alpha: Prior::Uniform(alpha),
                };
                let p = plan(&spec, 2, order(3.7), &sens).unwrap();
                let (bound, _) = brute_force(&p.draw, order(3.7), &sens);
                assert!(
                    bound * (1.0 - EXACT_RELATIVE_ERROR) <= p.charge.to_f64(),
                    "{sens:?} α {alpha} ε {e}: {bound} > {}",
                    p.charge.to_f64()
                );
            }
        }
    }
}
