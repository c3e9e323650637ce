//! Finding runs through Temporal visibility (search attributes kept current by the workflow):
//! `list` and `pending`. Nothing here scans histories or needs a worker.

use std::borrow::Cow;

use std::time::{SystemTime, UNIX_EPOCH};

use baton_proto::{RunState, RunStatus};
use baton_workflows::{STATUS_MEMO_KEY, WORKFLOW_TYPE};
use futures::StreamExt;
use temporalio_client::{Client, WorkflowExecution, WorkflowListOptions};

use crate::{
    calls,
    cli::{ListArgs, PendingArgs},
    connect::{connect, short},
    exit::{self, Exit},
    inspect,
    json::{self, ListedRun, PendingRun, Runs, WaitingCall},
    render,
    safe_text::escape_line,
};

/// `'value'` for a visibility query.
fn quoted(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

pub(crate) async fn query_runs(
    client: &Client,
    query: &str,
    limit: usize,
) -> Result<Vec<WorkflowExecution>, Exit> {
    let mut stream = client.list_workflows(
        query.to_owned(),
        WorkflowListOptions::builder().limit(limit).build(),
    );
    let mut runs = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(run) => runs.push(run),
            Err(e) => {
                let msg = short(&e.to_string());
                let hint = if msg.contains("Baton") || msg.contains("search attribute") {
                    "; register baton's search attributes (docs/src/operations/configuration.md#search-attributes)"
                } else {
                    ""
                };
                return Err(Exit::infra(format!("cannot list runs: {msg}{hint}")));
            }
        }
    }
    Ok(runs)
}

/// The run's last recorded status, in line with its execution (see [`inspect::reconcile`]).
fn status_of(run: &WorkflowExecution) -> RunStatus {
    let mut status = match run.memo().get::<RunStatus>(STATUS_MEMO_KEY) {
        Ok(status) => status.unwrap_or_default(),
        Err(e) => {
            // E.g. encrypted with keys this process lacks: say so rather than show an empty
            // status as if nothing were pending.
            eprintln!("· cannot read the status of {}: {e}", run.id());
            RunStatus::default()
        }
    };
    inspect::reconcile(&mut status, run.status());
    status
}

/// The visibility filter for runs in `state`: what the workflow recorded, except that a run
/// closed from outside (terminate, timeout) counts by how it closed, not by its last record.
fn state_filter(state: RunState) -> String {
    let recorded = format!("BatonState = {}", quoted(state.as_str_name()));
    match state {
        RunState::Cancelled => format!(
            "({recorded} OR ExecutionStatus = 'Terminated' OR ExecutionStatus = 'Canceled')"
        ),
        RunState::Failed => {
            format!("({recorded} OR ExecutionStatus = 'Failed' OR ExecutionStatus = 'TimedOut')")
        }
        RunState::Completed => format!("{recorded} AND ExecutionStatus = 'Completed'"),
        _ => format!("{recorded} AND ExecutionStatus = 'Running'"),
    }
}

fn started(run: &WorkflowExecution) -> String {
    run.start_time()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|n| n.as_secs())
                .unwrap_or_default();
            format!("{} ago", render::duration(now.saturating_sub(d.as_secs())))
        })
        .unwrap_or_default()
}

/// `baton list`.
pub(crate) async fn list(args: ListArgs) -> Result<i32, Exit> {
    let mut query = format!("WorkflowType = {}", quoted(WORKFLOW_TYPE));
    if let Some(state) = args.state {
        query.push_str(&format!(" AND {}", state_filter(state)));
    }
    for (k, v) in &args.labels {
        query.push_str(&format!(
            " AND BatonLabels = {}",
            quoted(&format!("{k}={v}"))
        ));
    }
    let client = connect().await?;
    let runs = query_runs(&client, &query, args.limit as usize).await?;
    if args.json {
        let runs = runs
            .iter()
            .map(|r| {
                let st = status_of(r);
                ListedRun {
                    run_id: Cow::from(r.id()),
                    state: Cow::from(st.state().as_str_name()),
                    reason: ((st.reason != 0).then(|| st.reason().as_str_name())).map(Cow::from),
                    turn: st.turn,
                    temporal_status: format!("{:?}", r.status()),
                    task_queue: Cow::from(r.task_queue()),
                }
            })
            .collect();
        json::print(&Runs { runs })?;
    } else if runs.is_empty() {
        eprintln!("no runs match");
    } else {
        let width = runs
            .iter()
            .map(|r| r.id().chars().count())
            .max()
            .unwrap_or(0);
        for r in &runs {
            let st = status_of(r);
            println!(
                "{:<width$}  {:<17}  turn {:<3}  {}",
                r.id(),
                st.state().as_str_name(),
                st.turn,
                started(r)
            );
        }
    }
    Ok(exit::COMPLETED)
}

