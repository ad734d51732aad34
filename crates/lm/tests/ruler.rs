//! The RULER subset: prompts of the asked length holding what their answers need, drawn
//! the same for the same seed; RULER's `string_match_all` score; and SmolLM2's greedy
//! answers to fixed prompts equal to transformers' on the same GGUF at f32
//! (`scripts/make_ruler_fixtures.py`).

use posenc_lm::ruler::{self, prompt, score, TASKS};
use posenc_train::Result;

/// One token per byte.
fn bytes(text: &str) -> Result<Vec<u32>> {
    Ok(text.bytes().map(u32::from).collect())
}

fn text(ids: &[u32]) -> String {
    ids.iter().map(|&b| char::from(b as u8)).collect()
}

#[test]
fn every_prompt_has_its_length_and_its_answers_inside() {
    for task in TASKS {
        for length in [5000, 8000] {
            let p = prompt(&bytes, task, length, 7, 0).unwrap();
            let s = text(&p.ids);
            // As long as whole fillers (or list entries) reach, never longer.
            assert!(p.ids.len() <= length, "{task}: {} > {length}", p.ids.len());
            assert!(
                p.ids.len() + 100 > length,
                "{task}: {} ≪ {length}",
                p.ids.len()
            );
            assert!(!p.answers.is_empty());
            for answer in &p.answers {
                assert!(
                    s.contains(answer.as_str()),
                    "{task}: {answer} is not in the prompt"
                );
            }
            // The same seed draws the same prompt; another seed another.
            assert_eq!(prompt(&bytes, task, length, 7, 0).unwrap(), p);
            assert_ne!(prompt(&bytes, task, length, 8, 0).unwrap().ids, p.ids);
            assert_ne!(prompt(&bytes, task, length, 7, 1).unwrap().ids, p.ids);
        }
    }
}

#[test]
fn needles_chains_and_lists_are_laid_out_as_ruler_defines_them() {
    let count = |s: &str, what: &str| s.matches(what).count();
    // Multi-key: four needles, one asked for; multi-value: four values under one key;
    // multi-query: two of four keys asked for.
    for (task, needles, answers) in [
        ("niah_single", 1, 1),
        ("niah_multikey", 4, 1),
        ("niah_multivalue", 4, 4),
        ("niah_multiquery", 4, 2),
    ] {
        let p = prompt(&bytes, task, 4000, 3, 0).unwrap();
        let s = text(&p.ids);
        assert_eq!(
            count(&s, "One of the special magic numbers for"),
            needles,
            "{task}"
        );
        assert_eq!(p.answers.len(), answers, "{task}");
        for a in &p.answers {
            assert_eq!(a.len(), 7, "a seven-digit value");
            // The question names the key the value is filed under.
            let needle = s.find(&format!("is: {a}.")).unwrap();
            let key_start = s[..needle].rfind("numbers for ").unwrap() + "numbers for ".len();
            let key = s[key_start..needle].trim();
            assert!(
                s.rsplit("What are all").next().unwrap().contains(key),
                "{task}: {key}"
            );
        }
    }
    // Variable tracking: a chain of four hops, in order, each naming the one before.
    let p = prompt(&bytes, "vt", 4000, 3, 0).unwrap();
    let s = text(&p.ids);
    let value_at = s.find(&format!("VAR {} = ", p.answers[0])).unwrap();
    let mut at = value_at;
    for w in p.answers.windows(2) {
        let link = format!("VAR {} = VAR {}.", w[1], w[0]);
        let next = s.find(&link).unwrap_or_else(|| panic!("no link {link}"));
        assert!(next > at, "the chain runs forwards");
        at = next;
    }
    // Common words: ten words thirty times each, every other word three times.
    let p = prompt(&bytes, "cwe", 5000, 3, 0).unwrap();
    let s = text(&p.ids);
    let mut counts = std::collections::BTreeMap::new();
    for line in s
        .lines()
        .filter(|l| l.contains(". ") && l.split(". ").count() == 2)
    {
        let (n, word) = line.split_once(". ").unwrap();
        if n.chars().all(|c| c.is_ascii_digit()) {
            *counts.entry(word.to_string()).or_insert(0) += 1;
        }
    }
    for w in &p.answers {
        assert_eq!(counts[w], 30, "{w}");
    }
    assert!(counts.len() > 10);
    assert!(counts
        .iter()
        .filter(|(w, _)| !p.answers.contains(w))
        .all(|(_, &n)| n == 3));
}

