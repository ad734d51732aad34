//! `--model` and its flags: which causal language model the `lm` commands (and
//! `generate`) load ([`CausalLm`]), and how.

use anyhow::{Context, Result};
use posenc_llama::Precision;
use posenc_lm::run;
use posenc_transformer::{KvType, SelfExtend};

pub use posenc_lm::causal::CausalLm;

use super::{DeviceArg, RopeScalingArg};

/// Which model, how to load it, and whether to stretch its rotary context.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// A run directory of `posenc lm train`, `smollm2` (fetched by
    /// scripts/fetch_smollm2.sh), a .gguf file, or a directory written by `posenc convert`
    /// [default: `posenc generate`: smollm2; `posenc lm …`: the shipped
    /// models/shakespeare-alibi].
    #[arg(long)]
    model: Option<String>,
    /// Dequantize a GGUF's weights to f32 (exact, slower) instead of multiplying them
    /// quantized.
    #[arg(long)]
    f32: bool,
    /// What the key/value cache keeps keys and values as (llama.cpp's -ctk/-ctv; q8_0 and
    /// q4_0 need heads of a multiple of 32 values, their -hadamard forms, which turn each
    /// row first as llama.cpp does by default, of 64) [default: f16 for a quantized GGUF,
    /// as llama.cpp's; f32 otherwise].
    #[arg(long, value_enum)]
    kv_cache: Option<CacheType>,
    /// Where to compute: cpu; cuda or cuda:N (built with --features cuda); metal or metal:N
    /// (--features metal).
    #[arg(long, default_value = "cpu")]
    device: DeviceArg,
    #[command(flatten)]
    rope_scaling: RopeScalingArg,
    /// Read past the trained context with self-extend (Jin et al. 2024), no training: keys
    /// further than `window` positions from a query at grouped positions, `group` tokens
    /// to one: '{"group": 4, "window": 2048}' (a rotary model; the window a multiple of the
    /// group and within the trained context; llama.cpp's --grp-attn-n and --grp-attn-w)
    /// [default: none].
    #[arg(long, value_name = "JSON", value_parser = parse_self_extend)]
    self_extend: Option<SelfExtend>,
}

/// `--self-extend`'s JSON, checked before any model is loaded.
fn parse_self_extend(json: &str) -> Result<SelfExtend> {
    let se: SelfExtend = serde_json::from_str(json).with_context(|| {
        format!("--self-extend takes {{\"group\": G, \"window\": W}}, got {json:?}")
    })?;
    Ok(SelfExtend::new(se.group, se.window)?)
}

/// Which model a record came from and how it was read: the fields every `lm` record
/// begins with.
#[derive(serde::Serialize, Debug, Clone)]
pub struct ModelNote<'a> {
    /// `--model` (or the default).
    pub model: &'a str,
    /// `--rope-scaling` as given.
    pub rope_scaling: Option<&'a str>,
    /// `--self-extend`, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub self_extend: Option<SelfExtend>,
    /// `--kv-cache`, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache: Option<KvType>,
}

/// What `--kv-cache` keeps keys and values as (llama.cpp's `-ctk`/`-ctv`).
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum CacheType {
    /// 4 bytes a value: exact.
    F32,
    /// 2 bytes a value, rounded to 11 significant bits.
    F16,
    /// Blocks of 32 values, 34 bytes: an f16 scale and 8-bit codes.
    #[value(name = "q8_0")]
    Q8_0,
    /// Blocks of 32 values, 18 bytes: an f16 scale and 4-bit codes.
    #[value(name = "q4_0")]
    Q4_0,
    /// q8_0, each head's row turned by a Walsh–Hadamard matrix first (llama.cpp's q8_0).
    #[value(name = "q8_0-hadamard")]
    Q8_0Hadamard,
    /// q4_0, each head's row turned by a Walsh–Hadamard matrix first (llama.cpp's q4_0).
    #[value(name = "q4_0-hadamard")]
    Q4_0Hadamard,
}

impl From<CacheType> for KvType {
    fn from(d: CacheType) -> Self {
        match d {
            CacheType::F32 => KvType::F32,
            CacheType::F16 => KvType::F16,
            CacheType::Q8_0 => KvType::Q8_0,
            CacheType::Q4_0 => KvType::Q4_0,
            CacheType::Q8_0Hadamard => KvType::Q8_0Hadamard,
            CacheType::Q4_0Hadamard => KvType::Q4_0Hadamard,
        }
    }
}

impl ModelArgs {
    /// The `--model` given, or `default`.
    pub fn spec<'a>(&'a self, default: &'a str) -> &'a str {
        self.model.as_deref().unwrap_or(default)
    }

    /// `--rope-scaling` as given.
    pub fn rope_scaling(&self) -> Option<&str> {
        self.rope_scaling.json()
    }

    /// `--self-extend` as given.
    pub fn self_extend(&self) -> Option<SelfExtend> {
        self.self_extend
    }

    /// The model and how it is read, for a record ([`ModelNote`]).
    pub fn note<'a>(&'a self, default: &'a str) -> ModelNote<'a> {
        ModelNote {
            model: self.spec(default),
            rope_scaling: self.rope_scaling(),
            self_extend: self.self_extend,
            kv_cache: self.kv_cache.map(KvType::from),
        }
    }

