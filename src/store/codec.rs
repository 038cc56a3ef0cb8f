//! Encodings shared by both backends.
// SKELETON: the storage helper implements these.

/// A probability vector as little-endian f64 bytes.
pub fn encode_distribution(values: &[f64]) -> Vec<u8> {
    todo!("{}", values.len())
}

/// The inverse of [`encode_distribution`]; `None` if the length is not a multiple of 8.
pub fn decode_distribution(bytes: &[u8]) -> Option<Vec<f64>> {
    todo!("{}", bytes.len())
}
