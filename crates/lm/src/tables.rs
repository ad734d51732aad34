//! The Markdown tables the `lm` commands print, beside the data they render: the loss at
//! each window length, by octave of the trained context, over sliding windows, and the
//! passkey's accuracy.

use crate::passkey::PasskeyConfig;
use crate::task::{LengthEval, StridedEval};

/// The loss at each window length: a row per length, its evaluation or why there is none
/// (past a learned table's last position).
pub fn lengths(rows: &[(usize, Result<&LengthEval, &str>)]) -> String {
    let mut s = String::from(
        "| window | windows | loss | sd over windows | perplexity | loss past L |\n\
         |---:|---:|---:|---:|---:|---:|\n",
    );
    let or_dash = |x: Option<f64>| x.map_or("–".to_string(), |x| format!("{x:.4}"));
    for (len, row) in rows {
        s += &match row {
            Ok(e) => format!(
                "| {} | {} | {:.4} | {} | {:.3} | {} |\n",
                e.len,
                e.windows,
                e.loss,
                or_dash(e.window_sd()),
                e.perplexity(),
                or_dash(e.tail_loss)
            ),
            Err(why) => format!("| {len} | – | n/a | n/a | n/a | n/a ({why}) |\n"),
        };
    }
    s
}

/// The loss by octave of the trained context ([`LengthEval::by_octave`]), one row per window
/// length and one column per octave of the longest window, with its heading; nothing
/// without an evaluation. A row's last octave, when its window ends inside it, names where
/// it was cut.
pub fn octaves(evals: &[&LengthEval], context: usize) -> String {
    let Some(longest) = evals.iter().max_by_key(|e| e.len) else {
        return String::new();
    };
    let columns = longest.by_octave(context);
    let mut s = format!(
        "\nLoss by position, in octaves of the trained context ({context}):\n\n| window | {} |\n|---:|{}\n",
        columns
            .iter()
            .map(|b| format!("{}–{}", b.from, b.to - 1))
            .collect::<Vec<_>>()
            .join(" | "),
        "---:|".repeat(columns.len())
    );
    for e in evals {
        let cells: Vec<String> = columns
            .iter()
            .map(
                |c| match e.by_octave(context).into_iter().find(|b| b.from == c.from) {
                    Some(b) if b.to == c.to => format!("{:.4}", b.loss),
                    Some(b) => format!("{:.4} (to {})", b.loss, b.to - 1),
                    None => "–".to_string(),
                },
            )
            .collect();
        s += &format!("| {} | {} |\n", e.len, cells.join(" | "));
    }
    s
}

/// The loss over sliding windows, each token scored once: a row per window length.
pub fn strided(evals: &[StridedEval]) -> String {
    let mut s = String::from(
        "| window | stride | windows | tokens | loss | perplexity |\n\
         |---:|---:|---:|---:|---:|---:|\n",
    );
    for e in evals {
        s += &format!(
            "| {} | {} | {} | {} | {:.4} | {:.3} |\n",
            e.len,
            e.stride,
            e.windows,
            e.tokens,
            e.loss,
            e.perplexity()
        );
    }
    s
}

/// The passkey's accuracy ([`crate::passkey::accuracy`]): a row per length, a column per
/// depth.
pub fn passkey(cfg: &PasskeyConfig, accuracy: &[Vec<f64>]) -> String {
    let depths: Vec<String> = cfg.depths.iter().map(|d| format!("depth {d}")).collect();
    let mut s = format!(
        "| length | {} |\n|---:|{}\n",
        depths.join(" | "),
        "---:|".repeat(depths.len())
    );
    for (len, row) in cfg.lengths.iter().zip(accuracy) {
        let cells: Vec<String> = row.iter().map(|v| format!("{v:.2}")).collect();
        s += &format!("| {len} | {} |\n", cells.join(" | "));
    }
    s
}
