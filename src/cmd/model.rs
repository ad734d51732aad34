//! `--model` and its flags: which causal language model the `lm` commands (and
//! `generate`) load ([`CausalLm`]), and how.

use anyhow::Result;
use candle_core::DType;
use posenc_llama::Precision;
use posenc_lm::lm_run;

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
