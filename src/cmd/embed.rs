//! `posenc embed`: sentence embeddings from a sentence-transformers model directory.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use clap::Args;
use posenc_embed::sentence::SentenceEncoder;

/// `posenc embed`
#[derive(Args, Debug)]
pub struct EmbedArgs {
    /// A sentence-transformers model directory (e.g. .cache/all-MiniLM-L6-v2, fetched by
    /// scripts/fetch_minilm.sh).
    #[arg(long)]
    model: PathBuf,
    /// Sentences per forward pass.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Sentences; with none, one per line from standard input (an empty line is the empty sentence).
    sentences: Vec<String>,
}

impl EmbedArgs {
    /// Prints one JSON array of floats per sentence, in order.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        ensure!(
            self.model.is_dir(),
            "model directory {} does not exist (run scripts/fetch_minilm.sh for all-MiniLM-L6-v2)",
            self.model.display()
        );
        let encoder = SentenceEncoder::load(&self.model)
            .with_context(|| format!("loading {}", self.model.display()))?;
        let sentences = super::sentences_or_stdin(self.sentences)?;
        for v in encoder.embed(&sentences, self.batch_size)? {
            writeln!(out, "{}", serde_json::to_string(&v)?)?;
        }
        Ok(())
    }
}
