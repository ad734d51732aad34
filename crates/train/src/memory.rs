//! A process's peak resident memory, for the reports of anything long (training runs,
//! passkey sweeps, benchmarks): Linux's high-water mark `VmHWM`, which can be reset.
//! Elsewhere the reads answer `None` and the reset does nothing.

/// Resets the kernel's peak-resident-memory mark of this process (Linux; elsewhere a no-op).
pub fn reset_peak_rss() {
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
