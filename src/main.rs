//! `posenc`: inspect, train and compare positional encodings from the command line.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use posenc_cli::{cmd, run, Cli};

fn main() -> ExitCode {
    posenc_kernels::keep_freed_memory();
    let cli = Cli::parse_args(std::env::args_os()).unwrap_or_else(|e| e.exit());
    if cli.trains() {
        posenc_kernels::tune_for_training();
    }
    // The command runs on one of rayon's threads: the kernels' parallel parts then cost no
    // sleep and wake of the main thread (`on_worker_thread`).
    let result = posenc_kernels::on_worker_thread(|| {
        let mut out = cmd::Stdout::new();
        run(cli, &mut out).and_then(|()| out.finish())
    });
    match result {
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
