//! A batch of approved tool calls, run as the machine planned it ([`ToolPlan`]): in groups,
//! each group's calls at once, snapshots chained from one group to the next; as local
//! activities (with the slow-read fallback), `run_tool` or `mcp_call_tool` activities, or
//! child workflows ([`subagents`](super::subagents)).

use std::pin::Pin;

use baton_proto::{ToolRequest, ToolResult};
use temporalio_workflow::{ActivityExecutionError, WorkflowCancellationToken, WorkflowContext};

use super::{
    AgentRun, apply, failure_message, now_ms,
    options::{local_tool_options, mcp_tool_options, tool_options},
    subagents,
};
use crate::activities::ToolActivities;
use baton_core::machine::{Input, Runner, ToolPlan};

/// How one call of a group ended (built per call and consumed at once: the size of the
/// larger variant costs nothing).
#[allow(clippy::large_enum_variant)]
enum Outcome {
    /// An activity (built-in or MCP tool).
    Tool(Result<ToolResult, ActivityExecutionError>),
    /// A subagent (child workflow), before its changes land.
    Child(subagents::Ended),
}

/// Runs approved calls as `plan` says, results in call order. A call whose activity fails for
/// good (after retries) becomes an error observation.
pub(super) async fn run_tools(
    ctx: &WorkflowContext<AgentRun>,
    requests: Vec<ToolRequest>,
    plan: ToolPlan,
    token: &WorkflowCancellationToken,
) -> Vec<ToolResult> {
    let mut results = Vec::with_capacity(requests.len());
    let mut snapshot = requests
        .first()
        .map(|r| r.snapshot.clone())
        .unwrap_or_default();
    for range in plan.groups() {
        let group = &requests[range.clone()];
        let ids: Vec<String> = group
            .iter()
            .filter_map(|r| r.call.as_ref().map(|c| c.id.clone()))
            .collect();
        let now = now_ms(ctx.workflow_time());
        apply(ctx, Input::ToolsStarted { ids, now_ms: now });
        let with_snapshot = |r: &ToolRequest| ToolRequest {
            snapshot: snapshot.clone(),
            ..r.clone()
        };
        let outcomes: Vec<Outcome> = if let Some(fallback) = plan.local() {
            let futures: Vec<_> = group
                .iter()
                .map(|r| {
                    let opts = local_tool_options(r, token, fallback);
                    ctx.execute_local_activity(ToolActivities::run_tool, with_snapshot(r), opts)
                })
                .collect();
            let mut outcomes = temporalio_workflow::join_all(futures).await;
            if fallback && !token.is_cancelled() {
                // The slow-read safeguard: what did not finish in the budget (or failed) runs
                // as a regular activity, with the tool's own timeout, heartbeats and retries.
                let slow: Vec<usize> = (0..outcomes.len())
                    .filter(|&i| outcomes[i].is_err())
                    .collect();
                let again: Vec<_> = slow
                    .iter()
                    .map(|&i| {
                        let r = &group[i];
                        let opts = tool_options(r, token);
                        ctx.execute_activity(ToolActivities::run_tool, with_snapshot(r), opts)
                    })
                    .collect();
                for (i, outcome) in slow
                    .into_iter()
                    .zip(temporalio_workflow::join_all(again).await)
                {
                    outcomes[i] = outcome;
                }
            }
            outcomes.into_iter().map(Outcome::Tool).collect()
        } else {
            let futures: Vec<_> = group
                .iter()
                .zip(&plan.runners[range])
                .map(|(r, &runner)| start_call(ctx, r, runner, &snapshot, token))
                .collect();
            temporalio_workflow::join_all(futures).await
        };
        // Once the step is cancelled, a failed call was (most likely) stopped by it: the
        // machine says so at the run's end, rather than "could not be run".
        let stopped = token.is_cancelled();
        let finished_before = results.len();
        for (request, outcome) in group.iter().zip(outcomes) {
            let call = request.call.clone().unwrap_or_default();
            let outcome = match outcome {
                Outcome::Child(_) if stopped => continue,
                Outcome::Child(ended) => {
                    let result = subagents::land(ctx, request, ended, &mut snapshot, token).await;
                    results.push(result);
                    continue;
                }
                Outcome::Tool(outcome) => outcome,
            };
            results.push(match outcome {
                Ok(result) => {
                    if !result.snapshot.is_empty() {
                        snapshot = result.snapshot.clone();
                    }
                    result
                }
                Err(_) if stopped => continue,
                Err(e) => ToolResult {
                    call_id: call.id,
                    name: call.name,
                    content: format!("The tool could not be run: {}", failure_message(&e)),
                    is_error: true,
                    ..Default::default()
                },
            });
        }
        let now = now_ms(ctx.workflow_time());
        apply(
            ctx,
            Input::ToolsFinished {
                results: results[finished_before..].to_vec(),
                now_ms: now,
            },
        );
        if token.is_cancelled() {
            break;
        }
    }
    results
}

/// One call of a group that does not run as a local activity: its activity, or its child
/// workflow, started from `snapshot`.
fn start_call<'a>(
    ctx: &'a WorkflowContext<AgentRun>,
    request: &'a ToolRequest,
    runner: Runner,
    snapshot: &str,
    token: &'a WorkflowCancellationToken,
) -> Pin<Box<dyn Future<Output = Outcome> + 'a>> {
    let input = || ToolRequest {
        snapshot: snapshot.to_owned(),
        ..request.clone()
    };
    match runner {
        Runner::Child => {
            let from = snapshot.to_owned();
            Box::pin(async move {
                Outcome::Child(subagents::run_child(ctx, request, &from, token).await)
            })
        }
        Runner::Mcp => {
            let opts = mcp_tool_options(request, token);
            let call = ctx.execute_activity(ToolActivities::mcp_call_tool, input(), opts);
            Box::pin(async move { Outcome::Tool(call.await) })
        }
        // Local runners come as a whole batch, run by `run_tools` itself.
        Runner::Tool | Runner::Local { .. } => {
            let opts = tool_options(request, token);
            let call = ctx.execute_activity(ToolActivities::run_tool, input(), opts);
            Box::pin(async move { Outcome::Tool(call.await) })
        }
    }
}
