//! SmolLM2-135M-Instruct (Q4_1 GGUF) on posenc's blocks against candle-transformers'
//! `quantized_llama` on the same file: prompt processing (tokens/s over a 512-token prompt)
//! and generation (tokens/s for 128 greedy tokens after it). The two run alternately in one
//! process, so machine noise hits both; the report is the median of each and their ratio.
//!
//! ```sh
//! bash scripts/fetch_smollm2.sh
//! cargo bench -p posenc-bench --bench llama            # 3 rounds
//! cargo bench -p posenc-bench --bench llama -- 5       # more rounds
//! ```

use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use posenc_llama::model::fetched_smollm2;
use posenc_llama::{Llama, Precision};
use posenc_transformer::StackCache;

const PROMPT: usize = 512;
const NEW: usize = 128;

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// A fixed English text long enough for the prompt.
fn text() -> String {
    let sentence = "The positional encoding tells each attention head where a token stands, \
        and a rotary encoding turns queries and keys by an angle that grows with the position, \
        so that their dot product depends on the distance between them alone. ";
    let numbers: Vec<String> = (0..200).map(|i| format!("Line {i}: {sentence}")).collect();
    numbers.concat()
}

fn argmax(row: &Tensor) -> Result<u32> {
    Ok(row.argmax(0)?.to_scalar::<u32>()?)
}

/// One round: the prompt `(1, PROMPT)`, then `NEW - 1` greedy steps from its last scores, through
/// `forward(ids, position of the first id)`, which returns the scores after the last id.
/// Returns the times of both, the scores after the prompt and the tokens.
fn timed(
    prompt: &Tensor,
    mut forward: impl FnMut(&Tensor, usize) -> Result<Tensor>,
) -> Result<(Duration, Duration, Tensor, Vec<u32>)> {
    let t = Instant::now();
    let first = forward(prompt, 0)?;
    let prefill = t.elapsed();
    let t = Instant::now();
    let mut next = argmax(&first)?;
    let mut tokens = vec![next];
    for i in 1..NEW {
        let ids = Tensor::new(&[next], prompt.device())?.unsqueeze(0)?;
        next = argmax(&forward(&ids, PROMPT + i - 1)?)?;
        tokens.push(next);
    }
    Ok((prefill, t.elapsed(), first, tokens))
}

fn main() -> Result<()> {
    posenc_kernels::keep_freed_memory();
    let rounds = posenc_bench::rounds(3);
    let dev = Device::Cpu;
    let path = fetched_smollm2()?;
    let ours = Llama::from_gguf(
        &path,
        Precision::Quantized,
        posenc::PairLayout::Interleaved,
        &dev,
    )?;
    let mut file = std::fs::File::open(&path)?;
    let content = gguf_file::Content::read(&mut file)?;
    let mut theirs = ModelWeights::from_gguf(content, &mut file, &dev)?;
    let prompt: Vec<u32> = ours.encode(&text())?[..PROMPT].to_vec();
    let x = Tensor::new(prompt.as_slice(), &dev)?.unsqueeze(0)?;
    println!(
        "{PROMPT}-token prompt, {NEW} new tokens, {rounds} rounds, {} threads",
        candle_core::utils::get_num_threads()
    );

    let run_ours = || {
        let mut cache = StackCache::default();
        timed(&x, |ids, _| {
            Ok(ours.model.step(ids, &mut cache)?.squeeze(0)?)
        })
    };
    let mut run_theirs = || {
        theirs.clear_kv_cache();
        timed(&x, |ids, at| Ok(theirs.forward(ids, at)?.squeeze(0)?))
    };

    let (mut ours_pre, mut ours_gen, mut theirs_pre, mut theirs_gen) =
        (vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        let (p, g, a, ta) = run_ours()?;
        ours_pre.push(p);
        ours_gen.push(g);
        let (p, g, b, tb) = run_theirs()?;
        theirs_pre.push(p);
        theirs_gen.push(g);
        if round == 0 {
            // The same computation first: a speed comparison of different ones means nothing.
            let diff = (&a - &b)?.abs()?.max_all()?.to_scalar::<f32>()?;
            let same = ta.iter().zip(&tb).take_while(|(x, y)| x == y).count();
            println!("after the prompt the two models' scores differ by at most {diff:.3}; greedy tokens agree for {same}/{NEW}");
            ensure!(diff < 2.0, "the two models disagree by {diff}");
        }
    }
    let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64();
    let (op, tp) = (median(ours_pre), median(theirs_pre));
    let (og, tg) = (median(ours_gen), median(theirs_gen));
    println!(
        "prompt processing: ours {:.1} tokens/s, candle-transformers {:.1} tokens/s: ours {:.2}×",
        rate(PROMPT, op),
        rate(PROMPT, tp),
        tp.as_secs_f64() / op.as_secs_f64()
    );
    println!(
        "generation:        ours {:.1} tokens/s, candle-transformers {:.1} tokens/s: ours {:.2}×",
        rate(NEW, og),
        rate(NEW, tg),
        tg.as_secs_f64() / og.as_secs_f64()
    );
    Ok(())
}
