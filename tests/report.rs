//! Every study page that an experiment's records make is what `posenc report` renders from
//! them now: no table and no claim in the book drifts from its record.

use std::path::{Path, PathBuf};

/// Records written by examples, study scripts or an evaluation rather than by an
/// experiment: `report` does not render them (the quantized cache's page is
/// `scripts/kv_cache_table.py`'s; the shipped translation model's reports are
/// `posenc kotoba eval --format json`'s).
const NOT_EXPERIMENTS: [&str; 5] = [
    "docs/kotoba-shipped",
    "docs/long-context",
    "docs/long-context/kv-cache",
    "docs/long-context/self-extend",
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

/// The JSON file at `path`, parsed.
fn json_of(path: impl AsRef<Path>) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The mean and the sample standard deviation of three values, computed here by hand.
fn mean_sd(xs: &[f64]) -> (f64, f64) {
    assert_eq!(xs.len(), 3, "{xs:?}");
    let mean = xs.iter().sum::<f64>() / 3.0;
    let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
    (mean, sd)
}

/// Every Markdown page under `dir`.
fn pages(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            pages(&path, found);
        } else if path.extension().is_some_and(|e| e == "md") {
            found.push(path);
        }
    }
}

/// The README and every page of the book.
fn book() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The crate docs' precision table quotes the book's records too.
    let mut found = vec![
        root.join("README.md"),
        root.join("crates/posenc/src/precision.md"),
    ];
    pages(&root.join("docs"), &mut found);
    found.sort();
    found
}

/// The markers of what `posenc report --tables` renders.
const GENERATED: [(&str, &str); 3] = [
    ("<!-- table: ", "<!-- table end -->"),
    ("<!-- claims: ", "<!-- claims end -->"),
    ("<!-- value: ", "<!-- /value -->"),
];

/// The book's generated tables, claims and values are what the studies' records give now.
#[test]
fn every_generated_table_is_what_the_records_give() {
    let pages: Vec<PathBuf> = book()
        .into_iter()
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            GENERATED.iter().any(|(begin, _)| text.contains(begin))
        })
        .collect();
    assert!(pages.len() >= 10, "{pages:?}");
    for page in pages {
        let rendered = posenc_train::pages::tables(&page).unwrap();
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
                {"title": "seeds", "studies": [&copy], "metric": "accuracy", "show": "count"},
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
    let text = posenc_train::pages::tables(&page).unwrap();
    // ALiBi at 13, by hand: each seed's accuracy (one record per seed and length).
    let results = json_of(copy.join("results.json"));
    let at13: Vec<f64> = results["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["label"] == "alibi" && r["length"] == 13)
        .map(|r| 100.0 * r["accuracy"].as_f64().unwrap())
        .collect();
    assert_eq!(at13.len(), 3);
    let (mean, sd) = mean_sd(&at13);
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
    let either = posenc_train::pages::tables(&page).unwrap();
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
    let (m, v) = mean_sd(&seeds);
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
    let e = format!("{:#}", posenc_train::pages::tables(&page).unwrap_err());
    assert!(e.contains("`nothing` has no record in any column"), "{e}");
    std::fs::write(&page, "<!-- table: t.json -->\n").unwrap();
    let e = format!("{:#}", posenc_train::pages::tables(&page).unwrap_err());
    assert!(e.contains("no end marker"), "{e}");
}

/// Pages kept as a command printed them, records in their own right: what they show is
/// not rendered again from other records.
const PRINTED: [&str; 1] = [
    // `posenc lm experiment`'s own page of the retrained by-octave runs, kept beside the
    // per-position records it does not hold.
    "docs/lm-experiment-new-encodings/by-octave/experiment-results.md",
];

/// Pages a study script or example renders from the records beside them (checked by
/// `script_made_pages_are_what_their_scripts_give`, or redrawn by
/// `examples/long_context_report.rs --from-records` and `examples/smollm2_rope.rs`).
const SCRIPT_MADE: [&str; 4] = [
    "docs/long-context/kv-cache/results.md",
    "docs/long-context/self-extend/results.md",
    "docs/long-context/results.md",
    "docs/smollm2-rope/results.md",
];

/// `text` without code blocks and without what `posenc report` renders.
fn typed_by_hand(text: &str) -> String {
    let mut text = text.to_string();
    for (begin, end) in GENERATED
        .iter()
        .chain(&[("```", "```"), ("<!-- glance: ", "<!-- glance end -->")])
    {
        let mut kept = String::new();
        let mut rest = text.as_str();
        while let Some(at) = rest.find(begin) {
            kept += &rest[..at];
            let after = &rest[at + begin.len()..];
            rest = match after.find(end) {
                Some(e) => &after[e + end.len()..],
                None => "",
            };
        }
        kept += rest;
        text = kept;
    }
    text
}

/// No mean and spread in the README or the book is typed by hand: every `±` followed by a
/// number sits in a table, value or claims block that `posenc report` renders from the
/// records (and a test checks), or on a page a command renders whole.
#[test]
fn no_spread_is_typed_by_hand() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut typed = Vec::new();
    for page in book() {
        let name = page.strip_prefix(root).unwrap().display().to_string();
        let rendered_whole = page.file_name().is_some_and(|n| n == "results.md")
            && page.with_file_name("results.json").exists();
        if rendered_whole
            || PRINTED.contains(&name.as_str())
            || SCRIPT_MADE.contains(&name.as_str())
        {
            continue;
        }
        let text = typed_by_hand(&std::fs::read_to_string(&page).unwrap());
        for (i, _) in text.match_indices('±') {
            let after = text[i + '±'.len_utf8()..].trim_start();
            if after.starts_with(|c: char| c.is_ascii_digit()) {
                let from = text[..i].char_indices().rev().nth(40).map_or(0, |(j, _)| j);
                let to = text[i..]
                    .char_indices()
                    .nth(20)
                    .map_or(text.len(), |(j, _)| i + j);
                typed.push(format!("{name}: …{}…", &text[from..to]));
            }
        }
    }
    assert!(
        typed.is_empty(),
        "a mean ± sd typed by hand (render it: a `<!-- value: NAME -->` or a table spec):\n{}",
        typed.join("\n")
    );
}

