//! The privacy core: calibration, pricing on the Rényi-DP curve, conversions, sampling and
//! utility forecasts. Pure functions: no I/O, no async, no global state. Formulas and theorem
//! numbers are in docs/PRIVACY.md (seed 000 = Ponnoprat, KL minimisation; seed 001 =
//! Ponnoprat, Dirichlet posterior sampling).

pub mod accuracy;
pub mod baseline;
pub mod bounded;
pub mod calibrate;
pub mod convert;
pub mod curve;
pub mod discrete;
pub mod divergence;
pub mod exact;
pub mod exponential;
pub mod external;
pub mod gohari;
pub mod sampler;
pub mod special;
pub mod types;
pub mod utility;

pub use calibrate::{calibrate, Calibration, CalibrationError};
pub use types::{Counts, Delta, DirichletParams, Epsilon, Order, ParamError, Prior, Sensitivity};
