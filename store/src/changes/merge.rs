//! A change set landed on another tree: a subagent's changes (its starting snapshot to its
//! final one) merged into its parent's workspace as the parent has it now, file by file.
//!
//! Three-way, at file level: a path the child changed takes the child's version when the
//! parent still has the starting version (or already has the child's); when the parent
//! changed it too, differently, the path is a conflict and nothing lands. Paths the child's
//! change set leaves out (`.git/`, ignored files) are not merged, so the parent's view of the
//! change is exactly what `baton diff` of the child shows.

use std::collections::BTreeMap;

use super::{ChangesError, checked, ignore, in_git_dir, parent};
use crate::{
    BlobStore, get_json,
    snapshot::{Entry, MANIFEST_VERSION, Manifest, SnapshotId, Target},
};

/// A tree's entries by path, as in a [`Manifest`].
pub type Entries = BTreeMap<String, Entry>;

/// A change set that landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// The merged tree.
    pub snapshot: SnapshotId,
    /// Paths whose entry the merge changed in the target tree.
    pub changed: Vec<String>,
}

/// Why a change set did not land.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    /// Paths both sides changed differently; nothing was merged.
    #[error("conflicting changes to {}", .0.join(", "))]
    Conflicts(Vec<String>),
    /// A snapshot could not be read, or is malformed.
    #[error("{0}")]
    Changes(#[from] ChangesError),
}

/// Lands the change from `base` to `theirs` on `into` (`None`: the empty tree) and stores the
/// merged tree. Nothing is stored when it does not land.
pub async fn merge(
    store: &dyn BlobStore,
    into: Option<&SnapshotId>,
    base: Option<&SnapshotId>,
    theirs: &SnapshotId,
) -> Result<Merged, MergeError> {
    let (current, _) = load(store, into).await?;
    let (old, old_targets) = load(store, base).await?;
    let (new, new_targets) = load(store, Some(theirs)).await?;
    let rules = ignore::Rules::load(store, &new_targets).await?;
    let old_rules = ignore::Rules::load(store, &old_targets).await?;
    let skip = |path: &str, now: Option<&Entry>| {
        in_git_dir(path)
            || match now {
                Some(_) => rules.ignored(path),
                None => old_rules.ignored(path),
            }
    };
    let (entries, changed) =
        three_way(&current, &old, &new, skip).map_err(MergeError::Conflicts)?;
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        entries,
    };
    let bytes = serde_json::to_vec(&manifest)
        .map_err(|e| ChangesError::BadManifest(format!("cannot encode the merged tree: {e}")))?;
    let snapshot = store.put(bytes).await.map_err(ChangesError::from)?;
    Ok(Merged { snapshot, changed })
}

/// The merged entries and the paths that changed in `current`, or the conflicting paths.
/// `skip(path, theirs)` leaves a path the change set does not carry as `current` has it.
pub fn three_way(
    current: &Entries,
    base: &Entries,
    theirs: &Entries,
    skip: impl Fn(&str, Option<&Entry>) -> bool,
) -> Result<(Entries, Vec<String>), Vec<String>> {
    let mut merged = current.clone();
    let mut changed = Vec::new();
    let mut conflicts = Vec::new();
    let paths: std::collections::BTreeSet<&String> = base.keys().chain(theirs.keys()).collect();
    for path in paths {
        let (was, now) = (base.get(path), theirs.get(path));
        if was == now || skip(path, now) {
            continue;
        }
        let here = current.get(path);
        if here == now {
            continue;
        }
        if here != was {
            conflicts.push(path.clone());
            continue;
        }
        match now {
            Some(entry) => merged.insert(path.clone(), entry.clone()),
            None => merged.remove(path),
        };
        changed.push(path.clone());
    }
    // A directory the change removed may still hold what the other side added there.
    for path in merged.keys() {
        let dir = parent(path);
        if !dir.is_empty() && !matches!(merged.get(dir), Some(Entry::Dir)) {
            conflicts.push(dir.to_owned());
        }
    }
    if conflicts.is_empty() {
        Ok((merged, changed))
    } else {
        conflicts.sort();
        conflicts.dedup();
        Err(conflicts)
    }
}

