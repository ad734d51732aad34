//! Assembling a pretrained Llama-architecture model on this project's blocks.
//!
//! llama.cpp's converter reorders the rows of each head of `W^Q` and `W^K` so that Hugging
//! Face's half-split rotary pairs `(i, i + d/2)` become adjacent pairs `(2i, 2i + 1)`: Hugging
//! Face row `s·d/2 + j` of a head is GGUF row `2j + s`. The same model is therefore run
//! either way, and both are tested against transformers:
//!
//! * on the GGUF's rows as they are, with `rope`'s **interleaved** layout (what
//!   candle-transformers' `quantized_llama` does with `rope_i`); the quantized path always
//!   does this, as quantized rows are not reordered;
//! * on rows put back in Hugging Face's order ([`unpermute`]), with the **half-split**
//!   layout; a Hugging Face directory (as [`crate::convert`] writes) is loaded this way.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Result;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use posenc::PairLayout;
use posenc_error::{bail, ensure, invalid, Context};
use posenc_transformer::{KvType, LanguageModel};
use tokenizers::Tokenizer;

use crate::chat::ChatTemplate;
use crate::config::LlamaConfig;
use crate::gguf::GgufFile;
use crate::names::{Global, Part, Weight};

/// How the projections hold their weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Dequantized to f32: exact, for parity with the reference.
    F32,
    /// As stored (Q4_1, Q8_0, …), multiplied quantized: fast (Q4_0, Q4_1, Q8_0, Q4_K and
    /// Q6_K on `posenc_kernels::quantized`, other formats on candle's `QMatMul`). The
    /// token table stays quantized too, expanded a looked-up row at a time; norms are f32,
    /// and the key/value cache is kept in f16, as llama.cpp keeps its own.
    Quantized,
}

/// A pretrained model with its tokenizer and chat template.
#[derive(Debug)]
pub struct Llama {
    /// The model, on this project's blocks.
    pub model: LanguageModel,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// Its sizes.
    pub config: LlamaConfig,
    /// Its chat template, if it has one.
    pub chat: Option<ChatTemplate>,
}

/// Where `scripts/fetch_smollm2.sh` puts SmolLM2-135M-Instruct (at the repository root);
/// an error naming the script when it is not there.
pub fn fetched_smollm2() -> Result<PathBuf> {
    let path = posenc_io::cache_dir().join("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.is_file() {
        bail!(
            "SmolLM2-135M-Instruct is missing from {}: run scripts/fetch_smollm2.sh",
            path.display()
        );
    }
    Ok(path)
}

impl Llama {
    /// `smollm2` (the fetched SmolLM2-135M-Instruct), a Hugging Face directory, or a GGUF
    /// file. A GGUF runs at `precision` with its own (interleaved) row order; a directory is
    /// f32 with half-split pairs.
    ///
    /// # Errors
    /// A path that does not exist, or any error of [`Llama::from_gguf`] or
    /// [`Llama::from_dir`].
    pub fn load(spec: &str, precision: Precision, device: &Device) -> Result<Self> {
        let path = match spec {
            "smollm2" => fetched_smollm2()?,
            path => PathBuf::from(path),
        };
        if path.is_dir() {
            Self::from_dir(&path, device)
        } else if path.is_file() {
            Self::from_gguf(&path, precision, PairLayout::Interleaved, device)
        } else {
            bail!(
                "no model `{spec}`: give smollm2, a directory written by `posenc convert`, or a .gguf file"
            )
        }
    }

    /// Loads a GGUF file. `layout` is the rotary pairing to run: interleaved on the file's
    /// rows, or half-split on rows put back in Hugging Face's order (f32 only).
    ///
    /// # Errors
    /// Anything [`GgufFile`] refuses; a missing or mis-shaped tensor, naming it; the
    /// half-split layout on quantized weights.
    pub fn from_gguf(
        path: &Path,
        precision: Precision,
        layout: PairLayout,
        device: &Device,
    ) -> Result<Self> {
        let quantized = precision == Precision::Quantized;
        ensure!(
            !(quantized && layout == PairLayout::Halves),
            "quantized weights keep llama.cpp's row order: run them with interleaved pairs"
        );
        let file = GgufFile::open(path)?;
        let config = file.config()?;
        let chat = match file.has_key("tokenizer.chat_template") {
            true => Some(ChatTemplate::new(file.string("tokenizer.chat_template")?)?),
            false => None,
        };
        // The tokenizer (its vocabulary and merges hashed) is built on one core while the
        // weights are copied out of the file on the other: a fifth of start-up.
        let (tokenizer, model) = rayon::join(
            || crate::tokenizer::from_gguf(&file),
            || weights(&file, &config, precision, layout, device),
        );
        Self::new(model?, tokenizer?, config, chat)
    }

