//! The properties the documents ask of a positional encoding, as numbers.
//!
//! For an encoding, a model width and a sequence length, [`analyze`] measures:
//!
//! - **uniqueness**: the smallest distance `‖v(p) − v(q)‖` between the vectors of two
//!   different positions (0: two positions look alike);
//! - **boundedness**: the largest `|value|` the encoding adds, rotates by or biases with;
//! - **length drift**: how much position `p`'s vector changes when the sequence doubles
//!   (`max |v_L(p) − v_2L(p)|`, `p < L`; 0 for every encoding but `fraction`);
//! - **shift residual**: fit one matrix `M_k` with `v(p + k) ≈ M_k v(p)` across all
//!   positions by least squares and report `‖V_(k..) − V_(..L−k) M_kᵀ‖_F / ‖V_(k..)‖_F`.
//!   For sinusoids `M_k` is exact (block-diagonal rotations), so this is ~0;
//! - **relative residual**: with `S(i, j)` the interaction of positions `i` and `j`
//!   (`v(i)·v(j)` for additive encodings, `⟨R_i q, R_j k⟩` for rotary ones, the bias
//!   itself for bias encodings), `max |S(i, j) − S(i−1, j−1)| / max |S|`: 0 when `S`
//!   depends on `j − i` only;
//! - **symmetry**: `max |S(p, p+k) − S(p, p−k)| / max |S|`;
//! - **decay**: `mean_p S(p, p − k)` for `k = 0, 1, …` and how far it keeps falling.
//!
//! Here `v(p)` is the row the encoding adds (additive encodings) or the `[cos | sin]`
//! angles it rotates by (rotary ones); bias encodings have no vector.

use candle_core::{DType, Device, Tensor};
use serde::Serialize;

use crate::{Error, Form, PositionalEncoding, Result, RotateContext};

/// Where to measure: the model's width and heads, the sequence length and the shift `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// Model width.
    pub d_model: usize,
    /// Attention heads (the rotary hook acts on `d_model / heads` wide heads).
    pub heads: usize,
    /// Sequence length.
    pub len: usize,
    /// The shift `k` of the shift residual.
    pub shift: usize,
}

/// The measured properties of one encoding at one [`Setting`]. See the module docs.
#[derive(Debug, Clone, Serialize)]
pub struct Properties {
    /// Encoding kind.
    pub kind: String,
    /// Model width.
    pub d_model: usize,
    /// Sequence length.
    pub len: usize,
    /// The shift `k` of `shift_residual`.
    pub shift: usize,
    /// Smallest distance between two positions' vectors (`None`: the encoding has no vectors).
    pub uniqueness: Option<f64>,
    /// Largest absolute value.
    pub max_abs: f64,
    /// Largest change of a position's vector when the sequence doubles.
    pub length_drift: f64,
    /// Relative residual of the best linear map `v(p) ↦ v(p + shift)` (`None`: no vectors,
    /// or fewer positions than dimensions, where every encoding fits exactly).
    pub shift_residual: Option<f64>,
    /// 0 when the interaction of two positions depends only on their offset.
    pub relative_residual: f64,
    /// 0 when the interaction at offset `+k` equals that at `−k`.
    pub symmetry_residual: f64,
    /// `mean_p S(p, p − k)` for `k = 0 … len − 1`.
    pub decay: Vec<f64>,
    /// The largest `k` up to which `decay` does not increase.
    pub monotone_until: usize,
}

type Matrix = Vec<Vec<f64>>;

fn matrix(t: &Tensor) -> Result<Matrix> {
    let rows: Vec<Vec<f32>> = t.to_dtype(DType::F32)?.to_vec2()?;
    Ok(rows
        .into_iter()
        .map(|r| r.into_iter().map(f64::from).collect())
        .collect())
}

/// What one table says: position vectors (if any) and the interaction matrices (one per head).
struct View {
    vectors: Option<Matrix>,
    scores: Vec<Matrix>,
    values: Vec<f64>,
}

