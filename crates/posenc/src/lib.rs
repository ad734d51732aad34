//! # posenc: swappable positional encodings for Transformers on candle
//!
//! Self-attention is blind to order: permute the tokens and the outputs permute with
//! them. A positional encoding is what tells "the dog chases the cat" from "the cat
//! chases the dog". This crate holds every common encoding behind one trait,
//! [`PositionalEncoding`]: each declares what it does ([`Capabilities`]) and implements a
//! few hooks (add to the embeddings, rotate queries and keys, bias the scores from the
//! positions, from the layer's input or from the scores themselves), which a Transformer
//! calls without knowing which encoding it has. [`EncodingConfig`] builds any of them from
//! JSON, and [`hf`] each layer's from a Hugging Face model's `config.json`; [`analysis`]
//! measures the properties the literature asks of them.
//!
//! | kind | hook | module |
//! |---|---|---|
//! | `none` | — | [`none`] |
//! | `sinusoidal`, `sinusoidal-concat` | add | [`sinusoidal`] |
//! | `sinusoidal-2d` | add, by a patch's column and row (MAE) | [`sinusoidal_2d`] |
//! | `learned` | add | [`learned`] |
//! | `learned-2d` | add, a row per patch, resampled to other grids (ViT, timm) | [`learned_2d`] |
//! | `rope` | rotate | [`rope`] |
//! | `p-rope` | rotate (the fastest share of the pairs) | [`prope`] |
//! | `mrope` | rotate, by a token's time, row and column (Qwen2-VL, Qwen3-VL) | [`mrope`] |
//! | `rope-2d` | rotate, half the pairs by a patch's column and half by its row (RoPE-Axial) | [`rope_2d`] |
//! | `rope-mixed` | rotate, each pair by learned frequencies over row and column (RoPE-Mixed) | [`rope_mixed`] |
//! | `liere` | rotate, each block of a head by the exponential of learned generators (LieRE) | [`liere`] |
//! | `hope` | rotate (the pairs that turn within the trained context) | [`hope`] |
//! | `xpos` | rotate (queries and keys apart) | [`xpos`] |
//! | `alibi` | bias | [`alibi`] |
//! | `alibi-2d` | bias, by the distance between two patches | [`alibi_2d`] |
//! | `t5` | bias | [`t5`] |
//! | `kerple` | bias | [`kerple`] |
//! | `fire` | bias | [`fire`] |
//! | `cope` | bias from the scores | [`cope`] |
//! | `ssmax` | bias from the scores (Scalable-Softmax's `s · ln n`) | [`ssmax`] |
//! | `fraction`, `index`, `binary`, `sine-single` | add | [`naive`] |
//! | `layers` | each layer its own: a pattern of the above | [`layers`] |
//! | `window` | bias (keys past a sliding window masked) | [`window`] |
//! | `pope` | rotate (magnitudes from the content, phases from the position; twice as wide) | [`pope`] |
//! | `fox` | decay read from the data (the Forgetting Transformer's forget gates) | [`fox`] |
//! | `sink` | a sink per head (a key of value zero every query sees) | [`sink`] |
//! | `abacus` | add, from the tokens (each digit's place within its number) | [`abacus`] |
//! | `coupling` | add, from the tokens (position coupling: a digit's significance, the operators beside the units) | [`coupling`] |
//! | `coupling-bias` | bias, from the tokens (position coupling's ids as a relative bias) | [`coupling_bias`] |
//! | `stack` | several of the above in the same layers | [`stack`] |
//!
//! In your own candle attention: build a kind from its config, turn the queries and keys,
//! add its bias to the scores where it has one (`examples/own_attention.rs` calls every
//! hook, `examples/own_encoding.rs` adds a kind).
//!
//! ```
//! use candle_core::{Device, Tensor};
//! use posenc::{BiasContext, EncodingConfig, Positions, RotateContext};
//!
//! # fn main() -> posenc::Result<()> {
//! let dev = Device::Cpu;
//! // Any kind, written as configs and the command line write it.
//! let config: EncodingConfig = r#"{"kind": "rope", "base": 500000}"#.parse()?;
//! let rope = config.build_untrained(64, 4, &dev)?; // d_model 64: 4 heads of 16
//! // Your queries and keys, (batch, heads, sequence, head_dim), at positions 0..10.
//! let q = Tensor::randn(0f32, 1.0, (1, 4, 10, 16), &dev)?;
//! let k = Tensor::randn(0f32, 1.0, (1, 4, 10, 16), &dev)?;
//! let q = rope.rotate(&q, &RotateContext::query(Positions::From(0)))?;
//! let k = rope.rotate(&k, &RotateContext::key(Positions::From(0)))?;
//! let mut scores = (q.matmul(&k.t()?)? / 4.0)?;
//! // ALiBi, T5 and their kin bias the scores; RoPE has no bias.
//! if let Some(bias) = rope.bias(&BiasContext::square(10, Positions::From(0)))? {
//!     scores = scores.broadcast_add(&bias)?;
//! }
//! assert_eq!(scores.dims(), &[1, 4, 10, 10]);
//! # Ok(())
//! # }
//! ```
//!
#![doc = include_str!("precision.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod cache;
mod config;
mod encoding;
mod error;

