//! The report of the long-context experiment: reads what `scripts/long_context.sh`
//! (SmolLM2-135M, passkey and perplexity at 4k to 32k tokens) and
//! `scripts/toy_long_context.sh` (a character model with `rope` trained at 64, stretched
//! zero-shot and fine-tuned) wrote, and writes `results.json` (tidy records),
//! `results.md` (the tables) and the figures; `docs/long-context/README.md` reads them.
//!
//! ```sh
//! scripts/long_context.sh && scripts/toy_long_context.sh
//! cargo run --release --example long_context_report -- [SMOLLM2_RAW] [TOY_RAW] [OUT]
//! cargo run --release --example long_context_report -- --from-records docs/long-context
//! ```
//!
//! Defaults: `runs/long-context/smollm2`, `runs/long-context/toy`, `docs/long-context`.
//! A run that is missing is a cell that says so, never a number. Every table and figure
//! is drawn from the records alone, but the loss by position (`by_position.png`), which
//! needs the runs' per-position losses; so `--from-records DIR` redraws the report from
//! `DIR/results.json` (and the two more passkey keys per cell in `DIR/more-trials`) where
//! the runs themselves are not at hand, and leaves `by_position.png` as it is.
//!
//! A passkey cell counts every key it was run with: the grid's (`--seed 0`, one trial)
//! and, where `passkey-<scaling>-<length>-seed1.json` is there, two more (`--seed 1`); each
//! record names its `key_seed`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use posenc_io::write_atomic;
use posenc_plot::chart::{heatmap, save_png, Heatmap, SeedPoint};
use posenc_plot::extrapolation::{loss_by_position, perplexity_by_length};
use posenc_train::results::mean_sd;
use serde_json::{json, Value};

/// SmolLM2's trained context.
const TRAINED: usize = 8192;
/// The toy model's trained context.
const TOY_TRAINED: usize = 64;
/// The scalings, in the order of every table.
const KINDS: [&str; 5] = ["none", "linear", "dynamic", "yarn", "llama3"];
/// The toy fine-tuning variants.
const TUNED: [&str; 3] = ["none", "linear", "yarn"];
/// SmolLM2's prompt and window lengths.
const LENGTHS: [usize; 4] = [4096, 8192, 16384, 32768];
/// The toy's evaluation lengths.
const TOY_LENGTHS: [usize; 5] = [64, 128, 256, 512, 1024];

/// Named losses by position, one curve each.
type ByPosition = Vec<(String, Vec<f64>)>;

