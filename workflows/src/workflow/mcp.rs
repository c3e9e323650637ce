//! The run's MCP servers listed before its first step: one `mcp_list_tools`
//! activity per server, in parallel, raced against the deadline and cancellation. Whether to
//! list depends only on the run's state ([`RunState::mcp_list_requests`]): a replay, a cold
//! worker or a later segment never lists again.
//!
//! [`RunState::mcp_list_requests`]: baton_core::machine::RunState::mcp_list_requests

use temporalio_workflow::WorkflowContext;

use super::{
    AgentRun, apply,
    deadline::{OnDeadline, within_deadline},
    failure_message, now_ms,
    options::{mcp_list_options, step_token},
};
use crate::activities::McpActivities;
use baton_core::machine::Input;

/// Lists the tools of the spec's MCP servers, once per run.
pub(super) async fn discover(ctx: &mut WorkflowContext<AgentRun>) {
    let requests = ctx.state(|s| s.run.mcp_list_requests());
    if requests.is_empty() {
        return;
    }
    let token = step_token(ctx);
    let calls: Vec<_> = requests
        .into_iter()
        .map(|request| {
            let options = mcp_list_options(&request.server, &token);
            ctx.execute_activity(McpActivities::mcp_list_tools, request, options)
        })
        .collect();
    let work = temporalio_workflow::join_all(calls);
    let Some(outcomes) = within_deadline(ctx, &token, work, OnDeadline::Drain).await else {
        return;
    };
    let outcomes = outcomes
        .into_iter()
        .map(|o| o.map_err(|e| failure_message(&e)))
        .collect();
    let now = now_ms(ctx.workflow_time());
    apply(
        ctx,
        Input::McpListed {
            outcomes,
            now_ms: now,
        },
    );
}
