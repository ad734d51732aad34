//! The Encodings view: what one encoding produces at a width and a length, in the three
//! pictures the page draws, computed through the encoding's own hooks as `posenc encoding
//! show` and `posenc plot encoding` compute them.
//!
//! - **table**: the encoding's [`posenc::Table`] as a heatmap, at up to [`MAX_SIDE`]
//!   positions spread evenly over the length (every position when the length is short);
//! - **by distance**: how the interaction of the last position with each earlier one
//!   falls off with their distance, per head (`PE(p)·PE(p−k)` for an added encoding,
//!   `⟨R_p q, R_(p−k) k⟩` for a fixed query and key under a rotary one, the bias itself for
//!   a bias);
//! - **pairs**: each (cos, sin) pair's point on the unit circle at every sampled position,
//!   for the encodings that turn pairs (sinusoidal's columns, rotary angles).

use candle_core::{Device, Tensor};
use std::sync::Arc;

use posenc::{BiasContext, EncodingConfig, Form, PositionalEncoding, Positions, RotateContext};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// The most positions (and columns) a heatmap or a circle view samples.
pub const MAX_SIDE: usize = 128;
/// The most pairs the circle view draws.
pub const MAX_PAIRS: usize = 64;

/// `POST /api/encoding`: which encoding, at which size.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncodingRequest {
    /// The encoding as `--encoding` takes it: a JSON object (`{"kind": "rope", "base":
    /// 500000}`), or a string (`"rope"`, `"rope:layout=interleaved"`).
    pub encoding: serde_json::Value,
    /// Model width.
    pub d_model: usize,
    /// Attention heads.
    #[serde(default = "one")]
    pub heads: usize,
    /// Sequence length.
    pub len: usize,
    /// For a kind that reads coordinates: the image whose patches the grid view places,
    /// `[rows, columns]` [default: `[8, 8]`]. Refused for a kind of one position a token.
    #[serde(default)]
    pub grid: Option<[usize; 2]>,
    /// The query patch of the grid view, `[row, column]` [default: the grid's centre].
    #[serde(default)]
    pub query: Option<[usize; 2]>,
}

fn one() -> usize {
    1
}

/// What the page draws for one encoding.
#[derive(Debug, Clone, Serialize)]
pub struct EncodingView {
    /// The encoding, with every setting at its value (defaults filled in).
    pub config: serde_json::Value,
    /// Its kind.
    pub kind: String,
    /// The table's heatmap.
    pub table: Heatmap,
    /// Interaction of the last position with each earlier one, per head.
    pub by_distance: ByDistance,
    /// Each turning pair's point at each sampled position, if the encoding turns pairs.
    pub pairs: Option<Pairs>,
    /// How many coordinates a token's position has for it: 0 for one position a token.
    pub coords: usize,
    /// For a kind that reads coordinates: the query patch's interaction with every patch.
    pub grid: Option<GridView>,
    /// For a kind of three coordinates: where Qwen2-VL's rule places text, the image and
    /// text again ([`posenc::mrope::layout`]).
    pub layout: Option<Layout>,
}

/// The default image of the grid view, and the largest side it draws.
pub const DEFAULT_GRID: [usize; 2] = [8, 8];
/// The most rows or columns the grid view places.
pub const MAX_GRID_SIDE: usize = 32;
/// The text tokens [`Layout`] puts before and after the image.
pub const LAYOUT_TEXT: usize = 4;

/// The interaction of one query patch with every patch of an image, per head:
/// `values[head][row][column]`.
#[derive(Debug, Clone, Serialize)]
pub struct GridView {
    /// What the values are.
    pub title: String,
    /// The image, `[rows, columns]`.
    pub grid: [usize; 2],
    /// The query patch, `[row, column]`.
    pub query: [usize; 2],
    /// `[head][row][column]`; `null` where a key is shut out.
    pub values: Vec<Vec<Vec<Option<f32>>>>,
}

