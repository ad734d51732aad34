//! Sampling: greedy is argmax, draws follow the tempered and truncated distribution, the
//! seed fixes the text, and cached generation equals re-running the whole sequence.

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use posenc::EncodingConfig;
use posenc_lm::sample::{generate, generate_observed, Sampler, Sampling, Window};
use posenc_transformer::{LanguageModel, LmConfig};

/// How often each of three tokens is drawn from `logits` in `n` draws.
fn frequencies(cfg: Sampling, logits: &[f32], n: usize) -> Vec<f64> {
    let mut sampler = Sampler::new(cfg).unwrap();
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..n {
        counts[sampler.pick(logits) as usize] += 1;
    }
    counts.iter().map(|&c| c as f64 / n as f64).collect()
}

fn close(got: &[f64], want: &[f64]) -> bool {
    got.iter().zip(want).all(|(g, w)| (g - w).abs() < 0.015)
}

#[test]
fn draws_follow_the_tempered_truncated_distribution() {
    // p = (0.5, 0.3, 0.2).
    let logits = [0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()];
    let n = 40_000;
    let plain = frequencies(Sampling::default(), &logits, n);
    assert!(close(&plain, &[0.5, 0.3, 0.2]), "{plain:?}");
    // T = 0.5 squares the probabilities: (0.25, 0.09, 0.04) / 0.38.
    let cold = Sampling {
        temperature: 0.5,
        ..Sampling::default()
    };
    let got = frequencies(cold, &logits, n);
    assert!(
        close(&got, &[0.25 / 0.38, 0.09 / 0.38, 0.04 / 0.38]),
        "{got:?}"
    );
    // top-k 2 and top-p 0.6 both keep the first two: (0.5, 0.3) / 0.8.
    for cfg in [
        Sampling {
            top_k: Some(2),
            ..Sampling::default()
        },
        Sampling {
            top_p: Some(0.6),
            ..Sampling::default()
        },
    ] {
        let got = frequencies(cfg, &logits, n);
        assert!(
            close(&got, &[0.625, 0.375, 0.0]) && got[2] == 0.0,
            "{cfg:?}: {got:?}"
        );
    }
    // Greedy and top-k 1 always take the most likely token.
    for cfg in [
        Sampling::greedy(),
        Sampling {
            top_k: Some(1),
            temperature: 5.0,
            ..Sampling::default()
        },
    ] {
        assert_eq!(frequencies(cfg, &logits, 100), [1.0, 0.0, 0.0]);
    }
}

/// The distribution each draw is taken from equals transformers' (its processors, its
/// order: repetition penalty, temperature, top-k, top-p, min-p), from
/// `scripts/make_sampling_fixtures.py`; greedy decoding takes the penalty too.
#[test]
fn penalty_and_cuts_follow_transformers() {
    let text = include_str!("fixtures/sampling.json");
    let fixture: serde_json::Value = serde_json::from_str(text).unwrap();
    for case in fixture["cases"].as_array().unwrap() {
        let cfg: Sampling = serde_json::from_value(case["settings"].clone()).unwrap();
        let read: Vec<u32> = serde_json::from_value(case["read"].clone()).unwrap();
        let scores: Vec<f32> = serde_json::from_value(case["scores"].clone()).unwrap();
        let want: Vec<f64> = serde_json::from_value(case["probabilities"].clone()).unwrap();
        let mut sampler = Sampler::new(cfg).unwrap();
        sampler.read(&read);
        if cfg.temperature == 0.0 {
            assert_eq!(sampler.pick(&scores), case["greedy_pick"], "{cfg:?}");
            continue;
        }
        let mut got = vec![0.0; scores.len()];
        for (token, p) in sampler.distribution(&scores) {
            got[token as usize] = p;
        }
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-6, "{cfg:?}:\n{got:?}\n{want:?}");
        }
    }
}

/// The penalty looks at the last `repeat_last_n` tokens only, its own picks included.
#[test]
fn the_penalty_forgets_tokens_past_its_window() {
    let scores = [1.0f32, 0.9, 0.0];
    let cfg = Sampling {
        repeat_penalty: 2.0,
        repeat_last_n: 2,
        ..Sampling::greedy()
    };
    let mut sampler = Sampler::new(cfg).unwrap();
    sampler.read(&[0, 2, 2]);
    // Token 0 fell out of the last two: still the best.
    assert_eq!(sampler.pick(&scores), 0);
    // Now it is among them (0.5 < 0.9).
    assert_eq!(sampler.pick(&scores), 1);
}

#[test]
fn bad_settings_are_named() {
    for (cfg, word) in [
        (
            Sampling {
                temperature: -1.0,
                ..Sampling::default()
            },
            "temperature",
        ),
        (
            Sampling {
                temperature: f64::NAN,
                ..Sampling::default()
            },
            "temperature",
        ),
        (
            Sampling {
                top_k: Some(0),
                ..Sampling::default()
            },
            "top-k",
        ),
        (
            Sampling {
                top_p: Some(1.5),
                ..Sampling::default()
            },
            "top-p",
        ),
        (
            Sampling {
                min_p: Some(1.5),
                ..Sampling::default()
            },
            "min-p",
        ),
        (
            Sampling {
                repeat_penalty: 0.0,
                ..Sampling::default()
            },
            "repeat penalty",
        ),
    ] {
        let e = Sampler::new(cfg).unwrap_err().to_string();
        assert!(e.contains(word), "{e}");
    }
}

