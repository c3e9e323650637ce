//! Reading runs: `status`, `result`, `transcript` (`watch` is in `watch.rs`). None of them
//! blocks on a missing worker: they read what the server has (describe, memo, history) and only
//! use queries with short timeouts.

use std::borrow::Cow;

use std::time::Duration;

use baton_proto::{RunResult, RunState, RunStatus, TerminationReason};
use baton_workflows::{AgentRun, STATUS_MEMO_KEY};
use temporalio_client::{
    Client, NamespacedClient, WorkflowDescribeOptions, WorkflowExecutionStatus,
    WorkflowGetResultOptions, WorkflowHandle, WorkflowQueryOptions, errors::WorkflowGetResultError,
};

use crate::{
    cli::{ResultArgs, RunArgs},
    connect::{self, connect, handle, interaction_error, short},
    exit::{self, Exit},
    inflight::{self, InFlight},
    json, render,
    waiting::{self, Waited},
};

/// A query answered within this, or the worker is considered absent.
const QUERY_BUDGET: Duration = Duration::from_millis(800);

/// What is known about a run right now.
pub(crate) struct Snapshot {
    pub(crate) temporal_status: WorkflowExecutionStatus,
    pub(crate) status: RunStatus,
    /// "query" (live, from a worker) or "memo" (last recorded state).
    pub(crate) source: &'static str,
    /// The activities in flight (the server's view: attempts, last failure, next retry).
    pub(crate) activities: Vec<InFlight>,
}

/// Current status: a live query when a worker answers quickly, else the memo the workflow keeps.
pub(crate) async fn snapshot(
    h: &WorkflowHandle<Client, AgentRun>,
    run: &str,
) -> Result<Snapshot, Exit> {
    let desc = h
        .describe(WorkflowDescribeOptions::default())
        .await
        .map_err(|e| interaction_error(run, e))?;
    let temporal_status = desc.status();
    // A memo that cannot be read is worth an error (e.g. encrypted with a key this process
    // lacks: the message says which), not a silently empty status.
    let memo_status: Option<RunStatus> = desc
        .memo()
        .get(STATUS_MEMO_KEY)
        .map_err(|e| Exit::infra(format!("cannot read the status memo of {run}: {e}")))?;
    let mut activities = inflight::read(h.client().data_converter(), desc.raw()).await;
    if temporal_status == WorkflowExecutionStatus::Running {
        let query = h.query(AgentRun::status, (), WorkflowQueryOptions::default());
        if let Ok(Ok(status)) = tokio::time::timeout(QUERY_BUDGET, query).await {
            let mut temporal_status = temporal_status;
            // The run ended between the describe and the query (a query waits for the
            // workflow task in progress): the describe's activities may be gone. Describe
            // again; a run handing back its outputs still shows those activities.
            if matches!(
                status.state(),
                RunState::Completed | RunState::Failed | RunState::Cancelled
            ) && let Ok(fresh) = h.describe(WorkflowDescribeOptions::default()).await
            {
                temporal_status = fresh.status();
                activities = inflight::read(h.client().data_converter(), fresh.raw()).await;
            }
            return Ok(Snapshot {
                temporal_status,
                status,
                source: "query",
                activities,
            });
        }
    }
    let mut status = memo_status.unwrap_or_default();
    reconcile(&mut status, temporal_status);
    if temporal_status == WorkflowExecutionStatus::Running {
        if let Some(failing) = failing_workflow_task(h, &desc).await {
            status.last_event = failing;
        } else if let Some(pinned) = waiting_for_its_build(&desc) {
            status.last_event = pinned;
        }
    }
    Ok(Snapshot {
        temporal_status,
        status,
        source: "memo",
        activities,
    })
}

/// Most of a workflow task failure's message shown in `status`.
const TASK_FAILURE_SHOWN: usize = 400;

