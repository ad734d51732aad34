//! What a trained model attends to when it translates one sentence.

use candle_core::Tensor;
use posenc_train::error::Result;
use posenc_transformer::Mask;
use serde::Serialize;

use crate::decode;
use crate::task::Translator;
use crate::vocab::{BOS_ID, EOS_ID};

/// Attention weights of one translation, `[layer][head][query][key]`.
#[derive(Debug, Clone, Serialize)]
pub struct AttentionMaps {
    /// Source words and `</s>`: the encoder's positions.
    pub source: Vec<String>,
    /// The greedy translation's words and `</s>`: row `i` is the decoder position that
    /// produces word `i`.
    pub target: Vec<String>,
    /// Encoder self-attention, `source × source` per head.
    pub encoder: Vec<Vec<Vec<Vec<f32>>>>,
    /// Decoder cross-attention, `target × source` per head.
    pub cross: Vec<Vec<Vec<Vec<f32>>>>,
}

fn heads(weights: &Tensor) -> Result<Vec<Vec<Vec<f32>>>> {
    Ok(weights.squeeze(0)?.to_vec3()?)
}

impl Translator {
    /// Translates `sentence` greedily, then replays the translation with teacher forcing
    /// to read every layer's attention weights.
    pub fn attention(&self, sentence: &str) -> Result<AttentionMaps> {
        let mut src_ids = self.src.encode(sentence, 1)?;
        src_ids.push(EOS_ID);
        let hyp = decode::greedy(
            &self.model,
            std::slice::from_ref(&src_ids),
            decode::DecodeConfig::default().max_len,
        )?
        .pop()
        .unwrap_or_default();
        let mut tgt_in = vec![BOS_ID];
        tgt_in.extend(&hyp);
        let device = self.model.device();
        let src = Tensor::new(src_ids.as_slice(), &device)?.unsqueeze(0)?;
        let tgt = Tensor::new(tgt_in.as_slice(), &device)?.unsqueeze(0)?;
        let causal = Mask::causal(tgt_in.len(), tgt_in.len(), 0, &device)?;
        let (encoder, decoder) = self
            .model
            .attention_weights(&src, &tgt, None, Some(&causal))?;
        let words = |vocab: &crate::vocab::Vocab, ids: &[u32]| -> Vec<String> {
            let mut w: Vec<String> = ids.iter().map(|&i| vocab.decode(&[i])).collect();
            w.push("</s>".to_string());
            w
        };
        Ok(AttentionMaps {
            source: words(&self.src, &src_ids[..src_ids.len() - 1]),
            target: words(&self.tgt, &hyp),
            encoder: encoder
                .iter()
                .map(|w| heads(&w.self_attn))
                .collect::<Result<_>>()?,
            cross: decoder
                .iter()
                .filter_map(|d| d.cross_attn.as_ref())
                .map(heads)
                .collect::<Result<_>>()?,
        })
    }
}
