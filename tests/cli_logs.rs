//! Training logs that TensorBoard reads: a tiny run, stopped and resumed, read back by
//! TensorBoard's own event reader (`tests/tensorboard/read.py`, the `tensorboard` package
//! from PyPI that `scripts/install_clients.sh` installs), which draws each curve once, equal
//! to `scalars.jsonl` and to the run's own validation history.

use std::collections::BTreeMap;

use crate::common::{posenc, text, write_config};

/// A tiny language model: 30 steps, a validation and a checkpoint every 10.
const TINY_LM: &str = r#"{"model": {"d_model": 32, "heads": 2, "d_ff": 64, "layers": 1, "context": 16},
    "steps": 30, "batch_size": 8, "eval_every": 10, "save_every": 10}"#;

type Curves = BTreeMap<String, Vec<(u64, f64)>>;

/// The curves of `dir` as TensorBoard's reader gives them.
fn tensorboard(python: &std::path::Path, dir: &std::path::Path) -> Curves {
    let script = posenc_testkit::repo().join("tests/tensorboard/read.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The curves of `dir`'s `scalars.jsonl`, narrowed to the f32 the event files hold.
fn jsonl(dir: &std::path::Path) -> Curves {
    let mut curves = Curves::new();
    for line in std::fs::read_to_string(dir.join("scalars.jsonl"))
        .unwrap()
        .lines()
    {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let value = v["value"].as_f64().unwrap() as f32;
        curves
            .entry(v["tag"].as_str().unwrap().to_string())
            .or_default()
            .push((v["step"].as_u64().unwrap(), f64::from(value)));
    }
    curves
}

fn steps(curve: &[(u64, f64)]) -> Vec<u64> {
    curve.iter().map(|&(s, _)| s).collect()
}

#[test]
fn tensorboard_reads_a_resumed_runs_curves_once() {
    let Some(python) = posenc_testkit::python_client(
        "tensorboard",
        "tensorboard_reads_a_resumed_runs_curves_once",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "lm.json", TINY_LM);
    let (run, logs) = (dir.path().join("run"), dir.path().join("tb/run"));
    let train = |extra: &[&str]| {
        let o = posenc()
            .args(["lm", "train", "--quiet", "--out"])
            .arg(&run)
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
    };
    let config = config.to_str().unwrap();
    train(&["--config", config, "--log-dir", logs.to_str().unwrap()]);
    // A process killed at step 35 logged five steps past the last checkpoint, at 30.
    let mut killed = posenc_train::logs::ScalarLog::resume(&logs, 30).unwrap();
    for step in 31..=35 {
        killed.write(step, &[("train/loss", 1e6)]).unwrap();
    }
    killed.flush().unwrap();
    drop(killed);
    // The next continues the same logs from the checkpoint, where the first placed them.
    train(&["--resume", "--steps", "40"]);
    assert!(
        !run.join("logs").exists(),
        "--log-dir placed them elsewhere"
    );

    let read = tensorboard(&python, &logs);
    assert_eq!(
        read,
        jsonl(&logs),
        "TensorBoard reads what scalars.jsonl holds"
    );
    let names: Vec<&str> = read.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "train/loss",
            "train/loss_mean",
            "train/lr",
            "train/tokens_per_second",
            "valid/loss"
        ]
    );
    for tag in ["train/loss", "train/lr", "train/tokens_per_second"] {
        assert_eq!(steps(&read[tag]), (1..=40).collect::<Vec<_>>(), "{tag}");
    }
    // The validations are the run's own history.
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("trainer.json")).unwrap()).unwrap();
    let history: Vec<(u64, f64)> = state["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let loss = r["valid_loss"].as_f64().unwrap() as f32;
            (r["step"].as_u64().unwrap(), f64::from(loss))
        })
        .collect();
    assert_eq!(steps(&history), [10, 20, 30, 40]);
    assert_eq!(read["valid/loss"], history);
    assert!(read["train/lr"].iter().all(|&(_, lr)| lr > 0.0));
    assert!(
        read["train/loss"].iter().all(|&(_, loss)| loss < 10.0),
        "the killed steps are gone"
    );

    // A new run may not write into another run's logs, unless forced; nothing is written.
    let other = dir.path().join("other");
    let o = posenc()
        .args(["lm", "train", "--quiet", "--config", config, "--out"])
        .arg(&other)
        .arg("--log-dir")
        .arg(&logs)
        .output()
        .unwrap();
    let (_, stderr) = text(&o);
    assert!(
        !o.status.success() && stderr.contains("another run's logs"),
        "{stderr}"
    );
    assert!(!other.exists());
}
