//! Work in, results out: the workspace prepared before the first step, and the change set and
//! delivery after the last (steps [`Step::CollectChanges`](baton_core::machine::Step) and
//! [`Step::Deliver`](baton_core::machine::Step)).
//!
//! The closing activities run on a token of their own, not a child of the run's: a cancelled
//! run still hands back what it changed.

use baton_proto::{CollectRequest, DeliverRequest, VerifyRequest};
use temporalio_workflow::{ActivityExecutionError, WorkflowCancellationToken, WorkflowContext};

use super::{
    AgentRun,
    deadline::{OnDeadline, within_deadline},
    failure_message, now_ms,
    options::{
        collect_options, deliver_options, prepare_options, setup_options, step_token,
        verify_options,
    },
};
use baton_core::machine::RunState;

use crate::activities::{ToolActivities, WorkspaceActivities};

/// Prepares the run's workspace from its source, when it has one and it is not done yet.
pub(super) async fn prepare(ctx: &mut WorkflowContext<AgentRun>) {
    let Some(request) = ctx.state(|s| s.run.prepare_request()) else {
        return;
    };
    let token = step_token(ctx);
    let call = ctx.execute_activity(
        WorkspaceActivities::prepare_workspace,
        request,
        prepare_options(&token),
    );
    // A cancellation or the deadline during a long clone ends the run as such.
    let Some(outcome) = within_deadline(ctx, &token, call, OnDeadline::Drain).await else {
        return;
    };
    let now = now_ms(ctx.workflow_time());
    match outcome {
        Ok(prepared) => ctx.state_mut(|s| s.run.on_workspace_prepared(prepared, now)),
        Err(e) => {
            let detail = failure_message(&e);
            ctx.state_mut(|s| s.run.on_workspace_failed(&detail, now));
        }
    }
}

/// Sets up the run's environment when it has one with setup commands (after the workspace,
/// before the first model call).
pub(super) async fn setup(ctx: &mut WorkflowContext<AgentRun>) {
    let Some(request) = ctx.state(|s| s.run.setup_request()) else {
        return;
    };
    let token = step_token(ctx);
    let options = setup_options(&request, &token);
    let call = ctx.execute_activity(WorkspaceActivities::setup_environment, request, options);
    let Some(outcome) = within_deadline(ctx, &token, call, OnDeadline::Drain).await else {
        return;
    };
    let now = now_ms(ctx.workflow_time());
    match outcome {
        Ok(result) => ctx.state_mut(|s| s.run.on_environment_ready(result, now)),
        Err(e) => {
            let detail = failure_message(&e);
            ctx.state_mut(|s| s.run.on_environment_failed(&detail, now));
        }
    }
}

/// Runs one verification command of the answer (raced against the deadline and a
/// cancellation, like a tool call).
pub(super) async fn verify(ctx: &mut WorkflowContext<AgentRun>, request: VerifyRequest) {
    let token = step_token(ctx);
    let options = verify_options(&request, &token);
    let call = ctx.execute_activity(ToolActivities::run_verification, request, options);
    let Some(outcome) = within_deadline(ctx, &token, call, OnDeadline::Drain).await else {
        return;
    };
    let now = now_ms(ctx.workflow_time());
    match outcome {
        Ok(verification) => ctx.state_mut(|s| s.run.on_verified(verification, now)),
        Err(e) => {
            let detail = failure_message(&e);
            ctx.state_mut(|s| s.run.on_verify_failed(&detail, now));
        }
    }
}

/// Collects the finished run's change set.
pub(super) async fn collect(ctx: &mut WorkflowContext<AgentRun>, request: CollectRequest) {
    let token = WorkflowCancellationToken::new();
    let call = ctx.execute_activity(
        WorkspaceActivities::collect_changes,
        request,
        collect_options(&token),
    );
    closing(ctx, call, RunState::on_changes, RunState::on_changes_failed).await;
}

/// Delivers the finished run's change set.
pub(super) async fn deliver(ctx: &mut WorkflowContext<AgentRun>, request: DeliverRequest) {
    let token = WorkflowCancellationToken::new();
    let call = ctx.execute_activity(
        WorkspaceActivities::deliver,
        request,
        deliver_options(&token),
    );
    closing(
        ctx,
        call,
        RunState::on_delivered,
        RunState::on_delivery_failed,
    )
    .await;
}

/// Awaits a closing activity and tells the machine how it ended.
async fn closing<T>(
    ctx: &WorkflowContext<AgentRun>,
    call: impl Future<Output = Result<T, ActivityExecutionError>>,
    done: impl FnOnce(&mut RunState, T, i64),
    failed: impl FnOnce(&mut RunState, &str, i64),
) {
    let outcome = call.await;
    let now = now_ms(ctx.workflow_time());
    match outcome {
        Ok(value) => ctx.state_mut(|s| done(&mut s.run, value, now)),
        Err(e) => {
            let detail = failure_message(&e);
            ctx.state_mut(|s| failed(&mut s.run, &detail, now));
        }
    }
}
