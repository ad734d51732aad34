//! The documents' claims about attention and position, on the real model.

use crate::common;

use candle_core::{Device, IndexOp, Tensor};
use common::*;
use posenc::EncodingConfig;
use posenc_transformer::stack::StackInput;
use posenc_transformer::{Mask, Transformer};

fn encode(model: &Transformer, src: &Tensor) -> Tensor {
    let mask = Mask::padding(src, PAD).unwrap();
    model.encode(src, Some(&mask)).unwrap()
}

/// Attention alone ignores order: with no encoding, permuting the source tokens permutes
/// the encoder's outputs the same way. With sinusoids it no longer does.
#[test]
fn encoder_is_permutation_equivariant_only_without_positions() {
    let tokens = [3u32, 7, 5, 9, 4, 11];
    let perm = [4usize, 2, 0, 5, 1, 3];
    let permuted: Vec<u32> = perm.iter().map(|&i| tokens[i]).collect();
    let perm_idx = Tensor::new(
        perm.iter().map(|&i| i as u32).collect::<Vec<_>>(),
        &Device::Cpu,
    )
    .unwrap();
    for (kind, equivariant) in [
        ("none", true),
        ("sinusoidal", false),
        ("rope", false),
        ("alibi", false),
    ] {
        let (cfg, varmap, _) = tiny(EncodingConfig::from_kind(kind).unwrap());
        let model = frozen(&cfg, &varmap);
        let out = encode(&model, &ids(&[&tokens])).squeeze(0).unwrap();
        let out_perm = encode(&model, &ids(&[&permuted])).squeeze(0).unwrap();
        let diff = max_abs_diff(&out.index_select(&perm_idx, 0).unwrap(), &out_perm);
        if equivariant {
            assert!(
                diff < 1e-5,
                "{kind}: permuting the input changed more than the order ({diff})"
            );
        } else {
            assert!(
                diff > 1e-3,
                "{kind}: the encoder ignored word order ({diff})"
            );
        }
    }
}

/// Changing a future target token leaves every earlier decoder output unchanged.
#[test]
fn decoder_is_causal() {
    for enc in all_encodings() {
        let (cfg, varmap, _) = tiny(enc.clone());
        let model = frozen(&cfg, &varmap);
        let src = ids(&[&[3, 4, 5, 6]]);
        let memory = encode(&model, &src);
        let src_mask = Mask::padding(&src, PAD).unwrap();
        let run = |tgt: &[u32]| {
            let tgt = ids(&[tgt]);
            let mask = Transformer::target_mask(&tgt, PAD).unwrap();
            model
                .decode(&tgt, &memory, Some(&src_mask), Some(&mask), None)
                .unwrap()
        };
        let a = run(&[1, 5, 6, 7, 8]);
        let b = run(&[1, 5, 6, 12, 13]);
        let earlier = max_abs_diff(&a.i((.., ..3)).unwrap(), &b.i((.., ..3)).unwrap());
        let later = max_abs_diff(&a.i((.., 3..)).unwrap(), &b.i((.., 3..)).unwrap());
        // `fraction` sees the whole length, which does not change here either.
        assert!(
            earlier < 1e-5,
            "{}: the future leaked into the past ({earlier})",
            enc.kind()
        );
        assert!(
            later > 1e-4,
            "{}: changing the tokens changed nothing",
            enc.kind()
        );
    }
}

/// Padding a sequence leaves its real tokens' outputs unchanged (every encoding but
/// `fraction`, whose values depend on the padded length by design).
#[test]
fn padding_leaves_real_outputs_unchanged() {
    for enc in all_encodings()
        .into_iter()
        .filter(|e| e.kind() != "fraction")
    {
        let (cfg, varmap, _) = tiny(enc.clone());
        let model = frozen(&cfg, &varmap);
        let short = ids(&[&[3, 4, 5]]);
        let padded = ids(&[&[3, 4, 5, PAD, PAD]]);
        let a = encode(&model, &short);
        let b = encode(&model, &padded).i((.., ..3)).unwrap();
        assert!(max_abs_diff(&a, &b) < 1e-5, "{}: encoder", enc.kind());

        // Decoder side: padded target and padded source.
        let (tgt, tgt_padded) = (ids(&[&[1, 6, 7]]), ids(&[&[1, 6, 7, PAD]]));
        let dec = |src: &Tensor, memory: &Tensor, tgt: &Tensor| {
            let src_mask = Mask::padding(src, PAD).unwrap();
            let mask = Transformer::target_mask(tgt, PAD).unwrap();
            model
                .decode(tgt, memory, Some(&src_mask), Some(&mask), None)
                .unwrap()
        };
        let y = dec(&short, &a, &tgt);
        let y_padded = dec(&padded, &encode(&model, &padded), &tgt_padded)
            .i((.., ..3))
            .unwrap();
        assert!(
            max_abs_diff(&y, &y_padded) < 1e-5,
            "{}: decoder",
            enc.kind()
        );
    }
}

/// A decoder-only (GPT-style) model is the encoder stack under a causal mask: the same
/// parts, and the future does not leak.
#[test]
fn encoder_stack_with_a_causal_mask_is_a_decoder_only_model() {
    for kind in ["sinusoidal", "rope", "alibi"] {
        let (cfg, varmap, _) = tiny(EncodingConfig::from_kind(kind).unwrap());
        let model = frozen(&cfg, &varmap);
        let (embed, _) = model.embeddings();
        let run = |tokens: &[u32]| {
            let x = embed.forward(&ids(&[tokens]), 0.into()).unwrap();
            let mask = Mask::causal(tokens.len(), tokens.len(), 0, &Device::Cpu).unwrap();
            model
                .encoder()
                .forward(StackInput::new(&x, Some(&mask)))
                .unwrap()
                .0
        };
        let (a, b) = (run(&[3, 4, 5, 6]), run(&[3, 4, 9, 10]));
        assert!(
            max_abs_diff(&a.i((.., ..2)).unwrap(), &b.i((.., ..2)).unwrap()) < 1e-5,
            "{kind}"
        );
        assert!(
            max_abs_diff(&a.i((.., 2..)).unwrap(), &b.i((.., 2..)).unwrap()) > 1e-4,
            "{kind}"
        );
    }
}
