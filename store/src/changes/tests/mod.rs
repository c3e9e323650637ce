//! Change sets checked against real git: every patch goes through `git apply --check` and
//! `git apply` in a git checkout of tree A and in a plain directory holding A, and must turn
//! it into tree B; `git apply --numstat` must count what we count.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeMap,
    fs,
    os::unix::fs::{PermissionsExt, symlink},
    path::Path,
    process::Command,
};

use pretty_assertions::assert_eq;

use super::*;
use crate::{
    LocalStore,
    snapshot::{
        restore, take,
        test_support::{chmod, write},
    },
};

mod apply;
mod extract;
mod git_output;

fn link(root: &Path, rel: &str, target: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let _ = fs::remove_file(&path);
    symlink(target, path).unwrap();
}

fn remove(root: &Path, rel: &str) {
    fs::remove_file(root.join(rel)).unwrap();
}

/// Runs git in `dir` without any user or system configuration; returns stdout.
fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The files and links under `root` (not `.baton` at the root, nothing in `.git`), as
/// path -> description, leaving out paths `skip` names.
fn files(root: &Path, skip: &dyn Fn(&str) -> bool) -> BTreeMap<String, String> {
    fn walk(root: &Path, rel: &str, out: &mut BTreeMap<String, String>) {
        for item in fs::read_dir(root.join(rel)).unwrap() {
            let name = item.unwrap().file_name().into_string().unwrap();
            if (rel.is_empty() && name == ".baton") || name == ".git" {
                continue;
            }
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let path = root.join(&child);
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.is_symlink() {
                let target = fs::read_link(&path).unwrap();
                out.insert(child, format!("link -> {}", target.display()));
            } else if meta.is_dir() {
                walk(root, &child, out);
            } else {
                let exec = if meta.permissions().mode() & 0o111 != 0 {
                    " (exec)"
                } else {
                    ""
                };
                let bytes = fs::read(&path).unwrap();
                out.insert(child, format!("file{exec}: {}", bytes.escape_ascii()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, "", &mut out);
    out.retain(|path, _| !skip(path));
    out
}

/// Builds tree A with `build`, snapshots it, changes it into B with `change`, snapshots
/// that, and checks the change set with git (see the module doc); paths `skip` names are
/// left out of the comparison (ignored ones). Returns the change set.
async fn check(
    build: impl Fn(&Path),
    change: impl Fn(&Path),
    skip: &dyn Fn(&str) -> bool,
) -> ChangeSet {
    let tmp = tempfile::tempdir().unwrap();
    let store = LocalStore::new(tmp.path().join("blobs")).unwrap();
    let work = tmp.path().join("work");
    fs::create_dir(&work).unwrap();
    build(&work);
    let a = take(&store, &work).await.unwrap().id;
    change(&work);
    let b = take(&store, &work).await.unwrap().id;

    let set = change_set(&store, Some(&a), &b).await.unwrap();
    let again = change_set(&store, Some(&a), &b).await.unwrap();
    assert_eq!(again, set, "the same snapshots give the same change set");
    let patch = tmp.path().join("changes.patch");
    fs::write(&patch, &set.patch).unwrap();
    let patch = patch.to_str().unwrap();
    let expected = files(&work, skip);

    for repo in [true, false] {
        let dir = tmp.path().join(if repo { "repo" } else { "plain" });
        restore(&store, &dir, &a).await.unwrap();
        if repo {
            if !dir.join(".git").exists() {
                git(&dir, &["init", "-q"]);
            }
            git(&dir, &["add", "-A"]);
            git(&dir, &["commit", "-q", "--allow-empty", "-m", "A"]);
        }
        let before = files(&dir, skip);
        if !set.patch.is_empty() {
            git(&dir, &["apply", "--check", patch]);
            git(&dir, &["apply", patch]);
        }
        let kind = if repo { "git" } else { "plain" };
        assert_eq!(files(&dir, skip), expected, "applied in the {kind} dir");
        // The reverse hunks (binary ones included) take B back to A; except for type
        // changes, which `git apply -R` gets wrong with git's own patches too (it turns a
        // link that became a file back into a file holding the link's target).
        let type_change = set.files.iter().any(|f| f.status == FileStatus::Type);
        if !set.patch.is_empty() && !type_change {
            git(&dir, &["apply", "-R", patch]);
            assert_eq!(files(&dir, skip), before, "reversed in the {kind} dir");
        }
    }

    if !set.patch.is_empty() {
        assert_eq!(numstat(tmp.path(), patch), ours(&set));
        assert_eq!(
            (set.insertions, set.deletions),
            set.files.iter().fold((0, 0), |(i, d), f| (
                i + u64::from(f.insertions),
                d + u64::from(f.deletions)
            ))
        );
    }
    let mut sorted = set.files.clone();
    sorted.sort_by(|x, y| x.path.cmp(&y.path));
    assert_eq!(set.files, sorted);
    set
}

/// `git apply --numstat`: path -> (insertions, deletions), `None` for binary; the two
/// entries of a type change are summed.
fn numstat(dir: &Path, patch: &str) -> BTreeMap<String, Option<(u32, u32)>> {
    let out = git(dir, &["apply", "--numstat", "-z", patch]);
    let mut stats: BTreeMap<String, Option<(u32, u32)>> = BTreeMap::new();
    for record in out.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let record = String::from_utf8(record.to_vec()).unwrap();
        let mut fields = record.splitn(3, '\t');
        let (ins, del, path) = (
            fields.next().unwrap(),
            fields.next().unwrap(),
            fields.next().unwrap(),
        );
        let counts: Option<(u32, u32)> =
            (ins != "-").then(|| (ins.parse().unwrap(), del.parse().unwrap()));
        let entry = stats.entry(path.to_owned()).or_insert(Some((0, 0)));
        *entry = match (*entry, counts) {
            (Some((i, d)), Some((i2, d2))) => Some((i + i2, d + d2)),
            _ => None,
        };
    }
    stats
}

fn ours(set: &ChangeSet) -> BTreeMap<String, Option<(u32, u32)>> {
    set.files
        .iter()
        .map(|f| {
            let counts = (!f.binary).then_some((f.insertions, f.deletions));
            (f.path.clone(), counts)
        })
        .collect()
}

fn statuses(set: &ChangeSet) -> Vec<(&str, FileStatus)> {
    set.files
        .iter()
        .map(|f| (f.path.as_str(), f.status))
        .collect()
}

fn patch_text(set: &ChangeSet) -> String {
    String::from_utf8(set.patch.clone()).unwrap()
}

fn nothing(_: &str) -> bool {
    false
}

fn numbered(lines: std::ops::Range<u32>) -> String {
    lines.map(|i| format!("line {i}\n")).collect()
}

/// Bytes that compress badly, so the base85 runs over many lines.
fn noise(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

/// Builds A in a git repository, commits it, changes it into B and stages that; returns the
/// change set from A to B and the repository (inside the returned tempdir).
async fn staged(
    build: impl Fn(&Path),
    change: impl Fn(&Path),
) -> (ChangeSet, tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let store = LocalStore::new(tmp.path().join("blobs")).unwrap();
    let repo = tmp.path().join("repo");
    fs::create_dir(&repo).unwrap();
    build(&repo);
    git(&repo, &["init", "-q"]);
    write(&repo, ".git/info/exclude", ".baton\n");
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "A"]);
    let a = take(&store, &repo).await.unwrap().id;
    change(&repo);
    git(&repo, &["add", "-A"]);
    let b = take(&store, &repo).await.unwrap().id;
    let set = change_set(&store, Some(&a), &b).await.unwrap();
    (set, tmp, repo)
}
