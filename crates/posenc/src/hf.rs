//! A Hugging Face `config.json`'s positions: the encoding each layer of the model gets, read
//! from the config alone.
//!
//! | field | what it gives |
//! |---|---|
//! | `rope_theta`, `rope_scaling` (older configs) or `rope_parameters` (transformers 5) | each layer's `rope`: its base and its scaling ([`crate::rope_scaling`]) |
//! | `rope_parameters` as `{"full_attention": {…}, "sliding_attention": {…}}` | a `rope` per kind of layer (Gemma 3 and 4); older Gemma 3 configs give the sliding layers' base as `rope_local_base_freq` |
//! | `partial_rotary_factor`, `head_dim` | the share of each head that rotates, the head's width (else `hidden_size / num_attention_heads`) |
//! | `layer_types`, `sliding_window` | a `window` of that size on the `sliding_attention` layers |
//! | `layer_types`, `attention_chunk_size` | a chunked `window` of that size on the `chunked_attention` layers (Llama 4's layers that rotate, in chunks of 8 192 when the config leaves it out) |
//! | `no_rope_layers`, `no_rope_layer_interval` | `none` on the layers that do not rotate (SmolLM3, Llama 4: every n-th, every 4th when Llama 4's config leaves it out) |
//! | Llama 4's `use_qk_norm`, `rms_norm_eps` | a weightless `qk-norm` after the rotation, on the layers that rotate; their pairs interleaved |
//! | Llama 4's `attn_temperature_tuning`, `attn_scale`, `floor_scale` | a `temperature` on the layers that do not rotate |
//! | `model_type` `gpt_oss` | a learned `sink` on every layer |
//!
//! Where the file leaves `layer_types` out, the family's own rule derives it, as
//! transformers' config classes do: Llama 4 attends in chunks on the layers that rotate
//! (those `no_rope_layers` marks 1), Gemma 2 alternates sliding and full layers from the
//! first, Gemma 3 makes every `sliding_window_pattern`-th layer full (6; Cohere 2: 4, and
//! it rotates on its sliding layers only), Qwen2 and Qwen3
//! slide from layer `max_window_layers` on when `use_sliding_window`, and any other family
//! with a `sliding_window` slides on every layer (Mistral, Phi-3).
//!
//! ```
//! let config = serde_json::json!({
//!     "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
//!     "num_hidden_layers": 32, "rope_theta": 500000.0, "max_position_embeddings": 131072,
//!     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
//!                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
//! });
//! let positions = posenc::hf::HfPositions::from_config(&config).unwrap();
//! assert_eq!((positions.head_dim, positions.layers.len()), (128, 32));
//! assert_eq!(positions.layers[0].to_json()["base"], 500000.0);
//! ```

use serde_json::{json, Map, Value};

use crate::{EncodingConfig, Error, Result};

/// What a model's config says of its positions, layer by layer.
#[derive(Debug, Clone, PartialEq)]
pub struct HfPositions {
    /// The width of one head.
    pub head_dim: usize,
    /// Query heads.
    pub heads: usize,
    /// The positions the model was trained for (`max_position_embeddings`), when given.
    pub context: Option<usize>,
    /// Layer `i`'s encoding: `rope`, `none`, or either in a `window`.
    pub layers: Vec<EncodingConfig>,
}

fn bad(message: impl Into<String>) -> Error {
    Error::Config(format!("the model's config: {}", message.into()))
}

/// `config[key]` as a count, if it is there (and not null).
fn count(config: &Map<String, Value>, key: &str) -> Result<Option<usize>> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|n| Some(n as usize))
            .ok_or_else(|| bad(format!("`{key}` must be a whole number, got {v}"))),
    }
}

fn required(config: &Map<String, Value>, key: &str) -> Result<usize> {
    count(config, key)?.ok_or_else(|| bad(format!("`{key}` is missing")))
}

fn number(config: &Map<String, Value>, key: &str) -> Result<Option<f64>> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| bad(format!("`{key}` must be a number, got {v}"))),
    }
}

/// The two kinds of layer transformers' `layer_types` names.
const FULL: &str = "full_attention";
const SLIDING: &str = "sliding_attention";
const CHUNKED: &str = "chunked_attention";

