//! A page's generated parts, rendered from tidy records ([`crate::records`]) by the markers
//! in it, for `posenc report`: each table between `<!-- table: SPEC -->` and
//! `<!-- table end -->` (SPEC a JSON file, relative to the page, naming the rows, and for
//! each column the studies, metric and records), each list of claims between
//! `<!-- claims: FILE -->` and `<!-- claims end -->` (checked by [`crate::claims`]), and each
//! number in the prose between `<!-- value: NAME -->` and `<!-- /value -->` (NAME a spec in
//! the file the page names by `<!-- values: FILE -->`), and each verdict of a claim the
//! prose cites between `<!-- claim: STUDY#N -->` and `<!-- /claim -->`.

use std::path::{Path, PathBuf};

use posenc_error::{bail, ensure, Context};

use crate::claims::{self, Claims};
use crate::error::Result;
use crate::results::{load_results, mean_sd};

/// Where `marker` first stands in `text` as a marker: not quoted in inline code, where a
/// page tells of the markers themselves.
fn find_marker(text: &str, marker: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find(marker) {
        let at = from + at;
        if !text[..at].ends_with('`') {
            return Some(at);
        }
        from = at + marker.len();
    }
    None
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
    /// The entries, in order: values of the records' `by` field, or rows that name their
    /// records by a filter.
    rows: Vec<Row>,
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

/// A row of a [`TableSpec`].
#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
enum Row {
    /// The records whose `by` field is this.
    Label(String),
    /// The records that match `where` (with each column's own filter), titled `title`.
    Filtered {
        /// What the row is called.
        title: String,
        /// Its records: those that match every field (as a column's `where`; at least one
        /// field a plain value).
        #[serde(rename = "where")]
        filter: serde_json::Map<String, serde_json::Value>,
    },
}

impl Row {
    /// What the row is called.
    fn title(&self) -> &str {
        match self {
            Row::Label(label) | Row::Filtered { title: label, .. } => label,
        }
    }

    /// The `by` field, the entry and the filter of this row's records in `column`.
    fn entry(
        &self,
        by: &str,
        column: &TableColumn,
    ) -> Result<(String, String, serde_json::Map<String, serde_json::Value>)> {
        Ok(match self {
            Row::Label(label) => (by.to_string(), label.clone(), column.read.filter.clone()),
            Row::Filtered { title, filter } => {
                let mut filter = filter.clone();
                // One plain field names the entry; the others narrow it.
                let (field, value) = filter
                    .iter()
                    .find(|(_, v)| !v.is_array() && !v.is_object())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .with_context(|| {
                        format!("row `{title}`: its `where` has no field of one plain value")
                    })?;
                filter.remove(&field);
                let label = match value {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                };
                filter.extend(column.read.filter.clone());
                (field, label, filter)
            }
        })
    }
}

/// What a table's column and a value in the prose read: which records, which field, over
/// what, and what is shown of it.
#[derive(Debug, serde::Deserialize)]
struct Reading {
    /// The studies whose records it reads, relative to the spec: directories (their
    /// `results.json`), JSON files of that form, or tidy CSV files.
    studies: Vec<PathBuf>,
    /// The field read (`accuracy`, `perplexity`, …).
    metric: String,
    /// Only the records that match these ([`claims::matches`]: a value, any of a list, or
    /// a range `{"from": A, "to": B}`).
    #[serde(default, rename = "where")]
    filter: serde_json::Map<String, serde_json::Value>,
    /// What the values are multiplied by when printed (100 for percent).
    #[serde(default = "Reading::one")]
    scale: f64,
    /// What is shown (default `mean_sd`).
    #[serde(default)]
    show: Show,
    /// The field whose values are the replicates (default `seed`); in a value, `record`
    /// makes every matching record a replicate of its own.
    #[serde(default = "Reading::seed")]
    over: String,
    /// The list read from each study's `results.json`: `records` (the default), another
    /// list of tidy records beside them (an experiment's `runs`: each run's training time
    /// and validation reading), or `*.NAME`: the records in the list `NAME` of each item of
    /// a file that is a list of items, each with its item's scalar fields.
    #[serde(default = "Reading::records")]
    list: String,
}

impl Reading {
    fn one() -> f64 {
        1.0
    }
    fn seed() -> String {
        "seed".into()
    }
    fn records() -> String {
        "records".into()
    }
}

/// Fails, naming them, where a spec has fields nobody reads (a misspelt one would
/// otherwise be dropped without a word: serde refuses unknown fields only in a struct
/// without a flattened part).
fn no_unknown(what: &str, unknown: &serde_json::Map<String, serde_json::Value>) -> Result<()> {
    ensure!(
        unknown.is_empty(),
        "{what} has fields it does not know: {}",
        unknown.keys().cloned().collect::<Vec<_>>().join(", ")
    );
    Ok(())
}

/// A column of a [`TableSpec`].
#[derive(Debug, serde::Deserialize)]
struct TableColumn {
    /// Its heading.
    title: String,
    /// Its records and field; a cell shows `mean_sd`, `mean`, `sd` or `count` (how many
    /// seeds).
    #[serde(flatten)]
    read: Reading,
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
    /// Print e to the mean (a perplexity from a mean loss); only with `show: mean`.
    #[serde(default)]
    exp: bool,
    /// Anything else: refused.
    #[serde(flatten)]
    unknown: serde_json::Map<String, serde_json::Value>,
}

/// The best value of a column, to set in bold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum Best {
    Lowest,
    Highest,
}

