//! Benchmarks of the privacy core: ψ′, every calibration, and Dirichlet sampling at
//! d = 16, 1,000 and 1,000,000, the ChaCha20 keystream behind the sampler, and the discrete
//! baselines at d = 1,000 and 100,000. Run with `cargo bench --bench privacy`.
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dirichlet_release::privacy::baseline::{gaussian_release, laplace_release};
use dirichlet_release::privacy::curve::dirichlet_rdp;
use dirichlet_release::privacy::discrete::{gaussian_sigma, laplace_scale};
use dirichlet_release::privacy::exact::exact_rdp;
use dirichlet_release::privacy::sampler::{os_rng, sample_dirichlet};
use dirichlet_release::privacy::special::{ln_gamma, trigamma};
use dirichlet_release::privacy::types::Relation;
use dirichlet_release::privacy::{calibrate, Calibration, Epsilon, Order, Prior, Sensitivity};

fn special(c: &mut Criterion) {
    let mut g = c.benchmark_group("trigamma");
    for x in [1e-3, 0.5, 3.46, 7.9, 50.0, 1e6] {
        g.bench_with_input(BenchmarkId::from_parameter(x), &x, |b, &x| {
            b.iter(|| trigamma(black_box(x)))
        });
    }
    g.finish();
    // ln Γ drives the calibrations' estimate of ε* (four per evaluation).
    let mut g = c.benchmark_group("ln_gamma");
    for x in [0.5, 3.46, 200.0] {
        g.bench_with_input(BenchmarkId::from_parameter(x), &x, |b, &x| {
            b.iter(|| ln_gamma(black_box(x)))
        });
    }
    g.finish();
}

/// One evaluation of each price: the exact ε* (what calibrations solve against and releases
/// are charged) and 001 Corollary 3 (custom sensitivities).
fn prices(c: &mut Criterion) {
    let mut g = c.benchmark_group("price");
    let cases = [
        ("replace_one", 2.0, 1.0, 3.46, Relation::ReplaceOne),
        ("replace_one", 8.0, 0.1, 1.0, Relation::ReplaceOne),
        ("add_remove_one", 2.0, 1.0, 3.46, Relation::AddRemoveOne),
        ("replace_one", 2.0, 1.0, 1e6, Relation::ReplaceOne),
        // Next to the pole α = (λ − 1)r (posterior's ε = 10): the singular part in closed form.
        ("replace_one", 2.0, 1.0, 1.0000908, Relation::ReplaceOne),
        // diffuse's ε = 10 with α = 10.
        ("replace_one", 2.0, 7.434, 10.0, Relation::ReplaceOne),
    ];
    for (name, lambda, r, alpha, relation) in cases {
        let order = Order::new(lambda).unwrap();
        let prior = Prior::Uniform(alpha);
        g.bench_function(format!("exact_{name}/l{lambda}_r{r}_a{alpha}"), |b| {
            b.iter(|| exact_rdp(black_box(order), black_box(r), &prior, relation))
        });
    }
    let s = Sensitivity::REPLACE_ONE;
    let order = Order::new(2.0).unwrap();
    g.bench_function("corollary_3/l2_r1_a3.46", |b| {
        b.iter(|| dirichlet_rdp(black_box(order), black_box(1.0), 3.46, &s))
    });
    g.finish();
}

fn calibrations(c: &mut Criterion) {
    let s = Sensitivity::REPLACE_ONE;
    let order = Order::new(2.0).unwrap();
    let mut g = c.benchmark_group("calibrate");
    let cases = [
        ("dirichlet_prior_1", Calibration::Dirichlet { prior: 1.0 }),
        ("posterior_r_1", Calibration::Posterior { r: 1.0 }),
        (
            "diffuse_alpha_10",
            Calibration::Diffuse {
                alpha: Prior::Uniform(10.0),
            },
        ),
        (
            "explicit",
            Calibration::Explicit {
                r: 1.0,
                alpha: Prior::Uniform(3.46),
            },
        ),
    ];
    for (name, cal) in &cases {
        // ε = 100 at order 2 is past what posterior (r = 1) can reach: ε* diverges only
        // logarithmically at its pole, so the prior would sit within 1e-40 of it (a 422).
        for eps in [0.01, 1.0, 10.0] {
            let e = Epsilon::new(eps).unwrap();
            g.bench_with_input(BenchmarkId::new(*name, eps), &e, |b, &e| {
                b.iter(|| calibrate(black_box(cal), black_box(order), e, &s).unwrap())
            });
        }
    }
    let e = Epsilon::new(1.0).unwrap();
    g.bench_function("gaussian_sigma", |b| {
        b.iter(|| gaussian_sigma(black_box(order), e, &s).unwrap())
    });
    g.bench_function("laplace_scale_replace_one", |b| {
        b.iter(|| laplace_scale(black_box(order), e, &s, 1000).unwrap())
    });
    let custom = Sensitivity::new(3.0, 1.5).unwrap();
    g.bench_function("laplace_scale_custom_d1000", |b| {
        b.iter(|| laplace_scale(black_box(order), e, &custom, 1000).unwrap())
    });
    g.finish();
}

