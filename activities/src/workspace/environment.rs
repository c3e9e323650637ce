//! Repository environments: activity `setup_environment` and the worker's
//! `[environments]` settings.
//!
//! Setup runs once per cache key: the key hashes the worker's image, the setup commands, the
//! hosts and secret names they get, and the contents of the `cache_key` files in the prepared
//! tree. After a setup that passed, what it added to the tree (an overlay manifest, e.g.
//! `node_modules/`) is stored in the blob store and the reference `env/<key>` points at it, so
//! a later run with the same key on any worker lays the overlay over its own tree and skips
//! setup (maintenance commands run on such a hit when the cached overlay was made at another
//! commit).
//!
//! Setup and maintenance commands run under the run's sandbox mode with network only to
//! `setup_hosts` (through the worker's egress proxy) and with the `setup_secrets` the worker
//! offers (`[environments] secrets`) as environment variables. Secret values are scrubbed from
//! their output, and a setup that writes one into the tree fails: the snapshot (and the cache)
//! would hold it. No later tool gets a secret or a setup host.

use std::{
    io::Read,
    path::{Path, PathBuf},
    time::Duration,
};

use baton_core::environment::{DEFAULT_SETUP_TIMEOUT_SECONDS, ENVIRONMENT_FILE};
use baton_proto::{EnvironmentSpec, SandboxPolicy, SetupRequest, SetupResult, Verification};
use baton_sandbox::Sandbox;
use baton_store::{
    BlobId, get_json, put_json,
    snapshot::{self, Entry, Manifest},
};
use serde::{Deserialize, Serialize};
use sha2::Digest;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{WorkspaceService, retryable, run_id_of, unavailable};
use crate::{
    heartbeat::Heartbeat,
    tools::{
        HEARTBEAT_EVERY, ToolContext, orphans,
        verify::{check_policy, failure, run_recorded},
    },
};

/// The worker's `[environments]` settings.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct EnvironmentSettings {
    /// Names of the worker's environment variables that setup commands may ask for
    /// (`setup_secrets`); no other variable is ever given to them.
    pub secrets: Vec<String>,
    /// What the cache key says about the worker's image (default: OS, architecture and
    /// `/etc/os-release` ID and VERSION_ID). Change it when the image changes in a way that
    /// invalidates set-up environments (a new Node.js).
    pub image: String,
    /// Environments pinned per repository: they win over the submitter's and the
    /// repository's own.
    pub pins: Vec<EnvironmentPin>,
    /// The repositories (path patterns, as `pins`) each secret is given to; a secret without
    /// an entry goes to every repository's setup that names it, one with an entry only to
    /// those (never to an uploaded tree, which has no repository).
    pub secret_repos: std::collections::BTreeMap<String, Vec<String>>,
}

/// `[[environments.pins]]`: the environment of the repositories matching `repo`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentPin {
    /// A repository path pattern (`acme/*`, `acme/api`; `*` within a component, `**` across),
    /// matched against the URL's path without `.git`, lowercase.
    pub repo: String,
    /// The environment file (TOML, as `.baton/environment.toml`).
    pub file: PathBuf,
}