impl HfPositions {
    /// Reads `config` (a `config.json`, or a multimodal one whose `text_config` holds the
    /// language model's).
    ///
    /// # Errors
    /// A missing size, a field of the wrong type, a layer type other than full or sliding
    /// attention, a rope type or setting the `rope` (or, with `mrope_section`, the `mrope`)
    /// encoding refuses.
    pub fn from_config(config: &Value) -> Result<Self> {
        let config = match config.get("text_config") {
            Some(text @ Value::Object(_)) => text,
            _ => config,
        };
        let Value::Object(config) = config else {
            return Err(bad(format!("expected a JSON object, got {config}")));
        };
        let layers = required(config, "num_hidden_layers")?;
        crate::limits::check_positive("num_hidden_layers", layers, 100_000)?;
        let heads = required(config, "num_attention_heads")?;
        crate::limits::check_positive("num_attention_heads", heads, crate::limits::MAX_HEADS)?;
        let head_dim = match count(config, "head_dim")? {
            Some(d) => d,
            None => required(config, "hidden_size")? / heads,
        };
        crate::limits::check_positive("head_dim", head_dim, crate::limits::MAX_D_MODEL)?;
        let context = count(config, "max_position_embeddings")?;
        let mut types = layer_types(config, layers)?;
        let mut rotates = rotating_layers(config, layers)?;
        // Llama 4 attends in chunks on its layers that rotate, unless `layer_types` says.
        let llama4 = matches!(family(config), "llama4" | "llama4_text");
        if llama4 && config.get("layer_types").is_none_or(Value::is_null) {
            types = (rotates.iter())
                .map(|&r| if r { CHUNKED } else { FULL }.to_string())
                .collect();
        }
        // Cohere 2 rotates on its sliding layers only.
        if family(config) == "cohere2" {
            rotates = types.iter().map(|t| t == SLIDING).collect();
        }
        let window = count(config, "sliding_window")?;
        // Llama4TextConfig's default chunk, where the file leaves it out.
        let chunk = match (
            count(config, "attention_chunk_size")?,
            config.get("attention_chunk_size"),
        ) {
            (Some(size), _) => Some(size),
            (None, None) if llama4 => Some(8192),
            (None, _) => None,
        };
        let mut out = Vec::with_capacity(layers);
        for (i, kind) in types.iter().enumerate() {
            let rope = match rotates[i] {
                true => rope(config, kind)?,
                false => json!({"kind": "none"}),
            };
            let encoding = match (kind.as_str(), window) {
                (SLIDING, Some(size)) => {
                    let window = json!({"kind": "window", "size": size});
                    match rotates[i] {
                        true => json!({"kind": "stack", "of": [rope, window]}),
                        false => window,
                    }
                }
                (SLIDING, None) => {
                    return Err(bad(format!(
                        "layer {i} is sliding attention, but `sliding_window` is not given"
                    )))
                }
                (CHUNKED, _) => {
                    let size = chunk.ok_or_else(|| {
                        bad(format!(
                            "layer {i} is chunked attention, but `attention_chunk_size` is not given"
                        ))
                    })?;
                    let window = json!({"kind": "window", "size": size, "chunked": true});
                    match rotates[i] {
                        true => json!({"kind": "stack", "of": [rope, window]}),
                        false => window,
                    }
                }
                _ => rope,
            };
            let encoding = family_extras(config, encoding, rotates[i])?;
            out.push(
                encoding
                    .to_string()
                    .parse::<EncodingConfig>()
                    .map_err(|e| bad(format!("layer {i}: {e}")))?,
            );
        }
        Ok(Self {
            head_dim,
            heads,
            context,
            layers: out,
        })
    }

    /// One encoding for the whole stack: the layer's own where every layer has the same,
    /// else a `layers` pattern written out layer by layer.
    pub fn encoding(&self) -> EncodingConfig {
        match self.layers.iter().all(|l| *l == self.layers[0]) {
            true => self.layers[0].clone(),
            false => {
                let pattern: Vec<Value> = self.layers.iter().map(EncodingConfig::to_json).collect();
                json!({"kind": "layers", "pattern": pattern})
                    .to_string()
                    .parse()
                    .expect("a pattern of configs that parsed one by one")
            }
        }
    }
}

