//! `abacus` against the definition of the paper's repository (fixtures by
//! `scripts/make_abacus_fixtures.py`): each token's place, the embeddings at inference
//! (offset 0) and while training (the offset drawn, whichever it is), the gradient in the
//! table, a sequence read in two parts, and the refusals.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, IndexOp, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use posenc::abacus::{Abacus, AbacusConfig};
use posenc::EmbedContext;
use posenc::{PositionalEncoding, Positions, Tokens};
use posenc_testkit::max_abs_diff;

const TOL: f32 = 1e-5;
/// As in the script.
const ROWS: usize = 24;
const MAX_OFFSET: usize = 4;
const SPLIT: usize = 5;

fn fixtures() -> HashMap<String, Tensor> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/abacus.safetensors");
    candle_core::safetensors::load(path, &Device::Cpu).unwrap()
}

fn config(max_offset: usize, rows: usize) -> AbacusConfig {
    serde_json::from_value(serde_json::json!({ "max_offset": max_offset, "rows": rows })).unwrap()
}

/// The encoding over the fixture's table, and the table's variable.
fn abacus(f: &HashMap<String, Tensor>) -> (Abacus, Var) {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let d = f["weight"].dim(1).unwrap();
    let enc = Abacus::new(&config(MAX_OFFSET, ROWS), d, vb).unwrap();
    let weight = varmap.data().lock().unwrap()["weight"].clone();
    weight.set(&f["weight"]).unwrap();
    (enc, weight)
}

fn ids(f: &HashMap<String, Tensor>) -> Tensor {
    f["ids"].to_dtype(DType::U32).unwrap()
}

#[test]
fn places_are_the_references() {
    let f = fixtures();
    let (enc, _) = abacus(&f);
    let places = enc.places(Tokens::new(&ids(&f))).unwrap();
    let want = f["places"]
        .flatten_all()
        .unwrap()
        .to_dtype(DType::U32)
        .unwrap();
    assert_eq!(places, want.to_vec1::<u32>().unwrap());
}

#[test]
fn at_inference_the_offset_is_zero() {
    let f = fixtures();
    let (enc, _) = abacus(&f);
    let out = enc
        .embed(
            &f["x"],
            &EmbedContext::at(Positions::From(0)).with_tokens(Tokens::new(&ids(&f))),
        )
        .unwrap();
    assert!(max_abs_diff(&out, &f["k0.out"]) < TOL);
}

#[test]
fn while_training_the_drawn_offset_shifts_every_digit_and_trains_its_rows() {
    let f = fixtures();
    let mut seen = [false; MAX_OFFSET + 1];
    for step in 0..24 {
        let (enc, weight) = abacus(&f);
        // The offset this step draws, then the same generator again for the encoding.
        posenc::draws::seed(11, step);
        let k = posenc::draws::up_to(MAX_OFFSET);
        posenc::draws::seed(11, step);
        let x = Var::from_tensor(&f["x"]).unwrap();
        let out = enc
            .embed(
                x.as_tensor(),
                &EmbedContext::at(Positions::From(0)).with_tokens(Tokens::new(&ids(&f))),
            )
            .unwrap();
        assert!(
            max_abs_diff(&out, &f[&format!("k{k}.out")]) < TOL,
            "k = {k}"
        );
        let grads = (&out * &f["g"])
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let grad = grads.get(weight.as_tensor()).unwrap();
        assert!(
            max_abs_diff(grad, &f[&format!("k{k}.grad_weight")]) < TOL,
            "k = {k}"
        );
        seen[k] = true;
    }
    assert!(seen.iter().all(|&s| s), "every offset drawn: {seen:?}");
}

#[test]
fn a_sequence_read_in_two_parts_is_placed_as_one() {
    let f = fixtures();
    let (enc, _) = abacus(&f);
    let row = ids(&f).i(0..1).unwrap();
    let len = row.dim(1).unwrap();
    let (head, tail) = (
        row.narrow(1, 0, SPLIT).unwrap(),
        row.narrow(1, SPLIT, len - SPLIT).unwrap(),
    );
    // Split inside a run of digits, so the tail's first place counts the head's.
    let x = f["x"]
        .i(0..1)
        .unwrap()
        .narrow(1, SPLIT, len - SPLIT)
        .unwrap();
    let tokens = Tokens {
        ids: &tail,
        before: Some(&head),
    };
    let out = enc
        .embed(
            &x,
            &EmbedContext::at(Positions::From(SPLIT)).with_tokens(tokens),
        )
        .unwrap();
    let want = f["k0.out"]
        .i(0..1)
        .unwrap()
        .narrow(1, SPLIT, len - SPLIT)
        .unwrap();
    assert!(max_abs_diff(&out, &want) < TOL);
    assert_eq!(
        enc.places(tokens).unwrap()[0],
        2,
        "the split falls inside a run"
    );
}

#[test]
fn bad_settings_and_inputs_are_refused_by_name() {
    let vb = || VarBuilder::zeros(DType::F32, &Device::Cpu);
    let err = |cfg: serde_json::Value| {
        let cfg: AbacusConfig = serde_json::from_value(cfg).unwrap();
        Abacus::new(&cfg, 8, vb()).unwrap_err().to_string()
    };
    assert!(err(serde_json::json!({"max_offset": 9, "rows": 10})).contains("max_offset 9"));
    assert!(err(serde_json::json!({"digits": [13, 4]})).contains("first id is past"));
    assert!(err(serde_json::json!({"rows": 0})).contains("rows > 0"));
    let enc = Abacus::new(&config(2, 8), 8, vb()).unwrap();
    let x = Tensor::zeros((1, 9, 8), DType::F32, &Device::Cpu).unwrap();
    let e = enc.embed(&x, &EmbedContext::at(0)).unwrap_err().to_string();
    assert!(
        e.contains("reads each digit's place from the tokens"),
        "{e}"
    );
    // Nine digits in a row reach place 9, past 8 rows.
    let nine = Tensor::full(5u32, (1, 9), &Device::Cpu).unwrap();
    let e = enc
        .embed(&x, &EmbedContext::at(0).with_tokens(Tokens::new(&nine)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("place 9") && e.contains("8 rows"), "{e}");
    let short = Tensor::full(5u32, (1, 4), &Device::Cpu).unwrap();
    let e = enc
        .embed(&x, &EmbedContext::at(0).with_tokens(Tokens::new(&short)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("one id per embedding"), "{e}");
}
