//! Changing runs: `approve`, `deny` (interactively with `ask.rs`), `cancel`, `send`.

use std::borrow::Cow;

use std::{collections::BTreeMap, time::Duration};

use baton_proto::{ApprovalDecision, ApprovalOutcome, PendingCall};
use baton_workflows::AgentRun;
use serde_json::Value;
use temporalio_client::{
    Client, WorkflowCancelOptions, WorkflowDescribeOptions, WorkflowExecuteUpdateOptions,
    WorkflowExecutionStatus, WorkflowHandle, WorkflowSignalOptions,
    errors::{WorkflowInteractionError, WorkflowUpdateError},
};

use crate::{
    ask, calls,
    cli::{CancelArgs, DecideArgs},
    connect::{connect, handle, interaction_error, not_found, short},
    exit::{self, Exit},
    inspect,
    json::{self, Decision},
    safe_text::escape_line,
};

/// How long a validated update may wait for a worker before falling back to a signal.
const UPDATE_BUDGET: Duration = Duration::from_secs(10);

/// `baton approve` / `baton deny`: the named calls, `--all`, or (no call id, on a terminal)
/// each pending call in turn.
pub(crate) async fn decide(args: DecideArgs, approved: bool) -> Result<i32, Exit> {
    if !approved && args.remember {
        return Err(Exit::usage(
            "--remember is for approve (allow alike calls for the rest of the run); a denial \
             is never remembered",
        ));
    }
    let client = connect().await?;
    let h = handle(&client, &args.run);
    let approver = args
        .approver
        .clone()
        .unwrap_or_else(|| crate::connect::local_user(&|k| std::env::var(k).ok()));
    let named = |call_id: String| ApprovalDecision {
        call_id,
        approved,
        approver: approver.clone(),
        reason: args.reason.clone(),
        remember: approved && args.remember,
        identity: String::new(),
    };
    let verb = if approved { "approved" } else { "denied" };
    let decisions = if args.all {
        // The calls pending now, shown and decided one by one: never `*`, which the
        // workflow applies to whatever is pending when it arrives (a newer batch than the
        // one the approver looked at).
        let listed = listed_for_all(&h, &args).await?;
        if !args.json {
            eprintln!(
                "{} the {} call(s) of run {} awaiting a decision now:",
                if approved { "approving" } else { "denying" },
                listed.len(),
                escape_line(&args.run)
            );
            for p in &listed {
                eprintln!(
                    "  {}  {}  {}",
                    escape_line(&p.call_id),
                    escape_line(&p.tool),
                    crate::render::one_line(&p.arguments, 120)
                );
                if calls::looks_cut(&p.arguments) {
                    eprintln!("    {}", calls::cut_note(&args.run, &p.call_id));
                }
            }
        }
        decisions_for(&listed, named)
    } else if !args.call_ids.is_empty() {
        check_pending(&h, &args).await?;
        args.call_ids.iter().cloned().map(named).collect()
    } else {
        match ask_pending(&h, &args, &approver).await? {
            Some(decisions) => decisions,
            None => return Ok(exit::COMPLETED),
        }
    };
    let mut outcomes = Vec::new();
    let mut applied: Vec<String> = Vec::new();
    let mut gone: Vec<String> = Vec::new();
    // Once no worker answered in time, the rest go as signals without waiting again.
    let mut as_signal = args.signal;
    for decision in decisions {
        let call_id = decision.call_id.clone();
        match deliver(&h, &args, decision, &mut as_signal).await {
            Ok(Delivered::Applied(outcome)) => {
                outcomes.push(outcome);
                applied.push(call_id);
            }
            // Listed by `--all`, decided meanwhile (another approver, a timeout): not ours
            // to decide any more; the others still are.
            Ok(Delivered::NoLongerPending(why)) if args.all => {
                eprintln!(
                    "{}: not {verb}: it no longer awaits a decision ({why})",
                    escape_line(&call_id)
                );
                gone.push(call_id);
            }
            Ok(Delivered::NoLongerPending(why)) => {
                let e = Exit::usage(format!(
                    "cannot decide {call_id} of run {}: {why}",
                    args.run
                ));
                return Err(refused_after(e, &applied, verb, &call_id));
            }
            Err(e) => return Err(refused_after(e, &applied, verb, &call_id)),
        }
    }
    if applied.is_empty() && !gone.is_empty() {
        return Err(Exit::usage(format!(
            "none of the {} call(s) listed awaits a decision any more; nothing was {verb} \
             (`baton status {}` shows what awaits one now)",
            gone.len(),
            args.run
        )));
    }
    if args.json {
        json::print(&json::Decided {
            run_id: Cow::from(&args.run),
            approved,
            decisions: Cow::from(&outcomes),
        })?;
    }
    Ok(exit::COMPLETED)
}

