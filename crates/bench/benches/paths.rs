//! Inference through candle's fused kernels (softmax, LayerNorm, rotary) against the
//! differentiable compositions the training path uses, on the same weights and inputs.
//!
//! ```sh
//! cargo bench -p posenc-bench --bench paths
//! ```

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use criterion::{criterion_group, criterion_main, Criterion};
use posenc::EncodingConfig;
use posenc_transformer::{Config, Mask, Transformer};

fn bench(c: &mut Criterion) {
    let dev = Device::Cpu;
    for kind in ["sinusoidal", "rope"] {
        let cfg = Config {
            encoding: EncodingConfig::from_kind(kind).unwrap().into(),
            ..Config::benchmark_reference()
        };
        let varmap = VarMap::new();
        // Variables track gradients: the differentiable path.
        let trainable =
            Transformer::new(&cfg, VarBuilder::from_varmap(&varmap, DType::F32, &dev)).unwrap();
        // The same weights as plain tensors: the fused path.
        let frozen = Transformer::frozen(&cfg, &varmap, &dev).unwrap();
        let ids: Vec<u32> = (0..16 * 24).map(|i| (i * 7 % 997) as u32).collect();
        let src = Tensor::from_vec(ids, (16, 24), &dev).unwrap();
        let tgt = src.clone();
        let tgt_mask = Transformer::target_mask(&tgt, 999).unwrap();
        let src_mask = Mask::padding(&src, 999).unwrap();
        let mut group = c.benchmark_group(format!("forward/{kind}/b16-len24"));
        group.sample_size(10);
        for (name, model) in [("fused", &frozen), ("differentiable", &trainable)] {
            group.bench_function(name, |b| {
                b.iter(|| {
                    model
                        .forward(&src, &tgt, Some(&src_mask), Some(&tgt_mask))
                        .unwrap()
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
