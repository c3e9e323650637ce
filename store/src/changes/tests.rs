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
    LocalStore, put_json,
    snapshot::{
        Entry, MANIFEST_VERSION, restore, take,
        test_support::{chmod, write},
    },
};

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

#[tokio::test]
async fn a_modified_text_file() {
    let set = check(
        |d| write(d, "f.txt", numbered(1..21)),
        |d| {
            let text = numbered(1..21)
                .replace("line 5\n", "line five\n")
                .replace("line 15\n", "");
            write(d, "f.txt", text + "line 21\n");
        },
        &nothing,
    )
    .await;
    assert_eq!(statuses(&set), vec![("f.txt", FileStatus::Modified)]);
    assert_eq!((set.insertions, set.deletions), (2, 2));
    let text = patch_text(&set);
    assert!(
        text.starts_with("diff --git a/f.txt b/f.txt\nindex "),
        "{text}"
    );
    assert!(text.contains(" 100644\n--- a/f.txt\n+++ b/f.txt\n@@ -2,7 +2,7 @@\n"));
    assert!(text.contains("@@ -12,9 +12,9 @@\n"), "{text}");
}

#[tokio::test]
async fn added_and_deleted_files_including_empty_ones() {
    let set = check(
        |d| {
            write(d, "old.txt", "going\naway\n");
            write(d, "was-empty", "");
            write(d, "kept.txt", "kept\n");
        },
        |d| {
            remove(d, "old.txt");
            remove(d, "was-empty");
            write(d, "new/x.txt", "fresh\n");
            write(d, "now-empty", "");
        },
        &nothing,
    )
    .await;
    assert_eq!(
        statuses(&set),
        vec![
            ("new/x.txt", FileStatus::Added),
            ("now-empty", FileStatus::Added),
            ("old.txt", FileStatus::Deleted),
            ("was-empty", FileStatus::Deleted),
        ]
    );
    assert_eq!((set.insertions, set.deletions), (1, 2));
    assert!(patch_text(&set).contains("new file mode 100644\nindex 0000000000000000000000000000000000000000..e69de29bb2d1d6434b8b29ae775ad8c2e48c5391\ndiff --git"));
}

#[tokio::test]
async fn missing_trailing_newlines_in_both_directions() {
    let set = check(
        |d| {
            write(d, "gains", "x\ny");
            write(d, "loses", "x\ny\n");
            write(d, "neither", "z");
            write(d, "created", "");
        },
        |d| {
            write(d, "gains", "x\ny\n");
            write(d, "loses", "x\ny");
            write(d, "neither", "w");
            write(d, "created", "no newline");
        },
        &nothing,
    )
    .await;
    let text = patch_text(&set);
    assert!(
        text.contains("@@ -1,2 +1,2 @@\n x\n-y\n\\ No newline at end of file\n+y\n"),
        "{text}"
    );
    assert!(text.contains(
        "@@ -1 +1 @@\n-z\n\\ No newline at end of file\n+w\n\\ No newline at end of file\n"
    ));
    assert!(text.contains("@@ -0,0 +1 @@\n+no newline\n\\ No newline at end of file\n"));
}

#[tokio::test]
async fn executable_bit_changes() {
    let set = check(
        |d| {
            write(d, "run.sh", "#!/bin/sh\necho run\n");
            write(d, "tool.sh", "#!/bin/sh\necho tool\n");
            chmod(d, "tool.sh", 0o755);
            write(d, "bin/new.sh", "");
        },
        |d| {
            chmod(d, "run.sh", 0o755);
            write(d, "tool.sh", "#!/bin/sh\necho tool v2\n");
            chmod(d, "tool.sh", 0o644);
            write(d, "bin/added.sh", "#!/bin/sh\n");
            chmod(d, "bin/added.sh", 0o755);
        },
        &nothing,
    )
    .await;
    assert_eq!(
        statuses(&set),
        vec![
            ("bin/added.sh", FileStatus::Added),
            ("run.sh", FileStatus::Mode),
            ("tool.sh", FileStatus::Modified),
        ]
    );
    let text = patch_text(&set);
    assert!(
        text.contains("diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\ndiff --git")
    );
    assert!(text.contains("new file mode 100755\n"));
}

