//! Tests of [`upload_dir`] on real trees, a real [`LocalStore`] and real git.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    ffi::OsStr,
    os::unix::{ffi::OsStrExt, fs::symlink, net::UnixListener},
    process::Command,
};

use pretty_assertions::assert_eq;

use super::*;
use crate::{
    LocalStore, get_json,
    snapshot::{
        Manifest, restore,
        test_support::{chmod, tree, write},
    },
};

/// Every ignored or outside file's content starts with this; no blob may hold it.
const MARKER: &str = "NOT-FOR-THE-STORE-5d1c";

/// Every file under `dir`, recursively, as (path, bytes).
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for item in fs::read_dir(&dir).unwrap() {
            let path = item.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((path.clone(), fs::read(&path).unwrap()));
            }
        }
    }
    out
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|item| item.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn store_in(base: &Path) -> LocalStore {
    LocalStore::new(base.join("store")).unwrap()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// A tree with ignore rules of every kind, a `.git` directory and file, an executable, links
/// inside and out, an empty directory, a socket and a name that is not UTF-8.
fn ignored_tree(src: &Path) {
    write(src, ".gitignore", "target/\n*.log\n!keep.log\n.env\n");
    write(src, ".batonignore", "secrets/\n!notes.log\n");
    write(src, ".git/HEAD", format!("{MARKER} git dir\n"));
    write(src, ".git/info/exclude", "excluded.txt\n");
    write(src, "excluded.txt", format!("{MARKER} excluded\n"));
    write(src, ".env", format!("{MARKER} env\n"));
    write(src, "target/debug/out", format!("{MARKER} target\n"));
    write(src, "app.log", format!("{MARKER} log\n"));
    write(src, "keep.log", "kept log\n");
    write(src, "notes.log", "re-included by .batonignore\n");
    write(src, "secrets/key", format!("{MARKER} secret\n"));
    write(src, "sub/.gitignore", "local.txt\n");
    write(src, "sub/local.txt", format!("{MARKER} nested\n"));
    write(src, "sub/code.rs", "fn main() {}\n");
    write(src, "sub/deeper/.git", format!("gitdir: {MARKER}\n"));
    write(src, "sub/deeper/x.txt", "x\n");
    write(src, "sub/.baton/kept", "only the root .baton is special\n");
    write(src, ".baton/state", format!("{MARKER} local state\n"));
    write(src, "bin/run.sh", "#!/bin/sh\necho hi\n");
    chmod(src, "bin/run.sh", 0o755);
    fs::create_dir_all(src.join("empty")).unwrap();
    symlink("sub/code.rs", src.join("link")).unwrap();
    symlink("../outside.txt", src.join("out")).unwrap();
    symlink("..", src.join("up")).unwrap();
    fs::write(src.join(OsStr::from_bytes(b"bad\xffname")), "not utf-8\n").unwrap();
    let _socket = UnixListener::bind(src.join("sock")).unwrap();
}

#[tokio::test]
async fn the_upload_restores_to_the_tree_without_what_is_ignored() {
    let base = tempfile::tempdir().unwrap();
    let src = base.path().join("src");
    ignored_tree(&src);
    fs::write(
        base.path().join("outside.txt"),
        format!("{MARKER} outside\n"),
    )
    .unwrap();
    let store = store_in(base.path());
    let before = names(&src);

    let uploaded = upload_dir(&store, &src, &UploadOptions::default())
        .await
        .unwrap();

    let dst = base.path().join("dst");
    restore(&store, &dst, &uploaded.id).await.unwrap();
    let expected: BTreeMap<String, String> = [
        (".batonignore", "file: secrets/\n!notes.log\n"),
        (".gitignore", "file: target/\n*.log\n!keep.log\n.env\n"),
        ("bin", "dir"),
        ("bin/run.sh", "file (exec): #!/bin/sh\necho hi\n"),
        ("empty", "dir"),
        ("keep.log", "file: kept log\n"),
        ("link", "link -> sub/code.rs"),
        ("notes.log", "file: re-included by .batonignore\n"),
        ("out", "link -> ../outside.txt"),
        ("sub", "dir"),
        ("sub/.baton", "dir"),
        ("sub/.baton/kept", "file: only the root .baton is special\n"),
        ("sub/.gitignore", "file: local.txt\n"),
        ("sub/code.rs", "file: fn main() {}\n"),
        ("sub/deeper", "dir"),
        ("sub/deeper/x.txt", "file: x\n"),
        ("up", "link -> .."),
    ]
    .into_iter()
    .map(|(p, d)| (p.to_owned(), d.to_owned()))
    .collect();
    assert_eq!(tree(&dst), expected);

    let files = expected.values().filter(|d| d.starts_with("file")).count();
    let total: u64 = [
        ".batonignore",
        ".gitignore",
        "bin/run.sh",
        "keep.log",
        "notes.log",
        "sub/.baton/kept",
        "sub/.gitignore",
        "sub/code.rs",
        "sub/deeper/x.txt",
    ]
    .iter()
    .map(|p| fs::metadata(src.join(p)).unwrap().len())
    .sum();
    assert_eq!(
        (uploaded.files, uploaded.total_bytes),
        (files, total),
        "{uploaded:?}"
    );
    assert_eq!((uploaded.uploaded, uploaded.uploaded_bytes), (files, total));
    assert_eq!(uploaded.skipped, vec!["bad\u{fffd}name", "sock"]);

    let blobs = files_under(store.root());
    assert_eq!(blobs.len(), files + 1, "the file blobs and the manifest");
    for (path, bytes) in blobs {
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(MARKER), "{}: {text}", path.display());
    }
    assert_eq!(names(&src), before, "nothing written into the directory");
    assert_eq!(names(&src.join(LOCAL_DIR)), vec!["state"]);
}

