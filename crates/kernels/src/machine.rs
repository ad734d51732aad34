//! What the machine allows: the memory bandwidth its cores can read at, and the f32 FMA
//! throughput they peak at, measured, so that a benchmark can say how far a speed is from
//! the hardware's limit and not only from a peer's.
//!
//! - [`read_bandwidth`]: each thread sums a buffer of its own, far larger than the caches,
//!   in wide vectors; bytes read over the slowest thread's time, best of several passes.
//! - [`fma_peak`]: each thread runs independent chains of fused multiply-adds held in
//!   registers, at the widest vector width the CPU has (AVX-512, else AVX2 with FMA, detected at run time); two
//!   flops an FMA per lane over the slowest thread's time, best of several passes.
//!
//! Both run their threads at once, so a figure is the cores' together, as a decode or a
//! training step uses them.

use std::hint::black_box;
use std::time::Instant;

use crate::simd::Level;

/// A measured limit, and how it was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// Bytes per second (bandwidth) or flops per second (peak).
    pub per_second: f64,
    /// Threads run at once.
    pub threads: usize,
    /// The vector width the kernel ran at: `avx512`, `avx2` or `baseline`.
    pub level: &'static str,
}

/// Independent partial sums of the streaming read: four AVX-512 registers, so the adds'
/// latency never holds up the loads.
const READ_LANES: usize = 64;

/// `Σ x_i` in [`READ_LANES`] partial sums, compiled for the widest level (a tail past
/// whole blocks is left out). Reading several quarters of the buffer side by side, to busy
/// more prefetchers, measured the same on the development machine.
#[inline(always)]
fn read_sum(x: &[f32]) -> f32 {
    let mut acc = [0f32; READ_LANES];
    for chunk in x.chunks_exact(READ_LANES) {
        for i in 0..READ_LANES {
            acc[i] += chunk[i];
        }
    }
    acc.iter().sum()
}

