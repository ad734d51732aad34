//! `posenc`: inspect, train and compare positional encodings from the command line.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use posenc_cli::{cmd, run, Cli};

fn main() -> ExitCode {
    posenc_kernels::keep_freed_memory();
    let cli = Cli::parse_args(std::env::args_os()).unwrap_or_else(|e| e.exit());
    if cli.trains() {
        posenc_kernels::tune_for_training();
        stop_training_on_signals();
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
        Err(e) if cmd::interrupted(&e).is_some() => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "{}", cmd::error_text(&e));
            ExitCode::from(130)
        }
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "error: {}", cmd::error_text(&e));
            ExitCode::FAILURE
        }
    }
}

/// Ctrl-C or SIGTERM while training stops the run after its current step, with a
/// checkpoint there (`posenc_train::fit::request_stop`); a second one ends the process at
/// once.
fn stop_training_on_signals() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static ASKED: AtomicBool = AtomicBool::new(false);
    let handler = || {
        use std::io::Write;
        if ASKED.swap(true, Ordering::SeqCst) {
            let _ = writeln!(
                std::io::stderr(),
                "\nstopped at once: the last checkpoint stays"
            );
            std::process::exit(130);
        }
        posenc_train::fit::request_stop();
        let _ = writeln!(
            std::io::stderr(),
            "\nstopping after this step to save a checkpoint (again to stop at once)"
        );
    };
    // Without a handler (another is installed), a signal ends the process as usual.
    let _ = ctrlc::set_handler(handler);
}
