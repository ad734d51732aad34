//! Reading a llama.cpp GGUF file with candle's [`gguf_file`]: the metadata (sizes,
//! tokenizer, chat template) and the tensors, each checked against the shape the
//! configuration implies before its bytes are read.

use std::fs::File;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use crate::error::Result;
use candle_core::quantized::{ggml_file, gguf_file, QTensor};
use candle_core::Device;
use gguf_file::Value;
use memmap2::Mmap;
use posenc_error::{bail, ensure, invalid, Context};

use crate::config::LlamaConfig;
use posenc::rope_scaling::RopeScaling;

/// An open GGUF file, mapped into memory: the header is parsed from the mapping, and each
/// tensor is copied once, from the mapping into its blocks (reading through a file would
/// copy it twice, and seek once per metadata string).
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    map: Mmap,
    content: gguf_file::Content,
}

impl GgufFile {
    /// Opens `path` and reads its header (metadata and tensor directory, not the weights).
    ///
    /// # Errors
    /// A missing file, or one that is not GGUF or is cut short, naming the file.
    #[allow(unsafe_code)]
    pub fn open(path: &Path) -> Result<Self> {
        // A directory opens, and only its mapping would fail, with the OS's words.
        ensure!(
            !path.is_dir(),
            "{} is a directory, not a GGUF file",
            path.display()
        );
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: the mapping is read-only and lives as long as `self`. A file changed by
        // another process while it is read gives wrong weights (or SIGBUS if it is cut
        // short), as with llama.cpp's mapping of the same files.
        let map =
            unsafe { Mmap::map(&file) }.with_context(|| format!("mapping {}", path.display()))?;
        let content = gguf_file::Content::read(&mut Cursor::new(&map[..]))
            .with_context(|| format!("{} is not a readable GGUF file", path.display()))?;
        Ok(Self {
            path: path.to_path_buf(),
            map,
            content,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn value(&self, key: &str) -> Result<&Value> {
        Ok(self
            .content
            .metadata
            .get(key)
            .ok_or_else(|| invalid!("{}: metadata `{key}` is missing", self.path.display()))?)
    }

    fn wrong(&self, key: &str, what: &str) -> crate::Error {
        invalid!("{}: metadata `{key}` is not {what}", self.path.display()).into()
    }

    /// A non-negative integer entry.
    pub fn usize(&self, key: &str) -> Result<usize> {
        let v = match self.value(key)? {
            Value::U8(v) => Some(u64::from(*v)),
            Value::U16(v) => Some(u64::from(*v)),
            Value::U32(v) => Some(u64::from(*v)),
            Value::U64(v) => Some(*v),
            Value::I8(v) => u64::try_from(*v).ok(),
            Value::I16(v) => u64::try_from(*v).ok(),
            Value::I32(v) => u64::try_from(*v).ok(),
            Value::I64(v) => u64::try_from(*v).ok(),
            _ => None,
        };
        v.and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| self.wrong(key, "a non-negative integer"))
    }

    /// A floating-point entry.
    pub fn float(&self, key: &str) -> Result<f64> {
        match self.value(key)? {
            Value::F32(v) => Ok(f64::from(*v)),
            Value::F64(v) => Ok(*v),
            _ => Err(self.wrong(key, "a number")),
        }
    }

    /// A string entry.
    pub fn string(&self, key: &str) -> Result<&str> {
        match self.value(key)? {
            Value::String(s) => Ok(s),
            _ => Err(self.wrong(key, "a string")),
        }
    }

    /// An array of strings.
    pub fn strings(&self, key: &str) -> Result<Vec<&str>> {
        let Value::Array(values) = self.value(key)? else {
            return Err(self.wrong(key, "an array"));
        };
        values
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.as_str()),
                _ => Err(self.wrong(key, "an array of strings")),
            })
            .collect()
    }

    /// An array of integers.
    pub fn integers(&self, key: &str) -> Result<Vec<i64>> {
        let Value::Array(values) = self.value(key)? else {
            return Err(self.wrong(key, "an array"));
        };
        values
            .iter()
            .map(|v| match v {
                Value::I32(v) => Ok(i64::from(*v)),
                Value::U32(v) => Ok(i64::from(*v)),
                Value::I64(v) => Ok(*v),
                _ => Err(self.wrong(key, "an array of integers")),
            })
            .collect()
    }

    /// Whether the metadata has `key`.
    pub fn has_key(&self, key: &str) -> bool {
        self.content.metadata.contains_key(key)
    }

    /// Whether the file has a tensor `name`.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// The sizes of a `llama` model, from `llama.*` metadata.
    ///
    /// # Errors
    /// Another architecture, or a missing or mistyped entry, naming it.
    pub fn config(&self) -> Result<LlamaConfig> {
        let arch = self.string("general.architecture")?;
        if arch != "llama" {
            bail!(
                "{}: architecture `{arch}` is not supported (only `llama`)",
                self.path.display()
            );
        }
        let heads = self.usize("llama.attention.head_count")?;
        let hidden = self.usize("llama.embedding_length")?;
        let cfg = LlamaConfig {
            vocab_size: match self.usize("llama.vocab_size") {
                Ok(v) => v,
                Err(_) => self.strings("tokenizer.ggml.tokens")?.len(),
            },
            hidden_size: hidden,
            intermediate_size: self.usize("llama.feed_forward_length")?,
            num_hidden_layers: self.usize("llama.block_count")?,
            num_attention_heads: heads,
            num_key_value_heads: match self.has_key("llama.attention.head_count_kv") {
                true => self.usize("llama.attention.head_count_kv")?,
                false => heads,
            },
            rms_norm_eps: self.float("llama.attention.layer_norm_rms_epsilon")?,
            rope_theta: match self.has_key("llama.rope.freq_base") {
                true => self.float("llama.rope.freq_base")?,
                false => 10_000.0,
            },
            max_position_embeddings: self.usize("llama.context_length")?,
            tie_word_embeddings: !self.has_tensor(crate::names::Global::Head.gguf()),
            hidden_act: "silu".into(),
            bos_token_id: self
                .usize("tokenizer.ggml.bos_token_id")
                .ok()
                .map(|v| v as u32),
            eos_token_id: self
                .usize("tokenizer.ggml.eos_token_id")
                .ok()
                .map(|v| v as u32),
            rope_scaling: self.rope_scaling()?,
        };
        if self.has_key("llama.rope.dimension_count") {
            let rot = self.usize("llama.rope.dimension_count")?;
            if rot != cfg.head_dim() {
                bail!(
                    "{}: rotary dimension {rot} differs from the head width {}: not supported",
                    self.path.display(),
                    cfg.head_dim()
                );
            }
        }
        Ok(cfg)
    }

    /// llama.cpp's `llama.rope.scaling.*` metadata as transformers' settings: `type` (`none`,
    /// `linear` or `yarn`), `factor` and `original_context_length`.
    ///
    /// # Errors
    /// Another scaling type, or a mistyped entry, naming it.
    fn rope_scaling(&self) -> Result<Option<RopeScaling>> {
        if !self.has_key("llama.rope.scaling.type") {
            return Ok(None);
        }
        let kind = self.string("llama.rope.scaling.type")?;
        let rope_type = match kind {
            "none" => return Ok(None),
            "linear" => "linear",
            "yarn" => "yarn",
            other => bail!(
                "{}: rope scaling `{other}` is not supported (none, linear, yarn)",
                self.path.display()
            ),
        };
        let mut json = serde_json::json!({ "rope_type": rope_type });
        if self.has_key("llama.rope.scaling.factor") {
            json["factor"] = self.float("llama.rope.scaling.factor")?.into();
        }
        if self.has_key("llama.rope.scaling.original_context_length") {
            json["original_max_position_embeddings"] = self
                .usize("llama.rope.scaling.original_context_length")?
                .into();
        }
        Ok(Some(serde_json::from_value(json)?))
    }

    /// The tensor `name`, quantized as stored, after checking it has `shape` (rows first).
    ///
    /// # Errors
    /// A missing tensor or one of another shape, naming it and both shapes; data past the
    /// end of the file.
    pub fn tensor(&self, name: &str, shape: &[usize], device: &Device) -> Result<QTensor> {
        let info = self
            .content
            .tensor_infos
            .get(name)
            .ok_or_else(|| invalid!("{}: tensor `{name}` is missing", self.path.display()))?;
        if info.shape.dims() != shape {
            bail!(
                "{}: tensor `{name}` has shape {:?}, the configuration needs {shape:?}",
                self.path.display(),
                info.shape.dims()
            );
        }
        let (elems, block) = (info.shape.elem_count(), info.ggml_dtype.block_size());
        if elems % block != 0 {
            bail!(
                "{}: tensor `{name}` has {elems} values, not a whole number of {:?} blocks of {block}",
                self.path.display(),
                info.ggml_dtype
            );
        }
        let bytes = elems / block * info.ggml_dtype.type_size();
        let at = self.content.tensor_data_offset.saturating_add(info.offset);
        let past_end = || {
            invalid!(
                "{}: reading tensor `{name}`: its {bytes} bytes at offset {at} run past the end of the file ({} bytes)",
                self.path.display(),
                self.map.len()
            )
        };
        let start = usize::try_from(at).map_err(|_| past_end())?;
        let data = start
            .checked_add(bytes)
            .and_then(|end| self.map.get(start..end))
            .ok_or_else(past_end)?;
        let tensor = ggml_file::qtensor_from_ggml(info.ggml_dtype, data, shape.to_vec(), device)
            .with_context(|| format!("{}: reading tensor `{name}`", self.path.display()))?;
        self.release(start, bytes);
        Ok(tensor)
    }

    /// Gives back the pages of `len` bytes at `offset` that reading a tensor brought into
    /// this process (they stay in the page cache): the copy is all that is kept, so the
    /// mapping does not count twice in the peak memory of a load. Only advice: where the
    /// system does not take it, the pages are given back when the file is closed.
    #[allow(unsafe_code)]
    fn release(&self, offset: usize, len: usize) {
        #[cfg(unix)]
        {
            use memmap2::UncheckedAdvice::DontNeed;
            // SAFETY: nothing borrows the range any more (the tensor holds a copy), and
            // the mapping is a read-only mapping of a file: a page read again after
            // `MADV_DONTNEED` is the file's, as before.
            let _advice_only = unsafe { self.map.unchecked_advise_range(DontNeed, offset, len) };
        }
    }
}