/// The coordinates of a sequence of text, one image and text, token after token.
#[derive(Debug, Clone, Serialize)]
pub struct Layout {
    /// What the sequence is.
    pub title: String,
    /// `text` or `image`, per token.
    pub segment: Vec<&'static str>,
    /// The tokens' coordinates, `[token][axis]`: time, row, column.
    pub coords: Vec<[u32; 3]>,
}

/// A heatmap of one table: `values[head][row][column]` (one head for tables that have no
/// heads).
#[derive(Debug, Clone, Serialize)]
pub struct Heatmap {
    /// What the values are (`PE(pos, i)`, `cos(pos·θ_i)`, `bias(query, key)`).
    pub title: String,
    /// What the rows are (`position`, `query`).
    pub row_name: String,
    /// What the columns are (`dimension`, `pair`, `key`).
    pub column_name: String,
    /// The rows' positions.
    pub rows: Vec<usize>,
    /// The columns' indices.
    pub columns: Vec<usize>,
    /// The values, `[head][row][column]`; a masked or unbounded bias is `null`.
    pub values: Vec<Vec<Vec<Option<f32>>>>,
}

/// `S(p, p − k)` for the last position `p` and `k = 0 … len − 1`, per head.
#[derive(Debug, Clone, Serialize)]
pub struct ByDistance {
    /// What the interaction is.
    pub title: String,
    /// `values[head][i]`; `null` where it is −∞ (outside a window).
    pub values: Vec<Vec<Option<f32>>>,
    /// The distance `k` of each value, when they are sampled; absent: `k = i`, every
    /// distance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distances: Option<Vec<usize>>,
}

/// Each pair's `(cos, sin)` at each sampled position: `x[row][pair]`, `y[row][pair]`.
#[derive(Debug, Clone, Serialize)]
pub struct Pairs {
    /// The sampled positions.
    pub positions: Vec<usize>,
    /// The pairs drawn (indices among the encoding's pairs, fastest first).
    pub pairs: Vec<usize>,
    /// `cos` of each pair's angle, `[row][pair]`.
    pub x: Vec<Vec<f32>>,
    /// `sin` of each pair's angle, `[row][pair]`.
    pub y: Vec<Vec<f32>>,
}

/// Parses an encoding as `--encoding` does: a string or a JSON object.
///
/// # Errors
/// The same named errors as the command line: an unknown kind, a bad setting.
pub fn parse(value: &serde_json::Value) -> Result<EncodingConfig, ApiError> {
    match value {
        serde_json::Value::String(text) => {
            let entry: posenc_train::labelled::Labelled =
                text.parse().map_err(ApiError::bad_request)?;
            if entry.randomized_positions.is_some() {
                return Err(ApiError::bad_request(
                    "randomized positions change training, not the encoding: leave them out here",
                ));
            }
            Ok(entry.encoding)
        }
        serde_json::Value::Object(_) => {
            serde_json::from_value(value.clone()).map_err(ApiError::bad_request)
        }
        other => Err(ApiError::bad_request(format!(
            "an encoding is a kind (\"rope\") or a JSON object ({{\"kind\": \"rope\"}}), got {other}"
        ))),
    }
}

