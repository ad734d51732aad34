//! Attention in memory linear in the length: the tiled kernel against the formula in f64
//! loops (grouped-query heads, a bias asked for tile by tile, a causal offset, tiles with
//! ragged edges), the cache written in place, and the chunked prefill of a language model
//! against its one-shot forward for every encoding.

use crate::common;

use std::ops::Range;
use std::sync::Mutex;

use candle_core::{DType, Device, IndexOp, Tensor, Var};
use common::*;
use posenc::EncodingConfig;
use posenc_kernels::cpu::flash_attention;
use posenc_kernels::kv_blocks::{dequantize, quantize, row_bytes, turn, Kept};
use posenc_kernels::quantized::Format;
use posenc_kernels::Causal;
use posenc_transformer::lm::PREFILL_CHUNK;
use posenc_transformer::StackCache;
use posenc_transformer::RESERVE_AHEAD;
use posenc_transformer::{KvCache, KvType, Streaming};
use posenc_transformer::{LanguageModel, LmConfig};

fn filled(shape: &[usize], seed: u64) -> Tensor {
    posenc_testkit::uniform(shape, seed, -2.0, 2.0)
}

/// A bias of head `h`, query position `i` and key position `j`, known in closed form.
fn bias_at(h: usize, i: usize, j: usize) -> f64 {
    ((i as f64 - j as f64) * 0.013 * (h + 1) as f64).sin() - 0.002 * (i.abs_diff(j) as f64)
}

