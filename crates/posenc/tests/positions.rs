//! Hooks at listed positions (randomized positional encodings, Ruoss et al. 2023): a list of
//! consecutive positions is the offset form, a sparse list picks the rows, entries and bias
//! cells of a full sequence at those positions, a bad list is refused, and a learned table's
//! gradient reaches exactly the listed rows.

use candle_core::{DType, Device, IndexOp, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use posenc::{BiasContext, EmbedContext, RotateContext};
use posenc::{Direction, EncodingConfig, Positions, Target};
use posenc_testkit::max_abs_diff;

const D: usize = 8;
const HEADS: usize = 2;
/// Sparse, increasing positions, and the sequence that holds them all.
const LIST: [u32; 4] = [2, 9, 10, 20];
const FULL: usize = 21;

/// Every kind that reads positions: one that reads its places from the tokens (Abacus)
/// takes no list (its own tests are in `abacus.rs`).
fn every_kind() -> Vec<EncodingConfig> {
    EncodingConfig::kinds()
        .into_iter()
        .map(|k| EncodingConfig::from_kind(k).unwrap())
        .filter(|cfg| {
            !cfg.build_untrained(D, HEADS, &Device::Cpu)
                .unwrap()
                .capabilities()
                .reads_tokens
        })
        .collect()
}

/// `(1, 1, len, D/HEADS)` and `(1, len, D)` inputs whose row `p` depends only on `p`.
fn inputs(positions: &[usize]) -> (Tensor, Tensor) {
    let hd = D / HEADS;
    let row = |p: usize, w: usize| (0..w).map(move |i| ((p * 7 + i * 3) % 11) as f32 * 0.1 - 0.5);
    // Every head of the model: a kind may turn each its own way (RoPE-Mixed).
    let heads: Vec<f32> = (0..HEADS)
        .flat_map(|h| positions.iter().flat_map(move |&p| row(p + h, hd)))
        .collect();
    let embeds: Vec<f32> = positions.iter().flat_map(|&p| row(p, D)).collect();
    let n = positions.len();
    (
        Tensor::from_vec(heads, (1, HEADS, n, hd), &Device::Cpu).unwrap(),
        Tensor::from_vec(embeds, (1, n, D), &Device::Cpu).unwrap(),
    )
}

fn rows(t: &Tensor, dim: usize, at: &[u32]) -> Tensor {
    let idx = Tensor::new(at, &Device::Cpu).unwrap();
    t.index_select(&idx, dim).unwrap()
}

#[test]
fn a_consecutive_list_is_the_offset_form() {
    let list: Vec<u32> = (5..9).collect();
    let positions: Vec<usize> = (5..9).collect();
    let (h, e) = inputs(&positions);
    for cfg in every_kind() {
        let enc = posenc::for_layer(&cfg.build_untrained(D, HEADS, &Device::Cpu).unwrap(), 0);
        let (at, from) = (Positions::At(&list), Positions::From(5));
        let kind = cfg.kind();
        let a = enc.embed(&e, &EmbedContext::at(at)).unwrap();
        let b = enc.embed(&e, &EmbedContext::at(from)).unwrap();
        assert!(max_abs_diff(&a, &b) < 1e-6, "{kind}");
        let a = enc.rotate(&h, &RotateContext::query(at)).unwrap();
        let b = enc.rotate(&h, &RotateContext::query(from)).unwrap();
        assert!(max_abs_diff(&a, &b) < 1e-6, "{kind}");
        let a = enc.bias(&BiasContext::new(4, 4, at, at)).unwrap();
        let b = enc.bias(&BiasContext::new(4, 4, from, from)).unwrap();
        match (a, b) {
            (Some(a), Some(b)) => assert!(max_abs_diff(&a, &b) < 1e-6, "{kind}"),
            (None, None) => {}
            _ => panic!("{kind}: a bias one way only"),
        }
    }
}

#[test]
fn a_sparse_list_picks_the_positions_of_a_full_sequence() {
    let all: Vec<usize> = (0..FULL).collect();
    let picked: Vec<usize> = LIST.iter().map(|&p| p as usize).collect();
    let (h_full, e_full) = inputs(&all);
    let (h, e) = inputs(&picked);
    let (at, from) = (Positions::At(&LIST), Positions::From(0));
    for cfg in every_kind() {
        let enc = posenc::for_layer(&cfg.build_untrained(D, HEADS, &Device::Cpu).unwrap(), 0);
        let kind = cfg.kind();
        let sparse = enc.embed(&e, &EmbedContext::at(at)).unwrap();
        let full = rows(
            &enc.embed(&e_full, &EmbedContext::at(from)).unwrap(),
            1,
            &LIST,
        );
        assert!(max_abs_diff(&sparse, &full) < 1e-6, "{kind}");
        let sparse = enc.rotate(&h, &RotateContext::query(at)).unwrap();
        let full = rows(
            &enc.rotate(&h_full, &RotateContext::query(from)).unwrap(),
            2,
            &LIST,
        );
        assert!(max_abs_diff(&sparse, &full) < 1e-6, "{kind}");
        let sparse = enc.bias(&BiasContext::new(4, 4, at, at)).unwrap();
        let full = enc.bias(&BiasContext::new(FULL, FULL, from, from)).unwrap();
        if let (Some(sparse), Some(full)) = (sparse, full) {
            let full = rows(&rows(&full, 1, &LIST), 2, &LIST);
            assert!(max_abs_diff(&sparse, &full) < 1e-6, "{kind}");
        }
    }
}

#[test]
fn a_bad_list_is_refused() {
    let (h, e) = inputs(&[0, 1, 2, 3]);
    let changed = |a: &Tensor, b: &Tensor| a.dims() != b.dims() || max_abs_diff(a, b) > 0.0;
    for cfg in every_kind() {
        let enc = posenc::for_layer(&cfg.build_untrained(D, HEADS, &Device::Cpu).unwrap(), 0);
        // Only a hook that uses positions checks them: `none` has none, and a norm of the
        // queries and keys reads none. A hook uses them when what it gives moves with them
        // (or refuses a far one: a learned table ends).
        let (from, far) = (Positions::From(0), Positions::From(100_000));
        let moves = |a: posenc::Result<Tensor>, b: posenc::Result<Tensor>| match (a, b) {
            (Ok(a), Ok(b)) => changed(&a, &b),
            _ => true,
        };
        let uses_positions = moves(
            enc.embed(&e, &EmbedContext::at(from)),
            enc.embed(&e, &EmbedContext::at(far)),
        ) || moves(
            enc.rotate(&h, &RotateContext::query(from)),
            enc.rotate(&h, &RotateContext::query(far)),
        ) || enc
            .bias(&BiasContext::new(4, 4, from, from))
            .unwrap()
            .is_some();
        let refused = |list: &[u32]| {
            let at = Positions::At(list);
            enc.embed(&e, &EmbedContext::at(at)).is_err()
                || enc.rotate(&h, &RotateContext::query(at)).is_err()
                || enc.bias(&BiasContext::new(4, 4, at, at)).is_err()
        };
        for bad in [&[1u32, 2, 3][..], &[4, 3, 2, 1], &[0, 2, 1, 3]] {
            assert_eq!(refused(bad), uses_positions, "{}: {bad:?}", cfg.kind());
        }
        // Tokens may share a position (self-extend's groups): never decreasing is enough.
        assert!(!refused(&[1, 3, 3, 4]), "{}: a shared position", cfg.kind());
    }
}

#[test]
fn a_learned_table_trains_exactly_the_listed_rows() {
    let cfg: EncodingConfig = r#"{"kind": "learned", "max_positions": 32}"#.parse().unwrap();
    let varmap = VarMap::new();
    let target = Target::new(D, HEADS, Direction::Causal).unwrap();
    let enc = cfg
        .build(
            &target,
            VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
        )
        .unwrap();
    let x = Tensor::zeros((2, 4, D), DType::F32, &Device::Cpu).unwrap();
    let loss = enc
        .embed(&x, &EmbedContext::at(Positions::At(&LIST)))
        .unwrap()
        .sum_all()
        .unwrap();
    let grads = loss.backward().unwrap();
    let vars = varmap.all_vars();
    let weight: &Var = vars.first().unwrap();
    let g = grads.get(weight.as_tensor()).unwrap();
    for p in 0..32 {
        // Two sequences in the batch, each adding the row once.
        let want = if LIST.contains(&(p as u32)) { 2.0 } else { 0.0 };
        let row: Vec<f32> = g.i(p).unwrap().to_vec1().unwrap();
        assert!(row.iter().all(|&v| v == want), "row {p}: {row:?}");
    }
    let e = enc
        .embed(&x, &EmbedContext::at(Positions::At(&[3, 40, 41, 42])))
        .unwrap_err();
    assert!(e.to_string().contains("40"), "{e}");
}

/// Position interpolation (Chen et al. 2023): with `position_scale = s`, position `s·p`
/// rotates as position `p` does unscaled; a scale that is not positive is refused.
#[test]
fn rope_position_scale_divides_every_position() {
    let rope = |scale: f64| {
        let json = format!(r#"{{"kind": "rope", "position_scale": {scale}}}"#);
        let cfg: EncodingConfig = serde_json::from_str(&json).unwrap();
        cfg.build_untrained(D, HEADS, &Device::Cpu).unwrap()
    };
    let (x, _) = inputs(&[0, 1, 2, 3]);
    let (plain, halved) = (rope(1.0), rope(4.0));
    let unscaled = plain
        .rotate(&x, &RotateContext::query(Positions::From(0)))
        .unwrap();
    let scaled = halved
        .rotate(&x, &RotateContext::query(Positions::At(&[0, 4, 8, 12])))
        .unwrap();
    assert!(max_abs_diff(&unscaled, &scaled) < 1e-6);
    // And it does change something: the same positions unscaled rotate further.
    let other = plain
        .rotate(&x, &RotateContext::query(Positions::At(&[0, 4, 8, 12])))
        .unwrap();
    assert!(max_abs_diff(&unscaled, &other) > 1e-2);
    for bad in ["0", "-1"] {
        let json = format!(r#"{{"kind": "rope", "position_scale": {bad}}}"#);
        let cfg: EncodingConfig = serde_json::from_str(&json).unwrap();
        let e = cfg
            .build_untrained(D, HEADS, &Device::Cpu)
            .unwrap_err()
            .to_string();
        assert!(e.contains("position_scale"), "{e}");
    }
}