/// Computes the view of `request`.
///
/// # Errors
/// A malformed encoding, sizes past [`posenc::limits`], heads that do not divide the width,
/// a length past a learned table's end: each named, as the command line names them.
pub fn view(request: &EncodingRequest) -> Result<EncodingView, ApiError> {
    let config = parse(&request.encoding)?;
    let EncodingRequest {
        d_model,
        heads,
        len,
        ..
    } = *request;
    let bad = ApiError::bad_request;
    posenc::limits::check_positive("d_model", d_model, posenc::limits::MAX_D_MODEL).map_err(bad)?;
    posenc::limits::check_positive("heads", heads, posenc::limits::MAX_HEADS).map_err(bad)?;
    posenc::limits::check_table_len(len).map_err(bad)?;
    if len < 2 {
        return Err(ApiError::bad_request(format!(
            "len must be at least 2, got {len}"
        )));
    }
    let enc = config
        .build_untrained(d_model, heads, &Device::Cpu)
        .map_err(bad)?;
    let mut view = compute(&enc, config.to_json(), (d_model, heads), len).map_err(bad)?;
    let hooks = posenc::for_layer(&enc, 0);
    let axes = hooks.capabilities().coords;
    if axes < 2 {
        if request.grid.is_some() || request.query.is_some() {
            return Err(ApiError::bad_request(format!(
                "`{}` reads one position per token: a grid and a query patch are for a kind that \
                 reads coordinates",
                enc.kind()
            )));
        }
        return Ok(view);
    }
    let grid = request.grid.unwrap_or(DEFAULT_GRID);
    if grid.iter().any(|&n| !(1..=MAX_GRID_SIDE).contains(&n)) {
        return Err(ApiError::bad_request(format!(
            "a grid of 1 to {MAX_GRID_SIDE} rows and columns, got {} × {}",
            grid[0], grid[1]
        )));
    }
    let query = request.query.unwrap_or([grid[0] / 2, grid[1] / 2]);
    if query[0] >= grid[0] || query[1] >= grid[1] {
        return Err(ApiError::bad_request(format!(
            "the query patch ({}, {}) lies outside the {} × {} grid",
            query[0], query[1], grid[0], grid[1]
        )));
    }
    view.coords = axes;
    view.grid = Some(grid_view(&*hooks, (d_model, heads), grid, query).map_err(bad)?);
    if axes == 3 {
        view.layout = Some(layout(grid).map_err(bad)?);
    }
    Ok(view)
}

/// The score of the query patch against every patch of a `grid` image, per head, from the
/// encoding's table at the patches' coordinates (as `posenc encoding show --grid` prints
/// it): `PE(q)·PE(k)` for an added table, the table's own cell for a bias (or for a rotation
/// whose table is its scores, LieRE's), and `E⟨R_q e, R_k e⟩ / d` over the basis vectors `e`
/// of a head, through the hook, for rotary angles.
fn grid_view(
    enc: &dyn PositionalEncoding,
    (d_model, heads): (usize, usize),
    grid: [usize; 2],
    query: [usize; 2],
) -> posenc::Result<GridView> {
    let axes = enc.capabilities().coords;
    let coords = Positions::image_coords(axes, grid);
    let at = Positions::Coords {
        axes,
        coords: &coords,
    };
    let n = grid[0] * grid[1];
    let q = query[0] * grid[1] + query[1];
    let table = enc.table_at(at, n)?;
    let (what, score): (String, Vec<Vec<Option<f32>>>) = match table.form {
        Form::Additive { values, .. } => {
            let pe: Vec<Vec<f32>> = values.to_vec2()?;
            let row = (0..n).map(|k| Some(dot(&pe[q], &pe[k]))).collect();
            ("PE(q)·PE(k)".into(), vec![row])
        }
        Form::Bias { bias, .. } => {
            let bias: Vec<Vec<Vec<f32>>> = bias.to_vec3()?;
            let rows = bias
                .into_iter()
                .map(|h| {
                    h[q].iter()
                        .map(|&x| masked(x).filter(|x| x.is_finite()))
                        .collect()
                })
                .collect();
            (table.title, rows)
        }
        Form::Rotary { .. } => {
            let head_dim = d_model / heads;
            let mut sum = vec![vec![0f32; n]; heads];
            for j in 0..head_dim {
                let e = basis(j, head_dim, heads, n)?;
                let rq: Vec<Vec<Vec<f32>>> = enc
                    .rotate(&e, &RotateContext::query(at))?
                    .squeeze(0)?
                    .to_vec3()?;
                let rk: Vec<Vec<Vec<f32>>> = enc
                    .rotate(&e, &RotateContext::key(at))?
                    .squeeze(0)?
                    .to_vec3()?;
                for (h, row) in sum.iter_mut().enumerate() {
                    for (k, s) in row.iter_mut().enumerate() {
                        *s += dot(&rq[h][q], &rk[h][k]) / head_dim as f32;
                    }
                }
            }
            let rows = sum
                .into_iter()
                .map(|r| r.into_iter().map(Some).collect())
                .collect();
            ("E⟨R_q e, R_k e⟩ / d over the basis e".into(), rows)
        }
    };
    let values = score
        .into_iter()
        .map(|row| row.chunks(grid[1]).map(<[_]>::to_vec).collect())
        .collect();
    Ok(GridView {
        title: format!(
            "{what}: the query patch ({}, {}) with each patch of an image of {} × {}",
            query[0], query[1], grid[0], grid[1]
        ),
        grid,
        query,
        values,
    })
}