/// The error of a decision that failed after `applied` took effect: says so, or the caller
/// (a CI script reading `--json`) would believe nothing was sent.
fn refused_after(mut e: Exit, applied: &[String], verb: &str, call_id: &str) -> Exit {
    if !applied.is_empty() {
        e.message = format!(
            "{} {} {verb} already; then {}: {}; nothing after it was sent",
            applied.join(", "),
            if applied.len() == 1 { "was" } else { "were" },
            call_id,
            e.message
        );
    }
    e
}

/// `--all`: one decision per listed call, for exactly those calls.
fn decisions_for(
    listed: &[PendingCall],
    named: impl Fn(String) -> ApprovalDecision,
) -> Vec<ApprovalDecision> {
    listed.iter().map(|p| named(p.call_id.clone())).collect()
}

/// `--all`: the calls awaiting a decision now (none is a usage error: nothing is sent).
async fn listed_for_all(
    h: &WorkflowHandle<Client, AgentRun>,
    args: &DecideArgs,
) -> Result<Vec<PendingCall>, Exit> {
    let snap = open_snapshot(h, &args.run).await?;
    if snap.status.pending.is_empty() {
        return Err(Exit::usage(format!(
            "run {} has no call awaiting a decision ({}); nothing was sent (`baton status {}` \
             shows what it is doing)",
            args.run,
            snap.status.state().as_str_name(),
            args.run
        )));
    }
    Ok(snap.status.pending)
}

/// What became of one decision sent.
enum Delivered {
    Applied(Decision),
    /// The update refused it because the call no longer awaits a decision (unknown to the
    /// batch now, already decided, nothing pending): why, as the workflow said it.
    NoLongerPending(String),
}

/// The run's status, or a usage error if it has ended (nothing is left to decide).
async fn open_snapshot(
    h: &WorkflowHandle<Client, AgentRun>,
    run: &str,
) -> Result<inspect::Snapshot, Exit> {
    let snap = inspect::snapshot(h, run).await?;
    if snap.temporal_status != WorkflowExecutionStatus::Running {
        return Err(Exit::usage(format!(
            "run {run} has already ended ({}); there is nothing to approve or deny",
            snap.status.state().as_str_name()
        )));
    }
    Ok(snap)
}

/// Before anything is sent: the run is open and every named call awaits a decision, so that a typo in one of several ids sends none of them, and a
/// decision that would go out as a signal (no worker) is not reported as applied when there
/// is nothing to apply it to. The workflow checks again when it applies the decision.
async fn check_pending(
    h: &WorkflowHandle<Client, AgentRun>,
    args: &DecideArgs,
) -> Result<(), Exit> {
    let snap = open_snapshot(h, &args.run).await?;
    // With a worker answering, a single decision goes as an update whose validator says
    // exactly what is wrong (unknown id, already decided, who may decide).
    if snap.source == "query" && args.call_ids.len() <= 1 && !args.signal {
        return Ok(());
    }
    let pending: Vec<&str> = snap
        .status
        .pending
        .iter()
        .map(|p| p.call_id.as_str())
        .collect();
    if pending.is_empty() {
        return Err(Exit::usage(format!(
            "run {} has no call awaiting a decision ({}); nothing was sent (`baton status {}` \
             shows what it is doing)",
            args.run,
            snap.status.state().as_str_name(),
            args.run
        )));
    }
    if let Some(twice) = args
        .call_ids
        .iter()
        .enumerate()
        .find(|(i, id)| args.call_ids[..*i].contains(id))
        .map(|(_, id)| id)
    {
        return Err(Exit::usage(format!(
            "{twice} is given more than once; name each call once; nothing was sent"
        )));
    }
    let unknown: Vec<&str> = args
        .call_ids
        .iter()
        .map(String::as_str)
        .filter(|id| !pending.contains(id))
        .collect();
    if !unknown.is_empty() {
        return Err(Exit::usage(format!(
            "{} of run {} {} not awaiting a decision (unknown, or already decided); awaiting: \
             {}; nothing was sent",
            unknown.join(", "),
            args.run,
            if unknown.len() == 1 { "is" } else { "are" },
            pending.join(", ")
        )));
    }
    Ok(())
}