/// A copy of the study `dir` in a temporary directory.
fn copy_of(dir: &Path) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, tmp.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    tmp
}

/// The pages the study scripts print from their raw logs are what they print now, and the
/// tidy records they write are the ones committed (each run on a copy of its study).
#[test]
fn script_made_pages_are_what_their_scripts_give() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (script, study, writes_records) in [
        (
            "scripts/kv_cache_table.py",
            "docs/long-context/kv-cache",
            true,
        ),
        (
            "scripts/self_extend_table.py",
            "docs/long-context/self-extend",
            true,
        ),
    ] {
        let dir = root.join(study);
        let copy = copy_of(&dir);
        let out = std::process::Command::new("python3")
            .arg(root.join(script))
            .arg(copy.path())
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let page = std::fs::read_to_string(dir.join("results.md")).unwrap();
        assert!(
            String::from_utf8(out.stdout).unwrap() == page,
            "{study}/results.md is not what {script} prints from its records: run `python3 {script} {study} > {study}/results.md`"
        );
        if writes_records {
            let written = std::fs::read_to_string(copy.path().join("results.json")).unwrap();
            let committed = std::fs::read_to_string(dir.join("results.json")).unwrap();
            assert!(
                written == committed,
                "{study}/results.json is not what {script} writes from the raw logs"
            );
        }
    }
    // The speed tables of one day's raw benchmark logs, as the pages show them.
    for (day, page) in [
        ("docs/speed/runs-2026-11-28", "docs/speed/README.md"),
        ("docs/speed/runs-2026-11-28", "docs/performance.md"),
        ("docs/generate/runs-2026-11-28", "docs/generate/README.md"),
        ("docs/generate/runs-2026-11-28", "docs/pretrained.md"),
    ] {
        let out = std::process::Command::new("python3")
            .arg(root.join("scripts/speed_table.py"))
            .arg(root.join(day))
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let table = String::from_utf8(out.stdout).unwrap();
        let record = std::fs::read_to_string(root.join(page)).unwrap();
        assert!(
            table.lines().count() > 4 && record.contains(&table),
            "{page} does not show what `python3 scripts/speed_table.py {day}` prints:\n{table}"
        );
    }
}

