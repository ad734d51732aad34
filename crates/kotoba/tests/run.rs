//! Whole training runs: a short one learns to translate; resuming equals not stopping; the
//! same seed gives the same model; greedy decoding equals beam search of size 1.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use posenc_kotoba::data::DataConfig;
use posenc_kotoba::decode::DecodeConfig;
use posenc_kotoba::kotoba::SPEC_EXAMPLES;
use posenc_kotoba::task::{RunOptions, TrainConfig, TrainerState, Translation, Translator};
use posenc_train::job;

/// A new run, as `posenc kotoba train` starts it.
fn train(
    cfg: TrainConfig,
    out: &Path,
    opts: RunOptions,
    device: &Device,
) -> posenc_train::Result<TrainerState> {
    job::train::<Translation>(cfg, &(), out, opts, device)
}

/// A run continued, as `posenc kotoba train --resume` continues it.
fn resume(
    out: &Path,
    steps: Option<usize>,
    opts: RunOptions,
    device: &Device,
) -> posenc_train::Result<TrainerState> {
    job::resume::<Translation>(out, steps, &(), opts, device)
}

const QUIET: RunOptions = RunOptions {
    quiet: true,
    force: false,
    stop_after: None,
    log_dir: None,
};

fn tiny(steps: usize, seed: u64) -> TrainConfig {
    let mut cfg = TrainConfig::default();
    cfg.model.d_model = 32;
    cfg.model.heads = 2;
    cfg.model.d_ff = 64;
    cfg.model.encoder_layers = 1;
    cfg.model.decoder_layers = 1;
    cfg.data = DataConfig {
        seed: 3,
        train: 400,
        valid: 40,
        test: 40,
        test_long: 10,
        order_swap: 10,
    };
    cfg.run.batch_size = 16;
    cfg.run.steps = steps;
    cfg.run.eval_every = 6;
    cfg.run.save_every = 6;
    cfg.eval_sentences = 10;
    cfg.run.seed = seed;
    cfg
}

fn weights(dir: &Path) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).unwrap()
}

fn same_weights(a: &Path, b: &Path) -> bool {
    let (a, b) = (weights(a), weights(b));
    a.len() == b.len()
        && a.iter().all(|(k, t)| {
            let u = &b[k];
            let diff: f32 = (t - u)
                .unwrap()
                .abs()
                .unwrap()
                .flatten_all()
                .unwrap()
                .max(0)
                .unwrap()
                .to_scalar()
                .unwrap();
            diff == 0.0
        })
}

#[test]
fn resuming_equals_an_uninterrupted_run() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let straight = train(tiny(12, 1), a.path(), QUIET, &Device::Cpu).unwrap();
    train(tiny(6, 1), b.path(), QUIET, &Device::Cpu).unwrap();
    let resumed = resume(b.path(), Some(12), QUIET, &Device::Cpu).unwrap();
    assert_eq!(resumed.step, 12);
    assert_eq!(straight.history.len(), resumed.history.len());
    for (x, y) in straight.history.iter().zip(&resumed.history) {
        assert_eq!(
            (x.step, x.train_loss, x.valid_loss),
            (y.step, y.train_loss, y.valid_loss)
        );
    }
    assert!(same_weights(a.path(), b.path()), "resumed weights differ");
}

#[test]
fn randomized_positions_train_and_resume_exactly() {
    let randomized = |steps| TrainConfig {
        randomized_positions: Some(64),
        ..tiny(steps, 1)
    };
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let straight = train(randomized(12), a.path(), QUIET, &Device::Cpu).unwrap();
    train(randomized(6), b.path(), QUIET, &Device::Cpu).unwrap();
    let resumed = resume(b.path(), Some(12), QUIET, &Device::Cpu).unwrap();
    let losses = |h: &[posenc_kotoba::task::Record]| -> Vec<(usize, f64, f64)> {
        h.iter()
            .map(|r| (r.step, r.train_loss, r.valid_loss))
            .collect()
    };
    assert_eq!(losses(&straight.history), losses(&resumed.history));
    assert!(same_weights(a.path(), b.path()), "resumed weights differ");
    // The positions matter: the same run on consecutive positions ends elsewhere.
    train(tiny(12, 1), c.path(), QUIET, &Device::Cpu).unwrap();
    assert!(!same_weights(a.path(), c.path()));
    // A range shorter than the sentences is refused before anything is written.
    let d = tempfile::tempdir().unwrap();
    let short = TrainConfig {
        randomized_positions: Some(3),
        ..tiny(2, 1)
    };
    let e = format!(
        "{:#}",
        train(short, &d.path().join("run"), QUIET, &Device::Cpu).unwrap_err()
    );
    assert!(e.contains("randomized_positions = 3"), "{e}");
    assert!(!d.path().join("run").exists());
}

#[test]
fn the_same_seed_gives_the_same_model() {
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let x = train(tiny(6, 7), a.path(), QUIET, &Device::Cpu).unwrap();
    let y = train(tiny(6, 7), b.path(), QUIET, &Device::Cpu).unwrap();
    train(tiny(6, 8), c.path(), QUIET, &Device::Cpu).unwrap();
    assert_eq!(x.history[0].valid_loss, y.history[0].valid_loss);
    assert!(same_weights(a.path(), b.path()));
    assert!(!same_weights(a.path(), c.path()));
}

