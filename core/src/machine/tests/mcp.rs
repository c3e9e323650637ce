//! MCP servers at the run's start, their tools in batches, and the policy over them.

use baton_proto::{McpTool, McpToolList, McpUse, ToolRule};
use pretty_assertions::assert_eq;

use super::*;

fn mcp_spec(require_approval: &[&str], servers: &[(&str, &[&str])]) -> RunSpec {
    RunSpec {
        mcp: servers
            .iter()
            .map(|(s, t)| McpUse {
                server: (*s).into(),
                tools: t.iter().map(|t| (*t).into()).collect(),
            })
            .collect(),
        ..spec(require_approval)
    }
}

fn fs_tools() -> McpToolList {
    let tool = |name: &str, read_only: bool| McpTool {
        name: name.into(),
        description: format!("{name} on the server"),
        input_schema: r#"{"type":"object","properties":{"path":{"type":"string"}}}"#.into(),
        read_only_hint: read_only.then_some(true),
        destructive_hint: (!read_only).then_some(true),
        ..Default::default()
    };
    McpToolList {
        server: "fs".into(),
        tools: vec![tool("read_text_file", true), tool("write_file", false)],
        listed: 14,
        server_info: "secure-filesystem-server 0.2.0".into(),
        ..Default::default()
    }
}

fn listed_run(spec: RunSpec) -> RunState {
    let mut s = RunState::new("r", spec, T0).unwrap();
    let requests = s.mcp_list_requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].server, "fs");
    s.on_mcp_listed(vec![Ok(fs_tools())], T0);
    s
}

/// The model's next turn makes `calls`.
fn model_calls(s: &mut RunState, calls: Vec<ToolCall>) {
    expect_llm(s);
    s.on_llm_response(reply("", calls, FinishReason::ToolCalls), T0);
}

/// The model's next turn calls `mcp__fs__write_file` once.
fn model_writes(s: &mut RunState) {
    model_calls(
        s,
        vec![call("c1", "mcp__fs__write_file", r#"{"path":"/b"}"#)],
    );
}

#[test]
fn a_server_is_listed_once_and_its_tools_reach_the_model() {
    let mut s = listed_run(mcp_spec(&["shell", "mcp__*"], &[("fs", &[])]));
    assert!(s.mcp_list_requests().is_empty(), "listed once");
    let req = expect_llm(&mut s);
    let names: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"shell"));
    assert!(names.contains(&"mcp__fs__read_text_file"));
    assert!(names.contains(&"mcp__fs__write_file"));
    assert!(
        req.system_prompt.contains("come from MCP servers (fs)"),
        "{}",
        req.system_prompt
    );
    assert!(
        s.events.iter().any(|e| matches!(&e.kind,
            Some(run_event::Kind::Note(n)) if n.contains("MCP server 'fs' (secure-filesystem-server 0.2.0): 2 tools (1 read-only)"))),
        "{:?}",
        s.events
    );
    // The checkpoint carries the tools and the fact that they were listed.
    let resumed = RunState::resume("r", s.spec.clone(), &s.checkpoint().unwrap()).unwrap();
    assert!(resumed.mcp_list_requests().is_empty());
    assert_eq!(resumed.tools, s.tools);
}

