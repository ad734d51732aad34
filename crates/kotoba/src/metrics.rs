//! Exact match and corpus BLEU.
//!
//! BLEU follows sacreBLEU's `corpus_bleu` defaults (Post 2018): n-grams up to 4, counts
//! clipped by the reference, geometric mean of the precisions with "exp" smoothing (the
//! k-th order with no match counts as `1/(2^k · total)`), brevity penalty
//! `exp(1 − r/c)` when the hypotheses are shorter than the references, times 100. The
//! texts here are lower-case words without punctuation, so sacreBLEU's `13a`
//! tokenisation is whitespace splitting.

use std::collections::HashMap;

/// The fraction of hypotheses identical to their reference.
pub fn exact_match(hypotheses: &[String], references: &[String]) -> f64 {
    if hypotheses.is_empty() {
        return 0.0;
    }
    let hits = hypotheses
        .iter()
        .zip(references)
        .filter(|(h, r)| h == r)
        .count();
    hits as f64 / hypotheses.len() as f64
}

fn ngrams(words: &[&str], n: usize) -> HashMap<Vec<String>, usize> {
    let mut counts = HashMap::new();
    for w in words.windows(n) {
        *counts
            .entry(w.iter().map(|s| s.to_string()).collect())
            .or_insert(0) += 1;
    }
    counts
}

/// Corpus BLEU of `hypotheses` against one reference each, in [0, 100].
pub fn corpus_bleu(hypotheses: &[String], references: &[String]) -> f64 {
    let (mut matches, mut totals) = ([0usize; 4], [0usize; 4]);
    let (mut hyp_len, mut ref_len) = (0usize, 0usize);
    for (h, r) in hypotheses.iter().zip(references) {
        let (h, r): (Vec<&str>, Vec<&str>) = (
            h.split_whitespace().collect(),
            r.split_whitespace().collect(),
        );
        hyp_len += h.len();
        ref_len += r.len();
        for n in 1..=4 {
            let (hc, rc) = (ngrams(&h, n), ngrams(&r, n));
            matches[n - 1] += hc
                .iter()
                .map(|(g, &c)| c.min(rc.get(g).copied().unwrap_or(0)))
                .sum::<usize>();
            totals[n - 1] += h.len().saturating_sub(n - 1);
        }
    }
    if hyp_len == 0 {
        return 0.0;
    }
    let mut log_precision = 0.0;
    let mut k = 1.0;
    for n in 0..4 {
        let p = if totals[n] == 0 {
            // sacreBLEU: an order with no n-grams at all makes the score 0.
            return 0.0;
        } else if matches[n] == 0 {
            k *= 2.0;
            1.0 / (k * totals[n] as f64)
        } else {
            matches[n] as f64 / totals[n] as f64
        };
        log_precision += p.ln() / 4.0;
    }
    let brevity = if hyp_len < ref_len {
        (1.0 - ref_len as f64 / hyp_len as f64).exp()
    } else {
        1.0
    };
    100.0 * brevity * log_precision.exp()
}
