//! Exact match and BLEU of a trained model on every evaluation split.

use posenc_train::error::Result;
use serde::Serialize;

use crate::data::{self, DataConfig};
use crate::decode::DecodeConfig;
use crate::metrics::{corpus_bleu, exact_match};
use crate::task::Translator;

/// The metrics of one split.
#[derive(Debug, Clone, Serialize)]
pub struct SplitReport {
    /// `valid`, `test`, `test-long` or `order-swap`.
    pub split: String,
    /// Sentences translated.
    pub sentences: usize,
    /// Fraction translated exactly.
    pub exact: f64,
    /// Corpus BLEU (0–100).
    pub bleu: f64,
    /// Order-swap only: the fraction of pairs with both halves exactly right.
    pub both_halves: Option<f64>,
    /// Exact match by number of clauses (1-based index: `[1 clause, 2 clauses, …]`).
    pub exact_by_clauses: Vec<Option<f64>>,
    /// Order-swap only: the pairs its sentences make (each sentence and its swap).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pairs: Option<usize>,
    /// The first mistakes, as many as were asked for.
    pub errors: Vec<Mistake>,
}

/// A sentence translated wrong.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Mistake {
    /// The English.
    pub source: String,
    /// The Kotoba it should be.
    pub expected: String,
    /// The Kotoba the model produced.
    pub produced: String,
}

/// Evaluates `translator` on the splits of `data`, keeping the first `mistakes` of each.
///
/// # Errors
/// A corpus that cannot be generated; the model failing to run.
pub fn evaluate(
    translator: &Translator,
    data: &DataConfig,
    cfg: &DecodeConfig,
    mistakes: usize,
) -> Result<Vec<SplitReport>> {
    let splits = data::generate(data)?;
    let mut reports = Vec::new();
    for (name, pairs) in splits.evaluation() {
        let sources: Vec<String> = pairs.iter().map(|p| p.src.clone()).collect();
        let refs: Vec<String> = pairs.iter().map(|p| p.tgt.clone()).collect();
        let hyps = translator.translate(&sources, cfg)?;
        let both_halves = (name == "order-swap").then(|| {
            let right: Vec<bool> = hyps.iter().zip(&refs).map(|(h, r)| h == r).collect();
            let pairs = right.chunks(2).filter(|c| c.iter().all(|&r| r)).count();
            pairs as f64 / (right.len() / 2).max(1) as f64
        });
        let clauses = |s: &String| s.matches(" and ").count() + 1;
        let most = sources.iter().map(clauses).max().unwrap_or(1);
        let exact_by_clauses = (1..=most)
            .map(|c| {
                let idx: Vec<usize> = (0..sources.len())
                    .filter(|&i| clauses(&sources[i]) == c)
                    .collect();
                (!idx.is_empty()).then(|| {
                    idx.iter().filter(|&&i| hyps[i] == refs[i]).count() as f64 / idx.len() as f64
                })
            })
            .collect();
        let errors = (0..hyps.len())
            .filter(|&i| hyps[i] != refs[i])
            .take(mistakes)
            .map(|i| Mistake {
                source: sources[i].clone(),
                expected: refs[i].clone(),
                produced: hyps[i].clone(),
            })
            .collect();
        reports.push(SplitReport {
            split: name.to_string(),
            sentences: pairs.len(),
            exact: exact_match(&hyps, &refs),
            bleu: corpus_bleu(&hyps, &refs),
            both_halves,
            pairs: both_halves.map(|_| pairs.len() / 2),
            exact_by_clauses,
            errors,
        });
    }
    Ok(reports)
}

/// The reports as a Markdown table.
pub fn table(reports: &[SplitReport]) -> String {
    let mut out = String::from(
        "| split | sentences | exact match | BLEU | both halves |\n|---|---:|---:|---:|---:|\n",
    );
    for r in reports {
        let both = r
            .both_halves
            .map_or("".to_string(), |b| format!("{:.1}%", 100.0 * b));
        let count = match r.pairs {
            Some(pairs) => format!("{} ({pairs} pairs)", r.sentences),
            None => r.sentences.to_string(),
        };
        out += &format!(
            "| {} | {count} | {:.1}% | {:.2} | {} |\n",
            r.split,
            100.0 * r.exact,
            r.bleu,
            both
        );
    }
    out
}
