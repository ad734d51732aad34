//! `posenc report DIR…`: a study's `results.md` rendered from its records alone: the
//! experiment's tables from `results.json`, then its claims (`claims.json`) checked by one
//! rule ([`posenc_train::claims`]). `--check` writes nothing and fails where a committed
//! page has drifted from its records.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use posenc_lengthgen::experiment::LengthgenExperiment;
use posenc_train::claims::{self, Claims};
use posenc_train::pages::{self, claims_section};
use posenc_train::results::{load_results, RESULTS_JSON, RESULTS_MD};

/// The file of a study's claims, beside its `results.json`.
pub const CLAIMS_JSON: &str = "claims.json";

/// `posenc report`
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Study directories, each holding an experiment's results.json (and, if it makes
    /// claims, claims.json).
    #[arg(required_unless_present_any = ["glance", "tables"])]
    dirs: Vec<PathBuf>,
    /// Write nothing; fail, naming each results.md that is not what its records give.
    #[arg(long)]
    check: bool,
    /// Also render the results-at-a-glance table of this README (between its glance
    /// markers) from docs/glance.json beside it.
    #[arg(long, value_name = "README")]
    glance: Option<PathBuf>,
    /// Also render the generated tables, values and cited claims of these pages: each table
    /// between `<!-- table: SPEC -->` and `<!-- table end -->` (SPEC a JSON file relative to
    /// the page that names the rows, and for each column the studies, metric and records),
    /// each number in the prose between `<!-- value: NAME -->` and `<!-- /value -->` (NAME a
    /// spec in the file the page names by `<!-- values: FILE -->`), and each verdict between
    /// `<!-- claim: STUDY#N -->` and `<!-- /claim -->` (claim N of STUDY's claims.json,
    /// relative to the page, from 1).
    #[arg(long, value_name = "PAGE", num_args = 1..)]
    tables: Vec<PathBuf>,
}

impl ReportArgs {
    /// Runs the command.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        // Every page is rendered before any is written: a bad record writes nothing.
        let mut pages: Vec<(PathBuf, String)> = self
            .dirs
            .iter()
            .map(|dir| Ok((dir.join(RESULTS_MD), render(dir)?)))
            .collect::<Result<_>>()?;
        if let Some(readme) = &self.glance {
            pages.push((readme.clone(), glance(readme)?));
        }
        for page in &self.tables {
            pages.push((page.clone(), pages::tables(page)?));
        }
        // Only a page that changes is written, and named: a rerun prints nothing.
        let mut stale = Vec::new();
        for (path, page) in pages {
            if std::fs::read_to_string(&path).ok().as_deref() == Some(page.as_str()) {
                continue;
            }
            if self.check {
                stale.push(path.display().to_string());
            } else {
                posenc_io::write_atomic(&path, page.as_bytes())?;
                writeln!(out, "{}", path.display())?;
            }
        }
        ensure!(
            stale.is_empty(),
            "not what their records give (run `posenc report` on their directories): {}",
            stale.join(", ")
        );
        Ok(())
    }
}

/// The `results.md` of the experiment in `dir`: its tables, then its claims checked.
///
/// # Errors
/// A `results.json` that is no experiment's; a `claims.json` that does not parse or names
/// a label or metric the records lack.
pub fn render(dir: &Path) -> Result<String> {
    let path = dir.join(RESULTS_JSON);
    ensure!(path.is_file(), "{} holds no {RESULTS_JSON}", dir.display());
    let (mut page, _) = study(dir)?;
    let claims_path = dir.join(CLAIMS_JSON);
    if claims_path.exists() {
        let claims: Claims = load_results(&claims_path)?;
        if !claims.with.is_empty() {
            same_setting(dir, &claims.with)
                .with_context(|| format!("pooling the records of {}", claims_path.display()))?;
        }
        let records = pages::claim_records(dir, &claims)?;
        let section = claims_section(&claims, &records)
            .with_context(|| format!("checking {}", claims_path.display()))?;
        page = match claims.has_page_text() {
            true => templated(dir, &page, &section, &claims)?,
            false => format!("{}\n\n{section}", page.trim_end()),
        };
    }
    // The written parts may cite claims, this study's or another's, by number.
    Ok(pages::cited(&dir.join("results.md"), &page)?)
}

