//! Language-model training: nanoGPT's schedule, a loss that falls on a learnable stream, and
//! evaluation past the trained context where the encoding allows it.

use posenc::EncodingConfig;
use posenc_train::lm_train::{evaluate, random_windows, train_lm, LmTrainConfig};
use posenc_transformer::LmConfig;
use rand::SeedableRng;

fn tiny(encoding: &str, steps: usize) -> LmTrainConfig {
    LmTrainConfig {
        model: LmConfig {
            vocab_size: 12,
            d_model: 32,
            heads: 2,
            d_ff: 64,
            layers: 1,
            encoding: EncodingConfig::from_kind(encoding).unwrap(),
            context: 16,
            ..LmConfig::default()
        },
        steps,
        batch_size: 8,
        lr: 3e-3,
        warmup: 5,
        ..LmTrainConfig::default()
    }
}

/// A stream a model can learn: the counting sequence 0, 1, …, 9 repeated, where each token
/// is fixed by the one before.
fn counting(n: usize) -> Vec<u32> {
    (0..n).map(|i| (i % 10) as u32).collect()
}

#[test]
fn the_schedule_is_nanogpts() {
    let cfg = LmTrainConfig::default();
    // Warm-up: linear from lr/warmup up to lr.
    assert!((cfg.lr(0) - 1e-3 / 100.0).abs() < 1e-12);
    assert!((cfg.lr(99) - 1e-3).abs() < 1e-12);
    // Half-way through the decay: the mean of lr and min_lr; at the end: min_lr.
    assert!((cfg.lr(100 + 950) - 5.5e-4).abs() < 1e-12);
    assert!((cfg.lr(2000) - 1e-4).abs() < 1e-12);
}

#[test]
fn the_loss_falls_on_a_learnable_stream() {
    let cfg = tiny("sinusoidal", 60);
    let stream = counting(2000);
    let run = train_lm(&cfg, &stream, |_, _| {}).unwrap();
    let first: f64 = run.losses[..5].iter().sum::<f64>() / 5.0;
    let last: f64 = run.losses[55..].iter().sum::<f64>() / 5.0;
    assert!(last < 0.3 * first, "{first} → {last}");
    let held_out = evaluate(&run.model, &counting(500), 16, 10).unwrap();
    assert!(held_out < 0.5, "{held_out}");
    // The same seed trains the same model.
    let again = train_lm(&cfg, &stream, |_, _| {}).unwrap();
    assert_eq!(run.losses, again.losses);
}

#[test]
fn evaluation_past_the_context_is_an_error_only_for_a_learned_table() {
    let stream = counting(400);
    let learned = LmTrainConfig {
        model: LmConfig {
            encoding: EncodingConfig::new(posenc::learned::LearnedConfig { max_positions: 16 }),
            ..tiny("none", 1).model
        },
        ..tiny("none", 1)
    };
    let run = train_lm(&learned, &stream, |_, _| {}).unwrap();
    assert!(evaluate(&run.model, &stream, 16, 4).is_ok());
    let e = format!("{:#}", evaluate(&run.model, &stream, 32, 4).unwrap_err());
    assert!(e.contains("max_positions = 16"), "{e}");
    for kind in ["sinusoidal", "rope", "alibi", "t5", "none"] {
        let run = train_lm(&tiny(kind, 1), &stream, |_, _| {}).unwrap();
        assert!(
            evaluate(&run.model, &stream, 128, 2).unwrap().is_finite(),
            "{kind}"
        );
    }
}

#[test]
fn windows_are_inputs_and_next_tokens() {
    let stream = counting(100);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let (x, y) = random_windows(&stream, 5, 3, &mut rng).unwrap();
    let (x, y): (Vec<Vec<u32>>, Vec<u32>) = (x.to_vec2().unwrap(), y.to_vec1().unwrap());
    for (row, next) in x.iter().zip(y.chunks(5)) {
        for (a, b) in row.iter().zip(next) {
            assert_eq!(*b, (a + 1) % 10);
        }
    }
    let e = random_windows(&stream[..4], 5, 1, &mut rng)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no window"), "{e}");
}
