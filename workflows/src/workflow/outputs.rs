//! Work in, results out: the workspace prepared before the first step, and the change set and
//! delivery after the last (steps [`Step::CollectChanges`](crate::machine::Step) and
//! [`Step::Deliver`](crate::machine::Step)).
//!
//! The closing activities run on a token of their own, not a child of the run's: a cancelled
//! run still hands back what it changed.

use baton_proto::{CollectRequest, DeliverRequest};
use temporalio_workflow::{WorkflowCancellationToken, WorkflowContext};

use super::{
    AgentRun,
    deadline::{OnDeadline, within_deadline},
    failure_message, now_ms,
    options::{collect_options, deliver_options, prepare_options, step_token},
};
use crate::activities::WorkspaceActivities;

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

/// Collects the finished run's change set.
pub(super) async fn collect(ctx: &mut WorkflowContext<AgentRun>, request: CollectRequest) {
    let token = WorkflowCancellationToken::new();
    let outcome = ctx
        .execute_activity(
            WorkspaceActivities::collect_changes,
            request,
            collect_options(&token),
        )
        .await;
    let now = now_ms(ctx.workflow_time());
    match outcome {
        Ok(changes) => ctx.state_mut(|s| s.run.on_changes(changes, now)),
        Err(e) => {
            let detail = failure_message(&e);
            ctx.state_mut(|s| s.run.on_changes_failed(&detail, now));
        }
    }
}

/// Delivers the finished run's change set.
pub(super) async fn deliver(ctx: &mut WorkflowContext<AgentRun>, request: DeliverRequest) {
    let token = WorkflowCancellationToken::new();
    let outcome = ctx
        .execute_activity(
            WorkspaceActivities::deliver,
            request,
            deliver_options(&token),
        )
        .await;
    let now = now_ms(ctx.workflow_time());
    match outcome {
        Ok(delivered) => ctx.state_mut(|s| s.run.on_delivered(delivered, now)),
        Err(e) => {
            let detail = failure_message(&e);
            ctx.state_mut(|s| s.run.on_delivery_failed(&detail, now));
        }
    }
}
