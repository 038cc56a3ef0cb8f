//! Dirichlet sampling from a CSPRNG seeded by the operating system.
//!
//! Dir(a) is the normalised vector of independent Gamma(aᵢ, 1) draws. Shapes below 1 are drawn
//! in log space, log Gamma(a) = log Gamma(a + 1) + ln(U)/a (Marsaglia & Tsang 2000, §6), because
//! U^{1/a} underflows to 0 for tiny a and would turn a whole vector into zeros (or NaN after
//! normalising); the vector is then normalised by its largest log value, so the largest cell
//! is exactly exp(0) = 1 before scaling and the result can never be all-zero.
//!
//! Large vectors are cut into fixed chunks; each chunk gets its own ChaCha20 generator seeded
//! from the caller's generator in chunk order, so the output depends only on the caller's
//! generator, never on how rayon schedules the chunks or how many threads it has.

use std::convert::Infallible;

use chacha20::cipher::{KeyIvInit, StreamCipher};
use chacha20::ChaCha20Legacy;
use rand::rngs::{ChaCha20Rng, SysError, SysRng};
use rand::{Rng, SeedableRng, TryCryptoRng, TryRng};
use rand_distr::{Distribution, Exp1, StandardNormal};
use rayon::prelude::*;

use super::divergence::Compensated;
use super::types::{Counts, DirichletParams, Prior};

/// The generator every release draws from: ChaCha20 seeded by the operating system. Nothing
/// outside this module can seed it or read its state.
///
/// A newtype rather than an alias of `ChaCha20Rng`, because that type offers `from_seed`,
/// `seed_from_u64`, `get_seed` and `serialize_state` to anyone holding one. `CsRng` implements
/// only the generator traits (`TryRng` with `Infallible` errors, hence `rand::Rng`, and
/// `TryCryptoRng`, hence `rand::CryptoRng`), and its `Debug` prints no state.
pub struct CsRng(ChaCha20Rng);

impl TryRng for CsRng {
    type Error = Infallible;

    #[inline]
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        self.0.try_next_u32()
    }

    #[inline]
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        self.0.try_next_u64()
    }

    #[inline]
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        self.0.try_fill_bytes(dst)
    }
}

impl TryCryptoRng for CsRng {}

impl std::fmt::Debug for CsRng {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CsRng(<state hidden>)")
    }
}

/// A deterministic generator for tests only (never compiled into the service).
#[cfg(test)]
pub(crate) fn test_rng(seed: u64) -> CsRng {
    CsRng(ChaCha20Rng::seed_from_u64(seed))
}

/// Cells per chunk: large enough that deriving a generator (one ChaCha block) and a rayon task
/// are negligible, small enough to spread 10⁶ cells over the cores.
const CHUNK: usize = 1 << 16;

/// A fresh generator seeded by the operating system's entropy source (`getrandom` via
/// `SysRng`).
///
/// # Panics
/// If the operating system cannot provide entropy; a release must not proceed without it.
/// Use [`try_os_rng`] to handle that case.
pub fn os_rng() -> CsRng {
    try_os_rng().expect("the operating system's entropy source failed")
}

/// [`os_rng`] without the panic.
pub fn try_os_rng() -> Result<CsRng, SysError> {
    ChaCha20Rng::try_from_rng(&mut SysRng).map(CsRng)
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SampleError {
    #[error("a Dirichlet needs at least 2 cells")]
    TooFewCells,
    #[error("the shape of cell {index} is not a finite number > 0")]
    InvalidShape { index: usize },
    /// Not expected for valid shapes; reported rather than releasing a vector that is not a
    /// probability vector.
    #[error("the draw did not produce a valid probability vector")]
    NumericalFailure,
    #[error("alpha has {got} cells but counts have {expected}")]
    PriorDimension { got: usize, expected: usize },
    /// Above [`MAX_SHAPE`] the f64 Gamma sampler no longer resolves its own spread.
    #[error(
        "the shape of cell {index} exceeds 2^50, beyond which the f64 Gamma sampler is not exact"
    )]
    ShapeTooLarge { index: usize },
}

/// The largest Gamma shape the sampler accepts: 2⁵⁰ ≈ 1.1e15. Marsaglia–Tsang forms
/// d·(1 + c·x)³ with c = 1/(3√d), so the normal deviate x is resolved in steps of ~3√d·2⁻⁵² of
/// the output's standard deviation: 2⁻²⁵ at 2⁵⁰. Measured (`marsaglia_tsang_resolution_by_shape`,
/// 4,000 draws of Dir(a, a)): all outputs distinct up to 2⁶⁰, collisions from 2⁷⁰ (3,979
/// distinct), 618 at 2⁹⁰, 28 at 2¹⁰⁰, one single value at 2¹¹⁰ ≈ 1.3e33. 2⁵⁰ keeps a wide margin.
pub const MAX_SHAPE: f64 = 1_125_899_906_842_624.0;

