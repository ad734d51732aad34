//! `posenc completions` and `posenc man`: made from the same definition as the commands, so
//! they know every verb and flag; a closed pipe ends them quietly.

use std::io::Read;
use std::process::Stdio;

use crate::common::{posenc, text};

#[test]
fn completions_and_the_manual_know_every_command() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = posenc().args(["completions", shell]).output().unwrap();
        let (stdout, stderr) = text(&o);
        assert!(o.status.success(), "{shell}: {stderr}");
        for word in ["kotoba", "lengthgen", "report", "shard"] {
            assert!(stdout.contains(word), "{shell} completions lack {word}");
        }
    }
    // `--encoding` completes to the registered kinds, in every command that takes one.
    let list = posenc()
        .args(["encoding", "list", "--format", "json"])
        .output()
        .unwrap();
    let kinds: Vec<serde_json::Value> = serde_json::from_str(&text(&list).0).unwrap();
    let bash = text(&posenc().args(["completions", "bash"]).output().unwrap()).0;
    let offers: Vec<&str> = bash
        .split("--encoding)")
        .skip(1)
        .map(|case| {
            case.split("compgen -W \"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
        })
        .collect();
    assert!(offers.len() >= 5, "{offers:?}");
    for offered in offers {
        let words: Vec<&str> = offered.split_whitespace().collect();
        for kind in &kinds {
            assert!(words.contains(&kind["kind"].as_str().unwrap()), "{offered}");
        }
    }
    let o = posenc().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );

    let man = posenc().arg("man").output().unwrap();
    let (page, stderr) = text(&man);
    assert!(man.status.success(), "{stderr}");
    assert!(
        page.starts_with(".ie") && page.contains(".TH posenc 1"),
        "{page:.200}"
    );
    for word in ["kotoba", "lm", "lengthgen", "encoding"] {
        assert!(page.contains(word), "the manual lacks {word}");
    }
    // Every page a page refers to exists: `posenc man --out` writes them all, and `posenc
    // man lm train` prints one.
    let dir = tempfile::tempdir().unwrap();
    let o = posenc()
        .args(["man", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let pages: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        pages.contains(&"posenc-lm-train.1".to_string()),
        "{pages:?}"
    );
    for page in &pages {
        let roff = std::fs::read_to_string(dir.path().join(page)).unwrap();
        for (i, _) in roff.match_indices("(1)") {
            let name = roff[..i]
                .rsplit(|c: char| c.is_whitespace() || c == '[')
                .next()
                .unwrap();
            let file = format!("{}.1", name.replace("\\-", "-"));
            assert!(
                pages.contains(&file),
                "{page} names {name}(1), which is not written"
            );
        }
    }
    let o = posenc().args(["man", "lm", "train"]).output().unwrap();
    let roff = text(&o).0;
    assert_eq!(
        roff,
        std::fs::read_to_string(dir.path().join("posenc-lm-train.1")).unwrap()
    );
    let o = posenc().args(["man", "lm", "trian"]).output().unwrap();
    assert!(
        !o.status.success() && text(&o).1.contains("train, generate"),
        "{}",
        text(&o).1
    );

    // A reader that goes away after the first bytes: a quiet end, not a panic.
    let mut child = posenc()
        .args(["completions", "bash"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 8];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success() && stderr.is_empty(), "{status}: {stderr}");
}

/// The words of a shell line: split at spaces, quotes grouping (no escapes inside).
fn words(line: &str) -> Vec<String> {
    let (mut out, mut word, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => (quote, any) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (None, ' ') => {
                if any || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (None, '<') => break,
            _ => word.push(c),
        }
    }
    if any || !word.is_empty() {
        out.push(word);
    }
    out
}

