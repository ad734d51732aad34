//! `posenc train`, `translate`, `eval` and `embed` as a user runs them. Faults (kills, full
//! disks, second writers, bad input) are in `cli_faults.rs`.

use crate::common;

use common::*;

#[test]
fn translate_reads_arguments_or_stdin_and_names_unknown_words() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_config(dir.path());
    let model = dir.path().join("model");
    let out = posenc()
        .args(["train", "--quiet", "--steps", "3", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(&model)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);

    let out = posenc()
        .args(["translate", "--model"])
        .arg(&model)
        .args(["the dog runs", "the cat sleeps"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(text(&out).0.lines().count(), 2);
    // `--device cpu`, said aloud, is the default.
    let on_cpu = posenc()
        .args(["kotoba", "translate", "--device", "cpu", "--model"])
        .arg(&model)
        .args(["the dog runs", "the cat sleeps"])
        .output()
        .unwrap();
    assert!(on_cpu.status.success(), "{}", text(&on_cpu).1);
    assert_eq!(on_cpu.stdout, out.stdout);

    let out = with_stdin(
        &["translate".as_ref(), "--model".as_ref(), model.as_os_str()],
        "the dog runs\nthe cat sleeps\nthe cow swims near the moon\n",
    );
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("`moon`") && stderr.contains("line 3") && stderr.contains("1 of 3"),
        "{stderr}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        3,
        "the good lines are printed, the bad one left empty: {stdout}"
    );
    assert!(
        !lines[0].is_empty() && !lines[1].is_empty() && lines[2].is_empty(),
        "{stdout}"
    );

    // --strict stops at the first bad line and prints nothing.
    let out = with_stdin(
        &[
            "translate".as_ref(),
            "--strict".as_ref(),
            "--model".as_ref(),
            model.as_os_str(),
        ],
        "the dog runs\nthe cow swims near the moon\n",
    );
    let (stdout, stderr) = text(&out);
    assert!(
        !out.status.success() && stderr.contains("`moon`"),
        "{stderr}"
    );
    assert!(stdout.is_empty(), "--strict printed {stdout}");

    // An empty sentence given as an argument is a mistake, named.
    let out = posenc()
        .args(["translate", "--model"])
        .arg(&model)
        .args(["the dog runs", " "])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("sentence 2 is empty"),
        "{}",
        text(&out).1
    );

    let out = posenc()
        .args(["translate", "--model"])
        .arg(dir.path().join("absent"))
        .arg("the dog runs")
        .output()
        .unwrap();
    assert!(!out.status.success() && text(&out).1.contains("absent"));

    let out = posenc()
        .args(["eval", "--model"])
        .arg(&model)
        .output()
        .unwrap();
    let (stdout, _) = text(&out);
    for split in ["valid", "test", "test-long", "order-swap"] {
        assert!(stdout.contains(&format!("| {split} |")), "{stdout}");
    }
}

#[test]
fn embed_prints_one_normalised_vector_per_line() {
    let model = posenc_embed::resolve::fetched_minilm().unwrap();
    let out = with_stdin(
        &[
            "embed".as_ref(),
            "--batch-size".as_ref(),
            "2".as_ref(),
            "--model".as_ref(),
            model.as_os_str(),
        ],
        "the dog\n\n犬が猫を追いかけた\n",
    );
    assert!(out.status.success());
    let lines: Vec<Vec<f64>> = text(&out)
        .0
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "the empty line is the empty sentence");
    for v in &lines {
        assert_eq!(v.len(), 384);
        let norm: f64 = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
    }
    let out = posenc()
        .args(["embed", "--model", "/nonexistent/model", "x"])
        .output()
        .unwrap();
    assert!(!out.status.success() && text(&out).1.contains("/nonexistent/model"));
}

#[test]
fn embed_resolves_a_hub_id_from_hf_home_offline() {
    let model = posenc_embed::resolve::fetched_minilm().unwrap();
    let home = tempfile::tempdir().unwrap();
    let repo = home
        .path()
        .join("hub/models--sentence-transformers--all-MiniLM-L6-v2");
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "abc").unwrap();
    std::fs::create_dir_all(repo.join("snapshots/abc")).unwrap();
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "sentence_bert_config.json",
        "1_Pooling",
    ] {
        std::os::unix::fs::symlink(model.join(f), repo.join("snapshots/abc").join(f)).unwrap();
    }
    let run = |offline: &str| {
        posenc()
            .args([
                "embed",
                "--model",
                "sentence-transformers/all-MiniLM-L6-v2",
                "the dog",
            ])
            .env("HF_HOME", home.path())
            .env("HF_HUB_OFFLINE", offline)
            .output()
            .unwrap()
    };
    let out = run("1");
    assert!(out.status.success(), "{}", text(&out).1);
    let v: Vec<f64> = serde_json::from_str(text(&out).0.trim()).unwrap();
    assert_eq!(v.len(), 384);
    std::fs::remove_file(repo.join("snapshots/abc/tokenizer.json")).unwrap();
    let out = run("1");
    assert!(
        !out.status.success() && text(&out).1.contains("tokenizer.json"),
        "{}",
        text(&out).1
    );
}

