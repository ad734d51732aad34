//! Context extension of a rotary encoding: the frequencies and attention factor of
//! transformers' `rope_type`s, with transformers' `rope_parameters` keys spelt as it spells
//! them (`modeling_rope_utils.py`).
//!
//! With `θ_i = base^(−2i/d)`, `i = 0 … d/2 − 1`, a factor `s` and the trained context `L`
//! (`original_max_position_embeddings`):
//!
//! ```text
//! linear   (Chen et al. 2023, position interpolation)  θ'_i = θ_i / s
//! dynamic  (NTK-aware, bloc97 / emozilla 2023)        at length n > L:
//!          base' = base · (s·n/L − (s − 1))^(d/(d−2)),  θ'_i = base'^(−2i/d)
//! yarn     (Peng et al. 2023)                          θ'_i = θ_i/s · (1 − γ_i) + θ_i · γ_i,
//!          γ_i = 1 − clamp((i − lo)/(hi − lo), 0, 1), lo, hi the dimensions that turn
//!          β_fast and β_slow times in L; attention factor 0.1·ln s + 1
//! llama3   (Meta 2024)  wavelength λ_i = 2π/θ_i: unchanged below L/high_freq_factor,
//!          θ_i / s above L/low_freq_factor, interpolated smoothly between
//! longrope (Ding et al. 2024)  θ'_i = θ_i / f_i, f = short_factor up to L and long_factor
//!          past it; attention factor √(1 + ln s / ln L)
//! proportional (p-RoPE, Barbero et al. 2025; Gemma 4)  with p = partial_rotary_factor,
//!          θ'_i = θ_i / s for i < ⌊p·d/2⌋, 0 for the rest: the lowest frequencies are
//!          dropped, and their pairs carry no position (s defaults to 1, L is not read)
//! ```
//!
//! The attention factor multiplies cos and sin, as transformers does, so queries and keys
//! both carry it and the scores carry its square: no consumer learns which scaling is on.

use serde::{Deserialize, Serialize};

use crate::encoding::require;
use crate::{Error, Result};

/// How a rotary encoding's frequencies are stretched: transformers' `rope_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RopeType {
    /// RoFormer's frequencies, unchanged.
    Default,
    /// Position interpolation: every frequency divided by `factor`.
    Linear,
    /// Dynamic NTK: the base grows with the length past the trained context.
    Dynamic,
    /// YaRN: interpolation for the low frequencies, none for the high, and an attention
    /// factor.
    Yarn,
    /// Llama 3.1's: YaRN-like ramp by wavelength, no attention factor.
    Llama3,
    /// LongRoPE: a factor per frequency, one list within the trained context and one past it.
    Longrope,
    /// p-RoPE: only the highest `partial_rotary_factor` of the frequencies rotate; the
    /// lowest are 0, so their pairs pass through unrotated.
    Proportional,
}

impl RopeType {
    /// The name as transformers spells it (`yarn`, `llama3`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Linear => "linear",
            Self::Dynamic => "dynamic",
            Self::Yarn => "yarn",
            Self::Llama3 => "llama3",
            Self::Longrope => "longrope",
            Self::Proportional => "proportional",
        }
    }
}

/// Transformers' `rope_parameters` (or `rope_scaling`), each key as transformers spells it;
/// which keys a type reads is in [the module's](self) formulas.
///
/// ```
/// use posenc::rope_scaling::{RopeScaling, RopeType};
/// let s: RopeScaling =
///     serde_json::from_str(r#"{"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 64}"#)
///         .unwrap();
/// assert_eq!(s.rope_type, RopeType::Yarn);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RopeScaling {
    /// Which scaling (`type` in older Hugging Face configs).
    #[serde(alias = "type")]
    pub rope_type: RopeType,
    /// How many times the trained context to reach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<f64>,
    /// The context the model was trained on, `L` [default: the model's context].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_max_position_embeddings: Option<usize>,
    /// YaRN: rotations in `L` above which a dimension is left alone (default 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta_fast: Option<f64>,
    /// YaRN: rotations in `L` below which a dimension is interpolated fully (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta_slow: Option<f64>,
    /// YaRN, LongRoPE: the factor on cos and sin [from `factor`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_factor: Option<f64>,
    /// YaRN (DeepSeek): `mscale` of the attention factor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mscale: Option<f64>,
    /// YaRN (DeepSeek): `mscale_all_dim` of the attention factor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mscale_all_dim: Option<f64>,
    /// Llama 3: wavelengths above `L / low_freq_factor` are divided by `factor` in full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_freq_factor: Option<f64>,
    /// Llama 3: wavelengths below `L / high_freq_factor` are left alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_freq_factor: Option<f64>,
    /// LongRoPE: one divisor per frequency within `L`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_factor: Option<Vec<f64>>,
    /// LongRoPE: one divisor per frequency past `L`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_factor: Option<Vec<f64>>,
    /// YaRN: round the ramp's ends to whole dimensions [true].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate: Option<bool>,
    /// Proportional: the share `p` of the frequencies (the highest) that rotate, in
    /// [0, 1] [1: every one, linear scaling by `factor`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_rotary_factor: Option<f64>,
}