/// Each layer's kind of attention: the config's `layer_types`, or its family's rule.
fn layer_types(config: &Map<String, Value>, layers: usize) -> Result<Vec<String>> {
    if let Some(types) = config.get("layer_types").filter(|v| !v.is_null()) {
        let types: Vec<String> = serde_json::from_value(types.clone())
            .map_err(|e| bad(format!("`layer_types` must be a list of names: {e}")))?;
        if types.len() != layers {
            return Err(bad(format!(
                "`layer_types` names {} layers; `num_hidden_layers` is {layers}",
                types.len()
            )));
        }
        if let Some(other) = types
            .iter()
            .find(|t| ![FULL, SLIDING, CHUNKED].contains(&t.as_str()))
        {
            return Err(bad(format!(
                "layer type `{other}`: only `{FULL}`, `{SLIDING}` and `{CHUNKED}` are read"
            )));
        }
        return Ok(types);
    }
    let family = family(config);
    let window = count(config, "sliding_window")?;
    let sliding = |on: bool| if on { SLIDING } else { FULL }.to_string();
    Ok(match family {
        "gemma2" => (0..layers).map(|i| sliding((i + 1) % 2 != 0)).collect(),
        "gemma3" | "gemma3_text" | "cohere2" => {
            let default = if family == "cohere2" { 4 } else { 6 };
            let every = count(config, "sliding_window_pattern")?
                .unwrap_or(default)
                .max(1);
            (0..layers).map(|i| sliding((i + 1) % every != 0)).collect()
        }
        family if family.starts_with("qwen2") || family.starts_with("qwen3") => {
            let on =
                config.get("use_sliding_window") == Some(&Value::Bool(true)) && window.is_some();
            let from = count(config, "max_window_layers")?.unwrap_or(layers);
            (0..layers).map(|i| sliding(on && i >= from)).collect()
        }
        _ => vec![sliding(window.is_some()); layers],
    })
}

/// Whether each layer rotates: SmolLM3's `no_rope_layers` (1 rotates), or every
/// `no_rope_layer_interval`-th layer without (Llama 4's rule too).
fn rotating_layers(config: &Map<String, Value>, layers: usize) -> Result<Vec<bool>> {
    if let Some(list) = config
        .get("no_rope_layers")
        .filter(|v| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty()))
    {
        let list: Vec<u64> = serde_json::from_value(list.clone())
            .map_err(|e| bad(format!("`no_rope_layers` must be a list of 0 and 1: {e}")))?;
        if list.len() != layers {
            return Err(bad(format!(
                "`no_rope_layers` names {} layers; `num_hidden_layers` is {layers}",
                list.len()
            )));
        }
        return Ok(list.iter().map(|&r| r != 0).collect());
    }
    let interval = match (count(config, "no_rope_layer_interval")?, family(config)) {
        (None, "llama4" | "llama4_text") => Some(4),
        (given, _) => given,
    };
    Ok(match interval {
        Some(0) => return Err(bad("`no_rope_layer_interval` must be at least 1")),
        Some(every) => (0..layers).map(|i| (i + 1) % every != 0).collect(),
        None => vec![true; layers],
    })
}

