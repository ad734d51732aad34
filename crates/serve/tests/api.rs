//! Every endpoint, with good and bad input. Expected values come from the papers'
//! formulas and the toy language's grammar, computed here, not from the server.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{get, message, post, scratch, server};

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn the_page_and_its_assets_are_served() {
    let s = server(&[], 2);
    let (status, page) = get(&s, "/");
    assert_eq!(status, 200);
    assert!(page.as_str().unwrap().contains("posenc explorer"));
    // Every asset the page links to is served, the icon among them.
    let html = page.as_str().unwrap();
    for linked in html.split("/assets/").skip(1) {
        let name = linked.split('"').next().unwrap();
        let response = ureq::get(&format!("{}assets/{name}", s.url())).call();
        assert!(response.is_ok(), "{name} is linked and not served");
    }
    assert!(html.contains("/assets/favicon.svg"), "no icon");
    for asset in [
        "app.js",
        "style.css",
        "favicon.svg",
        "echarts.min.js",
        "LICENSE-echarts",
    ] {
        let response = ureq::get(&format!("{}assets/{asset}", s.url()))
            .call()
            .unwrap();
        assert_eq!(response.status(), 200, "{asset}");
        assert!(response.into_string().unwrap().len() > 100, "{asset}");
    }
    let (status, body) = get(&s, "/assets/nope.js");
    assert_eq!((status, message(&body)), (404, "no asset `nope.js`"));
    let (status, _) = get(&s, "/api/nope");
    assert_eq!(status, 404);
}

#[test]
fn kinds_lists_every_registered_encoding_with_its_defaults() {
    let s = server(&[], 2);
    let (status, kinds) = get(&s, "/api/kinds");
    assert_eq!(status, 200);
    let names: Vec<&str> = kinds
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kind"].as_str().unwrap())
        .collect();
    assert_eq!(names, posenc::EncodingConfig::kinds());
    let rope = kinds
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "rope")
        .unwrap();
    assert_eq!(f(&rope["base"]), 10000.0);
}

/// Every registered kind draws at its defaults, in several heads (an encoding may turn
/// each head's keys its own way, and widen them, as PoPE does).
#[test]
fn every_kind_has_a_view() {
    for kind in posenc::EncodingConfig::kinds() {
        let request = posenc_serve::encodings::EncodingRequest {
            encoding: serde_json::json!(kind),
            d_model: 32,
            heads: 4,
            len: 12,
            grid: None,
            query: None,
        };
        let view = posenc_serve::encodings::view(&request);
        assert!(view.is_ok(), "{kind}: {:?}", view.err());
    }
}

/// Sinusoidal: the heatmap is the paper's PE(pos, i), and PE(p)·PE(p − k) = Σ_i cos(k ω_i)
/// (sin a sin b + cos a cos b = cos(a − b)), whatever p.
#[test]
fn sinusoidal_views_follow_the_papers_formula() {
    let s = server(&[], 2);
    let (d, len) = (16usize, 300usize);
    let (status, view) = post(
        &s,
        "/api/encoding",
        &json!({"encoding": "sinusoidal", "d_model": d, "len": len}).to_string(),
    );
    assert_eq!(status, 200, "{view}");
    let omega = |i: usize| 1.0 / 10000f64.powf((2 * i) as f64 / d as f64);
    let rows = view["table"]["rows"].as_array().unwrap();
    // A long table is sampled, at a round step (0, 5, 10 … here), closed by the last row.
    assert!(rows.len() <= 128 && rows.len() > 50, "{}", rows.len());
    assert_eq!((f(&rows[0]), f(&rows[1]), f(&rows[2])), (0.0, 5.0, 10.0));
    assert_eq!(f(rows.last().unwrap()), (len - 1) as f64);
    let values = &view["table"]["values"][0];
    for (r, pos) in rows.iter().enumerate() {
        let pos = f(pos);
        for c in 0..d {
            // PE(pos, 2i) = sin(pos ω_i), PE(pos, 2i + 1) = cos(pos ω_i).
            let (i, trig): (usize, fn(f64) -> f64) = match c % 2 {
                0 => (c / 2, f64::sin),
                _ => (c / 2, f64::cos),
            };
            let want = trig(pos * omega(i));
            let got = f(&values[r][c]);
            assert!(
                (got - want).abs() < 1e-4,
                "PE({pos}, {c}) = {got}, want {want}"
            );
        }
    }
    let by = view["by_distance"]["values"][0].as_array().unwrap();
    assert_eq!(by.len(), len);
    for (k, got) in by.iter().enumerate() {
        let want: f64 = (0..d / 2).map(|i| (k as f64 * omega(i)).cos()).sum();
        assert!(
            (f(got) - want).abs() < 1e-3,
            "k = {k}: {got} against {want}"
        );
    }
    // The pairs' positions are the table's rows.
    assert_eq!(view["pairs"]["x"].as_array().unwrap().len(), rows.len());
}

