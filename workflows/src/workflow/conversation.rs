//! A conversation between tasks: the wait for the next message (signal `message` or update
//! `send`), at most the idle timeout, raced against the run's deadline and cancellation.

use std::time::Duration;

use futures::FutureExt;
use temporalio_workflow::{TimerResult, WaitConditionOptions, WorkflowContext};

use super::{
    AgentRun, apply,
    deadline::{OnDeadline, within_deadline},
    now_ms,
    options::{step_token, timer_options},
};
use baton_core::machine::Input;

/// Waits for a message for at most `timeout_seconds`; tells the machine when none came.
pub(super) async fn await_message(ctx: &WorkflowContext<AgentRun>, timeout_seconds: u32) {
    let token = step_token(ctx);
    let wait = async {
        let mut timer = ctx.timer(timer_options(
            Duration::from_secs(u64::from(timeout_seconds)),
            &token,
        ));
        let mut message = std::pin::pin!(
            ctx.wait_condition_with_options(
                |s: &AgentRun| !s.run.inbox.is_empty(),
                WaitConditionOptions::builder()
                    .cancellation_token(token.clone())
                    .build(),
            )
            .fuse()
        );
        temporalio_workflow::select! {
            _ = message => false,
            fired = timer => matches!(fired, TimerResult::Fired),
        }
    };
    if within_deadline(ctx, &token, wait, OnDeadline::Abandon).await == Some(true) {
        let now = now_ms(ctx.workflow_time());
        apply(ctx, Input::IdleTimeout { now_ms: now });
    }
}
