use candle_core::{Device, Tensor, D};
use std::time::Instant;
fn t(name: &str, f: impl Fn() -> candle_core::Result<Tensor>) {
    f().unwrap();
    f().unwrap();
    let n = 20;
    let s = Instant::now();
    for _ in 0..n {
        f().unwrap();
    }
    println!("{name} {:.2}", s.elapsed().as_secs_f64() * 1e3 / n as f64);
}
fn main() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    let x = Tensor::randn(0f32, 1., (3200, 384), &dev)?;
    let w = Tensor::randn(0f32, 1., (1152, 384), &dev)?;
    let w2 = Tensor::randn(0f32, 1., (1536, 384), &dev)?;
    let w3 = Tensor::randn(0f32, 1., (384, 1536), &dev)?;
    let h = Tensor::randn(0f32, 1., (3200, 1536), &dev)?;
    t("qkv", || x.matmul(&w.t()?));
    t("ff1", || x.matmul(&w2.t()?));
    t("ff2", || h.matmul(&w3.t()?));
    let q = Tensor::randn(0f32, 1., (384, 100, 32), &dev)?;
    let k = Tensor::randn(0f32, 1., (384, 100, 32), &dev)?;
    let p = Tensor::randn(0f32, 1., (384, 100, 100), &dev)?;
    t("qk", || q.matmul(&k.t()?));
    t("pv", || p.matmul(&q));
    t("softmax", || candle_nn::ops::softmax_last_dim(&p));
    t("fused softmax", || {
        posenc_transformer::ops::masked_softmax(&p, None, 1.0)
    });
    t("gelu", || h.gelu_erf());
    t("ops gelu", || posenc_transformer::ops::gelu(&h));
    let lw = Tensor::ones(384, candle_core::DType::F32, &dev)?;
    let lb = Tensor::zeros(384, candle_core::DType::F32, &dev)?;
    t("ops ln", || {
        posenc_transformer::ops::layer_norm(&x, &lw, &lb, 1e-5)
    });
    let b2 = Tensor::zeros(1536, candle_core::DType::F32, &dev)?;
    t("ops bias", || posenc_transformer::ops::add_bias(&h, &b2));
    t("add", || &x + &x);
    let x4 = Tensor::randn(0f32, 1., (32, 100, 12, 32), &dev)?;
    t("transpose-contig", || x4.transpose(1, 2)?.contiguous());
    let _ = D::Minus1;
    Ok(())
}
