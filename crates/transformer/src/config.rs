//! The model's configuration, saved as `config.json` beside the weights.

use candle_nn::Activation;
use posenc::{Direction, EncodingConfig, Target};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Error, Result};

/// The positional encoding of each stack. In JSON, one encoding serves both stacks
/// (`"encoding": {"kind": "t5"}`) or each stack names its own
/// (`"encoding": {"encoder": {"kind": "t5"}, "decoder": {"kind": "rope"}}`).
///
/// The encoder's self-attention is bidirectional and the decoder's causal
/// ([`Direction`]): an encoding whose paper uses a different form in each (T5's buckets,
/// ALiBi's distances) takes its default from the stack, and each stack has its own
/// instance (and weights) of the encoding.
///
/// ```
/// use posenc_transformer::Encodings;
/// let both: Encodings = serde_json::from_str(r#"{"kind": "t5"}"#).unwrap();
/// assert_eq!(both.encoder, both.decoder);
/// let split: Encodings =
///     serde_json::from_str(r#"{"encoder": {"kind": "alibi"}, "decoder": {"kind": "rope"}}"#).unwrap();
/// assert_eq!((split.encoder.kind(), split.decoder.kind()), ("alibi", "rope"));
/// // One encoding is written once; different ones per stack.
/// assert_eq!(serde_json::to_string(&both).unwrap(), r#"{"kind":"t5","max_distance":128,"num_buckets":32}"#);
/// let again: Encodings = serde_json::from_str(&serde_json::to_string(&split).unwrap()).unwrap();
/// assert_eq!(again, split);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Encodings {
    /// The encoder's encoding (bidirectional attention).
    pub encoder: EncodingConfig,
    /// The decoder's encoding (causal self-attention).
    pub decoder: EncodingConfig,
}

impl Encodings {
    /// The same encoding for both stacks.
    pub fn both(encoding: EncodingConfig) -> Self {
        Self {
            encoder: encoding.clone(),
            decoder: encoding,
        }
    }

    /// The kind, or `encoder-kind/decoder-kind` when the stacks differ in kind.
    pub fn kind(&self) -> String {
        let (e, d) = (self.encoder.kind(), self.decoder.kind());
        if e == d {
            e.to_string()
        } else {
            format!("{e}/{d}")
        }
    }

    /// Each stack's encoding with the direction of its self-attention.
    pub fn stacks(&self) -> [(&EncodingConfig, Direction); 2] {
        [
            (&self.encoder, Direction::Bidirectional),
            (&self.decoder, Direction::Causal),
        ]
    }
}

