//! Language-model training: nanoGPT's schedule, a loss that falls on a learnable stream, and
//! evaluation past the trained context where the encoding allows it.

use posenc::EncodingConfig;
use posenc_lm::run::{self, LmInputs};
use posenc_lm::task::{evaluate, random_windows, train_lm, LmData, LmTrainConfig};
use posenc_lm::task::{LmState, LmTask};
use posenc_lm::text_tokenizer::TextTokenizer;
use posenc_train::fit::{RunOptions, RunSchedule};
use posenc_train::job;
use tokenizers::Tokenizer;

/// A new run in `out`, as `posenc lm train` starts it.
fn start(
    cfg: &LmTrainConfig,
    tokenizer: &Tokenizer,
    data: &LmData,
    out: &std::path::Path,
    opts: RunOptions,
    device: &candle_core::Device,
) -> posenc_train::Result<LmState> {
    job::train::<LmTask>(cfg.clone(), &inputs(tokenizer, data), out, opts, device)
}

/// The run in `out` continued, as `posenc lm train --resume` continues it.
fn resume(
    out: &std::path::Path,
    steps: Option<usize>,
    data: &LmData,
    tokenizer: &Tokenizer,
    opts: RunOptions,
    device: &candle_core::Device,
) -> posenc_train::Result<LmState> {
    job::resume::<LmTask>(out, steps, &inputs(tokenizer, data), opts, device)
}

/// A run's inputs: its tokenizer and streams.
fn inputs(tokenizer: &Tokenizer, data: &LmData) -> LmInputs {
    LmInputs {
        tokenizer: tokenizer.clone(),
        data: data.clone(),
    }
}
use posenc_transformer::LmConfig;
use rand::SeedableRng;

/// Where these tests train.
const CPU: &candle_core::Device = &candle_core::Device::Cpu;

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
        run: RunSchedule {
            steps,
            batch_size: 8,
            warmup: 5,
            ..LmTrainConfig::default().run
        },
        lr: 3e-3,
        ..LmTrainConfig::default()
    }
}

/// A stream a model can learn: the counting sequence 0, 1, …, 9 repeated, where each token
/// is fixed by the one before.
fn counting(n: usize) -> Vec<u32> {
    (0..n).map(|i| (i % 10) as u32).collect()
}

/// Training data: the counting stream, validated on a shorter one.
fn data(n: usize) -> LmData {
    LmData {
        train: counting(n),
        valid: counting(300),
    }
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
    let mut cfg = tiny("sinusoidal", 60);
    cfg.run.eval_every = 20;
    let run = train_lm(&cfg, &data(2000), CPU, |_, _| {}).unwrap();
    let first: f64 = run.losses[..5].iter().sum::<f64>() / 5.0;
    let last: f64 = run.losses[55..].iter().sum::<f64>() / 5.0;
    assert!(last < 0.3 * first, "{first} → {last}");
    let held_out = evaluate(&run.model, &counting(500), 16, 10, 16).unwrap();
    assert!(held_out.loss < 0.5, "{held_out:?}");
    // Validation was recorded, and fell.
    let h = &run.state.history;
    assert!(
        h.len() >= 2 && h.last().unwrap().valid_loss < h[0].valid_loss,
        "{h:?}"
    );
    // The same seed trains the same model.
    let again = train_lm(&cfg, &data(2000), CPU, |_, _| {}).unwrap();
    assert_eq!(run.losses, again.losses);
}

#[test]
fn dropout_is_drawn_from_the_run_seed() {
    let mut cfg = tiny("rope", 8);
    cfg.model.dropout = 0.2;
    let losses = |cfg: &LmTrainConfig| train_lm(cfg, &data(500), CPU, |_, _| {}).unwrap().losses;
    let dropped = losses(&cfg);
    // The same seed drops the same units, on this thread or another.
    assert_eq!(losses(&cfg), dropped);
    let elsewhere = std::thread::spawn({
        let cfg = cfg.clone();
        move || losses(&cfg)
    });
    assert_eq!(elsewhere.join().unwrap(), dropped);
    // And dropout acts: without it, the first step's loss (same weights, same batch) differs.
    cfg.model.dropout = 0.0;
    assert_ne!(losses(&cfg)[0], dropped[0]);
}