/// `threads` threads at once, each making its work with `setup(thread)` (its own buffer,
/// first touched by it) and running it once untimed, then `passes` timed times: the best
/// pass's time, a pass taking as long as its slowest thread.
fn best_pass<W: FnMut()>(threads: usize, passes: usize, setup: impl Fn(usize) -> W + Sync) -> f64 {
    let passes = passes.max(1);
    let times: Vec<Vec<f64>> = std::thread::scope(|scope| {
        let setup = &setup;
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut work = setup(t);
                    work();
                    (0..passes)
                        .map(|_| {
                            let start = Instant::now();
                            work();
                            start.elapsed().as_secs_f64()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_default())
            .collect()
    });
    (0..passes)
        .map(|p| {
            times
                .iter()
                .map(|t| t.get(p).copied().unwrap_or(0.0))
                .fold(0.0, f64::max)
        })
        .fold(f64::INFINITY, f64::min)
}

/// The memory bandwidth `threads` threads read at together: each sums `bytes_per_thread`
/// of its own (first touched by it, so it lies near its core), `passes` times; the best
/// pass's bytes over its slowest thread's time.
///
/// # Panics
/// Never on a valid size: a size of zero measures nothing and gives 0.
pub fn read_bandwidth(threads: usize, bytes_per_thread: usize, passes: usize) -> Limit {
    let threads = threads.max(1);
    let n = bytes_per_thread / 4 / READ_LANES * READ_LANES;
    let seconds = best_pass(threads, passes, |t| {
        let buf: Vec<f32> = (0..n).map(|i| ((i + t) % 7) as f32).collect();
        move || {
            black_box(crate::simd::vectorized(
                #[inline(always)]
                || read_sum(black_box(&buf)),
            ));
        }
    });
    let bytes = (n * 4 * threads) as f64;
    Limit {
        per_second: if seconds > 0.0 && seconds.is_finite() {
            bytes / seconds
        } else {
            0.0
        },
        threads,
        level: level_name(Level::detected()),
    }
}

/// Independent FMA chains a thread runs: more than an FMA's latency times the units that
/// issue them (4 cycles × 2 units on current cores), few enough to stay in registers.
const CHAINS: usize = 10;

/// `rounds` rounds of `acc ← acc · a + b` on [`CHAINS`] chains of `W` lanes.
#[inline(always)]
fn fma_chains<const W: usize>(rounds: u64, fused: bool) -> f32 {
    let mut acc = [[0f32; W]; CHAINS];
    for (c, chain) in acc.iter_mut().enumerate() {
        for (l, x) in chain.iter_mut().enumerate() {
            *x = (c * W + l) as f32 * 1e-3;
        }
    }
    let (a, b) = (black_box(0.999_999_f32), black_box(1e-7_f32));
    for _ in 0..rounds {
        for chain in acc.iter_mut() {
            for x in chain.iter_mut() {
                *x = match fused {
                    true => x.mul_add(a, b),
                    false => *x * a + b,
                };
            }
        }
    }
    acc.iter().flatten().sum()
}

/// The f32 multiply-add throughput `threads` threads reach together, at the widest
/// vector width the CPU has: `rounds` rounds of ten independent FMA chains each,
/// `passes` times; two flops per lane per FMA, over the best pass's slowest thread.
/// Without FMA (a CPU below AVX2), a multiply and an add, the same two flops.
pub fn fma_peak(threads: usize, rounds: u64, passes: usize) -> Limit {
    let threads = threads.max(1);
    let level = Level::detected();
    let lanes = match level {
        Level::Avx512 => 16,
        Level::Avx2 => 8,
        Level::Baseline => 4,
    };
    // The chains are inlined by force into the function built for the level, as every
    // kernel's loop is: a debug build otherwise compiles them apart from it, each FMA a
    // call to libm (55 s a measurement, where it takes 0.1).
    let run = move || -> f32 {
        match level {
            // SAFETY: the level was detected on this CPU.
            Level::Avx512 => unsafe {
                level.run(
                    #[inline(always)]
                    || fma_chains::<16>(rounds, true),
                )
            },
            // SAFETY: as above.
            Level::Avx2 => unsafe {
                level.run(
                    #[inline(always)]
                    || fma_chains::<8>(rounds, true),
                )
            },
            Level::Baseline => fma_chains::<4>(rounds, false),
        }
    };
    let seconds = best_pass(threads, passes, |_| {
        move || {
            black_box(run());
        }
    });
    let flops = 2.0 * (rounds as f64) * (CHAINS * lanes * threads) as f64;
    Limit {
        per_second: if seconds > 0.0 && seconds.is_finite() {
            flops / seconds
        } else {
            0.0
        },
        threads,
        level: level_name(level),
    }
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::Avx512 => "avx512",
        Level::Avx2 => "avx2",
        Level::Baseline => "baseline",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels compute what they say: the read sums the buffer (checked against a
    /// plain sum), and the chains' result is the recurrence's, fused or not.
    #[test]
    fn the_kernels_compute_their_sums() {
        let x: Vec<f32> = (0..1024).map(|i| (i % 5) as f32).collect();
        assert_eq!(read_sum(&x), x.iter().sum::<f32>());
        let y: Vec<f32> = (0..1000).map(|i| (i % 5) as f32).collect();
        assert_eq!(
            read_sum(&y),
            y[..960].iter().sum::<f32>(),
            "fifteen whole blocks of 64"
        );
        let mut want = 0f32;
        for c in 0..CHAINS {
            for l in 0..4 {
                let mut v = (c * 4 + l) as f32 * 1e-3;
                for _ in 0..3 {
                    v = v.mul_add(0.999_999, 1e-7);
                }
                want += v;
            }
        }
        assert!((fma_chains::<4>(3, true) - want).abs() < 1e-5);
        let r = read_bandwidth(1, 1 << 20, 2);
        assert!(r.per_second > 0.0 && r.threads == 1);
        let p = fma_peak(1, 1000, 2);
        assert!(p.per_second > 0.0);
    }
}