/// Frequent words: the counts fall as RULER's `⌊n · k^−2 / ζ(2)⌋` by rank, the noise `...`
/// first, and the three asked for are the next three.
#[test]
fn frequent_words_follow_zipf_as_ruler_draws_them() {
    let p = prompt(&bytes, "fwe", 6000, 3, 0).unwrap();
    let s = text(&p.ids);
    let body = s.split("coded words. ").nth(1).unwrap();
    let body = body.split("\nQuestion:").next().unwrap();
    let mut counts = std::collections::HashMap::new();
    for w in body.split_whitespace() {
        *counts.entry(w.to_string()).or_insert(0usize) += 1;
    }
    let mut ranked: Vec<(usize, String)> = counts.into_iter().map(|(w, c)| (c, w)).collect();
    ranked.sort_by(|a, b| b.cmp(a));
    assert_eq!(ranked[0].1, "...");
    let zeta = std::f64::consts::PI.powi(2) / 6.0;
    let n = (ranked[0].0 as f64 * zeta).round();
    for (k, (c, _)) in ranked.iter().enumerate().take(10) {
        let want = (n * ((k + 1) as f64).powi(-2) / zeta) as usize;
        assert!(c.abs_diff(want) <= 1, "rank {}: {c} against {want}", k + 1);
    }
    let top: Vec<String> = ranked[1..4].iter().map(|(_, w)| w.clone()).collect();
    assert_eq!(top, p.answers);
    assert!(p.answers.iter().all(|w| w.len() == 6));
    // RULER's vocabulary: length / 50 words.
    assert!(ranked.len() <= 6000 / 50);
}

