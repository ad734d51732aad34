//! `posenc generate` and `posenc convert` on SmolLM2-135M-Instruct (fetched by
//! `scripts/fetch_smollm2.sh`): the chat answer is transformers' greedy answer, the
//! converted directory gives it too, and bad input is named.

use crate::common;

use common::{posenc, text, with_stdin};

/// transformers' greedy continuation of the fixture's prompt `name`, up to its
/// end-of-sequence token, as text; and the prompt.
fn reference_continuation(name: &str) -> (String, String) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crates/llama/tests/fixtures/smollm2.json"
    );
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let prompts = fixture["prompts"].as_array().unwrap();
    let prompt = prompts.iter().find(|p| p["name"] == name).unwrap();
    let greedy: Vec<u32> = serde_json::from_value(prompt["greedy"].clone()).unwrap();
    let llama = posenc_llama::Llama::load(
        "smollm2",
        posenc_llama::Precision::Quantized,
        &candle_core::Device::Cpu,
    )
    .unwrap();
    let eos = llama.config.eos_token_id.unwrap();
    let answer: Vec<u32> = greedy.into_iter().take_while(|&t| t != eos).collect();
    let text = prompt["text"].as_str().unwrap().to_string();
    (llama.decode(&answer).unwrap(), text)
}

/// transformers' greedy answer to the chat prompt.
fn reference_answer() -> String {
    reference_continuation("chat").0
}

/// Byte-level tokens can end inside a character (the reference's continuation of the
/// non-ASCII prompt has such tokens): streamed text holds them back until the character is
/// whole, so what is printed is the whole continuation, never a replacement character.
/// The prompt read three tokens a pass gives the same text.
#[test]
fn streamed_text_is_the_whole_continuation_across_split_characters() {
    let (continuation, prompt) = reference_continuation("non_ascii");
    for chunk in ["512", "3"] {
        let run = posenc()
            .args([
                "generate",
                "--f32",
                "--temperature",
                "0",
                "--max-tokens",
                "32",
            ])
            .args(["--prompt-chunk", chunk])
            .arg(&prompt)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&run);
        assert!(run.status.success(), "{stderr}");
        let whole = continuation.trim_end_matches('\u{FFFD}');
        assert_eq!(stdout, format!("{prompt}{whole}\n"), "chunks of {chunk}");
        assert!(!stdout.contains('\u{FFFD}'), "{stdout}");
    }
}

const QUESTION: &str = "What is the capital of France?";

