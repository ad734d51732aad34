//! Incremental decoding with a key/value cache gives the same outputs as the full masked
//! forward pass, for every encoding: offsets reach the encoding's hooks.

use crate::common;

use candle_core::{IndexOp, Tensor};
use common::*;
use posenc_transformer::StackCache;
use posenc_transformer::{Mask, Transformer};

#[test]
fn cached_steps_equal_the_full_pass() {
    for enc in all_encodings()
        .into_iter()
        .filter(|e| e.kind() != "fraction")
    {
        let (cfg, varmap, _) = tiny(enc.clone());
        let model = frozen(&cfg, &varmap);
        let src = ids(&[&[3, 4, 5, 6, 7], &[8, 9, 10, PAD, PAD]]);
        let src_mask = Mask::padding(&src, PAD).unwrap();
        let memory = model.encode(&src, Some(&src_mask)).unwrap();
        let tgt = ids(&[&[1, 5, 6, 7, 8, 9], &[1, 11, 12, 13, 14, 15]]);
        let full_mask = Transformer::target_mask(&tgt, PAD).unwrap();
        let full = model
            .decode(&tgt, &memory, Some(&src_mask), Some(&full_mask), None)
            .unwrap();

        let mut cache = StackCache::default();
        let mut steps = Vec::new();
        // The first two tokens in one call (a prompt), then one at a time.
        let prompt_mask = Mask::causal(2, 2, 0, src.device()).unwrap();
        steps.push(
            model
                .decode(
                    &tgt.i((.., ..2)).unwrap(),
                    &memory,
                    Some(&src_mask),
                    Some(&prompt_mask),
                    Some(&mut cache),
                )
                .unwrap(),
        );
        for t in 2..tgt.dim(1).unwrap() {
            let step = tgt.i((.., t..t + 1)).unwrap();
            steps.push(
                model
                    .decode(&step, &memory, Some(&src_mask), None, Some(&mut cache))
                    .unwrap(),
            );
        }
        assert_eq!(cache.len(), 6);
        let incremental = Tensor::cat(&steps, 1).unwrap();
        let diff = max_abs_diff(&full, &incremental);
        assert!(
            diff < 1e-5,
            "{}: cached decoding differs by {diff}",
            enc.kind()
        );
    }
}
