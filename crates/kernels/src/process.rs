//! What a process that runs the kernels sets up first thing in `main`: glibc's allocator
//! told to keep freed memory, candle's element-wise ops on the calling thread when
//! training, and the work run on one of rayon's worker threads.

/// Tells glibc's allocator to keep freed memory for reuse instead of handing it back to
/// the kernel; programs that train or run models call it first thing in `main` (the
/// `posenc` binary, the examples and the benchmarks do). Elsewhere it does nothing.
///
/// A training step allocates and frees the same few-megabyte tensors every step. By
/// default glibc serves blocks that large with `mmap` and returns them with `munmap`, or
/// trims the heap behind them, so each step pays page faults to zero fresh pages and TLB
/// shootdowns across the threads: about a seventh of a profiled reference training step
/// was the kernel's, and its backward took about a fifth less with this setting
/// (`posenc bench train`, alternating runs).
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets allocator parameters. A refusal (return 0) leaves the
    // defaults, which are correct, only slower.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// Hands the memory freed so far back to the kernel (glibc's `malloc_trim`), which
/// [`keep_freed_memory`] otherwise keeps: between the rounds of a benchmark that reports
/// peak memory, so that a round's peak is its own and not the heap an earlier round left.
/// Elsewhere it does nothing.
pub fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only releases free memory at the allocator's discretion.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// For a process that trains on the CPU: candle's element-wise ops (among them the
/// backward's gradient sums) run on the calling thread rather than on candle's own thread
/// pool. Call it first thing in `main`, before any tensor op: candle reads the setting
/// (`CANDLE_NUM_THREADS=1`) once. It leaves a `CANDLE_NUM_THREADS` already set alone.
///
/// candle 0.11 runs large element-wise ops on a pool of its own, whose worker spins for
/// a while after each op, waiting for the next; this crate's kernels and gemm run on
/// rayon's pool. On two cores that spinning worker takes a core from them: 12% of a
/// profiled reference training step was its spin loop, and the step's speed against
/// PyTorch's went from a median of 1.025× to 1.09× (`posenc bench train`, twelve and ten
/// runs, interleaved).
/// Not for quantized inference: candle's quantized products use the same pool, and
/// SmolLM2's generation took 8.9–10.6 s instead of 5.0–7.0 s with this setting.
pub fn tune_for_training() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
}

/// Runs `work` on one of rayon's worker threads and returns its result: call it around a
/// program's work, as the `posenc` binary and the examples do.
///
/// Every fused kernel of this crate and every large product runs its parallel part on rayon's
/// pool. Called from a thread outside the pool, each of them hands its jobs to the pool
/// and puts the calling thread to sleep until they are done, then wakes it: two context
/// switches per op, which for a small model's many small ops add up. From a worker
/// thread, the op's jobs go on that worker's own queue, the worker takes part in them, and
/// only the other workers are woken. The reference training step took 8% less time this
/// way, the toy model's 20% less (`posenc bench train`, alternating binaries).
///
/// If rayon's global pool has not started yet, it starts here with 64 MiB stacks: the
/// work now runs where a program's main thread (8 MiB) ran, and candle's backward walks the
/// graph recursively. (A pool started earlier keeps its stacks, 2 MiB by default.)
///
/// ```
/// let worker = posenc_kernels::on_worker_thread(rayon::current_thread_index);
/// assert!(worker.is_some(), "the work runs on one of rayon's threads");
/// ```
pub fn on_worker_thread<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    // An error means the pool is already running, which is fine.
    let _ = rayon::ThreadPoolBuilder::new()
        .stack_size(64 << 20)
        .build_global();
    rayon::scope(|_| work())
}

#[cfg(test)]
mod tests {
    /// Alone among this binary's tests in touching the environment, which none of the
    /// others reads.
    #[test]
    fn tune_for_training_sets_one_candle_thread_unless_asked_otherwise() {
        std::env::set_var("CANDLE_NUM_THREADS", "3");
        super::tune_for_training();
        assert_eq!(std::env::var("CANDLE_NUM_THREADS").as_deref(), Ok("3"));
        std::env::remove_var("CANDLE_NUM_THREADS");
        super::tune_for_training();
        assert_eq!(std::env::var("CANDLE_NUM_THREADS").as_deref(), Ok("1"));
    }
}