#[tokio::test]
async fn symbolic_links_added_retargeted_and_type_changes() {
    let set = check(
        |d| {
            write(d, "f.txt", "f\n");
            link(d, "moves", "f.txt");
            write(d, "becomes-link", "was a file\n");
            link(d, "becomes-file", "f.txt");
        },
        |d| {
            link(d, "dir/added", "../f.txt");
            link(d, "moves", "elsewhere/g.txt");
            link(d, "becomes-link", "f.txt");
            remove(d, "becomes-file");
            write(d, "becomes-file", "now a file\n");
        },
        &nothing,
    )
    .await;
    assert_eq!(
        statuses(&set),
        vec![
            ("becomes-file", FileStatus::Type),
            ("becomes-link", FileStatus::Type),
            ("dir/added", FileStatus::Added),
            ("moves", FileStatus::Modified),
        ]
    );
    let text = patch_text(&set);
    assert!(text.contains("new file mode 120000\n"), "{text}");
    assert!(text.contains(
        "-f.txt\n\\ No newline at end of file\n+elsewhere/g.txt\n\\ No newline at end of file\n"
    ));
}

#[tokio::test]
async fn a_rewritten_file_and_scattered_edits_among_repeated_lines() {
    // A 20000-line rewrite took minutes with a plain Myers search over the lines.
    let old: String = (0..20_000).map(|i| format!("old {i}\n")).collect();
    let new: String = (0..20_000).map(|i| format!("new {i}\n")).collect();
    let repeated = |n: u32| -> String { (0..3000).map(|i| format!("{}\n", i % n)).collect() };
    let set = check(
        |d| {
            write(d, "rewritten", &old);
            write(d, "repeated", repeated(7));
            write(d, "sparse", numbered(0..3000));
        },
        |d| {
            write(d, "rewritten", &new);
            write(d, "repeated", repeated(5));
            let sparse: String = (0..3000)
                .filter(|i| i % 500 != 3)
                .map(|i| {
                    if i % 100 == 0 {
                        format!("changed {i}\n")
                    } else {
                        format!("line {i}\n")
                    }
                })
                .collect();
            write(d, "sparse", sparse);
        },
        &nothing,
    )
    .await;
    let counts: Vec<(u32, u32)> = set
        .files
        .iter()
        .map(|f| (f.insertions, f.deletions))
        .collect();
    assert_eq!(counts[1], (20_000, 20_000));
    assert_eq!(counts[2], (30, 36));
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

#[tokio::test]
async fn binary_files_added_modified_and_deleted() {
    let set = check(
        |d| {
            write(d, "data.bin", noise(3000, 7));
            write(d, "gone.bin", b"\0\x01\x02");
            write(d, "latin1.txt", b"caf\xe9\n");
        },
        |d| {
            let mut data = noise(3000, 7);
            data[1500] ^= 0xff;
            data.extend_from_slice(&noise(100, 9));
            write(d, "data.bin", data);
            remove(d, "gone.bin");
            write(d, "img.bin", noise(10_000, 3));
            write(d, "latin1.txt", b"caf\xe9 au lait\n");
        },
        &nothing,
    )
    .await;
    assert!(set.files.iter().all(|f| f.binary), "{:?}", set.files);
    assert_eq!((set.insertions, set.deletions), (0, 0));
    let text = patch_text(&set);
    assert_eq!(text.matches("GIT binary patch\n").count(), 4);
    assert!(text.contains("literal 0\nHc"), "{text}");
}

#[tokio::test]
async fn paths_with_spaces_and_non_ascii_names() {
    let set = check(
        |d| write(d, "dir with space/my file.txt", "one\n"),
        |d| {
            write(d, "dir with space/my file.txt", "one\ntwo\n");
            write(d, "new file.txt", "new\n");
            write(d, "na\u{ef}ve \"q\".txt", "quoted\n");
        },
        &nothing,
    )
    .await;
    assert_eq!(set.files.len(), 3);
    let text = patch_text(&set);
    assert!(
        text.contains("--- a/dir with space/my file.txt\t\n"),
        "{text}"
    );
    assert!(text.contains("diff --git \"a/na\\303\\257ve \\\"q\\\".txt\" "));
}

#[tokio::test]
async fn a_nested_directory_added_and_empty_directories_ignored() {
    let set = check(
        |d| write(d, "top.txt", "top\n"),
        |d| {
            write(d, "a/b/c/d.txt", "deep\n");
            write(d, "a/b/e.txt", "less deep\n");
            fs::create_dir_all(d.join("a/empty/inner")).unwrap();
        },
        &nothing,
    )
    .await;
    assert_eq!(
        statuses(&set),
        vec![
            ("a/b/c/d.txt", FileStatus::Added),
            ("a/b/e.txt", FileStatus::Added)
        ]
    );
}

#[tokio::test]
async fn files_and_directories_trade_places() {
    let set = check(
        |d| {
            write(d, "was-file", "a file\n");
            write(d, "was-dir/inner.txt", "inside\n");
            write(d, "was-dir/deeper/x", "x\n");
            write(d, "was-dir-ish", "sorts between\n");
        },
        |d| {
            remove(d, "was-file");
            write(d, "was-file/now-inside.txt", "moved in\n");
            fs::remove_dir_all(d.join("was-dir")).unwrap();
            write(d, "was-dir", "now a file\n");
        },
        &nothing,
    )
    .await;
    assert_eq!(
        statuses(&set),
        vec![
            ("was-dir", FileStatus::Added),
            ("was-dir/deeper/x", FileStatus::Deleted),
            ("was-dir/inner.txt", FileStatus::Deleted),
            ("was-file", FileStatus::Deleted),
            ("was-file/now-inside.txt", FileStatus::Added),
        ]
    );
}

#[tokio::test]
async fn ignored_paths_are_left_out() {
    let ignored = |p: &str| {
        p.starts_with("target/")
            || p.starts_with("crate/target/")
            || p == "x.log"
            || p == "foo.o"
            || p == "sub/local.txt"
            || p == "secret.env"
    };
    let set = check(
        |d| {
            write(d, ".gitignore", "*.o\n");
            write(d, "foo.o", "object\n");
            write(d, "src/main.rs", "fn main() {}\n");
        },
        |d| {
            write(d, ".gitignore", "*.o\ntarget/\n*.log\n!keep.log\n");
            write(d, ".batonignore", "secret.env\n");
            remove(d, "foo.o");
            write(d, "target/debug/app", noise(100, 1));
            write(d, "target/.rustc_info.json", "{}\n");
            write(d, "x.log", "noise\n");
            write(d, "keep.log", "kept\n");
            write(d, "secret.env", "TOKEN=x\n");
            write(d, "sub/.gitignore", "local.txt\n");
            write(d, "sub/local.txt", "mine\n");
            write(d, "sub/other.txt", "shared\n");
            write(d, "crate/.gitignore", "/target\n");
            write(d, "crate/Cargo.toml", "[package]\n");
            write(d, "crate/target/debug/app", "built\n");
        },
        &ignored,
    )
    .await;
    let paths: Vec<&str> = set.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            ".batonignore",
            ".gitignore",
            "crate/.gitignore",
            "crate/Cargo.toml",
            "keep.log",
            "sub/.gitignore",
            "sub/other.txt",
        ]
    );
    let text = patch_text(&set);
    assert!(!text.contains("target/debug") && !text.contains("secret.env\n+++"));
}

