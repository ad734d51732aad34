//! Hub repo ids resolve through a hub cache laid out as the hub clients write it, with
//! no network: `HF_HUB_OFFLINE` means a missing file is an error naming it.

use std::path::{Path, PathBuf};

use posenc_embed::resolve::{fetched_minilm, resolve_in, FILES};
use posenc_embed::sentence::SentenceEncoder;

const REPO: &str = "sentence-transformers/all-MiniLM-L6-v2";

/// `cache/models--sentence-transformers--all-MiniLM-L6-v2/{refs/main, snapshots/REV/...}`,
/// files linked from the fetched model, leaving out `skip`.
fn hub_cache(cache: &Path, skip: Option<&str>) -> PathBuf {
    let repo = cache.join("models--sentence-transformers--all-MiniLM-L6-v2");
    let rev = "0123456789abcdef0123456789abcdef01234567";
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), rev).unwrap();
    let snapshot = repo.join("snapshots").join(rev);
    for file in FILES.iter().filter(|f| Some(**f) != skip) {
        let dst = snapshot.join(file);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(fetched_minilm().unwrap().join(file), &dst).unwrap();
    }
    snapshot
}

#[test]
fn a_repo_id_resolves_to_its_cached_snapshot_offline() {
    let cache = tempfile::tempdir().unwrap();
    let snapshot = hub_cache(cache.path(), None);
    let dir = resolve_in(REPO, cache.path(), true).unwrap();
    assert_eq!(dir, snapshot);
    let sentences = vec!["The dog chases the cat.".to_string()];
    let from_hub = SentenceEncoder::load(&dir)
        .unwrap()
        .embed(&sentences, 1)
        .unwrap();
    let from_dir = SentenceEncoder::load(&fetched_minilm().unwrap())
        .unwrap()
        .embed(&sentences, 1)
        .unwrap();
    assert_eq!(from_hub, from_dir);
}

#[test]
fn offline_with_a_missing_file_is_an_error_naming_it() {
    let cache = tempfile::tempdir().unwrap();
    hub_cache(cache.path(), Some("tokenizer.json"));
    let e = resolve_in(REPO, cache.path(), true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tokenizer.json") && e.contains("HF_HUB_OFFLINE"),
        "{e}"
    );
    let empty = tempfile::tempdir().unwrap();
    let e = resolve_in(REPO, empty.path(), true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("config.json") && e.contains(&empty.path().display().to_string()),
        "{e}"
    );
}
