//! Each stack has its own encoding, built for the direction of its attention, and asks it
//! for the position bias once per forward.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use common::*;
use posenc::{Direction, EncodingConfig, Form, PositionalEncoding, Table, Target};
use posenc_transformer::stack::{Memory, StackInput};
use posenc_transformer::{Config, Encodings, Mask, Stack, Transformer};

fn kind(k: &str) -> EncodingConfig {
    EncodingConfig::from_kind(k).unwrap()
}

fn model(cfg: &Config) -> Transformer {
    let varmap = VarMap::new();
    Transformer::new(
        cfg,
        VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
    )
    .unwrap()
}

fn with_encoding(encoding: Encodings) -> Config {
    Config {
        encoding,
        ..tiny(kind("none")).0
    }
}

/// Entry `(query, key)` of a `(len, len)` or head 0 of a `(heads, len, len)` tensor.
fn at(t: &Tensor, query: usize, key: usize) -> f32 {
    let t = if t.rank() == 3 {
        t.get(0).unwrap()
    } else {
        t.clone()
    };
    let t = t.to_dtype(DType::F32).unwrap();
    t.get(query).unwrap().get(key).unwrap().to_scalar().unwrap()
}

fn bias_table(enc: &dyn PositionalEncoding) -> (Tensor, Option<Tensor>) {
    match enc.table(6).unwrap() {
        Table {
            form: Form::Bias { bias, index },
            ..
        } => (bias, index.map(|i| i.values)),
        other => panic!("{} has no bias table: {other:?}", enc.kind()),
    }
}

