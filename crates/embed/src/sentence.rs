//! Sentence embeddings as sentence-transformers computes them: tokenize (truncating at the
//! model's `max_seq_length`, padding to the longest in the batch), encode, mean-pool over
//! real tokens, L2-normalise.

use std::path::Path;

use crate::error::Result;
use candle_core::{Device, Tensor, D};
use posenc_error::{ensure, invalid, Context};
use serde::Deserialize;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::bert::Bert;

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: usize,
}

#[derive(Deserialize)]
struct PoolingConfig {
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
}

/// A sentence-transformers model directory, loaded.
#[derive(Debug)]
pub struct SentenceEncoder {
    bert: Bert,
    tokenizer: Tokenizer,
    device: Device,
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?)
}

impl SentenceEncoder {
    /// Loads `config.json`, `model.safetensors`, `tokenizer.json`,
    /// `sentence_bert_config.json` and `1_Pooling/config.json` from `dir`, onto the CPU.
    pub fn load(dir: &Path) -> Result<Self> {
        Self::load_on(dir, &Device::Cpu)
    }

    /// [`SentenceEncoder::load`] onto `device`.
    pub fn load_on(dir: &Path, device: &Device) -> Result<Self> {
        let st: SentenceBertConfig = read_json(&dir.join("sentence_bert_config.json"))?;
        let pooling: PoolingConfig = read_json(&dir.join("1_Pooling/config.json"))?;
        ensure!(
            pooling.pooling_mode_mean_tokens
                && !pooling.pooling_mode_cls_token
                && !pooling.pooling_mode_max_tokens,
            "only mean pooling is supported ({})",
            dir.join("1_Pooling/config.json").display()
        );
        let path = dir.join("tokenizer.json");
        let mut tokenizer =
            Tokenizer::from_file(&path).map_err(|e| invalid!("reading {}: {e}", path.display()))?;
        // The file itself pads to a fixed 128 and truncates at 128; sentence-transformers
        // truncates at max_seq_length and pads to the longest in the batch.
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: st.max_seq_length,
                ..Default::default()
            }))
            .map_err(|e| invalid!("{e}"))?;
        let pad = PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..tokenizer.get_padding().cloned().unwrap_or_default()
        };
        tokenizer.with_padding(Some(pad));
        Ok(Self {
            bert: Bert::load(dir, device)?,
            tokenizer,
            device: device.clone(),
        })
    }

    /// Token ids and attention masks `(batch, seq)` of `sentences`.
    pub fn tokenize(&self, sentences: &[String]) -> Result<(Tensor, Tensor)> {
        let enc = self
            .tokenizer
            .encode_batch(sentences.to_vec(), true)
            .map_err(|e| invalid!("{e}"))?;
        let len = enc.first().map_or(0, |e| e.get_ids().len());
        let ids: Vec<u32> = enc.iter().flat_map(|e| e.get_ids().to_vec()).collect();
        let mask: Vec<u32> = enc
            .iter()
            .flat_map(|e| e.get_attention_mask().to_vec())
            .collect();
        Ok((
            Tensor::from_vec(ids, (sentences.len(), len), &self.device)?,
            Tensor::from_vec(mask, (sentences.len(), len), &self.device)?,
        ))
    }

    /// The last hidden state of one batch.
    pub fn hidden(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        self.bert.forward(ids, mask)
    }

    /// L2-normalised mean-pooled embeddings, `batch_size` sentences at a time.
    pub fn embed(&self, sentences: &[String], batch_size: usize) -> Result<Vec<Vec<f32>>> {
        ensure!(batch_size > 0, "batch size must be > 0");
        let mut out = Vec::with_capacity(sentences.len());
        for chunk in sentences.chunks(batch_size) {
            let (ids, mask) = self.tokenize(chunk)?;
            out.extend(self.embed_tokens(&ids, &mask)?.to_vec2::<f32>()?);
        }
        Ok(out)
    }

    /// L2-normalised mean-pooled embeddings `(batch, d)` of one tokenized batch
    /// ([`SentenceEncoder::tokenize`]).
    ///
    /// # Shapes
    /// - `ids`, `mask`: `(batch, seq)`
    /// - output: `(batch, hidden_size)`, each row of norm 1
    ///
    /// # Errors
    /// A mask not of the ids' shape; ids outside the vocabulary.
    pub fn embed_tokens(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        // On the CPU the padding is dropped before the layers (a tenth of MiniLM's
        // benchmark batches); elsewhere the padded batch keeps the work in a few large
        // products rather than one attention per sentence.
        match self.device.is_cpu() {
            true => {
                let (hidden, lens) = self.bert.forward_packed(ids, mask)?;
                mean_pool_packed_normalized(&hidden, &lens)
            }
            false => mean_pool_normalized(&self.hidden(ids, mask)?, mask),
        }
    }
}

