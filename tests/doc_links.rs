//! Every relative link and image in the README, the CHANGELOG and the book (`docs/`)
//! resolves: the file exists, and an anchor into a Markdown file names one of its headings
//! (GitHub's slugs: lower case, punctuation dropped, spaces as hyphens).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every Markdown file the check covers.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut out = vec![root().join("README.md"), root().join("CHANGELOG.md")];
    walk(&root().join("docs"), &mut out);
    out.sort();
    out
}

/// GitHub's anchor for a heading.
fn slug(heading: &str) -> String {
    heading
        .trim_start_matches('#')
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(slug(line));
        }
    }
    out
}

/// The targets of `[text](target)` and `![alt](target)` outside code blocks and spans.
fn links(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Code spans can hold `](` that is no link.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let end = after.find(')').unwrap_or(after.len());
            out.push(after[..end].trim().to_string());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_link_and_image_in_the_readme_and_the_book_resolves() {
    let mut broken = Vec::new();
    let pages = pages();
    assert!(pages.len() > 10, "the book has {} pages", pages.len());
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for target in links(&text) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let path = match file {
                "" => page.clone(),
                f => page.parent().unwrap().join(f),
            };
            let shown = page.strip_prefix(root()).unwrap().display().to_string();
            if !path.exists() {
                broken.push(format!("{shown}: {target} (no such file)"));
                continue;
            }
            if let Some(anchor) = anchor {
                if path.extension().is_some_and(|e| e == "md") {
                    let heads = anchors(&std::fs::read_to_string(&path).unwrap());
                    if !heads.contains(anchor) {
                        broken.push(format!("{shown}: {target} (no such heading)"));
                    }
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "{} broken links:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// The checker itself finds what it must: a heading's slug, a link in prose but not in
/// code, an image.
#[test]
fn the_link_checker_reads_links_and_headings_as_github_does() {
    assert_eq!(
        slug("### Stretching the context: `--rope-scaling`"),
        "stretching-the-context---rope-scaling"
    );
    assert_eq!(
        slug("## Generation speed against llama.cpp"),
        "generation-speed-against-llamacpp"
    );
    let text = "see [a](x.md#b) and ![fig](f.png), not `[c](y.md)`\n```\n[d](z.md)\n```\n";
    assert_eq!(links(text), ["x.md#b", "f.png"]);
}
