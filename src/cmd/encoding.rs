//! `posenc encoding show|props`: the table an encoding produces and its properties.

use std::io::Write;

use super::Format;
use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use clap::{Args, Subcommand};
use posenc::analysis::{analyze, Properties, Setting};
use posenc::{EncodingConfig, Form};
use serde_json::json;

/// Which encoding, at which size.
#[derive(Args, Debug)]
pub struct Which {
    /// The encoding: a kind (`rope`; an unknown one lists the known ones), a kind with
    /// settings (`rope:layout=interleaved`) or a JSON object; `posenc encoding list` shows
    /// them all.
    #[arg(long = "encoding", alias = "kind", value_name = "ENCODING", value_parser = super::EncodingParser::<super::EncodingArg>::new(), hide_possible_values = true)]
    kind: super::EncodingArg,
    /// Model width.
    #[arg(long, default_value_t = 64)]
    d_model: usize,
    /// Sequence length: positions 0..len.
    #[arg(long, default_value_t = 64)]
    len: usize,
    /// Attention heads (bias encodings have one bias per head; rotary acts per head).
    #[arg(long, default_value_t = 1)]
    heads: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: super::Format,
}

/// `posenc encoding show`: an encoding, and where its tokens sit.
#[derive(Args, Debug)]
pub struct ShowArgs {
    #[command(flatten)]
    which: Which,
    /// The tokens' positions instead of 0..len: a JSON list with one row per token, a
    /// position (`[0, 5, 9]`) or, for a kind that reads coordinates, a list of them
    /// (`[[0, 0, 0], [0, 0, 1]]`: mrope's time, row and column). --len is then the number of
    /// rows [default: positions 0..len]
    #[arg(long, value_name = "FILE", conflicts_with = "grid")]
    positions: Option<std::path::PathBuf>,
    /// One image of H × W tokens, row after row, at the coordinates the kind reads
    /// (mrope: time 0, then row and column); --len is then H · W [default: none, positions
    /// 0..len]
    #[arg(long, value_name = "H,W", value_parser = parse_grid)]
    grid: Option<(usize, usize)>,
}

/// The largest coordinate `--positions` and `--grid` take: far past any table's use.
const MAX_COORD: u64 = 1 << 24;

pub(crate) fn parse_grid(text: &str) -> std::result::Result<(usize, usize), String> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    let [h, w] = parts.as_slice() else {
        return Err(format!("expected H,W (two counts, e.g. 8,8), got `{text}`"));
    };
    let count = |s: &str| match s.parse::<usize>() {
        Ok(n) if n > 0 && n as u64 <= MAX_COORD => Ok(n),
        _ => Err(format!(
            "expected H,W as counts from 1 to {MAX_COORD}, got `{text}`"
        )),
    };
    Ok((count(h)?, count(w)?))
}

/// The rows of a `--positions` file: one number a token, or `axes` numbers each.
fn read_positions(path: &std::path::Path) -> Result<(usize, Vec<u32>)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the positions {}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", path.display()))?;
    let bad = |what: String| anyhow::anyhow!("{}: {what}", path.display());
    let rows = value
        .as_array()
        .filter(|rows| !rows.is_empty())
        .ok_or_else(|| bad("expected a non-empty JSON list of rows, one per token".into()))?;
    let number = |v: &serde_json::Value, at: usize| -> Result<u32> {
        match v.as_u64() {
            Some(n) if n < MAX_COORD => Ok(n as u32),
            _ => Err(bad(format!(
                "row {at}: expected whole numbers from 0 to {}, got {v}",
                MAX_COORD - 1
            ))),
        }
    };
    let axes = rows[0].as_array().map_or(1, Vec::len);
    let mut coords = Vec::with_capacity(rows.len() * axes);
    for (at, row) in rows.iter().enumerate() {
        match row.as_array() {
            None if axes == 1 && !rows[0].is_array() => coords.push(number(row, at)?),
            Some(items) if items.len() == axes && !items.is_empty() => {
                for v in items {
                    coords.push(number(v, at)?);
                }
            }
            _ => {
                return Err(bad(format!(
                    "row {at} is {row}: every row must be like the first ({})",
                    rows[0]
                )))
            }
        }
    }
    Ok((if rows[0].is_array() { axes } else { 0 }, coords))
}