/// A value in the prose: an entry's mean ± sd, mean, sd, range, seeds or count, each
/// computed here from the records; one record's field; tidy CSV records with a range in
/// the filter and another replicate field; and the refusals.
#[test]
fn a_generated_value_reads_its_records() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let copy = root.join("docs/lengthgen/copy");
    let windows = root.join("docs/long-context/more-windows/windows.csv");
    let alibi = root.join("docs/lm-experiment/alibi-by-position/loss_by_position.csv");
    let trials = root.join("docs/long-context/more-trials/trials.csv");
    let rope = root.join("docs/smollm2-rope");
    let load = root.join("docs/explorer/load.json");
    let stretch = root.join("docs/long-context/more-trials/stretch.csv");
    let browser = root.join("docs/explorer/browser.json");
    let at13 = serde_json::json!({"length": 13});
    let spec = |show: &str| {
        serde_json::json!({"studies": [&copy], "row": "alibi", "metric": "accuracy",
                           "where": at13, "scale": 100, "digits": 2, "show": show})
    };
    std::fs::write(
        dir.path().join("v.json"),
        serde_json::json!({
            "mean sd": spec("mean_sd"), "mean": spec("mean"), "sd": spec("sd"),
            "range": spec("range"), "seeds": spec("seeds"), "count": spec("count"),
            "min": spec("min"), "max": spec("max"),
            "first window": {"studies": [&windows], "by": "scaling", "row": "none",
                             "metric": "loss", "where": {"length": 8192, "window": 0},
                             "digits": 4, "show": "value"},
            "signed": {"studies": [&windows], "by": "scaling", "row": "none",
                       "metric": "loss", "where": {"length": 8192, "window": 0},
                       "digits": 4, "show": "value", "signed": true},
            "signed below zero": {"studies": [&windows], "by": "scaling", "row": "none",
                                  "metric": "loss", "where": {"length": 8192, "window": 0},
                                  "digits": 4, "show": "value", "signed": true, "scale": -1},
            "over windows": {"studies": [&windows], "by": "scaling", "row": "yarn",
                             "metric": "tail_loss", "where": {"length": 16384},
                             "over": "window", "digits": 4},
            "an octave": {"studies": [&alibi], "row": "alibi", "metric": "loss",
                          "where": {"length": 128, "position": {"from": 64, "to": 127}},
                          "digits": 4},
            "less none": {"studies": [&copy], "row": "alibi", "metric": "accuracy",
                          "where": at13, "scale": 100, "digits": 2, "show": "mean",
                          "signed": true, "minus": {"row": "none"}},
            "less at 15": {"studies": [&copy], "row": "alibi", "metric": "accuracy",
                           "where": at13, "scale": 100, "digits": 2, "show": "seeds",
                           "minus": {"where": {"length": 15}}},
            "train s": {"studies": [&copy], "list": "runs", "row": "alibi",
                        "metric": "train_s", "show": "range", "digits": 3},
            "found": {"studies": [&trials], "by": "scaling", "row": "none",
                      "metric": "correct", "where": {"length": 8192}, "show": "tally"},
            "one number": {"studies": [&stretch], "by": "scaling", "row": "yarn",
                           "metric": "stretch", "where": {"factor": 2, "pair": {"to": 10}},
                           "over": "record", "show": "range", "digits": 2},
            "one object": {"studies": [&load], "metric": "ok_per_s", "show": "value",
                           "digits": 3},
            "samples": {"studies": [&browser], "list": "redraw_ms_512x2048",
                        "metric": "value", "over": "record", "show": "range", "digits": 1},
            "every trial": {"studies": [&trials], "metric": "seconds", "over": "record",
                            "where": {"length": 8192}, "show": "count"},
            "loss ratio": {"studies": [&rope], "list": "*.results", "by": "name",
                           "row": "positions ÷ 2 (interpolation)", "metric": "loss",
                           "over": "len", "show": "seeds", "digits": 4,
                           "divided_by": {"row": "trained RoPE (θ = 100000)"}},
            "largest": {"studies": [&trials], "by": "scaling", "row": "none",
                        "metric": "peak_rss_mb", "where": {"length": 8192},
                        "over": "record", "show": "max", "digits": 3}
        })
        .to_string(),
    )
    .unwrap();
    let page = dir.path().join("page.md");
    let names = [
        "mean sd",
        "mean",
        "sd",
        "range",
        "min",
        "max",
        "seeds",
        "count",
        "first window",
        "signed",
        "signed below zero",
        "over windows",
        "an octave",
        "less none",
        "less at 15",
        "train s",
        "found",
        "largest",
        "loss ratio",
        "every trial",
        "one object",
        "samples",
        "one number",
    ];
    let body: String = names
        .iter()
        .map(|n| format!("{n}: <!-- value: {n} -->stale<!-- /value -->.\n"))
        .collect();
    std::fs::write(
        &page,
        format!("# A page\n\n<!-- values: v.json -->\n\n{body}"),
    )
    .unwrap();
    let text = posenc_train::pages::tables(&page).unwrap();
    let value = |name: &str| -> String {
        let begin = format!("<!-- value: {name} -->");
        let at = text.find(&begin).unwrap() + begin.len();
        text[at..at + text[at..].find("<!-- /value -->").unwrap()].to_string()
    };
    // By hand: an encoding's accuracy at a length in each seed (one record each).
    let records = |path: &Path| -> Vec<serde_json::Value> {
        let v = json_of(path);
        v["records"].as_array().unwrap().clone()
    };
    let at = |label: &str, length: u64| -> Vec<f64> {
        let mut seeds: Vec<(u64, f64)> = records(&copy.join("results.json"))
            .iter()
            .filter(|r| r["label"] == label && r["length"] == length)
            .map(|r| {
                (
                    r["seed"].as_u64().unwrap(),
                    100.0 * r["accuracy"].as_f64().unwrap(),
                )
            })
            .collect();
        seeds.sort_by_key(|&(s, _)| s);
        seeds.iter().map(|&(_, x)| x).collect()
    };
    let xs = at("alibi", 13);
    assert_eq!(xs.len(), 3);
    let (mean, sd) = mean_sd(&xs);
    assert_eq!(value("mean sd"), format!("{mean:.2} ± {sd:.2}"));
    assert_eq!(value("mean"), format!("{mean:.2}"));
    assert_eq!(value("sd"), format!("{sd:.2}"));
    let (lo, hi) = (
        xs.iter().copied().fold(f64::MAX, f64::min),
        xs.iter().copied().fold(f64::MIN, f64::max),
    );
    assert_eq!(value("range"), format!("{lo:.2}–{hi:.2}"));
    assert_eq!(value("min"), format!("{lo:.2}"));
    assert_eq!(value("max"), format!("{hi:.2}"));
    assert_eq!(
        value("seeds"),
        format!("{:.2}, {:.2} and {:.2}", xs[0], xs[1], xs[2])
    );
    assert_eq!(value("count"), "3");
    // Differences, seed by seed: from another entry, and from another filter.
    let none = at("none", 13);
    let less: f64 = xs.iter().zip(&none).map(|(a, b)| a - b).sum::<f64>() / 3.0;
    assert_eq!(value("less none"), format!("{less:+.2}"));
    let d: Vec<f64> = xs.iter().zip(at("alibi", 15)).map(|(a, b)| a - b).collect();
    assert_eq!(
        value("less at 15"),
        format!("{:.2}, {:.2} and {:.2}", d[0], d[1], d[2])
    );
    // Another list of the study's file: each run's training time.
    let runs = json_of(copy.join("results.json"));
    let times: Vec<f64> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["label"] == "alibi")
        .map(|r| r["train_s"].as_f64().unwrap())
        .collect();
    assert_eq!(times.len(), 3);
    let (lo, hi) = (
        times.iter().copied().fold(f64::MAX, f64::min),
        times.iter().copied().fold(f64::MIN, f64::max),
    );
    assert_eq!(value("train s"), format!("{lo:.3}–{hi:.3}"));
    // A file that is one object, and a list of plain values.
    let read = |path: &Path| json_of(path);
    let per_s = read(&load)["ok_per_s"].as_f64().unwrap();
    assert_eq!(value("one object"), format!("{per_s:.3}"));
    let ms: Vec<f64> = read(&browser)["redraw_ms_512x2048"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let (lo, hi) = (
        ms.iter().copied().fold(f64::MAX, f64::min),
        ms.iter().copied().fold(f64::MIN, f64::max),
    );
    assert_eq!(value("samples"), format!("{lo:.1}–{hi:.1}"));
    // YaRN leaves its fast pairs as trained: a range whose ends print alike is one number.
    assert_eq!(value("one number"), "1.00");
    // A file of items, each with its list of records: a ratio, length by length.
    let items = json_of(rope.join("results.json"));
    let losses = |name: &str| -> Vec<f64> {
        let item = items
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == name)
            .unwrap();
        let mut by_len: Vec<(u64, f64)> = item["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["len"].as_u64().unwrap(), r["loss"].as_f64().unwrap()))
            .collect();
        by_len.sort_by_key(|&(l, _)| l);
        by_len.into_iter().map(|(_, x)| x).collect()
    };
    let q: Vec<f64> = losses("positions ÷ 2 (interpolation)")
        .iter()
        .zip(losses("trained RoPE (θ = 100000)"))
        .map(|(a, b)| a / b)
        .collect();
    assert_eq!(q.len(), 3);
    assert_eq!(
        value("loss ratio"),
        format!("{:.4}, {:.4} and {:.4}", q[0], q[1], q[2])
    );
    // The CSVs, read here as plain text; a tally of the passkey trials at 8 192 unscaled.
    let t = std::fs::read_to_string(&trials).unwrap();
    let head: Vec<&str> = t.lines().next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let at8k: Vec<Vec<&str>> = t
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|r| r[col("scaling")] == "none" && r[col("length")] == "8192")
        .collect();
    let yes = at8k.iter().filter(|r| r[col("correct")] == "True").count();
    assert!(yes > 0 && yes < at8k.len(), "{yes} of {}", at8k.len());
    assert_eq!(value("found"), format!("{yes}/{}", at8k.len()));
    // Only the unscaled model ran at 8 192: every record there is one of `at8k`.
    assert_eq!(value("every trial"), at8k.len().to_string());
    let most = at8k
        .iter()
        .map(|r| r[col("peak_rss_mb")].parse::<f64>().unwrap())
        .fold(f64::MIN, f64::max);
    assert_eq!(value("largest"), format!("{most:.3}"));
    let rows = |path: &Path| -> Vec<Vec<String>> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| l.split(',').map(str::to_string).collect())
            .collect()
    };
    let w = rows(&windows);
    let col = |name: &str| w[0].iter().position(|h| h == name).unwrap();
    let first: f64 = w
        .iter()
        .find(|r| {
            r[col("scaling")] == "none" && r[col("length")] == "8192" && r[col("window")] == "0"
        })
        .map(|r| r[col("loss")].parse().unwrap())
        .unwrap();
    assert_eq!(value("first window"), format!("{first:.4}"));
    assert_eq!(value("signed"), format!("+{first:.4}"));
    assert_eq!(value("signed below zero"), format!("-{first:.4}"));
    let tails: Vec<f64> = w
        .iter()
        .filter(|r| r[col("scaling")] == "yarn" && r[col("length")] == "16384")
        .map(|r| r[col("tail_loss")].parse().unwrap())
        .collect();
    assert_eq!(tails.len(), 3);
    let (m, s) = mean_sd(&tails);
    assert_eq!(value("over windows"), format!("{m:.4} ± {s:.4}"));
    // An octave: each seed's mean over positions 64–127 of the 128-long windows.
    let a = rows(&alibi);
    let c = |name: &str| a[0].iter().position(|h| h == name).unwrap();
    let mut by_seed = std::collections::BTreeMap::<String, Vec<f64>>::new();
    for r in &a[1..] {
        let p: usize = r[c("position")].parse().unwrap();
        if r[c("length")] == "128" && (64..=127).contains(&p) {
            by_seed
                .entry(r[c("seed")].clone())
                .or_default()
                .push(r[c("loss")].parse().unwrap());
        }
    }
    let per: Vec<f64> = by_seed
        .values()
        .map(|v| v.iter().sum::<f64>() / v.len() as f64)
        .collect();
    assert_eq!(per.len(), 3);
    assert!(by_seed.values().all(|v| v.len() == 64));
    let (m, s) = mean_sd(&per);
    assert_eq!(value("an octave"), format!("{m:.4} ± {s:.4}"));
    assert!(!text.contains("stale"), "{text}");

    // Refusals, each naming its cause.
    let refused = |body: &str| -> String {
        std::fs::write(&page, body).unwrap();
        format!("{:#}", posenc_train::pages::tables(&page).unwrap_err())
    };
    let e = refused("<!-- value: mean -->1<!-- /value -->\n");
    assert!(e.contains("names no values file"), "{e}");
    let e = refused("<!-- values: v.json -->\n<!-- value: nothing -->1<!-- /value -->\n");
    assert!(e.contains("has no value `nothing`"), "{e}");
    let e = refused("<!-- values: v.json -->\n<!-- value: mean -->1\n");
    assert!(e.contains("has no end marker"), "{e}");
    let mut bad: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("v.json")).unwrap()).unwrap();
    bad["three"] = spec("value");
    bad["misspelt"] = serde_json::json!({"studies": [&copy], "row": "alibi",
                                         "metric": "accuracy", "digit": 2});
    bad["bad range"] = serde_json::json!({"studies": [&alibi], "row": "alibi", "metric": "loss",
                                          "where": {"position": {"below": 3}}});
    bad["tally of numbers"] = serde_json::json!({"studies": [&copy], "row": "alibi",
                                                 "metric": "accuracy", "show": "tally"});
    bad["records paired"] = serde_json::json!({"studies": [&trials], "by": "scaling",
                                               "row": "none", "metric": "seconds",
                                               "over": "record", "show": "mean",
                                               "minus": {"row": "yarn"}});
    bad["no row"] = serde_json::json!({"studies": [&copy], "metric": "accuracy"});
    bad["both"] = serde_json::json!({"studies": [&copy], "row": "alibi", "metric": "accuracy",
                                     "show": "mean", "minus": {"row": "none"},
                                     "divided_by": {"row": "none"}});
    bad["no such list"] = serde_json::json!({"studies": [&copy], "list": "ruins", "row": "alibi",
                                             "metric": "train_s"});
    bad["difference with sd"] = serde_json::json!({"studies": [&copy], "row": "alibi",
                                                   "metric": "accuracy", "where": at13,
                                                   "minus": {"row": "none"}});
    bad["difference unpaired"] = serde_json::json!({"studies": [&copy], "row": "alibi",
                                                    "metric": "accuracy", "where": at13,
                                                    "show": "mean",
                                                    "minus": {"row": "none",
                                                              "where": {"length": 13, "seed": 1}}});
    std::fs::write(dir.path().join("v.json"), bad.to_string()).unwrap();
    let e = refused("<!-- values: v.json -->\n<!-- value: three -->1<!-- /value -->\n");
    assert!(e.contains("3 records of `alibi` match"), "{e}");
    let e = refused("<!-- values: v.json -->\n<!-- value: bad range -->1<!-- /value -->\n");
    assert!(e.contains("must be a range"), "{e}");
    let e = refused("<!-- values: v.json -->\n<!-- value: misspelt -->1<!-- /value -->\n");
    assert!(e.contains("fields it does not know: digit"), "{e}");
    let e =
        refused("<!-- values: v.json -->\n<!-- value: difference with sd -->1<!-- /value -->\n");
    assert!(
        e.contains("shows `mean`, `range`, `min`, `max` or `seeds`"),
        "{e}"
    );
    let e =
        refused("<!-- values: v.json -->\n<!-- value: difference unpaired -->1<!-- /value -->\n");
    assert!(e.contains("the same seeds on both sides"), "{e}");
    let e = refused("<!-- values: v.json -->\n<!-- value: no such list -->1<!-- /value -->\n");
    assert!(e.contains("has no list `ruins`"), "{e}");
    let e = refused("<!-- values: v.json -->\n<!-- value: no row -->1<!-- /value -->\n");
    assert!(e.contains("without `row` reads every record"), "{e}");
    let e = refused("<!-- values: v.json -->\n<!-- value: both -->1<!-- /value -->\n");
    assert!(e.contains("`minus` or `divided_by`, not both"), "{e}");
    let e = refused("<!-- values: v.json -->\n<!-- value: records paired -->1<!-- /value -->\n");
    assert!(e.contains("records (`over: record`) have none"), "{e}");
    let e = refused("<!-- values: v.json -->\n<!-- value: tally of numbers -->1<!-- /value -->\n");
    assert!(e.contains("a tally counts what is true"), "{e}");
}

