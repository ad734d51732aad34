//! PaTH's scores ([`posenc::householder`]) against fla's `naive_path_attn` (fla-core
//! 0.6.0; fixtures by `scripts/make_path_fixtures.py`, which first checks the reference
//! against the explicit product of transforms): the attention output and its gradients in
//! q, k, v, w, β and the forget gate g, at lengths inside a chunk, at its edge and across
//! three, with grouped-query heads. Then the frame a cache keeps: scores read in pieces
//! equal the whole.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor, Var, D};
use posenc::householder::Householders;
use posenc_testkit::max_abs_diff;

/// The reference computes in float32: differences relative to the largest value compared.
const TOL: f32 = 2e-6;

/// `|a − b|`'s largest entry over `b`'s (at least 1).
fn relative(a: &Tensor, b: &Tensor) -> f32 {
    max_abs_diff(a, b) / posenc_testkit::max_abs(b).max(1.0)
}

fn fixtures() -> HashMap<String, Tensor> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/path.safetensors"
    );
    candle_core::safetensors::load(path, &Device::Cpu)
        .expect("fixtures: run scripts/make_path_fixtures.py")
}

/// fla's `[B, T, H, …]` as `(B, H, T, …)`.
fn heads_first(t: &Tensor) -> Tensor {
    t.transpose(1, 2).unwrap().contiguous().unwrap()
}

/// `softmax((S + G_i − G_j) · scale)` under the causal mask, times the values, as
/// `naive_path_attn` weighs its scores; `[B, T, HQ, D]`.
fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    w: &Tensor,
    beta: &Tensor,
    g: &Tensor,
    chunk: usize,
) -> Tensor {
    let (q, k, v, w) = (
        heads_first(q),
        heads_first(k),
        heads_first(v),
        heads_first(w),
    );
    let (beta, g) = (heads_first(beta), heads_first(g));
    let (b, heads, t, d) = q.dims4().unwrap();
    let kv = k.dim(1).unwrap();
    let path = Householders::new(&w, &beta)
        .unwrap()
        .with_chunk(chunk)
        .unwrap();
    let (scores, _) = path.scores(&q, &k, None).unwrap();
    let gc = g.cumsum(2).unwrap();
    let gates = gc
        .unsqueeze(3)
        .unwrap()
        .broadcast_sub(&gc.unsqueeze(2).unwrap())
        .unwrap();
    let logits = ((scores + gates).unwrap() * (d as f64).powf(-0.5)).unwrap();
    let future = Tensor::tril2(t, DType::F32, &Device::Cpu).unwrap();
    let hidden = ((1.0 - &future).unwrap() * -1e30f64).unwrap();
    let logits = logits
        .broadcast_mul(&future)
        .unwrap()
        .broadcast_add(&hidden)
        .unwrap();
    let weights = candle_nn::ops::softmax(&logits, D::Minus1).unwrap();
    let v = v
        .unsqueeze(2)
        .unwrap()
        .broadcast_as((b, kv, heads / kv, t, d))
        .unwrap()
        .reshape((b, heads, t, d))
        .unwrap();
    weights.matmul(&v).unwrap().transpose(1, 2).unwrap()
}

#[test]
fn path_attention_matches_fla_forward_and_gradients() {
    let f = fixtures();
    for t in [1, 63, 64, 150] {
        let case = |name: &str| f[&format!("t{t}.{name}")].clone();
        let names = ["q", "k", "v", "w", "beta", "g"];
        let vars: Vec<Var> = names
            .iter()
            .map(|n| Var::from_tensor(&case(n)).unwrap())
            .collect();
        let [q, k, v, w, beta, g] = [0, 1, 2, 3, 4, 5].map(|i| vars[i].as_tensor().clone());
        let out = attend(&q, &k, &v, &w, &beta, &g, 64);
        let d_out = relative(&out, &case("out"));
        let loss = (&out * case("r")).unwrap().sum_all().unwrap();
        let grads = loss.backward().unwrap();
        let mut diffs = vec![("out".to_string(), d_out)];
        for (name, var) in names.iter().zip(&vars) {
            // At one token the output is its value whatever the scores: candle then keeps
            // no gradient for what feeds them, and the reference's is zero.
            let got = match grads.get(var.as_tensor()) {
                Some(g) => g.clone(),
                None => var.as_tensor().zeros_like().unwrap(),
            };
            diffs.push((
                format!("∂{name}"),
                relative(&got, &case(&format!("grad_{name}"))),
            ));
        }
        println!("T={t}: max |Δ| {diffs:?}");
        for (what, d) in diffs {
            assert!(d < TOL, "T={t}: {what} off by {d:e}");
        }
    }
}

/// The chunk is how the work is cut, not what it computes.
#[test]
fn every_chunk_size_gives_the_same_output() {
    let f = fixtures();
    let case = |name: &str| f[&format!("t150.{name}")].clone();
    let [q, k, v, w, beta, g] = ["q", "k", "v", "w", "beta", "g"].map(case);
    let whole = attend(&q, &k, &v, &w, &beta, &g, 64);
    for chunk in [1, 7, 16, 150, 256] {
        let d = relative(&attend(&q, &k, &v, &w, &beta, &g, chunk), &whole);
        assert!(d < TOL, "chunk {chunk}: off by {d:e}");
    }
}

