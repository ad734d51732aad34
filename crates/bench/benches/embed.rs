//! all-MiniLM-L6-v2 on posenc's blocks against candle-transformers' `BertModel`, same
//! weights, same token ids, same pooling (ours as `posenc embed` runs it: the padding
//! dropped before the layers): 256 sentences of about 100 word pieces, in
//! batches of 32. The two run alternately in one process, so machine noise hits both; the
//! report is the median of each and their ratio.
//!
//! ```sh
//! bash scripts/fetch_minilm.sh
//! cargo bench -p posenc-bench --bench embed            # 7 rounds
//! cargo bench -p posenc-bench --bench embed -- 15      # more rounds
//! cargo bench -p posenc-bench --bench embed -- 3 ours  # only ours, for a profiler
//! ```

use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config as HfBertConfig};
use posenc_embed::resolve::fetched_minilm;
use posenc_embed::sentence::{benchmark_sentences, mean_pool_normalized, SentenceEncoder};

const SENTENCES: usize = 256;
const BATCH: usize = 32;
const WORDS: usize = 90;

fn corpus() -> Vec<String> {
    benchmark_sentences(SENTENCES, WORDS)
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn main() -> Result<()> {
    posenc_kernels::keep_freed_memory();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(7);
    if args.iter().any(|a| a == "ours") {
        // Only our model, for `perf record`: no comparison, no candle-transformers.
        let encoder = SentenceEncoder::load(&fetched_minilm()?)?;
        let batches = corpus()
            .chunks(BATCH)
            .map(|c| encoder.tokenize(c))
            .collect::<posenc_embed::Result<Vec<_>>>()?;
        let t = Instant::now();
        for _ in 0..rounds {
            for (ids, mask) in &batches {
                encoder.embed_tokens(ids, mask)?;
            }
        }
        println!(
            "ours: {:.0} ms per round",
            t.elapsed().as_secs_f64() * 1e3 / rounds as f64
        );
        return Ok(());
    }
    let dir = fetched_minilm()?;
    let dev = Device::Cpu;
    let encoder = SentenceEncoder::load(&dir)?;
    let cfg: HfBertConfig =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json"))?)?;
    // SAFETY: the file is not modified while mapped.
    let vb = unsafe {
        VarBuilder::from_mmaped_safetensors(&[dir.join("model.safetensors")], DType::F32, &dev)?
    };
    let theirs = BertModel::load(vb, &cfg)?;

    let sentences = corpus();
    let batches = sentences
        .chunks(BATCH)
        .map(|c| encoder.tokenize(c))
        .collect::<posenc_embed::Result<Vec<_>>>()?;
    let tokens: usize = batches
        .iter()
        .map(|(_, m)| m.sum_all()?.to_scalar::<u32>())
        .sum::<candle_core::Result<u32>>()? as usize;
    let width = batches[0].0.dim(1)?;
    println!(
        "{SENTENCES} sentences, {} word pieces each on average (padded to {width}), \
         batches of {BATCH}, {rounds} rounds, {} threads",
        tokens / SENTENCES,
        candle_core::utils::get_num_threads()
    );

    let run_ours = || -> Result<Vec<Tensor>> {
        Ok(batches
            .iter()
            .map(|(ids, mask)| encoder.embed_tokens(ids, mask))
            .collect::<posenc_embed::Result<_>>()?)
    };
    let run_theirs = || -> Result<Vec<Tensor>> {
        batches
            .iter()
            .map(|(ids, mask)| {
                let hidden = theirs.forward(ids, &ids.zeros_like()?, Some(mask))?;
                Ok(mean_pool_normalized(&hidden, mask)?)
            })
            .collect()
    };

    // Same answers first: a speed comparison of different computations means nothing.
    let (a, b) = (run_ours()?, run_theirs()?);
    let mut worst = 0f32;
    for (a, b) in a.iter().zip(&b) {
        worst = worst.max((a - b)?.abs()?.max_all()?.to_scalar::<f32>()?);
    }
    ensure!(worst < 1e-4, "the two models disagree by {worst}");
    println!("max |Δ| between the two embeddings: {worst:.1e}");

    let (mut t_ours, mut t_theirs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        run_ours()?;
        t_ours.push(t.elapsed());
        let t = Instant::now();
        run_theirs()?;
        t_theirs.push(t.elapsed());
    }
    let (o, t) = (median(t_ours), median(t_theirs));
    let per_s = |d: Duration| SENTENCES as f64 / d.as_secs_f64();
    println!("| model | median | sentences/s |");
    println!("|---|---:|---:|");
    println!(
        "| posenc (ours) | {:.0} ms | {:.0} |",
        o.as_secs_f64() * 1e3,
        per_s(o)
    );
    println!(
        "| candle-transformers BertModel | {:.0} ms | {:.0} |",
        t.as_secs_f64() * 1e3,
        per_s(t)
    );
    println!(
        "candle-transformers / ours = {:.2} (above 1: ours is faster)",
        t.as_secs_f64() / o.as_secs_f64()
    );
    Ok(())
}
