//! Each fused kernel of `ops` against the composition it replaces, forward and backward,
//! at the reference benchmark's sizes (batch 64 × 24 tokens, d_model 256, 8 heads).
//!
//! ```sh
//! cargo bench -p posenc-bench --bench fused
//! ```

use candle_core::{DType, Device, Tensor, Var, D};
use criterion::{criterion_group, criterion_main, Criterion};
use posenc_kernels::cpu::{
    add_bias, add_layer_norm, flash_attention, gelu, layer_norm, masked_softmax, packed_attention,
};
use posenc_kernels::{attention, linear, linear_gelu, matmul};

fn randn(shape: &[usize]) -> Tensor {
    Tensor::randn(0f32, 1.0, shape, &Device::Cpu).unwrap()
}

/// A named function of the input.
type Case<'a> = (&'a str, &'a dyn Fn(&Tensor) -> Tensor);

/// Times each case forward and, through `Σ f(x) ⊙ r`, backward. The `harness` case (the
/// identity) times that loss alone: subtract it from the others (it is the input's size,
/// so only an estimate where a case's output is larger).
fn both(c: &mut Criterion, group: &str, x: &Tensor, cases: &[Case]) {
    let mut g = c.benchmark_group(group);
    g.sample_size(20);
    let identity = |x: &Tensor| x.clone();
    let harness: Case = ("harness", &identity);
    for (name, f) in cases.iter().chain([&harness]) {
        let v = Var::from_tensor(x).unwrap();
        let r = randn(f(x).dims());
        g.bench_function(format!("{name}/forward+backward"), |b| {
            b.iter(|| {
                (f(v.as_tensor()) * &r)
                    .unwrap()
                    .sum_all()
                    .unwrap()
                    .backward()
                    .unwrap()
            })
        });
    }
    g.finish();
}