impl From<EncodingConfig> for Encodings {
    fn from(encoding: EncodingConfig) -> Self {
        Self::both(encoding)
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PerStack {
    encoder: EncodingConfig,
    decoder: EncodingConfig,
}

impl Serialize for Encodings {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        if self.encoder == self.decoder {
            self.encoder.serialize(serializer)
        } else {
            PerStack {
                encoder: self.encoder.clone(),
                decoder: self.decoder.clone(),
            }
            .serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for Encodings {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        let value = serde_json::Value::deserialize(deserializer)?;
        if value.get("kind").is_some() || !value.is_object() {
            let both = EncodingConfig::deserialize(value).map_err(D::Error::custom)?;
            return Ok(Self::both(both));
        }
        let PerStack { encoder, decoder } =
            PerStack::deserialize(value).map_err(D::Error::custom)?;
        Ok(Self { encoder, decoder })
    }
}

/// Sizes and switches of an encoder-decoder Transformer. The defaults are the paper's base
/// model (Vaswani et al. 2017, Table 3) with the sinusoidal encoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Source vocabulary size.
    pub src_vocab_size: usize,
    /// Target vocabulary size.
    pub tgt_vocab_size: usize,
    /// Model width `d_model`.
    pub d_model: usize,
    /// Attention heads `h`; `d_model` must be divisible by it.
    pub heads: usize,
    /// Inner width of the feed-forward network `d_ff`.
    pub d_ff: usize,
    /// Encoder layers `N` (0 for a decoder-only model).
    pub encoder_layers: usize,
    /// Decoder layers `N` (0 for an encoder-only model).
    pub decoder_layers: usize,
    /// Dropout on embeddings, attention weights, feed-forward and sublayer outputs.
    pub dropout: f32,
    /// Feed-forward activation: `relu` (the paper) or `gelu` (erf).
    pub activation: Activation,
    /// Pre-norm `x + f(LN(x))` instead of the paper's post-norm `LN(x + f(x))`.
    pub norm_first: bool,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// A final LayerNorm after each stack (PyTorch's `encoder.norm`, `decoder.norm`).
    pub final_norm: bool,
    /// The positional encoding of each stack.
    pub encoding: Encodings,
    /// Share one matrix between source and target embeddings and the generator (needs one
    /// joint vocabulary).
    pub tie_embeddings: bool,
    /// Later variants of the blocks (Llama's among them); the defaults are the paper's.
    #[serde(skip_serializing_if = "BlockOptions::is_default")]
    pub blocks: BlockOptions,
}

/// The normalisation of the residual connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// `(x − mean) / √(var + ε) · γ + β` (Ba et al. 2016), as the paper.
    #[default]
    LayerNorm,
    /// `x / √(mean(x²) + ε) · γ`, no centring and no bias (Zhang & Sennrich 2019; Llama).
    RmsNorm,
}

impl NormKind {
    /// The weights of one norm of width `d`.
    pub fn parameters(self, d: usize) -> u128 {
        match self {
            NormKind::LayerNorm => 2 * d as u128,
            NormKind::RmsNorm => d as u128,
        }
    }
}

/// Variants of the blocks that later models use. Each is an option of the same attention,
/// feed-forward and residual blocks, not a second copy of them; the defaults are the
/// paper's, and a configuration that leaves them so writes no `blocks` field.
///
/// ```
/// use posenc_transformer::{BlockOptions, NormKind};
/// let llama: BlockOptions = serde_json::from_str(
///     r#"{"kv_heads": 3, "bias": false, "norm": "rms_norm", "gated": true, "scale_embeddings": false}"#,
/// ).unwrap();
/// assert_eq!(llama.norm, NormKind::RmsNorm);
/// assert!(BlockOptions::default().is_default() && !llama.is_default());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BlockOptions {
    /// Key/value heads, each shared by `heads / kv_heads` query heads: grouped-query
    /// attention (Ainslie et al. 2023). `None` is one per query head, as the paper.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_heads: Option<usize>,
    /// Biases on the attention and feed-forward projections (Llama has none).
    pub bias: bool,
    /// LayerNorm or RMSNorm.
    pub norm: NormKind,
    /// A gated feed-forward `(act(x W_g) ⊙ x W_1) W_2` (Shazeer 2020; with SiLU, Llama's
    /// SwiGLU) instead of `act(x W_1) W_2`.
    pub gated: bool,
    /// Multiply the token embeddings by √d_model (the paper, §3.4); Llama does not.
    pub scale_embeddings: bool,
}

impl Default for BlockOptions {
    fn default() -> Self {
        Self {
            kv_heads: None,
            bias: true,
            norm: NormKind::LayerNorm,
            gated: false,
            scale_embeddings: true,
        }
    }
}

impl BlockOptions {
    /// Whether these are the paper's blocks.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// `base` with these variants applied (key/value heads, biases, norm, gating).
    pub fn block(&self, base: BlockConfig) -> BlockConfig {
        BlockConfig {
            kv_heads: self.kv_heads.unwrap_or(base.heads),
            bias: self.bias,
            norm: self.norm,
            gated: self.gated,
            ..base
        }
    }
}

/// Checks a model's weight count against [`MAX_PARAMETERS`].
pub(crate) fn check_parameters(params: u128) -> Result<()> {
    if params > MAX_PARAMETERS {
        return Err(Error::Config(format!(
            "the model would have {params} weights ({:.1} GB as f32): the limit is {MAX_PARAMETERS}",
            params as f64 * 4e-9
        )));
    }
    Ok(())
}

impl Default for Config {
    fn default() -> Self {
        Self {
            src_vocab_size: 1000,
            tgt_vocab_size: 1000,
            d_model: 512,
            heads: 8,
            d_ff: 2048,
            encoder_layers: 6,
            decoder_layers: 6,
            dropout: 0.1,
            activation: Activation::Relu,
            norm_first: false,
            layer_norm_eps: 1e-5,
            final_norm: true,
            encoding: Encodings::both(
                EncodingConfig::from_kind("sinusoidal").expect("a built-in kind"),
            ),
            tie_embeddings: false,
            blocks: BlockOptions::default(),
        }
    }
}

/// The most layers a stack may have.
pub const MAX_LAYERS: usize = 1 << 10;
/// The largest vocabulary.
pub const MAX_VOCAB: usize = 1 << 24;
/// The most weights a model may have (4 GB as f32; training holds four times that).
pub const MAX_PARAMETERS: u128 = 1_000_000_000;