/// A table whose rows name their records by a filter, a column of e to the mean, and a
/// claims block: each checked against the records by hand.
#[test]
fn generated_rows_by_filter_and_claims_read_their_records() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let edge = root.join("docs/long-context/more-trials/edge_perplexity.csv");
    std::fs::write(
        dir.path().join("t.json"),
        serde_json::json!({
            "heading": "scaling", "digits": 3,
            "rows": [{"title": "YaRN ×4", "where": {"scaling": "yarn", "factor": 4}},
                     {"title": "none", "where": {"scaling": "none"}}],
            "columns": [
                {"title": "loss", "studies": [&edge], "metric": "loss", "over": "window"},
                {"title": "ppl", "studies": [&edge], "metric": "loss", "over": "window",
                 "show": "mean", "exp": true, "digits": 2}
            ]
        })
        .to_string(),
    )
    .unwrap();
    // The claim must come out "not held": two seeds only.
    std::fs::write(
        dir.path().join("results.json"),
        serde_json::json!([
            {"label": "a", "seed": 1, "loss": 1.0}, {"label": "b", "seed": 1, "loss": 2.0},
            {"label": "a", "seed": 2, "loss": 1.1}, {"label": "b", "seed": 2, "loss": 2.1}
        ])
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("c.json"),
        serde_json::json!({"claims": [{"claim": "a below b", "metric": "loss", "better": "a",
                                       "than": "b", "lower_is_better": true}]})
        .to_string(),
    )
    .unwrap();
    let page = dir.path().join("page.md");
    std::fs::write(
        &page,
        "<!-- table: t.json -->\n<!-- table end -->\n\n- item\n\n  <!-- claims: c.json -->\n  <!-- claims end -->\n",
    )
    .unwrap();
    let text = posenc_train::pages::tables(&page).unwrap();
    let losses: Vec<f64> = std::fs::read_to_string(&edge)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("yarn,4,"))
        .map(|l| l.split(',').nth(5).unwrap().parse().unwrap())
        .collect();
    assert_eq!(losses.len(), 3);
    let (m, s) = mean_sd(&losses);
    let row = format!("| YaRN ×4 | {m:.3} ± {s:.3} | {:.2} |", m.exp());
    assert!(text.contains(&row), "{text}\nwant {row}");
    assert!(text.contains("| none | "), "{text}");
    // The claims block, indented as its marker inside a list item.
    assert!(text.contains("\n  | 1 | a below b | loss, lower better | a 1.05 ± 0.07 | b 2.05 ± 0.07 | 1, 2 | one | +1.00 | 0.14 | 2 of 2 | **not held** |\n"), "{text}");
    assert!(text.ends_with("\n  <!-- claims end -->\n"), "{text}");
}