/// The entries of snapshot `id` as stored (`None`: the empty tree) and validated (for the
/// ignore rules).
async fn load(
    store: &dyn BlobStore,
    id: Option<&SnapshotId>,
) -> Result<(Entries, BTreeMap<String, Target>), ChangesError> {
    let Some(id) = id else {
        return Ok(Default::default());
    };
    let manifest: Manifest = get_json(store, id).await?;
    let entries = manifest.entries.clone();
    Ok((entries, checked(id, manifest)?))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::BlobId;

    fn file(content: &str) -> Entry {
        Entry::File {
            blob: BlobId::of(content.as_bytes()).to_string(),
            size: content.len() as u64,
            executable: false,
        }
    }

    fn tree(entries: &[(&str, Option<&str>)]) -> BTreeMap<String, Entry> {
        entries
            .iter()
            .map(|(p, c)| (p.to_string(), c.map_or(Entry::Dir, file)))
            .collect()
    }

    fn no_skip(_: &str, _: Option<&Entry>) -> bool {
        false
    }

    #[test]
    fn two_children_from_one_base_both_land() {
        let base = tree(&[("README", Some("hi"))]);
        let first = tree(&[("README", Some("hi")), ("a.txt", Some("a"))]);
        let second = tree(&[
            ("README", Some("hi")),
            ("src", None),
            ("src/b.rs", Some("b")),
        ]);
        let (after_first, changed) = three_way(&base, &base, &first, no_skip).unwrap();
        assert_eq!(changed, vec!["a.txt"]);
        let (both, changed) = three_way(&after_first, &base, &second, no_skip).unwrap();
        assert_eq!(changed, vec!["src", "src/b.rs"]);
        assert_eq!(
            both,
            tree(&[
                ("README", Some("hi")),
                ("a.txt", Some("a")),
                ("src", None),
                ("src/b.rs", Some("b"))
            ])
        );
    }

    #[test]
    fn the_same_change_on_both_sides_is_not_a_conflict() {
        let base = tree(&[("f", Some("1"))]);
        let both = tree(&[("f", Some("2"))]);
        let (merged, changed) = three_way(&both, &base, &both, no_skip).unwrap();
        assert_eq!(merged, both);
        assert!(changed.is_empty());
    }

    #[test]
    fn different_changes_to_one_file_conflict_and_nothing_lands() {
        let base = tree(&[("f", Some("1")), ("g", Some("1"))]);
        let parent = tree(&[("f", Some("parent")), ("g", Some("1"))]);
        let child = tree(&[("f", Some("child")), ("g", Some("2"))]);
        assert_eq!(
            three_way(&parent, &base, &child, no_skip).unwrap_err(),
            vec!["f"]
        );
        // A deletion against an edit is a conflict too.
        let deleted = tree(&[("g", Some("1"))]);
        assert_eq!(
            three_way(&parent, &base, &deleted, no_skip).unwrap_err(),
            vec!["f"]
        );
    }

    #[test]
    fn a_removed_directory_that_gained_a_file_on_the_other_side_conflicts() {
        let base = tree(&[("d", None), ("d/old", Some("x"))]);
        let parent = tree(&[("d", None), ("d/old", Some("x")), ("d/new", Some("y"))]);
        let child = tree(&[]);
        assert_eq!(
            three_way(&parent, &base, &child, no_skip).unwrap_err(),
            vec!["d"]
        );
    }

    #[test]
    fn skipped_paths_stay_as_the_target_has_them() {
        let base = tree(&[]);
        let child = tree(&[
            ("target", None),
            ("target/out", Some("bin")),
            ("x", Some("1")),
        ]);
        let skip = |p: &str, _: Option<&Entry>| p.starts_with("target");
        let (merged, changed) = three_way(&base, &base, &child, skip).unwrap();
        assert_eq!(merged, tree(&[("x", Some("1"))]));
        assert_eq!(changed, vec!["x"]);
    }
}
