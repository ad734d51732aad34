//! Saving and loading: `config.json` + `model.safetensors` in one directory.
//!
//! Tensor names follow PyTorch's `nn.Transformer` (`encoder.layers.0.self_attn.in_proj_weight`,
//! `decoder.layers.0.multihead_attn.out_proj.weight`, `linear1`, `norm1`, `encoder.norm`,
//! …), so a PyTorch state dict saved with `safetensors.torch.save_file` loads as it is.
//! Files are written to a temporary name and renamed, so a crash mid-save leaves the
//! previous checkpoint intact. Loading checks every tensor first and names all that are
//! missing, extra, mis-shaped or of the wrong dtype.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};

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

/// Writes `bytes` to `path` atomically: a temporary file beside it, then a rename.
pub fn write_atomic(path: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    write(&tmp)?;
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

/// Saves `cfg` and the weights in `varmap` into `dir` (created if needed).
pub fn save(dir: &Path, cfg: &Config, varmap: &VarMap) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let config_path = dir.join(CONFIG_FILE);
    let json = serde_json::to_string_pretty(cfg).map_err(|source| Error::Json {
        path: config_path.clone(),
        source,
    })?;
    let weights_path = dir.join(WEIGHTS_FILE);
    write_atomic(&weights_path, |tmp| Ok(varmap.save(tmp)?))?;
    write_atomic(&config_path, |tmp| {
        std::fs::write(tmp, json).map_err(io_err(tmp))
    })
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
/// has exactly the tensors the model needs, with the right shapes and dtypes.
pub fn load_into(varmap: &VarMap, path: &Path) -> Result<()> {
    let device = {
        let vars = varmap.all_vars();
        vars.first().map_or(Device::Cpu, |v| v.device().clone())
    };
    let tensors = candle_core::safetensors::load(path, &device).map_err(|e| Error::Checkpoint {
        path: path.to_path_buf(),
        problems: vec![format!("not a readable safetensors file ({e})")],
    })?;
    let data = varmap.data().lock().unwrap_or_else(|e| e.into_inner());
    let problems = compare(
        &data
            .iter()
            .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
            .collect(),
        &tensors,
    );
    if !problems.is_empty() {
        return Err(Error::Checkpoint {
            path: PathBuf::from(path),
            problems,
        });
    }
    for (name, var) in data.iter() {
        var.set(&tensors[name])?;
    }
    Ok(())
}

/// Checks that `tensors` (read from `path`) are exactly the variables of `varmap`: the same
/// names, shapes and dtypes. The error lists every difference.
pub fn check(varmap: &VarMap, tensors: &HashMap<String, Tensor>, path: &Path) -> Result<()> {
    let data = varmap.data().lock().unwrap_or_else(|e| e.into_inner());
    let expected = data
        .iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
        .collect();
    let problems = compare(&expected, tensors);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::Checkpoint {
            path: PathBuf::from(path),
            problems,
        })
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
            Some(_) => {}
        }
    }
    for name in found.keys().filter(|n| !expected.contains_key(*n)) {
        problems.push(format!("unexpected tensor `{name}`"));
    }
    problems.sort();
    problems
}
