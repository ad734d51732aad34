//! A BERT-family encoder (Devlin et al. 2019) assembled from this project's blocks.
//!
//! ```text
//! x = LayerNorm(E_word[t] + E_type[s] + PE_learned(pos))        (no √d_model scaling)
//! h = Stack(x, padding mask)                                    (post-norm, GELU-erf, no final norm)
//! ```
//!
//! The learned positions are `posenc`'s `learned` encoding through its additive hook; the
//! layers are `posenc_transformer`'s [`Stack`] of blocks without cross-attention.
//! [`hf_names`] maps Hugging Face's BERT tensor names onto ours (query, key and value stay
//! apart, as `q_proj`, `k_proj`, `v_proj`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::error::Result;
use candle_core::{DType, Device, Tensor};
use candle_nn::{Activation, Embedding, Module, VarBuilder};
use posenc::learned::LearnedConfig;
use posenc::{Direction, EncodingConfig, PositionalEncoding, Target};
use posenc_error::{ensure, invalid, Context};
use posenc_transformer::stack::StackInput;
use posenc_transformer::sublayer::Norm;
use posenc_transformer::{checkpoint, BlockConfig, Mask, Stack};
use serde::Deserialize;

/// The fields of a Hugging Face BERT `config.json` the model needs.
#[derive(Debug, Clone, Deserialize)]
pub struct BertConfig {
    /// Word-piece vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Layers.
    pub num_hidden_layers: usize,
    /// Heads.
    pub num_attention_heads: usize,
    /// Feed-forward width.
    pub intermediate_size: usize,
    /// Rows of the learned position table.
    pub max_position_embeddings: usize,
    /// Token types (segments).
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// Activation; BERT's `gelu` is the erf form.
    pub hidden_act: String,
}

impl BertConfig {
    /// Reads `config.json` from a model directory.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?)
    }

    /// The blocks of the same model: post-norm, GELU (erf), no final norm, no dropout.
    ///
    /// # Errors
    /// An activation other than `gelu`; sizes out of the blocks' limits.
    pub fn block(&self) -> Result<BlockConfig> {
        ensure!(
            self.hidden_act == "gelu",
            "unsupported hidden_act `{}` (only `gelu`)",
            self.hidden_act
        );
        let block = BlockConfig {
            activation: Activation::Gelu,
            eps: self.layer_norm_eps,
            final_norm: false,
            ..BlockConfig::new(
                self.hidden_size,
                self.num_attention_heads,
                self.intermediate_size,
            )
        };
        block.validate()?;
        use posenc::limits::check;
        use posenc_transformer::{MAX_LAYERS, MAX_VOCAB};
        check("num_hidden_layers", self.num_hidden_layers, MAX_LAYERS)?;
        check("vocab_size", self.vocab_size, MAX_VOCAB)?;
        check("type_vocab_size", self.type_vocab_size, MAX_VOCAB)?;
        Ok(block)
    }
}

/// Word, token-type and learned position embeddings, then LayerNorm.
#[derive(Debug, Clone)]
pub struct BertEmbeddings {
    word: Embedding,
    token_type: Embedding,
    position: Arc<dyn PositionalEncoding>,
    norm: Norm,
}

/// A BERT encoder: embeddings and the layer stack.
#[derive(Debug, Clone)]
pub struct Bert {
    embeddings: BertEmbeddings,
    encoder: Stack,
}

impl Bert {
    /// Builds the model from weights under `vb` in this project's names.
    pub fn new(bert: &BertConfig, vb: VarBuilder) -> Result<Self> {
        let block = bert.block()?;
        let d = block.d_model;
        let target = Target::new(d, block.heads, Direction::Bidirectional)?;
        let learned = EncodingConfig::new(LearnedConfig {
            max_positions: bert.max_position_embeddings,
        });
        let position = learned.build(&target, vb.pp("embeddings.position"))?;
        let embeddings = BertEmbeddings {
            word: candle_nn::embedding(bert.vocab_size, d, vb.pp("embeddings.word"))?,
            token_type: candle_nn::embedding(
                bert.type_vocab_size,
                d,
                vb.pp("embeddings.token_type"),
            )?,
            position: position.clone(),
            norm: Norm::new(d, block.eps, vb.pp("embeddings.norm"))?,
        };
        Ok(Self {
            embeddings,
            encoder: Stack::new(&block, bert.num_hidden_layers, position, vb.pp("encoder"))?,
        })
    }

