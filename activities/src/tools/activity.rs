//! The tool activities ([`ToolService`]): `run_tool` runs one built-in tool call in the run's
//! workspace and `mcp_call_tool` one MCP server's tool (through the worker's [`McpPool`]), both
//! through one body (`ToolService::attempt`): heartbeating so a dead worker's call is retried
//! elsewhere within seconds, refusing superseded attempts, marking re-run mutating calls, and
//! stopping the tool on cancellation; `read_instructions` gives the system prompt the workspace
//! path and its AGENTS.md.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use serde::{Deserialize, Serialize};

use baton_proto::{InstructionsRequest, ToolRequest, ToolResult, WorkspaceInstructions};
use baton_workflows::activities::FailureType;
use temporalio_common::error::ApplicationFailure;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tracing::{info, warn};

use baton_sandbox::{Sandbox, SandboxError, SandboxSettings};
use baton_store::{BlobId, SharedStore, inline, snapshot};

use crate::mcp::{McpError, McpPool, McpSettings, RunScope};
use crate::tools::attempt::Kind;
use crate::tools::kept::{InUse, KeptSettings, KeptWorkspaces, Reused};

/// An infrastructure failure of the activity (retried).
pub(crate) fn infrastructure(message: String) -> ActivityError {
    ActivityError::application(ApplicationFailure::new(message))
}

/// A failure retrying cannot fix: a bad sandbox policy, or a host that cannot sandbox.
pub(crate) fn permanent(message: String) -> ActivityError {
    ActivityError::application(
        ApplicationFailure::builder(message)
            .type_name(FailureType::BadInput.as_str().to_owned())
            .non_retryable(true)
            .build(),
    )
}

/// The failure of a call whose sandbox could not be set up.
pub(super) fn sandbox_failure(e: &SandboxError) -> ActivityError {
    if e.is_retryable() {
        infrastructure(e.to_string())
    } else {
        permanent(e.to_string())
    }
}

/// How often a tool call (and a workspace activity) heartbeats: three beats per
/// `TOOL_HEARTBEAT` (3 s), so two in a row may be late or lost before the server takes a live
/// attempt for dead. One `RecordActivityTaskHeartbeat` call each (see `heartbeat`).
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// Implements the `run_tool` activity contract. Clones share the per-run workspace locks (the
/// workspace activities hold one).
#[derive(Clone)]
pub struct ToolService {
    workspace_root: PathBuf,
    store: SharedStore,
    pub(super) snapshots: bool,
    /// Outputs longer than this go to the blob store, a preview stays in history
    /// (`[history] inline_bytes`).
    inline_bytes: usize,
    /// How tool processes are sandboxed on this worker.
    sandbox: Arc<SandboxSettings>,
    /// One lock per run workspace: restores and snapshots never overlap.
    locks: Arc<std::sync::Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>>,
    /// The worker's MCP servers (`mcp_call_tool`); empty unless `with_mcp`: every MCP call is
    /// then `McpUnavailable` ("not configured on this worker").
    pub(super) mcp: McpPool,
    /// The trees under `workspace_root`: held by activities, reused and removed when idle.
    kept: Arc<KeptWorkspaces>,
}

/// What bringing a workspace to a snapshot did.
#[derive(Debug, Default)]
pub(crate) struct Ensured {
    /// The restore, unless the tree was there already.
    pub(crate) restored: Option<snapshot::Restored>,
    /// Another run's idle tree the workspace took over first.
    pub(crate) reused: Option<Reused>,
}

/// Progress a running tool reports in its heartbeats; a retry reads the previous attempt's.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ToolProgress {
    /// Seconds the call has been running.
    pub elapsed_secs: u64,
    /// The snapshot the workspace was at when this call first started (retries restore it).
    #[serde(default)]
    pub base_snapshot: String,
}

impl ToolService {
    /// Runs tools in `<workspace_root>/<run id>`, keeping full outputs (and, with
    /// `snapshots`, workspace snapshots after mutating calls) in `store`.
    pub fn new(workspace_root: PathBuf, store: SharedStore, snapshots: bool) -> Self {
        Self {
            workspace_root: workspace_root.clone(),
            store,
            snapshots,
            inline_bytes: baton_store::inline::DEFAULT_INLINE_BYTES,
            sandbox: Arc::new(SandboxSettings::default()),
            locks: Arc::default(),
            mcp: McpPool::new(McpSettings::default()),
            kept: Arc::new(KeptWorkspaces::new(
                workspace_root.clone(),
                KeptSettings {
                    enabled: snapshots,
                    ..KeptSettings::default()
                },
            )),
        }
    }

