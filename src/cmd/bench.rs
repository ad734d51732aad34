//! `posenc bench …`: speed measurements, reported with their configuration.

use std::io::Write;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use posenc_kotoba::bench::{check_steps, median, time_training_step, StepBench, StepTiming};
use posenc_kotoba::trainer::TrainConfig;
use posenc_transformer::Config;
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// `posenc bench`
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// One training step (forward, backward, AdamW): the reference configuration
    /// (d_model 256, 8 heads, 3+3 layers, d_ff 1024, vocab 1000, batch 64, length 24),
    /// then the toy translation model. When a Python with PyTorch is found
    /// ($POSENC_PYTHON, else .venv/bin/python, else python3), the same reference step in
    /// PyTorch (scripts/bench_train_torch.py) runs in the same invocation and the ratio is
    /// printed. The two sides take their steps alternately, so that machine noise hits
    /// both alike, and the ratio is the median of the per-step ratios.
    Train {
        /// Timed steps (after 2 untimed), of each side.
        #[arg(long, default_value_t = 10)]
        steps: usize,
        /// Do not run the PyTorch comparison.
        #[arg(long)]
        no_torch: bool,
        /// Where to compute: cpu; cuda or cuda:N (built with --features cuda); metal or metal:N
        /// (--features metal). The PyTorch comparison runs on the same device.
        #[arg(long, default_value = "cpu")]
        device: super::DeviceArg,
    },
    /// Sentence embeddings of 256 fixed sentences of about 100 word pieces in batches of
    /// 32 with all-MiniLM-L6-v2 (scripts/fetch_minilm.sh); with a Python that has PyTorch
    /// and transformers, the same embeddings by transformers' `BertModel`
    /// (scripts/bench_embed_torch.py) in the same invocation, passes alternating, the
    /// median of the per-pass ratios, and how far the two sides' embeddings are apart.
    Embed {
        /// The sentence-transformers model directory [default: .cache/all-MiniLM-L6-v2].
        #[arg(long)]
        model: Option<std::path::PathBuf>,
        /// Timed passes over all sentences (after 1 untimed).
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Do not run the PyTorch comparison.
        #[arg(long)]
        no_torch: bool,
        /// Where to compute: cpu; cuda or cuda:N (built with --features cuda); metal or metal:N
        /// (--features metal). The PyTorch comparison runs on the same device.
        #[arg(long, default_value = "cpu")]
        device: super::DeviceArg,
    },
    /// A GGUF model generating, quantized or `--f32` (default: SmolLM2-135M-Instruct Q4_1, fetched by
    /// scripts/fetch_smollm2.sh): prefill tokens/s at each prompt length, decode tokens/s
    /// after each depth of cache, time to first token and peak memory, ours against llama.cpp's `llama-bench` and
    /// `llama-simple` (scripts/build_llama_cpp.sh) on the same file and threads. Rounds
    /// alternate, and each ratio is the median of the per-round ratios. Without llama.cpp
    /// it says how to build it and reports ours alone. On a GPU (`--device cuda`) ours runs
    /// alone, after one untimed round (the first use of each kernel loads it), the device
    /// synchronized before each clock is read.
    Generate {
        /// The GGUF file [default: the fetched SmolLM2-135M-Instruct Q4_1].
        #[arg(long)]
        model: Option<std::path::PathBuf>,
        /// Prompt lengths to time reading (prefill), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "512,4096")]
        prompts: Vec<usize>,
        /// Tokens to generate one at a time (decode).
        #[arg(long, default_value_t = 128)]
        decode: usize,
        /// Cached positions each decode starts after, comma-separated (llama-bench's
        /// `-d`): 0 is an empty cache; a long one shows what attention over it costs.
        #[arg(long, value_delimiter = ',', default_value = "0,4096")]
        depths: Vec<usize>,
        /// Alternating rounds.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Do not run llama.cpp.
        #[arg(long)]
        no_llama_cpp: bool,
        /// Dequantize the weights to f32 instead of multiplying them quantized.
        #[arg(long)]
        f32: bool,
        /// Where ours computes: cpu; cuda or cuda:N (built with --features cuda); metal or
        /// metal:N (--features metal). llama.cpp (a CPU build) runs only against the CPU.
        #[arg(long, default_value = "cpu")]
        device: super::DeviceArg,
    },
}

