//! `posenc encoding show|props` as a user runs them.

use std::process::{Command, Output};

use serde_json::Value;

fn posenc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_posenc"))
        .args(args)
        .output()
        .unwrap()
}

fn json(args: &[&str]) -> Value {
    let out = posenc(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn show(kind: &str, d: &str, len: &str, heads: &str) -> Value {
    json(&[
        "encoding",
        "show",
        "--kind",
        kind,
        "--d-model",
        d,
        "--len",
        len,
        "--heads",
        heads,
        "--format",
        "json",
    ])
}

#[test]
fn show_sinusoidal_prints_the_worked_example() {
    let v = show("sinusoidal", "4", "3", "1");
    assert_eq!(v["kind"], "sinusoidal");
    let row: Vec<f64> = v["values"][1]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    for (got, want) in row.iter().zip([0.841, 0.540, 0.010, 1.000]) {
        assert!((got - want).abs() < 5e-4, "{row:?}");
    }
    assert_eq!(v["values"].as_array().unwrap().len(), 3);
}

#[test]
fn show_alibi_is_head_query_key() {
    let v = show("alibi", "8", "5", "4");
    let heads = v["values"].as_array().unwrap();
    assert_eq!(heads.len(), 4);
    assert_eq!(heads[0].as_array().unwrap().len(), 5);
    assert_eq!(heads[0][0].as_array().unwrap().len(), 5);
    // Head 0 of 4 has slope 2^-2: the key 3 positions away costs 0.75.
    assert!((heads[0][0][3].as_f64().unwrap() + 0.75).abs() < 1e-6);
}

#[test]
fn show_t5_prints_bucket_indices_and_rope_cos_sin() {
    let v = show("t5", "8", "4", "2");
    assert_eq!(v["values"][0], serde_json::json!([0, 17, 18, 19]));
    assert_eq!(v["values"][3], serde_json::json!([3, 2, 1, 0]));
    let v = show("rope", "8", "6", "2");
    assert_eq!(v["values"]["cos"].as_array().unwrap().len(), 6);
    assert_eq!(v["values"]["sin"][0].as_array().unwrap().len(), 2);
}

#[test]
fn table_format_is_readable() {
    let out = posenc(&[
        "encoding",
        "show",
        "--kind",
        "sinusoidal",
        "--d-model",
        "4",
        "--len",
        "2",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("0.8415") && text.contains("0.5403"), "{text}");
    let out = posenc(&[
        "encoding",
        "props",
        "--kind",
        "fraction",
        "--d-model",
        "8",
        "--len",
        "20",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("length drift") && text.contains("uniqueness"),
        "{text}"
    );
}

#[test]
fn props_json_shows_the_documents_claims() {
    let p = |kind: &str| {
        json(&[
            "encoding",
            "props",
            "--kind",
            kind,
            "--d-model",
            "16",
            "--len",
            "40",
            "--shift",
            "2",
            "--format",
            "json",
        ])
    };
    assert!(p("sinusoidal")["shift_residual"].as_f64().unwrap() < 1e-5);
    assert!(p("learned")["shift_residual"].as_f64().unwrap() > 1e-2);
    assert!(p("fraction")["length_drift"].as_f64().unwrap() > 0.1);
    assert_eq!(p("sinusoidal")["length_drift"].as_f64().unwrap(), 0.0);
    assert!(p("index")["max_abs"].as_f64().unwrap() >= 39.0);
}

#[test]
fn bad_input_is_an_error_naming_the_cause() {
    for (args, needle) in [
        (
            vec!["--kind", "warp-drive", "--d-model", "8", "--len", "4"],
            "warp-drive",
        ),
        (
            vec!["--kind", "sinusoidal", "--d-model", "7", "--len", "4"],
            "even",
        ),
        (
            vec![
                "--kind",
                "alibi",
                "--d-model",
                "8",
                "--len",
                "4",
                "--heads",
                "0",
            ],
            "heads",
        ),
        (
            vec![
                "--kind",
                r#"{"kind":"learned","max_positions":4}"#,
                "--d-model",
                "8",
                "--len",
                "9",
            ],
            "max_positions = 4",
        ),
    ] {
        let mut full = vec!["encoding", "show"];
        full.extend(args);
        let out = posenc(&full);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{full:?} succeeded");
        assert!(stderr.contains(needle), "{full:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// `encoding list` names every kind with each setting, its default and what it does; each
/// kind at its defaults, written back in the grammar every command reads (`kind:key=value:…`), is accepted and, where the
/// table is fixed, gives the bare kind's table. Defaults checked against their papers:
/// RoPE's base 10 000 (Su et al. 2021), T5's 32 buckets up to distance 128 (Raffel et al.
/// 2020). `--kind`, the flag's earlier name, still works.
#[test]
fn the_list_names_every_kind_in_the_grammar_every_command_reads() {
    let list = json(&["encoding", "list", "--format", "json"]);
    let kinds = list.as_array().unwrap();
    let kind = |name: &str| &kinds.iter().find(|k| k["kind"] == name).unwrap()["config"];
    assert_eq!(kind("rope")["base"], 10000.0);
    assert_eq!(kind("t5")["num_buckets"], 32);
    assert_eq!(kind("t5")["max_distance"], 128);
    let table = String::from_utf8(posenc(&["encoding", "list"]).stdout).unwrap();
    // Every setting is a row with its default and description, the optional ones too.
    for entry in kinds {
        for setting in entry["settings"].as_array().unwrap() {
            let row = format!(
                "| {} | {} |",
                entry["kind"].as_str().unwrap(),
                setting["name"].as_str().unwrap()
            );
            let line = table.lines().find(|l| l.starts_with(&row));
            assert!(
                line.is_some_and(|l| l.split(" | ").count() == 4),
                "{row} in\n{table}"
            );
        }
    }
    assert!(
        table.contains("| rope | position_scale | 1.0 | Positions are divided"),
        "{table}"
    );
    assert!(table.contains("| rope | scaling | unset |"), "{table}");
    let show = |encoding: &str| {
        let args = ["encoding", "show", "--encoding", encoding, "--d-model", "8"];
        json(
            &[
                &args[..],
                &["--len", "4", "--heads", "2", "--format", "json"],
            ]
            .concat(),
        )
    };
    for k in kinds.iter().map(|k| &k["config"]) {
        let name = k["kind"].as_str().unwrap();
        assert!(
            table.contains(&format!("| {name} |")),
            "{name} is not in\n{table}"
        );
        let settings: Vec<String> = k
            .as_object()
            .unwrap()
            .iter()
            .filter(|(key, v)| *key != "kind" && !v.is_array() && !v.is_object())
            .map(|(key, v)| match v.as_str() {
                Some(text) => format!("{key}={text}"),
                None => format!("{key}={v}"),
            })
            .collect();
        let written = [name.to_string()]
            .into_iter()
            .chain(settings)
            .collect::<Vec<_>>();
        let spelled = show(&written.join(":"));
        if ["sinusoidal", "rope", "alibi", "t5", "index", "binary"].contains(&name) {
            assert_eq!(spelled, show(name), "{}", written.join(":"));
        }
    }
    let earlier = posenc(&[
        "encoding",
        "show",
        "--kind",
        "alibi",
        "--d-model",
        "8",
        "--len",
        "3",
    ]);
    assert!(earlier.status.success());
}

/// Tables print as numbers read: no `-0.0000` on ALiBi's diagonal, and T5's bucket indices
/// as the whole numbers they are.
#[test]
fn tables_print_zero_and_whole_numbers_plainly() {
    let text = |encoding: &str| {
        let o = posenc(&[
            "encoding",
            "show",
            "--encoding",
            encoding,
            "--d-model",
            "8",
            "--len",
            "4",
        ]);
        assert!(o.status.success());
        String::from_utf8(o.stdout).unwrap()
    };
    let alibi = text("alibi");
    assert!(
        alibi.contains(" 0.0000") && !alibi.contains("-0.0000"),
        "{alibi}"
    );
    let t5 = text("t5");
    assert!(!t5.contains(".0000") && t5.contains(" 17"), "{t5}");
}

/// A per-layer pattern shows every entry's table, each named with the layers it acts in,
/// as text and as JSON (the values are each entry's own, computed alone).
#[test]
fn show_layers_gives_every_entry_of_the_pattern() {
    let pattern = r#"{"kind": "layers", "pattern": ["alibi", "rope", "none"]}"#;
    let v = show(pattern, "4", "3", "1");
    let tables = v["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 3, "{v}");
    for (i, (kind, layers)) in [
        ("alibi", "0, 3, 6"),
        ("rope", "1, 4, 7"),
        ("none", "2, 5, 8"),
    ]
    .into_iter()
    .enumerate()
    {
        let title = tables[i]["title"].as_str().unwrap();
        assert!(
            title.starts_with(&format!("{kind} in layers {layers}")),
            "{title}"
        );
        let alone = show(kind, "4", "3", "1");
        assert_eq!(tables[i]["values"], alone["values"], "{kind}");
    }
    let out = posenc(&[
        "encoding",
        "show",
        "--encoding",
        pattern,
        "--d-model",
        "4",
        "--len",
        "3",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    for kind in ["alibi", "rope", "none"] {
        assert!(text.contains(&format!("{kind} in layers")), "{text}");
    }
}

/// A wide table prints its first and last columns, says which are left out, and stays
/// narrow; JSON still gives every value.
#[test]
fn show_elides_the_middle_of_a_wide_table() {
    let out = posenc(&[
        "encoding",
        "show",
        "--encoding",
        "sinusoidal",
        "--d-model",
        "4096",
        "--len",
        "3",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.len() < 2_000, "{} bytes", text.len());
    assert!(
        text.contains("columns 8–4091 of 4096 are not shown"),
        "{text}"
    );
    let header = text.lines().nth(1).unwrap();
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        columns[1..10],
        ["0", "1", "2", "3", "4", "5", "6", "7", "…"]
    );
    assert_eq!(columns[10..], ["4092", "4093", "4094", "4095"]);
    let v = show("sinusoidal", "4096", "3", "1");
    assert_eq!(v["values"][0].as_array().unwrap().len(), 4096);
    // A narrow table is whole, with no note.
    let narrow = posenc(&[
        "encoding",
        "show",
        "--encoding",
        "sinusoidal",
        "--d-model",
        "16",
        "--len",
        "2",
    ]);
    let text = String::from_utf8(narrow.stdout).unwrap();
    assert!(!text.contains('…') && !text.contains("not shown"), "{text}");
}

/// `encoding from-config` on SmolLM3-3B's published position fields: 36 layers, every
/// fourth without rotation (`no_rope_layer_interval` 4, as transformers derives
/// `no_rope_layers`), the rest RoPE of base 5 000 000; a layer's encoding, as printed, is
/// what `encoding show` takes, and gives the table of the same RoPE written by hand. A
/// missing or malformed file is named.
#[test]
fn from_config_prints_each_layers_encoding_as_show_takes_it() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("from-config");
    std::fs::create_dir_all(&dir).unwrap();
    let config = serde_json::json!({
        "model_type": "smollm3", "hidden_size": 2048, "num_attention_heads": 16,
        "num_key_value_heads": 4, "num_hidden_layers": 36, "max_position_embeddings": 65536,
        "rope_theta": 5000000.0, "rope_scaling": null, "no_rope_layer_interval": 4,
        "use_sliding_window": false, "sliding_window": null,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let layers = json(&[
        "encoding",
        "from-config",
        dir.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let layers = layers.as_array().unwrap();
    assert_eq!(layers.len(), 36);
    for (i, layer) in layers.iter().enumerate() {
        assert_eq!(layer["layer"], i);
        let kind = if (i + 1) % 4 == 0 { "none" } else { "rope" };
        assert_eq!(layer["encoding"]["kind"], kind, "layer {i}: {layer}");
    }
    assert_eq!(layers[0]["encoding"]["base"], 5000000.0);
    let printed = layers[0]["encoding"].to_string();
    let table = |encoding: &str| show(encoding, "128", "6", "1");
    assert_eq!(table(&printed), table("rope:base=5000000"));
    let text =
        String::from_utf8(posenc(&["encoding", "from-config", dir.to_str().unwrap()]).stdout)
            .unwrap();
    assert!(text.contains("36 layers, 16 heads of 128"), "{text}");
    assert!(text.contains("| 3 | `{\"kind\":\"none\"}` |"), "{text}");
    std::fs::write(dir.join("broken.json"), "{\"num_hidden_layers\": ").unwrap();
    for (path, needle) in [
        ("missing.json", "missing.json"),
        ("broken.json", "not valid JSON"),
    ] {
        let out = posenc(&["encoding", "from-config", dir.join(path).to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(needle),
            "{path}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// `show --positions` prints a kind's tables at the tokens' own positions: mrope's at
/// Qwen2-VL's (t, h, w) rows equal transformers 5.24's (the fixture of
/// `crates/posenc/tests/mrope.rs`), `--grid` lays out one image, rope takes a list of
/// positions, and what a kind cannot read is refused by name.
#[test]
fn show_prints_tables_at_given_positions_and_grids() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("crates/posenc/tests/fixtures/mrope.json")).unwrap(),
    )
    .unwrap();
    let write = |name: &str, value: &Value| {
        let path = dir.path().join(name);
        std::fs::write(&path, value.to_string()).unwrap();
        path.to_str().unwrap().to_string()
    };
    let qwen2 = &fixture["cases"][0];
    let rows = write("rows.json", &qwen2["rows"]);
    let mrope = r#"{"kind": "mrope", "rope_theta": 1000000, "mrope_section": [16, 24, 24]}"#;
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["encoding", "show", "--encoding", mrope, "--d-model", "128"]
            .map(String::from)
            .to_vec();
        a.extend(extra.iter().map(|s| s.to_string()));
        a.extend(["--format", "json"].map(String::from));
        a
    };
    let run = |extra: &[&str]| json(&args(extra).iter().map(String::as_str).collect::<Vec<_>>());
    let got = run(&["--positions", &rows]);
    for (ours, theirs) in [("cos", "cos_f64"), ("sin", "sin_f64")] {
        let a: Vec<Vec<f64>> = serde_json::from_value(got["values"][ours].clone()).unwrap();
        let b: Vec<Vec<f64>> = serde_json::from_value(qwen2[theirs].clone()).unwrap();
        assert_eq!(a.len(), b.len());
        let gap = a
            .iter()
            .flatten()
            .zip(b.iter().flatten())
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        assert!(gap < 1e-6, "{ours}: {gap}");
    }
    // An image of 2 × 3 tokens alone: time 0, row and column.
    let grid: Vec<[u32; 3]> = (0..2)
        .flat_map(|r| (0..3).map(move |c| [0, r, c]))
        .collect();
    let listed = write("grid.json", &serde_json::json!(grid));
    assert_eq!(run(&["--grid", "2,3"]), run(&["--positions", &listed]));
    // One position a token, for rope.
    let list = write("list.json", &serde_json::json!([0, 5, 9]));
    let rope = json(&[
        "encoding",
        "show",
        "--encoding",
        "rope",
        "--d-model",
        "8",
        "--positions",
        &list,
        "--format",
        "json",
    ]);
    let cos: Vec<Vec<f64>> = serde_json::from_value(rope["values"]["cos"].clone()).unwrap();
    assert!(
        (cos[1][0] - 5f64.cos()).abs() < 1e-6 && (cos[2][1] - (9.0f64 * 0.1).cos()).abs() < 1e-6
    );
    // Refused by name.
    let ragged = write("ragged.json", &serde_json::json!([[0, 1], [2]]));
    let negative = write("negative.json", &serde_json::json!([[0, -1, 0]]));
    for (extra, needle) in [
        (
            vec!["--positions", ragged.as_str()],
            "every row must be like the first",
        ),
        (vec!["--positions", negative.as_str()], "whole numbers"),
        (vec!["--grid", "0,3"], "counts from 1"),
        (vec!["--grid", "3"], "expected H,W"),
        (vec!["--grid", "100000,100000"], "too large"),
    ] {
        let out = posenc(&args(&extra).iter().map(String::as_str).collect::<Vec<_>>());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(needle),
            "{extra:?}: {stderr}"
        );
    }
    let out = posenc(&[
        "encoding",
        "show",
        "--encoding",
        "alibi",
        "--positions",
        &list,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("positions 0 … len − 1 only"), "{stderr}");
}
