//! Patches applied with real `git apply` (in a git checkout and a plain directory) turn
//! tree A into tree B.

use pretty_assertions::assert_eq;

use super::*;

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
