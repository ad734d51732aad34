//! The Attention view's models: the shipped Kotoba translator, and the language models
//! (the shipped Shakespeare model and every `posenc lm train` run under `--runs`), each
//! loaded once, the first time it is asked for.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use candle_core::{Device, Tensor};
use posenc_kotoba::inspect::AttentionMaps;
use posenc_kotoba::task::Translator;
use posenc_lm::causal::CausalLm;
use posenc_lm::sample::Window;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// The longest sentence the page may ask to translate, in characters.
pub const MAX_SENTENCE_CHARS: usize = 500;
/// The longest prompt, in characters.
pub const MAX_PROMPT_CHARS: usize = 4_000;
/// The most tokens one generation may ask for.
pub const MAX_NEW_TOKENS: usize = 1_000;
/// Past this many tokens, generated tokens stream without their attention rows (each row
/// costs a pass over the whole sequence).
pub const MAX_ATTENTION_TOKENS: usize = 512;

/// The models the server offers, by the name the page shows.
pub struct Models {
    kotoba_dir: PathBuf,
    translator: OnceLock<Result<Arc<Translator>, String>>,
    lm_dirs: BTreeMap<String, PathBuf>,
    lms: Mutex<BTreeMap<String, Arc<CausalLm>>>,
}

/// A language model the page can pick.
#[derive(Debug, Clone, Serialize)]
pub struct LmEntry {
    /// Its name (`shakespeare-alibi`, `runs/rope`).
    pub name: String,
    /// Its directory.
    pub dir: String,
}

impl Models {
    /// The shipped models in `kotoba_dir` and `lm_dir`, and every language-model run found
    /// in `runs` (the directories themselves and their children).
    pub fn new(kotoba_dir: PathBuf, lm_dir: PathBuf, runs: &[PathBuf]) -> Self {
        let mut lm_dirs = BTreeMap::new();
        if posenc_lm::causal::is_run(&lm_dir) {
            let name = lm_dir
                .file_name()
                .map_or("shipped".into(), |n| n.to_string_lossy().into_owned());
            lm_dirs.insert(name, lm_dir);
        }
        for root in runs {
            let children = std::fs::read_dir(root)
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok().map(|e| e.path()));
            for dir in std::iter::once(root.clone()).chain(children) {
                if dir.is_dir() && posenc_lm::causal::is_run(&dir) {
                    lm_dirs.insert(dir.display().to_string(), dir);
                }
            }
        }
        Self {
            kotoba_dir,
            translator: OnceLock::new(),
            lm_dirs,
            lms: Mutex::new(BTreeMap::new()),
        }
    }

    /// The language models, by name.
    pub fn lms(&self) -> Vec<LmEntry> {
        self.lm_dirs
            .iter()
            .map(|(name, dir)| LmEntry {
                name: name.clone(),
                dir: dir.display().to_string(),
            })
            .collect()
    }

    /// The translator, loaded the first time.
    ///
    /// # Errors
    /// 404 when the shipped model does not load, naming why.
    pub fn translator(&self) -> Result<Arc<Translator>, ApiError> {
        self.translator
            .get_or_init(|| {
                Translator::load(&self.kotoba_dir, &Device::Cpu)
                    .map(Arc::new)
                    .map_err(|e| format!("the Kotoba model in {}: {e}", self.kotoba_dir.display()))
            })
            .clone()
            .map_err(ApiError::not_found)
    }

    /// The language model `name`, loaded the first time.
    ///
    /// # Errors
    /// 404 for a name not offered; the model's own load error otherwise.
    pub fn lm(&self, name: &str) -> Result<Arc<CausalLm>, ApiError> {
        let Some(dir) = self.lm_dirs.get(name) else {
            return Err(ApiError::not_found(format!(
                "no model `{name}` (the models are {})",
                self.lm_dirs
                    .keys()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        let mut lms = self.lms.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lm) = lms.get(name) {
            return Ok(lm.clone());
        }
        let lm = CausalLm::load(
            &dir.display().to_string(),
            posenc_llama::Precision::F32,
            &Device::Cpu,
        )
        .map_err(|e| ApiError::internal(format!("loading `{name}`: {e}")))?;
        let lm = Arc::new(lm);
        lms.insert(name.to_string(), lm.clone());
        Ok(lm)
    }
}

/// `POST /api/translate`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranslateRequest {
    /// An English sentence of the toy language.
    pub text: String,
}

/// A translation and what every head attended to while making it.
#[derive(Debug, Clone, Serialize)]
pub struct Translation {
    /// The Kotoba sentence.
    pub translation: String,
    /// The weights, `[layer][head][query][key]`, with the words.
    pub attention: AttentionMaps,
}

/// Translates `request.text` with the shipped model and reads its attention.
///
/// # Errors
/// An empty or overlong sentence, or a word outside the toy language's vocabulary, named.
pub fn translate(models: &Models, request: &TranslateRequest) -> Result<Translation, ApiError> {
    let chars = request.text.chars().count();
    if chars > MAX_SENTENCE_CHARS {
        return Err(ApiError::bad_request(format!(
            "the sentence is {chars} characters; the most is {MAX_SENTENCE_CHARS}"
        )));
    }
    let sentence = posenc_kotoba::vocab::normalize(&request.text);
    if sentence.trim().is_empty() {
        return Err(ApiError::bad_request(
            "type an English sentence to translate",
        ));
    }
    let translator = models.translator()?;
    let attention = translator
        .attention(&sentence)
        .map_err(ApiError::bad_request)?;
    let words = &attention.target[..attention.target.len().saturating_sub(1)];
    Ok(Translation {
        translation: words.join(" "),
        attention,
    })
}

/// `GET /api/generate`: a prompt for a language model.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateRequest {
    /// The model's name, as `/api/models` lists it.
    pub model: String,
    /// The text to continue.
    pub prompt: String,
    /// How many tokens to generate.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: usize,
    /// 0: greedy; 1: the model's distribution.
    #[serde(default)]
    pub temperature: f64,
    /// Seed of the draws.
    #[serde(default)]
    pub seed: u64,
}

