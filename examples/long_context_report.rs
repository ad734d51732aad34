//! The report of the long-context experiment: reads what `scripts/long_context.sh`
//! (SmolLM2-135M, passkey and perplexity at 4k to 32k tokens) and
//! `scripts/toy_long_context.sh` (a character model with `rope` trained at 64, stretched
//! zero-shot and fine-tuned) wrote, and writes `results.json` (tidy records),
//! `results.md` (the tables) and the figures; `docs/long-context/README.md` reads them.
//!
//! ```sh
//! scripts/long_context.sh && scripts/toy_long_context.sh
//! cargo run --release --example long_context_report -- [SMOLLM2_RAW] [TOY_RAW] [OUT]
//! ```
//!
//! Defaults: `runs/long-context/smollm2`, `runs/long-context/toy`, `docs/long-context`.
//! A run that is missing is a cell that says so, never a number.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use posenc_io::write_atomic;
use posenc_plot::chart::{heatmap, save_png, Heatmap};
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

/// SmolLM2: passkey and perplexity records, the tables, the figures.
fn smollm2(raw: &Path, out: &Path, records: &mut Vec<Value>, md: &mut String) -> Result<()> {
    let lengths = [4096, 8192, 16384, 32768];
    let mut accuracy = vec![vec![f32::NAN; lengths.len()]; KINDS.len()];
    let mut cells = vec![vec!["–".to_string(); lengths.len()]; KINDS.len()];
    let mut ppl_cells = cells.clone();
    let mut cost = String::new();
    let mut curves = Vec::new();
    let mut positions: Vec<(String, Vec<f64>)> = Vec::new();
    for (k, kind) in KINDS.iter().enumerate() {
        let mut curve = Vec::new();
        for (l, &len) in lengths.iter().enumerate() {
            let time = |task: &str| maybe(raw, &format!("{task}-{kind}-{len}.time"));
            if let Some(trials) = maybe(raw, &format!("passkey-{kind}-{len}.json"))? {
                let trials = trials.as_array().context("passkey records")?;
                let right = trials.iter().filter(|t| t["correct"] == true).count();
                accuracy[k][l] = right as f32 / trials.len().max(1) as f32;
                cells[k][l] = format!("{right}/{}", trials.len());
                for t in trials {
                    records.push(json!({
                        "experiment": "smollm2-passkey", "scaling": kind,
                        "factor": factor(kind, len, TRAINED), "length": len,
                        "tokens": t["tokens"], "depth": t["depth"], "trial": t["trial"],
                        "key": t["key"], "answer": t["answer"], "correct": t["correct"],
                        "wall_s": t["seconds"], "peak_rss_mb": t["peak_rss_mb"],
                    }));
                    let _ = writeln!(
                        cost,
                        "| passkey | {kind} | {len} | {} | {:.0} | {:.0} |",
                        t["depth"],
                        t["seconds"].as_f64().unwrap_or(f64::NAN),
                        t["peak_rss_mb"].as_f64().unwrap_or(f64::NAN)
                    );
                }
            }
            if let (Some(rows), Some(time)) =
                (maybe(raw, &format!("ppl-{kind}-{len}.json"))?, time("ppl")?)
            {
                let row = &rows[0];
                let ppl = row["perplexity"].as_f64().context("a perplexity")?;
                let by_position: Vec<f64> = serde_json::from_value(row["by_position"].clone())?;
                let past = (len > TRAINED).then(|| {
                    let tail = &by_position[TRAINED..];
                    tail.iter().sum::<f64>() / tail.len() as f64
                });
                ppl_cells[k][l] = match past {
                    Some(p) => format!("{ppl:.2} ({p:.2})"),
                    None => format!("{ppl:.2}"),
                };
                curve.push((len as f64, vec![ppl]));
                let peak_mb = time["peak_rss_kb"].as_f64().unwrap_or(f64::NAN) / 1024.0;
                records.push(json!({
                    "experiment": "smollm2-perplexity", "scaling": kind,
                    "factor": factor(kind, len, TRAINED), "length": len,
                    "windows": row["windows"], "loss": row["loss"], "perplexity": ppl,
                    "loss_past_trained": past, "wall_s": time["wall_s"], "peak_rss_mb": peak_mb,
                }));
                let _ = writeln!(
                    cost,
                    "| perplexity | {kind} | {len} | – | {} | {peak_mb:.0} |",
                    time["wall_s"]
                );
                if len == 32768
                    || (len == 16384 && positions.iter().all(|(n, _)| !n.starts_with(kind)))
                {
                    positions.retain(|(n, _)| !n.starts_with(kind));
                    positions.push((format!("{kind} at {len}"), by_position));
                }
            }
        }
        if !curve.is_empty() {
            // SmolLM2 itself: one model, no seeds.
            curves.push((kind.to_string(), curve));
        }
    }
    let header = |first: &str| {
        let cols: Vec<String> = lengths.iter().map(|l| l.to_string()).collect();
        format!(
            "| {first} | {} |\n|---|{}\n",
            cols.join(" | "),
            "---:|".repeat(lengths.len())
        )
    };
    let table = |md: &mut String, cells: &[Vec<String>]| {
        for (kind, row) in KINDS.iter().zip(cells) {
            let _ = writeln!(md, "| {kind} | {} |", row.join(" | "));
        }
    };
    md.push_str("## SmolLM2-135M-Instruct, trained on 8 192 tokens\n\n### Passkey retrieval (keys found / trials)\n\n");
    md.push_str(&header("scaling"));
    table(md, &cells);
    md.push_str("\n### Perplexity on the test plays (loss past 8 192 in brackets)\n\n");
    md.push_str(&header("scaling"));
    table(md, &ppl_cells);
    md.push_str("\n### Cost of each run (two cores, quantized weights, f32 cache)\n\n| task | scaling | length | depth | wall s | peak MB |\n|---|---|---:|---:|---:|---:|\n");
    md.push_str(&cost);
    let y_ticks: Vec<String> = KINDS.iter().map(|k| k.to_string()).collect();
    let x_ticks: Vec<String> = lengths.iter().map(|l| l.to_string()).collect();
    save_png(
        &out.join("passkey.png"),
        (710, 420),
        "SmolLM2-135M: passkey found (grey: not run)",
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
        "SmolLM2-135M on the test plays, each scaling at the factor that reaches the length",
        &curves,
    )?;
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
    Ok(())
}

