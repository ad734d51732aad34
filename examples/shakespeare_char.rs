//! A character-level language model on Shakespeare, in nanoGPT's documented CPU shape
//! (4 layers, 4 heads, width 128, context 64, batch 12, 2 000 steps), then its loss past the
//! trained context and a sample.
//!
//! ```sh
//! bash scripts/fetch_shakespeare.sh
//! cargo run --release --example shakespeare_char -- [ENCODING] [STEPS]
//! ```
//!
//! The anchor: nanoGPT reaches validation loss ≈ 1.88 in ≈ 3 minutes on its
//! `shakespeare_char` data (1.1 M characters of tiny-shakespeare, 65 symbols, 90/10 split
//! of one stream). This corpus is all 42 works (4.45 M training characters, 85 symbols) and
//! its validation split is two whole plays the model never saw, so the numbers sit beside
//! each other rather than replace each other.

use std::time::Instant;

use posenc::EncodingConfig;
use posenc_lm::corpus::{self, Corpus};
use posenc_lm::sample::{generate, Sampling};
use posenc_lm::task::{evaluate, train_lm, LmData, LmTrainConfig};
use posenc_lm::text_tokenizer::{decode, encode, TextTokenizer};

fn main() -> anyhow::Result<()> {
    posenc_kernels::keep_freed_memory();
    posenc_kernels::tune_for_training();
    posenc_kernels::on_worker_thread(run)
}

/// The example's work, on one of rayon's threads (`on_worker_thread`).
fn run() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let encoding: EncodingConfig = args.next().unwrap_or("sinusoidal".into()).parse()?;
    let steps: usize = args.next().map_or(Ok(2000), |s| s.parse())?;

    let corpus = Corpus::load(&corpus::default_dir())?;
    let train_text = Corpus::stream(&corpus.train);
    let tokenizer = TextTokenizer::Char.train(&train_text)?;
    let train = encode(&tokenizer, &train_text)?;
    let valid = encode(&tokenizer, &Corpus::stream(&corpus.valid))?;
    let test = encode(&tokenizer, &Corpus::stream(&corpus.test))?;
    let mut cfg = LmTrainConfig::default();
    cfg.run.steps = steps;
    cfg.model.vocab_size = tokenizer.get_vocab_size(true);
    cfg.model.encoding = encoding.clone();
    println!(
        "{} characters ({} symbols): train {}, valid {}, test {}; encoding {}",
        train.len() + valid.len() + test.len(),
        cfg.model.vocab_size,
        train.len(),
        valid.len(),
        test.len(),
        encoding.kind()
    );

    let started = Instant::now();
    let data = LmData {
        train,
        valid: valid.clone(),
    };
    let run = train_lm(&cfg, &data, &candle_core::Device::Cpu, |state, loss| {
        if state.step % 200 == 0 || state.step == steps {
            println!(
                "step {:>5}  train loss {loss:.4}  ({:.0} s)",
                state.step,
                started.elapsed().as_secs_f64()
            );
        }
    })?;
    let context = cfg.model.context;
    let valid_loss = evaluate(&run.model, &valid, context, 200, context)?.loss;
    println!(
        "\nvalidation loss {valid_loss:.3} after {steps} steps in {:.0} s (nanoGPT's anchor: ≈ 1.88 in ≈ 3 min)",
        run.state.elapsed_s
    );

    println!("\ntest loss by window length (trained on {context}):");
    for factor in [1, 2, 4, 8] {
        let len = factor * context;
        match evaluate(&run.model, &test, len, 64, context) {
            Ok(e) => println!(
                "  {len:>4} ({factor}L)  {:.3}  (past L: {})",
                e.loss,
                e.tail_loss.map_or("–".into(), |t| format!("{t:.3}"))
            ),
            Err(e) => println!("  {len:>4} ({factor}L)  n/a: {e:#}"),
        }
    }

    let prompt = encode(&tokenizer, "HAMLET.\n")?;
    let sampling = Sampling {
        temperature: 0.8,
        top_k: Some(40),
        seed: 7,
        ..Sampling::default()
    };
    let sample = generate(&run.model, &prompt, 300, sampling)?;
    println!("\nHAMLET.\n{}", decode(&tokenizer, &sample)?);
    Ok(())
}
