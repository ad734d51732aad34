//! `posenc lm`: train a tiny causal model on the Shakespeare corpus, resume it, generate,
//! evaluate past the context, run the experiment; a run never overwrites another, and bad
//! input is named.

use crate::common;

use common::{
    lm_eval, names, posenc, snapshot, text, tiny_config, train_tiny, with_stdin, write_config,
};

/// A tiny model: two minutes of nanoGPT shrunk to seconds.
const TINY_LM: &str = r#"{"model": {"d_model": 32, "heads": 2, "d_ff": 64, "layers": 1, "context": 16},
    "steps": 30, "batch_size": 8, "eval_every": 10, "save_every": 10}"#;

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
    for f in [
        "config.json",
        "tokenizer.json",
        "model.safetensors",
        "training.safetensors",
        "manifest.json",
        "trainer.json",
    ] {
        assert!(run.join(f).is_file(), "{f}");
    }

    // Resuming with more steps continues the run from its checkpoint.
    let resumed = posenc()
        .args([
            "lm", "train", "--quiet", "--resume", "--steps", "40", "--out",
        ])
        .arg(&run)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&resumed);
    assert!(resumed.status.success(), "{stderr}");
    assert!(stdout.contains("after 40 steps"), "{stdout}");
    let trainer = std::fs::read_to_string(run.join("trainer.json")).unwrap();
    assert!(trainer.contains("\"step\": 40"), "{trainer}");

    // Generation continues the prompt, the same seed giving the same text.
    let gen = |seed: &str| {
        let o = posenc()
            .args([
                "lm",
                "generate",
                "--max-tokens",
                "40",
                "--seed",
                seed,
                "KING.\n",
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
    // Then the loss by octave of L = 16: one column each, one row per window length, a
    // window that ends before an octave leaving it empty.
    assert!(
        table.contains("| window | 0–7 | 8–15 | 16–31 | 32–63 | 64–127 |"),
        "{table}"
    );
    let octaves = table.split("Loss by position").nth(1).unwrap();
    let row16 = octaves.lines().find(|l| l.starts_with("| 16 |")).unwrap();
    assert_eq!(row16.matches('–').count(), 3, "{row16}");
    // As JSON: the loss at every position, the tail past L = 16 from 32 on.
    let e = posenc()
        .args([
            "lm",
            "eval",
            "--windows",
            "2",
            "--lengths",
            "16,32",
            "--format",
            "json",
            "--model",
        ])
        .arg(&run)
        .output()
        .unwrap();
    assert!(e.status.success(), "{}", text(&e).1);
    let rows: serde_json::Value = serde_json::from_str(&text(&e).0).unwrap();
    assert_eq!(rows[0]["by_position"].as_array().unwrap().len(), 16);
    assert!(
        rows[0]["tail_loss"].is_null() && rows[1]["tail_loss"].is_f64(),
        "{rows}"
    );
    let ppl = rows[1]["perplexity"].as_f64().unwrap();
    assert!((ppl - rows[1]["loss"].as_f64().unwrap().exp()).abs() < 1e-9);
    // Each window's own loss and start, whose mean is the row's loss.
    let per_window: Vec<f64> = rows[1]["window_losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(per_window.len(), 2, "{rows}");
    assert_eq!(rows[1]["starts"].as_array().unwrap().len(), 2, "{rows}");
    let mean = per_window.iter().sum::<f64>() / 2.0;
    assert!((mean - rows[1]["loss"].as_f64().unwrap()).abs() < 1e-9);

    // Absurd and malformed values are errors naming them: no panic, no output, no abort.
    for (args, named) in [
        (
            &[
                "lm",
                "generate",
                "--max-tokens",
                "18446744073709551615",
                "A",
            ][..],
            "tokens",
        ),
        (
            &["lm", "generate", "--temperature", "nan", "A"][..],
            "temperature",
        ),
        (
            &["lm", "generate", "--temperature", "-1", "A"][..],
            "temperature",
        ),
        (&["lm", "generate", "--top-p", "2", "A"][..], "top-p"),
        (&["lm", "generate", "--top-p", "0", "A"][..], "top-p"),
        (&["lm", "generate", ""][..], "prompt is empty"),
        (&["lm", "generate", "KING 王"][..], "no token for \"王\""),
        (
            &["lm", "eval", "--windows", "100000000000000"][..],
            "windows",
        ),
        (&["lm", "eval", "--windows", "0"][..], "window"),
        // The run is ALiBi's: it has no rotation to stretch.
        (
            &[
                "lm",
                "eval",
                "--rope-scaling",
                r#"{"rope_type": "yarn", "factor": 2}"#,
            ][..],
            "`alibi` encoding takes no `scaling`",
        ),
        (
            &["lm", "generate", "--rope-scaling", "yarn", "A"][..],
            "--rope-scaling takes a JSON object",
        ),
        (
            &["lm", "generate", "--rope-scaling", "null", "A"][..],
            "--rope-scaling takes a JSON object",
        ),
        (&["lm", "eval", "--lengths", "0"][..], "window"),
        (
            &["lm", "eval", "--lengths", "1000000"][..],
            "no window of 1000000",
        ),
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
    assert!(
        text(&again)
            .1
            .contains("holds a run with a different config"),
        "{}",
        text(&again).1
    );
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
    let e = lm_eval(&run, 2, "16,32").output().unwrap();
    let (table, stderr) = text(&e);
    assert!(e.status.success(), "{stderr}");
    assert!(
        table.contains("| 16 | 2 | ")
            && !table
                .lines()
                .find(|l| l.starts_with("| 16 "))
                .unwrap()
                .contains("n/a"),
        "{table}"
    );
    assert!(
        table.contains("| 32 | – | n/a") && table.contains("max_positions = 16"),
        "{table}"
    );
    // Generation crops to the table by default (nanoGPT's block size), so it runs past it;
    // a window past the table is refused by name.
    let generate = |extra: &[&str]| {
        posenc()
            .args(["lm", "generate", "--max-tokens", "40", "--model"])
            .arg(&run)
            .args(extra)
            .arg("To be, or not to be")
            .output()
            .unwrap()
    };
    let long = generate(&[]);
    assert!(long.status.success(), "{}", text(&long).1);
    assert!(text(&long).0.chars().count() > 40, "{}", text(&long).0);
    let past = generate(&["--window", "17"]);
    assert!(!past.status.success());
    assert!(text(&past).1.contains("16"), "{}", text(&past).1);

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

/// `posenc lm experiment --quick` of two steps a run, over `encodings`, into `out`.
fn quick_lm_experiment(encodings: &str, out: &std::path::Path) -> std::process::Command {
    let mut command = posenc();
    command
        .args(["lm", "experiment", "--quiet", "--quick", "--steps", "2"])
        .args(["--encodings", encodings])
        .arg("--out")
        .arg(out);
    command
}

/// `lm experiment --base` trains every run with the given config (here a smaller model),
/// the flags overriding it; a file that does not parse is named before anything runs.
#[test]
fn the_experiment_takes_a_base_config() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.json");
    std::fs::write(
        &base,
        r#"{"model": {"d_model": 24, "heads": 2, "d_ff": 48, "layers": 1, "context": 64},
            "batch_size": 4, "eval_every": 1000}"#,
    )
    .unwrap();
    let out = dir.path().join("exp");
    let o = posenc()
        .args([
            "lm",
            "experiment",
            "--quiet",
            "--steps",
            "2",
            "--context",
            "16",
        ])
        .args(["--encodings", "alibi", "--base"])
        .arg(&base)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("alibi/config.json")).unwrap())
            .unwrap();
    assert_eq!(config["d_model"], 24, "{config}");
    assert_eq!(config["layers"], 1, "{config}");
    assert_eq!(
        config["context"], 16,
        "--context overrides the base: {config}"
    );
    std::fs::write(&base, "{ not json").unwrap();
    let o = posenc()
        .args(["lm", "experiment", "--quiet", "--base"])
        .arg(&base)
        .arg("--out")
        .arg(dir.path().join("other"))
        .output()
        .unwrap();
    let stderr = text(&o).1;
    assert!(
        !o.status.success() && stderr.contains("base.json"),
        "{stderr}"
    );
    assert!(!dir.path().join("other").exists(), "nothing written");
}

/// `--factors` picks the evaluation lengths; a length the test works cannot hold is named
/// before anything is trained or written.
#[test]
fn the_experiment_evaluates_the_factors_asked() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("exp");
    let o = quick_lm_experiment("alibi", &out)
        .args(["--context", "16", "--factors", "3,1,3"])
        .output()
        .unwrap();
    let (table, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let header = table
        .lines()
        .find(|l| l.contains("ppl @"))
        .unwrap_or_default();
    assert!(
        header.contains("ppl @ 16 | ppl @ 48 |") && header.matches("ppl @ 48").count() == 1,
        "sorted, each once: {table}"
    );
    assert!(!table.contains("ppl @ 32"), "{table}");
    let far = dir.path().join("far");
    let o = quick_lm_experiment("alibi", &far)
        .args(["--context", "16", "--factors", "1,100000000000"])
        .output()
        .unwrap();
    let stderr = text(&o).1;
    assert!(
        !o.status.success()
            && stderr.contains("factor 100000000000")
            && !stderr.contains("panicked"),
        "{stderr}"
    );
    assert!(!far.exists(), "nothing written");
}

#[test]
fn the_experiment_tabulates_every_length_and_draws_both_figures() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("exp");
    let experiment = || {
        quick_lm_experiment(r#"rope,{"kind": "learned", "max_positions": 16}"#, &out)
            .args(["--context", "16"])
            .output()
            .unwrap()
    };
    let o = experiment();
    let (table, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    for col in ["ppl @ 16", "ppl @ 128", "loss past 16 @ 128"] {
        assert!(table.contains(col), "{table}");
    }
    let row = |kind: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("| {kind} ")))
            .unwrap()
            .to_string()
    };
    assert!(!row("rope").contains("n/a"), "{table}");
    // learned answers at 16 and nowhere past it: 3 lengths and 3 tails.
    // (A JSON entry without a label is named by the settings it changes.)
    assert_eq!(
        row("learned:max_positions=16").matches("n/a").count(),
        6,
        "{table}"
    );
    for f in [
        "results.md",
        "results.json",
        "extrapolation.png",
        "by_position.png",
        "rope/model.safetensors",
    ] {
        assert!(out.join(f).is_file(), "{f}");
    }
    // Run again: every run is reused, and the table is the same.
    let again = experiment();
    assert!(again.status.success(), "{}", text(&again).1);
    assert_eq!(text(&again).0, table);
}

