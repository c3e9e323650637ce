//! The documentation holds together: every relative link in the book, the README, AGENTS.md
//! and deploy/README.md reaches a file (and a heading, for `#anchor`s, with mdBook's ids);
//! every chapter is in `SUMMARY.md` and every entry there exists; every `docs/src/...` path
//! the code, settings and manifests cite exists; the README stays a front page.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// mdBook's id of a heading: lowercase; letters, digits, `-` and `_` kept, whitespace made `-`,
/// the rest dropped. A repeated heading gets `-1`, `-2`, ...
fn heading_ids(text: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for line in prose(text) {
        let Some(title) = line.strip_prefix('#').map(|t| t.trim_start_matches('#')) else {
            continue;
        };
        if !title.starts_with(' ') {
            continue;
        }
        let id: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                c if c.is_whitespace() => Some('-'),
                _ => None,
            })
            .collect();
        let mut unique = id.clone();
        let mut n = 1;
        while ids.contains(&unique) {
            unique = format!("{id}-{n}");
            n += 1;
        }
        ids.insert(unique);
    }
    ids
}

/// The targets of inline links `[text](target)` in `text`'s prose, inline code left out.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(text) {
        let mut in_code = false;
        let mut cleaned = String::new();
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                cleaned.push(c);
            }
        }
        let mut rest = cleaned.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    targets
}

fn check_links(file: &Path, problems: &mut Vec<String>) {
    let text = std::fs::read_to_string(file).unwrap();
    for target in link_targets(&text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
        let dest = if path.is_empty() {
            file.to_owned()
        } else {
            file.parent().unwrap().join(path)
        };
        if !dest.exists() {
            problems.push(format!(
                "{}: link to {target}: no such file",
                file.display()
            ));
            continue;
        }
        if !anchor.is_empty() {
            let ids = heading_ids(&std::fs::read_to_string(&dest).unwrap_or_default());
            if !ids.contains(anchor) {
                problems.push(format!(
                    "{}: link to {target}: no such heading",
                    file.display()
                ));
            }
        }
    }
}

#[test]
fn every_link_in_the_docs_reaches_its_file_and_heading() {
    let root = root();
    let mut files = Vec::new();
    markdown_files(&root.join("docs/src"), &mut files);
    files.extend(["README.md", "AGENTS.md", "deploy/README.md"].map(|f| root.join(f)));
    let mut problems = Vec::new();
    for file in &files {
        check_links(file, &mut problems);
    }
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_chapter_is_in_the_summary_and_every_entry_exists() {
    let src = root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> = link_targets(&summary)
        .into_iter()
        .map(|t| src.join(t))
        .collect();
    let mut files = Vec::new();
    markdown_files(&src, &mut files);
    let files: BTreeSet<PathBuf> = files
        .into_iter()
        .filter(|f| !f.ends_with("SUMMARY.md"))
        .collect();
    let unlisted: Vec<_> = files.difference(&listed).collect();
    let missing: Vec<_> = listed.difference(&files).collect();
    assert!(
        unlisted.is_empty() && missing.is_empty(),
        "chapters not in SUMMARY.md: {unlisted:?}; SUMMARY.md entries without a file: {missing:?}"
    );
}

/// Every `docs/src/<page>.md[#anchor]` cited by the code, settings, manifests and scripts.
#[test]
fn every_docs_path_the_sources_cite_exists() {
    let root = root();
    let mut problems = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "docs" {
                    stack.push(path);
                }
                continue;
            }
            let cited = ["rs", "toml", "yaml", "yml", "sh", "md"]
                .iter()
                .any(|e| name.ends_with(&format!(".{e}")));
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            if !cited {
                continue;
            }
            let mut rest = text.as_str();
            while let Some(at) = rest.find("docs/src/") {
                let cite: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || "/_-.#".contains(*c))
                    .collect();
                rest = &rest[at + cite.len()..];
                let cite = cite.trim_end_matches('.');
                if cite.ends_with('/') {
                    continue; // the directory itself, as in this file
                }
                let (page, anchor) = cite.split_once('#').unwrap_or((cite, ""));
                let dest = root.join(page);
                if !page.ends_with(".md") || !dest.is_file() {
                    problems.push(format!("{}: {cite}: no such page", path.display()));
                } else if !anchor.is_empty()
                    && !heading_ids(&std::fs::read_to_string(&dest).unwrap()).contains(anchor)
                {
                    problems.push(format!("{}: {cite}: no such heading", path.display()));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "cited pages that do not exist:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_readme_is_a_front_page() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines < 200,
        "README.md has {lines} lines: the front page stays under 200, the rest goes to docs/src"
    );
}