/// The benchmark's sentences: as many and as long as the speed issue's table.
const EMBED_SENTENCES: usize = 256;
const EMBED_WORDS: usize = 90;
const EMBED_BATCH: usize = 32;

impl BenchCommand {
    /// Runs the benchmark.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        match self {
            BenchCommand::Embed {
                model,
                rounds,
                no_torch,
                device,
            } => bench_embed(model, rounds, no_torch, &device.0, out),
            BenchCommand::Train {
                steps,
                no_torch,
                device,
            } => bench_train(steps, no_torch, &device.0, out),
            BenchCommand::Generate {
                model,
                prompts,
                decode,
                depths,
                rounds,
                no_llama_cpp,
                f32,
                device,
            } => {
                let model = match model {
                    Some(path) => path,
                    None => posenc_llama::model::fetched_smollm2()?,
                };
                super::bench_generate::bench_generate(
                    super::bench_generate::GenerateBench {
                        model,
                        prompts,
                        decode,
                        depths,
                        rounds,
                        no_llama_cpp,
                        precision: match f32 {
                            true => posenc_llama::Precision::F32,
                            false => posenc_llama::Precision::Quantized,
                        },
                        device: device.0,
                    },
                    out,
                )
            }
        }
    }
}

/// Untimed steps of each side before the timed ones.
const WARMUP_STEPS: usize = 2;

fn bench_train(
    steps: usize,
    no_torch: bool,
    device: &candle_core::Device,
    out: &mut impl Write,
) -> Result<()> {
    check_steps(steps)?;
    let (batch, len) = (64, 24);
    let cfg = Config::benchmark_reference();
    let mut ours = StepBench::new(&cfg, batch, len, device)?;
    let mut torch = match no_torch {
        true => None,
        false => Some(TorchWorker::start::<TorchVersion>(
            "scripts/bench_train_torch.py",
            &[
                ("--d-model", cfg.d_model),
                ("--heads", cfg.heads),
                ("--layers", cfg.encoder_layers),
                ("--d-ff", cfg.d_ff),
                ("--vocab", cfg.src_vocab_size),
                ("--batch", batch),
                ("--len", len),
                ("--threads", candle_core::utils::get_num_threads()),
            ]
            .map(|(flag, value)| (flag, value.to_string()))
            .into_iter()
            .chain([("--device", torch_device(device))])
            .collect::<Vec<_>>(),
        )),
    };
    // Alternate: one step of ours, one of PyTorch's.
    let (mut mine, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..WARMUP_STEPS + steps {
        let t = ours.step()?;
        let s = TorchWorker::next_of::<_, StepTiming>(&mut torch);
        if i >= WARMUP_STEPS {
            mine.push(t);
            theirs.extend(s);
        }
    }
    drop(ours);
    let toy = TrainConfig::default();
    let mut toy_model = toy.model.clone();
    (toy_model.src_vocab_size, toy_model.tgt_vocab_size) = (80, 81);
    let toy_timing =
        time_training_step(&toy_model, toy.batch_size, 20, WARMUP_STEPS, steps, device)?;

    writeln!(
        out,
        "| configuration | forward ms | backward ms | optimizer ms | step ms |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|")?;
    let row = |out: &mut dyn Write, name: &str, t: &StepTiming| {
        writeln!(
            out,
            "| {name} | {:.1} | {:.1} | {:.1} | {:.1} |",
            t.forward_ms, t.backward_ms, t.optimizer_ms, t.total_ms
        )
    };
    row(
        out,
        "reference (d256, 3+3, batch 64 × 24)",
        &StepTiming::median(&mine)?,
    )?;
    row(out, "toy (d64, 2+2, batch 64 × 20)", &toy_timing)?;
    match torch {
        None => {}
        Some(Err(e)) => skipped(out, &e)?,
        Some(Ok((_, v))) => {
            let name = format!(
                "PyTorch {} ({}, {} threads), reference",
                v.version, v.device, v.threads
            );
            row(out, &name, &StepTiming::median(&theirs)?)?;
            let ratio = |f: fn(&StepTiming) -> f64| {
                median(mine.iter().zip(&theirs).map(|(a, b)| f(b) / f(a)).collect())
            };
            writeln!(
                out,
                "\nspeed relative to PyTorch (its time / ours, the median of {steps} alternating steps; > 1: faster): step {:.2}×, forward {:.2}×, backward {:.2}×",
                ratio(|t| t.total_ms),
                ratio(|t| t.forward_ms),
                ratio(|t| t.backward_ms)
            )?;
        }
    }
    Ok(())
}

/// The first line a PyTorch script prints: which PyTorch, on how many threads.
#[derive(Debug, Deserialize)]
struct TorchVersion {
    #[serde(rename = "torch")]
    version: String,
    threads: usize,
    device: String,
}

/// PyTorch's name of `device`: `cpu`, `cuda:N`, or `mps` for Metal.
fn torch_device(device: &candle_core::Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { .. } => "mps".into(),
    }
}