/// `page` with every generated table and value rendered from its spec and the records now.
/// A row with no record in a column leaves its cell empty.
///
/// # Errors
/// Markers that do not pair; a spec that does not parse; a study that does not render; a
/// record that matches and is bad; a row with no record in any column; a value with no
/// record.
pub fn tables(page: &Path) -> Result<String> {
    let text =
        std::fs::read_to_string(page).with_context(|| format!("reading {}", page.display()))?;
    let text = tables_in(page, &text)?;
    let text = values(page, &text)?;
    cited(page, &text)
}

/// `text` (the page at `page`) with its generated tables and claims rendered.
fn tables_in(page: &Path, text: &str) -> Result<String> {
    let text = blocks(page, text, TABLE_BEGIN, TABLE_END, "table", render_table)?;
    blocks(
        page,
        &text,
        CLAIMS_BEGIN,
        CLAIMS_END,
        "claims",
        render_claims,
    )
}

/// Where a generated list of claims begins (followed by its claims file's path and ` -->`)
/// and ends.
const CLAIMS_BEGIN: &str = "<!-- claims: ";
const CLAIMS_END: &str = "<!-- claims end -->";

/// `text` with every block between `begin` (followed by a spec's path, relative to the
/// page, and ` -->`) and `end` rendered by `render` from that spec.
fn blocks(
    page: &Path,
    text: &str,
    begin_marker: &str,
    end_marker: &str,
    what: &str,
    render: impl Fn(&Path) -> Result<String>,
) -> Result<String> {
    let base = page.parent().unwrap_or(Path::new("."));
    let mut out = String::new();
    let mut rest = text;
    while let Some(begin) = find_marker(rest, begin_marker) {
        let after = &rest[begin + begin_marker.len()..];
        let spec_end = after
            .find(" -->")
            .with_context(|| format!("{}: a {what} marker without ` -->`", page.display()))?;
        let spec_path = base.join(after[..spec_end].trim());
        let end = after.find(end_marker).with_context(|| {
            format!(
                "{}: the {what} of {} has no end marker ({end_marker})",
                page.display(),
                spec_path.display()
            )
        })?;
        let block = render(&spec_path)
            .with_context(|| format!("{}: rendering {}", page.display(), spec_path.display()))?;
        let header = &rest[..begin + begin_marker.len() + spec_end + " -->".len()];
        // A block inside a list item is indented as its marker is.
        let line_start = rest[..begin].rfind('\n').map_or(0, |i| i + 1);
        let indent = &rest[line_start..begin];
        let indent = match indent.chars().all(|c| c == ' ') {
            true => indent,
            false => "",
        };
        let block: String = block
            .lines()
            .map(|l| match l.is_empty() {
                true => "\n".to_string(),
                false => format!("{indent}{l}\n"),
            })
            .collect();
        out += &format!("{header}\n\n{block}\n{indent}");
        rest = &after[end..];
    }
    out += rest;
    Ok(out)
}

/// The claims of the claims file at `path` (a [`Claims`]) checked against the records of the
/// study in its directory (and the studies it is `with`), as a Markdown section.
fn render_claims(path: &Path) -> Result<String> {
    let claims: Claims = load_results(path)?;
    let base = path.parent().unwrap_or(Path::new("."));
    let records = Records::default().of_claims(base, &claims)?;
    claims_section(&claims, &records)
}

