//! The score hook holds the same promise as the others: an encoding whose bias
//! depends on the queries' and keys' contents (as CoPE's does), defined here and registered
//! at run time, trains and runs a language model (the cached generation included) and a
//! translation model, with no edit anywhere else.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;
use common::{in_process as posenc, write_config};
use posenc::{
    Capabilities, EncodingConfig, EncodingSpec, Form, PositionalEncoding, ScoreContext, Table,
    Target,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `agree`: each logit gains `tanh(logit)`, so keys a query already likes gain up to one
/// more nat and keys it dislikes lose one. It knows no position at all.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AgreeConfig {}

impl EncodingSpec for AgreeConfig {
    const KIND: &'static str = "agree";

    fn build(&self, _: &Target, vb: VarBuilder) -> posenc::Result<Arc<dyn PositionalEncoding>> {
        Ok(Arc::new(Agree {
            device: vb.device().clone(),
        }))
    }
}

/// How often attention asked for the content bias.
static ASKED: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug)]
struct Agree {
    device: Device,
}

impl PositionalEncoding for Agree {
    fn kind(&self) -> &'static str {
        AgreeConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reads_scores: true,
            ..Capabilities::default()
        }
    }

    fn score_bias(&self, cx: &ScoreContext) -> posenc::Result<Option<Tensor>> {
        ASKED.fetch_add(1, Ordering::Relaxed);
        Ok(Some(cx.logits.tanh()?))
    }

    /// The bias for logits `cos(i − j)`.
    fn table(&self, len: usize) -> posenc::Result<Table> {
        let logits: Vec<f32> = (0..len * len)
            .map(|n| ((n / len) as f32 - (n % len) as f32).cos())
            .collect();
        let logits = Tensor::from_vec(logits, (1, len, len), &self.device)?;
        Ok(Table {
            title: "bias = tanh(logit), for logits cos(query − key)".into(),
            form: Form::Bias {
                bias: logits.tanh()?,
                index: None,
            },
        })
    }
}

#[test]
fn a_content_dependent_encoding_from_a_test_file_trains_and_generates() {
    posenc::register::<AgreeConfig>().unwrap();
    assert!(EncodingConfig::kinds().contains(&"agree"));
    let shown = posenc(&[
        "encoding",
        "show",
        "--kind",
        "agree",
        "--d-model",
        "4",
        "--len",
        "3",
    ]);
    assert!(
        shown.contains("tanh(logit)") && shown.contains("0.4932"),
        "{shown}"
    ); // tanh(cos 1)

    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text.txt");
    let line = "the cat sat on the mat and the dog sat on the log.\n";
    std::fs::write(&text, line.repeat(80)).unwrap();
    let config = write_config(
        dir.path(),
        "lm.json",
        r#"{"model": {"d_model": 16, "heads": 2, "d_ff": 32, "layers": 2, "context": 16},
            "steps": 10, "batch_size": 4, "eval_every": 5, "save_every": 5}"#,
    );
    let run = dir.path().join("lm");
    let (text, config, run) = (
        text.to_str().unwrap(),
        config.to_str().unwrap(),
        run.to_str().unwrap(),
    );
    let trained = ASKED.load(Ordering::Relaxed);
    posenc(&[
        "lm",
        "train",
        "--quiet",
        "--text",
        text,
        "--config",
        config,
        "--encoding",
        "agree",
        "--out",
        run,
    ]);
    assert!(
        ASKED.load(Ordering::Relaxed) > trained,
        "training never asked for the bias"
    );

    // Generation reads the prompt and each new token through the cache: the hook is asked
    // there too, and the output is the run's own characters.
    let before = ASKED.load(Ordering::Relaxed);
    let generated = posenc(&[
        "lm",
        "generate",
        "--model",
        run,
        "--max-tokens",
        "8",
        "--temperature",
        "0",
        "the cat",
    ]);
    assert!(
        ASKED.load(Ordering::Relaxed) > before,
        "generation never asked for the bias"
    );
    assert!(
        generated.starts_with("the cat") && generated.trim_end().len() > 7,
        "{generated}"
    );
    let evaluated = posenc(&[
        "lm",
        "eval",
        "--model",
        run,
        "--text",
        text,
        "--lengths",
        "16,32",
    ]);
    assert!(evaluated.contains("| 32 |"), "{evaluated}");

    // A translation model too: its encoder attends both ways, its decoder causally.
    let kotoba = dir.path().join("kotoba");
    let config = common::tiny_config(dir.path());
    let (config, kotoba) = (config.to_str().unwrap(), kotoba.to_str().unwrap());
    posenc(&[
        "train",
        "--quiet",
        "--steps",
        "10",
        "--config",
        config,
        "--encoding",
        "agree",
        "--out",
        kotoba,
    ]);
    let translated = posenc(&["translate", "--model", kotoba, "the dog sleeps"]);
    assert_eq!(translated.lines().count(), 1, "{translated}");
}
