//! `posenc lm`: train a tiny causal model on the Shakespeare corpus, generate, evaluate past
//! the context; a run never overwrites another, and bad input is named.

mod common;

use common::{posenc, snapshot, text, write_config};

/// A tiny model: two minutes of nanoGPT shrunk to seconds.
const TINY_LM: &str = r#"{"model": {"d_model": 32, "heads": 2, "d_ff": 64, "layers": 1, "context": 16},
    "steps": 30, "batch_size": 8}"#;

#[test]
fn train_generate_and_evaluate_a_tiny_language_model() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "lm.json", TINY_LM);
    let run = dir.path().join("run");
    let trained = posenc()
        .args(["lm", "train", "--quiet", "--encoding", "alibi", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&trained);
    assert!(trained.status.success(), "{stderr}");
    assert!(
        stdout.contains("alibi (characters): validation loss"),
        "{stdout}"
    );
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        assert!(run.join(f).is_file(), "{f}");
    }

    // Generation continues the prompt, the same seed giving the same text.
    let gen = |seed: &str| {
        let o = posenc()
            .args([
                "lm", "generate", "--tokens", "40", "--seed", seed, "--prompt", "KING.\n",
                "--model",
            ])
            .arg(&run)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        text(&o).0
    };
    let a = gen("3");
    assert!(a.starts_with("KING.\n") && a.chars().count() >= 46, "{a:?}");
    assert_eq!(a, gen("3"));

    // Evaluation past the trained context of 16: every length answers for ALiBi.
    let e = posenc()
        .args(["lm", "eval", "--windows", "4", "--model"])
        .arg(&run)
        .output()
        .unwrap();
    let (table, stderr) = text(&e);
    assert!(e.status.success(), "{stderr}");
    for len in ["| 16 |", "| 32 |", "| 64 |", "| 128 |"] {
        assert!(table.contains(len), "{table}");
    }
    assert!(!table.contains("n/a"), "{table}");

    // Absurd and malformed values are errors naming them: no panic, no output, no abort.
    for (args, named) in [
        (
            &["lm", "generate", "--tokens", "18446744073709551615"][..],
            "tokens",
        ),
        (
            &["lm", "generate", "--temperature", "nan"][..],
            "temperature",
        ),
        (&["lm", "generate", "--top-p", "2"][..], "top-p"),
        (&["lm", "generate", "--prompt", ""][..], "prompt is empty"),
        (
            &["lm", "eval", "--windows", "100000000000000"][..],
            "windows",
        ),
        (&["lm", "eval", "--windows", "0"][..], "window"),
        (&["lm", "eval", "--lengths", "0"][..], "window"),
        (&["lm", "eval", "--lengths", "1000000"][..], "too long"),
    ] {
        let o = posenc()
            .args(args)
            .arg("--model")
            .arg(&run)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(named) && !stderr.contains("panicked"),
            "{args:?}: {stderr}"
        );
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
    }
    let huge = dir.path().join("huge");
    let o = posenc()
        .args(["lm", "train", "--quiet", "--context", "1000000", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(&huge)
        .output()
        .unwrap();
    assert!(
        text(&o).1.contains("context = 1000000 is too long"),
        "{}",
        text(&o).1
    );
    assert!(!huge.exists());

    // A second run into the same directory is refused, and nothing in it changes.
    let before = snapshot(&run);
    let again = posenc()
        .args(["lm", "train", "--quiet", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(text(&again).1.contains("not empty"), "{}", text(&again).1);
    assert_eq!(snapshot(&run), before);
}

#[test]
fn a_learned_table_is_na_past_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "lm.json", TINY_LM);
    let run = dir.path().join("learned");
    let trained = posenc()
        .args([
            "lm",
            "train",
            "--quiet",
            "--steps",
            "2",
            "--encoding",
            r#"{"kind": "learned", "max_positions": 16}"#,
            "--config",
        ])
        .arg(&config)
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    assert!(trained.status.success(), "{}", text(&trained).1);
    let e = posenc()
        .args([
            "lm",
            "eval",
            "--windows",
            "2",
            "--lengths",
            "16,32",
            "--model",
        ])
        .arg(&run)
        .output()
        .unwrap();
    let (table, stderr) = text(&e);
    assert!(e.status.success(), "{stderr}");
    assert!(
        table.contains("| 16 | ") && !table.lines().nth(2).unwrap().contains("n/a"),
        "{table}"
    );
    assert!(
        table.contains("| 32 | n/a") && table.contains("max_positions = 16"),
        "{table}"
    );

    // A table shorter than the context is refused before anything is written.
    let short = dir.path().join("short");
    let refused = posenc()
        .args([
            "lm",
            "train",
            "--quiet",
            "--encoding",
            r#"{"kind": "learned", "max_positions": 8}"#,
            "--config",
        ])
        .arg(&config)
        .arg("--out")
        .arg(&short)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        text(&refused).1.contains("max_positions = 8"),
        "{}",
        text(&refused).1
    );
    assert!(!short.exists());
}

#[test]
fn a_missing_run_is_named() {
    let o = posenc()
        .args(["lm", "generate", "--model", "/nonexistent/run"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let (_, stderr) = text(&o);
    assert!(
        stderr.contains("/nonexistent/run") && !stderr.contains("panicked"),
        "{stderr}"
    );
}
