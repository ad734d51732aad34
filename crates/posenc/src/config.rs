//! The serde config that builds any encoding: `{"kind": "rope", "base": 10000.0, ...}`.
//!
//! Each encoding's file defines its own settings struct and implements [`EncodingSpec`]
//! for it, naming its kind once ([`EncodingSpec::KIND`]). [`crate::BUILT_IN`] is the one line
//! per encoding that makes a kind known; [`register`] adds one at run time (an experiment
//! in a downstream crate or a test). [`EncodingConfig`] holds any registered settings,
//! parses from and serialises to the JSON above, and builds the encoding.

use std::any::Any;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, LazyLock, RwLock};

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Direction, Error, PositionalEncoding, Result};

/// What an encoding is built for: the model's width, its heads, and the direction of the
/// attention it serves. Constructing one checks the sizes, once for every encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// Model width.
    pub d_model: usize,
    /// Attention heads.
    pub heads: usize,
    /// Which keys a query sees.
    pub direction: Direction,
    /// The context the model is trained for, when it is known: what a rotary scaling
    /// stretches from when it names no `original_max_position_embeddings`.
    pub context: Option<usize>,
    /// The layers of the stack the encoding serves, when it is known: an encoding that
    /// learns weights per layer (FoX's gates) builds that many.
    pub layers: Option<usize>,
    /// Key/value heads, each shared by `heads / kv_heads` query heads (grouped-query
    /// attention), when there are fewer than `heads`: an encoding that reads a transform
    /// per key head (PaTH's) builds that many. `None`: as many as `heads`.
    pub kv_heads: Option<usize>,
}

impl Target {
    /// A target of width `d_model` with `heads` heads; both must be positive and within
    /// [`crate::limits`].
    pub fn new(d_model: usize, heads: usize, direction: Direction) -> Result<Self> {
        crate::limits::check_positive("heads", heads, crate::limits::MAX_HEADS)?;
        crate::limits::check_positive("d_model", d_model, crate::limits::MAX_D_MODEL)?;
        Ok(Self {
            d_model,
            heads,
            direction,
            context: None,
            layers: None,
            kv_heads: None,
        })
    }

    /// The same target, for attention with `kv_heads` key/value heads.
    ///
    /// # Errors
    /// A number of key/value heads that does not divide `heads`.
    pub fn with_kv_heads(self, kv_heads: usize) -> Result<Self> {
        if kv_heads == 0 || !self.heads.is_multiple_of(kv_heads) {
            return Err(Error::Config(format!(
                "kv_heads must divide heads = {}, got {kv_heads}",
                self.heads
            )));
        }
        Ok(Self {
            kv_heads: Some(kv_heads),
            ..self
        })
    }

    /// Key/value heads: [`Target::kv_heads`], else `heads`.
    pub fn key_heads(&self) -> usize {
        self.kv_heads.unwrap_or(self.heads)
    }

    /// The same target, for a stack of `layers` layers.
    pub fn with_layers(self, layers: usize) -> Self {
        Self {
            layers: Some(layers),
            ..self
        }
    }

    /// The same target, for a model trained on `context` positions.
    pub fn with_context(self, context: usize) -> Self {
        Self {
            context: Some(context),
            ..self
        }
    }

    /// The width of one head, `d_model / heads`, or an error if `heads` does not divide
    /// `d_model`.
    pub fn head_dim(&self) -> Result<usize> {
        crate::limits::head_dim(self.d_model, self.heads)
    }
}