impl EnvironmentSettings {
    /// Checks the settings (each pinned file parses); the error says what to fix.
    pub fn check(&self) -> Result<(), String> {
        if let Some(bad) = self
            .secrets
            .iter()
            .find(|s| s.is_empty() || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        {
            return Err(format!(
                "[environments] secrets: '{bad}' is not an environment variable name"
            ));
        }
        for pin in &self.pins {
            read_pin(pin)?;
        }
        if let Some(name) = self.secret_repos.keys().find(|n| !self.secrets.contains(n)) {
            return Err(format!(
                "[environments.secret_repos] scopes {name}, which [environments] secrets does \
                 not offer; add it there or drop the entry"
            ));
        }
        Ok(())
    }

    /// The image facts of the cache key.
    pub fn image(&self) -> String {
        if !self.image.is_empty() {
            return self.image.clone();
        }
        let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        let field = |name: &str| {
            release
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .map(|v| v.trim_matches('"').to_owned())
                .unwrap_or_default()
        };
        format!(
            "{}-{} {} {}",
            std::env::consts::OS,
            std::env::consts::ARCH,
            field("ID"),
            field("VERSION_ID")
        )
    }

    /// The environment pinned for the repository at `url`, if any.
    pub(crate) fn pinned(&self, url: &str) -> Result<Option<EnvironmentSpec>, String> {
        let repo = crate::git::repo_path_of(url);
        match self
            .pins
            .iter()
            .find(|p| crate::git::glob_matches(&p.repo.to_ascii_lowercase(), &repo))
        {
            Some(pin) => read_pin(pin).map(Some),
            None => Ok(None),
        }
    }
}

fn read_pin(pin: &EnvironmentPin) -> Result<EnvironmentSpec, String> {
    let origin = format!("the worker's pin for {} ({})", pin.repo, pin.file.display());
    let text =
        std::fs::read_to_string(&pin.file).map_err(|e| format!("{origin}: cannot read it: {e}"))?;
    baton_core::environment::parse(&text, &origin)
}

/// The tree's own `.baton/environment.toml`, read without following links.
pub(crate) fn read_repository_file(workspace: &Path) -> Result<Option<EnvironmentSpec>, String> {
    let origin = format!("the repository's {ENVIRONMENT_FILE}");
    let file = match baton_store::beneath::open_regular_in(workspace, Path::new(ENVIRONMENT_FILE)) {
        Ok(file) => file,
        Err(e) => {
            let e = e.into_io();
            if e.kind() == std::io::ErrorKind::NotFound {
                return Ok(None);
            }
            return Err(format!("{origin}: cannot read it: {e}"));
        }
    };
    let max = baton_core::environment::MAX_FILE_BYTES;
    let (bytes, cut) = baton_store::beneath::read_bounded(file, max)
        .map_err(|e| format!("{origin}: cannot read it: {e}"))?;
    if cut {
        return Err(format!("{origin}: over {max} bytes"));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{origin}: not UTF-8 text"))?;
    baton_core::environment::parse(&text, &origin).map(Some)
}

/// What `env/<key>` points at.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CachedEnvironment {
    /// The overlay manifest's blob id.
    overlay: String,
    /// The commit setup ran at.
    commit: String,
    /// Files in the overlay, and their bytes.
    files: u64,
    bytes: u64,
}

/// The cache key of `env` for the tree `base` on a worker with `image`.
fn cache_key(env: &EnvironmentSpec, base: &Manifest, image: &str) -> String {
    let mut h = sha2::Sha256::new();
    let mut field = |kind: &str, value: &str| {
        h.update(kind.as_bytes());
        h.update([0]);
        h.update(value.as_bytes());
        h.update([0]);
    };
    field("baton-environment", "v1");
    field("image", image);
    for c in &env.setup {
        field("setup", c);
    }
    for host in &env.setup_hosts {
        field("host", host);
    }
    for s in &env.setup_secrets {
        field("secret", s);
    }
    for path in &env.cache_key {
        let content = match base.entries.get(path) {
            Some(Entry::File { blob, .. }) => blob.as_str(),
            Some(_) => "not a file",
            None => "missing",
        };
        field(path, content);
    }
    hex::encode(h.finalize())
}

/// A setup that did not pass (the run ends `setup_failed`).
fn failed(key: &str, commands: Vec<Verification>, why: String) -> SetupResult {
    SetupResult {
        cache_key: key.to_owned(),
        commands,
        failed: why,
        ..SetupResult::default()
    }
}

impl WorkspaceService {
    /// Sets up the run's environment in its workspace (activity `setup_environment`).
    pub(crate) async fn setup(
        &self,
        ctx: ActivityContext,
        request: SetupRequest,
    ) -> Result<SetupResult, ActivityError> {
        let downloaded = || {
            self.cache.as_ref().map_or(0, |c| {
                c.downloaded_bytes
                    .load(std::sync::atomic::Ordering::Relaxed)
            })
        };
        let before = downloaded();
        let mut result = self.set_up(ctx, request).await?;
        result.bytes_downloaded = downloaded().saturating_sub(before);
        Ok(result)
    }

