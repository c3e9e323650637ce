//! The `run_tool` activity: runs one tool call in the run's workspace, heartbeating so a dead
//! worker's call is retried elsewhere within seconds, and stopping the tool on cancellation.

use std::{path::PathBuf, sync::Arc, time::Duration};

use baton_proto::{InstructionsRequest, ToolRequest, ToolResult, WorkspaceInstructions};
use baton_workflows::activities::BAD_INPUT;
use temporalio_common::error::ApplicationFailure;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::tools::{self, ToolContext, ToolError};

/// How often a running tool heartbeats (the SDK throttles to 0.8 x the heartbeat timeout).
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);

/// Implements the `run_tool` activity contract.
pub struct ToolService {
    workspace_root: PathBuf,
}

impl ToolService {
    /// Runs tools in `<workspace_root>/<run id>`.
    pub fn new(workspace_root: PathBuf) -> Self {
        Self { workspace_root }
    }

    /// The workspace directory of a run.
    pub fn workspace_of(&self, run_id: &str) -> PathBuf {
        let safe: String = run_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let safe = if safe.is_empty() || safe.starts_with('.') {
            format!("run_{safe}")
        } else {
            safe
        };
        self.workspace_root.join(safe)
    }
}

/// AGENTS.md beyond this is cut.
pub const MAX_AGENTS_MD: usize = 32 * 1024;

#[activities]
impl ToolService {
    /// The workspace path and its AGENTS.md (capped), for the system prompt.
    #[activity(definition = baton_workflows::activities::ReadInstructions)]
    pub async fn read_instructions(
        self: Arc<Self>,
        ctx: ActivityContext,
        _request: InstructionsRequest,
    ) -> Result<WorkspaceInstructions, ActivityError> {
        let run_id = ctx.info().workflow_id.clone().unwrap_or_default();
        let workspace = self.workspace_of(&run_id);
        tokio::fs::create_dir_all(&workspace).await.map_err(|e| {
            ActivityError::application(ApplicationFailure::new(format!(
                "cannot create the workspace {}: {e}",
                workspace.display()
            )))
        })?;
        let (agents_md, truncated) = match tokio::fs::read(workspace.join("AGENTS.md")).await {
            Ok(bytes) => {
                let truncated = bytes.len() > MAX_AGENTS_MD;
                let mut end = bytes.len().min(MAX_AGENTS_MD);
                // Cut on a character boundary.
                while end > 0 && std::str::from_utf8(&bytes[..end]).is_err() {
                    end -= 1;
                }
                (
                    String::from_utf8_lossy(&bytes[..end]).into_owned(),
                    truncated,
                )
            }
            Err(_) => (String::new(), false),
        };
        Ok(WorkspaceInstructions {
            workspace: workspace.display().to_string(),
            agents_md,
            truncated,
        })
    }

    /// Runs the call; ordinary failures are `is_error` results, not activity failures.
    #[activity(definition = baton_workflows::activities::RunTool)]
    pub async fn run_tool(
        self: Arc<Self>,
        ctx: ActivityContext,
        request: ToolRequest,
    ) -> Result<ToolResult, ActivityError> {
        let Some(call) = request.call else {
            return Err(ActivityError::application(
                ApplicationFailure::builder("run_tool needs a call")
                    .type_name(BAD_INPUT.to_owned())
                    .non_retryable(true)
                    .build(),
            ));
        };
        let info = ctx.info();
        let run_id = info.workflow_id.clone().unwrap_or_default();
        let attempt = info.attempt;
        let cancel = CancellationToken::new();
        let tool_ctx = ToolContext {
            workspace: self.workspace_of(&run_id),
            timeout: Duration::from_secs(u64::from(request.timeout_seconds.max(1))),
            env: vec![
                ("BATON_RUN_ID".to_owned(), run_id.clone()),
                (
                    "BATON_IDEMPOTENCY_KEY".to_owned(),
                    format!("{run_id}/{}", call.id),
                ),
                ("BATON_ATTEMPT".to_owned(), attempt.to_string()),
            ],
            cancel: cancel.clone(),
        };
        info!(run_id, tool = %call.name, call_id = %call.id, attempt, "tool started");
        let started = tokio::time::Instant::now();
        let run = tools::execute(&tool_ctx, &call);
        tokio::pin!(run);
        let mut beat = tokio::time::interval(HEARTBEAT_EVERY);
        let outcome = loop {
            tokio::select! {
                r = &mut run => break r,
                _ = ctx.cancelled(), if !cancel.is_cancelled() => cancel.cancel(),
                _ = beat.tick() => {
                    let _ = ctx.record_heartbeat(started.elapsed().as_secs()).await;
                }
            }
        };
        match outcome {
            Ok(mut result) => {
                let read_only =
                    baton_workflows::tools::definition(&call.name).is_some_and(|d| d.read_only);
                if attempt > 1 && !read_only {
                    // The model (and the transcript) must know side effects may have happened
                    // twice; the idempotency key lets scripts deduplicate.
                    result.content = format!(
                        "[baton: this call ran again (attempt {attempt}) after its worker failed; \
                         an earlier attempt may already have had effects. Idempotency key: \
                         {run_id}/{}]\n{}",
                        call.id, result.content
                    );
                }
                info!(run_id, tool = %call.name, call_id = %call.id, is_error = result.is_error, "tool finished");
                Ok(result)
            }
            Err(ToolError::Cancelled) => {
                info!(run_id, tool = %call.name, call_id = %call.id, "tool cancelled");
                Err(ActivityError::cancelled())
            }
            Err(e) => {
                warn!(run_id, tool = %call.name, call_id = %call.id, cause = %e, "tool infrastructure failure");
                Err(ActivityError::application(ApplicationFailure::new(
                    e.to_string(),
                )))
            }
        }
    }
}
