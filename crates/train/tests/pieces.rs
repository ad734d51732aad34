//! The training pieces against independent values: hand-computed label smoothing, the
//! Noam formula, one AdamW step by hand, and sacreBLEU's scores.

use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use posenc_train::loss::label_smoothed_nll;
use posenc_train::optim::{AdamW, AdamWConfig};
use posenc_train::schedule::Noam;

#[test]
fn label_smoothing_matches_a_hand_computed_value() {
    // Three positions over V = 4 classes; class 0 is padding. Position 2 is padding.
    let p = [
        [0.1f64, 0.6, 0.2, 0.1],
        [0.4, 0.3, 0.2, 0.1],
        [0.25, 0.25, 0.25, 0.25],
    ];
    let logp: Vec<f32> = p.iter().flatten().map(|x| x.ln() as f32).collect();
    let logp = Tensor::from_vec(logp, (3, 4), &Device::Cpu).unwrap();
    let targets = Tensor::new(&[1u32, 0, 3], &Device::Cpu).unwrap();
    // ℓ₁ = 0.9·(−ln 0.6) + 0.1·(−ln 0.1 − ln 0.6 − ln 0.2 − ln 0.1)/4 = 0.45974 + 0.16814
    // ℓ₃ = ln 4 (uniform): 0.9·ln 4 + 0.1·ln 4
    use std::f64::consts::{LN_10, LN_2};
    let (ln_5_3, ln_5) = (0.510_825_6, 1.609_437_9); // −ln 0.6, −ln 0.2
    let l1 = 0.9 * ln_5_3 + 0.1 * (LN_10 + ln_5_3 + ln_5 + LN_10) / 4.0;
    let l3 = 2.0 * LN_2;
    let want = (l1 + l3) / 2.0;
    let got: f32 = label_smoothed_nll(&logp, &targets, 0.1, 0)
        .unwrap()
        .to_scalar()
        .unwrap();
    assert!((f64::from(got) - want).abs() < 1e-5, "{got} vs {want}");
    // Without smoothing it is the mean negative log-likelihood of the real targets.
    let got: f32 = label_smoothed_nll(&logp, &targets, 0.0, 0)
        .unwrap()
        .to_scalar()
        .unwrap();
    assert!((f64::from(got) - (ln_5_3 + l3) / 2.0).abs() < 1e-5);
    // All padding: an error, not NaN.
    let pads = Tensor::new(&[0u32, 0, 0], &Device::Cpu).unwrap();
    assert!(label_smoothed_nll(&logp, &pads, 0.1, 0)
        .unwrap_err()
        .to_string()
        .contains("padding"));
}

#[test]
fn noam_schedule_values() {
    // The paper's base model: d_model = 512, warmup = 4000.
    let noam = Noam {
        factor: 1.0,
        d_model: 512,
        warmup: 4000,
    };
    let peak = 512f64.powf(-0.5) * 4000f64.powf(-0.5); // 6.9877e-4
    assert!((noam.lr(4000) - peak).abs() < 1e-12);
    assert!((peak - 6.987_712e-4).abs() < 1e-9);
    assert!(
        (noam.lr(1) - peak / 4000.0).abs() < 1e-12,
        "linear warm-up from step 1"
    );
    assert!((noam.lr(2000) - peak / 2.0).abs() < 1e-12);
    assert!(
        (noam.lr(16_000) - peak / 2.0).abs() < 1e-12,
        "inverse square root after warm-up"
    );
    assert!(noam.lr(3999) < noam.lr(4000) && noam.lr(4001) < noam.lr(4000));
    assert_eq!(noam.lr(0), noam.lr(1));
}

#[test]
fn adamw_steps_match_the_formula() {
    // f32 on the CPU takes the in-place kernels; f64 the tensor ops that a GPU runs, all
    // variables at once.
    for dtype in [candle_core::DType::F32, candle_core::DType::F64] {
        adamw_matches_the_formula(dtype);
    }
}