    async fn set_up(
        &self,
        ctx: ActivityContext,
        request: SetupRequest,
    ) -> Result<SetupResult, ActivityError> {
        let _beat = Heartbeat::start(&ctx, HEARTBEAT_EVERY, || ());
        let run_id = run_id_of(&ctx);
        let attempt = ctx.info().attempt;
        let env = request.environment.clone().unwrap_or_default();
        let store = self.tools.store().clone();
        let base_id = BlobId::parse(&request.snapshot)
            .map_err(|e| unavailable(format!("bad snapshot id '{}': {e}", request.snapshot)))?;
        let base: Manifest = get_json(store.as_ref(), &base_id)
            .await
            .map_err(|e| retryable(format!("cannot read the prepared tree: {e}")))?;
        let key = cache_key(&env, &base, &self.environments.image());
        let reference = format!("env/{key}");
        let secrets =
            match self.secrets_for(&env, &request.repository, &|name| std::env::var(name).ok()) {
                Ok(s) => s,
                Err(why) => return Ok(failed(&key, Vec::new(), why)),
            };
        let workspace = self.tools.workspace_of(&run_id);
        let _in_use = self.tools.hold_workspace(&run_id).await;
        let lock = self.tools.lock_of(&run_id);
        let _held = lock.lock().await;
        if attempt > 1 {
            let prefix = format!("{run_id}/setup-");
            let killed = tokio::task::spawn_blocking(move || {
                (0..64)
                    .map(|i| orphans::kill_call(&format!("{prefix}{i}")))
                    .sum::<usize>()
            })
            .await
            .unwrap_or_default();
            if killed > 0 {
                warn!(
                    run_id,
                    attempt, killed, "killed processes left by an earlier setup attempt"
                );
            }
        }

        let cached = match store.get_ref(&reference).await {
            Ok(Some(id)) => match get_json::<CachedEnvironment>(store.as_ref(), &id).await {
                Ok(record) => Some(record),
                Err(e) => {
                    warn!(run_id, cause = %e, "cached environment unreadable; setting up again");
                    None
                }
            },
            Ok(None) => None,
            Err(e) => {
                return Err(retryable(format!(
                    "cannot look up the environment cache: {e}"
                )));
            }
        };
        if let Some(record) = cached {
            let overlay = BlobId::parse(&record.overlay)
                .map_err(|e| retryable(format!("bad cached overlay: {e}")))?;
            match get_json::<Manifest>(store.as_ref(), &overlay).await {
                Ok(overlay) => {
                    return self
                        .restore_cached(
                            &ctx, &run_id, &workspace, &request, &env, &secrets, &key, &base,
                            &overlay, record,
                        )
                        .await;
                }
                Err(e) => warn!(run_id, cause = %e, "cached overlay unreadable; setting up again"),
            }
        }

        // A miss: setup in the prepared tree.
        let restored = snapshot::restore(store.as_ref(), &workspace, &base_id)
            .await
            .map_err(|e| retryable(format!("cannot restore the prepared tree: {e}")))?;
        let started = std::time::Instant::now();
        let (commands, why) = self
            .run_commands(
                &ctx, &run_id, &workspace, &request, &env, &env.setup, &secrets,
            )
            .await?;
        if let Some(why) = why {
            return Ok(failed(&key, commands, why));
        }
        let taken = snapshot::take(store.as_ref(), &workspace)
            .await
            .map_err(|e| retryable(format!("cannot snapshot the set-up tree: {e}")))?;
        let after: Manifest = get_json(store.as_ref(), &taken.id)
            .await
            .map_err(|e| retryable(format!("cannot read the set-up tree: {e}")))?;
        let overlay = snapshot::overlay_of(&base, &after);
        if let Some(why) = secret_in_files(&workspace, &overlay, &secrets).await {
            return Ok(failed(&key, commands, why));
        }
        let (files, bytes) = snapshot::file_stats(&overlay);
        let overlay_id = put_json(store.as_ref(), &overlay)
            .await
            .map_err(|e| retryable(format!("cannot store the environment: {e}")))?;
        let record = CachedEnvironment {
            overlay: overlay_id.to_string(),
            commit: request.commit.clone(),
            files: files as u64,
            bytes,
        };
        let record_id = put_json(store.as_ref(), &record)
            .await
            .map_err(|e| retryable(format!("cannot store the environment: {e}")))?;
        store
            .put_ref(&reference, &record_id)
            .await
            .map_err(|e| retryable(format!("cannot record the environment: {e}")))?;
        info!(
            run_id,
            key,
            files,
            bytes,
            seconds = started.elapsed().as_secs(),
            "environment set up and cached"
        );
        Ok(SetupResult {
            snapshot: taken.id.to_string(),
            cache_hit: false,
            cache_key: key,
            commands,
            failed: String::new(),
            files: u32::try_from(taken.files).unwrap_or(u32::MAX),
            files_added: u32::try_from(files).unwrap_or(u32::MAX),
            bytes_written: restored.bytes_written + bytes,
            cached_commit: request.commit,
            bytes_downloaded: 0,
            reused_tree: false,
        })
    }