fn bench(c: &mut Criterion) {
    // As the programs that use these ops do: otherwise page faults dominate the timings.
    posenc_kernels::keep_freed_memory();
    let scores = randn(&[64, 8, 24, 24]);
    let causal: Vec<u8> = (0..24 * 24).map(|i| u8::from(i % 24 <= i / 24)).collect();
    let keep = Tensor::from_vec(causal, (1, 1, 24, 24), &Device::Cpu).unwrap();
    let scale = 1.0 / 32f64.sqrt();
    let composite = |x: &Tensor| {
        let keep = keep.broadcast_as(x.shape()).unwrap();
        let low = Tensor::new(f32::MIN, x.device())
            .unwrap()
            .broadcast_as(x.shape())
            .unwrap();
        let filled = keep.where_cond(&(x * scale).unwrap(), &low).unwrap();
        let y = candle_nn::ops::softmax(&filled, D::Minus1).unwrap();
        let any = keep
            .max_keepdim(D::Minus1)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        y.broadcast_mul(&any).unwrap()
    };
    let fused = |x: &Tensor| masked_softmax(x, Some(&keep), scale as f32).unwrap();
    both(
        c,
        "attention softmax (64×8×24×24, causal)",
        &scores,
        &[("fused", &fused), ("composite", &composite)],
    );

    let x = randn(&[64 * 24, 256]);
    let (w, b) = (randn(&[256]), randn(&[256]));
    let fused = |x: &Tensor| layer_norm(x, &w, &b, 1e-5).unwrap();
    let composite = |x: &Tensor| candle_nn::ops::layer_norm_slow(x, &w, &b, 1e-5).unwrap();
    both(
        c,
        "layer norm (1536×256)",
        &x,
        &[("fused", &fused), ("composite", &composite)],
    );

    let bias = Var::from_tensor(&randn(&[1024])).unwrap();
    let h = randn(&[64 * 24, 1024]);
    let fused = |x: &Tensor| add_bias(x, bias.as_tensor()).unwrap();
    let composite = |x: &Tensor| x.broadcast_add(bias.as_tensor()).unwrap();
    both(
        c,
        "bias add (1536×1024)",
        &h,
        &[("fused", &fused), ("composite", &composite)],
    );

    // A feed-forward layer's first projection: product, bias and ReLU.
    let x = randn(&[64 * 24, 256]);
    let (w, b) = (
        Var::from_tensor(&randn(&[1024, 256])).unwrap(),
        Var::from_tensor(&randn(&[1024])).unwrap(),
    );
    let fused = |x: &Tensor| linear(x, w.as_tensor(), Some(b.as_tensor()), true).unwrap();
    let composite = |x: &Tensor| {
        x.matmul(&w.as_tensor().t().unwrap())
            .unwrap()
            .broadcast_add(b.as_tensor())
            .unwrap()
            .relu()
            .unwrap()
    };
    both(
        c,
        "linear + bias + ReLU (1536×256 → 1024)",
        &x,
        &[("fused", &fused), ("composite", &composite)],
    );
    let ours = |x: &Tensor| matmul(x, &w.as_tensor().t().unwrap()).unwrap();
    let candle = |x: &Tensor| x.matmul(&w.as_tensor().t().unwrap()).unwrap();
    both(
        c,
        "matmul (1536×256 · 256×1024)",
        &x,
        &[("ops::matmul", &ours), ("candle", &candle)],
    );

    // Self-attention over heads split by strides from a projection, causal.
    let qkv = randn(&[64, 24, 8, 32]);
    let keep64 = keep.broadcast_as((64, 1, 24, 24)).unwrap();
    let heads = |x: &Tensor| x.transpose(1, 2).unwrap();
    let fused = |x: &Tensor| {
        let h = heads(x);
        attention(&h, &h, &h, 32, Some(&keep64), scale as f32, None)
            .unwrap()
            .0
    };
    let composite = |x: &Tensor| {
        let h = heads(x).contiguous().unwrap();
        let s = h.matmul(&h.t().unwrap()).unwrap();
        masked_softmax(&s, Some(&keep64), scale as f32)
            .unwrap()
            .matmul(&h)
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .reshape((64, 24, 256))
            .unwrap()
    };
    both(
        c,
        "attention (64×8 heads × 24 × 32, causal)",
        &qkv,
        &[("fused", &fused), ("composite", &composite)],
    );

    let fused = |x: &Tensor| gelu(x).unwrap();
    let composite = |x: &Tensor| x.gelu_erf().unwrap();
    both(
        c,
        "GELU, erf form (1536×1024)",
        &h,
        &[("fused", &fused), ("composite", &composite)],
    );

    // At inference (nothing tracked) GELU joins the linear op's bias pass: MiniLM's
    // feed-forward input, 32 sentences of 100 word pieces.
    let (x, w, b) = (randn(&[3200, 384]), randn(&[1536, 384]), randn(&[1536]));
    let mut g = c.benchmark_group("linear + bias + GELU at inference (3200×384 → 1536)");
    g.sample_size(20);
    g.bench_function("fused", |bench| {
        bench.iter(|| linear_gelu(&x, &w, Some(&b)).unwrap())
    });
    g.bench_function("linear, then gelu", |bench| {
        bench.iter(|| gelu(&linear(&x, &w, Some(&b), false).unwrap()).unwrap())
    });
    g.finish();

    // At inference the post-norm residual's sum joins LayerNorm's pass: MiniLM's hidden
    // states, 32 sentences of 110 word pieces.
    let (x, y) = (randn(&[3520, 384]), randn(&[3520, 384]));
    let (w, b) = (randn(&[384]), randn(&[384]));
    let mut g = c.benchmark_group("residual add + LayerNorm at inference (3520×384)");
    g.bench_function("fused", |bench| {
        bench.iter(|| add_layer_norm(&x, &y, &w, &b, 1e-12).unwrap())
    });
    g.bench_function("add, then layer_norm", |bench| {
        bench.iter(|| layer_norm(&(&x + &y).unwrap(), &w, &b, 1e-12).unwrap())
    });
    g.finish();

    // At inference a batch of sentences can drop its padding: 32 sentences of 90 to 111
    // word pieces, MiniLM's 12 heads of 32, packed against padded to the longest and masked.
    let lens: Vec<usize> = (0..32).map(|i| 90 + (i * 7) % 22).collect();
    let (n, longest) = (lens.iter().sum::<usize>(), *lens.iter().max().unwrap());
    let packed = randn(&[1, n, 3 * 384]);
    let padded = randn(&[32, longest, 3 * 384]);
    let keep: Vec<u8> = lens
        .iter()
        .flat_map(|&len| (0..longest).map(move |t| u8::from(t < len)))
        .collect();
    let keep = Tensor::from_vec(keep, (32, 1, 1, longest), &Device::Cpu).unwrap();
    let qkv = |x: &Tensor, i: usize| x.narrow(2, i * 384, 384).unwrap();
    let scale = 1.0 / 32f32.sqrt();
    let mut g = c.benchmark_group("attention at inference, 32 sentences of 90-111 tokens");
    g.sample_size(20);
    g.bench_function("packed", |bench| {
        let (q, k, v) = (qkv(&packed, 0), qkv(&packed, 1), qkv(&packed, 2));
        bench.iter(|| packed_attention(&q, &k, &v, 32, &lens, None, scale).unwrap())
    });
    g.bench_function("padded, masked", |bench| {
        let (q, k, v) = (qkv(&padded, 0), qkv(&padded, 1), qkv(&padded, 2));
        bench.iter(|| attention(&q, &k, &v, 32, Some(&keep), scale, None).unwrap())
    });
    g.finish();

    // A decode step over a long cache: SmolLM2's 9 query heads of 64 over 3 key/value
    // heads, one new token after 4 095 cached ones kept in f16 (as generation keeps them),
    // against the same keys and values widened to f32 and multiplied as matrices.
    let (h, kv, d, keys) = (9, 3, 64, 4096);
    let q = randn(&[1, h, 1, d]);
    let cache = |_| randn(&[1, kv, keys, d]).to_dtype(DType::F16).unwrap();
    let (k, v) = (cache(0), cache(1));
    let scale = 1.0 / (d as f32).sqrt();
    let mut g = c.benchmark_group("attention of one token over 4096 cached in f16");
    g.sample_size(30);
    g.bench_function("flash_attention", |bench| {
        bench.iter(|| flash_attention(&q, &k, &v, d, scale, Some((keys - 1).into()), None).unwrap())
    });
    g.bench_function("widened, matmul, softmax, matmul", |bench| {
        bench.iter(|| {
            let wide = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
            let (k, v) = (wide(&k), wide(&v));
            let q = q.reshape((1, kv, h / kv, d)).unwrap();
            let s = (matmul(&q, &k.t().unwrap()).unwrap() * f64::from(scale)).unwrap();
            let w = candle_nn::ops::softmax_last_dim(&s).unwrap();
            matmul(&w, &v).unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