/// How to get the Python environment the comparison runs in.
const INSTALL: &str =
    "install it with: python3 -m venv .venv && .venv/bin/pip install -r scripts/requirements.txt";

fn skipped(out: &mut impl Write, e: &anyhow::Error) -> Result<()> {
    writeln!(out, "\nPyTorch comparison skipped: {e:#}")?;
    Ok(())
}

fn bench_embed(
    model: Option<std::path::PathBuf>,
    rounds: usize,
    no_torch: bool,
    device: &candle_core::Device,
    out: &mut impl Write,
) -> Result<()> {
    use posenc_embed::sentence::{benchmark_sentences, SentenceEncoder};
    posenc::limits::check_positive("rounds", rounds, 1000)?;
    let dir = match model {
        Some(dir) => dir,
        None => posenc_embed::resolve::fetched_minilm()?,
    };
    let encoder = SentenceEncoder::load_on(&dir, device)?;
    let sentences = benchmark_sentences(EMBED_SENTENCES, EMBED_WORDS);
    let first = encoder.embed(&sentences, EMBED_BATCH)?;
    let checksum: f64 = first.iter().flatten().map(|x| f64::from(x.abs())).sum();
    let threads = candle_core::utils::get_num_threads();
    // The script reads the sentences once, before its header line.
    // Its first pass's embeddings come back in a file, to be compared with ours.
    let dump = tempfile::NamedTempFile::new().context("creating a temporary file")?;
    let mut torch = match no_torch {
        true => None,
        false => Some(write_sentences(&sentences).and_then(|file| {
            TorchWorker::start::<TorchEmbedHeader>(
                "scripts/bench_embed_torch.py",
                &[
                    ("--model", dir.display().to_string()),
                    ("--sentences", file.path().display().to_string()),
                    ("--batch", EMBED_BATCH.to_string()),
                    ("--threads", threads.to_string()),
                    ("--device", torch_device(device)),
                    ("--dump", dump.path().display().to_string()),
                ],
            )
        })),
    };
    // Alternate: one pass of ours, one of PyTorch's.
    let (mut mine, mut theirs) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let t = std::time::Instant::now();
        encoder.embed(&sentences, EMBED_BATCH)?;
        mine.push(t.elapsed().as_secs_f64() * 1e3);
        theirs.extend(TorchWorker::next_of::<_, TorchPass>(&mut torch).map(|p| p.ms));
    }
    writeln!(
        out,
        "{EMBED_SENTENCES} sentences of {EMBED_WORDS} words, batches of {EMBED_BATCH}, median of {rounds} passes, {threads} threads"
    )?;
    writeln!(out, "| implementation | ms per pass |\n|---|---:|")?;
    writeln!(out, "| posenc | {:.0} |", median(mine.clone()))?;
    match torch {
        None => {}
        Some(Err(e)) => skipped(out, &e)?,
        Some(Ok((_, h))) => {
            writeln!(
                out,
                "| PyTorch {} ({}, {} threads), transformers' BertModel | {:.0} |",
                h.version,
                h.device,
                h.threads,
                median(theirs.clone())
            )?;
            let ratios = mine.iter().zip(&theirs).map(|(a, b)| b / a).collect();
            writeln!(
                out,
                "\nspeed relative to PyTorch (its time / ours, the median of {rounds} alternating passes; > 1: faster): {:.2}×; embeddings' checksums {checksum:.4} and {:.4}",
                median(ratios),
                h.checksum
            )?;
            let theirs: Vec<Vec<f32>> = serde_json::from_slice(
                &std::fs::read(dump.path()).context("reading PyTorch's embeddings")?,
            )
            .context("reading PyTorch's embeddings")?;
            let (diff, cosine) = embedding_distance(&first, &theirs)?;
            writeln!(
                out,
                "embeddings against PyTorch's: largest absolute difference {diff:.2e}, smallest cosine similarity {cosine:.7}"
            )?;
        }
    }
    Ok(())
}

