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
    /// Also render the generated tables of these pages (each between `<!-- table: SPEC -->`
    /// and `<!-- table end -->`, SPEC a JSON file relative to the page that names the rows,
    /// and for each column the studies, metric and records).
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
            pages.push((page.clone(), tables(page)?));
        }
        let mut stale = Vec::new();
        for (path, page) in pages {
            if self.check {
                if std::fs::read_to_string(&path).ok().as_deref() != Some(page.as_str()) {
                    stale.push(path.display().to_string());
                }
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
    let (mut page, records) = study(dir)?;
    let claims_path = dir.join(CLAIMS_JSON);
    if claims_path.exists() {
        let claims: Claims = load_results(&claims_path)?;
        let records = match claims.with.is_empty() {
            true => records.as_array().cloned().unwrap_or_default(),
            false => pooled(dir, &claims.with)
                .with_context(|| format!("pooling the records of {}", claims_path.display()))?,
        };
        let verdicts = claims
            .claims
            .iter()
            .map(|c| claims::check(&records, c))
            .collect::<posenc_train::Result<Vec<_>>>()
            .with_context(|| format!("checking {}", claims_path.display()))?;
        let section = claims::markdown(&verdicts, &claims.with);
        page = format!("{}\n\n{section}", page.trim_end());
    }
    Ok(page)
}

/// The records of the lengthgen study in `dir` pooled with those of the studies `with`
/// (directories relative to it), which must be of the same setting
/// ([`LengthgenExperiment::merge`]).
fn pooled(dir: &Path, with: &[String]) -> Result<Vec<serde_json::Value>> {
    let load = |d: &Path| {
        LengthgenExperiment::load(&d.join(RESULTS_JSON))
            .with_context(|| format!("only lengthgen studies pool their records: {}", d.display()))
    };
    let mut parts = vec![load(dir)?];
    for w in with {
        parts.push(load(&dir.join(w))?);
    }
    let merged = LengthgenExperiment::merge(parts)?;
    Ok(serde_json::to_value(&merged.records)?
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// One row of the README's results at a glance: a claim of a study, with its setting and
/// the chapter that tells it.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct GlanceRow {
    /// The study's directory, relative to the repository.
    study: PathBuf,
    /// Which of its claims (from 0, in its `claims.json`).
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
            .get(row.claim)
            .with_context(|| format!("{} has no claim {}", row.study.display(), row.claim))?;
        let records = match claims.with.is_empty() {
            true => {
                let (_, records) = study(&dir)?;
                records.as_array().cloned().unwrap_or_default()
            }
            false => pooled(&dir, &claims.with)?,
        };
        let v = claims::check(&records, claim)?;
        let verdict = format!(
            "{}: {} {:.2} ± {:.2} against {} {:.2} ± {:.2}",
            if v.held { "held" } else { "**not held**" },
            claim.better,
            claim.scale * v.better.mean,
            claim.scale * v.better.sd,
            claim.than,
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

/// Where a generated table begins (followed by its spec's path and ` -->`) and ends.
const TABLE_BEGIN: &str = "<!-- table: ";
const TABLE_END: &str = "<!-- table end -->";

/// A generated table: a row per entry, a column per (studies, metric, records), each cell
/// the entry's mean ± standard deviation over seeds, each seed's value the mean over its
/// records that match ([`claims::Entry`]).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TableSpec {
    /// The first column's heading (default `encoding`).
    #[serde(default = "TableSpec::default_heading")]
    heading: String,
    /// The entries, in order: values of the records' `by` field.
    rows: Vec<String>,
    /// The field that names entries (default `label`).
    #[serde(default = "TableSpec::default_by")]
    by: String,
    /// Digits after the point.
    #[serde(default)]
    digits: usize,
    /// The columns.
    columns: Vec<TableColumn>,
}

impl TableSpec {
    fn default_heading() -> String {
        "encoding".into()
    }
    fn default_by() -> String {
        "label".into()
    }
}

/// A column of a [`TableSpec`].
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TableColumn {
    /// Its heading.
    title: String,
    /// The studies whose records it reads, directories relative to the spec.
    studies: Vec<PathBuf>,
    /// The field read (`accuracy`, `perplexity`, …).
    metric: String,
    /// Only the records whose fields equal these (a list: any of its values).
    #[serde(default, rename = "where")]
    filter: serde_json::Map<String, serde_json::Value>,
    /// What the values are multiplied by when printed (100 for percent).
    #[serde(default = "TableColumn::one")]
    scale: f64,
    /// Digits after the point, where they differ from the table's.
    #[serde(default)]
    digits: Option<usize>,
    /// Which mean to set in bold: `lowest` (a loss) or `highest` (an accuracy); none if
    /// absent.
    #[serde(default)]
    best: Option<Best>,
    /// Written after each cell (`%`).
    #[serde(default)]
    unit: String,
    /// Print how many seeds the entry has, instead of the mean ± sd.
    #[serde(default)]
    seeds: bool,
}

/// The best value of a column, to set in bold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum Best {
    Lowest,
    Highest,
}

impl TableColumn {
    fn one() -> f64 {
        1.0
    }
}

/// `page` with every generated table rendered from its spec and the records now. A row
/// with no record in a column leaves its cell empty.
///
/// # Errors
/// Markers that do not pair; a spec that does not parse; a study that does not render; a
/// record that matches and is bad; a row with no record in any column.
pub fn tables(page: &Path) -> Result<String> {
    let text =
        std::fs::read_to_string(page).with_context(|| format!("reading {}", page.display()))?;
    let base = page.parent().unwrap_or(Path::new("."));
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(begin) = rest.find(TABLE_BEGIN) {
        let after = &rest[begin + TABLE_BEGIN.len()..];
        let spec_end = after
            .find(" -->")
            .with_context(|| format!("{}: a table marker without ` -->`", page.display()))?;
        let spec_path = base.join(after[..spec_end].trim());
        let end = after.find(TABLE_END).with_context(|| {
            format!(
                "{}: the table of {} has no end marker ({TABLE_END})",
                page.display(),
                spec_path.display()
            )
        })?;
        let table = render_table(&spec_path)
            .with_context(|| format!("{}: rendering {}", page.display(), spec_path.display()))?;
        let header = &rest[..begin + TABLE_BEGIN.len() + spec_end + " -->".len()];
        out += &format!("{header}\n\n{table}\n");
        rest = &after[end..];
    }
    out += rest;
    Ok(out)
}

/// The Markdown table of the spec at `path`.
fn render_table(path: &Path) -> Result<String> {
    let spec: TableSpec = load_results(path)?;
    let base = path.parent().unwrap_or(Path::new("."));
    // Each study read once, however many columns read it.
    let mut read: std::collections::HashMap<PathBuf, Vec<serde_json::Value>> =
        std::collections::HashMap::new();
    let mut records = Vec::new();
    for column in &spec.columns {
        let mut all = Vec::new();
        for dir in &column.studies {
            let dir = base.join(dir);
            if !read.contains_key(&dir) {
                let (_, r) = study(&dir)?;
                read.insert(dir.clone(), r.as_array().cloned().unwrap_or_default());
            }
            all.extend(read[&dir].iter().cloned());
        }
        records.push(all);
    }
    let mut table = format!("| {} |", spec.heading);
    for c in &spec.columns {
        table += &format!(" {} |", c.title);
    }
    table += &format!("\n|---|{}\n", "---:|".repeat(spec.columns.len()));
    // Every cell's mean and sd, by row then column.
    let mut sides = Vec::new();
    for row in &spec.rows {
        let mut cells = Vec::new();
        for (column, records) in spec.columns.iter().zip(&records) {
            let entry = claims::Entry {
                by: &spec.by,
                label: row,
                metric: &column.metric,
                filter: &column.filter,
            };
            cells.push(match entry.side(records) {
                Ok(side) => Some((
                    column.scale * side.mean,
                    column.scale * side.sd,
                    side.by_seed.len(),
                )),
                Err(claims::Missing::NoRecord) => None,
                Err(claims::Missing::Bad(e)) => return Err(e.into()),
            });
        }
        ensure!(
            cells.iter().any(Option::is_some),
            "`{row}` has no record in any column"
        );
        sides.push(cells);
    }
    for (row, cells) in spec.rows.iter().zip(&sides) {
        table += &format!("| {row} |");
        for (c, (column, cell)) in spec.columns.iter().zip(cells).enumerate() {
            let Some((mean, sd, seeds)) = *cell else {
                table += "  |";
                continue;
            };
            if column.seeds {
                table += &format!(" {seeds} |");
                continue;
            }
            let d = column.digits.unwrap_or(spec.digits);
            let text = format!("{mean:.d$} ± {sd:.d$}{}", column.unit);
            // Bold where no row's mean, as printed, is better and some row's is worse.
            let printed = |m: f64| format!("{m:.d$}").parse::<f64>().unwrap_or(m);
            let others: Vec<f64> = sides
                .iter()
                .filter_map(|r| r[c])
                .map(|(m, _, _)| printed(m))
                .collect();
            let best = column.best.is_some_and(|best| {
                let at_least = |m: f64| match best {
                    Best::Lowest => m >= printed(mean),
                    Best::Highest => m <= printed(mean),
                };
                others.iter().all(|&m| at_least(m)) && others.iter().any(|&m| m != printed(mean))
            });
            table += &match best {
                true => format!(" **{text}** |"),
                false => format!(" {text} |"),
            };
        }
        table += "\n";
    }
    Ok(table)
}

/// The page and the tidy records of the experiment in `dir`, its results read once.
fn study(dir: &Path) -> Result<(String, serde_json::Value)> {
    let (page, typed) = typed_study(dir)?;
    // The records as written, every field kept (a newer field an older record type does
    // not read, such as a run's peak memory), as pandas would load them.
    let raw: serde_json::Value = load_results(&dir.join(RESULTS_JSON))?;
    let records = match raw.get("records") {
        Some(r) if r.is_array() => r.clone(),
        _ => typed,
    };
    Ok((page, records))
}

/// The page and the records of the experiment in `dir`, read by the experiment's type.
fn typed_study(dir: &Path) -> Result<(String, serde_json::Value)> {
    let path = dir.join(RESULTS_JSON);
    Ok(if let Ok(e) = LengthgenExperiment::load(&path) {
        (e.markdown(), serde_json::to_value(&e.records)?)
    } else if let Ok(e) = posenc_lm::lm_experiment::LmExperiment::load(&path) {
        (e.markdown(), serde_json::to_value(&e.records)?)
    } else if let Ok(e) = posenc_kotoba::experiment::Experiment::load(&path) {
        (e.markdown(), serde_json::to_value(&e.records)?)
    } else if let Ok(rows) = posenc_lm::ruler::load_rows(&path) {
        let page = format!(
            "# RULER\n\nThe share of the expected answers given (`posenc lm ruler`), by task and \
             prompt length.\n\n{}",
            posenc_lm::ruler::markdown(&rows)
        );
        (page, serde_json::to_value(&rows)?)
    } else if let Ok(study) = posenc_lm::streaming::StreamingStudy::load(&path) {
        (study.markdown(), serde_json::Value::Array(Vec::new()))
    } else {
        bail!(
            "{} is not the results of an experiment (posenc kotoba, lm or lengthgen experiment), \
             RULER's records (posenc lm ruler) or a streaming study's (scripts/streaming_study.sh)",
            path.display()
        );
    })
}