/// `claims` checked by the rule against `records`, as a Markdown section.
pub fn claims_section(claims: &Claims, records: &[serde_json::Value]) -> Result<String> {
    let verdicts = claims
        .claims
        .iter()
        .map(|c| claims::check(records, c))
        .collect::<Result<Vec<_>>>()?;
    Ok(claims::markdown(&verdicts, &claims.with))
}

/// Where a page names the file of its generated values (followed by the file's path,
/// relative to the page, and ` -->`).
const VALUES_FILE: &str = "<!-- values: ";
/// Where a generated value begins (followed by its name and ` -->`) and ends.
const VALUE_BEGIN: &str = "<!-- value: ";
const VALUE_END: &str = "<!-- /value -->";

/// A number in a page's prose, read from the records: an entry's mean ± sd over seeds (each
/// seed's value the mean over its matching records, as in a table's cell), or its mean, its
/// sd, its seeds' range or how many seeds it has.
#[derive(Debug, serde::Deserialize)]
struct ValueSpec {
    /// The field that names entries (default `label`).
    #[serde(default = "TableSpec::default_by")]
    by: String,
    /// The entry: a value of the records' `by` field; left out, every record (with
    /// `over: record`, or a tally).
    #[serde(default)]
    row: Option<String>,
    /// Its records, field and what is shown.
    #[serde(flatten)]
    read: Reading,
    /// Digits after the point.
    #[serde(default)]
    digits: usize,
    /// A sign before each number, `+` as well as `−` (a change).
    #[serde(default)]
    signed: bool,
    /// Another entry taken away: the value is the difference, seed by seed (`mean`: the
    /// mean of the differences, `range` and `seeds`: the seeds' differences).
    #[serde(default)]
    minus: Option<Other>,
    /// Another entry divided by, as `minus` takes one away: the value is the ratio, seed by
    /// seed.
    #[serde(default)]
    divided_by: Option<Other>,
    /// Anything else: refused.
    #[serde(flatten)]
    unknown: serde_json::Map<String, serde_json::Value>,
}

impl ValueSpec {
    /// Its entry, as an error names it.
    fn named(&self) -> &str {
        self.row.as_deref().unwrap_or("any entry")
    }
}

/// The entry a [`ValueSpec`] takes away or divides by: each field left out is the value's
/// own.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Other {
    /// Its entry.
    row: Option<String>,
    /// Its studies.
    studies: Option<Vec<PathBuf>>,
    /// Its field.
    metric: Option<String>,
    /// Its filter, in place of the value's.
    #[serde(rename = "where")]
    filter: Option<serde_json::Map<String, serde_json::Value>>,
}

/// What a [`ValueSpec`] prints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum Show {
    /// `mean ± sd`.
    #[default]
    MeanSd,
    /// The mean over seeds.
    Mean,
    /// The standard deviation over seeds.
    Sd,
    /// The lowest and highest seed, `low–high` (one number where the two print alike).
    Range,
    /// The lowest seed.
    Min,
    /// The highest seed.
    Max,
    /// Each seed's value, in the order of the seeds, `a, b and c`.
    Seeds,
    /// How many seeds there are.
    Count,
    /// The metric of the one record that matches (no replicates: a record of a study
    /// script, say), refused where more or none match.
    Value,
    /// `k/n`: of the `n` records that match, the `k` whose metric is true (a passkey found,
    /// say), refused where none match or a metric is not true or false.
    Tally,
}

