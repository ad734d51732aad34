//! `--model` and its flags: which causal language model the `lm` commands (and
//! `generate`) load ([`CausalLm`]), and how.

use anyhow::{Context, Result};
use candle_core::DType;
use posenc_llama::Precision;
use posenc_lm::lm_run;
use posenc_transformer::SelfExtend;

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
    /// The dtype of the key/value cache [default: f16 for a quantized GGUF, as llama.cpp's;
    /// f32 otherwise].
    #[arg(long, value_enum)]
    kv_cache: Option<CacheDtype>,
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
}

/// What `--kv-cache` keeps keys and values in.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum CacheDtype {
    /// 4 bytes a value: exact.
    F32,
    /// 2 bytes a value, rounded to 11 significant bits.
    F16,
}

impl From<CacheDtype> for DType {
    fn from(d: CacheDtype) -> Self {
        match d {
            CacheDtype::F32 => DType::F32,
            CacheDtype::F16 => DType::F16,
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
        }
    }

    /// `, rope_scaling {…}` and `, self-extend G/W` for the flags given, for a title.
    pub fn reading_note(&self) -> String {
        let scaling =
            (self.rope_scaling()).map_or(String::new(), |j| format!(", rope_scaling {j}"));
        let extend = self.self_extend.map_or(String::new(), |se| {
            format!(", self-extend (group {}, window {})", se.group, se.window)
        });
        format!("{scaling}{extend}")
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
        if let Some(dtype) = self.kv_cache {
            lm.model.keep_cache_as(dtype.into())?;
        }
        Ok(lm)
    }
}

/// `--model`'s default for the `lm` commands.
pub fn shipped() -> String {
    lm_run::shipped_model().display().to_string()
}
