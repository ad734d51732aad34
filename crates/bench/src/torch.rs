//! The PyTorch side of a comparison: a committed script run as a worker process that
//! serves timed units of work, one per line asked for.

use std::io::Write;

use posenc_error::{bail, Context};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::{Error, Result};

/// The first line a PyTorch script prints: which PyTorch, on how many threads.
#[derive(Debug, Deserialize)]
pub(crate) struct TorchVersion {
    #[serde(rename = "torch")]
    pub version: String,
    pub threads: usize,
    pub device: String,
}

/// PyTorch's name of `device`: `cpu`, `cuda:N`, or `mps` for Metal.
pub(crate) fn torch_device(device: &candle_core::Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { .. } => "mps".into(),
    }
}

/// How to get the Python environment the comparison runs in.
const INSTALL: &str =
    "install it with: python3 -m venv .venv && .venv/bin/pip install -r scripts/requirements.txt";

/// Says that the PyTorch comparison was skipped, and why.
pub(crate) fn skipped(out: &mut impl Write, e: &Error) -> Result<()> {
    writeln!(out, "\nPyTorch comparison skipped: {e}")?;
    Ok(())
}

/// A committed PyTorch script serving timed units of work, run with a Python that has
/// PyTorch ($POSENC_PYTHON, else .venv/bin/python, else python3): it prints one JSON
/// header line when ready, then one JSON line per line it reads, and ends at the end of
/// its input. A script that gives no answer for [`TorchWorker::timeout`] is stopped.
pub(crate) struct TorchWorker {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    /// The script's output lines, read by a thread of their own so that waiting for one
    /// can time out.
    lines: std::sync::mpsc::Receiver<std::io::Result<String>>,
    timeout: std::time::Duration,
    stderr: tempfile::NamedTempFile,
    python: std::path::PathBuf,
}

impl TorchWorker {
    /// Starts `script` with `args` and reads its header line.
    pub(crate) fn start<H: DeserializeOwned>(
        script: &str,
        args: &[(&str, String)],
    ) -> Result<(Self, H)> {
        let timeout = Self::timeout()?;
        let root = crate::repo_root();
        let python = std::env::var_os("POSENC_PYTHON")
            .map(std::path::PathBuf::from)
            .or_else(|| Some(root.join(".venv/bin/python")).filter(|p| p.exists()))
            .unwrap_or_else(|| "python3".into());
        // Its diagnostics go to a file, read only if it fails: a pipe nobody read could
        // fill and stall it.
        let stderr = tempfile::NamedTempFile::new().context("creating a temporary file")?;
        let mut cmd = std::process::Command::new(&python);
        cmd.arg(root.join(script));
        for (flag, value) in args {
            cmd.arg(flag).arg(value);
        }
        let mut child = cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(stderr.reopen().context("opening a temporary file")?)
            .spawn()
            .with_context(|| format!("running {} ({INSTALL})", python.display()))?;
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let stdout = stdout.context("no pipe from the PyTorch script")?;
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut worker = Self {
            child,
            stdin,
            lines,
            timeout,
            stderr,
            python,
        };
        let header = worker.line()?;
        Ok((worker, header))
    }

    /// The next unit's timing from a worker that is still running (`Some(Ok(..))`); one
    /// that fails now is replaced by its error, so the comparison is reported skipped.
    pub(crate) fn next_of<H, T: DeserializeOwned>(
        torch: &mut Option<Result<(Self, H)>>,
    ) -> Option<T> {
        let Some(Ok((worker, _))) = torch else {
            return None;
        };
        match worker.next() {
            Ok(t) => Some(t),
            Err(e) => {
                *torch = Some(Err(e));
                None
            }
        }
    }

    /// Asks for one more unit of work and reads its timing.
    fn next<T: DeserializeOwned>(&mut self) -> Result<T> {
        let stdin = self
            .stdin
            .as_mut()
            .context("the PyTorch script's input is closed")?;
        // A script that has ended cannot take the line: reading its output then says why.
        let _ = stdin.write_all(b"\n").and_then(|()| stdin.flush());
        self.line()
    }

    /// How long to wait for one answer of the script: `$POSENC_TORCH_TIMEOUT` seconds,
    /// else 600 (its first answer comes after loading PyTorch and one untimed pass).
    fn timeout() -> Result<std::time::Duration> {
        let Some(value) = std::env::var_os("POSENC_TORCH_TIMEOUT") else {
            return Ok(std::time::Duration::from_secs(600));
        };
        value
            .to_str()
            .and_then(|v| v.parse::<f64>().ok())
            .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
            .filter(|d| !d.is_zero())
            .with_context(|| {
                format!("POSENC_TORCH_TIMEOUT must be a positive number of seconds, not {value:?}")
            })
            .map_err(Into::into)
    }

    /// The next JSON line the script prints; if it ended instead, or gave no answer in
    /// time (it is then stopped), why.
    fn line<T: DeserializeOwned>(&mut self) -> Result<T> {
        use std::sync::mpsc::RecvTimeoutError;
        let line = match self.lines.recv_timeout(self.timeout) {
            Ok(line) => line.context("reading the PyTorch script's output")?,
            Err(RecvTimeoutError::Disconnected) => {
                // Its output ended: so did it.
                let _ = self.child.wait();
                let stderr = std::fs::read_to_string(self.stderr.path()).unwrap_or_default();
                let last = stderr.lines().last().unwrap_or("it printed nothing");
                bail!(
                    "{} could not run the PyTorch script: {last}\n({INSTALL})",
                    self.python.display()
                );
            }
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                bail!(
                    "the PyTorch script gave no answer in {} s and was stopped (POSENC_TORCH_TIMEOUT sets the limit)",
                    self.timeout.as_secs_f64()
                );
            }
        };
        Ok(serde_json::from_str(line.trim()).context("reading the PyTorch script's output")?)
    }
}

impl Drop for TorchWorker {
    fn drop(&mut self) {
        // The end of its input ends it.
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}
