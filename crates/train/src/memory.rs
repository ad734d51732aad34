//! Memory: a guard that attention scores fit ([`fits_in_memory`]), and a process's peak
//! resident memory for the reports of anything long (training runs, passkey sweeps,
//! benchmarks): Linux's high-water mark `VmHWM`, which can be reset. Elsewhere the reads
//! answer `None` and the reset does nothing.

use crate::error::Result;
use posenc_error::ensure;

/// The most attention scores (f32) one forward may hold: 4 GB.
pub const MAX_SCORES: u128 = 1 << 30;

/// Checks that `rows` sequences of `len` positions over `heads` heads have attention scores
/// within [`MAX_SCORES`], naming `what` (the flag that set `len`) otherwise: a guard that
/// a training or evaluation length fits before any work starts.
///
/// # Errors
/// Scores past [`MAX_SCORES`], as a cause in words.
pub fn fits_in_memory(rows: usize, heads: usize, len: usize, what: &str) -> Result<()> {
    let scores = rows as u128 * heads as u128 * len as u128 * len as u128;
    ensure!(
        scores <= MAX_SCORES,
        "{what} = {len} is too long: {rows} sequences × {heads} heads × {len}² attention scores would pass the limit of {MAX_SCORES}"
    );
    Ok(())
}

/// Starts a fresh peak: hands what the process has freed back to the kernel, then resets
/// its peak-resident-memory mark (Linux; elsewhere a no-op), so that the next
/// [`peak_rss_mb`] is the peak of what runs from here on.
///
/// The binary keeps freed memory for reuse ([`posenc_kernels::keep_freed_memory`]),
/// and that memory stays resident: without giving it back, the mark would restart at
/// whatever an earlier piece of work (a passkey trial, a benchmark round, a training run
/// before a resumed one) left in the heap.
pub fn reset_peak_rss() {
    posenc_kernels::give_back_freed_memory();
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// This process's peak resident memory in MB since the last [`reset_peak_rss`] (Linux's
/// `VmHWM`); `None` where it cannot be read.
pub fn peak_rss_mb() -> Option<f64> {
    peak_rss_mb_in(std::path::Path::new("/proc/self/status"))
}

/// The peak resident memory in MB that a `/proc/<pid>/status` file reports (`VmHWM`);
/// `None` where it cannot be read (the process has ended, or this is not Linux).
pub fn peak_rss_mb_in(status: &std::path::Path) -> Option<f64> {
    let status = std::fs::read_to_string(status).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

#[cfg(test)]
mod tests {
    /// A fresh peak starts from what is in use, not from what the process freed and kept
    /// (`keep_freed_memory`, which every posenc program sets): 256 MB freed in 1 MB pieces
    /// between 256 MB still held, every page written, is given back before the mark is reset,
    /// so that the next trial's peak is its own. (Linux with glibc only.) A unit test, away
    /// from the integration tests: the peak is the whole process's.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_fresh_peak_leaves_out_the_memory_freed_before_it() {
        use super::{peak_rss_mb, reset_peak_rss};
        posenc_kernels::keep_freed_memory();
        const MB: usize = 1 << 20;
        let mut pieces: Vec<Vec<u8>> = (0..512).map(|i| vec![i as u8 | 1; MB]).collect();
        let held = peak_rss_mb().unwrap();
        // Every other piece freed: holes in the heap that no trimming of its top reaches.
        let kept: Vec<Vec<u8>> = pieces.drain(..).step_by(2).collect();
        reset_peak_rss();
        let fresh = peak_rss_mb().unwrap();
        assert!(
            fresh < held - 128.0,
            "{held:.0} MB held, {fresh:.0} MB after freeing half of it and resetting the peak"
        );
        assert_eq!(kept.len(), 256);
        assert!(kept.iter().all(|p| p.iter().all(|&b| b & 1 == 1)));
    }
}
