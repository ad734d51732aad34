//! A small Vision Transformer (Dosovitskiy et al. 2021) from the encoder's blocks, asked a
//! question about its image:
//!
//! ```text
//! x      = P · W_patch + b  (+ the encoding's additive hook, at the patches' positions)
//!          + Q[kind] + Q[a] + Q[b]          (the question, added to every patch)
//! h      = Stack(x)                         (pre-norm encoder blocks, no mask, final norm)
//! logits = mean_patches(h) · W_head + b
//! ```
//!
//! Mean pooling, not a class token: every token is a patch, so every token has a place on
//! the grid. Where a patch sits is data, [`Vit::positions`]: the encoding declares how many
//! coordinates it reads ([`posenc::Capabilities::coords`]), and gets `(row, column)` for
//! two, `(0, row, column)` for three (an image alone, its time fixed, as Qwen2-VL places
//! one), and for one position a token the patch's index in raster order, row after row.

use std::sync::Arc;

use candle_core::{Device, Tensor, D};
use candle_nn::{Activation, Embedding, Module, VarBuilder, VarMap};
use posenc::{Direction, EmbedContext, EncodingConfig, PositionalEncoding, Positions, Target};
use posenc_error::ensure;
use posenc_transformer::linear::Proj;
use posenc_transformer::stack::{Stack, StackInput};
use posenc_transformer::BlockConfig;
use serde::{Deserialize, Serialize};

use crate::scenes::{check_grid, CLASSES, PATCH_VALUES, QUESTION_IDS};
use crate::Result;

/// The model's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VitConfig {
    /// Model width.
    pub d_model: usize,
    /// Attention heads.
    pub heads: usize,
    /// Feed-forward width.
    pub d_ff: usize,
    /// Encoder blocks.
    pub layers: usize,
    /// Dropout after the embeddings and in every block.
    pub dropout: f32,
    /// The feed-forward's activation.
    pub activation: Activation,
    /// The layer norms' epsilon.
    pub layer_norm_eps: f64,
    /// The positional encoding.
    pub encoding: EncodingConfig,
    /// The grid of patches it trains on, `[rows, columns]`: the context an encoding is
    /// built for (`rows · columns` tokens).
    pub grid: [usize; 2],
}

impl Default for VitConfig {
    fn default() -> Self {
        Self {
            d_model: 64,
            heads: 4,
            d_ff: 256,
            layers: 3,
            dropout: 0.0,
            activation: Activation::Gelu,
            layer_norm_eps: 1e-5,
            encoding: EncodingConfig::from_kind("rope-2d").expect("a built-in kind"),
            grid: [8, 8],
        }
    }
}

impl VitConfig {
    /// The encoder's blocks: pre-norm, GELU, a final norm.
    pub fn block(&self) -> BlockConfig {
        BlockConfig {
            activation: self.activation,
            norm_first: true,
            eps: self.layer_norm_eps,
            dropout: self.dropout,
            final_norm: true,
            ..BlockConfig::new(self.d_model, self.heads, self.d_ff)
        }
    }

    fn target(&self) -> Result<Target> {
        Ok(
            Target::new(self.d_model, self.heads, Direction::Bidirectional)?
                .with_context(self.grid[0] * self.grid[1])
                .with_layers(self.layers),
        )
    }

    /// The number of weights, from the sizes alone.
    pub fn parameter_count(&self) -> u128 {
        let d = self.d_model as u128;
        let embed = (PATCH_VALUES as u128 + 1) * d + QUESTION_IDS as u128 * d;
        let head = (d + 1) * CLASSES as u128;
        let encoding = self
            .target()
            .map_or(0, |t| self.encoding.parameter_count(&t));
        embed + head + encoding + self.block().stack_parameters(self.layers)
    }

    /// Checks every setting before anything is allocated.
    ///
    /// # Errors
    /// A size out of range, or a trained grid [`check_grid`] refuses.
    pub fn validate(&self) -> Result<()> {
        posenc::limits::check("layers", self.layers, posenc_transformer::MAX_LAYERS)?;
        self.block().validate()?;
        self.target()?.head_dim()?;
        check_grid(self.grid)?;
        ensure!(
            self.parameter_count() <= posenc_transformer::MAX_PARAMETERS,
            "the model would have {} weights: the limit is {}",
            self.parameter_count(),
            posenc_transformer::MAX_PARAMETERS
        );
        Ok(())
    }
}

/// The patches' positions on a grid, owned: what [`Positions`] borrows.
#[derive(Debug, Clone, PartialEq)]
pub struct GridPositions {
    /// Axes a token: 0 for one position a token (raster order), else 2 or 3.
    axes: usize,
    coords: Vec<u32>,
}

impl GridPositions {
    /// As [`Positions`].
    pub fn get(&self) -> Positions<'_> {
        match self.axes {
            0 => Positions::From(0),
            axes => Positions::Coords {
                axes,
                coords: &self.coords,
            },
        }
    }
}

