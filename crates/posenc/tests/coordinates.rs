//! Coordinates on several axes per token (`Positions::Coords`) reach every built-in kind
//! through the same contexts as one position per token: a kind that declares it reads them
//! (`Capabilities::coords`) does, a kind that reads other positions refuses them by name,
//! and a kind that does not read positions (NoPE, CoPE, FoX, a sink, Scalable-Softmax)
//! does the same with them as with any other positions. None of them reads a coordinate
//! as if it were a position.

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use posenc::{
    BiasContext, Direction, EmbedContext, EncodingConfig, Positions, RotateContext, Target, Tokens,
};

const D: usize = 8;
const HEADS: usize = 2;
const T: usize = 4;

/// What one hook gives at some positions: its output's values, or the error's text.
type Outcome = Result<Option<Vec<f32>>, String>;

fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

#[test]
fn every_kind_refuses_coordinates_or_reads_no_positions() {
    let dev = Device::Cpu;
    let target = Target::new(D, HEADS, Direction::Causal).unwrap();
    let x = Tensor::randn(0f32, 1.0, (1, T, D), &dev).unwrap();
    let heads = Tensor::randn(0f32, 1.0, (1, HEADS, T, D / HEADS), &dev).unwrap();
    let ids = Tensor::from_vec(vec![5u32, 0, 6, 7], (1, T), &dev).unwrap();
    let tokens = Tokens::new(&ids);
    // Two axes per token, and their first axis a list of positions of its own.
    let coords: Vec<u32> = vec![0, 0, 0, 1, 1, 0, 1, 1];
    let first_axis: Vec<u32> = coords.iter().step_by(2).copied().collect();
    let grid = Positions::Coords {
        axes: 2,
        coords: &coords,
    };
    let (mut refused, mut readers) = (Vec::new(), Vec::new());
    for kind in EncodingConfig::kinds() {
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &dev);
        let enc = EncodingConfig::from_kind(kind)
            .unwrap()
            .build(&target, vb)
            .unwrap();
        // A kind that declares it reads two coordinates a token reads them: its own tests
        // check how.
        if enc.capabilities().coords == 2 {
            readers.push(kind);
            continue;
        }
        // Every hook that takes positions, at these positions.
        let hooks = |at: Positions| -> [Outcome; 3] {
            let text = |e: posenc::Error| e.to_string();
            [
                enc.embed(&x, &EmbedContext::at(at).with_tokens(tokens))
                    .map(|t| Some(flat(&t)))
                    .map_err(text),
                enc.rotate(&heads, &RotateContext::query(at))
                    .map(|t| Some(flat(&t)))
                    .map_err(text),
                enc.bias(&BiasContext::square(T, at).with_tokens(Some(tokens)))
                    .map(|b| b.map(|b| flat(&b)))
                    .map_err(text),
            ]
        };
        let on_grid = hooks(grid);
        let (from_0, from_3, listed) = (
            hooks(Positions::From(0)),
            hooks(Positions::From(3)),
            hooks(Positions::At(&first_axis)),
        );
        for (h, name) in ["embed", "rotate", "bias"].iter().enumerate() {
            match &on_grid[h] {
                Err(e) => {
                    assert!(
                        e.contains("2-D coordinates") && e.contains("encoding"),
                        "{kind} {name}: {e}"
                    );
                    refused.push(kind);
                }
                // Taken: then the hook reads no position at all.
                Ok(out) => {
                    for other in [&from_0[h], &from_3[h], &listed[h]] {
                        assert_eq!(
                            other.as_ref().ok(),
                            Some(out),
                            "{kind} {name}: takes coordinates, but its output moves with positions"
                        );
                    }
                }
            }
        }
    }
    assert!(readers.contains(&"rope-2d"), "{readers:?}");
    // The kinds of one position per token do refuse (the test sees them).
    for kind in [
        "sinusoidal",
        "learned",
        "rope",
        "alibi",
        "t5",
        "fire",
        "xpos",
        "pope",
    ] {
        assert!(refused.contains(&kind), "{kind} took coordinates");
    }
}

#[test]
fn coordinates_are_read_by_axis_and_checked_for_their_shape() {
    let coords = [0u32, 5, 1, 5, 2, 7];
    let grid = Positions::Coords {
        axes: 2,
        coords: &coords,
    };
    assert_eq!(grid.axes(), 2);
    assert_eq!(
        (grid.coord(1, 0), grid.coord(1, 1), grid.coord(2, 1)),
        (1, 5, 7)
    );
    assert_eq!(grid.end(3), 8, "one past the largest on any axis");
    assert_eq!(Positions::From(4).coord(2, 0), 6);
    assert_eq!(Positions::From(4).axes(), 1);
    grid.check_coords("m-rope", 3, 2).unwrap();
    for (len, axes) in [(2, 2), (3, 3), (6, 1)] {
        let e = grid
            .check_coords("m-rope", len, axes)
            .unwrap_err()
            .to_string();
        assert!(e.contains("m-rope") && e.contains("2-D coordinates"), "{e}");
    }
    Positions::From(0).check_coords("m-rope", 3, 1).unwrap();
    let e = Positions::From(0)
        .check_coords("m-rope", 3, 3)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("one position per token") && e.contains("reads 3 per token"),
        "{e}"
    );
}

/// A kind of a grid (two coordinates a token) reads one position a token as a patch of
/// row 0 at that column, through every hook: a sequence is one row of an image.
#[test]
fn a_grids_kind_reads_a_sequence_as_one_row() {
    let dev = Device::Cpu;
    let target = Target::new(D, HEADS, Direction::Bidirectional).unwrap();
    let x = Tensor::randn(0f32, 1.0, (1, T, D), &dev).unwrap();
    let heads = Tensor::randn(0f32, 1.0, (1, HEADS, T, D / HEADS), &dev).unwrap();
    let as_row: Vec<u32> = (3..3 + T as u32).flat_map(|p| [0, p]).collect();
    let row = Positions::Coords {
        axes: 2,
        coords: &as_row,
    };
    let mut grids = Vec::new();
    for kind in EncodingConfig::kinds() {
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &dev);
        let enc = EncodingConfig::from_kind(kind)
            .unwrap()
            .build(&target, vb)
            .unwrap();
        if enc.capabilities().coords != 2 {
            continue;
        }
        grids.push(kind);
        // LieRE places an image by its extent, as its code does, and a sequence at the trained
        // spacing, so that a cache turns each token as the whole forward does: its two
        // readings of one row agree only at the trained width (crates/posenc/src/liere.rs).
        if kind == "liere" {
            continue;
        }
        let outputs = |at: Positions| -> Vec<Option<Vec<f32>>> {
            vec![
                Some(flat(&enc.embed(&x, &EmbedContext::at(at)).unwrap())),
                Some(flat(
                    &enc.rotate(&heads, &RotateContext::query(at)).unwrap(),
                )),
                enc.bias(&BiasContext::square(T, at))
                    .unwrap()
                    .map(|b| flat(&b)),
            ]
        };
        assert_eq!(outputs(row), outputs(Positions::From(3)), "{kind}");
    }
    for kind in [
        "rope-2d",
        "rope-mixed",
        "sinusoidal-2d",
        "learned-2d",
        "alibi-2d",
        "liere",
    ] {
        assert!(
            grids.contains(&kind),
            "{kind} does not declare a grid: {grids:?}"
        );
    }
}