impl Config {
    /// The blocks of the encoder stack: self-attention and feed-forward.
    pub fn encoder_block(&self) -> BlockConfig {
        self.blocks.block(BlockConfig {
            d_model: self.d_model,
            heads: self.heads,
            kv_heads: self.heads,
            d_ff: self.d_ff,
            activation: self.activation,
            norm_first: self.norm_first,
            eps: self.layer_norm_eps,
            dropout: self.dropout,
            final_norm: self.final_norm,
            ..BlockConfig::new(self.d_model, self.heads, self.d_ff)
        })
    }

    /// What a stack's encoding is built for: attention of this width and heads, in this
    /// `direction`, over `layers` layers.
    ///
    /// # Errors
    /// Heads or key/value heads out of place.
    pub fn target(&self, direction: Direction, layers: usize) -> Result<Target> {
        let target = Target::new(self.d_model, self.heads, direction)?.with_layers(layers);
        Ok(target.with_kv_heads(self.encoder_block().kv_heads)?)
    }

    /// The blocks of the decoder stack: the encoder's with cross-attention.
    pub fn decoder_block(&self) -> BlockConfig {
        BlockConfig {
            cross_attention: true,
            ..self.encoder_block()
        }
    }

    /// The number of weights the model has, computed from the sizes alone (so it can be
    /// checked before anything is allocated), the encodings' learned tables included.
    pub fn parameter_count(&self) -> u128 {
        let [d, sv, tv] =
            [self.d_model, self.src_vocab_size, self.tgt_vocab_size].map(|v| v as u128);
        let embeddings = if self.tie_embeddings {
            sv * d
        } else {
            sv * d + 2 * tv * d
        };
        // Each stack has its own instance of the encoding.
        let layers = [self.encoder_layers, self.decoder_layers];
        let encodings: u128 = (self.encoding.stacks().iter().zip(layers))
            .filter_map(|(&(e, direction), n)| {
                Some(e.parameter_count(&self.target(direction, n).ok()?))
            })
            .sum();
        embeddings
            + encodings
            + tv
            + self.encoder_block().stack_parameters(self.encoder_layers)
            + self.decoder_block().stack_parameters(self.decoder_layers)
    }

    /// Width of one head, `d_k = d_model / heads`.
    pub fn head_dim(&self) -> usize {
        self.d_model / self.heads
    }

    /// The reference configuration of the speed benchmarks: d_model 256, 8 heads, 3 + 3
    /// layers, d_ff 1024, vocabulary 1000, dropout 0, sinusoidal.
    pub fn benchmark_reference() -> Self {
        Self {
            src_vocab_size: 1000,
            tgt_vocab_size: 1000,
            d_model: 256,
            heads: 8,
            d_ff: 1024,
            encoder_layers: 3,
            decoder_layers: 3,
            dropout: 0.0,
            ..Self::default()
        }
    }

    /// Checks the sizes fit together and are within the limits ([`BlockConfig::validate`],
    /// [`MAX_LAYERS`], [`MAX_VOCAB`], [`MAX_PARAMETERS`]), before anything is allocated.
    ///
    /// # Errors
    /// [`Error::Config`] naming the first field out of place.
    pub fn validate(&self) -> Result<()> {
        use posenc::limits::check;
        let bad = |m: String| Err(Error::Config(m));
        let limited = [
            ("encoder_layers", self.encoder_layers, MAX_LAYERS),
            ("decoder_layers", self.decoder_layers, MAX_LAYERS),
            ("src_vocab_size", self.src_vocab_size, MAX_VOCAB),
            ("tgt_vocab_size", self.tgt_vocab_size, MAX_VOCAB),
        ];
        for (what, value, max) in limited {
            check(what, value, max).map_err(|e| Error::Config(e.to_string()))?;
        }
        self.encoder_block().validate()?;
        check_parameters(self.parameter_count())?;
        for (_, direction) in self.encoding.stacks() {
            self.target(direction, 1)?.head_dim()?;
        }
        if self.tie_embeddings && self.src_vocab_size != self.tgt_vocab_size {
            return bad(format!(
                "tie_embeddings needs one joint vocabulary, got src_vocab_size = {} and tgt_vocab_size = {}",
                self.src_vocab_size, self.tgt_vocab_size
            ));
        }
        Ok(())
    }
}