/// Two settings of one kind over two seeds: one row each, mean ± standard deviation, each
/// run in its own directory, and one tidy record per run and length.
#[test]
fn the_experiment_compares_labels_over_seeds() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("exp");
    let o = quick_lm_experiment("rope,rope:base=100", &out)
        .args(["--context", "16", "--seeds", "2"])
        .output()
        .unwrap();
    let (table, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    for row in ["| rope | 2 |", "| rope:base=100 | 2 |"] {
        let line = table.lines().find(|l| l.starts_with(row));
        assert!(line.is_some_and(|l| l.contains(" ± ")), "{row} in {table}");
    }
    for run in [
        "rope/seed-1337",
        "rope/seed-1338",
        "rope_base=100/seed-1338",
    ] {
        assert!(out.join(run).join("model.safetensors").is_file(), "{run}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let records = json["records"].as_array().unwrap();
    assert_eq!(records.len(), 2 * 2 * 4);
    let last = records.last().unwrap();
    assert_eq!(
        (&last["label"], &last["seed"], &last["length"]),
        (
            &serde_json::json!("rope:base=100"),
            &serde_json::json!(1338),
            &serde_json::json!(128)
        )
    );
}

#[test]
fn the_shipped_model_generates_and_keeps_its_loss_past_its_context() {
    let generate = |extra: &[&str]| {
        posenc()
            .args(["lm", "generate", "--max-tokens", "60", "--seed", "1"])
            .args(extra)
            .arg("HAMLET.\n")
            .output()
            .unwrap()
    };
    let o = generate(&[]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stdout.starts_with("HAMLET.\n") && stdout.chars().count() >= 68,
        "{stdout:?}"
    );
    // With no prompt argument, the prompt is standard input, its final line end dropped
    // (the one `echo` adds): the same text.
    let piped = with_stdin(
        &["lm", "generate", "--max-tokens", "60", "--seed", "1"],
        "HAMLET.\n\n",
    );
    assert!(piped.status.success(), "{}", text(&piped).1);
    assert_eq!(text(&piped).0, stdout);
    // --timing adds a line on standard error and changes nothing else: the prompt is 8
    // characters, and the 60 tokens are the first and 59 more.
    let timed = generate(&["--timing"]);
    let (timed_out, timing) = text(&timed);
    assert!(timed.status.success(), "{timing}");
    assert_eq!(timed_out, stdout);
    // (Its other line is the warning that 68 tokens run past the 64 trained on.)
    let timing = timing.lines().last().unwrap_or_default();
    assert!(
        timing.starts_with("loaded in ")
            && timing.contains("; prompt of 8 tokens read in ")
            && timing.contains("; 59 more tokens in "),
        "{timing:?}"
    );
    assert!(!text(&o).1.contains("loaded in"), "no timing unasked");
    // ALiBi, trained on 64 characters: far below the uniform ln 85 ≈ 4.44 nats at 64, and
    // no worse at 8 × 64 (Press et al. 2022), on the test plays it never saw.
    let o = posenc()
        .args([
            "lm",
            "eval",
            "--windows",
            "16",
            "--lengths",
            "64,512",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let rows: serde_json::Value = serde_json::from_str(&text(&o).0).unwrap();
    let (at_l, at_8l) = (
        rows[0]["loss"].as_f64().unwrap(),
        rows[1]["loss"].as_f64().unwrap(),
    );
    assert!(at_l < 2.2, "{rows}");
    assert!(at_8l < at_l + 0.05, "{rows}");
}

/// `lm passkey` on the shipped character model: one record per trial with the key asked
/// for, a table by length and depth, and bad settings refused before anything runs.
#[test]
fn passkey_tabulates_every_cell_and_refuses_bad_settings() {
    let o = posenc()
        .args([
            "lm",
            "passkey",
            "--lengths",
            "400,600",
            "--depths",
            "0.1,0.9",
            "--trials",
            "2",
            "--seed",
            "7",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(rows.len(), 8);
    for r in &rows {
        // Each record says which seed drew its key.
        assert_eq!(r["seed"], 7, "{r}");
        let key = r["key"].as_str().unwrap();
        assert!(
            key.len() == 5 && key.bytes().all(|b| b.is_ascii_digit()),
            "{r}"
        );
        let first: String = r["answer"]
            .as_str()
            .unwrap()
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(char::is_ascii_digit)
            .collect();
        assert_eq!(r["correct"], first == key, "{r}");
    }
    let table = posenc()
        .args(["lm", "passkey", "--lengths", "400", "--depths", "0.5"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&table);
    assert!(table.status.success(), "{stderr}");
    assert!(
        stdout.contains("| length | depth 0.5 |") && stdout.contains("| 400 |"),
        "{stdout}"
    );
    // `-0` is depth 0: the same key, the same column.
    let keys: Vec<String> = ["0", "-0"]
        .iter()
        .map(|d| {
            let o = posenc()
                .args(["lm", "passkey", "--lengths", "400", "--depths", d])
                .args(["--format", "json"])
                .output()
                .unwrap();
            let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
            format!("{} {}", rows[0]["depth"], rows[0]["key"])
        })
        .collect();
    assert_eq!(keys[0], keys[1]);
    // Without --lengths, the defaults start no shorter than the shortest prompt this
    // tokenizer can make (it needs more than half the shipped model's context), four of them.
    let o = posenc()
        .args([
            "lm", "passkey", "--depths", "0.5", "--trials", "1", "--format", "json",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    let mut lengths: Vec<u64> = rows.iter().map(|r| r["length"].as_u64().unwrap()).collect();
    lengths.dedup();
    assert_eq!(lengths.len(), 4, "{lengths:?}");
    assert!(lengths.windows(2).all(|w| w[0] < w[1]), "{lengths:?}");

    for (args, expected) in [
        (&["--depths", "1.5"][..], "depth"),
        // A negative depth is a value the range check answers, not an unknown flag.
        (&["--depths", "-0.5"][..], "got -0.5"),
        (&["--lengths", "20"][..], "too short"),
        (&["--trials", "0"][..], "trial"),
        (&["--plot", "/no/such/dir/p.png"][..], "/no/such/dir"),
        (
            &["--rope-scaling", r#"{"rope_type": "yarn", "factor": 2}"#][..],
            "scaling",
        ),
    ] {
        let o = posenc()
            .args(["lm", "passkey", "--lengths", "400"])
            .args(args)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&o);
        assert!(!o.status.success(), "{args:?}");
        assert!(
            stdout.is_empty() && stderr.contains(expected),
            "{args:?}: {stderr}"
        );
    }
}

/// The settings people change most are flags; `--from` starts a new run at a trained one's
/// weights, here at a longer context with a scaled rotary encoding, and says so in its
/// settings. A source whose parameters do not fit the new encoding is refused by name.
#[test]
fn flags_set_the_model_and_from_fine_tunes_a_trained_run() {
    let dir = tempfile::tempdir().unwrap();
    let (base, tuned, bad) = (
        dir.path().join("base"),
        dir.path().join("tuned"),
        dir.path().join("bad"),
    );
    let train = |args: &[&str], out: &std::path::Path| {
        let o = posenc()
            .args(["lm", "train", "--quiet", "--out"])
            .arg(out)
            .args(args)
            .output()
            .unwrap();
        (o.status.success(), text(&o).1)
    };
    let (ok, stderr) = train(
        &[
            "--encoding",
            "rope",
            "--context",
            "16",
            "--steps",
            "5",
            "--d-model",
            "24",
            "--layers",
            "1",
            "--heads",
            "3",
            "--seed",
            "11",
            "--lr",
            "0.002",
            "--batch-size",
            "4",
        ],
        &base,
    );
    assert!(ok, "{stderr}");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(base.join("config.json")).unwrap()).unwrap();
    assert_eq!(
        (
            &config["d_model"],
            &config["d_ff"],
            &config["layers"],
            &config["heads"]
        ),
        (&24.into(), &96.into(), &1.into(), &3.into())
    );
    let trainer = std::fs::read_to_string(base.join("trainer.json")).unwrap();
    for setting in ["\"seed\": 11", "\"lr\": 0.002", "\"batch_size\": 4"] {
        assert!(trainer.contains(setting), "{setting}: {trainer}");
    }

    let yarn = r#"{"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 16}"#;
    // A table measured with a scaling names it in its title.
    let o = lm_eval(&base, 2, "16,32")
        .args(["--rope-scaling", yarn])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let title = stdout.lines().next().unwrap_or_default();
    assert!(
        title.contains("rope_scaling") && title.contains("yarn"),
        "{stdout}"
    );

    let (ok, stderr) = train(
        &[
            "--from",
            base.to_str().unwrap(),
            "--context",
            "32",
            "--steps",
            "3",
            "--rope-scaling",
            yarn,
        ],
        &tuned,
    );
    assert!(ok, "{stderr}");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tuned.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["context"], 32);
    assert_eq!(config["d_model"], 24);
    assert_eq!(config["encoding"]["scaling"]["rope_type"], "yarn");
    let trainer = std::fs::read_to_string(tuned.join("trainer.json")).unwrap();
    assert!(trainer.contains("init_from"), "{trainer}");

    // A learned table has parameters rope has not: the weights do not fit, and nothing is
    // left behind but the error.
    let (ok, stderr) = train(
        &["--from", base.to_str().unwrap(), "--encoding", "learned"],
        &bad,
    );
    assert!(!ok);
    assert!(stderr.contains("fit the new model"), "{stderr}");
}

/// Your own text: `lm train --text` trains on it (no Shakespeare needed), and the run
/// generates, evaluates and resumes like any other; a text changed under a run is refused.
#[test]
fn train_generate_evaluate_and_resume_on_your_own_text() {
    let dir = tempfile::tempdir().unwrap();
    let mine = dir.path().join("mine.txt");
    let body: String = (0..300).map(|i| format!("ab{} cd ef\n", i % 7)).collect();
    std::fs::write(&mine, &body).unwrap();
    let run = dir.path().join("run");
    let go = |args: &[&str]| {
        let o = posenc().args(args).output().unwrap();
        (o.status.success(), text(&o))
    };
    let train: Vec<&str> = vec![
        "lm",
        "train",
        "--quiet",
        "--text",
        mine.to_str().unwrap(),
        "--valid-fraction",
        "0.2",
        "--context",
        "16",
        "--steps",
        "10",
        "--d-model",
        "16",
        "--layers",
        "1",
        "--heads",
        "2",
        "--out",
        run.to_str().unwrap(),
    ];
    let (ok, (_, stderr)) = go(&[&train[..], &["--corpus", "/no/shakespeare/here"]].concat());
    assert!(
        !ok && stderr.contains("--corpus"),
        "--text and --corpus together: {stderr}"
    );
    let (ok, (stdout, stderr)) = go(&train);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("after 10 steps"), "{stdout}");
    let trainer = std::fs::read_to_string(run.join("trainer.json")).unwrap();
    assert!(
        trainer.contains("mine.txt") && trainer.contains("sha256"),
        "{trainer}"
    );
    // The tokenizer is the text's: a character it never saw is refused in a prompt.
    let (ok, (stdout, stderr)) = go(&[
        "lm",
        "generate",
        "--model",
        run.to_str().unwrap(),
        "--max-tokens",
        "5",
        "ab",
    ]);
    assert!(ok && stdout.starts_with("ab"), "{stderr}");
    let (ok, (_, stderr)) = go(&["lm", "generate", "--model", run.to_str().unwrap(), "xyz"]);
    assert!(!ok && stderr.contains("no token for \"x\""), "{stderr}");
    let eval = |extra: &[&str]| {
        let (run, mine) = (run.to_str().unwrap(), mine.to_str().unwrap());
        go(&[&["lm", "eval", "--model", run, "--text", mine][..], extra].concat())
    };
    let (ok, (stdout, stderr)) = eval(&["--lengths", "16,32"]);
    assert!(ok && stdout.contains("| 32 |"), "{stderr}");
    // Sliding windows score every character after the first once.
    let (ok, (stdout, stderr)) = eval(&["--lengths", "16", "--stride", "5", "--format", "json"]);
    assert!(ok, "{stderr}");
    let rows: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(rows[0]["tokens"], body.chars().count() - 1, "{stdout}");
    assert_eq!(rows[0]["stride"], 5);
    let (ok, (_, stderr)) = eval(&["--lengths", "16", "--stride", "17"]);
    assert!(!ok && stderr.contains("stride"), "{stderr}");
    let (ok, (stdout, stderr)) = go(&[
        "lm",
        "train",
        "--quiet",
        "--resume",
        "--steps",
        "14",
        "--out",
        run.to_str().unwrap(),
    ]);
    assert!(ok && stdout.contains("after 14 steps"), "{stderr}");
    std::fs::write(&mine, format!("{body}changed\n")).unwrap();
    let (ok, (_, stderr)) = go(&[
        "lm",
        "train",
        "--quiet",
        "--resume",
        "--steps",
        "18",
        "--out",
        run.to_str().unwrap(),
    ]);
    assert!(
        !ok && stderr.contains("changed since the run started"),
        "{stderr}"
    );
}

#[test]
fn an_experiment_refuses_a_directory_that_holds_another_kind_of_run() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("translation");
    train_tiny(&tiny_config(dir.path()), &run, 2);
    let before = snapshot(&run);
    let o = quick_lm_experiment("rope", &run).output().unwrap();
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    assert!(
        stderr.contains("holds a training run") && stderr.contains(&*run.to_string_lossy()),
        "{stderr}"
    );
    assert_eq!(snapshot(&run), before, "the translation run was changed");
}

#[test]
fn zero_steps_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lm");
    let o = posenc()
        .args(["lm", "train", "--quiet", "--steps", "0", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    assert!(stderr.contains("steps must be at least 1"), "{stderr}");
    assert!(!out.exists(), "{:?}", names(&out));
}

/// `--print-config` prints the config the flags make, as JSON that `--config` takes back
/// (printing the same again), and trains nothing; `--lr` alone keeps the floor's ratio to
/// the peak, so a small peak is not refused for the default floor above it.
#[test]
fn print_config_is_what_config_takes_back() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never");
    let print = |extra: &[&str]| {
        let o = posenc()
            .args([
                "lm",
                "train",
                "--print-config",
                "--out",
                out.to_str().unwrap(),
            ])
            .args(extra)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&o);
        assert!(o.status.success(), "{stderr}");
        stdout
    };
    let first = print(&[
        "--lr", "1e-5", "--warmup", "50", "--steps", "40", "--seed", "9",
    ]);
    let cfg: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(cfg["lr"], 1e-5);
    assert!(
        (cfg["min_lr"].as_f64().unwrap() - 1e-6).abs() < 1e-18,
        "{cfg}"
    );
    assert_eq!(
        (cfg["warmup"].as_u64(), cfg["steps"].as_u64()),
        (Some(50), Some(40))
    );
    assert_eq!(cfg["seed"], 9);
    let saved = dir.path().join("printed.json");
    std::fs::write(&saved, &first).unwrap();
    assert_eq!(print(&["--config", saved.to_str().unwrap()]), first);
    assert!(!out.exists(), "--print-config wrote {}", out.display());
}

/// A prompt with its answer past the trained context is named before any work (a
/// warning), or refused with --strict-context (nothing printed); a --window that crops
/// the context needs no warning.
#[test]
fn a_prompt_past_the_trained_context_is_named_first() {
    let run = |extra: &[&str]| {
        posenc()
            .args([
                "lm",
                "generate",
                "--temperature",
                "0",
                "--max-tokens",
                "100",
            ])
            .args(extra)
            .arg("ROMEO: I will")
            .output()
            .unwrap()
    };
    let o = run(&[]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.starts_with("ROMEO: I will"), "{stdout}");
    assert!(
        stderr.contains("warning: the prompt and the answer come to")
            && stderr.contains("past the 64"),
        "{stderr}"
    );
    // With an estimate of the reading time, timed here, on a line of its own.
    assert!(
        stderr.contains("\nReading them takes under a second")
            || stderr.contains("\nReading them takes roughly"),
        "{stderr}"
    );
    let warning = stderr.lines().find(|l| l.starts_with("warning:")).unwrap();
    assert!(!warning.contains("Reading"), "{warning}");
    let o = run(&["--strict-context"]);
    let (stdout, stderr) = text(&o);
    assert!(!o.status.success() && stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("--strict-context"), "{stderr}");
    let o = run(&["--window", "32"]);
    assert!(
        o.status.success() && !text(&o).1.contains("warning"),
        "{}",
        text(&o).1
    );
}

/// `POSENC_CACHE` says where the fetched models and corpora are: a command that needs one
/// looks there (and names the fetch script when it is missing).
#[test]
fn the_cache_directory_is_posenc_cache() {
    let dir = tempfile::tempdir().unwrap();
    let o = posenc()
        .env("POSENC_CACHE", dir.path())
        .args(["lm", "eval", "--windows", "1"])
        .output()
        .unwrap();
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    let expected = dir.path().join("shakespeare");
    assert!(
        stderr.contains(&expected.display().to_string()) && stderr.contains("fetch_shakespeare"),
        "{stderr}"
    );
    let o = posenc()
        .env("POSENC_CACHE", dir.path())
        .args(["generate", "--max-tokens", "1", "hi"])
        .output()
        .unwrap();
    let (_, stderr) = text(&o);
    assert!(
        !o.status.success() && stderr.contains(&dir.path().display().to_string()),
        "{stderr}"
    );
}

/// A run trained on its own text is measured on that text's held-out part: no Shakespeare
/// needed (the cache here is empty).
#[test]
fn a_run_of_its_own_text_is_evaluated_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let book = dir.path().join("book.txt");
    std::fs::write(
        &book,
        "the quick brown fox jumps over the lazy dog\n".repeat(200),
    )
    .unwrap();
    let run = dir.path().join("run");
    let cache = dir.path().join("empty-cache");
    let o = posenc()
        .env("POSENC_CACHE", &cache)
        .args(["lm", "train", "--quiet", "--steps", "2", "--context", "16"])
        .args(["--d-model", "16", "--layers", "1", "--heads", "2", "--text"])
        .arg(&book)
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let o = lm_eval(&run, 2, "16,32")
        .env("POSENC_CACHE", &cache)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stdout.contains("| 16 | 2 |") && stdout.contains("| 32 | 2 |"),
        "{stdout}"
    );
    // The output names what it scored: the held-out tenth of the book.
    let held_out = format!("scored on the held-out 10% of {}", book.display());
    assert!(stdout.contains(&held_out), "{stdout}");
    // A test split it does not have is refused, by name, not scored as the valid one.
    let o = lm_eval(&run, 2, "16")
        .env("POSENC_CACHE", &cache)
        .args(["--split", "test"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&o);
    assert!(!o.status.success() && stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("has no test split") && stderr.contains("--split valid"),
        "{stderr}"
    );
    let o = lm_eval(&run, 2, "16")
        .env("POSENC_CACHE", &cache)
        .args(["--split", "valid", "--format", "json"])
        .output()
        .unwrap();
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text(&o).0).unwrap();
    assert_eq!(rows[0]["data"], held_out.trim_start_matches("scored on "));
}

/// `lm eval` says which split of the corpus it scored, and the two splits are two texts:
/// their losses differ.
#[test]
fn lm_eval_names_the_split_it_scored() {
    let eval = |split: &str| {
        let o = posenc()
            .args(["lm", "eval", "--lengths", "64", "--windows", "2"])
            .args(["--format", "json", "--split", split])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        let rows: Vec<serde_json::Value> = serde_json::from_str(&text(&o).0).unwrap();
        (
            rows[0]["data"].as_str().unwrap().to_string(),
            rows[0]["loss"].clone(),
        )
    };
    let ((test, test_loss), (valid, valid_loss)) = (eval("test"), eval("valid"));
    assert!(
        test.starts_with("the test split of ") && test.contains("hamlet"),
        "{test}"
    );
    assert!(
        valid.starts_with("the valid split of ") && valid.contains("julius_caesar"),
        "{valid}"
    );
    assert!(!test.contains("..") && !valid.contains(".."), "{test}");
    assert_ne!(test_loss, valid_loss);
}

/// `generate` as llama-cli users reach for it: a prompt from standard input without its
/// final line end, or from `-f FILE`; `-n` for the token count; `--stop` ending the text at
/// a stop text; and the JSON saying how many tokens came, why they stopped and with what.
#[test]
fn generate_takes_llama_cli_flags_and_says_why_it_stopped() {
    let json = |args: &[&str], stdin: Option<&str>| -> serde_json::Value {
        let base = ["lm", "generate", "--temperature", "0", "--format", "json"];
        let all: Vec<&str> = base.iter().chain(args).copied().collect();
        let o = match stdin {
            Some(input) => with_stdin(&all, input),
            None => posenc().args(&all).output().unwrap(),
        };
        assert!(o.status.success(), "{}", text(&o).1);
        serde_json::from_str(&text(&o).0).unwrap()
    };
    let plain = json(&["-n", "30", "ROMEO:"], None);
    assert_eq!(plain["generated_tokens"], 30);
    assert_eq!(plain["stop"], "max_tokens");
    assert_eq!(plain["settings"]["max_tokens"], 30);
    assert_eq!(plain["settings"]["temperature"], 0.0);
    let piped = json(&["--n-predict", "30"], Some("ROMEO:\n"));
    assert_eq!(piped["prompt"], "ROMEO:", "the line end of `echo` was kept");
    assert_eq!(piped["text"], plain["text"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prompt.txt");
    std::fs::write(&file, "ROMEO:").unwrap();
    let from_file = json(&["-n", "30", "-f", file.to_str().unwrap()], None);
    assert_eq!(from_file["text"], plain["text"]);
    // A stop text that the plain text holds ends it there, with fewer tokens.
    let whole = plain["text"].as_str().unwrap();
    let word = whole.split_whitespace().nth(1).expect("two words");
    let stopped = json(&["-n", "30", "--stop", word, "ROMEO:"], None);
    let cut = stopped["text"].as_str().unwrap();
    assert!(
        cut.contains(word) && whole.starts_with(cut),
        "{cut:?} of {whole:?}"
    );
    assert!(
        stopped["generated_tokens"].as_u64().unwrap() < 30,
        "{stopped}"
    );
    assert_eq!(stopped["stop"], serde_json::json!({"stop_text": word}));
}

/// `generate --format json` prints, alone and at the end, the text the streamed form
/// prints after its prompt, with the prompt and the model.
#[test]
fn generate_prints_json_alone() {
    let run = |extra: &[&str]| {
        posenc()
            .args(["lm", "generate", "--max-tokens", "20", "--seed", "1"])
            .args(extra)
            .arg("HAMLET.")
            .output()
            .unwrap()
    };
    let (streamed, _) = text(&run(&[]));
    let o = run(&["--format", "json"]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let record: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(record["prompt"], "HAMLET.");
    let generated = record["text"].as_str().unwrap();
    assert!(!generated.is_empty());
    assert_eq!(streamed, format!("HAMLET.{generated}\n"));
}

/// `lm experiment --pool` joins experiments of one setting run apart (here each seed in a
/// process of its own) into the results one process running them all writes, record for
/// record (bar the time and memory each run took), with the table and both figures; what
/// cannot be pooled is named, and nothing is written then.
#[test]
fn pooled_experiments_equal_the_one_process_run() {
    let dir = tempfile::tempdir().unwrap();
    let run = |out: &std::path::Path, extra: &[&str]| {
        let o = quick_lm_experiment("alibi", out)
            .args(["--context", "16"])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
    };
    let (whole, a, b) = (
        dir.path().join("whole"),
        dir.path().join("a"),
        dir.path().join("b"),
    );
    run(&whole, &["--seeds", "2"]);
    run(&a, &["--seed", "1337"]);
    run(&b, &["--seed", "1338"]);
    let pooled = dir.path().join("pooled");
    let pool = |parts: &[&std::path::Path], out: &std::path::Path| {
        let mut command = posenc();
        command.args(["lm", "experiment", "--pool"]);
        for p in parts {
            command.arg(p.join("results.json"));
        }
        command.arg("--out").arg(out).output().unwrap()
    };
    // The later seed first: the pooled runs are in the order of their seeds all the same.
    let o = pool(&[&b, &a, &a], &pooled);
    let (table, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(table.contains("| alibi | 2 |"), "{table}");
    let records = |dir: &std::path::Path| -> Vec<serde_json::Value> {
        let results: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap())
                .unwrap();
        let mut records = results["records"].as_array().unwrap().clone();
        for r in &mut records {
            let r = r.as_object_mut().unwrap();
            r.remove("train_s");
            r.remove("peak_rss_mb");
        }
        records
    };
    assert_eq!(records(&pooled), records(&whole));
    for figure in ["extrapolation.png", "by_position.png"] {
        assert!(pooled.join(figure).exists(), "{figure}");
    }
    // Another setting: other evaluation lengths.
    let shorter = dir.path().join("shorter");
    run(&shorter, &["--seed", "1339", "--factors", "1"]);
    let refused = dir.path().join("refused");
    let o = pool(&[&a, &shorter], &refused);
    let stderr = text(&o).1;
    assert!(
        !o.status.success() && stderr.contains("factors") && stderr.contains("pooling"),
        "{stderr}"
    );
    // One run, evaluated differently in two files.
    let text_a = std::fs::read_to_string(a.join("results.json")).unwrap();
    let mut changed: serde_json::Value = serde_json::from_str(&text_a).unwrap();
    let eval = &mut changed["results"][0]["lengths"][0]["eval"]["loss"];
    *eval = serde_json::json!(eval.as_f64().unwrap() + 1.0);
    let c = dir.path().join("c");
    std::fs::create_dir_all(&c).unwrap();
    std::fs::write(c.join("results.json"), changed.to_string()).unwrap();
    let o = pool(&[&a, &c], &refused);
    let stderr = text(&o).1;
    assert!(
        !o.status.success() && stderr.contains("seed 1337 of `alibi` is in two"),
        "{stderr}"
    );
    assert!(!refused.exists(), "nothing written");
    // A run directory is no place for pooled results, a README beside it or not.
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/shakespeare-alibi");
    let model = dir.path().join("model");
    std::fs::create_dir_all(&model).unwrap();
    for entry in std::fs::read_dir(&shipped).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), model.join(entry.file_name())).unwrap();
    }
    let before = snapshot(&model);
    let o = pool(&[&a], &model);
    assert!(!o.status.success() && text(&o).1.contains("holds a training run"));
    assert_eq!(snapshot(&model), before, "the run is untouched");
    // Pooling trains nothing: the grid's flags are refused beside it.
    let o = posenc()
        .args(["lm", "experiment", "--seeds", "2", "--pool"])
        .arg(a.join("results.json"))
        .arg("--out")
        .arg(&refused)
        .output()
        .unwrap();
    assert!(!o.status.success() && text(&o).1.contains("--seeds"));
}

/// A rolling cache (`--window` with `--sinks`) on the shipped model: `lm eval` reads
/// windows of 8 × 64 through 64 positions and records the cache; `lm generate` runs past
/// the window in it; `lm experiment` tabulates each reading; a window that does not hold
/// more than its sinks is refused by name before anything is loaded or written.
#[test]
fn a_rolling_cache_reads_and_generates_past_its_window() {
    let eval = |extra: &[&str]| {
        posenc()
            .args(["lm", "eval", "--format", "json"])
            .args(["--windows", "2", "--lengths", "512"])
            .args(extra)
            .output()
            .unwrap()
    };
    let rows = |o: &std::process::Output| -> serde_json::Value {
        assert!(o.status.success(), "{}", text(o).1);
        serde_json::from_str(&text(o).0).unwrap()
    };
    let whole = rows(&eval(&[]));
    let rolled = rows(&eval(&["--window", "64", "--sinks", "4"]));
    assert!(whole[0].get("window").is_none(), "{whole}");
    assert_eq!(
        (rolled[0]["window"].as_u64(), rolled[0]["sinks"].as_u64()),
        (Some(64), Some(4))
    );
    // Within the first 64 positions the two read the same tokens the same way.
    let first = |r: &serde_json::Value, i: usize| r[0]["by_position"][i].as_f64().unwrap();
    for i in [0, 31, 63] {
        assert!(
            (first(&whole, i) - first(&rolled, i)).abs() < 1e-4,
            "position {i}"
        );
    }
    // ALiBi, at 8L, still predicts the text through 64 positions of it.
    assert!(rolled[0]["loss"].as_f64().unwrap() < 2.3, "{rolled}");

    let o = posenc()
        .args([
            "lm",
            "generate",
            "--max-tokens",
            "150",
            "--window",
            "16",
            "--sinks",
            "2",
        ])
        .args(["--temperature", "0", "HAMLET.\n"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stdout.starts_with("HAMLET.\n") && stdout.chars().count() > 100,
        "{stdout:?}"
    );

    for args in [
        ["lm", "eval", "--window", "4", "--sinks", "4"],
        ["lm", "generate", "--window", "2", "--sinks", "9"],
    ] {
        let o = posenc()
            .args(args)
            .arg("--model")
            .arg("no-such-model")
            .output()
            .unwrap();
        let stderr = text(&o).1;
        assert!(
            !o.status.success() && stderr.contains("sink") && !stderr.contains("no-such-model"),
            "refused before loading: {stderr}"
        );
    }
    let o = posenc()
        .args(["lm", "eval", "--sinks", "4"])
        .output()
        .unwrap();
    assert!(!o.status.success() && text(&o).1.contains("--window"));

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("exp");
    let o = quick_lm_experiment("alibi", &out)
        .args(["--context", "16", "--factors", "1,4"])
        .args(["--window", "16", "--sinks", "0,2"])
        .output()
        .unwrap();
    let (table, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    for read in [
        "| alibi | whole | 1 |",
        "| alibi | rolling, 0 sinks | 1 |",
        "| alibi | rolling, 2 sinks | 1 |",
    ] {
        assert!(md.contains(read), "{read}: {md}");
    }
    assert!(table.contains("ppl @ 64"), "{table}");
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let records = results["records"].as_array().unwrap();
    assert_eq!(records.len(), 6, "two lengths, three readings");
    assert_eq!(records.iter().filter(|r| r["sinks"] == 2).count(), 2);
}

/// `--self-extend` settings that cannot work are refused by name before any model is
/// loaded; a model whose encoding does not rotate (the shipped ALiBi model) is refused
/// with the reason.
#[test]
fn self_extend_refuses_what_it_cannot_regroup() {
    let run = |json: &str| {
        let o = posenc()
            .args(["lm", "eval", "--lengths", "128", "--windows", "1"])
            .args(["--self-extend", json])
            .output()
            .unwrap();
        assert!(!o.status.success(), "{json}");
        text(&o).1
    };
    for (json, named) in [
        (r#"{"group": 0, "window": 64}"#, "group"),
        (r#"{"group": 2, "window": 0}"#, "window"),
        (r#"{"group": 3, "window": 64}"#, "multiple"),
        (r#"{"group": 2}"#, "window"),
        ("4,64", "--self-extend"),
    ] {
        let err = run(json);
        assert!(
            err.contains(named) && !err.contains("panicked"),
            "{json}: {err}"
        );
    }
    let err = run(r#"{"group": 2, "window": 32}"#);
    assert!(err.contains("alibi") && err.contains("rotar"), "{err}");
}
