//! A tiny Llama written as GGUF with candle's writer: both row orders run the same model,
//! quantized weights stay close, `convert` round-trips through a Hugging Face directory,
//! and every malformed file is refused with an error naming what is wrong.

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use posenc::PairLayout;
use posenc_llama::names::Weight;
use posenc_llama::{Llama, LlamaConfig, Precision};
use posenc_testkit::max_abs_diff;
use posenc_transformer::StackCache;

/// Byte-level pieces: `Ġ` is the space.
const TOKENS: [&str; 8] = ["<|im_end|>", "a", "b", "c", "Ġ", "ab", "Ġa", "Ġab"];
const MERGES: [&str; 3] = ["Ġ a", "Ġa b", "a b"];

fn config() -> LlamaConfig {
    LlamaConfig {
        vocab_size: TOKENS.len(),
        hidden_size: 32,
        intermediate_size: 64,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        max_position_embeddings: 64,
        tie_word_embeddings: true,
        hidden_act: "silu".into(),
        bos_token_id: None,
        eos_token_id: Some(0),
        rope_scaling: None,
    }
}

fn fill(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n)
        .map(|i| (((i as u64 * 7919 + seed * 104729) % 1000) as f32 / 1000.0 - 0.5) * 0.4)
        .collect();
    Tensor::from_vec(data, shape, &Device::Cpu).unwrap()
}

/// Writes the tiny model; `edit` may change the metadata and tensors first.
fn write(
    dir: &Path,
    dtype: GgmlDType,
    edit: impl FnOnce(&mut Vec<(String, Value)>, &mut Vec<(String, QTensor)>),
) -> PathBuf {
    let cfg = config();
    let u = |v: usize| Value::U32(v as u32);
    let strings =
        |v: &[&str]| Value::Array(v.iter().map(|s| Value::String(s.to_string())).collect());
    let mut types = vec![Value::I32(1); TOKENS.len()];
    types[0] = Value::I32(3);
    let mut metadata = vec![
        (
            "general.architecture".to_string(),
            Value::String("llama".into()),
        ),
        ("llama.block_count".into(), u(cfg.num_hidden_layers)),
        (
            "llama.context_length".into(),
            u(cfg.max_position_embeddings),
        ),
        ("llama.embedding_length".into(), u(cfg.hidden_size)),
        ("llama.feed_forward_length".into(), u(cfg.intermediate_size)),
        (
            "llama.attention.head_count".into(),
            u(cfg.num_attention_heads),
        ),
        (
            "llama.attention.head_count_kv".into(),
            u(cfg.num_key_value_heads),
        ),
        (
            "llama.rope.freq_base".into(),
            Value::F32(cfg.rope_theta as f32),
        ),
        (
            "llama.attention.layer_norm_rms_epsilon".into(),
            Value::F32(1e-5),
        ),
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String("smollm".into())),
        ("tokenizer.ggml.tokens".into(), strings(&TOKENS)),
        ("tokenizer.ggml.token_type".into(), Value::Array(types)),
        ("tokenizer.ggml.merges".into(), strings(&MERGES)),
        ("tokenizer.ggml.eos_token_id".into(), u(0)),
        (
            "tokenizer.chat_template".into(),
            Value::String("{% for m in messages %}{{ m.content }}{% endfor %}".into()),
        ),
    ];
    let mut tensors: Vec<(String, QTensor)> = Weight::all(&cfg)
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            let shape = w.shape(&cfg);
            let t = match shape.len() {
                1 => (fill(&shape, i as u64) + 1.0).unwrap(),
                _ => fill(&shape, i as u64),
            };
            let dtype = if shape.len() == 1 {
                GgmlDType::F32
            } else {
                dtype
            };
            (w.gguf(), QTensor::quantize(&t, dtype).unwrap())
        })
        .collect();
    edit(&mut metadata, &mut tensors);
    let path = dir.join("tiny.gguf");
    let mut file = std::fs::File::create(&path).unwrap();
    let metadata: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut file, &metadata, &tensors).unwrap();
    path
}

