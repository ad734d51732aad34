//! `posenc bench embed`: sentence embeddings of ours against transformers'.

use std::io::Write;

use posenc_error::{ensure, Context};
use posenc_kotoba::bench::median;
use serde::Deserialize;

use crate::torch::{skipped, torch_device, TorchWorker};
use crate::Result;

/// The benchmark's sentences: 256 of about 100 word pieces, in batches of 32.
const EMBED_SENTENCES: usize = 256;
const EMBED_WORDS: usize = 90;
const EMBED_BATCH: usize = 32;

/// Sentence embeddings of fixed sentences with a sentence-transformers model (`model`, or
/// the fetched all-MiniLM-L6-v2); unless `no_torch`, the same by transformers' `BertModel`
/// in the same invocation, passes alternating, with how far the two sides' embeddings
/// are apart.
///
/// # Errors
/// A model that does not load; a rounds count of 0 or past its limit; a failed write.
pub fn embed(
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
            let speedup =
                crate::Speedup::of_times(&mine, &theirs).map_or("–".into(), |s| s.to_string());
            writeln!(
                out,
                "\nspeed relative to PyTorch (its time / ours, the median of {rounds} alternating passes; > 1: faster): {speedup}; embeddings' checksums {checksum:.4} and {:.4}",
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
pub fn embedding_distance(a: &[Vec<f32>], b: &[Vec<f32>]) -> Result<(f64, f64)> {
    ensure!(
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