/// The ViT.
#[derive(Debug, Clone)]
pub struct Vit {
    cfg: VitConfig,
    patch: Proj,
    question: Embedding,
    /// The first layer's encoding, whose addition the patches get.
    first_layer: Arc<dyn PositionalEncoding>,
    stack: Stack,
    head: Proj,
    axes: usize,
    device: Device,
}

impl Vit {
    /// Loads or creates the model of `cfg` under `vb` (`patch`, `question`, `encoding`,
    /// `stack`, `head`).
    ///
    /// # Errors
    /// A setting [`VitConfig::validate`] refuses; an encoding that reads coordinates on
    /// another number of axes than 1, 2 or 3; a missing or mis-shaped weight.
    pub fn new(cfg: &VitConfig, vb: VarBuilder) -> Result<Self> {
        cfg.validate()?;
        let encoding = cfg.encoding.build(&cfg.target()?, vb.pp("encoding"))?;
        let axes = encoding.capabilities().coords;
        ensure!(
            matches!(axes, 0 | 2 | 3),
            "`{}` reads {axes}-D coordinates: an image's patches have 2 (or 3, time first)",
            encoding.kind()
        );
        Ok(Self {
            cfg: cfg.clone(),
            patch: Proj::load(PATCH_VALUES, cfg.d_model, true, vb.pp("patch"))?,
            question: candle_nn::embedding(QUESTION_IDS, cfg.d_model, vb.pp("question"))?,
            first_layer: posenc::for_layer(&encoding, 0),
            stack: Stack::new(&cfg.block(), cfg.layers, encoding, vb.pp("stack"))?,
            head: Proj::load(cfg.d_model, CLASSES, true, vb.pp("head"))?,
            axes,
            device: vb.device().clone(),
        })
    }

    /// The model of `cfg` over `varmap`'s weights, for inference.
    ///
    /// # Errors
    /// As [`Vit::new`].
    pub fn frozen(cfg: &VitConfig, varmap: &VarMap, device: &Device) -> Result<Self> {
        Self::new(cfg, posenc_transformer::weights::frozen(varmap, device))
    }

    /// Its settings.
    pub fn config(&self) -> &VitConfig {
        &self.cfg
    }

    /// Where its weights are.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The encoding.
    pub fn encoding(&self) -> &Arc<dyn PositionalEncoding> {
        self.stack.encoding()
    }

    /// Where the patches of a `grid` sit, for this encoding.
    pub fn positions(&self, [rows, columns]: [usize; 2]) -> GridPositions {
        GridPositions {
            axes: self.axes,
            coords: Positions::image_coords(self.axes, [rows, columns]),
        }
    }

    /// The answer's logits for images of `grid` patches and their questions.
    ///
    /// # Shapes
    /// - `patches`: `(batch, rows · columns, PATCH_VALUES)` f32, raster order
    /// - `questions`: `(batch, 3)` u32, [`crate::scenes::Question::ids`]
    /// - output: `(batch, CLASSES)`
    ///
    /// # Errors
    /// Inputs of the wrong shape; a grid the encoding refuses (a learned table that does
    /// not resample, named by it).
    pub fn forward(
        &self,
        patches: &Tensor,
        questions: &Tensor,
        grid: [usize; 2],
    ) -> Result<Tensor> {
        let (batch, n, values) = patches.dims3()?;
        ensure!(
            n == grid[0] * grid[1] && values == PATCH_VALUES,
            "patches of shape {:?} for a grid of {} × {}: need (batch, {}, {PATCH_VALUES})",
            patches.dims(),
            grid[0],
            grid[1],
            grid[0] * grid[1]
        );
        ensure!(
            questions.dims() == [batch, 3],
            "questions of shape {:?}: need ({batch}, 3)",
            questions.dims()
        );
        let at = self.positions(grid);
        let x = self.patch.forward(patches)?;
        let x = self.first_layer.embed(&x, &EmbedContext::at(at.get()))?;
        let q = self.question.forward(questions)?.sum_keepdim(1)?;
        let x = posenc_transformer::dropout::dropout(&x.broadcast_add(&q)?, self.cfg.dropout)?;
        let input = StackInput {
            at: at.get(),
            ..StackInput::new(&x, None)
        };
        let (h, _) = self.stack.forward(input)?;
        Ok(self.head.forward(&h.mean(1)?)?.reshape((batch, CLASSES))?)
    }

    /// The predicted class of each question, `(batch)`.
    ///
    /// # Errors
    /// As [`Vit::forward`].
    pub fn predict(
        &self,
        patches: &Tensor,
        questions: &Tensor,
        grid: [usize; 2],
    ) -> Result<Vec<u32>> {
        let logits = self.forward(patches, questions, grid)?;
        Ok(logits.argmax(D::Minus1)?.to_vec1::<u32>()?)
    }
}