/// The shapes r·xᵢ + αᵢ of the release y ~ Dir(r·x + α) (000 Algorithm 1 line 3; 001 §2.3 with
/// concentration r). An error, never a silent fix, when the prior's length differs from the
/// counts' or a shape is not a finite number > 0 (r or α invalid, or r·xᵢ overflowing).
pub fn release_shapes(counts: &Counts, params: &DirichletParams) -> Result<Vec<f64>, SampleError> {
    if let Prior::PerCell(v) = &params.alpha {
        if v.len() != counts.len() {
            return Err(SampleError::PriorDimension {
                got: v.len(),
                expected: counts.len(),
            });
        }
    }
    let shapes: Vec<f64> = counts
        .as_slice()
        .iter()
        .enumerate()
        .map(|(i, &x)| params.r * x + params.alpha.at(i))
        .collect();
    if let Some(index) = first_invalid_shape(&shapes) {
        return Err(shape_error(&shapes, index));
    }
    Ok(shapes)
}

fn shape_error(shapes: &[f64], index: usize) -> SampleError {
    if shapes[index] > MAX_SHAPE && shapes[index].is_finite() {
        SampleError::ShapeTooLarge { index }
    } else {
        SampleError::InvalidShape { index }
    }
}

/// The index of the first shape that is not a finite number in (0, [`MAX_SHAPE`]] — the
/// sampler's own domain, asserted on every draw.
///
/// Checks blocks of 1,024 with a branch-free fold the compiler vectorises, and searches a
/// block only when it holds a bad shape: a plain `position` costs ~2 ns per cell, a tenth of
/// a whole Gamma draw, and runs before the parallel part.
fn first_invalid_shape(shapes: &[f64]) -> Option<usize> {
    let valid = |a: f64| a > 0.0 && a <= MAX_SHAPE;
    shapes.chunks(1024).enumerate().find_map(|(block, cells)| {
        let all_valid = cells.iter().fold(true, |ok, &a| ok & valid(a));
        if all_valid {
            None
        } else {
            cells
                .iter()
                .position(|&a| !valid(a))
                .map(|i| block * 1024 + i)
        }
    })
}

/// One draw of Dirichlet(shapes): finite, ≥ 0, sums to 1 within 1e-12. Shapes must be finite and > 0.
///
/// Normalised Gamma draws (Marsaglia–Tsang, see `gamma_at_least_one`), log-space below shape 1;
/// see the module documentation. Deterministic given the generator's state, whatever the
/// number of rayon threads.
///
/// # Panics
/// On fewer than 2 cells or a shape that is not a finite number > 0; [`try_sample_dirichlet`]
/// reports those as errors instead.
pub fn sample_dirichlet(shapes: &[f64], rng: &mut CsRng) -> Vec<f64> {
    match try_sample_dirichlet(shapes, rng) {
        Ok(y) => y,
        Err(e) => panic!("sample_dirichlet: {e}"),
    }
}

