//! The scenes and their answers, read back from the pixels: each shape is found by its
//! colour in the rendered patches, and every answer recomputed from those pixels alone.

use posenc_vision::scenes::{
    check_grid, grid_of_pixels, Colour, Example, Question, Scene, CLASSES, PATCH, PATCH_VALUES,
    SIZE,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The pixels of each colour in `scene`'s patches: `(x, y)` each, read from the patch
/// layout the model sees (raster order of patches, pixels row after row, RGB).
fn pixels_by_colour(scene: &Scene) -> Vec<Vec<(usize, usize)>> {
    let [rows, columns] = scene.grid;
    let values = scene.patches();
    assert_eq!(values.len(), rows * columns * PATCH_VALUES);
    let mut out = vec![Vec::new(); 4];
    for (i, px) in values.chunks(3).enumerate() {
        let (patch, inner) = (i / (PATCH * PATCH), i % (PATCH * PATCH));
        let (x, y) = (
            (patch % columns) * PATCH + inner % PATCH,
            (patch / columns) * PATCH + inner / PATCH,
        );
        let rgb = [px[0], px[1], px[2]];
        if rgb == [0.0; 3] {
            continue;
        }
        let c = Colour::ALL
            .iter()
            .position(|c| c.rgb() == rgb)
            .unwrap_or_else(|| panic!("pixel ({x}, {y}) is {rgb:?}, no colour"));
        out[c].push((x, y));
    }
    out
}

/// The answer class to `q`, from the shapes' centroids in pixels; `None` within 2 pixels.
fn answer_from_pixels(centres: &[(f64, f64)], width: f64, q: &Question) -> Option<u32> {
    let idx = |c: &Colour| Colour::ALL.iter().position(|d| d == c).unwrap();
    let yes_no = |d: f64| (d.abs() >= 2.0).then_some(u32::from(d > 0.0));
    let ranked = |a: usize| {
        let mut d: Vec<(f64, usize)> = (0..4)
            .filter(|&c| c != a)
            .map(|c| {
                let (dx, dy) = (centres[c].0 - centres[a].0, centres[c].1 - centres[a].1);
                ((dx * dx + dy * dy).sqrt(), c)
            })
            .collect();
        d.sort_by(|p, q| p.0.partial_cmp(&q.0).unwrap());
        d
    };
    match q {
        Question::LeftOf { a, b } => yes_no(centres[idx(b)].0 - centres[idx(a)].0),
        Question::Above { a, b } => yes_no(centres[idx(b)].1 - centres[idx(a)].1),
        Question::Nearest { a } => {
            let d = ranked(idx(a));
            (d[1].0 - d[0].0 >= 2.0).then_some(2 + d[0].1 as u32)
        }
        Question::Farthest { a } => {
            let d = ranked(idx(a));
            (d[2].0 - d[1].0 >= 2.0).then_some(2 + d[2].1 as u32)
        }
        Question::CountLeft { a } => {
            let x = centres[idx(a)].0;
            let others: Vec<f64> = (0..4)
                .filter(|&c| c != idx(a))
                .map(|c| centres[c].0)
                .collect();
            others
                .iter()
                .all(|o| (o - x).abs() >= 2.0)
                .then(|| 6 + others.iter().filter(|&&o| o < x).count() as u32)
        }
        Question::LeftHalf { a } => yes_no(width / 2.0 - 0.5 - centres[idx(a)].0),
    }
}

#[test]
fn answers_follow_from_the_pixels_on_every_grid() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut classes = [0usize; CLASSES];
    for grid in [[4, 4], [6, 6], [9, 9], [12, 7]] {
        for _ in 0..300 {
            let e = Example::random(grid, &mut rng).unwrap();
            let by_colour = pixels_by_colour(&e.scene);
            let centres: Vec<(f64, f64)> = by_colour
                .iter()
                .map(|px| {
                    // A square covers SIZE², a circle SIZE² less its four corners.
                    assert!(
                        px.len() == SIZE * SIZE || px.len() == SIZE * SIZE - 4,
                        "{px:?}"
                    );
                    let n = px.len() as f64;
                    (
                        px.iter().map(|p| p.0 as f64).sum::<f64>() / n,
                        px.iter().map(|p| p.1 as f64).sum::<f64>() / n,
                    )
                })
                .collect();
            let width = (grid[1] * PATCH) as f64;
            let want = answer_from_pixels(&centres, width, &e.question);
            assert_eq!(Some(e.answer), want, "{:?} in {:?}", e.question, e.scene);
            classes[e.answer as usize] += 1;
        }
    }
    // Every class is asked, and yes and no about as often.
    assert!(classes.iter().all(|&n| n > 0), "{classes:?}");
    let (no, yes) = (classes[0] as f64, classes[1] as f64);
    assert!((no / (no + yes) - 0.5).abs() < 0.1, "{classes:?}");
}

#[test]
fn shapes_are_whole_and_apart() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for _ in 0..200 {
        let scene = Scene::random([6, 6], &mut rng).unwrap();
        let px = pixels_by_colour(&scene);
        for a in 0..4 {
            for b in a + 1..4 {
                // No pixel of one touches a pixel of another (8-neighbourhood).
                let touch = px[a].iter().any(|p| {
                    px[b]
                        .iter()
                        .any(|q| p.0.abs_diff(q.0) <= 1 && p.1.abs_diff(q.1) <= 1)
                });
                assert!(!touch, "{:?}", scene.objects);
            }
        }
    }
}

#[test]
fn bad_grids_and_image_sizes_are_refused_by_name() {
    let e = check_grid([3, 8]).unwrap_err().to_string();
    assert!(e.contains("4 to 64 patches") && e.contains("3 × 8"), "{e}");
    let e = check_grid([8, 65]).unwrap_err().to_string();
    assert!(e.contains("8 × 65"), "{e}");
    let e = grid_of_pixels([30, 32]).unwrap_err().to_string();
    assert!(
        e.contains("30 × 32 pixels") && e.contains("4-pixel patches"),
        "{e}"
    );
    assert_eq!(grid_of_pixels([24, 32]).unwrap(), [6, 8]);
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    assert!(Example::random([2, 2], &mut rng).is_err());
}