/// Every command (each verb with no verbs under it) shows an example in its help, and
/// every example parses as the command line it shows: an example cannot outlive a renamed
/// flag.
#[test]
fn every_command_has_examples_and_each_parses() {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, path: &str, examples: &mut Vec<String>, bare: &mut Vec<String>) {
        let shown: Vec<String> = cmd
            .get_after_help()
            .map(|help| {
                help.to_string()
                    .lines()
                    .filter_map(|l| l.trim_start().strip_prefix("posenc ").map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let verbs: Vec<&clap::Command> = cmd
            .get_subcommands()
            .filter(|s| s.get_name() != "help")
            .collect();
        if verbs.is_empty() && shown.is_empty() {
            bare.push(path.to_string());
        }
        examples.extend(shown);
        for sub in verbs {
            walk(sub, &format!("{path} {}", sub.get_name()), examples, bare);
        }
    }
    let (mut examples, mut bare) = (Vec::new(), Vec::new());
    walk(
        &posenc_cli::Cli::command(),
        "posenc",
        &mut examples,
        &mut bare,
    );
    assert!(bare.is_empty(), "commands without an example: {bare:?}");
    assert!(examples.len() >= 20, "{examples:?}");
    for example in examples {
        let args = std::iter::once("posenc".to_string()).chain(words(&example));
        if let Err(e) = posenc_cli::Cli::parse_args(args) {
            panic!("`posenc {example}` does not parse: {e}");
        }
    }
}

/// Options that take a value and may be left out, yet have no default to show: each is
/// an input that is absent unless given (a file, a list to run instead of the lineup, a
/// shard), with the reason it has none.
const NO_DEFAULT: &[(&str, &str)] = &[
    (
        "--config",
        "a config file; without it, the defaults the other options show",
    ),
    (
        "--base",
        "a config file for every run; without it, the defaults shown",
    ),
    ("--from", "a run to start from; without it, fresh weights"),
    ("--text", "a text of one's own instead of the corpus"),
    ("--shard", "one share of a grid; without it, the whole grid"),
    ("--plot", "a figure to write; without it, none"),
    (
        "--glance",
        "a README to render the glance table into; without it, none",
    ),
    (
        "--tables",
        "pages to render the generated tables of; without it, none",
    ),
];

/// Every option that takes a value and may be left out shows what it is when left out:
/// clap's `[default: …]` for a fixed default, or the help's own `[default: …]` for one that
/// comes from a config or the model (`--steps`: "the config's, else 600"). Each command's
/// help is rendered, and the option's paragraph is read there.
#[test]
fn every_option_with_a_default_shows_it() {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        let mut cmd = cmd.clone();
        let help = cmd.render_long_help().to_string();
        for arg in cmd.get_arguments() {
            let takes_value = arg.get_action().takes_values();
            let long = match arg.get_long() {
                Some(l) if takes_value && !arg.is_required_set() && !arg.is_hide_set() => l,
                _ => continue,
            };
            if NO_DEFAULT
                .iter()
                .any(|(name, _)| *name == format!("--{long}"))
            {
                continue;
            }
            // The option's paragraph: from its `--long` line to the next option's.
            let start = help
                .find(&format!("--{long} <"))
                .or_else(|| help.find(&format!("--{long}=")))
                .or_else(|| help.find(&format!("--{long}")));
            let Some(start) = start else {
                missing.push(format!("{path} --{long}: not in the help"));
                continue;
            };
            let rest = &help[start..];
            // Options start their line with `  -x, --long` or `      --long`; the lines of
            // possible values sit deeper.
            let end = [rest[2..].find("\n  -"), rest[2..].find("\n      --")]
                .into_iter()
                .flatten()
                .min()
                .map_or(rest.len(), |i| i + 2);
            let paragraph = &rest[..end];
            if !paragraph.contains("[default") {
                missing.push(format!("{path} --{long}"));
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }
    let mut missing = Vec::new();
    walk(&posenc_cli::Cli::command(), "posenc", &mut missing);
    assert!(
        missing.is_empty(),
        "options that hide their default:\n{}",
        missing.join("\n")
    );
}