/// [`sample_dirichlet`] with invalid shapes reported as a typed error.
pub fn try_sample_dirichlet(shapes: &[f64], rng: &mut CsRng) -> Result<Vec<f64>, SampleError> {
    if shapes.len() < 2 {
        return Err(SampleError::TooFewCells);
    }
    if let Some(index) = first_invalid_shape(shapes) {
        return Err(shape_error(shapes, index));
    }
    // Zeroed in parallel: for a large vector the zeroing (or the first touch of fresh pages)
    // is otherwise a serial pass as long as a third of the parallel draw.
    let mut out: Vec<f64> = if shapes.len() <= CHUNK {
        vec![0.0; shapes.len()]
    } else {
        (0..shapes.len()).into_par_iter().map(|_| 0.0).collect()
    };
    let valid = if shapes.len() <= CHUNK {
        let drawn = draw_chunk(shapes, &mut out, &mut Keystream::from_rng(rng));
        let inv = drawn.direct_normaliser().unwrap_or_else(|| {
            let max_log = max_in_log_terms(shapes, &out);
            1.0 / scale_chunk(shapes, &mut out, max_log).sum()
        });
        finish_chunk(&mut out, inv)
    } else {
        // Seeds are drawn sequentially, in chunk order, before any parallel work.
        let seeds: Vec<[u8; 32]> = (0..shapes.len().div_ceil(CHUNK))
            .map(|_| {
                let mut seed = [0u8; 32];
                rng.fill_bytes(&mut seed);
                seed
            })
            .collect();
        // `collect` keeps chunk order, so the combined figures (and the output) do not depend
        // on how rayon schedules the chunks.
        let drawn: Vec<Drawn> = out
            .par_chunks_mut(CHUNK)
            .zip(shapes.par_chunks(CHUNK))
            .zip(seeds.par_iter())
            .map(|((out, shapes), seed)| draw_chunk(shapes, out, &mut Keystream::from_seed(*seed)))
            .collect();
        let drawn = drawn
            .into_iter()
            .reduce(Drawn::merge)
            .unwrap_or_else(Drawn::failed);
        let inv = match drawn.direct_normaliser() {
            Some(inv) => inv,
            None => {
                let max_log = out
                    .par_chunks(CHUNK)
                    .zip(shapes.par_chunks(CHUNK))
                    .map(|(out, shapes)| max_in_log_terms(shapes, out))
                    .reduce(|| f64::NEG_INFINITY, nan_max);
                let sums: Vec<Compensated> = out
                    .par_chunks_mut(CHUNK)
                    .zip(shapes.par_chunks(CHUNK))
                    .map(|(out, shapes)| scale_chunk(shapes, out, max_log))
                    .collect();
                let mut total = Compensated::default();
                sums.into_iter().for_each(|s| total.merge(s));
                1.0 / total.sum()
            }
        };
        out.par_chunks_mut(CHUNK)
            .map(|c| finish_chunk(c, inv))
            .reduce(|| true, |a, b| a && b)
    };
    if valid {
        Ok(out)
    } else {
        Err(SampleError::NumericalFailure)
    }
}

/// Multiplies by the normaliser's reciprocal and reports whether every value is a finite
/// number ≥ 0.
fn finish_chunk(out: &mut [f64], inv: f64) -> bool {
    let mut ok = inv.is_finite();
    for y in out.iter_mut() {
        *y *= inv;
        ok &= y.is_finite() && *y >= 0.0;
    }
    ok
}

/// What a chunk's draw reports for normalising: whether it holds log-space cells, and
/// otherwise the compensated sum of its (linear) values.
#[derive(Clone, Copy)]
struct Drawn {
    any_log: bool,
    linear_sum: Compensated,
}

impl Drawn {
    fn failed() -> Drawn {
        Drawn {
            any_log: true,
            linear_sum: Compensated::default(),
        }
    }

    fn merge(self, other: Drawn) -> Drawn {
        let mut linear_sum = self.linear_sum;
        linear_sum.merge(other.linear_sum);
        Drawn {
            any_log: self.any_log || other.any_log,
            linear_sum,
        }
    }

    /// 1/Σ when every cell was drawn linearly and the plain sum is a normal, finite number:
    /// then the rescaling pass is unnecessary (it exists for log-space cells and for sums
    /// that overflow or vanish), and the draw's own sum normalises. `None` otherwise.
    fn direct_normaliser(&self) -> Option<f64> {
        let sum = self.linear_sum.sum();
        let inv = 1.0 / sum;
        (!self.any_log && sum.is_normal() && sum > 0.0 && inv.is_normal()).then_some(inv)
    }
}

/// The largest value of a drawn chunk in log terms (linear cells by their logarithm), for
/// [`scale_chunk`]; NaN if any value is NaN.
fn max_in_log_terms(shapes: &[f64], out: &[f64]) -> f64 {
    let mut max_linear = 0.0f64;
    let mut max_log = f64::NEG_INFINITY;
    for (&a, &y) in shapes.iter().zip(out) {
        if y.is_nan() {
            return f64::NAN;
        }
        if a >= 1.0 {
            max_linear = max_linear.max(y);
        } else {
            max_log = max_log.max(y);
        }
    }
    max_log.max(max_linear.ln())
}

