//! Bad input and faults against every subcommand, as a user meets them. Each gets an
//! error naming its cause (never a panic or an abort) and changes nothing on disk; a full
//! disk, a closed pipe, a second writer and `kill -9` lose nothing that was saved.

use crate::common;
use candle_core::Device;

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use posenc_kotoba::task::Translator;
use serde_json::json;

/// One bad invocation: the arguments, standard input, a fragment the error must contain,
/// and the exit code (1: our error, 2: clap's usage error).
struct Case {
    args: Vec<OsString>,
    stdin: &'static str,
    expect: &'static str,
    code: i32,
}

fn case(args: &[&dyn AsRefOs], expect: &'static str, code: i32) -> Case {
    Case {
        args: args.iter().map(|a| a.os()).collect(),
        stdin: "",
        expect,
        code,
    }
}

/// Strings and paths alike as arguments.
trait AsRefOs {
    fn os(&self) -> OsString;
}
impl AsRefOs for &str {
    fn os(&self) -> OsString {
        OsString::from(self)
    }
}
impl AsRefOs for PathBuf {
    fn os(&self) -> OsString {
        self.clone().into_os_string()
    }
}

/// Runs every case; checks its exit code, its message, that it did not panic, and that no
/// file under `root` changed.
fn check(cases: &[Case], root: &Path) {
    let mut failures = Vec::new();
    for c in cases {
        let before = snapshot(root);
        let out = with_stdin(&c.args, c.stdin);
        let (_, stderr) = text(&out);
        let shown = format!("posenc {:?}", c.args);
        if out.status.code() != Some(c.code) {
            failures.push(format!(
                "{shown}: exit {:?}, expected {}; stderr: {stderr}",
                out.status.code(),
                c.code
            ));
        }
        if !stderr.contains(c.expect) {
            failures.push(format!("{shown}: stderr lacks {:?}: {stderr}", c.expect));
        }
        if stderr.contains("panicked") || stderr.contains("memory allocation") {
            failures.push(format!("{shown}: crashed: {stderr}"));
        }
        if snapshot(root) != before {
            failures.push(format!("{shown}: changed files under {}", root.display()));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// The tiny config with `field: value` replaced or added at the top level or in `model`
/// or `data`.
fn tiny_with(section: Option<&str>, field: &str, value: serde_json::Value) -> String {
    let mut cfg: serde_json::Value = serde_json::from_str(TINY).unwrap();
    let target = match section {
        Some(s) => &mut cfg[s],
        None => &mut cfg,
    };
    target[field] = value;
    cfg.to_string()
}

#[test]
fn bad_input_to_every_subcommand_is_named_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let tiny = tiny_config(root);
    let model = root.join("model");
    train_tiny(&tiny, &model, 3);
    let cfg = |name: &str, json: String| write_config(root, name, &json);
    let bad_encoding = cfg(
        "enc.json",
        tiny_with(Some("model"), "encoding", json!({"kind": "warp-drive"})),
    );
    let huge_d = cfg(
        "d.json",
        tiny_with(Some("model"), "d_model", json!(1e9 as u64)),
    );
    let layers = cfg(
        "layers.json",
        tiny_with(Some("model"), "encoder_layers", json!(1_000_000)),
    );
    let eps = cfg(
        "eps.json",
        tiny_with(Some("model"), "layer_norm_eps", json!(-1.0)),
    );
    let valid0 = cfg("valid0.json", tiny_with(Some("data"), "valid", json!(0)));
    let train_huge = cfg(
        "trainhuge.json",
        tiny_with(Some("data"), "train", json!(1e12 as u64)),
    );
    let learned40 = cfg(
        "learned.json",
        tiny_with(
            Some("model"),
            "encoding",
            json!({"kind": "learned", "max_positions": 40}),
        ),
    );
    let smoothing = cfg(
        "smooth.json",
        tiny_with(None, "label_smoothing", json!(1.5)),
    );
    let garbage = cfg("garbage.json", "{ not json".to_string());
    let committed = |path: &str| Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    // A committed experiment's results with every run's records taken out.
    let emptied = |name: &str, results: &str, field: &str| -> PathBuf {
        let text = std::fs::read_to_string(committed(results)).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(
            !v[field].as_array().unwrap().is_empty(),
            "{results} has {field}"
        );
        v[field] = json!([]);
        cfg(name, v.to_string())
    };
    let no_runs = emptied("no-runs.json", "docs/experiment/results.json", "results");
    let no_lm_records = emptied("no-lm.json", "docs/lm-experiment/results.json", "results");
    let sort_results = committed("docs/lengthgen/sort/results.json");
    let copy_results = committed("docs/lengthgen/copy/results.json");
    let no_tests = emptied(
        "no-tests.json",
        "docs/lengthgen/copy/results.json",
        "records",
    );
    let file = cfg("a-file", "x".to_string());
    let foreign = root.join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("thesis.tex"), "years of work").unwrap();
    let fresh = root.join("fresh");
    let png = root.join("p.png");

    // Broken copies of the trained model, one fault each.
    let broken = |name: &str, breaks: &dyn Fn(&Path)| -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir(&dir).unwrap();
        for f in std::fs::read_dir(&model).unwrap() {
            let f = f.unwrap().path();
            if f.is_file() && !f.file_name().unwrap().to_string_lossy().starts_with('.') {
                std::fs::copy(&f, dir.join(f.file_name().unwrap())).unwrap();
            }
        }
        breaks(&dir);
        dir
    };
    let other = root.join("other");
    train_tiny(&tiny, &other, 3);
    let bad_trainer = broken("bad-trainer", &|d| {
        std::fs::write(d.join("trainer.json"), "{ truncated").unwrap()
    });
    let swapped_tokenizer = broken("swapped-tokenizer", &|d| {
        // Another run's tokenizer, with the same vocabulary size but different words.
        let text = std::fs::read_to_string(d.join("source.tokenizer.json")).unwrap();
        let swapped = text.replacen("\"dog\"", "\"dXg\"", 1);
        assert_ne!(text, swapped);
        std::fs::write(d.join("source.tokenizer.json"), swapped).unwrap()
    });
    let foreign_weights = broken("foreign-weights", &|d| {
        std::fs::copy(other.join("model.safetensors"), d.join("model.safetensors")).unwrap();
    });
    let nan_weights = broken("nan-weights", &|d| {
        let path = d.join("model.safetensors");
        let meta = posenc_transformer::checkpoint::read_metadata(&path).unwrap();
        let mut tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).unwrap();
        let (name, t) = tensors
            .iter()
            .next()
            .map(|(k, v)| (k.clone(), v.clone()))
            .unwrap();
        let nan = (t.ones_like().unwrap() * f64::NAN).unwrap();
        tensors.insert(name, nan);
        let bytes = posenc_transformer::checkpoint::serialize(&tensors, meta, &path).unwrap();
        std::fs::write(&path, bytes).unwrap();
    });
    let no_manifest = broken("no-manifest", &|d| {
        std::fs::remove_file(d.join("manifest.json")).unwrap()
    });

    let cases = vec![
        // train: nothing is written before everything is checked.
        case(
            &[&"train", &"--config", &bad_encoding, &"--out", &model],
            "warp-drive",
            1,
        ),
        case(
            &[&"train", &"--encoding", &"warp-drive", &"--out", &model],
            "warp-drive",
            2,
        ),
        case(
            &[&"train", &"--config", &tiny, &"--out", &model],
            "already holds a run of this config",
            1,
        ),
        case(
            &[
                &"train",
                &"--config",
                &tiny,
                &"--encoding",
                &"rope",
                &"--out",
                &model,
            ],
            "model.encoding",
            1,
        ),
        case(
            &[&"train", &"--config", &huge_d, &"--out", &fresh],
            "d_model = 1000000000 is too large",
            1,
        ),
        case(
            &[&"train", &"--config", &layers, &"--out", &fresh],
            "encoder_layers = 1000000 is too large",
            1,
        ),
        case(
            &[&"train", &"--config", &eps, &"--out", &fresh],
            "layer_norm_eps",
            1,
        ),
        case(
            &[&"train", &"--config", &valid0, &"--out", &fresh],
            "data.valid must be at least 1",
            1,
        ),
        case(
            &[&"train", &"--config", &train_huge, &"--out", &fresh],
            "is too large",
            1,
        ),
        case(
            &[&"train", &"--config", &learned40, &"--out", &fresh],
            "max_positions = 40",
            1,
        ),
        case(
            &[&"train", &"--config", &smoothing, &"--out", &fresh],
            "label_smoothing",
            1,
        ),
        case(
            &[
                &"train",
                &"--steps",
                &"0",
                &"--config",
                &tiny,
                &"--out",
                &fresh,
            ],
            "steps must be at least 1",
            1,
        ),
        case(
            &[
                &"train",
                &"--config",
                &root.join("missing.json"),
                &"--out",
                &fresh,
            ],
            "missing.json",
            1,
        ),
        case(
            &[&"train", &"--config", &garbage, &"--out", &fresh],
            "garbage.json",
            1,
        ),
        case(
            &[&"train", &"--config", &tiny, &"--out", &file],
            "is a file",
            1,
        ),
        case(
            &[&"train", &"--config", &tiny, &"--out", &foreign, &"--force"],
            "did not write",
            1,
        ),
        case(
            &[&"train", &"--resume", &"--out", &fresh],
            "not a run directory",
            1,
        ),
        case(
            &[&"train", &"--resume", &"--steps", &"1", &"--out", &model],
            "past --steps 1",
            1,
        ),
        case(
            &[&"train", &"--resume", &"--force", &"--out", &model],
            "cannot be used",
            2,
        ),
        // translate: special tokens, control characters, absurd decoding settings.
        case(
            &[&"translate", &"--model", &model, &"<pad>"],
            "special token `<pad>`",
            1,
        ),
        case(
            &[&"translate", &"--model", &model, &"the dog </s>"],
            "special token `</s>`",
            1,
        ),
        case(
            &[
                &"translate",
                &"--model",
                &model,
                &"the zebra\u{1b}[31m runs",
            ],
            "\\u{1b}",
            1,
        ),
        case(
            &[
                &"translate",
                &"--model",
                &model,
                &"--beam",
                &"18446744073709551615",
                &"the dog runs",
            ],
            "beam size",
            1,
        ),
        case(
            &[
                &"translate",
                &"--model",
                &model,
                &"--beam",
                &"0",
                &"the dog runs",
            ],
            "beam size",
            1,
        ),
        case(
            &[
                &"translate",
                &"--model",
                &model,
                &"--length-penalty",
                &"NaN",
                &"the dog runs",
            ],
            "length penalty",
            1,
        ),
        case(
            &[
                &"translate",
                &"--model",
                &model,
                &"--length-penalty",
                &"inf",
                &"the dog runs",
            ],
            "length penalty",
            1,
        ),
        case(
            &[
                &"translate",
                &"--model",
                &model,
                &"--max-len",
                &"1000000",
                &"the dog runs",
            ],
            "max_len = 1000000 is too large",
            1,
        ),
        case(
            &[&"translate", &"--model", &file, &"the dog runs"],
            "is a file",
            1,
        ),
        case(
            &[
                &"translate",
                &"--model",
                &root.join("absent"),
                &"the dog runs",
            ],
            "does not exist",
            1,
        ),
        // eval: every file of a model is checked against the others.
        case(&[&"eval", &"--model", &bad_trainer], "trainer.json", 1),
        case(
            &[&"eval", &"--model", &swapped_tokenizer],
            "source.tokenizer.json",
            1,
        ),
        case(
            &[&"eval", &"--model", &foreign_weights],
            "belongs to run",
            1,
        ),
        case(&[&"eval", &"--model", &nan_weights], "NaN", 1),
        case(&[&"eval", &"--model", &no_manifest], "no manifest.json", 1),
        // plot and encoding: sizes are checked before anything is allocated.
        case(
            &[
                &"plot",
                &"encoding",
                &"--kind",
                &"sinusoidal",
                &"--len",
                &"100000",
                &"--out",
                &png,
            ],
            "len = 100000 is too large",
            1,
        ),
        case(
            &[
                &"plot",
                &"encoding",
                &"--kind",
                &"alibi",
                &"--heads",
                &"1000000000",
                &"--out",
                &png,
            ],
            "heads = 1000000000 is too large",
            1,
        ),
        case(
            &[
                &"plot",
                &"encoding",
                &"--kind",
                &"sinusoidal",
                &"--out",
                &"/nonexistent/dir/x.png",
            ],
            "/nonexistent/dir/x.png",
            1,
        ),
        case(
            &[
                &"plot",
                &"attention",
                &"--model",
                &file,
                &"--sentence",
                &"the dog runs",
                &"--out",
                &png,
            ],
            "is a file",
            1,
        ),
        case(
            &[
                &"plot",
                &"attention",
                &"--model",
                &model,
                &"--sentence",
                &"the zebra runs",
                &"--out",
                &png,
            ],
            "zebra",
            1,
        ),
        // Results with nothing in them are refused, and no figure directory is made.
        case(
            &[&"plot", &"experiment", &"--results", &no_runs, &"--out", &fresh],
            "no-runs.json: the results hold no runs: there is nothing to plot",
            1,
        ),
        case(
            &[
                &"plot",
                &"lm-experiment",
                &"--results",
                &no_lm_records,
                &"--out",
                &fresh,
            ],
            "the results hold no evaluation records",
            1,
        ),
        case(
            &[&"plot", &"lengthgen", &"--results", &no_tests, &"--out", &fresh],
            "the results hold no test records",
            1,
        ),
        // Pooled results must be of one setting, each run in one of them.
        case(
            &[
                &"plot",
                &"lengthgen",
                &"--results",
                &sort_results,
                &copy_results,
                &"--out",
                &fresh,
            ],
            "differs from the first in task",
            1,
        ),
        case(
            &[
                &"plot",
                &"lengthgen",
                &"--results",
                &sort_results,
                &sort_results,
                &"--out",
                &fresh,
            ],
            "seed 1 of `none` is in two of the experiments",
            1,
        ),
        case(
            &[
                &"encoding",
                &"show",
                &"--kind",
                &"alibi",
                &"--heads",
                &"1000000000",
                &"--d-model",
                &"64",
                &"--len",
                &"4",
            ],
            "heads = 1000000000 is too large",
            1,
        ),
        case(
            &[
                &"encoding",
                &"show",
                &"--kind",
                &"sinusoidal",
                &"--d-model",
                &"8",
                &"--len",
                &"100000",
            ],
            "len = 100000 is too large",
            1,
        ),
        case(
            &[
                &"encoding",
                &"show",
                &"--kind",
                &"sinusoidal",
                &"--d-model",
                &"1000000000",
                &"--len",
                &"4",
            ],
            "d_model = 1000000000 is too large",
            1,
        ),
        case(
            &[
                &"encoding",
                &"props",
                &"--kind",
                &"learned",
                &"--d-model",
                &"8",
                &"--len",
                &"100000",
            ],
            "len = 100000 is too large",
            1,
        ),
        // experiment and bench.
        case(
            &[
                &"experiment",
                &"--steps",
                &"0",
                &"--quiet",
                &"--out",
                &fresh,
            ],
            "steps must be at least 1",
            1,
        ),
        case(
            &[
                &"experiment",
                &"--encodings",
                &"none,none",
                &"--out",
                &fresh,
            ],
            "listed twice",
            1,
        ),
        case(
            &[&"experiment", &"--encodings", &"warp", &"--out", &fresh],
            "warp",
            2,
        ),
        // A model's size is checked before anything is trained or written.
        case(
            &[
                &"lengthgen",
                &"--task",
                &"copy",
                &"--heads",
                &"0",
                &"--out",
                &fresh,
            ],
            "heads must be > 0",
            1,
        ),
        // Seeds counted up from the largest would wrap around to 0.
        case(
            &[
                &"lengthgen",
                &"--task",
                &"copy",
                &"--seed",
                &"18446744073709551615",
                &"--seeds",
                &"2",
                &"--out",
                &fresh,
            ],
            "2 seeds from seed 18446744073709551615 would pass the largest seed",
            1,
        ),
        case(
            &[
                &"experiment",
                &"--seed",
                &"18446744073709551614",
                &"--seeds",
                &"3",
                &"--out",
                &fresh,
            ],
            "3 seeds from seed 18446744073709551614 would pass the largest seed",
            1,
        ),
        // An unknown task is refused with the list of tasks.
        case(
            &[&"lengthgen", &"--task", &"multiply", &"--out", &fresh],
            "possible values: copy, reverse, sort, duplicate, addition, addition-hints",
            2,
        ),
        // Index hints run out past 51 digits: a test of 60 is refused before training.
        case(
            &[
                &"lengthgen",
                &"--task",
                &"addition-hints",
                &"--test-lengths",
                &"10,60",
                &"--out",
                &fresh,
            ],
            "the longest test length is 60, but addition-hints writes instances of at most 51 digits",
            1,
        ),
        case(
            &[
                &"lengthgen",
                &"--task",
                &"copy",
                &"--d-model",
                &"0",
                &"--out",
                &fresh,
            ],
            "d_model must be > 0",
            1,
        ),
        case(
            &[
                &"lm",
                &"train",
                &"--d-model",
                &"64",
                &"--heads",
                &"3",
                &"--out",
                &fresh,
            ],
            "d_model = 64 is not divisible by heads = 3",
            1,
        ),
        case(
            &[
                &"lm",
                &"train",
                &"--resume",
                &"--layers",
                &"2",
                &"--out",
                &fresh,
            ],
            "cannot be used with",
            2,
        ),
        case(
            &[&"bench", &"train", &"--steps", &"0"],
            "at least one step",
            1,
        ),
        case(
            &[&"bench", &"generate", &"--model", &model, &"--no-llama-cpp"],
            "is a directory, not a GGUF file",
            1,
        ),
        case(
            &[&"bench", &"train", &"--device", &"gpu"],
            "unknown device \"gpu\"",
            2,
        ),
        case(
            &[&"embed", &"--model", &"x", &"--device", &"cuda:one", &"hi"],
            "not a number",
            2,
        ),
    ];
    check(&cases, root);
    // A backend this binary was built without is named, with the build that has it.
    if !cfg!(feature = "cuda") {
        let cuda = [
            case(
                &[&"generate", &"--device", &"cuda", &"hi"],
                "--features cuda",
                2,
            ),
            case(
                &[&"lm", &"train", &"--out", &"r", &"--device", &"cuda"],
                "--features cuda",
                2,
            ),
            case(
                &[&"lm", &"experiment", &"--device", &"cuda"],
                "--features cuda",
                2,
            ),
            case(
                &[&"bench", &"generate", &"--device", &"cuda"],
                "--features cuda",
                2,
            ),
            case(
                &[&"kotoba", &"train", &"--out", &"r", &"--device", &"cuda"],
                "--features cuda",
                2,
            ),
            case(
                &[&"kotoba", &"translate", &"--device", &"cuda", &"the dog"],
                "--features cuda",
                2,
            ),
            case(
                &[&"kotoba", &"eval", &"--device", &"cuda"],
                "--features cuda",
                2,
            ),
            case(
                &[&"kotoba", &"experiment", &"--device", &"cuda"],
                "--features cuda",
                2,
            ),
            case(
                &[
                    &"lengthgen",
                    &"train",
                    &"--task",
                    &"copy",
                    &"--out",
                    &"r",
                    &"--device",
                    &"cuda",
                ],
                "--features cuda",
                2,
            ),
            case(
                &[
                    &"lengthgen",
                    &"eval",
                    &"--model",
                    &"r",
                    &"--device",
                    &"cuda",
                ],
                "--features cuda",
                2,
            ),
            case(
                &[
                    &"lengthgen",
                    &"experiment",
                    &"--task",
                    &"copy",
                    &"--device",
                    &"cuda",
                ],
                "--features cuda",
                2,
            ),
        ];
        check(&cuda, root);
    }
}

