//! The workspace activities ([`WorkspaceService`]): a run's code coming in and its changes
//! going out.
//!
//! - `prepare_workspace`: puts the run's source into its workspace (a snapshot the CLI uploaded
//!   or an earlier run left, restored; a git repository, cloned with the worker's credentials)
//!   and snapshots it: the run's starting tree.
//! - `collect_changes`: the change set between the starting and the final snapshot, stored as a
//!   git-style patch ([`baton_store::changes`]).
//! - `deliver`: commits the change set on the starting commit and pushes it, and opens a pull
//!   request ([`crate::git::deliver`]); idempotent.
//!
//! They share the tool calls' heartbeat timeout (`TOOL_HEARTBEAT`) and interval.

use std::sync::Arc;

use baton_proto::{
    Changes, CollectRequest, DeliverRequest, Delivered, EnvironmentSpec, FileChange, MergeRequest,
    MergeResult, PrepareRequest, PreparedWorkspace, SetupRequest, SetupResult, workspace_source,
};
use baton_store::{BlobId, changes, snapshot};
use baton_workflows::activities::FailureType;
use temporalio_common::error::ApplicationFailure;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tracing::info;

mod environment;

pub use environment::{EnvironmentPin, EnvironmentSettings};

use crate::{
    git::{self, GitError, GitSettings},
    heartbeat::{Heartbeat, until_cancelled},
    tools::{HEARTBEAT_EVERY, ToolService},
};

/// Files listed one by one in a change set (`Changes.files`); the patch holds them all.
pub const MAX_LISTED_FILES: usize = 500;

/// Implements the workspace activity contracts, on the workspaces of a [`ToolService`] (whose
/// per-run locks it shares).
pub struct WorkspaceService {
    tools: ToolService,
    git: Arc<GitSettings>,
    environments: Arc<EnvironmentSettings>,
    /// The worker's local blob cache's counters, when it has one (setup reports downloads).
    cache: Option<Arc<baton_store::cached::CacheCounters>>,
    /// The GitHub App whose installation tokens push and open pull requests, when configured.
    github_app: Option<Arc<baton_github::App>>,
}

impl WorkspaceService {
    /// Workspace activities on `tools`' workspaces, with `git` settings for clones and
    /// delivery.
    pub fn new(tools: ToolService, git: GitSettings) -> Self {
        Self {
            tools,
            git: Arc::new(git),
            environments: Arc::default(),
            cache: None,
            github_app: None,
        }
    }

    /// Pushes and opens pull requests with `app`'s installation tokens where the settings say
    /// so (`[git.github] app_id`, credentials with `github_app = true`).
    pub fn with_github_app(mut self, app: Option<Arc<baton_github::App>>) -> Self {
        self.github_app = app;
        self
    }

    /// Reports the downloads of `counters` (the worker's local blob cache) in setup results.
    pub fn with_cache_counters(
        mut self,
        counters: Arc<baton_store::cached::CacheCounters>,
    ) -> Self {
        self.cache = Some(counters);
        self
    }

    /// Sets up environments under the worker's `[environments]` settings (default: no
    /// secrets offered, no pins).
    pub fn with_environments(mut self, settings: EnvironmentSettings) -> Self {
        self.environments = Arc::new(settings);
        self
    }

    /// The environment a run is set up with: the worker's pin for its repository, else the
    /// spec's, else (a clone) the tree's own file.
    fn environment_of(
        &self,
        url: &str,
        spec: Option<EnvironmentSpec>,
        workspace: Option<&std::path::Path>,
    ) -> Result<Option<EnvironmentSpec>, ActivityError> {
        if !url.is_empty()
            && let Some(pinned) = self.environments.pinned(url).map_err(unavailable)?
        {
            return Ok(Some(pinned));
        }
        if spec.is_some() {
            return Ok(spec);
        }
        match workspace {
            Some(root) => environment::read_repository_file(root).map_err(unavailable),
            None => Ok(None),
        }
    }
}

/// A source that cannot be had: not retried, the run ends `workspace_unavailable`.
fn unavailable(message: String) -> ActivityError {
    ActivityError::application(
        ApplicationFailure::builder(message)
            .type_name(FailureType::WorkspaceUnavailable.as_str().to_owned())
            .non_retryable(true)
            .build(),
    )
}

/// A failure worth retrying (on this worker or another).
fn retryable(message: String) -> ActivityError {
    ActivityError::application(ApplicationFailure::new(message))
}

fn git_failure(e: GitError) -> ActivityError {
    match e {
        GitError::Unavailable(m) => unavailable(m),
        GitError::Transient(m) => retryable(m),
    }
}

/// The worker's environment, where credentials are looked up by name.
fn worker_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn run_id_of(ctx: &ActivityContext) -> String {
    ctx.info().workflow_id.clone().unwrap_or_default()
}

