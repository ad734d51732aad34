//! The training path is differentiable end to end: every parameter gets a gradient and a
//! few AdamW steps lower the loss, whichever hook the encoding uses. Also: the fused
//! inference kernels and the differentiable training path compute the same function.

use crate::common;

use candle_core::{Tensor, D};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use common::*;
use posenc::EncodingConfig;
use posenc_transformer::{Mask, Transformer};

fn batch() -> (Tensor, Tensor, Tensor) {
    // A copy task: the target repeats the source.
    let src = ids(&[&[3, 4, 5, 6], &[7, 8, 9, PAD]]);
    let tgt_in = ids(&[&[1, 3, 4, 5, 6], &[1, 7, 8, 9, PAD]]);
    let tgt_out = ids(&[&[3, 4, 5, 6, 2], &[7, 8, 9, 2, PAD]]);
    (src, tgt_in, tgt_out)
}

fn loss(model: &Transformer) -> Tensor {
    let (src, tgt_in, tgt_out) = batch();
    let src_mask = Mask::padding(&src, PAD).unwrap();
    let tgt_mask = Transformer::target_mask(&tgt_in, PAD).unwrap();
    let logp = model
        .forward(&src, &tgt_in, Some(&src_mask), Some(&tgt_mask))
        .unwrap();
    let vocab = logp.dim(D::Minus1).unwrap();
    candle_nn::loss::nll(
        &logp.reshape(((), vocab)).unwrap(),
        &tgt_out.flatten_all().unwrap(),
    )
    .unwrap()
}

#[test]
fn every_parameter_gets_a_gradient_and_the_loss_falls() {
    for kind in ["sinusoidal", "learned", "rope", "alibi", "t5"] {
        let (_, varmap, model) = tiny(EncodingConfig::from_kind(kind).unwrap());
        let first = loss(&model);
        let grads = first.backward().unwrap();
        for (name, var) in varmap.data().lock().unwrap().iter() {
            let g = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("{kind}: no gradient for {name}"));
            let norm: f32 = g.sqr().unwrap().sum_all().unwrap().to_scalar().unwrap();
            assert!(norm > 0.0, "{kind}: zero gradient for {name}");
        }
        let params = ParamsAdamW {
            lr: 3e-3,
            weight_decay: 0.0,
            ..Default::default()
        };
        let mut opt = AdamW::new(varmap.all_vars(), params).unwrap();
        let start: f32 = first.to_scalar().unwrap();
        for _ in 0..30 {
            opt.backward_step(&loss(&model)).unwrap();
        }
        let end: f32 = loss(&model).to_scalar().unwrap();
        assert!(end < 0.5 * start, "{kind}: loss {start} → {end}");
    }
}

#[test]
fn fused_inference_equals_the_differentiable_path() {
    for kind in ["sinusoidal", "rope", "alibi"] {
        let (cfg, varmap, trainable) = tiny(EncodingConfig::from_kind(kind).unwrap());
        let frozen = frozen(&cfg, &varmap);
        let a: f32 = loss(&trainable).to_scalar().unwrap();
        let b: f32 = loss(&frozen).to_scalar().unwrap();
        assert!((a - b).abs() < 1e-5, "{kind}: {a} vs {b}");
    }
    // And the frozen model really has nothing to differentiate.
    let (cfg, varmap, _) = tiny(EncodingConfig::from_kind("rope").unwrap());
    assert!(!loss(&frozen(&cfg, &varmap)).track_op());
}
