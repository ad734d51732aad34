//! Fused CPU kernels with their own backward, for the training path: each replaces a
//! composition of candle ops (many passes over memory, each with its own backward node) by
//! one pass forward and one backward, parallel over rows. Each is tested against the
//! composition it replaces, forward and backward, and against finite differences.

mod attention;
mod bias;
mod flash_attention;
mod gelu;
mod layer_norm;
mod linear;
mod matmul;
mod packed_attention;
pub mod quantized;
mod simd;
mod softmax;
pub mod with_grad;

pub use attention::attention;
pub use bias::add_bias;
pub use flash_attention::{flash_attention, TileBias};
pub use gelu::gelu;
pub(crate) use gelu::gelu_anywhere;
pub use layer_norm::{add_layer_norm, layer_norm};
pub use linear::{linear, linear_gelu, linear_rows};
pub use matmul::matmul;
pub use packed_attention::packed_attention;
pub use softmax::masked_softmax;

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