/// Everything a block, its attention, feed-forward network and residual connections need
/// to know: model configs ([`Config`](crate::Config), [`LmConfig`](crate::LmConfig),
/// BERT's and Llama's) each build one.
///
/// ```
/// use posenc_transformer::BlockConfig;
/// let paper = BlockConfig::new(512, 8, 2048);
/// assert_eq!((paper.kv_heads, paper.head_dim()), (8, 64));
/// assert!(paper.validate().is_ok());
/// assert!(BlockConfig { kv_heads: 3, ..paper }.validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockConfig {
    /// Model width `d_model`.
    pub d_model: usize,
    /// Query heads `h`; `d_model` must be divisible by it.
    pub heads: usize,
    /// Key/value heads, each shared by `heads / kv_heads` query heads (grouped-query
    /// attention, Ainslie et al. 2023); `heads` is the paper's.
    pub kv_heads: usize,
    /// Inner width of the feed-forward network `d_ff`.
    pub d_ff: usize,
    /// Feed-forward activation: ReLU (the paper), GELU (erf) or SiLU.
    pub activation: Activation,
    /// A gated feed-forward `(act(x W_g) ⊙ x W_1) W_2` (Shazeer 2020; Llama's SwiGLU).
    pub gated: bool,
    /// Biases on the attention and feed-forward projections.
    pub bias: bool,
    /// LayerNorm or RMSNorm.
    pub norm: NormKind,
    /// Pre-norm `x + f(N(x))` instead of the paper's post-norm `N(x + f(x))`.
    pub norm_first: bool,
    /// The norm's epsilon.
    pub eps: f64,
    /// Dropout on attention weights, the feed-forward's hidden layer and sublayer outputs
    /// (while training: [`crate::dropout`]).
    pub dropout: f32,
    /// A cross-attention sublayer over an encoder's output (the decoder's blocks).
    pub cross_attention: bool,
    /// A norm after the last block of the stack (PyTorch's `encoder.norm`).
    pub final_norm: bool,
}

impl BlockConfig {
    /// The paper's block of width `d_model`, `heads` heads and feed-forward width `d_ff`:
    /// ReLU, biases, post-norm LayerNorm with ε = 1e-5, no dropout, no cross-attention,
    /// a final norm.
    pub fn new(d_model: usize, heads: usize, d_ff: usize) -> Self {
        Self {
            d_model,
            heads,
            kv_heads: heads,
            d_ff,
            activation: Activation::Relu,
            gated: false,
            bias: true,
            norm: NormKind::LayerNorm,
            norm_first: false,
            eps: 1e-5,
            dropout: 0.0,
            cross_attention: false,
            final_norm: true,
        }
    }

    /// Width of one head, `d_k = d_model / heads` (0 without heads).
    pub fn head_dim(&self) -> usize {
        self.d_model.checked_div(self.heads).unwrap_or(0)
    }

    /// The weights of one block, computed from the sizes alone.
    pub fn parameters(&self) -> u128 {
        let d = self.d_model as u128;
        let ff = self.d_ff as u128;
        let kv = self.kv_heads as u128 * self.head_dim() as u128;
        let bias = |n: u128| if self.bias { n } else { 0 };
        let attention = 2 * d * d + 2 * d * kv + bias(2 * d + 2 * kv);
        let matrices = if self.gated { 3 } else { 2 };
        let feed_forward = matrices * d * ff + bias((matrices - 1) * ff + d);
        let norm = self.norm.parameters(self.d_model);
        match self.cross_attention {
            true => 2 * attention + feed_forward + 3 * norm,
            false => attention + feed_forward + 2 * norm,
        }
    }

    /// The weights of a stack of `layers` blocks, with its final norm.
    pub fn stack_parameters(&self, layers: usize) -> u128 {
        let last = match self.final_norm {
            true => self.norm.parameters(self.d_model),
            false => 0,
        };
        layers as u128 * self.parameters() + last
    }

    /// Checks the sizes fit together ([`posenc::limits`]) before anything is allocated.
    ///
    /// # Errors
    /// [`Error::Config`] naming the first field out of place.
    pub fn validate(&self) -> Result<()> {
        use posenc::limits::{check_positive, MAX_D_MODEL, MAX_HEADS};
        let bad = |m: String| Err(Error::Config(m));
        let limited = [
            ("d_model", self.d_model, MAX_D_MODEL),
            ("heads", self.heads, MAX_HEADS),
            ("d_ff", self.d_ff, 16 * MAX_D_MODEL),
        ];
        for (what, value, max) in limited {
            check_positive(what, value, max).map_err(|e| Error::Config(e.to_string()))?;
        }
        posenc::limits::head_dim(self.d_model, self.heads)?;
        if self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return bad(format!(
                "kv_heads must divide heads = {}, got {}",
                self.heads, self.kv_heads
            ));
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return bad(format!(
                "layer_norm_eps must be a small positive number, got {}",
                self.eps
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(format!("dropout must be in [0, 1), got {}", self.dropout));
        }
        if !matches!(
            self.activation,
            Activation::Relu | Activation::Gelu | Activation::Silu
        ) {
            return bad(format!(
                "activation must be relu, gelu or silu, got {:?}",
                self.activation
            ));
        }
        Ok(())
    }
}