/// A cache keeps the frame: the first tokens' scores and frame, then the rest read against
/// it, give the whole's scores row for row (a prompt, then decoding a token at a time).
#[test]
fn scores_read_in_pieces_against_the_frame_equal_the_whole() {
    let f = fixtures();
    let case = |name: &str| heads_first(&f[&format!("t150.{name}")]);
    let [q, k, w, beta] = ["q", "k", "w", "beta"].map(case);
    let whole = Householders::new(&w, &beta)
        .unwrap()
        .scores(&q, &k, None)
        .unwrap()
        .0;
    let mut frame: Option<Tensor> = None;
    let mut start = 0;
    for len in [37, 1, 1, 64, 40, 7] {
        let part = |x: &Tensor| x.narrow(2, start, len).unwrap();
        let path = (Householders::new(&part(&w), &part(&beta)).unwrap())
            .with_chunk(16)
            .unwrap();
        let (scores, next) = path.scores(&part(&q), &part(&k), frame.as_ref()).unwrap();
        let want = whole
            .narrow(2, start, len)
            .unwrap()
            .narrow(D::Minus1, 0, start + len)
            .unwrap();
        let d = relative(&scores, &want);
        assert!(d < TOL, "rows {start}..{}: off by {d:e}", start + len);
        frame = Some(next);
        start += len;
    }
    assert_eq!(start, 150);
}

/// Attention a chunk of queries at a time sees each chunk's rows of the whole scores, in
/// order, `chunk` rows each, and after the last the frame the whole gives: causally after a
/// cache's frame, and with transforms for the keys after a query (bidirectional).
#[test]
fn score_chunks_are_the_rows_of_the_whole_in_order() {
    let f = fixtures();
    let case = |name: &str| heads_first(&f[&format!("t150.{name}")]);
    let [q, k, w, beta] = ["q", "k", "w", "beta"].map(case);
    let first = |x: &Tensor| x.narrow(2, 0, 40).unwrap();
    let rest = |x: &Tensor| x.narrow(2, 40, 110).unwrap();
    let (_, frame) = Householders::new(&first(&w), &first(&beta))
        .unwrap()
        .scores(&first(&q), &first(&k), None)
        .unwrap();
    let causal = Householders::new(&rest(&w), &rest(&beta)).unwrap();
    let after = Householders::new(&rest(&w).neg().unwrap(), &(2.0 - rest(&beta)).unwrap()).unwrap();
    let both = causal.clone().with_after(after).unwrap();
    for (name, path, frame) in [
        ("causal", causal, Some(&frame)),
        ("bidirectional", both, None),
    ] {
        let path = path.with_chunk(32).unwrap();
        let (q, k) = (rest(&q), rest(&k));
        let (whole, whole_frame) = path.scores(&q, &k, frame).unwrap();
        let mut chunks = path.score_chunks(&q, &k, frame).unwrap();
        let mut next = 0;
        for chunk in chunks.by_ref() {
            let (start, rows) = chunk.unwrap();
            assert_eq!(start, next, "{name}: chunks out of order");
            let (m, keys) = (rows.dim(2).unwrap(), rows.dim(3).unwrap());
            assert_eq!(m, 32.min(110 - start), "{name}: {m} rows at {start}");
            // Causally, the keys up to the chunk's last query; else every key.
            let reach = if name == "causal" {
                40 + start + m
            } else {
                110
            };
            assert_eq!(keys, reach, "{name}: the keys of the chunk at {start}");
            let want = whole
                .narrow(2, start, m)
                .unwrap()
                .narrow(3, 0, keys)
                .unwrap();
            let d = relative(&rows, &want);
            assert!(d < TOL, "{name}: rows {start}..{}: off by {d:e}", start + m);
            next += m;
        }
        assert_eq!(next, 110, "{name}: every query's rows");
        let d = relative(&chunks.into_frame(), &whole_frame);
        assert!(
            d < TOL,
            "{name}: the frame after every chunk is off by {d:e}"
        );
    }
}

#[test]
fn a_beta_past_two_or_a_chunk_of_zero_is_refused_by_name() {
    let w = Tensor::ones((1, 1, 2, 4), DType::F32, &Device::Cpu).unwrap();
    let beta = Tensor::new(&[[[0.5f32, 2.5]]], &Device::Cpu).unwrap();
    let e = Householders::new(&w, &beta).unwrap_err().to_string();
    assert!(e.contains("β in [0, 2]") && e.contains("2.5"), "{e}");
    let beta = Tensor::new(&[[[0.5f32, f32::NAN]]], &Device::Cpu).unwrap();
    let e = Householders::new(&w, &beta).unwrap_err().to_string();
    assert!(e.contains("β in [0, 2]") && e.contains("NaN"), "{e}");
    let beta = Tensor::new(&[[[0.5f32, 1.5]]], &Device::Cpu).unwrap();
    let e = Householders::new(&w, &beta)
        .unwrap()
        .with_chunk(0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("chunk"), "{e}");
}
