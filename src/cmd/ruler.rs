//! `posenc lm ruler`: a subset of RULER at exact lengths, resumable record by record.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use posenc_lm::passkey::Subject;
use posenc_lm::ruler::{self, RulerConfig, RulerRow};

use super::model::{self, ModelArgs};
use super::Format;

/// `posenc lm ruler`
#[derive(Args, Debug)]
pub struct RulerArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Tasks: niah_single, niah_multikey, niah_multivalue, niah_multiquery, vt, cwe, and
    /// fwe, niah_multikey_3 (UUID needles) and threading (a thread of four hops).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "niah_single,niah_multikey,niah_multivalue,niah_multiquery,vt,cwe"
    )]
    tasks: Vec<String>,
    /// Prompt lengths in tokens.
    #[arg(long, value_delimiter = ',', default_value = "4096,8192,16384,32768")]
    lengths: Vec<usize>,
    /// The first seed of the haystacks (keys, values, where the needles go).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Seeds, counted up from --seed: the table is then their mean ± sd.
    #[arg(long, default_value_t = 3, value_parser = super::seed_count)]
    seeds: usize,
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

/// The rows already in `path`, checked to be this model's (a file may hold several
/// scalings of one model, each resumed apart).
fn earlier(path: &Path, model: &str) -> Result<Vec<RulerRow>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let rows = ruler::load_rows(path).context("give another --out")?;
    if let Some(other) = rows.iter().find(|r| r.model != model) {
        anyhow::bail!(
            "{} holds records of model {}: give another --out for model {model}",
            path.display(),
            other.model,
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
            seeds: (self.seed..).take(self.seeds).collect(),
            samples: self.samples,
        };
        cfg.validate()?;
        let spec = self.model.spec(&default).to_string();
        let scaling = self.model.rope_scaling().map(String::from);
        let note = self.model.note(&default);
        let label = ruler::scaling_label(scaling.as_deref(), note.self_extend, note.kv_cache);
        let mut rows = match &self.out {
            Some(path) => earlier(path, &spec)?,
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
        // Past the trained context the scores may be noise: said before hours of work.
        let stretched = scaling.is_some() || self.model.self_extend().is_some();
        if let (false, Some(&longest)) = (stretched, cfg.lengths.iter().max()) {
            let what = "the longest prompt comes to";
            super::model::check_context(&lm, what, longest, None)?;
        }
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
        // This scaling's samples already in the file: not run again.
        let done: Vec<(String, usize, u64, usize)> = rows
            .iter()
            .filter(|r| r.scaling == label)
            .map(|r| {
                let x = &r.record;
                (x.task.clone(), x.length, x.seed, x.sample)
            })
            .collect();
        // They count as read.
        bar.inc(done.iter().map(|d| d.1 as u64).sum());
        if !self.quiet {
            let prompts = cfg.tasks.len() * cfg.seeds.len() * cfg.samples;
            let reads: Vec<(usize, usize)> = cfg
                .lengths
                .iter()
                .map(|&l| {
                    (
                        l,
                        prompts - done.iter().filter(|d| d.1 == l).count().min(prompts),
                    )
                })
                .collect();
            super::model::announce_long(&lm, "this RULER run", &reads)?;
        }
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
                    self_extend: note.self_extend,
                    kv_cache: note.kv_cache,
                    scaling: label.clone(),
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
        // The rows of this run's scaling and settings (the file may hold more).
        let mine: Vec<RulerRow> = rows
            .iter()
            .filter(|r| {
                let x = &r.record;
                r.scaling == label
                    && cfg.tasks.contains(&x.task)
                    && cfg.lengths.contains(&x.length)
                    && cfg.seeds.contains(&x.seed)
                    && x.sample < cfg.samples
            })
            .cloned()
            .collect();
        match self.format {
            Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&mine)?)?,
            Format::Text => {
                writeln!(
                    out,
                    "{}: RULER score, the share of the expected answers given\n",
                    lm.describe()
                )?;
                write!(out, "{}", ruler::markdown(&mine))?;
            }
        }
        out.flush()?;
        if let Some(path) = &self.plot {
            // Every scaling of this model in the file, side by side: a column per scaling
            // and length.
            let summaries = ruler::summaries(&rows);
            let columns: Vec<(&ruler::Summary, usize)> = summaries
                .iter()
                .flat_map(|s| s.cfg.lengths.iter().map(move |&l| (s, l)))
                .collect();
            let cell = |task: &str, (s, length): (&ruler::Summary, usize)| {
                s.table
                    .iter()
                    .find(|r| r.0 == task && r.1 == length && r.4 > 0)
                    .map_or((f32::NAN, String::new()), |r| {
                        (r.2 as f32, format!("{:.2} ± {:.2}", r.2, r.3))
                    })
            };
            let tasks: Vec<String> = ruler::TASKS
                .iter()
                .filter(|t| {
                    summaries
                        .iter()
                        .any(|s| s.cfg.tasks.iter().any(|x| x == *t))
                })
                .map(|t| t.to_string())
                .collect();
            // A row per scaling and length, a column per task under its short name (a
            // label set on end fits a short word).
            let values: Vec<Vec<f32>> = columns
                .iter()
                .map(|&c| tasks.iter().map(|t| cell(t, c).0).collect())
                .collect();
            let text: Vec<Vec<String>> = columns
                .iter()
                .map(|&c| tasks.iter().map(|t| cell(t, c).1).collect())
                .collect();
            let y_ticks: Vec<String> = columns
                .iter()
                .map(|(s, l)| format!("{l}, {}", s.scaling))
                .collect();
            let x_ticks: Vec<String> = tasks
                .iter()
                .map(|t| t.trim_start_matches("niah_").replace("multi", "m"))
                .collect();
            let name = Path::new(&spec)
                .file_name()
                .map_or_else(|| spec.clone(), |n| n.to_string_lossy().into_owned());
            let seeds: Vec<usize> = summaries.iter().map(|s| s.cfg.seeds.len()).collect();
            let title = format!(
                "RULER: {name}, {}",
                match (seeds.iter().min(), seeds.iter().max()) {
                    (Some(a), Some(b)) if a != b => format!("mean over {a}–{b} seeds"),
                    (Some(1), _) => "one seed".into(),
                    (None, _) => "no seeds".into(),
                    (Some(a), _) => format!("mean over {a} seeds"),
                }
            );
            posenc_plot::passkey::scores(
                &posenc_plot::passkey::Grid {
                    what: "score",
                    values: &values,
                    text: &text,
                    x_desc:
                        "task (niah_ single, mkey, mvalue, mquery, mkey_3; vt; cwe; fwe; threading)",
                    x_ticks: &x_ticks,
                    y_desc: "prompt tokens, scaling",
                    y_ticks: &y_ticks,
                },
                &title,
                path,
            )?;
        }
        Ok(())
    }
}