    /// A hit: the overlay laid over the prepared tree, restored; maintenance when the overlay
    /// was made at another commit.
    #[allow(clippy::too_many_arguments)]
    async fn restore_cached(
        &self,
        ctx: &ActivityContext,
        run_id: &str,
        workspace: &Path,
        request: &SetupRequest,
        env: &EnvironmentSpec,
        secrets: &[(String, String)],
        key: &str,
        base: &Manifest,
        overlay: &Manifest,
        record: CachedEnvironment,
    ) -> Result<SetupResult, ActivityError> {
        let store = self.tools.store();
        let merged = snapshot::apply_overlay(base, overlay);
        let merged_id = put_json(store.as_ref(), &merged)
            .await
            .map_err(|e| retryable(format!("cannot store the set-up tree: {e}")))?;
        // An idle tree of an earlier run with this environment holds most of it already.
        let current = snapshot::local_snapshot(workspace)
            .filter(|id| id.to_string() == request.snapshot)
            .map(|_| base);
        let reused = self.tools.reuse_tree(run_id, &merged, current).await;
        let restored = snapshot::restore(store.as_ref(), workspace, &merged_id)
            .await
            .map_err(|e| retryable(format!("cannot restore the cached environment: {e}")))?;
        let (files, _) = snapshot::file_stats(&merged);
        let mut result = SetupResult {
            snapshot: merged_id.to_string(),
            cache_hit: true,
            cache_key: key.to_owned(),
            files: u32::try_from(files).unwrap_or(u32::MAX),
            files_added: u32::try_from(record.files).unwrap_or(u32::MAX),
            bytes_written: restored.bytes_written,
            cached_commit: record.commit.clone(),
            reused_tree: reused.is_some(),
            ..SetupResult::default()
        };
        info!(
            run_id,
            key,
            written = restored.written,
            bytes = restored.bytes_written,
            "environment restored from the cache"
        );
        if env.maintenance.is_empty() || record.commit == request.commit {
            return Ok(result);
        }
        let (commands, why) = self
            .run_commands(
                ctx,
                run_id,
                workspace,
                request,
                env,
                &env.maintenance,
                secrets,
            )
            .await?;
        result.commands = commands;
        if let Some(why) = why {
            result.failed = why;
            return Ok(result);
        }
        let taken = snapshot::take(store.as_ref(), workspace)
            .await
            .map_err(|e| retryable(format!("cannot snapshot the maintained tree: {e}")))?;
        let after: Manifest = get_json(store.as_ref(), &taken.id)
            .await
            .map_err(|e| retryable(format!("cannot read the maintained tree: {e}")))?;
        if let Some(why) =
            secret_in_files(workspace, &snapshot::overlay_of(&merged, &after), secrets).await
        {
            result.failed = why;
            return Ok(result);
        }
        result.snapshot = taken.id.to_string();
        result.files = u32::try_from(taken.files).unwrap_or(u32::MAX);
        Ok(result)
    }

