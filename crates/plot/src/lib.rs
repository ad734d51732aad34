//! # posenc-plot: the pictures of what position does
//!
//! PNG figures drawn with plotters' pure-Rust bitmap backend and text through ab_glyph
//! with the DejaVu Sans file in `assets/` (no system fonts or -dev packages needed):
//!
//! - [`encoding()`]: an encoding as a heatmap (position × dimension), its dot products
//!   and their decay, its sin/cos pairs as circles, and `PE(p+k) = M_k·PE(p)`;
//! - [`attention()`]: attention maps, a heatmap per layer and head;
//! - [`extrapolation`]: perplexity by window length and loss by position, from series;
//! - [`passkey()`]: passkey-retrieval accuracy by prompt length and depth;
//! - [`chart`]: the primitives and rules every figure shares (series with bands, heatmaps,
//!   one palette).
//!
//! It draws data handed to it and knows no task: each task turns its own results into
//! these figures (`posenc_kotoba::figures`, `posenc_lm::figures`,
//! `posenc_lengthgen::figures`).
//!
//! ```no_run
//! # fn main() -> posenc_plot::Result<()> {
//! let sinusoidal = posenc::EncodingConfig::from_kind("sinusoidal")?;
//! let pe = sinusoidal.build_untrained(64, 4, &candle_core::Device::Cpu)?;
//! posenc_plot::encoding(pe.as_ref(), 64, 100, std::path::Path::new("sinusoidal.png"))?;
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod attention;
pub mod chart;
pub mod encoding;
pub mod error;
pub mod extrapolation;
pub mod passkey;

pub use attention::attention;
pub use encoding::encoding;
pub use error::{Error, Result};
pub use passkey::passkey;
