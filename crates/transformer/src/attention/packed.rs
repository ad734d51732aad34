//! Packed sequences' engine: sequences laid end to end along the rows, each attending to
//! its own tokens only, with no product spent on padding.

use candle_core::Tensor;
use posenc::{InputContext, Role};
use posenc_kernels as kernels;

use super::{DecayRows, MultiHeadAttention, ScoreBias, Turned};
use crate::{Error, Result};

impl MultiHeadAttention {
    /// Self-attention within sequences packed end to end along the rows of
    /// `x (1, n, d_model)`, `lens` tokens each, with no padding: each sequence attends to
    /// its own tokens only, at positions `0, 1, …`. `bias` is the encoding's position bias
    /// `(heads, t, t)` for the longest sequence, if it has one. On every real token this is
    /// self-attention of the padded batch with a padding mask, without
    /// the products spent on padding. Returns the output `(1, n, d_model)`; no weights are
    /// kept, and there is no dropout.
    ///
    /// In f32 on the CPU with no gradient to track, one op ([`kernels::packed_attention`]);
    /// otherwise each sequence goes through the ordinary path in turn (differentiable).
    ///
    /// # Errors
    /// `x` not `(1, n, d_model)`, lengths that do not add up to `n`, a bias too small.
    pub(crate) fn packed_self_attention(
        &self,
        x: &Tensor,
        lens: &[usize],
        bias: Option<&Tensor>,
    ) -> Result<Tensor> {
        self.check(x, "query")?;
        check_packed(x, lens)?;
        let [q, k, v] = [&self.q_proj, &self.k_proj, &self.v_proj].map(|p| p.forward(x));
        let (raw_q, raw_k, v) = (q?, k?, v?);
        let q = self.rotate_packed(&raw_q, lens, Role::Query)?;
        let k = self.rotate_packed(&raw_k, lens, Role::Key)?;
        // Queries and keys as wide as they came (not PoPE's) stay packed.
        let packed = q.dim(2)? == raw_q.dim(2)? && k.dim(2)? == raw_k.dim(2)?;
        if packed && !self.whole_scores() && !self.caps.reads_input {
            let scale = self.scale() as f32;
            if let Some(out) =
                kernels::packed_attention(&q, &k, &v, self.head_dim, lens, bias, scale)?
            {
                return Ok(self.out_proj.forward(&out)?);
            }
        }
        let mut outs = Vec::with_capacity(lens.len());
        for (start, len) in segments(lens) {
            let part = |t: &Tensor| t.narrow(1, start, len);
            let bias = bias
                .map(|b| b.narrow(1, 0, len)?.narrow(2, 0, len))
                .transpose()?;
            // Wider ones are rotated again, each sequence on its own, with their heads apart.
            let (q, k) = match packed {
                true => (part(&q)?, part(&k)?),
                false => (
                    self.rotate(&part(&raw_q)?, 0.into(), Role::Query)?,
                    self.rotate(&part(&raw_k)?, 0.into(), Role::Key)?,
                ),
            };
            // Read from each sequence's own input: a convolution over it would otherwise
            // reach into the sequence before.
            let read = self.read_input(InputContext::new(&part(x)?))?;
            if let Some(path) = &read.transforms {
                let turned = Turned {
                    path,
                    frame: None,
                    position: bias.as_ref(),
                    decay: read.decay.as_ref().map(DecayRows::of).transpose()?,
                };
                outs.push(self.turned([&q, &k, &part(&v)?], turned, None, false)?.0);
                continue;
            }
            let decay = read.decay.map(|d| d.bias()).transpose()?;
            let score_bias = ScoreBias::new(bias.as_ref(), decay.as_ref());
            outs.push(self.attend(&q, &k, &part(&v)?, score_bias, None, true)?.0);
        }
        match outs.is_empty() {
            true => Ok(x.zeros_like()?),
            false => Ok(Tensor::cat(&outs, 1)?),
        }
    }

    /// Packed queries or keys `(1, n, heads·d_k)`, each sequence rotated at positions
    /// `0, 1, …` by the encoding, with its heads merged again; handed on as they are if the
    /// encoding leaves them alone (it then does so for every sequence).
    fn rotate_packed(&self, x: &Tensor, lens: &[usize], role: Role) -> Result<Tensor> {
        let mut parts = Vec::with_capacity(lens.len());
        for (start, len) in segments(lens) {
            let part = x.narrow(1, start, len)?;
            if !self.caps.rotates {
                return Ok(x.clone());
            }
            let rotated = self.rotate(&part, 0.into(), role)?;
            let (_, heads, len, width) = rotated.dims4()?;
            parts.push(rotated.transpose(1, 2)?.reshape((1, len, heads * width))?);
        }
        match parts.is_empty() {
            true => Ok(x.clone()),
            false => Ok(Tensor::cat(&parts, 1)?),
        }
    }
}

/// `(start, len)` of each non-empty sequence of lengths `lens` packed end to end.
fn segments(lens: &[usize]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let starts = lens.iter().scan(0, |at, &len| {
        *at += len;
        Some(*at - len)
    });
    starts.zip(lens.iter().copied()).filter(|&(_, len)| len > 0)
}

/// Checks that `x (1, n, …)` holds sequences of lengths `lens` packed end to end, and
/// returns the longest.
pub(crate) fn check_packed(x: &Tensor, lens: &[usize]) -> Result<usize> {
    let total: usize = lens.iter().sum();
    match x.dims() {
        [1, n, _] if *n == total => Ok(lens.iter().copied().max().unwrap_or(0)),
        dims => Err(Error::Input(format!(
            "packed sequences of lengths adding up to {total} must be (1, {total}, d_model), got {dims:?}"
        ))),
    }
}
