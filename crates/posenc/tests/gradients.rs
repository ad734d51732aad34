//! Training must be able to differentiate through every hook: a parameter upstream of
//! each encoding's operations receives a non-zero gradient, and so do the encodings'
//! own learned weights.

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use posenc::{BiasContext, EmbedContext, InputContext, RotateContext, ScoreContext};
use posenc::{Direction, EncodingConfig, PositionalEncoding, Target, Tokens};

const D: usize = 8;
const HEADS: usize = 2;
const T: usize = 5;

fn grad_norm(grads: &candle_core::backprop::GradStore, t: &Tensor) -> f32 {
    grads
        .get(t)
        .map(|g| {
            g.sqr()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
        })
        .unwrap_or(0.0)
}

/// Runs all three hooks the way attention does, from a parameter `w` upstream:
/// embeddings = x·w → add → split heads → rotate q and k → scores + bias (given the tokens,
/// as the model asks for it, through the transforms read from the embeddings where there
/// are any) (+ the decay read from the embeddings, + the bias read from the scores) → softmax (beside the sink, if there is one). The loss reads the biased scores as well as the weights:
/// softmax ignores a constant added to a whole row, so a weight that only shifts rows (the
/// last bias of FIRE's MLP) has an exactly zero gradient through the weights, and a test of
/// it there would pass or fail on rounding alone.
fn forward(enc: &dyn PositionalEncoding, w: &Tensor) -> Tensor {
    let dev = Device::Cpu;
    let x = Tensor::randn(0f32, 1.0, (1, T, D), &dev).unwrap();
    // Digits for an encoding that reads the tokens (Abacus's default ids), a number of
    // them then another token, so that places vary.
    let ids: Vec<u32> = (0..T as u32)
        .map(|i| if i % 4 == 3 { 0 } else { 4 + i % 10 })
        .collect();
    let ids = Tensor::from_vec(ids, (1, T), &dev).unwrap();
    let h = enc
        .embed(
            &x.broadcast_matmul(w).unwrap(),
            &EmbedContext::at(0).with_tokens(Tokens::new(&ids)),
        )
        .unwrap();
    let heads = h
        .reshape((1, T, HEADS, D / HEADS))
        .unwrap()
        .transpose(1, 2)
        .unwrap();
    let q = enc.rotate(&heads, &RotateContext::query(0)).unwrap();
    let k = enc
        .rotate(&(&heads * 0.5).unwrap(), &RotateContext::key(0))
        .unwrap();
    let read = enc.read_input(&InputContext::new(&h)).unwrap();
    // Scores through the transforms that turn the keys (PaTH), else plain.
    let mut scores = match &read.transforms {
        Some(path) => path.scores(&q, &k, None).unwrap().0,
        None => q.matmul(&k.t().unwrap()).unwrap(),
    };
    let tokens = Tokens::new(&ids);
    if let Some(bias) = enc
        .bias(&BiasContext::new(T, T, 0, 0).with_tokens(Some(tokens)))
        .unwrap()
    {
        // One bias for every sequence, or one each (read from the tokens).
        let bias = match bias.rank() {
            3 => bias.unsqueeze(0).unwrap(),
            _ => bias,
        };
        scores = scores.broadcast_add(&bias).unwrap();
    }
    if let Some(decay) = read.decay {
        scores = (scores + decay.bias().unwrap()).unwrap();
    }
    if enc.capabilities().reads_scores {
        if let Some(extra) = enc
            .score_bias(&ScoreContext {
                q: &q,
                logits: &scores,
            })
            .unwrap()
        {
            scores = (scores + extra).unwrap();
        }
    }
    if let Some(sink) = enc.capabilities().sink().unwrap() {
        // A column more in the softmax, as attention puts it.
        let column = sink.reshape((1, HEADS, 1, 1)).unwrap();
        let column = column.broadcast_as((1, HEADS, T, 1)).unwrap();
        scores = Tensor::cat(&[&scores, &column], 3).unwrap();
    }
    let attn = candle_nn::ops::softmax(&scores, candle_core::D::Minus1).unwrap();
    let target = Tensor::randn(0f32, 1.0, attn.shape(), &dev).unwrap();
    let read_scores = (&scores * Tensor::randn(0f32, 1.0, scores.shape(), &dev).unwrap())
        .unwrap()
        .sum_all()
        .unwrap();
    let on_keys = attn.narrow(3, 0, T).unwrap();
    let read_weights = (on_keys.matmul(&q).unwrap().sum_all().unwrap()
        + (attn * target).unwrap().sum_all().unwrap())
    .unwrap();
    (read_weights + read_scores).unwrap()
}

#[test]
fn every_encoding_passes_gradients_upstream_and_to_its_weights() {
    for kind in EncodingConfig::kinds() {
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
        let enc = EncodingConfig::from_kind(kind)
            .unwrap()
            .build(
                &Target::new(D, HEADS, Direction::Bidirectional).unwrap(),
                vb,
            )
            .unwrap();
        let w = Var::randn(0f32, 1.0, (D, D), &Device::Cpu).unwrap();
        // A per-layer pattern acts through its layers: the first layer's encoding.
        let loss = forward(&*posenc::for_layer(&enc, 0), w.as_tensor());
        let grads = loss.backward().unwrap();
        assert!(
            grad_norm(&grads, w.as_tensor()) > 0.0,
            "{kind}: no gradient upstream"
        );
        for (name, var) in varmap.data().lock().unwrap().iter() {
            assert!(
                grad_norm(&grads, var.as_tensor()) > 0.0,
                "{kind}: no gradient for its weight {name}"
            );
        }
    }
}

#[test]
fn rope_uses_the_fused_kernel_only_without_gradient() {
    // candle's fused rope drops the gradient; with a tracked input we must get one, and
    // it must be the true one: the loss Σ c·R(q) has gradient Rᵀc = R(−θ)c.
    let enc = EncodingConfig::from_kind("rope")
        .unwrap()
        .build_untrained(D, 1, &Device::Cpu)
        .unwrap();
    let q = Var::randn(0f32, 1.0, (1, 1, T, D), &Device::Cpu).unwrap();
    let c = Tensor::randn(0f32, 1.0, (1, 1, T, D), &Device::Cpu).unwrap();
    let loss = (enc.rotate(q.as_tensor(), &RotateContext::query(0)).unwrap() * &c)
        .unwrap()
        .sum_all()
        .unwrap();
    let grad = loss.backward().unwrap().get(q.as_tensor()).unwrap().clone();
    // ⟨grad, v⟩ = ⟨c, R v⟩ for any v: compare against the fused forward on a plain tensor.
    let v = Tensor::randn(0f32, 1.0, (1, 1, T, D), &Device::Cpu).unwrap();
    let lhs = (&grad * &v)
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let rhs = (&c * enc.rotate(&v, &RotateContext::query(0)).unwrap())
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!((lhs - rhs).abs() < 1e-4, "{lhs} vs {rhs}");
}
