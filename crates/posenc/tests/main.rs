//! The tests of `posenc-posenc`, one module a file, built as one test binary: each binary links
//! all of candle, so one per crate keeps the suite's build and link time down.

mod abacus;
mod alibi_2d;
mod composed;
mod coordinates;
mod coupling;
mod decay;
mod errors;
mod gradients;
mod hf_config;
mod householder;
mod learned_2d;
mod liere;
mod mrope;
mod pope;
mod positions;
mod presets;
mod properties;
mod qk_norm;
mod reference;
mod rope_2d;
mod rope_mixed;
mod rope_scaling;
mod seam_table;
mod settings;
mod sinusoidal_2d;
