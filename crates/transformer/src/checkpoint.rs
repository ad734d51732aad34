//! Saving and loading: `config.json` + `model.safetensors` in one directory.
//!
//! Tensor names follow PyTorch's `nn.Transformer` (`encoder.layers.0.self_attn.in_proj_weight`,
//! `decoder.layers.0.multihead_attn.out_proj.weight`, `linear1`, `norm1`, `encoder.norm`,
//! …), so a PyTorch state dict saved with `safetensors.torch.save_file` loads as it is.
//! Files are written to a temporary name, flushed and renamed ([`write_atomic`]), so a
//! crash or a full disk mid-save leaves the previous checkpoint intact. Loading checks
//! every tensor first and names all that are missing, extra, mis-shaped, of the wrong
//! dtype or not finite.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder, VarMap};

use crate::{Config, Error, Result, Transformer};

/// The config file's name in a checkpoint directory.
pub const CONFIG_FILE: &str = "config.json";
/// The weights file's name in a checkpoint directory.
pub const WEIGHTS_FILE: &str = "model.safetensors";

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

use posenc_io::write_atomic;

pub use crate::weights::{frozen, variables};

/// The safetensors bytes of `tensors` with `metadata` in its header.
///
/// # Errors
/// [`Error::Checkpoint`] if a tensor cannot be serialised.
pub fn serialize(
    tensors: &HashMap<String, Tensor>,
    metadata: HashMap<String, String>,
    path: &Path,
) -> Result<Vec<u8>> {
    let mut sorted: Vec<(&String, &Tensor)> = tensors.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    safetensors::serialize(sorted, Some(metadata)).map_err(|e| Error::Checkpoint {
        path: path.to_path_buf(),
        problems: vec![format!("cannot serialise the weights ({e})")],
    })
}

/// The `__metadata__` of a safetensors file (empty if it has none).
///
/// # Errors
/// [`Error::Io`] if the file cannot be read, [`Error::Checkpoint`] if it is not safetensors.
pub fn read_metadata(path: &Path) -> Result<HashMap<String, String>> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(io_err(path))?;
    let not_safetensors = |why: String| Error::Checkpoint {
        path: path.to_path_buf(),
        problems: vec![format!("not a safetensors file ({why})")],
    };
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|e| not_safetensors(e.to_string()))?;
    let len = u64::from_le_bytes(len);
    let size = file.metadata().map_err(io_err(path))?.len();
    if len > size.saturating_sub(8) || len > 100_000_000 {
        return Err(not_safetensors(format!(
            "its header claims {len} bytes, the file has {size}"
        )));
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header)
        .map_err(|e| not_safetensors(e.to_string()))?;
    #[derive(serde::Deserialize)]
    struct Header {
        #[serde(rename = "__metadata__", default)]
        metadata: HashMap<String, String>,
    }
    let header: Header =
        serde_json::from_slice(&header).map_err(|e| not_safetensors(e.to_string()))?;
    Ok(header.metadata)
}

/// Saves `cfg` and the weights in `varmap` into `dir` (created if needed), each file
/// atomically, the weights with `metadata` in their header.
pub fn save(
    dir: &Path,
    cfg: &Config,
    varmap: &VarMap,
    metadata: HashMap<String, String>,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let config_path = dir.join(CONFIG_FILE);
    let json = serde_json::to_string_pretty(cfg).map_err(|source| Error::Json {
        path: config_path.clone(),
        source,
    })?;
    let weights_path = dir.join(WEIGHTS_FILE);
    let bytes = serialize(&variables(varmap), metadata, &weights_path)?;
    write_atomic(&weights_path, &bytes)?;
    Ok(write_atomic(&config_path, json.as_bytes())?)
}

/// Reads `config.json` from `dir`.
pub fn load_config(dir: &Path) -> Result<Config> {
    let path = dir.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
    let cfg: Config = serde_json::from_str(&text).map_err(|source| Error::Json { path, source })?;
    cfg.validate()?;
    Ok(cfg)
}

/// A loaded checkpoint: the model, its config, and the variables holding its weights (so
/// training can resume from them).
pub struct Loaded {
    /// The config read from `config.json`.
    pub config: Config,
    /// The weights, as trainable variables.
    pub varmap: VarMap,
    /// The model built on them.
    pub model: Transformer,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("config", &self.config)
            .field("tensors", &self.varmap.all_vars().len())
            .finish()
    }
}

/// Loads a checkpoint directory into a fresh model.
pub fn load(dir: &Path, device: &Device) -> Result<Loaded> {
    let config = load_config(dir)?;
    let varmap = VarMap::new();
    let model = Transformer::new(
        &config,
        VarBuilder::from_varmap(&varmap, DType::F32, device),
    )?;
    load_into(&varmap, &dir.join(WEIGHTS_FILE))?;
    Ok(Loaded {
        config,
        varmap,
        model,
    })
}

