//! `extract`, and manifests that are refused.

use pretty_assertions::assert_eq;

use super::*;
use crate::{
    put_json,
    snapshot::{Entry, MANIFEST_VERSION},
};

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
    assert_eq!(
        extracted,
        Extracted {
            files: 3,
            bytes: 4,
            left_out: BTreeMap::new()
        }
    );
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

    // A link standing for a parent directory is not written through.
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    let linked = tmp.path().join("linked");
    link(&linked, "src", outside.to_str().unwrap());
    let err = extract(&store, &id, &linked, &|p| glob.is_match(p))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("needs a directory"), "{err}");
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);

    // Nor is a directory where the snapshot has a file replaced.
    let occupied = tmp.path().join("occupied");
    write(&occupied, "src/a.rs/inside", "mine\n");
    let err = extract(&store, &id, &occupied, &|p| p == "src/a.rs")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("a directory stands"), "{err}");
    assert!(occupied.join("src/a.rs/inside").exists());
}

/// Review #8: a run's tree may hold `.git/config` (a `core.fsmonitor` command runs on the
/// user's next `git status`) and hooks; `baton download` writes none of it, at any depth
/// and in any spelling, and says what it left out.
#[tokio::test]
async fn extract_writes_nothing_under_a_git_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let store = LocalStore::new(tmp.path().join("blobs")).unwrap();
    let config = store
        .put(b"[core]\n\tfsmonitor = \"touch pwned\"\n".to_vec())
        .await
        .unwrap();
    let hook = store
        .put(b"#!/bin/sh\ntouch pwned\n".to_vec())
        .await
        .unwrap();
    let ok = store.put(b"fine\n".to_vec()).await.unwrap();
    let file = |blob: &BlobId, executable: bool| Entry::File {
        blob: blob.to_string(),
        size: 4,
        executable,
    };
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        entries: [
            (".git", Entry::Dir),
            (".git/config", file(&config, false)),
            (".git/hooks", Entry::Dir),
            (".git/hooks/post-checkout", file(&hook, true)),
            ("a", Entry::Dir),
            ("a/.git", Entry::Dir),
            ("a/.git/config", file(&config, false)),
            ("a/ok.txt", file(&ok, false)),
            ("b", Entry::Dir),
            ("b/.GIT", Entry::Dir),
            ("b/.GIT/config", file(&config, false)),
            ("c", Entry::Dir),
            // A `.git` file (`gitdir: ...`) and a `.git` link are git's too.
            (
                "c/.git",
                Entry::Symlink {
                    target: "/tmp".to_owned(),
                },
            ),
            ("d", Entry::Dir),
            ("d/.g\u{200c}it", Entry::Dir),
            ("d/.g\u{200c}it/config", file(&config, false)),
            ("e", Entry::Dir),
            ("e/git~1", Entry::Dir),
            ("e/git~1/config", file(&config, false)),
            (".gitignore", file(&ok, false)),
            ("x.git", file(&ok, false)),
        ]
        .into_iter()
        .map(|(p, e)| (p.to_owned(), e))
        .collect(),
    };
    let id = put_json(&store, &manifest).await.unwrap();
    let out = tmp.path().join("out");
    let extracted = extract(&store, &id, &out, &|_| true).await.unwrap();
    assert_eq!(
        files(&out, &nothing),
        BTreeMap::from([
            (".gitignore".to_owned(), "file: fine\\n".to_owned()),
            ("a/ok.txt".to_owned(), "file: fine\\n".to_owned()),
            ("x.git".to_owned(), "file: fine\\n".to_owned()),
        ])
    );
    // `files` skips `.git` directories: look for every spelling on disk.
    for path in [
        ".git",
        "a/.git",
        "b/.GIT",
        "c/.git",
        "d/.g\u{200c}it",
        "e/git~1",
    ] {
        assert!(
            fs::symlink_metadata(out.join(path)).is_err(),
            "{path} was written"
        );
    }
    assert_eq!(
        extracted,
        Extracted {
            files: 3,
            bytes: 15,
            left_out: BTreeMap::from([
                (".git".to_owned(), 2),
                ("a/.git".to_owned(), 1),
                ("b/.GIT".to_owned(), 1),
                ("c/.git".to_owned(), 1),
                ("d/.g\u{200c}it".to_owned(), 1),
                ("e/git~1".to_owned(), 1),
            ]),
        }
    );
}

#[test]
fn git_dirs_are_found_at_any_depth_and_in_any_spelling() {
    for (path, git) in [
        (".git", Some(".git")),
        (".git/hooks/post-checkout", Some(".git")),
        ("a/.git/config", Some("a/.git")),
        ("a/b/.Git/x", Some("a/b/.Git")),
        ("a/.git./x", Some("a/.git.")),
        ("a/GIT~1/x", Some("a/GIT~1")),
        ("a/\u{feff}.git/x", Some("a/\u{feff}.git")),
        (".github/workflows/ci.yml", None),
        ("a/.gitignore", None),
        ("a/x.git/y", None),
        ("a/git/y", None),
    ] {
        assert_eq!(git_dir_of(path), git, "{path}");
    }
}