#[test]
fn evaluation_past_the_context_is_an_error_only_for_a_learned_table() {
    let stream = counting(400);
    let data = data(400);
    let learned = LmTrainConfig {
        model: LmConfig {
            encoding: EncodingConfig::new(posenc::learned::LearnedConfig { max_positions: 16 }),
            ..tiny("none", 1).model
        },
        ..tiny("none", 1)
    };
    let run = train_lm(&learned, &data, CPU, |_, _| {}).unwrap();
    assert!(evaluate(&run.model, &stream, 16, 4, 16).is_ok());
    let e = format!(
        "{:#}",
        evaluate(&run.model, &stream, 32, 4, 16).unwrap_err()
    );
    assert!(e.contains("max_positions = 16"), "{e}");
    for kind in ["sinusoidal", "rope", "alibi", "t5", "none"] {
        let run = train_lm(&tiny(kind, 1), &data, CPU, |_, _| {}).unwrap();
        let e = evaluate(&run.model, &stream, 128, 2, 16).unwrap();
        assert!(
            e.loss.is_finite() && e.tail_loss.unwrap().is_finite(),
            "{kind}"
        );
    }
}

#[test]
fn windows_are_inputs_and_next_tokens() {
    let stream = counting(100);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let (x, y) = random_windows(&stream, 5, 3, &mut rng, CPU).unwrap();
    let (x, y): (Vec<Vec<u32>>, Vec<u32>) = (x.to_vec2().unwrap(), y.to_vec1().unwrap());
    for (row, next) in x.iter().zip(y.chunks(5)) {
        for (a, b) in row.iter().zip(next) {
            assert_eq!(*b, (a + 1) % 10);
        }
    }
    let e = random_windows(&stream[..4], 5, 1, &mut rng, CPU)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no window"), "{e}");
}

#[test]
fn evaluation_counts_every_position_of_non_overlapping_windows() {
    let run = train_lm(&tiny("alibi", 20), &data(1000), CPU, |_, _| {}).unwrap();
    let stream = counting(201);
    // 200 next tokens hold exactly 6 windows of 32: all are taken, none overlap.
    let e = evaluate(&run.model, &stream, 32, 100, 16).unwrap();
    assert_eq!((e.windows, e.by_position.len()), (6, 32));
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    assert!((e.loss - mean(&e.by_position)).abs() < 1e-9);
    assert!((e.tail_loss.unwrap() - mean(&e.by_position[16..])).abs() < 1e-9);
    // The per-position mean equals the loss the training objective computes.
    let (x, y) = {
        let starts: Vec<u32> = (0..6)
            .flat_map(|w| stream[w * 32..w * 32 + 32].to_vec())
            .collect();
        let next: Vec<u32> = (0..6)
            .flat_map(|w| stream[w * 32 + 1..w * 32 + 33].to_vec())
            .collect();
        let d = candle_core::Device::Cpu;
        (
            candle_core::Tensor::from_vec(starts, (6, 32), &d).unwrap(),
            candle_core::Tensor::from_vec(next, 6 * 32, &d).unwrap(),
        )
    };
    let objective: f32 = posenc_lm::task::loss(&run.model, &x, &y, 0.into())
        .unwrap()
        .to_scalar()
        .unwrap();
    assert!(
        (e.loss - f64::from(objective)).abs() < 1e-4,
        "{} vs {objective}",
        e.loss
    );
    // Each window's own loss is the objective's on that window alone, in stream order.
    assert_eq!(e.starts, [0, 32, 64, 96, 128, 160]);
    assert_eq!(e.window_losses.len(), 6);
    for (i, &start) in e.starts.iter().enumerate() {
        let d = candle_core::Device::Cpu;
        let x = candle_core::Tensor::new(&stream[start..start + 32], &d)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let y = candle_core::Tensor::new(&stream[start + 1..start + 33], &d).unwrap();
        let one: f32 = posenc_lm::task::loss(&run.model, &x, &y, 0.into())
            .unwrap()
            .to_scalar()
            .unwrap();
        assert!(
            (e.window_losses[i] - f64::from(one)).abs() < 1e-4,
            "window {i}: {} vs {one}",
            e.window_losses[i]
        );
    }
    assert!((e.loss - mean(&e.window_losses)).abs() < 1e-9);
    assert!((e.tail_loss.unwrap() - mean(&e.window_tail_losses)).abs() < 1e-9);
    // At the trained length there is no tail.
    assert_eq!(
        evaluate(&run.model, &stream, 16, 3, 16).unwrap().tail_loss,
        None
    );
    for (len, windows) in [(0, 1), (16, 0), (500, 1)] {
        assert!(
            evaluate(&run.model, &stream, len, windows, 16).is_err(),
            "{len} {windows}"
        );
    }
}