/// Inverse frequencies with the factor on cos and sin.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Frequencies {
    pub(crate) inv_freq: Vec<f64>,
    pub(crate) attention: f64,
}

/// `θ_i = base^(−2i/dim)`, no attention factor.
pub(crate) fn plain(dim: usize, base: f64) -> Frequencies {
    Frequencies {
        inv_freq: crate::inverse_frequencies(dim, base),
        attention: 1.0,
    }
}

const KIND: &str = "rope";

impl RopeScaling {
    /// transformers' `{"rope_type": "proportional", "partial_rotary_factor": p}`: the
    /// fastest share `p` of the frequencies rotate, the rest are 0.
    pub fn proportional(p: f64) -> Self {
        Self {
            rope_type: RopeType::Proportional,
            factor: None,
            original_max_position_embeddings: None,
            beta_fast: None,
            beta_slow: None,
            attention_factor: None,
            mscale: None,
            mscale_all_dim: None,
            low_freq_factor: None,
            high_freq_factor: None,
            short_factor: None,
            long_factor: None,
            truncate: None,
            partial_rotary_factor: Some(p),
        }
    }

    /// The trained context `L`: the setting, else `context`.
    fn original(&self, context: Option<usize>) -> Result<usize> {
        self.original_max_position_embeddings
            .or(context)
            .ok_or_else(|| {
                Error::Config(format!(
                    "`{KIND}` scaling `{}` needs original_max_position_embeddings: the model's context is not known here",
                    self.rope_type.name()
                ))
            })
    }

    fn factor(&self) -> Result<f64> {
        let f = self.factor.ok_or_else(|| {
            Error::Config(format!(
                "`{KIND}` scaling `{}` needs a factor",
                self.rope_type.name()
            ))
        })?;
        require(
            KIND,
            // A factor past the longest sequence anything here runs stretches to no length.
            f.is_finite() && f > 0.0 && f <= crate::limits::MAX_POSITIONS as f64,
            format!(
                // `{:?}` keeps an absurd factor short (1e308, not 309 digits).
                "a scaling factor in (0, {}], got {f:?}",
                crate::limits::MAX_POSITIONS
            ),
        )?;
        Ok(f)
    }

    /// Checks every setting this type reads, for `dim` rotated dimensions and the model's
    /// `context`, and returns the trained context `L`.
    pub(crate) fn validate(&self, dim: usize, context: Option<usize>) -> Result<usize> {
        let original = match self.rope_type {
            RopeType::Default => return Ok(context.unwrap_or(0)),
            RopeType::Proportional => {
                if self.factor.is_some() {
                    self.factor()?;
                }
                let p = self.partial_rotary_factor.unwrap_or(1.0);
                require(
                    KIND,
                    (0.0..=1.0).contains(&p),
                    format!("a partial_rotary_factor in [0, 1], got {p:?}"),
                )?;
                return Ok(context.unwrap_or(0));
            }
            _ => self.original(context)?,
        };
        require(KIND, original > 0, "original_max_position_embeddings > 0")?;
        if self.rope_type != RopeType::Longrope || self.attention_factor.is_none() {
            self.factor()?;
        }
        for (name, value) in [
            ("beta_fast", self.beta_fast),
            ("beta_slow", self.beta_slow),
            ("attention_factor", self.attention_factor),
            ("low_freq_factor", self.low_freq_factor),
            ("high_freq_factor", self.high_freq_factor),
        ] {
            if let Some(v) = value {
                require(
                    KIND,
                    v.is_finite() && v > 0.0,
                    format!("{name} > 0, got {v:?}"),
                )?;
            }
        }
        match self.rope_type {
            RopeType::Llama3 => {
                let (lo, hi) = (self.low_freq_factor, self.high_freq_factor);
                let (Some(lo), Some(hi)) = (lo, hi) else {
                    return Err(Error::Config(format!(
                        "`{KIND}` scaling `llama3` needs low_freq_factor and high_freq_factor"
                    )));
                };
                // Equal factors leave no band between (Llama 4's): a step, no ramp.
                require(
                    KIND,
                    hi >= lo,
                    format!("high_freq_factor ≥ low_freq_factor, got {hi} and {lo}"),
                )?;
            }
            RopeType::Longrope => {
                for (name, list) in [
                    ("short_factor", &self.short_factor),
                    ("long_factor", &self.long_factor),
                ] {
                    let list = list.as_ref().ok_or_else(|| {
                        Error::Config(format!("`{KIND}` scaling `longrope` needs {name}"))
                    })?;
                    require(
                        KIND,
                        list.len() == dim / 2,
                        format!(
                            "{name} of {} values (one per rotated pair), got {}",
                            dim / 2,
                            list.len()
                        ),
                    )?;
                    require(
                        KIND,
                        list.iter().all(|f| f.is_finite() && *f > 0.0),
                        format!("every {name} value > 0"),
                    )?;
                }
            }
            _ => {}
        }
        Ok(original)
    }

