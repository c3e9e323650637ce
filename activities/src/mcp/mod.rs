//! MCP servers' tools for runs, the worker side.
//!
//! - [`settings`]: `[mcp]` / `[mcp.servers.NAME]` ([`McpSettings`]), checked at start-up.
//! - `client`: one rmcp connection (stdio child in its own process group, or streamable
//!   HTTP), every await bounded.
//! - `pool`: [`McpPool`], one connection per server shared by all runs, health-checked,
//!   retired on failure, closed when idle and at shutdown; a `sandbox = true` server gets one
//!   per run instead, started in the run's workspace under its sandbox.
//! - `error`: [`McpError`], which reasons are `McpUnavailable` (not retried) and which fail
//!   the attempt.
//! - `call`: one `tools/call` and its result mapped to a [`ToolResult`](baton_proto::ToolResult)
//!   (text, structured content, images/audio/resources as blobs with a stub); the
//!   `mcp_call_tool` activity itself shares `run_tool`'s body in `tools/attempt.rs`.
//! - this file: the `mcp_list_tools` activity ([`McpService`]).

pub(crate) mod call;
mod client;
mod error;
mod pool;
pub mod settings;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use baton_proto::{McpListRequest, McpTool, McpToolList};
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tracing::{info, warn};

pub use error::McpError;
pub use pool::McpPool;
pub(crate) use pool::RunScope;
pub use settings::{McpServerSettings, McpSettings};

use crate::heartbeat::{self, Heartbeat};
use crate::tools::{HEARTBEAT_EVERY, ToolService};

/// How long listing a server's tools may take once connected.
const LIST_TIMEOUT: Duration = Duration::from_secs(60);

/// Implements the `mcp_list_tools` activity contract over the worker's [`McpPool`].
#[derive(Clone)]
pub struct McpService {
    pool: McpPool,
    /// The runs' workspaces and sandboxes, for `sandbox = true` servers.
    tools: Option<ToolService>,
}

impl std::fmt::Debug for McpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpService")
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl McpService {
    /// Lists tools through `pool` (share it with the tool activities: `ToolService::with_mcp`).
    pub fn new(pool: McpPool) -> Self {
        Self { pool, tools: None }
    }

    /// Starts `sandbox = true` servers in the runs' workspaces and sandboxes of `tools`.
    pub fn with_workspaces(mut self, tools: ToolService) -> Self {
        self.tools = Some(tools);
        self
    }

    /// Lists the server's tools, filtered to `request.tools` (a sandboxed server: started for
    /// `run_id`, under the run's sandbox policy from the request).
    pub async fn list(
        &self,
        request: &McpListRequest,
        run_id: &str,
    ) -> Result<McpToolList, McpError> {
        let server = request.server.as_str();
        let run = match (&self.tools, self.pool.is_sandboxed(server)) {
            (Some(tools), true) => {
                Some(tools.run_scope(server, run_id, request.sandbox.as_ref())?)
            }
            _ => None,
        };
        let lease = self.pool.lease(server, run.as_ref()).await?;
        let connection = lease.connection;
        let listed = tokio::time::timeout(LIST_TIMEOUT, connection.peer().list_all_tools()).await;
        let tools = match listed {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => {
                let error =
                    connection.unreachable(format!("tools/list failed: {}", client::describe(&e)));
                self.pool
                    .retire(server, &connection, "tools/list failed")
                    .await;
                return Err(error);
            }
            Err(_) => {
                let error = connection.unreachable(format!(
                    "tools/list did not answer within {} s",
                    LIST_TIMEOUT.as_secs()
                ));
                self.pool
                    .retire(server, &connection, "tools/list timed out")
                    .await;
                return Err(error);
            }
        };
        let all: Vec<McpTool> = tools.iter().map(to_mcp_tool).collect();
        let listed = u32::try_from(all.len()).unwrap_or(u32::MAX);
        let (tools, unknown) = filter(all, &request.tools);
        Ok(McpToolList {
            server: server.to_owned(),
            tools,
            unknown,
            listed,
            server_info: connection.server_info(),
        })
    }
}

/// A listed tool as baton records it.
fn to_mcp_tool(tool: &rmcp::model::Tool) -> McpTool {
    let hints = tool.annotations.as_ref();
    McpTool {
        name: tool.name.to_string(),
        title: tool
            .title
            .clone()
            .or_else(|| hints.and_then(|h| h.title.clone()))
            .unwrap_or_default(),
        description: tool.description.as_deref().unwrap_or_default().to_owned(),
        input_schema: serde_json::to_string(&*tool.input_schema).unwrap_or_else(|_| "{}".into()),
        read_only_hint: hints.and_then(|h| h.read_only_hint),
        destructive_hint: hints.and_then(|h| h.destructive_hint),
        idempotent_hint: hints.and_then(|h| h.idempotent_hint),
        open_world_hint: hints.and_then(|h| h.open_world_hint),
    }
}

/// The tools `wanted` names (all when it is empty), in the server's order, and the wanted
/// names the server does not list.
fn filter(all: Vec<McpTool>, wanted: &[String]) -> (Vec<McpTool>, Vec<String>) {
    if wanted.is_empty() {
        return (all, Vec::new());
    }
    let unknown = wanted
        .iter()
        .filter(|w| !all.iter().any(|t| &t.name == *w))
        .cloned()
        .collect();
    let kept = all
        .into_iter()
        .filter(|t| wanted.contains(&t.name))
        .collect();
    (kept, unknown)
}

#[activities]
impl McpService {
    /// Lists one server's tools (every page), filtered to the request's names.
    #[activity(definition = baton_workflows::activities::McpListTools)]
    pub async fn mcp_list_tools(
        self: Arc<Self>,
        ctx: ActivityContext,
        request: McpListRequest,
    ) -> Result<McpToolList, ActivityError> {
        let run_id = ctx.info().workflow_id.clone().unwrap_or_default();
        let started = tokio::time::Instant::now();
        let _beat = Heartbeat::start(&ctx, HEARTBEAT_EVERY, move || started.elapsed().as_secs());
        match heartbeat::until_cancelled(&ctx, self.list(&request, &run_id)).await? {
            Ok(list) => {
                info!(
                    run_id,
                    server = %request.server,
                    listed = list.listed,
                    kept = list.tools.len(),
                    unknown = ?list.unknown,
                    "MCP tools listed"
                );
                Ok(list)
            }
            Err(e) => {
                warn!(
                    run_id,
                    server = %request.server,
                    cause = %e,
                    unavailable = e.is_unavailable(),
                    "MCP tools not listed"
                );
                Err(e.into_failure())
            }
        }
    }
}