#[tokio::test]
async fn a_second_upload_sends_only_the_changed_file() {
    let base = tempfile::tempdir().unwrap();
    let src = base.path().join("src");
    write(&src, "a.txt", "a\n");
    write(&src, "b/c.txt", "c\n");
    write(&src, "b/d.txt", "same\n");
    write(&src, "e.txt", "same\n");
    let store = store_in(base.path());
    let options = UploadOptions::default();
    let first = upload_dir(&store, &src, &options).await.unwrap();
    assert_eq!(
        (first.files, first.uploaded),
        (4, 3),
        "two files share a blob"
    );

    write(&src, "b/c.txt", "changed!\n");
    let second = upload_dir(&store, &src, &options).await.unwrap();
    assert_ne!(second.id, first.id);
    assert_eq!((second.uploaded, second.uploaded_bytes), (1, 9));
    assert_eq!((second.files, second.total_bytes), (4, 2 + 9 + 5 + 5));

    let third = upload_dir(&store, &src, &options).await.unwrap();
    assert_eq!((third.id, third.uploaded), (second.id.clone(), 0));
    let manifest: Manifest = get_json(&store, &second.id).await.unwrap();
    assert_eq!(
        manifest.entries.get("b/c.txt"),
        Some(&Entry::File {
            blob: BlobId::of(b"changed!\n").to_string(),
            size: 9,
            executable: false,
        })
    );
}

#[tokio::test]
async fn over_the_limit_nothing_is_uploaded_and_the_largest_paths_are_named() {
    let base = tempfile::tempdir().unwrap();
    let src = base.path().join("src");
    write(&src, "data/big.bin", "x".repeat(80));
    write(&src, "a.txt", "a".repeat(30));
    write(&src, "b.txt", "b");
    write(&src, "ignored.bin", "i".repeat(500));
    write(&src, ".gitignore", "ignored.bin\n");
    let store = store_in(base.path());
    let options = UploadOptions {
        max_total_bytes: 100,
    };

    let err = upload_dir(&store, &src, &options).await.unwrap_err();
    let message = err.to_string();
    let UploadError::TooLarge {
        total,
        limit,
        largest,
    } = err
    else {
        panic!("expected TooLarge, got {err:?}");
    };
    assert_eq!((total, limit), (80 + 30 + 1 + 12, 100));
    assert_eq!(largest[0], ("data/big.bin".to_owned(), 80));
    assert_eq!(largest.len(), 4);
    assert!(message.contains("data/big.bin (80 B)"), "{message}");
    assert!(message.contains("--max-upload-size"), "{message}");
    assert!(message.contains(".batonignore"), "{message}");
    assert_eq!(files_under(store.root()), vec![], "the store stays empty");

    let fits = UploadOptions {
        max_total_bytes: 123,
    };
    upload_dir(&store, &src, &fits).await.unwrap();
}

