//! The seam holds: an encoding defined here, in a test file, and registered at run time
//! trains, translates, evaluates, prints and plots through every command, with no edit
//! anywhere else. Nothing outside an encoding's own file asks which encoding it is.

use crate::common;

use common::{in_process as posenc, is_png};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;
use posenc::{
    BiasContext, Capabilities, EmbedContext, EncodingConfig, EncodingSpec, PositionalEncoding,
    Positions, Table, Target,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `sawtooth`: `PE(pos, i) = (pos mod period) / period − ½` in every dimension, plus an
/// attention bias that prefers keys in the query's own period: an encoding no paper
/// proposes, using two of the hooks.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SawtoothConfig {
    #[serde(default = "three")]
    period: usize,
}

fn three() -> usize {
    3
}

impl EncodingSpec for SawtoothConfig {
    const KIND: &'static str = "sawtooth";

    fn build(
        &self,
        target: &Target,
        vb: VarBuilder,
    ) -> posenc::Result<Arc<dyn PositionalEncoding>> {
        if self.period == 0 {
            return Err(posenc::Error::Config("`sawtooth` needs period > 0".into()));
        }
        Ok(Arc::new(Sawtooth {
            period: self.period,
            d_model: target.d_model,
            heads: target.heads,
            device: vb.device().clone(),
        }))
    }
}

/// How often the model called each hook.
static ADDED: AtomicUsize = AtomicUsize::new(0);
static BIASED: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug)]
struct Sawtooth {
    period: usize,
    d_model: usize,
    heads: usize,
    device: Device,
}

impl Sawtooth {
    fn rows(&self, at: Positions, len: usize) -> posenc::Result<Tensor> {
        let values: Vec<f32> = (0..len)
            .map(|i| at.get(i))
            .flat_map(|p| {
                let v = (p % self.period) as f32 / self.period as f32 - 0.5;
                std::iter::repeat_n(v, self.d_model)
            })
            .collect();
        Ok(Tensor::from_vec(values, (len, self.d_model), &self.device)?)
    }
}

impl PositionalEncoding for Sawtooth {
    fn kind(&self) -> &'static str {
        SawtoothConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            adds: true,
            biases: true,
            ..Capabilities::default()
        }
    }

    fn embed(&self, x: &Tensor, cx: &EmbedContext) -> posenc::Result<Tensor> {
        ADDED.fetch_add(1, Ordering::Relaxed);
        let table = self.rows(cx.at, x.dim(1)?)?.to_dtype(x.dtype())?;
        Ok(x.broadcast_add(&table.unsqueeze(0)?)?)
    }

    fn bias(&self, cx: &BiasContext) -> posenc::Result<Option<Tensor>> {
        BIASED.fetch_add(1, Ordering::Relaxed);
        let BiasContext {
            q_len, k_len, q, k, ..
        } = *cx;
        let same = |i: usize, j: usize| (i / self.period == j / self.period) as u8 as f32;
        let values: Vec<f32> = (0..self.heads * q_len * k_len)
            .map(|n| same(q.get(n / k_len % q_len), k.get(n % k_len)))
            .collect();
        Ok(Some(Tensor::from_vec(
            values,
            (self.heads, q_len, k_len),
            &self.device,
        )?))
    }

    fn table(&self, len: usize) -> posenc::Result<Table> {
        Ok(Table::additive(
            "PE(pos, ·) = (pos mod period) / period − ½",
            self.rows(Positions::From(0), len)?,
            Vec::new(),
        ))
    }
}

