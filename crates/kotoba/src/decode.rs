//! Greedy and beam-search decoding, both on the decoder's key/value cache: each step
//! feeds only the newest token.

use candle_core::{DType, IndexOp, Tensor, D};
use posenc_error::ensure;
use posenc_train::error::Result;
use posenc_transformer::StackCache;
use posenc_transformer::{Mask, Transformer};

use crate::batch::pad;
use crate::vocab::{BOS_ID, EOS_ID, PAD_ID};

/// How to decode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeConfig {
    /// Beam size; 1 is greedy.
    pub beam: usize,
    /// GNMT length penalty α: hypotheses are ranked by `log P / ((5 + len)/6)^α`.
    pub length_penalty: f64,
    /// Longest output, in tokens, `</s>` excluded.
    pub max_len: usize,
}

impl Default for DecodeConfig {
    fn default() -> Self {
        Self {
            beam: 1,
            length_penalty: 0.6,
            max_len: 64,
        }
    }
}

/// The longest output a user may ask for, in tokens.
pub const MAX_DECODE_LEN: usize = 4096;

impl DecodeConfig {
    /// Checks the values against `model`: a beam of 1 to the target vocabulary's size, a
    /// finite length penalty ≥ 0, and a `max_len` the decoder's positions can hold.
    pub fn validate(&self, model: &Transformer) -> Result<()> {
        let vocab = model.config().tgt_vocab_size;
        ensure!(
            (1..=vocab).contains(&self.beam),
            "the beam size must be between 1 and the target vocabulary's {vocab} tokens, got {}",
            self.beam
        );
        ensure!(
            self.length_penalty.is_finite() && self.length_penalty >= 0.0,
            "the length penalty must be a finite number ≥ 0, got {}",
            self.length_penalty
        );
        posenc::limits::check("max_len", self.max_len, MAX_DECODE_LEN)?;
        if let Some(max) = model.max_positions().1 {
            ensure!(
                self.max_len < max,
                "max_len = {} needs {} target positions, but the model's encoding has max_positions = {max}; ask for at most {}",
                self.max_len,
                self.max_len + 1,
                max - 1
            );
        }
        Ok(())
    }
}

/// Translates source id rows (each ending in `</s>`), returning target ids without specials.
pub fn translate(
    model: &Transformer,
    sources: &[Vec<u32>],
    cfg: &DecodeConfig,
) -> Result<Vec<Vec<u32>>> {
    cfg.validate(model)?;
    if let Some(max) = model.max_positions().0 {
        if let Some(long) = sources.iter().find(|s| s.len() > max) {
            posenc_error::bail!(
                "a sentence of {} tokens is longer than the model's encoding allows (max_positions = {max})",
                long.len()
            );
        }
    }
    if cfg.beam == 1 {
        return greedy(model, sources, cfg.max_len);
    }
    sources.iter().map(|s| beam(model, s, cfg)).collect()
}

/// Greedy decoding of a batch: the most probable token at every step.
pub fn greedy(model: &Transformer, sources: &[Vec<u32>], max_len: usize) -> Result<Vec<Vec<u32>>> {
    if sources.is_empty() {
        return Ok(Vec::new());
    }
    let (memory, src_mask) = encode(model, sources)?;
    let n = sources.len();
    let mut cache = StackCache::default();
    let mut out = vec![Vec::new(); n];
    let mut done = vec![false; n];
    let mut next = vec![BOS_ID; n];
    for _ in 0..=max_len {
        let logp = decode_step(model, &next, &memory, &src_mask, &mut cache)?;
        let ids: Vec<u32> = logp.argmax(D::Minus1)?.to_dtype(DType::U32)?.to_vec1()?;
        for (i, &id) in ids.iter().enumerate() {
            if !done[i] {
                if id == EOS_ID || out[i].len() == max_len {
                    done[i] = true;
                } else {
                    out[i].push(id);
                }
            }
        }
        if done.iter().all(|&d| d) {
            break;
        }
        next = ids;
    }
    Ok(out)
}

