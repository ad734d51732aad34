//! A process's peak resident memory, for the reports of anything long (training runs,
//! passkey sweeps, benchmarks): Linux's high-water mark `VmHWM`, which can be reset.
//! Elsewhere the reads answer `None` and the reset does nothing.

/// Starts a fresh peak: hands what the process has freed back to the kernel, then resets
/// its peak-resident-memory mark (Linux; elsewhere a no-op), so that the next
/// [`peak_rss_mb`] is the peak of what runs from here on.
///
/// The binary keeps freed memory for reuse ([`posenc_transformer::keep_freed_memory`]),
/// and that memory stays resident: without giving it back, the mark would restart at
/// whatever an earlier piece of work (a passkey trial, a benchmark round, a training run
/// before a resumed one) left in the heap.
pub fn reset_peak_rss() {
    posenc_transformer::give_back_freed_memory();
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