/// `text` (the page at `page`) with every value between `<!-- value: NAME -->` and
/// `<!-- /value -->` rendered from the spec of that name in the page's values file (named
/// by a `<!-- values: FILE -->` line).
///
/// # Errors
/// Values without a values file; a file that does not parse; a name it lacks; markers that
/// do not pair; a value whose records are missing or bad.
fn values(page: &Path, text: &str) -> Result<String> {
    if find_marker(text, VALUE_BEGIN).is_none() {
        return Ok(text.to_string());
    }
    let base = page.parent().unwrap_or(Path::new("."));
    let file = find_marker(text, VALUES_FILE)
        .and_then(|at| {
            let after = &text[at + VALUES_FILE.len()..];
            Some(after[..after.find(" -->")?].trim())
        })
        .with_context(|| {
            format!(
                "{} has values but names no values file ({VALUES_FILE}FILE -->)",
                page.display()
            )
        })?;
    let file = base.join(file);
    let specs: std::collections::BTreeMap<String, ValueSpec> = load_results(&file)?;
    let spec_base = file.parent().unwrap_or(Path::new("."));
    let mut read = Records::default();
    inline(page, text, VALUE_BEGIN, VALUE_END, "value", |name| {
        let spec = specs.get(name).with_context(|| {
            format!(
                "{}: {} has no value `{name}`",
                page.display(),
                file.display()
            )
        })?;
        no_unknown(&format!("the value `{name}`"), &spec.unknown)?;
        let value = render_value(spec, spec_base, &mut read).with_context(|| {
            format!(
                "{}: rendering the value `{name}` of {}",
                page.display(),
                file.display()
            )
        })?;
        Ok(value)
    })
}

/// Where a claim cited in the prose begins (followed by `STUDY#N`: the study's directory,
/// relative to the page, or a claims file in it (`toy-claims.json`), and the claim's number
/// in its `claims.json`, from 1, as its claims table numbers it; then ` -->`) and ends.
const CLAIM_BEGIN: &str = "<!-- claim: ";
const CLAIM_END: &str = "<!-- /claim -->";

/// `text` (the page at `page`) with every claim cited between `<!-- claim: STUDY#N -->`
/// and `<!-- /claim -->` rendered as its verdict now ([`claims::Verdict::brief`]), checked
/// against the study's records (and those it is `with`), linked to its claims table.
///
/// # Errors
/// Markers that do not pair; a citation without `#N`; a study without claims; a number
/// past its claims; records that are missing or bad.
pub fn cited(page: &Path, text: &str) -> Result<String> {
    let base = page.parent().unwrap_or(Path::new("."));
    let mut read = Records::default();
    let mut files: std::collections::HashMap<PathBuf, Claims> = Default::default();
    inline(page, text, CLAIM_BEGIN, CLAIM_END, "claim", |name| {
        let (study, number) = name
            .rsplit_once('#')
            .and_then(|(study, n)| Some((study, n.parse::<usize>().ok()?)))
            .with_context(|| {
                format!(
                    "{}: the claim `{name}` is not STUDY#N (a study's directory and the \
                     claim's number in it, from 1)",
                    page.display()
                )
            })?;
        // A study's directory holds its `claims.json` and its page `results.md`; a claims
        // file named whole (`toy-claims.json`) has its page beside it (`toy-claims.md`).
        let (file, link) = match study.ends_with(".json") {
            true => (
                base.join(study),
                format!("{}.md", study.trim_end_matches(".json")),
            ),
            false => (
                base.join(study).join("claims.json"),
                format!("{study}/results.md"),
            ),
        };
        let dir = file.parent().unwrap_or(Path::new(".")).to_path_buf();
        if !files.contains_key(&file) {
            files.insert(file.clone(), load_results(&file)?);
        }
        let claims = &files[&file];
        let claim = number
            .checked_sub(1)
            .and_then(|i| claims.claims.get(i))
            .with_context(|| {
                format!(
                    "{}: the claim `{name}`: {study} has {} claims, not a claim {number} \
                     (numbered from 1)",
                    page.display(),
                    claims.claims.len()
                )
            })?;
        let records = read.of_claims(&dir, claims)?;
        let verdict = claims::check(&records, claim)
            .with_context(|| format!("{}: checking the claim `{name}`", page.display()))?;
        Ok(format!(
            "[claim {number}]({link}#claims): {}",
            verdict.brief()
        ))
    })
}

/// `text` with what stands between each `begin` (followed by a name and ` -->`) and its
/// `end` replaced by `render(name)`, the markers kept.
fn inline(
    page: &Path,
    text: &str,
    begin_marker: &str,
    end_marker: &str,
    what: &str,
    mut render: impl FnMut(&str) -> Result<String>,
) -> Result<String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(begin) = find_marker(rest, begin_marker) {
        let after = &rest[begin + begin_marker.len()..];
        let name_end = after
            .find(" -->")
            .with_context(|| format!("{}: a {what} marker without ` -->`", page.display()))?;
        let name = after[..name_end].trim();
        let body = &after[name_end + " -->".len()..];
        let end = body.find(end_marker).with_context(|| {
            format!(
                "{}: the {what} `{name}` has no end marker ({end_marker})",
                page.display()
            )
        })?;
        ensure!(
            find_marker(&body[..end], begin_marker).is_none(),
            "{}: the {what} `{name}` has no end marker before the next {what}",
            page.display()
        );
        out += &rest[..begin + begin_marker.len() + name_end + " -->".len()];
        out += &render(name)?;
        out += end_marker;
        rest = &body[end + end_marker.len()..];
    }
    out += rest;
    Ok(out)
}