/// The toy: perplexity by length, mean ± spread over seeds, zero-shot and fine-tuned.
fn toy(raw: &Path, out: &Path, records: &mut Vec<Value>, md: &mut String) -> Result<()> {
    let lengths = [64, 128, 256, 512, 1024];
    let mut found: BTreeMap<(String, usize), Vec<f64>> = BTreeMap::new();
    let mut variants: Vec<String> = Vec::new();
    let mut push =
        |variant: &str, phase: &str, kind: &str, seed: usize, row: &Value| -> Result<()> {
            let len = row["len"].as_u64().context("a length")? as usize;
            let ppl = row["perplexity"].as_f64().context("a perplexity")?;
            found
                .entry((variant.to_string(), len))
                .or_default()
                .push(ppl);
            records.push(json!({
                "experiment": "toy", "variant": variant, "phase": phase, "scaling": kind,
                "factor": factor(kind, len, TOY_TRAINED), "seed": seed, "length": len,
                "windows": row["windows"], "loss": row["loss"], "perplexity": ppl,
                "loss_past_trained": row["tail_loss"],
            }));
            Ok(())
        };
    for seed in 1..=3 {
        if let Some(rows) = maybe(raw, &format!("zeroshot-none-s{seed}.json"))? {
            for row in rows.as_array().context("rows")? {
                push("zero-shot none", "zero-shot", "none", seed, row)?;
            }
        }
        for kind in &KINDS[1..] {
            for len in &lengths[1..] {
                if let Some(rows) = maybe(raw, &format!("zeroshot-{kind}-{len}-s{seed}.json"))? {
                    push(
                        &format!("zero-shot {kind}"),
                        "zero-shot",
                        kind,
                        seed,
                        &rows[0],
                    )?;
                }
            }
        }
        for kind in TUNED {
            if let Some(rows) = maybe(raw, &format!("tuned-{kind}-s{seed}.json"))? {
                for row in rows.as_array().context("rows")? {
                    push(
                        &format!("fine-tuned {kind}"),
                        "fine-tuned at 256",
                        kind,
                        seed,
                        row,
                    )?;
                }
            }
        }
    }
    let order = KINDS
        .iter()
        .map(|k| format!("zero-shot {k}"))
        .chain(TUNED.iter().map(|k| format!("fine-tuned {k}")));
    for variant in order {
        if found.keys().any(|(v, _)| *v == variant) {
            variants.push(variant);
        }
    }
    let cols: Vec<String> = lengths.iter().map(|l| l.to_string()).collect();
    let _ = write!(
        md,
        "\n## Toy: a character model with `rope`, trained on L = 64\n\nPerplexity on the test plays, mean ± standard deviation over seeds (n in brackets), 64 windows per length.\n\n| variant | {} |\n|---|{}\n",
        cols.join(" | "),
        "---:|".repeat(lengths.len())
    );
    let mut curves = Vec::new();
    for variant in &variants {
        let mut cells = Vec::new();
        let mut curve = Vec::new();
        for len in lengths {
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
            "rope trained at 64 characters: {}",
            posenc_plot::chart::seeds_note(&seeds.to_string())
        ),
        &curves,
    )?;
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| PathBuf::from(args.get(i).map_or(default, String::as_str));
    let (smol, toy_raw, out) = (
        arg(0, "runs/long-context/smollm2"),
        arg(1, "runs/long-context/toy"),
        arg(2, "docs/long-context"),
    );
    std::fs::create_dir_all(&out)?;
    let (mut records, mut md) = (Vec::new(), String::from("# Long context\n\n"));
    smollm2(&smol, &out, &mut records, &mut md)?;
    toy(&toy_raw, &out, &mut records, &mut md)?;
    write_atomic(
        &out.join("results.json"),
        serde_json::to_string_pretty(&records)?.as_bytes(),
    )?;
    write_atomic(&out.join("results.md"), md.as_bytes())?;
    println!("{md}");
    Ok(())
}