/// Options of a run that prints nothing and runs to its end.
const QUIET: RunOptions = RunOptions {
    quiet: true,
    force: false,
    stop_after: None,
    log_dir: None,
};

const LINE: &str = "to be or not to be that is the question ";

/// A character tokenizer of [`LINE`].
fn char_tokenizer() -> tokenizers::Tokenizer {
    TextTokenizer::Char.train(&LINE.repeat(40)).unwrap()
}

/// [`LINE`] 40 times, validated on its first 400 characters.
fn char_data() -> LmData {
    let ids = posenc_lm::text_tokenizer::encode(&char_tokenizer(), &LINE.repeat(40)).unwrap();
    LmData {
        train: ids.clone(),
        valid: ids[..400].to_vec(),
    }
}

fn same_files(a: &std::path::Path, b: &std::path::Path, name: &str) -> bool {
    posenc_testkit::same_tensors(&a.join(name), &b.join(name))
}

#[test]
fn a_resumed_run_is_bit_identical_to_one_that_never_stopped() {
    let (quiet, tokenizer, data) = (QUIET, char_tokenizer(), char_data());
    let mut cfg = tiny("rope", 12);
    cfg.model.vocab_size = tokenizer.get_vocab_size(true);
    // Dropout draws from the run's seed and the step, so it resumes identically too.
    cfg.model.dropout = 0.1;
    cfg.run.eval_every = 4;
    cfg.run.save_every = 4;
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let straight = start(&cfg, &tokenizer, &data, a.path(), quiet.clone(), CPU).unwrap();
    // Stopped at step 6, between checkpoints: it saves there, as a killed run's last
    // checkpoint would be.
    let interrupted = RunOptions {
        stop_after: Some(6),
        ..quiet.clone()
    };
    let stopped = start(&cfg, &tokenizer, &data, b.path(), interrupted, CPU).unwrap();
    assert_eq!(stopped.step, 6);
    let resumed = resume(b.path(), None, &data, &tokenizer, quiet.clone(), CPU).unwrap();
    assert_eq!(resumed.step, 12);
    let losses = |s: &posenc_lm::task::LmState| -> Vec<(usize, f64, f64)> {
        s.history
            .iter()
            .map(|r| (r.step, r.train_loss, r.valid_loss))
            .collect()
    };
    assert_eq!(losses(&straight), losses(&resumed));
    assert!(same_files(a.path(), b.path(), "model.safetensors"));
    assert!(same_files(a.path(), b.path(), "training.safetensors"));
    // The saved model loads and is the trained one.
    let saved = run::load(b.path(), CPU).unwrap();
    assert_eq!(saved.model.config().context, 16);

    // A second start into a run is refused and changes nothing; a changed tokenizer is named.
    let before = std::fs::read(b.path().join("model.safetensors")).unwrap();
    let e = format!(
        "{:#}",
        start(&cfg, &tokenizer, &data, b.path(), quiet.clone(), CPU).unwrap_err()
    );
    assert!(e.contains("--resume"), "{e}");
    assert_eq!(
        std::fs::read(b.path().join("model.safetensors")).unwrap(),
        before
    );
    std::fs::write(b.path().join("tokenizer.json"), b"{}").unwrap();
    let e = format!("{:#}", run::load(b.path(), CPU).err().unwrap());
    assert!(e.contains("tokenizer.json"), "{e}");
}

