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