/// The records of studies, each list read once.
#[derive(Default)]
struct Records(std::collections::HashMap<(PathBuf, String), Vec<serde_json::Value>>);

impl Records {
    /// The records of the studies `dirs` (relative to `base`) in their list `list`, joined
    /// ([`crate::records::read`]: a `results.json` read raw, every field kept, or a
    /// CSV).
    fn of(&mut self, base: &Path, dirs: &[PathBuf], list: &str) -> Result<Vec<serde_json::Value>> {
        let mut all = Vec::new();
        for dir in dirs {
            let key = (base.join(dir), list.to_string());
            if !self.0.contains_key(&key) {
                let records = crate::records::read(&key.0, list)?;
                let records = records.into_iter().map(serde_json::Value::Object).collect();
                self.0.insert(key.clone(), records);
            }
            all.extend(self.0[&key].iter().cloned());
        }
        Ok(all)
    }
}

impl Records {
    /// The records `claims` are checked against: the study's in `dir` and those of the
    /// studies it is `with`, each record in its batch ([`claims::in_batches`]: the study's
    /// own as its `batches` name them, else by the study's directory's name; another
    /// study's by its directory's name).
    fn of_claims(&mut self, dir: &Path, claims: &Claims) -> Result<Vec<serde_json::Value>> {
        // A study's batch is named by its directory (`sort`, `after-alibi`).
        let name = |d: &Path| {
            let d = d.canonicalize().unwrap_or_else(|_| d.to_path_buf());
            d.file_name()
                .map_or_else(|| d.display().to_string(), |n| n.to_string_lossy().into())
        };
        let mut all = self.of(dir, &[PathBuf::from(".")], "records")?;
        all = claims::in_batches(all, &claims.batches, &name(dir));
        for w in &claims.with {
            let records = self.of(dir, &[PathBuf::from(w)], "records")?;
            all.extend(claims::in_batches(records, &[], &name(&dir.join(w))));
        }
        Ok(all)
    }
}

/// The records the claims of the study in `dir` are checked against, each in its batch:
/// its own and those of the studies it is `with` ([`claims::in_batches`]).
///
/// # Errors
/// A study whose records do not read.
pub fn claim_records(dir: &Path, claims: &Claims) -> Result<Vec<serde_json::Value>> {
    Records::default().of_claims(dir, claims)
}