/// The moments hold numbers, not a graph: a gradient is the output of ops on the
/// forward's activations, and a moment built from it without detaching kept that step's
/// whole graph, and through the moment before it every earlier step's (on a GPU, one
/// step's activations more memory per step, until it ran out). f64 takes the tensor ops
/// a GPU runs.
#[test]
fn adamw_moments_keep_no_graph() {
    let dev = Device::Cpu;
    let varmap = VarMap::new();
    let dtype = candle_core::DType::F64;
    let w = varmap
        .get((3, 3), "w", candle_nn::init::ZERO, dtype, &dev)
        .unwrap();
    let x = Tensor::ones((2, 3), dtype, &dev).unwrap();
    let mut opt = AdamW::new(&varmap, AdamWConfig::default()).unwrap();
    for _ in 0..2 {
        let h = x.matmul(&w).unwrap().matmul(&w).unwrap();
        let loss = h.sqr().unwrap().sum_all().unwrap();
        opt.step(&loss.backward().unwrap(), 0.01).unwrap();
    }
    let state = opt.state().unwrap();
    for key in ["m.w", "v.w"] {
        assert!(!state[key].track_op(), "{key} holds a graph");
    }
}

/// Off the CPU's f32 the moments of all variables live side by side in one buffer; the
/// state a checkpoint writes holds each variable's own, not a copy of that whole buffer
/// per variable (on a GPU: 200 copies of 200 MB at width 512, and 26 s to write them).
#[test]
fn adamw_state_copies_each_moment_only() {
    let dev = Device::Cpu;
    let varmap = VarMap::new();
    let dtype = candle_core::DType::F64;
    let names = ["a", "b", "c"];
    for (i, name) in names.iter().enumerate() {
        varmap
            .get((4, 2 + i), name, candle_nn::init::ONE, dtype, &dev)
            .unwrap();
    }
    let mut opt = AdamW::new(&varmap, AdamWConfig::default()).unwrap();
    let vars = varmap.all_vars();
    let loss = vars
        .iter()
        .map(|v| v.as_tensor().sqr().unwrap().sum_all().unwrap())
        .reduce(|a, b| (a + b).unwrap())
        .unwrap();
    opt.step(&loss.backward().unwrap(), 0.01).unwrap();
    for (key, t) in opt.state().unwrap() {
        let (storage, _) = t.storage_and_layout();
        let candle_core::Storage::Cpu(s) = &*storage else {
            panic!("{key} is not on the CPU");
        };
        let held = s.as_slice::<f64>().unwrap().len();
        assert_eq!(
            held,
            t.elem_count(),
            "{key} holds {held} values for its {}",
            t.elem_count()
        );
    }
}

