//! The quantized matrix–vector product of a decode step: `ops::quantized` on each kernel
//! this CPU runs, against candle's `QMatMul` on the same weight, for each GGUF format at
//! SmolLM2-135M's shapes. Rounds alternate between the implementations; the report is the
//! median time per product, the weight bytes read per second, and candle's time ÷ ours.
//!
//! Each product reads one weight, which a repeated product would find in the cache where a
//! model's decode step (92 MB of weights for SmolLM2-135M) never does: so the products
//! cycle through copies of the weight, 128 MB in all, and the table also gives the product
//! with the weight in the cache (one copy).
//!
//! ```sh
//! cargo bench -p posenc-bench --bench quantized          # 15 rounds
//! cargo bench -p posenc-bench --bench quantized -- 40    # more rounds
//! ```

use std::sync::Arc;
use std::time::Instant;

use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use posenc_kernels::quantized::{quantized_matmul_on, Format, Kernel};

/// `(rows, columns)` of SmolLM2-135M's products (q/o, gate/up, down, the tied head), and
/// one whose width the K-quants' 256-value blocks divide (576 is not).
const SHAPES: [(usize, usize); 5] = [
    (576, 576),
    (1536, 576),
    (576, 1536),
    (49152, 576),
    (2048, 2048),
];
/// Every format with a kernel in `ops::quantized`.
fn formats() -> [GgmlDType; 5] {
    Format::ALL.map(Format::dtype)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Bytes of weights the products cycle through, past any cache.
const STREAMED: usize = 128 << 20;

/// Seconds per call of `f`, over enough calls to take about 20 ms.
fn time(f: &mut dyn FnMut()) -> f64 {
    f();
    let t = Instant::now();
    let mut n = 0;
    while t.elapsed().as_secs_f64() < 0.02 {
        f();
        n += 1;
    }
    t.elapsed().as_secs_f64() / f64::from(n)
}

fn main() {
    posenc_kernels::keep_freed_memory();
    let rounds = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(15usize);
    posenc_kernels::on_worker_thread(|| run(rounds));
}

fn run(rounds: usize) {
    let dev = Device::Cpu;
    let kernels = Kernel::available();
    println!(
        "{} threads, kernels {kernels:?}, {rounds} alternating rounds, medians; x is one row",
        candle_core::utils::get_num_threads()
    );
    println!("| format | weight | in cache | implementation | µs per product | weight GB/s | candle ÷ this |");
    println!("|---|---|---|---|---:|---:|---:|");
    for dtype in formats() {
        for ((n, k), cached) in SHAPES.iter().flat_map(|&s| [(s, false), (s, true)]) {
            if k % dtype.block_size() != 0 {
                continue;
            }
            let w = Tensor::randn(0f32, 1.0, (n, k), &dev).unwrap();
            let q = QTensor::quantize(&w, dtype).unwrap();
            let bytes = q.storage_size_in_bytes();
            let copies = if cached { 1 } else { STREAMED.div_ceil(bytes) };
            let data = q.data().unwrap();
            let qs: Vec<Arc<QTensor>> = (0..copies)
                .map(|_| Arc::new(qtensor_from_ggml(dtype, &data, vec![n, k], &dev).unwrap()))
                .collect();
            let bytes = bytes as f64;
            let x = Tensor::randn(0f32, 1.0, (1, k), &dev).unwrap();
            let candles: Vec<QMatMul> = qs
                .iter()
                .map(|q| QMatMul::from_arc(q.clone()).unwrap())
                .collect();
            let (mut next_candle, mut next_ours) = (0, 0);
            let ours: Vec<Kernel> = kernels
                .iter()
                .copied()
                .filter(|&kernel| quantized_matmul_on(kernel, &x, &qs[..1]).unwrap().is_some())
                .collect();
            // candle repacks a weight at its first product (as a model's first token does
            // once): every copy is multiplied once before the clock starts.
            for candle in &candles {
                candle.forward(&x).unwrap();
            }
            let mut times = vec![Vec::new(); ours.len() + 1];
            for _ in 0..rounds {
                times[0].push(time(&mut || {
                    next_candle = (next_candle + 1) % copies;
                    candles[next_candle].forward(&x).unwrap();
                }));
                for (i, &kernel) in ours.iter().enumerate() {
                    times[i + 1].push(time(&mut || {
                        next_ours = (next_ours + 1) % copies;
                        quantized_matmul_on(kernel, &x, &qs[next_ours..next_ours + 1]).unwrap();
                    }));
                }
            }
            let candle_times = times[0].clone();
            let names = std::iter::once("candle QMatMul".to_string())
                .chain(ours.iter().map(|k| format!("ops::quantized, {k:?}")));
            for (name, t) in names.zip(times) {
                // The median of the per-round ratios.
                let ratios = candle_times.iter().zip(&t).map(|(c, a)| c / a).collect();
                let t = median(t);
                println!(
                    "| {dtype:?} | {n} × {k} | {} | {name} | {:.1} | {:.1} | {:.2}× |",
                    if cached { "yes" } else { "no" },
                    t * 1e6,
                    bytes / t / 1e9,
                    median(ratios)
                );
            }
        }
    }
}
