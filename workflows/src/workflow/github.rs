//! Progress on the run's GitHub issue or pull request: before a step, the report the machine
//! asks for (activity `report_progress`). Runs without `RunSpec.github` schedule nothing.

use temporalio_workflow::{WorkflowCancellationToken, WorkflowContext};

use super::{AgentRun, apply, failure_message, now_ms, options::report_options};
use baton_core::machine::Input;
use baton_core::machine::Step;

use crate::activities::GitHubActivities;

/// Reports before `step` when the machine says a report is due; never fails the run.
pub(super) async fn report(ctx: &WorkflowContext<AgentRun>, step: &Step) {
    let Some(request) = ctx.state_mut(|s| s.run.progress_request(step)) else {
        return;
    };
    send(ctx, request).await;
}

/// The first report of a run that reports, before its workspace is prepared: queued.
pub(super) async fn report_queued(ctx: &WorkflowContext<AgentRun>) {
    let Some(request) = ctx.state_mut(|s| s.run.progress_queued()) else {
        return;
    };
    send(ctx, request).await;
}

async fn send(ctx: &WorkflowContext<AgentRun>, request: baton_proto::ProgressRequest) {
    // A token of its own, as the closing activities have: a cancelled run still says so.
    let token = WorkflowCancellationToken::new();
    let outcome = ctx
        .execute_activity(
            GitHubActivities::report_progress,
            request,
            report_options(&token),
        )
        .await;
    let now = now_ms(ctx.workflow_time());
    match outcome {
        Ok(reported) => apply(ctx, Input::ProgressReported { reported }),
        Err(e) => {
            let detail = failure_message(&e);
            apply(
                ctx,
                Input::ProgressFailed {
                    detail,
                    now_ms: now,
                },
            );
        }
    }
}
