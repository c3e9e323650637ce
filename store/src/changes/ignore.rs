//! The ignore rules of a snapshot: its `.gitignore` and `.batonignore` files (outside
//! `.git`), read from the store, with git's semantics: a file's patterns apply to the paths
//! below its directory, the deepest file with a matching pattern decides (the last matching
//! line within it, so `!` re-includes), `.batonignore` lines count after `.gitignore` lines
//! of the same directory, and nothing below an ignored directory is re-included.

use std::collections::BTreeMap;

use ignore::{
    Match,
    gitignore::{Gitignore, GitignoreBuilder},
};

use super::{ChangesError, in_git_dir, parent};
use crate::{BlobStore, snapshot::Target};

/// Ignore files, in the order their lines apply.
const IGNORE_FILES: [&str; 2] = [".gitignore", ".batonignore"];

/// The ignore rules of one snapshot, by directory ("" = root).
#[derive(Debug, Default)]
pub(super) struct Rules {
    by_dir: BTreeMap<String, Gitignore>,
}

impl Rules {
    /// Reads the ignore files of the snapshot `targets`.
    pub(super) async fn load(
        store: &dyn BlobStore,
        targets: &BTreeMap<String, Target>,
    ) -> Result<Self, ChangesError> {
        let mut lines: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for name in IGNORE_FILES {
            for (path, target) in targets {
                let Target::File { blob, .. } = target else {
                    continue;
                };
                let file_name = path.rsplit('/').next().unwrap_or(path);
                if file_name != name || in_git_dir(path) {
                    continue;
                }
                let bytes = store.get(blob).await?;
                lines
                    .entry(parent(path).to_owned())
                    .or_default()
                    .extend(String::from_utf8_lossy(&bytes).lines().map(str::to_owned));
            }
        }
        let by_dir = lines
            .into_iter()
            .map(|(dir, lines)| {
                let mut builder = GitignoreBuilder::new(".");
                for line in &lines {
                    // Git skips patterns it cannot parse; so do we.
                    let _ = builder.add_line(None, line);
                }
                (dir, builder.build().unwrap_or_else(|_| Gitignore::empty()))
            })
            .collect();
        Ok(Self { by_dir })
    }

    /// Whether the file or link at `path` is ignored.
    pub(super) fn ignored(&self, path: &str) -> bool {
        if self.by_dir.is_empty() {
            return false;
        }
        let mut dirs: Vec<&str> = Vec::new();
        let mut dir = parent(path);
        while !dir.is_empty() {
            dirs.push(dir);
            dir = parent(dir);
        }
        // Top-down: an ignored directory hides everything below it.
        dirs.iter().rev().any(|d| self.decides(d, true)) || self.decides(path, false)
    }

    /// Whether the deepest ignore file with a pattern matching `path` ignores it.
    fn decides(&self, path: &str, is_dir: bool) -> bool {
        let mut dir = parent(path);
        loop {
            if let Some(rules) = self.by_dir.get(dir) {
                let relative = if dir.is_empty() {
                    path
                } else {
                    &path[dir.len() + 1..]
                };
                match rules.matched(relative, is_dir) {
                    Match::Ignore(_) => return true,
                    Match::Whitelist(_) => return false,
                    Match::None => {}
                }
            }
            if dir.is_empty() {
                return false;
            }
            dir = parent(dir);
        }
    }
}