/// ALiBi: bias(i, j) = −m_h |i − j|, m_h = 2^(−8h/H) (Press et al. 2022, §3).
#[test]
fn alibi_views_follow_the_papers_slopes() {
    let s = server(&[], 2);
    let heads = 4;
    let (status, view) = post(
        &s,
        "/api/encoding",
        &json!({"encoding": "alibi", "d_model": 32, "heads": heads, "len": 50}).to_string(),
    );
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["pairs"], Value::Null);
    // Its title names the bias once: the encoding's formula already begins with it.
    let title = view["table"]["title"].as_str().unwrap();
    assert_eq!(title.matches("bias(query, key)").count(), 1, "{title}");
    let values = view["table"]["values"].as_array().unwrap();
    assert_eq!(values.len(), heads);
    for (h, head) in values.iter().enumerate() {
        let m = 2f64.powf(-8.0 * (h + 1) as f64 / heads as f64);
        for (i, row) in head.as_array().unwrap().iter().enumerate() {
            for (j, got) in row.as_array().unwrap().iter().enumerate() {
                let want = -m * (i as f64 - j as f64).abs();
                assert!((f(got) - want).abs() < 1e-4, "head {h} ({i}, {j})");
            }
        }
        for (k, got) in view["by_distance"]["values"][h]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            assert!((f(got) + m * k as f64).abs() < 1e-4, "head {h}, k = {k}");
        }
    }
}

/// The grid view of a kind that reads coordinates: 2-D ALiBi's is `−m_h` times the
/// Euclidean distance from the query patch (its slopes are ALiBi's, `2^(−8h/H)`); RoPE-Axial's
/// is `mean_i cos(θ_i(q) − θ_i(k))` (the mean over a head's basis of `⟨R_q e, R_k e⟩`), from
/// its own angles, cos and sin at the patches; a click's query moves it.
#[test]
fn grid_views_place_the_query_patch_and_read_the_distance_on_both_axes() {
    let s = server(&[], 2);
    let view = |body: Value| {
        let (status, view) = post(&s, "/api/encoding", &body.to_string());
        assert_eq!(status, 200, "{view}");
        view
    };
    let heads = 4;
    let alibi = view(
        json!({"encoding": "alibi-2d", "d_model": 32, "heads": heads, "len": 8,
        "grid": [5, 7], "query": [1, 5]}),
    );
    assert_eq!(f(&alibi["coords"]), 2.0);
    let grid = &alibi["grid"];
    assert_eq!(grid["grid"], json!([5, 7]));
    assert_eq!(grid["query"], json!([1, 5]));
    assert_eq!(
        alibi["layout"],
        Value::Null,
        "a layout of text and images is for three axes"
    );
    for h in 0..heads {
        let m = 2f64.powf(-8.0 * (h + 1) as f64 / heads as f64);
        for r in 0..5 {
            for c in 0..7 {
                let d = ((r as f64 - 1.0).powi(2) + (c as f64 - 5.0).powi(2)).sqrt();
                let got = f(&grid["values"][h][r][c]);
                assert!((got + m * d).abs() < 1e-4, "head {h} ({r}, {c}): {got}");
            }
        }
    }
    // RoPE-Axial, at the default grid (8 × 8) and query (its centre).
    let (d_model, axial_heads) = (32usize, 2usize);
    let rope =
        view(json!({"encoding": "rope-2d", "d_model": d_model, "heads": axial_heads, "len": 8}));
    let grid = &rope["grid"];
    assert_eq!(
        (grid["grid"].clone(), grid["query"].clone()),
        (json!([8, 8]), json!([4, 4]))
    );
    let config: posenc::EncodingConfig = "rope-2d".parse().unwrap();
    let enc = config
        .build_untrained(d_model, axial_heads, &candle_core::Device::Cpu)
        .unwrap();
    let coords = posenc::Positions::image_coords(2, [8, 8]);
    let at = posenc::Positions::Coords {
        axes: 2,
        coords: &coords,
    };
    let posenc::Form::Rotary { cos, sin } = enc.table_at(at, 64).unwrap().form else {
        panic!("rope-2d's table is its angles")
    };
    let (cos, sin): (Vec<Vec<f32>>, Vec<Vec<f32>>) =
        (cos.to_vec2().unwrap(), sin.to_vec2().unwrap());
    let q = 4 * 8 + 4;
    for k in 0..64 {
        let pairs = cos[k].len();
        let want: f64 = (0..pairs)
            .map(|i| f64::from(cos[q][i] * cos[k][i] + sin[q][i] * sin[k][i]))
            .sum::<f64>()
            / pairs as f64;
        let got = f(&grid["values"][0][k / 8][k % 8]);
        assert!((got - want).abs() < 1e-4, "patch {k}: {got} against {want}");
    }
    assert!(
        (f(&grid["values"][1][4][4]) - 1.0).abs() < 1e-5,
        "a patch with itself"
    );
    // 2-D sinusoids: one table for every head, PE(q)·PE(k), largest at the query itself.
    let sin2d = view(
        json!({"encoding": "sinusoidal-2d", "d_model": 16, "heads": 2, "len": 8,
        "grid": [4, 4], "query": [0, 3]}),
    );
    let values = sin2d["grid"]["values"].as_array().unwrap();
    assert_eq!(values.len(), 1);
    let at_query = f(&values[0][0][3]);
    assert!(
        (at_query - 8.0).abs() < 1e-4,
        "|PE|² is d / 2 = 8: {at_query}"
    );
    let cells = values[0]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap());
    assert_eq!(cells.clone().count(), 16);
    for v in cells {
        assert!(
            f(v) <= at_query + 1e-4,
            "{v} above the query's own {at_query}"
        );
    }
}