#[test]
fn randomized_positions_train_every_row_of_a_learned_table() {
    // Trained on windows of 16 at positions spread over 0..64: a table of 64 rows answers
    // at 64 tokens, and learns the counting stream there too.
    let cfg = LmTrainConfig {
        model: LmConfig {
            encoding: r#"{"kind": "learned", "max_positions": 64}"#.parse().unwrap(),
            ..tiny("none", 1).model
        },
        randomized_positions: Some(64),
        ..tiny("none", 150)
    };
    let run = train_lm(&cfg, &data(2000), CPU, |_, _| {}).unwrap();
    let at_64 = evaluate(&run.model, &counting(500), 64, 4, 16).unwrap();
    assert!(at_64.tail_loss.unwrap() < 1.0, "{at_64:?}");
    // The same seed draws the same positions.
    let again = train_lm(&cfg, &data(2000), CPU, |_, _| {}).unwrap();
    assert_eq!(run.losses, again.losses);
    // A range shorter than the context, or past the table, is refused.
    for (range, named) in [
        (8, "at least the training length"),
        (128, "max_positions = 64"),
    ] {
        let bad = LmTrainConfig {
            randomized_positions: Some(range),
            ..cfg.clone()
        };
        let e = format!(
            "{:#}",
            train_lm(&bad, &data(2000), CPU, |_, _| {}).err().unwrap()
        );
        assert!(e.contains(named), "{range}: {e}");
    }
}

#[test]
fn a_run_started_from_another_begins_at_its_weights_and_resumes_from_them() {
    let (quiet, tokenizer, data) = (QUIET, char_tokenizer(), char_data());
    let mut cfg = tiny("rope", 20);
    cfg.model.vocab_size = tokenizer.get_vocab_size(true);
    let (source, tuned, stopped) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    start(&cfg, &tokenizer, &data, source.path(), quiet.clone(), CPU).unwrap();
    let weights = |dir: &std::path::Path| {
        candle_core::safetensors::load(dir.join("model.safetensors"), CPU).unwrap()
    };
    // The largest difference between two runs' weights.
    let distance = |a: &std::path::Path, b: &std::path::Path| {
        let (a, b) = (weights(a), weights(b));
        a.iter()
            .map(|(name, t)| posenc_testkit::max_abs_diff(t, &b[name]))
            .fold(0.0f32, f32::max)
    };
    // One step at a vanishing learning rate and no decay moves nothing measurable: the new
    // run starts at the source's trained weights, not at a seed's random ones.
    let defaults = LmTrainConfig::default();
    let base = LmTrainConfig {
        run: RunSchedule {
            steps: 1,
            warmup: 1,
            seed: 99,
            ..defaults.run
        },
        lr: 1e-12,
        min_lr: 0.0,
        ..defaults
    };
    let mut from = run::from_run(source.path(), base.clone()).unwrap().0;
    from.run.adam.weight_decay = 0.0;
    assert_eq!(from.model, cfg.model);
    start(&from, &tokenizer, &data, tuned.path(), quiet.clone(), CPU).unwrap();
    assert!(distance(source.path(), tuned.path()) < 1e-6);
    // Without --from, the same settings start elsewhere.
    let fresh = tempfile::tempdir().unwrap();
    let mut scratch = LmTrainConfig {
        model: cfg.model.clone(),
        ..base
    };
    scratch.run.adam.weight_decay = 0.0;
    start(
        &scratch,
        &tokenizer,
        &data,
        fresh.path(),
        quiet.clone(),
        CPU,
    )
    .unwrap();
    assert!(distance(source.path(), fresh.path()) > 1e-2);

    // A run stopped before its first step resumes from the source's weights too, and is
    // refused once the source directory holds another run.
    let before_any_step = RunOptions {
        stop_after: Some(0),
        ..quiet.clone()
    };
    start(
        &from,
        &tokenizer,
        &data,
        stopped.path(),
        before_any_step.clone(),
        CPU,
    )
    .unwrap();
    resume(stopped.path(), None, &data, &tokenizer, quiet.clone(), CPU).unwrap();
    assert!(distance(source.path(), stopped.path()) < 1e-6);
    let again = tempfile::tempdir().unwrap();
    start(&from, &tokenizer, &data, again.path(), before_any_step, CPU).unwrap();
    let replaced = RunOptions {
        force: true,
        ..quiet.clone()
    };
    start(&cfg, &tokenizer, &data, source.path(), replaced, CPU).unwrap();
    let e = format!(
        "{:#}",
        resume(again.path(), None, &data, &tokenizer, quiet.clone(), CPU).unwrap_err()
    );
    assert!(e.contains("now holds run"), "{e}");
}

