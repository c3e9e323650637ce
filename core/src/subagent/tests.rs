//! The child spec of a `spawn_agent` call: only ever narrower than its parent.

#![allow(clippy::unwrap_used)]

use baton_proto::{McpOrigin, SandboxPolicy};
use pretty_assertions::assert_eq;

use super::*;

fn parent_spec() -> RunSpec {
    RunSpec {
        task: "the whole job".into(),
        tools: vec!["shell".into(), "write_file".into(), SPAWN_AGENT.into()],
        approval: Some(ApprovalPolicy {
            require_approval: vec!["shell".into()],
            rules: vec![ToolRule {
                tool: "shell".into(),
                pattern: "rm *".into(),
                action: "deny".into(),
                reason: String::new(),
            }],
            ..Default::default()
        }),
        limits: Some(Limits {
            max_turns: 20,
            max_total_tokens: 1_000,
            deadline_seconds: 600,
            ..Default::default()
        }),
        labels: [("submitter".to_owned(), "ci".to_owned())].into(),
        sandbox: Some(SandboxPolicy {
            mode: "workspace-write".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn defs(spec: &RunSpec) -> Vec<ToolDefinition> {
    let mut tools = tools::definitions(&spec.tools).unwrap();
    tools.push(ToolDefinition {
        name: "mcp__fs__read_text_file".into(),
        read_only: true,
        mcp: Some(McpOrigin {
            server: "fs".into(),
            tool: "read_text_file".into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    tools
}

fn spawn(args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: "call_7".into(),
        name: SPAWN_AGENT.into(),
        arguments: args.to_string(),
        ..Default::default()
    }
}

fn child(
    spec: &RunSpec,
    args: serde_json::Value,
    used: u32,
    elapsed_ms: i64,
) -> Result<RunSpec, String> {
    let tools = defs(spec);
    let remembered = [ToolRule {
        tool: "shell".into(),
        pattern: "cargo test*".into(),
        action: "allow".into(),
        reason: String::new(),
    }];
    let usage = Usage {
        total_tokens: used,
        ..Default::default()
    };
    let parent = Parent {
        run_id: "p1",
        spec,
        tools: &tools,
        remembered: &remembered,
        usage: &usage,
        elapsed_ms,
    };
    child_spec(&parent, &spawn(args))
}

#[test]
fn a_child_inherits_the_parents_tools_policy_and_what_is_left_of_its_budget() {
    let spec = parent_spec();
    let c = child(
        &spec,
        serde_json::json!({"task": "write the tests"}),
        400,
        100_500,
    )
    .unwrap();
    assert_eq!(c.task, "write the tests");
    // Not spawn_agent: the default depth lets children start no children of their own.
    assert_eq!(c.tools, vec!["shell", "write_file"]);
    let policy = c.approval.unwrap();
    assert_eq!(policy.require_approval, vec!["shell"]);
    // The parent's remembered rules first, then its own, as the parent assesses them.
    let patterns: Vec<&str> = policy.rules.iter().map(|r| r.pattern.as_str()).collect();
    assert_eq!(patterns, vec!["cargo test*", "rm *"]);
    let limits = c.limits.unwrap();
    assert_eq!((limits.max_turns, limits.max_total_tokens), (20, 600));
    assert_eq!(limits.deadline_seconds, 500);
    assert_eq!(c.labels[PARENT_LABEL], "p1");
    assert_eq!(c.labels["submitter"], "ci");
    let parent = c.parent.unwrap();
    assert_eq!(
        (parent.run_id.as_str(), parent.call_id.as_str()),
        ("p1", "call_7")
    );
    assert_eq!((parent.depth, parent.root_run_id.as_str()), (1, "p1"));
    assert!(c.workspace.is_none() && c.deliver.is_none() && c.continued.is_none());
}

#[test]
fn a_child_can_be_narrowed_but_never_widened() {
    let spec = parent_spec();
    let c = child(
        &spec,
        serde_json::json!({"task": "t", "tools": ["write_file", "mcp__fs__read_text_file"],
            "policy": {"require_approval": ["write_file"], "sandbox": "read-only"}, "max_turns": 50}),
        0,
        0,
    )
    .unwrap();
    assert_eq!(c.tools, vec!["write_file"]);
    assert_eq!(
        c.mcp,
        vec![McpUse {
            server: "fs".into(),
            tools: vec!["read_text_file".into()]
        }]
    );
    assert_eq!(
        c.approval.unwrap().require_approval,
        vec!["shell", "write_file"]
    );
    assert_eq!(c.sandbox.unwrap().mode, "read-only");
    // max_turns at most the parent's.
    assert_eq!(c.limits.unwrap().max_turns, 20);

    let refused = |args: serde_json::Value, used: u32, elapsed: i64, says: &str| {
        let e = child(&spec, args, used, elapsed).unwrap_err();
        assert!(e.contains(says), "{e}");
        assert!(e.contains("No subagent started"), "{e}");
    };
    refused(
        serde_json::json!({"task": "t", "tools": ["glob", "shell"]}),
        0,
        0,
        "not yours: glob",
    );
    refused(
        serde_json::json!({"task": "t", "tools": ["spawn_agent", "shell"]}),
        0,
        0,
        "max_subagent_depth",
    );
    refused(
        serde_json::json!({"task": "t", "tools": ["mcp__fs__read_text_file"]}),
        0,
        0,
        "at least one built-in tool",
    );
    refused(serde_json::json!({"task": "  "}), 0, 0, "non-empty");
    refused(
        serde_json::json!({"task": "t", "model": "gpt-5"}),
        0,
        0,
        "unknown field `model`",
    );
    refused(
        serde_json::json!({"task": "t", "policy": {"sandbox": "off"}}),
        0,
        0,
        "'off'",
    );
    refused(serde_json::json!({"task": "t"}), 1_000, 0, "token budget");
    refused(
        serde_json::json!({"task": "t"}),
        0,
        600_000,
        "limits.deadline_seconds",
    );
    let read_only = RunSpec {
        sandbox: Some(SandboxPolicy {
            mode: "read-only".into(),
            ..Default::default()
        }),
        ..parent_spec()
    };
    let e = child(
        &read_only,
        serde_json::json!({"task": "t", "policy": {"sandbox": "workspace-write"}}),
        0,
        0,
    )
    .unwrap_err();
    assert!(e.contains("cannot have more"), "{e}");
}

#[test]
fn deeper_nesting_keeps_spawn_agent_and_the_root() {
    let mut spec = parent_spec();
    spec.limits.as_mut().unwrap().max_subagent_depth = 3;
    spec.parent = Some(ParentRun {
        run_id: "root".into(),
        call_id: "c".into(),
        depth: 1,
        root_run_id: "root".into(),
    });
    assert!(may_spawn(&spec));
    let c = child(&spec, serde_json::json!({"task": "t"}), 0, 0).unwrap();
    assert!(c.tools.contains(&SPAWN_AGENT.to_owned()));
    let parent = c.parent.unwrap();
    assert_eq!(
        (
            parent.depth,
            parent.root_run_id.as_str(),
            parent.run_id.as_str()
        ),
        (2, "root", "p1")
    );
    spec.parent.as_mut().unwrap().depth = 3;
    assert!(!may_spawn(&spec));
    assert_eq!(child_run_id("p1", 3), "p1.sub-3");
}

#[test]
fn the_parents_model_reads_how_the_child_ended_and_whether_its_changes_landed() {
    let outcome = |merge: &str| SubagentOutcome {
        run_id: "p1.sub-1".into(),
        files_changed: 2,
        merge: merge.into(),
        ..Default::default()
    };
    let done = RunResult {
        status: RunState::Completed as i32,
        answer: "Tests written.".into(),
        turns: 3,
        ..Default::default()
    };
    let text = result_text(&done, &outcome("merged"));
    assert_eq!(
        text,
        "Subagent p1.sub-1 completed after 3 turn(s). Its changes to 2 file(s) are now in your \
         workspace.\nIts answer:\nTests written."
    );
    let text = result_text(&done, &outcome("conflict: a.txt"));
    assert!(
        text.contains("did NOT land in your workspace (conflict: a.txt)"),
        "{text}"
    );
    let failed = RunResult {
        status: RunState::Failed as i32,
        reason: baton_proto::TerminationReason::MaxTurnsExceeded as i32,
        detail: "50 turns".into(),
        ..Default::default()
    };
    let text = result_text(&failed, &outcome("unchanged"));
    assert!(
        text.contains("ended without completing (max_turns_exceeded: 50 turns)")
            && text.contains("It changed no files.")
            && text.ends_with("(no answer)"),
        "{text}"
    );
    let long = RunResult {
        answer: "x".repeat(tools::OUTPUT_CAP_BYTES * 2),
        ..done
    };
    let text = result_text(&long, &outcome("merged"));
    assert!(text.len() < tools::OUTPUT_CAP_BYTES + 400, "{}", text.len());
    assert!(text.ends_with("[the whole answer: baton result p1.sub-1]"));
}
