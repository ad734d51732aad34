//! `coupling` against position coupling's own rule (fixtures by
//! `scripts/make_coupling_fixtures.py`, from the paper's repository): on addition instances
//! in lengthgen's format, the row each token takes is the reference's id reflected (the two
//! add to one constant over an instance), at inference and while training, where the drawn
//! offset moves the operators with the digits (abacus leaves them at row 0).

use std::path::PathBuf;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use posenc::{EncodingConfig, PositionalEncoding, Positions, Tokens};

const ROWS: usize = 64;
const MAX_OFFSET: usize = 12;

/// Each case's tokens and the reference's id of every token but the end.
fn cases() -> Vec<(Vec<u32>, Vec<i64>)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/coupling.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["cases"]
        .as_array()
        .unwrap()
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
        .add_to_embeddings_of(&x, Tokens::new(&ids), Positions::From(0))
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