#[test]
fn per_stack_configs_round_trip_and_one_encoding_serves_both() {
    let split = Encodings {
        encoder: kind("alibi"),
        decoder: "{\"kind\": \"rope\", \"base\": 500000}".parse().unwrap(),
    };
    let cfg = with_encoding(split.clone());
    let json = serde_json::to_string(&cfg).unwrap();
    let again: Config = serde_json::from_str(&json).unwrap();
    assert_eq!(again, cfg);
    assert_eq!(again.encoding.kind(), "alibi/rope");
    let built = model(&cfg);
    assert_eq!(built.encoder().encoding().kind(), "alibi");
    assert_eq!(built.decoder().encoding().kind(), "rope");

    // The single form still reads as "both", and is written back in the same form.
    let both: Config = serde_json::from_str(r#"{"encoding": {"kind": "t5"}}"#).unwrap();
    assert_eq!(both.encoding, Encodings::both(kind("t5")));
    let written = serde_json::to_value(&both).unwrap();
    assert_eq!(written["encoding"]["kind"], "t5", "{written}");

    // A misspelt stack is named.
    let e = serde_json::from_str::<Config>(r#"{"encoding": {"encodr": {"kind": "t5"}}}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("encodr"), "{e}");
}

/// T5 §2.1 (and Hugging Face's `T5Attention`): the encoder's buckets tell a key one after
/// the query (bucket `num_buckets/2 + 1` = 17) from one before (1); the decoder's are
/// one-directional, and every later key shares bucket 0.
#[test]
fn t5_takes_one_directional_buckets_in_the_decoder() {
    let built = model(&with_encoding(Encodings::both(kind("t5"))));
    let (_, encoder) = bias_table(&**built.encoder().encoding());
    let (_, decoder) = bias_table(&**built.decoder().encoding());
    let (encoder, decoder) = (encoder.unwrap(), decoder.unwrap());
    assert_eq!((at(&encoder, 0, 1), at(&encoder, 1, 0)), (17.0, 1.0));
    assert_eq!((at(&decoder, 0, 1), at(&decoder, 1, 0)), (0.0, 1.0));
    assert_eq!(at(&decoder, 0, 5), 0.0);

    // A config that says `bidirectional` (as every config saved before per-stack defaults
    // did) keeps it in both stacks: old checkpoints load to the same model.
    let explicit: Config = serde_json::from_str(
        r#"{"encoding": {"kind": "t5", "num_buckets": 32, "max_distance": 128, "bidirectional": true}}"#,
    )
    .unwrap();
    let built = Transformer::new(
        &Config {
            encoding: explicit.encoding,
            ..with_encoding(Encodings::both(kind("none")))
        },
        VarBuilder::zeros(DType::F32, &Device::Cpu),
    )
    .unwrap();
    let (_, decoder) = bias_table(&**built.decoder().encoding());
    assert_eq!(at(&decoder.unwrap(), 0, 1), 17.0);
}

/// ALiBi (Press et al. 2022): symmetric `−m|i − j|` in an encoder, `−m·max(i − j, 0)` in a
/// decoder, whose causal mask hides exactly the keys where the two differ.
#[test]
fn alibi_is_symmetric_in_the_encoder_and_causal_in_the_decoder() {
    let built = model(&with_encoding(Encodings::both(kind("alibi"))));
    let (encoder, _) = bias_table(&**built.encoder().encoding());
    let (decoder, _) = bias_table(&**built.decoder().encoding());
    let m = posenc::alibi::alibi_slopes(4)[0] as f32;
    assert_eq!(at(&encoder, 0, 2), -2.0 * m);
    assert_eq!(at(&encoder, 2, 0), -2.0 * m);
    assert_eq!(at(&decoder, 0, 2), 0.0);
    assert_eq!(at(&decoder, 2, 0), -2.0 * m);
}

/// An encoding that counts how often it is asked for a bias.
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn PositionalEncoding>,
    biases: AtomicUsize,
}

impl PositionalEncoding for Counting {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn capabilities(&self) -> posenc::Capabilities {
        self.inner.capabilities()
    }
    fn bias(&self, cx: &posenc::BiasContext) -> posenc::Result<Option<Tensor>> {
        self.biases.fetch_add(1, Ordering::Relaxed);
        self.inner.bias(cx)
    }
    fn table(&self, len: usize) -> posenc::Result<Table> {
        self.inner.table(len)
    }
}

#[test]
fn each_stack_asks_for_the_bias_once_per_forward() {
    let cfg = Config {
        encoder_layers: 3,
        decoder_layers: 3,
        ..with_encoding(Encodings::both(kind("alibi")))
    };
    let counting = |direction| {
        let target = Target::new(cfg.d_model, cfg.heads, direction).unwrap();
        let inner = kind("alibi")
            .build(&target, VarBuilder::zeros(DType::F32, &Device::Cpu))
            .unwrap();
        Arc::new(Counting {
            inner,
            biases: AtomicUsize::new(0),
        })
    };
    let vb = VarBuilder::zeros(DType::F32, &Device::Cpu);
    let x = Tensor::randn(0f32, 1.0, (2, 5, cfg.d_model), &Device::Cpu).unwrap();

    let enc = counting(Direction::Bidirectional);
    let encoder = Stack::new(&cfg.encoder_block(), 3, enc.clone(), vb.pp("encoder")).unwrap();
    let (memory, _) = encoder.forward(StackInput::new(&x, None)).unwrap();
    assert_eq!(
        enc.biases.load(Ordering::Relaxed),
        1,
        "3 layers, one forward"
    );

    let dec = counting(Direction::Causal);
    let decoder = Stack::new(&cfg.decoder_block(), 3, dec.clone(), vb.pp("decoder")).unwrap();
    let causal = Mask::causal(5, 5, 0, &Device::Cpu).unwrap();
    for _ in 0..2 {
        let input = StackInput {
            memory: Some(Memory {
                states: &memory,
                mask: None,
            }),
            ..StackInput::new(&x, Some(&causal))
        };
        decoder.forward(input).unwrap();
    }
    assert_eq!(
        dec.biases.load(Ordering::Relaxed),
        2,
        "3 layers, two forwards"
    );
}
