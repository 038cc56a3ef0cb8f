//! `laplace`: discrete Laplace noise of scale b (P(y) ∝ e^{−|y|/b}) per cell on integer counts
//! (CKS20), priced by its exact RDP on the histogram relations (Mironov 2017, Prop. 6, over the
//! cells a neighbour moves) and a worst-case bound on custom ones; the additive mechanism of
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
pub type Laplace = Additive<DiscreteLaplace>;

pub struct DiscreteLaplace;

fn scale_field_schema() -> SchemaRef {
    scale_schema("The noise's scale (calibrated when absent).")
}

impl Law for DiscreteLaplace {
    const NAME: &'static str = "laplace";
    const SUMMARY: &'static str = "Discrete Laplace noise of scale `scale` (P(y) ∝ \
        e^{−|y|/scale}) per cell on integer counts: `scale` given (`epsilon` is then an optional \
        cap and `order` does not apply), or calibrated to `epsilon` at `order`.";
    const FIELD: &'static str = "scale";
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec {
            name: "scale",
            wire: Wire::Number,
            required: false,
            default: None,
            description: "The noise's scale b > 0; calibrated to `epsilon` when absent.",
            schema: scale_field_schema,
        },
        SMOOTHING,
    ];
    const PRICING: &'static str = "`exact`: the discrete Laplace's exact worst-case Rényi \
        divergence (histogram relations). `bound`: the pure-DP/zCDP bound used for custom \
        relations.";

    fn calibrate(
        order: Order,
        epsilon: Epsilon,
        sens: &Sensitivity,
        d: usize,
    ) -> Result<f64, CalibrationError> {
        discrete::laplace_scale(order, epsilon, sens, d)
    }

    fn rdp(order: Order, scale: f64, sens: &Sensitivity, d: usize) -> f64 {
        discrete::laplace_rdp(order, scale, sens, d)
    }

    fn pricing(_order: Order, sens: &Sensitivity) -> Pricing {
        discrete::laplace_pricing(sens)
    }

    fn noisy(counts: &Counts, scale: f64, rng: &mut CsRng) -> Result<Vec<i64>, BaselineError> {
        baseline::laplace_noisy(counts, scale, rng)
    }

    fn noise(scale: f64) -> Noise {
        Noise::Laplace { scale }
    }

    fn ends(s: &Setup) -> (f64, f64) {
        // D₁ ≈ λu²/2 for small u, ≈ u for large u (u = 1/b), up to two cells.
        let weak = (10.0 * (s.lambda() / (2.0 * GRID)).sqrt()).min(MAX_NOISE_SCALE);
        (-weak.ln(), -(0.1 / crate::ledger::charge::MAX_EPSILON).ln())
    }
}