/// The encoder's memory of padded `sources` and their padding mask.
fn encode(model: &Transformer, sources: &[Vec<u32>]) -> Result<(Tensor, Mask)> {
    let src = pad(sources, &model.device())?;
    let src_mask = Mask::padding(&src, PAD_ID)?;
    Ok((model.encode(&src, Some(&src_mask))?, src_mask))
}

/// Feeds one token per hypothesis after the cached ones; the next token's log-probabilities
/// `(hypotheses, vocab)`.
fn decode_step(
    model: &Transformer,
    tokens: &[u32],
    memory: &Tensor,
    src_mask: &Mask,
    cache: &mut StackCache,
) -> Result<Tensor> {
    let next = Tensor::new(tokens, &model.device())?.unsqueeze(1)?;
    let y = model.decode(&next, memory, Some(src_mask), None, Some(cache))?;
    Ok(model.generator().forward(&y.i((.., 0))?)?)
}

fn penalised(score: f64, len: usize, alpha: f64) -> f64 {
    score / ((5.0 + len as f64) / 6.0).powf(alpha)
}

/// Beam search for one source: keeps the `beam` best hypotheses, finishes those whose
/// `</s>` ranks among the `beam` best candidates, and returns the best finished one by
/// length-penalised score.
///
/// It stops once `beam` hypotheses have finished and the best one still alive, penalised
/// at its present length, scores no better than the worst of them (the rule of Hugging
/// Face's `BeamHypotheses.is_done`), or at `max_len`. Stopping at the first `beam`
/// finished ones instead would return a hypothesis that skipped a word and so ended a
/// step early, while the right one, a step longer, was still alive.
pub fn beam(model: &Transformer, source: &[u32], cfg: &DecodeConfig) -> Result<Vec<u32>> {
    let device = model.device();
    let (memory, src_mask) = encode(model, &[source.to_vec()])?;
    let mut cache = StackCache::default();
    // Alive hypotheses: (tokens, log-probability).
    let mut alive: Vec<(Vec<u32>, f64)> = vec![(Vec::new(), 0.0)];
    let mut finished: Vec<(Vec<u32>, f64)> = Vec::new();
    let mut last = vec![BOS_ID];
    for step in 0..=cfg.max_len {
        let logp: Vec<Vec<f32>> =
            decode_step(model, &last, &memory, &src_mask, &mut cache)?.to_vec2()?;
        let mut candidates: Vec<(usize, u32, f64)> = Vec::new();
        for (h, row) in logp.iter().enumerate() {
            for (tok, &lp) in row.iter().enumerate() {
                candidates.push((h, tok as u32, alive[h].1 + f64::from(lp)));
            }
        }
        candidates.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)).then(a.1.cmp(&b.1)));
        let mut next_alive = Vec::new();
        let mut parents = Vec::new();
        for (rank, (h, tok, score)) in candidates.into_iter().take(2 * cfg.beam).enumerate() {
            if tok == EOS_ID || step == cfg.max_len {
                // Only an end ranked among the best `beam` candidates finishes a hypothesis
                // (so a beam of 1 is greedy search).
                if rank < cfg.beam {
                    let tokens = alive[h].0.clone();
                    let len = tokens.len() + 1;
                    finished.push((tokens, penalised(score, len, cfg.length_penalty)));
                }
            } else if next_alive.len() < cfg.beam {
                let mut tokens = alive[h].0.clone();
                tokens.push(tok);
                next_alive.push((tokens, score));
                parents.push(h as u32);
            }
        }
        finished.sort_by(|a, b| b.1.total_cmp(&a.1));
        finished.truncate(cfg.beam);
        let best_alive = next_alive
            .first()
            .map(|(t, score)| penalised(*score, t.len(), cfg.length_penalty));
        let done = match (finished.last(), best_alive) {
            (_, None) => true,
            (Some((_, worst)), Some(alive)) => finished.len() == cfg.beam && alive <= *worst,
            (None, Some(_)) => false,
        };
        if done {
            break;
        }
        cache.select(&Tensor::new(parents, &device)?)?;
        last = next_alive
            .iter()
            .map(|(t, _)| *t.last().unwrap_or(&BOS_ID))
            .collect();
        alive = next_alive;
    }
    let best = finished
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(t, _)| t)
        .unwrap_or_else(|| alive.swap_remove(0).0);
    Ok(best)
}