    /// Loads a Hugging Face directory: `config.json`, `model.safetensors`,
    /// `tokenizer.json`, and the chat template from `tokenizer_config.json` if present.
    ///
    /// # Errors
    /// A missing or unreadable file, naming it; a missing or mis-shaped tensor, naming it.
    pub fn from_dir(dir: &Path, device: &Device) -> Result<Self> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
        };
        let config: LlamaConfig = serde_json::from_str(&read("config.json")?)
            .with_context(|| format!("parsing {}", dir.join("config.json").display()))?;
        let tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| invalid!("reading {}: {e}", dir.join("tokenizer.json").display()))?;
        let chat = match dir.join("tokenizer_config.json").is_file() {
            true => {
                let json: serde_json::Value =
                    serde_json::from_str(&read("tokenizer_config.json")?)?;
                json.get("chat_template")
                    .and_then(|t| t.as_str())
                    .map(ChatTemplate::new)
                    .transpose()?
            }
            false => None,
        };
        let path = dir.join("model.safetensors");
        let mut tensors = candle_core::safetensors::load(&path, device)
            .with_context(|| format!("reading {}", path.display()))?;
        let model = build(&config, PairLayout::Halves, device, |w| {
            let name = w.hf();
            let t = tensors
                .remove(&name)
                .ok_or_else(|| invalid!("{}: tensor `{name}` is missing", path.display()))?;
            let shape = w.shape(&config);
            ensure!(
                t.dims() == shape,
                "{}: tensor `{name}` has shape {:?}, the configuration needs {shape:?}",
                path.display(),
                t.dims()
            );
            Ok(t.to_dtype(DType::F32)?)
        })?;
        Self::new(model, tokenizer, config, chat)
    }

    /// The parts together, once the tokenizer is known to fit the vocabulary.
    fn new(
        model: LanguageModel,
        tokenizer: Tokenizer,
        config: LlamaConfig,
        chat: Option<ChatTemplate>,
    ) -> Result<Self> {
        let n = tokenizer.get_vocab_size(true);
        ensure!(
            n <= config.vocab_size,
            "the tokenizer has {n} tokens, more than the model's vocabulary of {}",
            config.vocab_size
        );
        Ok(Self {
            model,
            tokenizer,
            config,
            chat,
        })
    }

    /// The token ids of `text`, special tokens (`<|im_start|>`, …) matched whole.
    ///
    /// # Errors
    /// The tokenizer's own failure.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| invalid!("tokenizing the prompt: {e}"))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids` (special tokens included).
    ///
    /// # Errors
    /// An id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        Ok(self
            .tokenizer
            .decode(ids, false)
            .map_err(|e| invalid!("decoding tokens: {e}"))?)
    }
}

/// The model of `cfg` over the weights `get` returns, each of [`Weight::shape`], under
/// this project's names ([`Weight::ours`]): no tensor is copied or concatenated.
fn build(
    cfg: &LlamaConfig,
    layout: PairLayout,
    device: &Device,
    mut get: impl FnMut(Weight) -> Result<Tensor>,
) -> Result<LanguageModel> {
    let lm = cfg.lm_config(layout)?;
    let mut ours = HashMap::new();
    for w in Weight::all(cfg) {
        ours.insert(w.ours(), get(w)?);
    }
    let vb = VarBuilder::from_tensors(ours, DType::F32, device);
    Ok(LanguageModel::new(&lm, vb)?)
}

/// The model of a GGUF file's weights: projections (and the token table) quantized as
/// stored at [`Precision::Quantized`], with an f16 key/value cache; else all dequantized.
fn weights(
    file: &GgufFile,
    config: &LlamaConfig,
    precision: Precision,
    layout: PairLayout,
    device: &Device,
) -> Result<LanguageModel> {
    let quantized = precision == Precision::Quantized;
    let mut model = build(config, layout, device, |w| {
        let shape = w.shape(config);
        if quantized && (w.is_projection() || w == Weight::Global(Global::Embedding)) {
            // Replaced by the quantized weight below: a stride-0 view, never allocated.
            return Ok(Tensor::zeros((), DType::F32, device)?.broadcast_as(shape)?);
        }
        let dense = file.tensor(&w.gguf(), &shape, device)?.dequantize(device)?;
        match (w, layout) {
            (Weight::Layer(_, Part::Q), PairLayout::Halves) => {
                unpermute(&dense, config.num_attention_heads)
            }
            (Weight::Layer(_, Part::K), PairLayout::Halves) => {
                unpermute(&dense, config.num_key_value_heads)
            }
            _ => Ok(dense),
        }
    })?;
    if quantized {
        quantize(&mut model, file, config, device)?;
        // As llama.cpp's default cache: half the memory, far below the weights' rounding.
        model.keep_cache_as(KvType::F16)?;
    }
    Ok(model)
}

/// Swaps every projection of `model`, and its token embedding, for the file's quantized
/// weight; a tied head multiplies by the same quantized table the embedding looks up.
fn quantize(
    model: &mut LanguageModel,
    file: &GgufFile,
    cfg: &LlamaConfig,
    device: &Device,
) -> Result<()> {
    let mut names: HashMap<String, Weight> = (0..cfg.num_hidden_layers)
        .flat_map(|i| Part::ALL.into_iter().map(move |p| (i, p)))
        .filter_map(|(i, p)| Some((p.projection(i)?, Weight::Layer(i, p))))
        .collect();
    let embedding = Weight::Global(Global::Embedding);
    let table = Arc::new(file.tensor(&embedding.gguf(), &embedding.shape(cfg), device)?);
    model.embeddings_mut().quantize(table.clone())?;
    if !cfg.tie_word_embeddings {
        names.insert("head".into(), Weight::Global(Global::Head));
    }
    for (name, proj) in model.projections_mut() {
        if name == "head" && cfg.tie_word_embeddings {
            proj.quantize(table.clone())?;
            continue;
        }
        let w = names
            .remove(&name)
            .ok_or_else(|| invalid!("no GGUF weight for the projection `{name}`"))?;
        proj.quantize(file.tensor(&w.gguf(), &w.shape(cfg), device)?)?;
    }
    if let Some(name) = names.keys().next() {
        bail!("the model has no projection `{name}` to quantize");
    }
    Ok(())
}

/// Undoes llama.cpp's reordering of the rows of `W^Q` or `W^K` (`heads` heads): GGUF row
/// `2j + s` of each head goes back to Hugging Face row `s·d/2 + j`.
pub fn unpermute(w: &Tensor, heads: usize) -> Result<Tensor> {
    let (rows, cols) = w.dims2()?;
    let head_dim = rows / heads;
    Ok(w.reshape((heads, head_dim / 2, 2, cols))?
        .transpose(1, 2)?
        .reshape((rows, cols))?)
}
