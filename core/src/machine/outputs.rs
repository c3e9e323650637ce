//! Work in, results out: where the run's workspace came from, and what the run hands
//! back when it ends, whatever the reason: its change set against the starting tree and, when
//! the spec asks for it, delivery (a pushed branch, a pull request).
//!
//! The workflow prepares the workspace before the first step ([`RunState::prepare_request`],
//! then [`Input::WorkspacePrepared`] or [`Input::WorkspaceFailed`]). Once the
//! run is `Finished`, [`RunState::next_step`] asks for [`Step::CollectChanges`] and then
//! [`Step::Deliver`] before [`Step::Finish`], whose result carries both. Delivery is a step the
//! workflow owns: the model never has to remember to push.

use baton_proto::{
    Changes, CollectRequest, DeliverRequest, Delivered, GitSource, InstructionsRequest,
    PrepareRequest, PreparedWorkspace, RunResult, TerminationReason, workspace_source,
};
use serde::{Deserialize, Serialize};

use super::{RunState, Step};
use crate::error::StateError;

/// Delivery modes (`RunSpec.deliver.mode`).
pub const DELIVER_BRANCH: &str = "branch";
/// Delivery mode: push a branch and open a pull request.
pub const DELIVER_PR: &str = "pr";

/// The tree a run started from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WorkspaceStart {
    /// Its snapshot id.
    pub snapshot: String,
    /// The git commit it is at ("" when it is not a repository).
    pub commit: String,
    /// The branch a pull request goes into (git sources).
    pub base_branch: String,
}

/// What the run hands back, as far as it has got.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Outputs {
    /// The tree the run started from (runs with a workspace source; `None`: an empty dir).
    #[serde(default)]
    pub start: Option<WorkspaceStart>,
    /// The final answer missed the output schema once; a second miss ends the run.
    #[serde(default)]
    pub schema_retried: bool,
    /// The `finished` event was told (at the end for runs that collect outputs, so that it
    /// stays the last event and carries them).
    #[serde(default)]
    pub announced: bool,
    /// A call that may change the workspace ran.
    #[serde(default)]
    pub touched: bool,
    /// The change set, once collected (or why it could not be).
    #[serde(default)]
    pub changes: Option<Changes>,
    /// What delivery did, once done.
    #[serde(default)]
    pub delivered: Option<Delivered>,
    /// The environment the run is set up with (from the prepared workspace: a worker's pin,
    /// the spec's, or the tree's own file).
    #[serde(default)]
    pub environment: Option<baton_proto::EnvironmentSpec>,
    /// The environment was set up (or setup failed, or there was none to run).
    #[serde(default)]
    pub environment_ready: bool,
    /// The setup (or maintenance) commands as they ran.
    #[serde(default)]
    pub setup: Vec<baton_proto::Verification>,
}

/// Checks the spec's workspace source and delivery before the run starts.
pub(super) fn validate(spec: &baton_proto::RunSpec) -> Result<(), StateError> {
    let bad = |detail: String| Err(StateError::InvalidWorkspace { detail });
    match spec.workspace.as_ref().and_then(|w| w.source.as_ref()) {
        Some(workspace_source::Source::Git(git)) if git.url.trim().is_empty() => {
            return bad("the git source has no URL; pass --git URL".to_owned());
        }
        Some(workspace_source::Source::Snapshot(s)) if s.id.is_empty() => {
            return bad("the snapshot source has no snapshot id".to_owned());
        }
        _ => {}
    }
    if !spec.output_schema.is_empty() {
        crate::schema::check_schema(&spec.output_schema)
            .map_err(|detail| StateError::InvalidOutputSchema { detail })?;
    }
    let Some(delivery) = &spec.deliver else {
        return Ok(());
    };
    match delivery.mode.as_str() {
        "" => Ok(()),
        DELIVER_BRANCH | DELIVER_PR if git_source(spec).is_none() => bad(format!(
            "--deliver {} needs a git repository to push to: submit with --git URL (or \
             --workspace-of a run that had one)",
            delivery.mode
        )),
        DELIVER_BRANCH | DELIVER_PR => Ok(()),
        other => bad(format!(
            "unknown delivery mode '{other}'; use {DELIVER_BRANCH} or {DELIVER_PR}"
        )),
    }
}

/// The git repository a run came from: its own `--git` source, or the one of the run whose
/// workspace it continues.
pub(super) fn git_source(spec: &baton_proto::RunSpec) -> Option<&GitSource> {
    match spec.workspace.as_ref()?.source.as_ref()? {
        workspace_source::Source::Git(git) => Some(git),
        workspace_source::Source::Snapshot(s) => s.git.as_ref().filter(|g| !g.url.is_empty()),
    }
}

