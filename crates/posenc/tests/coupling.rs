//! `coupling` against position coupling's own rule (fixtures by
//! `scripts/make_coupling_fixtures.py`, from the paper's repository): on addition instances
//! in lengthgen's format, the row each token takes is the reference's id reflected (the two
//! add to one constant over an instance), at inference and while training, where the drawn
//! offset moves the operators with the digits (abacus leaves them at row 0); and
//! `coupling-bias` against the repository's relative variant: every query and key take the
//! reference's bucket, from the whole sequence or after a cache, and the table's gradient
//! is the sum over each bucket's pairs.

use std::path::PathBuf;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use posenc::{BiasContext, EmbedContext};
use posenc::{EncodingConfig, PositionalEncoding, Positions, Tokens};

const ROWS: usize = 64;
const MAX_OFFSET: usize = 12;

fn fixture() -> Vec<serde_json::Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/coupling.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["cases"].as_array().unwrap().clone()
}

/// Each case's tokens and the reference's id of every token but the end.
fn cases() -> Vec<(Vec<u32>, Vec<i64>)> {
    fixture()
        .iter()
        .map(|c| {
            let ids = |k: &str| -> Vec<i64> {
                c[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_i64().unwrap())
                    .collect()
            };
            (
                ids("tokens").into_iter().map(|t| t as u32).collect(),
                ids("reference_ids"),
            )
        })
        .collect()
}

/// The encoding `kind` (d_model 1) over a table whose row `r` holds `r`, so that the value
/// it adds to a zero embedding is the row it took.
fn table_of(kind: &str) -> std::sync::Arc<dyn PositionalEncoding> {
    let cfg: EncodingConfig = serde_json::from_value(serde_json::json!(
        {"kind": kind, "max_offset": MAX_OFFSET, "rows": ROWS}
    ))
    .unwrap();
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let enc = cfg
        .build(
            &posenc::Target::new(1, 1, posenc::Direction::Causal).unwrap(),
            vb,
        )
        .unwrap();
    let rows: Vec<f32> = (0..ROWS).map(|r| r as f32).collect();
    let weight = varmap.data().lock().unwrap()["weight"].clone();
    weight
        .set(&Tensor::from_vec(rows, (ROWS, 1), &Device::Cpu).unwrap())
        .unwrap();
    enc
}

/// The row each token of `tokens` takes: at inference, or while training (the offset of
/// draw `step`).
fn rows(enc: &dyn PositionalEncoding, tokens: &[u32], training: Option<u64>) -> Vec<i64> {
    let ids = Tensor::from_vec(tokens.to_vec(), (1, tokens.len()), &Device::Cpu).unwrap();
    let zeros = Tensor::zeros((1, tokens.len(), 1), DType::F32, &Device::Cpu).unwrap();
    let var;
    let x = match training {
        Some(step) => {
            posenc::draws::seed(5, step);
            var = Var::from_tensor(&zeros).unwrap();
            var.as_tensor().clone()
        }
        None => zeros,
    };
    let out = enc
        .embed(
            &x,
            &EmbedContext::at(Positions::From(0)).with_tokens(Tokens::new(&ids)),
        )
        .unwrap();
    out.flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .into_iter()
        .map(|r| r as i64)
        .collect()
}

#[test]
fn every_token_takes_the_references_id_reflected() {
    let coupling = table_of("coupling");
    for (tokens, reference) in cases() {
        for training in [None, Some(0), Some(1), Some(2)] {
            let ours = rows(coupling.as_ref(), &tokens, training);
            // One constant over the instance: ours(t) + reference(t).
            let sums: Vec<i64> = ours.iter().zip(&reference).map(|(a, b)| a + b).collect();
            assert!(
                sums.iter().all(|&s| s == sums[0]),
                "{tokens:?} ({training:?}): ours {ours:?}, reference {reference:?}"
            );
            // The end token sits with the operators, beside the units.
            let operator = ours[tokens.iter().position(|&t| t == 3).unwrap()];
            assert_eq!(*ours.last().unwrap(), operator, "{tokens:?}");
        }
    }
}