/// Three variables of different shapes; `b` has no gradient at step 2 (it is skipped, and
/// the others are stepped without it), and `c` never has one.
fn adamw_matches_the_formula(dtype: candle_core::DType) {
    let dev = Device::Cpu;
    let varmap = VarMap::new();
    let shapes = [("a", vec![2]), ("b", vec![2, 3]), ("c", vec![3])];
    let vars: Vec<(Tensor, candle_core::Var)> = shapes
        .iter()
        .map(|(name, shape)| {
            let t = varmap
                .get(shape.as_slice(), name, candle_nn::init::ZERO, dtype, &dev)
                .unwrap();
            (t, varmap.data().lock().unwrap()[*name].clone())
        })
        .collect();
    let start: Vec<Vec<f64>> = vec![
        vec![1.0, -2.0],
        vec![0.5, -0.25, 1.5, -1.0, 2.0, 0.75],
        vec![0.3, 0.2, 0.1],
    ];
    for ((_, var), values) in vars.iter().zip(&start) {
        let t = Tensor::new(values.as_slice(), &dev).unwrap();
        var.set(&t.to_dtype(dtype).unwrap().reshape(var.shape()).unwrap())
            .unwrap();
    }
    let cfg = AdamWConfig {
        weight_decay: 0.1,
        ..Default::default()
    };
    let mut opt = AdamW::new(&varmap, cfg).unwrap();
    let (lr, b1, b2, eps, wd) = (0.01f64, 0.9f64, 0.98f64, 1e-9f64, 0.1f64);
    let mut th = start.clone();
    let (mut m, mut v): (Vec<Vec<f64>>, Vec<Vec<f64>>) = (
        start.iter().map(|x| vec![0.0; x.len()]).collect(),
        start.iter().map(|x| vec![0.0; x.len()]).collect(),
    );
    // loss = Σ θ³ over the variables with a gradient at step t → g = 3θ².
    let loss_of = |with: &[usize]| {
        let parts: Vec<Tensor> = with
            .iter()
            .map(|&k| vars[k].0.powf(3.0).unwrap().sum_all().unwrap())
            .collect();
        Tensor::stack(&parts, 0).unwrap().sum_all().unwrap()
    };
    for t in 1..=4 {
        let with: &[usize] = if t == 2 { &[0] } else { &[0, 1] };
        opt.step(&loss_of(with).backward().unwrap(), lr).unwrap();
        for &k in with {
            for i in 0..th[k].len() {
                let g = 3.0 * th[k][i] * th[k][i];
                m[k][i] = b1 * m[k][i] + (1.0 - b1) * g;
                v[k][i] = b2 * v[k][i] + (1.0 - b2) * g * g;
                let (mh, vh) = (m[k][i] / (1.0 - b1.powi(t)), v[k][i] / (1.0 - b2.powi(t)));
                th[k][i] = th[k][i] * (1.0 - lr * wd) - lr * mh / (vh.sqrt() + eps);
            }
        }
    }
    let tolerance = if dtype == candle_core::DType::F64 {
        1e-12
    } else {
        1e-6
    };
    let read = |var: &candle_core::Var| -> Vec<f64> {
        let t = var.as_tensor().flatten_all().unwrap();
        t.to_dtype(candle_core::DType::F64)
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    for (k, (_, var)) in vars.iter().enumerate() {
        let got = read(var);
        for i in 0..got.len() {
            assert!(
                (got[i] - th[k][i]).abs() < tolerance,
                "{dtype:?} {}: {got:?} vs {:?}",
                shapes[k].0,
                th[k]
            );
        }
    }
    // The moments survive a save/restore and the next step is the same.
    let state = opt.state().unwrap();
    for (k, (name, _)) in shapes.iter().enumerate() {
        let saved = |key: &str| {
            let t = state[&format!("{key}.{name}")].flatten_all().unwrap();
            t.to_dtype(candle_core::DType::F64)
                .unwrap()
                .to_vec1::<f64>()
                .unwrap()
        };
        for (got, want) in saved("m")
            .iter()
            .zip(&m[k])
            .chain(saved("v").iter().zip(&v[k]))
        {
            assert!(
                (got - want).abs() < tolerance * want.abs().max(1.0),
                "{dtype:?} moments of {name}: {got} vs {want}"
            );
        }
    }
    let mut fresh = AdamW::new(&varmap, cfg).unwrap();
    fresh.restore(&state, opt.step_count()).unwrap();
    let snapshot: Vec<Tensor> = vars
        .iter()
        .map(|(_, var)| var.as_tensor().copy().unwrap())
        .collect();
    let g = loss_of(&[0, 1]).backward().unwrap();
    opt.step(&g, lr).unwrap();
    let a: Vec<Vec<f64>> = vars.iter().map(|(_, var)| read(var)).collect();
    for ((_, var), t) in vars.iter().zip(&snapshot) {
        var.set(t).unwrap();
    }
    fresh.step(&g, lr).unwrap();
    let b: Vec<Vec<f64>> = vars.iter().map(|(_, var)| read(var)).collect();
    assert_eq!(a, b, "{dtype:?}");
}

#[test]
fn the_fused_loss_equals_the_composition_forward_and_backward() {
    use candle_core::{DType, Device, Tensor, Var, D};
    use posenc_train::loss::label_smoothed_cross_entropy;
    let dev = Device::Cpu;
    let (n, v) = (9, 7);
    let z: Vec<f32> = (0..n * v)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 3.0)
        .collect();
    let z = Tensor::from_vec(z, (n, v), &dev).unwrap();
    // Targets 0 are padding: rows 2 and 5 must not count.
    let targets = Tensor::new(&[3u32, 1, 0, 6, 2, 0, 4, 5, 1], &dev).unwrap();
    for eps in [0.0, 0.1, 0.4] {
        let zv = Var::from_tensor(&z).unwrap();
        let fused = label_smoothed_cross_entropy(zv.as_tensor(), &targets, eps, 0).unwrap();
        let g = fused.backward().unwrap();
        let g = g.get(zv.as_tensor()).unwrap().clone();

        let z64 = Var::from_tensor(&z.to_dtype(DType::F64).unwrap()).unwrap();
        let logp = candle_nn::ops::log_softmax(z64.as_tensor(), D::Minus1).unwrap();
        let reference = label_smoothed_nll(&logp, &targets, eps, 0).unwrap();
        let g64 = reference.backward().unwrap();
        let g64 = g64.get(z64.as_tensor()).unwrap().clone();

        let (a, b): (f32, f64) = (fused.to_scalar().unwrap(), reference.to_scalar().unwrap());
        assert!(
            (f64::from(a) - b).abs() < 1e-5,
            "ε {eps}: loss {a} against {b}"
        );
        let diff: f64 = (g.to_dtype(DType::F64).unwrap() - &g64)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar()
            .unwrap();
        assert!(diff < 1e-6, "ε {eps}: gradient differs by {diff}");
        // Padding rows get no gradient.
        let row: Vec<f32> = g.get(2).unwrap().to_vec1().unwrap();
        assert_eq!(row, vec![0.0; v]);

        // Central differences of the fused loss itself.
        let flat: Vec<f32> = z.flatten_all().unwrap().to_vec1().unwrap();
        let grad: Vec<f32> = g.flatten_all().unwrap().to_vec1().unwrap();
        let loss_at = |i: usize, d: f32| -> f64 {
            let mut w = flat.clone();
            w[i] += d;
            let t = Tensor::from_vec(w, (n, v), &dev).unwrap();
            let l: f32 = label_smoothed_cross_entropy(&t, &targets, eps, 0)
                .unwrap()
                .to_scalar()
                .unwrap();
            f64::from(l)
        };
        for i in (0..n * v).step_by(5) {
            let numeric = (loss_at(i, 1e-2) - loss_at(i, -1e-2)) / 2e-2;
            assert!(
                (numeric - f64::from(grad[i])).abs() < 1e-3,
                "entry {i}: finite difference {numeric}, backward {}",
                grad[i]
            );
        }
    }
    let pads = Tensor::zeros(n, DType::U32, &dev).unwrap();
    assert!(label_smoothed_cross_entropy(&z, &pads, 0.1, 0).is_err());
}