#[test]
fn own_text_is_split_at_a_line_or_by_file_and_a_changed_text_is_refused() {
    use posenc_lm::corpus::TextSource;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("one.txt");
    let lines: String = (0..100).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&file, &lines).unwrap();
    let (source, corpus) = TextSource::read(&file, 0.2).unwrap();
    let (train, valid) = (&corpus.train[0].text, &corpus.valid[0].text);
    // Nothing lost or repeated, cut at a line, about a fifth held out.
    assert_eq!(format!("{train}{valid}"), lines);
    assert!(train.ends_with('\n') && valid.starts_with("line "));
    let share = valid.len() as f64 / lines.len() as f64;
    assert!((share - 0.2).abs() < 0.02, "{share}");
    assert_eq!(corpus.test, corpus.valid);
    // Two lines are enough; one is not.
    std::fs::write(&file, "hello\nworld\n").unwrap();
    let (_, two) = TextSource::read(&file, 0.1).unwrap();
    assert_eq!(
        (two.train[0].text.as_str(), two.valid[0].text.as_str()),
        ("hello\n", "world\n")
    );
    std::fs::write(&file, "hello world\n").unwrap();
    let e = TextSource::read(&file, 0.1).unwrap_err().to_string();
    assert!(e.contains("too short to split"), "{e}");
    // A changed text is refused on resumption.
    std::fs::write(&file, &lines).unwrap();
    let (source2, _) = TextSource::read(&file, 0.2).unwrap();
    assert_eq!(source, source2);
    std::fs::write(&file, format!("{lines}more\n")).unwrap();
    let e = source.reread().unwrap_err().to_string();
    assert!(e.contains("changed since the run started"), "{e}");

    // A directory is split by file, the last by name held out.
    let texts = dir.path().join("texts");
    std::fs::create_dir(&texts).unwrap();
    for name in ["a", "b", "c", "d", "e"] {
        std::fs::write(texts.join(format!("{name}.txt")), format!("{name}\n")).unwrap();
    }
    std::fs::write(texts.join("notes.md"), "not a .txt file").unwrap();
    let (_, corpus) = TextSource::read(&texts, 0.4).unwrap();
    let names = |w: &[posenc_lm::corpus::Work]| -> Vec<String> {
        w.iter().map(|w| w.name.clone()).collect()
    };
    assert_eq!(names(&corpus.train), ["a", "b", "c"]);
    assert_eq!(names(&corpus.valid), ["d", "e"]);
    // Bad input is named.
    std::fs::write(texts.join("f.txt"), b"ok\n\xff").unwrap();
    let e = TextSource::read(&texts, 0.4).unwrap_err().to_string();
    assert!(e.contains("f.txt") && e.contains("not UTF-8"), "{e}");
    for (path, fraction, expected) in [
        (dir.path().join("none"), 0.1, "no text at"),
        (file.clone(), 0.0, "between 0 and 1"),
        (file.clone(), f64::NAN, "between 0 and 1"),
    ] {
        let e = TextSource::read(&path, fraction).unwrap_err().to_string();
        assert!(e.contains(expected), "{e}");
    }
    let single = dir.path().join("single");
    std::fs::create_dir(&single).unwrap();
    std::fs::write(single.join("only.txt"), "x\ny\n").unwrap();
    let e = TextSource::read(&single, 0.5).unwrap_err().to_string();
    assert!(e.contains("at least two"), "{e}");
}