#[tokio::test]
async fn ignore_rules_agree_with_git() {
    let tmp = tempfile::tempdir().unwrap();
    let store = LocalStore::new(tmp.path().join("blobs")).unwrap();
    let d = tmp.path().join("tree");
    write(
        &d,
        ".gitignore",
        "*.log\n!keep.log\n/build\ndist/\n**/gen/*.rs\n# comment\n\\#hash\n",
    );
    for path in [
        "a.log",
        "keep.log",
        "sub/b.log",
        "sub/keep.log",
        "build/x",
        "src/build/y",
        "dist/z",
        "src/dist/w",
        "gen/a.rs",
        "src/gen/b.rs",
        "src/gen/c.txt",
        "#hash",
        "plain.txt",
        "sub/.gitignore",
        "sub/mine.txt",
        "sub/deep/mine.txt",
        "sub/deep/.gitignore",
        "sub/deep/c.log",
        "sub/deep/d.log",
        "dist/.gitignore",
        "dist/again.txt",
    ] {
        write(&d, path, "x\n");
    }
    write(&d, "sub/.gitignore", "mine.txt\n!b.log\n");
    write(&d, "sub/deep/.gitignore", "!mine.txt\n!c.log\n");
    write(&d, "dist/.gitignore", "!again.txt\n");
    link(&d, "link.log", "a.log");
    let id = take(&store, &d).await.unwrap().id;
    let set = change_set(&store, None, &id).await.unwrap();
    let ours: Vec<&str> = set.files.iter().map(|f| f.path.as_str()).collect();

    git(&d, &["init", "-q"]);
    write(&d, ".git/info/exclude", ".baton\n");
    let listed = git(&d, &["ls-files", "-z", "--others", "--exclude-standard"]);
    let mut theirs: Vec<&str> = listed
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| std::str::from_utf8(p).unwrap())
        .collect();
    theirs.sort_unstable();
    assert_eq!(ours, theirs);
    assert!(ours.contains(&"sub/b.log") && !ours.contains(&"dist/again.txt"));
}

