//! Approvals from comments: `/approve <call id> [<call id> ...]`, `/approve all` (exactly the
//! calls waiting now, each by its id) and `/deny <call id> <reason>` on the issue or pull
//! request of a run, from a user with the repository permission, become the run's `approve`
//! update sent with the Temporal identity `github:<login>` (what the policy's `approvers`
//! match), or `github-team:<org>/<team>/<login>` when the policy allows a team the user is an
//! active member of. Each decision's update id is `<delivery>/<call id>`: a redelivered comment decides
//! nothing twice. A refused decision (not pending, not an allowed approver) is answered with
//! a comment saying why.

use std::time::Duration;

use baton_core::policy::GITHUB_TEAM;
use baton_github::GitHub;
use baton_proto::{ApprovalDecision, ApprovalOutcome};
use baton_workflows::AgentRun;
use temporalio_client::{
    Client, WorkflowExecuteUpdateOptions, WorkflowHandle, WorkflowQueryOptions,
    errors::WorkflowUpdateError,
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

/// Sends `command` for `login` to run `run_id` (of `owner/repo`); what to say on the issue
/// when something was refused (`None`: every decision was taken; the run's own comment shows
/// the rest). A decision the run's `approvers` refuse for `github:<login>` but allow for a
/// GitHub team (`github-team:<org>/<team>`) is sent again as
/// `github-team:<org>/<team>/<login>` when GitHub says the user is an active member.
pub(crate) async fn decide(
    github: &GitHub,
    (owner, repo): (&str, &str),
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
        let update_id = format!("{delivery}/{call_id}");
        let mut outcome = send(&h, &d, &update_id, run_id).await?;
        if let Err(why) = &outcome
            && let Some(team) = team_of(github, (owner, repo), why, login).await?
        {
            let as_member = connect_as(Some(format!("{team}/{login}")))
                .await
                .map_err(|e| e.message)?;
            let h = handle(&as_member, run_id);
            outcome = send(&h, &d, &format!("{update_id}/{team}"), run_id).await?;
        }
        if let Err(why) = outcome {
            refused.push(format!("`{call_id}`: {why}"));
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

/// Sends one decision: `Ok(Err(why))` when the run refused it, `Err` when it could not be
/// sent.
async fn send(
    h: &WorkflowHandle<Client, AgentRun>,
    d: &ApprovalDecision,
    update_id: &str,
    run_id: &str,
) -> Result<Result<(), String>, String> {
    let value = serde_json::to_value(d).map_err(|e| e.to_string())?;
    let update = h.execute_update(
        AgentRun::approve,
        value,
        WorkflowExecuteUpdateOptions::builder()
            .update_id(update_id.to_owned())
            .build(),
    );
    match tokio::time::timeout(DECIDE_BUDGET, update).await {
        Ok(Ok(ApprovalOutcome { .. })) => Ok(Ok(())),
        Ok(Err(WorkflowUpdateError::Failed(failure))) => Ok(Err(failure.message)),
        Ok(Err(WorkflowUpdateError::NotFound(_))) => {
            Ok(Err(format!("run `{run_id}` is not running")))
        }
        Ok(Err(e)) => Err(format!("cannot decide {}: {e}", d.call_id)),
        Err(_) => Err(format!(
            "no worker took the decision on {} within {}s",
            d.call_id,
            DECIDE_BUDGET.as_secs()
        )),
    }
}

/// The first team pattern (`github-team:<org>/<team>`) among the identities a refusal says
/// are allowed, of which `login` is an active member.
async fn team_of(
    github: &GitHub,
    repo: (&str, &str),
    refusal: &str,
    login: &str,
) -> Result<Option<String>, String> {
    let Some((_, allowed)) = refusal.split_once("allowed identities: ") else {
        return Ok(None);
    };
    for pattern in allowed.split(", ").map(str::trim) {
        let Some((org, team)) = pattern
            .strip_prefix(GITHUB_TEAM)
            .and_then(|t| t.split_once('/'))
        else {
            continue;
        };
        if github
            .team_member(repo, org, team, login)
            .await
            .map_err(|e| e.to_string())?
        {
            return Ok(Some(pattern.to_owned()));
        }
    }
    Ok(None)
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
