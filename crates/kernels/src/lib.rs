//! # posenc-kernels: the kernels under posenc's Transformer
//!
//! The model crate (`posenc-transformer`) calls one function per op and never asks which
//! device or dtype it runs on: each function here decides. In f32 on the CPU it runs this
//! crate's fused kernel, which makes one pass forward and one backward, parallel over rows,
//! where candle's composition makes many passes (each with its own graph node); elsewhere
//! (a GPU, f16, f64) candle's ops, under one graph node with its backward
//! ([`with_grad`]) where a gradient flows.
//!
//! | op | function | the CPU's f32 kernel | elsewhere |
//! |---|---|---|---|
//! | linear layer, optional ReLU | [`linear()`], [`linear_rows`] | gemm, bias and ReLU fused | candle's matmul under one node |
//! | linear layer, then GELU | [`linear_gelu`] | gemm then erf GELU in one pass | [`linear()`] then [`gelu()`] |
//! | product | [`matmul`] | gemm on all cores | candle's matmul |
//! | GELU (erf) | [`gelu()`] | [`cpu::gelu`] | candle's `gelu_erf` |
//! | LayerNorm, RMSNorm | [`layer_norm()`], [`add_layer_norm()`], [`rms_norm`] | [`cpu::layer_norm`], [`cpu::add_layer_norm`] | candle-nn's kernels, [`with_grad`]'s backward |
//! | attention without a score bias | [`attention()`] | scores, mask, softmax, dropout, sum | candle's ops under one node |
//! | attention weights with a bias | [`attention_softmax`] | [`cpu::masked_softmax`] | scale, bias, mask fill, softmax, empty rows to zero |
//! | attention over a cache, by tiles | [`flash_attention()`] | [`cpu::flash_attention`] | `None`: the model composes it |
//! | a cache's quantized rows | [`kv_blocks::quantize`], [`kv_blocks::dequantize`] | candle's `QTensor::quantize`; rows widened per tile | the same, through the CPU |
//! | attention of packed sequences | [`packed_attention()`] | [`cpu::packed_attention`] | `None`: the model composes it |
//! | quantized product (GGUF) | [`quantized::quantized_matmul`] | SIMD dot products per format | `None`: candle's `QMatMul` |
//! | label-smoothed cross-entropy | [`smoothed_cross_entropy`] | log-softmax and loss fused | `None`: the caller composes it |
//! | AdamW | [`adamw_in_place`] | moments and update in place | `false`: the caller's tensor ops |
//!
//! Every kernel is tested against the composition it replaces, forward and backward, in
//! f64, and against finite differences (`tests/`). [`process`] holds what a program that
//! runs them sets up first thing in `main`.

#![deny(missing_docs)]

mod adamw;
mod attention;
mod bias;
mod cross_entropy;
mod flash_attention;
mod gelu;
pub mod kv_blocks;
mod layer_norm;
mod linear;
pub mod machine;
mod matmul;
mod packed_attention;
pub mod process;
pub mod quantized;
mod simd;
mod softmax;
pub mod with_grad;

pub use adamw::{adamw_in_place, AdamWStep};
pub use attention::attention;
pub use cross_entropy::smoothed_cross_entropy;
pub use flash_attention::{flash_attention, Causal, TileBias};
pub use gelu::gelu;
pub use layer_norm::{add_layer_norm, layer_norm, rms_norm};
pub use linear::{linear, linear_gelu, linear_rows};
pub use matmul::matmul;
pub use packed_attention::packed_attention;
pub use process::{give_back_freed_memory, keep_freed_memory, on_worker_thread, tune_for_training};
pub use softmax::attention_softmax;

/// The CPU's f32 kernels themselves, with no dispatch: for tests and benchmarks that
/// set them against the compositions they replace. A model calls the functions at the
/// crate's root, which pick these where they run.
pub mod cpu {
    pub use crate::bias::add_bias;
    pub use crate::flash_attention::flash_attention_cpu as flash_attention;
    pub use crate::gelu::gelu_cpu as gelu;
    pub use crate::layer_norm::{
        add_layer_norm_cpu as add_layer_norm, layer_norm_cpu as layer_norm,
    };
    pub use crate::packed_attention::packed_attention_cpu as packed_attention;
    pub use crate::softmax::masked_softmax;
}

use candle_core::DType;

/// The most negative finite value of `dtype`: what a masked score is replaced by, so that
/// no score is `−∞` and nothing overflows to NaN in f16 or bf16.
pub fn lowest(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => -65504.0,
        DType::BF16 => -3.38e38,
        DType::F64 => f64::MIN,
        _ => f64::from(f32::MIN),
    }
}

use std::mem::MaybeUninit;

/// A new `len`-element output, written in parallel by `fill(task, chunk)` for consecutive
/// chunks of `chunk` elements (the last may be shorter); `task · chunk` is where a chunk
/// starts.
///
/// `vec![0.0; len]` would zero the whole buffer first, on the calling thread, while the
/// other cores wait (for GELU over MiniLM's hidden layer that was 22 MB, a few
/// milliseconds): here each task zeroes its own chunk, in parallel and just before writing
/// it, while it is in cache.
pub(crate) fn par_output(
    len: usize,
    chunk: usize,
    fill: impl Fn(usize, &mut [f32]) + Sync + Send,
) -> Vec<f32> {
    let zeroed = |task, slots: &mut [MaybeUninit<f32>]| {
        slots.iter_mut().for_each(|s| {
            s.write(0.0);
        });
        // SAFETY: zeroed on the line above.
        fill(task, unsafe { assume_init(slots) });
    };
    // SAFETY: each chunk is zeroed, so initialised, before `fill` sees it.
    unsafe { par_output_uninit(len, chunk, zeroed) }
}

/// [`par_output`] without the zeroing, for kernels that overwrite their whole chunk anyway
/// (a product written by gemm).
///
/// # Safety
/// `fill` must initialise every element of its chunk.
pub(crate) unsafe fn par_output_uninit(
    len: usize,
    chunk: usize,
    fill: impl Fn(usize, &mut [MaybeUninit<f32>]) + Sync + Send,
) -> Vec<f32> {
    use rayon::prelude::*;
    let mut out: Vec<f32> = Vec::with_capacity(len);
    out.spare_capacity_mut()
        .par_chunks_mut(chunk.max(1))
        .enumerate()
        .for_each(|(task, slots)| fill(task, slots));
    // SAFETY: the chunks cover all `len` elements, each initialised by its task (the
    // caller's promise).
    unsafe { out.set_len(len) };
    out
}

/// `slots` as the f32s they hold.
///
/// # Safety
/// Every element of `slots` must be initialised.
pub(crate) unsafe fn assume_init(slots: &mut [MaybeUninit<f32>]) -> &mut [f32] {
    // SAFETY: `MaybeUninit<f32>` has f32's layout, and the caller promises initialisation.
    unsafe { &mut *(slots as *mut [MaybeUninit<f32>] as *mut [f32]) }
}
