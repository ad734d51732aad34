//! Padded batches with masks and shifted targets.
//!
//! ```text
//! source:  x_1 … x_m </s> <pad> …
//! tgt_in:  <s> y_1 … y_n  <pad> …      (what the decoder reads)
//! tgt_out: y_1 … y_n </s> <pad> …      (what it must predict at each position)
//! ```

use candle_core::{Device, Tensor};
use posenc_train::error::Result;
use posenc_transformer::{Mask, Transformer};

use crate::data::Pair;
use crate::vocab::{Vocab, BOS_ID, EOS_ID, PAD_ID};

/// A pair as token ids: source with `</s>`, target without specials.
pub type Example = (Vec<u32>, Vec<u32>);

/// Encodes pairs with their vocabularies (every word must be known).
pub fn encode(pairs: &[Pair], src: &Vocab, tgt: &Vocab) -> Result<Vec<Example>> {
    pairs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut s = src.encode(&p.src, i + 1)?;
            s.push(EOS_ID);
            Ok((s, tgt.encode(&p.tgt, i + 1)?))
        })
        .collect()
}

/// Pads rows of ids to one length: `(rows, max_len)` u32.
pub fn pad(rows: &[Vec<u32>], device: &Device) -> Result<Tensor> {
    let len = rows.iter().map(Vec::len).max().unwrap_or(0);
    let flat: Vec<u32> = rows
        .iter()
        .flat_map(|r| {
            r.iter()
                .copied()
                .chain(std::iter::repeat_n(PAD_ID, len - r.len()))
        })
        .collect();
    Ok(Tensor::from_vec(flat, (rows.len(), len), device)?)
}

/// One training batch.
#[derive(Debug, Clone)]
pub struct Batch {
    /// `(batch, src_len)`.
    pub src: Tensor,
    /// `(batch, tgt_len)`: `<s> y_1 … y_n`.
    pub tgt_in: Tensor,
    /// `(batch, tgt_len)`: `y_1 … y_n </s>`.
    pub tgt_out: Tensor,
    /// Source padding mask.
    pub src_mask: Mask,
    /// Causal and target padding mask.
    pub tgt_mask: Mask,
    /// Target tokens to predict (non-padding).
    pub tokens: usize,
}

impl Batch {
    /// Pads and masks a set of examples.
    pub fn new(examples: &[&Example], device: &Device) -> Result<Self> {
        let src: Vec<Vec<u32>> = examples.iter().map(|(s, _)| s.clone()).collect();
        let tgt_in: Vec<Vec<u32>> = examples
            .iter()
            .map(|(_, t)| [&[BOS_ID], t.as_slice()].concat())
            .collect();
        let tgt_out: Vec<Vec<u32>> = examples
            .iter()
            .map(|(_, t)| [t.as_slice(), &[EOS_ID]].concat())
            .collect();
        let tokens = tgt_out.iter().map(Vec::len).sum();
        let src = pad(&src, device)?;
        let tgt_in = pad(&tgt_in, device)?;
        Ok(Self {
            src_mask: Mask::padding(&src, PAD_ID)?,
            tgt_mask: Transformer::target_mask(&tgt_in, PAD_ID)?,
            tgt_out: pad(&tgt_out, device)?,
            src,
            tgt_in,
            tokens,
        })
    }
}
