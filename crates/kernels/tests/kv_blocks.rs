//! A key/value cache's blocks (`kv_blocks`) against gguf-py's quantization and
//! dequantization of the same rows, byte for byte (`scripts/make_kv_block_fixtures.py`).

use candle_core::{DType, Device, Tensor};
use posenc_kernels::kv_blocks::{dequantize, hadamard, quantize, row_bytes, turn, Kept};
use posenc_kernels::quantized::Format;

fn fixtures() -> std::collections::HashMap<String, Tensor> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kv_blocks.safetensors");
    candle_core::safetensors::load(path, &Device::Cpu).unwrap()
}

fn bytes(t: &Tensor) -> Vec<u8> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn rows_quantize_and_expand_as_gguf_py_does() {
    let f = fixtures();
    let x = &f["x"];
    for (name, format) in [("q8_0", Format::Q8_0), ("q4_0", Format::Q4_0)] {
        let want = &f[name];
        let got = quantize(x, format).unwrap();
        assert_eq!(got.dims(), want.dims(), "{name}");
        assert_eq!(got.dtype(), DType::U8);
        assert_eq!(bytes(&got), bytes(want), "{name}: the blocks differ");
        let back = dequantize(want, format).unwrap();
        assert_eq!(values(&back), values(&f[&format!("{name}_back")]), "{name}");
        // The rounding is real, and a row of the cache's shape is quantized alike.
        assert!(values(&back) != values(x), "{name}");
        let heads = x.reshape((2, 4, 1, 64)).unwrap();
        let shaped = quantize(&heads, format).unwrap();
        let row = row_bytes(format, 64).unwrap();
        assert_eq!(shaped.dims(), [2, 4, 1, row]);
        assert_eq!(bytes(&shaped), bytes(want), "{name}: by heads");
        // A view that starts inside a larger buffer, as a decode step's values sit after
        // its queries and keys in one projection's output: its own rows, not the buffer's.
        let wide = Tensor::cat(&[&x.ones_like().unwrap(), x], 1).unwrap();
        let view = wide.narrow(1, 64, 64).unwrap().narrow(0, 7, 1).unwrap();
        let got = quantize(&view, format).unwrap();
        assert_eq!(
            bytes(&got),
            bytes(&want.narrow(0, 7, 1).unwrap()),
            "{name}: a view"
        );
    }
}

#[test]
fn what_cannot_be_blocked_is_refused_by_name() {
    let narrow = Tensor::zeros((2, 48), DType::F32, &Device::Cpu).unwrap();
    let e = quantize(&narrow, Format::Q8_0).unwrap_err().to_string();
    assert!(e.contains("48 values"), "{e}");
    let wide = Tensor::zeros((2, 64), DType::F32, &Device::Cpu).unwrap();
    let e = quantize(&wide, Format::Q4_1).unwrap_err().to_string();
    assert!(e.contains("Q4_1"), "{e}");
    let e = dequantize(&wide, Format::Q8_0).unwrap_err().to_string();
    assert!(e.contains("u8"), "{e}");
    let ragged = Tensor::zeros((2, 50), DType::U8, &Device::Cpu).unwrap();
    let e = dequantize(&ragged, Format::Q4_0).unwrap_err().to_string();
    assert!(e.contains("18-byte blocks"), "{e}");
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b) = (values(a), values(b));
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Rows turned first, as llama.cpp turns a quantized cache's: the matrix is the
/// Walsh–Hadamard matrix the script builds its own way, the turned rows round to gguf-py's
/// bytes, and a kept row reads back as the script's expansion turned back.
#[test]
fn turned_rows_round_and_read_back_as_llama_cpp_keeps_them() {
    let f = fixtures();
    let x = &f["x"];
    for n in [64, 128] {
        if let Some(want) = f.get(&format!("hadamard{n}")) {
            assert!(max_diff(&hadamard(n).unwrap(), want) < 1e-7, "order {n}");
        }
        let rows = x.reshape((8 * 64 / n, n)).unwrap();
        let turned = turn(&rows, n).unwrap();
        // The fast transform is the product with the matrix it stands for.
        let product = rows.matmul(&hadamard(n).unwrap()).unwrap();
        let largest = values(x).iter().fold(0f32, |m, v| m.max(v.abs()));
        let float = n as f32 * f32::EPSILON * largest;
        assert!(max_diff(&turned, &product) < float, "order {n}");
        // In blocks along the last dimension, whatever the leading shape and strides.
        let wide = x.reshape((2, 4, 64)).unwrap().transpose(0, 1).unwrap();
        let by_block = turn(&wide, 32).unwrap();
        let want = wide
            .contiguous()
            .unwrap()
            .reshape((16, 32))
            .unwrap()
            .matmul(&hadamard(32).unwrap())
            .unwrap()
            .reshape((4, 2, 64))
            .unwrap();
        assert!(max_diff(&by_block, &want) < float);
        // Its own inverse: turning twice gives the rows back.
        // f32 sums of n terms: n ε of the largest value.
        assert!(max_diff(&turn(&turned, n).unwrap(), &rows) < float);
        for (name, format) in [("q8_0", Format::Q8_0), ("q4_0", Format::Q4_0)] {
            let want = &f[&format!("{name}_turned{n}")];
            let blocks = quantize(&turned, format).unwrap();
            assert_eq!(
                bytes(&blocks),
                bytes(want),
                "{name}, order {n}: the blocks differ"
            );
            let kept = Kept::Blocks {
                rows: blocks,
                format,
                turned: Some(n),
            };
            assert_eq!(kept.turned(), Some(n));
            let back = kept.dense().unwrap();
            let want_back = &f[&format!("{name}_turned{n}_back")];
            assert!(max_diff(&back, want_back) < float, "{name}, order {n}");
            // Turning changes the rounding: not the plain blocks' expansion.
            let plain = dequantize(&quantize(&rows, format).unwrap(), format).unwrap();
            assert!(max_diff(&back, &plain) > 0.0, "{name}, order {n}");
        }
    }
    let e = hadamard(96).unwrap_err().to_string();
    assert!(e.contains("power of two"), "{e}");
    let e = turn(x, 128).unwrap_err().to_string();
    assert!(
        e.contains("rows of 64 values cannot be turned in blocks of 128"),
        "{e}"
    );
}
