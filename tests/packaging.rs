//! The crates meant for use outside this repository, the ones `.ci/run` packages, carry what
//! a published crate needs, and every other crate stays unpublishable.

use std::path::Path;

/// The published crates, by directory: the encodings and what they need.
const PUBLISHED: [&str; 5] = ["posenc", "transformer", "kernels", "error", "io"];

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_published_crates_carry_their_metadata_and_the_rest_stay_private() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ci = read(&root.join(".ci/run"));
    let workspace = read(&root.join("Cargo.toml"));
    let mut crates: Vec<_> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    crates.sort();
    assert!(crates.len() > PUBLISHED.len(), "{crates:?}");
    for dir in crates {
        let short = dir.file_name().unwrap().to_string_lossy().into_owned();
        let manifest = read(&dir.join("Cargo.toml"));
        let name = manifest
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|l| l.strip_suffix('"'))
            .unwrap()
            .to_string();
        if !PUBLISHED.contains(&short.as_str()) {
            assert!(
                manifest.contains("publish = false"),
                "{name} is publishable"
            );
            continue;
        }
        assert!(
            !manifest.contains("publish = false"),
            "{name} cannot be packaged"
        );
        for field in [
            "description = ",
            "readme = ",
            "keywords = ",
            "categories = ",
            "repository.workspace",
            "[package.metadata.docs.rs]",
        ] {
            assert!(manifest.contains(field), "{name} lacks `{field}`");
        }
        for file in ["README.md", "LICENSE-MIT", "LICENSE-APACHE"] {
            assert!(dir.join(file).is_file(), "{name} lacks {file}");
        }
        let lib = read(&dir.join("src/lib.rs"));
        assert!(
            lib.contains("#![deny(missing_docs)]"),
            "{name}: missing docs are not denied"
        );
        // A path alone is refused by `cargo package` in a crate that depends on it.
        let line = workspace
            .lines()
            .find(|l| l.starts_with(&format!("{name} = ")))
            .unwrap_or_else(|| panic!("{name} is not a workspace dependency"));
        assert!(
            line.contains("version = "),
            "{line}: no version beside the path"
        );
        assert!(
            ci.contains(&format!("-p {name} ")) || ci.contains(&format!("-p {name}\n")),
            ".ci/run does not package {name}"
        );
    }
}

/// The `(name, version)` of every package a `Cargo.lock` holds.
fn locked(path: &Path) -> std::collections::BTreeSet<(String, String)> {
    let text = read(path);
    let mut found = std::collections::BTreeSet::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(name) = line
            .strip_prefix("name = \"")
            .and_then(|l| l.strip_suffix('"'))
        {
            let version = lines.next().and_then(|l| l.strip_prefix("version = \""));
            let version = version.and_then(|l| l.strip_suffix('"')).unwrap_or("");
            found.insert((name.to_string(), version.to_string()));
        }
    }
    found
}

/// The crate outside the workspace (`tests/outside`, which `.ci/run` builds and runs
/// after the workspace, in the same target directory) locks the versions the workspace
/// does, so that its build compiles the crates it shares with the workspace once.
#[test]
fn the_outside_crate_locks_the_workspaces_versions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ci = read(&root.join(".ci/run"));
    assert!(
        ci.contains("--manifest-path tests/outside/Cargo.toml"),
        "CI does not run it"
    );
    let workspace = locked(&root.join("Cargo.lock"));
    let outside = locked(&root.join("tests/outside/Cargo.lock"));
    assert!(
        outside.iter().any(|(name, _)| name == "candle-core"),
        "{outside:?}"
    );
    let drifted: Vec<_> = outside
        .iter()
        .filter(|(name, _)| name != "outside")
        .filter(|p| !workspace.contains(*p))
        .collect();
    assert!(
        drifted.is_empty(),
        "tests/outside/Cargo.lock locks versions the workspace does not: {drifted:?}; copy \
         Cargo.lock to tests/outside/ and build it (`cargo build --manifest-path \
         tests/outside/Cargo.toml`)"
    );
}