    /// `, rope_scaling {…}`, `, self-extend G/W` and `, q8_0 cache` for the flags given,
    /// for a title.
    pub fn reading_note(&self) -> String {
        let scaling =
            (self.rope_scaling()).map_or(String::new(), |j| format!(", rope_scaling {j}"));
        let extend = self.self_extend.map_or(String::new(), |se| {
            format!(", self-extend (group {}, window {})", se.group, se.window)
        });
        let cache =
            (self.kv_cache).map_or(String::new(), |c| format!(", {} cache", KvType::from(c)));
        format!("{scaling}{extend}{cache}")
    }

    /// Loads `--model` (or `default`).
    ///
    /// # Errors
    /// A model that does not exist or does not load, naming it; a bad `--rope-scaling`.
    pub fn load(&self, default: &str) -> Result<CausalLm> {
        let precision = match self.f32 {
            true => Precision::F32,
            false => Precision::Quantized,
        };
        let spec = self.spec(default);
        let mut lm = CausalLm::load(spec, precision, &self.device.0)
            .map_err(|e| super::for_task(e, std::path::Path::new(spec), "lm"))?;
        lm.model = self.rope_scaling.apply(lm.model)?;
        if let Some(se) = self.self_extend {
            lm.model = lm.model.with_self_extend(se)?;
        }
        if let Some(kind) = self.kv_cache {
            lm.model.keep_cache_as(kind.into())?;
        }
        Ok(lm)
    }
}

/// Says before any work, on standard error, when `tokens` (`what` they are: "the prompt and
/// the answer come to") run past the context `lm` was trained on, where its answer may be
/// noise, and what stretches a rotary encoding, then on a line of its own how long reading
/// them takes; with `strict` `Some(true)` (`--strict-context`), refuses instead, and with
/// `None` (a command without that flag) does not name it.
pub fn check_context(lm: &CausalLm, what: &str, tokens: usize, strict: Option<bool>) -> Result<()> {
    let cfg = lm.model.config();
    let context = cfg.context;
    if tokens <= context {
        return Ok(());
    }
    let factor = tokens.div_ceil(context).next_power_of_two();
    let probe = serde_json::json!({"rope_type": "yarn", "factor": factor as f64});
    let hint = match cfg.encoding.with_setting("scaling", probe).is_ok() {
        true => format!(
            "; --rope-scaling '{{\"rope_type\": \"yarn\", \"factor\": {factor}}}' stretches its \
             rotary encoding that far"
        ),
        false => String::new(),
    };
    let reading = posenc_lm::sample::estimate_read_seconds(&lm.model, tokens)?;
    // Within about 3× either way (SmolLM2 at 11 700 tokens: 50 s said, 25 s taken; a 4-layer
    // model of ours at 34 400: 11 s said, 31 s taken).
    let reading = match reading < 1.0 {
        true => "under a second".to_string(),
        false => format!("roughly {}", posenc_train::duration(reading)),
    };
    let message = format!(
        "{what} {tokens} tokens, past the {context} the model was trained on ({}): past them \
         its answer may be noise{hint}",
        cfg.encoding.kind(),
    );
    anyhow::ensure!(strict != Some(true), "{message} (--strict-context)");
    let refuse = match strict {
        Some(_) => " (--strict-context refuses such a prompt)",
        None => "",
    };
    posenc_train::log(&format!(
        "warning: {message}{refuse}\n\
         Reading them takes {reading} here (scaled from a timed 128-token probe; within about 3×)"
    ));
    Ok(())
}

/// Says before the work, on standard error, how long reading `reads` (`(length, how many
/// windows or prompts of it)`) takes here, when that is past `POSENC_ESTIMATE_OVER`
/// seconds (120 unless set): scaled from a timed probe, as [`check_context`] does. An
/// estimate only advises: a length the model cannot read (past a learned table) is left
/// out, and a probe that fails says nothing.
///
/// # Errors
/// None yet; the type leaves room for one.
pub fn announce_long(lm: &CausalLm, what: &str, reads: &[(usize, usize)]) -> Result<()> {
    let over = std::env::var("POSENC_ESTIMATE_OVER")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(120.0);
    let reach = lm.model.max_positions().unwrap_or(usize::MAX);
    let mut seconds = 0.0;
    for &(len, count) in reads
        .iter()
        .filter(|(len, count)| *len > 0 && *count > 0 && *len <= reach)
    {
        let Ok(each) = posenc_lm::sample::estimate_read_seconds(&lm.model, len) else {
            return Ok(());
        };
        seconds += count as f64 * each;
    }
    if seconds > over {
        let tokens: usize = reads.iter().map(|(len, count)| len * count).sum();
        posenc_train::log(&format!(
            "{what} reads {tokens} tokens: roughly {} here (scaled from a timed 128-token \
             probe; within about 3×)",
            posenc_train::duration(seconds)
        ));
    }
    Ok(())
}

/// `--model`'s default for the `lm` commands.
pub fn shipped() -> String {
    run::shipped_model().display().to_string()
}
