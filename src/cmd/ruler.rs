//! `posenc lm ruler`: a subset of RULER at exact lengths, resumable record by record.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use posenc_lm::passkey::Subject;
use posenc_lm::ruler::{self, RulerConfig, RulerRecord};
use serde::{Deserialize, Serialize};

use super::model::{self, ModelArgs};
use super::Format;

/// `posenc lm ruler`
#[derive(Args, Debug)]
pub struct RulerArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Tasks: niah_single, niah_multikey, niah_multivalue, niah_multiquery, vt, cwe.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "niah_single,niah_multikey,niah_multivalue,niah_multiquery,vt,cwe"
    )]
    tasks: Vec<String>,
    /// Prompt lengths in tokens.
    #[arg(long, value_delimiter = ',', default_value = "4096,8192,16384,32768")]
    lengths: Vec<usize>,
    /// Seeds of the haystacks (keys, values, where the needles go).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2")]
    seeds: Vec<u64>,
    /// Samples per task, length and seed.
    #[arg(long, default_value_t = 1)]
    samples: usize,
    /// Keep the records in this JSON file, rewritten whole after each sample; a run killed
    /// and started again with the same file goes on from its last record [default: none,
    /// records only printed].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print every prompt (token ids and expected answers) as JSON and run nothing.
    #[arg(long)]
    print_prompts: bool,
    /// Output format: a table of mean score ± sd over seeds, or the JSON records.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Also draw the scores by task and length as a heatmap PNG here [default: none].
    #[arg(long)]
    plot: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// One row of the records: a sample, with the model it ran on.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RulerRow {
    model: String,
    rope_scaling: Option<String>,
    #[serde(flatten)]
    record: RulerRecord,
}

/// The rows already in `path`, checked to be this model's with this scaling.
fn earlier(path: &Path, model: &str, scaling: Option<&str>) -> Result<Vec<RulerRow>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let rows: Vec<RulerRow> = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a file of RULER records (give another --out)",
            path.display()
        )
    })?;
    if let Some(other) = rows
        .iter()
        .find(|r| r.model != model || r.rope_scaling.as_deref() != scaling)
    {
        anyhow::bail!(
            "{} holds records of model {} with rope_scaling {}: give another --out for model {model} with rope_scaling {}",
            path.display(),
            other.model,
            other.rope_scaling.as_deref().unwrap_or("none"),
            scaling.unwrap_or("none")
        );
    }
    Ok(rows)
}