/// [`mean_pool_normalized`] of the real tokens' states `hidden (n, d)` of sequences
/// packed end to end, `lens` tokens each ([`Bert::forward_packed`]), giving `(lens.len(), d)`.
///
/// # Errors
/// `hidden` not `(n, d)` with `n` the sum of `lens`.
pub fn mean_pool_packed_normalized(hidden: &Tensor, lens: &[usize]) -> Result<Tensor> {
    let n: usize = lens.iter().sum();
    ensure!(
        hidden.rank() == 2 && hidden.dim(0)? == n,
        "packed hidden states {:?} must be (n, d) with n = {n}, the sum of the lengths",
        hidden.dims()
    );
    let owner: Vec<u32> = (0..lens.len() as u32)
        .flat_map(|s| std::iter::repeat_n(s, lens[s as usize]))
        .collect();
    let owner = Tensor::new(owner.as_slice(), hidden.device())?;
    let zeros = Tensor::zeros(
        (lens.len(), hidden.dim(1)?),
        hidden.dtype(),
        hidden.device(),
    )?;
    let summed = zeros.index_add(&owner, hidden, 0)?;
    let counts: Vec<f32> = lens.iter().map(|&n| n as f32).collect();
    let counts = Tensor::new(counts.as_slice(), hidden.device())?
        .to_dtype(hidden.dtype())?
        .unsqueeze(1)?;
    l2_normalized(&summed.broadcast_div(&counts.clamp(1e-9, f64::MAX)?)?)
}

/// sentence-transformers' pooling: the mean of `hidden` `(batch, seq, d)` over the real
/// tokens of `mask` `(batch, seq)` (clamped away from 0 tokens), then L2 normalisation
/// (norm clamped at 1e-12), giving `(batch, d)`.
pub fn mean_pool_normalized(hidden: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let m = mask.to_dtype(hidden.dtype())?.unsqueeze(2)?;
    let summed = hidden.broadcast_mul(&m)?.sum(1)?;
    let counts = m.sum(1)?.clamp(1e-9, f64::MAX)?;
    l2_normalized(&summed.broadcast_div(&counts)?)
}

/// Rows `(batch, d)` divided by their L2 norms (clamped at 1e-12).
fn l2_normalized(mean: &Tensor) -> Result<Tensor> {
    let norm = mean
        .sqr()?
        .sum_keepdim(D::Minus1)?
        .sqrt()?
        .clamp(1e-12, f64::MAX)?;
    Ok(mean.broadcast_div(&norm)?)
}

/// `count` fixed pseudo-random sentences of `words` common English words (a seeded
/// xorshift, so every run and every implementation sees the same text): the speed
/// benchmarks' corpus. 90 words make about 100 word pieces.
pub fn benchmark_sentences(count: usize, words: usize) -> Vec<String> {
    let vocabulary = "the of and to in is was for on that with as by at from his an were are \
        which this be or has had one first their its new after who they have her she two \
        been other when there all during into school time may years more most only over \
        city some world would where later up such used many can state about national out \
        known university united then made system river government between these series \
        since century north south season music while under film village because however \
        station around played following several population district company third game \
        released including within published although development children international \
        approximately neighbourhood photosynthesis thermodynamics unbelievably"
        .split_whitespace()
        .collect::<Vec<_>>();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..count)
        .map(|_| {
            (0..words)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    vocabulary[(state % vocabulary.len() as u64) as usize]
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}