/// A kind of three coordinates also draws where Qwen2-VL's rule places text, the image and
/// text: text on one index on all axes, the image at `start + (0, row, column)`, the text
/// after it from `start + max(rows, columns)`; LieRE's rotation reads its scores from its
/// table, so its view samples positions and distances; bad grids and queries are named.
#[test]
fn three_axes_draw_their_layout_and_bad_grids_are_named() {
    let s = server(&[], 2);
    let (status, view) = post(
        &s,
        "/api/encoding",
        &json!({"encoding": "mrope", "d_model": 128, "heads": 1, "len": 8, "grid": [2, 3]})
            .to_string(),
    );
    assert_eq!(status, 200, "{view}");
    assert_eq!(f(&view["coords"]), 3.0);
    let layout = &view["layout"];
    let coords: Vec<[u32; 3]> = serde_json::from_value(layout["coords"].clone()).unwrap();
    let segment: Vec<String> = serde_json::from_value(layout["segment"].clone()).unwrap();
    let mut want: Vec<[u32; 3]> = (0..4).map(|p| [p; 3]).collect();
    for r in 0..2 {
        for c in 0..3 {
            want.push([4, 4 + r, 4 + c]);
        }
    }
    want.extend((0..4).map(|p| [7 + p; 3]));
    assert_eq!(coords, want);
    assert_eq!(segment.iter().filter(|s| *s == "image").count(), 6);
    assert_eq!(
        (segment[3].as_str(), segment[4].as_str()),
        ("text", "image")
    );
    // LieRE: its table is its scores; a patch with itself scores 1.
    let (status, view) = post(
        &s,
        "/api/encoding",
        &json!({"encoding": "liere", "d_model": 16, "heads": 2, "len": 300}).to_string(),
    );
    assert_eq!(status, 200, "{view}");
    let distances = view["by_distance"]["distances"].as_array().unwrap();
    assert_eq!(
        (f(&distances[0]), f(distances.last().unwrap())),
        (0.0, 299.0)
    );
    assert_eq!(
        view["by_distance"]["values"][0].as_array().unwrap().len(),
        distances.len()
    );
    assert!((f(&view["by_distance"]["values"][1][0]) - 1.0).abs() < 1e-5);
    assert!((f(&view["grid"]["values"][0][4][4]) - 1.0).abs() < 1e-5);
    for (body, needle) in [
        (
            json!({"encoding": "rope", "d_model": 16, "len": 8, "grid": [4, 4]}),
            "reads one position per token",
        ),
        (
            json!({"encoding": "rope-2d", "d_model": 16, "len": 8, "grid": [0, 4]}),
            "a grid of 1 to 32",
        ),
        (
            json!({"encoding": "rope-2d", "d_model": 16, "len": 8, "grid": [33, 4]}),
            "a grid of 1 to 32",
        ),
        (
            json!({"encoding": "rope-2d", "d_model": 16, "len": 8, "grid": [4, 4], "query": [4, 0]}),
            "outside the 4 × 4 grid",
        ),
        (
            json!({"encoding": "rope-2d", "d_model": 16, "len": 8, "grid": [4]}),
            "grid",
        ),
    ] {
        let (status, answer) = post(&s, "/api/encoding", &body.to_string());
        assert_eq!(status, 400, "{body}: {answer}");
        let e = answer["error"].as_str().unwrap_or_default();
        assert!(e.contains(needle), "{body}: {e}");
    }
}

