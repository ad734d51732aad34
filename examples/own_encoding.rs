//! Your own positional encoding, written outside posenc and trained through its
//! language-model task: RoPE on the first `heads` heads only, the others position-free
//! (x-transformers' `rotate_num_heads`). The encoding is the code between the rules, 39
//! lines besides blank ones; the rest registers it, trains a small model with it and
//! checks it.
//!
//! ```sh
//! cargo run --release --example own_encoding
//! ```

use std::sync::Arc;

use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;
use posenc::{
    Capabilities, EncodingConfig, EncodingSpec, PositionalEncoding, Result, RotateContext, Table,
    Target,
};
use posenc_lm::task::{train_lm, LmData, LmTrainConfig};
use posenc_lm::text_tokenizer::{encode, TextTokenizer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------
/// `head-rope`: its settings, as configs and the command line write them.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct HeadRopeConfig {
    /// How many heads turn, counted from the first.
    heads: usize,
}

impl EncodingSpec for HeadRopeConfig {
    const KIND: &'static str = "head-rope";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        let rope = EncodingConfig::from_kind("rope")?.build(target, vb)?;
        Ok(Arc::new(HeadRope(rope, self.heads)))
    }
}

/// RoPE, and how many heads it turns.
#[derive(Debug)]
struct HeadRope(Arc<dyn PositionalEncoding>, usize);

impl PositionalEncoding for HeadRope {
    fn kind(&self) -> &'static str {
        HeadRopeConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            rotates: true,
            ..Capabilities::default()
        }
    }

    /// Heads `0..n` of `x (batch, heads, seq, head_dim)` turned as RoPE turns them.
    fn rotate(&self, x: &Tensor, cx: &RotateContext) -> Result<Tensor> {
        let (all, n) = (x.dim(1)?, self.1.min(x.dim(1)?));
        let turned = self.0.rotate(&x.narrow(1, 0, n)?, cx)?;
        match n == all {
            true => Ok(turned),
            false => Ok(Tensor::cat(&[&turned, &x.narrow(1, n, all - n)?], 1)?),
        }
    }

    fn table(&self, len: usize) -> Result<Table> {
        self.0.table(len)
    }
}
// ---------------------------------------------------------------------------------------

fn main() -> anyhow::Result<()> {
    posenc::register::<HeadRopeConfig>()?;
    check_the_hook()?;
    let (first, last) = train(2, 120)?;
    println!(
        "head-rope (2 of 4 heads turn): training loss {first:.3} at step 1, {last:.3} at the end"
    );
    Ok(())
}

/// The hook against RoPE itself: every head turning is RoPE, none turning is the identity.
fn check_the_hook() -> anyhow::Result<()> {
    let target = Target::new(32, 4, posenc::Direction::Causal)?;
    let vb = VarBuilder::zeros(candle_core::DType::F32, &Device::Cpu);
    let x = Tensor::randn(0f32, 1.0, (1, 4, 6, 8), &Device::Cpu)?;
    let cx = RotateContext::query(3);
    let rope = EncodingConfig::from_kind("rope")?.build(&target, vb.clone())?;
    let build = |heads| EncodingConfig::new(HeadRopeConfig { heads }).build(&target, vb.clone());
    let differs = |a: &Tensor, b: &Tensor| -> anyhow::Result<f32> {
        Ok((a - b)?.abs()?.max_all()?.to_scalar::<f32>()?)
    };
    anyhow::ensure!(differs(&build(4)?.rotate(&x, &cx)?, &rope.rotate(&x, &cx)?)? == 0.0);
    anyhow::ensure!(differs(&build(0)?.rotate(&x, &cx)?, &x)? == 0.0);
    let half = build(2)?.rotate(&x, &cx)?;
    anyhow::ensure!(differs(&half.narrow(1, 2, 2)?, &x.narrow(1, 2, 2)?)? == 0.0);
    anyhow::ensure!(differs(&half.narrow(1, 0, 2)?, &x.narrow(1, 0, 2)?)? > 1e-3);
    Ok(())
}

/// A small language model with `head-rope` trained for `steps` on a text with a period,
/// through posenc's own task: the training loss at the first step and at the last.
fn train(heads: usize, steps: usize) -> anyhow::Result<(f64, f64)> {
    let text: String = (0..4000)
        .map(|i| ["the cat ", "sat on ", "a mat. "][i % 3])
        .collect();
    let tokenizer = TextTokenizer::Char.train(&text)?;
    let tokens = encode(&tokenizer, &text)?;
    let mut cfg = LmTrainConfig::default();
    cfg.model.vocab_size = tokenizer.get_vocab_size(true);
    cfg.model.encoding = EncodingConfig::new(HeadRopeConfig { heads });
    (
        cfg.model.d_model,
        cfg.model.d_ff,
        cfg.model.heads,
        cfg.model.layers,
    ) = (32, 64, 4, 2);
    cfg.model.context = 32;
    (cfg.run.steps, cfg.run.batch_size, cfg.run.warmup) = (steps, 8, 10);
    let (train, valid) = tokens.split_at(tokens.len() * 9 / 10);
    let data = LmData {
        train: train.to_vec(),
        valid: valid.to_vec(),
    };
    let run = train_lm(&cfg, &data, &Device::Cpu, |_, _| {})?;
    Ok((run.losses[0], *run.losses.last().unwrap_or(&f64::NAN)))
}

#[test]
fn a_new_encoding_turns_its_heads_and_trains() {
    let _ = posenc::register::<HeadRopeConfig>();
    check_the_hook().unwrap();
    let (first, last) = train(2, 60).unwrap();
    assert!(
        last.is_finite() && last < first - 0.5,
        "loss {first} to {last}"
    );
}