/// A study's page in the book's order: the question, the command, the setup and the
/// tables (`body`, what the experiment renders under its title), the figures beside the
/// records, the claims judged by the rule, the comparison with the paper, the cost and the
/// limits, each written part where `claims.json` has it.
fn templated(dir: &Path, body: &str, claims_section: &str, claims: &Claims) -> Result<String> {
    let (title, body) = match body.split_once('\n') {
        Some((title, rest)) if title.starts_with("# ") => (title, rest.trim()),
        _ => bail!("{}: the study's page has no title", dir.display()),
    };
    let part = |heading: &str, text: &Option<String>| match text {
        Some(text) => format!("## {heading}\n\n{}\n\n", text.trim()),
        None => String::new(),
    };
    let mut page = format!("{title}\n\n");
    page += &part("The question", &claims.question);
    page += &part(
        "The command",
        &claims
            .command
            .as_ref()
            .map(|c| format!("```sh\n{}\n```", c.trim())),
    );
    // The experiment's own sections sit one level down, under this one.
    let body: Vec<String> = body
        .lines()
        .map(|l| match l.starts_with("##") {
            true => format!("#{l}"),
            false => l.to_string(),
        })
        .collect();
    page += &format!("## Setup and results\n\n{}\n\n", body.join("\n"));
    let mut figures: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".png"))
        .collect();
    figures.sort();
    if !figures.is_empty() {
        page += "## Figures\n\n";
        for name in figures {
            page += &format!(
                "![{}]({name})\n\n",
                name.trim_end_matches(".png").replace('_', " ")
            );
        }
    }
    page += &format!("{}\n\n", claims_section.trim());
    page += &part("Against the paper", &claims.paper);
    page += &part("Cost", &claims.cost);
    page += &part("Limits", &claims.limits);
    Ok(format!("{}\n", page.trim_end()))
}

/// Whether the studies `with` (directories relative to `dir`) are of the setting of the
/// study in `dir`, so that their records may pool: lengthgen studies by
/// [`LengthgenExperiment::merge`], any other by their `config` alike but for the encodings
/// (the same model, data, windows and budget, other encodings or seeds).
///
/// # Errors
/// Studies of different settings, or results that do not read.
fn same_setting(dir: &Path, with: &[String]) -> Result<()> {
    let dirs: Vec<PathBuf> = std::iter::once(dir.to_path_buf())
        .chain(with.iter().map(|w| dir.join(w)))
        .collect();
    let lengthgen: Result<Vec<_>> = (dirs.iter())
        .map(|d| Ok(LengthgenExperiment::load(&d.join(RESULTS_JSON))?))
        .collect();
    if let Ok(parts) = lengthgen {
        LengthgenExperiment::merge(parts)?;
        return Ok(());
    }
    let setting = |d: &Path| -> Result<serde_json::Value> {
        let results: serde_json::Value = load_results(&d.join(RESULTS_JSON))?;
        let mut config = results["config"].clone();
        ensure!(config.is_object(), "{} has no `config`", d.display());
        config["encodings"] = serde_json::Value::Null;
        Ok(config)
    };
    let config = setting(dir)?;
    for d in &dirs[1..] {
        ensure!(
            setting(d)? == config,
            "{} and {} are not of the same setting (their configs differ beyond the \
             encodings), so their records do not pool",
            dir.display(),
            d.display()
        );
    }
    Ok(())
}

/// One row of the README's results at a glance: a claim of a study, with its setting and
/// the chapter that tells it.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct GlanceRow {
    /// The study's directory, relative to the repository.
    study: PathBuf,
    /// Which of its claims: its number in its claims table (from 1, in the order of its
    /// `claims.json`), as a page cites it.
    claim: usize,
    /// The setting, in a few words.
    setting: String,
    /// The chapter, relative to the repository.
    chapter: String,
}

/// `docs/glance.json`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Glance {
    rows: Vec<GlanceRow>,
}

/// Where the generated table begins and ends in the README.
const GLANCE_BEGIN: &str =
    "<!-- glance: generated by `posenc report --glance README.md`; edit docs/glance.json -->";
const GLANCE_END: &str = "<!-- glance end -->";