/// `lm eval --stride`: transformers' perplexity guide, written here as that guide writes it
/// (begin, end, prev_end, targets before `-trg_len` ignored), against `evaluate_strided`.
#[test]
fn strided_evaluation_scores_every_token_once_as_transformers_guide_does() {
    use posenc_lm::task::evaluate_strided;
    let cfg = tiny("rope", 1);
    let varmap = candle_nn::VarMap::new();
    let vb = candle_nn::VarBuilder::from_varmap(&varmap, candle_core::DType::F32, CPU);
    let model = posenc_transformer::LanguageModel::new(&cfg.model, vb).unwrap();
    posenc_train::init::initialize(&varmap, 5).unwrap();
    let stream: Vec<u32> = (0..203u32).map(|i| (i * 7 + i / 5) % 12).collect();
    let guide = |max_length: usize, stride: usize| -> (f64, usize) {
        let (mut nll, mut n, mut prev_end, mut begin) = (0.0, 0, 0, 0);
        let seq_len = stream.len();
        while begin < seq_len {
            let end = (begin + max_length).min(seq_len);
            let trg_len = end - prev_end;
            let ids = candle_core::Tensor::new(&stream[begin..end], CPU)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let logp = candle_nn::ops::log_softmax(&model.logits(&ids).unwrap(), 2)
                .unwrap()
                .get(0)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            // Labels are the inputs, shifted inside the model: position j predicts j + 1.
            for j in 0..end - begin - 1 {
                if j + 1 >= end - begin - trg_len {
                    nll -= f64::from(logp[j][stream[begin + j + 1] as usize]);
                    n += 1;
                }
            }
            prev_end = end;
            if end == seq_len {
                break;
            }
            begin += stride;
        }
        (nll / n as f64, n)
    };
    for (len, stride) in [(16, 16), (16, 4), (16, 7), (40, 13)] {
        let ours = evaluate_strided(&model, &stream, len, stride, |_| {}).unwrap();
        let (loss, n) = guide(len + 1, stride);
        assert_eq!(ours.tokens, stream.len() - 1, "{len} {stride}");
        assert_eq!(n, stream.len() - 1);
        assert!(
            (ours.loss - loss).abs() < 1e-5,
            "{len} {stride}: {} vs {loss}",
            ours.loss
        );
    }
    for (len, stride) in [(16, 0), (16, 17), (300, 10)] {
        assert!(evaluate_strided(&model, &stream, len, stride, |_| {}).is_err());
    }
}