/// The shards of a split hold every cell of a grid exactly once, whatever the grid's size
/// and however many shards; `I/N` reads back as written and a shard outside 1..=N is refused.
#[test]
fn shards_partition_every_grid() {
    use posenc_train::experiment::{Grid, Shard};
    let entries: Vec<posenc_train::labelled::Labelled> =
        posenc_train::labelled::parse_list("none,rope,alibi").unwrap();
    for count in 1..=7 {
        for seeds in 1..=3 {
            let grid = Grid {
                entries: &entries,
                first_seed: 5,
                seeds,
            };
            let mut held = vec![0; grid.len()];
            for index in 1..=count {
                let shard: Shard = format!("{index}/{count}").parse().unwrap();
                assert_eq!(shard.to_string(), format!("{index}/{count}"));
                for (i, _, _) in grid.cells().filter(|(i, _, _)| shard.holds(*i)) {
                    held[i] += 1;
                }
            }
            assert!(
                held.iter().all(|&n| n == 1),
                "{count} shards, {seeds} seeds: {held:?}"
            );
        }
    }
    let cells: Vec<(String, u64)> = Grid {
        entries: &entries,
        first_seed: 5,
        seeds: 2,
    }
    .cells()
    .map(|(_, e, s)| (e.label.clone(), s))
    .collect();
    assert_eq!(cells[0], ("none".to_string(), 5));
    assert_eq!(cells[1], ("none".to_string(), 6));
    assert_eq!(cells[5], ("alibi".to_string(), 6));
    for bad in ["0/0", "0/3", "4/3", "1/0", "1", "a/b", "1/2/3", ""] {
        assert!(bad.parse::<Shard>().is_err(), "{bad} parsed");
    }
}

