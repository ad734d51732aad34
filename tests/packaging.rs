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
