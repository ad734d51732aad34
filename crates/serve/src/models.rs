//! The Attention view's models: the shipped Kotoba translator, and the language models
//! (the shipped Shakespeare model, SmolLM2 when it is fetched, and every `posenc lm train`
//! run under `--runs`, never another task's), each loaded once, the first time it is
//! asked for.

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

/// A translator once loaded, or why it did not load; empty until it is first asked for.
type Loaded = OnceLock<Result<Arc<Translator>, String>>;

/// The models the server offers, by the name the page shows.
pub struct Models {
    /// The translators by name, the shipped one (`kotoba`) first, then `kotoba train`
    /// runs under `--runs`.
    kotoba_dirs: Vec<(String, PathBuf)>,
    translators: Mutex<BTreeMap<String, Arc<Loaded>>>,
    /// By name, in the order the page offers them: the shipped model first (its default).
    lm_dirs: Vec<(String, PathBuf)>,
    lms: Mutex<BTreeMap<String, Arc<CausalLm>>>,
}

/// A model the page can pick: a language model, or a translator.
#[derive(Debug, Clone, Serialize)]
pub struct LmEntry {
    /// Its name (`shakespeare-alibi`, `runs/rope`).
    pub name: String,
    /// Its directory.
    pub dir: String,
}

impl Models {
    /// The shipped models in `kotoba_dir` and `lm_dir`, SmolLM2 if
    /// `scripts/fetch_smollm2.sh` fetched it, and every language-model run found in `runs`
    /// (the directories themselves and their children; runs of other tasks are left out).
    pub fn new(kotoba_dir: PathBuf, lm_dir: PathBuf, runs: &[PathBuf]) -> Self {
        let mut lm_dirs = Vec::new();
        if run_kind(&lm_dir).as_deref() == Some(LM) {
            let name = lm_dir
                .file_name()
                .map_or("shipped".into(), |n| n.to_string_lossy().into_owned());
            lm_dirs.push((name, lm_dir));
        }
        if posenc_llama::model::fetched_smollm2().is_ok() {
            lm_dirs.push((SMOLLM2.to_string(), PathBuf::from(SMOLLM2)));
        }
        let (mut found, mut translators) = (BTreeMap::new(), BTreeMap::new());
        for root in runs {
            let children = std::fs::read_dir(root)
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok().map(|e| e.path()));
            for dir in std::iter::once(root.clone()).chain(children) {
                match run_kind(&dir).as_deref() {
                    Some(LM) => found.insert(dir.display().to_string(), dir),
                    Some(KOTOBA) => translators.insert(dir.display().to_string(), dir),
                    _ => None,
                };
            }
        }
        lm_dirs.extend(found);
        let mut kotoba_dirs = vec![(SHIPPED_TRANSLATOR.to_string(), kotoba_dir)];
        kotoba_dirs.extend(translators);
        Self {
            kotoba_dirs,
            translators: Mutex::new(BTreeMap::new()),
            lm_dirs,
            lms: Mutex::new(BTreeMap::new()),
        }
    }

    /// The language models, by name.
    pub fn lms(&self) -> Vec<LmEntry> {
        entries(&self.lm_dirs)
    }

    /// The translators, by name: the shipped one (`kotoba`) first.
    pub fn translators(&self) -> Vec<LmEntry> {
        entries(&self.kotoba_dirs)
    }

    /// The translator `name` (`None`: the shipped one), loaded the first time.
    ///
    /// # Errors
    /// 404 for a name not offered, or a model that does not load, naming why.
    pub fn translator(&self, name: Option<&str>) -> Result<Arc<Translator>, ApiError> {
        let name = name.unwrap_or(SHIPPED_TRANSLATOR);
        let Some((_, dir)) = self.kotoba_dirs.iter().find(|(n, _)| n == name) else {
            let known: Vec<String> = self
                .kotoba_dirs
                .iter()
                .map(|(k, _)| format!("`{k}`"))
                .collect();
            return Err(ApiError::not_found(format!(
                "no translator `{name}` (the translators are {})",
                known.join(", ")
            )));
        };
        // Each loads once; another translator's load does not wait on it.
        let cell = {
            let mut all = self.translators.lock().unwrap_or_else(|e| e.into_inner());
            all.entry(name.to_string()).or_default().clone()
        };
        cell.get_or_init(|| {
            Translator::load(dir, &Device::Cpu)
                .map(Arc::new)
                .map_err(|e| format!("the Kotoba model in {}: {e}", dir.display()))
        })
        .clone()
        .map_err(ApiError::not_found)
    }

    /// The language model `name`, loaded the first time.
    ///
    /// # Errors
    /// 404 for a name not offered; the model's own load error otherwise.
    pub fn lm(&self, name: &str) -> Result<Arc<CausalLm>, ApiError> {
        let Some((_, dir)) = self.lm_dirs.iter().find(|(n, _)| n == name) else {
            return Err(ApiError::not_found(format!(
                "no model `{name}` (the models are {})",
                self.lm_dirs
                    .iter()
                    .map(|(k, _)| format!("`{k}`"))
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

/// SmolLM2-135M-Instruct's name, as the command line's `--model` takes it.
const SMOLLM2: &str = "smollm2";

/// The models of `dirs`, as the page lists them.
fn entries(dirs: &[(String, PathBuf)]) -> Vec<LmEntry> {
    dirs.iter()
        .map(|(name, dir)| LmEntry {
            name: name.clone(),
            dir: dir.display().to_string(),
        })
        .collect()
}

/// The shipped translator's name.
const SHIPPED_TRANSLATOR: &str = "kotoba";
/// The kind a language-model run's manifest names.
const LM: &str = <posenc_lm::task::LmTask<'static> as posenc_train::job::Job<'static>>::KIND;
/// The kind a translation run's manifest names.
const KOTOBA: &str = <posenc_kotoba::task::Translation as posenc_train::job::Job<'static>>::KIND;

/// The task whose run `dir` holds: the kind its manifest names, or (a run from before
/// manifests named it) the task whose state it parses as; `None` for no run.
fn run_kind(dir: &std::path::Path) -> Option<String> {
    if !dir.is_dir() || !posenc_lm::causal::is_run(dir) {
        return None;
    }
    match posenc_train::job::kind_of(dir) {
        Ok(Some(kind)) => Some(kind),
        Ok(None) if posenc_lm::task::LmState::load(dir).is_ok() => Some(LM.to_string()),
        Ok(None) if posenc_kotoba::task::TrainerState::load(dir).is_ok() => {
            Some(KOTOBA.to_string())
        }
        _ => None,
    }
}

/// `POST /api/translate`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranslateRequest {
    /// An English sentence of the toy language.
    pub text: String,
    /// The translator, as `/api/models` lists them [default: the shipped one].
    #[serde(default)]
    pub model: Option<String>,
}

/// A translation and what every head attended to while making it.
#[derive(Debug, Clone, Serialize)]
pub struct Translation {
    /// The Kotoba sentence.
    pub translation: String,
    /// The weights, `[layer][head][query][key]`, with the words.
    pub attention: AttentionMaps,
}

/// Translates `request.text` with the model it names (the shipped one by default) and
/// reads its attention.
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
    let translator = models.translator(request.model.as_deref())?;
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
    /// Send the attention of every k-th token only (0: of none): each costs a pass over
    /// the whole sequence, and its rows are most of the stream's bytes.
    #[serde(default = "default_attention_every")]
    pub attention_every: usize,
}

fn default_max_tokens() -> usize {
    100
}

fn default_attention_every() -> usize {
    1
}

/// How a generation ended, as its `done` event says, with the settings it ran with.
#[derive(Debug, Clone, Serialize)]
pub struct Done {
    /// Tokens generated.
    pub tokens: usize,
    /// `end_of_sequence`, `max_tokens`, or `stopped` (the page closed the stream).
    pub stop: &'static str,
    /// The request's settings, defaults filled in.
    pub settings: serde_json::Value,
}

/// One generated token, as the page receives it.
#[derive(Debug, Clone, Serialize)]
pub struct Token {
    /// Its place among the generated tokens, from 0.
    pub index: usize,
    /// Its text.
    pub text: String,
    /// What the position that produced it attended to, `[layer][head][key]` over the prompt
    /// and the tokens before it; absent past [`MAX_ATTENTION_TOKENS`], and but for every
    /// `attention_every`-th token.
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
) -> Result<Done, ApiError> {
    let window = lm.model.max_positions().map(Window::Crop);
    let mut seen = prompt.to_vec();
    let mut index = 0;
    let mut stop = "max_tokens";
    let every = request.attention_every;
    posenc_lm::sample::generate_observed(
        &lm.model,
        prompt,
        request.max_tokens,
        sampling(request),
        window,
        |_| {},
        |token| {
            seen.push(token);
            let wanted = every > 0 && index % every == 0;
            let attention = match wanted && seen.len() <= MAX_ATTENTION_TOKENS {
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
            if Some(token) == lm.eos {
                stop = "end_of_sequence";
            } else if !going {
                stop = "stopped";
            }
            Ok(going && Some(token) != lm.eos)
        },
    )
    .map_err(ApiError::bad_request)?;
    Ok(Done {
        tokens: index,
        stop,
        settings: serde_json::json!({
            "model": request.model, "max_tokens": request.max_tokens,
            "temperature": request.temperature, "seed": request.seed,
            "attention_every": request.attention_every,
        }),
    })
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