/// The largest absolute difference between two sets of embeddings, and the smallest
/// cosine similarity of a pair; an error if their shapes differ.
fn embedding_distance(a: &[Vec<f32>], b: &[Vec<f32>]) -> Result<(f64, f64)> {
    anyhow::ensure!(
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.len() == y.len()),
        "PyTorch's embeddings are not of the same shape as ours"
    );
    let (mut diff, mut cosine) = (0f64, f64::INFINITY);
    for (x, y) in a.iter().zip(b) {
        let (mut dot, mut xx, mut yy) = (0f64, 0f64, 0f64);
        for (&p, &q) in x.iter().zip(y) {
            let (p, q) = (f64::from(p), f64::from(q));
            diff = diff.max((p - q).abs());
            (dot, xx, yy) = (dot + p * q, xx + p * p, yy + q * q);
        }
        cosine = cosine.min(dot / (xx.sqrt() * yy.sqrt()).max(f64::MIN_POSITIVE));
    }
    Ok((diff, cosine))
}

/// The benchmark's sentences in a temporary JSON file, for the PyTorch script.
fn write_sentences(sentences: &[String]) -> Result<tempfile::NamedTempFile> {
    let mut file = tempfile::NamedTempFile::new().context("creating a temporary file")?;
    file.write_all(&serde_json::to_vec(sentences)?)
        .context("writing the sentences to a temporary file")?;
    Ok(file)
}

/// The first line `scripts/bench_embed_torch.py` prints, after its untimed pass.
#[derive(Debug, Deserialize)]
struct TorchEmbedHeader {
    checksum: f64,
    #[serde(rename = "torch")]
    version: String,
    threads: usize,
    device: String,
}

/// One timed pass of `scripts/bench_embed_torch.py`.
#[derive(Debug, Deserialize)]
struct TorchPass {
    ms: f64,
}

/// A committed PyTorch script serving timed units of work, run with a Python that has
/// PyTorch ($POSENC_PYTHON, else .venv/bin/python, else python3): it prints one JSON
/// header line when ready, then one JSON line per line it reads, and ends at the end of
/// its input. A script that gives no answer for [`TorchWorker::timeout`] is stopped.
struct TorchWorker {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    /// The script's output lines, read by a thread of their own so that waiting for one
    /// can time out.
    lines: std::sync::mpsc::Receiver<std::io::Result<String>>,
    timeout: std::time::Duration,
    stderr: tempfile::NamedTempFile,
    python: std::path::PathBuf,
}

impl TorchWorker {
    /// Starts `script` with `args` and reads its header line.
    fn start<H: DeserializeOwned>(script: &str, args: &[(&str, String)]) -> Result<(Self, H)> {
        let timeout = Self::timeout()?;
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let python = std::env::var_os("POSENC_PYTHON")
            .map(std::path::PathBuf::from)
            .or_else(|| Some(root.join(".venv/bin/python")).filter(|p| p.exists()))
            .unwrap_or_else(|| "python3".into());
        // Its diagnostics go to a file, read only if it fails: a pipe nobody read could
        // fill and stall it.
        let stderr = tempfile::NamedTempFile::new().context("creating a temporary file")?;
        let mut cmd = std::process::Command::new(&python);
        cmd.arg(root.join(script));
        for (flag, value) in args {
            cmd.arg(flag).arg(value);
        }
        let mut child = cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(stderr.reopen().context("opening a temporary file")?)
            .spawn()
            .with_context(|| format!("running {} ({INSTALL})", python.display()))?;
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let stdout = stdout.context("no pipe from the PyTorch script")?;
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut worker = Self {
            child,
            stdin,
            lines,
            timeout,
            stderr,
            python,
        };
        let header = worker.line()?;
        Ok((worker, header))
    }