/// The text of one value.
fn render_value(spec: &ValueSpec, base: &Path, read: &mut Records) -> Result<String> {
    let records = read.of(base, &spec.read.studies, &spec.read.list)?;
    let d = spec.digits;
    let n = |x: f64| match spec.signed {
        true => format!("{:+.d$}", spec.read.scale * x),
        false => format!("{:.d$}", spec.read.scale * x),
    };
    let against = match (&spec.minus, &spec.divided_by) {
        (Some(_), Some(_)) => bail!("a value takes `minus` or `divided_by`, not both"),
        (Some(other), None) => Some((other, "a difference (`minus`)")),
        (None, Some(other)) => Some((other, "a ratio (`divided_by`)")),
        (None, None) => None,
    };
    if spec.read.show == Show::Tally {
        ensure!(against.is_none(), "a tally compares with nothing");
        return tally(spec, &records);
    }
    if spec.read.show == Show::Value {
        ensure!(
            against.is_none(),
            "a comparison of one record: read it as `mean`"
        );
        return one_value(spec, &records).map(n);
    }
    let read_side = |records: &[serde_json::Value], row: &str, metric: &str, filter| {
        let entry = claims::Entry {
            by: &spec.by,
            label: row,
            metric,
            filter,
            over: &spec.read.over,
        };
        match entry.side(records) {
            Ok(side) => Ok(side),
            Err(claims::Missing::NoRecord) => bail!(
                "no record of `{row}` has a `{metric}`{}",
                match filter.is_empty() {
                    true => String::new(),
                    false => format!(" where {}", serde_json::Value::Object(filter.clone())),
                }
            ),
            Err(claims::Missing::Bad(e)) => Err(e),
        }
    };
    let mut side = match spec.read.over.as_str() {
        RECORD => each_record(spec, &records)?,
        _ => {
            let row = spec.row.as_deref().with_context(|| {
                format!(
                    "a value without `row` reads every record, each its own replicate: \
                     `over: {RECORD}`, not `{}`",
                    spec.read.over
                )
            })?;
            read_side(&records, row, &spec.read.metric, &spec.read.filter)?
        }
    };
    if let Some((minus, what)) = against {
        ensure!(
            spec.read.over != RECORD,
            "{what} pairs replicates by name, and records (`over: record`) have none"
        );
        ensure!(
            matches!(
                spec.read.show,
                Show::Mean | Show::Range | Show::Min | Show::Max | Show::Seeds
            ),
            "{what} shows `mean`, `range`, `min`, `max` or `seeds`, not {:?}",
            spec.read.show
        );
        let other_records = match &minus.studies {
            Some(studies) => read.of(base, studies, &spec.read.list)?,
            None => records.clone(),
        };
        let other = read_side(
            &other_records,
            minus
                .row
                .as_deref()
                .or(spec.row.as_deref())
                .context("a comparison without `row` on either side")?,
            minus.metric.as_deref().unwrap_or(&spec.read.metric),
            minus.filter.as_ref().unwrap_or(&spec.read.filter),
        )?;
        let unpaired: Vec<String> = side
            .by_seed
            .keys()
            .chain(other.by_seed.keys())
            .filter(|s| !side.by_seed.contains_key(s) || !other.by_seed.contains_key(s))
            .map(u64::to_string)
            .collect();
        ensure!(
            unpaired.is_empty(),
            "{what} needs the same {}s on both sides; {} only on one",
            spec.read.over,
            unpaired.join(", ")
        );
        side.by_seed = side
            .by_seed
            .iter()
            .map(|(seed, x)| {
                let y = other.by_seed[seed];
                (*seed, if spec.minus.is_some() { x - y } else { x / y })
            })
            .collect();
        let paired: Vec<f64> = side.by_seed.values().copied().collect();
        (side.mean, side.sd) = mean_sd(&paired);
    }
    let seeds: Vec<f64> = side.by_seed.values().copied().collect();
    let low = seeds.iter().copied().fold(f64::INFINITY, f64::min);
    let high = seeds.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Ok(match spec.read.show {
        Show::MeanSd => format!("{} ± {}", n(side.mean), n(side.sd)),
        Show::Mean => n(side.mean),
        Show::Sd => n(side.sd),
        Show::Range => {
            // A range whose ends print alike is one number.
            match (n(low), n(high)) {
                (low, high) if low == high => low,
                (low, high) => format!("{low}–{high}"),
            }
        }
        Show::Min => n(low),
        Show::Max => n(high),
        Show::Seeds => match seeds.split_last() {
            Some((last, [])) => n(*last),
            Some((last, rest)) => format!(
                "{} and {}",
                rest.iter().map(|&x| n(x)).collect::<Vec<_>>().join(", "),
                n(*last)
            ),
            None => String::new(),
        },
        Show::Count => seeds.len().to_string(),
        Show::Value => one_value(spec, &records).map(n)?,
        Show::Tally => tally(spec, &records)?,
    })
}

/// The `over` of a value whose every matching record is a replicate of its own (the trials
/// of a passkey grid, say, where no one field names them).
const RECORD: &str = "record";

/// The metric of each record of `spec`'s entry that matches its filter, as the replicates
/// of one side.
fn each_record(spec: &ValueSpec, records: &[serde_json::Value]) -> Result<claims::Side> {
    let found = matching_some(spec, records)?;
    let xs = found
        .iter()
        .map(|r| {
            r.get(&spec.read.metric)
                .and_then(serde_json::Value::as_f64)
                .with_context(|| format!("`{}` is not a number in {r}", spec.read.metric))
        })
        .collect::<std::result::Result<Vec<f64>, _>>()?;
    let (mean, sd) = mean_sd(&xs);
    Ok(claims::Side {
        by_seed: (0..).zip(xs).collect(),
        mean,
        sd,
    })
}