impl RunState {
    /// The workspace to prepare before the first step (`None`: no source, or done already).
    pub fn prepare_request(&self) -> Option<PrepareRequest> {
        if self.outputs.start.is_some() || self.result().is_some() {
            return None;
        }
        let source = self.spec.workspace.clone()?;
        source.source.as_ref()?;
        Some(PrepareRequest {
            source: Some(source),
            environment: self.spec.environment.clone(),
        })
    }

    /// The workspace is ready at `prepared.snapshot`. A fork's change set is against the tree
    /// its source started from (`ForkSource.base_snapshot`), not against this one.
    pub(crate) fn on_workspace_prepared(&mut self, prepared: PreparedWorkspace, now_ms: i64) {
        let fork = self.spec.fork.clone();
        let origin = match self.spec.workspace.as_ref().and_then(|w| w.source.as_ref()) {
            Some(workspace_source::Source::Snapshot(s)) if fork.is_some() => s.origin.clone(),
            Some(workspace_source::Source::Git(git)) if git.r#ref.is_empty() => git.url.clone(),
            Some(workspace_source::Source::Git(git)) => format!("{} at {}", git.url, git.r#ref),
            Some(workspace_source::Source::Snapshot(s)) if !s.from_run.is_empty() => {
                format!("the final workspace of run {}", s.from_run)
            }
            Some(workspace_source::Source::Snapshot(s)) if !s.origin.is_empty() => {
                format!("upload of {}", s.origin)
            }
            _ => "an uploaded snapshot".to_owned(),
        };
        let commit = if prepared.commit.is_empty() {
            String::new()
        } else {
            format!(", commit {}", short(&prepared.commit))
        };
        self.note(
            now_ms,
            &format!(
                "workspace ready: {origin}{commit}, {} files (snapshot {})",
                prepared.files,
                short(&prepared.snapshot)
            ),
        );
        self.workspace_snapshot = Some(prepared.snapshot.clone());
        if let Some(env) = &prepared.environment {
            self.note(
                now_ms,
                &format!(
                    "environment from {}: {} setup, {} maintenance, {} verify command(s)",
                    if env.origin.is_empty() {
                        "the spec"
                    } else {
                        env.origin.as_str()
                    },
                    env.setup.len(),
                    env.maintenance.len(),
                    env.verify.len()
                ),
            );
        }
        self.outputs.environment = prepared.environment.clone();
        let (snapshot, commit) = match fork {
            Some(f) => (f.base_snapshot, f.base_commit),
            None => (prepared.snapshot.clone(), prepared.commit),
        };
        // The tree already differs from the base the fork hands its changes back against.
        self.outputs.touched |= snapshot != prepared.snapshot;
        self.outputs.start = Some(WorkspaceStart {
            snapshot,
            commit,
            base_branch: prepared.base_branch,
        });
    }

    /// The workspace could not be prepared: the run ends `workspace_unavailable`.
    pub(crate) fn on_workspace_failed(&mut self, detail: &str, now_ms: i64) {
        if self.result().is_some() {
            return;
        }
        self.finish(
            now_ms,
            TerminationReason::WorkspaceUnavailable,
            format!("the run's workspace could not be prepared: {detail}"),
        );
    }

    /// What `read_instructions` needs: the prepared snapshot, so a worker that did not prepare
    /// the workspace restores it before reading AGENTS.md.
    pub fn instructions_request(&self) -> InstructionsRequest {
        InstructionsRequest {
            snapshot: self
                .outputs
                .start
                .as_ref()
                .map(|s| s.snapshot.clone())
                .unwrap_or_default(),
        }
    }

    /// The step that collects or delivers the outputs of a finished run, if one is due.
    pub(super) fn outputs_step(&mut self, result: &RunResult, now_ms: i64) -> Option<Step> {
        let start = self.outputs.start.clone().unwrap_or_default();
        let Some(changes) = self.outputs.changes.clone() else {
            let base = start.snapshot.clone();
            let last = self.workspace_snapshot.clone().unwrap_or_default();
            if !self.outputs.touched {
                // Nothing ran that could change the tree: no activity needed.
                self.outputs.changes = Some(Changes {
                    base_commit: start.commit,
                    base_snapshot: base.clone(),
                    final_snapshot: base,
                    ..Changes::default()
                });
                return self.outputs_step(result, now_ms);
            }
            return Some(Step::CollectChanges(CollectRequest {
                base_snapshot: base,
                final_snapshot: last,
                base_commit: start.commit,
            }));
        };
        let delivery = self.spec.deliver.clone().filter(|d| !d.mode.is_empty())?;
        if self.outputs.delivered.is_some() {
            return None;
        }
        let git = git_source(&self.spec).cloned();
        let refusal = if !changes.error.is_empty() {
            Some(format!(
                "not delivered: the change set could not be collected ({})",
                changes.error
            ))
        } else if git.is_none() {
            Some("not delivered: the run has no git repository to push to".to_owned())
        } else if let Some(refusal) = self.verification_allows_delivery() {
            Some(refusal)
        } else if changes.base_commit.is_empty() {
            Some("not delivered: the run's starting tree has no git commit to build on".to_owned())
        } else {
            None
        };
        if changes.patch.is_empty() || refusal.is_some() {
            let delivered = Delivered {
                mode: delivery.mode.clone(),
                nothing_to_deliver: refusal.is_none(),
                error: refusal.unwrap_or_default(),
                ..Delivered::default()
            };
            self.on_delivered(delivered, now_ms);
            return None;
        }
        Some(Step::Deliver(DeliverRequest {
            delivery: Some(delivery),
            git,
            changes: Some(changes),
            base_branch: start.base_branch,
            message: result.answer.clone(),
            at_ms: self.finished_at_ms().unwrap_or(now_ms),
        }))
    }

    /// The model gave its final answer: the run completes, unless the answer must match an
    /// output schema and does not (one corrective turn, then `OutputInvalid`).
    pub(super) fn on_final_answer(&mut self, answer: String, now_ms: i64) {
        if self.spec.output_schema.is_empty() {
            self.answered(now_ms, answer, String::new());
            return;
        }
        match crate::schema::validate(&self.spec.output_schema, &answer) {
            Ok(value) => self.answered(now_ms, answer, value.to_string()),
            Err(why) if !self.outputs.schema_retried => {
                self.outputs.schema_retried = true;
                self.note(
                    now_ms,
                    &format!("the final answer does not match the output schema ({why}); asking once more"),
                );
                self.conversation.push(super::user(
                    &format!(
                        "Your final answer does not match the required JSON Schema: {why}. \
                         Reply again with only the JSON value, matching the schema."
                    ),
                    true,
                ));
            }
            Err(why) => self.finish(
                now_ms,
                TerminationReason::OutputInvalid,
                format!(
                    "the final answer does not match the output schema, even after a \
                     corrective turn: {why}"
                ),
            ),
        }
    }

    /// The change set is collected.
    pub(crate) fn on_changes(&mut self, changes: Changes, now_ms: i64) {
        let text = if changes.files_changed == 0 {
            "changes: none".to_owned()
        } else {
            format!(
                "changes: {} file{} changed, +{} -{} (baton diff {} shows the patch)",
                changes.files_changed,
                if changes.files_changed == 1 { "" } else { "s" },
                changes.insertions,
                changes.deletions,
                self.run_id
            )
        };
        self.note(now_ms, &text);
        self.outputs.changes = Some(changes);
    }

    /// The change set could not be collected (the run's result stands).
    pub(crate) fn on_changes_failed(&mut self, detail: &str, now_ms: i64) {
        self.note(now_ms, &format!("changes could not be collected: {detail}"));
        let start = self.outputs.start.clone().unwrap_or_default();
        self.outputs.changes = Some(Changes {
            base_commit: start.commit,
            base_snapshot: start.snapshot,
            final_snapshot: self.workspace_snapshot.clone().unwrap_or_default(),
            error: detail.to_owned(),
            ..Changes::default()
        });
    }

    /// Delivery ended (`error` says whether it failed).
    pub(crate) fn on_delivered(&mut self, delivered: Delivered, now_ms: i64) {
        let text = if !delivered.error.is_empty() {
            format!(
                "delivery failed: {} (the patch stays available: baton diff {})",
                delivered.error, self.run_id
            )
        } else if delivered.nothing_to_deliver {
            "delivery: nothing changed, nothing pushed".to_owned()
        } else if !delivered.pull_request_url.is_empty() {
            format!(
                "delivered: pushed {} ({}), pull request {}",
                delivered.branch,
                short(&delivered.commit),
                delivered.pull_request_url
            )
        } else {
            format!(
                "delivered: pushed {} ({})",
                delivered.branch,
                short(&delivered.commit)
            )
        };
        self.note(now_ms, &text);
        self.outputs.delivered = Some(delivered);
    }

    /// The delivery activity failed for good.
    pub(crate) fn on_delivery_failed(&mut self, detail: &str, now_ms: i64) {
        let mode = self
            .spec
            .deliver
            .as_ref()
            .map(|d| d.mode.clone())
            .unwrap_or_default();
        self.on_delivered(
            Delivered {
                mode,
                error: detail.to_owned(),
                ..Delivered::default()
            },
            now_ms,
        );
    }

    /// The run's result with what it handed back.
    pub(super) fn with_outputs(&self, mut result: RunResult) -> RunResult {
        result.changes = self.outputs.changes.clone();
        result.delivered = self.outputs.delivered.clone();
        result.verification = self.verify.results.clone();
        result
    }

    /// When the run ended (its last event before the outputs: the run's end, or the last
    /// tool result).
    fn finished_at_ms(&self) -> Option<i64> {
        self.events
            .iter()
            .rev()
            .find(|e| !matches!(e.kind, Some(baton_proto::run_event::Kind::Note(_))))
            .map(|e| e.at_ms)
    }
}

/// The first 12 characters of an id or sha.
fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}
