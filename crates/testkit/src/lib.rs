//! Test support shared by the workspace's test suites, kept out of the libraries' public API.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use candle_core::{DType, Device, Tensor};

/// The devices this build and machine run: the CPU, then the first CUDA (or Metal) GPU
/// where candle was built with that backend and one is present. Tests that run an op or a
/// model on each compare every other device with the CPU.
///
/// ```
/// assert!(posenc_testkit::devices()[0].is_cpu());
/// ```
pub fn devices() -> Vec<Device> {
    let mut all = vec![Device::Cpu];
    if candle_core::utils::cuda_is_available() {
        // Built with CUDA but without a GPU (or its driver): the CPU alone.
        all.extend(Device::new_cuda(0).ok());
    }
    if candle_core::utils::metal_is_available() {
        all.extend(Device::new_metal(0).ok());
    }
    all
}

/// The largest `|a − b|` over all elements, both compared in f32 on the CPU (they may
/// live on different devices).
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
    let f32 = |t: &Tensor| {
        t.to_device(&Device::Cpu)
            .and_then(|t| t.to_dtype(DType::F32))
            .expect("a tensor converts to f32 on the CPU")
    };
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

/// The largest absolute difference between two rows of values read out of tensors or a
/// fixture, laid end to end (nested rows flattened by the caller).
///
/// # Panics
/// If the lengths differ: a test has failed.
///
/// ```
/// assert_eq!(posenc_testkit::max_gap(&[1.0, 2.0], &[1.0, 2.5]), 0.5);
/// ```
pub fn max_gap(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(
        a.len(),
        b.len(),
        "cannot compare {} values with {}",
        a.len(),
        b.len()
    );
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The largest magnitude in `t`, in f32: the scale a tolerance is taken against.
///
/// # Panics
/// If the tensor cannot be read: a test has failed.
///
/// ```
/// use candle_core::{Device, Tensor};
/// let t = Tensor::new(&[1f32, -4.0, 3.0], &Device::Cpu).unwrap();
/// assert_eq!(posenc_testkit::max_abs(&t), 4.0);
/// ```
pub fn max_abs(t: &Tensor) -> f32 {
    t.to_device(&Device::Cpu)
        .and_then(|t| t.to_dtype(DType::F32))
        .and_then(|t| t.abs()?.max_all()?.to_scalar::<f32>())
        .expect("a tensor reads as f32 on the CPU")
}

/// A tensor of `shape` (f32, CPU) filled with numbers in `[lo, hi)` from a fixed
/// linear congruential sequence started at `seed`: the same values on every run and every
/// machine, independent of candle's generator, so a failure reproduces.
///
/// ```
/// let t = posenc_testkit::uniform(&[2, 3], 7, -2.0, 2.0);
/// let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
/// assert!(v.iter().all(|x| (-2.0..2.0).contains(x)));
/// assert_eq!(v, posenc_testkit::uniform(&[6], 7, -2.0, 2.0).to_vec1::<f32>().unwrap());
/// ```
pub fn uniform(shape: &[usize], seed: u64, lo: f32, hi: f32) -> Tensor {
    const A: u64 = 6364136223846793005;
    const C: u64 = 1442695040888963407;
    let n: usize = shape.iter().product();
    let mut state = seed.wrapping_mul(A).wrapping_add(C);
    let data: Vec<f32> = (0..n)
        .map(|_| {
            state = state.wrapping_mul(A).wrapping_add(C);
            lo + (hi - lo) * ((state >> 33) as f32 / (1u64 << 31) as f32)
        })
        .collect();
    Tensor::from_vec(data, shape, &candle_core::Device::Cpu).expect("the data fills the shape")
}

/// Whether two safetensors files hold the same tensors, bit for bit (their headers, which
/// name the run, may differ).
pub fn same_tensors(a: &std::path::Path, b: &std::path::Path) -> bool {
    let load =
        |p: &std::path::Path| candle_core::safetensors::load(p, &candle_core::Device::Cpu).unwrap();
    let (x, y) = (load(a), load(b));
    x.len() == y.len()
        && x.iter().all(|(k, t)| {
            y.get(k).is_some_and(|u| {
                t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
                    == u.flatten_all().unwrap().to_vec1::<f32>().unwrap()
            })
        })
}

/// The repository's root.
pub fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python of a client that `scripts/install_clients.sh` installs in `tests/<dir>/.venv`,
/// or `None` where it could not (it left its reason in `tests/<dir>/.unavailable`, which
/// this prints as the skip of `test`).
///
/// # Panics
/// Neither the client nor a reason is there: the install script was not run.
pub fn python_client(dir: &str, test: &str) -> Option<std::path::PathBuf> {
    let dir = repo().join("tests").join(dir);
    let python = dir.join(".venv/bin/python");
    if python.exists() {
        return Some(python);
    }
    match std::fs::read_to_string(dir.join(".unavailable")) {
        Ok(reason) => {
            eprintln!("SKIPPED {test}: {}", reason.trim());
            None
        }
        Err(_) => panic!(
            "{} is missing: run `bash scripts/install_clients.sh` (the README's test command \
             does)",
            python.display()
        ),
    }
}

/// Every number of a JSON value, nested arrays read in order, as f32: a fixture's tensor.
///
/// # Panics
/// On a value that is neither a number nor an array of them (a test's bad fixture).
pub fn json_values(v: &serde_json::Value) -> Vec<f32> {
    fn walk(v: &serde_json::Value, out: &mut Vec<f32>) {
        match v {
            serde_json::Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            other => out.push(other.as_f64().expect("a number") as f32),
        }
    }
    let mut out = Vec::new();
    walk(v, &mut out);
    out
}

/// A tensor's values, flattened, as f32.
///
/// # Panics
/// On a tensor that is not f32 (a test's mistake).
pub fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all()
        .and_then(|t| t.to_vec1::<f32>())
        .expect("an f32 tensor")
}
