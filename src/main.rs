//! `posenc`: inspect, train and compare positional encodings from the command line.

use std::process::ExitCode;

use clap::Parser;
use posenc_cli::{cmd, run, Cli};

fn main() -> ExitCode {
    keep_freed_memory();
    let cli = Cli::parse();
    let mut out = cmd::Stdout::new();
    match run(cli, &mut out).and_then(|()| out.finish()) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`posenc … | head`): nothing is left to say to anyone.
        Err(e) if cmd::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "error: {}", cmd::error_text(&e));
            ExitCode::FAILURE
        }
    }
}

/// Tells glibc's allocator to keep freed memory for reuse instead of handing it back to
/// the kernel.
///
/// A training step allocates and frees the same few-megabyte tensors every step. By
/// default glibc serves blocks that large with `mmap` and returns them with `munmap`, or
/// trims the heap behind them, so each step pays page faults to zero fresh pages and TLB
/// shootdowns across the threads. Measured on the reference training step, backward
/// took about a fifth less with this setting (`posenc bench train`).
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets allocator parameters; it runs before any other thread
    // exists. A refusal (return 0) leaves the defaults, which are correct, only slower.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}
