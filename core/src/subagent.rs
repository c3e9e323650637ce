//! Subagents: the `spawn_agent` tool's arguments and the spec of the child run it
//! starts. Pure: the machine builds the child's spec when the call is planned (a bad argument
//! is refused there, with what to change), the workflow starts it as a child workflow.
//!
//! A child can only be narrower than its parent: its tools are a subset of the parent's, its
//! approval policy is the parent's (with the parent's remembered rules) plus more tools that
//! ask, its sandbox the parent's or read-only, and its limits what the parent has left
//! (turns at most the parent's, tokens, cost and time the parent's remaining budget; the
//! child's usage is added to the parent's when it ends).

use baton_proto::{
    ApprovalPolicy, Limits, McpUse, ParentRun, RunResult, RunSpec, RunState, SnapshotSource,
    SubagentOutcome, ToolCall, ToolDefinition, ToolRule, Usage, WorkspaceSource, workspace_source,
};
use serde::Deserialize;

use crate::tools::{self, SPAWN_AGENT};

/// Subagents one run may start when `limits.max_subagents` is 0.
pub const DEFAULT_MAX_SUBAGENTS: u32 = 8;
/// Nesting allowed when `limits.max_subagent_depth` is 0: children, no grandchildren.
pub const DEFAULT_MAX_DEPTH: u32 = 1;
/// Label a child carries with its parent's run id (`baton pending` shows it).
pub const PARENT_LABEL: &str = "baton.parent";
/// How much of a child's answer its `subagent_finished` event repeats.
pub const ANSWER_PREVIEW_BYTES: usize = 2_048;

/// The arguments of a `spawn_agent` call.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    task: String,
    #[serde(default)]
    tools: Option<Vec<String>>,
    #[serde(default)]
    policy: Option<Narrowing>,
    #[serde(default)]
    max_turns: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Narrowing {
    #[serde(default)]
    require_approval: Vec<String>,
    #[serde(default)]
    sandbox: Option<String>,
}

/// What the child inherits from its parent, as the parent stands when the call is planned.
#[derive(Debug, Clone, Copy)]
pub struct Parent<'a> {
    /// The parent's run id.
    pub run_id: &'a str,
    /// The parent's spec (normalized).
    pub spec: &'a RunSpec,
    /// The parent's tools (built-in and MCP).
    pub tools: &'a [ToolDefinition],
    /// Allow rules the parent learned from approvals with `remember`.
    pub remembered: &'a [ToolRule],
    /// What the parent used so far.
    pub usage: &'a Usage,
    /// Milliseconds since the parent started.
    pub elapsed_ms: i64,
}

/// How deep `spec`'s run sits (0 = a top-level run).
pub fn depth(spec: &RunSpec) -> u32 {
    spec.parent.as_ref().map_or(0, |p| p.depth)
}

fn limits(spec: &RunSpec) -> Limits {
    spec.limits.unwrap_or_default()
}

/// Subagents a run with `spec` may start over its life.
pub fn max_subagents(spec: &RunSpec) -> u32 {
    match limits(spec).max_subagents {
        0 => DEFAULT_MAX_SUBAGENTS,
        n => n,
    }
}

/// Whether a run with `spec` may start subagents at all (its depth is under the limit).
pub fn may_spawn(spec: &RunSpec) -> bool {
    under_depth_limit(depth(spec), &limits(spec))
}

/// Whether a run at `depth` under `limits` may start subagents.
fn under_depth_limit(depth: u32, limits: &Limits) -> bool {
    let max = match limits.max_subagent_depth {
        0 => DEFAULT_MAX_DEPTH,
        n => n,
    };
    depth < max
}

/// The run id of a run's `ordinal`-th subagent (1-based).
pub fn child_run_id(parent_id: &str, ordinal: u32) -> String {
    format!("{parent_id}.sub-{ordinal}")
}

/// Where a child's workspace comes from: the parent's snapshot now (`None`: the parent has
/// none yet, the child starts empty too).
pub fn workspace_from(parent_id: &str, snapshot: &str) -> Option<WorkspaceSource> {
    (!snapshot.is_empty()).then(|| WorkspaceSource {
        source: Some(workspace_source::Source::Snapshot(SnapshotSource {
            id: snapshot.to_owned(),
            from_run: parent_id.to_owned(),
            origin: format!("the workspace of parent run {parent_id}"),
            ..SnapshotSource::default()
        })),
    })
}

