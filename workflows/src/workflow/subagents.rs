//! A `spawn_agent` call as a child workflow: the child `AgentRun` starts from the
//! parent's workspace as it is now, runs to its end (its own approvals, continue-as-new and
//! change set), and its change set lands on the parent's workspace (`merge_changes`).
//!
//! The parent waits for its children inside the step that runs the batch, so it never
//! continues as new while one runs; the child's own continue-as-new is transparent to the
//! parent (the result comes from the last run of the child's chain). The child carries the
//! step's cancellation token: cancelling the parent cancels the child and waits for its end
//! (`ParentClosePolicy::RequestCancel` covers a parent that is terminated instead).

use baton_proto::{
    MergeRequest, RunResult, RunState as ChildState, SubagentOutcome, TerminationReason,
    ToolRequest, ToolResult,
};
use temporalio_common::error::{ChildWorkflowExecutionError, IncomingError};
use temporalio_workflow::{
    ChildWorkflowOptions, ParentClosePolicy, WorkflowCancellationToken, WorkflowContext,
};

use super::{AgentRun, apply, failure_message, innermost_message, now_ms, options::merge_options};
use baton_core::machine::Input;
use baton_core::{subagent, view};

use crate::activities::WorkspaceActivities;

/// How a child ended, before its changes land.
pub(super) enum Ended {
    /// It ran to an end (completed, failed, cancelled): its result.
    Ran(Box<RunResult>),
    /// It could not start, or its end could not be read.
    Broken(String),
}

/// Starts the child of `request` from the parent's `snapshot` and waits for its end.
pub(super) async fn run_child(
    ctx: &WorkflowContext<AgentRun>,
    request: &ToolRequest,
    snapshot: &str,
    token: &WorkflowCancellationToken,
) -> Ended {
    let mut spec = request.subagent.clone().unwrap_or_default();
    let parent = ctx.state(|s| s.run.run_id.clone());
    spec.workspace = subagent::workspace_from(&parent, snapshot);
    let call_id = request
        .call
        .as_ref()
        .map(|c| c.id.clone())
        .unwrap_or_default();
    let mut summary = spec.task.clone();
    view::cut_text(&mut summary, 200);
    let options = ChildWorkflowOptions::builder()
        .workflow_id(request.subagent_run_id.clone())
        .cancellation_token(token.clone())
        .parent_close_policy(ParentClosePolicy::RequestCancel)
        .static_summary(format!("subagent of {parent}: {summary}"))
        .build();
    let task = spec.task.clone();
    let started = match ctx.start_child_workflow(AgentRun::run, spec, options).await {
        Ok(started) => started,
        Err(e) => return Ended::Broken(format!("the subagent could not start: {e}")),
    };
    let now = now_ms(ctx.workflow_time());
    apply(
        ctx,
        Input::SubagentStarted {
            call_id: call_id.clone(),
            run_id: request.subagent_run_id.clone(),
            task: task.clone(),
            now_ms: now,
        },
    );
    match started.result().await {
        Ok(result) => Ended::Ran(Box::new(result)),
        Err(e) => match cancelled_result(&e) {
            Some(result) => Ended::Ran(Box::new(result)),
            None => Ended::Broken(format!(
                "the subagent failed: {}",
                innermost_message(e.to_string(), e.cause())
            )),
        },
    }
}

/// The result a cancelled child carries in its cancellation details.
fn cancelled_result(e: &ChildWorkflowExecutionError) -> Option<RunResult> {
    let mut cause = e.cause();
    while let Some(c) = cause {
        if let IncomingError::Cancelled(cancelled) = c {
            return cancelled.details::<RunResult>().ok().flatten();
        }
        cause = c.cause();
    }
    None
}

/// The call's result once the child ended: its answer, and its change set landed on the
/// parent's workspace `snapshot` (which moves to the merged tree).
pub(super) async fn land(
    ctx: &WorkflowContext<AgentRun>,
    request: &ToolRequest,
    ended: Ended,
    snapshot: &mut String,
    token: &WorkflowCancellationToken,
) -> ToolResult {
    let call = request.call.clone().unwrap_or_default();
    let result = match ended {
        Ended::Ran(result) => *result,
        Ended::Broken(detail) => {
            return ToolResult {
                call_id: call.id,
                name: call.name,
                content: format!("{detail}. No subagent ran; do the part yourself or try again."),
                is_error: true,
                subagent: Some(SubagentOutcome {
                    run_id: request.subagent_run_id.clone(),
                    status: ChildState::Failed as i32,
                    reason: TerminationReason::InternalError as i32,
                    ..SubagentOutcome::default()
                }),
                ..ToolResult::default()
            };
        }
    };
    let changes = result.changes.clone().unwrap_or_default();
    let (merge, landed) = if changes.patch.is_empty() || changes.final_snapshot.is_empty() {
        ("unchanged".to_owned(), None)
    } else if *snapshot == changes.base_snapshot {
        // Nothing changed here meanwhile: the child's tree is the merged tree.
        ("merged".to_owned(), Some(changes.final_snapshot.clone()))
    } else {
        let request = MergeRequest {
            into: snapshot.clone(),
            base: changes.base_snapshot.clone(),
            theirs: changes.final_snapshot.clone(),
        };
        let merged = ctx
            .execute_activity(
                WorkspaceActivities::merge_changes,
                request,
                merge_options(token),
            )
            .await;
        match merged {
            Ok(m) if m.conflicts.is_empty() => ("merged".to_owned(), Some(m.snapshot)),
            Ok(m) => (format!("conflict: {}", m.conflicts.join(", ")), None),
            Err(e) => (format!("error: {}", failure_message(&e)), None),
        }
    };
    if let Some(merged) = &landed {
        snapshot.clone_from(merged);
    }
    let outcome = SubagentOutcome {
        run_id: request.subagent_run_id.clone(),
        status: result.status,
        reason: result.reason,
        usage: result.usage,
        turns: result.turns,
        files_changed: changes.files_changed,
        merge,
    };
    ToolResult {
        call_id: call.id,
        name: call.name,
        content: subagent::result_text(&result, &outcome),
        is_error: result.status() != ChildState::Completed,
        snapshot: landed.unwrap_or_default(),
        subagent: Some(outcome),
        ..ToolResult::default()
    }
}