/// `readme` with the table between its glance markers rendered from `docs/glance.json`
/// (beside it): each row a study's claim, checked now by the rule, with its numbers.
///
/// # Errors
/// No markers; a glance file or a study that does not render; a claim index past the
/// study's claims.
pub fn glance(readme: &Path) -> Result<String> {
    let root = readme.parent().unwrap_or(Path::new("."));
    let text =
        std::fs::read_to_string(readme).with_context(|| format!("reading {}", readme.display()))?;
    let (Some(begin), Some(end)) = (text.find(GLANCE_BEGIN), text.find(GLANCE_END)) else {
        bail!(
            "{} has no glance markers ({GLANCE_BEGIN} … {GLANCE_END})",
            readme.display()
        );
    };
    ensure!(
        begin < end,
        "{}: the glance markers are out of order",
        readme.display()
    );
    let glance: Glance = load_results(&root.join("docs/glance.json"))?;
    let mut table =
        String::from("| finding | verdict | setting | seeds | where |\n|---|---|---|---:|---|\n");
    for row in &glance.rows {
        let dir = root.join(&row.study);
        let claims: Claims = load_results(&dir.join(CLAIMS_JSON))?;
        let claim = claims
            .claims
            .get(row.claim.wrapping_sub(1))
            .with_context(|| {
                format!(
                    "{} has {} claims, not a claim {} (numbered from 1)",
                    row.study.display(),
                    claims.claims.len(),
                    row.claim
                )
            })?;
        if !claims.with.is_empty() {
            same_setting(&dir, &claims.with)?;
        }
        let records = pages::claim_records(&dir, &claims)?;
        let v = claims::check(&records, claim)?;
        let verdict = format!(
            "{}: {} {:.2} ± {:.2} against {} {:.2} ± {:.2}",
            if v.held { "held" } else { "**not held**" },
            claim.name(&claim.better),
            claim.scale * v.better.mean,
            claim.scale * v.better.sd,
            claim.name(&claim.than),
            claim.scale * v.than.mean,
            claim.scale * v.than.sd
        );
        table += &format!(
            "| {} | {verdict} | {} | {} | [results]({}/results.md#claims), [chapter]({}) |\n",
            claim.claim,
            row.setting,
            v.seeds,
            row.study.display(),
            row.chapter
        );
    }
    Ok(format!(
        "{}{GLANCE_BEGIN}\n\n{table}\n{}",
        &text[..begin],
        &text[end..]
    ))
}

/// The page and the tidy records of the experiment in `dir`, its results read once.
fn study(dir: &Path) -> Result<(String, serde_json::Value)> {
    let path = dir.join(RESULTS_JSON);
    // The records as written, every field kept (a newer field an older record type does
    // not read, such as a run's peak memory), as pandas would load them.
    let raw: serde_json::Value = load_results(&path)?;
    let (page, typed) = typed_study(&path, &raw)?;
    let records = match raw.get("records") {
        Some(r) if r.is_array() => r.clone(),
        _ => typed,
    };
    Ok((page, records))
}

/// The records of the studies that carry no kind, read by the first reader that takes
/// them: RULER's rows and a streaming study.
const KINDLESS: [crate::StudyReader; 2] = [
    |path| {
        let rows = posenc_lm::ruler::load_rows(path)?;
        let page = format!(
            "# RULER\n\nThe share of the expected answers given (`posenc lm ruler`), by task and \
             prompt length.\n\n{}",
            posenc_lm::ruler::markdown(&rows)
        );
        Ok((page, serde_json::to_value(&rows)?))
    },
    |path| {
        let study = posenc_lm::streaming::StreamingStudy::load(path)?;
        Ok((study.markdown(), serde_json::Value::Array(Vec::new())))
    },
];

/// The page and the records of the results at `path` (`raw` as read), by their kind.
fn typed_study(path: &Path, raw: &serde_json::Value) -> Result<(String, serde_json::Value)> {
    if let Some(kind) = raw.get("kind").and_then(|k| k.as_str()) {
        let (_, read) = crate::STUDIES
            .iter()
            .find(|(k, _)| *k == kind)
            .with_context(|| {
                format!(
                    "{} holds results of `{kind}`, which posenc does not know",
                    path.display()
                )
            })?;
        return read(path);
    }
    // Results written before they carried their kind, and the records that carry none: by
    // the first reader that takes them.
    let readers = crate::STUDIES.iter().map(|(_, read)| read).chain(&KINDLESS);
    match readers.into_iter().find_map(|read| read(path).ok()) {
        Some(study) => Ok(study),
        None => bail!(
            "{} is not the results of an experiment (posenc kotoba, lm or lengthgen experiment), \
             RULER's records (posenc lm ruler) or a streaming study's (scripts/streaming_study.sh)",
            path.display()
        ),
    }
}
