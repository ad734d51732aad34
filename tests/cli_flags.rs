//! One flag name, one meaning and one syntax per concept across every command, and help
//! whose defaults are what the commands do.

use std::path::Path;

use clap::CommandFactory;

use crate::common::{posenc, text, tiny_config};

/// Every command of the tree with its path of words (`["lm", "train"]`), leaves and
/// groups alike.
fn commands() -> Vec<(Vec<String>, clap::Command)> {
    fn walk(path: Vec<String>, cmd: clap::Command, all: &mut Vec<(Vec<String>, clap::Command)>) {
        for sub in cmd.get_subcommands() {
            let mut p = path.clone();
            p.push(sub.get_name().to_string());
            walk(p, sub.clone(), all);
        }
        all.push((path, cmd));
    }
    let mut cmd = posenc_cli::Cli::command();
    cmd.build();
    let mut all = Vec::new();
    walk(Vec::new(), cmd, &mut all);
    all
}

/// `--long` of `cmd`, if it has it.
fn flag<'a>(cmd: &'a clap::Command, long: &str) -> Option<&'a clap::Arg> {
    cmd.get_arguments().find(|a| a.get_long() == Some(long))
}

/// Each concept has one name: the names it might have had elsewhere name no flag shown
/// in any help (a hidden alias keeps an earlier spelling working).
#[test]
fn each_concept_has_one_flag_name() {
    // (the name, the names it must not also have)
    const ONE_NAME: &[(&str, &[&str])] = &[
        ("lengths", &["test-lengths", "eval-lengths", "lens"]),
        ("seeds", &["seed-list", "n-seeds", "num-seeds"]),
        ("out", &["output", "out-dir", "dir"]),
        ("model", &["run", "checkpoint"]),
        ("encoding", &["kind", "pe"]),
        ("format", &["output-format", "json"]),
    ];
    for (path, cmd) in commands() {
        for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
            let Some(long) = arg.get_long() else { continue };
            for (name, others) in ONE_NAME {
                assert!(
                    !others.contains(&long),
                    "posenc {}: --{long} is --{name} elsewhere",
                    path.join(" ")
                );
            }
        }
    }
}

/// A flag means one thing in every command that has it: the same values parse, the same
/// are refused, with the same list syntax.
#[test]
fn a_flag_has_one_syntax_in_every_command() {
    // (flag, values every command takes, values every command refuses, comma lists)
    const SYNTAX: &[(&str, &[&str], &[&str], bool)] = &[
        ("seeds", &["1", "3"], &["0", "0,1,2", "three"], false),
        ("seed", &["0", "7"], &["-1", "x"], false),
        ("lengths", &["8", "16"], &["x"], true),
        ("format", &["text", "json"], &["yaml"], false),
        ("device", &["cpu"], &["gpu"], false),
        (
            "encoding",
            &["rope", "rope:base=500"],
            &["no-such-kind"],
            false,
        ),
        ("steps", &["1", "300"], &["-1", "x"], false),
    ];
    let mut seen = vec![0; SYNTAX.len()];
    for (path, cmd) in commands() {
        for (i, (long, good, bad, list)) in SYNTAX.iter().enumerate() {
            let Some(arg) = flag(&cmd, long) else {
                continue;
            };
            seen[i] += 1;
            let at = format!("posenc {} --{long}", path.join(" "));
            // The flag alone: a value clap refuses is a value error, which comes before
            // any complaint about the flags left out.
            let parse = |v: &str| {
                let flag = format!("--{long}={v}");
                match cmd.clone().try_get_matches_from(["posenc", flag.as_str()]) {
                    Ok(_) => Ok(()),
                    Err(e) if e.kind() == clap::error::ErrorKind::MissingRequiredArgument => Ok(()),
                    Err(e) => Err(e.to_string()),
                }
            };
            for v in *good {
                assert!(parse(v).is_ok(), "{at} {v}: {:?}", parse(v).err());
            }
            for v in *bad {
                assert!(parse(v).is_err(), "{at} {v} is taken");
            }
            assert_eq!(
                arg.get_value_delimiter() == Some(','),
                *list,
                "{at}: a comma list in one command and not in another"
            );
        }
    }
    for ((long, ..), n) in SYNTAX.iter().zip(seen) {
        assert!(n >= 2, "--{long} is in {n} command(s): nothing to compare");
    }
}

