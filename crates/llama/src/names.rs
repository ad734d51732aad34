//! Where each weight of a Llama-architecture model lives, in three namings: llama.cpp's
//! GGUF, Hugging Face's `LlamaForCausalLM`, and this project's blocks
//! ([`posenc_transformer::LanguageModel`]). The one table of the Llama formats: the
//! loaders, the converter and the tests all read it.

use crate::config::LlamaConfig;

/// A weight of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// RMSNorm before attention.
    AttnNorm,
    /// `W^Q`.
    Q,
    /// `W^K`.
    K,
    /// `W^V`.
    V,
    /// `W^O`.
    Out,
    /// RMSNorm before the feed-forward network.
    FfnNorm,
    /// The gate of SwiGLU.
    Gate,
    /// The up projection.
    Up,
    /// The down projection.
    Down,
}

impl Part {
    /// Every part, in file order.
    pub const ALL: [Part; 9] = [
        Part::AttnNorm,
        Part::Q,
        Part::K,
        Part::V,
        Part::Out,
        Part::FfnNorm,
        Part::Gate,
        Part::Up,
        Part::Down,
    ];

    /// llama.cpp's name in layer `i`: `blk.{i}.attn_q.weight`, …
    pub fn gguf(self, i: usize) -> String {
        let part = match self {
            Part::AttnNorm => "attn_norm",
            Part::Q => "attn_q",
            Part::K => "attn_k",
            Part::V => "attn_v",
            Part::Out => "attn_output",
            Part::FfnNorm => "ffn_norm",
            Part::Gate => "ffn_gate",
            Part::Up => "ffn_up",
            Part::Down => "ffn_down",
        };
        format!("blk.{i}.{part}.weight")
    }

    /// Hugging Face's name in layer `i`: `model.layers.{i}.self_attn.q_proj.weight`, …
    pub fn hf(self, i: usize) -> String {
        let part = match self {
            Part::AttnNorm => "input_layernorm",
            Part::Q => "self_attn.q_proj",
            Part::K => "self_attn.k_proj",
            Part::V => "self_attn.v_proj",
            Part::Out => "self_attn.o_proj",
            Part::FfnNorm => "post_attention_layernorm",
            Part::Gate => "mlp.gate_proj",
            Part::Up => "mlp.up_proj",
            Part::Down => "mlp.down_proj",
        };
        format!("model.layers.{i}.{part}.weight")
    }

    /// This project's tensor name in layer `i`: `stack.layers.{i}.self_attn.q_proj.weight`,
    /// … (the blocks' PyTorch names, with `W^Q, W^K, W^V` apart).
    pub fn ours(self, i: usize) -> String {
        let part = match self {
            Part::AttnNorm => "norm1",
            Part::Q => "self_attn.q_proj",
            Part::K => "self_attn.k_proj",
            Part::V => "self_attn.v_proj",
            Part::Out => "self_attn.out_proj",
            Part::FfnNorm => "norm2",
            Part::Gate => "gate",
            Part::Up => "linear1",
            Part::Down => "linear2",
        };
        format!("stack.layers.{i}.{part}.weight")
    }

    /// This project's projection name ([`LanguageModel::projections_mut`]), for the
    /// parts that are projections.
    ///
    /// [`LanguageModel::projections_mut`]: posenc_transformer::LanguageModel::projections_mut
    pub fn projection(self, i: usize) -> Option<String> {
        let part = match self {
            Part::Q => "self_attn.q",
            Part::K => "self_attn.k",
            Part::V => "self_attn.v",
            Part::Out => "self_attn.out",
            Part::Gate => "feed_forward.gate",
            Part::Up => "feed_forward.up",
            Part::Down => "feed_forward.down",
            Part::AttnNorm | Part::FfnNorm => return None,
        };
        Some(format!("layers.{i}.{part}"))
    }
}

/// A weight outside the layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Global {
    /// The token embedding `(vocab, d_model)`.
    Embedding,
    /// The final RMSNorm.
    Norm,
    /// The output head `(vocab, d_model)`, absent when tied to the embedding.
    Head,
}

impl Global {
    /// llama.cpp's name.
    pub fn gguf(self) -> &'static str {
        match self {
            Global::Embedding => "token_embd.weight",
            Global::Norm => "output_norm.weight",
            Global::Head => "output.weight",
        }
    }

    /// Hugging Face's name.
    pub fn hf(self) -> &'static str {
        match self {
            Global::Embedding => "model.embed_tokens.weight",
            Global::Norm => "model.norm.weight",
            Global::Head => "lm_head.weight",
        }
    }

    /// This project's name.
    pub fn ours(self) -> &'static str {
        match self {
            Global::Embedding => "embed.weight",
            Global::Norm => "stack.norm.weight",
            Global::Head => "head.weight",
        }
    }
}

/// One weight of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    /// Outside the layers.
    Global(Global),
    /// Of layer `.0`.
    Layer(usize, Part),
}

impl Weight {
    /// llama.cpp's name.
    pub fn gguf(self) -> String {
        match self {
            Weight::Global(g) => g.gguf().into(),
            Weight::Layer(i, p) => p.gguf(i),
        }
    }

    /// Hugging Face's name.
    pub fn hf(self) -> String {
        match self {
            Weight::Global(g) => g.hf().into(),
            Weight::Layer(i, p) => p.hf(i),
        }
    }

    /// This project's name.
    pub fn ours(self) -> String {
        match self {
            Weight::Global(g) => g.ours().into(),
            Weight::Layer(i, p) => p.ours(i),
        }
    }

    /// Its shape (rows first) in a model of `cfg`'s sizes.
    pub fn shape(self, cfg: &LlamaConfig) -> Vec<usize> {
        let (d, ff, vocab) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
        let kv = cfg.num_key_value_heads * cfg.head_dim();
        match self {
            Weight::Global(Global::Norm) | Weight::Layer(_, Part::AttnNorm | Part::FfnNorm) => {
                vec![d]
            }
            Weight::Global(_) => vec![vocab, d],
            Weight::Layer(_, Part::Q | Part::Out) => vec![d, d],
            Weight::Layer(_, Part::K | Part::V) => vec![kv, d],
            Weight::Layer(_, Part::Gate | Part::Up) => vec![ff, d],
            Weight::Layer(_, Part::Down) => vec![d, ff],
        }
    }

    /// Every weight of a model of `cfg`'s sizes (the head only if untied).
    pub fn all(cfg: &LlamaConfig) -> Vec<Weight> {
        let mut all = vec![
            Weight::Global(Global::Embedding),
            Weight::Global(Global::Norm),
        ];
        if !cfg.tie_word_embeddings {
            all.push(Weight::Global(Global::Head));
        }
        for i in 0..cfg.num_hidden_layers {
            all.extend(Part::ALL.map(|p| Weight::Layer(i, p)));
        }
        all
    }
}

impl Weight {
    /// Whether the weight is a projection (a matrix multiplied, not looked up or a norm).
    pub fn is_projection(self) -> bool {
        matches!(self, Weight::Layer(_, p) if p.projection(0).is_some())
            || self == Weight::Global(Global::Head)
    }
}
