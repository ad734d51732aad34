//! Every study page that an experiment's records make is what `posenc report` renders from
//! them now: no table and no claim in the book drifts from its record.

use std::path::{Path, PathBuf};

/// Records written by examples or study scripts rather than by an experiment: `report`
/// does not render them (the quantized cache's page is `scripts/kv_cache_table.py`'s).
const NOT_EXPERIMENTS: [&str; 3] = [
    "docs/long-context",
    "docs/long-context/kv-cache",
    "docs/smollm2-rope",
];

fn results_dirs(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            results_dirs(&path, found);
        } else if path.file_name().is_some_and(|n| n == "results.json") {
            found.push(dir.to_path_buf());
        }
    }
}

#[test]
fn every_study_page_is_what_its_records_give() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut dirs = Vec::new();
    results_dirs(&root.join("docs"), &mut dirs);
    dirs.sort();
    assert!(dirs.len() > 20, "{dirs:?}");
    let mut stale = Vec::new();
    for dir in &dirs {
        let name = dir.strip_prefix(root).unwrap().display().to_string();
        let page = posenc_cli::cmd::report::render(dir);
        if NOT_EXPERIMENTS.contains(&name.as_str()) {
            assert!(page.is_err(), "{name} renders: take it off NOT_EXPERIMENTS");
            continue;
        }
        let page = page.unwrap_or_else(|e| panic!("{name}: {e:#}"));
        let committed = std::fs::read_to_string(dir.join("results.md")).unwrap_or_default();
        if page != committed {
            stale.push(name);
        }
    }
    assert!(
        stale.is_empty(),
        "these pages are not what their records give; run `posenc report {}`",
        stale.join(" ")
    );
}

/// The README's results at a glance are what the studies' records give now.
#[test]
fn the_readme_glance_is_what_the_records_give() {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let rendered = posenc_cli::cmd::report::glance(&readme).unwrap();
    assert!(
        rendered == std::fs::read_to_string(&readme).unwrap(),
        "README.md's glance table is not what its records give: run `posenc report --glance README.md`"
    );
    assert!(rendered.contains("| held:") && rendered.contains("**not held**"));
}
