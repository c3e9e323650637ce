//! MCP servers at the run's start: the listing of each server's tools, once, and
//! what the run does when a server cannot be used.
//!
//! The workflow lists before the first step ([`RunState::mcp_list_requests`], one activity per
//! server, then [`Input::McpListed`]); the tools join [`RunState::tools`], which the
//! checkpoint carries into later segments, so the decision to list depends on the run's state
//! alone and replay reads the lists from history.

use std::collections::BTreeSet;

use baton_proto::{McpListRequest, McpToolList, TerminationReason};

use super::RunState;
use crate::mcp;

impl RunState {
    /// The servers to list now: every server of the spec, once per run, before the first step
    /// (empty when there are none, they were listed, or the run has ended).
    pub fn mcp_list_requests(&self) -> Vec<McpListRequest> {
        if self.mcp_listed || self.result().is_some() {
            return Vec::new();
        }
        mcp::merged(&self.spec.mcp)
            .into_iter()
            .map(|entry| McpListRequest {
                server: entry.server,
                tools: entry.tools,
                sandbox: self.spec.sandbox.clone(),
            })
            .collect()
    }

    /// The outcome of each listing of [`RunState::mcp_list_requests`], in its order: the
    /// tools join the run, and a server that could not be used (or lacks a tool the spec
    /// named) ends the run as `tools_unavailable` unless the spec says `continue`.
    pub(crate) fn on_mcp_listed(
        &mut self,
        outcomes: Vec<Result<McpToolList, String>>,
        now_ms: i64,
    ) {
        let requests = self.mcp_list_requests();
        if requests.is_empty() {
            return;
        }
        self.mcp_listed = true;
        let mut taken: BTreeSet<String> = self.tools.iter().map(|t| t.name.clone()).collect();
        let mut failed: Vec<String> = Vec::new();
        let mut outcomes = outcomes.into_iter();
        for request in requests {
            let server = request.server;
            let list = match outcomes.next() {
                Some(Ok(list)) => list,
                Some(Err(detail)) => {
                    failed.push(format!("MCP server '{server}' could not be used: {detail}"));
                    continue;
                }
                None => {
                    failed.push(format!("MCP server '{server}' was not listed"));
                    continue;
                }
            };
            if !list.unknown.is_empty() {
                let names: Vec<&str> = list.tools.iter().map(|t| t.name.as_str()).collect();
                failed.push(format!(
                    "MCP server '{server}' has no tool {}{}",
                    list.unknown.join(", "),
                    if names.is_empty() {
                        String::new()
                    } else {
                        format!(" (of those named, it has {})", names.join(", "))
                    }
                ));
            }
            let mcp_tools = self.tools.iter().filter(|t| t.mcp.is_some()).count();
            let room = mcp::MAX_TOOLS.saturating_sub(mcp_tools);
            let (defs, left_out) = mcp::definitions(&list, &mut taken, room);
            let read_only = defs.iter().filter(|d| d.read_only).count();
            let mut note = format!(
                "MCP server '{server}'{}: {} tool{} ({read_only} read-only)",
                if list.server_info.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", list.server_info)
                },
                defs.len(),
                if defs.len() == 1 { "" } else { "s" },
            );
            if left_out > 0 {
                note.push_str(&format!(
                    "; {left_out} more left out (a run takes at most {} MCP tools: name the ones it needs with --mcp {server}:tool1,tool2)",
                    mcp::MAX_TOOLS
                ));
            }
            self.note(now_ms, &note);
            self.tools.extend(defs);
        }
        if failed.is_empty() {
            return;
        }
        if self.spec.mcp_unavailable() == baton_proto::run_spec::McpUnavailable::Continue {
            for why in failed {
                self.note(
                    now_ms,
                    &format!("{why}; the run goes on without it (mcp_unavailable = continue)"),
                );
            }
        } else {
            for why in &failed {
                self.note(now_ms, why);
            }
            let detail = format!(
                "{}. Fix the workers' [mcp.servers] settings, or submit with --mcp-unavailable continue to run without it.",
                failed.join("; ")
            );
            self.finish(now_ms, TerminationReason::ToolsUnavailable, detail);
        }
    }
}
