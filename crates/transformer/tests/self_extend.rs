//! Self-extend against the paper's own formulation (fixtures by
//! `scripts/make_self_extend_fixtures.py`, after LongLM's `self_extend_forward`): read
//! whole, through the cache in chunks, and a token at a time; and what cannot work is
//! refused by name.

use candle_core::{Device, Tensor};
use posenc::EncodingConfig;
use posenc_transformer::attention::AttentionInput;
use posenc_transformer::{KvCache, LanguageModel, SelfExtend, Streaming};

use crate::common::{
    attend_whole, fixture_attention, fixtures, lm_weights, max_abs_diff, tiny_lm_config,
};

const TOL: f32 = 1e-5;

#[test]
fn self_extend_matches_the_papers_formulation() {
    let f = fixtures("self_extend");
    let (plain, _, mask) = fixture_attention(&f, "causal", "rope", 2);
    let se = plain
        .clone()
        .with_self_extend(SelfExtend::new(4, 8).unwrap());
    let x = &f["causal.x"];
    let whole = |mha| attend_whole(mha, x, &mask);
    // Without it, the fixture's plain attention: the same weights and rotation.
    assert!(max_abs_diff(&whole(&plain).output, &f["causal.plain"]) < TOL);
    let read = whole(&se);
    let d_out = max_abs_diff(&read.output, &f["causal.out"]);
    let d_w = max_abs_diff(&read.weights.unwrap(), &f["causal.weights"]);
    assert!(
        d_out < TOL && d_w < TOL,
        "output off by {d_out:e}, weights by {d_w:e}"
    );
    // Through the cache, in chunks that straddle the window and the groups, and a token
    // at a time.
    let n = x.dim(1).unwrap();
    for pieces in [vec![13, 1, n - 14], vec![1; n]] {
        let mut cache = KvCache::default();
        let mut outs = Vec::new();
        let mut start = 0;
        for len in pieces {
            let chunk = x.narrow(1, start, len).unwrap();
            let input = AttentionInput::own(&chunk).with_cache(&mut cache);
            outs.push(se.forward(input).unwrap().output);
            start += len;
        }
        let d = max_abs_diff(&Tensor::cat(&outs, 1).unwrap(), &f["causal.out"]);
        assert!(d < TOL, "read through the cache: off by {d:e}");
    }
}

#[test]
fn what_self_extend_cannot_regroup_is_refused_by_name() {
    let model = |kind: &str| {
        let cfg = tiny_lm_config(EncodingConfig::from_kind(kind).unwrap(), 16);
        LanguageModel::frozen(&cfg, &lm_weights(&cfg), &Device::Cpu).unwrap()
    };
    for kind in ["none", "alibi", "sinusoidal", "fox"] {
        let err = model(kind)
            .with_self_extend(SelfExtend::new(2, 8).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("self-extend") && err.contains(kind), "{err}");
    }
    let err = model("rope")
        .with_self_extend(SelfExtend::new(2, 32).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("32") && err.contains("16") && err.contains("context"),
        "{err}"
    );
    for (group, window, named) in [(0, 8, "group"), (2, 0, "window"), (3, 8, "multiple")] {
        let err = SelfExtend::new(group, window).unwrap_err().to_string();
        assert!(err.contains(named), "{err}");
    }
    // A rolling cache moves far keys too: the two together are refused.
    let lm = model("rope")
        .with_self_extend(SelfExtend::new(2, 8).unwrap())
        .unwrap();
    let mut cache = lm.rolling_cache(Streaming::new(2, 8).unwrap()).unwrap();
    let ids = Tensor::new(&[[1u32, 2, 3]], &Device::Cpu).unwrap();
    let err = lm.logits_cached(&ids, &mut cache).unwrap_err().to_string();
    assert!(
        err.contains("self-extend") && err.contains("rolling"),
        "{err}"
    );
}