fn scores(llama: &Llama, ids: &[u32]) -> Tensor {
    let ids = Tensor::new(ids, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    llama.model.step(&ids, &mut StackCache::default()).unwrap()
}

const IDS: [u32; 6] = [1, 2, 5, 4, 7, 3];

#[test]
fn both_row_orders_and_the_converted_directory_run_one_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), GgmlDType::F32, |_, _| {});
    let cpu = &Device::Cpu;
    let interleaved =
        Llama::from_gguf(&path, Precision::F32, PairLayout::Interleaved, cpu).unwrap();
    let halves = Llama::from_gguf(&path, Precision::F32, PairLayout::Halves, cpu).unwrap();
    let reference = scores(&interleaved, &IDS);
    assert!(max_abs_diff(&reference, &scores(&halves, &IDS)) < 1e-5);
    let out = dir.path().join("hf");
    posenc_llama::convert::convert(&path, &out).unwrap();
    let converted = Llama::from_dir(&out, cpu).unwrap();
    assert!(max_abs_diff(&reference, &scores(&converted, &IDS)) < 1e-5);
    assert_eq!(converted.config, interleaved.config);
    assert_eq!(
        converted.encode(" ab").unwrap(),
        interleaved.encode(" ab").unwrap()
    );
    assert_eq!(interleaved.encode(" ab").unwrap(), [7]);
    let template = converted.chat.as_ref().expect("the template travels");
    let rendered = template
        .render(&[posenc_llama::chat::Message::user("hi")], false)
        .unwrap();
    assert_eq!(rendered, "hi");
    // A second conversion into the same directory is refused and changes nothing.
    let before = std::fs::read(out.join("model.safetensors")).unwrap();
    let e = posenc_llama::convert::convert(&path, &out)
        .unwrap_err()
        .to_string();
    assert!(e.contains("already exists"), "{e}");
    assert_eq!(
        std::fs::read(out.join("model.safetensors")).unwrap(),
        before
    );
}

#[test]
fn quantized_weights_run_close_to_their_dequantized_copy() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), GgmlDType::Q8_0, |_, _| {});
    let cpu = &Device::Cpu;
    let dense = Llama::from_gguf(&path, Precision::F32, PairLayout::Interleaved, cpu).unwrap();
    let quantized =
        Llama::from_gguf(&path, Precision::Quantized, PairLayout::Interleaved, cpu).unwrap();
    let (a, b) = (scores(&dense, &IDS), scores(&quantized, &IDS));
    assert!(max_abs_diff(&a, &b) < 0.05, "{}", max_abs_diff(&a, &b));
    let e = Llama::from_gguf(&path, Precision::Quantized, PairLayout::Halves, cpu).unwrap_err();
    assert!(e.to_string().contains("interleaved"), "{e}");
}

fn refused(edit: impl FnOnce(&mut Vec<(String, Value)>, &mut Vec<(String, QTensor)>)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), GgmlDType::F32, edit);
    let e =
        Llama::from_gguf(&path, Precision::F32, PairLayout::Interleaved, &Device::Cpu).unwrap_err();
    // Conversion refuses it too, and writes nothing.
    let out = dir.path().join("hf");
    assert!(posenc_llama::convert::convert(&path, &out).is_err());
    assert!(!out.join("model.safetensors").exists());
    format!("{e:#}")
}

#[test]
fn a_malformed_model_is_refused_naming_what_is_wrong() {
    let e = refused(|_, t| t.retain(|(name, _)| name != "blk.1.ffn_gate.weight"));
    assert!(
        e.contains("blk.1.ffn_gate.weight") && e.contains("missing"),
        "{e}"
    );
    let e = refused(|_, t| {
        let i = t
            .iter()
            .position(|(n, _)| n == "blk.0.attn_k.weight")
            .unwrap();
        t[i].1 = QTensor::quantize(&fill(&[32, 32], 1), GgmlDType::F32).unwrap();
    });
    assert!(
        e.contains("blk.0.attn_k.weight") && e.contains("[16, 32]"),
        "{e}"
    );
    let e = refused(|m, _| m[0].1 = Value::String("gpt2".into()));
    assert!(e.contains("architecture `gpt2`"), "{e}");
    let e = refused(|m, _| m.retain(|(k, _)| k != "llama.block_count"));
    assert!(e.contains("llama.block_count"), "{e}");
    let e = refused(|m, _| {
        let i = m
            .iter()
            .position(|(k, _)| k == "tokenizer.ggml.pre")
            .unwrap();
        m[i].1 = Value::String("mystery".into());
    });
    assert!(e.contains("mystery"), "{e}");
    let e = refused(|m, _| {
        let i = m
            .iter()
            .position(|(k, _)| k == "llama.attention.head_count_kv")
            .unwrap();
        m[i].1 = Value::U32(3);
    });
    assert!(e.contains("kv_heads"), "{e}");
}

