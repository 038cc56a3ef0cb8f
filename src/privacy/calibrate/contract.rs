//! The contract every calibration meets: its tolerances, the verdict on a candidate
//! parameter, and the error when no parameter meets it.

/// The relative error the ledger assumes for a curve evaluation: the charge inflates every curve
/// value by it (`ledger::charge::CURVE_RELATIVE_ERROR` is this constant).
pub const CHARGE_INFLATION: f64 = 2e-13;
/// How far below the target a calibrated curve value may fall.
pub const SPEND_TOLERANCE: f64 = 1e-9;
/// How far below the target a calibrated curve value may fall when no f64 parameter lands
/// within `SPEND_TOLERANCE` (the exact curve near its pole moves by more per ulp).
pub const POLE_SPEND_TOLERANCE: f64 = 1e-6;
/// How far below the target a calibrated curve value may fall when the target lies between the
/// prices of two adjacent floats (next to ε*'s logarithmic pole, ε* ≈ ln(c/z)/(λ − 1) in the
/// distance z to it, so the last floats before it, z and 2z, differ by ln 2/ln(c/z) ≈ 2–3 %
/// relative; elsewhere the gap is far below `SPEND_TOLERANCE`). A wider gap is no pole's and
/// is refused.
pub const POLE_GAP: f64 = 0.1;
/// The solvers aim this far (relatively) below the target.
pub(crate) const TARGET_SHORTFALL: f64 = 1e-12;
/// Residual of ln(curve/target) at which Newton stops.
pub(crate) const RESIDUAL: f64 = 1e-14;
/// Where the Corollary 3 root only starts the exact solve ([`Problem::refine`]), its Newton
/// stops here: the estimate's solve moves on from any nearby point, and the bound's own root
/// is ~1e-1 away from ε*'s anyway.
pub(super) const START_RESIDUAL: f64 = 1e-6;
/// How far below ε the exact-curve solves aim ([`Problem::refine`]): the middle of the
/// contract's window, 1e-9 wide.
pub(super) const EXACT_AIM: f64 = 5e-10;
/// Their stopping residual in ln ε*: the result lands in ε·[1 − 9e-10, 1 − 1e-10], 1e-10 from
/// either end of the window — nearly 1,000 times the exact curve's error bound.
pub(super) const EXACT_TOLERANCE: f64 = 4e-10;
/// The lnΓ estimate's stopping residual: with its own error below ~2e-10 the root lands inside
/// `EXACT_TOLERANCE` on the exact curve (otherwise the exact solve carries on from it).
pub(super) const ESTIMATE_TOLERANCE: f64 = 2e-10;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalibrationError {
    #[error("no parameters achieve epsilon {epsilon} at order {order}: {reason}")]
    Infeasible {
        order: f64,
        epsilon: f64,
        reason: String,
    },
    #[error("{0} is not a finite positive number")]
    NotFinite(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Verdict {
    Fits,
    Over,
    Under,
}

pub(super) fn verdict(curve: f64, epsilon: f64) -> Verdict {
    let charged = curve * (1.0 + CHARGE_INFLATION);
    if charged.is_nan() || charged > epsilon {
        Verdict::Over
    } else if curve < epsilon * (1.0 - SPEND_TOLERANCE) {
        Verdict::Under
    } else {
        Verdict::Fits
    }
}
