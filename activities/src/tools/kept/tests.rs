#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeSet, path::Path, time::Duration};

use baton_store::{LocalStore, get_json, snapshot};
use pretty_assertions::assert_eq;

use super::*;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    elsewhere: PathBuf,
    store: LocalStore,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("workspaces");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(&root).unwrap();
        let store = LocalStore::new(dir.path().join("blobs")).unwrap();
        Self {
            root,
            elsewhere,
            store,
            _dir: dir,
        }
    }

    fn kept(&self, budget_bytes: u64, idle: Duration) -> Arc<KeptWorkspaces> {
        Arc::new(KeptWorkspaces::new(
            self.root.clone(),
            KeptSettings {
                enabled: true,
                budget_bytes,
                idle,
            },
        ))
    }

    /// A tree `name` of `files` files of `size` bytes whose contents start with `tag`,
    /// snapshotted; its manifest.
    async fn tree(&self, name: &str, tag: &str, files: usize, size: usize) -> Manifest {
        let dir = self.root.join(name);
        write_files(&dir, tag, files, size);
        self.manifest_of(&dir).await
    }

    async fn manifest_of(&self, dir: &Path) -> Manifest {
        let taken = snapshot::take(&self.store, dir).await.unwrap();
        get_json(&self.store, &taken.id).await.unwrap()
    }

    /// A snapshot taken outside the root: what a new run starts from.
    async fn wanted(&self, tag: &str, files: usize, size: usize, changed: usize) -> BlobId {
        write_files(&self.elsewhere, tag, files, size);
        for i in 0..changed {
            std::fs::write(self.elsewhere.join(format!("f{i}")), format!("changed {i}")).unwrap();
        }
        snapshot::take(&self.store, &self.elsewhere)
            .await
            .unwrap()
            .id
    }
}

use baton_store::BlobId;

fn write_files(dir: &Path, tag: &str, files: usize, size: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..files {
        let mut content = format!("{tag} {i} ").into_bytes();
        content.resize(size.max(content.len()), b'.');
        std::fs::write(dir.join(format!("f{i}")), content).unwrap();
    }
}

#[tokio::test]
async fn a_new_run_takes_over_the_tree_that_shares_the_most_and_writes_only_what_differs() {
    let f = Fixture::new();
    f.tree("run-a", "same", 20, 4096).await;
    f.tree("run-b", "other", 20, 4096).await;
    let kept = f.kept(u64::MAX, Duration::from_secs(600));
    kept.finished("run-a");
    kept.finished("run-b");
    let wanted_id = f.wanted("same", 20, 4096, 2).await;
    let wanted: Manifest = get_json(&f.store, &wanted_id).await.unwrap();

    let _held = kept.hold("run-c").await;
    std::fs::create_dir_all(f.root.join("run-c")).unwrap();
    let reused = kept
        .reuse_for(&f.store, "run-c", &wanted, None, &BTreeSet::new())
        .await
        .expect("a tree reused");
    assert_eq!(reused.from, "run-a");
    assert_eq!(reused.matching_bytes, 18 * 4096);
    assert!(!f.root.join("run-a").exists(), "the tree moved");

    let restored = snapshot::restore(&f.store, &f.root.join("run-c"), &wanted_id)
        .await
        .unwrap();
    assert_eq!((restored.written, restored.unchanged), (2, 18));
    let again = f.manifest_of(&f.root.join("run-c")).await;
    assert_eq!(again, wanted);
}

#[tokio::test]
async fn a_tree_in_use_recently_used_or_busy_is_not_taken() {
    let f = Fixture::new();
    f.tree("run-a", "same", 5, 100).await;
    let wanted_id = f.wanted("same", 5, 100, 0).await;
    let wanted: Manifest = get_json(&f.store, &wanted_id).await.unwrap();
    let none = BTreeSet::new();

    let kept = f.kept(u64::MAX, Duration::from_secs(600));
    // Written just now and not finished: not idle.
    assert_eq!(
        kept.reuse_for(&f.store, "run-b", &wanted, None, &none)
            .await,
        None
    );

    let kept = f.kept(u64::MAX, Duration::ZERO);
    let held = kept.hold("run-a").await;
    assert_eq!(
        kept.reuse_for(&f.store, "run-b", &wanted, None, &none)
            .await,
        None
    );
    drop(held);
    let busy = BTreeSet::from(["run-a".to_owned()]);
    assert_eq!(
        kept.reuse_for(&f.store, "run-b", &wanted, None, &busy)
            .await,
        None
    );
    // A tree that holds nothing the run wants is not worth taking.
    let unrelated: Manifest = {
        let id = f.wanted("else", 5, 100, 0).await;
        get_json(&f.store, &id).await.unwrap()
    };
    assert_eq!(
        kept.reuse_for(&f.store, "run-b", &unrelated, None, &none)
            .await,
        None
    );
    assert!(
        kept.reuse_for(&f.store, "run-b", &wanted, None, &none)
            .await
            .is_some()
    );
}

