//! # posenc-serve: the explorer
//!
//! `posenc serve` starts this crate's web server on 127.0.0.1 and prints its address. Its
//! page has four views, each computed by the same library code as the command line:
//!
//! - **Encodings** ([`encodings`]): any registered kind with its settings, as a heatmap,
//!   its interaction against distance and each pair's turn, two side by side;
//! - **Attention** ([`models`]): the shipped Kotoba model translating a sentence, every
//!   head's weights drawn; a language model generating, its tokens and attention streamed;
//! - **Results** and **Long context** ([`records`]): every experiment's tidy records under
//!   `docs/` and `--runs`, mean and spread over seeds, the passkey grid.
//!
//! The page is static files embedded in the binary ([`assets`]); it draws with Apache
//! ECharts, vendored by `scripts/vendor_echarts.sh`. The JSON API is in [`api`], and the
//! book's `docs/explorer.md` documents it.
//!
//! ```no_run
//! let server = posenc_serve::Server::start(posenc_serve::Options::default())?;
//! println!("{}", server.url());
//! server.wait();
//! # Ok::<(), posenc_serve::Error>(())
//! ```

#![warn(missing_docs)]

pub mod api;
mod app;
pub mod assets;
pub mod encodings;
pub mod error;
pub mod models;
pub mod openai;
pub mod records;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

pub use error::{ApiError, Error, Result};

/// Where to listen and what to offer.
#[derive(Debug, Clone)]
pub struct Options {
    /// The address to listen on: 127.0.0.1 unless the user says otherwise.
    pub host: IpAddr,
    /// The port (0: any free one, as the tests take).
    pub port: u16,
    /// Directories of runs: their language models are offered for generation, and their
    /// records listed.
    pub runs: Vec<PathBuf>,
    /// Directories of records besides the runs (the book's `docs/`).
    pub records: Vec<PathBuf>,
    /// The shipped Kotoba model.
    pub kotoba: PathBuf,
    /// The shipped language model.
    pub lm: PathBuf,
    /// Requests computed at once (encodings, translations); more get 503.
    pub workers: usize,
}

impl Default for Options {
    /// 127.0.0.1:7878, the repository's `docs/` and shipped models, a worker per core.
    fn default() -> Self {
        let docs = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs"));
        Self {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 7878,
            runs: Vec::new(),
            records: vec![docs],
            kotoba: posenc_kotoba::task::shipped_model(),
            lm: posenc_lm::run::shipped_model(),
            workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
        }
    }
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Binds `options.host:options.port` and serves on a thread of its own until
    /// [`Server::stop`] or the process ends.
    ///
    /// # Errors
    /// The address cannot be bound; a directory given does not exist.
    pub fn start(options: Options) -> Result<Self> {
        let addr = SocketAddr::new(options.host, options.port);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Error::Setup(format!("starting the server's runtime: {e}")))?;
        let app = api::router(api::App::new(&options)?);
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(addr))
            .map_err(|source| Error::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| Error::Bind { addr, source })?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("posenc-serve".into())
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::select! {
                        served = axum::serve(listener, app) => {
                            if let Err(e) = served {
                                eprintln!("posenc serve: {e}");
                            }
                        }
                        _ = stopped => {}
                    }
                });
                // Open streams and generations on blocking threads end with the runtime,
                // unwaited.
                runtime.shutdown_background();
            })
            .map_err(|e| Error::Setup(format!("starting the server's thread: {e}")))?;
        Ok(Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The page's address, `http://127.0.0.1:7878/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Blocks until the server ends.
    pub fn wait(mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    /// Stops the server: it accepts nothing more, and open streams are closed.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}
