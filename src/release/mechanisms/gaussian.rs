//! `gaussian`: discrete Gaussian noise N_ℤ(0, σ²) per cell on integer counts (CKS20), priced
//! λΔ2²/(2σ²) over the integer shifts of the dataset's relation; the additive mechanism of
//! `noise` with this law.

use crate::privacy::accuracy::Noise;
use crate::privacy::baseline::{self, BaselineError};
use crate::privacy::curve::Pricing;
use crate::privacy::discrete::{self, MAX_NOISE_SCALE};
use crate::privacy::sampler::CsRng;
use crate::privacy::{CalibrationError, Counts, Epsilon, Order, Sensitivity};
use crate::release::mechanism::{FieldSpec, Setup, Wire, GRID};
use crate::schema::SchemaRef;

use super::noise::{scale_schema, Additive, Law, SMOOTHING};

/// The registered mechanism.
pub type Gaussian = Additive<DiscreteGaussian>;

pub struct DiscreteGaussian;

fn sigma_schema() -> SchemaRef {
    scale_schema("The noise's σ (calibrated when absent).")
}

impl Law for DiscreteGaussian {
    const NAME: &'static str = "gaussian";
    const SUMMARY: &'static str = "Discrete Gaussian noise N_ℤ(0, sigma²) per cell on integer \
        counts: `sigma` given (`epsilon` is then an optional cap and `order` does not apply), or \
        calibrated to `epsilon` at `order`.";
    const FIELD: &'static str = "sigma";
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec {
            name: "sigma",
            wire: Wire::Number,
            required: false,
            default: None,
            description: "The noise's σ > 0; calibrated to `epsilon` when absent.",
            schema: sigma_schema,
        },
        SMOOTHING,
    ];
    const PRICING: &'static str = "Which curve priced the charge. `exact`: λΔ2²/(2σ²) is the \
        exact worst-case Rényi divergence of the discrete Gaussian (histogram relations at an \
        integer ledger order, CKS20). `bound`: an upper bound (a non-integer order, or a custom \
        relation).";

    fn calibrate(
        order: Order,
        epsilon: Epsilon,
        sens: &Sensitivity,
        _d: usize,
    ) -> Result<f64, CalibrationError> {
        discrete::gaussian_sigma(order, epsilon, sens)
    }

    fn rdp(order: Order, sigma: f64, sens: &Sensitivity, _d: usize) -> f64 {
        discrete::gaussian_rdp(order, sigma, sens)
    }

    fn pricing(order: Order, sens: &Sensitivity) -> Pricing {
        discrete::gaussian_pricing(order, sens)
    }

    fn noisy(counts: &Counts, sigma: f64, rng: &mut CsRng) -> Result<Vec<i64>, BaselineError> {
        baseline::gaussian_noisy(counts, sigma, rng)
    }

    fn noise(sigma: f64) -> Noise {
        Noise::Gaussian { sigma }
    }

    fn ends(s: &Setup) -> (f64, f64) {
        let l2 = s.sens.l2_squared().max(1.0);
        let sigma = |epsilon: f64| (s.lambda() * l2 / (2.0 * epsilon)).sqrt();
        let weak = (10.0 * sigma(GRID)).min(MAX_NOISE_SCALE);
        (
            -weak.ln(),
            -(0.1 * sigma(crate::ledger::charge::MAX_EPSILON)).ln(),
        )
    }
}
