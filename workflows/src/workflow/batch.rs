//! A batch of approved tool calls: in parallel up to the run's limit, or one at a time with
//! snapshot chaining when a call changes the workspace; read-only calls as local activities
//! when the run asks for it; MCP tools' calls as `mcp_call_tool` activities; `spawn_agent`
//! calls as child workflows ([`subagents`](super::subagents)).

use std::pin::Pin;

use baton_proto::{ToolRequest, ToolResult};
use temporalio_workflow::{ActivityExecutionError, WorkflowCancellationToken, WorkflowContext};

use super::{
    AgentRun, apply, failure_message, now_ms,
    options::{local_tool_options, mcp_tool_options, tool_options},
    subagents,
};
use crate::activities::ToolActivities;
use baton_core::machine::Input;

/// How one call of a group ended (built per call and consumed at once: the size of the
/// larger variant costs nothing).
#[allow(clippy::large_enum_variant)]
enum Outcome {
    /// An activity (built-in or MCP tool).
    Tool(Result<ToolResult, ActivityExecutionError>),
    /// A subagent (child workflow), before its changes land.
    Child(subagents::Ended),
}

/// Runs approved calls as activities (`spawn_agent` calls as child workflows), at most `max_parallel` at once, results in call order.
/// A call whose activity fails for good (after retries) becomes an error observation.
pub(super) async fn run_tools(
    ctx: &WorkflowContext<AgentRun>,
    requests: Vec<ToolRequest>,
    max_parallel: u32,
    token: &WorkflowCancellationToken,
) -> Vec<ToolResult> {
    let mut results = Vec::with_capacity(requests.len());
    // Calls that change the workspace run one at a time, each from the snapshot the previous
    // one left: they may run on different workers, whose copies cannot be merged.
    // Subagents of one batch start from the same tree and run side by side: their change sets
    // land one after another, three-way, once they end.
    let serial = requests.len() > 1 && requests.iter().any(|r| r.mutating && r.subagent.is_none());
    let chunk = if serial {
        1
    } else {
        max_parallel.max(1) as usize
    };
    let mut snapshot = requests
        .first()
        .map(|r| r.snapshot.clone())
        .unwrap_or_default();
    // Read-only calls as local activities: one workflow task per turn instead of two. They
    // change nothing, so running one again after a worker failure is harmless. Each runs within
    // a budget after which it runs again as a regular activity (a slow read must not hold the
    // workflow task). `remote_read_tools` opts out; with it, `local_read_tools` still asks for
    // them, unbounded.
    let read_only = !requests.is_empty()
        && requests
            .iter()
            .all(|r| !r.mutating && r.mcp.is_none() && r.subagent.is_none());
    let (asked, remote) =
        ctx.state(|s| (s.run.spec.local_read_tools, s.run.spec.remote_read_tools));
    let bounded = read_only && !remote;
    let local = read_only && (bounded || asked);
    for group in requests.chunks(chunk) {
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
        let outcomes: Vec<Outcome> = if local {
            let futures: Vec<_> = group
                .iter()
                .map(|r| {
                    let opts = local_tool_options(r, token, bounded);
                    ctx.execute_local_activity(ToolActivities::run_tool, with_snapshot(r), opts)
                })
                .collect();
            let mut outcomes = temporalio_workflow::join_all(futures).await;
            if bounded && !token.is_cancelled() {
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
                .map(|r| -> Pin<Box<dyn Future<Output = Outcome> + '_>> {
                    if r.subagent.is_some() {
                        let from = snapshot.clone();
                        Box::pin(async move {
                            Outcome::Child(subagents::run_child(ctx, r, &from, token).await)
                        })
                    } else if r.mcp.is_some() {
                        let opts = mcp_tool_options(r, token);
                        let call = ctx.execute_activity(
                            ToolActivities::mcp_call_tool,
                            with_snapshot(r),
                            opts,
                        );
                        Box::pin(async move { Outcome::Tool(call.await) })
                    } else {
                        let opts = tool_options(r, token);
                        let call =
                            ctx.execute_activity(ToolActivities::run_tool, with_snapshot(r), opts);
                        Box::pin(async move { Outcome::Tool(call.await) })
                    }
                })
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
