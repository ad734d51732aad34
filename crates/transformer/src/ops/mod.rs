//! Fused CPU kernels with their own backward, for the training path: each replaces a
//! composition of candle ops (many passes over memory, each with its own backward node) by
//! one pass forward and one backward, parallel over rows. Each is tested against the
//! composition it replaces, forward and backward, and against finite differences.

mod attention;
mod bias;
mod gelu;
mod layer_norm;
mod linear;
mod matmul;
mod simd;
mod softmax;

pub use attention::attention;
pub use bias::add_bias;
pub use gelu::gelu;
pub use layer_norm::layer_norm;
pub use linear::linear;
pub use matmul::matmul;
pub use softmax::masked_softmax;
