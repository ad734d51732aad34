//! A run of the task: it trains, resumes to the same weights, and its experiment's records
//! are tidy.

use candle_core::Device;
use posenc_train::job;
use posenc_vision::experiment::VisionExperimentConfig;
use posenc_vision::task::{Vision, VisionConfig};

fn tiny(steps: usize) -> VisionConfig {
    let mut cfg = VisionConfig::default();
    cfg.model.d_model = 16;
    cfg.model.heads = 2;
    cfg.model.d_ff = 32;
    cfg.model.layers = 1;
    cfg.model.grid = [4, 4];
    cfg.model.encoding = posenc::EncodingConfig::from_kind("rope-mixed").unwrap();
    cfg.run.steps = steps;
    cfg.run.batch_size = 8;
    cfg.run.warmup = 2;
    cfg.run.eval_every = 5;
    cfg.run.save_every = 5;
    cfg.eval_examples = 16;
    // A flat rate after the warm-up: a run resumed with more steps keeps its schedule.
    cfg.min_lr = cfg.lr;
    cfg
}

/// The tensors of a run's last checkpoint, by name.
fn weights(dir: &std::path::Path) -> Vec<(String, Vec<f32>)> {
    let file = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .expect("a weights file");
    let mut tensors: Vec<_> = candle_core::safetensors::load(&file, &Device::Cpu)
        .unwrap()
        .into_iter()
        .map(|(k, t)| (k, t.flatten_all().unwrap().to_vec1::<f32>().unwrap()))
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    tensors
}

#[test]
fn a_resumed_run_ends_with_the_weights_of_an_unbroken_one() {
    let root = tempfile::tempdir().unwrap();
    let (whole, halves) = (root.path().join("whole"), root.path().join("halves"));
    let opts = || posenc_train::fit::RunOptions {
        quiet: true,
        ..Default::default()
    };
    let dev = Device::Cpu;
    let a = job::train::<Vision>(tiny(10), &(), &whole, opts(), &dev).unwrap();
    job::train::<Vision>(tiny(5), &(), &halves, opts(), &dev).unwrap();
    let b = job::resume::<Vision>(&halves, Some(10), &(), opts(), &dev).unwrap();
    assert_eq!(a.step, 10);
    assert_eq!(b.step, 10);
    assert_eq!(weights(&whole), weights(&halves));
    let loss = |s: &posenc_vision::task::VisionState| s.history.last().unwrap().train_loss;
    assert_eq!(loss(&a), loss(&b));
    assert!(loss(&a).is_finite());
}

#[test]
fn the_experiment_writes_one_tidy_record_per_run_grid_and_question() {
    let root = tempfile::tempdir().unwrap();
    let mut cfg = VisionExperimentConfig::quick();
    cfg.base = tiny(3);
    cfg.encodings = ["none", "learned-2d"]
        .iter()
        .map(|k| k.parse().unwrap())
        .collect();
    cfg.seeds = 2;
    cfg.test_grids = vec![[4, 4], [6, 6]];
    cfg.test_examples = 14;
    let dev = Device::Cpu;
    let opts = posenc_train::fit::RunOptions {
        quiet: true,
        ..Default::default()
    };
    let results = posenc_train::experiment::run(&cfg.on(&dev), root.path(), opts).unwrap();
    // 2 encodings × 2 seeds × 2 grids × (all + 6 kinds).
    assert_eq!(results.records.len(), 2 * 2 * 2 * 7);
    for r in &results.records {
        assert_eq!(r.trained, r.grid == [4, 4]);
        assert!((0.0..=1.0).contains(&r.accuracy));
    }
    let all: Vec<_> = results
        .records
        .iter()
        .filter(|r| r.question == "all")
        .collect();
    assert!(all.iter().all(|r| r.examples == 14));
    // Each kind's examples add up to all of them.
    for a in &all {
        let parts: usize = results
            .records
            .iter()
            .filter(|r| r.run == a.run && r.grid == a.grid && r.question != "all")
            .map(|r| r.examples)
            .sum();
        assert_eq!(parts, 14);
    }
    // learned-2d was given the trained grid, and resampled to the larger one.
    let run = cfg.run_config(&cfg.encodings[1], 1);
    let json = serde_json::to_value(&run.model.encoding).unwrap();
    assert_eq!(json["grid"], serde_json::json!([4, 4]));
    let text = std::fs::read_to_string(root.path().join("results.md")).unwrap();
    assert!(text.contains("| learned-2d | 2 |"), "{text}");
    let drawn = posenc_vision::figures::vision(&results, root.path()).unwrap();
    assert!(drawn[0].ends_with("accuracy_by_grid.png") && drawn[0].exists());
}

/// A learned table that may not resample declares its grid: an experiment that tests past
/// it is refused by name before anything is trained or written.
#[test]
fn a_test_grid_past_a_fixed_table_is_refused_before_training() {
    let root = tempfile::tempdir().unwrap();
    let mut cfg = VisionExperimentConfig::quick();
    cfg.base = tiny(3);
    cfg.encodings = vec!["learned-2d:resample=false".parse().unwrap()];
    cfg.test_grids = vec![[4, 4], [6, 6]];
    let opts = posenc_train::fit::RunOptions {
        quiet: true,
        ..Default::default()
    };
    let e = posenc_train::experiment::run(&cfg.on(&Device::Cpu), root.path(), opts)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("learned-2d") && e.contains("4 × 4") && e.contains("6 × 6"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
    // Resampling, it is tested there.
    cfg.encodings = vec!["learned-2d".parse().unwrap()];
    assert!(cfg.validate().is_ok());
}
