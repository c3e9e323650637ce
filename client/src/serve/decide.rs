//! Approvals from comments: `/approve <call id> [<call id> ...]`, `/approve all` (exactly the
//! calls waiting now, each by its id) and `/deny <call id> <reason>` on the issue or pull
//! request of a run, from a user with the repository permission, become the run's `approve`
//! update sent with the Temporal identity `github:<login>` (what the policy's `approvers`
//! match). Each decision's update id is `<delivery>/<call id>`: a redelivered comment decides
//! nothing twice. A refused decision (not pending, not an allowed approver) is answered with
//! a comment saying why.

use std::time::Duration;

use baton_proto::{ApprovalDecision, ApprovalOutcome};
use baton_workflows::AgentRun;
use temporalio_client::{
    WorkflowExecuteUpdateOptions, WorkflowQueryOptions, errors::WorkflowUpdateError,
};

use crate::connect::{connect_as, handle};

/// How long a decision waits for a worker to take it.
const DECIDE_BUDGET: Duration = Duration::from_secs(20);

/// A decision asked for in a comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    /// `/approve <ids>`.
    Approve(Vec<String>),
    /// `/approve all`.
    ApproveAll,
    /// `/deny <id> <reason>`.
    Deny { call_id: String, reason: String },
}

/// The decision in `body`, if it starts with `/approve` or `/deny`; `Err` says what is wrong
/// with one that does.
pub(crate) fn command_of(body: &str) -> Option<Result<Command, String>> {
    let body = body.trim();
    let (word, rest) = body
        .split_once(char::is_whitespace)
        .map_or((body, ""), |(w, r)| (w, r.trim()));
    match word {
        "/approve" => {
            let ids: Vec<String> = rest.split_whitespace().map(str::to_owned).collect();
            Some(match ids.as_slice() {
                [] => Err("name the calls: `/approve <call id>` or `/approve all`".into()),
                [all] if all == "all" => Ok(Command::ApproveAll),
                _ => Ok(Command::Approve(ids)),
            })
        }
        "/deny" => {
            let (call_id, reason) = rest
                .split_once(char::is_whitespace)
                .map_or((rest, ""), |(id, r)| (id, r.trim()));
            Some(if call_id.is_empty() {
                Err("name the call: `/deny <call id> <reason>`".into())
            } else {
                Ok(Command::Deny {
                    call_id: call_id.to_owned(),
                    reason: reason.to_owned(),
                })
            })
        }
        _ => None,
    }
}

/// Sends `command` for `login` to run `run_id`; what to say on the issue when something was
/// refused (`None`: every decision was taken; the run's own comment shows the rest).
pub(crate) async fn decide(
    run_id: &str,
    login: &str,
    command: Command,
    delivery: &str,
) -> Result<Option<String>, String> {
    let client = connect_as(Some(format!("github:{login}")))
        .await
        .map_err(|e| e.message)?;
    let h = handle(&client, run_id);
    let decisions: Vec<ApprovalDecision> = match command {
        Command::Approve(ids) => ids
            .into_iter()
            .map(|call_id| decision(call_id, true, String::new()))
            .collect(),
        Command::Deny { call_id, reason } => vec![decision(call_id, false, reason)],
        Command::ApproveAll => {
            let status = h
                .query(AgentRun::status, (), WorkflowQueryOptions::default())
                .await
                .map_err(|e| format!("cannot read run {run_id}'s pending calls: {e}"))?;
            if status.pending.is_empty() {
                return Ok(Some(format!(
                    "@{login}: run `{run_id}` has no call waiting for approval."
                )));
            }
            status
                .pending
                .into_iter()
                .map(|p| decision(p.call_id, true, String::new()))
                .collect()
        }
    };
    let mut refused = Vec::new();
    for d in decisions {
        let call_id = d.call_id.clone();
        let value = serde_json::to_value(&d).map_err(|e| e.to_string())?;
        let update = h.execute_update(
            AgentRun::approve,
            value,
            WorkflowExecuteUpdateOptions::builder()
                .update_id(format!("{delivery}/{call_id}"))
                .build(),
        );
        match tokio::time::timeout(DECIDE_BUDGET, update).await {
            Ok(Ok(ApprovalOutcome { .. })) => {}
            Ok(Err(WorkflowUpdateError::Failed(failure))) => {
                refused.push(format!("`{call_id}`: {}", failure.message));
            }
            Ok(Err(WorkflowUpdateError::NotFound(_))) => {
                refused.push(format!("`{call_id}`: run `{run_id}` is not running"));
            }
            Ok(Err(e)) => return Err(format!("cannot decide {call_id}: {e}")),
            Err(_) => {
                return Err(format!(
                    "no worker took the decision on {call_id} within {}s",
                    DECIDE_BUDGET.as_secs()
                ));
            }
        }
    }
    Ok((!refused.is_empty()).then(|| {
        format!(
            "@{login}: not taken:\n\n{}",
            refused
                .iter()
                .map(|r| format!("- {r}"))
                .collect::<Vec<_>>()
                .join("\n")
        )
    }))
}

fn decision(call_id: String, approved: bool, reason: String) -> ApprovalDecision {
    ApprovalDecision {
        call_id,
        approved,
        reason,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_read_from_comments() {
        assert_eq!(
            command_of("/approve call_3_1"),
            Some(Ok(Command::Approve(vec!["call_3_1".into()])))
        );
        assert_eq!(
            command_of(" /approve call_3_1 call_3_2\n"),
            Some(Ok(Command::Approve(vec![
                "call_3_1".into(),
                "call_3_2".into()
            ])))
        );
        assert_eq!(command_of("/approve all"), Some(Ok(Command::ApproveAll)));
        assert_eq!(
            command_of("/deny call_3_1 it deletes the build cache"),
            Some(Ok(Command::Deny {
                call_id: "call_3_1".into(),
                reason: "it deletes the build cache".into()
            }))
        );
        assert!(matches!(command_of("/approve"), Some(Err(_))));
        assert!(matches!(command_of("/deny"), Some(Err(_))));
        assert_eq!(command_of("/approved it"), None);
        assert_eq!(command_of("looks good, /approve later"), None);
    }
}