/// The config's `model_type`, or `""`.
fn family(config: &Map<String, Value>) -> &str {
    config
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// What a family's attention adds to a layer's positions beyond its rotation and window,
/// in a `stack` after them: Llama 4's weightless RMS norm of the queries and keys on the
/// layers that rotate (`use_qk_norm`, ε `rms_norm_eps`) and its temperature on those that
/// do not (`attn_temperature_tuning`, `attn_scale`, `floor_scale`), each on unless the
/// config turns it off, as `Llama4TextConfig`'s defaults are; gpt-oss's learned sink per
/// head, which every layer of `GptOssAttention` has.
fn family_extras(config: &Map<String, Value>, layer: Value, rotates: bool) -> Result<Value> {
    let flag = |key: &str| match config.get(key) {
        None | Some(Value::Null) => Ok(true),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(bad(format!("`{key}` must be true or false, got {other}"))),
    };
    let extra = match family(config) {
        "llama4" | "llama4_text" if rotates && flag("use_qk_norm")? => {
            let eps = number(config, "rms_norm_eps")?.unwrap_or(1e-5);
            Some(json!({"kind": "qk-norm", "norm": "rms", "eps": eps}))
        }
        "llama4" | "llama4_text" if !rotates && flag("attn_temperature_tuning")? => {
            let scale = number(config, "attn_scale")?.unwrap_or(0.1);
            let floor = count(config, "floor_scale")?.unwrap_or(8192);
            Some(json!({"kind": "temperature", "scale": scale, "floor": floor}))
        }
        "gpt_oss" => Some(json!({"kind": "sink"})),
        _ => None,
    };
    let Some(extra) = extra else {
        return Ok(layer);
    };
    Ok(match layer["kind"].as_str() {
        Some("none") => extra,
        Some("stack") => {
            let mut of = layer["of"].as_array().cloned().unwrap_or_default();
            of.push(extra);
            json!({"kind": "stack", "of": of})
        }
        _ => json!({"kind": "stack", "of": [layer, extra]}),
    })
}

/// The rope parameters of a layer of kind `kind`, flat (`rope_theta` with `rope_scaling`,
/// or transformers 5's `rope_parameters`) or by kind of layer.
fn parameters(config: &Map<String, Value>, kind: &str) -> Result<Map<String, Value>> {
    if let Some(Value::Object(p)) = config.get("rope_parameters") {
        if p.contains_key(FULL) || p.contains_key(SLIDING) {
            return match p.get(kind) {
                Some(Value::Object(own)) => Ok(own.clone()),
                _ => Err(bad(format!("`rope_parameters` has no `{kind}`"))),
            };
        }
        return Ok(p.clone());
    }
    let mut p = match config.get("rope_scaling") {
        Some(Value::Object(s)) => s.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(other) => {
            return Err(bad(format!(
                "`rope_scaling` must be an object, got {other}"
            )))
        }
    };
    let mut theta = config.get("rope_theta").cloned();
    // Older Gemma 3 configs: the sliding layers' own base, unscaled.
    if kind == SLIDING {
        if let Some(local) = config.get("rope_local_base_freq").filter(|v| !v.is_null()) {
            theta = Some(local.clone());
            p = Map::new();
        }
    }
    if let Some(theta) = theta {
        p.insert("rope_theta".into(), theta);
    }
    Ok(p)
}

/// The `rope` encoding of a layer of kind `kind`.
fn rope(config: &Map<String, Value>, kind: &str) -> Result<Value> {
    let mut p = parameters(config, kind)?;
    let base = number(&p, "rope_theta")?.unwrap_or(10_000.0);
    if let Some(section) = p.get("mrope_section") {
        return mrope(&p, section, base);
    }
    let fraction = match number(&p, "partial_rotary_factor")? {
        Some(f) => Some(f),
        None => number(config, "partial_rotary_factor")?,
    };
    p.remove("rope_theta");
    p.remove("partial_rotary_factor");
    let kind_of = p.get("rope_type").or_else(|| p.get("type")).cloned();
    let scaling = match kind_of.as_ref().and_then(Value::as_str) {
        None | Some("default") => None,
        Some(name) => {
            let name = if name == "su" { "longrope" } else { name };
            p.remove("type");
            p.insert("rope_type".into(), name.into());
            complete(&mut p, name, config)?;
            Some(Value::Object(p))
        }
    };
    // Llama 4 (as complex numbers) and Cohere turn pairs of neighbours; the others halves.
    let layout = match family(config) {
        "llama4" | "llama4_text" | "cohere" | "cohere2" => "interleaved",
        _ => "halves",
    };
    let mut rope = json!({"kind": "rope", "base": base, "layout": layout});
    if let Some(f) = fraction {
        rope["rotary_fraction"] = json!(f);
    }
    if let Some(s) = scaling {
        rope["scaling"] = s;
    }
    Ok(rope)
}

/// The `mrope` encoding of a multimodal model's layer (Qwen2-VL's `rope_scaling` of type
/// `mrope`, Qwen3-VL's `mrope_interleaved`): its sections, unscaled.
fn mrope(p: &Map<String, Value>, section: &Value, base: f64) -> Result<Value> {
    let scaled = p
        .get("rope_type")
        .or_else(|| p.get("type"))
        .and_then(Value::as_str);
    if let Some(other) = scaled.filter(|t| !["default", "mrope"].contains(t)) {
        return Err(bad(format!(
            "multimodal RoPE with `{other}` scaling, which the `mrope` kind does not take"
        )));
    }
    let interleaved = match p.get("mrope_interleaved") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(bad(format!(
                "`mrope_interleaved` must be true or false, got {other}"
            )))
        }
    };
    Ok(json!({
        "kind": "mrope", "rope_theta": base, "mrope_section": section,
        "mrope_interleaved": interleaved,
    }))
}

/// What transformers takes from the model's config for a scaling that does not name it:
/// the trained context (LongRoPE's from the config's own `original_max_position_embeddings`,
/// as Phi-3 writes it, with the factor the context was stretched by), else
/// `max_position_embeddings`.
fn complete(p: &mut Map<String, Value>, kind: &str, config: &Map<String, Value>) -> Result<()> {
    const ORIGINAL: &str = "original_max_position_embeddings";
    if p.contains_key(ORIGINAL) {
        return Ok(());
    }
    let max = count(config, "max_position_embeddings")?;
    let original = match kind {
        "longrope" => count(config, ORIGINAL)?,
        _ => None,
    };
    if let (Some(original), Some(max), false) = (original, max, p.contains_key("factor")) {
        p.insert("factor".into(), json!(max as f64 / original as f64));
    }
    if let Some(trained) = original.or(max) {
        p.insert(ORIGINAL.into(), trained.into());
    }
    Ok(())
}