/// A claim the prose cites renders as its verdict now, from its study's records, and a
/// citation of a claim the study lacks is refused by name.
#[test]
fn a_cited_claim_renders_its_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let study = dir.path().join("study");
    std::fs::create_dir(&study).unwrap();
    let (a, b) = ([1.0, 1.2, 1.1], [2.0, 2.4, 1.9]);
    let records: Vec<_> = (0..3)
        .flat_map(|i| {
            [
                serde_json::json!({"label": "a", "seed": i, "loss": a[i]}),
                serde_json::json!({"label": "b", "seed": i, "loss": b[i]}),
            ]
        })
        .collect();
    std::fs::write(
        study.join("results.json"),
        serde_json::json!({ "records": records }).to_string(),
    )
    .unwrap();
    std::fs::write(
        study.join("claims.json"),
        serde_json::json!({"claims": [
            {"claim": "b below a", "metric": "loss", "better": "b", "than": "a", "lower_is_better": true},
            {"claim": "a below b", "metric": "loss", "better": "a", "than": "b", "lower_is_better": true}
        ]})
        .to_string(),
    )
    .unwrap();
    let page = dir.path().join("page.md");
    std::fs::write(
        &page,
        "a is lower (<!-- claim: study#2 -->typed<!-- /claim -->).\n",
    )
    .unwrap();
    let text = posenc_train::pages::tables(&page).unwrap();
    let ((ma, sa), (mb, sb)) = (mean_sd(&a), mean_sd(&b));
    let want = format!(
        "a is lower (<!-- claim: study#2 -->[claim 2](study/results.md#claims): held ({:+.2} \
         against spreads {:.2}; 3 of 3 seeds)<!-- /claim -->).\n",
        mb - ma,
        sa + sb
    );
    assert_eq!(text, want);
    std::fs::write(&page, "<!-- claim: study#1 --><!-- /claim -->").unwrap();
    let text = posenc_train::pages::tables(&page).unwrap();
    assert!(
        text.contains("not held (") && text.contains("0 of 3 seeds"),
        "{text}"
    );
    for bad in ["study#3", "study#0", "study"] {
        std::fs::write(&page, format!("<!-- claim: {bad} --><!-- /claim -->")).unwrap();
        let err = format!("{:#}", posenc_train::pages::tables(&page).unwrap_err());
        assert!(err.contains(bad), "{bad}: {err}");
    }
}