/// No call id given: asks about each pending call on the terminal; `None` when nothing was
/// decided. Without a terminal: a usage error naming the calls and the commands to run.
async fn ask_pending(
    h: &WorkflowHandle<Client, AgentRun>,
    args: &DecideArgs,
    approver: &str,
) -> Result<Option<Vec<ApprovalDecision>>, Exit> {
    let snap = open_snapshot(h, &args.run).await?;
    let now = crate::render::now_ms();
    let state = snap.status.state().as_str_name();
    let mut pending = snap.status.pending;
    if !ask::can_prompt() {
        return Err(ask::cannot_prompt(&args.run, &pending, now));
    }
    if pending.is_empty() {
        eprintln!(
            "run {} has no call awaiting a decision ({state}); nothing to do",
            args.run
        );
        return Ok(None);
    }
    // The approver decides on the whole arguments, not on the cut form the run's history
    // keeps of long ones.
    let notes = with_whole_arguments(h, &args.run, &mut pending).await;
    let question = ask::Ask {
        run: args.run.clone(),
        approver: approver.to_owned(),
        reason: args.reason.clone(),
        remember: args.remember,
        now_ms: now,
        notes,
    };
    let decisions = ask::ask(question, pending).await?;
    if decisions.is_empty() {
        eprintln!("every call skipped; nothing was sent");
        return Ok(None);
    }
    Ok(Some(decisions))
}

/// Replaces the cut arguments of `pending` with the whole ones (see `calls`); returns, by
/// call id, why those it could not read are shown cut.
async fn with_whole_arguments(
    h: &WorkflowHandle<Client, AgentRun>,
    run: &str,
    pending: &mut [PendingCall],
) -> BTreeMap<String, String> {
    let cut: Vec<&str> = pending
        .iter()
        .filter(|p| calls::looks_cut(&p.arguments))
        .map(|p| p.call_id.as_str())
        .collect();
    let mut notes = BTreeMap::new();
    if cut.is_empty() {
        return notes;
    }
    let found = calls::whole_arguments(h, run, &cut).await;
    for p in pending.iter_mut() {
        if !calls::looks_cut(&p.arguments) {
            continue;
        }
        let whole = match &found {
            Ok(all) => all
                .get(&p.call_id)
                .cloned()
                .unwrap_or_else(|| Err("not found".to_owned())),
            Err(why) => Err(why.clone()),
        };
        match whole {
            Ok(whole) => p.arguments = whole.arguments,
            Err(why) => {
                notes.insert(
                    p.call_id.clone(),
                    format!(
                        "these arguments may be cut (the run's history keeps long ones cut) and \
                         the whole could not be read: {why}"
                    ),
                );
            }
        }
    }
    notes
}

/// Sends one decision: the validated update, or the signal (`as_signal`: `--signal`, or no
/// worker answered an earlier one in time; set when this one is not answered in time).
/// Prints what happened unless `--json`; returns it for `--json`.
async fn deliver(
    h: &WorkflowHandle<Client, AgentRun>,
    args: &DecideArgs,
    decision: ApprovalDecision,
    as_signal: &mut bool,
) -> Result<Delivered, Exit> {
    let call_id = decision.call_id.clone();
    let verb = if decision.approved {
        "approved"
    } else {
        "denied"
    };
    let approved = decision.approved;
    let decision = serde_json::to_value(decision)
        .map_err(|e| Exit::infra(format!("cannot encode the decision: {e}")))?;
    if *as_signal {
        signal_decision(h, &args.run, decision).await?;
        if !args.json {
            println!(
                "{call_id}: {verb} (signal sent; applied when a worker runs {})",
                args.run
            );
        }
        return Ok(Delivered::Applied(Decision::signal(&call_id, approved)));
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
            remembered,
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
                for rule in &remembered {
                    println!("allowed for the rest of the run: {rule}");
                }
            }
            Ok(Delivered::Applied(Decision::update(
                call_ids,
                approved,
                still_pending,
                remembered,
            )))
        }
        Ok(Err(WorkflowUpdateError::NotFound(_))) => {
            Err(not_running(h, &args.run, "there is nothing to approve or deny").await)
        }
        Ok(Err(WorkflowUpdateError::Failed(failure))) if no_longer_pending(&failure.message) => {
            Ok(Delivered::NoLongerPending(failure.message))
        }
        Ok(Err(WorkflowUpdateError::Failed(failure))) => Err(Exit::usage(format!(
            "cannot decide {call_id} of run {}: {}",
            args.run, failure.message
        ))),
        Ok(Err(e)) => Err(Exit::infra(format!(
            "the decision could not be delivered: {}",
            short(&e.to_string())
        ))),
        Err(_) => {
            // No worker answered in time: a signal is kept by the server and applied when
            // one does; a duplicate is ignored by the workflow.
            signal_decision(h, &args.run, decision).await?;
            *as_signal = true;
            if !args.json {
                println!(
                    "{call_id}: {verb} (no worker answered within {}s; sent as a signal, applied when a worker runs {})",
                    UPDATE_BUDGET.as_secs(),
                    args.run
                );
            }
            Ok(Delivered::Applied(Decision::signal(&call_id, approved)))
        }
    }
}