/// RoPE: the heatmap is cos(pos θ_i), θ_i = base^(−2i/d); a setting changes it; YaRN
/// slows the slowest pairs (Peng et al. 2023) and scales by its attention factor.
#[test]
fn rope_views_turn_by_the_papers_angles_and_yarn_stretches_them() {
    let s = server(&[], 2);
    let view = |encoding: Value| {
        let (status, view) = post(
            &s,
            "/api/encoding",
            &json!({"encoding": encoding, "d_model": 64, "heads": 4, "len": 64}).to_string(),
        );
        assert_eq!(status, 200, "{view}");
        view
    };
    let head_dim = 16;
    for base in [10000f64, 100.0] {
        let v = view(json!({"kind": "rope", "base": base}));
        let table = &v["table"]["values"][0];
        for pos in 0..64 {
            for i in 0..head_dim / 2 {
                let theta = base.powf(-((2 * i) as f64) / head_dim as f64);
                let want = (pos as f64 * theta).cos();
                let got = f(&table[pos][i]);
                assert!(
                    (got - want).abs() < 1e-4,
                    "base {base}: cos({pos} θ_{i}) = {got}"
                );
            }
        }
    }
    // By distance: the expectation over random q = k, (2/d) Σ_i cos(k θ_i) for d/2 pairs
    // (RoFormer's long-term decay), 1 at distance 0.
    let v = view(json!({"kind": "rope"}));
    for (k, got) in v["by_distance"]["values"][0]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let want: f64 = (0..head_dim / 2)
            .map(|i| (k as f64 * 10000f64.powf(-((2 * i) as f64) / head_dim as f64)).cos())
            .sum::<f64>()
            * 2.0
            / head_dim as f64;
        assert!(
            (f(got) - want).abs() < 1e-4,
            "k = {k}: {got} against {want}"
        );
    }
    let yarn = view(json!({"kind": "rope", "scaling":
        {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 16}}));
    let plain = view(json!("rope"));
    let radius = |v: &Value, row: usize, pair: usize| {
        f(&v["pairs"]["x"][row][pair]).hypot(f(&v["pairs"]["y"][row][pair]))
    };
    let angle = |v: &Value, row: usize, pair: usize| {
        f(&v["pairs"]["y"][row][pair]).atan2(f(&v["pairs"]["x"][row][pair]))
    };
    let slowest = head_dim / 2 - 1;
    // YaRN's attention factor, 0.1 ln(s) + 1, scales the table (transformers' default).
    let mscale = 0.1 * 4f64.ln() + 1.0;
    assert!((radius(&yarn, 1, 0) - mscale).abs() < 1e-4);
    assert!((radius(&plain, 1, 0) - 1.0).abs() < 1e-5);
    // The slowest pair turns 4 times slower; the fastest as fast.
    assert!((angle(&yarn, 1, slowest) * 4.0 - angle(&plain, 1, slowest)).abs() < 1e-5);
    assert!((angle(&yarn, 1, 0) - angle(&plain, 1, 0)).abs() < 1e-5);
}

#[test]
fn a_window_shuts_out_far_keys_as_null_not_nan() {
    let s = server(&[], 2);
    let (status, view) = post(
        &s,
        "/api/encoding",
        &json!({"encoding": "window:size=4", "d_model": 8, "len": 10}).to_string(),
    );
    assert_eq!(status, 200, "{view}");
    let by = view["by_distance"]["values"][0].as_array().unwrap();
    assert!(by[..4].iter().all(|v| f(v) == 0.0), "{by:?}");
    assert!(by[4..].iter().all(Value::is_null), "{by:?}");
}

