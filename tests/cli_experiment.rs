//! `posenc experiment --quick` and `posenc plot` as a user runs them. The quick
//! experiment checks the documents' central claim: without positional information the
//! encoder sees a bag of words, so a clause and its subject/object swap cannot both be
//! translated; with the sinusoidal encoding they can.

use std::path::Path;
use std::process::{Command, Output};

fn posenc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_posenc"))
        .args(args)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into()
}

/// The width and height of a PNG file, read from its IHDR chunk.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        &bytes[..8],
        b"\x89PNG\r\n\x1a\n",
        "{} is not a PNG",
        path.display()
    );
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}

#[test]
fn quick_experiment_shows_that_order_needs_position() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("exp");
    let quick = || {
        posenc(&[
            "experiment",
            "--quick",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let run = quick();
    assert!(run.status.success(), "{}", stderr(&run));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let row = |kind: &str| {
        json["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["label"] == kind)
            .unwrap_or_else(|| panic!("no row for {kind}"))
            .clone()
    };
    let swap = |kind: &str| row(kind)["metrics"]["order_swap"].as_f64().unwrap();
    assert!(
        swap("none") <= 0.6,
        "none got {} of the order swaps",
        swap("none")
    );
    assert!(
        swap("sinusoidal") >= 0.95,
        "sinusoidal got only {} of the order swaps",
        swap("sinusoidal")
    );
    // Every step budget was spent and validated along the way.
    for kind in ["none", "sinusoidal"] {
        let history = row(kind)["history"].as_array().unwrap().clone();
        assert_eq!(history.last().unwrap()["step"], 500);
        assert!(history.len() >= 5);
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    for kind in ["| none |", "| sinusoidal |"] {
        assert!(md.contains(kind), "results.md lacks {kind}:\n{md}");
    }
    let (w, h) = png_size(&out.join("curves.png"));
    assert!(w >= 800 && h >= 400);
    png_size(&out.join("by_length.png"));
    png_size(&out.join("sinusoidal/attention.png"));

    // The same command again reuses the trained runs, plots and all, and reports the same.
    let again = quick();
    assert!(again.status.success(), "{}", stderr(&again));
    let json2: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    for (a, b) in json["results"]
        .as_array()
        .unwrap()
        .iter()
        .zip(json2["results"].as_array().unwrap())
    {
        assert_eq!(a["metrics"], b["metrics"], "{}", a["label"]);
    }
}

#[test]
fn plot_encoding_draws_every_kind() {
    let dir = tempfile::tempdir().unwrap();
    for kind in posenc::EncodingConfig::kinds() {
        let path = dir.path().join(format!("{kind}.png"));
        let out = posenc(&[
            "plot",
            "encoding",
            "--kind",
            kind,
            "--d-model",
            "32",
            "--len",
            "40",
            "--out",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{kind}: {}", stderr(&out));
        let (w, h) = png_size(&path);
        assert!(w >= 1000 && h >= 400, "{kind}: {w}×{h}");
    }
}

/// An encoding with weights draws the same figure every time from the same seed (its
/// weights drawn as training draws them), and another from another seed.
#[test]
fn plot_encoding_is_the_same_from_the_same_seed() {
    let dir = tempfile::tempdir().unwrap();
    let draw = |name: &str, seed: &str| {
        let path = dir.path().join(name);
        let out = posenc(&[
            "plot",
            "encoding",
            "--encoding",
            "t5",
            "--len",
            "16",
            "--seed",
            seed,
            "--out",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        std::fs::read(path).unwrap()
    };
    let (a, b, c) = (draw("a.png", "0"), draw("b.png", "0"), draw("c.png", "1"));
    assert!(a == b, "seed 0 drew two figures");
    assert!(a != c, "seeds 0 and 1 drew one figure");
}

#[test]
fn plot_attention_draws_the_shipped_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("attention.png");
    let out = posenc(&[
        "plot",
        "attention",
        "--sentence",
        "the cat sees the dog in the park",
        "--out",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // 4 heads across; 2 encoder and 2 cross-attention layers down.
    let (w, h) = png_size(&path);
    assert_eq!((w, h), (4 * 360, 4 * 340 + 40));
}

/// Every experiment's figures are redrawn from a stored results.json (the published ones),
/// and a results file that is not one is an error naming it.
#[test]
fn plot_redraws_an_experiment_from_its_results() {
    let dir = tempfile::tempdir().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    for (command, results, figures) in [
        (
            "experiment",
            "docs/experiment/results.json",
            &["curves.png", "by_length.png"][..],
        ),
        (
            "lm-experiment",
            "docs/lm-experiment/results.json",
            &["extrapolation.png", "by_position.png"][..],
        ),
        (
            "lengthgen",
            "docs/lengthgen/copy/results.json",
            &["accuracy_by_length.png"][..],
        ),
    ] {
        let out = dir.path().join(command);
        let o = posenc(&[
            "plot",
            command,
            "--results",
            &format!("{root}/{results}"),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{command}: {}", stderr(&o));
        for f in figures {
            let (w, h) = png_size(&out.join(f));
            assert!(w >= 600 && h >= 400, "{command}/{f}: {w}×{h}");
        }
        let wrong = posenc(&[
            "plot",
            command,
            "--results",
            &format!("{root}/Cargo.toml"),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(!wrong.status.success());
        assert!(stderr(&wrong).contains("Cargo.toml"), "{}", stderr(&wrong));
    }
}

#[test]
fn bad_plot_input_is_an_error_naming_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("x.png");
    let png = png.to_str().unwrap();
    for (args, cause) in [
        (
            vec![
                "plot",
                "encoding",
                "--kind",
                "sinusoidal",
                "--d-model",
                "7",
                "--out",
                png,
            ],
            "7",
        ),
        (
            vec![
                "plot",
                "encoding",
                "--kind",
                "sinusoidal",
                "--len",
                "2",
                "--out",
                png,
            ],
            "--len",
        ),
        (
            vec!["plot", "encoding", "--kind", "wavelet", "--out", png],
            "wavelet",
        ),
        (
            vec![
                "plot",
                "attention",
                "--sentence",
                "the zebra sees the cat",
                "--out",
                png,
            ],
            "zebra",
        ),
        (
            vec![
                "experiment",
                "--quick",
                "--encodings",
                "none,none",
                "--out",
                png,
            ],
            "twice",
        ),
    ] {
        let out = posenc(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            stderr(&out).contains(cause),
            "{args:?}: the error does not name `{cause}`: {}",
            stderr(&out)
        );
    }
    assert!(!Path::new(png).exists(), "a failed plot left a file");
}

/// A tiny `posenc lengthgen` end to end (in its earlier spelling, without the verb): two
/// settings of one kind, two seeds each, a decoder of the size asked for, tidy records and
/// the figure; `lengthgen eval` of one run gives its records again; then a directory
/// holding a translation run is refused.
#[test]
fn lengthgen_runs_labels_over_seeds_and_writes_tidy_records() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lg");
    let run = |out: &Path| {
        posenc(&[
            "lengthgen",
            "--task",
            "reverse",
            "--quick",
            "--quiet",
            "--encodings",
            "none,rope:base=100",
            "--seeds",
            "2",
            "--steps",
            "4",
            "--train-lengths",
            "1-3",
            "--lengths",
            "2,6",
            "--test-instances",
            "4",
            "--d-model",
            "24",
            "--layers",
            "1",
            "--heads",
            "2",
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let o = run(&out);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("| none | 2 |") && table.contains("| rope:base=100 | 2 |"),
        "{table}"
    );
    assert!(table.contains(" 2* |") && table.contains(" 6 |"), "{table}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["train_lengths"], serde_json::json!([1, 3]));
    assert_eq!(json["task"], "reverse");
    let model = &json["config"]["base"]["model"];
    assert_eq!(
        [
            &model["d_model"],
            &model["d_ff"],
            &model["layers"],
            &model["heads"]
        ],
        [24, 96, 1, 2],
        "{model}"
    );
    assert_eq!(json["records"].as_array().unwrap().len(), 2 * 2 * 2);
    let (w, h) = png_size(&out.join("accuracy_by_length.png"));
    assert!(w >= 600 && h >= 400);
    assert!(out.join("rope_base=100/seed-2/model.safetensors").is_file());

    // `lengthgen eval` on one of the grid's runs answers what the grid recorded for it:
    // the same test instances (one seed), the same scores.
    let e = posenc(&[
        "lengthgen",
        "eval",
        "--model",
        out.join("rope_base=100/seed-2").to_str().unwrap(),
        "--lengths",
        "2,6",
        "--test-instances",
        "4",
        "--format",
        "json",
    ]);
    assert!(e.status.success(), "{}", stderr(&e));
    let eval: serde_json::Value = serde_json::from_slice(&e.stdout).unwrap();
    let recorded: Vec<(u64, f64, f64)> = json["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["label"] == "rope:base=100" && r["seed"] == 2)
        .map(|r| {
            let f = |k: &str| r[k].as_f64().unwrap();
            (
                r["length"].as_u64().unwrap(),
                f("accuracy"),
                f("token_accuracy"),
            )
        })
        .collect();
    let scored: Vec<(u64, f64, f64)> = eval["scores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let f = |k: &str| s["score"][k].as_f64().unwrap();
            (s["length"].as_u64().unwrap(), f("exact"), f("token"))
        })
        .collect();
    assert_eq!(recorded.len(), 2);
    assert_eq!(scored, recorded);

    // An --out holding a translation run is refused, named, and left as it was.
    let run_dir = dir.path().join("kotoba");
    let t = posenc(&[
        "train",
        "--steps",
        "1",
        "--quiet",
        "--out",
        run_dir.to_str().unwrap(),
    ]);
    assert!(t.status.success(), "{}", stderr(&t));
    let before = std::fs::read_dir(&run_dir).unwrap().count();
    let o = run(&run_dir);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("holds a training run"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_dir(&run_dir).unwrap().count(), before);

    // `lengthgen eval` of that translation run says what it is.
    let e = posenc(&["lengthgen", "eval", "--model", run_dir.to_str().unwrap()]);
    assert!(!e.status.success());
    assert!(
        stderr(&e).contains("is a translation model"),
        "{}",
        stderr(&e)
    );
}

/// `posenc lengthgen train` trains one run and `--resume` extends it; `eval` reads it, and
/// a directory that is not a lengthgen run is named as such.
#[test]
fn lengthgen_trains_one_run_resumes_it_and_evaluates_it() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("one");
    let train = |extra: &[&str]| {
        let mut args = vec![
            "lengthgen",
            "train",
            "--task",
            "copy",
            "--quick",
            "--quiet",
            "--encoding",
            "alibi",
            "--train-lengths",
            "1-3",
            "--d-model",
            "16",
            "--layers",
            "1",
            "--heads",
            "2",
            "--out",
            run.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        posenc(&args)
    };
    let o = train(&["--steps", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("after 3 steps"));
    let o = train(&["--steps", "5", "--resume"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("after 5 steps"));
    let e = posenc(&[
        "lengthgen",
        "eval",
        "--model",
        run.to_str().unwrap(),
        "--lengths",
        "2,5",
    ]);
    assert!(e.status.success(), "{}", stderr(&e));
    let table = String::from_utf8_lossy(&e.stdout);
    assert!(
        table.contains("| 2 | yes |") && table.contains("| 5 | no |"),
        "{table}"
    );
    let e = posenc(&["lengthgen", "eval", "--model", dir.path().to_str().unwrap()]);
    assert!(!e.status.success());
    assert!(
        stderr(&e).contains("loading the lengthgen run"),
        "{}",
        stderr(&e)
    );
    // Test settings out of range are named.
    let model = run.to_str().unwrap();
    for (flags, says) in [
        (&["--lengths", "0,2"][..], "test lengths must be at least 1"),
        (
            &["--test-instances", "0"][..],
            "test_instances must be at least 1",
        ),
    ] {
        let e = posenc(&[&["lengthgen", "eval", "--model", model][..], flags].concat());
        assert!(
            !e.status.success() && stderr(&e).contains(says),
            "{flags:?}: {}",
            stderr(&e)
        );
    }
    // `train` takes one encoding: a list is named as one.
    let other = dir.path().join("other");
    let o = posenc(&[
        "lengthgen",
        "train",
        "--task",
        "copy",
        "--encoding",
        "rope,alibi",
        "--out",
        other.to_str().unwrap(),
    ]);
    assert!(
        !o.status.success() && stderr(&o).contains("is a list"),
        "{}",
        stderr(&o)
    );
    assert!(!other.exists());
}