/// `k/n`: of the `n` records of `spec`'s entry that match its filter, the `k` whose metric
/// is true.
fn tally(spec: &ValueSpec, records: &[serde_json::Value]) -> Result<String> {
    let found = matching_some(spec, records)?;
    let mut yes = 0;
    for record in &found {
        match record.get(&spec.read.metric) {
            Some(serde_json::Value::Bool(b)) => yes += usize::from(*b),
            _ => bail!(
                "`{}` is not true or false in {record}: a tally counts what is true",
                spec.read.metric
            ),
        }
    }
    Ok(format!("{yes}/{}", found.len()))
}

/// The records of `spec`'s entry that match its filter, refused where none do.
fn matching_some<'a>(
    spec: &ValueSpec,
    records: &'a [serde_json::Value],
) -> Result<Vec<&'a serde_json::Value>> {
    let found = matching(spec, records);
    ensure!(
        !found.is_empty(),
        "no record of `{}` matches {}",
        spec.named(),
        serde_json::Value::Object(spec.read.filter.clone())
    );
    Ok(found)
}

/// The records of `spec`'s entry that match its filter.
fn matching<'a>(spec: &ValueSpec, records: &'a [serde_json::Value]) -> Vec<&'a serde_json::Value> {
    records
        .iter()
        .filter(|r| {
            spec.row
                .as_deref()
                .is_none_or(|row| r.get(&spec.by).is_some_and(|v| claims::names(v, row)))
                && claims::matches(r, &spec.read.filter)
        })
        .collect()
}

/// The metric of the one record of `spec`'s entry that matches its filter.
fn one_value(spec: &ValueSpec, records: &[serde_json::Value]) -> Result<f64> {
    let found = matching(spec, records);
    let [record] = found[..] else {
        bail!(
            "{} records of `{}` match {}, where one must",
            found.len(),
            spec.named(),
            serde_json::Value::Object(spec.read.filter.clone())
        );
    };
    Ok(record[&spec.read.metric]
        .as_f64()
        .with_context(|| format!("`{}` is not a number in {record}", spec.read.metric))?)
}

/// The Markdown table of the spec at `path`.
fn render_table(path: &Path) -> Result<String> {
    let spec: TableSpec = load_results(path)?;
    let base = path.parent().unwrap_or(Path::new("."));
    // Each study read once, however many columns read it.
    let mut read = Records::default();
    let records = spec
        .columns
        .iter()
        .map(|column| read.of(base, &column.read.studies, &column.read.list))
        .collect::<Result<Vec<_>>>()?;
    for c in &spec.columns {
        no_unknown(&format!("column `{}`", c.title), &c.unknown)?;
        ensure!(
            !c.exp || c.read.show == Show::Mean,
            "column `{}`: `exp` goes only with `show: mean`",
            c.title
        );
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
            let (by, label, filter) = row.entry(&spec.by, column)?;
            let entry = claims::Entry {
                by: &by,
                label: &label,
                metric: &column.read.metric,
                filter: &filter,
                over: &column.read.over,
            };
            cells.push(match entry.side(records) {
                Ok(side) => Some((
                    match column.exp {
                        true => (column.read.scale * side.mean).exp(),
                        false => column.read.scale * side.mean,
                    },
                    column.read.scale * side.sd,
                    side.by_seed.len(),
                )),
                Err(claims::Missing::NoRecord) => None,
                Err(claims::Missing::Bad(e)) => return Err(e),
            });
        }
        ensure!(
            cells.iter().any(Option::is_some),
            "`{}` has no record in any column",
            row.title()
        );
        sides.push(cells);
    }
    for (row, cells) in spec.rows.iter().zip(&sides) {
        table += &format!("| {} |", row.title());
        for (c, (column, cell)) in spec.columns.iter().zip(cells).enumerate() {
            let Some((mean, sd, seeds)) = *cell else {
                table += "  |";
                continue;
            };
            let d = column.digits.unwrap_or(spec.digits);
            let text = match column.read.show {
                Show::Count => {
                    table += &format!(" {seeds} |");
                    continue;
                }
                Show::MeanSd => format!("{mean:.d$} ± {sd:.d$}{}", column.unit),
                Show::Mean => format!("{mean:.d$}{}", column.unit),
                Show::Sd => format!("{sd:.d$}{}", column.unit),
                other => bail!(
                    "column `{}` shows {other:?}: a table's cell shows mean_sd, mean, sd or count",
                    column.title
                ),
            };
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
