//! The run's environment: set up between the prepared workspace and the first model
//! call ([`RunState::setup_request`], then [`Input::EnvironmentReady`] or
//! [`Input::EnvironmentFailed`]). A setup that fails ends the run `setup_failed` before
//! any model call; one that passes (or came from the cache) makes its tree the run's starting
//! tree, so the change set leaves out what setup added.

use baton_proto::{EnvironmentSpec, RunSpec, SetupRequest, SetupResult, TerminationReason};

use super::RunState;
use crate::error::StateError;

/// Checks the spec's environment.
pub(super) fn validate(spec: &RunSpec) -> Result<(), StateError> {
    let Some(env) = &spec.environment else {
        return Ok(());
    };
    crate::environment::validate(env).map_err(|detail| StateError::InvalidWorkspace { detail })?;
    let has_source = spec.workspace.as_ref().is_some_and(|w| w.source.is_some());
    if !env.setup.is_empty() && !has_source {
        return Err(StateError::InvalidWorkspace {
            detail: "an environment's setup needs a workspace to set up: submit with --git URL or \
                     --workspace-from DIR"
                .to_owned(),
        });
    }
    Ok(())
}

impl RunState {
    /// The environment the run is set up with (once the workspace is prepared).
    pub fn environment(&self) -> Option<&EnvironmentSpec> {
        self.outputs.environment.as_ref()
    }

    /// The setup to do before the first model call (`None`: none, or done).
    pub fn setup_request(&self) -> Option<SetupRequest> {
        if self.outputs.environment_ready || self.result().is_some() || self.spec.fork.is_some() {
            return None;
        }
        let env = self.outputs.environment.clone()?;
        if !crate::environment::needs_setup(&env) {
            return None;
        }
        let start = self.outputs.start.clone()?;
        Some(SetupRequest {
            snapshot: start.snapshot,
            commit: start.commit,
            environment: Some(env),
            sandbox: self.spec.sandbox.clone(),
            repository: super::outputs::git_source(&self.spec)
                .map(|g| g.url.clone())
                .unwrap_or_default(),
        })
    }

    /// Setup ran (or came from the cache): its tree is the run's starting tree, or it failed
    /// and the run ends `setup_failed`.
    pub(crate) fn on_environment_ready(&mut self, result: SetupResult, now_ms: i64) {
        if self.result().is_some() {
            return;
        }
        self.outputs.environment_ready = true;
        let origin = self
            .outputs
            .environment
            .as_ref()
            .map(|e| e.origin.clone())
            .unwrap_or_default();
        let key = result
            .cache_key
            .get(..12)
            .unwrap_or(&result.cache_key)
            .to_owned();
        if !result.failed.is_empty() {
            self.outputs.setup = result.commands;
            self.finish(
                now_ms,
                TerminationReason::SetupFailed,
                format!("the environment could not be set up: {}", result.failed),
            );
            return;
        }
        let ran: u64 = result.commands.iter().map(|c| c.duration_ms).sum();
        let text = if result.cache_hit {
            let maintenance = if result.commands.is_empty() {
                String::new()
            } else {
                format!(
                    ", {} maintenance command(s) in {:.1} s",
                    result.commands.len(),
                    ran as f64 / 1000.0
                )
            };
            format!(
                "environment ready from the cache (key {key}, set up at commit {}; {} files added, \
                 {} bytes written, {} bytes downloaded{maintenance}; from {origin})",
                short(&result.cached_commit),
                result.files_added,
                result.bytes_written,
                result.bytes_downloaded,
            )
        } else {
            format!(
                "environment set up: {} command(s) in {:.1} s, {} files added, {} bytes written, \
                 {} bytes downloaded (cached under key {key}; from {origin})",
                result.commands.len(),
                ran as f64 / 1000.0,
                result.files_added,
                result.bytes_written,
                result.bytes_downloaded,
            )
        };
        self.note(now_ms, &text);
        self.outputs.setup = result.commands;
        self.workspace_snapshot = Some(result.snapshot.clone());
        if let Some(start) = &mut self.outputs.start {
            start.snapshot = result.snapshot;
        }
    }

    /// The setup activity failed for good (the blob store, the workspace).
    pub(crate) fn on_environment_failed(&mut self, detail: &str, now_ms: i64) {
        if self.result().is_some() {
            return;
        }
        self.outputs.environment_ready = true;
        self.finish(
            now_ms,
            TerminationReason::SetupFailed,
            format!("the environment could not be set up: {detail}"),
        );
    }
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}