#[test]
fn octaves_split_a_window_at_half_the_context_then_at_its_doublings() {
    use posenc_lm::task::LengthEval;
    let by_position: Vec<f64> = (0..100).map(|p| p as f64).collect();
    let eval = LengthEval {
        len: 100,
        windows: 1,
        loss: 49.5,
        tail_loss: None,
        by_position,
        starts: vec![0],
        window_losses: vec![49.5],
        window_tail_losses: vec![],
    };
    let got: Vec<(usize, usize, f64)> = eval
        .by_octave(16)
        .iter()
        .map(|b| (b.from, b.to, b.loss))
        .collect();
    // The mean of p over from..to is (from + to - 1) / 2.
    let want: Vec<(usize, usize, f64)> = [(0, 8), (8, 16), (16, 32), (32, 64), (64, 100)]
        .iter()
        .map(|&(a, b)| (a, b, (a + b - 1) as f64 / 2.0))
        .collect();
    assert_eq!(got, want);
    // A window shorter than the context is cut at its end; a context of one has no half.
    let short = LengthEval {
        len: 12,
        by_position: eval.by_position[..12].to_vec(),
        ..eval.clone()
    };
    let edges = |e: &LengthEval, l| {
        e.by_octave(l)
            .iter()
            .map(|b| (b.from, b.to))
            .collect::<Vec<_>>()
    };
    assert_eq!(edges(&short, 16), [(0, 8), (8, 12)]);
    assert_eq!(edges(&short, 1), [(0, 1), (1, 2), (2, 4), (4, 8), (8, 12)]);
}

#[test]
fn the_spread_over_windows_is_their_sample_standard_deviation() {
    use posenc_lm::task::LengthEval;
    let eval = |window_losses: Vec<f64>| LengthEval {
        len: 4,
        windows: window_losses.len(),
        loss: 0.0,
        tail_loss: None,
        by_position: vec![0.0; 4],
        starts: (0..window_losses.len()).map(|i| 4 * i).collect(),
        window_tail_losses: window_losses.iter().map(|x| 2.0 * x).collect(),
        window_losses,
    };
    assert_eq!(eval(vec![2.0]).window_sd(), None);
    assert_eq!(eval(vec![]).window_tail_sd(), None);
    // Σ(x − 2.5)² = 5, over n − 1 = 3; twice each value, twice the spread.
    let four = eval(vec![1.0, 2.0, 3.0, 4.0]);
    let sd = four.window_sd().unwrap();
    assert!((sd - (5.0f64 / 3.0).sqrt()).abs() < 1e-12, "{sd}");
    assert!((four.window_tail_sd().unwrap() - 2.0 * sd).abs() < 1e-12);
}

/// The experiment's evaluation lengths are checked before anything is trained or written:
/// factors that do not increase, and a length the test works cannot hold, are named.
#[test]
fn the_experiments_factors_are_checked_before_anything_runs() {
    use posenc_lm::corpus::{Corpus, Work};
    use posenc_lm::experiment::{self, LmExperimentConfig};
    let work = |name: &str, n: usize| Work {
        name: name.into(),
        text: "to be or not to be, that is the question\n".repeat(n),
    };
    let corpus = Corpus {
        train: vec![work("a", 50)],
        valid: vec![work("b", 5)],
        test: vec![work("c", 5)],
    };
    let dir = tempfile::tempdir().unwrap();
    for (factors, expected) in [
        (vec![4, 1], "must increase"),
        (vec![1, 1], "must increase"),
        (vec![1, 1000], "factor 1000"),
    ] {
        let mut cfg = LmExperimentConfig::quick();
        cfg.factors = factors.clone();
        let out = dir.path().join("exp");
        let opts = RunOptions {
            quiet: true,
            force: false,
            stop_after: None,
            log_dir: None,
        };
        let experiment = experiment::LmExperimentRun {
            config: &cfg,
            corpus: &corpus,
            device: CPU,
        };
        let e = match posenc_train::experiment::run(&experiment, &out, opts) {
            Ok(_) => panic!("{factors:?} ran"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(expected), "{factors:?}: {e}");
        assert!(!out.exists(), "{factors:?}: nothing written");
    }
}
