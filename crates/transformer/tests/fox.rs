//! Attention with the Forgetting Transformer's forget gates (`fox`) against x-transformers'
//! `Attention(data_dependent_alibi = True)`, causal and bidirectional under padding: the
//! output, the weights, and the gradients in the input, the gates' weight and bias and
//! `W^Q` (fixtures by `scripts/make_fox_fixtures.py`). Then what the model builds of it:
//! gates of its own for every layer.

use candle_core::{Device, Tensor, Var};
use posenc::EncodingConfig;

use crate::common::{
    attend_whole, fixture_attention, fixtures, lm_weights, max_abs_diff, tiny_lm_config, var,
};

const TOL: f32 = 1e-5;

#[test]
fn attention_with_forget_gates_matches_x_transformers() {
    let f = fixtures("fox");
    for name in ["causal", "padded"] {
        let (mha, varmap, mask) = fixture_attention(&f, name, "fox", 2);
        let x = Var::from_tensor(&f[&format!("{name}.x")]).unwrap();
        let attended = attend_whole(&mha, x.as_tensor(), &mask);
        // Padded queries are left out: x-transformers gives them outputs of its own.
        let rows = f[&format!("{name}.keep")]
            .to_dtype(candle_core::DType::F32)
            .unwrap()
            .unsqueeze(2)
            .unwrap();
        let out = attended.output.broadcast_mul(&rows).unwrap();
        let by_row = |w: &Tensor| w.broadcast_mul(&rows.unsqueeze(1).unwrap()).unwrap();
        let weights = by_row(&attended.weights.unwrap());
        let d_out = max_abs_diff(&out, &f[&format!("{name}.out")]);
        let d_w = max_abs_diff(&weights, &by_row(&f[&format!("{name}.weights")]));

        let loss = (out * &f[&format!("{name}.w")]).unwrap().sum_all().unwrap();
        let grads = loss.backward().unwrap();
        let grad = |t: &Tensor| grads.get(t).unwrap().clone();
        let d_x = max_abs_diff(&grad(x.as_tensor()), &f[&format!("{name}.grad_x")]);
        let mut diffs = vec![("output", d_out), ("weights", d_w), ("∂x", d_x)];
        for (what, weight, expected) in [
            ("∂gate weight", "encoding.0.weight", "grad_gate_weight"),
            ("∂gate bias", "encoding.0.bias", "grad_gate_bias"),
            ("∂W^Q", "q_proj.weight", "grad_q_proj"),
        ] {
            let g = grad(var(&varmap, weight).as_tensor());
            diffs.push((what, max_abs_diff(&g, &f[&format!("{name}.{expected}")])));
        }
        println!("{name}: max |Δ| {diffs:?}");
        for (what, d) in diffs {
            assert!(d < TOL, "{name}: {what} off by {d:e}");
        }
    }
}

/// As in the paper, each layer reads gates of its own: a model of `n` layers holds `n`
/// gate maps, counted in its parameters, and layers given different gates attend
/// differently.
#[test]
fn every_layer_has_gates_of_its_own() {
    let cfg = posenc_transformer::LmConfig {
        layers: 3,
        ..tiny_lm_config(EncodingConfig::from_kind("fox").unwrap(), 16)
    };
    let varmap = lm_weights(&cfg);
    let names: Vec<String> = {
        let data = varmap.data().lock().unwrap();
        let mut names: Vec<String> = (data.keys())
            .filter(|k| k.starts_with("encoding."))
            .cloned()
            .collect();
        names.sort();
        names
    };
    let expected: Vec<String> = (0..3)
        .flat_map(|i| [format!("encoding.{i}.bias"), format!("encoding.{i}.weight")])
        .collect();
    assert_eq!(names, expected);
    let without = posenc_transformer::LmConfig {
        encoding: EncodingConfig::from_kind("none").unwrap(),
        ..cfg.clone()
    };
    let gates = 3 * cfg.heads as u128 * (cfg.d_model as u128 + 1);
    assert_eq!(cfg.parameter_count(), without.parameter_count() + gates);
    // Layer 1's gates matter to the output: change them and it changes.
    let model = |varmap: &candle_nn::VarMap| {
        posenc_transformer::LanguageModel::frozen(&cfg, varmap, &Device::Cpu).unwrap()
    };
    let ids = Tensor::new(&[[1u32, 5, 7, 2, 9, 4, 3, 8]], &Device::Cpu).unwrap();
    let before = model(&varmap).logits(&ids).unwrap();
    let bias = var(&varmap, "encoding.1.bias");
    bias.set(&(bias.as_tensor() - 6.0).unwrap()).unwrap();
    let after = model(&varmap).logits(&ids).unwrap();
    assert!(max_abs_diff(&before, &after) > 1e-4);
}

/// One sequence read through the cache past several of the tiled kernel's tiles (which ask
/// for the decay's bias tile by tile from the cached sums) gives the scores of one forward
/// over the whole (where the bias is one tensor).
#[test]
fn tiled_reading_equals_one_forward() {
    let cfg = tiny_lm_config(EncodingConfig::from_kind("fox").unwrap(), 16);
    let varmap = lm_weights(&cfg);
    // Gates that forget at different rates, so that the bias matters.
    let bias = var(&varmap, "encoding.0.bias");
    bias.set(&Tensor::new(&[0.5f32, 2.0, 4.0, 8.0], &Device::Cpu).unwrap())
        .unwrap();
    let model = posenc_transformer::LanguageModel::frozen(&cfg, &varmap, &Device::Cpu).unwrap();
    let len = 700;
    let ids: Vec<u32> = (0..len).map(|i| ((i * 7 + i / 11) % 30) as u32).collect();
    let ids = Tensor::from_vec(ids, (1, len), &Device::Cpu).unwrap();
    let whole = model.logits(&ids).unwrap();
    let mut cache = posenc_transformer::StackCache::default();
    let mut parts = Vec::new();
    for (start, n) in [(0, 300), (300, 1), (301, len - 301)] {
        let chunk = ids.narrow(1, start, n).unwrap();
        parts.push(model.logits_cached(&chunk, &mut cache).unwrap());
    }
    let read = Tensor::cat(&parts, 1).unwrap();
    let d = max_abs_diff(&read, &whole);
    assert!(d < 1e-4, "tiled reading differs by {d:e}");
}
