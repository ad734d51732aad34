//! The machine's own limits, measured in the same invocation as the benchmark, and the work
//! each measure does, counted from the model's shapes: what a speed is as a fraction of
//! what the hardware allows, beside its ratio against a peer (which moves with the
//! machine as much as ours does).
//!
//! - **Decode** reads every weight once a token (the tied embedding serves as the output
//!   layer) and the cache of keys and values: its limit is the memory bandwidth over those
//!   bytes.
//! - **Prefill** and **a training step** are matrix products: their limit is the f32 FMA
//!   peak over their flops (two a multiply-add).

use std::io::Write;

use posenc_kernels::machine::{fma_peak, read_bandwidth, Limit};
use posenc_llama::LlamaConfig;

use crate::Result;

/// Bytes each thread streams through when the bandwidth is measured: far past any cache.
const READ_BYTES: usize = 256 << 20;
/// Rounds of the FMA chains a pass: a few hundred milliseconds.
const FMA_ROUNDS: u64 = 20_000_000;

/// The two limits of this machine's `threads` threads.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    /// Memory read bandwidth, bytes/s.
    pub bandwidth: Limit,
    /// Peak f32 multiply-add throughput, flops/s.
    pub peak: Limit,
}

impl Machine {
    /// Measures both on `threads` threads at once (best of three passes each).
    pub fn measure(threads: usize) -> Self {
        Self {
            bandwidth: read_bandwidth(threads, READ_BYTES, 3),
            peak: fma_peak(threads, FMA_ROUNDS, 3),
        }
    }

    /// One line saying what was measured.
    pub fn describe(&self) -> String {
        format!(
            "this machine's limits, measured now on {} threads: memory read {:.1} GB/s (a streaming sum of {} MB a thread), f32 FMA peak {:.1} GFLOP/s ({} chains in registers)",
            self.bandwidth.threads,
            self.bandwidth.per_second / 1e9,
            READ_BYTES >> 20,
            self.peak.per_second / 1e9,
            self.peak.level,
        )
    }

    /// Writes [`Machine::describe`] to `out`.
    ///
    /// # Errors
    /// A failed write.
    pub fn report(&self, out: &mut impl Write) -> Result<()> {
        writeln!(out, "{}", self.describe())?;
        Ok(())
    }
}

/// Flops of a decoder's matrix products per token: the projections, the feed-forward and
/// the output layer, two a multiply-add.
pub fn llama_matmul_flops_per_token(cfg: &LlamaConfig) -> f64 {
    let d = cfg.hidden_size as f64;
    let hd = (cfg.hidden_size / cfg.num_attention_heads.max(1)) as f64;
    let (heads, kv) = (
        cfg.num_attention_heads as f64,
        cfg.num_key_value_heads as f64,
    );
    let per_layer = d * heads * hd
        + 2.0 * d * kv * hd
        + heads * hd * d
        + 3.0 * d * cfg.intermediate_size as f64;
    2.0 * (cfg.num_hidden_layers as f64 * per_layer + d * cfg.vocab_size as f64)
}

/// Flops of reading a prompt of `n` tokens: the matrix products of every token, and
/// causal attention's scores and weighted values (token `i` against `i + 1` keys).
pub fn llama_prefill_flops(cfg: &LlamaConfig, n: usize) -> f64 {
    let hd = (cfg.hidden_size / cfg.num_attention_heads.max(1)) as f64;
    let pairs = (n * (n + 1) / 2) as f64;
    let attention =
        cfg.num_hidden_layers as f64 * 4.0 * cfg.num_attention_heads as f64 * hd * pairs;
    n as f64 * llama_matmul_flops_per_token(cfg) + attention
}

/// Bytes a decode step reads: the weights (`weight_bytes`, the file's tensors) and the
/// keys and values of `cached` positions at `bytes_per_value`.
pub fn llama_decode_bytes(
    cfg: &LlamaConfig,
    weight_bytes: f64,
    cached: f64,
    bytes_per_value: f64,
) -> f64 {
    let hd = (cfg.hidden_size / cfg.num_attention_heads.max(1)) as f64;
    let cache = cfg.num_hidden_layers as f64
        * 2.0
        * cfg.num_key_value_heads as f64
        * hd
        * cached
        * bytes_per_value;
    weight_bytes + cache
}

/// Flops of one training step of an encoder–decoder (`posenc_transformer::Config`) on
/// `batch` pairs of `len` tokens each side: the forward's matrix products and attention,
/// and a backward of twice the forward's (the gradients of inputs and of weights).
pub fn transformer_step_flops(cfg: &posenc_transformer::Config, batch: usize, len: usize) -> f64 {
    let d = cfg.d_model as f64;
    let ff = cfg.d_ff as f64;
    let t = len as f64;
    // Per token: Q, K, V and the output (4 d²), the feed-forward (2 d·ff); per query,
    // scores and weighted values against `len` keys (2 · len · d).
    let encoder = cfg.encoder_layers as f64 * (4.0 * d * d + 2.0 * d * ff + 2.0 * t * d);
    let decoder = cfg.decoder_layers as f64
        * (4.0 * d * d + 2.0 * t * d + 4.0 * d * d + 2.0 * t * d + 2.0 * d * ff);
    let head = d * cfg.tgt_vocab_size as f64;
    let forward = 2.0 * batch as f64 * t * (encoder + decoder + head);
    3.0 * forward
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M's shapes (its config.json): 30 layers of width 576, 9 heads of 64 with
    /// 3 key/value heads, a feed-forward of 1 536, 49 152 tokens. Its parameters are 134.5 M
    /// (the model card's 135 M); all but the norms are in matrix products.
    #[test]
    fn a_token_costs_two_flops_a_weight() {
        let cfg: LlamaConfig = serde_json::from_value(serde_json::json!({
            "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
            "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
            "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "max_position_embeddings": 8192,
            "tie_word_embeddings": true, "hidden_act": "silu"
        }))
        .unwrap();
        let weights = llama_matmul_flops_per_token(&cfg) / 2.0;
        // 30 · (576·576 · 2 + 2 · 576·192 + 3 · 576·1536) + 576 · 49152.
        assert_eq!(
            weights,
            30.0 * (663_552.0 + 221_184.0 + 2_654_208.0) + 28_311_552.0
        );
        assert!((weights / 1e6 - 134.5).abs() < 0.1, "{weights}");
        // One token of prefill is one token of products plus one key of attention.
        let one = llama_prefill_flops(&cfg, 1);
        assert_eq!(one, 2.0 * weights + 30.0 * 4.0 * 9.0 * 64.0);
        // A decode step past 1 000 cached f16 positions: 30 layers · K and V · 3 · 64.
        let bytes = llama_decode_bytes(&cfg, 1e8, 1000.0, 2.0);
        assert_eq!(bytes, 1e8 + 30.0 * 2.0 * 3.0 * 64.0 * 1000.0 * 2.0);
    }
}