/// The spec of the child a `spawn_agent` call starts, or the error the model sees (the call
/// does not run).
pub fn child_spec(parent: &Parent<'_>, call: &ToolCall) -> Result<RunSpec, String> {
    let args: Args = serde_json::from_str(if call.arguments.trim().is_empty() {
        "{}"
    } else {
        &call.arguments
    })
    .map_err(|e| {
        format!(
            "The arguments of spawn_agent do not match its schema ({e}). Send {{\"task\": \
             \"...\"}} with optional \"tools\", \"policy\" and \"max_turns\". No subagent started."
        )
    })?;
    if args.task.trim().is_empty() {
        return Err(
            "spawn_agent needs a non-empty \"task\": what the subagent should do and report \
             back, self-contained. No subagent started."
                .to_owned(),
        );
    }
    let spec = parent.spec;
    let child_depth = depth(spec) + 1;
    let mut child_limits = limits(spec);
    let may_nest = under_depth_limit(child_depth, &child_limits);
    let (builtin, mcp) = chosen_tools(parent, args.tools.as_deref(), may_nest)?;
    let narrowing = args.policy.unwrap_or_default();
    let approval = narrowed_policy(parent, &narrowing.require_approval)?;
    let mut sandbox = spec.sandbox.clone();
    match narrowing.sandbox.as_deref() {
        None | Some("") => {}
        Some("read-only") => sandbox.get_or_insert_with(Default::default).mode = "read-only".into(),
        Some("workspace-write") => {
            if sandbox.as_ref().is_some_and(|s| s.mode == "read-only") {
                return Err(
                    "Your own sandbox is read-only; a subagent cannot have more. Leave \
                            policy.sandbox out. No subagent started."
                        .to_owned(),
                );
            }
        }
        Some(other) => {
            return Err(format!(
                "policy.sandbox '{other}' is not one of \"read-only\", \"workspace-write\". No \
                 subagent started."
            ));
        }
    }
    remaining_budget(parent, &mut child_limits)?;
    if let Some(turns) = args.max_turns.filter(|t| *t > 0) {
        child_limits.max_turns = turns.min(child_limits.max_turns.max(1));
    }
    let mut labels = spec.labels.clone();
    labels.insert(PARENT_LABEL.to_owned(), parent.run_id.to_owned());
    let root = spec
        .parent
        .as_ref()
        .map_or(parent.run_id.to_owned(), |p| p.root_run_id.clone());
    Ok(RunSpec {
        task: args.task,
        model: spec.model.clone(),
        tools: builtin,
        approval: Some(approval),
        limits: Some(child_limits),
        labels,
        system_prompt: spec.system_prompt.clone(),
        sandbox,
        local_read_tools: spec.local_read_tools,
        mcp,
        mcp_unavailable: spec.mcp_unavailable,
        parent: Some(ParentRun {
            run_id: parent.run_id.to_owned(),
            call_id: call.id.clone(),
            depth: child_depth,
            root_run_id: root,
        }),
        ..RunSpec::default()
    })
}

/// The child's built-in tool names and MCP servers: the named ones (each must be one of the
/// parent's), else all of the parent's. `spawn_agent` only when the child may nest.
fn chosen_tools(
    parent: &Parent<'_>,
    named: Option<&[String]>,
    may_nest: bool,
) -> Result<(Vec<String>, Vec<McpUse>), String> {
    let mine: Vec<&str> = parent.tools.iter().map(|t| t.name.as_str()).collect();
    let Some(named) = named else {
        let builtin = parent
            .tools
            .iter()
            .filter(|t| t.mcp.is_none() && (may_nest || t.name != SPAWN_AGENT))
            .map(|t| t.name.clone())
            .collect();
        return Ok((builtin, parent.spec.mcp.clone()));
    };
    let unknown: Vec<&str> = named
        .iter()
        .map(String::as_str)
        .filter(|n| !mine.contains(n))
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "A subagent can only have tools you have; not yours: {}. Yours: {}. No subagent \
             started.",
            unknown.join(", "),
            mine.join(", ")
        ));
    }
    if named.iter().any(|n| n == SPAWN_AGENT) && !may_nest {
        return Err(
            "A subagent at this depth cannot start subagents of its own \
             (limits.max_subagent_depth). Leave spawn_agent out of its tools. No subagent \
             started."
                .to_owned(),
        );
    }
    let mut builtin: Vec<String> = Vec::new();
    let mut mcp: Vec<McpUse> = Vec::new();
    for def in parent.tools.iter().filter(|t| named.contains(&t.name)) {
        match &def.mcp {
            None => builtin.push(def.name.clone()),
            Some(origin) => match mcp.iter_mut().find(|u| u.server == origin.server) {
                Some(server) => server.tools.push(origin.tool.clone()),
                None => mcp.push(McpUse {
                    server: origin.server.clone(),
                    tools: vec![origin.tool.clone()],
                }),
            },
        }
    }
    if builtin.is_empty() {
        // An empty list means every built-in tool: that would widen, not narrow.
        return Err(format!(
            "A subagent needs at least one built-in tool ({}). No subagent started.",
            tools::BUILTIN_TOOLS.join(", ")
        ));
    }
    Ok((builtin, mcp))
}

