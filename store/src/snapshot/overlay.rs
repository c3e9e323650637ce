//! Environment overlays: what a setup added to a tree, as a manifest of its own,
//! and that overlay laid over another tree (a later commit with the same cache key).
//!
//! An overlay holds every entry of the tree after setup that the tree before it lacks or has
//! differently, with the directories above them. Files setup deleted are not recorded: laid
//! over a tree, an overlay only adds and replaces.

use std::collections::BTreeMap;

use super::{Entry, MANIFEST_VERSION, Manifest};

/// The entries of `after` that `before` lacks or has differently, with their parent
/// directories.
pub fn overlay_of(before: &Manifest, after: &Manifest) -> Manifest {
    let mut entries = BTreeMap::new();
    for (path, entry) in &after.entries {
        if before.entries.get(path) == Some(entry) {
            continue;
        }
        let mut parent = path.as_str();
        while let Some((up, _)) = parent.rsplit_once('/') {
            entries.insert(up.to_owned(), Entry::Dir);
            parent = up;
        }
        entries.insert(path.clone(), entry.clone());
    }
    Manifest {
        version: MANIFEST_VERSION,
        entries,
    }
}

/// `base` with `overlay` laid over it: the overlay's entries win; whatever of `base` sits
/// under a path the overlay makes a file or a link is dropped, so the result stays a tree.
pub fn apply_overlay(base: &Manifest, overlay: &Manifest) -> Manifest {
    let mut entries = base.entries.clone();
    for (path, entry) in &overlay.entries {
        if !matches!(entry, Entry::Dir) {
            let prefix = format!("{path}/");
            let below: Vec<String> = entries
                .range(prefix.clone()..)
                .take_while(|(p, _)| p.starts_with(&prefix))
                .map(|(p, _)| p.clone())
                .collect();
            for p in below {
                entries.remove(&p);
            }
        }
        entries.insert(path.clone(), entry.clone());
    }
    Manifest {
        version: MANIFEST_VERSION,
        entries,
    }
}

/// Files and their total size in `manifest`.
pub fn file_stats(manifest: &Manifest) -> (usize, u64) {
    manifest
        .entries
        .values()
        .fold((0, 0), |(n, bytes), e| match e {
            Entry::File { size, .. } => (n + 1, bytes + size),
            _ => (n, bytes),
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use pretty_assertions::assert_eq;

    use super::*;
    use crate::snapshot::check_manifest;

    fn file(blob: char) -> Entry {
        Entry::File {
            blob: blob.to_string().repeat(64),
            size: 1,
            executable: false,
        }
    }

    fn manifest(entries: &[(&str, Entry)]) -> Manifest {
        Manifest {
            version: MANIFEST_VERSION,
            entries: entries
                .iter()
                .map(|(p, e)| ((*p).to_owned(), e.clone()))
                .collect(),
        }
    }

    #[test]
    fn an_overlay_is_what_setup_added_or_changed_with_its_directories() {
        let before = manifest(&[
            ("lock", file('a')),
            ("src", Entry::Dir),
            ("src/m.js", file('b')),
        ]);
        let after = manifest(&[
            ("lock", file('a')),
            ("src", Entry::Dir),
            ("src/m.js", file('c')),
            ("node_modules", Entry::Dir),
            ("node_modules/x", Entry::Dir),
            ("node_modules/x/i.js", file('d')),
        ]);
        let overlay = overlay_of(&before, &after);
        let paths: Vec<&str> = overlay.entries.keys().map(String::as_str).collect();
        assert_eq!(
            paths,
            [
                "node_modules",
                "node_modules/x",
                "node_modules/x/i.js",
                "src",
                "src/m.js"
            ]
        );
        assert!(check_manifest(overlay).is_ok());
    }

    #[test]
    fn an_overlay_laid_over_a_later_tree_adds_and_replaces_and_stays_a_tree() {
        let later = manifest(&[
            ("lock", file('a')),
            ("new.txt", file('1')),
            ("node_modules", Entry::Dir),
            ("node_modules/old", file('2')),
            ("out", Entry::Dir),
            ("out/stale", file('3')),
        ]);
        let overlay = manifest(&[
            ("node_modules", Entry::Dir),
            ("node_modules/x.js", file('d')),
            ("out", file('f')),
        ]);
        let merged = apply_overlay(&later, &overlay);
        let paths: Vec<&str> = merged.entries.keys().map(String::as_str).collect();
        assert_eq!(
            paths,
            [
                "lock",
                "new.txt",
                "node_modules",
                "node_modules/old",
                "node_modules/x.js",
                "out"
            ]
        );
        assert_eq!(merged.entries["out"], file('f'));
        assert!(check_manifest(merged.clone()).is_ok());
        assert_eq!(file_stats(&merged), (5, 5));
    }
}