/// Text, a `grid` image of one frame and text, placed by Qwen2-VL's rule.
fn layout(grid: [usize; 2]) -> posenc::Result<Layout> {
    use posenc::mrope::Segment;
    let coords = posenc::mrope::layout(&[
        Segment::Text(LAYOUT_TEXT),
        Segment::Image {
            t: 1,
            h: grid[0],
            w: grid[1],
        },
        Segment::Text(LAYOUT_TEXT),
    ])?;
    let image = grid[0] * grid[1];
    let segment = (0..2 * LAYOUT_TEXT + image)
        .map(|i| match (LAYOUT_TEXT..LAYOUT_TEXT + image).contains(&i) {
            true => "image",
            false => "text",
        })
        .collect();
    Ok(Layout {
        title: format!(
            "each token's (time, row, column) by Qwen2-VL's rule: {LAYOUT_TEXT} text tokens, \
             an image of {} × {}, {LAYOUT_TEXT} text tokens",
            grid[0], grid[1]
        ),
        segment,
        coords: coords.chunks(3).map(|c| [c[0], c[1], c[2]]).collect(),
    })
}

/// `(1, heads, n, head_dim)`: basis vector `e_j` at every token of every head.
fn basis(j: usize, head_dim: usize, heads: usize, n: usize) -> posenc::Result<Tensor> {
    let v: Vec<f32> = (0..head_dim).map(|i| f32::from(i == j)).collect();
    Ok(Tensor::new(v, &Device::Cpu)?
        .broadcast_as((1, heads, n, head_dim))?
        .contiguous()?)
}

fn compute(
    enc: &Arc<dyn PositionalEncoding>,
    config: serde_json::Value,
    (d_model, heads): (usize, usize),
    len: usize,
) -> posenc::Result<EncodingView> {
    let rows = sample(len, MAX_SIDE);
    // The hooks of a per-layer pattern act through its layers: the first layer's are drawn,
    // as its table is.
    let first = posenc::for_layer(enc, 0);
    let hooks = &*first;
    // A bias is read through the hook at the sampled positions only: a whole (heads, len,
    // len) table at 2 048 positions is a quarter of a gigabyte. The form is known from a
    // table too short to cost anything.
    let probe = enc.table(2)?;
    let (table, by_distance, pairs) = match probe.form {
        // A bias read from the tokens has none at bare positions: its own table (what it
        // gives a run of digits, for position coupling) stands in.
        Form::Bias { .. } if hooks.capabilities().reads_tokens => {
            table_bias_views(&**enc, len, &rows)?
        }
        // A rotation whose table is its scores (LieRE's): the table at the sampled
        // positions, and the last one's row of it by distance.
        Form::Bias { .. } if hooks.capabilities().rotates => {
            sampled_table_views(hooks, len, &rows)?
        }
        Form::Bias { .. } => bias_views(hooks, &probe.title, len, &rows)?,
        _ => match enc.table(len)? {
            posenc::Table {
                title,
                form: Form::Additive { values, pairs },
            } => {
                let values: Vec<Vec<f32>> = values.to_vec2()?;
                let last = &values[len - 1];
                let by_distance = (0..len)
                    .map(|k| Some(dot(last, &values[len - 1 - k])))
                    .collect();
                // (sin, cos) column pairs, drawn as (cos, sin) points.
                let turning = (!pairs.is_empty()).then(|| {
                    let (sin, cos): (Vec<usize>, Vec<usize>) = pairs.iter().copied().unzip();
                    turning_pairs(&values, &cos, &values, &sin, &rows)
                });
                (
                    position_heatmap(title, "dimension", &values, &rows),
                    ByDistance {
                        title: "PE(p)·PE(p − k), p the last position".into(),
                        values: vec![by_distance],
                        distances: None,
                    },
                    turning,
                )
            }
            posenc::Table {
                title,
                form: Form::Rotary { cos, sin },
            } => {
                let (cos, sin): (Vec<Vec<f32>>, Vec<Vec<f32>>) = (cos.to_vec2()?, sin.to_vec2()?);
                let half = cos[0].len();
                let all: Vec<usize> = (0..half).collect();
                (
                    position_heatmap(format!("cos(pos·θ_i), {title}"), "pair", &cos, &rows),
                    ByDistance {
                        title: "E⟨R_p q, R_(p−k) q⟩ / d over q ~ N(0, I), p the last position"
                            .into(),
                        values: vec![rotary_by_distance(hooks, (d_model / heads, heads), len)?],
                        distances: None,
                    },
                    Some(turning_pairs(&cos, &all, &sin, &all, &rows)),
                )
            }
            posenc::Table {
                title,
                form: Form::Bias { .. },
            } => bias_views(hooks, &title, len, &rows)?,
        },
    };
    Ok(EncodingView {
        config,
        kind: enc.kind().to_string(),
        table,
        by_distance,
        pairs,
        coords: 0,
        grid: None,
        layout: None,
    })
}