fn view(enc: &dyn PositionalEncoding, setting: Setting, len: usize) -> Result<View> {
    let heads_of = |t: &Tensor| -> Result<Vec<Matrix>> {
        (0..t.dim(0)?).map(|h| matrix(&t.get(h)?)).collect()
    };
    Ok(match enc.table(len)?.form {
        Form::Additive { values, .. } => {
            let v = matrix(&values)?;
            View {
                scores: vec![gram(&v, &v)],
                values: v.concat(),
                vectors: Some(v),
            }
        }
        Form::Rotary { cos, sin } => {
            let v = matrix(&Tensor::cat(&[&cos, &sin], 1)?)?;
            View {
                scores: vec![rotary_scores(enc, setting, len, cos.device())?],
                values: v.concat(),
                vectors: Some(v),
            }
        }
        Form::Bias { bias, .. } => {
            let scores = heads_of(&bias)?;
            View {
                values: scores.concat().concat(),
                scores,
                vectors: None,
            }
        }
    })
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn gram(a: &Matrix, b: &Matrix) -> Matrix {
    a.iter()
        .map(|r| b.iter().map(|s| dot(r, s)).collect())
        .collect()
}

/// `⟨R_i q, R_j k⟩` for one fixed query and key, rotated by the encoding's own hook, in
/// head 0 (every head gets them: an encoding may turn each head's keys its own way).
fn rotary_scores(
    enc: &dyn PositionalEncoding,
    setting: Setting,
    len: usize,
    device: &Device,
) -> Result<Matrix> {
    let head_dim = crate::limits::head_dim(setting.d_model, setting.heads)?;
    // A fixed, irregular query and key, the same at every position.
    let fixed = |phase: f64| -> Result<Tensor> {
        let v: Vec<f32> = (0..head_dim)
            .map(|i| ((i as f64 + 1.0) * phase).sin() as f32)
            .collect();
        let v = Tensor::new(v, device)?;
        Ok(v.broadcast_as((1, setting.heads, len, head_dim))?
            .contiguous()?)
    };
    let head0 = |t: Tensor| -> Result<Tensor> { Ok(t.get(0)?.get(0)?) };
    let q = head0(enc.rotate(&fixed(1.3)?, &RotateContext::query(0))?)?;
    let k = head0(enc.rotate(&fixed(0.7)?, &RotateContext::key(0))?)?;
    Ok(gram(&matrix(&q)?, &matrix(&k)?))
}

fn max_abs(values: impl IntoIterator<Item = f64>) -> f64 {
    values.into_iter().fold(0.0, |m, x| m.max(x.abs()))
}

/// Smallest Euclidean distance between two rows.
fn min_distance(v: &Matrix) -> f64 {
    let mut best = f64::INFINITY;
    for (p, a) in v.iter().enumerate() {
        for b in &v[p + 1..] {
            let d2: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
            best = best.min(d2.sqrt());
        }
    }
    best
}

/// The least-squares fit `Y ≈ X Mᵀ` of one set of vectors by a linear map of another.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearFit {
    /// `X Mᵀ`: the best linear image of each row of `X`.
    pub fitted: Vec<Vec<f64>>,
    /// `‖Y − X Mᵀ‖_F / ‖Y‖_F` (0 when `Y` is 0): 0 when a linear map is exact.
    pub residual: f64,
}

/// Fits `Y ≈ X Mᵀ` by least squares, rows being samples: the one definition of "`y` is a
/// linear map of `x`" that [`analyze`] and the figures use. `Y` is projected onto the
/// column space of `X` by Gram–Schmidt (twice, for stability), which makes the fit unique
/// even when `X` is rank-deficient; a column whose remainder is below 10⁻⁹ of the
/// largest value (times `√rows`) is dependent and dropped.
///
/// # Panics
/// Never; `x` and `y` with different row counts are fitted over the shorter.
pub fn linear_fit(x: &[Vec<f64>], y: &[Vec<f64>]) -> LinearFit {
    let n = x.len().min(y.len());
    let column = |m: &[Vec<f64>], j: usize| -> Vec<f64> { (0..n).map(|i| m[i][j]).collect() };
    let scale = max_abs(x[..n].iter().flatten().copied()).max(1e-300);
    let mut basis: Vec<Vec<f64>> = Vec::new();
    for j in 0..x.first().map_or(0, Vec::len) {
        let mut c = column(x, j);
        for _ in 0..2 {
            for b in &basis {
                let r = dot(&c, b);
                c.iter_mut().zip(b).for_each(|(ci, bi)| *ci -= r * bi);
            }
        }
        let norm = dot(&c, &c).sqrt();
        if norm > 1e-9 * scale * (n as f64).sqrt() {
            basis.push(c.into_iter().map(|ci| ci / norm).collect());
        }
    }
    let width = y.first().map_or(0, Vec::len);
    let mut fitted = vec![vec![0.0; width]; n];
    let (mut residual, mut total) = (0.0, 0.0);
    for j in 0..width {
        let c = column(y, j);
        let mut projected = vec![0.0; n];
        for b in &basis {
            let r = dot(&c, b);
            projected
                .iter_mut()
                .zip(b)
                .for_each(|(pi, bi)| *pi += r * bi);
        }
        for ((row, &ci), &pi) in fitted.iter_mut().zip(&c).zip(&projected) {
            row[j] = pi;
            residual += (ci - pi).powi(2);
        }
        total += dot(&c, &c);
    }
    let residual = if total == 0.0 {
        0.0
    } else {
        (residual / total).sqrt()
    };
    LinearFit { fitted, residual }
}