#[tokio::test]
async fn a_tree_that_shares_more_than_the_current_one_changes_places_with_it() {
    let f = Fixture::new();
    let donor = f.tree("run-a", "same", 10, 1000).await;
    // run-b holds half of what it wants (a clone without its environment, say).
    let current = f.tree("run-b", "same", 5, 1000).await;
    let kept = f.kept(u64::MAX, Duration::from_secs(600));
    kept.finished("run-a");
    let _held = kept.hold("run-b").await;
    let reused = kept
        .reuse_for(&f.store, "run-b", &donor, Some(&current), &BTreeSet::new())
        .await
        .expect("reused");
    assert_eq!(reused.from, "run-a");
    // The trees changed places; neither trusts its old state.
    assert_eq!(
        std::fs::read_dir(f.root.join("run-a")).unwrap().count() - 1,
        5
    );
    assert_eq!(
        std::fs::read_dir(f.root.join("run-b")).unwrap().count() - 1,
        10
    );
    assert_eq!(snapshot::local_snapshot(&f.root.join("run-a")), None);
    assert_eq!(snapshot::local_snapshot(&f.root.join("run-b")), None);
    // No better tree than the one it has: nothing moves.
    assert_eq!(
        kept.reuse_for(
            &f.store,
            "run-b",
            &current,
            Some(&current),
            &BTreeSet::new()
        )
        .await,
        None
    );
}

fn names_under(root: &Path) -> BTreeSet<String> {
    std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

#[tokio::test]
async fn a_sweep_removes_idle_trees_least_recently_used_first_down_to_the_budget() {
    let f = Fixture::new();
    let names = ["run-a", "run-b", "run-c", "run-d"];
    for name in names {
        f.tree(name, name, 4, 64 << 10).await;
    }
    let one = baton_sandbox::tree_bytes(&f.root.join("run-a")).unwrap();
    // Room for two and a half trees; used in the order a, b, c, d, a.
    let kept = f.kept(2 * one + one / 2, Duration::ZERO);
    for name in names.into_iter().chain(["run-a"]) {
        drop(kept.hold(name).await);
        std::thread::sleep(Duration::from_millis(5));
    }
    let swept = kept.sweep(&BTreeSet::new());
    assert_eq!(swept.removed, vec!["run-b".to_owned(), "run-c".to_owned()]);
    assert_eq!(swept.freed_bytes, 2 * one);
    assert_eq!(swept.kept_bytes, 2 * one);
    assert_eq!(
        names_under(&f.root),
        BTreeSet::from(["run-a".into(), "run-d".into()])
    );

    // Held or busy trees stay whatever the budget.
    let kept = f.kept(0, Duration::ZERO);
    let held = kept.hold("run-d").await;
    let busy = BTreeSet::from(["run-a".to_owned()]);
    assert_eq!(kept.sweep(&busy).removed, Vec::<String>::new());
    drop(held);
    assert_eq!(kept.sweep(&busy).removed, vec!["run-d".to_owned()]);
    assert_eq!(names_under(&f.root), BTreeSet::from(["run-a".into()]));

    // Not idle yet: kept.
    let kept = f.kept(0, Duration::from_secs(600));
    drop(kept.hold("run-a").await);
    assert_eq!(kept.sweep(&BTreeSet::new()).removed, Vec::<String>::new());
    // Its run finished: idle at once.
    kept.finished("run-a");
    assert_eq!(
        kept.sweep(&BTreeSet::new()).removed,
        vec!["run-a".to_owned()]
    );

    // Without snapshots a tree is its run's only copy: nothing is ever removed.
    f.tree("run-e", "e", 1, 10).await;
    let off = Arc::new(KeptWorkspaces::new(
        f.root.clone(),
        KeptSettings {
            enabled: false,
            budget_bytes: 0,
            idle: Duration::ZERO,
        },
    ));
    assert_eq!(off.sweep(&BTreeSet::new()), Swept::default());
    assert!(f.root.join("run-e").exists());
}