/// Whether the update's refusal says the call no longer awaits a decision (the workflow's
/// `DecisionError::{UnknownCall, AlreadyDecided, NothingPending}`), not that the decision
/// is wrong (an identity the approvers rules do not allow, a malformed decision).
fn no_longer_pending(message: &str) -> bool {
    message.contains("unknown call id")
        || message.contains("has already been decided")
        || message.contains("no tool call is awaiting approval")
}

/// Sends a decision as the fire-and-forget `approval` signal.
async fn signal_decision(
    h: &WorkflowHandle<Client, AgentRun>,
    run: &str,
    decision: Value,
) -> Result<(), Exit> {
    match h
        .signal(
            AgentRun::approval,
            decision,
            WorkflowSignalOptions::default(),
        )
        .await
    {
        Ok(()) => Ok(()),
        Err(WorkflowInteractionError::NotFound(_)) => {
            Err(not_running(h, run, "there is nothing to approve or deny").await)
        }
        Err(e) => Err(interaction_error(run, e)),
    }
}

/// The error for a signal or update the server answered with "not found": the run has ended
/// (say how, and `what` could not be done), or there is no such run.
async fn not_running(h: &WorkflowHandle<Client, AgentRun>, run: &str, what: &str) -> Exit {
    match h.describe(WorkflowDescribeOptions::default()).await {
        Ok(d) => Exit::usage(format!(
            "run {run} has already ended ({:?}); {what} (`baton result {run}` shows how it ended)",
            d.status()
        )),
        Err(_) => not_found(run),
    }
}

/// `baton cancel`.
pub(crate) async fn cancel(args: CancelArgs) -> Result<i32, Exit> {
    let client = connect().await?;
    let h = handle(&client, &args.run);
    // The server accepts a cancel request for a run that has ended, to no effect: say so.
    let ended = |status: WorkflowExecutionStatus| {
        Exit::usage(format!(
            "run {} has already ended ({status:?}); there is nothing to cancel (`baton result {}` shows how it ended)",
            args.run, args.run
        ))
    };
    let desc = h
        .describe(WorkflowDescribeOptions::default())
        .await
        .map_err(|e| interaction_error(&args.run, e))?;
    if desc.status() != WorkflowExecutionStatus::Running {
        return Err(ended(desc.status()));
    }
    if let Err(e) = h
        .cancel(WorkflowCancelOptions::builder().reason(args.reason).build())
        .await
    {
        return Err(match h.describe(WorkflowDescribeOptions::default()).await {
            Ok(d) if d.status() != WorkflowExecutionStatus::Running => ended(d.status()),
            _ => interaction_error(&args.run, e),
        });
    }
    eprintln!(
        "cancellation requested for {}; running tools are stopped. `baton result {} --wait` shows the end.",
        args.run, args.run
    );
    Ok(exit::COMPLETED)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review #9c: `--all` decides exactly the listed calls, each by its id, never `*`.
    #[test]
    fn all_decides_exactly_the_listed_calls() {
        let listed: Vec<PendingCall> = ["call_2_1", "call_2_2"]
            .into_iter()
            .map(|id| PendingCall {
                call_id: id.to_owned(),
                tool: "shell".to_owned(),
                arguments: "{}".to_owned(),
                requested_at_ms: 0,
            })
            .collect();
        let named = |call_id: String| ApprovalDecision {
            call_id,
            approved: true,
            approver: "ann".to_owned(),
            ..Default::default()
        };
        let decisions = decisions_for(&listed, named);
        let ids: Vec<&str> = decisions.iter().map(|d| d.call_id.as_str()).collect();
        assert_eq!(ids, ["call_2_1", "call_2_2"]);
        assert!(decisions.iter().all(|d| d.approved && d.approver == "ann"));
        assert!(decisions_for(&[], named).is_empty());
    }

    #[test]
    fn refusals_that_mean_the_call_moved_on_are_told_apart() {
        use baton_core::error::DecisionError;
        for gone in [
            DecisionError::UnknownCall {
                call_id: "c1".into(),
                pending: vec!["c3".into()],
            },
            DecisionError::AlreadyDecided {
                call_id: "c1".into(),
            },
            DecisionError::NothingPending,
        ] {
            assert!(no_longer_pending(&gone.to_string()), "{gone}");
        }
        let not_allowed = DecisionError::NotAllowed {
            identity: "bob".into(),
            tool: "shell".into(),
            allowed: vec!["alice".into()],
        };
        assert!(!no_longer_pending(&not_allowed.to_string()));
    }
}