fn read(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// The JSON in `dir/name`, or `None` when that run has not been made.
fn maybe(dir: &Path, name: &str) -> Result<Option<Value>> {
    let path = dir.join(name);
    match path.is_file() {
        true => read(&path).map(Some),
        false => Ok(None),
    }
}

fn factor(kind: &str, length: usize, trained: usize) -> Value {
    match kind {
        "none" => Value::Null,
        _ => json!((length / trained).max(1)),
    }
}

/// The tidy record of one passkey trial (`t`, as `posenc lm passkey --format json` writes
/// it) of the key seed `key_seed`.
fn passkey_record(kind: &str, len: usize, key_seed: u64, t: &Value) -> Value {
    json!({
        "experiment": "smollm2-passkey", "scaling": kind,
        "factor": factor(kind, len, TRAINED), "length": len, "key_seed": key_seed,
        "tokens": t["tokens"], "depth": t["depth"], "trial": t["trial"],
        "key": t["key"], "answer": t["answer"], "correct": t["correct"],
        "wall_s": t["seconds"], "peak_rss_mb": t["peak_rss_mb"],
    })
}

/// The trials of `dir/passkey-<kind>-<len>-seed1.json` (two more keys per cell), where
/// the records do not hold them yet.
fn more_keys(dir: &Path, records: &mut Vec<Value>) -> Result<()> {
    for kind in KINDS {
        for len in LENGTHS {
            let there = records.iter().any(|r| {
                r["experiment"] == "smollm2-passkey"
                    && r["scaling"] == kind
                    && r["length"] == len
                    && r["key_seed"] == 1
            });
            if there {
                continue;
            }
            if let Some(trials) = maybe(dir, &format!("passkey-{kind}-{len}-seed1.json"))? {
                for t in trials.as_array().context("passkey records")? {
                    records.push(passkey_record(kind, len, 1, t));
                }
            }
        }
    }
    Ok(())
}

/// SmolLM2's passkey and perplexity records from the runs in `raw`, and the loss by
/// position of the longest window of each scaling.
fn smollm2_records(raw: &Path) -> Result<(Vec<Value>, ByPosition)> {
    let mut records = Vec::new();
    let mut positions: ByPosition = Vec::new();
    for kind in KINDS {
        for len in LENGTHS {
            if let Some(trials) = maybe(raw, &format!("passkey-{kind}-{len}.json"))? {
                for t in trials.as_array().context("passkey records")? {
                    records.push(passkey_record(kind, len, 0, t));
                }
            }
            let time = maybe(raw, &format!("ppl-{kind}-{len}.time"))?;
            if let (Some(rows), Some(time)) = (maybe(raw, &format!("ppl-{kind}-{len}.json"))?, time)
            {
                let row = &rows[0];
                let ppl = row["perplexity"].as_f64().context("a perplexity")?;
                let by_position: Vec<f64> = serde_json::from_value(row["by_position"].clone())?;
                let past = (len > TRAINED).then(|| {
                    let tail = &by_position[TRAINED..];
                    tail.iter().sum::<f64>() / tail.len() as f64
                });
                let peak_mb = time["peak_rss_kb"].as_f64().unwrap_or(f64::NAN) / 1024.0;
                records.push(json!({
                    "experiment": "smollm2-perplexity", "scaling": kind,
                    "factor": factor(kind, len, TRAINED), "length": len,
                    "windows": row["windows"], "loss": row["loss"], "perplexity": ppl,
                    "loss_past_trained": past, "wall_s": time["wall_s"], "peak_rss_mb": peak_mb,
                }));
                if len == 32768
                    || (len == 16384 && positions.iter().all(|(n, _)| !n.starts_with(kind)))
                {
                    positions.retain(|(n, _)| !n.starts_with(kind));
                    positions.push((format!("{kind} at {len}"), by_position));
                }
            }
        }
    }
    more_keys(raw, &mut records)?;
    Ok((records, positions))
}

/// The toy's records from the runs in `raw`.
fn toy_records(raw: &Path) -> Result<Vec<Value>> {
    let mut records = Vec::new();
    let mut push = |variant: &str, phase: &str, kind: &str, seed: usize, row: &Value| {
        let len = row["len"].as_u64().context("a length")? as usize;
        let ppl = row["perplexity"].as_f64().context("a perplexity")?;
        records.push(json!({
            "experiment": "toy", "variant": variant, "phase": phase, "scaling": kind,
            "factor": factor(kind, len, TOY_TRAINED), "seed": seed, "length": len,
            "windows": row["windows"], "loss": row["loss"], "perplexity": ppl,
            "loss_past_trained": row["tail_loss"],
        }));
        anyhow::Ok(())
    };
    for seed in 1..=3 {
        if let Some(rows) = maybe(raw, &format!("zeroshot-none-s{seed}.json"))? {
            for row in rows.as_array().context("rows")? {
                push("zero-shot none", "zero-shot", "none", seed, row)?;
            }
        }
        for kind in &KINDS[1..] {
            for len in &TOY_LENGTHS[1..] {
                if let Some(rows) = maybe(raw, &format!("zeroshot-{kind}-{len}-s{seed}.json"))? {
                    let variant = format!("zero-shot {kind}");
                    push(&variant, "zero-shot", kind, seed, &rows[0])?;
                }
            }
        }
        for kind in TUNED {
            if let Some(rows) = maybe(raw, &format!("tuned-{kind}-s{seed}.json"))? {
                for row in rows.as_array().context("rows")? {
                    let variant = format!("fine-tuned {kind}");
                    push(&variant, "fine-tuned at 256", kind, seed, row)?;
                }
            }
        }
    }
    Ok(records)
}

/// The records of `experiment`.
fn of<'a>(records: &'a [Value], experiment: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    records
        .iter()
        .filter(move |r| r["experiment"] == experiment)
}