    /// Keeps idle workspaces within `settings` (never without snapshots).
    pub fn with_kept_workspaces(mut self, settings: KeptSettings) -> Self {
        self.kept = Arc::new(KeptWorkspaces::new(
            self.workspace_root.clone(),
            KeptSettings {
                enabled: settings.enabled && self.snapshots,
                ..settings
            },
        ));
        self
    }

    /// Removes idle workspaces beyond the budget every 30 s and after each run (call from
    /// within a tokio runtime).
    pub fn start_workspace_sweeper(&self) {
        let this = self.clone();
        self.kept.start_sweeper(move || this.busy_workspaces());
    }

    /// The trees in use beyond activities: those of runs with a live sandboxed MCP server.
    fn busy_workspaces(&self) -> BTreeSet<String> {
        self.mcp
            .sandboxed_runs()
            .iter()
            .map(|run| self.workspace_name_of(run))
            .collect()
    }

    /// The directory name of run `run_id`'s workspace under the root.
    fn workspace_name_of(&self, run_id: &str) -> String {
        self.workspace_of(run_id)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Holds run `run_id`'s workspace for an activity: no other run takes it over and no
    /// sweep removes it until the guard is dropped.
    pub(crate) async fn hold_workspace(&self, run_id: &str) -> InUse {
        self.kept.hold(&self.workspace_name_of(run_id)).await
    }

    /// The run has ended: its workspace may go to another run or be removed at once.
    pub(crate) fn workspace_finished(&self, run_id: &str) {
        self.kept.finished(&self.workspace_name_of(run_id));
    }

    /// Puts an idle tree that shares more with snapshot `wanted` than the workspace does now
    /// (`current`) in its place (the caller holds the workspace and restores next).
    pub(crate) async fn reuse_tree(
        &self,
        run_id: &str,
        wanted: &snapshot::Manifest,
        current: Option<&snapshot::Manifest>,
    ) -> Option<Reused> {
        let name = self.workspace_name_of(run_id);
        let reused = self
            .kept
            .reuse_for(
                self.store.as_ref(),
                &name,
                wanted,
                current,
                &self.busy_workspaces(),
            )
            .await;
        if let Some(r) = &reused {
            info!(run_id, from = %r.from, matching_bytes = r.matching_bytes, "workspace reused: another run's idle tree taken over");
        }
        reused
    }

    /// Calls MCP tools (`mcp_call_tool`) through `pool` (share it with the `McpService`).
    pub fn with_mcp(mut self, pool: McpPool) -> Self {
        self.mcp = pool;
        self
    }

    /// Where a `sandbox = true` MCP server runs for run `run_id`: its workspace, under the
    /// run's sandbox `policy`.
    pub(crate) fn run_scope(
        &self,
        server: &str,
        run_id: &str,
        policy: Option<&baton_proto::SandboxPolicy>,
    ) -> Result<RunScope, McpError> {
        let sandbox =
            Sandbox::resolve(policy, self.sandbox.clone()).map_err(|source| McpError::Sandbox {
                server: server.to_owned(),
                source,
            })?;
        Ok(RunScope {
            run_id: run_id.to_owned(),
            workspace: self.workspace_of(run_id),
            sandbox,
        })
    }

    /// Keeps outputs longer than `bytes` in the blob store, a preview in history (default
    /// [`baton_store::inline::DEFAULT_INLINE_BYTES`]).
    pub fn with_inline_bytes(mut self, bytes: usize) -> Self {
        self.inline_bytes = bytes;
        self
    }

    /// Sandboxes tool processes with `settings` (default: [`SandboxSettings::default`]); logs
    /// once whether this host can sandbox.
    pub fn with_sandbox(mut self, settings: SandboxSettings) -> Self {
        baton_sandbox::log_host_support(&settings);
        self.sandbox = Arc::new(settings);
        self
    }

    pub(crate) fn lock_of(&self, run_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Forget the locks nobody holds or waits for (the map would otherwise keep an entry
        // for every run this worker ever served).
        locks.retain(|id, lock| id == run_id || Arc::strong_count(lock) > 1);
        locks.entry(run_id.to_owned()).or_default().clone()
    }

    /// Brings the run's workspace to snapshot `id` unless it is known to be there (or
    /// `force`: a retry starts from what its first attempt started from). A workspace that
    /// knows no snapshot (new on this worker) first takes over the idle tree sharing the most
    /// with `id`, so that only the files that differ are written.
    pub(crate) async fn ensure_snapshot(
        &self,
        run_id: &str,
        workspace: &std::path::Path,
        id: &str,
        force: bool,
    ) -> Result<Ensured, ActivityError> {
        let id = BlobId::parse(id).map_err(|e| infrastructure(format!("bad snapshot id: {e}")))?;
        let lock = self.lock_of(run_id);
        let _held = lock.lock().await;
        let local = snapshot::local_snapshot(workspace);
        if !force && local.as_ref() == Some(&id) {
            return Ok(Ensured::default());
        }
        let mut reused = None;
        if local.is_none()
            && let Ok(wanted) = baton_store::get_json(self.store.as_ref(), &id).await
        {
            reused = self.reuse_tree(run_id, &wanted, None).await;
        }
        let restored = snapshot::restore(self.store.as_ref(), workspace, &id)
            .await
            .map_err(|e| infrastructure(format!("cannot restore the workspace: {e}")))?;
        info!(
            run_id,
            snapshot = %id,
            written = restored.written,
            deleted = restored.deleted,
            bytes_written = restored.bytes_written,
            "workspace restored"
        );
        Ok(Ensured {
            restored: Some(restored),
            reused,
        })
    }

    /// Snapshots the run's workspace; `None` (logged) if it cannot: the call's result stands.
    pub(crate) async fn take_snapshot(
        &self,
        run_id: &str,
        workspace: &std::path::Path,
    ) -> Option<String> {
        let lock = self.lock_of(run_id);
        let _held = lock.lock().await;
        if tokio::fs::create_dir_all(workspace).await.is_err() {
            return None;
        }
        match snapshot::take(self.store.as_ref(), workspace).await {
            Ok(taken) => {
                if !taken.skipped.is_empty() {
                    warn!(run_id, skipped = ?taken.skipped, "files left out of the workspace snapshot");
                }
                info!(run_id, snapshot = %taken.id, files = taken.files, uploaded = taken.uploaded, "workspace snapshot taken");
                Some(taken.id.to_string())
            }
            Err(e) => {
                warn!(run_id, cause = %e, "workspace snapshot failed");
                None
            }
        }
    }

    /// Moves a full output into the blob store (the result keeps its preview), and the
    /// content too when it is longer than the inline limit. A store that fails leaves them
    /// inline (they are capped), with a warning.
    pub(super) async fn offload_outputs(&self, run_id: &str, result: &mut ToolResult) {
        let inline = inline::offload_result(self.store.as_ref(), self.inline_bytes, result);
        if let Err(e) = inline.await {
            warn!(run_id, cause = %e, "tool output not stored; it stays in history whole");
        }
        if result.full_output.is_empty() {
            return;
        }
        match self
            .store
            .put(std::mem::take(&mut result.full_output).into_bytes())
            .await
        {
            Ok(id) => result.full_output_ref = id.to_string(),
            Err(e) => {
                warn!(run_id, cause = %e, "full tool output not stored; it is kept as a preview only")
            }
        }
    }

    /// How tool processes are sandboxed on this worker.
    pub(crate) fn sandbox(&self) -> Arc<SandboxSettings> {
        self.sandbox.clone()
    }

    /// The blob store workspaces are snapshotted into.
    pub(crate) fn store(&self) -> &SharedStore {
        &self.store
    }

    /// A private scratch directory for run `run_id`'s worker-side work (delivery), next to the
    /// workspaces (never inside one), removed when dropped.
    pub(crate) fn scratch_dir(&self, run_id: &str) -> std::io::Result<tempfile::TempDir> {
        std::fs::create_dir_all(&self.workspace_root)?;
        tempfile::Builder::new()
            .prefix(&format!(".baton-scratch-{}-", workspace_name(run_id)))
            .tempdir_in(&self.workspace_root)
    }

    /// The workspace directory of a run: `<workspace_root>/<run id>` when the id is a safe
    /// file name, else the id made safe plus a hash of it, so two ids never share a workspace
    /// (`a b` and `a_b` used to). A run that started under the old naming keeps its directory.
    pub fn workspace_of(&self, run_id: &str) -> PathBuf {
        let name = workspace_name(run_id);
        if name != run_id {
            let legacy = self.workspace_root.join(legacy_workspace_name(run_id));
            let current = self.workspace_root.join(&name);
            if legacy.is_dir() && !current.exists() {
                return legacy;
            }
            return current;
        }
        self.workspace_root.join(name)
    }
}

/// Characters a run id keeps in its workspace's name; the rest become `_`.
fn safe_char(c: char) -> char {
    if c.is_ascii_alphanumeric() || "-_.".contains(c) {
        c
    } else {
        '_'
    }
}

/// The directory name of a run's workspace (see [`ToolService::workspace_of`]).
pub fn workspace_name(run_id: &str) -> String {
    let safe: String = run_id.chars().map(safe_char).collect();
    if safe == run_id && !safe.is_empty() && !safe.starts_with('.') && safe.len() <= 128 {
        return safe;
    }
    use sha2::Digest;
    let hash = hex::encode(&sha2::Sha256::digest(run_id.as_bytes())[..6]);
    let shown: String = safe.chars().take(100).collect();
    format!("run_{shown}-{hash}")
}

/// The name baton used before ids were hashed (not injective); only to find old workspaces.
fn legacy_workspace_name(run_id: &str) -> String {
    let safe: String = run_id.chars().map(safe_char).collect();
    if safe.is_empty() || safe.starts_with('.') {
        format!("run_{safe}")
    } else {
        safe
    }
}

/// AGENTS.md beyond this is cut.
pub const MAX_AGENTS_MD: usize = 32 * 1024;

/// The workspace's `AGENTS.md`, cut to [`MAX_AGENTS_MD`] bytes on a character boundary, and
/// whether it was cut; empty when there is none. The repository is not trusted:
/// the file is read only if it is a regular file inside the workspace (a link to another file
/// inside is followed; one to `/proc/self/environ`, a file outside or `/dev/zero` is not), and
/// never more than the bound is read. The error says why it was left out.
pub fn read_agents_md(workspace: &Path) -> Result<(String, bool), String> {
    let confined = crate::tools::workspace::confine(workspace, "AGENTS.md")?;
    let file = match confined.root.open_regular(&confined.rel) {
        Ok(file) => file,
        Err(baton_store::beneath::OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((String::new(), false));
        }
        Err(e) => {
            return Err(crate::tools::workspace::open_message(
                "AGENTS.md",
                "read",
                &e,
            ));
        }
    };
    let (bytes, truncated) = baton_store::beneath::read_bounded(file, MAX_AGENTS_MD)
        .map_err(|e| format!("cannot read AGENTS.md: {e}"))?;
    let mut end = bytes.len();
    // Cut on a character boundary.
    while end > 0 && std::str::from_utf8(&bytes[..end]).is_err() {
        end -= 1;
    }
    Ok((
        String::from_utf8_lossy(&bytes[..end]).into_owned(),
        truncated,
    ))
}

/// How long `read_instructions` may spend on the run's initial workspace snapshot (its
/// start-to-close timeout is 30 s).
const INITIAL_SNAPSHOT_BUDGET: Duration = Duration::from_secs(10);

#[activities]
impl ToolService {
    /// The workspace path and its AGENTS.md (capped), for the system prompt.
    #[activity(definition = baton_workflows::activities::ReadInstructions)]
    pub async fn read_instructions(
        self: Arc<Self>,
        ctx: ActivityContext,
        request: InstructionsRequest,
    ) -> Result<WorkspaceInstructions, ActivityError> {
        let run_id = ctx.info().workflow_id.clone().unwrap_or_default();
        let workspace = self.workspace_of(&run_id);
        let _in_use = self.hold_workspace(&run_id).await;
        tokio::fs::create_dir_all(&workspace).await.map_err(|e| {
            ActivityError::application(ApplicationFailure::new(format!(
                "cannot create the workspace {}: {e}",
                workspace.display()
            )))
        })?;
        // A run with a source: its workspace was prepared (maybe on another worker).
        if !request.snapshot.is_empty() {
            self.ensure_snapshot(&run_id, &workspace, &request.snapshot, false)
                .await?;
        }
        let (agents_md, truncated) = {
            let workspace = workspace.clone();
            tokio::task::spawn_blocking(move || read_agents_md(&workspace))
                .await
                .unwrap_or_else(|e| Err(format!("the read failed: {e}")))
                .unwrap_or_else(|why| {
                    warn!(run_id, %why, "AGENTS.md left out of the instructions");
                    (String::new(), false)
                })
        };
        // The run's first snapshot, so that mutating calls always carry their base in their
        // input. Bounded: a huge workspace is left to the first mutating call, which
        // heartbeats while it works.
        let snapshot = if !request.snapshot.is_empty() {
            request.snapshot.clone()
        } else if self.snapshots {
            tokio::time::timeout(
                INITIAL_SNAPSHOT_BUDGET,
                self.take_snapshot(&run_id, &workspace),
            )
            .await
            .unwrap_or_else(|_| {
                info!(run_id, budget = ?INITIAL_SNAPSHOT_BUDGET, "initial workspace snapshot left to the first mutating call");
                None
            })
            .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(WorkspaceInstructions {
            workspace: workspace.display().to_string(),
            agents_md,
            truncated,
            snapshot,
        })
    }

    /// Runs the call; ordinary failures are `is_error` results, not activity failures.
    #[activity(definition = baton_workflows::activities::RunTool)]
    pub async fn run_tool(
        self: Arc<Self>,
        ctx: ActivityContext,
        request: ToolRequest,
    ) -> Result<ToolResult, ActivityError> {
        self.attempt(ctx, request, Kind::Builtin).await
    }

    /// Runs one verification command (`tools::verify`); its exit code is the result.
    #[activity(definition = baton_workflows::activities::RunVerification)]
    pub async fn run_verification(
        self: Arc<Self>,
        ctx: ActivityContext,
        request: baton_proto::VerifyRequest,
    ) -> Result<baton_proto::Verification, ActivityError> {
        self.verification(ctx, request).await
    }

    /// Calls an MCP server's tool (`request.mcp`); the tool's errors are `is_error` results.
    #[activity(definition = baton_workflows::activities::McpCallTool)]
    pub async fn mcp_call_tool(
        self: Arc<Self>,
        ctx: ActivityContext,
        request: ToolRequest,
    ) -> Result<ToolResult, ActivityError> {
        let Some(origin) = request.mcp.clone() else {
            return Err(permanent("mcp_call_tool needs request.mcp".into()));
        };
        self.attempt(ctx, request, Kind::Mcp(origin)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_refusals_are_not_retried_and_setup_failures_are() {
        let failure = |e: SandboxError| match sandbox_failure(&e) {
            ActivityError::Application(f) => f,
            _ => panic!("not an application failure"),
        };
        for permanent in [
            SandboxError::UnknownMode("strict".into()),
            SandboxError::Unavailable {
                reason: "Landlock unavailable: test".into(),
            },
        ] {
            let message = permanent.to_string();
            let f = failure(permanent);
            assert!(f.is_non_retryable(), "{message}");
            assert_eq!(f.type_name(), Some(FailureType::BadInput.as_str()));
        }
        let setup = SandboxError::Setup {
            context: "cannot create the private temp dir".into(),
            source: "disk full".into(),
        };
        assert!(!failure(setup).is_non_retryable());
    }

    /// Every run id gets a workspace of its own; safe ids keep their plain name.
    #[test]
    fn run_ids_map_to_distinct_workspace_names() {
        assert_eq!(workspace_name("run-1a2b_c.d"), "run-1a2b_c.d");
        let ids = [
            "has space/slash",
            "has_space_slash",
            "has space_slash",
            "../escape",
            ".hidden",
            "",
            "ü",
            "_",
        ];
        let names: std::collections::BTreeSet<String> =
            ids.iter().map(|id| workspace_name(id)).collect();
        assert_eq!(names.len(), ids.len(), "{names:?}");
        for name in &names {
            assert!(
                !name.contains('/') && !name.starts_with('.') && name.len() < 128,
                "{name}"
            );
        }
        assert!(workspace_name("has space/slash").starts_with("run_has_space_slash-"));
        assert!(workspace_name(&"x".repeat(500)).len() < 128);

        // A run that started under the old name keeps its directory.
        let dir = tempfile::tempdir().unwrap();
        let store = baton_store::LocalStore::new(dir.path().join("blobs")).unwrap();
        let service = ToolService::new(dir.path().to_path_buf(), Arc::new(store), false);
        std::fs::create_dir_all(dir.path().join("old_id")).unwrap();
        assert_eq!(service.workspace_of("old id"), dir.path().join("old_id"));
        assert_eq!(
            service.workspace_of("new id"),
            dir.path().join(workspace_name("new id"))
        );
        assert_eq!(service.workspace_of("plain"), dir.path().join("plain"));
    }

    #[test]
    fn workspace_locks_are_forgotten_once_nobody_holds_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = baton_store::LocalStore::new(dir.path().join("blobs")).unwrap();
        let service = ToolService::new(dir.path().join("ws"), Arc::new(store), true);
        let held = service.lock_of("run-a");
        drop(service.lock_of("run-b"));
        // The same run gets the same lock while it is held.
        assert!(Arc::ptr_eq(&held, &service.lock_of("run-a")));
        drop(service.lock_of("run-c"));
        let ids = |s: &ToolService| s.locks.lock().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(ids(&service), ["run-a", "run-c"]);
        drop(held);
        drop(service.lock_of("run-d"));
        assert_eq!(ids(&service), ["run-d"]);
    }
}