/// The calls of `pending` (of run `run`) whose arguments look cut, whole: read through the
/// run's conversation and the blob store (see `calls`); `arguments_unreadable` says why not.
async fn whole_arguments_of(client: &Client, run: &str, pending: &mut [WaitingCall]) {
    let cut: Vec<&str> = pending
        .iter()
        .filter(|p| calls::looks_cut(&p.arguments))
        .map(|p| p.call_id.as_str())
        .collect();
    if cut.is_empty() {
        return;
    }
    let h = crate::connect::handle(client, run);
    let mut found = calls::whole_arguments(&h, run, &cut).await;
    for p in pending.iter_mut() {
        let whole = match &mut found {
            Err(why) if calls::looks_cut(&p.arguments) => Err(why.clone()),
            Err(_) => continue,
            Ok(all) => match all.remove(&p.call_id) {
                Some(whole) => whole,
                None => continue,
            },
        };
        match whole {
            Ok(whole) => {
                p.arguments_cut = whole.cut_in_history;
                p.arguments = whole.arguments;
            }
            Err(why) => {
                p.arguments_cut = true;
                p.arguments_unreadable = Some(why);
            }
        }
    }
}

/// `baton pending`.
pub(crate) async fn pending(args: PendingArgs) -> Result<i32, Exit> {
    let query = format!(
        "WorkflowType = {} AND ExecutionStatus = 'Running' AND BatonAwaitingApproval = true",
        quoted(WORKFLOW_TYPE)
    );
    let client = connect().await?;
    let runs = query_runs(&client, &query, args.limit as usize).await?;
    let now_ms = render::now_ms();
    if args.json {
        let mut listed = Vec::with_capacity(runs.len());
        for r in &runs {
            let st = status_of(r);
            let mut pending: Vec<WaitingCall> = st
                .pending
                .into_iter()
                .map(|p| WaitingCall::new(p, now_ms))
                .collect();
            whole_arguments_of(&client, r.id(), &mut pending).await;
            listed.push(PendingRun {
                run_id: Cow::from(r.id()),
                turn: st.turn,
                parent_run_id: st.parent_run_id.clone(),
                pending,
            });
        }
        json::print(&Runs { runs: listed })?;
        return Ok(exit::COMPLETED);
    }
    if runs.is_empty() {
        eprintln!("no run is waiting for approval");
        return Ok(exit::COMPLETED);
    }
    for r in &runs {
        let st = status_of(r);
        match st.parent_run_id.as_str() {
            "" => println!("{}  (turn {})", escape_line(r.id()), st.turn),
            parent => println!(
                "{}  (turn {}, subagent of {})",
                escape_line(r.id()),
                st.turn,
                escape_line(parent)
            ),
        }
        for p in &st.pending {
            println!(
                "  {}  {}  {}  (waiting {})",
                escape_line(&p.call_id),
                escape_line(&p.tool),
                render::one_line(&p.arguments, 120),
                render::duration(((now_ms - p.requested_at_ms).max(0) / 1000) as u64)
            );
            if calls::looks_cut(&p.arguments) {
                println!("    {}", calls::cut_note(r.id(), &p.call_id));
            }
        }
        println!(
            "  decide: baton approve {} <CALL_ID>|--all  |  baton deny {} <CALL_ID>|--all --reason \"...\"",
            r.id(),
            r.id()
        );
    }
    Ok(exit::COMPLETED)
}