/// The settings of one kind of encoding: what its file implements to be configurable.
///
/// The settings (de)serialise as the JSON object beside `"kind"`, and should deny unknown
/// fields so a misspelt setting is an error. Their schema ([`JsonSchema`], derived) is what
/// `encoding list` shows: each field's doc comment is its description, and its serde
/// default its default ([`EncodingConfig::settings_of`]).
pub trait EncodingSpec:
    fmt::Debug + Serialize + DeserializeOwned + JsonSchema + Send + Sync + 'static
{
    /// The kind's name in configs and on the command line. The only place it is written.
    const KIND: &'static str;

    /// Builds the encoding for `target`. Learned encodings take their weights from `vb`;
    /// the others only its device.
    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>>;

    /// How many weights the encoding learns for `target` (0 for fixed encodings), from the
    /// settings alone, so a size can be checked before allocating.
    fn parameter_count(&self, target: &Target) -> u128 {
        let _ = target;
        0
    }

    /// The settings for a model that will be run at positions `0..positions`: an encoding
    /// with a fixed number of positions (`learned`'s table) is sized to reach them. `None`
    /// (the default): the settings already take any position and stay as they are.
    fn for_positions(&self, positions: usize) -> Option<Self> {
        let _ = positions;
        None
    }
}

/// The object-safe face of [`EncodingSpec`], implemented for every spec.
trait DynSpec: fmt::Debug + Send + Sync {
    fn kind(&self) -> &'static str;
    fn settings(&self) -> serde_json::Value;
    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>>;
    fn parameter_count(&self, target: &Target) -> u128;
    fn for_positions(&self, positions: usize) -> Option<EncodingConfig>;
    fn as_any(&self) -> &dyn Any;
}

impl<T: EncodingSpec> DynSpec for T {
    fn kind(&self) -> &'static str {
        T::KIND
    }
    fn settings(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        EncodingSpec::build(self, target, vb)
    }
    fn parameter_count(&self, target: &Target) -> u128 {
        EncodingSpec::parameter_count(self, target)
    }
    fn for_positions(&self, positions: usize) -> Option<EncodingConfig> {
        EncodingSpec::for_positions(self, positions).map(EncodingConfig::new)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A registered kind: its name and how to read its settings.
#[derive(Clone, Copy)]
pub struct Registration {
    kind: &'static str,
    parse: fn(serde_json::Value) -> Result<EncodingConfig>,
    schema: fn() -> serde_json::Value,
}

impl Registration {
    /// The registration of spec `T`.
    pub const fn of<T: EncodingSpec>() -> Self {
        Self {
            kind: T::KIND,
            parse: parse::<T>,
            schema: schema::<T>,
        }
    }
}

fn schema<T: EncodingSpec>() -> serde_json::Value {
    schemars::schema_for!(T).to_value()
}

fn parse<T: EncodingSpec>(settings: serde_json::Value) -> Result<EncodingConfig> {
    let spec: T = serde_json::from_value(settings).map_err(|e| Error::Config(e.to_string()))?;
    Ok(EncodingConfig::new(spec))
}

/// The kind nearest to `typed`, if one is within two edits of it (a typo, not another
/// word).
fn closest<'a>(typed: &str, kinds: &[&'a str]) -> Option<&'a str> {
    let distance = |a: &str, b: &str| {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut diagonal = row[0];
            row[0] = i + 1;
            for (j, &cb) in b.iter().enumerate() {
                let next = (row[j + 1] + 1)
                    .min(row[j] + 1)
                    .min(diagonal + usize::from(ca != cb));
                (diagonal, row[j + 1]) = (row[j + 1], next);
            }
        }
        row[b.len()]
    };
    kinds
        .iter()
        .map(|k| (distance(&typed.to_lowercase(), k), *k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k)
}

static REGISTRY: LazyLock<RwLock<Vec<Registration>>> =
    LazyLock::new(|| RwLock::new(crate::BUILT_IN.to_vec()));

fn registry() -> std::sync::RwLockReadGuard<'static, Vec<Registration>> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner())
}

/// Makes kind `T::KIND` known to [`EncodingConfig`] (and so to every command and the
/// experiment), after the built-in ones. Registering a kind twice is an error.
pub fn register<T: EncodingSpec>() -> Result<()> {
    let mut kinds = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    if kinds.iter().any(|r| r.kind == T::KIND) {
        return Err(Error::Config(format!(
            "an encoding of kind `{}` is already registered",
            T::KIND
        )));
    }
    kinds.push(Registration::of::<T>());
    Ok(())
}