    /// Whether the frequencies change with the length of the sequence (dynamic NTK, and
    /// LongRoPE's two lists).
    pub(crate) fn depends_on_length(&self) -> bool {
        matches!(self.rope_type, RopeType::Dynamic | RopeType::Longrope)
    }

    /// The frequencies for a sequence of `len` positions, `dim` rotated dimensions, the
    /// wavelength `base` and the trained context `original` (settings already validated).
    pub(crate) fn frequencies(
        &self,
        dim: usize,
        base: f64,
        original: usize,
        len: usize,
    ) -> Frequencies {
        let plain = plain(dim, base);
        let factor = self.factor.unwrap_or(1.0);
        let l = original as f64;
        match self.rope_type {
            RopeType::Default => plain,
            RopeType::Linear => Frequencies {
                inv_freq: plain.inv_freq.iter().map(|f| f / factor).collect(),
                attention: 1.0,
            },
            RopeType::Dynamic => {
                if len <= original {
                    return plain;
                }
                let grown = factor * len as f64 / l - (factor - 1.0);
                let base = base * grown.powf(dim as f64 / (dim as f64 - 2.0));
                self::plain(dim, base)
            }
            RopeType::Yarn => {
                let mscale = |scale: f64, m: f64| match scale <= 1.0 {
                    true => 1.0,
                    false => 0.1 * m * scale.ln() + 1.0,
                };
                let attention = self.attention_factor.unwrap_or_else(|| {
                    match (self.mscale, self.mscale_all_dim) {
                        (Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                            mscale(factor, m) / mscale(factor, all)
                        }
                        _ => mscale(factor, 1.0),
                    }
                });
                let (fast, slow) = (
                    self.beta_fast.unwrap_or(32.0),
                    self.beta_slow.unwrap_or(1.0),
                );
                let d = dim as f64;
                let correction = |turns: f64| {
                    d * (l / (turns * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln())
                };
                let (mut lo, mut hi) = (correction(fast), correction(slow));
                if self.truncate.unwrap_or(true) {
                    (lo, hi) = (lo.floor(), hi.ceil());
                }
                let (lo, mut hi) = (lo.max(0.0), hi.min(d - 1.0));
                if lo == hi {
                    hi += 0.001;
                }
                let inv_freq = plain
                    .inv_freq
                    .iter()
                    .enumerate()
                    .map(|(i, &extrapolated)| {
                        let ramp = ((i as f64 - lo) / (hi - lo)).clamp(0.0, 1.0);
                        let keep = 1.0 - ramp;
                        extrapolated / factor * (1.0 - keep) + extrapolated * keep
                    })
                    .collect();
                Frequencies {
                    inv_freq,
                    attention,
                }
            }
            RopeType::Llama3 => {
                let (lo, hi) = (
                    self.low_freq_factor.unwrap_or(1.0),
                    self.high_freq_factor.unwrap_or(4.0),
                );
                let (low_wavelength, high_wavelength) = (l / lo, l / hi);
                let inv_freq = plain
                    .inv_freq
                    .iter()
                    .map(|&f| {
                        let wavelength = 2.0 * std::f64::consts::PI / f;
                        if wavelength < high_wavelength {
                            f
                        } else if wavelength > low_wavelength {
                            f / factor
                        } else if hi == lo {
                            // On the step itself, which no band widens.
                            f / factor
                        } else {
                            let smooth = (l / wavelength - lo) / (hi - lo);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect();
                Frequencies {
                    inv_freq,
                    attention: 1.0,
                }
            }
            RopeType::Proportional => {
                // transformers: int(p · head_dim // 2) pairs keep their frequency.
                let p = self.partial_rotary_factor.unwrap_or(1.0);
                let kept = (p * dim as f64 / 2.0).floor() as usize;
                let inv_freq = plain
                    .inv_freq
                    .iter()
                    .enumerate()
                    .map(|(i, f)| if i < kept { f / factor } else { 0.0 })
                    .collect();
                Frequencies {
                    inv_freq,
                    attention: 1.0,
                }
            }
            RopeType::Longrope => {
                let attention = self
                    .attention_factor
                    .unwrap_or_else(|| match factor <= 1.0 {
                        true => 1.0,
                        false => (1.0 + factor.ln() / l.ln()).sqrt(),
                    });
                let list = match len > original {
                    true => &self.long_factor,
                    false => &self.short_factor,
                };
                let divisors = list.as_deref().unwrap_or(&[]);
                let inv_freq = plain
                    .inv_freq
                    .iter()
                    .zip(divisors.iter().chain(std::iter::repeat(&1.0)))
                    .map(|(f, d)| f / d)
                    .collect();
                Frequencies {
                    inv_freq,
                    attention,
                }
            }
        }
    }
}
