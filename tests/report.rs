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

/// Every page of the book (and the README) with generated tables.
fn pages_with_tables(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            pages_with_tables(&path, found);
        } else if path.extension().is_some_and(|e| e == "md")
            && std::fs::read_to_string(&path)
                .unwrap()
                .contains("<!-- table: ")
        {
            found.push(path);
        }
    }
}

/// The book's generated tables are what the studies' records give now.
#[test]
fn every_generated_table_is_what_the_records_give() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![];
    pages_with_tables(&root.join("docs"), &mut pages);
    assert!(pages.len() >= 2, "{pages:?}");
    for page in pages {
        let rendered = posenc_cli::cmd::report::tables(&page).unwrap();
        assert!(
            rendered == std::fs::read_to_string(&page).unwrap(),
            "{} is not what its records give: run `posenc report --tables {}`",
            page.display(),
            page.display()
        );
    }
}

/// A generated table: each cell the mean ± sd over seeds of each seed's mean over the
/// matching records, computed here from the records; a row without records in a column
/// leaves the cell empty; a row without any record, and an unpaired marker, are refused.
#[test]
fn a_generated_table_reads_its_records() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let copy = root.join("docs/lengthgen/copy");
    let dir = tempfile::tempdir().unwrap();
    let spec = |rows: &[&str]| {
        serde_json::json!({
            "rows": rows,
            "digits": 3,
            "columns": [
                {"title": "at 13", "studies": [&copy], "metric": "accuracy",
                 "where": {"length": 13}, "scale": 100, "best": "highest"},
                {"title": "seeds", "studies": [&copy], "metric": "accuracy", "seeds": true},
                {"title": "xpos past", "studies": [copy.join("after-alibi")],
                 "metric": "accuracy", "where": {"trained": false}}
            ]
        })
    };
    std::fs::write(
        dir.path().join("t.json"),
        spec(&["alibi", "none", "xpos"]).to_string(),
    )
    .unwrap();
    let page = dir.path().join("page.md");
    std::fs::write(
        &page,
        "# A page\n\n<!-- table: t.json -->\nstale\n<!-- table end -->\n",
    )
    .unwrap();
    let text = posenc_cli::cmd::report::tables(&page).unwrap();
    // ALiBi at 13, by hand: each seed's accuracy (one record per seed and length).
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(copy.join("results.json")).unwrap()).unwrap();
    let at13: Vec<f64> = results["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["label"] == "alibi" && r["length"] == 13)
        .map(|r| 100.0 * r["accuracy"].as_f64().unwrap())
        .collect();
    assert_eq!(at13.len(), 3);
    let mean = at13.iter().sum::<f64>() / 3.0;
    let sd = (at13.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
    // ALiBi is ahead of NoPE at 13 on copy, so in bold; three seeds; no xPos in the study.
    let row = format!("| alibi | **{mean:.3} ± {sd:.3}** | 3 |  |");
    assert!(text.contains(&row), "{text}\nwant {row}");
    assert!(
        text.contains("| none | 21.") && !text.contains("| none | **"),
        "{text}"
    );
    assert!(text.contains("| xpos |  |  | 0.0"), "{text}");
    // A list in `where` matches any of its values: ALiBi's seeds at 13 and 15, each seed's
    // value the mean of its two.
    std::fs::write(
        dir.path().join("t.json"),
        serde_json::json!({"rows": ["alibi"], "digits": 3, "columns": [
            {"title": "13 or 15", "studies": [&copy], "metric": "accuracy",
             "where": {"length": [13, 15]}, "scale": 100}
        ]})
        .to_string(),
    )
    .unwrap();
    let either = posenc_cli::cmd::report::tables(&page).unwrap();
    let at = |len: u64| -> Vec<f64> {
        let mut by_seed: Vec<(u64, f64)> = results["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["label"] == "alibi" && r["length"] == len)
            .map(|r| (r["seed"].as_u64().unwrap(), r["accuracy"].as_f64().unwrap()))
            .collect();
        by_seed.sort_by_key(|&(s, _)| s);
        by_seed.into_iter().map(|(_, a)| a).collect()
    };
    let seeds: Vec<f64> = at(13)
        .iter()
        .zip(at(15))
        .map(|(a, b)| 100.0 * (a + b) / 2.0)
        .collect();
    let m = seeds.iter().sum::<f64>() / 3.0;
    let v = (seeds.iter().map(|x| (x - m).powi(2)).sum::<f64>() / 2.0).sqrt();
    assert!(
        either.contains(&format!("| alibi | {m:.3} ± {v:.3} |")),
        "{either}"
    );
    assert!(!text.contains("stale"), "{text}");
    assert!(text.starts_with(
        "# A page\n\n<!-- table: t.json -->\n\n| encoding | at 13 | seeds | xpos past |"
    ));
    assert!(text.ends_with("|\n\n<!-- table end -->\n"), "{text}");
    std::fs::write(dir.path().join("t.json"), spec(&["nothing"]).to_string()).unwrap();
    let e = format!("{:#}", posenc_cli::cmd::report::tables(&page).unwrap_err());
    assert!(e.contains("`nothing` has no record in any column"), "{e}");
    std::fs::write(&page, "<!-- table: t.json -->\n").unwrap();
    let e = format!("{:#}", posenc_cli::cmd::report::tables(&page).unwrap_err());
    assert!(e.contains("no end marker"), "{e}");
}