/// Which positional encoding to build, and its settings: any registered [`EncodingSpec`].
/// Every setting has a default, so `{"kind": "rope"}` is a complete config.
///
/// ```
/// use posenc::EncodingConfig;
/// let cfg: EncodingConfig = r#"{"kind": "rope", "layout": "interleaved"}"#.parse().unwrap();
/// assert_eq!(cfg.kind(), "rope");
/// assert!("warp-drive".parse::<EncodingConfig>().unwrap_err().to_string().contains("warp-drive"));
/// ```
#[derive(Clone)]
pub struct EncodingConfig(Arc<dyn DynSpec>);

impl EncodingConfig {
    /// The config of the given settings.
    pub fn new(spec: impl EncodingSpec) -> Self {
        Self(Arc::new(spec))
    }

    /// Every preset's name ([`crate::BUILT_IN_PRESETS`]): named configs of registered kinds,
    /// accepted wherever a kind is.
    pub fn presets() -> Vec<&'static str> {
        crate::BUILT_IN_PRESETS.iter().map(|p| p.name).collect()
    }

    /// Every registered kind, built-in ones first, in the order of the documents.
    pub fn kinds() -> Vec<&'static str> {
        registry().iter().map(|r| r.kind).collect()
    }

    /// The settings kind `kind` takes, by name, each with its default and the description
    /// its field's doc comment gives.
    ///
    /// ```
    /// use posenc::EncodingConfig;
    /// let rope = EncodingConfig::settings_of("rope").unwrap();
    /// let base = rope.iter().find(|s| s.name == "base").unwrap();
    /// assert_eq!(base.default, serde_json::json!(10000.0));
    /// assert!(base.description.contains("wavelength"));
    /// ```
    ///
    /// # Errors
    /// An unknown kind.
    pub fn settings_of(kind: &str) -> Result<Vec<Setting>> {
        Ok(Setting::from_schema(&Self::schema_of(kind)?))
    }

    /// The JSON Schema of kind `kind`'s settings (the object beside `"kind"`).
    ///
    /// # Errors
    /// An unknown kind.
    pub fn schema_of(kind: &str) -> Result<serde_json::Value> {
        let schema = registry().iter().find(|r| r.kind == kind).map(|r| r.schema);
        match schema {
            Some(schema) => Ok(schema()),
            None => Self::from_kind(kind).map(|_| serde_json::Value::Null),
        }
    }

    /// The same config with setting `key` set to `value`, read again by the kind's own
    /// settings: `rope`'s `"scaling"`, say. A kind without such a setting refuses it by name,
    /// so nothing outside the encoding's file asks which kind it is.
    ///
    /// ```
    /// use posenc::EncodingConfig;
    /// let yarn = serde_json::json!({"rope_type": "yarn", "factor": 2.0});
    /// let rope = EncodingConfig::from_kind("rope").unwrap().with_setting("scaling", yarn.clone());
    /// assert!(rope.is_ok());
    /// let alibi = EncodingConfig::from_kind("alibi").unwrap().with_setting("scaling", yarn);
    /// assert!(alibi.unwrap_err().to_string().contains("scaling"));
    /// ```
    ///
    /// # Errors
    /// A kind with no setting `key`, or a value it refuses.
    pub fn with_setting(&self, key: &str, value: serde_json::Value) -> Result<Self> {
        let mut json = serde_json::to_value(self).map_err(|e| Error::Config(e.to_string()))?;
        if let serde_json::Value::Object(fields) = &mut json {
            fields.insert(key.to_string(), value);
        }
        Self::from_json(json).map_err(|e| {
            Error::Config(format!(
                "the `{}` encoding takes no `{key}` like this: {e}",
                self.kind()
            ))
        })
    }

    /// The default config of a kind, e.g. `EncodingConfig::from_kind("alibi")`.
    pub fn from_kind(kind: &str) -> Result<Self> {
        Self::from_json(serde_json::json!({ "kind": kind }))
    }

    fn from_json(value: serde_json::Value) -> Result<Self> {
        let serde_json::Value::Object(mut fields) = value else {
            return Err(Error::Config(format!(
                "expected a JSON object with a \"kind\", got {value}"
            )));
        };
        let kind = match fields.remove("kind") {
            Some(serde_json::Value::String(kind)) => kind,
            Some(other) => {
                return Err(Error::Config(format!(
                    "\"kind\" must be a string, got {other}"
                )))
            }
            None => {
                return Err(Error::Config(format!(
                    "missing field `kind` (known kinds: {})",
                    Self::kinds().join(", ")
                )))
            }
        };
        let parse = registry().iter().find(|r| r.kind == kind).map(|r| r.parse);
        let preset = crate::BUILT_IN_PRESETS.iter().find(|p| p.name == kind);
        if let (None, Some(preset)) = (parse, preset) {
            if let Some(key) = fields.keys().next() {
                return Err(Error::Config(format!(
                    "`{kind}` is a preset, {}'s positions, and takes no settings (got `{key}`): \
                     write out its config and change that",
                    preset.from
                )));
            }
            return preset.encoding();
        }
        match parse {
            Some(parse) => parse(serde_json::Value::Object(fields))
                .map_err(|e| Error::Config(format!("`{kind}`: {}", config_message(e)))),
            None => Err(Error::Config(format!(
                "unknown encoding kind `{kind}`{} (known kinds: {}; presets: {})",
                closest(&kind, &Self::kinds())
                    .map_or(String::new(), |k| format!(": did you mean `{k}`?")),
                Self::kinds().join(", "),
                Self::presets().join(", ")
            ))),
        }
    }

    /// The JSON object `{"kind": …, settings…}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut value = self.0.settings();
        if !value.is_object() {
            value = serde_json::Value::Object(Default::default());
        }
        if let serde_json::Value::Object(fields) = &mut value {
            fields.insert("kind".into(), self.kind().into());
        }
        value
    }

    /// The config's kind name, as written in JSON.
    pub fn kind(&self) -> &'static str {
        self.0.kind()
    }

    /// The settings, if they are of spec `T`.
    pub fn settings<T: EncodingSpec>(&self) -> Option<&T> {
        self.0.as_any().downcast_ref()
    }

    /// How many weights the encoding learns for `target` (0 for the fixed ones), from the
    /// config alone.
    pub fn parameter_count(&self, target: &Target) -> u128 {
        self.0.parameter_count(target)
    }

    /// The config for a model run at positions `0..positions`: an encoding with a fixed
    /// number of positions gets that many, every other one is returned unchanged (an
    /// experiment's default lineup reaches its longest test this way).
    ///
    /// ```
    /// use posenc::EncodingConfig;
    /// let learned = EncodingConfig::from_kind("learned").unwrap().for_positions(80);
    /// assert_eq!(learned.to_json()["max_positions"], 80);
    /// let rope = EncodingConfig::from_kind("rope").unwrap();
    /// assert_eq!(rope.for_positions(80).to_json(), rope.to_json());
    /// ```
    pub fn for_positions(&self, positions: usize) -> Self {
        self.0
            .for_positions(positions)
            .unwrap_or_else(|| self.clone())
    }

    /// Builds the encoding for `target`. Learned encodings (`learned`, `t5`) take their
    /// weights from `vb`; the others only its device.
    pub fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        self.0.build(target, vb)
    }

    /// Builds the encoding of a bidirectional stack of width `d_model` with `heads` heads,
    /// with fresh (randomly initialised, untrained) weights where it has any: for
    /// inspection, tests and the command line.
    pub fn build_untrained(
        &self,
        d_model: usize,
        heads: usize,
        device: &Device,
    ) -> Result<Arc<dyn PositionalEncoding>> {
        let target = Target::new(d_model, heads, Direction::Bidirectional)?;
        let varmap = VarMap::new();
        self.build(
            &target,
            VarBuilder::from_varmap(&varmap, DType::F32, device),
        )
    }
}