/// SmolLM2's tables and figures from its records (`by_position.png` too where the losses
/// by position are given).
fn smollm2(
    records: &[Value],
    positions: Option<&[(String, Vec<f64>)]>,
    out: &Path,
    md: &mut String,
) -> Result<()> {
    let mut accuracy = vec![vec![f32::NAN; LENGTHS.len()]; KINDS.len()];
    let mut cells = vec![vec!["–".to_string(); LENGTHS.len()]; KINDS.len()];
    let mut ppl_cells = cells.clone();
    let mut cost = String::new();
    // One curve per scaling and factor: a factor-2 point at 16k and a factor-4 point at 32k
    // are two settings, not one line.
    let mut curves: Vec<(String, Vec<SeedPoint>)> = Vec::new();
    for (k, kind) in KINDS.iter().enumerate() {
        for (l, &len) in LENGTHS.iter().enumerate() {
            let cell = |r: &&Value| r["scaling"] == *kind && r["length"] == len;
            let trials: Vec<&Value> = of(records, "smollm2-passkey").filter(cell).collect();
            if !trials.is_empty() {
                let right = trials.iter().filter(|t| t["correct"] == true).count();
                accuracy[k][l] = right as f32 / trials.len() as f32;
                cells[k][l] = format!("{right}/{}", trials.len());
                for t in &trials {
                    let _ = writeln!(
                        cost,
                        "| passkey | {kind} | {len} | {} | {} | {:.0} | {:.0} |",
                        t["depth"],
                        t["key_seed"],
                        t["wall_s"].as_f64().unwrap_or(f64::NAN),
                        t["peak_rss_mb"].as_f64().unwrap_or(f64::NAN)
                    );
                }
            }
            if let Some(r) = of(records, "smollm2-perplexity").find(cell) {
                let ppl = r["perplexity"].as_f64().context("a perplexity")?;
                ppl_cells[k][l] = match r["loss_past_trained"].as_f64() {
                    Some(p) => format!("{ppl:.2} ({p:.2})"),
                    None => format!("{ppl:.2}"),
                };
                let name = match r["factor"].as_u64() {
                    Some(f) => format!("{kind} ×{f}"),
                    None => kind.to_string(),
                };
                match curves.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, curve)) => curve.push((len as f64, vec![ppl])),
                    None => curves.push((name, vec![(len as f64, vec![ppl])])),
                }
                let _ = writeln!(
                    cost,
                    "| perplexity | {kind} | {len} | – | – | {} | {:.0} |",
                    r["wall_s"],
                    r["peak_rss_mb"].as_f64().unwrap_or(f64::NAN)
                );
            }
        }
    }
    let header = |first: &str| {
        let cols: Vec<String> = LENGTHS.iter().map(|l| l.to_string()).collect();
        format!(
            "| {first} | {} |\n|---|{}\n",
            cols.join(" | "),
            "---:|".repeat(LENGTHS.len())
        )
    };
    let table = |md: &mut String, cells: &[Vec<String>]| {
        for (kind, row) in KINDS.iter().zip(cells) {
            let _ = writeln!(md, "| {kind} | {} |", row.join(" | "));
        }
    };
    md.push_str("## SmolLM2-135M-Instruct, trained on 8 192 tokens\n\n### Passkey retrieval (keys found / trials)\n\nEvery key a cell was run with: the grid's (key seed 0) and, where they were run, two more (key seed 1).\n\n");
    md.push_str(&header("scaling"));
    table(md, &cells);
    md.push_str("\n### Perplexity on the test plays (loss past 8 192 in brackets)\n\n");
    md.push_str(&header("scaling"));
    table(md, &ppl_cells);
    md.push_str("\n### Cost of each run (two cores, quantized weights, f32 cache)\n\n| task | scaling | length | depth | key seed | wall s | peak MB |\n|---|---|---:|---:|---:|---:|---:|\n");
    md.push_str(&cost);
    let y_ticks: Vec<String> = KINDS.iter().map(|k| k.to_string()).collect();
    let x_ticks: Vec<String> = LENGTHS.iter().map(|l| l.to_string()).collect();
    save_png(
        &out.join("passkey.png"),
        (710, 420),
        "SmolLM2-135M: passkey keys found (grey: not run)",
        |root| {
            heatmap(
                root,
                &Heatmap {
                    values: &accuracy,
                    title: "share of keys found".into(),
                    x_desc: "prompt tokens",
                    y_desc: "RoPE scaling",
                    x_ticks: Some(&x_ticks),
                    y_ticks: Some(&y_ticks),
                    diverging: false,
                    range: Some((0.0, 1.0)),
                    colour_bar: true,
                    cell_text: Some(&cells),
                },
            )
        },
    )?;
    perplexity_by_length(
        &out.join("perplexity.png"),
        "SmolLM2-135M on the test plays, one window a length; each scaling at its factor",
        &curves,
    )?;
    if let Some(positions) = positions {
        let series: Vec<(String, &[f64])> = positions
            .iter()
            .map(|(n, p)| (n.clone(), p.as_slice()))
            .collect();
        loss_by_position(
            &out.join("by_position.png"),
            "SmolLM2-135M, one window",
            &series,
            1024,
        )?;
    }
    Ok(())
}