/// `f64::max` that keeps a NaN instead of dropping it.
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Fills `out` with Gamma(a) draws for a ≥ 1 and with log Gamma(a) for a < 1, and reports
/// whether any cell is in log space and, if none is, the sum.
///
/// log Gamma(a) = log Gamma(a + 1) + ln(U)/a = log Gamma(a + 1) − E/a with E = −ln U ~ Exp(1),
/// drawn by rand_distr's ziggurat instead of a uniform and a logarithm.
///
/// The sum is taken in a second pass over the chunk (still in cache) rather than in the
/// drawing loop: the loop calls `ln` on its rare slow paths, which forces any
/// accumulator it carries through memory, and the compensated sum's dependency chain then
/// set the pace of the whole loop (measured: ~2 ns per cell).
fn draw_chunk(shapes: &[f64], out: &mut [f64], rng: &mut Keystream) -> Drawn {
    // Marsaglia–Tsang's c = 1/(3√d) of every cell first, in a loop the compiler vectorises,
    // so that the square root and division are off the drawing loop's critical path.
    for (&a, slot) in shapes.iter().zip(out.iter_mut()) {
        let lifted = if a >= 1.0 { a } else { a + 1.0 };
        *slot = (1.0 / 3.0) / (lifted - 1.0 / 3.0).sqrt();
    }
    let mut any_log = false;
    for (&a, slot) in shapes.iter().zip(out.iter_mut()) {
        if a >= 1.0 {
            *slot = gamma_at_least_one(a, *slot, rng);
        } else {
            any_log = true;
            let g = gamma_at_least_one(a + 1.0, *slot, rng);
            let e: f64 = Exp1.sample(rng);
            // −∞ only for a below ~1e-306 (E/a overflows); clamp so the max stays finite.
            *slot = (g.ln() - e / a).max(f64::MIN);
        }
    }
    Drawn {
        any_log,
        // The sum is only used when no cell is in log space.
        linear_sum: if any_log {
            Compensated::default()
        } else {
            compensated_sum(out)
        },
    }
}

/// Neumaier-compensated sum of `values`, over four interleaved accumulators so that four
/// dependency chains run side by side, combined in a fixed order (deterministic).
fn compensated_sum(values: &[f64]) -> Compensated {
    let mut lanes = [Compensated::default(); 4];
    let mut quads = values.chunks_exact(4);
    for q in &mut quads {
        for (lane, &v) in lanes.iter_mut().zip(q) {
            lane.add(v);
        }
    }
    for &v in quads.remainder() {
        lanes[0].add(v);
    }
    let [mut total, b, c, d] = lanes;
    total.merge(b);
    total.merge(c);
    total.merge(d);
    total
}

/// One Gamma(a, 1) draw for a ≥ 1 by Marsaglia & Tsang (2000), the method of rand_distr's
/// `Gamma` for shapes above 1, with the same squeeze and acceptance tests; `c` must be
/// 1/(3√(a − ⅓)) (computed for a whole chunk beforehand, see `draw_chunk`).
///
/// Written out here rather than calling `rand_distr::Gamma` because the shapes change from
/// cell to cell (r·xᵢ + α): building a `Gamma` per cell (validation, a three-way choice of
/// representation and its match on every draw) took ~5 of ~23 ns per draw, and `Gamma`
/// offers no way to supply c computed in bulk (BENCHMARKS.md, "Sampler vs numpy"). The normal deviates
/// still come from rand_distr's ziggurat and the exponentials from its `Exp1`. 1/(3√d) rather than
/// 1/√(9d) keeps c from overflowing to 0 for d near f64::MAX (v ≈ 1 there either way).
#[inline(always)]
fn gamma_at_least_one<R: Rng + ?Sized>(a: f64, c: f64, rng: &mut R) -> f64 {
    let d = a - 1.0 / 3.0;
    loop {
        let x: f64 = StandardNormal.sample(rng);
        let t = 1.0 + c * x;
        if t <= 0.0 {
            continue;
        }
        let v = t * t * t;
        let u = open01(rng.next_u64());
        let x2 = x * x;
        if u < 1.0 - 0.0331 * x2 * x2 || u.ln() < 0.5 * x2 + d * (1.0 - v + v.ln()) {
            return d * v;
        }
    }
}