#[tokio::test]
async fn a_missing_directory_or_a_file_is_refused_clearly() {
    let base = tempfile::tempdir().unwrap();
    let store = store_in(base.path());
    let options = UploadOptions::default();

    let missing = base.path().join("nope");
    let err = upload_dir(&store, &missing, &options).await.unwrap_err();
    assert!(matches!(err, UploadError::NotADirectory { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: no such directory; pass the directory to upload (e.g. `.`)",
            missing.display()
        )
    );

    let file = base.path().join("file.txt");
    fs::write(&file, "hi").unwrap();
    let err = upload_dir(&store, &file, &options).await.unwrap_err();
    assert!(matches!(err, UploadError::NotADirectory { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: not a directory; pass the directory to upload (e.g. `.`), not a file",
            file.display()
        )
    );
}

#[tokio::test]
async fn a_pattern_that_does_not_parse_stops_the_upload() {
    let base = tempfile::tempdir().unwrap();
    let src = base.path().join("src");
    write(&src, "sub/.batonignore", "secret[z-a]\n");
    write(&src, "sub/secret[", "kept out\n");
    let store = store_in(base.path());

    let err = upload_dir(&store, &src, &UploadOptions::default())
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, UploadError::IgnoreRules { .. }), "{err:?}");
    assert!(message.contains(".batonignore"), "{message}");
    assert!(message.contains("fix or remove the pattern"), "{message}");
    assert_eq!(files_under(store.root()), vec![]);
}

#[tokio::test]
async fn the_commit_of_a_git_work_tree_is_recorded() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    write(&repo, "lib.rs", "pub fn f() {}\n");
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    let head = git(&repo, &["rev-parse", "HEAD"]);
    write(&repo, "lib.rs", "pub fn f() { todo!() }\n");
    write(&repo, "private.txt", format!("{MARKER} excluded\n"));
    fs::write(repo.join(".git/info/exclude"), "private.txt\n").unwrap();
    let store = store_in(base.path());
    let options = UploadOptions::default();

    let uploaded = upload_dir(&store, &repo, &options).await.unwrap();
    assert_eq!(uploaded.commit.as_deref(), Some(head.as_str()));
    let manifest: Manifest = get_json(&store, &uploaded.id).await.unwrap();
    assert_eq!(
        manifest.entries,
        [(
            "lib.rs".to_owned(),
            Entry::File {
                blob: BlobId::of(b"pub fn f() { todo!() }\n").to_string(),
                size: 23,
                executable: false,
            }
        )]
        .into(),
        "the working tree, uncommitted change included, without .git or excluded files"
    );

    let plain = base.path().join("plain");
    write(&plain, "a.txt", "a\n");
    let uploaded = upload_dir(&store, &plain, &options).await.unwrap();
    assert_eq!(uploaded.commit, None);

    let fresh = base.path().join("fresh");
    write(&fresh, "a.txt", "a\n");
    git(&fresh, &["init", "-q"]);
    let uploaded = upload_dir(&store, &fresh, &options).await.unwrap();
    assert_eq!(uploaded.commit, None, "a repository without a commit yet");
}

#[test]
fn paths_are_relative_to_the_directory_as_given() {
    assert_eq!(
        relative(Path::new("."), Path::new("./a/b")).as_deref(),
        Some("a/b")
    );
    assert_eq!(
        relative(Path::new("/x/y"), Path::new("/x/y/c")).as_deref(),
        Some("c")
    );
    assert_eq!(relative(Path::new("/x/y"), Path::new("/x/y")), None);
}