/// When the run's workflow tasks keep failing (a namespace missing a search attribute, a
/// deployment whose workflow code does not replay the run's history), what the server recorded
/// of the failure; `None` while they do not, or when the history cannot be read in time.
async fn failing_workflow_task(
    h: &WorkflowHandle<Client, AgentRun>,
    desc: &temporalio_client::WorkflowExecutionDescription,
) -> Option<String> {
    use temporalio_client::grpc::WorkflowService;
    use temporalio_common::protos::temporal::api::{
        common::v1::WorkflowExecution, history::v1::history_event::Attributes,
        workflowservice::v1::GetWorkflowExecutionHistoryReverseRequest,
    };
    let pending = desc.raw().pending_workflow_task.as_ref()?;
    if pending.attempt < 2 {
        return None;
    }
    let mut client = h.client().clone();
    let request = GetWorkflowExecutionHistoryReverseRequest {
        namespace: client.namespace(),
        execution: Some(WorkflowExecution {
            workflow_id: desc.id().to_owned(),
            run_id: desc.run_id().to_owned(),
        }),
        maximum_page_size: 50,
        next_page_token: Vec::new(),
    };
    let call = WorkflowService::get_workflow_execution_history_reverse(
        &mut client,
        tonic::Request::new(request),
    );
    let response = tokio::time::timeout(QUERY_BUDGET, call).await.ok()?.ok()?;
    let failed = response
        .into_inner()
        .history?
        .events
        .into_iter()
        .find_map(|e| match e.attributes {
            Some(Attributes::WorkflowTaskFailedEventAttributes(a)) => Some(a),
            _ => None,
        })?;
    let mut message = failed.failure.map(|f| f.message).unwrap_or_default();
    if message.len() > TASK_FAILURE_SHOWN {
        let mut end = TASK_FAILURE_SHOWN;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    Some(format!(
        "the run's workflow tasks are failing (attempt {}): {message}; see the workers' logs",
        pending.attempt
    ))
}

/// When no worker took the run's workflow task and the run is pinned to a build (Worker
/// Versioning): only that build's workers may take it, so say which.
fn waiting_for_its_build(desc: &temporalio_client::WorkflowExecutionDescription) -> Option<String> {
    use temporalio_common::protos::temporal::api::enums::v1::{
        PendingWorkflowTaskState, VersioningBehavior,
    };
    let raw = desc.raw();
    let pending = raw.pending_workflow_task.as_ref()?;
    if pending.state() != PendingWorkflowTaskState::Scheduled {
        return None;
    }
    let info = raw
        .workflow_execution_info
        .as_ref()?
        .versioning_info
        .as_ref()?;
    if info.behavior() != VersioningBehavior::Pinned {
        return None;
    }
    let version = info.deployment_version.as_ref()?;
    Some(format!(
        "waiting for a worker of build {} (deployment {}): the run is pinned to that build; \
         start its workers if none is left (`baton fleet status`)",
        version.build_id, version.deployment_name
    ))
}

/// Brings a run's last recorded status (memo, search attributes) in line with its execution:
/// a run closed from outside (terminated, timed out) never recorded its end, so it may still
/// say `AWAITING_APPROVAL` with calls pending.
pub(crate) fn reconcile(status: &mut RunStatus, temporal: WorkflowExecutionStatus) {
    match temporal {
        WorkflowExecutionStatus::Terminated | WorkflowExecutionStatus::Canceled => {
            if status.state() != RunState::Cancelled {
                status.last_event = if temporal == WorkflowExecutionStatus::Terminated {
                    "terminated (Temporal)".to_owned()
                } else {
                    "cancelled".to_owned()
                };
            }
            status.state = RunState::Cancelled as i32;
            if status.reason == 0 {
                status.reason = TerminationReason::Cancelled as i32;
            }
        }
        WorkflowExecutionStatus::Failed | WorkflowExecutionStatus::TimedOut
            if status.state() != RunState::Failed =>
        {
            status.state = RunState::Failed as i32;
            status.reason = TerminationReason::InternalError as i32;
            status.last_event = format!("the workflow ended: {temporal:?}");
        }
        WorkflowExecutionStatus::Running if status.state == 0 => {
            status.state = RunState::Thinking as i32;
            status.last_event = "waiting for a worker to start the run".to_owned();
        }
        _ => {}
    }
    if temporal != WorkflowExecutionStatus::Running {
        // Nothing can be decided in a closed run.
        status.pending.clear();
    }
}

/// `baton status RUN`.
pub(crate) async fn status(args: RunArgs) -> Result<i32, Exit> {
    let client = connect().await?;
    let h = handle(&client, &args.run);
    let snap = snapshot(&h, &args.run).await?;
    if args.json {
        json::print(&json::Status::new(&args.run, &snap))?;
    } else {
        print!(
            "{}",
            render::status_human(&args.run, &snap.status, snap.source, &snap.activities)
        );
    }
    Ok(exit::COMPLETED)
}

/// Waits for the run's result (history only; no worker needed once it has ended).
pub(crate) async fn wait_result(
    h: &WorkflowHandle<Client, AgentRun>,
    run: &str,
) -> Result<RunResult, Exit> {
    // The server may go away for a moment (a restart, a load balancer): keep waiting, up to
    // RECONNECT_BUDGET of failures in a row, before giving up.
    let mut failing_since: Option<std::time::Instant> = None;
    let mut backoff = Duration::from_secs(1);
    loop {
        match h.get_result(WorkflowGetResultOptions::default()).await {
            Err(WorkflowGetResultError::Rpc(status)) if transient(status.code()) => {
                let since = *failing_since.get_or_insert_with(|| {
                    eprintln!(
                        "· lost the connection to Temporal while waiting for {run} ({}); \
                         retrying (the run goes on)",
                        short(status.message())
                    );
                    std::time::Instant::now()
                });
                if since.elapsed() >= RECONNECT_BUDGET {
                    return Err(Exit::infra(format!(
                        "cannot read the result of {run}: Temporal has not answered for {}s \
                         ({}); the run goes on: `baton result {run} --wait` picks it up again",
                        RECONNECT_BUDGET.as_secs(),
                        short(status.message())
                    )));
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(15));
            }
            other => return result_of(other, h, run).await,
        }
    }
}

/// The result of a run that has ended, or (`Err`) the state of one still going (what it hands
/// back is not known yet): `diff`, `apply`, `download`, `submit --workspace-of`.
pub(crate) async fn ended_result(
    h: &WorkflowHandle<Client, AgentRun>,
    run: &str,
) -> Result<Result<RunResult, RunState>, Exit> {
    let snap = snapshot(h, run).await?;
    if snap.temporal_status == WorkflowExecutionStatus::Running {
        return Ok(Err(snap.status.state()));
    }
    wait_result(h, run).await.map(Ok)
}

/// How long `wait_result` (and `watch`) keep retrying a server that does not answer.
pub(crate) const RECONNECT_BUDGET: Duration = Duration::from_secs(300);

/// Errors worth waiting out: the server or the way to it is down for a moment.
pub(crate) fn transient(code: temporalio_client::tonic::Code) -> bool {
    matches!(
        code,
        temporalio_client::tonic::Code::Unavailable
            | temporalio_client::tonic::Code::DeadlineExceeded
            | temporalio_client::tonic::Code::ResourceExhausted
            | temporalio_client::tonic::Code::Aborted
            | temporalio_client::tonic::Code::Unknown
    )
}

/// The result (or error) of one `get_result` call, as [`wait_result`] returns it.
async fn result_of(
    got: Result<RunResult, WorkflowGetResultError>,
    h: &WorkflowHandle<Client, AgentRun>,
    run: &str,
) -> Result<RunResult, Exit> {
    match got {
        Ok(r) => Ok(r),
        Err(WorkflowGetResultError::Cancelled { details }) => {
            Ok(details.deserialize::<RunResult>().unwrap_or_else(|_| {
                ended(
                    run,
                    RunState::Cancelled,
                    TerminationReason::Cancelled,
                    "cancelled",
                )
            }))
        }
        Err(WorkflowGetResultError::Terminated { .. }) => Ok(ended_with_memo(
            h,
            ended(
                run,
                RunState::Cancelled,
                TerminationReason::Cancelled,
                "terminated",
            ),
        )
        .await),
        Err(WorkflowGetResultError::Failed(e)) => Ok(ended_with_memo(
            h,
            ended(
                run,
                RunState::Failed,
                TerminationReason::InternalError,
                &format!("the workflow failed: {}", short(&e.to_string())),
            ),
        )
        .await),
        Err(WorkflowGetResultError::TimedOut) => Ok(ended_with_memo(
            h,
            ended(
                run,
                RunState::Failed,
                TerminationReason::InternalError,
                "the workflow timed out",
            ),
        )
        .await),
        Err(WorkflowGetResultError::NotFound(_)) => Err(connect::not_found(run)),
        Err(e) => Err(Exit::infra(format!(
            "cannot read the result of {run}: {}; the run goes on: `baton result {run} --wait` \
             picks it up again",
            short(&e.to_string())
        ))),
    }
}

/// `result` with the turns and tokens the run last recorded (its memo), for a run closed
/// from outside, whose workflow never produced a result.
async fn ended_with_memo(h: &WorkflowHandle<Client, AgentRun>, mut result: RunResult) -> RunResult {
    let memo = h
        .describe(WorkflowDescribeOptions::default())
        .await
        .ok()
        .and_then(|d| d.memo().get::<RunStatus>(STATUS_MEMO_KEY).ok().flatten());
    if let Some(status) = memo {
        result.turns = status.turn;
        result.usage = status.usage;
    }
    result
}

fn ended(run: &str, status: RunState, reason: TerminationReason, detail: &str) -> RunResult {
    RunResult {
        run_id: run.to_owned(),
        status: status as i32,
        reason: reason as i32,
        detail: detail.to_owned(),
        ..Default::default()
    }
}

/// Prints a result and returns its exit code.
pub(crate) fn print_result(result: &RunResult, as_json: bool) -> Result<i32, Exit> {
    if as_json {
        json::print(&json::Ended::result(result))?;
    } else {
        print!("{}", render::result_human(result));
    }
    Ok(exit::for_result(result))
}

/// `baton result RUN`.
pub(crate) async fn result(args: ResultArgs) -> Result<i32, Exit> {
    let client = connect().await?;
    let h = handle(&client, &args.run);
    if !args.waiting.wait {
        let snap = snapshot(&h, &args.run).await?;
        if snap.temporal_status == WorkflowExecutionStatus::Running {
            let msg = format!(
                "run {} has not ended: {} (turn {}); use --wait to wait for it",
                args.run,
                snap.status.state().as_str_name(),
                snap.status.turn
            );
            if args.json {
                json::print(&json::NotEnded {
                    run_id: Cow::from(&args.run),
                    status: Cow::from(snap.status.state().as_str_name()),
                    detail: Cow::from(&msg),
                })?;
            } else {
                eprintln!("{msg}");
            }
            return Ok(exit::WAIT_TIMEOUT);
        }
    }
    match waiting::until_detached(args.waiting.wait_timeout, wait_result(&h, &args.run)).await {
        Waited::Done(r) => print_result(&r?, args.json),
        Waited::TimedOut | Waited::Detached => {
            // Like `submit --wait`: detach and say how to come back.
            if args.json {
                let snap = snapshot(&h, &args.run).await.ok();
                let status = snap.as_ref().map(|s| &s.status);
                json::print(&json::StoppedWaiting::new(&args.run, status))?;
            }
            eprintln!("{}", waiting::stopped(&args.run));
            Ok(exit::WAIT_TIMEOUT)
        }
    }
}

/// `baton transcript RUN`: the conversation as the run keeps it (full tool outputs included).
pub(crate) async fn transcript(args: RunArgs) -> Result<i32, Exit> {
    let client = connect().await?;
    let h = handle(&client, &args.run);
    // Fails fast with "not found" before waiting on a query.
    h.describe(WorkflowDescribeOptions::default())
        .await
        .map_err(|e| interaction_error(&args.run, e))?;
    let query = h.query(AgentRun::transcript, (), WorkflowQueryOptions::default());
    let mut items = match tokio::time::timeout(Duration::from_secs(10), query).await {
        Ok(Ok(items)) => items,
        Ok(Err(e)) => {
            return Err(Exit::infra(format!(
                "cannot read the transcript of {}: {}",
                args.run,
                short(&e.to_string())
            )));
        }
        Err(_) => {
            return Err(Exit::infra(format!(
                "no worker answered for {} within 10 s; the transcript is read from a worker: \
                 start one (baton-worker) on the run's task queue and retry",
                args.run
            )));
        }
    };
    // Older items of a continued run and full outputs are in the blob store.
    let head = if items
        .iter()
        .any(|i| matches!(i.kind, Some(baton_proto::item::Kind::Stub(_))))
    {
        h.query(AgentRun::stored, (), WorkflowQueryOptions::default())
            .await
            .map(|r| r.head)
            .unwrap_or_default()
    } else {
        String::new()
    };
    for warning in crate::blobs::resolve(&mut items, &head).await {
        eprintln!("warning: {warning}");
    }
    if args.json {
        json::print(&json::Transcript {
            run_id: Cow::from(&args.run),
            items: Cow::from(&items),
        })?;
    } else {
        print!("{}", render::transcript_human(&items));
    }
    Ok(exit::COMPLETED)
}
