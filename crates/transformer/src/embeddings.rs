//! Token embeddings scaled by √d_model, plus the positional encoding ("Attention Is All
//! You Need" §3.4–3.5).
//!
//! ```text
//! Embed(x_1 … x_n) = Dropout(E[x_t] · √d_model + PE(offset + t))
//! ```
//!
//! (Later models such as Llama leave out the `· √d_model`.)
//!
//! The encoding's additive hook does the `+ PE`; encodings that act inside attention
//! leave it the identity.
//!
//! The table may be kept quantized ([`Embeddings::quantize`], a GGUF model's): only the
//! rows looked up are expanded to f32.

use std::sync::Arc;

use candle_core::quantized::QTensor;
use candle_core::{DType, Tensor};
use candle_nn::{Embedding, Module};
use posenc::{Capabilities, EmbedContext, PositionalEncoding, Positions, Tokens};

use crate::{Error, Result};

/// Scaled token embeddings followed by the positional encoding's additive hook.
#[derive(Debug, Clone)]
pub struct Embeddings {
    lut: Embedding,
    /// The table as stored, once quantized (then `lut` is a view that holds no memory).
    quantized: Option<Arc<QTensor>>,
    vocab_size: usize,
    scale: f64,
    /// The encoding of the first layer, whose addition the embeddings get.
    first_layer: Arc<dyn PositionalEncoding>,
    /// What the whole encoding declares.
    caps: Capabilities,
    dropout: f32,
}

impl Embeddings {
    /// Wraps a `(vocab, d_model)` embedding table, multiplied by √d_model if `scale`.
    pub fn new(
        lut: Embedding,
        scale: bool,
        encoding: Arc<dyn PositionalEncoding>,
        dropout: f32,
    ) -> Self {
        let (vocab_size, d_model) = lut.embeddings().dims2().unwrap_or((0, 0));
        Self {
            lut,
            quantized: None,
            vocab_size,
            scale: if scale { (d_model as f64).sqrt() } else { 1.0 },
            first_layer: posenc::for_layer(&encoding, 0),
            caps: encoding.capabilities(),
            dropout,
        }
    }

    /// Replaces the positional encoding: its first layer's addition, and what it declares.
    pub(crate) fn set_encoding(&mut self, encoding: Arc<dyn PositionalEncoding>) {
        self.first_layer = posenc::for_layer(&encoding, 0);
        self.caps = encoding.capabilities();
    }

    /// The `(vocab, d_model)` table, shared with the generator when tied (a view of
    /// zeros that holds no memory once quantized).
    pub fn weight(&self) -> &Tensor {
        self.lut.embeddings()
    }

    /// Looks tokens up in the quantized `table` from now on, expanding only their rows; the
    /// dense table is dropped.
    ///
    /// # Errors
    /// A table of another shape than the dense one, naming both.
    pub fn quantize(&mut self, table: Arc<QTensor>) -> Result<()> {
        let dense = self.lut.embeddings();
        if table.shape().dims() != dense.dims() {
            return Err(Error::Input(format!(
                "a quantized table of shape {:?} cannot replace one of shape {:?}",
                table.shape().dims(),
                dense.dims()
            )));
        }
        let zeros = Tensor::zeros((), DType::F32, dense.device())?.broadcast_as(dense.shape())?;
        let d_model = dense.dim(1)?;
        self.lut = Embedding::new(zeros, d_model);
        self.quantized = Some(table);
        Ok(())
    }

    /// The longest sequence the positional encoding can take, if it has an end.
    pub fn max_positions(&self) -> Option<usize> {
        self.caps.max_positions
    }

    /// Embeds token ids `(batch, seq)` at positions `at` (usually `offset..offset + seq`).
    ///
    /// # Shapes
    /// - `ids`: `(batch, seq)`
    /// - output: `(batch, seq, d_model)`
    ///
    /// # Errors
    /// Ids not `(batch, seq)`, or outside the vocabulary; positions the encoding refuses.
    pub fn forward(&self, ids: &Tensor, at: Positions) -> Result<Tensor> {
        self.forward_after(ids, None, at)
    }

    /// Whether the positional encoding reads the tokens
    /// ([`posenc::Capabilities::reads_tokens`]): a cached run then passes the ids before the
    /// new ones to [`Embeddings::forward_after`].
    pub fn reads_tokens(&self) -> bool {
        self.caps.reads_tokens
    }

    /// [`Embeddings::forward`] of ids run after those in `cache`, at `at`: given the ids
    /// before them, and kept in the cache, where the encoding reads the tokens.
    ///
    /// # Errors
    /// As [`Embeddings::forward`]; ids whose batch differs from the cache's.
    pub fn forward_cached(
        &self,
        ids: &Tensor,
        at: Positions,
        cache: &mut crate::StackCache,
    ) -> Result<Tensor> {
        if !self.reads_tokens() {
            return self.forward(ids, at);
        }
        let x = self.forward_after(ids, cache.tokens(), at)?;
        cache.keep_tokens(ids)?;
        Ok(x)
    }

    /// [`Embeddings::forward`] of ids that follow `before (batch, earlier)` in their
    /// sequences (`None`: they start them), for an encoding that reads the tokens.
    ///
    /// # Errors
    /// As [`Embeddings::forward`].
    pub fn forward_after(
        &self,
        ids: &Tensor,
        before: Option<&Tensor>,
        at: Positions,
    ) -> Result<Tensor> {
        if ids.rank() != 2 {
            return Err(Error::Input(format!(
                "token ids must be (batch, seq), got {:?}",
                ids.dims()
            )));
        }
        if ids.elem_count() > 0 {
            let max = ids
                .to_dtype(DType::U32)?
                .flatten_all()?
                .max(0)?
                .to_scalar::<u32>()?;
            if max as usize >= self.vocab_size {
                return Err(Error::Input(format!(
                    "token id {max} is outside the vocabulary of {} tokens",
                    self.vocab_size
                )));
            }
        }
        let x = match &self.quantized {
            None => self.lut.forward(ids)?,
            Some(table) => {
                let (batch, seq) = ids.dims2()?;
                let flat = ids.to_dtype(DType::U32)?.flatten_all()?.to_vec1::<u32>()?;
                posenc_kernels::quantized::dequantize_rows(table, &flat)?.reshape((
                    batch,
                    seq,
                    (),
                ))?
            }
        };
        let x = if self.scale == 1.0 {
            x
        } else {
            (x * self.scale)?
        };
        let cx = EmbedContext::at(at).with_tokens(Tokens { ids, before });
        let x = self.first_layer.embed(&x, &cx)?;
        Ok(crate::dropout::dropout(&x, self.dropout)?)
    }
}