#[test]
fn an_encoding_from_a_test_file_goes_through_every_command() {
    posenc::register::<SawtoothConfig>().unwrap();
    assert!(EncodingConfig::kinds().contains(&"sawtooth"));
    // A second registration of the kind is refused; a built-in kind cannot be replaced.
    assert!(posenc::register::<SawtoothConfig>().is_err());

    // Its config parses, with defaults and settings, and round-trips.
    let cfg: EncodingConfig = r#"{"kind": "sawtooth", "period": 4}"#.parse().unwrap();
    assert_eq!(cfg.settings::<SawtoothConfig>().unwrap().period, 4);
    let again: EncodingConfig = serde_json::to_string(&cfg).unwrap().parse().unwrap();
    assert_eq!(again, cfg);
    let e =
        r#"{"kind": "sawtooth", "perod": 4}"#.parse::<EncodingConfig>().unwrap_err().to_string();
    assert!(e.contains("perod"), "{e}");

    // encoding show / props print its table and properties.
    let shown = posenc(&[
        "encoding",
        "show",
        "--kind",
        "sawtooth",
        "--d-model",
        "4",
        "--len",
        "5",
    ]);
    assert!(
        shown.contains("sawtooth: PE(pos, ·) = (pos mod period)"),
        "{shown}"
    );
    assert!(
        shown.contains("0.1667") && shown.contains("-0.5000"),
        "{shown}"
    );
    let json = posenc(&[
        "encoding",
        "show",
        "--kind",
        "sawtooth",
        "--d-model",
        "2",
        "--len",
        "4",
        "--format",
        "json",
    ]);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["kind"], "sawtooth");
    assert_eq!(json["values"][3][1].as_f64().unwrap(), -0.5);
    let props = posenc(&[
        "encoding",
        "props",
        "--kind",
        "sawtooth",
        "--d-model",
        "4",
        "--len",
        "9",
    ]);
    assert!(props.starts_with("sawtooth"), "{props}");
    // Positions 0 and 3 share a vector: the table says so.
    assert!(props.contains("uniqueness         0.000e0"), "{props}");

    let dir = tempfile::tempdir().unwrap();
    let figure = dir.path().join("sawtooth.png");
    let plotted = posenc(&[
        "plot",
        "encoding",
        "--kind",
        "sawtooth",
        "--len",
        "12",
        "--out",
        figure.to_str().unwrap(),
    ]);
    assert!(plotted.contains("sawtooth.png") && is_png(&figure));

    // train / translate / eval / plot attention on a model that uses it.
    let config = common::tiny_config(dir.path());
    let run = dir.path().join("run");
    let (config, run_dir) = (config.to_str().unwrap(), run.to_str().unwrap());
    posenc(&[
        "train",
        "--quiet",
        "--steps",
        "30",
        "--config",
        config,
        "--encoding",
        "sawtooth",
        "--out",
        run_dir,
    ]);
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("config.json")).unwrap()).unwrap();
    assert_eq!(saved["encoding"]["kind"], "sawtooth", "{saved}");
    let translated = posenc(&["translate", "--model", run_dir, "the dog sleeps"]);
    assert_eq!(translated.lines().count(), 1, "{translated}");
    let evaluated = posenc(&["eval", "--model", run_dir]);
    assert!(evaluated.contains("test"), "{evaluated}");
    let attention = dir.path().join("attention.png");
    posenc(&[
        "plot",
        "attention",
        "--model",
        run_dir,
        "--sentence",
        "the dog sleeps",
        "--out",
        attention.to_str().unwrap(),
    ]);
    assert!(is_png(&attention));

    // The model really called both of its hooks, and the loaded config names it.
    assert!(ADDED.load(Ordering::Relaxed) > 0 && BIASED.load(Ordering::Relaxed) > 0);
    let translator = posenc_kotoba::task::Translator::load(&run, &Device::Cpu).unwrap();
    assert_eq!(translator.model.config().encoding.kind(), "sawtooth");

    // The experiment trains and tabulates it beside a built-in kind.
    let experiment = dir.path().join("experiment");
    let table = posenc(&[
        "experiment",
        "--quick",
        "--quiet",
        "--steps",
        "5",
        "--encodings",
        "none,sawtooth",
        "--out",
        experiment.to_str().unwrap(),
    ]);
    assert!(table.contains("| sawtooth |"), "{table}");
    let pngs = std::fs::read_dir(&experiment)
        .unwrap()
        .filter(|e| is_png(&e.as_ref().unwrap().path()))
        .count();
    assert!(pngs > 0, "the experiment drew no figure");
}