#[test]
fn bad_encoding_requests_get_the_command_lines_named_errors() {
    let s = server(&[], 2);
    let cases = [
        (
            r#"{"encoding": "rop", "d_model": 8, "len": 4}"#,
            "did you mean `rope`",
        ),
        (
            r#"{"encoding": {"kind": "rope", "base": "x"}, "d_model": 8, "len": 4}"#,
            "`rope`: invalid type",
        ),
        (
            r#"{"encoding": "rope:layout=sideways", "d_model": 8, "len": 4}"#,
            "unknown variant `sideways`",
        ),
        (
            r#"{"encoding": "rope", "d_model": 1000000000, "len": 4}"#,
            "d_model = 1000000000 is too large",
        ),
        (
            r#"{"encoding": "rope", "d_model": 8, "len": 1000000000000}"#,
            "len = 1000000000000 is too large",
        ),
        (r#"{"encoding": "rope", "d_model": 0, "len": 4}"#, "d_model"),
        (
            r#"{"encoding": "rope", "d_model": 8, "heads": 3, "len": 4}"#,
            "not divisible by heads = 3",
        ),
        (
            r#"{"encoding": "learned", "d_model": 8, "len": 600}"#,
            "past the end of the `learned` encoding",
        ),
        (
            r#"{"encoding": 7, "d_model": 8, "len": 4}"#,
            "an encoding is a kind",
        ),
        (
            r#"{"encoding": "rope", "d_model": 8, "len": 4, "colour": 1}"#,
            "unknown field `colour`",
        ),
        (r#"{"encoding": "rope", "d_model": 8"#, "Failed to parse"),
    ];
    for (body, expected) in cases {
        let (status, answer) = post(&s, "/api/encoding", body);
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(message(&answer).contains(expected), "{body}: {answer}");
    }
    let huge = format!(
        r#"{{"encoding": "{}", "d_model": 8, "len": 4}}"#,
        "a".repeat(70_000)
    );
    let (status, answer) = post(&s, "/api/encoding", &huge);
    assert_eq!(status, 413, "{answer}");
    assert!(message(&answer).contains("65536 bytes"));
}

#[test]
fn translation_gives_the_toy_languages_sentence_and_every_heads_weights() {
    let s = server(&[], 2);
    let (status, answer) = post(
        &s,
        "/api/translate",
        r#"{"text": "the dog chases the cat"}"#,
    );
    assert_eq!(status, 200, "{answer}");
    // Subject ga, object o, verb last (../shared/toy-language.md).
    assert_eq!(answer["translation"], "inu ga neko o oikakeru");
    let a = &answer["attention"];
    let source = a["source"].as_array().unwrap().len();
    for part in ["encoder", "cross"] {
        for layer in a[part].as_array().unwrap() {
            for head in layer.as_array().unwrap() {
                for row in head.as_array().unwrap() {
                    let row = row.as_array().unwrap();
                    assert_eq!(row.len(), source);
                    let sum: f64 = row.iter().map(f).sum();
                    assert!((sum - 1.0).abs() < 1e-4, "{part}: a row sums to {sum}");
                }
            }
        }
    }
    for (body, expected) in [
        (
            r#"{"text": "the zebra chases the cat"}"#,
            "unknown word `zebra`",
        ),
        (r#"{"text": "  "}"#, "type an English sentence"),
        (r#"{"words": "x"}"#, "unknown field `words`"),
    ] {
        let (status, answer) = post(&s, "/api/translate", body);
        assert_eq!(status, 400, "{body}");
        assert!(message(&answer).contains(expected), "{answer}");
    }
    let long = json!({"text": "the dog ".repeat(100)}).to_string();
    let (status, answer) = post(&s, "/api/translate", &long);
    assert_eq!(
        (status, message(&answer)),
        (400, "the sentence is 800 characters; the most is 500")
    );
}

/// A generation's events, read until `stop` says so or the stream ends.
fn events(
    response: ureq::Response,
    mut stop: impl FnMut(&str, &Value) -> bool,
) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut name = String::new();
    for line in BufReader::new(response.into_reader()).lines() {
        let line = line.unwrap();
        if let Some(event) = line.strip_prefix("event: ") {
            name = event.to_string();
        } else if let Some(data) = line.strip_prefix("data: ") {
            let value: Value = serde_json::from_str(data).unwrap();
            let done = stop(&name, &value);
            out.push((name.clone(), value));
            if done || name == "done" || name == "error" {
                break;
            }
        }
    }
    out
}

fn generate_url(s: &posenc_serve::Server, prompt: &str, max_tokens: usize) -> String {
    format!(
        "{}api/generate?model=shakespeare-alibi&prompt={}&max_tokens={max_tokens}",
        s.url(),
        prompt.replace(' ', "%20").replace('\n', "%0A")
    )
}

/// The stream carries what the library's own greedy generation gives, token by token, with
/// each token's attention row over every position before it.
#[test]
fn generation_streams_the_librarys_tokens_with_their_attention() {
    let s = server(&[], 2);
    let prompt = "ROMEO:\nBut soft";
    let n = 12;
    let response = ureq::get(&generate_url(&s, prompt, n)).call().unwrap();
    assert_eq!(response.content_type(), "text/event-stream");
    let got = events(response, |_, _| false);
    let lm = posenc_lm::causal::CausalLm::load(
        posenc_lm::run::shipped_model().to_str().unwrap(),
        posenc_llama::Precision::F32,
        &candle_core::Device::Cpu,
    )
    .unwrap();
    let ids = lm.encode_prompt(prompt).unwrap();
    let want =
        posenc_lm::sample::generate(&lm.model, &ids, n, posenc_lm::sample::Sampling::greedy())
            .unwrap();
    assert_eq!(got[0].0, "prompt");
    assert_eq!(got[0].1["tokens"].as_array().unwrap().len(), ids.len());
    let tokens: Vec<&(String, Value)> = got.iter().filter(|(e, _)| e == "token").collect();
    assert_eq!(tokens.len(), n);
    for (i, (_, token)) in tokens.iter().enumerate() {
        assert_eq!(token["text"], lm.decode(&want[i..=i]).unwrap(), "token {i}");
        for layer in token["attention"].as_array().unwrap() {
            for row in layer.as_array().unwrap() {
                let row = row.as_array().unwrap();
                assert_eq!(
                    row.len(),
                    ids.len() + i,
                    "token {i} sees every position before it"
                );
                let sum: f64 = row.iter().map(f).sum();
                assert!((sum - 1.0).abs() < 1e-4);
            }
        }
    }
    let (last, done) = got.last().unwrap();
    assert_eq!(last, "done");
    assert_eq!(done["tokens"], n);
    assert_eq!(done["stop"], "max_tokens");
    assert_eq!(done["settings"]["max_tokens"], n);
    assert_eq!(done["settings"]["attention_every"], 1);

    // Attention every third token, or none: the same tokens, fewer rows.
    for (every, with) in [(3, vec![0, 3, 6, 9]), (0, vec![])] {
        let url = format!("{}&attention_every={every}", generate_url(&s, prompt, n));
        let got = events(ureq::get(&url).call().unwrap(), |_, _| false);
        let tokens: Vec<&Value> = got
            .iter()
            .filter(|(e, _)| e == "token")
            .map(|(_, t)| t)
            .collect();
        let texts: Vec<&Value> = tokens.iter().map(|t| &t["text"]).collect();
        let want_texts: Vec<Value> = (0..n)
            .map(|i| lm.decode(&want[i..=i]).unwrap().into())
            .collect();
        assert_eq!(
            texts,
            want_texts.iter().collect::<Vec<_>>(),
            "every {every}"
        );
        let drawn: Vec<usize> = (0..n)
            .filter(|&i| !tokens[i]["attention"].is_null())
            .collect();
        assert_eq!(drawn, with, "every {every}");
    }
}

#[test]
fn bad_generation_requests_are_refused_before_streaming() {
    let s = server(&[], 2);
    let url = |q: &str| format!("/api/generate?{q}");
    for (query, status, expected) in [
        ("model=nope&prompt=x", 404, "no model `nope`"),
        (
            "model=shakespeare-alibi&prompt=%E2%82%AC",
            400,
            "no token for \"€\"",
        ),
        (
            "model=shakespeare-alibi&prompt=",
            400,
            "the prompt is empty",
        ),
        (
            "model=shakespeare-alibi&prompt=x&max_tokens=100000",
            400,
            "max_tokens must be 1 to 1000",
        ),
        (
            "model=shakespeare-alibi&prompt=x&temperature=-1",
            400,
            "temperature",
        ),
        (
            "model=shakespeare-alibi&prompt=x&bogus=1",
            400,
            "unknown field `bogus`",
        ),
        ("prompt=x", 400, "missing field `model`"),
    ] {
        let (got, answer) = get(&s, &url(query));
        assert_eq!(got, status, "{query}: {answer}");
        assert!(message(&answer).contains(expected), "{query}: {answer}");
    }
}

/// A generation whose `done` has been read has freed the server: the next one, asked at
/// once, streams (the permit is given back before the last event, not after it).
#[test]
fn a_finished_generation_leaves_the_server_free_at_once() {
    let s = server(&[], 2);
    for i in 0..40 {
        let response = ureq::get(&generate_url(&s, "x", 1))
            .call()
            .unwrap_or_else(|e| panic!("generation {i} right after a finished one: {e}"));
        let got = events(response, |_, _| false);
        assert_eq!(got.last().unwrap().0, "done", "generation {i}");
    }
}

/// One generation at a time: a second is told 503 to wait, and a client that goes away
/// mid-stream frees the server for the next.
#[test]
fn a_second_generation_waits_and_a_closed_stream_frees_the_server() {
    let s = server(&[], 2);
    let first = ureq::get(&generate_url(&s, "ROMEO:", 1000)).call().unwrap();
    let mut reader = BufReader::new(first.into_reader());
    let mut line = String::new();
    // The first token has been generated: the generation runs.
    while !line.starts_with("event: token") {
        line.clear();
        reader.read_line(&mut line).unwrap();
    }
    let (status, answer) = get(&s, "/api/generate?model=shakespeare-alibi&prompt=x");
    assert_eq!(status, 503, "{answer}");
    assert!(message(&answer).contains("a generation is running"));
    drop(reader);
    let start = Instant::now();
    loop {
        match ureq::get(&generate_url(&s, "x", 2)).call() {
            Ok(response) => {
                let got = events(response, |_, _| false);
                assert_eq!(got.last().unwrap().0, "done");
                break;
            }
            Err(ureq::Error::Status(503, _)) if start.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("the closed stream did not free the server: {e}"),
        }
    }
}

/// Generation offers language models only: the shipped one first (the page's default),
/// SmolLM2 when it is fetched, then the runs of `lm train` under `--runs`, never a
/// translation run beside them.
#[test]
fn models_lists_the_language_models_only_and_the_translator() {
    let runs = scratch("serve-models");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (from, to) in [
        ("models/shakespeare-alibi", "mine"),
        ("models/kotoba", "toy"),
    ] {
        std::fs::create_dir(runs.join(to)).unwrap();
        for file in std::fs::read_dir(root.join(from)).unwrap() {
            let file = file.unwrap().path();
            std::fs::copy(&file, runs.join(to).join(file.file_name().unwrap())).unwrap();
        }
    }
    let s = posenc_serve::Server::start(posenc_serve::Options {
        port: 0,
        runs: vec![runs.clone()],
        records: Vec::new(),
        workers: 2,
        ..posenc_serve::Options::default()
    })
    .unwrap();
    let (status, models) = get(&s, "/api/models");
    assert_eq!(status, 200);
    assert_eq!(models["translation_error"], Value::Null);
    let names: Vec<&str> = models["lms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names[0], "shakespeare-alibi", "{names:?}");
    assert!(
        names.contains(&runs.join("mine").to_str().unwrap()),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.ends_with("toy")),
        "a translation run: {names:?}"
    );
    // Translation offers the shipped model first, and a trained run under --runs, which
    // translates (a copy of the shipped weights: the same sentence).
    let toy = runs.join("toy").display().to_string();
    let translators: Vec<&str> = models["translators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(translators, ["kotoba", toy.as_str()]);
    let ask = |model: Option<&str>| {
        let body = serde_json::json!({"text": "the dog sees the cat", "model": model});
        post(&s, "/api/translate", &body.to_string())
    };
    let (status, shipped) = ask(None);
    assert_eq!(status, 200, "{shipped}");
    let (status, trained) = ask(Some(&toy));
    assert_eq!(
        (status, &trained["translation"]),
        (200, &shipped["translation"])
    );
    let (status, body) = ask(Some("nope"));
    assert_eq!(status, 404, "{body}");
    assert!(message(&body).contains("no translator `nope`"), "{body}");
    let fetched = posenc_llama::model::fetched_smollm2().is_ok();
    assert_eq!(names.contains(&"smollm2"), fetched, "{names:?}");
    if fetched {
        let url = "api/generate?model=smollm2&prompt=Hi&max_tokens=1";
        let o = ureq::get(&format!("{}{url}", s.url())).call();
        assert!(o.is_ok(), "{:?}", o.err());
    }
}

/// Records: found, read, summarised with the mean and sample standard deviation, and never
/// read from outside the directories given.
#[test]
fn records_are_listed_summarised_and_confined_to_their_directories() {
    let dir = scratch("serve-records");
    let study = dir.join("study");
    std::fs::create_dir_all(study.join("deep")).unwrap();
    let records = json!({"records": [
        {"label": "rope", "seed": 1, "length": 8, "accuracy": 1.0, "correct": true},
        {"label": "rope", "seed": 2, "length": 8, "accuracy": 0.5, "correct": false},
        {"label": "rope", "seed": 1, "length": 16, "accuracy": 0.25, "correct": false},
        {"label": "alibi", "seed": 1, "length": 8, "accuracy": 0.75, "correct": true},
    ]});
    std::fs::write(study.join("results.json"), records.to_string()).unwrap();
    std::fs::write(
        study.join("deep/loss.csv"),
        "model,position,loss\na,0,2.5\na,1,\n",
    )
    .unwrap();
    std::fs::write(study.join("config.json"), r#"{"records": 3}"#).unwrap();
    std::fs::write(study.join("broken.json"), "[{").unwrap();
    let outside = scratch("serve-outside");
    std::fs::write(outside.join("secret.csv"), "a\n1\n").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(outside.join("secret.csv"), study.join("link.csv")).unwrap();
    let s = server(std::slice::from_ref(&study), 2);

    let (status, listed) = get(&s, "/api/records");
    assert_eq!(status, 200);
    let paths: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "study/broken.json",
            "study/deep/loss.csv",
            "study/results.json"
        ]
    );

    let (status, columns) = get(&s, "/api/columns?path=study/results.json");
    assert_eq!((status, f(&columns["rows"])), (200, 4.0));
    let (status, columns) = get(&s, "/api/columns?path=study/deep/loss.csv");
    assert_eq!(status, 200);
    let column = |name: &str| {
        columns["columns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
    };
    assert_eq!(
        column("loss").unwrap()["numeric"],
        true,
        "an empty cell is null"
    );
    assert_eq!(column("model").unwrap()["numeric"], false);

    let (status, series) = post(
        &s,
        "/api/aggregate",
        r#"{"path": "study/results.json", "y": "accuracy", "x": "length"}"#,
    );
    assert_eq!(status, 200, "{series}");
    let rope = &series[0];
    assert_eq!(rope["name"], "rope");
    let at8 = &rope["points"][0];
    assert_eq!(f(&at8["x"]), 8.0);
    assert!((f(&at8["mean"]) - 0.75).abs() < 1e-12);
    // The sample standard deviation of 1 and 0.5.
    assert!((f(&at8["sd"]) - (0.125f64).sqrt()).abs() < 1e-12);
    assert_eq!(f(&rope["points"][1]["x"]), 16.0);
    assert_eq!(series[1]["name"], "alibi");
    // The static figures' colours: a kind's own.
    let c = posenc_plot::chart::label_colour("rope");
    assert_eq!(
        rope["colour"],
        format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
    );
    // A boolean averages to the fraction; a filter keeps what matches.
    let (_, found) = post(
        &s,
        "/api/aggregate",
        r#"{"path": "study/results.json", "y": "correct", "group": "length", "filter": {"label": "rope"}}"#,
    );
    assert_eq!(found[0]["name"], "8");
    assert_eq!(f(&found[0]["points"][0]["mean"]), 0.5);

    for (query, status, expected) in [
        ("study/../../etc/passwd", 403, "`..`"),
        ("/etc/passwd", 403, "absolute paths"),
        (
            "../serve-outside/secret.csv",
            403,
            "absolute paths and `..`",
        ),
        ("study/link.csv", 403, "leads outside"),
        ("elsewhere/results.json", 404, "no directory `elsewhere`"),
        ("study/missing.json", 404, "missing.json"),
        ("study/broken.json", 400, "not valid JSON"),
        ("study/config.json", 400, "holds no list of records"),
    ] {
        let (got, answer) = get(&s, &format!("/api/columns?path={query}"));
        assert_eq!(got, status, "{query}: {answer}");
        assert!(message(&answer).contains(expected), "{query}: {answer}");
    }
    for (body, expected) in [
        (
            r#"{"path": "study/results.json", "y": "nope"}"#,
            "no column `nope`",
        ),
        (
            r#"{"path": "study/results.json", "y": "label"}"#,
            "not a column of numbers",
        ),
        (r#"{"path": "study/../x", "y": "a"}"#, "`..`"),
    ] {
        let (status, answer) = post(&s, "/api/aggregate", body);
        assert!(status == 400 || status == 403, "{body}: {status}");
        assert!(message(&answer).contains(expected), "{body}: {answer}");
    }
}

/// 32 clients at once for two seconds: every answer is a view or a 503, and the server
/// answers after. (The 20-second run with its peak memory is `examples/serve_load.rs`.)
#[test]
fn many_clients_at_once_get_views_or_a_503() {
    let s = server(&[], 2);
    let url = format!("{}api/encoding", s.url());
    let body = json!({"encoding": "rope", "d_model": 64, "heads": 4, "len": 512}).to_string();
    let deadline = Instant::now() + Duration::from_secs(2);
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..32)
            .map(|_| {
                scope.spawn(|| {
                    let mut seen = Vec::new();
                    while Instant::now() < deadline {
                        let status = match ureq::post(&url)
                            .set("content-type", "application/json")
                            .send_string(&body)
                        {
                            Ok(r) => r.status(),
                            Err(ureq::Error::Status(code, _)) => code,
                            Err(e) => panic!("transport error: {e}"),
                        };
                        seen.push(status);
                    }
                    seen
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    assert!(
        statuses.iter().all(|&c| c == 200 || c == 503),
        "{statuses:?}"
    );
    assert!(statuses.contains(&200));
    assert_eq!(get(&s, "/api/kinds").0, 200);
}
