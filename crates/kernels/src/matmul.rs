//! Batched matrix products through gemm, with their own backward.
//!
//! ```text
//! C_i = A_i B_i  for every batch index i,      ∂L/∂A_i = G_i B_iᵀ,   ∂L/∂B_i = A_iᵀ G_i
//! ```
//!
//! candle's CPU matmul is the same gemm, but it zero-fills its output on the calling thread
//! before the product overwrites it (a serial pass over 20 MB for a feed-forward layer of
//! MiniLM, while the other core waits), and it multiplies a batch of small matrices one
//! after the other, each too small for gemm to split over threads: attention's 384 products
//! of 110 × 32 by 32 × 110 ran on one core. Here the output is written once, by gemm, and a
//! batch of small products is spread over the threads, one product each. Operands are read
//! through their strides, so transposed views (`Bᵀ` in the backward) are never copied.

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Result, Shape, Tensor};
use gemm::Parallelism;
use rayon::prelude::*;

/// `a b` for `a (…, m, k)` and `b (…, k, n)` with the same leading (batch) dimensions:
/// `(…, m, n)`. Differentiable in both. Other dtypes than f32, and other devices than the
/// CPU, go to candle's `matmul`.
///
/// # Errors
/// If the ranks or batch dimensions differ, or the inner dimensions do not match.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (ra, rb) = (a.rank(), b.rank());
    if ra < 2 || ra != rb || a.dims()[..ra - 2] != b.dims()[..rb - 2] {
        candle_core::bail!(
            "matmul: shapes {:?} and {:?} must be (…, m, k) and (…, k, n) with the same batch",
            a.dims(),
            b.dims()
        );
    }
    if a.dims()[ra - 1] != b.dims()[rb - 2] {
        candle_core::bail!(
            "matmul: inner dimensions differ in {:?} · {:?}",
            a.dims(),
            b.dims()
        );
    }
    if a.dtype() != DType::F32 || b.dtype() != DType::F32 || !a.device().is_cpu() {
        return a.matmul(b);
    }
    a.apply_op2(b, MatMul)
}

pub(crate) struct MatMul;

/// A batch of matrices in storage: where matrix `i` starts, and its row and column strides.
struct Operand<'a> {
    data: &'a [f32],
    start: usize,
    batch_dims: &'a [usize],
    batch_strides: &'a [usize],
    rs: isize,
    cs: isize,
}

impl<'a> Operand<'a> {
    fn new(s: &'a CpuStorage, l: &'a Layout) -> Result<Self> {
        let CpuStorage::F32(data) = s else {
            candle_core::bail!("matmul: the operands must be f32")
        };
        let r = l.dims().len();
        Ok(Self {
            data,
            start: l.start_offset(),
            batch_dims: &l.dims()[..r - 2],
            batch_strides: &l.stride()[..r - 2],
            rs: l.stride()[r - 2] as isize,
            cs: l.stride()[r - 1] as isize,
        })
    }

    /// Matrix `i` of the batch.
    fn matrix(&self, mut i: usize) -> Mat {
        let mut offset = self.start;
        for (d, s) in self.batch_dims.iter().zip(self.batch_strides).rev() {
            offset += (i % d) * s;
            i /= d;
        }
        Mat {
            ptr: self.data[offset..].as_ptr(),
            rs: self.rs,
            cs: self.cs,
        }
    }
}

/// Products of at most this many multiply-adds run one per thread; larger ones are split
/// over the threads by gemm itself.
const SMALL: usize = 1 << 20;

/// A strided `f32` matrix in some storage: where it starts, and its row and column
/// strides (in elements).
#[derive(Clone, Copy)]
pub(crate) struct Mat {
    pub(crate) ptr: *const f32,
    pub(crate) rs: isize,
    pub(crate) cs: isize,
}

// SAFETY: a `Mat` is only read through, while the storage it points into is borrowed.
unsafe impl Send for Mat {}
unsafe impl Sync for Mat {}

