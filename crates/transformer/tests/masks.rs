//! Masks: causal and padding shapes, and no NaN even for a fully masked row, in f32, f16
//! and bf16.

use std::sync::Arc;

use candle_core::{DType, Device, IndexOp, Tensor};
use candle_nn::{VarBuilder, VarMap};
use posenc::none::NoEncoding;
use posenc_transformer::attention::{AttentionInput, MultiHeadAttention};
use posenc_transformer::{BlockConfig, Mask};

#[test]
fn causal_mask_with_offset() {
    let m = Mask::causal(2, 4, 2, &Device::Cpu).unwrap();
    let keep: Vec<Vec<u8>> = m
        .keep()
        .squeeze(0)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec2()
        .unwrap();
    assert_eq!(keep, vec![vec![1, 1, 1, 0], vec![1, 1, 1, 1]]);
}

#[test]
fn padding_mask_and_combination() {
    let ids = Tensor::new(&[[5u32, 6, 0], [7, 0, 0]], &Device::Cpu).unwrap();
    let pad = Mask::padding(&ids, 0).unwrap();
    assert_eq!(pad.keep().dims(), &[2, 1, 1, 3]);
    let both = Mask::causal(3, 3, 0, &Device::Cpu)
        .unwrap()
        .and(&pad)
        .unwrap();
    let keep: Vec<Vec<u8>> = both.keep().i((1, 0)).unwrap().to_vec2().unwrap();
    assert_eq!(keep, vec![vec![1, 0, 0], vec![1, 0, 0], vec![1, 0, 0]]);
}

fn attention(dtype: DType) -> MultiHeadAttention {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    // Initialise weights in f32, then reload them in the dtype under test.
    MultiHeadAttention::new(&BlockConfig::new(8, 2, 32), Some(none()), vb).unwrap();
    let tensors = varmap
        .data()
        .lock()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().to_dtype(dtype).unwrap()))
        .collect();
    let vb = VarBuilder::from_tensors(tensors, dtype, &Device::Cpu);
    MultiHeadAttention::new(&BlockConfig::new(8, 2, 32), Some(none()), vb).unwrap()
}

fn none() -> Arc<dyn posenc::PositionalEncoding> {
    Arc::new(NoEncoding::new(8, &Device::Cpu))
}

#[test]
fn fully_masked_rows_give_zeros_not_nan() {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let mha = attention(dtype);
        let x = (Tensor::randn(0f32, 1.0, (2, 3, 8), &Device::Cpu).unwrap() * 100.0)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        // Sequence 1 is all padding: every query of it sees no key.
        let keep = Tensor::new(&[[1u8, 1, 0], [0, 0, 0]], &Device::Cpu).unwrap();
        let mask = Mask::from_keep(&keep).unwrap();
        let attended = mha
            .forward(
                AttentionInput::own(&x)
                    .with_mask(Some(&mask))
                    .with_weights(),
            )
            .unwrap();
        let (out, weights) = (attended.output, attended.weights.unwrap());
        let w = weights.to_dtype(DType::F32).unwrap();
        let o = out.to_dtype(DType::F32).unwrap();
        for t in [&w, &o] {
            let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
            assert!(v.iter().all(|x| x.is_finite()), "{dtype:?}: NaN or inf");
        }
        // The empty rows have zero weights; the others sum to one and ignore the padded key.
        let empty: f32 = w
            .i(1)
            .unwrap()
            .abs()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar()
            .unwrap();
        assert_eq!(empty, 0.0, "{dtype:?}");
        let sums: Vec<Vec<f32>> = w
            .i((0, 0))
            .unwrap()
            .sum(1)
            .unwrap()
            .unsqueeze(0)
            .unwrap()
            .to_vec2()
            .unwrap();
        assert!(
            sums[0].iter().all(|s| (s - 1.0).abs() < 1e-2),
            "{dtype:?}: {sums:?}"
        );
        let padded_key: f32 = w
            .i((0, .., .., 2))
            .unwrap()
            .abs()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar()
            .unwrap();
        assert_eq!(padded_key, 0.0, "{dtype:?}");
    }
}

#[test]
fn a_mask_of_the_wrong_size_is_named() {
    let mha = attention(DType::F32);
    let x = Tensor::randn(0f32, 1.0, (2, 3, 8), &Device::Cpu).unwrap();
    let mask = Mask::from_keep(&Tensor::ones((2, 4), DType::U8, &Device::Cpu).unwrap()).unwrap();
    let e = mha
        .forward(AttentionInput::own(&x).with_mask(Some(&mask)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("mask of shape [2, 1, 1, 4]") && e.contains("[2, 2, 3, 3]"),
        "{e}"
    );
    let e = Mask::new(Tensor::ones((3, 3), DType::U8, &Device::Cpu).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 4"), "{e}");
}