#[test]
fn the_offset_moves_the_operators_where_abacus_keeps_them_at_row_0() {
    let (coupling, abacus) = (table_of("coupling"), table_of("abacus"));
    let mut moved = false;
    for (tokens, _) in cases() {
        // At inference the two give every token the same row.
        assert_eq!(
            rows(coupling.as_ref(), &tokens, None),
            rows(abacus.as_ref(), &tokens, None)
        );
        for step in 0..8 {
            posenc::draws::seed(5, step);
            let k = posenc::draws::up_to(MAX_OFFSET) as i64;
            let at_rest = rows(coupling.as_ref(), &tokens, None);
            let c = rows(coupling.as_ref(), &tokens, Some(step));
            let a = rows(abacus.as_ref(), &tokens, Some(step));
            for (i, &t) in tokens.iter().enumerate() {
                let digit = (4..=13).contains(&t);
                assert_eq!(c[i], at_rest[i] + k, "coupling moves every token");
                assert_eq!(a[i], at_rest[i] + if digit { k } else { 0 });
            }
            moved |= k > 0;
        }
    }
    assert!(moved, "some draw was not 0");
}

#[test]
fn bad_settings_are_refused_by_its_name() {
    let cfg: EncodingConfig =
        serde_json::from_value(serde_json::json!({"kind": "coupling", "max_offset": 8, "rows": 8}))
            .unwrap();
    let e = cfg
        .build(
            &posenc::Target::new(4, 1, posenc::Direction::Causal).unwrap(),
            VarBuilder::zeros(DType::F32, &Device::Cpu),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("coupling max_offset 8"), "{e}");
    let e = serde_json::from_value::<EncodingConfig>(
        serde_json::json!({"kind": "coupling", "max_ofset": 8}),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("max_ofset"), "{e}");
}

const HEADS: usize = 2;

/// `coupling-bias` with `buckets` buckets over a table whose entry `(b, h)` is `10 b + h`,
/// and the table as a variable.
fn bias_of(buckets: usize) -> (std::sync::Arc<dyn PositionalEncoding>, Var) {
    let cfg: EncodingConfig =
        serde_json::from_value(serde_json::json!({"kind": "coupling-bias", "buckets": buckets}))
            .unwrap();
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let target = posenc::Target::new(8, HEADS, posenc::Direction::Causal).unwrap();
    let enc = cfg.build(&target, vb).unwrap();
    let values: Vec<f32> = (0..buckets * HEADS)
        .map(|i| (10 * (i / HEADS) + i % HEADS) as f32)
        .collect();
    let weight = varmap.data().lock().unwrap()["relative_attention_bias.weight"].clone();
    weight
        .set(&Tensor::from_vec(values, (buckets, HEADS), &Device::Cpu).unwrap())
        .unwrap();
    (enc, weight)
}

/// The bias `(heads, q, k)` of the last `q` of `tokens` after the others.
fn bias(enc: &dyn PositionalEncoding, tokens: &[u32], q: usize) -> Vec<Vec<Vec<f32>>> {
    let n = tokens.len();
    let ids = |t: &[u32]| Tensor::from_vec(t.to_vec(), (1, t.len()), &Device::Cpu).unwrap();
    let (before, new) = (ids(&tokens[..n - q]), ids(&tokens[n - q..]));
    let tokens = Tokens {
        ids: &new,
        before: (q < n).then_some(&before),
    };
    enc.bias(
        &BiasContext::new(q, n, Positions::From(n - q), Positions::From(0))
            .with_tokens(Some(tokens)),
    )
    .unwrap()
    .unwrap()
    .squeeze(0)
    .unwrap()
    .to_vec3::<f32>()
    .unwrap()
}

