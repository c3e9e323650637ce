//! Work in, results out: the workspace prepared before the first step, and the change set and
//! delivery after the last (steps [`Step::CollectChanges`](baton_core::machine::Step) and
//! [`Step::Deliver`](baton_core::machine::Step)).
//!
//! The closing activities run on a token of their own, not a child of the run's: a cancelled
//! run still hands back what it changed.

use baton_proto::{CollectRequest, DeliverRequest, VerifyRequest};
use temporalio_workflow::{ActivityExecutionError, WorkflowCancellationToken, WorkflowContext};

use super::{
    AgentRun, apply,
    deadline::{OnDeadline, within_deadline},
    failure_message, now_ms,
    options::{
        collect_options, deliver_options, prepare_options, setup_options, step_token,
        verify_options,
    },
};
use baton_core::machine::Input;

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
        Ok(prepared) => apply(
            ctx,
            Input::WorkspacePrepared {
                prepared,
                now_ms: now,
            },
        ),
        Err(e) => {
            let detail = failure_message(&e);
            apply(
                ctx,
                Input::WorkspaceFailed {
                    detail,
                    now_ms: now,
                },
            );
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
        Ok(result) => apply(
            ctx,
            Input::EnvironmentReady {
                result,
                now_ms: now,
            },
        ),
        Err(e) => {
            let detail = failure_message(&e);
            apply(
                ctx,
                Input::EnvironmentFailed {
                    detail,
                    now_ms: now,
                },
            );
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
        Ok(verification) => apply(
            ctx,
            Input::Verified {
                verification,
                now_ms: now,
            },
        ),
        Err(e) => {
            let detail = failure_message(&e);
            apply(
                ctx,
                Input::VerifyFailed {
                    detail,
                    now_ms: now,
                },
            );
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
    closing(
        ctx,
        call,
        |changes, now_ms| Input::Changes { changes, now_ms },
        |detail, now_ms| Input::ChangesFailed { detail, now_ms },
    )
    .await;
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
        |delivered, now_ms| Input::Delivered { delivered, now_ms },
        |detail, now_ms| Input::DeliveryFailed { detail, now_ms },
    )
    .await;
}

/// Awaits a closing activity and tells the machine how it ended.
async fn closing<T>(
    ctx: &WorkflowContext<AgentRun>,
    call: impl Future<Output = Result<T, ActivityExecutionError>>,
    done: impl FnOnce(T, i64) -> Input,
    failed: impl FnOnce(String, i64) -> Input,
) {
    let outcome = call.await;
    let now = now_ms(ctx.workflow_time());
    let input = match outcome {
        Ok(value) => done(value, now),
        Err(e) => failed(failure_message(&e), now),
    };
    apply(ctx, input);
}