#[tokio::test]
async fn git_internals_are_left_out() {
    let set = check(
        |d| {
            write(d, "f.txt", "v1\n");
            git(d, &["init", "-q"]);
            git(d, &["add", "f.txt"]);
            git(d, &["commit", "-q", "-m", "one"]);
            write(d, "vendor/lib/.git", "gitdir: ../../.git/modules/lib\n");
        },
        |d| {
            write(d, "f.txt", "v2\n");
            git(d, &["add", "f.txt"]);
            git(d, &["commit", "-q", "-m", "two"]);
            write(d, "vendor/lib/.git", "gitdir: elsewhere\n");
            write(d, "deep/.git/config", "[core]\n");
        },
        &nothing,
    )
    .await;
    assert_eq!(statuses(&set), vec![("f.txt", FileStatus::Modified)]);
}

#[tokio::test]
async fn no_changes_give_an_empty_change_set() {
    let set = check(
        |d| {
            write(d, "f.txt", "same\n");
            link(d, "l", "f.txt");
        },
        |d| fs::create_dir(d.join("new-empty-dir")).unwrap(),
        &nothing,
    )
    .await;
    assert_eq!(set, ChangeSet::default());
    assert_eq!(diffstat(&set.files), "");
}

#[tokio::test]
async fn from_the_empty_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let store = LocalStore::new(tmp.path().join("blobs")).unwrap();
    let work = tmp.path().join("work");
    write(&work, "a.txt", "a\nb\n");
    link(&work, "l", "a.txt");
    let id = take(&store, &work).await.unwrap().id;
    let set = change_set(&store, None, &id).await.unwrap();
    assert_eq!(
        statuses(&set),
        vec![("a.txt", FileStatus::Added), ("l", FileStatus::Added)]
    );
    let dir = tmp.path().join("empty");
    fs::create_dir(&dir).unwrap();
    fs::write(tmp.path().join("p"), &set.patch).unwrap();
    git(&dir, &["apply", "../p"]);
    assert_eq!(files(&dir, &nothing), files(&work, &nothing));
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

#[tokio::test]
async fn diffstat_matches_git_diff_stat() {
    let (set, _tmp, repo) = staged(
        |d| {
            write(d, "a.txt", numbered(1..6));
            write(d, "longer/name.rs", "x\n");
        },
        |d| {
            write(
                d,
                "a.txt",
                numbered(1..6).replace("line 2\n", "two\n") + "six\n",
            );
            remove(d, "longer/name.rs");
            write(d, "b", "");
        },
    )
    .await;
    let expected = " a.txt          | 3 ++-\n b              | 0\n longer/name.rs | 1 -\n \
                    3 files changed, 2 insertions(+), 2 deletions(-)\n";
    assert_eq!(diffstat(&set.files), expected);
    let git_stat = git(&repo, &["diff", "--cached", "--stat"]);
    assert_eq!(String::from_utf8(git_stat).unwrap(), expected);

    let binary = [FileDiff {
        path: "img.png".to_owned(),
        status: FileStatus::Added,
        insertions: 0,
        deletions: 0,
        binary: true,
    }];
    assert_eq!(
        diffstat(&binary),
        " img.png | Bin\n 1 file changed, 0 insertions(+), 0 deletions(-)\n"
    );
}