    /// Loads a Hugging Face BERT directory (`config.json`, `model.safetensors`), checking
    /// that every tensor the model needs is there with the right shape.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let bert = BertConfig::load(dir)?;
        let path = dir.join("model.safetensors");
        let hf = candle_core::safetensors::load(&path, device)
            .with_context(|| format!("reading {}", path.display()))?;
        let ours = hf_names(hf)?;
        // The names and shapes the model needs, from a build that allocates nothing.
        let (vb, expected) = checkpoint::recorder(&ours, device);
        Bert::new(&bert, vb)?;
        expected.check(&ours, &path)?;
        Bert::new(&bert, VarBuilder::from_tensors(ours, DType::F32, device))
    }

    /// The last hidden state `(batch, seq, d)` of token ids `(batch, seq)` with the attention
    /// mask `(batch, seq)` (1 = token, 0 = padding). Token types are all 0.
    ///
    /// # Shapes
    /// - `ids`, `attention_mask`: `(batch, seq)`
    /// - output: `(batch, seq, hidden_size)`
    ///
    /// # Errors
    /// A mask not of the ids' shape; ids outside the vocabulary.
    pub fn forward(&self, ids: &Tensor, attention_mask: &Tensor) -> Result<Tensor> {
        let mask = Mask::from_keep(&attention_mask.to_dtype(DType::U8)?)?;
        let x = self.embed(ids)?;
        Ok(self.encoder.forward(StackInput::new(&x, Some(&mask)))?.0)
    }

    /// The last hidden state of the real tokens only, `(n, d)`: those the attention mask
    /// `(batch, seq)` keeps, row after row, and how many each row has. The padding is
    /// dropped after the embeddings, so no layer computes it
    /// ([`Stack::forward_packed`]); every real token's state is [`Bert::forward`]'s.
    ///
    /// # Errors
    /// A mask not of the ids' shape `(batch, seq)`; ids outside the vocabulary.
    pub fn forward_packed(
        &self,
        ids: &Tensor,
        attention_mask: &Tensor,
    ) -> Result<(Tensor, Vec<usize>)> {
        ensure!(
            attention_mask.dims() == ids.dims() && ids.rank() == 2,
            "the attention mask {:?} must have the token ids' shape {:?}, (batch, seq)",
            attention_mask.dims(),
            ids.dims()
        );
        let keep = attention_mask.to_dtype(DType::U32)?.to_vec2::<u32>()?;
        let seq = keep.first().map_or(0, Vec::len);
        let lens: Vec<usize> = keep
            .iter()
            .map(|r| r.iter().filter(|&&k| k != 0).count())
            .collect();
        let real: Vec<u32> = keep
            .iter()
            .enumerate()
            .flat_map(|(b, row)| {
                let kept = row.iter().enumerate().filter(|(_, &k)| k != 0);
                kept.map(move |(t, _)| (b * seq + t) as u32)
            })
            .collect();
        let x = self.embed(ids)?;
        let x = x.reshape(((), x.dim(2)?))?;
        let x = x.index_select(&Tensor::new(real.as_slice(), x.device())?, 0)?;
        let h = self.encoder.forward_packed(&x.unsqueeze(0)?, &lens)?;
        Ok((h.squeeze(0)?, lens))
    }

    /// The embeddings `(batch, seq, d)` of token ids `(batch, seq)`, token types all 0.
    fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        let e = &self.embeddings;
        let types = ids.zeros_like()?;
        let x = (e.word.forward(ids)? + e.token_type.forward(&types)?)?;
        Ok(e.norm
            .forward(&e.position.embed(&x, &posenc::EmbedContext::at(0))?)?)
    }
}

/// Renames Hugging Face BERT tensors to this project's names (no tensor is copied); the
/// pooler and `position_ids` are dropped (sentence embeddings do not use them).
pub fn hf_names(mut hf: HashMap<String, Tensor>) -> Result<HashMap<String, Tensor>> {
    hf.retain(|k, _| !k.starts_with("pooler.") && k != "embeddings.position_ids");
    let hf: HashMap<String, Tensor> = hf
        .into_iter()
        .map(|(k, v)| (k.strip_prefix("bert.").map(str::to_string).unwrap_or(k), v))
        .collect();
    let mut out = HashMap::new();
    let take = |from: &str, to: String, out: &mut HashMap<String, Tensor>| -> Result<()> {
        let t = hf
            .get(from)
            .ok_or_else(|| invalid!("the checkpoint has no tensor `{from}`"))?;
        out.insert(to, t.clone());
        Ok(())
    };
    for (from, to) in [
        ("embeddings.word_embeddings", "embeddings.word"),
        ("embeddings.token_type_embeddings", "embeddings.token_type"),
        ("embeddings.position_embeddings", "embeddings.position"),
    ] {
        take(&format!("{from}.weight"), format!("{to}.weight"), &mut out)?;
    }
    for p in ["weight", "bias"] {
        take(
            &format!("embeddings.LayerNorm.{p}"),
            format!("embeddings.norm.{p}"),
            &mut out,
        )?;
    }
    let layers = hf
        .keys()
        .filter(|k| k.ends_with("attention.self.query.weight"))
        .count();
    for i in 0..layers {
        let (src, dst) = (format!("encoder.layer.{i}"), format!("encoder.layers.{i}"));
        for p in ["weight", "bias"] {
            for (from, to) in [
                ("attention.self.query", "self_attn.q_proj"),
                ("attention.self.key", "self_attn.k_proj"),
                ("attention.self.value", "self_attn.v_proj"),
                ("attention.output.dense", "self_attn.out_proj"),
                ("attention.output.LayerNorm", "norm1"),
                ("intermediate.dense", "linear1"),
                ("output.dense", "linear2"),
                ("output.LayerNorm", "norm2"),
            ] {
                take(
                    &format!("{src}.{from}.{p}"),
                    format!("{dst}.{to}.{p}"),
                    &mut out,
                )?;
            }
        }
    }
    Ok(out)
}