fn default_max_tokens() -> usize {
    100
}

/// One generated token, as the page receives it.
#[derive(Debug, Clone, Serialize)]
pub struct Token {
    /// Its place among the generated tokens, from 0.
    pub index: usize,
    /// Its text.
    pub text: String,
    /// What the position that produced it attended to, `[layer][head][key]` over the prompt
    /// and the tokens before it; absent past [`MAX_ATTENTION_TOKENS`].
    pub attention: Option<Vec<Vec<Vec<f32>>>>,
}

/// Checks `request` before any model work.
///
/// # Errors
/// An empty or overlong prompt, too many tokens, a bad temperature.
pub fn check(request: &GenerateRequest) -> Result<(), ApiError> {
    let chars = request.prompt.chars().count();
    if chars == 0 {
        return Err(ApiError::bad_request("the prompt is empty: type some text"));
    }
    if chars > MAX_PROMPT_CHARS {
        return Err(ApiError::bad_request(format!(
            "the prompt is {chars} characters; the most is {MAX_PROMPT_CHARS}"
        )));
    }
    if request.max_tokens == 0 || request.max_tokens > MAX_NEW_TOKENS {
        return Err(ApiError::bad_request(format!(
            "max_tokens must be 1 to {MAX_NEW_TOKENS}, got {}",
            request.max_tokens
        )));
    }
    sampling(request).validate().map_err(ApiError::bad_request)
}

fn sampling(request: &GenerateRequest) -> posenc_lm::sample::Sampling {
    posenc_lm::sample::Sampling {
        temperature: request.temperature,
        seed: request.seed,
        ..Default::default()
    }
}

/// The prompt's tokens and each one's text, read before any generation starts.
///
/// # Errors
/// A character the model never saw, named (400).
pub fn prompt(
    lm: &CausalLm,
    request: &GenerateRequest,
) -> Result<(Vec<u32>, Vec<String>), ApiError> {
    let ids = lm
        .encode_prompt(&request.prompt)
        .map_err(ApiError::bad_request)?;
    let texts = ids
        .iter()
        .map(|&t| lm.decode(&[t]))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ApiError::internal)?;
    Ok((ids, texts))
}

/// Generates after `prompt` (from [`prompt`]), handing each token to `send` as it is
/// drawn; stops early when `send` returns `false` (the page went away or stopped it).
///
/// # Errors
/// A failed forward pass.
pub fn generate(
    lm: &CausalLm,
    prompt: &[u32],
    request: &GenerateRequest,
    mut send: impl FnMut(Token) -> bool,
) -> Result<(), ApiError> {
    let window = lm.model.max_positions().map(Window::Crop);
    let mut seen = prompt.to_vec();
    let mut index = 0;
    posenc_lm::sample::generate_observed(
        &lm.model,
        prompt,
        request.max_tokens,
        sampling(request),
        window,
        |_| {},
        |token| {
            seen.push(token);
            let attention = match seen.len() <= MAX_ATTENTION_TOKENS {
                true => Some(last_rows(lm, &seen[..seen.len() - 1])?),
                false => None,
            };
            let text = lm.decode(&[token])?;
            let going = send(Token {
                index,
                text,
                attention,
            });
            index += 1;
            Ok(going && Some(token) != lm.eos)
        },
    )
    .map_err(ApiError::bad_request)
}

/// What the last of `ids` attends to, per layer and head.
fn last_rows(lm: &CausalLm, ids: &[u32]) -> posenc_lm::Result<Vec<Vec<Vec<f32>>>> {
    let ids = Tensor::new(ids, &Device::Cpu)?.unsqueeze(0)?;
    let layers = lm.model.attention_weights(&ids)?;
    let mut out = Vec::with_capacity(layers.len());
    for w in layers {
        let n = w.dim(2)?;
        // (1, heads, n, n) → the last query's row per head.
        out.push(
            w.squeeze(0)?
                .narrow(1, n - 1, 1)?
                .squeeze(1)?
                .to_vec2::<f32>()?,
        );
    }
    Ok(out)
}