#[test]
fn a_truncated_or_foreign_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), GgmlDType::F32, |_, _| {});
    let bytes = std::fs::read(&path).unwrap();
    let cpu = &Device::Cpu;
    for (name, content) in [
        ("cut.gguf", &bytes[..bytes.len() - 100]),
        ("header.gguf", &bytes[..40]),
        ("text.gguf", b"not a model at all".as_slice()),
        ("empty.gguf", &[][..]),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        let e = Llama::from_gguf(&p, Precision::F32, PairLayout::Interleaved, cpu).unwrap_err();
        assert!(format!("{e:#}").contains(name), "{name}: {e:#}");
        if name == "cut.gguf" {
            assert!(
                format!("{e:#}").contains("past the end of the file"),
                "{e:#}"
            );
        }
    }
    let e = Llama::load("no/such/model.gguf", Precision::F32, cpu).unwrap_err();
    assert!(e.to_string().contains("no/such/model.gguf"), "{e}");
}

/// llama.cpp's `llama.rope.scaling.*` metadata is read as transformers' settings, `posenc
/// convert` writes it into `config.json`, and the converted directory loads with it: both
/// score as the same model with the scaling applied by hand. An unknown type is named.
#[test]
fn rope_scaling_is_read_from_gguf_and_written_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), GgmlDType::F32, |m, _| {
        m.push((
            "llama.rope.scaling.type".into(),
            Value::String("yarn".into()),
        ));
        m.push(("llama.rope.scaling.factor".into(), Value::F32(4.0)));
        m.push((
            "llama.rope.scaling.original_context_length".into(),
            Value::U32(16),
        ));
    });
    let cpu = &Device::Cpu;
    let scaled = Llama::from_gguf(&path, Precision::F32, PairLayout::Interleaved, cpu).unwrap();
    let want: posenc::rope_scaling::RopeScaling = serde_json::from_value(serde_json::json!(
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
    ))
    .unwrap();
    assert_eq!(scaled.config.rope_scaling.as_ref(), Some(&want));
    // The scaling changes the scores: a plain model with the same scaling set by hand
    // scores as the scaled one, and differs from the plain one.
    let plain_path = dir.path().join("plain");
    std::fs::create_dir(&plain_path).unwrap();
    let plain_file = write(&plain_path, GgmlDType::F32, |_, _| {});
    let plain =
        Llama::from_gguf(&plain_file, Precision::F32, PairLayout::Interleaved, cpu).unwrap();
    let ids: Vec<u32> = (0..40).map(|i| (i * 3 % 7) as u32 + 1).collect();
    let by_hand = plain
        .model
        .clone()
        .with_encoding(
            &plain
                .model
                .config()
                .encoding
                .with_setting("scaling", serde_json::to_value(&want).unwrap())
                .unwrap(),
        )
        .unwrap();
    let by_hand = Llama {
        model: by_hand,
        ..plain
    };
    assert!(max_abs_diff(&scores(&scaled, &ids), &scores(&by_hand, &ids)) < 1e-5);
    let unscaled =
        Llama::from_gguf(&plain_file, Precision::F32, PairLayout::Interleaved, cpu).unwrap();
    assert!(max_abs_diff(&scores(&scaled, &ids), &scores(&unscaled, &ids)) > 1e-3);
    // Written back by convert, read again from the directory.
    let out = dir.path().join("hf");
    posenc_llama::convert::convert(&path, &out).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(json["rope_scaling"]["rope_type"], "yarn");
    let converted = Llama::from_dir(&out, cpu).unwrap();
    assert_eq!(converted.config.rope_scaling.as_ref(), Some(&want));
    // An unknown type is refused by name.
    let e = refused(|m, _| {
        m.push((
            "llama.rope.scaling.type".into(),
            Value::String("xpos".into()),
        ));
    });
    assert!(e.contains("xpos"), "{e}");
}