/// The tidy CSVs of `docs/long-context/more-trials` are what `scripts/passkey_trials.py`
/// writes from the trial records beside them, run as the page's own commands say, and the
/// tables the page shows whole (`SHOWN`) are what it prints; the page's other figures are
/// values rendered from the CSVs.
#[test]
fn passkey_trial_tables_are_what_their_script_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("docs/long-context/more-trials");
    let page = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let block = page
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap();
    let commands: Vec<String> = block
        .replace("\\\n", " ")
        .lines()
        .filter(|l| l.starts_with("python3 scripts/passkey_trials.py "))
        .map(str::to_string)
        .collect();
    assert!(commands.len() >= 8, "{commands:?}");
    let tmp = tempfile::tempdir().unwrap();
    for command in &commands {
        let args = command.trim_start_matches("python3 scripts/passkey_trials.py ");
        let (flag, rest) = match args.strip_prefix("--by-depth ") {
            Some(rest) => ("--by-depth ", rest),
            None => ("", args),
        };
        let (csv, inputs) = rest.split_once(' ').unwrap();
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "python3 {} {flag}{} {inputs}",
                root.join("scripts/passkey_trials.py").display(),
                tmp.path().join(csv).display()
            ))
            .current_dir(&dir)
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            std::fs::read(tmp.path().join(csv)).unwrap() == std::fs::read(dir.join(csv)).unwrap(),
            "{csv} is not what `{command}` writes"
        );
        const SHOWN: [&str; 2] = ["trials.csv", "depths.csv"];
        if !SHOWN.contains(&csv) {
            continue;
        }
        let printed = String::from_utf8(out.stdout).unwrap();
        let mut table = String::new();
        for line in printed.lines().chain([""]) {
            if line.starts_with('|') {
                table += line;
                table += "\n";
            } else if !table.is_empty() {
                assert!(
                    page.contains(&table),
                    "more-trials/README.md lacks the table `{command}` prints:\n{table}"
                );
                table.clear();
            }
        }
    }
}

/// A study whose `claims.json` writes the parts around its tables is rendered in the
/// book's order (question, command, setup and results, figures, claims, paper, cost,
/// limits), its figures shown from the files beside its records; one without them is
/// rendered as before.
#[test]
fn a_study_page_follows_the_template() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let study = root.join("docs/lm-experiment-fox");
    let copy = copy_of(&study);
    let mut claims: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(study.join("claims.json")).unwrap()).unwrap();
    for part in ["question", "command", "paper", "cost", "limits"] {
        claims[part] = format!("the {part} part").into();
    }
    std::fs::write(copy.path().join("claims.json"), claims.to_string()).unwrap();
    let page = posenc_cli::cmd::report::render(copy.path()).unwrap();
    let headings: Vec<&str> = page.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(
        headings,
        [
            "## The question",
            "## The command",
            "## Setup and results",
            "## Figures",
            "## Claims",
            "## Against the paper",
            "## Cost",
            "## Limits"
        ],
        "{page}"
    );
    assert!(page.contains("```sh\nthe command part\n```"), "{page}");
    assert!(
        page.contains("![extrapolation](extrapolation.png)")
            && page.contains("![by position](by_position.png)"),
        "{page}"
    );
    assert!(page.trim_end().ends_with("the limits part"), "{page}");
    // A misspelt part is refused, not dropped.
    claims["questoin"] = "?".into();
    std::fs::write(copy.path().join("claims.json"), claims.to_string()).unwrap();
    let e = format!(
        "{:#}",
        posenc_cli::cmd::report::render(copy.path()).unwrap_err()
    );
    assert!(e.contains("questoin"), "{e}");
}

/// The explorer and the book summarise a study's records one way: on a real study, the
/// explorer's mean and spread over seeds at each label and tested length
/// (`POST /api/aggregate`'s summary), printed as the page prints them, are the cells of the
/// table `posenc report` renders, and its seed counts the page's.
#[test]
fn the_explorers_aggregate_is_the_reports_table() {
    use posenc_serve::records::{aggregate, read, AggregateRequest};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for study in ["docs/lengthgen/count", "docs/lengthgen/sort"] {
        let path = root.join(study).join("results.json");
        let experiment = posenc_lengthgen::experiment::LengthgenExperiment::load(&path).unwrap();
        let table = experiment.table();
        let records = read(&path, study).unwrap();
        let request = AggregateRequest {
            path: study.into(),
            y: "accuracy".into(),
            x: Some("length".into()),
            group: Some("label".into()),
            filter: Default::default(),
        };
        let series = aggregate(&records, &request).unwrap();
        assert_eq!(series.len(), experiment.config.encodings.len(), "{study}");
        for s in &series {
            let row = table
                .lines()
                .find(|l| l.starts_with(&format!("| {} | ", s.name)))
                .unwrap_or_else(|| panic!("{study}: no row for {}", s.name));
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let seeds = s.points.iter().map(|p| p.values.len()).max().unwrap();
            assert_eq!(cells[2], seeds.to_string(), "{study} {}", s.name);
            assert_eq!(s.points.len(), experiment.config.test_lengths.len());
            for (point, cell) in s.points.iter().zip(&cells[3..]) {
                let shown = format!("{:.0} ± {:.0}", 100.0 * point.mean, 100.0 * point.sd);
                assert_eq!(&shown, cell, "{study} {} at {}", s.name, point.x);
            }
        }
    }
}