/// The heatmap of a `(len, columns)` table at the sampled `rows` and up to [`MAX_SIDE`]
/// of its columns.
fn position_heatmap(
    title: impl Into<String>,
    column_name: &str,
    values: &[Vec<f32>],
    rows: &[usize],
) -> Heatmap {
    let columns = sample(values[0].len(), MAX_SIDE);
    Heatmap {
        title: title.into(),
        row_name: "position".into(),
        column_name: column_name.into(),
        values: vec![pick(values, rows, |row| {
            columns.iter().map(|&c| Some(row[c])).collect()
        })],
        rows: rows.to_vec(),
        columns,
    }
}

/// Up to [`MAX_PAIRS`] of the pairs whose `cos` lies in column `cos_columns[i]` of `cos`
/// and `sin` in column `sin_columns[i]` of `sin`, at the sampled `rows`.
fn turning_pairs(
    cos: &[Vec<f32>],
    cos_columns: &[usize],
    sin: &[Vec<f32>],
    sin_columns: &[usize],
    rows: &[usize],
) -> Pairs {
    let chosen = sample(cos_columns.len(), MAX_PAIRS);
    let at = |table: &[Vec<f32>], columns: &[usize]| {
        pick(table, rows, |row| {
            chosen.iter().map(|&i| row[columns[i]]).collect()
        })
    };
    Pairs {
        x: at(cos, cos_columns),
        y: at(sin, sin_columns),
        positions: rows.to_vec(),
        pairs: chosen.clone(),
    }
}

/// A bias encoding's heatmap per head at the sampled queries and keys, and the last
/// position's bias against each earlier one; `title` is its table's.
fn bias_views(
    enc: &dyn PositionalEncoding,
    title: &str,
    len: usize,
    rows: &[usize],
) -> posenc::Result<(Heatmap, ByDistance, Option<Pairs>)> {
    let at: Vec<u32> = rows.iter().map(|&p| p as u32).collect();
    let bias = enc
        .bias(&BiasContext::square(at.len(), Positions::At(&at)))?
        .map(|b| b.to_vec3::<f32>())
        .transpose()?;
    let last = enc
        .bias(&BiasContext::new(1, len, len - 1, 0))?
        .map(|b| b.squeeze(1)?.to_vec2::<f32>())
        .transpose()?;
    Ok(bias_heatmaps(title, len, rows, bias, last))
}