#[activities]
impl WorkspaceService {
    /// Puts the run's source into its workspace and snapshots it.
    #[activity(definition = baton_workflows::activities::PrepareWorkspace)]
    pub async fn prepare_workspace(
        self: Arc<Self>,
        ctx: ActivityContext,
        request: PrepareRequest,
    ) -> Result<PreparedWorkspace, ActivityError> {
        // The whole attempt beats, waits for the workspace lock included.
        let _beat = Heartbeat::start(&ctx, HEARTBEAT_EVERY, || ());
        let run_id = run_id_of(&ctx);
        let spec_environment = request.environment.clone();
        let source = request
            .source
            .and_then(|s| s.source)
            .ok_or_else(|| unavailable("prepare_workspace needs a source".to_owned()))?;
        let workspace = self.tools.workspace_of(&run_id);
        let _in_use = self.tools.hold_workspace(&run_id).await;
        tokio::fs::create_dir_all(&workspace).await.map_err(|e| {
            retryable(format!(
                "cannot create the workspace {}: {e}",
                workspace.display()
            ))
        })?;
        let store = self.tools.store();
        match source {
            workspace_source::Source::Snapshot(s) => {
                let id = BlobId::parse(&s.id)
                    .map_err(|e| unavailable(format!("bad snapshot id '{}': {e}", s.id)))?;
                let present = store
                    .contains(&id)
                    .await
                    .map_err(|e| retryable(format!("blob store: {e}")))?;
                if !present {
                    return Err(unavailable(format!(
                        "snapshot {id} is not in the workers' blob store: the CLI that uploaded \
                         it and the workers must use the same store (BATON_STORE__*)"
                    )));
                }
                let restore = self
                    .tools
                    .ensure_snapshot(&run_id, &workspace, &s.id, false);
                let ensured = until_cancelled(&ctx, restore).await??;
                let manifest: snapshot::Manifest = baton_store::get_json(store.as_ref(), &id)
                    .await
                    .map_err(|e| unavailable(format!("snapshot {id} is unreadable: {e}")))?;
                let files = manifest
                    .entries
                    .values()
                    .filter(|e| matches!(e, snapshot::Entry::File { .. }))
                    .count();
                let base_branch = s
                    .git
                    .as_ref()
                    .map(|g| g.r#ref.clone())
                    .filter(|r| !git::looks_like_sha(r))
                    .unwrap_or_default();
                let bytes_written = ensured.restored.map_or(0, |r| r.bytes_written);
                let reused_tree = ensured.reused.is_some();
                info!(run_id, snapshot = %id, files, bytes_written, reused_tree, "workspace prepared from a snapshot");
                let url = s.git.as_ref().map(|g| g.url.clone()).unwrap_or_default();
                let environment = self.environment_of(&url, spec_environment, None)?;
                Ok(PreparedWorkspace {
                    snapshot: s.id,
                    commit: s.commit,
                    files: u32::try_from(files).unwrap_or(u32::MAX),
                    base_branch,
                    environment,
                    bytes_written,
                    reused_tree,
                })
            }
            workspace_source::Source::Git(source) => {
                check_source_url(&source.url, self.git.allow_file_urls)?;
                let lock = self.tools.lock_of(&run_id);
                let _held = lock.lock().await;
                let app = self.github_app.as_deref();
                let token = git::app_token(&self.git, app, &source.url, false)
                    .await
                    .map_err(git_failure)?;
                let env = git::credential_env(&worker_env, token);
                let clone = git::clone_into(&self.git, &source, &workspace, &env);
                let cloned = until_cancelled(&ctx, clone).await?.map_err(git_failure)?;
                let take = snapshot::take(store.as_ref(), &workspace);
                let taken = until_cancelled(&ctx, take)
                    .await?
                    .map_err(|e| retryable(format!("cannot snapshot the clone: {e}")))?;
                info!(run_id, url = %source.url, commit = %cloned.commit, files = taken.files, "workspace cloned");
                let environment =
                    self.environment_of(&source.url, spec_environment, Some(&workspace))?;
                Ok(PreparedWorkspace {
                    snapshot: taken.id.to_string(),
                    commit: cloned.commit,
                    files: u32::try_from(taken.files).unwrap_or(u32::MAX),
                    base_branch: cloned.base_branch,
                    environment,
                    ..PreparedWorkspace::default()
                })
            }
        }
    }

    /// Sets up the run's environment (`workspace/environment.rs`): from the cache, or by
    /// running its setup; a setup that fails is a result (`failed`), not an activity failure.
    #[activity(definition = baton_workflows::activities::SetupEnvironment)]
    pub async fn setup_environment(
        self: Arc<Self>,
        ctx: ActivityContext,
        request: SetupRequest,
    ) -> Result<SetupResult, ActivityError> {
        self.setup(ctx, request).await
    }

    /// The change set between two snapshots, its patch stored in the blob store.
    #[activity(definition = baton_workflows::activities::CollectChanges)]
    pub async fn collect_changes(
        self: Arc<Self>,
        ctx: ActivityContext,
        request: CollectRequest,
    ) -> Result<Changes, ActivityError> {
        // The whole attempt beats, waits for the workspace lock included.
        let _beat = Heartbeat::start(&ctx, HEARTBEAT_EVERY, || ());
        let run_id = run_id_of(&ctx);
        let store = self.tools.store();
        let parse = |id: &str| {
            BlobId::parse(id).map_err(|e| unavailable(format!("bad snapshot id '{id}': {e}")))
        };
        let base = match request.base_snapshot.as_str() {
            "" => None,
            id => Some(parse(id)?),
        };
        // Snapshots off on the workers: the local copy is the only record of the final tree.
        let final_snapshot = if request.final_snapshot.is_empty() {
            let workspace = self.tools.workspace_of(&run_id);
            let _in_use = self.tools.hold_workspace(&run_id).await;
            self.tools
                .take_snapshot(&run_id, &workspace)
                .await
                .ok_or_else(|| retryable("cannot snapshot the final workspace".to_owned()))?
        } else {
            request.final_snapshot.clone()
        };
        let after = parse(&final_snapshot)?;
        let work = changes::change_set(store.as_ref(), base.as_ref(), &after);
        let set = until_cancelled(&ctx, work)
            .await?
            .map_err(|e| retryable(format!("cannot compute the change set: {e}")))?;
        let patch_bytes = set.patch.len() as u64;
        let patch = if set.patch.is_empty() {
            String::new()
        } else {
            store
                .put(set.patch)
                .await
                .map_err(|e| retryable(format!("cannot store the patch: {e}")))?
                .to_string()
        };
        let files: Vec<FileChange> = set
            .files
            .iter()
            .take(MAX_LISTED_FILES)
            .map(|f| FileChange {
                path: f.path.clone(),
                status: f.status.as_str().to_owned(),
                insertions: f.insertions,
                deletions: f.deletions,
                binary: f.binary,
            })
            .collect();
        info!(
            run_id,
            files = set.files.len(),
            patch_bytes,
            "change set collected"
        );
        // The run's last step that reads its tree: another run may take it over from now.
        self.tools.workspace_finished(&run_id);
        Ok(Changes {
            files_changed: u32::try_from(set.files.len()).unwrap_or(u32::MAX),
            insertions: u32::try_from(set.insertions).unwrap_or(u32::MAX),
            deletions: u32::try_from(set.deletions).unwrap_or(u32::MAX),
            base_commit: request.base_commit,
            base_snapshot: request.base_snapshot,
            final_snapshot,
            patch,
            files_truncated: set.files.len() > files.len(),
            files,
            patch_bytes,
            error: String::new(),
        })
    }

    /// A subagent's change set landed on its parent's workspace snapshot.
    #[activity(definition = baton_workflows::activities::MergeChanges)]
    pub async fn merge_changes(
        self: Arc<Self>,
        ctx: ActivityContext,
        request: MergeRequest,
    ) -> Result<MergeResult, ActivityError> {
        let _beat = Heartbeat::start(&ctx, HEARTBEAT_EVERY, || ());
        let run_id = run_id_of(&ctx);
        let store = self.tools.store();
        let parse = |id: &str| match id {
            "" => Ok(None),
            id => BlobId::parse(id)
                .map(Some)
                .map_err(|e| unavailable(format!("bad snapshot id '{id}': {e}"))),
        };
        let (into, base) = (parse(&request.into)?, parse(&request.base)?);
        let Some(theirs) = parse(&request.theirs)? else {
            return Err(unavailable(
                "merge_changes needs the subagent's final snapshot".to_owned(),
            ));
        };
        let work = changes::merge(store.as_ref(), into.as_ref(), base.as_ref(), &theirs);
        match until_cancelled(&ctx, work).await? {
            Ok(merged) => {
                info!(
                    run_id,
                    changed = merged.changed.len(),
                    "subagent changes merged"
                );
                Ok(MergeResult {
                    snapshot: merged.snapshot.to_string(),
                    changed: merged.changed,
                    conflicts: Vec::new(),
                })
            }
            Err(changes::MergeError::Conflicts(conflicts)) => Ok(MergeResult {
                conflicts,
                ..MergeResult::default()
            }),
            Err(e) => Err(retryable(format!(
                "cannot merge the subagent's changes: {e}"
            ))),
        }
    }

    /// Commits and pushes the change set (and opens a pull request).
    #[activity(definition = baton_workflows::activities::Deliver)]
    pub async fn deliver(
        self: Arc<Self>,
        ctx: ActivityContext,
        request: DeliverRequest,
    ) -> Result<Delivered, ActivityError> {
        // The whole attempt beats, waits for the workspace lock included.
        let _beat = Heartbeat::start(&ctx, HEARTBEAT_EVERY, || ());
        let run_id = run_id_of(&ctx);
        let store = self.tools.store();
        let changes = request.changes.clone().unwrap_or_default();
        let patch_id = BlobId::parse(&changes.patch)
            .map_err(|e| unavailable(format!("bad patch id '{}': {e}", changes.patch)))?;
        let patch = store
            .get(&patch_id)
            .await
            .map_err(|e| retryable(format!("cannot read the patch: {e}")))?;
        let body = pull_request_body(&request.message, &changes);
        let scratch = self
            .tools
            .scratch_dir(&run_id)
            .map_err(|e| retryable(format!("cannot make a scratch directory: {e}")))?;
        let url = request.git.as_ref().map_or("", |g| g.url.as_str());
        let pr = request
            .delivery
            .as_ref()
            .is_some_and(|d| d.mode == baton_core::machine::DELIVER_PR);
        let token = match git::app_token(&self.git, self.github_app.as_deref(), url, pr).await {
            Ok(token) => token,
            Err(GitError::Transient(m)) => return Err(retryable(m)),
            Err(GitError::Unavailable(m)) => {
                return Ok(Delivered {
                    mode: request.delivery.map(|d| d.mode).unwrap_or_default(),
                    error: m,
                    url: url.to_owned(),
                    ..Delivered::default()
                });
            }
        };
        let env = git::credential_env(&worker_env, token);
        let work = git::deliver(
            &self.git,
            &request,
            &patch,
            &run_id,
            &body,
            scratch.path(),
            &env,
        );
        let delivered = until_cancelled(&ctx, work).await?;
        let url = request
            .git
            .as_ref()
            .map(|g| g.url.clone())
            .unwrap_or_default();
        match delivered {
            Ok(mut d) => {
                d.url = url;
                info!(run_id, branch = %d.branch, commit = %d.commit, pr = %d.pull_request_url, error = %d.error, "delivery done");
                Ok(d)
            }
            Err(GitError::Transient(m)) => Err(retryable(m)),
            Err(GitError::Unavailable(m)) => Ok(Delivered {
                mode: request.delivery.map(|d| d.mode).unwrap_or_default(),
                error: m,
                url,
                ..Delivered::default()
            }),
        }
    }
}

/// A git source URL this worker clones: https, http, ssh (or scp-like `host:path`), git, and
/// file only when the settings allow it. Anything else (git's `ext::` and `fd::` transports
/// run commands or read descriptors) is refused, whoever submitted the spec.
fn check_source_url(url: &str, allow_file: bool) -> Result<(), ActivityError> {
    let url = url.trim();
    let scheme = match url.split_once("://") {
        Some((scheme, _)) => scheme.to_ascii_lowercase(),
        None if url.contains("::") => "transport".to_owned(),
        None if url.contains(':') && !url.starts_with('/') => "ssh".to_owned(),
        None => "path".to_owned(),
    };
    match scheme.as_str() {
        "https" | "http" | "ssh" | "git" => Ok(()),
        "file" if allow_file => Ok(()),
        "file" | "path" => Err(unavailable(format!(
            "{url}: this worker does not clone repositories from its own disk (file:// URLs or \
             paths); use a URL of a git server, or set [git] allow_file_urls = true in the \
             workers' settings"
        ))),
        other => Err(unavailable(format!(
            "{url}: the {other} transport is not allowed; use an https://, ssh:// or git:// URL"
        ))),
    }
}

/// The pull request's body: the agent's answer, then the diffstat.
fn pull_request_body(answer: &str, changes: &Changes) -> String {
    format!(
        "{}\n\n```\n{}```\n\n_Opened by baton._\n",
        answer.trim(),
        changes::diffstat_of(changes)
    )
}

#[cfg(test)]
mod tests {
    use super::check_source_url;

    #[test]
    fn only_network_transports_are_cloned_unless_local_ones_are_allowed() {
        for ok in [
            "https://github.com/acme/p.git",
            "git://127.0.0.1:9418/acme/p.git",
            "ssh://git@github.com/acme/p.git",
            "git@github.com:acme/p.git",
        ] {
            assert!(check_source_url(ok, false).is_ok(), "{ok}");
        }
        for refused in [
            "file:///srv/p.git",
            "/srv/p.git",
            "ext::sh -c touch% /tmp/x",
            "fd::3",
        ] {
            assert!(check_source_url(refused, false).is_err(), "{refused}");
        }
        assert!(check_source_url("file:///srv/p.git", true).is_ok());
        assert!(check_source_url("ext::sh -c id", true).is_err());
    }
}