    /// The secrets `env` asks for, from the worker's environment; refused unless the worker
    /// offers each.
    fn secrets_for(
        &self,
        env: &EnvironmentSpec,
        repository: &str,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<(String, String)>, String> {
        let repo = (!repository.is_empty()).then(|| crate::git::repo_path_of(repository));
        env.setup_secrets
            .iter()
            .map(|name| {
                if !self.environments.secrets.contains(name) {
                    return Err(format!(
                        "setup_secrets names {name}, which this worker does not offer to setup \
                         commands; list it in the worker's [environments] secrets (and set it in \
                         the worker's environment), or drop it from {}",
                        origin_of(env)
                    ));
                }
                if let Some(patterns) = self.environments.secret_repos.get(name) {
                    let allowed = repo.as_ref().is_some_and(|r| {
                        patterns
                            .iter()
                            .any(|p| crate::git::glob_matches(&p.to_ascii_lowercase(), r))
                    });
                    if !allowed {
                        return Err(format!(
                            "setup secret {name} is for the repositories {} only \
                             ([environments.secret_repos]), not {}",
                            patterns.join(", "),
                            repo.as_deref().unwrap_or("an uploaded tree")
                        ));
                    }
                }
                match lookup(name) {
                    Some(value) if !value.is_empty() => Ok((name.clone(), value)),
                    _ => Err(format!(
                        "setup secret {name} is offered by the worker's [environments] secrets \
                         but not set in its environment; set it on the worker"
                    )),
                }
            })
            .collect()
    }

    /// Runs `commands` in order, stopping at the first failure (`Some(why)`).
    #[allow(clippy::too_many_arguments)]
    async fn run_commands(
        &self,
        ctx: &ActivityContext,
        run_id: &str,
        workspace: &Path,
        request: &SetupRequest,
        env: &EnvironmentSpec,
        commands: &[String],
        secrets: &[(String, String)],
    ) -> Result<(Vec<Verification>, Option<String>), ActivityError> {
        let mode = check_policy(request.sandbox.as_ref()).mode;
        let policy = SandboxPolicy {
            mode,
            network: !env.setup_hosts.is_empty(),
            allowed_hosts: env.setup_hosts.clone(),
            ..SandboxPolicy::default()
        };
        let sandbox = match Sandbox::resolve(Some(&policy), self.tools.sandbox()) {
            Ok(s) => s,
            Err(e) if e.is_retryable() => return Err(failure(e.to_string(), true)),
            Err(e) => {
                return Ok((
                    Vec::new(),
                    Some(format!("setup cannot run on this worker: {e}")),
                ));
            }
        };
        let timeout = match env.setup_timeout_seconds {
            0 => DEFAULT_SETUP_TIMEOUT_SECONDS,
            n => n,
        };
        let mut done = Vec::new();
        for (i, command) in commands.iter().enumerate() {
            let mut vars: Vec<(String, String)> = secrets.to_vec();
            vars.extend([
                ("BATON_RUN_ID".to_owned(), run_id.to_owned()),
                (orphans::CALL_ENV.to_owned(), format!("{run_id}/setup-{i}")),
                ("BATON_SETUP".to_owned(), "1".to_owned()),
            ]);
            let tool_ctx = ToolContext {
                workspace: workspace.to_path_buf(),
                timeout: Duration::from_secs(u64::from(timeout)),
                env: vars,
                cancel: CancellationToken::new(),
                sandbox: sandbox.clone(),
            };
            info!(run_id, command, "setup command started");
            let ran = run_recorded(ctx, &tool_ctx, command, self.tools.store(), secrets).await?;
            info!(
                run_id,
                command,
                exit_code = ran.exit_code,
                duration_ms = ran.duration_ms,
                "setup command finished"
            );
            let ok = ran.exit_code == 0 && !ran.timed_out;
            let why = (!ok).then(|| {
                format!(
                    "setup command `{command}` {} (from {}); the end of its output:\n{}",
                    ran.status,
                    origin_of(env),
                    ran.output_tail.trim_end()
                )
            });
            done.push(ran);
            if why.is_some() {
                return Ok((done, why));
            }
        }
        Ok((done, None))
    }
}

fn origin_of(env: &EnvironmentSpec) -> &str {
    if env.origin.is_empty() {
        "the run's environment"
    } else {
        &env.origin
    }
}

/// A secret value found in a file setup wrote (the first one), in words.
async fn secret_in_files(
    workspace: &Path,
    overlay: &Manifest,
    secrets: &[(String, String)],
) -> Option<String> {
    let needles: Vec<(String, Vec<u8>)> = secrets
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(n, v)| (n.clone(), v.as_bytes().to_vec()))
        .collect();
    if needles.is_empty() {
        return None;
    }
    let files: Vec<String> = overlay
        .entries
        .iter()
        .filter(|(_, e)| matches!(e, Entry::File { .. }))
        .map(|(p, _)| p.clone())
        .collect();
    let root = workspace.to_path_buf();
    tokio::task::spawn_blocking(move || {
        for path in files {
            let Ok(mut file) = baton_store::beneath::open_regular_in(&root, Path::new(&path))
            else {
                continue;
            };
            let longest = needles.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
            let mut window: Vec<u8> = Vec::new();
            let mut chunk = vec![0u8; 1 << 20];
            loop {
                let n = match file.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                window.extend_from_slice(&chunk[..n]);
                if let Some((name, _)) = needles
                    .iter()
                    .find(|(_, v)| memchr::memmem::find(&window, v).is_some())
                {
                    return Some(format!(
                        "setup wrote the secret {name} into {path}, which would be kept in the \
                         run's snapshots and the environment cache; write credentials outside \
                         the workspace (e.g. pass them by environment variable) or delete the \
                         file at the end of setup"
                    ));
                }
                let keep = window.len().saturating_sub(longest.saturating_sub(1));
                window.drain(..keep);
            }
        }
        None
    })
    .await
    .unwrap_or(None)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use super::*;