/// [`bias_views`] from the encoding's own table of `len` positions, `(heads, len, len)`.
fn table_bias_views(
    enc: &dyn PositionalEncoding,
    len: usize,
    rows: &[usize],
) -> posenc::Result<(Heatmap, ByDistance, Option<Pairs>)> {
    let table = enc.table(len)?;
    let Form::Bias { bias, .. } = table.form else {
        return Err(posenc::Error::Config(format!(
            "{}: its table is not a bias",
            enc.kind()
        )));
    };
    let bias: Vec<Vec<Vec<f32>>> = bias.to_vec3()?;
    let sampled = bias
        .iter()
        .map(|h| {
            rows.iter()
                .map(|&q| rows.iter().map(|&k| h[q][k]).collect())
                .collect()
        })
        .collect();
    let last = bias.iter().map(|h| h[len - 1].clone()).collect();
    Ok(bias_heatmaps(
        &table.title,
        len,
        rows,
        Some(sampled),
        Some(last),
    ))
}

/// The heatmap of `enc`'s own table at the sampled `rows` of `len` positions (a bias form),
/// and the last position's row of it, at the sampled distances only.
fn sampled_table_views(
    enc: &dyn PositionalEncoding,
    len: usize,
    rows: &[usize],
) -> posenc::Result<(Heatmap, ByDistance, Option<Pairs>)> {
    let at: Vec<u32> = rows.iter().map(|&p| p as u32).collect();
    let table = enc.table_at(Positions::At(&at), at.len())?;
    let Form::Bias { bias, .. } = table.form else {
        return Err(posenc::Error::Config(format!(
            "{}: its table is not a bias",
            enc.kind()
        )));
    };
    let bias: Vec<Vec<Vec<f32>>> = bias.to_vec3()?;
    let last: Vec<Vec<Option<f32>>> = bias
        .iter()
        .map(|h| h[rows.len() - 1].iter().rev().map(|&x| Some(x)).collect())
        .collect();
    let (heatmap, _, pairs) = bias_heatmaps(&table.title, len, rows, Some(bias), None);
    Ok((
        heatmap,
        ByDistance {
            title: format!("{}, p the last position", table.title),
            values: last,
            distances: Some(rows.iter().rev().map(|&p| len - 1 - p).collect()),
        },
        pairs,
    ))
}

/// The heatmap per head of `bias (heads, rows, rows)` at the sampled `rows`, and `last`,
/// the last position's bias `(heads, len)` against each key.
fn bias_heatmaps(
    title: &str,
    len: usize,
    rows: &[usize],
    bias: Option<Vec<Vec<Vec<f32>>>>,
    last: Option<Vec<Vec<f32>>>,
) -> (Heatmap, ByDistance, Option<Pairs>) {
    let heads = bias.as_ref().map_or(1, Vec::len);
    let shown = |x: f32| masked(x).filter(|x| x.is_finite());
    let values = match bias {
        Some(b) => b
            .into_iter()
            .map(|h| {
                h.into_iter()
                    .map(|r| r.into_iter().map(shown).collect())
                    .collect()
            })
            .collect(),
        None => vec![vec![vec![Some(0.0); rows.len()]; rows.len()]],
    };
    let by_distance = match last {
        Some(r) => r
            .into_iter()
            .map(|h| (0..len).map(|k| shown(h[len - 1 - k])).collect())
            .collect(),
        None => vec![vec![Some(0.0); len]; heads],
    };
    (
        Heatmap {
            // The encoding's own title names the bias already where it writes its formula.
            title: match title.starts_with("bias(query, key)") {
                true => title.to_string(),
                false => format!("bias(query, key), {title}"),
            },
            row_name: "query".into(),
            column_name: "key".into(),
            values,
            rows: rows.to_vec(),
            columns: rows.to_vec(),
        },
        ByDistance {
            title: "bias(p, p − k), p the last position".into(),
            values: by_distance,
            distances: None,
        },
        None,
    )
}

/// `None` for a bias that shuts a key out (a window's edge, a mask): `f32::MIN / 2` or below.
fn masked(x: f32) -> Option<f32> {
    (x > f32::MIN / 4.0).then_some(x)
}

