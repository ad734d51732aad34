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

/// Every example in every command's help parses as the command line it shows: an example
/// cannot outlive a renamed flag.
#[test]
fn every_example_in_the_help_parses() {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, examples: &mut Vec<String>) {
        if let Some(help) = cmd.get_after_help() {
            examples.extend(
                help.to_string()
                    .lines()
                    .filter_map(|l| l.trim_start().strip_prefix("posenc ").map(str::to_string)),
            );
        }
        for sub in cmd.get_subcommands() {
            walk(sub, examples);
        }
    }
    let mut examples = Vec::new();
    walk(&posenc_cli::Cli::command(), &mut examples);
    assert!(examples.len() >= 20, "{examples:?}");
    for example in examples {
        let args = std::iter::once("posenc".to_string()).chain(words(&example));
        if let Err(e) = posenc_cli::Cli::parse_args(args) {
            panic!("`posenc {example}` does not parse: {e}");
        }
    }
}
