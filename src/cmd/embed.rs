//! `posenc embed`: sentence embeddings from a sentence-transformers model directory.

use anyhow::{Context, Result};
use clap::Args;
use posenc_embed::resolve::resolve;
use posenc_embed::sentence::SentenceEncoder;
use std::io::Write;

/// `posenc embed`
#[derive(Args, Debug)]
pub struct EmbedArgs {
    /// `minilm` (all-MiniLM-L6-v2: .cache/all-MiniLM-L6-v2 from scripts/fetch_minilm.sh,
    /// else the hub's), a sentence-transformers model directory, or a hub repo id
    /// (sentence-transformers/all-MiniLM-L6-v2), looked up in $HF_HOME/hub first;
    /// HF_HUB_OFFLINE=1 forbids downloading.
    #[arg(long, default_value = MINILM)]
    model: String,
    /// Sentences per forward pass.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Where to compute: cpu; cuda or cuda:N (built with --features cuda); metal or metal:N
    /// (--features metal).
    #[arg(long, default_value = "cpu")]
    device: super::DeviceArg,
    /// Sentences; with none, one per line from standard input (an empty line is the empty sentence).
    sentences: Vec<String>,
}

/// The short name of all-MiniLM-L6-v2.
const MINILM: &str = "minilm";

/// Where `minilm` is: the directory scripts/fetch_minilm.sh fills, else the hub's repo.
fn minilm() -> &'static str {
    const FETCHED: &str = ".cache/all-MiniLM-L6-v2";
    match std::path::Path::new(FETCHED).is_dir() {
        true => FETCHED,
        false => "sentence-transformers/all-MiniLM-L6-v2",
    }
}

impl EmbedArgs {
    /// Prints one JSON array of floats per sentence, in order.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        let model = match self.model.as_str() {
            MINILM => minilm(),
            other => other,
        };
        let dir = resolve(model)?;
        let encoder = SentenceEncoder::load_on(&dir, &self.device.0)
            .with_context(|| format!("loading {}", dir.display()))?;
        let sentences = super::sentences_or_stdin(self.sentences)?;
        for v in encoder.embed(&sentences, self.batch_size)? {
            writeln!(out, "{}", serde_json::to_string(&v)?)?;
        }
        Ok(())
    }
}