/// Each case's model input (every token but the end) and the reference's buckets.
fn bucket_cases() -> Vec<(Vec<u32>, usize, Vec<Vec<usize>>)> {
    fixture()
        .iter()
        .map(|c| {
            let tokens: Vec<u32> = c["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap() as u32)
                .collect();
            let buckets: Vec<Vec<usize>> =
                serde_json::from_value(c["reference_buckets"].clone()).unwrap();
            let n = tokens.len() - 1;
            (
                tokens[..n].to_vec(),
                c["buckets"].as_u64().unwrap() as usize,
                buckets,
            )
        })
        .collect()
}

#[test]
fn the_relative_bias_takes_the_references_buckets() {
    for (tokens, buckets, reference) in bucket_cases() {
        let (enc, _) = bias_of(buckets);
        let n = tokens.len();
        let whole = bias(enc.as_ref(), &tokens, n);
        for (h, rows) in whole.iter().enumerate() {
            for (i, row) in rows.iter().enumerate() {
                for (j, &b) in row.iter().enumerate() {
                    let want = (10 * reference[i][j] + h) as f32;
                    assert_eq!(b, want, "{tokens:?}: head {h}, query {i}, key {j}");
                }
            }
        }
        // After a cache of the first tokens: the rows of the new ones, every key.
        for q in [1, n / 2, n - 1].into_iter().filter(|&q| q > 0) {
            let after = bias(enc.as_ref(), &tokens, q);
            for h in 0..HEADS {
                assert_eq!(after[h], whole[h][n - q..].to_vec(), "{tokens:?}, {q} new");
            }
        }
    }
}

#[test]
fn the_relative_tables_gradient_sums_each_buckets_pairs() {
    let (tokens, buckets, reference) = bucket_cases().swap_remove(6);
    let (enc, weight) = bias_of(buckets);
    let n = tokens.len();
    let ids = Tensor::from_vec(tokens.clone(), (1, n), &Device::Cpu).unwrap();
    let out = enc
        .bias(&BiasContext::new(n, n, 0, 0).with_tokens(Some(Tokens::new(&ids))))
        .unwrap()
        .unwrap();
    // A loss weighing every entry differently: Σ g(h, i, j) · bias(h, i, j).
    let g = |h: usize, i: usize, j: usize| ((h * 31 + i * 7 + j * 3) % 11) as f64 - 5.0;
    let gs: Vec<f32> = (0..HEADS * n * n)
        .map(|x| g(x / (n * n), x / n % n, x % n) as f32)
        .collect();
    let gs = Tensor::from_vec(gs, (1, HEADS, n, n), &Device::Cpu).unwrap();
    let loss = (out * gs).unwrap().sum_all().unwrap();
    let grads = loss.backward().unwrap();
    let got = grads
        .get(weight.as_tensor())
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    let mut want = vec![vec![0f64; HEADS]; buckets];
    for (i, row) in reference.iter().enumerate() {
        for (j, &b) in row.iter().enumerate() {
            for (h, w) in want[b].iter_mut().enumerate() {
                *w += g(h, i, j);
            }
        }
    }
    for (b, (got, want)) in got.iter().zip(&want).enumerate() {
        for (h, (got, want)) in got.iter().zip(want).enumerate() {
            assert!((*got as f64 - want).abs() < 1e-4, "bucket {b}, head {h}");
        }
    }
    assert!(
        want.iter().flatten().any(|&w| w != 0.0),
        "some bucket has a gradient"
    );
}

#[test]
fn the_relative_bias_refuses_to_act_without_the_tokens_or_with_bad_settings() {
    let (enc, _) = bias_of(7);
    let e = enc
        .bias(&BiasContext::new(3, 3, 0, 0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("coupling-bias") && e.contains("tokens"), "{e}");
    let ids = Tensor::from_vec(vec![4u32, 3, 5], (1, 3), &Device::Cpu).unwrap();
    let e = enc
        .bias(&BiasContext::new(3, 4, 0, 0).with_tokens(Some(Tokens::new(&ids))))
        .unwrap_err()
        .to_string();
    assert!(e.contains("3 queries against 4 keys"), "{e}");
    let target = posenc::Target::new(8, HEADS, posenc::Direction::Causal).unwrap();
    for (json, says) in [
        (
            serde_json::json!({"kind": "coupling-bias", "buckets": 0}),
            "buckets",
        ),
        (
            serde_json::json!({"kind": "coupling-bias", "digits": [9, 4]}),
            "digits [9, 4]",
        ),
    ] {
        let cfg: EncodingConfig = serde_json::from_value(json).unwrap();
        let e = cfg
            .build(&target, VarBuilder::zeros(DType::F32, &Device::Cpu))
            .unwrap_err()
            .to_string();
        assert!(e.contains("coupling-bias") && e.contains(says), "{e}");
    }
    let e = serde_json::from_value::<EncodingConfig>(
        serde_json::json!({"kind": "coupling-bias", "bucket": 7}),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("bucket"), "{e}");
}
