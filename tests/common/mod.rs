//! Helpers shared by the command-line tests: running `posenc`, a tiny training config,
//! and snapshots of a directory to prove nothing in it changed.
#![allow(dead_code)] // each test binary uses its own subset

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The `posenc` binary under test.
pub fn posenc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_posenc"))
}

/// Runs `posenc ARGS` with `input` on standard input.
pub fn with_stdin<S: AsRef<OsStr>>(args: &[S], input: &str) -> Output {
    let mut child = posenc()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The process may exit before reading (a bad flag): a closed pipe here is fine.
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    child.wait_with_output().unwrap()
}

/// Standard output and standard error as text.
pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// The JSON of a tiny, fast training config (a 1+1 layer, d_model 32 model on 2000 pairs).
pub const TINY: &str = r#"{"model": {"d_model": 32, "heads": 2, "d_ff": 64, "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.0},
    "data": {"train": 2000, "valid": 20, "test": 20, "test_long": 10, "order_swap": 10},
    "batch_size": 32, "eval_every": 1000, "eval_sentences": 10}"#;

/// Writes `json` as `name` in `dir`; returns its path.
pub fn write_config(dir: &Path, name: &str, json: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, json).unwrap();
    path
}

/// Writes [`TINY`] as `tiny.json` in `dir`.
pub fn tiny_config(dir: &Path) -> PathBuf {
    write_config(dir, "tiny.json", TINY)
}

/// Trains the tiny config for `steps` steps into `out`; panics with stderr on failure.
pub fn train_tiny(config: &Path, out: &Path, steps: usize) {
    let run = posenc()
        .args([
            "train",
            "--quiet",
            "--steps",
            &steps.to_string(),
            "--config",
        ])
        .arg(config)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run).1);
}

/// `posenc lm eval --windows WINDOWS --lengths LENGTHS --model MODEL`, for the caller to add
/// flags to and run.
pub fn lm_eval(model: &Path, windows: usize, lengths: &str) -> Command {
    let mut command = posenc();
    command
        .args(["lm", "eval", "--windows", &windows.to_string()])
        .args(["--lengths", lengths, "--model"])
        .arg(model);
    command
}

/// Every file under `dir` (recursively) with its bytes; empty if `dir` does not exist.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files.extend(snapshot(&path));
            } else {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// The names of the files in `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Runs `posenc ARGS` in this process, so kinds registered by the test are known to it;
/// returns stdout.
pub fn in_process(args: &[&str]) -> String {
    let cli = posenc_cli::Cli::parse_args(std::iter::once("posenc").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("posenc {args:?}: {e}"));
    let mut out = Vec::new();
    if let Err(e) = posenc_cli::run(cli, &mut out) {
        panic!("posenc {args:?}: {}", posenc_cli::cmd::error_text(&e));
    }
    String::from_utf8(out).unwrap()
}

/// Whether `path` holds a PNG.
pub fn is_png(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.starts_with(b"\x89PNG"))
}
