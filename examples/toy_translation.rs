//! English → Kotoba from scratch: generate the data, train the sinusoidal model, print the
//! metrics of every split and a few translations, an order-swap pair among them.
//!
//! ```sh
//! cargo run --release --example toy_translation
//! ```
//!
//! About a minute on two CPU cores. The model lands in `runs/toy_translation/`, replacing
//! the previous run's.

use std::path::Path;
use std::time::Instant;

use candle_core::Device;
use posenc_kotoba::data::{self, DataConfig};
use posenc_kotoba::decode::DecodeConfig;
use posenc_kotoba::eval::{evaluate, table};
use posenc_kotoba::task::{RunOptions, TrainConfig, Translation, Translator};
use posenc_train::job;

fn main() -> anyhow::Result<()> {
    posenc_kernels::keep_freed_memory();
    posenc_kernels::tune_for_training();
    posenc_kernels::on_worker_thread(run)
}

/// The example's work, on one of rayon's threads (`on_worker_thread`).
fn run() -> anyhow::Result<()> {
    let started = Instant::now();
    let out = Path::new("runs/toy_translation");
    let mut cfg = TrainConfig::default();
    cfg.run.steps = 1500;
    println!(
        "training a {}-layer sinusoidal Transformer (d_model {}) for {} steps of {} sentences",
        cfg.model.encoder_layers, cfg.model.d_model, cfg.run.steps, cfg.run.batch_size
    );
    // The example trains from scratch every time: it replaces its own earlier run.
    let opts = RunOptions {
        force: true,
        ..RunOptions::default()
    };
    let state = job::train::<Translation>(cfg.clone(), &(), out, opts, &Device::Cpu)?;
    println!(
        "trained in {:.0} s at {:.0} tokens/s, peak memory {}\n",
        state.elapsed_s,
        state.tokens_per_second(),
        state
            .peak_rss_mb
            .map_or("unknown".into(), |mb| format!("{mb:.0} MB"))
    );

    let translator = Translator::load(out, &Device::Cpu)?;
    let greedy = DecodeConfig::default();
    let reports = evaluate(&translator, &cfg.data, &greedy, 0)?;
    println!("{}", table(&reports));

    let splits = data::generate(&DataConfig { ..cfg.data })?;
    let (a, b) = &splits.order_swap[0];
    let mut samples = vec![
        "the dog chases the cat".to_string(),
        "the cat chases the dog".to_string(),
        "the big dog chased the small cat in the park".to_string(),
        a.src.clone(),
        b.src.clone(),
    ];
    samples.push(splits.test[1].src.clone());
    for (english, kotoba) in samples.iter().zip(translator.translate(&samples, &greedy)?) {
        println!("{english}\n  → {kotoba}");
    }
    println!("\ntotal wall time {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}