/// The claim rule, worked by hand: held only when the gap exceeds both standard deviations
/// added, with the same sign in every seed, over at least three seeds; in the claim's
/// direction (a loss is better lower); over the records the filter keeps.
#[test]
fn a_claim_holds_only_by_the_rule() {
    use posenc_train::claims::{check, Claim};
    use serde_json::json;
    let records = |pairs: &[(f64, f64)]| -> Vec<serde_json::Value> {
        pairs
            .iter()
            .enumerate()
            .flat_map(|(seed, &(a, b))| {
                [
                    json!({"label": "a", "seed": seed, "x": a, "len": 1}),
                    json!({"label": "b", "seed": seed, "x": b, "len": 1}),
                    // Another length, which a filter on `len` leaves out.
                    json!({"label": "a", "seed": seed, "x": -100.0, "len": 2}),
                ]
            })
            .collect()
    };
    let claim = |extra: serde_json::Value| -> Claim {
        let mut c = json!({"claim": "a ahead of b", "metric": "x", "better": "a", "than": "b",
                           "where": {"len": 1}});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(c).unwrap()
    };
    // a: 3, 4, 5 (mean 4, sd 1); b: 1, 1.5, 2 (mean 1.5, sd 0.5). Gap 2.5 > 1.5: held.
    let v = check(
        &records(&[(3.0, 1.0), (4.0, 1.5), (5.0, 2.0)]),
        &claim(json!({})),
    )
    .unwrap();
    assert!(
        (v.gap - 2.5).abs() < 1e-12 && (v.spreads - 1.5).abs() < 1e-12,
        "{v:?}"
    );
    assert!(v.held && v.seeds == 3 && v.seeds_ahead == 3);
    // Ahead in every seed by 1, but within the spreads (2 + 2): not held.
    let v = check(
        &records(&[(2.0, 1.0), (4.0, 3.0), (6.0, 5.0)]),
        &claim(json!({})),
    )
    .unwrap();
    assert!(
        (v.gap - 1.0).abs() < 1e-12 && (v.spreads - 4.0).abs() < 1e-12,
        "{v:?}"
    );
    assert!(v.seeds_ahead == 3 && !v.held, "{v:?}");
    // Far ahead in two seeds and behind in one: not held, whatever the means.
    let v = check(
        &records(&[(10.0, 0.0), (10.0, 0.0), (0.0, 0.1)]),
        &claim(json!({})),
    )
    .unwrap();
    assert_eq!((v.seeds_ahead, v.held), (2, false), "{v:?}");
    // Two seeds are too few, however clear.
    let v = check(&records(&[(10.0, 0.0), (11.0, 0.0)]), &claim(json!({}))).unwrap();
    assert!(!v.held, "{v:?}");
    // Lower is better: the same numbers, the other way round.
    let low = claim(json!({"lower_is_better": true, "better": "b", "than": "a"}));
    let v = check(&records(&[(3.0, 1.0), (4.0, 1.5), (5.0, 2.0)]), &low).unwrap();
    assert!(v.held && (v.gap - 2.5).abs() < 1e-12, "{v:?}");
    // Without the filter, length 2 (a: -100) turns the claim round.
    let mut unfiltered = claim(json!({}));
    unfiltered.filter.clear();
    let v = check(&records(&[(3.0, 1.0), (4.0, 1.5), (5.0, 2.0)]), &unfiltered).unwrap();
    assert!(v.gap < 0.0 && !v.held, "{v:?}");
    // A label no record has is named.
    let missing = claim(json!({"than": "c"}));
    let e = check(&records(&[(1.0, 0.0)]), &missing)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`c`"), "{e}");
    // The page says which claims hold and which do not.
    let held = check(
        &records(&[(3.0, 1.0), (4.0, 1.5), (5.0, 2.0)]),
        &claim(json!({})),
    )
    .unwrap();
    let not = check(
        &records(&[(2.0, 1.0), (4.0, 3.0), (6.0, 5.0)]),
        &claim(json!({})),
    )
    .unwrap();
    let page = posenc_train::claims::markdown(&[held, not], &[]);
    assert!(
        page.contains("| held |") && page.contains("| **not held** |"),
        "{page}"
    );
    // A field of numbers and nulls compared as JSON writes them: 4 sinks against none,
    // another count left out.
    let sinks: Vec<serde_json::Value> = (0..3)
        .flat_map(|seed| {
            [
                json!({"sinks": 4, "seed": seed, "x": 5.0 + seed as f64 * 0.1}),
                json!({"sinks": null, "seed": seed, "x": 1.0}),
                json!({"sinks": 0, "seed": seed, "x": 100.0}),
            ]
        })
        .collect();
    let by_sinks: Claim = serde_json::from_value(json!({"claim": "4 sinks ahead of none",
        "metric": "x", "better": "4", "than": "null", "by": "sinks"}))
    .unwrap();
    let v = check(&sinks, &by_sinks).unwrap();
    assert!(
        v.held && (v.better.mean - 5.1).abs() < 1e-12 && v.than.mean == 1.0,
        "{v:?}"
    );
}

