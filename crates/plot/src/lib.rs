//! # posenc-plot: the pictures of what position does
//!
//! PNG figures drawn with plotters' pure-Rust bitmap backend and text through ab_glyph
//! with the DejaVu Sans file in `assets/` (no system fonts or -dev packages needed):
//!
//! - [`encoding()`]: an encoding as a heatmap (position × dimension), its dot products
//!   and their decay, its sin/cos pairs as circles, and `PE(p+k) = M_k·PE(p)`;
//! - [`attention()`]: a trained model's attention maps for one sentence;
//! - [`experiment()`]: validation curves of every encoding and exact match by length;
//! - [`passkey()`]: passkey-retrieval accuracy by prompt length and depth;
//! - [`lengthgen()`]: exact match by instance length on an algorithmic problem.
//!
//! ```no_run
//! # fn main() -> posenc_plot::Result<()> {
//! let sinusoidal = posenc::EncodingConfig::from_kind("sinusoidal")?;
//! posenc_plot::encoding(&sinusoidal, 64, 4, 100, std::path::Path::new("sinusoidal.png"))?;
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod attention;
pub mod chart;
pub mod encoding;
pub mod error;
pub mod experiment;
pub mod lengthgen;
pub mod lm_experiment;
pub mod passkey;

pub use attention::attention;
pub use encoding::encoding;
pub use error::{Error, Result};
pub use experiment::experiment;
pub use lengthgen::lengthgen;
pub use lm_experiment::lm_experiment;
pub use passkey::passkey;
