//! Why a run stops early: a loss that is no longer finite, or a request to stop (Ctrl-C).
//! A leaf: the errors and the loop both read it, and it reads neither.

/// Training stopped because the loss stopped being finite (an encoding whose values grow
/// without bound can do this). The last checkpoint before it stays on disk.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("the loss diverged to {loss} at step {step}")]
pub struct Diverged {
    /// The step whose loss was not finite.
    pub step: usize,
    /// That loss.
    pub loss: f32,
}

/// Set by [`request_stop`]: every training loop stops after its current step.
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Asks every training loop in the process to stop after its current step, save a
/// checkpoint there, and return [`Interrupted`]. A signal handler calls it (the command
/// line's, on Ctrl-C or SIGTERM); it is safe to call from any thread.
pub fn request_stop() {
    STOP.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether [`request_stop`] was called.
pub fn stop_requested() -> bool {
    STOP.load(std::sync::atomic::Ordering::SeqCst)
}

/// A run stopped on request ([`request_stop`]) before its last step, its checkpoint saved
/// at the step it reached.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("interrupted at step {step} of {steps}{}", match dir {
    Some(dir) => format!(": a checkpoint of that step is saved in {}", dir.display()),
    None => String::new(),
})]
pub struct Interrupted {
    /// The last step trained (and saved).
    pub step: usize,
    /// The steps the run was to train.
    pub steps: usize,
    /// The run directory holding the checkpoint (none for a run held only in memory).
    pub dir: Option<std::path::PathBuf>,
}