/// A side pooled from more runs than the other is compared over the seeds both share
/// (worked by hand), unless the claim asks for every seed of each; the page names the
/// seeds compared.
#[test]
fn a_claim_compares_the_seeds_both_sides_share() {
    use posenc_train::claims::{check, markdown, Claim};
    use serde_json::json;
    // a has seeds 1–6, b only 1–3; a's later seeds are far lower.
    let mut records: Vec<serde_json::Value> = (1..=6)
        .map(|seed| json!({"label": "a", "seed": seed, "x": if seed <= 3 { 10.0 + seed as f64 } else { 0.0 }}))
        .collect();
    records.extend(
        (1..=3).map(|seed| json!({"label": "b", "seed": seed, "x": 1.0 + 0.5 * seed as f64})),
    );
    let claim: Claim = serde_json::from_value(
        json!({"claim": "a ahead of b", "metric": "x", "better": "a", "than": "b"}),
    )
    .unwrap();
    // Over seeds 1–3: a 11, 12, 13 (mean 12, sd 1); b 1.5, 2, 2.5 (mean 2, sd 0.5).
    let v = check(&records, &claim).unwrap();
    assert_eq!(v.better.by_seed.len(), 3, "{v:?}");
    assert!((v.better.mean - 12.0).abs() < 1e-12 && (v.better.sd - 1.0).abs() < 1e-12);
    assert!((v.gap - 10.0).abs() < 1e-12 && v.held, "{v:?}");
    assert_eq!(v.better.seeds(), "1–3");
    let page = markdown(std::slice::from_ref(&v), &[]);
    assert!(page.contains("| 1–3 | one | +10.00 |"), "{page}");
    // Every seed of each: a's mean over 1–6 is 6, its spread wide, and the claim fails.
    let mut unpaired = claim.clone();
    unpaired.unpaired = true;
    let v = check(&records, &unpaired).unwrap();
    assert!((v.better.mean - 6.0).abs() < 1e-12 && !v.held, "{v:?}");
    assert_eq!(
        v.seeds, 3,
        "the order is still judged seed by seed where both have one"
    );
    let page = markdown(&[v], &[]);
    assert!(page.contains("| 1–6; 1–3 |"), "{page}");
}
