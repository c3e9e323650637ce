//! The workspaces a worker keeps. Every run's tree lives in
//! `<workspace_root>/<run>`; with snapshots on, the blob store holds each run's state and a
//! tree is only a local copy, so a worker may reuse or remove one that no activity holds:
//!
//! - **reuse**: a run whose workspace is fresh (a new run, or a run new to this worker) takes
//!   over the idle tree that shares the most bytes with its snapshot, and the restore then
//!   writes only the files that differ (`ensure_snapshot`, and a cached environment laid over
//!   a clone, `workspace/environment.rs`). The trees change places (`RENAME_EXCHANGE`), so
//!   nothing is deleted on the way; the local snapshot state of both is forgotten, since a
//!   run's tools may have written it and no other run may trust it: the restore hashes every
//!   file of the tree it takes over.
//! - **removal**: the idle trees beyond `[workspace_cache_bytes]` go, least recently used
//!   first ([`KeptWorkspaces::sweep`], every 30 s and after each run's end).
//!
//! A tree is idle once its run finished (`collect_changes`) or nothing used it for
//! `workspace_idle_secs`. An activity holds its run's tree for its whole attempt
//! ([`KeptWorkspaces::hold`]); the pool only ever *tries* to take a tree, so it never waits on
//! a run. A run whose tree was taken restores from the blob store when it goes on, as after a
//! move to another worker. Trees with a live `sandbox = true` MCP server are never taken.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant, SystemTime},
};

use baton_store::{
    BlobStore, get_json,
    snapshot::{self, Entry, Manifest},
};
use tokio::sync::{Notify, OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};
use tracing::{info, warn};

/// `workspace_cache_bytes` unless set: the disk the kept trees of a worker may take.
pub const DEFAULT_CACHE_BYTES: u64 = 10 << 30;
/// `workspace_idle_secs` unless set.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(600);
/// How often the kept trees are checked against the budget without being asked to.
const SWEEP_EVERY: Duration = Duration::from_secs(30);
/// Trees whose manifests are compared for a reuse (the most recently used idle ones).
const CANDIDATES: usize = 8;
/// The prefix of a tree on its way out (renamed, then removed).
const TRASH_PREFIX: &str = ".baton-trash-";

/// How a worker keeps workspaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptSettings {
    /// Whether trees may be reused or removed at all: only with workspace snapshots (without
    /// them a tree is a run's only copy, e.g. on a shared volume).
    pub enabled: bool,
    /// The disk the trees may take; idle ones beyond it are removed, least recently used first.
    pub budget_bytes: u64,
    /// A tree unused this long is idle (one whose run finished is idle at once).
    pub idle: Duration,
}

impl Default for KeptSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            budget_bytes: DEFAULT_CACHE_BYTES,
            idle: DEFAULT_IDLE,
        }
    }
}

/// What a reuse took over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reused {
    /// The tree's directory name before (another run's workspace).
    pub(crate) from: String,
    /// Bytes of files the tree already had as the snapshot wants them.
    pub(crate) matching_bytes: u64,
}

/// What a sweep removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Swept {
    pub(crate) removed: Vec<String>,
    pub(crate) freed_bytes: u64,
    /// The trees' disk use after the sweep.
    pub(crate) kept_bytes: u64,
}

#[derive(Default)]
struct State {
    /// One lock per tree (by directory name): activities read-hold it, the pool try-writes.
    slots: BTreeMap<String, Arc<RwLock<()>>>,
    last_used: BTreeMap<String, Instant>,
    finished: BTreeSet<String>,
    /// A tree's disk use, with the state file time it was measured at.
    sizes: BTreeMap<String, (Option<SystemTime>, u64)>,
}

/// The trees under a worker's workspace root (see the module docs).
pub struct KeptWorkspaces {
    root: PathBuf,
    settings: KeptSettings,
    state: Mutex<State>,
    wake: Notify,
}

/// An activity's hold on its run's tree; the tree counts as used when it is dropped.
pub(crate) struct InUse {
    name: String,
    kept: Arc<KeptWorkspaces>,
    _guard: OwnedRwLockReadGuard<()>,
}

impl Drop for InUse {
    fn drop(&mut self) {
        self.kept
            .lock()
            .last_used
            .insert(self.name.clone(), Instant::now());
    }
}