fn sampling(c: &mut Criterion) {
    let mut g = c.benchmark_group("sample_dirichlet");
    g.sample_size(20);
    let mut rng = os_rng();
    for d in [16usize, 1_000, 1_000_000] {
        // r·x + α for a histogram with mostly small counts and α = 3.46 (001's worked example),
        // and the tiny-shape regime (α = 0.01, sparse counts) that takes the log-space path.
        let hist: Vec<f64> = (0..d).map(|i| 3.46 + ((i * 7919) % 13) as f64).collect();
        let sparse: Vec<f64> = (0..d)
            .map(|i| if i % 10 == 0 { 5.01 } else { 0.01 })
            .collect();
        g.throughput(Throughput::Elements(d as u64));
        g.bench_with_input(BenchmarkId::new("histogram", d), &hist, |b, s| {
            b.iter(|| sample_dirichlet(black_box(s), &mut rng))
        });
        g.bench_with_input(
            BenchmarkId::new("sparse_tiny_shapes", d),
            &sparse,
            |b, s| b.iter(|| sample_dirichlet(black_box(s), &mut rng)),
        );
    }
    g.finish();
}

/// The two ways to get ChaCha20 keystream from the `chacha20` crate, 10⁶ 64-bit words each:
/// its RNG interface (rand's `ChaCha20Rng`, AVX2 at most) and its cipher interface (what the
/// sampler's chunks use; AVX-512 when built with `--cfg chacha20_avx512`, see
/// `.cargo/config.toml`). Same key, same stream (a unit test checks it).
fn keystream(c: &mut Criterion) {
    use chacha20::cipher::{KeyIvInit, StreamCipher};
    use rand::{Rng, SeedableRng};
    let mut g = c.benchmark_group("chacha20_keystream");
    g.sample_size(20);
    let words = 1_000_000usize;
    g.throughput(Throughput::Bytes(8 * words as u64));
    let mut buf = vec![0u8; 8 * words];
    let mut rng = rand::rngs::ChaCha20Rng::from_seed([7; 32]);
    g.bench_function("rng_fill_bytes", |b| {
        b.iter(|| rng.fill_bytes(black_box(&mut buf)))
    });
    let mut cipher = chacha20::ChaCha20Legacy::new(&[7u8; 32].into(), &[0u8; 8].into());
    g.bench_function("cipher_write_keystream_4k", |b| {
        b.iter(|| {
            for block in black_box(&mut buf).chunks_mut(4096) {
                cipher.write_keystream(block);
            }
        })
    });
    g.finish();
}

fn baselines(c: &mut Criterion) {
    let mut g = c.benchmark_group("baseline_release");
    g.sample_size(10);
    let mut rng = os_rng();
    for d in [1_000usize, 100_000] {
        let counts: Vec<f64> = (0..d).map(|i| ((i * 7919) % 50) as f64).collect();
        let counts = dirichlet_release::privacy::Counts::new(counts, d).unwrap();
        g.throughput(Throughput::Elements(d as u64));
        for noise in [1.0, 100.0] {
            g.bench_with_input(
                BenchmarkId::new(format!("discrete_gaussian_sigma_{noise}"), d),
                &counts,
                |b, c| b.iter(|| gaussian_release(black_box(c), noise, &mut rng).unwrap()),
            );
            g.bench_with_input(
                BenchmarkId::new(format!("discrete_laplace_scale_{noise}"), d),
                &counts,
                |b, c| b.iter(|| laplace_release(black_box(c), noise, &mut rng).unwrap()),
            );
        }
    }
    g.finish();
}

criterion_group!(
    benches,
    special,
    prices,
    calibrations,
    sampling,
    keystream,
    baselines
);
criterion_main!(benches);