#[test]
fn chat_answers_as_transformers_and_the_converted_directory_too() {
    let expected = format!("{}\n", reference_answer());
    let run = posenc()
        .args([
            "generate",
            "--f32",
            "--chat",
            "--temperature",
            "0",
            QUESTION,
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&run);
    assert!(run.status.success(), "{stderr}");
    assert_eq!(stdout, expected);

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("smollm2-hf");
    let converted = posenc()
        .args(["convert", "--model", "smollm2", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(converted.status.success(), "{}", text(&converted).1);
    let run = posenc()
        .args(["generate", "--chat", "--temperature", "0", "--model"])
        .arg(&out)
        .arg(QUESTION)
        .output()
        .unwrap();
    assert_eq!(text(&run).0, expected, "{}", text(&run).1);
    // Converting again into the same directory is refused; the model there stays.
    let before = std::fs::metadata(out.join("model.safetensors"))
        .unwrap()
        .modified()
        .unwrap();
    let again = posenc()
        .args(["convert", "--model", "smollm2", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(
        text(&again).1.contains("already exists"),
        "{}",
        text(&again).1
    );
    let after = std::fs::metadata(out.join("model.safetensors"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(before, after);
}

#[test]
fn a_prompt_from_standard_input_is_continued() {
    let run = with_stdin(
        &["generate", "--max-tokens", "4", "--seed", "3"],
        "Once upon a time",
    );
    let (stdout, stderr) = text(&run);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stdout.starts_with("Once upon a time") && stdout.len() > "Once upon a time\n".len(),
        "{stdout}"
    );
}

#[test]
fn bad_input_is_named() {
    // A generation whose key/value cache would not fit is refused before any forward,
    // naming its size (SmolLM2 holds 22.5 KiB a position in its f16 cache: 600 000
    // positions are 13 GiB; 45 KiB in f32).
    for (args, expected) in [
        (
            vec!["generate", "--max-tokens", "600000", "hi"],
            "would take 12.9 GiB",
        ),
        (
            vec![
                "generate",
                "--kv-cache",
                "f32",
                "--max-tokens",
                "300000",
                "hi",
            ],
            "would take 12.9 GiB",
        ),
        (
            vec!["generate", "--model", "no/such/model", "hi"],
            "no/such/model",
        ),
        (vec!["generate", "--top-p", "0", "hi"], "top-p"),
        (
            vec!["generate", "--prompt-chunk", "0", "hi"],
            "prompt chunk",
        ),
        (vec!["generate", ""], "empty"),
        (
            vec!["convert", "--model", "no/such.gguf", "--out", "/tmp/x"],
            "no/such.gguf",
        ),
    ] {
        let run = posenc().args(&args).output().unwrap();
        let (stdout, stderr) = text(&run);
        assert!(!run.status.success(), "{args:?}");
        assert!(stdout.is_empty(), "{args:?} printed {stdout}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// `posenc lm …` takes the pretrained model as it takes ours: `lm generate` is `generate`
/// spelled with its family, and gives the same greedy text.
#[test]
fn lm_generate_is_generate_on_a_pretrained_model() {
    let run = |args: &[&str]| {
        let o = posenc()
            .args(args)
            .args([
                "--temperature",
                "0",
                "--max-tokens",
                "12",
                "The capital of France",
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o).1);
        text(&o).0
    };
    let plain = run(&["generate"]);
    assert_eq!(run(&["lm", "generate", "--model", "smollm2"]), plain);
    assert!(
        plain.starts_with("The capital of France") && plain.len() > 24,
        "{plain}"
    );
}

/// SmolLM2 finds a key hidden in 1 000 tokens of filler at every depth (transformers' own
/// greedy answer to a 4 000-token prompt of the same kind is in the SmolLM2 fixture): the
/// records are tidy rows, one per trial, and the heatmap is drawn.
#[test]
fn smollm2_finds_the_passkey_inside_its_window() {
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("passkey.png");
    let o = posenc()
        .args([
            "lm",
            "passkey",
            "--model",
            "smollm2",
            "--lengths",
            "1000",
            "--depths",
            "0.1,0.5,0.9",
            "--format",
            "json",
            "--plot",
        ])
        .arg(&plot)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert_eq!(r["model"], "smollm2");
        assert!(r["tokens"].as_u64().unwrap() <= 1000, "{r}");
        let (key, answer) = (r["key"].as_str().unwrap(), r["answer"].as_str().unwrap());
        assert!(answer.trim_start().starts_with(key), "{r}");
        assert_eq!(r["correct"], true, "{r}");
    }
    assert!(std::fs::read(&plot).unwrap().starts_with(b"\x89PNG"));
}

/// `lm eval` on the pretrained model, through the chunked cache (windows past 512 tokens):
/// English prose is predictable to it (a broken cache or rotation gives a perplexity in
/// the thousands), and `--rope-scaling` changes the scores.
#[test]
fn lm_eval_measures_a_pretrained_model_past_one_chunk() {
    let eval = |extra: &[&str]| eval_prose(700, extra)["perplexity"].as_f64().unwrap();
    let plain = eval(&[]);
    assert!(plain > 1.0 && plain < 20.0, "{plain}");
    let stretched = eval(&["--rope-scaling", r#"{"rope_type": "linear", "factor": 4}"#]);
    assert!(
        stretched.is_finite() && (stretched - plain).abs() > 1e-3,
        "{stretched}"
    );
}

/// `lm eval --format json`'s row for SmolLM2 on one window of `len` tokens of the
/// fixture's long prose, with the `extra` flags.
fn eval_prose(len: usize, extra: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("prose.txt");
    let (_, prose) = reference_continuation("long");
    std::fs::write(&path, prose).unwrap();
    let o = posenc()
        .args([
            "lm",
            "eval",
            "--model",
            "smollm2",
            "--lengths",
            &len.to_string(),
        ])
        .args(["--windows", "1", "--format", "json", "--text"])
        .arg(&path)
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text(&o).0).unwrap();
    rows[0].clone()
}

/// `lm eval --self-extend` on the pretrained model: within the neighbour window every
/// token reads as it does without it; past it the scores change, and the records say how
/// the model was read.
#[test]
fn self_extend_reads_the_window_as_it_was_and_regroups_past_it() {
    let eval = |extra: &[&str]| eval_prose(400, extra);
    let plain = eval(&[]);
    let extended = eval(&["--self-extend", r#"{"group": 4, "window": 128}"#]);
    assert_eq!(extended["self_extend"]["group"], 4, "{extended}");
    assert!(plain.get("self_extend").is_none(), "{plain}");
    let at = |r: &serde_json::Value, i: usize| r["by_position"][i].as_f64().unwrap();
    for i in [0, 64, 127] {
        assert!(
            (at(&plain, i) - at(&extended, i)).abs() < 1e-4,
            "position {i}"
        );
    }
    let past = (128..400).map(|i| (at(&plain, i) - at(&extended, i)).abs());
    assert!(past.fold(0.0, f64::max) > 1e-3);
    let ppl = extended["perplexity"].as_f64().unwrap();
    assert!(ppl > 1.0 && ppl < 40.0, "{ppl}");
}

/// `lm eval --kv-cache q8_0|q4_0` on the pretrained model, 700 tokens read through the
/// cache in two chunks: q8_0 moves the perplexity from the f16 cache's by less than a
/// percent; q4_0 moves it further (SmolLM2's keys lose much at 4 bits), though less than
/// double; turned first by a Walsh–Hadamard matrix, as llama.cpp keeps them, 4-bit
/// blocks move it less than plain ones; the records say which cache was read.
#[test]
fn a_quantized_cache_reads_close_to_the_f16_one() {
    let ppl = |r: &serde_json::Value| r["perplexity"].as_f64().unwrap();
    let f16 = eval_prose(700, &["--kv-cache", "f16"]);
    let q8 = eval_prose(700, &["--kv-cache", "q8_0"]);
    let q4 = eval_prose(700, &["--kv-cache", "q4_0"]);
    let q4h = eval_prose(700, &["--kv-cache", "q4_0-hadamard"]);
    assert_eq!(q8["kv_cache"], "q8_0", "{q8}");
    assert_eq!(q4["kv_cache"], "q4_0", "{q4}");
    assert_eq!(q4h["kv_cache"], "q4_0-hadamard", "{q4h}");
    let change = |r: &serde_json::Value| (ppl(r) / ppl(&f16) - 1.0).abs();
    assert!(
        change(&q8) > 0.0 && change(&q8) < 0.01,
        "q8_0: {} against {}",
        ppl(&q8),
        ppl(&f16)
    );
    assert!(
        change(&q4) > change(&q8) && ppl(&q4) < 2.0 * ppl(&f16),
        "q4_0: {} (q8_0 {}, f16 {})",
        ppl(&q4),
        ppl(&q8),
        ppl(&f16)
    );
    assert!(
        change(&q4h) > 0.0 && change(&q4h) < change(&q4),
        "q4_0-hadamard: {} (q4_0 {}, f16 {})",
        ppl(&q4h),
        ppl(&q4),
        ppl(&f16)
    );
}

/// Greedy generation through a Q8_0 cache, whose decode steps read the blocks in place,
/// begins as through the f16 one: the first sentence is the same. (A decode step's
/// values are a view into the projection's output; quantizing the buffer's start instead
/// gave "Paris- wisersrr…".)
#[test]
fn greedy_text_through_a_q8_0_cache_begins_as_through_f16() {
    let run = |cache: &str| {
        let o = posenc()
            .args(["generate", "--kv-cache", cache, "--temperature", "0"])
            .args(["--max-tokens", "12", "The capital of France is"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{cache}: {}", text(&o).1);
        text(&o).0
    };
    let (f16, q8) = (run("f16"), run("q8_0"));
    let sentence = |t: &str| t.split_inclusive('.').next().unwrap_or("").to_string();
    assert!(
        sentence(&f16).len() > "The capital of France is".len(),
        "{f16}"
    );
    assert_eq!(sentence(&q8), sentence(&f16), "q8_0: {q8:?}, f16: {f16:?}");
}

/// `posenc bench generate` without llama.cpp: our figures alone, in the table's rows, and
/// bad settings refused by name before anything is loaded.
#[test]
fn bench_generate_reports_our_figures_and_names_bad_settings() {
    let run = posenc()
        .args(["bench", "generate", "--no-llama-cpp", "--rounds", "1"])
        .args(["--prompts", "40,33", "--decode", "3", "--depths", "0,20"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&run);
    assert!(run.status.success(), "{stderr}");
    for row in [
        "| prefill, 40-token prompt | ",
        "| prefill, 33-token prompt | ",
        "| decode, 3 tokens | ",
        "| decode, 3 tokens after 20 cached | ",
        "| time to first token (whole process) | ",
        "| peak resident memory | ",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("no row `{row}` in:\n{stdout}"));
        // Ours is a positive figure; llama.cpp's cells are empty.
        let ours: f64 = line[row.len()..]
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no figure in `{line}`"));
        assert!(ours > 0.0, "{line}");
        assert!(line.contains("| – |"), "{line}");
    }
    for (args, named) in [
        (vec!["--rounds", "0"], "rounds"),
        (vec!["--decode", "0"], "decode tokens"),
        (vec!["--prompts", "0"], "prompt length"),
        (vec!["--depths", "40000"], "depth"),
        (
            vec!["--model", "/nonexistent/model.gguf"],
            "/nonexistent/model.gguf",
        ),
    ] {
        let run = posenc()
            .args(["bench", "generate", "--no-llama-cpp"])
            .args(&args)
            .output()
            .unwrap();
        let (_, stderr) = text(&run);
        assert!(!run.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
}

/// `generate --chat --interactive` answers a message a line, each answer given the whole
/// conversation: the second question ("And of Italy?") only makes sense after the first.
/// `/exit` ends it; a lone `--interactive` without `--chat` is refused.
#[test]
fn a_chat_goes_on_turn_by_turn() {
    let args = [
        "generate",
        "--chat",
        "--interactive",
        "--f32",
        "--temperature",
        "0",
    ];
    let args = [&args[..], &["--max-tokens", "12"]].concat();
    let o = with_stdin(
        &args,
        "What is the capital of France?\n\nAnd of Italy?\n/exit\nignored\n",
    );
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let answers: Vec<&str> = stdout.lines().collect();
    assert_eq!(answers.len(), 2, "{stdout}");
    assert!(answers[0].contains("Paris"), "{stdout}");
    assert!(answers[1].contains("Rome"), "{stdout}");
    let o = with_stdin(&["generate", "--interactive"], "hi\n");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);
}

/// `lm ruler` keeps its records in `--out` and goes on from them: a second run with one more
/// seed runs only that seed, the first seed's record unchanged, and another scaling's
/// records go beside them; a file of another model's records, a file that is not records,
/// an unknown task and a length past memory are refused by name, and nothing is written.
#[test]
fn ruler_warns_past_the_trained_context_and_names_the_model_plainly() {
    let run = |extra: &[&str]| {
        posenc()
            .args([
                "lm",
                "ruler",
                "--tasks",
                "niah_single",
                "--seeds",
                "1",
                "--quiet",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    // The shipped character model, trained at 64 tokens, asked at 512.
    let o = run(&["--lengths", "512"]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: the longest prompt comes to 512 tokens, past the 64"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("--strict-context"),
        "ruler has no such flag: {stderr}"
    );
    assert!(
        stdout.contains("models/shakespeare-alibi") && !stdout.contains(".."),
        "{stdout}"
    );
}

#[test]
fn ruler_resumes_from_its_records_and_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ruler.json");
    let plot = dir.path().join("ruler.png");
    let ruler = |extra: &[&str]| {
        posenc()
            .args([
                "lm",
                "ruler",
                "--model",
                "smollm2",
                "--tasks",
                "niah_single",
            ])
            .args(["--lengths", "400", "--quiet", "--out"])
            .arg(&out)
            .args(extra)
            .output()
            .unwrap()
    };
    let o = ruler(&["--seeds", "1"]);
    assert!(o.status.success(), "{}", text(&o).1);
    // Within SmolLM2's context: no warning.
    assert!(!text(&o).1.contains("warning"), "{}", text(&o).1);
    let first: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0]["model"], "smollm2");
    assert_eq!(first[0]["task"], "niah_single");
    let o = ruler(&["--seeds", "2", "--plot", plot.to_str().unwrap()]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.contains("| niah_single |"), "{stdout}");
    let second: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(second.len(), 2);
    assert_eq!(
        second[0], first[0],
        "the first seed's record was kept, not rerun"
    );
    assert_eq!(second[1]["seed"], 1);
    assert!(std::fs::read(&plot).unwrap().starts_with(b"\x89PNG"));

    // Another scaling goes into the same file beside the first; the first's records stay.
    let o = ruler(&[
        "--seeds",
        "1",
        "--rope-scaling",
        r#"{"rope_type": "yarn", "factor": 2}"#,
    ]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.contains("scaling yarn ×2"), "{stdout}");
    let third: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(third.len(), 3);
    assert_eq!(third[..2], second[..]);
    assert_eq!(third[2]["scaling"], "yarn ×2");

    // Another model's records are refused, and left as they were.
    let other = std::fs::read_to_string(&out)
        .unwrap()
        .replace("\"smollm2\"", "\"other\"");
    std::fs::write(&out, &other).unwrap();
    let o = ruler(&["--seeds", "1"]);
    let stderr = text(&o).1;
    assert!(!o.status.success());
    assert!(stderr.contains("holds records of model other"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        other,
        "the records were touched"
    );

    std::fs::write(&out, "[{\"task\": ").unwrap();
    let stderr = text(&ruler(&["--seeds", "1"])).1;
    assert!(
        stderr.contains("is not a file of RULER records"),
        "{stderr}"
    );
    let o = posenc()
        .args([
            "lm",
            "ruler",
            "--model",
            "smollm2",
            "--tasks",
            "qa",
            "--lengths",
            "400",
        ])
        .output()
        .unwrap();
    let stderr = text(&o).1;
    assert!(stderr.contains("unknown RULER task `qa`"), "{stderr}");
    // A length whose cache would not fit in memory, before any prompt is laid out.
    let o = posenc()
        .args([
            "lm",
            "ruler",
            "--model",
            "smollm2",
            "--tasks",
            "cwe",
            "--lengths",
            "1000000",
        ])
        .output()
        .unwrap();
    let stderr = text(&o).1;
    assert!(
        stderr.contains("RULER prompts of 1000000 tokens") && stderr.contains("past the limit"),
        "{stderr}"
    );
}
