//! The positional encoding of each layer of a stack.
//!
//! A stack holds one encoding. Usually every layer uses it: the embeddings get its
//! addition once, and its position bias is computed once per forward and handed to every
//! layer. An encoding may instead give each layer its own ([`posenc::Capabilities::per_layer`]:
//! a per-layer pattern such as iRoPE's, resolved by [`posenc::for_layer`]); then layer `i`'s encoding adds to layer `i`'s
//! input (layer 0's input is the embeddings, which got it already), rotates its queries
//! and keys, and biases its scores, computed once for each distinct encoding.

use std::sync::Arc;

use candle_core::Tensor;
use posenc::{BiasContext, EmbedContext, PositionalEncoding, Positions, Tokens};

use crate::Result;

/// The stack's encoding and each layer's.
#[derive(Debug, Clone)]
pub(crate) struct LayerEncodings {
    stack: Arc<dyn PositionalEncoding>,
    /// Whether any layer's encoding reads the tokens.
    reads_tokens: bool,
    /// One per layer, when the stack's encoding gives layers their own.
    layers: Option<Vec<Arc<dyn PositionalEncoding>>>,
}

impl LayerEncodings {
    /// The encodings of a stack of `n` layers holding `encoding`.
    pub(crate) fn new(encoding: Arc<dyn PositionalEncoding>, n: usize) -> Self {
        let caps = encoding.capabilities();
        let per_layer = n > 0 && !caps.per_layer.is_empty();
        Self {
            layers: per_layer.then(|| (0..n).map(|i| posenc::for_layer(&encoding, i)).collect()),
            reads_tokens: caps.reads_tokens,
            stack: encoding,
        }
    }

    /// Whether any layer's encoding reads the tokens: the stack then hands them its biases.
    pub(crate) fn reads_tokens(&self) -> bool {
        self.reads_tokens
    }

    /// The stack's encoding.
    pub(crate) fn stack(&self) -> &Arc<dyn PositionalEncoding> {
        &self.stack
    }

    /// Whether the layers have encodings of their own.
    pub(crate) fn per_layer(&self) -> bool {
        self.layers.is_some()
    }

    /// Layer `i`'s encoding.
    pub(crate) fn layer(&self, i: usize) -> &Arc<dyn PositionalEncoding> {
        self.layers.as_ref().map_or(&self.stack, |own| &own[i])
    }

    /// The input of layer `i`: `x` with the addition of the layer's own encoding, for a
    /// layer past the first that has one; else `x` itself.
    pub(crate) fn input(&self, i: usize, x: Tensor, at: Positions) -> Result<Tensor> {
        match &self.layers {
            Some(own) if i > 0 => Ok(own[i].embed(&x, &EmbedContext::at(at))?),
            _ => Ok(x),
        }
    }

    /// Each layer's position bias of `q_len` queries at `q` against `k_len` keys at `k`,
    /// computed once for each distinct encoding, from the `tokens` where they are given.
    pub(crate) fn biases(
        &self,
        tokens: Option<Tokens>,
        q_len: usize,
        k_len: usize,
        q: Positions,
        k: Positions,
    ) -> Result<Vec<Option<Tensor>>> {
        let cx = BiasContext::new(q_len, k_len, q, k).with_tokens(tokens);
        let bias = |e: &Arc<dyn PositionalEncoding>| e.bias(&cx);
        let Some(own) = &self.layers else {
            return Ok(vec![bias(&self.stack)?]);
        };
        let mut biases: Vec<Option<Tensor>> = Vec::with_capacity(own.len());
        for (i, e) in own.iter().enumerate() {
            let earlier = own[..i].iter().position(|o| Arc::ptr_eq(o, e));
            biases.push(match earlier {
                Some(j) => biases[j].clone(),
                None => bias(e)?,
            });
        }
        Ok(biases)
    }
}

/// Layer `i`'s entry of `biases` ([`LayerEncodings::biases`]: one for all, or one each).
pub(crate) fn bias_of(biases: &[Option<Tensor>], i: usize) -> Option<&Tensor> {
    biases.get(i).or(biases.first()).and_then(Option::as_ref)
}
