//! The approval wait: until every pending call is decided (signal `approval` or update
//! `approve`), the approval timeout fires, the run's deadline passes or the run is cancelled.

use std::time::Duration;

use futures::FutureExt;
use temporalio_workflow::{
    TimerResult, WaitConditionOptions, WorkflowCancellationToken, WorkflowContext,
};

use super::{
    AgentRun, apply,
    deadline::{OnDeadline, within_deadline},
    now_ms,
    options::{step_token, timer_options},
    status,
};
use baton_core::machine::Input;

/// How a wait for decisions ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WaitEnd {
    /// Every call is decided (or the wait was cancelled).
    Settled,
    /// The approval timeout fired first.
    TimedOut,
}

/// Waits for the decisions of step `AwaitApproval`, for at most `timeout_seconds` when set,
/// and tells the machine how the wait ended.
pub(super) async fn await_approval(ctx: &WorkflowContext<AgentRun>, timeout_seconds: Option<u32>) {
    let token = step_token(ctx);
    let wait = async {
        match timeout_seconds {
            None => {
                until_settled(ctx, &token).await;
                WaitEnd::Settled
            }
            Some(secs) => {
                let mut timer =
                    ctx.timer(timer_options(Duration::from_secs(u64::from(secs)), &token));
                let mut settled = std::pin::pin!(until_settled(ctx, &token).fuse());
                temporalio_workflow::select! {
                    _ = settled => WaitEnd::Settled,
                    fired = timer => match fired {
                        TimerResult::Fired => WaitEnd::TimedOut,
                        _ => WaitEnd::Settled,
                    },
                }
            }
        }
    };
    if within_deadline(ctx, &token, wait, OnDeadline::Abandon).await == Some(WaitEnd::TimedOut) {
        let now = now_ms(ctx.workflow_time());
        apply(ctx, Input::ApprovalTimeout { now_ms: now });
    }
}

/// Until every call is decided. A decision that leaves others pending refreshes the status
/// memo (`baton pending`, and `status` with no worker, read it).
async fn until_settled(ctx: &WorkflowContext<AgentRun>, token: &WorkflowCancellationToken) {
    loop {
        let seen = ctx.state(|s| s.run.pending_count());
        let _ = ctx
            .wait_condition_with_options(
                |s: &AgentRun| s.run.approvals_settled() || s.run.pending_count() != seen,
                WaitConditionOptions::builder()
                    .cancellation_token(token.clone())
                    .build(),
            )
            .await;
        if token.is_cancelled() || ctx.state(|s| s.run.approvals_settled()) {
            return;
        }
        status::publish_now(ctx);
    }
}