/// A run of one task given to another task's command is named for what it is, not by the
/// setting its config lacks.
#[test]
fn another_tasks_run_is_named_for_what_it_is() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let (kotoba, lm) = (
        root.join("models/kotoba"),
        root.join("models/shakespeare-alibi"),
    );
    let (kotoba, lm) = (kotoba.to_str().unwrap(), lm.to_str().unwrap());
    for (args, says) in [
        (
            vec!["kotoba", "translate", "--model", lm, "the dog sleeps"],
            "is a language-model run",
        ),
        (
            vec!["kotoba", "eval", "--model", lm],
            "is a language-model run",
        ),
        (
            vec!["lm", "eval", "--model", kotoba],
            "is a translation model",
        ),
        (
            vec!["lm", "generate", "--model", kotoba, "to be"],
            "is a translation model",
        ),
        (
            vec!["lengthgen", "eval", "--model", lm],
            "is a language-model run",
        ),
    ] {
        let out = posenc().args(&args).output().unwrap();
        let (_, stderr) = text(&out);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains("reads, not `posenc"), "{args:?}: {stderr}");
    }
}

/// Continuing a run of another task names it for what it is, and writes nothing into it:
/// a run written before runs carried their kind (the shipped models), and one that
/// carries it.
#[test]
fn another_tasks_run_is_not_continued() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let kotoba = dir.path().join("kotoba");
    std::fs::create_dir(&kotoba).unwrap();
    for entry in std::fs::read_dir(root.join("models/kotoba")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, kotoba.join(path.file_name().unwrap())).unwrap();
    }
    let lengthgen = dir.path().join("lengthgen");
    let train = posenc()
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
        .arg(&lengthgen)
        .output()
        .unwrap();
    assert!(train.status.success(), "{}", text(&train).1);
    for (run, args, says) in [
        (
            &kotoba,
            vec!["lm", "train", "--resume"],
            "is a translation model",
        ),
        (
            &kotoba,
            vec!["lengthgen", "train", "--task", "copy", "--resume"],
            "is a translation model",
        ),
        (
            &lengthgen,
            vec!["kotoba", "train", "--resume"],
            "is a lengthgen run",
        ),
        (
            &lengthgen,
            vec!["lm", "train", "--resume"],
            "is a lengthgen run",
        ),
    ] {
        // Every file, the logs under logs/ included.
        let before = common::snapshot(run);
        let out = posenc().args(&args).arg("--out").arg(run).output().unwrap();
        let (_, stderr) = text(&out);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{args:?}: {stderr}"
        );
        // Not a byte changed, nor a file added.
        assert!(common::snapshot(run) == before, "{args:?}: the run changed");
    }
}

/// A warm-up that cannot end within the run's steps is named on stderr (the learning rate
/// would never reach its peak), even with --quiet.
#[test]
fn a_warmup_longer_than_the_run_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_config(dir.path());
    let out = posenc()
        .args([
            "kotoba", "train", "--quiet", "--steps", "3", "--warmup", "10", "--config",
        ])
        .arg(&cfg)
        .arg("--out")
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warm-up of 10 steps does not end within the run's 3"),
        "{stderr}"
    );
    // A run that cannot start says only why.
    let again = posenc()
        .args([
            "kotoba", "train", "--quiet", "--steps", "3", "--warmup", "10", "--config",
        ])
        .arg(&cfg)
        .arg("--out")
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    let (_, stderr) = text(&again);
    assert!(
        !again.status.success() && stderr.contains("already holds"),
        "{stderr}"
    );
    assert!(!stderr.contains("warm-up"), "{stderr}");
}

