//! The translation task's metrics: BLEU against sacreBLEU's own figures, and exact match.

use posenc_kotoba::metrics::{corpus_bleu, exact_match};

#[test]
fn bleu_matches_sacrebleu() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/bleu.json");
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    for (name, case) in fixture["cases"].as_object().unwrap() {
        let (h, r) = (strings(&case["hypotheses"]), strings(&case["references"]));
        let want = case["bleu"].as_f64().unwrap();
        let got = corpus_bleu(&h, &r);
        assert!(
            (got - want).abs() < 1e-9,
            "{name}: ours {got}, sacreBLEU {want}"
        );
    }
}

#[test]
fn exact_match_counts_identical_strings() {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(exact_match(&s(&["a b", "c"]), &s(&["a b", "d"])), 0.5);
    assert_eq!(exact_match(&[], &[]), 0.0);
}
