//! One encoding with weights of its own in every layer of a stack (FoX's gates, PaTH's
//! projections, a learned QK-norm): built once per layer under `N.`, it answers as the
//! first layer's and declares every layer's as a per-layer pattern
//! ([`crate::Capabilities::per_layer`]), which a model asks through [`crate::for_layer`].

use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::VarBuilder;

use crate::encoding::{
    BiasContext, Capabilities, EmbedContext, FromInput, InputContext, PositionalEncoding,
    RotateContext, ScoreContext, Table,
};
use crate::{Result, Target};

/// An encoding's layers, `layers[N]` built from the weights under `N.`.
#[derive(Debug)]
pub struct PerLayer<T> {
    layers: Vec<Arc<T>>,
}

impl<T: PositionalEncoding + 'static> PerLayer<T> {
    /// `build` run for each of the target's layers (one where it names none), each given
    /// the weights under its index.
    ///
    /// # Errors
    /// The first error of `build`.
    pub fn build(
        target: &Target,
        vb: &VarBuilder,
        mut build: impl FnMut(VarBuilder) -> Result<T>,
    ) -> Result<Self> {
        let layers = (0..layer_count(target))
            .map(|i| Ok(Arc::new(build(vb.pp(i.to_string()))?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { layers })
    }

    fn first(&self) -> &T {
        &self.layers[0]
    }
}

/// How many layers of weights an encoding that learns them per layer builds for `target`.
pub fn layer_count(target: &Target) -> usize {
    target.layers.unwrap_or(1).max(1)
}

impl<T: PositionalEncoding + 'static> PositionalEncoding for PerLayer<T> {
    fn kind(&self) -> &'static str {
        self.first().kind()
    }

    /// The first layer's, with every layer's as a pattern where there are several.
    fn capabilities(&self) -> Capabilities {
        let mut caps = self.first().capabilities();
        if self.layers.len() > 1 {
            caps.per_layer = (self.layers.iter())
                .map(|l| l.clone() as Arc<dyn PositionalEncoding>)
                .collect();
        }
        caps
    }

    fn embed(&self, x: &Tensor, cx: &EmbedContext) -> Result<Tensor> {
        self.first().embed(x, cx)
    }

    fn rotate(&self, x: &Tensor, cx: &RotateContext) -> Result<Tensor> {
        self.first().rotate(x, cx)
    }

    fn bias(&self, cx: &BiasContext) -> Result<Option<Tensor>> {
        self.first().bias(cx)
    }

    fn read_input(&self, cx: &InputContext) -> Result<FromInput> {
        self.first().read_input(cx)
    }

    fn score_bias(&self, cx: &ScoreContext) -> Result<Option<Tensor>> {
        self.first().score_bias(cx)
    }

    fn table(&self, len: usize) -> Result<Table> {
        self.first().table(len)
    }

    fn tables(&self, len: usize) -> Result<Vec<Table>> {
        self.layers.iter().map(|l| l.table(len)).collect()
    }
}
