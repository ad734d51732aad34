//! `posenc serve`: the explorer in the browser.

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

/// `posenc serve`
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on; anything but 127.0.0.1 lets other machines in.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// The port (0: any free one).
    #[arg(long, default_value_t = 7878)]
    port: u16,
    /// Directories of runs: their language models are offered for generation, and their
    /// records listed with the book's [default: none].
    #[arg(long, num_args = 1.., value_name = "DIR")]
    runs: Vec<PathBuf>,
    /// Directories of records to browse [default: the repository's docs/].
    #[arg(long, num_args = 1.., value_name = "DIR")]
    records: Vec<PathBuf>,
    /// Requests computed at once (encodings, translations); more are answered 503
    /// [default: one per core].
    #[arg(long)]
    workers: Option<usize>,
}

impl ServeArgs {
    /// Starts the server, prints its address, and serves until the process is stopped.
    ///
    /// # Errors
    /// The address cannot be bound; a directory given does not exist.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        let mut options = posenc_serve::Options {
            host: self.host,
            port: self.port,
            runs: self.runs,
            ..Default::default()
        };
        if !self.records.is_empty() {
            options.records = self.records;
        }
        if let Some(workers) = self.workers {
            anyhow::ensure!(workers > 0, "--workers must be at least 1");
            options.workers = workers;
        }
        let server = posenc_serve::Server::start(options)?;
        writeln!(out, "posenc explorer at {} (Ctrl-C stops it)", server.url())?;
        writeln!(
            out,
            "OpenAI-compatible chat at {}v1/chat/completions",
            server.url()
        )?;
        out.flush()?;
        server.wait();
        Ok(())
    }
}