/// `posenc encoding …`
#[derive(Subcommand, Debug)]
pub enum EncodingCommand {
    /// Every registered kind with each of its settings, its default and what it does: what
    /// `--encoding` and `--encodings` take (`kind`, `kind:key=value:…` or a JSON object).
    #[command(
        after_help = "Examples:\n  posenc encoding list\n  posenc encoding list --format json"
    )]
    List {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: super::Format,
    },
    /// What each layer of a Hugging Face model gets, from its `config.json` alone: the
    /// encoding (`rope` with its base and scaling, `none`, a `window`) as `--encoding`
    /// takes it. `encoding show --encoding <it> --d-model <head_dim> --heads 1` prints a
    /// layer's tables.
    #[command(
        after_help = "Examples:\n  posenc encoding from-config path/to/config.json\n  posenc encoding from-config path/to/model-dir --format json"
    )]
    FromConfig {
        /// The model's `config.json`, or the directory that holds it.
        config: std::path::PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: super::Format,
    },
    /// Print the table: the (len × d_model) matrix of additive encodings, cos/sin of
    /// rope, the per-head bias of alibi, the bucket indices of t5. Learned weights are
    /// untrained (random).
    #[command(
        after_help = "Examples:\n  posenc encoding show --encoding sinusoidal --d-model 8 --len 10\n  posenc encoding show --encoding alibi --d-model 64 --len 6 --heads 8 --format json\n  posenc encoding show --encoding mrope --d-model 128 --grid 2,3 --format json\n  posenc encoding show --encoding rope --d-model 64 --positions positions.json"
    )]
    Show(ShowArgs),
    /// Print the properties: uniqueness, boundedness, length drift, shift linearity,
    /// relative-only interaction, symmetry and decay.
    #[command(
        after_help = "Examples:\n  posenc encoding props --encoding rope --d-model 64 --len 128\n  posenc encoding props --encoding alibi --d-model 64 --len 128 --heads 8 --shift 4 --format json"
    )]
    Props {
        #[command(flatten)]
        which: Which,
        /// The shift k of the linear-map fit v(p + k) ≈ M_k v(p).
        #[arg(long, default_value_t = 1)]
        shift: usize,
    },
}

impl EncodingCommand {
    /// Runs the command, writing to `out`.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        match self {
            EncodingCommand::List { format } => list(format, out),
            EncodingCommand::FromConfig { config, format } => from_config(&config, format, out),
            EncodingCommand::Show(args) => show(&args, out),
            EncodingCommand::Props { which, shift } => props(&which, shift, out),
        }
    }
}

fn list(format: super::Format, out: &mut impl Write) -> Result<()> {
    let kinds: Vec<serde_json::Value> = EncodingConfig::kinds()
        .into_iter()
        .map(|kind| {
            Ok(json!({
                "kind": kind,
                "config": EncodingConfig::from_kind(kind)?.to_json(),
                "settings": EncodingConfig::settings_of(kind)?,
            }))
        })
        .collect::<Result<_>>()?;
    // The presets, named configs of those kinds, each a row that takes no settings.
    let presets: Vec<serde_json::Value> = posenc::BUILT_IN_PRESETS
        .iter()
        .map(|p| {
            Ok(json!({
                "kind": p.name,
                "preset": p.from,
                "config": EncodingConfig::from_kind(p.name)?.to_json(),
                "settings": [],
            }))
        })
        .collect::<Result<_>>()?;
    let kinds: Vec<serde_json::Value> = kinds.into_iter().chain(presets).collect();
    if let Format::Json = format {
        writeln!(out, "{}", serde_json::to_string_pretty(&kinds)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "| kind | setting | default | what it does |\n|---|---|---|---|"
    )?;
    for entry in &kinds {
        let kind = entry["kind"].as_str().unwrap_or_default();
        let settings: Vec<posenc::Setting> =
            serde_json::from_value(entry["settings"].clone()).unwrap_or_default();
        if let Some(from) = entry["preset"].as_str() {
            writeln!(
                out,
                "| {kind} | – | – | a preset, the positions of {from}; takes no settings |"
            )?;
        } else if settings.is_empty() {
            writeln!(out, "| {kind} | – | – | takes no settings |")?;
        }
        for setting in settings {
            let default = match &setting.default {
                serde_json::Value::Null => "unset".to_string(),
                value => written(&compact(value)),
            };
            let values: Vec<String> = setting.values.iter().map(written).collect();
            let description = match values.is_empty() {
                true => setting.description,
                false => format!("{} One of: {}.", setting.description, values.join(", ")),
            };
            // A `|` in a formula would end the cell.
            let description = description.replace('|', "\\|");
            writeln!(
                out,
                "| {kind} | {} | {default} | {description} |",
                setting.name
            )?;
        }
    }
    Ok(())
}

fn from_config(path: &std::path::Path, format: super::Format, out: &mut impl Write) -> Result<()> {
    let file = match path.is_dir() {
        true => path.join("config.json"),
        false => path.to_path_buf(),
    };
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("reading the model's config {}", file.display()))?;
    let config: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", file.display()))?;
    let positions = posenc::hf::HfPositions::from_config(&config)
        .with_context(|| format!("reading {}", file.display()))?;
    if let Format::Json = format {
        let layers: Vec<serde_json::Value> = positions
            .layers
            .iter()
            .enumerate()
            .map(|(i, e)| json!({"layer": i, "encoding": e.to_json()}))
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&layers)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "{}: {} layers, {} heads of {} ({} positions trained)\n",
        file.display(),
        positions.layers.len(),
        positions.heads,
        positions.head_dim,
        positions
            .context
            .map_or("an unstated number of".to_string(), |c| c.to_string())
    )?;
    writeln!(out, "| layer | encoding |\n|---|---|")?;
    for (i, e) in positions.layers.iter().enumerate() {
        writeln!(out, "| {i} | `{}` |", e.to_json())?;
    }
    Ok(())
}