/// The residual of the best linear map from `v(p)` to `v(p + shift)` over every position,
/// [`linear_fit`] of the rows `..len − shift` to the rows `shift..`; `None` when fewer
/// positions than dimensions remain, where every encoding fits exactly.
pub fn shift_residual(vectors: &[Vec<f64>], shift: usize) -> Option<f64> {
    let len = vectors.len();
    let dims = vectors.first().map_or(0, Vec::len);
    (shift < len && len - shift > dims)
        .then(|| linear_fit(&vectors[..len - shift], &vectors[shift..]).residual)
}

/// Largest `|S(i, j) − S(i−1, j−1)|` (Toeplitz residual), over every head.
fn relative_residual(scores: &[Matrix]) -> f64 {
    scores
        .iter()
        .flat_map(|s| {
            (1..s.len())
                .flat_map(move |i| (1..s[i].len()).map(move |j| (s[i][j] - s[i - 1][j - 1]).abs()))
        })
        .fold(0.0, f64::max)
}

fn symmetry_residual(scores: &[Matrix]) -> f64 {
    let mut worst: f64 = 0.0;
    for s in scores {
        let n = s.len();
        for p in 0..n {
            for k in 1..=p.min(n - 1 - p) {
                worst = worst.max((s[p][p + k] - s[p][p - k]).abs());
            }
        }
    }
    worst
}

/// `mean over heads and p ≥ k of S(p, p − k)`, for `k = 0 … len − 1`.
fn decay(scores: &[Matrix]) -> Vec<f64> {
    let n = scores.first().map_or(0, Vec::len);
    (0..n)
        .map(|k| {
            let values: Vec<f64> = scores
                .iter()
                .flat_map(|s| (k..n).map(move |p| s[p][p - k]))
                .collect();
            values.iter().sum::<f64>() / values.len() as f64
        })
        .collect()
}

/// Measures every property of `enc` at `setting`. Needs `len ≥ 2` and `0 < shift < len`,
/// and `len` within [`crate::limits::MAX_TABLE_LEN`].
pub fn analyze(enc: &dyn PositionalEncoding, setting: Setting) -> Result<Properties> {
    let Setting { len, shift, .. } = setting;
    crate::limits::check_table_len(len)?;
    if len < 2 || shift == 0 || shift >= len {
        return Err(Error::Config(format!(
            "analysis needs len ≥ 2 and 0 < shift < len, got len = {len}, shift = {shift}"
        )));
    }
    let here = view(enc, setting, len)?;
    let doubled = view(enc, setting, 2 * len)?;

    let length_drift = match (&here.vectors, &doubled.vectors) {
        (Some(a), Some(b)) => max_abs(
            a.iter()
                .zip(b)
                .flat_map(|(r, s)| r.iter().zip(s).map(|(x, y)| x - y)),
        ),
        _ => max_abs(here.scores.iter().zip(&doubled.scores).flat_map(|(a, b)| {
            a.iter()
                .zip(b)
                .flat_map(|(r, s)| r.iter().zip(s).map(|(x, y)| x - y))
        })),
    };
    let shift_residual = here.vectors.as_ref().and_then(|v| shift_residual(v, shift));
    let scale = max_abs(here.scores.iter().flatten().flatten().copied());
    let relative = |x: f64| if scale == 0.0 { 0.0 } else { x / scale };
    let decay = decay(&here.scores);
    let tolerance = 1e-9 * scale.max(1.0);
    let monotone_until = decay
        .windows(2)
        .position(|w| w[1] > w[0] + tolerance)
        .unwrap_or(decay.len().saturating_sub(1));

    Ok(Properties {
        kind: enc.kind().to_string(),
        d_model: setting.d_model,
        len,
        shift,
        uniqueness: here.vectors.as_ref().map(min_distance),
        max_abs: max_abs(here.values.iter().copied()),
        length_drift,
        shift_residual,
        relative_residual: relative(relative_residual(&here.scores)),
        symmetry_residual: relative(symmetry_residual(&here.scores)),
        decay,
        monotone_until,
    })
}