/// The toy's table and figure from its records: perplexity by length, mean ± spread over
/// seeds, zero-shot and fine-tuned.
fn toy(records: &[Value], out: &Path, md: &mut String) -> Result<()> {
    let mut found: BTreeMap<(String, usize), Vec<f64>> = BTreeMap::new();
    for r in of(records, "toy") {
        let variant = r["variant"].as_str().context("a variant")?.to_string();
        let len = r["length"].as_u64().context("a length")? as usize;
        let ppl = r["perplexity"].as_f64().context("a perplexity")?;
        found.entry((variant, len)).or_default().push(ppl);
    }
    let variants: Vec<String> = KINDS
        .iter()
        .map(|k| format!("zero-shot {k}"))
        .chain(TUNED.iter().map(|k| format!("fine-tuned {k}")))
        .filter(|v| found.keys().any(|(f, _)| f == v))
        .collect();
    let cols: Vec<String> = TOY_LENGTHS.iter().map(|l| l.to_string()).collect();
    let _ = write!(
        md,
        "\n## Toy: a character model with `rope`, trained on L = 64\n\nPerplexity on the test plays, mean ± standard deviation over seeds (n in brackets), 64 windows per length.\n\n| variant | {} |\n|---|{}\n",
        cols.join(" | "),
        "---:|".repeat(TOY_LENGTHS.len())
    );
    let mut curves = Vec::new();
    for variant in &variants {
        let mut cells = Vec::new();
        let mut curve = Vec::new();
        for len in TOY_LENGTHS {
            match found.get(&(variant.clone(), len)) {
                Some(xs) => {
                    let (m, s) = mean_sd(xs);
                    cells.push(format!("{m:.2} ± {s:.2} ({})", xs.len()));
                    curve.push((len as f64, xs.clone()));
                }
                None => cells.push("–".into()),
            }
        }
        let _ = writeln!(md, "| {variant} | {} |", cells.join(" | "));
        curves.push((variant.clone(), curve));
    }
    let seeds = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|(_, ys)| ys.len()))
        .max()
        .unwrap_or(0);
    perplexity_by_length(
        &out.join("toy.png"),
        &format!(
            "rope trained at 64 characters, 1 000 steps: {}",
            posenc_plot::chart::seeds_note(&seeds.to_string())
        ),
        &curves,
    )?;
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (records, positions, out) = match args.first().map(String::as_str) {
        Some("--from-records") => {
            let out = PathBuf::from(args.get(1).map_or("docs/long-context", String::as_str));
            let mut records: Vec<Value> = serde_json::from_value(read(&out.join("results.json"))?)
                .context("results.json: a list of records")?;
            for r in &mut records {
                if r["experiment"] == "smollm2-passkey" && r.get("key_seed").is_none() {
                    r["key_seed"] = json!(0);
                }
            }
            more_keys(&out.join("more-trials"), &mut records)?;
            (records, None, out)
        }
        _ => {
            let arg = |i: usize, default: &str| {
                PathBuf::from(args.get(i).map_or(default, String::as_str))
            };
            let (smol, toy_raw, out) = (
                arg(0, "runs/long-context/smollm2"),
                arg(1, "runs/long-context/toy"),
                arg(2, "docs/long-context"),
            );
            let (mut records, positions) = smollm2_records(&smol)?;
            records.extend(toy_records(&toy_raw)?);
            (records, Some(positions), out)
        }
    };
    std::fs::create_dir_all(&out)?;
    let mut md = String::from("# Long context\n\n");
    smollm2(&records, positions.as_deref(), &out, &mut md)?;
    toy(&records, &out, &mut md)?;
    write_atomic(
        &out.join("results.json"),
        serde_json::to_string_pretty(&records)?.as_bytes(),
    )?;
    write_atomic(&out.join("results.md"), md.as_bytes())?;
    println!("{md}");
    Ok(())
}
