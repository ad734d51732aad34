//! The documents' claims about positional encodings, as property tests over random sizes.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use posenc::alibi::alibi_slopes;
use posenc::analysis::{analyze, Properties, Setting};
use posenc::t5::relative_position_bucket;
use posenc::{BiasContext, EmbedContext, RotateContext};
use posenc::{EncodingConfig, Form, PositionalEncoding};
use posenc_testkit::max_abs_diff;
use proptest::prelude::*;

fn build(kind: &str, d_model: usize, heads: usize) -> Arc<dyn PositionalEncoding> {
    EncodingConfig::from_kind(kind)
        .unwrap()
        .build_untrained(d_model, heads, &Device::Cpu)
        .unwrap()
}

fn props(kind: &str, d_model: usize, heads: usize, len: usize, shift: usize) -> Properties {
    let setting = Setting {
        d_model,
        heads,
        len,
        shift,
    };
    analyze(&*build(kind, d_model, heads), setting).unwrap()
}

/// Even model widths and a sequence longer than the width plus the shift, so the
/// linear fit of the shift is over-determined.
fn sizes() -> impl Strategy<Value = (usize, usize, usize)> {
    (1usize..=12, 1usize..=6).prop_flat_map(|(half, shift)| {
        let d = 2 * half;
        (Just(d), (d + shift + 2)..(d + shift + 40), Just(shift))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// PE(p + k) = M_k PE(p) for one matrix M_k at every position; unique, bounded, and
    /// a position's vector does not depend on the sentence's length.
    #[test]
    fn sinusoids_shift_linearly((d, len, k) in sizes(), concat in any::<bool>()) {
        let kind = if concat { "sinusoidal-concat" } else { "sinusoidal" };
        let p = props(kind, d, 1, len, k);
        prop_assert!(p.shift_residual.unwrap() < 1e-5, "{p:?}");
        prop_assert!(p.uniqueness.unwrap() > 1e-3, "{p:?}");
        prop_assert!(p.max_abs <= 1.0 + 1e-6);
        prop_assert_eq!(p.length_drift, 0.0);
        // PE(p)·PE(q) = Σ cos((p − q)θ_i): depends on the offset only, symmetric in ±k.
        prop_assert!(p.relative_residual < 1e-5, "{p:?}");
        prop_assert!(p.symmetry_residual < 1e-5, "{p:?}");
    }

    /// No single linear map shifts the naive encodings (index and fraction are affine in
    /// p, binary and one sine are not linear at all). Binary codes need two conditions: no
    /// wrapping (with 2^d ≤ len + k positions repeat, and a shift of a periodic code is a
    /// permutation, which is linear) and clearly more positions than dimensions (with
    /// len − k barely above d, a few ±1 codes can be fit exactly: d 4, len 8, k 2 was).
    #[test]
    fn naive_encodings_do_not_shift_linearly((d, len, k) in sizes(), which in 0usize..4) {
        let kind = ["fraction", "index", "binary", "sine-single"][which];
        prop_assume!(
            kind != "binary" || (d < 63 && (1usize << d) > len + k && len >= 2 * d + 2 + k)
        );
        let p = props(kind, d, 1, len, k);
        prop_assert!(p.shift_residual.unwrap() > 1e-3, "{kind}: {p:?}");
    }

    /// Only `fraction` gives a position a different vector when the sentence grows.
    #[test]
    fn only_fraction_drifts_with_length(d in 1usize..16, len in 3usize..40) {
        for kind in ["sinusoidal", "learned", "index", "binary", "sine-single"] {
            let d = if kind == "sinusoidal" { 2 * d } else { d };
            prop_assert_eq!(props(kind, d, 1, len, 1).length_drift, 0.0, "{}", kind);
        }
        prop_assert!(props("fraction", d, 1, len, 1).length_drift > 0.1);
    }

    /// RoPE: ⟨R_m q, R_n k⟩ depends on n − m only, in both layouts and with partial rotation.
    #[test]
    fn rope_scores_depend_on_offset_only(
        half in 1usize..8, heads in 1usize..4, len in 2usize..48,
        interleaved in any::<bool>(), partial in any::<bool>(),
    ) {
        let head_dim = 4 * half;
        let d = head_dim * heads;
        let cfg = EncodingConfig::new(posenc::rope::RopeConfig {
            base: 10_000.0,
            layout: if interleaved { posenc::PairLayout::Interleaved } else { Default::default() },
            rotary_fraction: if partial { 0.5 } else { 1.0 },
            position_scale: 1.0,
            scaling: None,
        });
        let enc = cfg.build_untrained(d, heads, &Device::Cpu).unwrap();
        let p = analyze(&*enc, Setting { d_model: d, heads, len, shift: 1 }).unwrap();
        prop_assert!(p.relative_residual < 1e-5, "{p:?}");
        prop_assert!(p.max_abs <= 1.0 + 1e-6);
    }

    /// xPos: queries scaled up and keys down by inverse factors, so the scores still depend
    /// on j − i only (with the same scale for both, they would grow with i + j).
    #[test]
    fn xpos_scores_are_relative(half in 1usize..8, heads in 1usize..4, len in 2usize..48,
                                scale_base in 4.0f64..600.0) {
        let head_dim = 2 * half;
        let d = head_dim * heads;
        let cfg = EncodingConfig::new(posenc::xpos::XposConfig { scale_base, ..Default::default() });
        let enc = cfg.build_untrained(d, heads, &Device::Cpu).unwrap();
        let p = analyze(&*enc, Setting { d_model: d, heads, len, shift: 1 }).unwrap();
        prop_assert!(p.relative_residual < 1e-4, "{p:?}");
    }

    /// ALiBi: the bias depends on j − i only, the symmetric form is symmetric and every
    /// head's penalty grows linearly with distance.
    #[test]
    fn alibi_is_relative_symmetric_and_decays(heads in 1usize..20, len in 2usize..40) {
        let p = props("alibi", 8, heads, len, 1);
        prop_assert_eq!(p.relative_residual, 0.0);
        prop_assert_eq!(p.symmetry_residual, 0.0);
        prop_assert_eq!(p.monotone_until, len - 1);
        let step = p.decay[1] - p.decay[0];
        for w in p.decay.windows(2) {
            prop_assert!((w[1] - w[0] - step).abs() < 1e-5, "not linear: {:?}", p.decay);
        }
    }

    /// Slopes: for 2^n heads a geometric sequence 2^(−8/n·h); otherwise the 2^⌊log₂ n⌋
    /// geometric slopes plus every other slope of twice as many heads. All in (0, 1), distinct.
    #[test]
    fn alibi_slopes_follow_press_et_al(heads in 1usize..70) {
        let s = alibi_slopes(heads);
        prop_assert_eq!(s.len(), heads);
        let c = 1usize << heads.ilog2();
        for (h, &m) in s.iter().enumerate().take(c) {
            prop_assert!((m - 2f64.powf(-8.0 * (h + 1) as f64 / c as f64)).abs() < 1e-12);
        }
        let finer: Vec<f64> = (1..=2 * c).map(|h| 2f64.powf(-8.0 * h as f64 / (2 * c) as f64)).collect();
        for (i, &m) in s.iter().enumerate().skip(c) {
            prop_assert!((m - finer[2 * (i - c)]).abs() < 1e-12);
        }
        let mut sorted = s.clone();
        sorted.sort_by(f64::total_cmp);
        sorted.dedup();
        prop_assert_eq!(sorted.len(), heads);
        prop_assert!(s.iter().all(|&m| m > 0.0 && m < 1.0));
    }

    /// T5 buckets are in range, grow with distance, and tell directions apart when bidirectional.
    #[test]
    fn t5_buckets_are_monotone(log_buckets in 2u32..7, max_distance in 40usize..300, bidirectional in any::<bool>()) {
        let buckets = 1usize << log_buckets;
        let bucket = |r| relative_position_bucket(r, bidirectional, buckets, max_distance);
        let mut last_before = 0;
        let mut last_after = if bidirectional { buckets / 2 } else { 0 };
        for n in 0..400i64 {
            let before = bucket(-n);
            prop_assert!(before < buckets && before >= last_before);
            last_before = before;
            if bidirectional {
                let after = bucket(n);
                prop_assert!(n == 0 || (after >= buckets / 2 && after >= last_after));
                last_after = after;
            } else {
                prop_assert_eq!(bucket(n), 0);
            }
        }
    }

    /// Asking for positions `offset..offset + n` gives rows `offset..` of the full table: what
    /// incremental decoding relies on (every encoding whose values depend on the position alone).
    #[test]
    fn offsets_match_the_full_table(which in 0usize..11, offset in 0usize..30, n in 1usize..10) {
        let kind = ["none", "sinusoidal", "sinusoidal-concat", "learned", "index", "binary", "sine-single", "alibi", "t5", "kerple", "fire"][which];
        let (d, heads) = (8, 2);
        let enc = build(kind, d, heads);
        let total = offset + n;
        let diff = match enc.table(total).unwrap().form {
            Form::Additive { values: full, .. } => {
                let x = Tensor::zeros((1, n, d), DType::F32, &Device::Cpu).unwrap();
                let part = enc.embed(&x, &EmbedContext::at(offset)).unwrap().squeeze(0).unwrap();
                (part - full.narrow(0, offset, n).unwrap()).unwrap()
            }
            Form::Bias { bias: full, .. } => {
                let part = enc.bias(&BiasContext::new(n, total, offset, 0)).unwrap().unwrap();
                (part - full.narrow(1, offset, n).unwrap()).unwrap()
            }
            Form::Rotary { .. } => unreachable!(),
        };
        let zeros = diff.zeros_like().unwrap();
        // FIRE's MLP is a matrix product, which sums in an order that may depend on how
        // many rows it is given: equal to f32's rounding, not bit for bit.
        let tol = if kind == "fire" { 1e-6 } else { 0.0 };
        prop_assert!(max_abs_diff(&diff, &zeros) <= tol, "{}", kind);
    }

    /// Rotating n vectors at an offset equals rotating them inside a longer sequence.
    #[test]
    fn rope_offsets_match_the_full_sequence(offset in 0usize..40, n in 1usize..8) {
        let enc = build("rope", 16, 2);
        let total = offset + n;
        let x = Tensor::randn(0f32, 1.0, (1, 2, total, 8), &Device::Cpu).unwrap();
        let full = enc.rotate(&x, &RotateContext::query(0)).unwrap().narrow(2, offset, n).unwrap();
        let part = enc.rotate(&x.narrow(2, offset, n).unwrap().contiguous().unwrap(), &RotateContext::query(offset)).unwrap();
        prop_assert!(max_abs_diff(&full, &part) < 1e-5);
    }
}

/// Tables are computed in high precision and cast after: in f16, position 60000 gets the
/// f32 value rounded once, not angles accumulated in f16.
#[test]
fn half_precision_casts_after_computing() {
    let enc = build("sinusoidal", 64, 1);
    let x = Tensor::zeros((1, 4, 64), DType::F16, &Device::Cpu).unwrap();
    let ours = enc
        .embed(&x, &EmbedContext::at(60_000))
        .unwrap()
        .squeeze(0)
        .unwrap();
    let f32_table = match enc.table(60_004).unwrap().form {
        Form::Additive { values, .. } => values.narrow(0, 60_000, 4).unwrap(),
        _ => unreachable!(),
    };
    let rounded_once = f32_table.to_dtype(DType::F16).unwrap();
    let diff = max_abs_diff(&ours, &rounded_once);
    assert_eq!(diff, 0.0);
    // And the f32 table itself is right at that position: sin(60000) in dimension 0.
    let first = f32_table
        .get(0)
        .unwrap()
        .get(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!((first - 60_000f64.sin() as f32).abs() < 1e-6);
}

/// Sinusoidal and rotary tables have no maximum length: they grow when asked.
#[test]
fn tables_grow_on_demand() {
    for kind in ["sinusoidal", "rope"] {
        let enc = build(kind, 8, 1);
        for len in [3, 100, 5000] {
            let rows = match enc.table(len).unwrap().form {
                Form::Additive { values, .. } => values.dim(0).unwrap(),
                Form::Rotary { cos, .. } => cos.dim(0).unwrap(),
                _ => unreachable!(),
            };
            assert_eq!(rows, len, "{kind}");
        }
    }
}
