//! A key/value cache's blocks (`kv_blocks`) against gguf-py's quantization and
//! dequantization of the same rows, byte for byte (`scripts/make_kv_block_fixtures.py`).

use candle_core::{DType, Device, Tensor};
use posenc_kernels::kv_blocks::{dequantize, quantize, row_bytes};
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
