//! Changing runs: `approve`, `deny`, `cancel`, `send`.

use std::time::Duration;

use baton_proto::{ApprovalDecision, ApprovalOutcome};
use baton_workflows::AgentRun;
use serde_json::json;
use temporalio_client::{
    Client, WorkflowCancelOptions, WorkflowDescribeOptions, WorkflowExecuteUpdateOptions,
    WorkflowHandle, WorkflowSignalOptions, errors::WorkflowUpdateError,
};

use crate::{
    cli::{CancelArgs, DecideArgs, SendArgs},
    connect::{connect, handle, interaction_error, not_found, short},
    exit::{self, Exit},
};

/// How long a validated update may wait for a worker before falling back to a signal.
const UPDATE_BUDGET: Duration = Duration::from_secs(10);

/// `baton approve` / `baton deny`.
pub(crate) async fn decide(args: DecideArgs, approved: bool) -> Result<i32, Exit> {
    let client = connect().await?;
    let h = handle(&client, &args.run);
    let approver = args.approver.clone().unwrap_or_else(|| {
        std::env::var("USER")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "cli".to_owned())
    });
    let ids = if args.all {
        vec!["*".to_owned()]
    } else {
        args.call_ids.clone()
    };
    let verb = if approved { "approved" } else { "denied" };
    let mut outcomes = Vec::new();
    for call_id in ids {
        let decision = serde_json::to_value(ApprovalDecision {
            call_id: call_id.clone(),
            approved,
            approver: approver.clone(),
            reason: args.reason.clone(),
            remember: approved && args.remember,
        })
        .map_err(|e| Exit::infra(format!("cannot encode the decision: {e}")))?;
        if args.signal {
            signal_decision(&h, &args.run, decision).await?;
            outcomes.push(json!({"call_id": call_id, "sent_as": "signal"}));
            if !args.json {
                println!(
                    "{call_id}: {verb} (signal sent; applied when a worker runs {})",
                    args.run
                );
            }
            continue;
        }
        let update = h.execute_update(
            AgentRun::approve,
            decision.clone(),
            WorkflowExecuteUpdateOptions::default(),
        );
        match tokio::time::timeout(UPDATE_BUDGET, update).await {
            Ok(Ok(ApprovalOutcome {
                call_ids,
                still_pending,
                ..
            })) => {
                if !args.json {
                    println!(
                        "{}: {verb}{}",
                        call_ids.join(", "),
                        if still_pending > 0 {
                            format!(" ({still_pending} call(s) still awaiting a decision)")
                        } else {
                            String::new()
                        }
                    );
                }
                outcomes.push(json!({"call_ids": call_ids, "still_pending": still_pending, "sent_as": "update"}));
            }
            Ok(Err(WorkflowUpdateError::NotFound(_))) => {
                return Err(match h.describe(WorkflowDescribeOptions::default()).await {
                    Ok(d) => Exit::usage(format!(
                        "run {} has already ended ({:?}); there is nothing to approve or deny",
                        args.run,
                        d.status()
                    )),
                    Err(_) => not_found(&args.run),
                });
            }
            Ok(Err(WorkflowUpdateError::Failed(failure))) => {
                return Err(Exit::usage(format!(
                    "cannot decide {call_id} of run {}: {}",
                    args.run, failure.message
                )));
            }
            Ok(Err(e)) => {
                return Err(Exit::infra(format!(
                    "the decision could not be delivered: {}",
                    short(&e.to_string())
                )));
            }
            Err(_) => {
                // No worker answered in time: a signal is kept by the server and applied when
                // one does; a duplicate is ignored by the workflow.
                signal_decision(&h, &args.run, decision).await?;
                if !args.json {
                    println!(
                        "{call_id}: {verb} (no worker answered within {}s; sent as a signal, applied when a worker runs {})",
                        UPDATE_BUDGET.as_secs(),
                        args.run
                    );
                }
                outcomes.push(json!({"call_id": call_id, "sent_as": "signal"}));
            }
        }
    }
    if args.json {
        println!(
            "{}",
            json!({"run_id": args.run, "approved": approved, "decisions": outcomes})
        );
    }
    Ok(exit::COMPLETED)
}

/// Sends a decision as the fire-and-forget `approval` signal.
async fn signal_decision(
    h: &WorkflowHandle<Client, AgentRun>,
    run: &str,
    decision: serde_json::Value,
) -> Result<(), Exit> {
    h.signal(
        AgentRun::approval,
        decision,
        WorkflowSignalOptions::default(),
    )
    .await
    .map_err(|e| interaction_error(run, e))
}

/// `baton cancel`.
pub(crate) async fn cancel(args: CancelArgs) -> Result<i32, Exit> {
    let client = connect().await?;
    let h = handle(&client, &args.run);
    h.cancel(WorkflowCancelOptions::builder().reason(args.reason).build())
        .await
        .map_err(|e| interaction_error(&args.run, e))?;
    eprintln!(
        "cancellation requested for {}; running tools are stopped. `baton result {} --wait` shows the end.",
        args.run, args.run
    );
    Ok(exit::COMPLETED)
}

/// `baton send`.
pub(crate) async fn send(args: SendArgs) -> Result<i32, Exit> {
    let client = connect().await?;
    let h = handle(&client, &args.run);
    h.signal(
        AgentRun::message,
        serde_json::Value::String(args.text),
        WorkflowSignalOptions::default(),
    )
    .await
    .map_err(|e| interaction_error(&args.run, e))?;
    eprintln!(
        "message sent to {}; the agent sees it before its next model call",
        args.run
    );
    Ok(exit::COMPLETED)
}