#[test]
fn a_short_run_learns_to_translate() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = TrainConfig::default();
    cfg.data.train = 4000;
    cfg.run.steps = 200;
    cfg.run.eval_every = 100;
    cfg.run.save_every = 200;
    let state = train(cfg, dir.path(), QUIET, &Device::Cpu).unwrap();
    let (first, last) = (&state.history[0], state.history.last().unwrap());
    assert!(last.valid_loss < first.valid_loss, "{:?}", state.history);
    assert!(last.train_loss < 1.5 && last.valid_exact >= 0.8, "{last:?}");

    let translator = Translator::load(dir.path(), &Device::Cpu).unwrap();
    // The single- and two-clause examples of the spec.
    let spec = &SPEC_EXAMPLES[..5];
    let sources: Vec<String> = spec.iter().map(|(e, _)| e.to_string()).collect();
    let greedy = translator
        .translate(&sources, &DecodeConfig::default())
        .unwrap();
    let right = greedy.iter().zip(spec).filter(|(h, (_, k))| h == k).count();
    assert!(right >= 4, "{greedy:?}");

    // Beam search of size 1 is greedy search.
    let beam1 = DecodeConfig {
        beam: 1,
        ..Default::default()
    };
    let mut more = sources.clone();
    more.extend([
        "the fox ran and the cute rabbit found the bear at the station".to_string(),
        "the king waits".to_string(),
    ]);
    let as_beam: Vec<String> = more
        .iter()
        .map(|s| {
            let mut ids = translator.src.encode(s, 1).unwrap();
            ids.push(posenc_kotoba::vocab::EOS_ID);
            translator
                .tgt
                .decode(&posenc_kotoba::decode::beam(&translator.model, &ids, &beam1).unwrap())
        })
        .collect();
    assert_eq!(as_beam, translator.translate(&more, &beam1).unwrap());
    // A wider beam still produces grammatical output for the easy cases.
    let wide = translator
        .translate(
            &sources[..2],
            &DecodeConfig {
                beam: 4,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(wide.len(), 2);
}

#[test]
fn untrained_models_decode_the_same_greedily_and_with_beam_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tiny(1, 11);
    cfg.run.eval_every = 1;
    train(cfg, dir.path(), QUIET, &Device::Cpu).unwrap();
    let t = Translator::load(dir.path(), &Device::Cpu).unwrap();
    let cfg = DecodeConfig {
        beam: 1,
        max_len: 12,
        ..Default::default()
    };
    for s in ["the dog runs", "the big cat saw the fox in the park"] {
        let mut ids = t.src.encode(s, 1).unwrap();
        ids.push(posenc_kotoba::vocab::EOS_ID);
        let greedy =
            posenc_kotoba::decode::greedy(&t.model, std::slice::from_ref(&ids), cfg.max_len)
                .unwrap();
        let beam = posenc_kotoba::decode::beam(&t.model, &ids, &cfg).unwrap();
        assert_eq!(greedy[0], beam, "{s}");
    }
}

#[test]
fn batches_split_across_threads_are_repeatable_bit_for_bit() {
    // Large enough that every fused kernel splits its rows into several parallel blocks
    // (the tiny config fits in one), so a reduction whose order followed the scheduling
    // would show here.
    let cfg = || {
        let mut cfg = tiny(4, 5);
        cfg.model.d_model = 64;
        cfg.model.heads = 4;
        cfg.run.batch_size = 200;
        cfg
    };
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    for d in &dirs {
        train(cfg(), d.path(), QUIET, &Device::Cpu).unwrap();
    }
    assert!(same_weights(dirs[0].path(), dirs[1].path()));
    assert!(same_weights(dirs[0].path(), dirs[2].path()));
}

/// The shipped model's run directory was written before the one training loop (its
/// trainer.json has no `pending` losses): it still loads and resumes.
#[test]
fn a_run_written_before_the_one_loop_resumes() {
    let shipped = posenc_kotoba::task::shipped_model();
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&shipped).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    let text = std::fs::read_to_string(dir.path().join("trainer.json")).unwrap();
    assert!(
        !text.contains("pending"),
        "the fixture is no longer an old run"
    );
    let before = posenc_kotoba::task::TrainerState::load(dir.path()).unwrap();
    let resumed = resume(dir.path(), Some(before.step + 2), QUIET, &Device::Cpu).unwrap();
    assert_eq!(resumed.step, before.step + 2);
    assert_eq!(resumed.history[..before.history.len()], before.history[..]);
    assert_eq!(resumed.history.last().unwrap().step, before.step + 2);
    Translator::load(dir.path(), &Device::Cpu).unwrap();
}

/// A run records the process's peak memory while it trained, reset as training starts:
/// half a gigabyte touched and freed just before does not count; a checkpoint keeps the
/// figure, and a resumption keeps the larger.
#[test]
fn a_run_records_its_own_peak_memory() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let before = vec![1u8; 512 << 20];
    assert_eq!(
        before
            .iter()
            .step_by(4096)
            .map(|&b| b as usize)
            .sum::<usize>(),
        1 << 17
    );
    drop(before);
    let dir = tempfile::tempdir().unwrap();
    let state = train(tiny(6, 1), dir.path(), QUIET, &Device::Cpu).unwrap();
    let peak = state.peak_rss_mb.expect("a peak on Linux");
    assert!(peak > 1.0 && peak < 512.0, "{peak} MB");
    let saved = posenc_kotoba::task::TrainerState::load(dir.path()).unwrap();
    assert_eq!(saved.peak_rss_mb, Some(peak));
    let resumed = resume(dir.path(), Some(12), QUIET, &Device::Cpu).unwrap();
    let again = resumed.peak_rss_mb;
    assert!(again.is_some_and(|p| p >= peak), "{again:?} after {peak}");
}