/// One setting of an encoding kind, as `encoding list` shows it
/// ([`EncodingConfig::settings_of`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setting {
    /// Its key in a config.
    pub name: String,
    /// Its value where a config leaves it out; `null` for an optional setting, which is off
    /// unless given.
    pub default: serde_json::Value,
    /// What it does: its field's doc comment, on one line.
    pub description: String,
    /// The values it takes, where they are a fixed set of names (a layout's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<serde_json::Value>,
}

impl Setting {
    /// The settings of an object schema, `$ref`s followed into its `$defs`.
    fn from_schema(root: &serde_json::Value) -> Vec<Self> {
        let defs = &root["$defs"];
        // A newtype of another kind's settings (`coupling`'s) refers to them.
        let schema = match root["$ref"]
            .as_str()
            .and_then(|r| r.strip_prefix("#/$defs/"))
        {
            Some(name) => &defs[name],
            None => root,
        };
        let properties = schema["properties"].as_object().into_iter().flatten();
        properties
            .map(|(name, property)| Self {
                name: name.clone(),
                default: property.get("default").cloned().unwrap_or_default(),
                description: one_line(property["description"].as_str().unwrap_or_default()),
                values: names_of(property, defs),
            })
            .collect()
    }
}

/// A doc comment on one line, its rustdoc links as plain code: "[`crate::X`]" reads "`X`".
fn one_line(doc: &str) -> String {
    let text = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    let text = text.replace("[`", "`").replace("`]", "`");
    text.replace("`crate::", "`")
}

