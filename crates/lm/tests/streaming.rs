//! The streaming study's page: a reading's loss by eighth of its window and its peak memory,
//! computed by hand here from the rows given.

use posenc_lm::streaming::{PerplexityRow, StreamingStudy};

fn row(by_position: Vec<f64>, peak_rss_mb: Option<f64>) -> PerplexityRow {
    let loss = by_position.iter().sum::<f64>() / by_position.len().max(1) as f64;
    PerplexityRow {
        model: "m".into(),
        len: by_position.len(),
        windows: 1,
        loss,
        perplexity: loss.exp(),
        window_losses: vec![loss],
        window: Some(8),
        sinks: Some(2),
        by_position,
        peak_rss_mb,
    }
}

#[test]
fn a_reading_shows_its_first_and_last_eighth_and_its_memory() {
    // 16 positions: the first eighth is positions 0 and 1, the last 14 and 15.
    let losses: Vec<f64> = (0..16).map(|i| i as f64 / 4.0).collect();
    let r = row(losses, Some(181.4));
    assert_eq!(r.first_and_last_eighth(), Some((0.125, 3.625)));
    // Too few positions for an eighth, and no memory measured: dashes.
    let short = row(vec![1.0; 7], None);
    assert_eq!(short.first_and_last_eighth(), None);
    let study = StreamingStudy {
        note: "a note".into(),
        perplexity: vec![r, short],
        generate: Vec::new(),
    };
    let page = study.markdown();
    // The mean of 0, ¼, …, 3¾ is 1.875.
    let want = format!(
        "| m | rolling cache of 8, 2 sinks | 16 | 1 | {:.2} | 1.875 | 0.125 → 3.625 | 181 |",
        1.875f64.exp()
    );
    assert!(page.contains(&want), "{page}");
    assert!(
        page.contains("| m | rolling cache of 8, 2 sinks | 7 | 1 | 2.72 | 1.000 | – | – |"),
        "{page}"
    );
}