pub mod abacus;
pub mod alibi;
pub mod alibi_2d;
pub mod analysis;
pub mod cope;
pub mod coupling;
pub mod coupling_bias;
pub mod draws;
pub mod fire;
pub mod fox;
pub mod hf;
pub mod hope;
pub mod householder;
pub mod kerple;
pub mod layers;
pub mod learned;
pub mod learned_2d;
pub mod liere;
pub mod limits;
pub mod mrope;
pub mod naive;
pub mod none;
pub mod path;
pub mod per_layer;
pub mod pope;
pub mod presets;
pub mod prope;
pub mod qk_norm;
pub mod rope;
pub mod rope_2d;
pub mod rope_mixed;
pub mod rope_scaling;
pub mod sink;
pub mod sinusoidal;
pub mod sinusoidal_2d;
pub mod ssmax;
pub mod stack;
pub mod t5;
pub mod temperature;
pub mod window;
pub mod xpos;

pub use config::{register, EncodingConfig, EncodingSpec, Registration, Setting, Target};
pub use encoding::{
    inverse_frequencies, BiasContext, Capabilities, Decay, Direction, EmbedContext, Form,
    FromInput, Index, InputContext, PairLayout, PositionalEncoding, Positions, Role, RotateContext,
    ScoreContext, Table, Tokens,
};
pub use error::{Error, Result};
pub use layers::for_layer;

/// The presets every build knows ([`presets`]): named configs of the kinds below, which
/// [`EncodingConfig`] resolves by name where no kind has it, as it resolves the kinds
/// through [`BUILT_IN`].
pub const BUILT_IN_PRESETS: &[presets::Preset] = presets::PRESETS;

/// Every encoding this crate ships, in the order of the documents: one line each.
pub const BUILT_IN: &[Registration] = &[
    Registration::of::<crate::none::NoneConfig>(),
    Registration::of::<crate::sinusoidal::SinusoidalConfig>(),
    Registration::of::<crate::sinusoidal::SinusoidalConcatConfig>(),
    Registration::of::<crate::sinusoidal_2d::Sinusoidal2dConfig>(),
    Registration::of::<crate::learned::LearnedConfig>(),
    Registration::of::<crate::learned_2d::Learned2dConfig>(),
    Registration::of::<crate::rope::RopeConfig>(),
    Registration::of::<crate::prope::PRopeConfig>(),
    Registration::of::<crate::mrope::MropeConfig>(),
    Registration::of::<crate::rope_2d::Rope2dConfig>(),
    Registration::of::<crate::rope_mixed::RopeMixedConfig>(),
    Registration::of::<crate::liere::LiereConfig>(),
    Registration::of::<crate::xpos::XposConfig>(),
    Registration::of::<crate::alibi::AlibiConfig>(),
    Registration::of::<crate::alibi_2d::Alibi2dConfig>(),
    Registration::of::<crate::t5::T5Config>(),
    Registration::of::<crate::kerple::KerpleConfig>(),
    Registration::of::<crate::fire::FireConfig>(),
    Registration::of::<crate::fox::FoxConfig>(),
    Registration::of::<crate::path::PathConfig>(),
    Registration::of::<crate::cope::CopeConfig>(),
    Registration::of::<crate::naive::FractionConfig>(),
    Registration::of::<crate::naive::IndexConfig>(),
    Registration::of::<crate::naive::BinaryConfig>(),
    Registration::of::<crate::naive::SineSingleConfig>(),
    Registration::of::<crate::layers::LayersConfig>(),
    Registration::of::<crate::hope::HopeConfig>(),
    Registration::of::<crate::ssmax::SsmaxConfig>(),
    Registration::of::<crate::qk_norm::QkNormConfig>(),
    Registration::of::<crate::temperature::TemperatureConfig>(),
    Registration::of::<crate::stack::StackConfig>(),
    Registration::of::<crate::window::WindowConfig>(),
    Registration::of::<crate::sink::SinkConfig>(),
    Registration::of::<crate::pope::PopeConfig>(),
    Registration::of::<crate::abacus::AbacusConfig>(),
    Registration::of::<crate::coupling::CouplingConfig>(),
    Registration::of::<crate::coupling_bias::CouplingBiasConfig>(),
];