/// The names a schema allows, where it allows a fixed set of strings (an enum of unit
/// variants, optional or not).
fn names_of(schema: &serde_json::Value, defs: &serde_json::Value) -> Vec<serde_json::Value> {
    if let Some(name) = schema["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/$defs/"))
    {
        return names_of(&defs[name], defs);
    }
    if let Some(names) = schema["enum"].as_array() {
        return names.iter().filter(|v| !v.is_null()).cloned().collect();
    }
    if let Some(name) = schema.get("const") {
        return vec![name.clone()];
    }
    ["oneOf", "anyOf"]
        .iter()
        .filter_map(|key| schema[key].as_array())
        .flatten()
        .flat_map(|branch| names_of(branch, defs))
        .collect()
}

impl JsonSchema for EncodingConfig {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "EncodingConfig".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "An encoding: `{\"kind\": …}` and that kind's settings.",
            "type": "object",
            "properties": {"kind": {"type": "string", "enum": EncodingConfig::kinds()}},
            "required": ["kind"]
        })
    }
}

/// The message of a config error without the "invalid encoding config" prefix, for nesting.
fn config_message(e: Error) -> String {
    match e {
        Error::Config(m) => m,
        other => other.to_string(),
    }
}

impl fmt::Debug for EncodingConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_json())
    }
}

impl PartialEq for EncodingConfig {
    fn eq(&self, other: &Self) -> bool {
        self.to_json() == other.to_json()
    }
}

impl Serialize for EncodingConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for EncodingConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Self::from_json(value).map_err(|e| serde::de::Error::custom(config_message(e)))
    }
}

impl FromStr for EncodingConfig {
    type Err = Error;

    /// A kind name (`"rope"`) or a JSON object (`{"kind": "rope", "base": 500000}`).
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        if s.starts_with('{') {
            let value = serde_json::from_str(s).map_err(|e| Error::Config(e.to_string()))?;
            Self::from_json(value)
        } else {
            Self::from_kind(s)
        }
    }
}
