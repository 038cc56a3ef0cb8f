//! Dirichlet sampling from a CSPRNG seeded by the operating system.
// SKELETON: the privacy helper implements these (see issue 2).

/// The generator every release draws from. Seeded from the OS; nothing outside this module can
/// seed it.
pub type CsRng = rand::rngs::ChaCha20Rng;

/// A fresh generator seeded by the operating system's entropy source.
pub fn os_rng() -> CsRng {
    todo!()
}

/// One draw of Dirichlet(shapes): finite, ≥ 0, sums to 1 within 1e-12. Shapes must be finite and > 0.
pub fn sample_dirichlet(shapes: &[f64], rng: &mut CsRng) -> Vec<f64> {
    todo!("{}", shapes.len())
}