    fn manifest(lock: &str) -> Manifest {
        let mut entries = BTreeMap::new();
        entries.insert(
            "package-lock.json".to_owned(),
            Entry::File {
                blob: lock.repeat(64),
                size: 1,
                executable: false,
            },
        );
        Manifest {
            version: snapshot::MANIFEST_VERSION,
            entries,
        }
    }

    #[test]
    fn the_cache_key_follows_the_lockfile_the_commands_and_the_image() {
        let env = EnvironmentSpec {
            setup: vec!["npm ci".into()],
            cache_key: vec!["package-lock.json".into()],
            ..EnvironmentSpec::default()
        };
        let k = cache_key(&env, &manifest("a"), "linux");
        assert_eq!(k, cache_key(&env, &manifest("a"), "linux"), "stable");
        assert_ne!(k, cache_key(&env, &manifest("b"), "linux"), "the lockfile");
        assert_ne!(k, cache_key(&env, &manifest("a"), "linux-2"), "the image");
        let other = EnvironmentSpec {
            setup: vec!["npm install".into()],
            ..env.clone()
        };
        assert_ne!(
            k,
            cache_key(&other, &manifest("a"), "linux"),
            "the commands"
        );
        let verify_only = EnvironmentSpec {
            verify: vec!["npm test".into()],
            maintenance: vec!["npm ci --offline".into()],
            ..env.clone()
        };
        assert_eq!(
            k,
            cache_key(&verify_only, &manifest("a"), "linux"),
            "not what runs later"
        );
    }