/// The parent's policy, its remembered rules first (as the parent assesses them), with more
/// tools that ask.
fn narrowed_policy(parent: &Parent<'_>, more: &[String]) -> Result<ApprovalPolicy, String> {
    let mut policy = parent.spec.approval.clone().unwrap_or_default();
    let mut rules = parent.remembered.to_vec();
    rules.append(&mut policy.rules);
    policy.rules = rules;
    for tool in more {
        if !policy.require_approval.contains(tool) {
            policy.require_approval.push(tool.clone());
        }
    }
    crate::policy::validate(&policy)
        .map_err(|e| format!("policy.require_approval: {e}. No subagent started."))?;
    Ok(policy)
}

/// The child's token, cost and time limits: what the parent has left.
fn remaining_budget(parent: &Parent<'_>, limits: &mut Limits) -> Result<(), String> {
    let exhausted = |what: &str| {
        Err(format!(
            "Your {what} is used up, so a subagent would have none. Finish with what you \
             have. No subagent started."
        ))
    };
    if limits.max_total_tokens > 0 {
        match limits
            .max_total_tokens
            .checked_sub(parent.usage.total_tokens)
        {
            Some(left) if left > 0 => limits.max_total_tokens = left,
            _ => return exhausted("token budget (limits.max_total_tokens)"),
        }
    }
    if limits.max_cost_usd > 0.0 {
        let left = limits.max_cost_usd - parent.usage.cost_usd;
        if left <= 0.0 {
            return exhausted("cost budget (limits.max_cost_usd)");
        }
        limits.max_cost_usd = left;
    }
    if limits.deadline_seconds > 0 {
        let left = i64::from(limits.deadline_seconds) - parent.elapsed_ms / 1000;
        if left <= 0 {
            return exhausted("time (limits.deadline_seconds)");
        }
        limits.deadline_seconds = u32::try_from(left).unwrap_or(u32::MAX);
    }
    Ok(())
}

/// What the parent's model reads as the result of its `spawn_agent` call.
pub fn result_text(result: &RunResult, outcome: &SubagentOutcome) -> String {
    let ended = match result.status() {
        RunState::Completed => "completed".to_owned(),
        _ => format!(
            "ended without completing ({}{})",
            result.reason().as_str_name(),
            if result.detail.is_empty() {
                String::new()
            } else {
                format!(": {}", result.detail)
            }
        ),
    };
    let changes = match outcome.merge.as_str() {
        "unchanged" => "It changed no files.".to_owned(),
        "merged" => format!(
            "Its changes to {} file(s) are now in your workspace.",
            outcome.files_changed
        ),
        other => format!(
            "Its changes to {} file(s) did NOT land in your workspace ({other}); redo them or \
             ask for them differently.",
            outcome.files_changed
        ),
    };
    let answer = if result.answer.is_empty() {
        "(no answer)".to_owned()
    } else if result.answer.len() > tools::OUTPUT_CAP_BYTES {
        // Bounded like a tool's output (the history holds it, and the model's context).
        let mut cut = result.answer.clone();
        crate::view::cut_text(&mut cut, tools::OUTPUT_CAP_BYTES);
        format!("{cut}\n[the whole answer: baton result {}]", outcome.run_id)
    } else {
        result.answer.clone()
    };
    format!(
        "Subagent {} {ended} after {} turn(s). {changes}\nIts answer:\n{answer}",
        outcome.run_id, result.turns
    )
}

#[cfg(test)]
mod tests;
