//! The run logs: event records byte for byte as TensorBoard's own writer frames them
//! (`scripts/make_tfevents_fixtures.py`), and `scalars.jsonl` across a stop and a resume.
//! That TensorBoard's reader draws a real run's curves is the root suite's `tensorboard`
//! test.

use posenc_train::logs::{check_fresh, tfevents, Scalar, ScalarLog, SCALARS_FILE};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixtures {
    records: Vec<Record>,
}

#[derive(Deserialize)]
struct Record {
    what: String,
    wall_time: f64,
    step: u64,
    #[serde(default)]
    scalars: Vec<(String, f32)>,
    hex: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn event_records_match_tensorboards_own_writer_byte_for_byte() {
    let text = include_str!("fixtures/tfevents.json");
    let fixtures: Fixtures = serde_json::from_str(text).unwrap();
    assert_eq!(fixtures.records.len(), 5);
    for r in &fixtures.records {
        let event = match r.what.as_str() {
            "file_version" => tfevents::file_version(r.wall_time),
            "start" => tfevents::start(r.wall_time, r.step),
            "scalars" => {
                let values: Vec<(&str, f32)> =
                    r.scalars.iter().map(|(t, v)| (t.as_str(), *v)).collect();
                tfevents::scalars(r.wall_time, r.step, &values)
            }
            other => panic!("a fixture of an unknown kind {other}"),
        };
        assert_eq!(
            hex(&tfevents::record(&event)),
            r.hex,
            "{} at step {}",
            r.what,
            r.step
        );
    }
}

fn lines(dir: &std::path::Path) -> Vec<Scalar> {
    std::fs::read_to_string(dir.join(SCALARS_FILE))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn event_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("events.out.tfevents.")
        })
        .count()
}

#[test]
fn a_resumed_log_keeps_each_step_once() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let mut log = ScalarLog::start(&logs).unwrap();
    for step in 1..=5 {
        log.write(
            step,
            &[("train/loss", 1.0 / step as f64), ("train/lr", 0.5)],
        )
        .unwrap();
    }
    log.flush().unwrap();
    drop(log);
    assert_eq!(lines(&logs).len(), 10);
    // A kill tears the last line.
    let path = logs.join(SCALARS_FILE);
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"step\":6,\"tag\":\"train/lo");
    std::fs::write(&path, text).unwrap();

    // The checkpoint was at step 3: steps 4 and 5, and the torn line, go.
    let mut log = ScalarLog::resume(&logs, 3).unwrap();
    log.write(4, &[("train/loss", 0.125)]).unwrap();
    log.flush().unwrap();
    let got: Vec<(usize, String, f64)> = lines(&logs)
        .into_iter()
        .map(|s| (s.step, s.tag, s.value))
        .collect();
    let mut want = Vec::new();
    for step in 1..=3 {
        want.push((step, "train/loss".to_string(), 1.0 / step as f64));
        want.push((step, "train/lr".to_string(), 0.5));
    }
    want.push((4, "train/loss".to_string(), 0.125));
    assert_eq!(got, want);
    // One event file a process.
    assert_eq!(event_files(&logs), 2);

    // Another run may not take these logs, unless told to replace them; a new start then
    // clears them but leaves files it did not write.
    let err = check_fresh(&logs, false).unwrap_err().to_string();
    assert!(
        err.contains("another run's logs") && err.contains("--force"),
        "{err}"
    );
    check_fresh(&logs, true).unwrap();
    check_fresh(&dir.path().join("nothing yet"), false).unwrap();
    std::fs::write(logs.join("notes.txt"), "mine").unwrap();
    drop(ScalarLog::start(&logs).unwrap());
    assert_eq!(event_files(&logs), 1);
    assert!(lines(&logs).is_empty());
    assert!(logs.join("notes.txt").exists());
    // A file where the directory should be.
    let file = dir.path().join("a file");
    std::fs::write(&file, "").unwrap();
    let err = check_fresh(&file, false).unwrap_err().to_string();
    assert!(err.contains("is a file"), "{err}");
}