    #[test]
    fn a_scoped_secret_goes_only_to_its_repositories() {
        let name = "SCOPED_SECRET";
        let lookup = |n: &str| (n == name).then(|| "value".to_owned());
        let settings = EnvironmentSettings {
            secrets: vec![name.into(), "UNSET_SECRET_9c2".into()],
            secret_repos: [(name.to_owned(), vec!["acme/*".to_owned()])].into(),
            ..EnvironmentSettings::default()
        };
        settings.check().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = baton_store::LocalStore::new(dir.path().join("store")).unwrap();
        let tools = crate::tools::ToolService::new(
            dir.path().join("ws"),
            std::sync::Arc::new(store),
            false,
        );
        let service = WorkspaceService::new(tools, crate::git::GitSettings::default())
            .with_environments(settings);
        let env = EnvironmentSpec {
            setup: vec!["true".into()],
            setup_secrets: vec![name.into()],
            ..EnvironmentSpec::default()
        };
        let ok = service
            .secrets_for(&env, "https://github.com/Acme/api.git", &lookup)
            .unwrap();
        assert_eq!(ok, [(name.to_owned(), "value".to_owned())]);
        for other in ["https://github.com/evil/api.git", ""] {
            let e = service.secrets_for(&env, other, &lookup).unwrap_err();
            assert!(e.contains("for the repositories acme/* only"), "{e}");
        }
        let unset = EnvironmentSpec {
            setup_secrets: vec!["UNSET_SECRET_9c2".into()],
            ..env.clone()
        };
        assert!(
            service
                .secrets_for(&unset, "", &lookup)
                .unwrap_err()
                .contains("not set in its environment")
        );
        let unoffered = EnvironmentSpec {
            setup_secrets: vec!["HOME".into()],
            ..env
        };
        assert!(
            service
                .secrets_for(&unoffered, "", &lookup)
                .unwrap_err()
                .contains("does not offer")
        );
    }

    #[test]
    fn a_pin_names_its_repositories_and_a_bad_pin_stops_the_worker() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("acme.toml");
        std::fs::write(&file, "setup = [\"make deps\"]\nverify = [\"make test\"]\n").unwrap();
        let settings = EnvironmentSettings {
            pins: vec![EnvironmentPin {
                repo: "Acme/*".into(),
                file: file.clone(),
            }],
            ..EnvironmentSettings::default()
        };
        settings.check().unwrap();
        let pinned = settings
            .pinned("https://github.com/acme/api.git")
            .unwrap()
            .unwrap();
        assert_eq!(pinned.setup, ["make deps"]);
        assert!(
            pinned.origin.contains("the worker's pin for Acme/*"),
            "{}",
            pinned.origin
        );
        assert_eq!(
            settings.pinned("git@github.com:other/api.git").unwrap(),
            None
        );
        std::fs::write(&file, "setup = \"make deps\"\n").unwrap();
        let e = settings.check().unwrap_err();
        assert!(e.contains("not a valid environment file"), "{e}");
    }

    #[tokio::test]
    async fn a_secret_written_into_the_tree_is_found() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("cfg")).unwrap();
        let big = format!("{}TOKEN-abc{}", "x".repeat((1 << 20) - 4), "y".repeat(100));
        std::fs::write(dir.path().join("cfg/.npmrc"), big).unwrap();
        std::fs::write(dir.path().join("clean"), "nothing here").unwrap();
        let mut entries = BTreeMap::new();
        for p in ["cfg/.npmrc", "clean"] {
            entries.insert(
                p.to_owned(),
                Entry::File {
                    blob: "a".repeat(64),
                    size: 1,
                    executable: false,
                },
            );
        }
        let overlay = Manifest {
            version: snapshot::MANIFEST_VERSION,
            entries,
        };
        let secrets = [("NPM_TOKEN".to_owned(), "TOKEN-abc".to_owned())];
        let found = secret_in_files(dir.path(), &overlay, &secrets)
            .await
            .unwrap();
        assert!(found.contains("NPM_TOKEN into cfg/.npmrc"), "{found}");
        let none = [("NPM_TOKEN".to_owned(), "absent".to_owned())];
        assert_eq!(secret_in_files(dir.path(), &overlay, &none).await, None);
    }
}
