//! The experiment runner: the same seed gives the same table, a finished run is reused
//! rather than retrained, a different config is never overwritten, and a diverging
//! encoding becomes a row saying so instead of ending the experiment.

use candle_core::Device;
use posenc_kotoba::data::DataConfig;
use posenc_kotoba::experiment::{self, Experiment, ExperimentConfig};
use posenc_kotoba::task::{RunOptions, TrainConfig};
use posenc_train::fit::RunSchedule;
use posenc_transformer::Config;

fn tiny(kinds: &[&str]) -> ExperimentConfig {
    ExperimentConfig {
        base: TrainConfig {
            model: Config {
                d_model: 16,
                heads: 2,
                d_ff: 32,
                encoder_layers: 1,
                decoder_layers: 1,
                dropout: 0.0,
                ..Config::default()
            },
            data: DataConfig {
                train: 300,
                valid: 16,
                test: 16,
                test_long: 8,
                order_swap: 8,
                ..DataConfig::default()
            },
            run: RunSchedule {
                steps: 12,
                batch_size: 16,
                warmup: 4,
                eval_every: 6,
                save_every: 6,
                ..TrainConfig::default().run
            },
            eval_sentences: 8,
            ..TrainConfig::default()
        },
        encodings: kinds.iter().map(|k| k.parse().unwrap()).collect(),
        seeds: 1,
    }
}

const QUIET: RunOptions = RunOptions {
    quiet: true,
    force: false,
    stop_after: None,
    log_dir: None,
};

#[test]
fn the_same_seed_gives_the_same_table_and_finished_runs_are_reused() {
    let cfg = tiny(&["none", "rope"]);
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = posenc_train::experiment::run(&cfg.on(&Device::Cpu), a.path(), QUIET).unwrap();
    let second = posenc_train::experiment::run(&cfg.on(&Device::Cpu), b.path(), QUIET).unwrap();
    assert_eq!(first.table(), second.table());
    assert_eq!(first.clauses_table(), second.clauses_table());
    for (x, y) in first.results.iter().zip(&second.results) {
        assert_eq!(x.metrics, y.metrics, "{}", x.label);
        assert_eq!(x.history.len(), 2);
        // Only the clock may differ.
        let strip = |r: &experiment::EncodingResult| {
            r.history
                .iter()
                .map(|h| (h.step, h.train_loss, h.valid_loss))
                .collect::<Vec<_>>()
        };
        assert_eq!(strip(x), strip(y));
    }
    // results.json round-trips and holds what run() returned.
    let saved = Experiment::load(&a.path().join(experiment::RESULTS_JSON)).unwrap();
    assert_eq!(saved, first);
    let md = std::fs::read_to_string(a.path().join(experiment::RESULTS_MD)).unwrap();
    assert!(md.contains(&first.table()));

    // Running again over a finished experiment reuses its runs: same rows, same clocks.
    let again = posenc_train::experiment::run(&cfg.on(&Device::Cpu), a.path(), QUIET).unwrap();
    assert_eq!(again, first);

    // A longer budget resumes the runs from their last checkpoint instead of starting over.
    let mut longer = cfg.clone();
    longer.base.run.steps = 18;
    let resumed = posenc_train::experiment::run(&longer.on(&Device::Cpu), a.path(), QUIET).unwrap();
    for (r, before) in resumed.results.iter().zip(&first.results) {
        assert_eq!(r.history.last().unwrap().step, 18);
        assert_eq!(r.history[..2], before.history[..], "{}", r.label);
    }
}

#[test]
fn changing_the_number_of_seeds_reuses_the_first_seeds_run_where_it_is() {
    let one = tiny(&["sinusoidal"]);
    let mut two = one.clone();
    two.seeds = 2;
    let modified = |p: &std::path::Path| std::fs::metadata(p).unwrap().modified().unwrap();

    // One seed, then two: the first seed's run stays in `sinusoidal/` and is reused (the
    // same record, its clocks included), the second trains into `seed-43` beside it.
    let dir = tempfile::tempdir().unwrap();
    let first = posenc_train::experiment::run(&one.on(&Device::Cpu), dir.path(), QUIET).unwrap();
    let weights = dir.path().join("sinusoidal/model.safetensors");
    let trained = modified(&weights);
    let grown = posenc_train::experiment::run(&two.on(&Device::Cpu), dir.path(), QUIET).unwrap();
    assert_eq!(grown.results[0], first.results[0]);
    assert_eq!(modified(&weights), trained);
    assert!(!dir.path().join("sinusoidal/seed-42").exists());
    assert!(dir
        .path()
        .join("sinusoidal/seed-43/model.safetensors")
        .is_file());
    // Both layouts read back: two seeds again, and one again, retrain nothing.
    assert_eq!(
        posenc_train::experiment::run(&two.on(&Device::Cpu), dir.path(), QUIET).unwrap(),
        grown
    );
    assert_eq!(
        posenc_train::experiment::run(&one.on(&Device::Cpu), dir.path(), QUIET)
            .unwrap()
            .results,
        first.results
    );

    // Two seeds, then one: the first seed's run is read from `seed-42`.
    let dir = tempfile::tempdir().unwrap();
    let both = posenc_train::experiment::run(&two.on(&Device::Cpu), dir.path(), QUIET).unwrap();
    let cut = posenc_train::experiment::run(&one.on(&Device::Cpu), dir.path(), QUIET).unwrap();
    assert_eq!(cut.results[..], both.results[..1]);
    assert!(!dir.path().join("sinusoidal/model.safetensors").exists());
}