impl std::fmt::Debug for KeptWorkspaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptWorkspaces")
            .field("root", &self.root)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl KeptWorkspaces {
    pub(crate) fn new(root: PathBuf, settings: KeptSettings) -> Self {
        Self {
            root,
            settings,
            state: Mutex::default(),
            wake: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn slot(state: &mut State, name: &str) -> Arc<RwLock<()>> {
        state
            .slots
            .retain(|n, slot| n == name || Arc::strong_count(slot) > 1);
        state.slots.entry(name.to_owned()).or_default().clone()
    }

    /// Holds the tree `name` for an activity of its run (waits while the pool moves it).
    pub(crate) async fn hold(self: &Arc<Self>, name: &str) -> InUse {
        let slot = {
            let mut state = self.lock();
            state.finished.remove(name);
            Self::slot(&mut state, name)
        };
        InUse {
            name: name.to_owned(),
            kept: self.clone(),
            _guard: slot.read_owned().await,
        }
    }

    /// The run of tree `name` has ended: its tree is idle now; a sweep comes soon.
    pub(crate) fn finished(&self, name: &str) {
        self.lock().finished.insert(name.to_owned());
        self.wake.notify_one();
    }

    /// The tree `name` exclusively, if nothing holds it and it is idle.
    fn take_idle(&self, name: &str) -> Option<OwnedRwLockWriteGuard<()>> {
        let mut state = self.lock();
        let idle = state.finished.contains(name)
            || match state.last_used.get(name) {
                Some(at) => at.elapsed() >= self.settings.idle,
                // Not used since this worker started: by the time its state was written.
                None => state_time(&self.root.join(name))
                    .and_then(|t| t.elapsed().ok())
                    .is_none_or(|age| age >= self.settings.idle),
            };
        if !idle {
            return None;
        }
        Self::slot(&mut state, name).try_write_owned().ok()
    }

    /// The trees under the root (directory names), most recently used last.
    fn trees(&self) -> Vec<String> {
        let Ok(listing) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut names: Vec<(Option<SystemTime>, String)> = listing
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.starts_with('.'))
            .map(|n| (None, n))
            .collect();
        let state = self.lock();
        let now = Instant::now();
        for (at, name) in &mut names {
            *at = match state.last_used.get(name.as_str()) {
                Some(used) => SystemTime::now().checked_sub(now.duration_since(*used)),
                None => state_time(&self.root.join(name.as_str())),
            };
        }
        drop(state);
        names.sort();
        names.into_iter().map(|(_, n)| n).collect()
    }

    /// Puts the idle tree that shares the most with `wanted` in the place of tree `name`,
    /// when it shares more than `current` (what `name` holds now, if known). `busy`: trees
    /// never to take. The caller holds `name` and then restores `wanted` there.
    pub(crate) async fn reuse_for(
        &self,
        store: &dyn BlobStore,
        name: &str,
        wanted: &Manifest,
        current: Option<&Manifest>,
        busy: &BTreeSet<String>,
    ) -> Option<Reused> {
        if !self.settings.enabled {
            return None;
        }
        let floor = current.map_or(0, |c| shared_bytes(wanted, c));
        let mut best: Option<(u64, String)> = None;
        let candidates = self
            .trees()
            .into_iter()
            .rev()
            .filter(|n| n != name && !busy.contains(n))
            .filter(|n| self.take_idle(n).is_some())
            .take(CANDIDATES * 4);
        let mut compared = 0;
        for candidate in candidates {
            if compared == CANDIDATES {
                break;
            }
            let Some(id) = snapshot::local_snapshot(&self.root.join(&candidate)) else {
                continue;
            };
            let Ok(manifest) = get_json::<Manifest>(store, &id).await else {
                continue;
            };
            compared += 1;
            let shared = shared_bytes(wanted, &manifest);
            if shared > floor && best.as_ref().is_none_or(|(b, _)| shared > *b) {
                best = Some((shared, candidate));
            }
        }
        let (matching_bytes, from) = best?;
        let _taken = self.take_idle(&from)?;
        let (root, taken_from, into) = (self.root.clone(), from.clone(), name.to_owned());
        let swapped = tokio::task::spawn_blocking(move || swap_in(&root, &taken_from, &into)).await;
        match swapped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                warn!(tree = %from, cause = %e, "a kept workspace could not be reused");
                return None;
            }
            Err(e) => {
                warn!(tree = %from, cause = %e, "a kept workspace could not be reused");
                return None;
            }
        }
        let mut state = self.lock();
        state.sizes.remove(name);
        state.sizes.remove(&from);
        // Its place now holds what `name` held (maybe nothing): idle from now.
        state.finished.insert(from.clone());
        Some(Reused {
            from,
            matching_bytes,
        })
    }

    /// Removes idle trees, least recently used first, until the trees take at most the
    /// budget (`busy`: never removed). Trees on their way out from an earlier sweep go too.
    pub(crate) fn sweep(&self, busy: &BTreeSet<String>) -> Swept {
        let mut swept = Swept::default();
        if !self.settings.enabled {
            return swept;
        }
        if let Ok(listing) = std::fs::read_dir(&self.root) {
            for entry in listing.filter_map(Result::ok) {
                if entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(TRASH_PREFIX)
                {
                    let _ = baton_sandbox::remove_tree(&entry.path());
                }
            }
        }
        let trees = self.trees();
        let mut sizes = Vec::with_capacity(trees.len());
        for name in &trees {
            let dir = self.root.join(name);
            let stamp = state_time(&dir);
            let known = self.lock().sizes.get(name).copied();
            let bytes = match known {
                Some((at, bytes)) if at == stamp && stamp.is_some() => bytes,
                _ => {
                    let bytes = baton_sandbox::tree_bytes(&dir).unwrap_or(0);
                    self.lock().sizes.insert(name.clone(), (stamp, bytes));
                    bytes
                }
            };
            sizes.push(bytes);
        }
        let mut total: u64 = sizes.iter().sum();
        for (name, bytes) in trees.iter().zip(sizes) {
            if total <= self.settings.budget_bytes {
                break;
            }
            if busy.contains(name) {
                continue;
            }
            let Some(_taken) = self.take_idle(name) else {
                continue;
            };
            let trash = self.root.join(format!(
                "{TRASH_PREFIX}{name}-{}",
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos()
            ));
            if let Err(e) = std::fs::rename(self.root.join(name), &trash) {
                warn!(tree = %name, cause = %e, "a kept workspace could not be removed");
                continue;
            }
            {
                let mut state = self.lock();
                state.sizes.remove(name);
                state.last_used.remove(name);
                state.finished.remove(name);
            }
            if let Err(e) = baton_sandbox::remove_tree(&trash) {
                warn!(tree = %name, cause = %e, "a removed workspace left files behind (removed at the next sweep)");
            }
            total = total.saturating_sub(bytes);
            swept.freed_bytes += bytes;
            swept.removed.push(name.clone());
        }
        swept.kept_bytes = total;
        swept
    }

    /// Sweeps every 30 s and when a run ends, for as long as the runtime runs; `busy` names
    /// the trees in use beyond activities (sandboxed MCP servers).
    pub(crate) fn start_sweeper(
        self: &Arc<Self>,
        busy: impl Fn() -> BTreeSet<String> + Send + Sync + 'static,
    ) {
        if !self.settings.enabled {
            return;
        }
        let kept = self.clone();
        let busy = Arc::new(busy);
        tokio::spawn(async move {
            loop {
                let _ = tokio::time::timeout(SWEEP_EVERY, kept.wake.notified()).await;
                let (kept, busy) = (kept.clone(), busy.clone());
                let swept = tokio::task::spawn_blocking(move || kept.sweep(&busy())).await;
                if let Ok(swept) = swept
                    && !swept.removed.is_empty()
                {
                    info!(
                        removed = swept.removed.len(),
                        freed_bytes = swept.freed_bytes,
                        kept_bytes = swept.kept_bytes,
                        "idle workspaces removed: over workspace_cache_bytes"
                    );
                }
            }
        });
    }
}

