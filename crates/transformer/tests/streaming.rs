//! A rolling key/value cache with attention sinks (StreamingLLM): until its window fills it
//! is the ordinary cache; after, a one-layer model's next-token scores equal a fresh
//! forward over the tokens it kept (the sinks and the most recent ones, at positions
//! `0, 1, …` within the cache), for encodings that rotate or bias; its memory stays at the
//! window however long the text; and what cannot work is refused by name.

use crate::common;

use candle_core::{DType, Device, IndexOp, Tensor};
use common::*;
use posenc::EncodingConfig;
use posenc_transformer::attention::{AttentionInput, MultiHeadAttention};
use posenc_transformer::{KvCache, LanguageModel, Mask, Streaming};

const TOL: f32 = 2e-5;

fn kinds() -> Vec<EncodingConfig> {
    [
        r#""none""#,
        r#""rope""#,
        r#""alibi""#,
        r#""xpos""#,
        r#""fire""#,
        r#""fox""#,
        r#"{"kind": "stack", "of": ["rope", {"kind": "sink", "init": 1.0}]}"#,
    ]
    .iter()
    .map(|json| json.trim_matches('"').parse::<EncodingConfig>().unwrap())
    .collect()
}

/// A frozen model of `layers` layers (vocabulary 30, width 16, 4 heads).
fn model(encoding: EncodingConfig, layers: usize) -> LanguageModel {
    let cfg = posenc_transformer::LmConfig {
        layers,
        ..tiny_lm_config(encoding, 16)
    };
    LanguageModel::frozen(&cfg, &lm_weights(&cfg), &Device::Cpu).unwrap()
}

fn text(len: usize) -> Vec<u32> {
    (0..len as u32).map(|i| (i * 7 + i / 3) % 30).collect()
}

fn row(ids: &[u32]) -> Tensor {
    Tensor::new(ids, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap()
}

#[test]
fn before_its_window_fills_a_rolling_cache_is_the_ordinary_one() {
    for encoding in kinds() {
        let label = encoding.to_json();
        let m = model(encoding, 2);
        let ids = text(12);
        let mut plain = m.cache(12);
        let mut rolling = m.rolling_cache(Streaming::new(2, 12).unwrap()).unwrap();
        for &t in &ids {
            let a = m.step(&row(&[t]), &mut plain).unwrap();
            let b = m.step(&row(&[t]), &mut rolling).unwrap();
            let d = max_abs_diff(&a, &b);
            assert!(d < TOL, "{label}: {d:e}");
        }
        assert_eq!((rolling.len(), rolling.seen()), (12, 12));
    }
}

#[test]
fn past_its_window_one_layer_sees_exactly_the_tokens_it_kept() {
    let (sinks, window) = (2, 8);
    for encoding in kinds() {
        let label = encoding.to_json();
        let m = model(encoding, 1);
        let ids = text(30);
        let mut cache = m
            .rolling_cache(Streaming::new(sinks, window).unwrap())
            .unwrap();
        for (t, &token) in ids.iter().enumerate() {
            let streamed = m.step(&row(&[token]), &mut cache).unwrap();
            // The sinks, then the most recent tokens, this one last: a fresh forward.
            let recent = (t + 1).min(window).saturating_sub(sinks);
            let mut kept: Vec<u32> = ids[..sinks.min(t + 1)].to_vec();
            if t + 1 > sinks {
                kept.extend(&ids[t + 1 - recent..=t]);
            }
            let full = m.logits(&row(&kept)).unwrap();
            let last = full.i((0, kept.len() - 1)).unwrap();
            let d = max_abs_diff(&streamed.squeeze(0).unwrap(), &last);
            assert!(d < TOL, "{label}, token {t}: {d:e}");
            assert!(cache.len() <= window && cache.len() == kept.len());
        }
        assert_eq!(cache.seen(), 30);
    }
}

#[test]
fn a_long_text_stays_within_the_window() {
    let m = model("rope".parse().unwrap(), 2);
    let streaming = Streaming::new(4, 16).unwrap();
    let mut cache = m.rolling_cache(streaming).unwrap();
    // Read in one call: the model reads it in pieces that fit beside the sinks.
    let ids = text(200);
    let logits = m.logits_cached(&row(&ids), &mut cache).unwrap();
    assert_eq!(logits.dims(), &[1, 200, 30]);
    assert_eq!((cache.len(), cache.seen()), (16, 200));
    let finite = logits.abs().unwrap().max_all().unwrap();
    assert!(finite.to_scalar::<f32>().unwrap().is_finite());
    // Token by token after that, the cache stays at its window.
    for &t in &ids[..40] {
        m.step(&row(&[t]), &mut cache).unwrap();
        assert_eq!(cache.len(), 16);
    }
}

#[test]
fn what_cannot_roll_is_refused_by_name() {
    let e = Streaming::new(8, 8).unwrap_err().to_string();
    assert!(e.contains("sink") && e.contains('8'), "{e}");
    assert!(Streaming::new(0, 1).is_ok());
    // A learned table shorter than the window.
    let learned = model(
        r#"{"kind": "learned", "max_positions": 16}"#.parse().unwrap(),
        1,
    );
    let e = learned
        .rolling_cache(Streaming::new(2, 64).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("max_positions") && e.contains("64"), "{e}");
    // A rolling cache under a mask, or asked for weights: it runs causally, alone.
    let vb = candle_nn::VarBuilder::zeros(DType::F32, &Device::Cpu);
    let rope = EncodingConfig::from_kind("rope")
        .unwrap()
        .build_untrained(16, 4, &Device::Cpu)
        .unwrap();
    let cfg = posenc_transformer::BlockConfig::new(16, 4, 32);
    let mha = MultiHeadAttention::new(&cfg, Some(rope), vb).unwrap();
    let x = Tensor::zeros((1, 1, 16), DType::F32, &Device::Cpu).unwrap();
    let mask = Mask::causal(1, 1, 0, &Device::Cpu).unwrap();
    let mut cache = KvCache::streaming(Streaming::new(1, 4).unwrap(), None);
    let input = AttentionInput::own(&x)
        .with_mask(Some(&mask))
        .with_cache(&mut cache);
    let e = mha.forward(input).unwrap_err().to_string();
    assert!(e.contains("rolling"), "{e}");
}

/// A rolling cache does not hand attention the ids its keys came from: a bias read from the
/// tokens is refused, by name.
#[test]
fn a_rolling_cache_refuses_a_bias_read_from_the_tokens() {
    let m = model("coupling-bias".parse().unwrap(), 1);
    let mut rolling = m.rolling_cache(Streaming::new(2, 8).unwrap()).unwrap();
    let e = m
        .step(&row(&[4, 5, 3]), &mut rolling)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("coupling-bias") && e.contains("rolling cache"),
        "{e}"
    );
}