/// Words that compare on their own.
const COMPARING: [&str; 14] = [
    "best",
    "worst",
    "strongest",
    "weakest",
    "furthest",
    "farthest",
    "ahead",
    "behind",
    "beats",
    "beat",
    "beaten",
    "outperforms",
    "outperformed",
    "leads",
];

/// Two words that compare together.
const COMPARING_PAIRS: [(&str, &str); 8] = [
    ("level", "with"),
    ("same", "as"),
    ("changes", "nothing"),
    ("no", "better"),
    ("no", "worse"),
    ("better", "than"),
    ("worse", "than"),
    ("as", "far"),
];

/// Words before `above` or `below` that make it point at the page (`the table below`), not
/// compare.
const POINTING: [&str; 48] = [
    "table",
    "tables",
    "figure",
    "figures",
    "claims",
    "claim",
    "section",
    "list",
    "rows",
    "row",
    "command",
    "commands",
    "records",
    "plot",
    "page",
    "example",
    "results",
    "numbers",
    "ones",
    "those",
    "shown",
    "see",
    "as",
    "line",
    "lines",
    "chapter",
    "link",
    "entries",
    "paragraph",
    "text",
    "steps",
    "notes",
    "items",
    "block",
    "details",
    "one",
    "values",
    "runs",
    "studies",
    "pages",
    "logs",
    "study",
    "script",
    "given",
    "described",
    "listed",
    "there",
    "here",
];

/// The comparisons in one sentence: each word or phrase that ranks encodings or settings
/// (`best`, `ahead`, `below RoPE`, `level with`, …), and each verdict typed by hand (`held`,
/// `not held`, which only a rendered claim may print).
fn comparisons(sentence: &str) -> Vec<String> {
    let mut words: Vec<&str> = Vec::new();
    let mut rest = sentence;
    while let Some(c) = rest.chars().next() {
        let end = match c.is_alphanumeric() {
            true => rest
                .find(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’' || c == '-'))
                .unwrap_or(rest.len()),
            false => c.len_utf8(),
        };
        if !c.is_whitespace() {
            words.push(&rest[..end]);
        }
        rest = &rest[end..];
    }
    let lower: Vec<String> = words.iter().map(|w| w.to_lowercase()).collect();
    let at = |i: usize| lower.get(i).map_or("", String::as_str);
    // A question asks; it claims nothing.
    if sentence.trim_end().ends_with('?') {
        return Vec::new();
    }
    // What follows a paper's name (`Kazemnejad et al. (2023) put NoPE first`) is the
    // paper's claim, reported; what comes before it is this book's.
    let reported = (1..lower.len())
        .find(|&i| lower[i - 1] == "et" && lower[i] == "al")
        .unwrap_or(lower.len());
    let mut found = Vec::new();
    for (i, w) in lower.iter().enumerate().take(reported) {
        let (prev, next) = (i.checked_sub(1).map_or("", at), at(i + 1));
        if COMPARING.contains(&w.as_str()) && !(w == "leads" && next == "to") {
            found.push(w.clone());
        }
        // `below R = 512` or `below max_distance = 128`: a bound, not a rival.
        let compares_with_a_word = next.chars().nth(1).is_some()
            && at(i + 2) != "="
            && next.starts_with(char::is_alphabetic)
            && !["and", "or", "it", "is", "are", "the", "shows", "gives"].contains(&next);
        if (w == "above" || w == "below") && !POINTING.contains(&prev) && compares_with_a_word {
            found.push(format!("{w} {next}"));
        }
        if COMPARING_PAIRS.contains(&(w.as_str(), next)) {
            found.push(format!("{w} {next}"));
        }
        let does = [
            "do", "does", "did", "about", "nearly", "almost", "just", "works",
        ];
        if w == "as" && next == "well" && at(i + 2) == "as" && does.contains(&prev) {
            found.push(format!("{prev} as well as"));
        }
        let ranks = [
            "is", "are", "was", "were", "comes", "came", "ranks", "ranked", "puts",
        ];
        if w == "first" && (ranks.contains(&prev) || ["on", "past", "everywhere"].contains(&next)) {
            found.push(format!("{prev} first {next}"));
        }
        // `held out` (from training) and `held-out` are not verdicts.
        if (words[i] == "held" || words[i] == "Held") && next != "out" {
            found.push("held".into());
        }
    }
    found
}

/// The sentences of a page's prose, as a reader meets them: rendered tables, claims and
/// the glance table, code, headings and table rows left out; each rendered value read as a
/// number and each cited claim as `CITED`.
fn prose_sentences(text: &str) -> Vec<String> {
    let mut text = text.to_string();
    for (begin, end, left) in [
        ("<!-- claim: ", "<!-- /claim -->", " CITED "),
        ("<!-- value: ", "<!-- /value -->", " 1 "),
        ("<!-- table: ", "<!-- table end -->", ""),
        ("<!-- claims: ", "<!-- claims end -->", ""),
        ("<!-- glance: ", "<!-- glance end -->", ""),
        ("```", "```", ""),
        ("`", "`", " code "),
    ] {
        let mut kept = String::new();
        let mut rest = text.as_str();
        while let Some(at) = rest.find(begin) {
            kept += &rest[..at];
            kept += left;
            let after = &rest[at + begin.len()..];
            rest = match after.find(end) {
                Some(e) => &after[e + end.len()..],
                None => "",
            };
        }
        kept += rest;
        text = kept;
    }
    let prose: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with(['|', '#']))
        .collect();
    let prose = prose.join(" ");
    let prose: String = prose.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut sentences = Vec::new();
    let mut start = 0;
    for (i, c) in prose.char_indices() {
        // `et al. (2023)` and `e.g. RoPE` go on.
        let abbreviation = [" al", " e.g", " i.e", " cf", " vs"]
            .iter()
            .any(|a| prose[..i].ends_with(a));
        if matches!(c, '.' | '!' | '?' | ':' | ';')
            && prose[i + 1..].starts_with(' ')
            && !(c == '.' && abbreviation)
        {
            sentences.push(prose[start..=i].trim().to_string());
            start = i + 1;
        }
    }
    sentences.push(prose[start..].trim().to_string());
    sentences
}