impl Mat {
    /// A row-major matrix of `cols` columns whose rows follow one another in `data`.
    pub(crate) fn rows(data: &[f32], cols: usize) -> Self {
        Self {
            ptr: data.as_ptr(),
            rs: cols as isize,
            cs: 1,
        }
    }

    /// The same matrix without its first `r` rows (the pointer moves; nothing is read).
    pub(crate) fn skip_rows(self, r: usize) -> Self {
        Self {
            ptr: self.ptr.wrapping_offset(r as isize * self.rs),
            ..self
        }
    }

    /// The transposed view of the same elements.
    pub(crate) fn t(self) -> Self {
        Self {
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
}

/// A pointer to output that may cross threads: each task writes only its own elements.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(pub(crate) *mut f32);

// SAFETY: the tasks given an `OutPtr` write disjoint elements of one allocation that
// outlives them.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The element `offset` past the start (taking `self` whole, so closures capture the
    /// `Sync` wrapper rather than the bare pointer).
    ///
    /// # Safety
    /// `offset` must lie inside the allocation.
    pub(crate) unsafe fn at(self, offset: usize) -> *mut f32 {
        // SAFETY: the caller's promise.
        unsafe { self.0.add(offset) }
    }
}

/// `C = s·A B` (or `C += s·A B` with `accumulate`) for `A (m, k)`, `B (k, n)` and a
/// row-major `C` whose rows are `c_rs` elements apart.
///
/// # Safety
/// The three matrices must be valid for their sizes and strides, and `C` written by no
/// one else meanwhile.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_into(
    (m, n, k): (usize, usize, usize),
    c: *mut f32,
    c_rs: usize,
    accumulate: bool,
    a: Mat,
    b: Mat,
    s: f32,
    parallelism: Parallelism,
) {
    // SAFETY: the caller's promise; with `read_dst = false` gemm writes every element.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
            1,
            c_rs as isize,
            accumulate,
            a.ptr,
            a.cs,
            a.rs,
            b.ptr,
            b.cs,
            b.rs,
            1.0,
            s,
            false,
            false,
            false,
            parallelism,
        )
    }
}

/// gemm's threading for one large product: all of rayon's threads.
pub(crate) fn all_threads() -> Parallelism {
    match rayon::current_num_threads() {
        1 => Parallelism::None,
        t => Parallelism::Rayon(t),
    }
}

impl CustomOp2 for MatMul {
    fn name(&self) -> &'static str {
        "matmul"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (a, b) = (Operand::new(s1, l1)?, Operand::new(s2, l2)?);
        let r = l1.dims().len();
        let (m, k, n) = (l1.dims()[r - 2], l1.dims()[r - 1], l2.dims()[r - 1]);
        let batch: usize = a.batch_dims.iter().product();
        let mut dims = l1.dims().to_vec();
        dims[r - 1] = n;
        let len = batch * m * n;
        let mut out: Vec<f32> = Vec::with_capacity(len);
        let dst = OutPtr(out.as_mut_ptr());
        let product = |i: usize, parallelism: Parallelism| {
            // SAFETY: matrix `i` of the output is `m·n` elements at `i·m·n`, inside the
            // allocation of `len`, and no other task writes it; `a` and `b` are read
            // through strides their layouts allow.
            unsafe {
                gemm_into(
                    (m, n, k),
                    dst.at(i * m * n),
                    n,
                    false,
                    a.matrix(i),
                    b.matrix(i),
                    1.0,
                    parallelism,
                )
            }
        };
        if batch > 1 && m * n * k <= SMALL && rayon::current_num_threads() > 1 {
            (0..batch)
                .into_par_iter()
                .for_each(|i| product(i, Parallelism::None));
        } else {
            (0..batch).for_each(|i| product(i, all_threads()));
        }
        // SAFETY: every one of the `len` elements was written above.
        unsafe { out.set_len(len) };
        Ok((CpuStorage::F32(out), Shape::from(dims)))
    }

    fn bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        _c: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let ga = grad.apply_op2_no_bwd(&b.t()?, &MatMul)?;
        let gb = a.t()?.apply_op2_no_bwd(grad, &MatMul)?;
        Ok((Some(ga), Some(gb)))
    }
}
