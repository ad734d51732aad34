//! A run's curves as files that other tools read: TensorBoard event files, and the same
//! scalars as tidy JSON lines.
//!
//! The loop ([`crate::fit`]) logs, at every step, `train/loss`, `train/lr` and
//! `train/tokens_per_second`, and at every validation what the task's record reports
//! ([`crate::fit::Validation::scalars`]: `valid/loss`, `valid/exact`, …). They go into a
//! log directory, the run directory's `logs/` unless `--log-dir` places them elsewhere:
//!
//! | file | holds |
//! |---|---|
//! | `events.out.tfevents.<s>.<ns>.posenc.<pid>.<n>` | one file per process that trained the run, in TensorBoard's format: `tensorboard --logdir runs` draws every run under `runs/` |
//! | `scalars.jsonl` | one `{"step", "tag", "value", "wall_time"}` object a line: `pandas.read_json(path, lines=True)` loads it as a tidy table |
//!
//! A resumed run goes on from its last checkpoint, so what an earlier process logged after
//! that checkpoint (it was killed before the next one) is dropped: `scalars.jsonl` keeps
//! the lines up to the checkpoint's step, and the new event file opens with TensorBoard's
//! restart marker (`SessionLog.START` at the next step), on which its reader drops the
//! later steps of the earlier files. Either way each step is read once.
//!
//! TensorBoard's format, written here with no protobuf dependency: a file is a sequence of
//! records, each `u64` length, its masked CRC-32C, the bytes of one `Event` message, their
//! masked CRC-32C (all little-endian). The first event names the format
//! (`file_version: "brain.Event:2"`). The fields written are `Event.wall_time` (1, double),
//! `step` (2, int64), `file_version` (3), `summary` (5) and `session_log` (7);
//! `Summary.value` (1) with `Value.tag` (1) and `simple_value` (2, float). They are checked
//! byte for byte against records TensorBoard's own writer frames
//! (`scripts/make_tfevents_fixtures.py`), and read back by its reader in a test.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use posenc_error::{ensure, Context};
use posenc_io::write_atomic;
use serde::{Deserialize, Serialize};

use crate::error::Result;

/// `logs`: the log directory inside a run directory, unless `--log-dir` places it.
pub const LOGS_DIR: &str = "logs";
/// `scalars.jsonl`: the scalars as JSON lines.
pub const SCALARS_FILE: &str = "scalars.jsonl";
/// What every event file's name holds, as TensorBoard finds them.
const EVENTS_MARKER: &str = "events.out.tfevents.";

/// One line of `scalars.jsonl`: a value of one curve at one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scalar {
    /// The optimizer step.
    pub step: usize,
    /// The curve, e.g. `train/loss`.
    pub tag: String,
    /// Its value.
    pub value: f64,
    /// Seconds since the Unix epoch when it was logged.
    pub wall_time: f64,
}

/// Whether `name` is a file this module writes.
pub fn is_log_file(name: &str) -> bool {
    name == SCALARS_FILE || name.starts_with(EVENTS_MARKER)
}

