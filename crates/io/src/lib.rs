//! # posenc-io: atomic file writes
//!
//! Every file posenc saves (weights, configs, tokenizers, results, figures) goes through
//! [`write_atomic`]: into a temporary file beside the target, flushed to disk, then renamed
//! over it. A reader sees the old file or the new one, never a mix, and a failed write (a
//! full disk, say) leaves the old file as it was. [`remove_stale_temporaries`] clears what
//! a killed process left behind.
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("results.json");
//! posenc_io::write_atomic(&path, b"{}").unwrap();
//! assert_eq!(std::fs::read(&path).unwrap(), b"{}");
//! assert_eq!(posenc_io::remove_stale_temporaries(dir.path()).unwrap(), 0);
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::io::Write;
use std::path::{Path, PathBuf};

/// A file that could not be written, renamed, listed or removed, with its cause.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct FileError {
    /// The file (or folder).
    pub path: PathBuf,
    /// The cause.
    pub source: std::io::Error,
}

/// Result with a [`FileError`].
pub type Result<T> = std::result::Result<T, FileError>;

fn at(path: &Path) -> impl FnOnce(std::io::Error) -> FileError + '_ {
    move |source| FileError {
        path: path.to_path_buf(),
        source,
    }
}

/// What every temporary file [`write_atomic`] makes has in its name: `.NAME.tmp-PID`.
pub const TEMP_MARKER: &str = ".tmp-";

/// Whether a file name is one of [`write_atomic`]'s temporaries.
pub fn is_temporary(name: &str) -> bool {
    name.starts_with('.') && name.contains(TEMP_MARKER)
}

/// Writes `bytes` to `path` atomically: into a temporary file beside it, flushed to disk,
/// then renamed over `path`. A reader sees the old file or the new one, never a mix. On
/// any error (a full disk, say) the temporary file is removed and `path` is untouched.
///
/// # Errors
/// A [`FileError`] naming the file that could not be written or renamed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}{TEMP_MARKER}{}", std::process::id()));
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    if let Err(source) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(at(path)(source));
    }
    std::fs::rename(&tmp, path).map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        at(path)(source)
    })
}

/// Removes the temporary files that [`write_atomic`] left in `dir` when its process was
/// killed mid-write. Call it only while no other process writes into `dir`. Returns how
/// many were removed.
///
/// # Errors
/// A [`FileError`] naming the folder that could not be listed or the file that could not
/// be removed.
pub fn remove_stale_temporaries(dir: &Path) -> Result<usize> {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir).map_err(at(dir))? {
        let entry = entry.map_err(at(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_temporary(&name) && entry.path().is_file() {
            std::fs::remove_file(entry.path()).map_err(at(&entry.path()))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// The checkout posenc was built in (the workspace's root), as a plain path with no `..`
/// in it: where the shipped models, the docs and the fetched `.cache` are.
pub fn checkout() -> std::path::PathBuf {
    let io = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // crates/io → crates → the root.
    io.ancestors().nth(2).unwrap_or(io).to_path_buf()
}

/// The directory the fetched models and corpora live in, and where the fetch scripts put
/// them: `$POSENC_CACHE` when it is set; else the repository's `.cache` when this build
/// sits in a checkout that has one; else the platform's cache directory
/// (`$XDG_CACHE_HOME/posenc`, or `~/.cache/posenc`), so an installed binary works from
/// anywhere.
pub fn cache_dir() -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(dir) = std::env::var_os("POSENC_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let checkout = checkout().join(".cache");
    if checkout.is_dir() {
        return checkout;
    }
    let platform = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    match platform {
        Some(dir) => dir.join("posenc"),
        None => checkout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write that cannot finish (its folder is gone) names the file, and leaves no
    /// temporary; one that can replaces the old contents whole.
    #[test]
    fn a_failed_write_names_the_file_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        write_atomic(&path, b"old").unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let missing = dir.path().join("no-such-folder").join("b.json");
        let err = write_atomic(&missing, b"x").unwrap_err();
        assert_eq!(err.path, missing);
        assert!(err.to_string().contains("b.json"), "{err}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// A temporary left by a killed writer is found and removed; other files stay.
    #[test]
    fn stale_temporaries_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".model.safetensors.tmp-123"), b"half").unwrap();
        std::fs::write(dir.path().join("model.safetensors"), b"whole").unwrap();
        std::fs::write(dir.path().join(".hidden"), b"mine").unwrap();
        assert_eq!(remove_stale_temporaries(dir.path()).unwrap(), 1);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".hidden", "model.safetensors"]);
        assert!(is_temporary(".x.tmp-1") && !is_temporary("x.tmp-1"));
    }
}
