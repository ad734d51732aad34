//! The fused label-smoothed cross-entropy against the composition it replaces
//! (log-softmax, then the label-smoothed NLL), forward and backward, at the reference
//! benchmark's size: 64 × 24 targets over a vocabulary of 1000.
//!
//! ```sh
//! cargo bench -p posenc-bench --bench loss
//! ```

use candle_core::{DType, Device, Tensor, Var, D};
use criterion::{criterion_group, criterion_main, Criterion};
use posenc_train::loss::{label_smoothed_cross_entropy, label_smoothed_nll};

fn bench(c: &mut Criterion) {
    posenc_kernels::keep_freed_memory();
    let (n, v) = (64 * 24, 1000);
    let logits =
        Var::from_tensor(&Tensor::randn(0f32, 1.0, (n, v), &Device::Cpu).unwrap()).unwrap();
    let targets: Vec<u32> = (0..n).map(|i| (4 + i * 7919 % (v - 4)) as u32).collect();
    let targets = Tensor::from_vec(targets, n, &Device::Cpu)
        .unwrap()
        .to_dtype(DType::U32)
        .unwrap();
    let mut g = c.benchmark_group("label-smoothed cross-entropy (1536×1000)");
    g.sample_size(20);
    g.bench_function("fused/forward+backward", |b| {
        b.iter(|| {
            label_smoothed_cross_entropy(logits.as_tensor(), &targets, 0.1, 0)
                .unwrap()
                .backward()
                .unwrap()
        })
    });
    g.bench_function("composite/forward+backward", |b| {
        b.iter(|| {
            let logp = candle_nn::ops::log_softmax(logits.as_tensor(), D::Minus1).unwrap();
            label_smoothed_nll(&logp, &targets, 0.1, 0)
                .unwrap()
                .backward()
                .unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