/// `softmax(scale · q kᵀ + B) v` per batch entry and head, in f64 loops: query `i` at
/// position `offset + i` sees keys `0 ..= offset + i` when causal, every key otherwise.
/// `q (b, tq, h·d)`, `k, v (b, kv, tk, d)` as nested vectors.
#[allow(clippy::too_many_arguments)]
fn reference(
    q: &[Vec<Vec<f32>>],
    k: &[Vec<Vec<Vec<f32>>>],
    v: &[Vec<Vec<Vec<f32>>>],
    (h, kv, d): (usize, usize, usize),
    causal: Option<usize>,
    bias: bool,
    scale: f64,
) -> Vec<Vec<Vec<f64>>> {
    let (tq, tk) = (q[0].len(), k[0][0].len());
    let mut out = vec![vec![vec![0f64; h * d]; tq]; q.len()];
    for (bi, out) in out.iter_mut().enumerate() {
        for hi in 0..h {
            let g = hi / (h / kv);
            for (i, row) in out.iter_mut().enumerate() {
                let seen = causal.map_or(tk, |o| o + i + 1);
                let scores: Vec<f64> = (0..seen)
                    .map(|j| {
                        let dot: f64 = (0..d)
                            .map(|c| q[bi][i][hi * d + c] as f64 * k[bi][g][j][c] as f64)
                            .sum();
                        let pos = causal.unwrap_or(0) + i;
                        scale * dot + if bias { bias_at(hi, pos, j) } else { 0.0 }
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for (j, e) in e.iter().enumerate() {
                    for c in 0..d {
                        row[hi * d + c] += e / sum * v[bi][g][j][c] as f64;
                    }
                }
            }
        }
    }
    out
}

#[test]
fn the_tiled_kernel_follows_the_formula() {
    // 70 queries (a full tile of 64 and a ragged one), after 300 cached keys: 370 keys, a
    // full key tile of 256 and a ragged one; 6 query heads over 2 key/value heads.
    follows_the_formula(2, 6, 2, 5, 70, 300);
}

/// A decode step: one query per head, and fewer key/value heads than the cores could
/// take, so the key tiles are split among parts whose results are merged. 1 000 keys are
/// four tiles, the last one ragged.
#[test]
fn the_tiled_kernel_split_over_the_keys_follows_the_formula() {
    follows_the_formula(1, 3, 1, 8, 1, 999);
    follows_the_formula(1, 4, 2, 8, 2, 700);
    // Rows of 64 (a multiple of 16): the few-row products where the CPU has AVX-512.
    follows_the_formula(1, 3, 1, 64, 1, 999);
    follows_the_formula(2, 6, 2, 32, 1, 301);
}

/// The kernel against [`reference`] with and without a bias, causal after `offset`
/// cached keys, and over every key.
fn follows_the_formula(b: usize, h: usize, kv: usize, d: usize, tq: usize, offset: usize) {
    let tk = offset + tq;
    // Q as a view into a packed projection; K and V as views into buffers longer than
    // their keys, as the cache hands them on.
    let qkv = filled(&[b, tq, (h + 2 * kv) * d], 1);
    let q = qkv.narrow(2, 0, h * d).unwrap();
    let buffer = |seed| filled(&[b, kv, tk + 30, d], seed).narrow(2, 0, tk).unwrap();
    let (k, v) = (buffer(2), buffer(3));
    let qv = q.to_vec3::<f32>().unwrap();
    let four = |t: &Tensor| -> Vec<Vec<Vec<Vec<f32>>>> {
        (0..b)
            .map(|i| t.i(i).unwrap().to_vec3::<f32>().unwrap())
            .collect()
    };
    let (kk, vv) = (four(&k), four(&v));
    let asked = Mutex::new(Vec::new());
    let tile_bias = |rows: Range<usize>, keys: Range<usize>| {
        asked.lock().unwrap().push((rows.clone(), keys.clone()));
        let (n, m) = (rows.len(), keys.len());
        let values: Vec<f32> = (0..h * n * m)
            .map(|x| {
                let (hi, i, j) = (x / (n * m), x / m % n, x % m);
                bias_at(hi, offset + rows.start + i, keys.start + j) as f32
            })
            .collect();
        Tensor::from_vec(values, (h, n, m), &Device::Cpu).map(Some)
    };
    let scale = 0.41;
    for (causal, bias) in [(Some(offset), false), (Some(offset), true), (None, false)] {
        let keys = match causal {
            Some(_) => tk,
            None => tk - 7,
        };
        let (k, v) = (k.narrow(2, 0, keys).unwrap(), v.narrow(2, 0, keys).unwrap());
        let cut = |x: &Vec<Vec<Vec<Vec<f32>>>>| -> Vec<Vec<Vec<Vec<f32>>>> {
            x.iter()
                .map(|b| b.iter().map(|g| g[..keys].to_vec()).collect())
                .collect()
        };
        let got = flash_attention(
            &q,
            &k,
            &v,
            d,
            scale as f32,
            causal.map(Causal::from),
            bias.then_some(&tile_bias as _),
        )
        .unwrap();
        assert_eq!(got.dims(), &[b, tq, h * d]);
        let want = reference(&qv, &cut(&kk), &cut(&vv), (h, kv, d), causal, bias, scale);
        let got = got.to_vec3::<f32>().unwrap();
        let diff = got
            .iter()
            .flatten()
            .flatten()
            .zip(want.iter().flatten().flatten())
            .map(|(a, b)| (*a as f64 - b).abs())
            .fold(0.0, f64::max);
        assert!(
            diff < 2e-5,
            "causal {causal:?}, bias {bias}: max |Δ| {diff}"
        );
    }
    // The bias was asked for tiles only, never for more than one tile of keys, and never
    // above the causal diagonal.
    let asked = asked.into_inner().unwrap();
    assert!(!asked.is_empty());
    for (rows, keys) in &asked {
        assert!(rows.len() <= 64 && keys.len() <= 256, "{rows:?} × {keys:?}");
        assert!(keys.start < offset + rows.end, "{rows:?} × {keys:?}");
    }
}

/// A causal window: the key tiles wholly before every row's window are never read, and
/// the output is the one reading them gives (their keys, masked by the bias, weigh
/// exactly 0), for a chunk of queries and for a decode step split over parts.
#[test]
fn the_tiled_kernel_skips_the_tiles_past_a_window() {
    let (b, h, kv, d, offset, window) = (1, 4, 2, 8, 900, 100);
    for tq in [70, 1] {
        let tk = offset + tq;
        let q = filled(&[b, h, tq, d], 61);
        let (k, v) = (filled(&[b, kv, tk, d], 62), filled(&[b, kv, tk, d], 63));
        let asked = Mutex::new(Vec::new());
        let tile_bias = |rows: Range<usize>, keys: Range<usize>| {
            asked.lock().unwrap().push(keys.clone());
            let (n, m) = (rows.len(), keys.len());
            let values: Vec<f32> = (0..h * n * m)
                .map(|x| {
                    let (i, j) = (offset + rows.start + x / m % n, keys.start + x % m);
                    match j + window <= i {
                        true => posenc::window::OUTSIDE,
                        false => bias_at(x / (n * m), i, j) as f32,
                    }
                })
                .collect();
            Tensor::from_vec(values, (h, n, m), &Device::Cpu).map(Some)
        };
        let read = |window| {
            asked.lock().unwrap().clear();
            let causal = Causal { offset, window };
            let out = flash_attention(&q, &k, &v, d, 0.3, Some(causal), Some(&tile_bias));
            (out.unwrap(), asked.lock().unwrap().clone())
        };
        let (all, all_asked) = read(None);
        let (skipped, skip_asked) = read(Some(window));
        assert_eq!(max_abs_diff(&all, &skipped), 0.0, "{tq} rows");
        // The first row sees keys from `offset + 1 − window` on: no tile ending before it.
        let first = offset + 1 - window;
        assert!(
            skip_asked.iter().all(|keys| keys.end > first),
            "{skip_asked:?}"
        );
        assert!(all_asked.iter().any(|keys| keys.end <= first));
    }
    let q = filled(&[1, 2, 3, 4], 1);
    let causal = Causal {
        offset: 0,
        window: Some(0),
    };
    let e = flash_attention(&q, &q, &q, 4, 1.0, Some(causal), None).unwrap_err();
    assert!(e.to_string().contains("window of 0"), "{e}");
}

/// Keys and values kept in f16 are widened to f32 tile by tile: the kernel's output
/// equals its output on the same (rounded) values given in f32, for contiguous rows and
/// for a layout whose columns are strided; with many query rows, and with one (a decode
/// step, whose keys are split among parts).
#[test]
fn the_tiled_kernel_reads_half_precision_keys_and_values() {
    reads_half_precision(9, 8);
    reads_half_precision(1, 8);
    reads_half_precision(1, 64);
}

fn reads_half_precision(tq: usize, d: usize) {
    let (b, h, kv, offset) = (1, 4, 2, 300);
    let tk = offset + tq;
    let q = filled(&[b, h, tq, d], 21);
    let half = |seed| filled(&[b, kv, tk, d], seed).to_dtype(DType::F16).unwrap();
    let (k, v) = (half(22), half(23));
    // The same values with rows across the columns: a transposed view, column stride tk.
    let strided = |t: &Tensor| {
        t.transpose(2, 3)
            .unwrap()
            .contiguous()
            .unwrap()
            .transpose(2, 3)
            .unwrap()
    };
    let wide = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
    let want = flash_attention(&q, wide(&k), wide(&v), d, 0.3, Some(offset.into()), None).unwrap();
    assert_eq!(strided(&k).stride()[3], tk);
    for (k, v) in [
        (k.clone(), v.clone()),
        (strided(&k), strided(&v)),
        (k.clone(), wide(&v)),
        (strided(&k), v.clone()),
    ] {
        let got = flash_attention(&q, &k, &v, d, 0.3, Some(offset.into()), None).unwrap();
        let diff = max_abs_diff(&got, &want);
        assert!(diff < 1e-6, "strides {:?}: max |Δ| {diff}", k.stride());
    }
    // The rounding is real: f16 keys and values are not the f32 ones.
    let exact = flash_attention(
        &q,
        filled(&[b, kv, tk, d], 22),
        filled(&[b, kv, tk, d], 23),
        d,
        0.3,
        Some(offset.into()),
        None,
    )
    .unwrap();
    assert!(max_abs_diff(&exact, &want) > 0.0);
    // Other dtypes of keys are named.
    let e = flash_attention(
        &q,
        k.to_dtype(DType::BF16).unwrap(),
        &v,
        d,
        0.3,
        Some(offset.into()),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("f32, f16, or q8_0 or q4_0 blocks"), "{e}");
}

/// Keys and values kept as Q8_0 or Q4_0 blocks are read as their expansion would be, with
/// many query rows (matrix products) and one (a decode step, dot products), in a view of a
/// larger buffer as a cache's.
#[test]
fn the_tiled_kernel_reads_blocks_as_their_expansion() {
    let (b, h, kv, d, offset) = (1, 9, 3, 64, 300);
    for format in [Format::Q8_0, Format::Q4_0] {
        for tq in [1, 9, 70] {
            let tk = offset + tq;
            let q = filled(&[b, h, tq, d], 41);
            // Rows of blocks in a buffer with room for more, narrowed as a cache's are.
            let blocks = |seed| {
                let buffer = quantize(&filled(&[b, kv, tk + 17, d], seed), format).unwrap();
                buffer.narrow(2, 0, tk).unwrap()
            };
            let (k, v) = (blocks(42), blocks(43));
            // Rows kept as they came, and turned (the kernel then turns the queries and
            // the output): either way what the expansion, turned back, gives.
            for turned in [None, Some(64)] {
                let kept = |rows: &Tensor| Kept::Blocks {
                    rows: rows.clone(),
                    format,
                    turned,
                };
                let expanded = |rows: &Tensor| Kept::Dense(kept(rows).dense().unwrap());
                let read = |k: Kept, v: Kept| {
                    flash_attention(&q, k, v, d, 0.2, Some(offset.into()), None).unwrap()
                };
                let want = read(expanded(&k), expanded(&v));
                let got = read(kept(&k), kept(&v));
                let diff = max_abs_diff(&got, &want);
                assert!(
                    diff < 1e-5,
                    "{format:?} {turned:?}, {tq} rows: max |Δ| {diff}"
                );
                // Blocks for keys only, values as they are.
                assert!(max_abs_diff(&read(kept(&k), expanded(&v)), &want) < 1e-5);
                // Blocks for values only.
                assert!(max_abs_diff(&read(expanded(&k), kept(&v)), &want) < 1e-5);
                // The rounding is real.
                let exact =
                    |seed| Kept::from(filled(&[b, kv, tk + 17, d], seed).narrow(2, 0, tk).unwrap());
                let exact = read(exact(42), exact(43));
                assert!(max_abs_diff(&exact, &want) > 0.0);
            }
            // A turned reading is not the plain one: the queries and output are turned.
            let plain = |rows: &Tensor| Kept::Dense(dequantize(rows, format).unwrap());
            let as_turned = |rows: &Tensor| Kept::Blocks {
                rows: rows.clone(),
                format,
                turned: Some(64),
            };
            let read = |k: Kept, v: Kept| {
                flash_attention(&q, k, v, d, 0.2, Some(offset.into()), None).unwrap()
            };
            let diff = max_abs_diff(
                &read(as_turned(&k), as_turned(&v)),
                &read(plain(&k), plain(&v)),
            );
            assert!(diff > 1e-3, "{format:?}: turning changed nothing ({diff})");
        }
    }
}

#[test]
fn the_tiled_kernel_refuses_what_it_cannot_do() {
    let q = filled(&[1, 6, 8], 3);
    let err = |r: candle_core::Result<Tensor>| r.unwrap_err().to_string();
    let tracked = Var::from_tensor(&q).unwrap();
    let e = err(flash_attention(
        tracked.as_tensor(),
        &q,
        &q,
        4,
        1.0,
        None,
        None,
    ));
    assert!(e.contains("inference"), "{e}");
    let e = err(flash_attention(
        &q.to_dtype(DType::F64).unwrap(),
        &q,
        &q,
        4,
        1.0,
        None,
        None,
    ));
    assert!(e.contains("f32"), "{e}");
    let e = err(flash_attention(&q, &q, &q, 3, 1.0, None, None));
    assert!(e.contains("heads"), "{e}");
    let e = err(flash_attention(&q, &q, &q, 4, 1.0, Some(1.into()), None));
    assert!(e.contains("at least 7 keys"), "{e}");
    let wrong = |_: Range<usize>, _: Range<usize>| {
        Tensor::zeros((2, 1, 1), DType::F32, &Device::Cpu).map(Some)
    };
    let e = err(flash_attention(&q, &q, &q, 4, 1.0, None, Some(&wrong)));
    assert!(e.contains("bias"), "{e}");
    let failing = |_: Range<usize>, _: Range<usize>| -> candle_core::Result<Option<Tensor>> {
        candle_core::bail!("the encoding failed")
    };
    let e = err(flash_attention(&q, &q, &q, 4, 1.0, None, Some(&failing)));
    assert!(e.contains("the encoding failed"), "{e}");
    // No keys at all: zeros, never NaN.
    let none = Tensor::zeros((1, 0, 8), DType::F32, &Device::Cpu).unwrap();
    let out = flash_attention(&q, &none, &none, 4, 1.0, None, None).unwrap();
    let values: Vec<f32> = out.flatten_all().unwrap().to_vec1().unwrap();
    assert!(values.iter().all(|&x| x == 0.0));
}

#[test]
fn the_cache_is_written_in_place_and_grows_geometrically() {
    let mut cache = KvCache::default();
    let kv = |n: usize, seed| filled(&[2, 3, n, 4], seed);
    let (k1, v1) = (kv(5, 1), kv(5, 2));
    cache.append(&k1, &v1).unwrap();
    assert_eq!((cache.len(), cache.capacity()), (5, 5));
    let (k2, v2) = (kv(1, 3), kv(1, 4));
    let (k, v) = cache.append(&k2, &v2).unwrap();
    assert_eq!((cache.len(), cache.capacity()), (6, 10));
    let want_k = Tensor::cat(&[&k1, &k2], 2).unwrap();
    let want_v = Tensor::cat(&[&v1, &v2], 2).unwrap();
    assert_eq!(max_abs_diff(&k, &want_k), 0.0);
    assert_eq!(max_abs_diff(&v, &want_v), 0.0);
    // A copy goes its own way.
    let mut copy = cache.try_clone().unwrap();
    copy.append(&kv(1, 5), &kv(1, 6)).unwrap();
    cache.append(&kv(1, 7), &kv(1, 8)).unwrap();
    let (a, _) = copy.get().unwrap().unwrap();
    let (b, _) = cache.get().unwrap().unwrap();
    assert_eq!(max_abs_diff(&a.narrow(2, 0, 6).unwrap(), &want_k), 0.0);
    assert!(max_abs_diff(&a, &b) > 0.0);
    // Reserved room is allocated once.
    let mut reserved = KvCache::default();
    reserved.reserve(100);
    reserved.append(&kv(3, 9), &kv(3, 10)).unwrap();
    assert_eq!(reserved.capacity(), 100);
    // A reservation far past what is written is allocated only so far ahead.
    let mut far = KvCache::default();
    far.reserve(1 << 30);
    far.append(&kv(3, 11), &kv(3, 12)).unwrap();
    assert_eq!(far.capacity(), 3 + RESERVE_AHEAD);
    // A prompt read in pieces allocates all it will reach at its first piece, and the
    // reservation counts ahead from there: no buffer is left behind as it grows.
    let prompt = 2 * RESERVE_AHEAD;
    let mut long = KvCache::default();
    long.reserve(prompt + 10);
    long.read_until(prompt);
    long.append(&kv(3, 13), &kv(3, 14)).unwrap();
    assert_eq!(long.capacity(), prompt + 10);
    // Without a reservation, the prompt's length is still allocated at once.
    let mut unreserved = KvCache::default();
    unreserved.read_until(prompt);
    unreserved.append(&kv(3, 15), &kv(3, 16)).unwrap();
    assert_eq!(unreserved.capacity(), prompt);
    // A batch that does not fit is named.
    let e = cache
        .append(&filled(&[1, 3, 1, 4], 11), &filled(&[1, 3, 1, 4], 12))
        .unwrap_err()
        .to_string();
    assert!(e.contains("do not fit"), "{e}");
}

#[test]
fn a_cache_kept_in_f16_rounds_what_it_is_given() {
    let (k, v) = (filled(&[1, 2, 3, 4], 31), filled(&[1, 2, 3, 4], 32));
    let mut cache = KvCache::kept_as(KvType::F16);
    let (got_k, got_v) = cache.append(&k, &v).unwrap();
    assert_eq!(
        (got_k.dtype(), cache.kind()),
        (DType::F16, Some(KvType::F16))
    );
    let rounded = |t: &Tensor| {
        t.to_dtype(DType::F16)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
    };
    assert_eq!(
        max_abs_diff(&got_k.to_dtype(DType::F32).unwrap(), &rounded(&k)),
        0.0
    );
    assert_eq!(
        max_abs_diff(&got_v.to_dtype(DType::F32).unwrap(), &rounded(&v)),
        0.0
    );
    // A cache that holds f32 cannot be said to hold f16 afterwards.
    let mut f32_cache = KvCache::default();
    f32_cache.append(&k, &v).unwrap();
    let e = f32_cache.store_as(KvType::F16).unwrap_err().to_string();
    assert!(e.contains("already holds f32"), "{e}");
    f32_cache.store_as(KvType::F32).unwrap();
}

/// A cache kept as blocks hands back what gguf-py's rounding would (the kernels' test
/// checks the bytes), keeps them as blocks for the tiled kernel, and refuses rows it
/// cannot block.
#[test]
fn a_cache_kept_as_blocks_rounds_what_it_is_given() {
    for (kind, format) in [(KvType::Q8_0, Format::Q8_0), (KvType::Q4_0, Format::Q4_0)] {
        let (k, v) = (filled(&[1, 2, 3, 64], 51), filled(&[1, 2, 3, 64], 52));
        let mut cache = KvCache::kept_as(kind);
        cache.append(&k, &v).unwrap();
        let (got_k, got_v) = cache.append(&k, &v).unwrap();
        assert_eq!(
            (got_k.dims(), got_k.dtype()),
            (&[1, 2, 6, 64][..], DType::F32)
        );
        let rounded = |t: &Tensor| dequantize(&quantize(t, format).unwrap(), format).unwrap();
        let twice = |t: &Tensor| Tensor::cat(&[rounded(t), rounded(t)], 2).unwrap();
        assert_eq!(max_abs_diff(&got_k, &twice(&k)), 0.0, "{kind}");
        assert_eq!(max_abs_diff(&got_v, &twice(&v)), 0.0, "{kind}");
        assert!(max_abs_diff(&got_k, &Tensor::cat(&[&k, &k], 2).unwrap()) > 0.0);
        let Some((
            Kept::Blocks {
                rows, format: f, ..
            },
            Kept::Blocks { .. },
        )) = cache.kept().unwrap()
        else {
            panic!("{kind}: the cache does not hand back its blocks");
        };
        let bytes = row_bytes(format, 64).unwrap();
        assert_eq!(
            (rows.dims(), rows.dtype(), f),
            (&[1, 2, 6, bytes][..], DType::U8, format)
        );
        let e = cache.store_as(KvType::F16).unwrap_err().to_string();
        assert!(e.contains(&format!("already holds {kind}")), "{e}");
        let mut narrow = KvCache::kept_as(kind);
        let e = narrow
            .append(&filled(&[1, 2, 3, 24], 1), &filled(&[1, 2, 3, 24], 2))
            .unwrap_err()
            .to_string();
        assert!(e.contains("heads of 24 cannot be blocked"), "{e}");
    }
}

/// A cache that turns its blocks (llama.cpp's default for a quantized cache) keeps each
/// key turned by the largest order from 64 up that divides its head and each value by 64,
/// as llama.cpp does; reads them back turned back; and refuses heads it cannot turn.
#[test]
fn a_cache_of_turned_blocks_turns_keys_and_values_as_llama_cpp_does() {
    for (kind, format) in [
        (KvType::Q8_0Hadamard, Format::Q8_0),
        (KvType::Q4_0Hadamard, Format::Q4_0),
    ] {
        for (width, key_order) in [(64, 64), (128, 128), (192, 64)] {
            let (k, v) = (filled(&[1, 2, 3, width], 61), filled(&[1, 2, 3, width], 62));
            let mut cache = KvCache::kept_as(kind);
            let (got_k, got_v) = cache.append(&k, &v).unwrap();
            let kept = |t: &Tensor, n| {
                let rows = quantize(&turn(t, n).unwrap(), format).unwrap();
                turn(&dequantize(&rows, format).unwrap(), n).unwrap()
            };
            assert!(
                max_abs_diff(&got_k, &kept(&k, key_order)) < 1e-5,
                "{kind} {width}"
            );
            assert!(max_abs_diff(&got_v, &kept(&v, 64)) < 1e-5, "{kind} {width}");
            // Not the plain blocks' reading.
            let plain = |t: &Tensor| dequantize(&quantize(t, format).unwrap(), format).unwrap();
            assert!(max_abs_diff(&got_k, &plain(&k)) > 0.0, "{kind} {width}");
            let Some((k_kept, v_kept)) = cache.kept().unwrap() else {
                panic!("{kind}: nothing kept");
            };
            assert_eq!(
                (k_kept.turned(), v_kept.turned()),
                (Some(key_order), Some(64))
            );
        }
        let mut narrow = KvCache::kept_as(kind);
        let e = narrow
            .append(&filled(&[1, 2, 3, 32], 1), &filled(&[1, 2, 3, 32], 2))
            .unwrap_err()
            .to_string();
        assert!(e.contains("heads of 32 cannot be turned"), "{e}");
    }
}

/// A model whose cache is kept in f16 reads a long text chunk by chunk to within the
/// rounding of its keys and values, with the tiled kernel (rotary, ALiBi's bias) and
/// without it (CoPE reads the scores, so it goes through the composite); its cache is half
/// the bytes.
#[test]
fn a_model_reads_through_an_f16_cache_to_within_its_rounding() {
    let len = PREFILL_CHUNK + 76;
    for kind in ["rope", "alibi", "cope"] {
        let mut model = lm(EncodingConfig::from_kind(kind).unwrap(), len);
        let bytes = model.cache_bytes(1, len);
        model.keep_cache_as(KvType::F16).unwrap();
        assert_eq!(model.cache_bytes(1, len) * 2, bytes);
        let ids = long_ids(1, len);
        let full = model.logits(&ids).unwrap();
        let mut cache = model.cache(len);
        assert_eq!(cache.kind(), Some(KvType::F16));
        let parts: Vec<Tensor> = [(0, 300), (300, 1), (301, len - 301)]
            .iter()
            .map(|&(start, n)| {
                model
                    .logits_cached(&ids.narrow(1, start, n).unwrap(), &mut cache)
                    .unwrap()
            })
            .collect();
        let diff = max_abs_diff(&Tensor::cat(&parts, 1).unwrap(), &full);
        assert!(
            diff > 0.0 && diff < 5e-3,
            "{kind}: f16 cache differs by {diff}"
        );
    }
}

/// A model whose cache is kept as Q8_0 or Q4_0 blocks reads a long text chunk by chunk,
/// and through a rolling cache, to within their rounding (Q4_0's the coarser), with the
/// tiled kernel and without it; its cache is 34 (18) bytes per 32 values. A model whose
/// heads are not whole blocks is refused.
#[test]
fn a_model_reads_through_a_quantized_cache_to_within_its_rounding() {
    let len = PREFILL_CHUNK + 76;
    let ids = long_ids(1, len);
    let chunks = [(0, 300), (300, 1), (301, len - 301)];
    for kind in ["rope", "alibi", "cope"] {
        let cfg = LmConfig {
            d_model: 64,
            heads: 2,
            ..tiny_lm_config(EncodingConfig::from_kind(kind).unwrap(), len)
        };
        let mut model = LanguageModel::frozen(&cfg, &lm_weights(&cfg), &Device::Cpu).unwrap();
        let full = model.logits(&ids).unwrap();
        let f32_bytes = model.cache_bytes(1, len);
        let mut diffs = Vec::new();
        let top = max_abs(&full);
        // Bounds on the logits' largest change, as a fraction of the largest logit: 8-bit
        // codes round to 1/254 of a block's largest value, 4-bit ones to 1/16.
        for (cache_type, per_32, bound) in [(KvType::Q8_0, 34, 0.005), (KvType::Q4_0, 18, 0.04)] {
            model.keep_cache_as(cache_type).unwrap();
            assert_eq!(model.cache_bytes(1, len) * 128, f32_bytes * per_32);
            let mut cache = model.cache(len);
            assert_eq!(cache.kind(), Some(cache_type));
            let parts: Vec<Tensor> = (chunks.iter())
                .map(|&(start, n)| {
                    let part = ids.narrow(1, start, n).unwrap();
                    model.logits_cached(&part, &mut cache).unwrap()
                })
                .collect();
            let diff = max_abs_diff(&Tensor::cat(&parts, 1).unwrap(), &full);
            assert!(
                diff > 0.0 && diff < bound * top,
                "{kind}: a {cache_type} cache differs by {diff}, the largest logit {top}"
            );
            diffs.push(diff);
        }
        assert!(
            diffs[1] > diffs[0],
            "{kind}: q4_0 {} within q8_0 {}",
            diffs[1],
            diffs[0]
        );
        // A rolling cache keeps its keys unrotated: as blocks, they are expanded to be
        // turned at every read.
        let rolling = |model: &LanguageModel| {
            let mut cache = model
                .rolling_cache(Streaming::new(4, 200).unwrap())
                .unwrap();
            let parts: Vec<Tensor> = (0..len)
                .step_by(150)
                .map(|start| {
                    let part = ids.narrow(1, start, 150.min(len - start)).unwrap();
                    model.logits_cached(&part, &mut cache).unwrap()
                })
                .collect();
            Tensor::cat(&parts, 1).unwrap()
        };
        let blocks = rolling(&model);
        model.keep_cache_as(KvType::F32).unwrap();
        let diff = max_abs_diff(&blocks, &rolling(&model));
        assert!(
            diff > 0.0 && diff < 0.04 * top,
            "{kind}: rolling q4_0 differs by {diff}"
        );
    }
    let mut model = lm(EncodingConfig::from_kind("rope").unwrap(), 8);
    let e = model.keep_cache_as(KvType::Q8_0).unwrap_err().to_string();
    assert!(e.contains("heads of 4 cannot be blocked"), "{e}");
}

fn lm(encoding: EncodingConfig, context: usize) -> LanguageModel {
    tiny_lm(encoding, context).0
}

fn long_ids(batch: usize, len: usize) -> Tensor {
    let ids: Vec<u32> = (0..batch * len)
        .map(|i| ((i * 7 + i / 13) % 30) as u32)
        .collect();
    Tensor::from_vec(ids, (batch, len), &Device::Cpu).unwrap()
}

/// For every encoding, over 1 100 tokens (three prefill chunks, the last ragged): scores
/// read chunk by chunk through the cache equal the one-shot forward at every position,
/// and the chunked prefill's last scores equal its last row.
#[test]
fn chunked_reading_equals_the_one_shot_forward_for_every_encoding() {
    let len = 2 * PREFILL_CHUNK + 76;
    for enc in all_encodings() {
        // `fraction` divides by the length of what it sees: no cache can reproduce it.
        if enc.kind() == "fraction" {
            continue;
        }
        // A learned table long enough for the text.
        let enc = enc.for_positions(len);
        let model = lm(enc.clone(), len);
        let ids = long_ids(2, len);
        let full = model.logits(&ids).unwrap();
        let mut cache = StackCache::default();
        let mut parts = Vec::new();
        for (start, n) in [(0, 300), (300, 1), (301, len - 301)] {
            let chunk = ids.narrow(1, start, n).unwrap();
            parts.push(model.logits_cached(&chunk, &mut cache).unwrap());
        }
        let read = Tensor::cat(&parts, 1).unwrap();
        // `index` adds the raw position (up to 1 100) to embeddings of size ~1: f32 keeps
        // ~1e-4 of them through the layers, whichever order the sums run in.
        let tolerance = match enc.kind() {
            "index" => 1e-3,
            _ => 1e-4,
        };
        let diff = max_abs_diff(&read, &full);
        assert!(
            diff < tolerance,
            "{}: chunked reading differs by {diff}",
            enc.kind()
        );
        let last = model.step(&ids, &mut StackCache::default()).unwrap();
        let diff = max_abs_diff(&last, &full.i((.., len - 1)).unwrap());
        assert!(
            diff < tolerance,
            "{}: chunked prefill differs by {diff}",
            enc.kind()
        );
    }
}

/// A prompt read 7, 64 or 1 000 tokens at a time gives the last scores of the one-shot
/// forward, for a rotation and a bias; a chunk of 0 or past the limit is refused by name.
#[test]
fn any_prompt_chunk_reads_the_same() {
    let len = 150;
    for kind in ["rope", "alibi"] {
        let mut model = lm(EncodingConfig::from_kind(kind).unwrap(), len);
        let ids = long_ids(2, len);
        let full = model.logits(&ids).unwrap().i((.., len - 1)).unwrap();
        for chunk in [7, 64, 1000] {
            model.read_prompts_by(chunk).unwrap();
            assert_eq!(model.prefill_chunk(), chunk);
            let last = model.step(&ids, &mut StackCache::default()).unwrap();
            let diff = max_abs_diff(&last, &full);
            assert!(diff < 1e-4, "{kind}, chunks of {chunk}: differs by {diff}");
        }
        for bad in [0, posenc_transformer::lm::MAX_PREFILL_CHUNK + 1] {
            let e = model.read_prompts_by(bad).unwrap_err().to_string();
            assert!(e.contains("prompt chunk"), "{e}");
        }
        assert_eq!(
            model.prefill_chunk(),
            1000,
            "a refused chunk changes nothing"
        );
    }
}

#[test]
fn a_cache_past_the_limit_is_refused_by_its_size() {
    let model = lm(EncodingConfig::from_kind("rope").unwrap(), 8);
    let e = model
        .check_cache(1, usize::MAX / 2)
        .unwrap_err()
        .to_string();
    assert!(e.contains("GiB") && e.contains("too long"), "{e}");
    model.check_cache(1, 1 << 20).unwrap();
    let table: EncodingConfig = r#"{"kind": "learned", "max_positions": 8}"#.parse().unwrap();
    let learned = lm(table, 8);
    learned.check_cache(1, 8).unwrap();
    let e = learned.check_cache(1, 9).unwrap_err().to_string();
    assert!(e.contains("max_positions = 8"), "{e}");
}

/// Dynamic NTK takes its frequencies from the sequence's length. Read in chunks, a prompt
/// is still one sequence: every chunk takes the whole prompt's frequencies, so the chunked
/// prefill and a long window read through the cache equal one forward over the whole (as
/// transformers reads a prompt), where asking chunk by chunk would rotate the first
/// chunks' keys with other frequencies than the later queries'.
#[test]
fn a_prompt_read_in_chunks_takes_dynamic_ntks_frequencies_at_its_whole_length() {
    let len = 2 * PREFILL_CHUNK + 76;
    let enc: EncodingConfig =
        r#"{"kind": "rope", "scaling": {"rope_type": "dynamic", "factor": 2}}"#
            .parse()
            .unwrap();
    let model = lm(enc, 64);
    let ids = long_ids(1, len);
    let full = model.logits(&ids).unwrap();
    let last = model.step(&ids, &mut StackCache::default()).unwrap();
    let diff = max_abs_diff(&last, &full.i((.., len - 1)).unwrap());
    assert!(diff < 1e-4, "the chunked prefill differs by {diff}");
    let read = |cache: &mut StackCache| {
        let parts: Vec<Tensor> = [(0, 300), (300, len - 300)]
            .iter()
            .map(|&(start, n)| {
                model
                    .logits_cached(&ids.narrow(1, start, n).unwrap(), cache)
                    .unwrap()
            })
            .collect();
        Tensor::cat(&parts, 1).unwrap()
    };
    let mut whole = StackCache::default();
    whole.read_until(len);
    let diff = max_abs_diff(&read(&mut whole), &full);
    assert!(
        diff < 1e-4,
        "reading within the whole length differs by {diff}"
    );
    // A caller reading the prompt in pieces through `step` says how long it is, and each
    // step keeps that length rather than its own end.
    let mut pieces = StackCache::default();
    pieces.read_until(len);
    model
        .step(&ids.narrow(1, 0, 600).unwrap(), &mut pieces)
        .unwrap();
    let last = model
        .step(&ids.narrow(1, 600, len - 600).unwrap(), &mut pieces)
        .unwrap();
    let diff = max_abs_diff(&last, &full.i((.., len - 1)).unwrap());
    assert!(diff < 1e-4, "a prompt stepped in pieces differs by {diff}");
    // Chunk by chunk, each at its own length, the scores are another model's.
    let diff = max_abs_diff(&read(&mut StackCache::default()), &full);
    assert!(
        diff > 1e-3,
        "the frequencies did not depend on the length ({diff})"
    );
}