fn model(kind: &str) -> LanguageModel {
    sharpened(kind, 1.0)
}

/// [`model`] with its attention's input projections multiplied by `sharpness`.
fn sharpened(kind: &str, sharpness: f64) -> LanguageModel {
    let cfg = LmConfig {
        vocab_size: 20,
        d_model: 16,
        heads: 2,
        d_ff: 32,
        layers: 2,
        encoding: kind.parse::<EncodingConfig>().unwrap(),
        context: 8,
        ..LmConfig::default()
    };
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let m = LanguageModel::new(&cfg, vb).unwrap();
    // Seeded (Xavier) weights: candle's own initialisation is unseeded, and its unit-variance
    // embeddings, tied to the head, can make an untrained model repeat its last token.
    posenc_train::init::initialize(&varmap, 11).unwrap();
    for (name, var) in varmap.data().lock().unwrap().iter() {
        if sharpness != 1.0 && name.ends_with("in_proj_weight") {
            var.set(&(var.as_tensor() * sharpness).unwrap()).unwrap();
        }
    }
    m
}

/// Greedy tokens without a cache: the whole sequence (or its last `window` tokens, from
/// position 0) each time, the first maximum at the last position.
fn greedy_by_rerunning(m: &LanguageModel, prompt: &[u32], n: usize, window: usize) -> Vec<u32> {
    let mut seq = prompt.to_vec();
    for _ in 0..n {
        let seen = &seq[seq.len().saturating_sub(window)..];
        let ids = Tensor::new(seen, &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let logits = m.logits(&ids).unwrap();
        let last: Vec<f32> = logits
            .get(0)
            .unwrap()
            .get(seen.len() - 1)
            .unwrap()
            .to_vec1()
            .unwrap();
        let best = (0..last.len())
            .max_by(|&a, &b| last[a].total_cmp(&last[b]).then(b.cmp(&a)))
            .unwrap();
        seq.push(best as u32);
    }
    seq[prompt.len()..].to_vec()
}

#[test]
fn greedy_generation_equals_rerunning_the_whole_sequence() {
    for kind in ["sinusoidal", "rope", "alibi", "t5", "none"] {
        let m = model(kind);
        let prompt = [1u32, 7, 3];
        let generated = generate(&m, &prompt, 12, Sampling::greedy()).unwrap();
        assert_eq!(
            generated,
            greedy_by_rerunning(&m, &prompt, 12, usize::MAX),
            "{kind}"
        );
    }
}

/// `--window`: each token drawn from the last `window` tokens only, as nanoGPT crops: a
/// learned table of 8 rows then generates past its end.
#[test]
fn a_window_crops_the_context_as_rerunning_its_last_tokens_does() {
    for kind in [
        "rope",
        "alibi",
        r#"{"kind": "learned", "max_positions": 8}"#,
    ] {
        let m = model(kind);
        let prompt = [1u32, 7, 3, 9, 4, 2, 11];
        for window in [1, 5, 8] {
            let mut got = Vec::new();
            generate_observed(
                &m,
                &prompt,
                14,
                Sampling::greedy(),
                Some(Window::Crop(window)),
                |_| {},
                |t| {
                    got.push(t);
                    Ok(true)
                },
            )
            .unwrap();
            assert_eq!(
                got,
                greedy_by_rerunning(&m, &prompt, 14, window),
                "{kind} {window}"
            );
        }
    }
    let m = model("rope");
    let e = generate_observed(
        &m,
        &[1],
        3,
        Sampling::greedy(),
        Some(Window::Crop(0)),
        |_| {},
        |_| Ok(true),
    );
    assert!(e.unwrap_err().to_string().contains("window"));
}

#[test]
fn the_seed_fixes_the_text() {
    let m = model("rope");
    let cfg = |seed| Sampling {
        seed,
        temperature: 1.5,
        ..Sampling::default()
    };
    let a = generate(&m, &[1, 2], 30, cfg(7)).unwrap();
    assert_eq!(a, generate(&m, &[1, 2], 30, cfg(7)).unwrap());
    assert_ne!(a, generate(&m, &[1, 2], 30, cfg(8)).unwrap());
    assert!(generate(&m, &[], 3, cfg(7))
        .unwrap_err()
        .to_string()
        .contains("empty"));
}

/// Dynamic NTK takes its frequencies from the sequence's length. The generator reads a long
/// prompt in chunks (for its progress hook) but as one sequence, so its first token is the
/// one a single forward over the whole prompt picks (as transformers reads a prompt); read
/// chunk by chunk at each chunk's own length, the prompt's keys would be rotated with other
/// frequencies than its last queries', and the picks differ.
#[test]
fn a_long_prompt_is_one_sequence_to_the_generator() {
    // Sharp attention, so that where a key is rotated to decides what a query reads (an
    // untrained model's near-uniform attention averages positions away).
    let m = sharpened(
        r#"{"kind": "rope", "scaling": {"rope_type": "dynamic", "factor": 4}}"#,
        6.0,
    );
    let len = posenc_transformer::lm::PREFILL_CHUNK + 300;
    let mut state = 12345u64;
    let mut agree = 0;
    let trials = 12;
    for _ in 0..trials {
        let prompt: Vec<u32> = (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 33) % 20) as u32
            })
            .collect();
        let first = generate(&m, &prompt, 1, Sampling::greedy()).unwrap();
        agree += usize::from(first == greedy_by_rerunning(&m, &prompt, 1, usize::MAX));
    }
    assert_eq!(agree, trials);
}
