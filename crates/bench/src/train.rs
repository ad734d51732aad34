//! `posenc bench train`: one training step of ours against PyTorch's.

use std::io::Write;

use posenc_kotoba::bench::{check_steps, time_training_step, StepBench, StepTiming};
use posenc_kotoba::task::TrainConfig;
use posenc_transformer::Config;

use crate::torch::{skipped, torch_device, TorchVersion, TorchWorker};
use crate::Result;

/// Untimed steps of each side before the timed ones.
const WARMUP_STEPS: usize = 2;

/// One training step (forward, backward, AdamW) of the reference configuration, then of
/// the toy translation model; unless `no_torch`, the same reference step in PyTorch in
/// the same invocation, steps alternating, and the median of the per-step ratios.
///
/// # Errors
/// A step count of 0 or past its limit; a failed step; a failed write to `out`.
pub fn train(
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
    let toy_timing = time_training_step(
        &toy_model,
        toy.run.batch_size,
        20,
        WARMUP_STEPS,
        steps,
        device,
    )?;

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
                let (a, b): (Vec<f64>, Vec<f64>) =
                    mine.iter().zip(&theirs).map(|(a, b)| (f(a), f(b))).unzip();
                crate::Speedup::of_times(&a, &b).map_or("–".into(), |s| s.to_string())
            };
            writeln!(
                out,
                "\nspeed relative to PyTorch (its time / ours, the median of {steps} alternating steps; > 1: faster): step {}, forward {}, backward {}",
                ratio(|t| t.total_ms),
                ratio(|t| t.forward_ms),
                ratio(|t| t.backward_ms)
            )?;
        }
    }
    // The step's flops, counted from its shapes, against this machine's FMA peak (on the
    // CPU: a GPU's limits are not these).
    let machine = device
        .is_cpu()
        .then(|| crate::limits::Machine::measure(candle_core::utils::get_num_threads()));
    let flops = crate::limits::transformer_step_flops(&cfg, batch, len);
    let of_peak = |ms: f64| {
        machine
            .as_ref()
            .map_or(f64::NAN, |m| flops / (ms / 1e3) / m.peak.per_second)
    };
    if let Some(machine) = &machine {
        writeln!(out, "\n{}", machine.describe())?;
        writeln!(
            out,
            "reference step: {:.2} GFLOP counted from its shapes; ours runs at {:.2} of the FMA peak",
            flops / 1e9,
            of_peak(StepTiming::median(&mine)?.total_ms)
        )?;
        if !theirs.is_empty() {
            writeln!(
                out,
                "PyTorch's reference step runs at {:.2} of the FMA peak",
                of_peak(StepTiming::median(&theirs)?.total_ms)
            )?;
        }
    }
    Ok(())
}