/// The lint finds comparisons and hand-typed verdicts, and lets pointers and citations by.
#[test]
fn the_claims_lint_reads_comparisons() {
    let flagged = |s: &str| comparisons(s);
    assert_eq!(flagged("NoPE is first on sort."), ["is first on"]);
    assert_eq!(flagged("FoX goes furthest on copy"), ["furthest"]);
    assert_eq!(flagged("PoPE is below RoPE at 8L"), ["below rope"]);
    assert_eq!(
        flagged("learned positions do about as well as sinusoids"),
        ["about as well as"]
    );
    assert_eq!(
        flagged("it is level with CoPE (not held)"),
        ["level with", "held"]
    );
    assert!(flagged("the table below lists them; as shown above, see the claims below").is_empty());
    assert!(flagged("instances held out from training, the first ones").is_empty());
    assert!(flagged("does HoPE extrapolate better than RoPE?").is_empty());
    assert!(flagged("positions below R = 512").is_empty());
    assert_eq!(
        flagged("ALiBi is ahead, unlike Kazemnejad et al. (2023), who put NoPE first on it"),
        ["ahead"]
    );
    let sentences = prose_sentences(
        "# Best heading\n\nRoPE leads. ALiBi is ahead <!-- claim: x#1 -->held<!-- /claim -->.\n\
         | best | row |\n`best` in code.",
    );
    assert_eq!(
        sentences,
        ["RoPE leads.", "ALiBi is ahead CITED .", "code in code."]
    );
}

/// Every sentence of the README and the book that compares encodings or settings cites a
/// rendered claim (`<!-- claim: STUDY#N -->`, whose verdict `posenc report` renders), or says
/// what was measured without ranking it; no verdict is typed by hand.
#[test]
fn every_comparison_cites_a_claim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut uncited = Vec::new();
    for page in book() {
        let name = page.strip_prefix(root).unwrap().display().to_string();
        for sentence in prose_sentences(&std::fs::read_to_string(&page).unwrap()) {
            let found = comparisons(&sentence);
            if !found.is_empty() && !sentence.contains("CITED") {
                uncited.push(format!("{name}: {found:?}: {sentence}"));
            }
        }
    }
    assert!(
        uncited.is_empty(),
        "{} sentences compare without citing a claim (cite one, `<!-- claim: STUDY#N -->`, \
         or say what was measured):\n{}",
        uncited.len(),
        uncited.join("\n")
    );
}

/// The README stays a five-minute read: at most 1 300 words as a reader sees it (what
/// `posenc report` renders counted, its markers not).
#[test]
fn the_readme_is_a_five_minute_read() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let mut shown = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("<!--") {
        shown += &rest[..at];
        rest = rest[at..]
            .find("-->")
            .map_or("", |end| &rest[at + end + 3..]);
    }
    shown += rest;
    let words = shown.split_whitespace().count();
    assert!(
        words <= 1300,
        "the README has {words} words: move detail into the book"
    );
}

/// A claim names the batches its compared records were run in: each study it pools is one,
/// and a study's own records split by its declared `batches`; one batch reads `one`.
#[test]
fn a_claim_names_the_batches_its_records_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let (main, more) = (dir.path().join("main"), dir.path().join("more"));
    for d in [&main, &more] {
        std::fs::create_dir(d).unwrap();
    }
    let record = |label: &str, seed: u64, loss: f64| serde_json::json!({"label": label, "seed": seed, "loss": loss, "machine": seed % 2});
    // `a` and `b` in seeds 1–3 here; `c` in seeds 1–3 in another study.
    let here: Vec<_> = (1..=3)
        .flat_map(|s| [record("a", s, 1.0 + s as f64 / 10.0), record("b", s, 2.0)])
        .collect();
    let there: Vec<_> = (1..=3).map(|s| record("c", s, 3.0)).collect();
    for (d, records) in [(&main, here), (&more, there)] {
        std::fs::write(
            d.join("results.json"),
            serde_json::json!({ "records": records }).to_string(),
        )
        .unwrap();
    }
    let claim = |better: &str, than: &str| {
        serde_json::json!({"claim": format!("{better} below {than}"), "metric": "loss",
                           "better": better, "than": than, "lower_is_better": true})
    };
    let write_claims = |batches: serde_json::Value| {
        std::fs::write(
            main.join("claims.json"),
            serde_json::json!({"with": ["../more"], "batches": batches,
                               "claims": [claim("a", "b"), claim("a", "c")]})
            .to_string(),
        )
        .unwrap();
    };
    let page = dir.path().join("page.md");
    std::fs::write(
        &page,
        "<!-- claim: main#1 --><!-- /claim -->\n<!-- claim: main#2 --><!-- /claim -->\n\
         <!-- claims: main/claims.json -->\n<!-- claims end -->\n",
    )
    .unwrap();
    write_claims(serde_json::json!([]));
    let text = posenc_train::pages::tables(&page).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].ends_with("3 of 3 seeds)<!-- /claim -->"), "{text}");
    assert!(lines[1].contains("3 of 3 seeds; from 2 batches)"), "{text}");
    assert!(text.contains("| 1–3 | one |"), "{text}");
    assert!(text.contains("| 1–3 | main; more |"), "{text}");
    // Declared batches split the study's own records: seeds 1 and 3 on one machine.
    write_claims(serde_json::json!([{"name": "odd", "where": {"machine": 1}}]));
    let text = posenc_train::pages::tables(&page).unwrap();
    assert!(text.contains("| 1–3 | odd; main |"), "{text}");
    assert!(text.contains("| 1–3 | odd; main; more |"), "{text}");
}