#[test]
fn read_only_mcp_tools_run_and_mutating_ones_wait_for_a_human() {
    let mut s = listed_run(mcp_spec(&["shell", "mcp__*"], &[("fs", &[])]));
    model_calls(
        &mut s,
        vec![
            call("c1", "mcp__fs__read_text_file", r#"{"path":"/a"}"#),
            call(
                "c2",
                "mcp__fs__write_file",
                r#"{"path":"/b","content":"x"}"#,
            ),
        ],
    );
    let pending: Vec<String> = s.pending_calls().into_iter().map(|p| p.call_id).collect();
    assert_eq!(pending, ["c2"]);
    s.on_decision(
        ApprovalDecision {
            call_id: "c2".into(),
            approved: true,
            remember: true,
            ..Default::default()
        },
        T0,
    )
    .unwrap();
    let requests = expect_tools(&mut s);
    assert_eq!(requests.len(), 2);
    let origin = requests[1].mcp.clone().unwrap();
    assert_eq!(
        (origin.server.as_str(), origin.tool.as_str()),
        ("fs", "write_file")
    );
    assert!(!requests[0].mutating && requests[1].mutating);
    s.on_tool_results(vec![ok_result("a"), ok_result("wrote")], T0);
    // Not a workspace change: no change set to collect.
    assert!(!s.outputs.touched);
    // The remembered approval covers that path of the tool.
    assert_eq!(
        s.remembered,
        vec![ToolRule {
            tool: "mcp__fs__write_file".into(),
            pattern: "/b".into(),
            action: "allow".into(),
            reason: "remembered approval".into(),
        }]
    );
}

#[test]
fn never_ask_denies_a_mutating_mcp_call_with_a_reason_the_model_sees() {
    let mut spec = mcp_spec(&["mcp__fs__*"], &[("fs", &[])]);
    spec.approval.as_mut().unwrap().mode = "never_ask".into();
    let mut s = listed_run(spec);
    model_writes(&mut s);
    assert!(s.pending_calls().is_empty(), "never waits");
    assert!(expect_tools(&mut s).is_empty());
    s.on_tool_results(vec![], T0);
    let results = tool_results(&s);
    assert!(results[0].is_error);
    assert!(
        results[0].content.contains("never_ask")
            && results[0].content.contains("mcp__fs__write_file"),
        "{}",
        results[0].content
    );
}

#[test]
fn policy_rules_allow_trusted_mcp_tools_by_pattern() {
    let mut spec = mcp_spec(&["mcp__*"], &[("fs", &[])]);
    spec.approval.as_mut().unwrap().rules = vec![ToolRule {
        tool: "mcp__fs__write_*".into(),
        action: "allow".into(),
        ..Default::default()
    }];
    let mut s = listed_run(spec);
    model_writes(&mut s);
    assert_eq!(expect_tools(&mut s).len(), 1, "allowed without a human");
}

#[test]
fn an_unusable_server_ends_the_run_or_is_left_out_as_the_spec_says() {
    let mut s = RunState::new("r", mcp_spec(&[], &[("fs", &[]), ("gh", &[])]), T0).unwrap();
    s.on_mcp_listed(
        vec![
            Ok(fs_tools()),
            Err("MCP server 'gh' is not configured on this worker".into()),
        ],
        T0,
    );
    let result = expect_finish(&mut s);
    assert_eq!(result.reason(), TerminationReason::ToolsUnavailable);
    assert!(result.detail.contains("'gh'"), "{}", result.detail);
    assert!(
        result.detail.contains("--mcp-unavailable continue"),
        "{}",
        result.detail
    );

    let mut spec = mcp_spec(&[], &[("fs", &["read_text_file", "nope"]), ("gh", &[])]);
    spec.mcp_unavailable = baton_proto::run_spec::McpUnavailable::Continue as i32;
    let mut s = RunState::new("r", spec, T0).unwrap();
    assert_eq!(s.mcp_list_requests()[0].tools, ["read_text_file", "nope"]);
    let mut list = fs_tools();
    list.tools.truncate(1);
    list.unknown = vec!["nope".into()];
    s.on_mcp_listed(vec![Ok(list), Err("connection refused".into())], T0);
    let req = expect_llm(&mut s);
    assert!(
        req.tools
            .iter()
            .any(|t| t.name == "mcp__fs__read_text_file")
    );
    let notes: Vec<String> = s
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            Some(run_event::Kind::Note(n)) => Some(n.clone()),
            _ => None,
        })
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("has no tool nope")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("'gh' could not be used: connection refused")
                && n.contains("goes on without it")),
        "{notes:?}"
    );
}

#[test]
fn bad_mcp_entries_and_policies_are_refused_before_the_run_starts() {
    let err = RunState::new("r", mcp_spec(&[], &[("a__b", &[])]), T0).unwrap_err();
    assert!(err.to_string().contains("invalid MCP server name"), "{err}");
    let mut spec = mcp_spec(&[], &[("fs", &[])]);
    spec.approval.as_mut().unwrap().rules = vec![ToolRule {
        tool: "mcp__fs".into(),
        action: "allow".into(),
        ..Default::default()
    }];
    let err = RunState::new("r", spec, T0).unwrap_err();
    assert!(err.to_string().contains("MCP tool pattern"), "{err}");
    // Runs without MCP servers list nothing.
    assert!(
        RunState::new("r", spec_plain(), T0)
            .unwrap()
            .mcp_list_requests()
            .is_empty()
    );
}

fn spec_plain() -> RunSpec {
    spec(&["shell"])
}

#[test]
fn a_spec_without_a_policy_asks_before_mutating_mcp_tools() {
    let spec = RunSpec {
        approval: None,
        ..mcp_spec(&[], &[("fs", &[])])
    };
    let mut s = listed_run(spec);
    model_calls(
        &mut s,
        vec![
            call("c1", "mcp__fs__read_text_file", r#"{"path":"/a"}"#),
            call("c2", "mcp__fs__write_file", r#"{"path":"/b"}"#),
            call("c3", "shell", r#"{"command":"ls"}"#),
        ],
    );
    let pending: Vec<String> = s.pending_calls().into_iter().map(|p| p.call_id).collect();
    assert_eq!(pending, ["c2"], "only the mutating MCP call asks");
}