/// `⟨R_(len−1) q, R_(len−1−k) k⟩` for `k = 0 … len − 1`, with the same fixed, irregular
/// query and key as `posenc encoding props` rotates, through the encoding's own hooks, in
/// head 0 of `heads` of width `head_dim` (an encoding may turn each head's keys its own
/// way, and its output may be wider than its input, as PoPE's).
fn rotary_by_distance(
    enc: &dyn PositionalEncoding,
    (head_dim, heads): (usize, usize),
    len: usize,
) -> posenc::Result<Vec<Option<f32>>> {
    // E⟨R_p q, R_(p−k) q⟩ over q ~ N(0, I) is the trace of R_pᵀ R_(p−k): the sum over the
    // basis vectors e_j of ⟨R_p e_j, R_(p−k) e_j⟩, here divided by the width so it starts
    // at 1 (RoFormer's long-term decay, for a query and key alike).
    let mut sum = vec![0f32; len];
    for j in 0..head_dim {
        let q = enc.rotate(
            &basis(j, head_dim, heads, 1)?,
            &RotateContext::query(len - 1),
        )?;
        let k = enc.rotate(&basis(j, head_dim, heads, len)?, &RotateContext::key(0))?;
        let q: Vec<f32> = q.get(0)?.get(0)?.flatten_all()?.to_vec1()?;
        let k: Vec<Vec<f32>> = k.get(0)?.get(0)?.to_vec2()?;
        for (d, s) in sum.iter_mut().enumerate() {
            *s += dot(&q, &k[len - 1 - d]);
        }
    }
    Ok(sum.into_iter().map(|s| Some(s / head_dim as f32)).collect())
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The rows of `values` at `rows`, each mapped by `f`.
fn pick<T>(values: &[Vec<f32>], rows: &[usize], f: impl Fn(&[f32]) -> Vec<T>) -> Vec<Vec<T>> {
    rows.iter().map(|&r| f(&values[r])).collect()
}

/// Up to `most` (at least 3) indices over `0 … n − 1` at a round step (1, 2 or 5 times a
/// power of ten), so an axis reads 0, 20, 40 … and not 0, 97, 193; the last index closes
/// them.
pub fn sample(n: usize, most: usize) -> Vec<usize> {
    if n <= most {
        return (0..n).collect();
    }
    // Room for the last index besides the steps from 0.
    let least = (n - 1) as f64 / (most.max(3) - 2) as f64;
    let step = (0..)
        .flat_map(|p| [1, 2, 5].map(|m| m * 10usize.pow(p)))
        .find(|&s| s as f64 >= least)
        .unwrap_or(n);
    let mut out: Vec<usize> = (0..n).step_by(step).collect();
    if out.last() != Some(&(n - 1)) {
        out.push(n - 1);
    }
    out
}

/// Every registered kind with its settings at their defaults: what the page's picker offers.
pub fn kinds() -> Vec<serde_json::Value> {
    EncodingConfig::kinds()
        .into_iter()
        .filter_map(|kind| EncodingConfig::from_kind(kind).ok())
        .map(|config| config.to_json())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::sample;

    #[test]
    fn samples_fall_on_round_steps_within_the_limit() {
        let rows = sample(2048, 128);
        assert_eq!(&rows[..4], [0, 20, 40, 60]);
        assert_eq!(rows.last(), Some(&2047));
        assert!(rows.len() <= 128);
        assert_eq!(sample(32, 22)[..3], [0, 2, 4]);
        assert_eq!(sample(10, 22), (0..10).collect::<Vec<_>>());
        for (n, most) in [(1000, 7), (129, 128), (5000, 3), (64, 10)] {
            let s = sample(n, most);
            assert!(
                s.len() <= most && s[0] == 0 && *s.last().unwrap() == n - 1,
                "{n}, {most}: {s:?}"
            );
            assert!(s.windows(2).all(|w| w[0] < w[1]), "{s:?}");
        }
    }
}