/// `translate --format json` gives a record per sentence, the bad one with its error and no
/// output, and still fails; `eval --format json` prints the reports alone.
#[test]
fn translate_and_eval_print_json_alone() {
    let out = posenc()
        .args([
            "kotoba",
            "translate",
            "--format",
            "json",
            "the dog sleeps",
            "the zebra sleeps",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(
        !out.status.success(),
        "an untranslatable sentence fails the command"
    );
    assert!(stderr.contains("zebra"), "{stderr}");
    let records: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0]["line"], 1);
    assert!(
        records[0]["output"].as_str().is_some_and(|s| !s.is_empty()),
        "{stdout}"
    );
    assert!(
        records[1]["output"].is_null() && records[1]["error"].is_string(),
        "{stdout}"
    );
    let eval = posenc()
        .args(["kotoba", "eval", "--format", "json"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&eval);
    assert!(eval.status.success(), "{stderr}");
    let reports: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    assert!(reports.iter().any(|r| r["split"] == "test"), "{stdout}");
    // The shipped model's record, which the toy's chapter renders, is what it gives now.
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/kotoba-shipped/results.json");
    let kept: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(kept.len(), reports.len());
    for (kept, now) in kept.iter().zip(&reports) {
        for field in [
            "split",
            "sentences",
            "exact",
            "both_halves",
            "exact_by_clauses",
        ] {
            assert_eq!(
                kept[field],
                now[field],
                "{field}: rerun `posenc kotoba eval --format json > {}`",
                path.display()
            );
        }
        let (a, b) = (
            kept["bleu"].as_f64().unwrap(),
            now["bleu"].as_f64().unwrap(),
        );
        assert!((a - b).abs() < 1e-9, "BLEU {a} kept, {b} now");
    }
}

/// A line of several sentences is translated a sentence at a time, not cut at the first:
/// its translation is each one's, joined by `. `.
#[test]
fn translate_takes_every_sentence_of_a_line() {
    let translate = |sentences: &[&str]| {
        let o = posenc()
            .args(["kotoba", "translate"])
            .args(sentences)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        text(&o).0.lines().map(String::from).collect::<Vec<_>>()
    };
    let apart = translate(&["the dog chases the cat", "the cat sleeps"]);
    let together = translate(&["the dog chases the cat. the cat sleeps!", "the cat sleeps."]);
    assert_eq!(together[0], format!("{}. {}", apart[0], apart[1]));
    assert_eq!(together[1], apart[1], "one sentence and its full stop");
    // An unknown word in the second sentence is the line's error.
    let o = posenc()
        .args(["kotoba", "translate", "the dog sleeps. the zebra sleeps"])
        .output()
        .unwrap();
    assert!(
        !o.status.success() && text(&o).1.contains("zebra"),
        "{}",
        text(&o).1
    );
}

/// `kotoba eval` lists as many mistakes as `--errors` asks, in the JSON too, each labelled;
/// the order-swap row counts its sentences and the pairs they make.
#[test]
fn eval_lists_the_mistakes_asked_for() {
    let eval = |extra: &[&str]| {
        let o = posenc()
            .args(["kotoba", "eval"])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        text(&o).0
    };
    let reports = |extra: &[&str]| -> Vec<serde_json::Value> {
        let args = [&["--format", "json"][..], extra].concat();
        serde_json::from_str(&eval(&args)).unwrap()
    };
    let none = reports(&[]);
    assert!(
        none.iter().all(|r| r["errors"] == serde_json::json!([])),
        "{none:?}"
    );
    let two = reports(&["--errors", "2"]);
    let long = two.iter().find(|r| r["split"] == "test-long").unwrap();
    let mistakes = long["errors"].as_array().unwrap();
    assert_eq!(
        mistakes.len(),
        2,
        "test-long has more than two mistakes: {long}"
    );
    for m in mistakes {
        let (expected, produced) = (m["expected"].as_str(), m["produced"].as_str());
        assert!(
            m["source"].is_string() && expected.is_some() && produced.is_some(),
            "{m}"
        );
        assert_ne!(expected, produced, "not a mistake: {m}");
    }
    let swap = two.iter().find(|r| r["split"] == "order-swap").unwrap();
    let n = swap["sentences"].as_u64().unwrap();
    assert_eq!(swap["pairs"].as_u64(), Some(n / 2));
    let table = eval(&["--errors", "1"]);
    assert!(
        table.contains(&format!("| order-swap | {n} ({} pairs) |", n / 2)),
        "{table}"
    );
    let listed: usize = reports(&["--errors", "1"])
        .iter()
        .map(|r| r["errors"].as_array().unwrap().len())
        .sum();
    assert!(listed >= 1, "the shipped model makes mistakes on test-long");
    assert_eq!(table.matches("\n  expected: ").count(), listed, "{table}");
}

/// On a terminal with no sentence given, `translate` prompts and translates each line as
/// it is entered; a bad line is named by its number and the next is asked for. The
/// terminal is util-linux's `script`, a pseudo-terminal around the command.
#[test]
fn translate_on_a_terminal_answers_line_by_line() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let command = format!("'{}' kotoba translate", env!("CARGO_BIN_EXE_posenc"));
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("util-linux's script (Debian's bsdutils)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"the dog chases the cat\nthe zebra sleeps\nthe cat chases the dog\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let (screen, stderr) = text(&out);
    assert!(out.status.success(), "{screen}{stderr}");
    // The toy language's grammar (subject ga, object o, verb last), as the README shows.
    let answers: Vec<&str> = screen.lines().filter(|l| l.starts_with("> ")).collect();
    assert!(answers.len() >= 3, "{screen}");
    assert_eq!(
        answers[0].trim_end(),
        "> inu ga neko o oikakeru",
        "{screen}"
    );
    assert!(answers[1].contains("`zebra` on line 2"), "{screen}");
    assert_eq!(
        answers[2].trim_end(),
        "> neko ga inu o oikakeru",
        "{screen}"
    );
}