#[test]
fn input_is_normalised_and_empty_lines_stay_empty() {
    let out = with_stdin(
        &["translate"],
        "The dog chases the cat.\n\n   \nthe cat chases the dog\n",
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["inu ga neko o oikakeru", "", "", "neko ga inu o oikakeru"]
    );
}

#[test]
fn a_full_stdout_is_an_error_and_a_closed_pipe_a_quiet_exit() {
    let show = [
        "encoding",
        "show",
        "--kind",
        "sinusoidal",
        "--d-model",
        "8",
        "--len",
        "10",
    ];
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = posenc().args(show).stdout(full).output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("writing to standard output") && stderr.contains("No space left"),
        "{stderr}"
    );

    // Training finishes and saves before it prints; a full stdout fails only the print.
    let tmp = tempfile::tempdir().unwrap();
    let tiny = tiny_config(tmp.path());
    let dir = tmp.path().join("run");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = posenc()
        .args(["train", "--quiet", "--steps", "2", "--config"])
        .arg(&tiny)
        .arg("--out")
        .arg(&dir)
        .stdout(full)
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("standard output") && !stderr.contains("panicked"),
        "{stderr}"
    );
    Translator::load(&dir, &Device::Cpu).expect("the model was saved before the failed print");

    // A reader that goes away (`posenc … | head`) ends the program quietly.
    let mut child = posenc()
        .args([
            "encoding",
            "show",
            "--kind",
            "sinusoidal",
            "--d-model",
            "512",
            "--len",
            "4000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let (_, stderr) = text(&out);
    assert!(out.status.success() && stderr.is_empty(), "{stderr}");
}

/// `posenc ARGS` with files limited to `bytes` (RLIMIT_FSIZE): a write past it fails with
/// EFBIG, as on a full disk, without needing root to mount a small filesystem.
fn with_file_limit(bytes: u64) -> Command {
    let mut cmd = posenc();
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

fn no_temporaries(dir: &Path) {
    let names = names(dir);
    assert!(
        names.iter().all(|n| !n.contains(".tmp-")),
        "temporaries left in {}: {names:?}",
        dir.display()
    );
}

#[test]
fn a_full_disk_leaves_no_truncated_file_and_the_run_continues() {
    let tmp = tempfile::tempdir().unwrap();
    let tiny = tiny_config(tmp.path());

    // Room for the config and tokenizers but not the weights: the first checkpoint fails.
    let dir = tmp.path().join("run");
    let out = with_file_limit(20_000)
        .args([
            "train",
            "--quiet",
            "--steps",
            "4",
            "--save-every",
            "2",
            "--config",
        ])
        .arg(&tiny)
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("training.safetensors") && stderr.contains("too large"),
        "{stderr}"
    );
    no_temporaries(&dir);
    assert!(!dir.join("training.safetensors").exists() && !dir.join("model.safetensors").exists());
    let e = Translator::load(&dir, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(e.contains("stopped before its first checkpoint"), "{e}");
    let out = posenc()
        .args(["train", "--quiet", "--resume", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    Translator::load(&dir, &Device::Cpu).expect("resumed after the disk had room again");

    // No room even for a tokenizer: no empty tokenizer is left, and a later run starts.
    let dir = tmp.path().join("run2");
    let out = with_file_limit(1_000)
        .args(["train", "--quiet", "--steps", "2", "--config"])
        .arg(&tiny)
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("tokenizer.json"), "{stderr}");
    no_temporaries(&dir);
    for name in names(&dir) {
        let len = std::fs::metadata(dir.join(&name)).unwrap().len();
        assert!(len > 0 || name == ".lock", "{name} is empty");
    }
    train_tiny(&tiny, &dir, 2);
    Translator::load(&dir, &Device::Cpu).unwrap();

    // A figure that does not fit leaves no truncated PNG.
    let png = tmp.path().join("fig.png");
    let out = with_file_limit(5_000)
        .args(["plot", "encoding", "--kind", "sinusoidal", "--out"])
        .arg(&png)
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("fig.png"), "{stderr}");
    assert!(!png.exists());
    no_temporaries(tmp.path());
}

/// Starts `posenc train` in the background.
fn spawn_train(args: &[&str], config: Option<&Path>, out: &Path) -> Child {
    let mut cmd = posenc();
    cmd.arg("train").arg("--quiet").args(args);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    cmd.arg("--out")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Polls until `done()` or the child exits or 60 s pass; returns whether `done()` held.
fn wait_for(child: &mut Child, done: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if done() {
            return true;
        }
        if child.try_wait().unwrap().is_some() {
            return done();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

/// The step of the last checkpoint in `dir`, from its header; 0 before the first.
fn checkpoint_step(dir: &Path) -> usize {
    posenc_transformer::checkpoint::read_metadata(&dir.join("training.safetensors"))
        .ok()
        .and_then(|m| m.get("posenc.step")?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_second_writer_is_refused_naming_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let tiny = tiny_config(tmp.path());
    let dir = tmp.path().join("run");
    let mut first = spawn_train(
        &["--steps", "1000000", "--save-every", "2"],
        Some(&tiny),
        &dir,
    );
    assert!(
        wait_for(&mut first, || checkpoint_step(&dir) >= 2),
        "the first writer never saved"
    );
    let manifest = std::fs::read(dir.join("manifest.json")).unwrap();
    let pid = format!("pid {}", first.id());
    for args in [
        vec!["--force", "--steps", "5"],
        vec!["--resume", "--steps", "5"],
    ] {
        let mut cmd = posenc();
        cmd.arg("train").args(&args).arg("--quiet");
        if args[0] == "--force" {
            cmd.arg("--config").arg(&tiny);
        }
        let out = cmd.arg("--out").arg(&dir).output().unwrap();
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("being written by another posenc process") && stderr.contains(&pid),
            "{stderr}"
        );
    }
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(std::fs::read(dir.join("manifest.json")).unwrap(), manifest);
    // However far the first writer got before it was killed, two more steps.
    let steps = (checkpoint_step(&dir) + 2).to_string();
    let out = posenc()
        .args(["train", "--quiet", "--resume", "--steps", &steps, "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the lock dies with its process: {}",
        text(&out).1
    );
}

fn weights(dir: &Path) -> std::collections::HashMap<String, Vec<f32>> {
    candle_core::safetensors::load(dir.join("model.safetensors"), &candle_core::Device::Cpu)
        .unwrap()
        .into_iter()
        .map(|(k, t)| (k, t.flatten_all().unwrap().to_vec1().unwrap()))
        .collect()
}

#[test]
fn killed_runs_resume_to_the_weights_of_an_uninterrupted_run() {
    const STEPS: usize = 40;
    let tmp = tempfile::tempdir().unwrap();
    let tiny = tiny_config(tmp.path());
    let straight = tmp.path().join("straight");
    train_tiny(&tiny, &straight, STEPS);
    let steps = STEPS.to_string();

    // Killed during the first save of a fresh directory (or as near to it as polling gets),
    // then killed again after later checkpoints, resumed each time.
    let dir = tmp.path().join("killed");
    let mut child = spawn_train(&["--steps", &steps, "--save-every", "1"], Some(&tiny), &dir);
    let first_save = || {
        names(&dir)
            .iter()
            .any(|n| n.starts_with(".training.safetensors.tmp-") || n == "training.safetensors")
    };
    wait_for(&mut child, first_save);
    child.kill().unwrap();
    child.wait().unwrap();
    match Translator::load(&dir, &Device::Cpu) {
        Ok(_) => {}
        Err(e) => assert!(
            e.to_string()
                .contains("stopped before its first checkpoint"),
            "{e}"
        ),
    }
    let mut kills = 0;
    for at in [10, 20, 30] {
        let mut child = spawn_train(&["--resume", "--steps", &steps], None, &dir);
        let reached = wait_for(&mut child, || checkpoint_step(&dir) >= at);
        let running = child.try_wait().unwrap().is_none();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(reached, "the run never reached step {at}");
        if running && checkpoint_step(&dir) < STEPS {
            kills += 1;
        }
        Translator::load(&dir, &Device::Cpu).expect("a killed run's checkpoint loads");
    }
    assert!(kills >= 2, "the runs finished before they could be killed");
    train_tiny_resume(&dir, STEPS);
    assert_eq!(checkpoint_step(&dir), STEPS);
    assert!(
        weights(&dir) == weights(&straight),
        "the resumed weights differ from the uninterrupted run's"
    );
    no_temporaries(&dir);
}

/// Ctrl-C (SIGINT) before the first checkpoint stops the run after its step with a
/// checkpoint there, exits with 130 and names the command that goes on; that command ends
/// at the weights of a run never interrupted.
#[test]
fn ctrl_c_saves_a_checkpoint_that_resumes_to_the_uninterrupted_weights() {
    const STEPS: usize = 300;
    let tmp = tempfile::tempdir().unwrap();
    let tiny = tiny_config(tmp.path());
    let straight = tmp.path().join("straight");
    train_tiny(&tiny, &straight, STEPS);

    let dir = tmp.path().join("stopped");
    let mut child = posenc()
        .args(["kotoba", "train", "--quiet", "--steps", &STEPS.to_string()])
        .args(["--save-every", "1000", "--config"])
        .arg(&tiny)
        .arg("--out")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The manifest is written as training begins.
    assert!(wait_for(&mut child, || dir.join("manifest.json").exists()));
    std::thread::sleep(Duration::from_millis(30));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run ended before it could be interrupted"
    );
    // SAFETY: kill(2) with the child's pid, which has not been waited for.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let step = checkpoint_step(&dir);
    assert!(0 < step && step < STEPS, "stopped at step {step}: {stderr}");
    assert!(
        stderr.contains(&format!("interrupted at step {step} of {STEPS}")),
        "{stderr}"
    );
    let go_on = format!(
        "go on with: posenc kotoba train --resume --out {}",
        dir.display()
    );
    assert!(stderr.contains(&go_on), "{stderr}");
    no_temporaries(&dir);

    train_tiny_resume(&dir, STEPS);
    assert_eq!(checkpoint_step(&dir), STEPS);
    assert!(
        weights(&dir) == weights(&straight),
        "the resumed weights differ from the uninterrupted run's"
    );
}

fn train_tiny_resume(dir: &Path, steps: usize) {
    let out = posenc()
        .args([
            "train",
            "--quiet",
            "--resume",
            "--steps",
            &steps.to_string(),
            "--out",
        ])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
}

#[test]
fn force_replaces_a_run_and_keeps_foreign_files_out_of_reach() {
    let tmp = tempfile::tempdir().unwrap();
    let tiny = tiny_config(tmp.path());
    let dir = tmp.path().join("run");
    train_tiny(&tiny, &dir, 2);
    let manifest = |d: &Path| std::fs::read_to_string(d.join("manifest.json")).unwrap();
    let before = manifest(&dir);
    let out = posenc()
        .args([
            "train",
            "--quiet",
            "--force",
            "--steps",
            "2",
            "--encoding",
            "rope",
            "--config",
        ])
        .arg(&tiny)
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    assert_ne!(manifest(&dir), before, "a replaced run gets a new run id");
    let t = Translator::load(&dir, &Device::Cpu).unwrap();
    assert_eq!(t.model.config().encoding.kind(), "rope");
    no_temporaries(&dir);
    // A file posenc did not write makes the directory off limits, --force or not.
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let out = posenc()
        .args(["train", "--quiet", "--force", "--steps", "2", "--config"])
        .arg(&tiny)
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("notes.txt"), "{}", text(&out).1);
    assert_eq!(
        std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
        "mine"
    );
    assert_eq!(
        Translator::load(&dir, &Device::Cpu)
            .unwrap()
            .model
            .config()
            .encoding
            .kind(),
        "rope"
    );
}

/// What the stand-in PyTorch script does when its steps run out.
const DIE: &str = "echo 'RuntimeError: out of steps' >&2; exit 1";
const HANG: &str = "exec sleep 600";

/// A stand-in for the PyTorch script of `posenc bench train`: its header, then `serve`
/// steps of fixed timings, then (if `serve` runs out) `then` ([`DIE`], [`HANG`]).
fn fake_torch(dir: &Path, serve: usize, then: &str) -> PathBuf {
    let path = dir.join("python");
    let step = r#"{"forward_ms": 1.0, "backward_ms": 2.0, "optimizer_ms": 0.5, "total_ms": 3.5}"#;
    let script = format!(
        "#!/bin/sh\ndev=none\nwhile [ $# -gt 0 ]; do [ \"$1\" = --device ] && dev=$2; shift; done\n\
         echo '{{\"torch\": \"fake\", \"threads\": 2, \"device\": \"'$dev'\"}}'\ni=0\nwhile read line; do\n  \
         if [ $i -ge {serve} ]; then {then}; fi\n  \
         echo '{step}'\n  i=$((i + 1))\ndone\n"
    );
    std::fs::write(&path, script).unwrap();
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).unwrap();
    path
}

/// `posenc bench train` alternates its steps with the PyTorch script's, one per line it
/// sends; a script that dies mid-run costs the comparison, named with the script's own
/// last words, and nothing else; so does one that stops answering, once the time limit
/// has passed.
#[test]
fn bench_train_alternates_with_the_torch_script_and_survives_its_death() {
    let dir = tempfile::tempdir().unwrap();
    let run = |serve: usize, then: &str| {
        let out = posenc()
            .args(["bench", "train", "--steps", "2"])
            .env("POSENC_PYTHON", fake_torch(dir.path(), serve, then))
            .env("POSENC_TORCH_TIMEOUT", "2")
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        assert!(stdout.contains("| reference (d256"), "{stdout}");
        stdout
    };
    // 2 warm-up steps and 2 timed ones: all served.
    let served = run(4, DIE);
    assert!(
        // The script was asked for the device the bench ran on.
        served.contains("| PyTorch fake (cpu, 2 threads), reference | 1.0 | 2.0 | 0.5 | 3.5 |"),
        "{served}"
    );
    assert!(served.contains("median of 2 alternating steps"), "{served}");
    // Beside the median of the steps' ratios, the ratio of the two columns' medians.
    assert!(served.contains("(ratio of the medians "), "{served}");
    // It dies on the third request.
    let died = run(2, DIE);
    assert!(
        died.contains("PyTorch comparison skipped") && died.contains("out of steps"),
        "{died}"
    );
    assert!(!died.contains("speed relative to PyTorch"), "{died}");
    // It hangs on the third request: stopped after 2 s, not waited for.
    let started = std::time::Instant::now();
    let hung = run(2, HANG);
    assert!(
        started.elapsed().as_secs() < 300,
        "the bench waited out the hang"
    );
    assert!(
        hung.contains("PyTorch comparison skipped") && hung.contains("no answer in 2 s"),
        "{hung}"
    );
    assert!(!hung.contains("speed relative to PyTorch"), "{hung}");
    // Nothing is missing from the Python environment, so no advice to install it.
    assert!(!hung.contains("install it with"), "{hung}");
}

/// The two speed figures of a comparison: the median of the rounds' ratios, which a
/// slowdown hitting both sides of a round leaves alone, and the ratio of the medians, which
/// it does not. Unequal or empty rounds give none.
#[test]
fn a_speedup_is_the_median_of_the_rounds_ratios_and_the_ratio_of_the_medians() {
    use posenc_bench::Speedup;
    let s = Speedup::of_times(&[10.0, 20.0, 10.0], &[12.0, 22.0, 11.0]).unwrap();
    assert_eq!((s.per_round, s.of_medians), (1.1, 1.2));
    assert_eq!(s.to_string(), "1.10× (ratio of the medians 1.20×)");
    // Rates: higher is faster, so ours over theirs.
    let r = Speedup::of_rates(&[100.0, 50.0, 100.0], &[80.0, 40.0, 90.0]).unwrap();
    assert_eq!((r.per_round, r.of_medians), (1.25, 100.0 / 80.0));
    assert_eq!(Speedup::of_times(&[1.0], &[1.0, 2.0]), None);
    assert_eq!(Speedup::of_rates(&[], &[]), None);
}

/// A user's mistake prints its cause and no backtrace, even with `RUST_BACKTRACE=1` (which
/// makes candle write the backtrace it captured into its errors' text): a text file given
/// as a model, to `generate` and to `kotoba translate`.
#[test]
fn a_user_error_prints_no_backtrace_under_rust_backtrace() {
    let readme = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
    for args in [
        vec!["generate", "--model", readme, "hello"],
        vec!["kotoba", "translate", "--model", readme, "the dog"],
    ] {
        let out = common::posenc()
            .args(&args)
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            err.contains("README.md"),
            "{args:?}: the error names no file: {err}"
        );
        let frames = err
            .lines()
            .filter(|l| l.trim_start().starts_with("0: "))
            .count();
        assert_eq!(frames, 0, "{args:?} printed a backtrace:\n{err}");
        assert!(err.lines().count() <= 3, "{args:?}:\n{err}");
    }
}
