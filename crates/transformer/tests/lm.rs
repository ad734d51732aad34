//! The decoder-only language model: causal (a position never sees a later one), cached
//! generation equal to the full forward for every encoding, and a learned table's end named.

use crate::common;

use candle_core::{Device, IndexOp, Tensor};
use candle_nn::VarMap;
use common::*;
use posenc::EncodingConfig;
use posenc_transformer::StackCache;
use posenc_transformer::{LanguageModel, LmConfig};

fn lm(encoding: EncodingConfig) -> LanguageModel {
    lm_and_weights(encoding).0
}

fn lm_and_weights(encoding: EncodingConfig) -> (LanguageModel, VarMap) {
    tiny_lm(encoding, 8)
}

/// `{"kind": "layers", "pattern": <entries>}`.
fn pattern(entries: &str) -> EncodingConfig {
    format!(r#"{{"kind": "layers", "pattern": {entries}}}"#)
        .parse()
        .unwrap()
}

fn tokens() -> Tensor {
    ids(&[
        &[1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        &[2, 11, 12, 13, 14, 15, 3, 3, 4, 29, 0, 7],
    ])
}

#[test]
fn a_position_never_sees_a_later_one() {
    for enc in all_encodings()
        .into_iter()
        .filter(|e| e.kind() != "fraction")
    {
        let model = lm(enc.clone());
        let a = tokens();
        // Change the last half of the sequence: the first half's outputs must not move.
        let mut changed: Vec<Vec<u32>> = a.to_vec2().unwrap();
        for row in &mut changed {
            for t in &mut row[6..] {
                *t = (*t + 7) % 30;
            }
        }
        let rows: Vec<&[u32]> = changed.iter().map(Vec::as_slice).collect();
        let b = ids(&rows);
        let (la, lb) = (model.logits(&a).unwrap(), model.logits(&b).unwrap());
        let before = max_abs_diff(&la.i((.., ..6)).unwrap(), &lb.i((.., ..6)).unwrap());
        let after = max_abs_diff(&la.i((.., 6..)).unwrap(), &lb.i((.., 6..)).unwrap());
        assert!(
            before < 1e-5,
            "{}: earlier positions moved by {before}",
            enc.kind()
        );
        assert!(after > 1e-4, "{}: later positions did not move", enc.kind());
    }
}

/// `fraction` is left out: its value at a position depends on how long the sequence is so
/// far, so no cache can hold it (the documents' reason to reject it).
#[test]
fn cached_generation_equals_the_full_forward_for_every_encoding() {
    // Per-layer patterns whose second layer adds to its input, or biases its scores;
    // RNoPE-SWA's, a window of 3 (shorter than the sequence) beside RoPE, then no position;
    // and Llama 4's, chunks of 5 (the prompt and the steps cross two of them).
    let patterns = [
        r#"["none", "sinusoidal"]"#,
        r#"["rope", "alibi"]"#,
        r#"[{"kind": "stack", "of": ["rope", {"kind": "window", "size": 3}]}, "none"]"#,
        r#"[{"kind": "stack", "of": ["rope", {"kind": "window", "size": 5, "chunked": true}]}, "none"]"#,
    ]
    .map(pattern);
    for enc in all_encodings()
        .into_iter()
        .filter(|e| e.kind() != "fraction")
        .chain(patterns)
    {
        let model = lm(enc.clone());
        let x = tokens();
        let full = model.logits(&x).unwrap();
        let mut cache = StackCache::default();
        // A prompt of four tokens in one call, then one token at a time, past the context
        // of 8 the model was configured for; each call scores the position after its last.
        let mut steps = vec![model.step(&x.i((.., ..4)).unwrap(), &mut cache).unwrap()];
        for t in 4..x.dim(1).unwrap() {
            steps.push(
                model
                    .step(&x.i((.., t..t + 1)).unwrap(), &mut cache)
                    .unwrap(),
            );
        }
        assert_eq!(cache.len(), 12);
        let cached = Tensor::stack(&steps, 1).unwrap();
        let diff = max_abs_diff(&full.i((.., 3..)).unwrap(), &cached);
        assert!(
            diff < 1e-4,
            "{}: cached generation differs by {diff}",
            enc.kind()
        );
    }
}

#[test]
fn a_learned_table_names_its_end() {
    let model = lm(EncodingConfig::new(posenc::learned::LearnedConfig {
        max_positions: 8,
    }));
    assert!(model.logits(&tokens().i((.., ..8)).unwrap()).is_ok());
    let e = model.logits(&tokens()).unwrap_err().to_string();
    assert!(
        e.contains("max_positions = 8") && e.contains("learned"),
        "{e}"
    );
    let mut cache = StackCache::default();
    model
        .step(&tokens().i((.., ..8)).unwrap(), &mut cache)
        .unwrap();
    let e = model
        .step(&tokens().i((.., 8..9)).unwrap(), &mut cache)
        .unwrap_err()
        .to_string();
    assert!(e.contains("8..9") && e.contains("max_positions = 8"), "{e}");
}

#[test]
fn the_head_is_the_token_embedding() {
    let (model, varmap) = lm_and_weights(EncodingConfig::from_kind("none").unwrap());
    let names: Vec<String> = varmap.data().lock().unwrap().keys().cloned().collect();
    // One (vocab, d_model) matrix serves as embedding and head: no other has vocab rows.
    let vocab_sized: Vec<&String> = names
        .iter()
        .filter(|n| varmap.data().lock().unwrap()[*n].as_tensor().dims().first() == Some(&30))
        .collect();
    assert_eq!(vocab_sized, [&"embed.weight".to_string()], "{names:?}");
    assert!(
        names.iter().any(|n| n == "stack.norm.weight"),
        "a final norm: {names:?}"
    );
    let logits = model.logits(&ids(&[&[3, 4]])).unwrap();
    assert_eq!(logits.dims(), &[1, 2, 30]);
}

/// Swapping the encoding of a built model is building it with that encoding on the same
/// weights (and changes what it computes).
#[test]
fn with_encoding_swaps_the_encoding_and_keeps_the_weights() {
    let rope = EncodingConfig::from_kind("rope").unwrap();
    let none = EncodingConfig::from_kind("none").unwrap();
    let (model, varmap) = lm_and_weights(rope);
    let cfg = LmConfig {
        encoding: none.clone(),
        ..model.config().clone()
    };
    let direct = LanguageModel::frozen(&cfg, &varmap, &Device::Cpu).unwrap();
    let x = tokens();
    let before = model.logits(&x).unwrap();
    let swapped = model.with_encoding(&none).unwrap();
    assert_eq!(swapped.config().encoding, none);
    let (a, b) = (swapped.logits(&x).unwrap(), direct.logits(&x).unwrap());
    assert!(max_abs_diff(&a, &b) < 1e-6);
    assert!(max_abs_diff(&a, &before) > 1e-3);
}

/// Layer `i` takes entry `i mod n` of a pattern, acting on that layer alone: the first
/// entry's addition is the embeddings' (a pattern `[sinusoidal, none]` is `sinusoidal`), a
/// later entry's adds to its layer's input, and swapping the entries changes the model.
#[test]
fn each_layer_takes_its_own_encoding_from_a_pattern() {
    let (model, _) = lm_and_weights(EncodingConfig::from_kind("none").unwrap());
    let x = tokens();
    let logits = |entries: &str| {
        let enc = if entries.starts_with('[') {
            pattern(entries)
        } else {
            EncodingConfig::from_kind(entries).unwrap()
        };
        let swapped = model.clone().with_encoding(&enc).unwrap();
        swapped.logits(&x).unwrap()
    };
    let same = |a: &str, b: &str| max_abs_diff(&logits(a), &logits(b)) < 1e-6;
    assert!(same(r#"["sinusoidal", "none"]"#, "sinusoidal"));
    assert!(same(r#"["rope", "rope"]"#, "rope"));
    assert!(same(r#"["alibi"]"#, "alibi"));
    assert!(same(r#"["rope", "rope", "rope", "none"]"#, "rope")); // 2 layers: no NoPE
    assert!(!same(r#"["sinusoidal", "sinusoidal"]"#, "sinusoidal"));
    assert!(!same(r#"["none", "alibi"]"#, r#"["alibi", "none"]"#));
    for one in [r#"["none", "alibi"]"#, r#"["alibi", "none"]"#] {
        assert!(!same(one, "alibi") && !same(one, "none"), "{one}");
    }
}

/// A sliding window of 3 in each of the two layers: a position's output reaches back
/// 2 × (3 − 1) = 4 positions and no further, with RoPE beside it as with nothing.
#[test]
fn a_window_hides_what_lies_before_it() {
    for of in [
        r#"["none", {"kind": "window", "size": 3}]"#,
        r#"["rope", {"kind": "window", "size": 3}]"#,
    ] {
        let enc: EncodingConfig = format!(r#"{{"kind": "stack", "of": {of}}}"#)
            .parse()
            .unwrap();
        let model = lm(enc);
        let a = tokens();
        let mut changed: Vec<Vec<u32>> = a.to_vec2().unwrap();
        for row in &mut changed {
            row[0] = (row[0] + 7) % 30;
        }
        let rows: Vec<&[u32]> = changed.iter().map(Vec::as_slice).collect();
        let b = ids(&rows);
        let (la, lb) = (model.logits(&a).unwrap(), model.logits(&b).unwrap());
        // Position 4 is the furthest the change reaches: its second layer reads 2 to 4,
        // whose first layer read 0 to 4.
        let reached = max_abs_diff(&la.i((.., 4)).unwrap(), &lb.i((.., 4)).unwrap());
        let beyond = max_abs_diff(&la.i((.., 5..)).unwrap(), &lb.i((.., 5..)).unwrap());
        assert!(
            reached > 1e-4,
            "{of}: the window's own positions did not move"
        );
        assert!(
            beyond < 1e-6,
            "{of}: positions past the window moved by {beyond}"
        );
        assert!(la
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .all(|v| v.is_finite()));
    }
}

/// The weights the explorer draws: one `(batch, heads, seq, seq)` tensor per layer, each
/// row a distribution over the keys a causal query may see (itself and before), and none
/// on keys a window of 3 shuts out.
#[test]
fn attention_weights_are_causal_distributions_per_layer() {
    let window: EncodingConfig = r#"{"kind": "window", "size": 3}"#.parse().unwrap();
    for (enc, reach) in [
        (EncodingConfig::from_kind("rope").unwrap(), usize::MAX),
        (window, 3),
    ] {
        let model = lm(enc);
        let weights = model.attention_weights(&tokens()).unwrap();
        assert_eq!(weights.len(), 2);
        for w in &weights {
            assert_eq!(w.dims(), &[2, 4, 12, 12]);
            let w: Vec<Vec<Vec<Vec<f32>>>> = (0..2)
                .map(|b| w.get(b).unwrap().to_vec3().unwrap())
                .collect();
            for row in w
                .iter()
                .flatten()
                .flatten()
                .enumerate()
                .map(|(n, r)| (n % 12, r))
            {
                let (i, row) = row;
                let sum: f32 = row.iter().sum();
                assert!((sum - 1.0).abs() < 1e-5, "row {i} sums to {sum}");
                for (j, &x) in row.iter().enumerate() {
                    let seen = j <= i && i - j < reach;
                    assert!(seen || x == 0.0, "query {i} gives key {j} weight {x}");
                }
            }
        }
    }
}

/// Coordinates on several axes per token reach the encoding as data, through the same
/// entry as one position per token: a model whose encoding reads no position runs on them
/// as on any positions, and one whose encoding reads one position per token refuses them
/// by name.
#[test]
fn coordinates_reach_the_encoding_through_the_same_entry() {
    let x = tokens();
    let seq = x.dim(1).unwrap();
    let coords: Vec<u32> = (0..seq as u32).flat_map(|i| [i / 4, i % 4]).collect();
    let grid = posenc::Positions::Coords {
        axes: 2,
        coords: &coords,
    };
    let (none, _) = lm_and_weights(EncodingConfig::from_kind("none").unwrap());
    let on_grid = none.logits_at(&x, grid).unwrap();
    assert!(max_abs_diff(&on_grid, &none.logits(&x).unwrap()) == 0.0);
    let (rope, _) = lm_and_weights(EncodingConfig::from_kind("rope").unwrap());
    let e = rope.logits_at(&x, grid).unwrap_err().to_string();
    assert!(e.contains("rope") && e.contains("2-D coordinates"), "{e}");
}