    /// The next unit's timing from a worker that is still running (`Some(Ok(..))`); one
    /// that fails now is replaced by its error, so the comparison is reported skipped.
    fn next_of<H, T: DeserializeOwned>(torch: &mut Option<Result<(Self, H)>>) -> Option<T> {
        let Some(Ok((worker, _))) = torch else {
            return None;
        };
        match worker.next() {
            Ok(t) => Some(t),
            Err(e) => {
                *torch = Some(Err(e));
                None
            }
        }
    }

    /// Asks for one more unit of work and reads its timing.
    fn next<T: DeserializeOwned>(&mut self) -> Result<T> {
        let stdin = self
            .stdin
            .as_mut()
            .context("the PyTorch script's input is closed")?;
        // A script that has ended cannot take the line: reading its output then says why.
        let _ = stdin.write_all(b"\n").and_then(|()| stdin.flush());
        self.line()
    }

    /// How long to wait for one answer of the script: `$POSENC_TORCH_TIMEOUT` seconds,
    /// else 600 (its first answer comes after loading PyTorch and one untimed pass).
    fn timeout() -> Result<std::time::Duration> {
        let Some(value) = std::env::var_os("POSENC_TORCH_TIMEOUT") else {
            return Ok(std::time::Duration::from_secs(600));
        };
        value
            .to_str()
            .and_then(|v| v.parse::<f64>().ok())
            .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
            .filter(|d| !d.is_zero())
            .with_context(|| {
                format!("POSENC_TORCH_TIMEOUT must be a positive number of seconds, not {value:?}")
            })
    }

    /// The next JSON line the script prints; if it ended instead, or gave no answer in
    /// time (it is then stopped), why.
    fn line<T: DeserializeOwned>(&mut self) -> Result<T> {
        use std::sync::mpsc::RecvTimeoutError;
        let line = match self.lines.recv_timeout(self.timeout) {
            Ok(line) => line.context("reading the PyTorch script's output")?,
            Err(RecvTimeoutError::Disconnected) => {
                // Its output ended: so did it.
                let _ = self.child.wait();
                let stderr = std::fs::read_to_string(self.stderr.path()).unwrap_or_default();
                let last = stderr.lines().last().unwrap_or("it printed nothing");
                bail!(
                    "{} could not run the PyTorch script: {last}\n({INSTALL})",
                    self.python.display()
                );
            }
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                bail!(
                    "the PyTorch script gave no answer in {} s and was stopped (POSENC_TORCH_TIMEOUT sets the limit)",
                    self.timeout.as_secs_f64()
                );
            }
        };
        serde_json::from_str(line.trim()).context("reading the PyTorch script's output")
    }
}

impl Drop for TorchWorker {
    fn drop(&mut self) {
        // The end of its input ends it.
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::embedding_distance;

    #[test]
    fn embedding_distance_is_the_largest_difference_and_the_smallest_cosine() {
        let a = vec![vec![1.0, 0.0], vec![0.6, 0.8]];
        assert_eq!(embedding_distance(&a, &a).unwrap().0, 0.0);
        // The second pair is 90° apart (cosine 0); the first differs by 0.5 at most.
        let b = vec![vec![1.0, 0.5], vec![-0.8, 0.6]];
        let (diff, cosine) = embedding_distance(&a, &b).unwrap();
        assert!((diff - 1.4).abs() < 1e-6, "{diff}");
        assert!(cosine.abs() < 1e-6, "{cosine}");
        // A different count of embeddings, or of their values, is an error.
        assert!(embedding_distance(&a, &b[..1]).is_err());
        assert!(embedding_distance(&a, &[vec![1.0], vec![0.0, 1.0]]).is_err());
    }
}
