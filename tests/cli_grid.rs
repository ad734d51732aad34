//! The one experiment driver as a user runs it: shards run as separate processes and
//! merged equal the one-process run, record for record; a bad shard or merge is named and
//! changes nothing; and every experiment refuses an `--out` holding another kind of run or
//! results.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{posenc, snapshot, text, tiny_config, train_tiny};

/// `posenc lengthgen experiment` over a tiny grid (2 encodings × 2 seeds, a 1-layer
/// decoder) into `out`, with `extra` flags.
fn grid(out: &Path, extra: &[&str]) -> Output {
    posenc()
        .args([
            "lengthgen",
            "experiment",
            "--task",
            "copy",
            "--budget",
            "quick",
            "--steps",
            "20",
            "--encodings",
            "none,rope",
            "--test-instances",
            "8",
            "--d-model",
            "16",
            "--layers",
            "1",
            "--heads",
            "2",
            "--quiet",
        ])
        .args(if extra.contains(&"--seeds") {
            &[][..]
        } else {
            &["--seeds", "2"][..]
        })
        .args(extra)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

/// `posenc lengthgen experiment --merge` in `out`, with `extra` flags: the grid is the one
/// the shards recorded.
fn merge(out: &Path, extra: &[&str]) -> Output {
    posenc()
        .args(["lengthgen", "experiment", "--merge", "--quiet"])
        .args(extra)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

fn ok(out: Output) -> Output {
    assert!(out.status.success(), "{}", text(&out).1);
    out
}

/// The error of a command that must fail, with its stdout empty.
fn refused(out: Output) -> String {
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "succeeded: {stdout}");
    stderr
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn shards_run_apart_and_merged_equal_the_one_process_run() {
    let dir = tempfile::tempdir().unwrap();
    let sharded = dir.path().join("sharded");
    // Three shards of four cells, as three processes at once.
    let children: Vec<_> = (1..=3)
        .map(|i| {
            let sharded = sharded.clone();
            std::thread::spawn(move || grid(&sharded, &["--shard", &format!("{i}/3")]))
        })
        .collect();
    for child in children {
        let out = ok(child.join().unwrap());
        let said = text(&out).0;
        assert!(
            said.contains(" of 3 done") && said.contains("--merge"),
            "{said}"
        );
    }
    assert!(!sharded.join("results.json").exists());

    // What goes wrong in a merge is named, and changes nothing.
    let before = snapshot(&sharded);
    let bad = |name: &str, setup: &dyn Fn(&Path), extra: &[&str], says: &str| {
        let copy = dir.path().join(name);
        copy_dir(&sharded, &copy);
        setup(&copy);
        let kept = snapshot(&copy);
        let err = refused(merge(&copy, extra));
        assert!(err.contains(says), "{name}: {err}");
        assert_eq!(snapshot(&copy), kept, "{name} changed its directory");
    };
    bad(
        "missing",
        &|d| std::fs::remove_file(d.join("shard-2-of-3.json")).unwrap(),
        &[],
        "shard 2/3 is missing",
    );
    bad(
        "unfinished",
        &|d| {
            let path = d.join("shard-1-of-3.json");
            let mut shard = json(&path);
            shard["cells"].as_array_mut().unwrap().pop();
            std::fs::write(&path, shard.to_string()).unwrap();
        },
        &[],
        "shard 1/3 is unfinished",
    );
    bad(
        "another-grid",
        &|d| {
            let path = d.join("shard-2-of-3.json");
            let mut shard = json(&path);
            shard["config"]["seeds"] = 3.into();
            std::fs::write(&path, shard.to_string()).unwrap();
        },
        &[],
        "shard-2-of-3.json ran another grid than shard-1-of-3.json (they differ in seeds)",
    );
    bad(
        "settings-given",
        &|_| {},
        &["--steps", "30", "--d-model", "32"],
        "leave out --steps, --d-model",
    );
    bad(
        "two-splits",
        &|d| {
            std::fs::copy(d.join("shard-1-of-3.json"), d.join("shard-1-of-2.json"))
                .map(drop)
                .unwrap()
        },
        &[],
        "two splits",
    );
    bad(
        "renamed",
        &|d| std::fs::rename(d.join("shard-3-of-3.json"), d.join("shard-3-of-4.json")).unwrap(),
        &[],
        "two splits",
    );
    for shard in ["0/0", "3/2", "1/0", "two/3"] {
        let err = refused(grid(&dir.path().join("never"), &["--shard", shard]));
        assert!(err.contains("a shard is I/N"), "{shard}: {err}");
    }
    assert!(!dir.path().join("never").exists());
    assert_eq!(snapshot(&sharded), before);

    // The merge writes what one process running the whole grid writes: byte for byte over
    // the same runs (reused), and record for record against a fresh run elsewhere.
    ok(merge(&sharded, &[]));
    let merged = std::fs::read(sharded.join("results.json")).unwrap();
    assert!(sharded.join("accuracy_by_length.png").exists());
    ok(grid(&sharded, &[]));
    assert_eq!(std::fs::read(sharded.join("results.json")).unwrap(), merged);
    let whole = dir.path().join("whole");
    ok(grid(&whole, &[]));
    let (a, b) = (
        json(&sharded.join("results.json")),
        json(&whole.join("results.json")),
    );
    assert_eq!(a["records"].as_array().unwrap().len(), 2 * 2 * 16);
    assert_eq!(a["records"], b["records"]);
    assert_eq!(a["config"], b["config"]);
}

/// Copies the files of `from` into `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    for (path, bytes) in snapshot(from) {
        let target = to.join(path.strip_prefix(from).unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(target, bytes).unwrap();
    }
}

/// The three experiments, each with settings that would train in moments if it ran.
fn experiment(kind: &str, out: &Path) -> Output {
    let args: &[&str] = match kind {
        "kotoba" => &["kotoba", "experiment", "--encodings", "none"],
        "lm" => &["lm", "experiment", "--encodings", "none"],
        _ => &[
            "lengthgen",
            "experiment",
            "--task",
            "copy",
            "--encodings",
            "none",
        ],
    };
    posenc()
        .args(args)
        .args([
            "--budget", "quick", "--steps", "1", "--seeds", "1", "--quiet",
        ])
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn every_experiment_refuses_an_out_holding_another_kind_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let results = |kind: &str| -> PathBuf {
        root.join(match kind {
            "kotoba" => "docs/experiment/results.json",
            "lm" => "docs/lm-experiment/results.json",
            _ => "docs/lengthgen/copy/results.json",
        })
    };
    // A shard of a lengthgen grid, and a training run of two tasks.
    let shard_dir = dir.path().join("shard");
    ok(grid(&shard_dir, &["--shard", "1/4"]));
    let kotoba_run = dir.path().join("kotoba-run");
    train_tiny(&tiny_config(dir.path()), &kotoba_run, 2);
    let lengthgen_run = dir.path().join("lengthgen-run");
    ok(posenc()
        .args([
            "lengthgen",
            "train",
            "--task",
            "copy",
            "--steps",
            "2",
            "--quiet",
        ])
        .args(["--d-model", "16", "--layers", "1", "--heads", "2", "--out"])
        .arg(&lengthgen_run)
        .output()
        .unwrap());

    let kinds = ["kotoba", "lm", "lengthgen"];
    let name = |kind: &str| match kind {
        "kotoba" => "a translation experiment",
        "lm" => "a language-model experiment",
        _ => "a lengthgen experiment",
    };
    for kind in kinds {
        let mut holdings: Vec<(String, PathBuf)> = Vec::new();
        for other in kinds.iter().filter(|o| **o != kind) {
            let out = dir.path().join(format!("{kind}-holds-{other}-results"));
            std::fs::create_dir_all(&out).unwrap();
            std::fs::copy(results(other), out.join("results.json")).unwrap();
            holdings.push((format!("results that are not {}'s", name(kind)), out));
        }
        if kind != "lengthgen" {
            let out = dir.path().join(format!("{kind}-holds-a-shard"));
            copy_dir(&shard_dir, &out);
            std::fs::remove_file(out.join("results.json")).ok();
            holdings.push((format!("is not a shard of {}", name(kind)), out));
        }
        for run in [&kotoba_run, &lengthgen_run] {
            let run_name = run.file_name().unwrap().to_string_lossy();
            let out = dir.path().join(format!("{kind}-in-{run_name}"));
            copy_dir(run, &out);
            holdings.push(("holds a training run".to_string(), out.clone()));
            // A run with a file of its owner's beside it, as the shipped models keep a README.
            let beside = dir
                .path()
                .join(format!("{kind}-in-{run_name}-with-a-readme"));
            copy_dir(&out, &beside);
            std::fs::write(beside.join("README.md"), "a model\n").unwrap();
            holdings.push(("holds a training run".to_string(), beside));
        }
        for (says, out) in holdings {
            let before = snapshot(&out);
            let err = refused(experiment(kind, &out));
            assert!(
                err.contains(says.as_str()),
                "{kind} in {}: {err}",
                out.display()
            );
            assert_eq!(snapshot(&out), before, "{kind} changed {}", out.display());
        }
    }
}

/// `--format json` puts the results alone on standard output, where a parser reads them:
/// an experiment's records, a shard's file, a run's state.
#[test]
fn json_results_stand_alone_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let parse = |o: &Output| -> serde_json::Value {
        let (stdout, stderr) = text(o);
        assert!(o.status.success(), "{stderr}");
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    };
    let exp = parse(&ok(grid(&dir.path().join("a"), &["--format", "json"])));
    assert_eq!(exp["records"].as_array().unwrap().len(), 2 * 2 * 16);
    let shard = parse(&ok(grid(
        &dir.path().join("b"),
        &["--shard", "1/2", "--format", "json"],
    )));
    assert_eq!(shard["shard"], "1/2");
    assert!(Path::new(shard["file"].as_str().unwrap()).is_file());
    let run = dir.path().join("run");
    let trained = posenc()
        .args([
            "lengthgen",
            "train",
            "--task",
            "copy",
            "--steps",
            "3",
            "--quiet",
        ])
        .args([
            "--d-model",
            "16",
            "--layers",
            "1",
            "--heads",
            "2",
            "--format",
            "json",
            "--out",
        ])
        .arg(&run)
        .output()
        .unwrap();
    let state = parse(&trained);
    assert_eq!(state["state"]["step"], 3);
    assert_eq!(Path::new(state["out"].as_str().unwrap()), run);
}