/// `niah_multikey_3`: every sentence a UUID needle, one under the key asked for.
#[test]
fn uuid_needles_make_the_whole_haystack() {
    let is_uuid = |u: &str| {
        let parts: Vec<&str> = u.split('-').collect();
        parts.iter().map(|p| p.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
            && u.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
            && u.as_bytes()[14] == b'4'
    };
    let p = prompt(&bytes, "niah_multikey_3", 5000, 3, 0).unwrap();
    let s = text(&p.ids);
    let key = s.rsplit("magic uuids for ").nth(1).unwrap();
    let key = key.split(' ').next().unwrap();
    assert!(
        is_uuid(key) && is_uuid(&p.answers[0]),
        "{key} {:?}",
        p.answers
    );
    let needles: Vec<&str> = s.matches("One of the special magic uuids for").collect();
    assert!(needles.len() > 30, "{}", needles.len());
    let asked = format!("uuids for {key} is: {}.", p.answers[0]);
    assert_eq!(s.matches(&asked).count(), 1);
    assert_eq!(s.matches(&format!("for {key} is")).count(), 1);
}

/// Needle threading: from the key asked for, four hops through the object's pairs end at
/// the answer, which is no key.
#[test]
fn a_thread_runs_four_hops_to_its_answer() {
    let p = prompt(&bytes, "threading", 5000, 3, 0).unwrap();
    let s = text(&p.ids);
    let pairs: std::collections::HashMap<&str, &str> = s
        .lines()
        .filter_map(|l| l.trim().strip_prefix('"'))
        .filter_map(|l| l.split_once("\": \""))
        .map(|(k, v)| (k, v.trim_end_matches("\",")))
        .collect();
    assert!(pairs.len() > 30, "{}", pairs.len());
    let start = s.split("Start at the key ").nth(1).unwrap();
    let mut at = start.split(' ').next().unwrap();
    for hop in 0..ruler::THREAD_HOPS {
        at = pairs
            .get(at)
            .unwrap_or_else(|| panic!("hop {hop}: {at} is no key"));
    }
    assert_eq!(at, p.answers[0]);
    assert!(!pairs.contains_key(at), "the thread ends");
}

#[test]
fn the_score_is_the_share_of_answers_given_case_ignored() {
    let answers: Vec<String> = ["ABCDE", "12345", "fghij"].map(String::from).to_vec();
    assert_eq!(score("abcde and FGHIJ", &answers), 2.0 / 3.0);
    assert_eq!(score("12345 abcde fghij", &answers), 1.0);
    assert_eq!(score("nothing", &answers), 0.0);
    assert_eq!(score("anything", &[]), 0.0);
}

#[test]
fn bad_settings_are_named() {
    let e = prompt(&bytes, "niah_single", 100, 0, 0)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("too short") && e.contains("needs at least"),
        "{e}"
    );
    let e = prompt(&bytes, "cwe", 1000, 0, 0).unwrap_err().to_string();
    assert!(e.contains("too short") && e.contains("common words"), "{e}");
    let e = prompt(&bytes, "fwe", 200, 0, 0).unwrap_err().to_string();
    assert!(e.contains("too short") && e.contains("vocabulary"), "{e}");
    // A thread deeper than the haystack.
    let e = prompt(&bytes, "threading", 900, 0, 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("too short") && e.contains("hops"), "{e}");
    let e = prompt(&bytes, "qa", 1000, 0, 0).unwrap_err().to_string();
    assert!(
        e.contains("unknown RULER task `qa`") && e.contains("niah_single"),
        "{e}"
    );
    let cfg = ruler::RulerConfig {
        tasks: vec!["vt".into()],
        lengths: vec![1 << 30],
        seeds: vec![0],
        samples: 1,
    };
    assert!(cfg.validate().unwrap_err().to_string().contains("length"));
    let cfg = ruler::RulerConfig {
        samples: 0,
        lengths: vec![4096],
        ..cfg
    };
    assert!(cfg
        .validate()
        .unwrap_err()
        .to_string()
        .contains("at least one sample"));
}

/// transformers' greedy answers to the prompts `scripts/make_ruler_fixtures.py` wrote: the
/// same prompts from our generator, the same answers from our model.
#[test]
fn answers_match_transformers() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let gguf = root.join(".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        gguf.exists(),
        "{} is missing: run scripts/fetch_smollm2.sh",
        gguf.display()
    );
    let lm = posenc_lm::causal::CausalLm::load(
        gguf.to_str().unwrap(),
        posenc_llama::Precision::F32,
        &candle_core::Device::Cpu,
    )
    .unwrap();
    let fixtures: Vec<serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ruler.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let encode = |t: &str| lm.encode_prompt(t).map_err(posenc_train::Error::callback);
    assert_eq!(fixtures.len(), 6);
    for f in &fixtures {
        let task = f["task"].as_str().unwrap();
        let length = f["length"].as_u64().unwrap() as usize;
        let p = prompt(&encode, task, length, 0, 0).unwrap();
        let ids: Vec<u32> = serde_json::from_value(f["ids"].clone()).unwrap();
        assert_eq!(
            p.ids, ids,
            "{task}: the prompt changed; rerun the fixture script"
        );
        let want: Vec<u32> = serde_json::from_value(f["answer_ids"].clone()).unwrap();
        let mut got = Vec::new();
        posenc_lm::sample::generate_observed(
            &lm.model,
            &p.ids,
            p.max_new,
            posenc_lm::sample::Sampling::greedy(),
            None,
            |_| {},
            |t| {
                if Some(t) == lm.eos {
                    return Ok(false);
                }
                got.push(t);
                Ok(true)
            },
        )
        .unwrap();
        assert_eq!(
            lm.decode(&got).unwrap(),
            lm.decode(&want).unwrap(),
            "{task}: our answer against transformers'"
        );
        assert_eq!(got, want, "{task}");
    }
}