#[test]
fn only_seed_directories_may_stand_beside_a_runs_files() {
    use posenc_train::rundir::{inspect, Contents};
    let dir = tempfile::tempdir().unwrap();
    posenc_train::experiment::run(&tiny(&["none"]).on(&Device::Cpu), dir.path(), QUIET).unwrap();
    let run = dir.path().join("none");
    assert_eq!(inspect(&run).unwrap(), Contents::Run);
    std::fs::create_dir(run.join("seed-43")).unwrap();
    assert_eq!(inspect(&run).unwrap(), Contents::Run);
    // Another directory, or a file with a seed directory's name, is not ours.
    std::fs::create_dir(run.join("seed-x")).unwrap();
    std::fs::write(run.join("seed-44"), "").unwrap();
    assert_eq!(
        inspect(&run).unwrap(),
        Contents::Foreign(vec!["seed-44".into(), "seed-x".into()])
    );
}

#[test]
fn a_different_config_in_the_same_directory_is_refused_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny(&["sinusoidal"]);
    posenc_train::experiment::run(&cfg.on(&Device::Cpu), dir.path(), QUIET).unwrap();
    let weights = std::fs::read(dir.path().join("sinusoidal/model.safetensors")).unwrap();
    let mut other = cfg.clone();
    other.base.run.seed += 1;
    let err =
        posenc_train::experiment::run(&other.on(&Device::Cpu), dir.path(), QUIET).unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("different config") && msg.contains("sinusoidal"),
        "{msg}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("sinusoidal/model.safetensors")).unwrap(),
        weights
    );
}

#[test]
fn a_diverging_encoding_is_a_row_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tiny(&["index", "sinusoidal"]);
    // A learning rate no model survives: the raw position index blows up first.
    cfg.base.lr_factor = 1e30;
    let exp = posenc_train::experiment::run(&cfg.on(&Device::Cpu), dir.path(), QUIET).unwrap();
    let index = &exp.results[0];
    assert!(index.metrics.is_none());
    let why = index.diverged.as_deref().unwrap();
    assert!(why.contains("diverged"), "{why}");
    assert!(exp.table().contains(why));
    assert_eq!(
        exp.results.len(),
        2,
        "the experiment went on after the divergence"
    );
}

#[test]
fn listing_an_encoding_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = posenc_train::experiment::run(
        &tiny(&["rope", "none", "rope"]).on(&Device::Cpu),
        dir.path(),
        QUIET,
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("`rope`") && msg.contains("label"), "{msg}");
}

#[test]
fn two_settings_of_one_kind_over_seeds_are_tidy_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tiny(&["rope", "rope:base=100"]);
    cfg.seeds = 2;
    let exp = posenc_train::experiment::run(&cfg.on(&Device::Cpu), dir.path(), QUIET).unwrap();
    let runs: Vec<(&str, u64)> = exp
        .records
        .iter()
        .map(|r| (r.run.label.as_str(), r.run.seed))
        .collect();
    assert_eq!(
        runs,
        [
            ("rope", 42),
            ("rope", 43),
            ("rope:base=100", 42),
            ("rope:base=100", 43)
        ]
    );
    assert!(dir
        .path()
        .join("rope_base=100/seed-43/model.safetensors")
        .is_file());
    // The seeds differ, and the row is their mean ± standard deviation.
    let exact: Vec<f64> = exp.records.iter().map(|r| r.valid_loss.unwrap()).collect();
    assert_ne!(exact[0], exact[1]);
    let mean = (exact[0] + exact[1]) / 2.0;
    let sd = ((exact[0] - mean).powi(2) + (exact[1] - mean).powi(2)).sqrt();
    let want = format!("{mean:.4} ± {sd:.4}");
    assert!(exp.table().contains(&want), "{want} in\n{}", exp.table());
    // results.json's records are flat, and reading it back gives the same experiment.
    let path = dir.path().join("results.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for r in json["records"].as_array().unwrap() {
        assert!(r
            .as_object()
            .unwrap()
            .values()
            .all(|v| !v.is_object() && !v.is_array()));
    }
    assert_eq!(Experiment::load(&path).unwrap(), exp);
}

/// `results.md` says when the runs trained at randomized positions, and over what range,
/// and says nothing of them otherwise.
#[test]
fn the_report_names_randomized_positions() {
    let report = |randomized: Option<usize>| {
        let mut config = tiny(&["rope"]);
        config.base.randomized_positions = randomized;
        Experiment {
            kind: None,
            config,
            results: Vec::new(),
            records: Vec::new(),
        }
        .markdown()
    };
    let with = report(Some(64));
    assert!(
        with.contains("randomized positions (a sorted random subset of 0..64 per step)"),
        "{with}"
    );
    assert!(!report(None).contains("randomized"));
}