/// A value as the command line writes it: a string bare, anything else as JSON.
fn written(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A default with every nested encoding that sits at its own defaults written as its kind
/// alone (`["rope", "ssmax"]`), as configs may write it.
fn compact(value: &serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Array(items) => items.iter().map(compact).collect(),
        serde_json::Value::Object(fields) => {
            let kind = fields.get("kind").and_then(|k| k.as_str());
            match kind.and_then(|k| EncodingConfig::from_kind(k).ok()) {
                Some(default) if default.to_json() == *value => json!(default.kind()),
                _ => value.clone(),
            }
        }
        other => other.clone(),
    }
}

fn show(args: &ShowArgs, out: &mut impl Write) -> Result<()> {
    let which = &args.which;
    let enc = which
        .kind
        .0
        .build_untrained(which.d_model, which.heads, &Device::Cpu)?;
    let kind = enc.kind();
    let axes = enc.capabilities().coords;
    // Where the tokens sit: 0..len, the file's rows, or one image's grid.
    let (len, given_axes, coords) = match (&args.positions, args.grid) {
        (Some(path), _) => {
            let (axes, coords) = read_positions(path)?;
            (coords.len() / axes.max(1), axes, Some(coords))
        }
        (None, Some((h, w))) => {
            anyhow::ensure!(
                axes >= 2,
                "`{kind}` reads one position per token: --grid lays out an image for a kind \
                 that reads coordinates (mrope); give --positions or --len"
            );
            posenc::limits::check_table_len(h.saturating_mul(w))?;
            let coords = posenc::Positions::image_coords(axes, [h, w]);
            (h * w, axes, Some(coords))
        }
        (None, None) => (which.len, 0, None),
    };
    posenc::limits::check_table_len(len)?;
    let at = match (&coords, given_axes) {
        (None, _) => posenc::Positions::From(0),
        (Some(list), 0) => posenc::Positions::At(list),
        (Some(coords), axes) => posenc::Positions::Coords { axes, coords },
    };
    let tables = match coords {
        None => enc.tables(len),
        Some(_) => enc.table_at(at, len).map(|t| vec![t]),
    }
    .with_context(|| format!("computing the `{kind}` table"))?;
    match which.format {
        Format::Json => {
            let json_of = |table: &posenc::Table| -> Result<serde_json::Value> {
                let values = match &table.form {
                    Form::Additive { values, .. } => json!(values.to_vec2::<f32>()?),
                    Form::Rotary { cos, sin } => {
                        json!({"cos": cos.to_vec2::<f32>()?, "sin": sin.to_vec2::<f32>()?})
                    }
                    Form::Bias {
                        index: Some(index), ..
                    } => json!(index.values.to_vec2::<u32>()?),
                    Form::Bias { bias, .. } => json!(bias.to_vec3::<f32>()?),
                };
                Ok(json!({"kind": kind, "title": table.title, "values": values}))
            };
            // One table is an object; a per-layer pattern's are a list of them.
            let value = match tables.as_slice() {
                [one] => json_of(one)?,
                many => {
                    json!({"kind": kind, "tables": many.iter().map(json_of).collect::<Result<Vec<_>>>()?})
                }
            };
            writeln!(out, "{value}")?;
        }
        Format::Text => {
            for table in &tables {
                write_table(out, kind, table)?;
            }
        }
    }
    Ok(())
}

fn write_table(out: &mut impl Write, kind: &str, table: &posenc::Table) -> Result<()> {
    let title = &table.title;
    match &table.form {
        Form::Additive { values, .. } => {
            write_matrix(out, &format!("{kind}: {title}"), "pos", values)?
        }
        Form::Rotary { cos, sin } => {
            write_matrix(out, &format!("{kind}: cos(pos·θ_i), {title}"), "pos", cos)?;
            write_matrix(out, &format!("{kind}: sin(pos·θ_i), {title}"), "pos", sin)?;
        }
        Form::Bias {
            index: Some(index), ..
        } => write_matrix(
            out,
            &format!("{kind}: {}(query, key), {title}", index.name),
            "query",
            &index.values,
        )?,
        Form::Bias { bias, .. } => {
            for h in 0..bias.dim(0)? {
                write_matrix(
                    out,
                    &format!("{kind}: head {h}, {title}"),
                    "query",
                    &bias.get(h)?,
                )?;
            }
        }
    }
    Ok(())
}

