//! `posenc bench …`: speed measurements, reported with their configuration; the drivers
//! are `posenc-bench`'s.

use std::io::Write;

use anyhow::Result;
use clap::Subcommand;

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
    #[command(after_help = "Examples:\n  posenc bench train --steps 10")]
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
    #[command(
        after_help = "Examples:\n  posenc bench embed\n  posenc bench embed --rounds 10 --no-torch"
    )]
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
    /// This machine's limits: the memory read bandwidth of its threads together (each
    /// summing 256 MB of its own in wide vectors) and their f32 FMA peak (independent
    /// chains of fused multiply-adds in registers, at the widest vector width the CPU
    /// has), best of three passes each. `train` and `generate` measure them too and print
    /// each speed as a fraction of them.
    #[command(
        after_help = "Examples:\n  posenc bench limits\n  posenc bench limits --format json"
    )]
    Limits {
        /// Output format (json: one tidy record a limit).
        #[arg(long, value_enum, default_value_t = super::Format::Text)]
        format: super::Format,
    },
    /// A GGUF model generating, quantized or `--f32` (default: SmolLM2-135M-Instruct Q4_1, fetched by
    /// scripts/fetch_smollm2.sh): prefill tokens/s at each prompt length, decode tokens/s
    /// after each depth of cache, time to first token and peak memory, ours against llama.cpp's `llama-bench` and
    /// `llama-simple` (scripts/build_llama_cpp.sh) on the same file and threads. Rounds
    /// alternate, and each ratio is the median of the per-round ratios. Without llama.cpp
    /// it says how to build it and reports ours alone. On a GPU (`--device cuda`) ours runs
    /// alone, after one untimed round (the first use of each kernel loads it), the device
    /// synchronized before each clock is read.
    #[command(
        after_help = "Examples:\n  posenc bench generate\n  posenc bench generate --prompts 512 --decode 64 --no-llama-cpp"
    )]
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
        /// What both keep the key/value cache as: ours, and llama-bench's -ctk/-ctv (with
        /// -fa on, which its quantized cache needs) [default: each its own; f16 for a
        /// quantized model].
        #[arg(long, value_enum)]
        kv_cache: Option<super::model::CacheType>,
        /// Where ours computes: cpu; cuda or cuda:N (built with --features cuda); metal or
        /// metal:N (--features metal). llama.cpp (a CPU build) runs only against the CPU.
        #[arg(long, default_value = "cpu")]
        device: super::DeviceArg,
    },
}

impl BenchCommand {
    /// Runs the benchmark.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        match self {
            BenchCommand::Limits { format } => {
                let threads = candle_core::utils::get_num_threads();
                let m = posenc_bench::limits::Machine::measure(threads);
                match format {
                    super::Format::Json => {
                        let record =
                            |limit: &str, unit: &str, l: &posenc_kernels::machine::Limit| {
                                serde_json::json!({"limit": limit, "unit": unit, "value": l.per_second,
                                "threads": l.threads, "level": l.level})
                            };
                        let records = [
                            record("memory read bandwidth", "bytes/s", &m.bandwidth),
                            record("f32 FMA peak", "flops/s", &m.peak),
                        ];
                        writeln!(out, "{}", serde_json::to_string_pretty(&records)?)?;
                    }
                    super::Format::Text => m.report(out)?,
                }
                Ok(())
            }
            BenchCommand::Embed {
                model,
                rounds,
                no_torch,
                device,
            } => Ok(posenc_bench::embed::embed(
                model, rounds, no_torch, &device.0, out,
            )?),
            BenchCommand::Train {
                steps,
                no_torch,
                device,
            } => Ok(posenc_bench::train::train(steps, no_torch, &device.0, out)?),
            BenchCommand::Generate {
                model,
                prompts,
                decode,
                depths,
                rounds,
                no_llama_cpp,
                f32,
                kv_cache,
                device,
            } => {
                let model = match model {
                    Some(path) => path,
                    None => posenc_llama::model::fetched_smollm2()?,
                };
                posenc_bench::generate::generate(
                    posenc_bench::generate::GenerateBench {
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
                        kv_cache: kv_cache.map(Into::into),
                    },
                    out,
                )?;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use posenc_bench::embed::embedding_distance;

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
