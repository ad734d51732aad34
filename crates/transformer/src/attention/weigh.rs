//! The composite path of the core: scores scaled, every bias added in one place (the
//! position bias, a decay, a bias read from the logits, sinks), masked, softmaxed and
//! weighed against the values.

use candle_core::Tensor;
use posenc::ScoreContext;
use posenc_kernels as kernels;

use super::MultiHeadAttention;
use crate::dropout;
use crate::mask::Mask;
use crate::{Error, Result};

impl MultiHeadAttention {
    /// Attention from its `scores (b, h, q_len, k_len)` ([`Self::scores`]): scaled, biased,
    /// read by the encoding (`own`, with the queries `q`), masked, softmaxed beside any
    /// sink, dropped out, then the weighted sum of `v`, its heads merged, before `W^O`.
    /// Returns that sum `(b, q_len, h·d_v)` and the weights.
    pub(super) fn weigh(
        &self,
        q: &Tensor,
        scores: Tensor,
        v: &Tensor,
        bias: ScoreBias,
        mask: Option<&Mask>,
        own: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let ScoreBias {
            position: bias,
            decay,
        } = bias;
        let sink = self.sink(own)?;
        let sink = sink.as_ref();
        let (b, h, tq, k_len) = scores.dims4()?;
        let v = &self.split(v)?.contiguous()?;
        let (kv, d_v) = (v.dim(1)?, v.dim(3)?);
        let grouped =
            |x: &Tensor, rows: usize, cols: usize| x.reshape((b, kv, (h / kv) * rows, cols));
        let scale = self.scale();
        let dropout = dropout::active(q, self.dropout);
        let content = own && self.reads_scores();
        let q = &self.split(q)?.contiguous()?;
        // A decay's bias differs between the sequences of a batch, and an encoding that
        // reads the scores gets the logits, masked, and adds to them: both form the logits.
        // A bias read from the tokens may differ between sequences, `(b, h, q, k)`: it is
        // added to the logits as a decay is.
        let per_sequence = bias.is_some_and(|b| b.rank() == 4);
        let (scores, bias, scale) = match content || decay.is_some() || per_sequence {
            false => (scores, bias.cloned(), scale),
            true => {
                let mut logits = (scores * scale)?;
                if let Some(bias) = bias {
                    let bias = bias.to_dtype(logits.dtype())?;
                    let bias = match per_sequence {
                        true => bias,
                        false => bias.unsqueeze(0)?,
                    };
                    logits = logits.broadcast_add(&bias)?;
                }
                if let Some(decay) = decay {
                    let decay = decay.to_dtype(logits.dtype())?;
                    logits = (logits + decay)?;
                }
                if content {
                    let masked = match mask {
                        Some(mask) => mask.fill(&logits)?,
                        None => logits.clone(),
                    };
                    let encoding = self.encoding.as_ref().ok_or_else(|| {
                        Error::Config("attention reads the scores but holds no encoding".into())
                    })?;
                    let cx = ScoreContext { q, logits: &masked };
                    if let Some(extra) = encoding.score_bias(&cx)? {
                        logits = (logits + extra.to_dtype(masked.dtype())?)?;
                    }
                }
                (logits, None, 1.0)
            }
        };
        let keep = mask.map(|m| m.broadcast_to(&scores)).transpose()?;
        let weights = match sink {
            None => kernels::attention_softmax(&scores, bias.as_ref(), keep.as_ref(), scale)?,
            Some(sink) => with_sink(&scores, bias.as_ref(), keep.as_ref(), scale, sink)?,
        };
        let dropped = if dropout {
            dropout::dropout(&weights, self.dropout)?
        } else {
            weights.clone()
        };
        let out = kernels::matmul(&grouped(&dropped, tq, k_len)?, v)?
            .reshape((b, h, tq, d_v))?
            .transpose(1, 2)?
            .reshape((b, tq, h * d_v))?;
        Ok((out, Some(weights)))
    }
}

/// What attention adds to its scaled scores beside the mask, from outside the scores
/// themselves; the sinks and a bias read from the logits are added in
/// [`MultiHeadAttention::weigh`], from the encoding.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ScoreBias<'a> {
    /// The encoding's position bias, `(heads, q_len, k_len)`, or `(batch, heads, q_len,
    /// k_len)` where it differs between sequences.
    pub(super) position: Option<&'a Tensor>,
    /// The bias of an encoding that decays ([`posenc::Decay`]), `(batch, heads, q_len,
    /// k_len)`.
    pub(super) decay: Option<&'a Tensor>,
}

impl<'a> ScoreBias<'a> {
    /// A position bias and a decay's bias, where there are any.
    pub(super) fn new(position: Option<&'a Tensor>, decay: Option<&'a Tensor>) -> Self {
        Self { position, decay }
    }
}

/// The softmax weights of `scores (b, h, q, k)` (times `scale`, plus `bias (h, q, k)`,
/// under `keep`) beside a sink per head with logits `sink (h)`: a key every query sees, of
/// value zero ([`posenc::sink`]). The sink is a column more in the softmax, dropped after,
/// so the weights on the real keys add up to `1 − w_sink`; a query that sees no key puts all
/// its weight on the sink.
fn with_sink(
    scores: &Tensor,
    bias: Option<&Tensor>,
    keep: Option<&Tensor>,
    scale: f64,
    sink: &Tensor,
) -> Result<Tensor> {
    let (b, h, q, k) = scores.dims4()?;
    let column = sink
        .to_dtype(scores.dtype())?
        .reshape((1, h, 1, 1))?
        .broadcast_as((b, h, q, 1))?;
    let scores = Tensor::cat(&[&(scores * scale)?, &column], 3)?;
    let bias = bias
        .map(|bias| {
            let zero = Tensor::zeros((h, q, 1), bias.dtype(), bias.device())?;
            Tensor::cat(&[bias, &zero], 2)
        })
        .transpose()?;
    let keep = keep
        .map(|keep| {
            let seen = Tensor::ones((b, h, q, 1), keep.dtype(), keep.device())?;
            Tensor::cat(&[&keep.broadcast_as((b, h, q, k))?, &seen], 3)
        })
        .transpose()?;
    let weights = kernels::attention_softmax(&scores, bias.as_ref(), keep.as_ref(), 1.0)?;
    Ok(weights.narrow(3, 0, k)?)
}
