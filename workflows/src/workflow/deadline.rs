//! A step's work against the run's deadline (a durable timer) and the run's cancellation: what
//! ended the work, told to the machine.

use std::time::Duration;

use futures::FutureExt;
use temporalio_workflow::{TimerResult, WorkflowCancellationToken, WorkflowContext};

use super::{AgentRun, apply, now_ms, options::timer_options};
use baton_core::machine::Input;

/// What becomes of a step's work when the deadline passes while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnDeadline {
    /// Cancel it and wait for its cancelled end (activities report what they did).
    Drain,
    /// Cancel it and drop it (a wait for a human: nothing to report).
    Abandon,
}

/// How a step's work ended, raced against the deadline.
struct Raced<T> {
    /// The work's output; `None` if it was abandoned.
    output: Option<T>,
    /// The deadline passed first.
    late: bool,
}

/// A cancellation of the whole run (`baton cancel`), with the reason given, if any.
struct CancelRequest {
    reason: Option<String>,
}

/// Runs `work` within the run's deadline and applies a cancellation of the run or a passed
/// deadline to the machine. Returns the work's output when the step should be reported
/// normally, `None` when the machine has already been told why it ended.
///
/// When the deadline interrupts work in flight and passes first, `token` is cancelled
/// (stopping the activities that carry it); `on_deadline` says whether the work is then awaited
/// to its cancelled end.
pub(super) async fn within_deadline<T>(
    ctx: &WorkflowContext<AgentRun>,
    token: &WorkflowCancellationToken,
    work: impl Future<Output = T>,
    on_deadline: OnDeadline,
) -> Option<T> {
    let raced = until_deadline(ctx, token, work, on_deadline).await;
    settle(ctx, raced)
}

async fn until_deadline<T>(
    ctx: &WorkflowContext<AgentRun>,
    token: &WorkflowCancellationToken,
    work: impl Future<Output = T>,
    on_deadline: OnDeadline,
) -> Raced<T> {
    let deadline = ctx.state(|s| {
        s.run
            .deadline_interrupts()
            .then(|| s.run.deadline_ms())
            .flatten()
    });
    let Some(deadline) = deadline else {
        return Raced {
            output: Some(work.await),
            late: false,
        };
    };
    let left = (deadline - now_ms(ctx.workflow_time())).max(0) as u64;
    let mut work = std::pin::pin!(work.fuse());
    let mut timer = ctx.timer(timer_options(Duration::from_millis(left.max(1)), token));
    temporalio_workflow::select! {
        out = work => Raced { output: Some(out), late: false },
        fired = timer => {
            let late = matches!(fired, TimerResult::Fired);
            token.cancel();
            let output = match on_deadline {
                OnDeadline::Drain => Some((&mut work).await),
                OnDeadline::Abandon => None,
            };
            Raced { output, late }
        }
    }
}

/// After a step's work: applies workflow cancellation or a passed deadline to the machine.
/// Returns the work's output when the step should be reported normally.
fn settle<T>(ctx: &WorkflowContext<AgentRun>, raced: Raced<T>) -> Option<T> {
    let now = now_ms(ctx.workflow_time());
    if let Some(cancel) = cancel_request(ctx) {
        apply(
            ctx,
            Input::Cancelled {
                reason: cancel.reason,
                now_ms: now,
            },
        );
        return None;
    }
    if raced.late {
        apply(ctx, Input::DeadlinePassed { now_ms: now });
        return None;
    }
    raced.output
}

fn cancel_request(ctx: &WorkflowContext<AgentRun>) -> Option<CancelRequest> {
    let token = ctx.cancellation_token();
    token.is_cancelled().then(|| CancelRequest {
        reason: token.reason(),
    })
}
