//! The page in a real headless Chromium (Debian's, driven by playwright-core): each view,
//! the translation and its attention canvases, a setting that changes the heatmap, and a
//! malformed setting's named error. `scripts/install_clients.sh` installs what it needs;
//! where it could not, it left its reason in `tests/browser/.unavailable`, and this test
//! prints that reason and passes. With neither Chromium nor that reason, it fails.

use std::path::Path;
use std::process::Command;

use crate::common::{scratch, server};

#[test]
fn explorer_in_chromium() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let browser = repo.join("tests/browser");
    let ready = browser.join("node_modules/playwright-core").is_dir()
        && Path::new(&std::env::var("CHROMIUM").unwrap_or("/usr/bin/chromium".into())).exists();
    if !ready {
        match std::fs::read_to_string(browser.join(".unavailable")) {
            Ok(reason) => {
                eprintln!("SKIPPED explorer_in_chromium: {}", reason.trim());
                return;
            }
            Err(_) => panic!(
                "Chromium or playwright-core is missing: run `bash scripts/install_clients.sh` \
                 (the README's test command does)"
            ),
        }
    }
    let s = server(&[repo.join("docs")], 2);
    let out = scratch("explorer-screenshots");
    let run = Command::new("node")
        .arg(browser.join("explorer.mjs"))
        .arg(s.url())
        .arg(&out)
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "the browser test failed:\n{stdout}\n{stderr}"
    );
    eprintln!("explorer in Chromium: {}", stdout.trim());
    for shot in ["encodings", "attention", "results", "long-context"] {
        let png = out.join(format!("{shot}.png"));
        let bytes = std::fs::metadata(&png).map_or(0, |m| m.len());
        assert!(bytes > 10_000, "{} is missing or blank", png.display());
    }
}