impl RulerArgs {
    /// Runs the samples not yet in `--out`, then prints the table or the records.
    ///
    /// # Errors
    /// A bad setting or model; a prompt too short or too long; an `--out` of another
    /// model's records; the files' own.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        let default = model::shipped();
        let cfg = RulerConfig {
            tasks: self.tasks.clone(),
            lengths: self.lengths.clone(),
            seeds: self.seeds.clone(),
            samples: self.samples,
        };
        cfg.validate()?;
        let spec = self.model.spec(&default).to_string();
        let scaling = self.model.rope_scaling().map(String::from);
        let mut rows = match &self.out {
            Some(path) => earlier(path, &spec, scaling.as_deref())?,
            None => Vec::new(),
        };
        for path in [self.out.as_ref(), self.plot.as_ref()]
            .into_iter()
            .flatten()
        {
            if let Some(dir) = path.parent() {
                anyhow::ensure!(
                    dir.as_os_str().is_empty() || dir.is_dir(),
                    "the directory {} does not exist",
                    dir.display()
                );
            }
        }
        let lm = self.model.load(&default)?;
        let encode = |text: &str| {
            lm.encode_prompt(text)
                .map_err(posenc_train::Error::callback)
        };
        if self.print_prompts {
            let mut prompts = Vec::new();
            for task in &cfg.tasks {
                for &length in &cfg.lengths {
                    for &seed in &cfg.seeds {
                        for sample in 0..cfg.samples {
                            let p = ruler::prompt(&encode, task, length, seed, sample)?;
                            prompts.push(serde_json::json!({
                                "task": task, "length": length, "seed": seed, "sample": sample,
                                "ids": p.ids, "answers": p.answers, "max_new": p.max_new,
                            }));
                        }
                    }
                }
            }
            writeln!(out, "{}", serde_json::to_string(&prompts)?)?;
            return Ok(());
        }
        let decode = |ids: &[u32]| lm.decode(ids).map_err(posenc_train::Error::callback);
        let subject = Subject {
            model: &lm.model,
            encode: &encode,
            decode: &decode,
            eos: lm.eos,
        };
        let total =
            cfg.lengths.iter().sum::<usize>() * cfg.tasks.len() * cfg.seeds.len() * cfg.samples;
        let bar = posenc_train::token_bar(self.quiet, total);
        let done: Vec<(String, usize, u64, usize)> = rows
            .iter()
            .map(|r| {
                (
                    r.record.task.clone(),
                    r.record.length,
                    r.record.seed,
                    r.record.sample,
                )
            })
            .collect();
        bar.inc(
            rows.iter()
                .filter(|r| cfg.lengths.contains(&r.record.length))
                .map(|r| r.record.length as u64)
                .sum(),
        );
        ruler::run(
            &subject,
            &cfg,
            |task, length, seed, sample| {
                done.iter()
                    .any(|d| (d.0.as_str(), d.1, d.2, d.3) == (task, length, seed, sample))
            },
            |n| bar.inc(n as u64),
            |record| {
                bar.set_message(format!(
                    "{} at {}: {:.2}",
                    record.task, record.length, record.score
                ));
                rows.push(RulerRow {
                    model: spec.clone(),
                    rope_scaling: scaling.clone(),
                    record,
                });
                if let Some(path) = &self.out {
                    let json = serde_json::to_string_pretty(&rows)
                        .map_err(posenc_train::Error::callback)?;
                    posenc_io::write_atomic(path, format!("{json}\n").as_bytes())
                        .map_err(posenc_train::Error::callback)?;
                }
                Ok(())
            },
        )?;
        bar.finish_and_clear();
        // The rows of this configuration (the file may hold more).
        let records: Vec<RulerRecord> = rows
            .iter()
            .map(|r| r.record.clone())
            .filter(|r| {
                cfg.tasks.contains(&r.task)
                    && cfg.lengths.contains(&r.length)
                    && cfg.seeds.contains(&r.seed)
                    && r.sample < cfg.samples
            })
            .collect();
        let table = ruler::table(&cfg, &records);
        match self.format {
            Format::Json => {
                let rows: Vec<&RulerRow> = rows.iter().collect();
                writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
            }
            Format::Text => {
                writeln!(
                    out,
                    "{}: RULER score (the share of the expected answers given), mean ± sd over {} seed(s) of {} sample(s)\n",
                    lm.describe(),
                    cfg.seeds.len(),
                    cfg.samples
                )?;
                write!(out, "| task |")?;
                for l in &cfg.lengths {
                    write!(out, " {l} |")?;
                }
                write!(out, "\n|---|")?;
                for _ in &cfg.lengths {
                    write!(out, "---:|")?;
                }
                writeln!(out)?;
                for task in &cfg.tasks {
                    write!(out, "| {task} |")?;
                    for (_, _, mean, sd, _) in table.iter().filter(|r| &r.0 == task) {
                        write!(out, " {mean:.2} ± {sd:.2} |")?;
                    }
                    writeln!(out)?;
                }
            }
        }
        out.flush()?;
        if let Some(path) = &self.plot {
            let cell = |task: &str, length: usize| {
                table
                    .iter()
                    .find(|r| r.0 == task && r.1 == length)
                    .map_or((f32::NAN, String::new()), |r| {
                        (r.2 as f32, format!("{:.2} ± {:.2}", r.2, r.3))
                    })
            };
            let values: Vec<Vec<f32>> = cfg
                .tasks
                .iter()
                .map(|t| cfg.lengths.iter().map(|&l| cell(t, l).0).collect())
                .collect();
            let text: Vec<Vec<String>> = cfg
                .tasks
                .iter()
                .map(|t| cfg.lengths.iter().map(|&l| cell(t, l).1).collect())
                .collect();
            let x_ticks: Vec<String> = cfg.lengths.iter().map(|l| l.to_string()).collect();
            let name = Path::new(&spec)
                .file_name()
                .map_or_else(|| spec.clone(), |n| n.to_string_lossy().into_owned());
            let title = format!(
                "RULER: {name}{}, mean over {} seeds",
                scaling
                    .as_deref()
                    .map_or(String::new(), |s| format!(", rope_scaling {s}")),
                cfg.seeds.len()
            );
            posenc_plot::passkey::scores(
                &posenc_plot::passkey::Grid {
                    what: "score",
                    values: &values,
                    text: &text,
                    x_desc: "prompt tokens",
                    x_ticks: &x_ticks,
                    y_desc: "task",
                    y_ticks: &cfg.tasks,
                },
                &title,
                path,
            )?;
        }
        Ok(())
    }
}
