//! Attention with PaTH (`path`) against fla's own layer, `PaTHAttention`
//! (flash-linear-attention 0.6.0), run on a CPU by `scripts/make_path_layer_fixtures.py`:
//! 4 query heads over 2 key heads, with and without the forget gate, at lengths that cross
//! naive_path_attn's chunks. The output and the gradients in the input and every weight,
//! then the same output read through a key/value cache in pieces (the frame of turned keys
//! and the convolution's earlier rows kept between them).

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use posenc::{Direction, EncodingConfig, Target};
use posenc_transformer::attention::{AttentionInput, MultiHeadAttention};
use posenc_transformer::{BlockConfig, KvCache, Mask};

use crate::common::{fixtures, max_abs, max_abs_diff, var};

const HIDDEN: usize = 16;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;

/// Relative to the largest value compared: naive_path_attn computes in f32.
const TOL: f32 = 2e-5;

/// fla's name of each of our variables.
fn fla_name(ours: &str) -> String {
    match ours.strip_prefix("encoding.0.") {
        Some(rest) => rest.to_string(),
        None => ours.replace("out_proj", "o_proj"),
    }
}

/// Attention over case `case`'s weights, and its variables.
fn attention(f: &HashMap<String, Tensor>, case: &str, gated: bool) -> (MultiHeadAttention, VarMap) {
    let varmap = VarMap::new();
    // fla's projections as our attention loads them apart, shaped as the fixture's.
    for ours in ["q_proj", "k_proj", "v_proj", "out_proj"].map(|p| format!("{p}.weight")) {
        let t = &f[&format!("{case}.{}", fla_name(&ours))];
        let zero = candle_nn::init::ZERO;
        varmap
            .get(t.shape(), &ours, zero, DType::F32, &Device::Cpu)
            .unwrap();
    }
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let target = Target::new(HIDDEN, HEADS, Direction::Causal)
        .unwrap()
        .with_kv_heads(KV_HEADS)
        .unwrap();
    let settings = format!(r#"{{"kind": "path", "forget_gate": {gated}}}"#);
    let encoding: EncodingConfig = serde_json::from_str(&settings).unwrap();
    let encoding = encoding.build(&target, vb.pp("encoding")).unwrap();
    let cfg = BlockConfig {
        bias: false,
        kv_heads: KV_HEADS,
        ..BlockConfig::new(HIDDEN, HEADS, 4 * HIDDEN)
    };
    let mha = MultiHeadAttention::new(&cfg, Some(encoding), vb).unwrap();
    for (ours, v) in varmap.data().lock().unwrap().iter() {
        v.set(&f[&format!("{case}.{}", fla_name(ours))]).unwrap();
    }
    (mha, varmap)
}

/// `got` against `want`, relative to the largest of `want`.
fn relative(got: &Tensor, want: &Tensor) -> f32 {
    max_abs_diff(got, want) / max_abs(want).max(1e-6)
}

#[test]
fn path_attention_matches_flas_layer_forward_and_backward() {
    let f = fixtures("path_layer");
    for t in [1, 63, 64, 150] {
        for gated in [true, false] {
            let case = format!("t{t}.{}", if gated { "gated" } else { "ungated" });
            let (mha, varmap) = attention(&f, &case, gated);
            let x = Var::from_tensor(&f[&format!("{case}.x")]).unwrap();
            let mask = Mask::causal(t, t, 0, &Device::Cpu).unwrap();
            let out = mha
                .forward(AttentionInput::own(x.as_tensor()).with_mask(Some(&mask)))
                .unwrap()
                .output;
            let mut diffs = vec![(
                "output".to_string(),
                relative(&out, &f[&format!("{case}.out")]),
            )];
            let loss = (&out * &f[&format!("{case}.r")])
                .unwrap()
                .sum_all()
                .unwrap();
            let grads = loss.backward().unwrap();
            let grad = |v: &Tensor| grads.get(v).expect("a gradient").clone();
            let want = &f[&format!("{case}.grad.x")];
            diffs.push(("∂x".into(), relative(&grad(x.as_tensor()), want)));
            let names: Vec<String> = varmap.data().lock().unwrap().keys().cloned().collect();
            for ours in names {
                let want = &f[&format!("{case}.grad.{}", fla_name(&ours))];
                let got = grad(var(&varmap, &ours).as_tensor());
                diffs.push((format!("∂{ours}"), relative(&got, want)));
            }
            println!("{case}: {diffs:?}");
            for (what, d) in diffs {
                assert!(d < TOL, "{case}: {what} off by {d:e} of its largest value");
            }
        }
    }
}

/// The fixtures, and the gated case's attention at 150 tokens (across two chunk boundaries)
/// with its input.
fn gated_150() -> (HashMap<String, Tensor>, MultiHeadAttention, Tensor) {
    let f = fixtures("path_layer");
    let (mha, _) = attention(&f, "t150.gated", true);
    let x = f["t150.gated.x"].clone();
    (f, mha, x)
}

/// Generation reads the same outputs: the prompt through the cache in pieces of several
/// tokens and of one, each piece's keys turned into the frame the cache keeps, and the
/// convolution reading the rows kept before it.
#[test]
fn path_attention_through_a_cache_equals_flas_whole_forward() {
    let (f, mha, x) = gated_150();
    let want = &f["t150.gated.out"];
    let mut cache = KvCache::default();
    let mut parts = Vec::new();
    for (start, n) in [(0, 70), (70, 1), (71, 1), (72, 78)] {
        let piece = x.narrow(1, start, n).unwrap();
        let out = mha
            .forward(AttentionInput::own(&piece).with_cache(&mut cache))
            .unwrap()
            .output;
        parts.push(out);
    }
    let read = Tensor::cat(&parts, 1).unwrap();
    let d = relative(&read, want);
    assert!(
        d < TOL,
        "read through the cache, off by {d:e} of the largest value"
    );
}

/// Attention reads PaTH's scores a chunk of queries at a time; asked for its weights, it
/// gives every chunk's rows, causal and summing to one, and the same output.
#[test]
fn path_attention_asked_for_its_weights_gives_every_row() {
    let (f, mha, x) = gated_150();
    let mask = Mask::causal(150, 150, 0, &Device::Cpu).unwrap();
    let input = || AttentionInput::own(&x).with_mask(Some(&mask));
    let plain = mha.forward(input()).unwrap();
    assert!(plain.weights.is_none(), "weights not asked for");
    let asked = mha.forward(input().with_weights()).unwrap();
    assert_eq!(max_abs_diff(&asked.output, &plain.output), 0.0);
    let weights = asked.weights.expect("the weights asked for");
    assert_eq!(weights.dims(), [x.dim(0).unwrap(), HEADS, 150, 150]);
    let sums = weights.sum(3).unwrap();
    let ones = sums.ones_like().unwrap();
    assert!(max_abs_diff(&sums, &ones) < 1e-5, "rows sum to one");
    let above = (weights
        .broadcast_mul(&(1.0 - Tensor::tril2(150, DType::F32, &Device::Cpu).unwrap()).unwrap()))
    .unwrap();
    assert_eq!(max_abs(&above), 0.0, "no weight on a later key");
    let want = &f["t150.gated.out"];
    assert!(relative(&asked.output, want) < TOL);
}