/// The log files in `dir` (none where it does not exist), sorted.
fn log_files(dir: &Path) -> Result<Vec<PathBuf>> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        if entry.file_type()?.is_file() && is_log_file(&entry.file_name().to_string_lossy()) {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// Checks, before a new run writes anything, that `dir` may take its logs: it holds no
/// other run's logs, unless `replace` (then [`ScalarLog::start`] removes them).
///
/// # Errors
/// `dir` is a file, or holds logs and `replace` is false.
pub fn check_fresh(dir: &Path, replace: bool) -> Result<()> {
    ensure!(
        !dir.exists() || dir.is_dir(),
        "the log directory {} is a file",
        dir.display()
    );
    let held = log_files(dir)?;
    ensure!(
        held.is_empty() || replace,
        "the log directory {} holds another run's logs ({}); choose another --log-dir, or \
         pass --force to replace them",
        dir.display(),
        held.len()
    );
    Ok(())
}

/// The scalars of one training process, written as it trains.
#[derive(Debug)]
pub struct ScalarLog {
    dir: PathBuf,
    events: BufWriter<File>,
    lines: BufWriter<File>,
}

impl ScalarLog {
    /// Starts the logs of a new run in `dir`, removing the logs already there (which
    /// [`check_fresh`] allowed); files it did not write are left.
    ///
    /// # Errors
    /// A file that cannot be removed or created.
    pub fn start(dir: &Path) -> Result<Self> {
        for path in log_files(dir)? {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
        Self::open(dir, 0)
    }

    /// Continues the logs in `dir` of a run resumed at `step`: lines logged past it are
    /// dropped, and the new event file marks the restart.
    ///
    /// # Errors
    /// A file that cannot be read or written.
    pub fn resume(dir: &Path, step: usize) -> Result<Self> {
        Self::open(dir, step)
    }

    fn open(dir: &Path, step: usize) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let jsonl = dir.join(SCALARS_FILE);
        if jsonl.exists() {
            // Lines past the step resumed at, and a last line torn by a kill, are dropped.
            let text = std::fs::read_to_string(&jsonl)
                .with_context(|| format!("reading {}", jsonl.display()))?;
            let kept: String = text
                .lines()
                .filter(|l| serde_json::from_str::<Scalar>(l).is_ok_and(|s| s.step <= step))
                .flat_map(|l| [l, "\n"])
                .collect();
            if kept.len() != text.len() {
                write_atomic(&jsonl, kept.as_bytes())?;
            }
        }
        let lines = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&jsonl)
            .with_context(|| format!("opening {}", jsonl.display()))?;
        let events_path = Self::new_event_file(dir)?;
        let events = File::create_new(&events_path)
            .with_context(|| format!("creating {}", events_path.display()))?;
        let mut this = Self {
            dir: dir.to_path_buf(),
            events: BufWriter::new(events),
            lines: BufWriter::new(lines),
        };
        let now = wall_time();
        this.write_event(&tfevents::file_version(now))?;
        if step > 0 {
            this.write_event(&tfevents::start(now, step as u64 + 1))?;
        }
        this.flush()?;
        Ok(this)
    }

    /// A name for this process's event file that no file in `dir` has, after every
    /// earlier file's in the order TensorBoard reads them (by name): the time to the
    /// nanosecond, zero-padded, then the process.
    fn new_event_file(dir: &Path) -> Result<PathBuf> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let (secs, nanos) = (now.as_secs(), now.subsec_nanos());
        let pid = std::process::id();
        let mut n = 0;
        loop {
            let name = format!("{EVENTS_MARKER}{secs:010}.{nanos:09}.posenc.{pid}.{n}");
            let path = dir.join(name);
            if !path.exists() {
                return Ok(path);
            }
            n += 1;
        }
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Logs `scalars` (tag, value) at `step`, in both files (buffered: see
    /// [`Self::flush`]).
    ///
    /// # Errors
    /// A failed write.
    pub fn write(&mut self, step: usize, scalars: &[(&str, f64)]) -> Result<()> {
        let now = wall_time();
        let narrowed: Vec<(&str, f32)> = scalars.iter().map(|&(t, v)| (t, v as f32)).collect();
        self.write_event(&tfevents::scalars(now, step as u64, &narrowed))?;
        for &(tag, value) in scalars {
            let line = Scalar {
                step,
                tag: tag.to_string(),
                value,
                wall_time: now,
            };
            serde_json::to_writer(&mut self.lines, &line)?;
            self.lines.write_all(b"\n")?;
        }
        Ok(())
    }

    /// Writes what is buffered to both files.
    ///
    /// # Errors
    /// A failed write.
    pub fn flush(&mut self) -> Result<()> {
        let what = |f: &str| format!("writing {}", self.dir.join(f).display());
        self.events
            .flush()
            .with_context(|| what("the event file"))?;
        self.lines.flush().with_context(|| what(SCALARS_FILE))?;
        Ok(())
    }

    fn write_event(&mut self, event: &[u8]) -> Result<()> {
        self.events.write_all(&tfevents::record(event))?;
        Ok(())
    }
}

fn wall_time() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// TensorBoard's event records, encoded by hand: the few protobuf fields a scalar log needs.
pub mod tfevents {
    /// Frames one serialized `Event` as a TFRecord: length, its masked CRC, the bytes,
    /// their masked CRC.
    pub fn record(event: &[u8]) -> Vec<u8> {
        let len = (event.len() as u64).to_le_bytes();
        let mut out = Vec::with_capacity(event.len() + 16);
        out.extend_from_slice(&len);
        out.extend_from_slice(&masked_crc(&len).to_le_bytes());
        out.extend_from_slice(event);
        out.extend_from_slice(&masked_crc(event).to_le_bytes());
        out
    }

    /// TFRecord's CRC: CRC-32C, rotated right by 15 bits, plus a constant.
    fn masked_crc(bytes: &[u8]) -> u32 {
        crc32c::crc32c(bytes)
            .rotate_right(15)
            .wrapping_add(0xa282_ead8)
    }

    /// The first event of a file: the format version.
    pub fn file_version(wall_time: f64) -> Vec<u8> {
        let mut e = header(wall_time, 0);
        bytes_field(&mut e, 3, b"brain.Event:2");
        e
    }

    /// `SessionLog { status: START }` at `step`: a reader drops the steps from `step` on
    /// that earlier files logged.
    pub fn start(wall_time: f64, step: u64) -> Vec<u8> {
        let mut e = header(wall_time, step);
        let mut log = Vec::new();
        varint_field(&mut log, 1, 1);
        bytes_field(&mut e, 7, &log);
        e
    }

    /// A summary of scalars (tag, value) at `step`.
    pub fn scalars(wall_time: f64, step: u64, values: &[(&str, f32)]) -> Vec<u8> {
        let mut summary = Vec::new();
        for (tag, value) in values {
            let mut v = Vec::new();
            bytes_field(&mut v, 1, tag.as_bytes());
            key(&mut v, 2, 5);
            v.extend_from_slice(&value.to_le_bytes());
            bytes_field(&mut summary, 1, &v);
        }
        let mut e = header(wall_time, step);
        bytes_field(&mut e, 5, &summary);
        e
    }

    /// `wall_time` and `step`, each left out at zero, as proto3 writes them.
    fn header(wall_time: f64, step: u64) -> Vec<u8> {
        let mut e = Vec::new();
        if wall_time != 0.0 {
            key(&mut e, 1, 1);
            e.extend_from_slice(&wall_time.to_le_bytes());
        }
        if step != 0 {
            varint_field(&mut e, 2, step);
        }
        e
    }

    fn key(out: &mut Vec<u8>, field: u64, wire: u64) {
        varint(out, (field << 3) | wire);
    }

    fn varint_field(out: &mut Vec<u8>, field: u64, value: u64) {
        key(out, field, 0);
        varint(out, value);
    }

    fn bytes_field(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
        key(out, field, 2);
        varint(out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    }

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
}
