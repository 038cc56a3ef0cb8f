//! Exact ledger arithmetic.
//!
//! Costs and budgets are stored as integer multiples of 2⁻⁴⁰ (≈ 9.1e-13). Every such value below
//! 2¹³ is exactly representable as an f64, so the JSON a client reads is the ledger's value to
//! the bit, and sums in SQL (BIGINT) are exact: `spent` is always exactly the sum of the charges.
//! A cost is rounded *up* to the grid (never charge less than the curve), a budget *down*
//! (never admit more than was granted).

use serde::Serialize;

/// log2 of the grid's denominator.
pub const QUANTUM_BITS: i32 = 40;
const SCALE: f64 = (1u64 << QUANTUM_BITS) as f64;
/// The largest ε the ledger represents (2¹³ = 8192); larger budgets or costs are refused.
pub const MAX_EPSILON: f64 = 8192.0;
const MAX_UNITS: u64 = 1u64 << (13 + QUANTUM_BITS);

/// An amount of privacy loss on the 2⁻⁴⁰ grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Units(u64);

#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum UnitsError {
    #[error("the value is not a finite non-negative number")]
    NotFinite,
    #[error("the value exceeds the ledger's maximum of {MAX_EPSILON}")]
    TooLarge,
}

impl Units {
    pub const ZERO: Units = Units(0);
    /// One grid unit, 2⁻⁴⁰: the least any release is charged.
    pub const QUANTUM: Units = Units(1);
    /// The ledger's maximum, 8192: the lifetime total of a blocked dataset, whose caps are its
    /// blocks' (src/ledger/blocks.rs).
    pub const MAX: Units = Units(MAX_UNITS);

    /// The smallest grid value ≥ `value` (a charge).
    pub fn ceil(value: f64) -> Result<Units, UnitsError> {
        Self::check(value)?;
        // value·2⁴⁰ is exact in binary floating point (a power-of-two scaling), so ceil is exact.
        Ok(Units((value * SCALE).ceil() as u64))
    }

    /// The largest grid value ≤ `value` (a budget).
    pub fn floor(value: f64) -> Result<Units, UnitsError> {
        Self::check(value)?;
        Ok(Units((value * SCALE).floor() as u64))
    }

    fn check(value: f64) -> Result<(), UnitsError> {
        if !value.is_finite() || value < 0.0 {
            return Err(UnitsError::NotFinite);
        }
        if value > MAX_EPSILON {
            return Err(UnitsError::TooLarge);
        }
        Ok(())
    }

    /// From a stored integer; values outside the grid's range are refused.
    pub fn from_raw(raw: i64) -> Result<Units, UnitsError> {
        if raw < 0 || raw as u64 > MAX_UNITS {
            return Err(UnitsError::TooLarge);
        }
        Ok(Units(raw as u64))
    }

    pub fn raw(self) -> i64 {
        self.0 as i64
    }

    /// Exact: every grid value ≤ 2¹³ has at most 53 significant bits.
    pub fn to_f64(self) -> f64 {
        self.0 as f64 / SCALE
    }

    pub fn checked_add(self, other: Units) -> Option<Units> {
        self.0
            .checked_add(other.0)
            .filter(|&u| u <= MAX_UNITS)
            .map(Units)
    }

    pub fn saturating_sub(self, other: Units) -> Units {
        Units(self.0.saturating_sub(other.0))
    }
}

impl Serialize for Units {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.to_f64())
    }
}

/// Relative error allowed for a curve evaluation in f64 (ψ′ is accurate to 1e-13 relative;
/// the products around it add a few ulps). Charges are inflated by this before rounding up.
/// Defined once, where the calibrations that must stay under it are.
pub const CURVE_RELATIVE_ERROR: f64 = crate::privacy::calibrate::CHARGE_INFLATION;

/// The charge for a release whose RDP curve evaluates to `curve_value` at the ledger order:
/// inflated by the evaluation's error bound, then rounded up to the grid.
pub fn charge_for(curve_value: f64) -> Result<Units, UnitsError> {
    Units::ceil(curve_value * (1.0 + CURVE_RELATIVE_ERROR))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn grid_values_round_trip_exactly() {
        for v in [0.5, 1.0, 0.25, 3.0, 8192.0] {
            assert_eq!(Units::ceil(v).unwrap().to_f64(), v);
            assert_eq!(Units::floor(v).unwrap().to_f64(), v);
        }
    }

    #[test]
    fn rejects_non_finite_negative_and_huge() {
        assert_eq!(Units::ceil(f64::NAN), Err(UnitsError::NotFinite));
        assert_eq!(Units::ceil(f64::INFINITY), Err(UnitsError::NotFinite));
        assert_eq!(Units::ceil(-1e-300), Err(UnitsError::NotFinite));
        assert_eq!(Units::ceil(8192.5), Err(UnitsError::TooLarge));
        assert!(Units::from_raw(-1).is_err());
    }

    proptest! {
        #[test]
        fn ceil_never_below_and_floor_never_above(v in 0.0f64..8192.0) {
            let up = Units::ceil(v).unwrap();
            let down = Units::floor(v).unwrap();
            prop_assert!(up.to_f64() >= v);
            prop_assert!(down.to_f64() <= v);
            prop_assert!(up.raw() - down.raw() <= 1);
        }

        #[test]
        fn sums_are_exact(a in 0.0f64..4000.0, b in 0.0f64..4000.0) {
            let (ua, ub) = (Units::ceil(a).unwrap(), Units::ceil(b).unwrap());
            let sum = ua.checked_add(ub).unwrap();
            // The f64 sum of two grid values is the grid sum, to the bit.
            prop_assert_eq!(sum.to_f64(), ua.to_f64() + ub.to_f64());
            prop_assert!(sum.to_f64() >= a + b);
        }

        #[test]
        fn charge_is_never_below_the_curve(v in 1e-9f64..8000.0) {
            prop_assert!(charge_for(v).unwrap().to_f64() >= v);
        }
    }
}