/// A text table shows every row, and at most 16 columns: past that, the first 8 and the
/// last 4, with `…` between (`--format json` gives every value).
const SHOWN_COLUMNS: (usize, usize, usize) = (16, 8, 4);

/// The columns a text table shows out of `n`: all of them, or the first and last few with
/// `None` (the `…`) between.
fn shown(n: usize) -> Vec<Option<usize>> {
    let (most, head, tail) = SHOWN_COLUMNS;
    match n <= most {
        true => (0..n).map(Some).collect(),
        false => (0..head)
            .map(Some)
            .chain([None])
            .chain((n - tail..n).map(Some))
            .collect(),
    }
}

fn write_matrix(out: &mut impl Write, title: &str, row_name: &str, t: &Tensor) -> Result<()> {
    let rows: Vec<Vec<f32>> = t.to_dtype(candle_core::DType::F32)?.to_vec2()?;
    writeln!(out, "{title}")?;
    let cols = rows.first().map_or(0, Vec::len);
    let shown_cols = shown(cols);
    write!(out, "{row_name:>6}")?;
    for c in &shown_cols {
        match c {
            Some(c) => write!(out, " {c:>9}")?,
            None => write!(out, " {:>9}", "…")?,
        }
    }
    writeln!(out)?;
    // Whole numbers (bucket indices, distances) print as such; -0 prints as 0.
    let whole = rows.iter().flatten().all(|v| v.fract() == 0.0);
    for (r, row) in rows.iter().enumerate() {
        write!(out, "{r:>6}")?;
        for c in &shown_cols {
            let Some(c) = *c else {
                write!(out, " {:>9}", "…")?;
                continue;
            };
            let v = row[c] + 0.0;
            match whole {
                true => write!(out, " {v:>9}")?,
                false => write!(out, " {v:>9.4}")?,
            }
        }
        writeln!(out)?;
    }
    if cols > SHOWN_COLUMNS.0 {
        writeln!(
            out,
            "(columns {}–{} of {cols} are not shown; --format json gives every value)",
            SHOWN_COLUMNS.1,
            cols - SHOWN_COLUMNS.2 - 1
        )?;
    }
    writeln!(out)?;
    Ok(())
}

fn props(which: &Which, shift: usize, out: &mut impl Write) -> Result<()> {
    let enc = which
        .kind
        .0
        .build_untrained(which.d_model, which.heads, &Device::Cpu)?;
    let setting = Setting {
        d_model: which.d_model,
        heads: which.heads,
        len: which.len,
        shift,
    };
    let p = analyze(&*enc, setting)?;
    match which.format {
        Format::Json => writeln!(out, "{}", serde_json::to_string(&p)?)?,
        Format::Text => write_properties(out, &p)?,
    }
    Ok(())
}

fn write_properties(out: &mut impl Write, p: &Properties) -> Result<()> {
    let opt = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.3e}"));
    let shown: Vec<String> = p.decay.iter().take(8).map(|v| format!("{v:.3}")).collect();
    let rows: Vec<(&str, String, String)> = vec![
        (
            "uniqueness",
            opt(p.uniqueness),
            "smallest ‖v(p) − v(q)‖, p ≠ q (0: two positions collide)".into(),
        ),
        (
            "boundedness",
            format!("{:.3e}", p.max_abs),
            "largest |value|".into(),
        ),
        (
            "length drift",
            format!("{:.3e}", p.length_drift),
            format!("largest change of v(p) when len {} → {}", p.len, 2 * p.len),
        ),
        (
            "shift residual",
            opt(p.shift_residual),
            format!(
                "best linear v(p) ↦ v(p+{}) misses by this (relative)",
                p.shift
            ),
        ),
        (
            "relative residual",
            format!("{:.3e}", p.relative_residual),
            "0: S(i, j) depends on j − i only".into(),
        ),
        (
            "symmetry residual",
            format!("{:.3e}", p.symmetry_residual),
            "0: S(p, p+k) = S(p, p−k)".into(),
        ),
        (
            "decay",
            shown.join(" "),
            "mean S(p, p−k) for k = 0, 1, …".into(),
        ),
        (
            "monotone until",
            p.monotone_until.to_string(),
            "the decay keeps falling up to this k".into(),
        ),
    ];
    writeln!(out, "{} (d_model = {}, len = {})", p.kind, p.d_model, p.len)?;
    for (name, value, meaning) in rows {
        writeln!(out, "  {name:<18} {value:<12} {meaning}")?;
    }
    Ok(())
}