/// A uniform in the open interval (0, 1) from the top 53 bits of a word: (k + ½)·2⁻⁵³.
#[inline(always)]
fn open01(word: u64) -> f64 {
    ((word >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
}

/// The ChaCha20 keystream as 64-bit words: the chunk generator of [`try_sample_dirichlet`].
///
/// This is the stream of `rand`'s `ChaCha20Rng` for the same 32-byte seed (the djb variant,
/// 64-bit nonce 0 and 64-bit block counter from 0; a test checks the two agree word for word),
/// produced through the `chacha20` crate's cipher interface instead of its RNG interface:
/// the cipher interface dispatches to the crate's AVX-512 backend (16 blocks at a time) when
/// the CPU has it and the crate was built with `--cfg chacha20_avx512` (`.cargo/config.toml`),
/// while its RNG interface stops at AVX2 (4 blocks). On the benchmark machine that is 2.1 ms
/// instead of 3.5 ms per 10⁶ words, and keystream is a third of a Gamma draw's cost
/// (BENCHMARKS.md). Without AVX-512 the same code runs the AVX2 or SSE2 backend.
///
/// Words are consumed in order and never reused; the buffer grows from 4 to 64 ChaCha blocks
/// so that a 2-cell draw does not pay for 4 KiB of keystream.
struct Keystream {
    cipher: ChaCha20Legacy,
    buf: [u8; KEYSTREAM_BUF],
    pos: usize,
    len: usize,
}

const KEYSTREAM_BUF: usize = 64 * 64;

impl Keystream {
    fn from_seed(seed: [u8; 32]) -> Keystream {
        Keystream {
            cipher: ChaCha20Legacy::new(&seed.into(), &[0u8; 8].into()),
            buf: [0; KEYSTREAM_BUF],
            pos: 0,
            len: 0,
        }
    }

    /// A fresh stream keyed by 32 bytes of `rng`'s output.
    fn from_rng(rng: &mut CsRng) -> Keystream {
        let mut seed = [0u8; 32];
        rng.fill_bytes(&mut seed);
        Keystream::from_seed(seed)
    }

    #[inline(always)]
    fn word(&mut self) -> u64 {
        if self.pos >= self.len {
            self.refill();
        }
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.buf[self.pos..self.pos + 8]);
        self.pos += 8;
        u64::from_le_bytes(w)
    }

    #[cold]
    #[inline(never)]
    fn refill(&mut self) {
        self.len = if self.len == 0 {
            256
        } else {
            (self.len * 2).min(KEYSTREAM_BUF)
        };
        // Counter exhaustion would need 2⁷⁰ bytes of one chunk's stream, which no draw
        // reaches; `write_keystream` would panic rather than repeat the stream.
        self.cipher.write_keystream(&mut self.buf[..self.len]);
        self.pos = 0;
    }
}

impl TryRng for Keystream {
    type Error = Infallible;

    #[inline(always)]
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok(self.word() as u32)
    }

    #[inline(always)]
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(self.word())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        for chunk in dst.chunks_mut(8) {
            let w = self.word().to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
        Ok(())
    }
}

impl TryCryptoRng for Keystream {}