/// Where a command writes a run or an experiment, one rule names the directory: a
/// task's `train` writes `runs/<task>`, its `experiment` `runs/<task>-experiment`, each
/// shown in `--help` as its default.
#[test]
fn out_has_one_default_rule() {
    let all = commands();
    let mut tasks = 0;
    for (path, cmd) in &all {
        let [task, verb] = path.as_slice() else {
            continue;
        };
        // A task trains runs and experiments (`plot experiment` draws one, `bench train`
        // times one).
        let has = |v: &str| all.iter().any(|(p, _)| p == &[task.clone(), v.to_string()]);
        let is_task = has("train") && has("experiment");
        if !is_task {
            continue;
        }
        let want = match verb.as_str() {
            "train" => format!("runs/{task}"),
            "experiment" => format!("runs/{task}-experiment"),
            _ => continue,
        };
        let out = flag(cmd, "out").unwrap_or_else(|| panic!("posenc {task} {verb}: no --out"));
        let default: Vec<_> = out
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        assert_eq!(default, [want], "posenc {task} {verb} --out");
        tasks += 1;
    }
    assert_eq!(tasks, 8, "four tasks, each with train and experiment");
}

/// `--config` is wherever `--print-config` is, so a printed config can be given back.
#[test]
fn print_config_has_config_beside_it() {
    let mut printing = 0;
    for (path, cmd) in commands() {
        if flag(&cmd, "print-config").is_some() {
            printing += 1;
            assert!(
                flag(&cmd, "config").is_some(),
                "posenc {}: --print-config without --config",
                path.join(" ")
            );
        }
    }
    assert!(printing >= 3, "{printing}");
}

/// The default `--help` states for `--encoding` (`[default: the config's, else X]`).
fn help_default_encoding(task: &str) -> String {
    let o = posenc().args([task, "train", "--help"]).output().unwrap();
    let help = text(&o).0;
    let at = help.find("--encoding").expect("no --encoding in the help");
    let rest = &help[at..];
    let (_, tail) = rest
        .split_once("else ")
        .unwrap_or_else(|| panic!("{task} train --help: no default for --encoding: {rest}"));
    tail.split(']').next().unwrap().trim().to_string()
}

/// The config the command prints, then the one the same command trains with (in its
/// `trainer.json`): `--print-config` must print the second, every field resolved from
/// the data, and the help's default encoding must be its encoding.
fn printed_and_trained(task: &str, args: &[&str], out: &Path) -> (serde_json::Value, String) {
    let run = |extra: &[&str]| {
        let o = posenc()
            .args([task, "train", "--quiet", "--out", out.to_str().unwrap()])
            .args(args)
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{task}: {}", text(&o).1);
        text(&o).0
    };
    let printed: serde_json::Value = serde_json::from_str(&run(&["--print-config"])).unwrap();
    assert!(!out.exists(), "--print-config wrote {}", out.display());
    run(&[]);
    assert!(
        !out.join(".lock").exists(),
        "{task}: a finished run keeps its .lock"
    );
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("trainer.json")).unwrap()).unwrap();
    let trained = state["config"].clone();
    assert!(trained.is_object(), "{state}");
    assert_eq!(
        printed, trained,
        "{task}: --print-config is not what trains"
    );
    let kind = printed
        .pointer("/model/encoding/kind")
        .and_then(|k| k.as_str())
        .unwrap_or_else(|| panic!("{task}: no model.encoding.kind in {printed}"))
        .to_string();
    (printed, kind)
}