#[tokio::test]
async fn small_text_patches_are_byte_identical_to_git_diff() {
    // Hunks that start at line 1 (git adds no function context) and short files (git's
    // diff algorithm and ours agree line for line).
    let (set, _tmp, repo) = staged(
        |d| {
            write(d, "a.txt", numbered(1..6));
            write(d, "space dir/my file", "one\n");
            write(d, "run.sh", "#!/bin/sh\n");
            write(d, "tool.sh", "#!/bin/sh\necho 1\n");
            write(d, "eof", "x\ny");
            write(d, "gone", "bye\n");
            link(d, "l", "a.txt");
        },
        |d| {
            write(
                d,
                "a.txt",
                numbered(1..6).replace("line 2\n", "two\n") + "six\n",
            );
            write(d, "space dir/my file", "one\ntwo\n");
            chmod(d, "run.sh", 0o755);
            write(d, "tool.sh", "#!/bin/sh\necho 2\n");
            chmod(d, "tool.sh", 0o755);
            write(d, "eof", "x\ny\n");
            remove(d, "gone");
            link(d, "l", "space dir/my file");
            link(d, "new-link", "eof");
            write(d, "na\u{ef}ve.txt", "hi\n");
            write(d, "empty", "");
        },
    )
    .await;
    assert_eq!(set.files.len(), 10);
    let git_patch = git(&repo, &["diff", "--cached", "--full-index"]);
    assert_eq!(patch_text(&set), String::from_utf8(git_patch).unwrap());
}

#[tokio::test]
async fn bad_manifests_are_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let store = LocalStore::new(tmp.path().join("blobs")).unwrap();
    let blob = store.put(b"x".to_vec()).await.unwrap();
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        entries: [(
            "../escape".to_owned(),
            Entry::File {
                blob: blob.to_string(),
                size: 1,
                executable: false,
            },
        )]
        .into(),
    };
    let id = put_json(&store, &manifest).await.unwrap();
    let err = change_set(&store, None, &id).await.unwrap_err();
    assert!(matches!(err, ChangesError::BadManifest(_)), "{err}");
    assert!(err.to_string().contains("'..'"), "{err}");
    let out = tmp.path().join("out");
    let err = extract(&store, &id, &out, &|_| true).await.unwrap_err();
    assert!(matches!(err, ChangesError::BadManifest(_)), "{err}");
    assert!(!tmp.path().join("escape").exists());
}

#[tokio::test]
async fn extract_writes_only_the_matching_files() {
    let tmp = tempfile::tempdir().unwrap();
    let store = LocalStore::new(tmp.path().join("blobs")).unwrap();
    let work = tmp.path().join("work");
    write(&work, "README.md", "readme\n");
    write(&work, "src/a.rs", "a\n");
    write(&work, "src/deep/b.rs", "b\n");
    chmod(&work, "src/deep/b.rs", 0o755);
    link(&work, "src/link.rs", "a.rs");
    write(&work, "src/notes.txt", "notes\n");
    let id = take(&store, &work).await.unwrap().id;

    let out = tmp.path().join("out");
    write(&out, "keep.txt", "mine\n");
    write(&out, "src/a.rs", "stale\n");
    let glob = globset::Glob::new("src/**/*.rs").unwrap().compile_matcher();
    let extracted = extract(&store, &id, &out, &|p| glob.is_match(p))
        .await
        .unwrap();
    assert_eq!(extracted, Extracted { files: 3, bytes: 4 });
    assert_eq!(
        files(&out, &nothing),
        BTreeMap::from([
            ("keep.txt".to_owned(), "file: mine\\n".to_owned()),
            ("src/a.rs".to_owned(), "file: a\\n".to_owned()),
            ("src/deep/b.rs".to_owned(), "file (exec): b\\n".to_owned()),
            ("src/link.rs".to_owned(), "link -> a.rs".to_owned()),
        ])
    );

    let blocked = tmp.path().join("blocked");
    write(&blocked, "src", "a file where a directory goes\n");
    let err = extract(&store, &id, &blocked, &|p| glob.is_match(p))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("needs a directory"), "{err}");
    assert_eq!(
        fs::read_to_string(blocked.join("src")).unwrap(),
        "a file where a directory goes\n"
    );
}
