//! `posenc bench generate`: a GGUF model generating, ours against llama.cpp's
//! `llama-bench` and `llama-simple` (built by scripts/build_llama_cpp.sh) on the same file
//! and thread count, in one invocation, rounds alternating so that machine noise hits both.
//! On a GPU, ours alone (llama.cpp's build here is the CPU's), after one untimed round.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use candle_core::{Device, Tensor};
use posenc_error::{ensure, Context};
use posenc_kotoba::bench::median;
use posenc_llama::{Llama, Precision};
use posenc_transformer::KvType;

use crate::Result;

/// What `posenc bench generate` measures.
pub struct GenerateBench {
    /// The GGUF file.
    pub model: PathBuf,
    /// Prompt lengths of the prefill measurements.
    pub prompts: Vec<usize>,
    /// Tokens generated one at a time in the decode measurement.
    pub decode: usize,
    /// Cached positions each decode measurement starts after (0: an empty cache).
    pub depths: Vec<usize>,
    /// Alternating rounds.
    pub rounds: usize,
    /// Skip llama.cpp.
    pub no_llama_cpp: bool,
    /// Quantized weights (llama.cpp's way) or dequantized to f32.
    pub precision: Precision,
    /// Where ours computes.
    pub device: Device,
    /// What both keep the cache as (llama-bench's `-ctk`/`-ctv`); `None`: each its default
    /// (f16 for a quantized model, f32 for ours in f32).
    pub kv_cache: Option<KvType>,
}

/// One side's figures for one round: prefill tokens/s per prompt length, decode tokens/s
/// per depth.
#[derive(Debug, Clone, Default)]
struct Round {
    prefill: Vec<f64>,
    decode: Vec<f64>,
}

/// llama.cpp's tools, where scripts/build_llama_cpp.sh puts them.
fn llama_cpp_tool(name: &str) -> Option<PathBuf> {
    let path = posenc_io::cache_dir().join("llama.cpp").join(name);
    path.is_file().then_some(path)
}

