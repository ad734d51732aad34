//! all-MiniLM-L6-v2 on our blocks against sentence-transformers 5.1.2 and transformers'
//! BertModel (`scripts/make_minilm_fixtures.py`). The model comes from
//! `scripts/fetch_minilm.sh` (run by `.ci/run`); without it these tests fail.

use candle_core::{Device, IndexOp, Tensor};
use posenc_embed::resolve::fetched_minilm;
use posenc_embed::sentence::{mean_pool_normalized, mean_pool_packed_normalized, SentenceEncoder};

fn fixtures() -> (
    Vec<String>,
    Vec<Vec<u32>>,
    std::collections::HashMap<String, Tensor>,
) {
    let base = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{base}minilm.json")).unwrap())
            .unwrap();
    let sentences = json["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    let ids = json["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect()
        })
        .collect();
    let tensors =
        candle_core::safetensors::load(format!("{base}minilm.safetensors"), &Device::Cpu).unwrap();
    (sentences, ids, tensors)
}

#[test]
fn token_ids_embeddings_and_hidden_states_match_the_reference() {
    let encoder = SentenceEncoder::load(&fetched_minilm().unwrap()).unwrap();
    let (sentences, want_ids, reference) = fixtures();
    assert!(sentences.len() >= 10);

    // Identical token ids (truncation at 256, no fixed padding).
    let (ids, mask) = encoder.tokenize(&sentences).unwrap();
    let (ids, mask): (Vec<Vec<u32>>, Vec<Vec<u32>>) =
        (ids.to_vec2().unwrap(), mask.to_vec2().unwrap());
    for (i, want) in want_ids.iter().enumerate() {
        let got: Vec<u32> = ids[i]
            .iter()
            .zip(&mask[i])
            .filter(|(_, &m)| m == 1)
            .map(|(&t, _)| t)
            .collect();
        assert_eq!(&got, want, "token ids of sentence {i}: {:?}", sentences[i]);
    }

    // Embeddings: cosine ≥ 0.99999 and max |Δ| ≤ 1e-4, with padding in the batch.
    let ours = encoder.embed(&sentences, 4).unwrap();
    let theirs: Vec<Vec<f32>> = reference["embeddings"].to_vec2().unwrap();
    let mut worst = (1.0f32, 0.0f32);
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        let cos = a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let diff = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        worst = (worst.0.min(cos), worst.1.max(diff));
        assert!(
            cos >= 0.99999 && diff <= 1e-4,
            "sentence {i} {:?}: cosine {cos}, max |Δ| {diff:e}",
            sentences[i]
        );
    }
    println!(
        "embeddings: worst cosine {}, worst max |Δ| {:e}",
        worst.0, worst.1
    );

    // Last hidden states against transformers' BertModel, one sentence at a time.
    for i in 0..4 {
        let (ids, mask) = encoder.tokenize(&sentences[i..=i]).unwrap();
        let hidden = encoder.hidden(&ids, &mask).unwrap().i(0).unwrap();
        let diff = posenc_testkit::max_abs_diff(&hidden, &reference[&format!("hidden.{i}")]);
        println!("hidden state {i}: max |Δ| {diff:e}");
        assert!(
            diff <= 1e-4,
            "hidden state of sentence {i}: max |Δ| {diff:e}"
        );
    }
}

#[test]
fn batch_size_does_not_change_embeddings() {
    let encoder = SentenceEncoder::load(&fetched_minilm().unwrap()).unwrap();
    let (sentences, _, _) = fixtures();
    let one = encoder.embed(&sentences, 1).unwrap();
    let all = encoder.embed(&sentences, 32).unwrap();
    for (a, b) in one.iter().zip(&all) {
        let diff = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(diff < 1e-5, "{diff}");
    }
}

#[test]
fn packed_hidden_states_and_pooling_equal_the_padded_batch() {
    let dir = fetched_minilm().unwrap();
    let encoder = SentenceEncoder::load(&dir).unwrap();
    let bert = posenc_embed::bert::Bert::load(&dir, &Device::Cpu).unwrap();
    let (sentences, _, _) = fixtures();
    let (ids, mask) = encoder.tokenize(&sentences[..5]).unwrap();
    // Hide one token inside the first sentence too: the mask need not be a prefix.
    let mut keep: Vec<Vec<u32>> = mask.to_vec2().unwrap();
    keep[0][2] = 0;
    let mask = Tensor::new(keep.clone(), &Device::Cpu).unwrap();
    let padded = bert.forward(&ids, &mask).unwrap();
    let (packed, lens) = bert.forward_packed(&ids, &mask).unwrap();
    let counts: Vec<usize> = keep
        .iter()
        .map(|r| r.iter().sum::<u32>() as usize)
        .collect();
    assert_eq!(lens, counts);
    let mut row = 0;
    for (b, r) in keep.iter().enumerate() {
        for (t, _) in r.iter().enumerate().filter(|(_, &k)| k == 1) {
            let diff =
                posenc_testkit::max_abs_diff(&packed.i(row).unwrap(), &padded.i((b, t)).unwrap());
            assert!(diff < 1e-5, "sentence {b}, token {t}: max |Δ| {diff:e}");
            row += 1;
        }
    }
    assert_eq!(row, packed.dim(0).unwrap());
    let short = mask.narrow(1, 0, 3).unwrap();
    let e = bert.forward_packed(&ids, &short).unwrap_err().to_string();
    assert!(e.contains("attention mask [5, 3]"), "{e}");
    let e = mean_pool_packed_normalized(&packed, &lens[1..])
        .unwrap_err()
        .to_string();
    assert!(e.contains("sum of the lengths"), "{e}");
    let pooled = mean_pool_packed_normalized(&packed, &lens).unwrap();
    let want = mean_pool_normalized(&padded, &mask).unwrap();
    let diff = posenc_testkit::max_abs_diff(&pooled, &want);
    assert!(diff < 1e-6, "pooled: max |Δ| {diff:e}");
}

#[test]
fn a_checkpoint_that_does_not_fit_is_named() {
    let src = fetched_minilm().unwrap();
    let dir = std::env::temp_dir().join(format!("posenc-minilm-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    let mut w =
        candle_core::safetensors::load(src.join("model.safetensors"), &Device::Cpu).unwrap();
    w.remove("encoder.layer.3.output.dense.bias");
    w.insert(
        "encoder.layer.0.output.LayerNorm.weight".into(),
        Tensor::zeros(5, candle_core::DType::F32, &Device::Cpu).unwrap(),
    );
    candle_core::safetensors::save(&w, dir.join("model.safetensors")).unwrap();
    let e = posenc_embed::bert::Bert::load(&dir, &Device::Cpu)
        .unwrap_err()
        .to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(e.contains("encoder.layer.3.output.dense.bias"), "{e}");
}