/// Rescales a chunk by e^{−max_log} (linear cells) or exponentiates log cells relative to it,
/// and returns the chunk's compensated sum.
fn scale_chunk(shapes: &[f64], out: &mut [f64], max_log: f64) -> Compensated {
    let scale = (-max_log).exp();
    let mut sum = Compensated::default();
    for (&a, y) in shapes.iter().zip(out.iter_mut()) {
        let v = if a < 1.0 {
            (*y - max_log).exp()
        } else if scale.is_finite() {
            *y * scale
        } else {
            (y.ln() - max_log).exp()
        };
        *y = v;
        sum.add(v);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeded(seed: u64) -> CsRng {
        test_rng(seed)
    }

    fn compensated_sum(y: &[f64]) -> f64 {
        let mut s = Compensated::default();
        y.iter().for_each(|v| s.add(*v));
        s.sum()
    }

    fn assert_probability_vector(y: &[f64]) {
        assert!(y.iter().all(|v| v.is_finite() && *v >= 0.0));
        assert!(
            (compensated_sum(y) - 1.0).abs() <= 1e-12,
            "sum {}",
            compensated_sum(y)
        );
        assert!(y.iter().any(|v| *v > 0.0));
    }

    /// Mean, variance and excess kurtosis of the Beta(a, b) marginal of a Dirichlet cell
    /// (closed forms; raw-moment differences cancel catastrophically for huge shapes).
    fn beta_moments(a: f64, b: f64) -> (f64, f64, f64) {
        let s = a + b;
        let mean = a / s;
        let var = a * b / (s * s * (s + 1.0));
        let excess = 6.0 * ((a - b) * (a - b) * (s + 1.0) - a * b * (s + 2.0))
            / (a * b * (s + 2.0) * (s + 3.0));
        (mean, var, excess)
    }

    /// Per-cell means and variances over `draws` draws against 000 §2.2, each within 5 standard
    /// errors: the mean's standard error is √(Var/n); the sample variance's is
    /// √((μ₄ − σ⁴)/n) = σ²√((κ + 2)/n) with κ the Beta marginal's excess kurtosis. With a handful of cells
    /// and checks, a false failure at 5σ has probability below 1e-5 (and the seed is fixed).
    fn check_moments(shapes: &[f64], draws: usize, seed: u64) {
        let d = shapes.len();
        let a0: f64 = shapes.iter().sum();
        let mut rng = seeded(seed);
        let mut sum = vec![0.0; d];
        let mut sum_sq = vec![0.0; d];
        let moments: Vec<(f64, f64, f64)> =
            shapes.iter().map(|&a| beta_moments(a, a0 - a)).collect();
        for _ in 0..draws {
            let y = sample_dirichlet(shapes, &mut rng);
            assert_probability_vector(&y);
            for i in 0..d {
                sum[i] += y[i];
                let dev = y[i] - moments[i].0;
                sum_sq[i] += dev * dev;
            }
        }
        let n = draws as f64;
        for i in 0..d {
            let (mu, var, excess) = moments[i];
            let mean = sum[i] / n;
            assert!(
                (mean - mu).abs() <= 5.0 * (var / n).sqrt(),
                "cell {i}: mean {mean} vs {mu}"
            );
            // Deviations from the known mean: the estimator of Var is unbiased with variance
            // (μ₄ − σ⁴)/n.
            let sample_var = sum_sq[i] / n;
            let se = var * ((excess + 2.0) / n).sqrt();
            assert!(
                (sample_var - var).abs() <= 5.0 * se,
                "cell {i}: var {sample_var} vs {var} (se {se})"
            );
        }
    }

    #[test]
    fn moments_match_for_moderate_and_mixed_shapes() {
        check_moments(&[0.5, 1.0, 3.5, 20.0], 20_000, 1);
        check_moments(&[0.05, 0.3, 0.9, 1.0, 1.1, 7.0], 20_000, 2);
    }

    #[test]
    fn moments_match_for_huge_shapes() {
        check_moments(&[1e12, 2e12, 3e12], 5_000, 3);
    }

    #[test]
    fn moments_match_for_small_shapes() {
        check_moments(&[0.01, 0.02, 0.2], 20_000, 4);
    }

    #[test]
    fn tiny_shapes_give_exact_zeros_but_never_all_zero_or_nan() {
        // Shape 1e-3: log yᵢ − log y_max ≈ −1000·(Eᵢ − E_min) with Eᵢ ~ Exp(1), and exp underflows
        // to 0 below ≈ −744.4, so a non-maximal cell is exactly 0 with probability ≈ e^{−0.7444}
        // ≈ 0.475 (memorylessness of Exp). Checked within 5 binomial standard errors.
        for (d, draws) in [(2usize, 4_000usize), (10, 1_000)] {
            let shapes = vec![1e-3; d];
            let mut rng = seeded(10 + d as u64);
            let mut zeros = 0usize;
            for _ in 0..draws {
                let y = sample_dirichlet(&shapes, &mut rng);
                assert_probability_vector(&y);
                assert!(y.iter().any(|v| *v > 0.0), "all-zero draw");
                zeros += y.iter().filter(|v| **v == 0.0).count();
            }
            let trials = (draws * (d - 1)) as f64;
            let p = (-0.7444f64).exp();
            let share = zeros as f64 / trials;
            let se = (p * (1.0 - p) / trials).sqrt();
            assert!(
                (share - p).abs() <= 5.0 * se,
                "d={d}: share of zeros {share} vs {p}"
            );
        }
    }

    #[test]
    fn extremely_small_shapes_still_give_a_probability_vector() {
        let mut rng = seeded(20);
        for a in [1e-6, 1e-100, 1e-300, 5e-324] {
            let y = sample_dirichlet(&[a, a, a], &mut rng);
            assert_probability_vector(&y);
            let y = sample_dirichlet(&[a, 1.0, 1e12], &mut rng);
            assert_probability_vector(&y);
        }
    }

    /// The same draw (same seed) in a one-thread and in a two-thread rayon pool.
    fn on_one_and_two_threads(shapes: &[f64], seed: u64) -> (Vec<f64>, Vec<f64>) {
        let pool = |n| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .unwrap()
        };
        let a = pool(1).install(|| sample_dirichlet(shapes, &mut seeded(seed)));
        let b = pool(2).install(|| sample_dirichlet(shapes, &mut seeded(seed)));
        (a, b)
    }

    #[test]
    fn a_million_cells_sum_to_one_and_parallelism_does_not_change_the_draw() {
        let d = 1_000_000;
        let shapes: Vec<f64> = (0..d).map(|i| [0.3, 1.0, 2.5, 40.0][i % 4]).collect();
        let (a, b) = on_one_and_two_threads(&shapes, 30);
        assert_probability_vector(&a);
        assert!(a == b, "thread count changed the output");
        // The cells of each shape average to their expected mean a/a₀. A group of m cells of
        // shape a sums to Gamma(m·a), relative standard error 1/√(ma); the normaliser adds
        // about 1/√a₀ more. Checked within 5 of those combined standard errors.
        let a0: f64 = shapes.iter().sum();
        for (k, &shape) in shapes.iter().take(4).enumerate() {
            let m = (d / 4) as f64;
            let mean: f64 = a.iter().skip(k).step_by(4).sum::<f64>() / m;
            let want = shape / a0;
            let se = (1.0 / (m * shape) + 1.0 / a0).sqrt();
            assert!(
                (mean / want - 1.0).abs() < 5.0 * se,
                "shape {shape}: {mean} vs {want}"
            );
        }
    }

    #[test]
    fn plain_draws_and_overflowing_totals() {
        // Shapes ≥ 1 everywhere (no logarithms); thread count still irrelevant.
        let shapes: Vec<f64> = (0..3 * CHUNK + 17).map(|i| 1.0 + (i % 5) as f64).collect();
        let (a, b) = on_one_and_two_threads(&shapes, 60);
        assert_probability_vector(&a);
        assert!(a == b);
        // Shapes near f64::MAX (whose totals used to need rescaling) are now outside the
        // sampler's domain: Marsaglia–Tsang is not exact there (MAX_SHAPE).
        let mut rng = seeded(61);
        for shapes in [
            vec![1e308; 3],
            vec![1e308, 1.0, 0.5],
            vec![f64::MAX / 2.0; 1000],
        ] {
            assert_eq!(
                try_sample_dirichlet(&shapes, &mut rng),
                Err(SampleError::ShapeTooLarge { index: 0 })
            );
        }
        let y = sample_dirichlet(&[MAX_SHAPE, MAX_SHAPE, 1.0], &mut rng);
        assert_probability_vector(&y);
        assert_eq!(
            try_sample_dirichlet(&[1.0, MAX_SHAPE * (1.0 + f64::EPSILON)], &mut rng),
            Err(SampleError::ShapeTooLarge { index: 1 })
        );
    }

    #[test]
    fn deterministic_given_the_generator_state() {
        for d in [2, 1000, 3 * CHUNK + 17] {
            let shapes: Vec<f64> = (0..d).map(|i| 0.1 + (i % 7) as f64).collect();
            let a = sample_dirichlet(&shapes, &mut seeded(40));
            let b = sample_dirichlet(&shapes, &mut seeded(40));
            let c = sample_dirichlet(&shapes, &mut seeded(41));
            assert_eq!(a, b);
            assert_ne!(a, c);
            // and the generator advances: two draws in a row differ
            let mut rng = seeded(42);
            assert_ne!(
                sample_dirichlet(&shapes, &mut rng),
                sample_dirichlet(&shapes, &mut rng)
            );
        }
    }

    #[test]
    fn release_shapes_are_r_x_plus_alpha_and_checked() {
        let counts = Counts::new(vec![0.0, 2.0, 5.0], 10).unwrap();
        let p = DirichletParams {
            r: 0.5,
            alpha: Prior::PerCell(vec![1.0, 2.0, 3.0]),
        };
        assert_eq!(release_shapes(&counts, &p).unwrap(), vec![1.0, 3.0, 5.5]);
        let p = DirichletParams {
            r: 2.0,
            alpha: Prior::Uniform(0.25),
        };
        assert_eq!(
            release_shapes(&counts, &p).unwrap(),
            vec![0.25, 4.25, 10.25]
        );
        let p = DirichletParams {
            r: 1.0,
            alpha: Prior::PerCell(vec![1.0, 2.0]),
        };
        assert_eq!(
            release_shapes(&counts, &p),
            Err(SampleError::PriorDimension {
                got: 2,
                expected: 3
            })
        );
        let p = DirichletParams {
            r: f64::MAX,
            alpha: Prior::Uniform(1.0),
        };
        assert_eq!(
            release_shapes(&counts, &p),
            Err(SampleError::InvalidShape { index: 1 })
        );
        let p = DirichletParams {
            r: 1.0,
            alpha: Prior::Uniform(f64::NAN),
        };
        assert_eq!(
            release_shapes(&counts, &p),
            Err(SampleError::InvalidShape { index: 0 })
        );
    }

    #[test]
    fn invalid_shapes_are_errors() {
        let mut rng = seeded(50);
        assert_eq!(
            try_sample_dirichlet(&[1.0], &mut rng),
            Err(SampleError::TooFewCells)
        );
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(
                try_sample_dirichlet(&[1.0, bad], &mut rng),
                Err(SampleError::InvalidShape { index: 1 })
            );
        }
    }

    #[test]
    fn the_first_invalid_shape_is_found_in_any_block() {
        for index in [0, 1, 1023, 1024, 1025, 5000, 9999] {
            for bad in [0.0, -0.0, -3.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
                let mut shapes = vec![2.5; 10_000];
                shapes[index] = bad;
                // a later bad cell must not be reported first
                if index < 9_999 {
                    shapes[9_999] = -1.0;
                }
                assert_eq!(
                    first_invalid_shape(&shapes),
                    Some(index),
                    "{bad} at {index}"
                );
            }
        }
        assert_eq!(
            first_invalid_shape(&[f64::MIN_POSITIVE, 5e-324, MAX_SHAPE]),
            None
        );
        assert_eq!(first_invalid_shape(&[1.0, f64::MAX]), Some(1));
    }

    /// Kolmogorov–Smirnov distance between the empirical distribution of `draws` and `cdf`.
    fn ks_distance(mut draws: Vec<f64>, cdf: impl Fn(f64) -> f64) -> f64 {
        draws.sort_by(f64::total_cmp);
        let n = draws.len() as f64;
        draws
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let f = cdf(x);
                (f - i as f64 / n).abs().max((f - (i + 1) as f64 / n).abs())
            })
            .fold(0.0, f64::max)
    }

    /// The hand-written Marsaglia–Tsang sampler and the log-space path for shapes < 1, as
    /// `draw_chunk` runs them, against the Gamma CDF (regularised lower incomplete gamma): the
    /// KS distance of 20,000 draws stays below 1.95/√n, the 0.1% critical value (fixed seeds,
    /// so the test is repeatable; a wrong constant, e.g. c = 1/(2√d), moves D far past it).
    #[test]
    fn gamma_draws_follow_the_gamma_distribution() {
        use special::Gamma as _;
        let n = 20_000;
        let critical = 1.95 / (n as f64).sqrt();
        for (k, &a) in [0.05, 0.3, 0.9, 1.0, 1.5, 3.46, 40.0, 1e4]
            .iter()
            .enumerate()
        {
            let shapes = vec![a; n];
            let mut out = vec![0.0; n];
            let drawn = draw_chunk(&shapes, &mut out, &mut Keystream::from_seed([k as u8; 32]));
            // below 1 the chunk holds log Gamma(a) draws
            assert_eq!(drawn.any_log, a < 1.0);
            let draws: Vec<f64> = if a < 1.0 {
                out.iter().map(|l| l.exp()).collect()
            } else {
                out
            };
            let d = ks_distance(draws, |x| x.inc_gamma(a));
            assert!(d < critical, "shape {a}: KS distance {d} ≥ {critical}");
        }
    }

    /// `Keystream` is ChaCha20: word for word the stream of rand's `ChaCha20Rng` with the same
    /// seed, across buffer refills, and for the all-zero key the published first block
    /// (RFC 7539 §2.3.2's test vector for key 0, nonce 0, counter 0 begins 76 b8 e0 ad).
    #[test]
    fn keystream_is_the_chacha20_stream() {
        let mut zero = Keystream::from_seed([0; 32]);
        assert_eq!(
            zero.word().to_le_bytes(),
            [0x76, 0xb8, 0xe0, 0xad, 0xa0, 0xf1, 0x3d, 0x90]
        );
        for seed in [[0u8; 32], [7u8; 32], *b"0123456789abcdef0123456789abcdef"] {
            let mut ours = Keystream::from_seed(seed);
            let mut reference = ChaCha20Rng::from_seed(seed);
            for i in 0..20_000 {
                assert_eq!(ours.word(), reference.next_u64(), "word {i}");
            }
        }
    }

    #[test]
    fn os_rng_is_seeded_differently_each_time() {
        let (mut a, mut b) = (os_rng(), os_rng());
        assert_ne!(a.next_u64(), b.next_u64());
        assert_eq!(format!("{a:?}"), "CsRng(<state hidden>)");
    }
}

#[cfg(test)]
mod precision_measurement {
    use super::*;

    /// Measures where Marsaglia–Tsang in f64 stops resolving its own spread: for Dir(a, a) with
    /// a = 2^k, the share of distinct y₀ among 4,000 draws and the largest |y₀ − ½| in units
    /// of the Beta's sd 1/√(8a+4). Run with `--ignored --nocapture`; docs/PRIVACY.md quotes it.
    #[test]
    #[ignore]
    fn marsaglia_tsang_resolution_by_shape() {
        let mut rng = test_rng(7);
        for k in [30, 40, 45, 50, 52, 55, 60, 70, 80, 90, 100, 110] {
            let a = 2f64.powi(k);
            let mut ys: Vec<f64> = (0..4000)
                .map(|_| sample_dirichlet(&[a, a], &mut rng)[0])
                .collect();
            let sd = 1.0 / (8.0 * a + 4.0).sqrt();
            let spread = ys.iter().map(|y| (y - 0.5).abs()).fold(0.0, f64::max) / sd;
            ys.sort_by(f64::total_cmp);
            ys.dedup();
            println!(
                "a = 2^{k}: distinct {} / 4000, max |y0 - 1/2| = {spread:.2} sd",
                ys.len()
            );
        }
    }
}