#[test]
fn print_config_prints_what_trains_and_help_says_its_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let book = dir.path().join("book.txt");
    std::fs::write(
        &book,
        "Once upon a time, a fox and a crow met by a tall tree. The crow held cheese.\n".repeat(40),
    )
    .unwrap();
    let (lm, kind) = printed_and_trained(
        "lm",
        &[
            "--text",
            book.to_str().unwrap(),
            "--steps",
            "1",
            "--d-model",
            "16",
            "--layers",
            "1",
            "--heads",
            "1",
            "--context",
            "8",
        ],
        &dir.path().join("lm"),
    );
    assert_eq!(help_default_encoding("lm"), kind, "lm train");
    let chars: std::collections::BTreeSet<char> =
        std::fs::read_to_string(&book).unwrap().chars().collect();
    assert!(
        lm["model"]["vocab_size"].as_u64().unwrap() >= chars.len() as u64,
        "the vocabulary printed is not the text's: {}",
        lm["model"]["vocab_size"]
    );

    let tiny = tiny_config(dir.path());
    let (kotoba, kind) = printed_and_trained(
        "kotoba",
        &["--config", tiny.to_str().unwrap(), "--steps", "1"],
        &dir.path().join("kotoba"),
    );
    assert_eq!(help_default_encoding("kotoba"), kind, "kotoba train");
    assert_ne!(kotoba["model"]["src_vocab_size"], 0);

    let (lengthgen, kind) = printed_and_trained(
        "lengthgen",
        &["--task", "copy", "--steps", "1", "--d-model", "16"],
        &dir.path().join("lengthgen"),
    );
    assert_eq!(help_default_encoding("lengthgen"), kind, "lengthgen train");
    // And what it printed is what --config takes back.
    let printed = dir.path().join("lengthgen.json");
    std::fs::write(&printed, lengthgen.to_string()).unwrap();
    let o = posenc()
        .args(["lengthgen", "train", "--print-config", "--config"])
        .arg(&printed)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let again: serde_json::Value = serde_json::from_str(&text(&o).0).unwrap();
    assert_eq!(again, lengthgen);

    let (vision, kind) = printed_and_trained(
        "vision",
        &["--steps", "1", "--batch-size", "2", "--grid", "4,4"],
        &dir.path().join("vision"),
    );
    assert_eq!(help_default_encoding("vision"), kind, "vision train");
    assert_eq!(vision["model"]["grid"], serde_json::json!([4, 4]));
}

/// `report` names the pages it wrote, and only those: run again on the same records it
/// writes and prints nothing.
#[test]
fn report_names_only_the_pages_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let study = dir.path().join("count");
    std::fs::create_dir(&study).unwrap();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/lengthgen/count");
    for file in ["results.json", "claims.json", "results.md"] {
        std::fs::copy(docs.join(file), study.join(file)).unwrap();
    }
    let page = study.join("results.md");
    std::fs::write(&page, "stale\n").unwrap();
    let report = || {
        let o = posenc().arg("report").arg(&study).output().unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        text(&o).0
    };
    assert_eq!(report().trim(), page.display().to_string());
    let written = std::fs::read_to_string(&page).unwrap();
    assert_ne!(written, "stale\n");
    assert_eq!(report(), "", "nothing changed, and something was named");
    assert_eq!(std::fs::read_to_string(&page).unwrap(), written);
}

/// Off a terminal (here a pipe), a long command still says how far it is and how long is
/// left, a plain line at a time; `--quiet` silences it.
#[test]
fn progress_is_printed_off_a_terminal() {
    let eval = |extra: &[&str]| {
        let o = posenc()
            .env("POSENC_PROGRESS_EVERY", "0")
            .args(["lm", "eval", "--lengths", "64,256", "--windows", "16"])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        text(&o).1
    };
    let stderr = eval(&[]);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(" tokens (")).collect();
    assert!(lines.len() >= 2, "{stderr}");
    for line in &lines {
        assert!(
            line.starts_with("length ") && line.ends_with(" left"),
            "{line}"
        );
        assert!(!line.contains('\r') && !line.contains('\u{1b}'), "{line:?}");
    }
    assert!(!eval(&["--quiet"]).contains(" tokens ("));
}

/// Before a long evaluation, the time it will take is said (here any: the threshold is 0).
#[test]
fn a_long_run_says_how_long_first() {
    let eval = |over: &str| {
        let o = posenc()
            .env("POSENC_ESTIMATE_OVER", over)
            .args(["lm", "eval", "--lengths", "64", "--windows", "4"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        text(&o).1
    };
    let said = eval("0");
    assert!(
        said.contains("this evaluation reads 256 tokens: roughly"),
        "{said}"
    );
    assert!(!eval("100000").contains("reads 256 tokens"));
}