/// When the tree's snapshot state was last written (a take or a restore), else when the
/// directory last changed.
fn state_time(dir: &Path) -> Option<SystemTime> {
    let state = dir.join(snapshot::LOCAL_DIR).join(snapshot::STATE_FILE);
    std::fs::symlink_metadata(&state)
        .or_else(|_| std::fs::symlink_metadata(dir))
        .and_then(|m| m.modified())
        .ok()
}

/// Bytes of `wanted`'s files that `other` has at the same path with the same content.
fn shared_bytes(wanted: &Manifest, other: &Manifest) -> u64 {
    wanted
        .entries
        .iter()
        .filter_map(|(path, entry)| match (entry, other.entries.get(path)) {
            (
                Entry::File { blob, size, .. },
                Some(Entry::File {
                    blob: other_blob, ..
                }),
            ) if blob == other_blob => Some(*size),
            _ => None,
        })
        .sum()
}

/// Moves the tree `from` under `root` to `name`: into its place when `name` is missing or
/// empty, else the two change places. Both forget their snapshot state first.
fn swap_in(root: &Path, from: &str, name: &str) -> std::io::Result<()> {
    let forget = |tree: &Path| {
        snapshot::forget_local_state(tree).map_err(|e| std::io::Error::other(e.to_string()))
    };
    let (donor, target) = (root.join(from), root.join(name));
    forget(&donor)?;
    match std::fs::remove_dir(&target) {
        Ok(()) => std::fs::rename(&donor, &target),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::rename(&donor, &target),
        // Not empty (or not removable): exchange.
        Err(_) => {
            forget(&target)?;
            let dir = std::fs::File::open(root)?;
            nix::fcntl::renameat2(
                &dir,
                from,
                &dir,
                name,
                nix::fcntl::RenameFlags::RENAME_EXCHANGE,
            )?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests;
