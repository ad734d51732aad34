//! The seam's declarations are true: every built-in kind's `Capabilities` match what its
//! hooks do when run (the one place hooks are run to learn what they do: here, to check the
//! declaration the model relies on instead), and the book's table of kinds against hooks
//! (`docs/encodings.md`) matches the declarations.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use posenc::{
    BiasContext, Capabilities, Direction, EmbedContext, EncodingConfig, InputContext,
    PositionalEncoding, RotateContext, ScoreContext, Target, Tokens,
};

const D: usize = 8;
const HEADS: usize = 2;
const T: usize = 5;

/// Every built-in kind at its defaults, built for a causal stack of two layers.
fn built() -> Vec<(String, Arc<dyn PositionalEncoding>)> {
    let target = Target::new(D, HEADS, Direction::Causal)
        .unwrap()
        .with_layers(2);
    // This test binary registers no kind of its own: these are the built-in ones.
    EncodingConfig::kinds()
        .into_iter()
        .map(|kind| {
            let varmap = VarMap::new();
            let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
            let cfg = EncodingConfig::from_kind(kind).unwrap();
            (kind.to_string(), cfg.build(&target, vb).unwrap())
        })
        .collect()
}

/// Whether two tensors differ anywhere.
fn moved(a: &Tensor, b: &Tensor) -> bool {
    a.dims() != b.dims()
        || (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            > 0.0
}

/// What `enc`'s hooks do when run, as the declaration it should make of them.
fn observed(enc: &dyn PositionalEncoding) -> Capabilities {
    let dev = Device::Cpu;
    let x = Tensor::randn(0f32, 1.0, (1, T, D), &dev).unwrap();
    let heads = Tensor::randn(0f32, 1.0, (1, HEADS, T, D / HEADS), &dev).unwrap();
    let logits = Tensor::randn(0f32, 1.0, (1, HEADS, T, T), &dev).unwrap();
    // Digits then another token, so that places and significances vary.
    let ids: Vec<u32> = (0..T as u32)
        .map(|i| if i == 2 { 0 } else { 5 + i })
        .collect();
    let ids = Tensor::from_vec(ids, (1, T), &dev).unwrap();
    let tokens = Tokens::new(&ids);
    let embed = |cx: EmbedContext| enc.embed(&x, &cx).map(|e| moved(&e, &x));
    let bias = |cx: BiasContext| enc.bias(&cx).map(|b| b.is_some());
    let bare = (embed(EmbedContext::at(0)), bias(BiasContext::square(T, 0)));
    let given = (
        embed(EmbedContext::at(0).with_tokens(tokens)).unwrap(),
        bias(BiasContext::square(T, 0).with_tokens(Some(tokens))).unwrap(),
    );
    // An encoding reads the tokens when it cannot act without them.
    let reads_tokens = (bare.0.is_err() && given.0) || (bare.1.is_err() && given.1);
    let caps = enc.capabilities();
    let read = enc.read_input(&InputContext::new(&x)).unwrap();
    Capabilities {
        adds: given.0,
        // Far along too, where a factor that steps with the position (Llama 4's
        // temperature) has moved; a kind whose table ends before it refuses the position.
        rotates: [RotateContext::query(0), RotateContext::key(0)]
            .iter()
            .any(|cx| moved(&enc.rotate(&heads, cx).unwrap(), &heads))
            || [RotateContext::query(100_000), RotateContext::key(100_000)]
                .iter()
                .any(|cx| enc.rotate(&heads, cx).is_ok_and(|r| moved(&r, &heads))),
        biases: given.1,
        reads_tokens,
        reads_input: read.decay.is_some() || read.transforms.is_some(),
        transforms: read.transforms.is_some(),
        reads_scores: enc
            .score_bias(&ScoreContext {
                q: &heads,
                logits: &logits,
            })
            .unwrap()
            .is_some(),
        sinks: caps.sinks,
        ..Capabilities::default()
    }
}

/// The flags of a declaration, in the table's order.
fn flags(c: &Capabilities) -> [bool; 9] {
    [
        c.adds,
        c.rotates,
        c.biases,
        c.reads_input,
        c.transforms,
        c.reads_scores,
        !c.sinks.is_empty(),
        c.reads_tokens,
        !c.per_layer.is_empty(),
    ]
}

#[test]
fn every_kind_declares_what_its_hooks_do() {
    for (kind, enc) in built() {
        let declared = enc.capabilities();
        // A per-layer pattern implements no hook: each of its entries is checked, and the
        // pattern declares what they do together.
        let layers: Vec<Arc<dyn PositionalEncoding>> = match declared.per_layer.is_empty() {
            true => vec![enc.clone()],
            false => declared.per_layer.clone(),
        };
        let mut seen = Vec::new();
        for layer in &layers {
            let (said, did) = (layer.capabilities(), observed(&**layer));
            assert_eq!(flags(&said), flags(&did), "{kind} ({})", layer.kind());
            seen.push(said);
        }
        if !declared.per_layer.is_empty() {
            let all = Capabilities::all(&seen);
            assert_eq!(
                flags(&all)[..8],
                flags(&declared)[..8],
                "{kind}: the pattern's"
            );
        }
    }
}

#[test]
fn the_books_table_is_every_kinds_declaration() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/encodings.md");
    let book = std::fs::read_to_string(path).unwrap();
    let start = book
        .find("<!-- seam table -->")
        .expect("the table's start marker");
    let end = book
        .find("<!-- seam table end -->")
        .expect("the table's end marker");
    let rows: Vec<(String, Vec<bool>)> = book[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let flags = cells[1..].iter().map(|c| *c == "✓").collect();
            (cells[0].trim_matches('`').to_string(), flags)
        })
        .collect();
    let kinds = built();
    assert_eq!(
        rows.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        kinds.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        "one row per built-in kind, in their order"
    );
    for ((kind, row), (_, enc)) in rows.iter().zip(&kinds) {
        let expected = flags(&enc.capabilities());
        let mark = |b: &bool| if *b { "✓" } else { "" };
        assert_eq!(
            row.as_slice(),
            expected.as_slice(),
            "{kind}: the row should read | `{kind}` | {} |",
            expected.map(|b| mark(&b)).join(" | ")
        );
    }
}