/// Reads a safetensors file into the variables of `varmap`, after checking that the file
/// has exactly the tensors the model needs, with the right shapes, dtypes and finite values.
pub fn load_into(varmap: &VarMap, path: &Path) -> Result<()> {
    let device = {
        let vars = varmap.all_vars();
        vars.first().map_or(Device::Cpu, |v| v.device().clone())
    };
    let tensors = candle_core::safetensors::load(path, &device).map_err(|e| Error::Checkpoint {
        path: path.to_path_buf(),
        problems: vec![format!("not a readable safetensors file ({e})")],
    })?;
    set_checked(varmap, &tensors, path)
}

/// Sets the variables of `varmap` to `tensors` (read from `path`) once [`check`] passes.
pub fn set_checked(varmap: &VarMap, tensors: &HashMap<String, Tensor>, path: &Path) -> Result<()> {
    check(varmap, tensors, path)?;
    let data = varmap.data().lock().unwrap_or_else(|e| e.into_inner());
    for (name, var) in data.iter() {
        var.set(&tensors[name])?;
    }
    Ok(())
}

/// Checks that `tensors` (read from `path`) are exactly the variables of `varmap`: the same
/// names, shapes and dtypes, and finite. The error names the file and lists every problem.
pub fn check(varmap: &VarMap, tensors: &HashMap<String, Tensor>, path: &Path) -> Result<()> {
    problems(&variables(varmap), tensors, path)
}

/// The names and shapes a model asks for when built over a set of tensors, recorded by
/// [`recorder`], to check the tensors against before building the model on them.
#[derive(Debug, Clone, Default)]
pub struct Recorded(Arc<Mutex<HashMap<String, Tensor>>>);

impl Recorded {
    /// Checks that `tensors` (read from `path`) are exactly what the model asked for: the
    /// same names, shapes and dtypes, and finite. The error names the file and lists every
    /// problem.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] listing every missing, extra, mis-shaped, mistyped or
    /// non-finite tensor.
    pub fn check(&self, tensors: &HashMap<String, Tensor>, path: &Path) -> Result<()> {
        let expected = self.0.lock().unwrap_or_else(|e| e.into_inner());
        problems(&expected, tensors, path)
    }
}

/// A builder that hands a model zeros of whatever shape it asks for (stride-0 views:
/// nothing is allocated) and records each name and shape, while it answers
/// [`VarBuilder::contains_tensor`] from `found`'s names: a model that loads one of several
/// layouts (separate or packed attention projections) asks for the one `found` has.
/// Build the model over it, then [`Recorded::check`] the tensors.
pub fn recorder(
    found: &HashMap<String, Tensor>,
    device: &Device,
) -> (VarBuilder<'static>, Recorded) {
    let recorded = Recorded::default();
    let backend = RecordingBackend {
        names: found.keys().cloned().collect(),
        recorded: recorded.clone(),
    };
    let vb = VarBuilder::from_backend(Box::new(backend), DType::F32, device.clone());
    (vb, recorded)
}

struct RecordingBackend {
    names: std::collections::HashSet<String>,
    recorded: Recorded,
}

impl SimpleBackend for RecordingBackend {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let t = Tensor::zeros((), dtype, dev)?.broadcast_as(s)?;
        let mut recorded = self.recorded.0.lock().unwrap_or_else(|e| e.into_inner());
        recorded.insert(name.to_string(), t.clone());
        Ok(t)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        candle_core::bail!("the tensor `{name}` was asked for without a shape")
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.names.contains(name)
    }
}

/// [`compare`]'s problems as an error naming `path`, if there are any.
fn problems(
    expected: &HashMap<String, Tensor>,
    found: &HashMap<String, Tensor>,
    path: &Path,
) -> Result<()> {
    let problems = compare(expected, found);
    match problems.is_empty() {
        true => Ok(()),
        false => Err(Error::Checkpoint {
            path: PathBuf::from(path),
            problems,
        }),
    }
}

/// Every way `found` differs from `expected`, one sentence each, sorted by name.
fn compare(expected: &HashMap<String, Tensor>, found: &HashMap<String, Tensor>) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, want) in expected {
        match found.get(name) {
            None => problems.push(format!("missing tensor `{name}` {:?}", want.dims())),
            Some(got) if got.dims() != want.dims() => problems.push(format!(
                "tensor `{name}` has shape {:?}, the model needs {:?}",
                got.dims(),
                want.dims()
            )),
            Some(got) if got.dtype() != want.dtype() => problems.push(format!(
                "tensor `{name}` is {:?}, the model needs {:?}",
                got.dtype(),
                want.dtype()
            )),
            Some(got) if !all_finite(got) => {
                problems.push(format!("tensor `{name}` holds NaN or infinite values"))
            }
            Some(_) => {}
        }
    }
    for name in found.keys().filter(|n| !expected.contains_key(*n)) {
        problems.push(format!("unexpected tensor `{name}`"));
    }
    problems.sort();
    problems
}

/// Whether every value of a float tensor is finite (other dtypes always are).
fn all_finite(t: &Tensor) -> bool {
    if !t.dtype().is_float() {
        return true;
    }
    t.to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .is_ok_and(|v| v.iter().all(|x| x.is_finite()))
}
