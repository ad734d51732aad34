//! Test support shared by the workspace's test suites, kept out of the libraries' public API.

#![warn(missing_docs)]

use candle_core::{DType, Tensor};

/// The largest `|a − b|` over all elements, both compared in f32.
///
/// # Panics
/// If the shapes differ (naming both) or a tensor cannot be read: a test has failed.
///
/// ```
/// use candle_core::{Device, Tensor};
/// let a = Tensor::new(&[1f32, 2.0, 3.0], &Device::Cpu).unwrap();
/// let b = Tensor::new(&[1f32, 2.5, 3.0], &Device::Cpu).unwrap();
/// assert_eq!(posenc_testkit::max_abs_diff(&a, &b), 0.5);
/// ```
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(
        a.dims(),
        b.dims(),
        "cannot compare tensors of different shapes"
    );
    let f32 = |t: &Tensor| t.to_dtype(DType::F32).expect("a tensor converts to f32");
    (f32(a) - f32(b))
        .and_then(|d| d.abs())
        .and_then(|d| d.flatten_all())
        .and_then(|d| {
            if d.elem_count() == 0 {
                Ok(0.0)
            } else {
                d.max(0)?.to_scalar::<f32>()
            }
        })
        .expect("two tensors of one shape can be compared")
}