/// The CPU's model name, for the report.
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Runs `cmd` to its end; its output, and its peak resident memory in MB as last read
/// from `/proc/<pid>/status` (`VmHWM`, which only grows) every 20 ms while it ran.
fn run_watched(cmd: &mut Command) -> Result<(std::process::Output, Option<f64>)> {
    use std::process::Stdio;
    let name = format!("{:?}", cmd.get_program());
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {name}"))?;
    let status_file = std::path::PathBuf::from(format!("/proc/{}/status", child.id()));
    // The pipes are drained by threads, so that a full pipe cannot stall the child.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let mut peak = None;
    let status = loop {
        if let Some(status) = child
            .try_wait()
            .with_context(|| format!("waiting for {name}"))?
        {
            break status;
        }
        peak = posenc_train::memory::peak_rss_mb_in(&status_file).or(peak);
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let output = std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    ensure!(
        output.status.success(),
        "{name} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((output, peak))
}

/// llama-bench's settings as its JSON records them (build, backends, threads, batch sizes,
/// flash attention, the cache's types, mmap, the CPU), for the record beside the table.
fn llama_cpp_settings(run: &serde_json::Value) -> String {
    let field = |k: &str| match &run[k] {
        serde_json::Value::Null => "?".to_string(),
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    format!(
        "llama.cpp as run: llama-bench build {} ({}), backends {}, -t {}, -r 1 per round, batch {} / ubatch {}, flash attention {}, cache {} / {}, mmap {}; CPU: {}",
        field("build_commit"),
        field("build_number"),
        field("backends"),
        field("n_threads"),
        field("n_batch"),
        field("n_ubatch"),
        field("flash_attn"),
        field("type_k"),
        field("type_v"),
        field("use_mmap"),
        field("cpu_info"),
    )
}

/// One `llama-bench` run of every prompt length and the decode from an empty cache, then
/// (for depths past 0) one of the decode after each depth, one repetition each; with the
/// larger peak memory of the two, and llama-bench's settings.
fn llama_cpp_round(
    bench: &Path,
    cfg: &GenerateBench,
    threads: usize,
) -> Result<(Round, Option<f64>, String)> {
    let list = |ns: &[usize]| {
        ns.iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    // A quantized cache's values are read by llama.cpp's flash attention only. llama.cpp
    // turns a quantized cache's rows by a Walsh–Hadamard matrix unless told not to: as
    // ours, turned or not.
    let cache_args = match cfg.kv_cache {
        Some(t) => vec!["-ctk", t.ggml_name(), "-ctv", t.ggml_name(), "-fa", "on"],
        None => Vec::new(),
    };
    let plain_blocks = cfg
        .kv_cache
        .is_some_and(|t| t.dtype().is_none() && !t.turned());
    let run = |args: &[&str]| -> Result<(Vec<serde_json::Value>, Option<f64>)> {
        let mut command = Command::new(bench);
        if plain_blocks {
            command.env("LLAMA_ATTN_ROT_DISABLE", "1");
        }
        let (out, peak) = run_watched(
            command
                .arg("-m")
                .arg(&cfg.model)
                .args(args)
                .args(&cache_args)
                .args(["-r", "1", "-o", "json", "-t", &threads.to_string()]),
        )?;
        let runs = serde_json::from_slice(&out.stdout).context("reading llama-bench's JSON")?;
        Ok((runs, peak))
    };
    let decode = cfg.decode.to_string();
    // The decode from an empty cache only where a depth of 0 is asked for.
    let empty = match cfg.depths.contains(&0) {
        true => decode.as_str(),
        false => "0",
    };
    let (mut runs, mut peak) = run(&["-p", &list(&cfg.prompts), "-n", empty])?;
    let mut settings = runs.first().map_or(String::new(), llama_cpp_settings);
    if plain_blocks {
        settings.push_str("; LLAMA_ATTN_ROT_DISABLE=1 (its cache's rows not turned, as ours)");
    }
    let deep: Vec<usize> = cfg.depths.iter().copied().filter(|&d| d > 0).collect();
    if !deep.is_empty() {
        let (more, deep_peak) = run(&["-p", "0", "-n", &decode, "-d", &list(&deep)])?;
        runs.extend(more);
        peak = [peak, deep_peak].into_iter().flatten().reduce(f64::max);
    }
    let rate = |prompt: usize, gen: usize, depth: usize| -> Result<f64> {
        runs.iter()
            .find(|r| {
                r["n_prompt"] == prompt
                    && r["n_gen"] == gen
                    && r["n_depth"].as_u64().unwrap_or(0) == depth as u64
            })
            .and_then(|r| r["avg_ts"].as_f64())
            .with_context(|| {
                format!("llama-bench printed no run of -p {prompt} -n {gen} -d {depth}")
            })
            .map_err(Into::into)
    };
    let round = Round {
        prefill: cfg
            .prompts
            .iter()
            .map(|&n| rate(n, 0, 0))
            .collect::<Result<_>>()?,
        decode: cfg
            .depths
            .iter()
            .map(|&d| rate(0, cfg.decode, d))
            .collect::<Result<_>>()?,
    };
    Ok((round, peak, settings))
}

/// One round of ours: each prefill into a fresh cache; then, for each depth, that many
/// tokens read into a fresh cache (not timed) and `decode` single-token steps after them
/// (as llama-bench's `tg` test: fixed tokens, no sampling). A GPU computes asynchronously:
/// each clock is read after the device has finished.
fn our_round(llama: &Llama, ids: &[u32], cfg: &GenerateBench) -> Result<Round> {
    let dev = &cfg.device;
    let mut prefill = Vec::new();
    for &n in &cfg.prompts {
        let x = Tensor::new(&ids[..n], dev)?.unsqueeze(0)?;
        let mut cache = llama.model.cache(n);
        dev.synchronize()?;
        let t = Instant::now();
        llama.model.step(&x, &mut cache)?;
        dev.synchronize()?;
        prefill.push(n as f64 / t.elapsed().as_secs_f64());
    }
    let mut decode = Vec::new();
    for &depth in &cfg.depths {
        let mut cache = llama.model.cache(depth + cfg.decode);
        if depth > 0 {
            llama
                .model
                .step(&Tensor::new(&ids[..depth], dev)?.unsqueeze(0)?, &mut cache)?;
        }
        dev.synchronize()?;
        let t = Instant::now();
        for &id in &ids[depth..depth + cfg.decode] {
            let x = Tensor::new(&[id], dev)?.unsqueeze(0)?;
            llama.model.step(&x, &mut cache)?;
        }
        dev.synchronize()?;
        decode.push(cfg.decode as f64 / t.elapsed().as_secs_f64());
    }
    Ok(Round { prefill, decode })
}

/// Seconds from start to exit of `cmd`: loading, reading a short prompt, one token.
fn wall(cmd: &mut Command) -> Result<f64> {
    let t = Instant::now();
    run_watched(cmd)?;
    Ok(t.elapsed().as_secs_f64())
}

/// The device in the report: the CPU's model name, or the GPU as `--device` names it.
fn device_name(device: &Device) -> String {
    if device.is_cpu() {
        cpu_name()
    } else {
        device_arg(device)
    }
}

/// `--device` as `posenc generate` takes it, for the time-to-first-token processes.
fn device_arg(device: &Device) -> String {
    crate::device_spec(device)
}

/// A prompt for the time-to-first-token measurement.
const SHORT_PROMPT: &str = "The capital of France is";

/// Runs the benchmark and writes its report.
///
/// # Errors
/// Settings out of range; a model that does not load; llama.cpp failing; a failed write.
pub fn generate(cfg: GenerateBench, out: &mut impl Write) -> Result<()> {
    posenc::limits::check_positive("rounds", cfg.rounds, 1000)?;
    posenc::limits::check_positive("decode tokens", cfg.decode, 4096)?;
    ensure!(!cfg.prompts.is_empty(), "give at least one prompt length");
    for &n in &cfg.prompts {
        posenc::limits::check_positive("prompt length", n, 32_768)?;
    }
    ensure!(
        !cfg.depths.is_empty(),
        "give at least one depth (0: an empty cache)"
    );
    for &d in &cfg.depths {
        posenc::limits::check("depth", d, 32_768)?;
    }
    let threads = candle_core::utils::get_num_threads();
    let mut llama = Llama::from_gguf(
        &cfg.model,
        cfg.precision,
        posenc::PairLayout::Interleaved,
        &cfg.device,
    )?;
    if let Some(kind) = cfg.kv_cache {
        llama.model.keep_cache_as(kind)?;
    }
    let on_cpu = cfg.device.is_cpu();
    let bench = match cfg.no_llama_cpp || !on_cpu {
        true => None,
        false => llama_cpp_tool("llama-bench"),
    };
    if !on_cpu && !cfg.no_llama_cpp {
        writeln!(
            out,
            "llama.cpp's build here runs on the CPU: ours on {} is timed alone",
            device_name(&cfg.device)
        )?;
    } else if !cfg.no_llama_cpp && bench.is_none() {
        writeln!(
            out,
            "llama.cpp is not built: run scripts/build_llama_cpp.sh to compare against it"
        )?;
    }
    // llama-bench's prompt is random tokens; ours is text, which costs the same per token.
    let deepest = cfg.depths.iter().copied().max().unwrap_or(0);
    let longest = cfg
        .prompts
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(deepest + cfg.decode);
    let sentence = "The positional encoding tells each attention head where a token stands. ";
    let ids = llama.encode(&sentence.repeat(longest / 10 + 1))?;
    ensure!(
        ids.len() >= longest,
        "the text has only {} tokens",
        ids.len()
    );
    writeln!(
        out,
        "{}, {threads} threads, posenc {} on {}, key/value cache {}: {} alternating rounds, medians",
        cfg.model
            .file_name()
            .map_or("model".into(), |n| n.to_string_lossy()),
        match cfg.precision {
            Precision::F32 => "f32",
            Precision::Quantized => "quantized",
        },
        device_name(&cfg.device),
        llama.model.cache_type(),
        cfg.rounds
    )?;
    // A GPU loads each kernel (and cuBLAS picks its own for each shape) on first use: an
    // untimed round first, so that the rounds time the work, not the loading.
    if !on_cpu {
        our_round(&llama, &ids, &cfg)?;
    }
    let (mut mine, mut theirs, mut llama_peak) = (Vec::new(), Vec::new(), None::<f64>);
    let mut llama_settings = String::new();
    let mut our_peak = None::<f64>;
    for _ in 0..cfg.rounds {
        // Each round's own peak, as each of llama-bench's processes has: what earlier
        // rounds freed is given back first (the binary keeps freed memory for reuse).
        posenc_train::memory::reset_peak_rss();
        mine.push(our_round(&llama, &ids, &cfg)?);
        let peak = posenc_train::memory::peak_rss_mb();
        our_peak = [our_peak, peak].into_iter().flatten().reduce(f64::max);
        if let Some(bench) = &bench {
            let (round, peak, settings) = llama_cpp_round(bench, &cfg, threads)?;
            theirs.push(round);
            llama_settings = settings;
            llama_peak = match (llama_peak, peak) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        }
    }
    // Time to first token: whole processes, loading included. llama.cpp's is llama-bench
    // reading the same prompt's length and generating one token, without warm-up.
    let exe = std::env::current_exe().context("finding this program")?;
    let short = llama.encode(SHORT_PROMPT)?.len();
    let (mut ttft_mine, mut ttft_theirs) = (Vec::new(), Vec::new());
    for _ in 0..cfg.rounds {
        ttft_mine.push(wall(
            Command::new(&exe)
                .arg("generate")
                .arg("--model")
                .arg(&cfg.model)
                .args(["--device", &device_arg(&cfg.device)])
                .args((cfg.precision == Precision::F32).then_some("--f32"))
                .args(["--max-tokens", "1", "--top-k", "1", SHORT_PROMPT]),
        )?);
        if let Some(bench) = &bench {
            ttft_theirs.push(wall(
                Command::new(bench)
                    .arg("-m")
                    .arg(&cfg.model)
                    .args([
                        "-p",
                        &short.to_string(),
                        "-n",
                        "1",
                        "-r",
                        "1",
                        "--no-warmup",
                    ])
                    .args(["-t", &threads.to_string()]),
            )?);
        }
    }

    // This machine's limits, on the CPU: the rate each measure could reach at most.
    let machine = on_cpu.then(|| crate::limits::Machine::measure(threads));
    if let Some(m) = &machine {
        writeln!(out, "{}", m.describe())?;
    }
    let config = &llama.config;
    let weight_bytes = std::fs::metadata(&cfg.model).map_or(0.0, |m| m.len() as f64);
    let per_value = llama.model.cache_type().bytes_per_value();
    let prefill_limit = |n: usize| {
        machine
            .as_ref()
            .map(|m| n as f64 * m.peak.per_second / crate::limits::llama_prefill_flops(config, n))
    };
    let decode_limit = |depth: usize| {
        machine.as_ref().map(|m| {
            let cached = depth as f64 + cfg.decode as f64 / 2.0;
            m.bandwidth.per_second
                / crate::limits::llama_decode_bytes(config, weight_bytes, cached, per_value)
        })
    };
    writeln!(
        out,
        "| measure | posenc | llama.cpp | speed, median of the rounds' ratios | speed, ratio of the medians | limit | posenc, of the limit | llama.cpp, of the limit |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    )?;
    let mut row =
        |name: String, a: Vec<f64>, b: Vec<f64>, unit: &str, higher: bool, limit: Option<f64>| {
            // As speed (> 1: we are faster).
            let speedup = match higher {
                true => crate::Speedup::of_rates(&a, &b),
                false => crate::Speedup::of_times(&a, &b),
            };
            let b = (!b.is_empty()).then(|| median(b));
            let a = median(a);
            // Seconds to the hundredth, rates to the tenth.
            let digits = if unit == "s" { 2 } else { 1 };
            let times = |r: Option<f64>| r.map_or("–".into(), |r| format!("{r:.2}×"));
            let of = |r: Option<f64>| match (r, limit) {
                (Some(r), Some(l)) if l > 0.0 => format!("{:.2}", r / l),
                _ => "–".into(),
            };
            writeln!(
                out,
                "| {name} | {a:.digits$} {unit} | {} | {} | {} | {} | {} | {} |",
                b.map_or("–".into(), |b| format!("{b:.digits$} {unit}")),
                times(speedup.map(|s| s.per_round)),
                times(speedup.map(|s| s.of_medians)),
                limit.map_or("–".into(), |l| format!("{l:.0} {unit}")),
                of(Some(a)),
                of(b),
            )
        };
    for (i, n) in cfg.prompts.iter().enumerate() {
        row(
            format!("prefill, {n}-token prompt"),
            mine.iter().map(|r| r.prefill[i]).collect(),
            theirs.iter().map(|r| r.prefill[i]).collect(),
            "tokens/s",
            true,
            prefill_limit(*n),
        )?;
    }
    for (i, depth) in cfg.depths.iter().enumerate() {
        let after = match depth {
            0 => String::new(),
            d => format!(" after {d} cached"),
        };
        row(
            format!("decode, {} tokens{after}", cfg.decode),
            mine.iter().map(|r| r.decode[i]).collect(),
            theirs.iter().map(|r| r.decode[i]).collect(),
            "tokens/s",
            true,
            decode_limit(*depth),
        )?;
    }
    row(
        "time to first token (whole process)".into(),
        ttft_mine,
        ttft_theirs,
        "s",
        false,
        None,
    )?;
    let mb = |m: Option<f64>| m.map_or("?".into(), |m| format!("{m:.0} MB"));
    writeln!(
        out,
        "| peak resident memory | {} | {} | | | | | |",
        mb(our_peak),
        if bench.is_some() {
            mb(llama_peak)
        } else {
            "–".into()
        }
    )?;
    writeln!(
        out,
        "\nspeed > 1: posenc is faster; the median of the rounds' ratios is the figure to quote (noise that hits both sides of a round cancels in it), the ratio of the medians what the two columns give; memory is the largest peak of one round (each of llama-bench's is a process; ours hold the model loaded once and give back what the round before freed)"
    )?;
    if machine.is_some() {
        writeln!(
            out,
            "limit: prefill, the FMA peak over the flops of the prompt's matrix products and causal attention (two a multiply-add); decode, the read bandwidth over the bytes a step reads, the file's {:.0} MB of weights and the cache's keys and values at the run's mean depth ({} bytes a value, as ours keeps them)",
            weight_bytes / 1e6,
            per_value
        )?;
    }
    if !llama_settings.is_empty() {
        writeln!(out, "{llama_settings}")?;
    }
    Ok(())
}
