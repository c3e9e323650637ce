//! `schedule create --pause-after-failures N`: a schedule pauses itself once
//! N of its runs in a row ended without completing. Temporal's own `pause_on_failure` only
//! sees failed workflows, and a run that ends `max_turns_exceeded` or `provider_error`
//! completes its workflow with that result, so the worker that ends a scheduled run checks:
//! when the run did not complete and carries `baton.pause_after_failures=N`, it asks
//! visibility for the schedule's N - 1 runs that closed before it, and pauses the schedule
//! with a note naming the runs when none of them completed either.
//!
//! The check runs outside the workflow (a worker task fed by a workflow interceptor outside
//! replay): it changes no history, and a worker that dies before it leaves the check to the
//! next run that fails.

use std::cell::RefCell;

use baton_proto::{RunSpec, RunState};
use baton_workflows::{PAUSE_AFTER_FAILURES_LABEL, SCHEDULE_LABEL, WORKFLOW_TYPE};
use futures::StreamExt;
use temporalio_client::{Client, WorkflowListOptions, schedules::PauseScheduleOptions};
use temporalio_sdk::workflow_interceptors::{
    ExecuteWorkflowInput, ExecuteWorkflowResult, InitializeWorkflowInput, InitializeWorkflowOutput,
    WorkflowInterceptor, WorkflowInterceptorConstructor, WorkflowInterceptorContext,
    WorkflowInterceptorFuture, WorkflowNext,
};
use tokio::sync::mpsc;
use tracing::{info, warn};

/// A scheduled run that ended without completing.
#[derive(Debug)]
pub(crate) struct Failed {
    schedule: String,
    after: u32,
    run: String,
    reason: String,
}

/// Starts the task that checks failed scheduled runs; the interceptor's constructor.
pub(crate) fn start(client: Client) -> WorkflowInterceptorConstructor {
    let (tx, mut rx) = mpsc::unbounded_channel::<Failed>();
    tokio::spawn(async move {
        while let Some(failed) = rx.recv().await {
            if let Err(e) = check(&client, &failed).await {
                warn!(schedule = %failed.schedule, run = %failed.run, error = %e, "cannot check whether the schedule should pause");
            }
        }
    });
    WorkflowInterceptorConstructor::new(move |_| ScheduleGuard {
        tx: tx.clone(),
        labels: RefCell::new(None),
    })
}

/// Pauses `failed.schedule` when the `failed.after - 1` runs of it that closed before
/// `failed.run` did not complete either.
async fn check(client: &Client, failed: &Failed) -> anyhow::Result<()> {
    let before = failed.after.saturating_sub(1) as usize;
    let mut others = Vec::new();
    if before > 0 {
        let query = format!(
            "WorkflowType = {} AND BatonLabels = {} AND ExecutionStatus != 'Running' AND \
             WorkflowId != {}",
            quoted(WORKFLOW_TYPE),
            quoted(&format!("{SCHEDULE_LABEL}={}", failed.schedule)),
            quoted(&failed.run)
        );
        let mut stream =
            client.list_workflows(query, WorkflowListOptions::builder().limit(before).build());
        while let Some(run) = stream.next().await {
            let run = run?;
            let state: Option<String> = run
                .search_attributes()
                .get(&baton_workflows::workflow::SA_STATE);
            others.push((run.id().to_owned(), state.unwrap_or_default()));
        }
        if others.len() < before
            || others
                .iter()
                .any(|(_, state)| state == RunState::Completed.as_str_name())
        {
            return Ok(());
        }
    }
    let mut runs: Vec<String> = others.into_iter().map(|(id, _)| id).collect();
    runs.insert(0, format!("{} ({})", failed.run, failed.reason));
    let note = format!(
        "paused by baton: the last {} run(s) ended without completing: {}",
        failed.after,
        runs.join(", ")
    );
    info!(schedule = %failed.schedule, note = %note, "pausing the schedule");
    client
        .get_schedule_handle(&failed.schedule)
        .pause(Some(note), PauseScheduleOptions::default())
        .await?;
    Ok(())
}

fn quoted(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Notes the labels of a run as it starts and reports its end when it did not complete.
struct ScheduleGuard {
    tx: mpsc::UnboundedSender<Failed>,
    /// (schedule, N) when the run's spec asks for the check.
    labels: RefCell<Option<(String, u32)>>,
}

impl WorkflowInterceptor for ScheduleGuard {
    fn initialize_workflow(
        &self,
        _ctx: temporalio_sdk::WorkflowContextView,
        input: InitializeWorkflowInput,
        next: WorkflowNext<'_, InitializeWorkflowInput, InitializeWorkflowOutput>,
    ) -> InitializeWorkflowOutput {
        if let Some(spec) = input.input_ref::<RunSpec>()
            && let (Some(schedule), Some(after)) = (
                spec.labels.get(SCHEDULE_LABEL),
                spec.labels
                    .get(PAUSE_AFTER_FAILURES_LABEL)
                    .and_then(|n| n.parse::<u32>().ok())
                    .filter(|n| *n > 0),
            )
        {
            *self.labels.borrow_mut() = Some((schedule.clone(), after));
        }
        next.run(input)
    }

    fn execute<'a>(
        &'a self,
        ctx: WorkflowInterceptorContext,
        input: ExecuteWorkflowInput,
        next: WorkflowNext<
            'a,
            ExecuteWorkflowInput,
            WorkflowInterceptorFuture<'a, ExecuteWorkflowResult>,
        >,
    ) -> WorkflowInterceptorFuture<'a, ExecuteWorkflowResult> {
        crate::observers::after_each_poll(next.run(input), move |result| {
            if let Some(result) = result
                && !ctx.is_replaying()
                && let Some((schedule, after)) = self.labels.borrow().clone()
                && let Some(result) = crate::run_trace::finished(result)
                && result.status() != RunState::Completed
            {
                let _ = self.tx.send(Failed {
                    schedule,
                    after,
                    run: ctx.workflow_id().to_owned(),
                    reason: result.reason().as_str_name().to_owned(),
                });
            }
        })
    }
}
