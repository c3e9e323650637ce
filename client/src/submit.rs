//! `baton submit`: builds a RunSpec from flags (checking everything a user can get wrong
//! before anything starts), starts the `AgentRun` workflow, and optionally waits.

use std::{io::Read, path::Path};

use baton_core::{mcp, policy, tools};
use baton_proto::{
    ApprovalPolicy, ApprovalTimeoutAction, Limits, McpUse, ModelConfig, RunPriority, RunSpec,
    SandboxPolicy, Script,
};
use serde_json::Value;

use crate::{
    cli::{SandboxMode, SubmitArgs, TimeoutAction},
    connect::connect,
    exit::Exit,
    json,
    launch::{self, Launch},
};

/// `baton submit`. With `--json`, stdout holds exactly one JSON object whatever happens: the
/// run (`--wait`: its result), or `{"error", "exit_code"}` (printed by `main`); diagnostics
/// go to stderr.
pub(crate) async fn run(args: SubmitArgs) -> Result<i32, Exit> {
    let mut spec = build_spec(&args)?;
    crate::workspace::check_flags(&args)?;
    let client = connect().await?;
    crate::workspace::apply_source(&args, &client, &mut spec).await?;
    let spec = launch::fit_in_history(spec).await?;
    let run_id = args.id.clone().unwrap_or_else(launch::new_run_id);
    let priority = launch::start(&client, spec, &run_id, &args.task_queue).await?;
    let mut started = format!("submitted run {run_id} to task queue '{}'", args.task_queue);
    if let Some(p) = &priority {
        if p.applied {
            started.push_str(&format!(", {}", p.describe()));
        } else {
            eprintln!("{}", p.describe());
        }
    }
    let how = Launch {
        waiting: args.waiting,
        json: args.json,
        started,
        started_json: json::line(&json::Submitted {
            priority_applied: priority.as_ref().map(|p| p.applied),
            ..json::Submitted::new(&run_id, &args.task_queue)
        })?,
    };
    launch::follow(&client, &run_id, &how).await
}

/// A RunSpec from the flags, or a usage error that says what is wrong.
pub(crate) fn build_spec(args: &SubmitArgs) -> Result<RunSpec, Exit> {
    let mut keys = std::collections::BTreeSet::new();
    if let Some((key, _)) = args.labels.iter().find(|(k, _)| !keys.insert(k.as_str())) {
        return Err(Exit::usage(format!(
            "--label {key}=... is given twice; a run has one value per label key"
        )));
    }
    let task = read_task(args)?;
    if let Err(unknown) = tools::definitions(&args.toolset.tools) {
        return Err(Exit::usage(format!(
            "unknown tool(s): {}; available: {}",
            unknown.join(", "),
            tools::BUILTIN_TOOLS.join(", ")
        )));
    }
    let approval = build_policy(args)?;
    let (verify, verify_attempts) = verification(args)?;
    let environment = environment(args)?;
    let mcp = mcp_servers(&args.toolset.mcp)?;
    let (provider, script) = provider_and_script(args)?;
    Ok(RunSpec {
        sandbox: Some(sandbox_policy(args)),
        local_read_tools: args.sandboxing.local_read_tools,
        remote_read_tools: args.sandboxing.remote_read_tools,
        task,
        model: Some(ModelConfig {
            provider,
            model: args.llm.model.clone().unwrap_or_default(),
            context_window: args.llm.context_window.unwrap_or(0),
            max_output_tokens: args.llm.max_output_tokens.unwrap_or(0),
            script,
            reasoning_effort: flag_name(args.llm.reasoning_effort),
            thinking_budget_tokens: thinking_budget(args)?,
            cache_ttl: flag_name(args.llm.cache_ttl),
            ..Default::default()
        }),
        tools: tool_names(args),
        approval: Some(approval),
        limits: Some(limits(args)),
        labels: labels(args),
        system_prompt: args.instructions.clone().unwrap_or_default(),
        continued: None,
        output_schema: match &args.workspace.output_schema {
            Some(path) => load_output_schema(path)?,
            None => String::new(),
        },
        mcp,
        mcp_unavailable: args
            .toolset
            .mcp_unavailable
            .map_or(0, |v| baton_proto::run_spec::McpUnavailable::from(v) as i32),
        verify,
        verify_attempts,
        environment,
        priority: priority(args)?,
        ..Default::default()
    })
}

/// The run's Temporal priority from `--priority`, `--fairness-key` (default: the `team`
/// label) and `--fairness-weight`; none without any of them.
fn priority(args: &SubmitArgs) -> Result<Option<RunPriority>, Exit> {
    let team = args
        .labels
        .iter()
        .find(|(k, _)| k == "team")
        .map(|(_, v)| v);
    let fairness_key = match (&args.fairness_key, team) {
        (Some(key), _) => key.clone(),
        (None, Some(team)) => crate::cli::parse_fairness_key(team).map_err(|e| {
            Exit::usage(format!(
                "the team label is the run's default fairness key, but {e}; shorten the label \
                 or pass --fairness-key KEY"
            ))
        })?,
        (None, None) => String::new(),
    };
    if args.fairness_weight.is_some() && fairness_key.is_empty() {
        return Err(Exit::usage(
            "--fairness-weight weighs a fairness key: give one with --fairness-key KEY (or \
             --label team=NAME)",
        ));
    }
    if args.priority.is_none() && fairness_key.is_empty() {
        return Ok(None);
    }
    Ok(Some(RunPriority {
        priority_key: args.priority.unwrap_or(0),
        fairness_key,
        fairness_weight: args.fairness_weight.unwrap_or(0.0),
    }))
}

/// The task: the prompt, `-` for stdin, or `--prompt-file`; never empty.
fn read_task(args: &SubmitArgs) -> Result<String, Exit> {
    let task = match (&args.prompt, &args.prompt_file) {
        (_, Some(path)) => std::fs::read_to_string(path).map_err(|e| {
            Exit::usage(format!(
                "cannot read the prompt file {}: {e}; pass an existing UTF-8 text file to \
                 --prompt-file",
                path.display()
            ))
        })?,
        (Some(prompt), None) if prompt == "-" => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| Exit::usage(format!("cannot read the prompt from stdin: {e}")))?;
            s
        }
        (Some(prompt), None) => prompt.clone(),
        (None, None) => String::new(),
    };
    if task.trim().is_empty() {
        return Err(Exit::usage(
            "the prompt is empty; say what the agent should do",
        ));
    }
    Ok(task)
}

/// The provider (`--provider`, else scripted with `--script`, else openai) and the script,
/// checked against each other.
fn provider_and_script(args: &SubmitArgs) -> Result<(String, Option<baton_proto::Script>), Exit> {
    let script = match &args.llm.script {
        Some(path) => Some(load_script(path)?),
        None => None,
    };
    if let Some(p) = &args.llm.provider
        && !matches!(
            p.as_str(),
            "scripted" | "openai" | "anthropic" | "openai-responses"
        )
    {
        return Err(Exit::usage(format!(
            "unknown provider '{p}'; use openai, anthropic, openai-responses or scripted"
        )));
    }
    if let (Some(p), Some(_)) = (&args.llm.provider, &script)
        && p != "scripted"
    {
        return Err(Exit::usage(format!(
            "--script is for the scripted provider, but --provider is '{p}'; drop one of them"
        )));
    }
    let provider = match (&args.llm.provider, &script) {
        (Some(p), _) => p.clone(),
        (None, Some(_)) => "scripted".to_owned(),
        (None, None) => "openai".to_owned(),
    };
    match provider.as_str() {
        "scripted" if script.is_none() => {
            return Err(Exit::usage(
                "the scripted provider needs --script FILE (a JSON list of assistant turns)",
            ));
        }
        "scripted" | "openai" | "anthropic" | "openai-responses" => {}
        other => {
            return Err(Exit::usage(format!(
                "unknown provider '{other}'; use openai, anthropic, openai-responses or scripted"
            )));
        }
    }
    Ok((provider, script))
}

/// `--sandbox`, `--network`, `--allow-host`, `--on-unknown-host`.
fn sandbox_policy(args: &SubmitArgs) -> SandboxPolicy {
    SandboxPolicy {
        mode: match args.sandboxing.sandbox {
            SandboxMode::WorkspaceWrite => String::new(),
            SandboxMode::ReadOnly => "read-only".to_owned(),
            SandboxMode::Off => "off".to_owned(),
        },
        network: args.sandboxing.network || !args.sandboxing.allow_hosts.is_empty(),
        allowed_hosts: args.sandboxing.allow_hosts.clone(),
        on_unknown_host: baton_proto::sandbox_policy::OnUnknownHost::from(
            args.sandboxing.on_unknown_host,
        ) as i32,
    }
}

/// The turn, token, cost, time and subagent limits.
fn limits(args: &SubmitArgs) -> Limits {
    Limits {
        max_turns: args.limits.max_turns.unwrap_or(0),
        max_total_tokens: args.limits.max_tokens.unwrap_or(0),
        max_cost_usd: args.limits.max_cost.unwrap_or(0.0),
        deadline_seconds: args
            .limits
            .deadline
            .map(|d| d.as_secs().clamp(1, u64::from(u32::MAX)) as u32)
            .unwrap_or(0),
        on_exhausted: baton_proto::limits::OnExhausted::from(args.limits.on_exhausted) as i32,
        tool_timeout_seconds: args
            .limits
            .tool_timeout
            .map(|d| d.as_secs().clamp(1, u64::from(u32::MAX)) as u32)
            .unwrap_or(0),
        history_events_budget: args.limits.history_budget.unwrap_or(0),
        segment_turns: args.limits.segment_turns.unwrap_or(0),
        max_subagents: args.toolset.max_subagents.unwrap_or(0),
        max_subagent_depth: args.toolset.max_subagent_depth.unwrap_or(0),
        ..Default::default()
    }
}

/// `--label`s, plus `submitter` (the local user) unless given.
fn labels(args: &SubmitArgs) -> std::collections::HashMap<String, String> {
    let mut labels: std::collections::HashMap<String, String> =
        args.labels.iter().cloned().collect();
    labels
        .entry("submitter".to_owned())
        .or_insert_with(|| crate::connect::local_user(&|k| std::env::var(k).ok()));
    labels
}

/// The run's environment: `--environment FILE`, else `--workspace-from DIR`'s own
/// `.baton/environment.toml` (a git source's is read by the worker).
fn environment(args: &SubmitArgs) -> Result<Option<baton_proto::EnvironmentSpec>, Exit> {
    let (path, origin) = match (&args.workspace.environment, &args.workspace.workspace_from) {
        (Some(path), _) => (path.clone(), format!("--environment {}", path.display())),
        (None, Some(dir)) => {
            let path = dir.join(baton_core::environment::ENVIRONMENT_FILE);
            if !path.is_file() {
                return Ok(None);
            }
            let origin = path.display().to_string();
            (path, origin)
        }
        (None, None) => return Ok(None),
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Exit::usage(format!(
            "cannot read the environment file {}: {e}; pass an existing TOML file",
            path.display()
        ))
    })?;
    let env = baton_core::environment::parse(&text, &origin).map_err(Exit::usage)?;
    if let Some((host, e)) = env
        .setup_hosts
        .iter()
        .find_map(|h| crate::cli::parse_host_rule(h).err().map(|e| (h, e)))
    {
        return Err(Exit::usage(format!(
            "{origin}: setup_hosts entry '{host}': {e}"
        )));
    }
    if !env.setup.is_empty()
        && args.workspace.git.is_none()
        && args.workspace.workspace_from.is_none()
        && args.workspace.workspace_of.is_none()
    {
        return Err(Exit::usage(format!(
            "{origin} has setup commands, which need a workspace to set up: add --git URL or \
             --workspace-from DIR"
        )));
    }
    Ok(Some(env))
}

/// `--mcp NAME[:tool1,tool2]` entries, checked as the workflow will check them.
fn mcp_servers(entries: &[String]) -> Result<Vec<McpUse>, Exit> {
    let servers: Vec<McpUse> = entries
        .iter()
        .map(|entry| {
            let (server, tools) = match entry.split_once(':') {
                Some((server, tools)) => (
                    server,
                    tools.split(',').map(|t| t.trim().to_owned()).collect(),
                ),
                None => (entry.as_str(), Vec::new()),
            };
            McpUse {
                server: server.trim().to_owned(),
                tools,
            }
        })
        .collect();
    mcp::validate(&servers, 0).map_err(|e| Exit::usage(format!("--mcp: {e}")))?;
    Ok(servers)
}

/// Tools that wait for a human unless a policy file or a flag says otherwise: `shell`, and
/// every MCP tool that is not read-only (the server's `readOnlyHint`).
/// The spec's tool names: `--tool`s (empty = every built-in tool), plus `spawn_agent` with
/// `--subagents`.
fn tool_names(args: &SubmitArgs) -> Vec<String> {
    if !args.toolset.subagents || args.toolset.tools.iter().any(|t| t == tools::SPAWN_AGENT) {
        return args.toolset.tools.clone();
    }
    let mut names = if args.toolset.tools.is_empty() {
        tools::BUILTIN_TOOLS.map(str::to_owned).to_vec()
    } else {
        args.toolset.tools.clone()
    };
    names.push(tools::SPAWN_AGENT.to_owned());
    names
}

fn default_require_approval() -> Vec<String> {
    vec![tools::SHELL.to_owned(), mcp::EVERY_TOOL.to_owned()]
}

/// The value a `ValueEnum` flag was given as (`"high"`, `"1h"`), "" when absent.
fn flag_name(value: Option<impl clap::ValueEnum>) -> String {
    value
        .and_then(|v| v.to_possible_value())
        .map(|v| v.get_name().to_owned())
        .unwrap_or_default()
}

/// `--thinking-budget`, checked against `--max-output-tokens` (Anthropic counts thinking in
/// the output, so the budget must leave room for the answer).
fn thinking_budget(args: &SubmitArgs) -> Result<u32, Exit> {
    match (args.llm.thinking_budget, args.llm.max_output_tokens) {
        (Some(budget), Some(max)) if budget >= max => Err(Exit::usage(format!(
            "--thinking-budget {budget} must be under --max-output-tokens {max} (thinking \
             counts as output); raise --max-output-tokens or lower the budget"
        ))),
        (budget, _) => Ok(budget.unwrap_or(0)),
    }
}

/// The `--output-schema` file as compact JSON text, checked to be a JSON Schema.
fn load_output_schema(path: &Path) -> Result<String, Exit> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Exit::usage(format!(
            "cannot read --output-schema {}: {e}; pass a JSON Schema file",
            path.display()
        ))
    })?;
    baton_core::schema::check_schema(&text)
        .map_err(|e| Exit::usage(format!("--output-schema {}: {e}", path.display())))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| Exit::usage(format!("--output-schema {}: {e}", path.display())))?;
    Ok(value.to_string())
}

/// The approval policy: the `--policy` file (if any), then the flags on top. Without a file,
/// `shell` needs approval unless `--no-approval` or `--require-approval` say otherwise.
pub(crate) fn build_policy(args: &SubmitArgs) -> Result<ApprovalPolicy, Exit> {
    let mut policy = match &args.approval.policy {
        Some(path) => load_policy(path)?,
        None => ApprovalPolicy {
            require_approval: default_require_approval(),
            ..Default::default()
        },
    };
    let mut named_by = match &args.approval.policy {
        Some(path) => format!("policy file {}: require_approval", path.display()),
        None => "--require-approval".to_owned(),
    };
    if args.approval.no_approval {
        policy.require_approval.clear();
    } else if !args.approval.require_approval.is_empty() {
        policy.require_approval = args.approval.require_approval.clone();
        named_by = "--require-approval".to_owned();
    }
    let unknown: Vec<&String> = policy
        .require_approval
        .iter()
        .filter(|t| *t != "*" && tools::definition(t).is_none() && !mcp::is_tool_pattern(t))
        .collect();
    if !unknown.is_empty() {
        return Err(Exit::usage(format!(
            "{named_by} names unknown tool(s): {}; available: {}, MCP tool patterns (mcp__*, \
             mcp__<server>__*, mcp__<server>__<tool>) or *",
            unknown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            tools::BUILTIN_TOOLS.join(", ")
        )));
    }
    let read_only: Vec<&str> = policy
        .require_approval
        .iter()
        .filter(|t| tools::definition(t).is_some_and(|d| d.read_only))
        .map(String::as_str)
        .collect();
    if !read_only.is_empty() {
        return Err(Exit::usage(format!(
            "{named_by} names read-only tool(s), which never wait for approval: {}; name tools \
             that change something ({}), or \"*\" for all of them",
            read_only.join(", "),
            tools::BUILTIN_TOOLS
                .iter()
                .filter(|t| tools::definition(t).is_some_and(|d| !d.read_only))
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if let Some(d) = args.approval.approval_timeout {
        policy.timeout_seconds = d.as_secs().clamp(1, u64::from(u32::MAX)) as u32;
    }
    if let Some(action) = args.approval.on_approval_timeout {
        policy.on_timeout = match action {
            TimeoutAction::Deny => ApprovalTimeoutAction::Deny,
            TimeoutAction::Fail => ApprovalTimeoutAction::Fail,
        } as i32;
        if policy.timeout_seconds == 0 {
            return Err(Exit::usage(
                "--on-approval-timeout has no effect without an approval timeout; add \
                 --approval-timeout (e.g. 30m) or set timeout_seconds in the policy file",
            ));
        }
    }
    if let Some(on_retry) = args.approval.on_retry {
        policy.on_retry = baton_proto::approval_policy::OnRetry::from(on_retry) as i32;
    }
    if args.approval.never_ask {
        policy.mode = policy::MODE_NEVER_ASK.to_owned();
    }
    if policy.on_timeout() == ApprovalTimeoutAction::Fail && policy.timeout_seconds == 0 {
        return Err(Exit::usage(
            "invalid approval policy: on_timeout = \"fail\" has no effect without an approval \
             timeout; set timeout_seconds in the policy file or add --approval-timeout (e.g. 30m)",
        ));
    }
    policy::validate(&policy).map_err(|e| Exit::usage(format!("invalid approval policy: {e}")))?;
    Ok(policy)
}

/// Reads a policy file: TOML (`.toml`) or JSON, with the fields of `ApprovalPolicy`.
pub(crate) fn load_policy(path: &Path) -> Result<ApprovalPolicy, Exit> {
    let mut value = read_policy_value(path)?;
    // The verification keys of a policy file are the spec's, not the approval policy's.
    if let Some(map) = value.as_object_mut() {
        map.remove("verify");
        map.remove("verify_attempts");
    }
    // A file that does not say which tools ask keeps the default (shell), as without a file:
    // a file written to add a deny rule must not turn approvals off. `require_approval = []`
    // says so explicitly.
    let says_which = value.get("require_approval").is_some();
    let mut policy: ApprovalPolicy = crate::strict::from_value(value).map_err(|e| {
        Exit::usage(format!(
            "policy file {} does not match the policy format ({e}); see docs/src/guide/approvals.md",
            path.display()
        ))
    })?;
    if !says_which {
        policy.require_approval = default_require_approval();
    }
    Ok(policy)
}

/// The verification of a run: `--verify`/`--verify-attempts`, else the policy file's
/// `verify = ["cmd", ...]` / `verify_attempts = N`.
fn verification(args: &SubmitArgs) -> Result<(Vec<String>, u32), Exit> {
    let (mut commands, mut attempts) = (Vec::new(), 0);
    if let Some(path) = &args.approval.policy {
        let value = read_policy_value(path)?;
        let bad = |what: &str| {
            Exit::usage(format!(
                "policy file {}: {what}; write e.g. verify = [\"cargo test\"] and \
                 verify_attempts = 2",
                path.display()
            ))
        };
        match value.get("verify") {
            None => {}
            Some(Value::Array(items)) => {
                for item in items {
                    let Some(c) = item.as_str() else {
                        return Err(bad("verify must be a list of command lines (strings)"));
                    };
                    commands.push(c.to_owned());
                }
            }
            Some(_) => return Err(bad("verify must be a list of command lines (strings)")),
        }
        match value.get("verify_attempts") {
            None => {}
            Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) if (1..=baton_core::machine::MAX_VERIFY_ATTEMPTS).contains(&n) => {
                    attempts = n;
                }
                _ => {
                    return Err(bad(&format!(
                        "verify_attempts must be a whole number from 1 to {}",
                        baton_core::machine::MAX_VERIFY_ATTEMPTS
                    )));
                }
            },
        }
    }
    if !args.workspace.verify.is_empty() {
        commands = args.workspace.verify.clone();
    }
    if let Some(n) = args.workspace.verify_attempts {
        attempts = n;
    }
    if let Some(i) = commands.iter().position(|c| c.trim().is_empty()) {
        return Err(Exit::usage(format!(
            "verification command {} is empty; pass the command line to run, e.g. --verify \
             'cargo test'",
            i + 1
        )));
    }
    if commands.len() > baton_core::machine::MAX_VERIFY_COMMANDS {
        return Err(Exit::usage(format!(
            "{} verification commands; a run may have at most {} (join related checks with &&)",
            commands.len(),
            baton_core::machine::MAX_VERIFY_COMMANDS
        )));
    }
    if let Some(c) = commands
        .iter()
        .find(|c| c.len() > baton_core::machine::MAX_VERIFY_COMMAND_BYTES)
    {
        return Err(Exit::usage(format!(
            "a verification command is {} bytes long, over {}; put it in a script in the \
             repository and verify with that",
            c.len(),
            baton_core::machine::MAX_VERIFY_COMMAND_BYTES
        )));
    }
    if attempts > 0 && commands.is_empty() {
        return Err(Exit::usage(
            "--verify-attempts needs a check to run: add --verify CMD (or verify = [...] in the \
             policy file)",
        ));
    }
    Ok((commands, attempts))
}

/// A policy file (TOML or JSON) as a JSON value.
fn read_policy_value(path: &Path) -> Result<Value, Exit> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Exit::usage(format!(
            "cannot read policy file {}: {e}; pass an existing TOML or JSON file to --policy",
            path.display()
        ))
    })?;
    let extension = path
        .extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let toml_value = |text: &str| -> Result<Value, String> {
        let v = toml::from_str::<toml::Value>(text).map_err(|e| e.to_string())?;
        serde_json::to_value(v).map_err(|e| e.to_string())
    };
    let value: Value = match extension.as_str() {
        "toml" => toml_value(&text).map_err(|e| {
            Exit::usage(format!(
                "policy file {} is not valid TOML: {e}",
                path.display()
            ))
        })?,
        "json" => serde_json::from_str(&text).map_err(|e| {
            Exit::usage(format!(
                "policy file {} is not valid JSON: {e}",
                path.display()
            ))
        })?,
        "yaml" | "yml" => {
            return Err(Exit::usage(format!(
                "policy file {}: YAML is not supported; write the policy in TOML (.toml) or \
                 JSON (.json)",
                path.display()
            )));
        }
        // Another name: whichever of the two it is.
        _ => match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(json) => toml_value(&text).map_err(|toml| {
                Exit::usage(format!(
                    "policy file {} is neither JSON ({json}) nor TOML ({}); name it .toml or \
                     .json for a precise error",
                    path.display(),
                    toml.lines().next().unwrap_or_default()
                ))
            })?,
        },
    };
    Ok(value)
}

/// Reads a script: `{"turns": [...]}` or a bare list of turns. A tool call's `arguments` may
/// be a JSON object (it is sent to the workflow as text, as a model would write it).
/// A script as the proto reads it: a bare list of turns is `{"turns": [...]}`, arguments
/// written as JSON objects become their JSON text; the same for the subagents' scripts.
fn normalize_script(v: &mut Value) {
    if v.is_array() {
        *v = serde_json::json!({ "turns": v.take() });
    }
    if let Some(turns) = v.get_mut("turns").and_then(Value::as_array_mut) {
        for turn in turns {
            if let Some(calls) = turn.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for call in calls {
                    if let Some(args) = call.get_mut("arguments")
                        && !args.is_string()
                    {
                        *args = Value::String(args.to_string());
                    }
                }
            }
        }
    }
    if let Some(children) = v.get_mut("subagents").and_then(Value::as_array_mut) {
        children.iter_mut().for_each(normalize_script);
    }
}

pub(crate) fn load_script(path: &Path) -> Result<Script, Exit> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Exit::usage(format!(
            "cannot read script file {}: {e}; pass an existing JSON file to --script",
            path.display()
        ))
    })?;
    let mut v: Value = serde_json::from_str(&text).map_err(|e| {
        Exit::usage(format!(
            "script file {} is not valid JSON: {e}",
            path.display()
        ))
    })?;
    normalize_script(&mut v);
    let script: Script = crate::strict::from_value(v).map_err(|e| {
        Exit::usage(format!(
            "script file {} does not match the script format ({e}); expected {{\"turns\": [{{\"text\": \"...\", \"tool_calls\": [{{\"name\": \"shell\", \"arguments\": {{\"command\": \"ls\"}}}}]}}]}}",
            path.display()
        ))
    })?;
    if script.turns.is_empty() {
        return Err(Exit::usage(format!(
            "script file {} has no turns",
            path.display()
        )));
    }
    Ok(script)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use crate::exit;
    use clap::Parser;

    /// `build_policy` for `baton submit ARGS x`, with `policy` written to a file first.
    fn policy_of(policy: Option<&str>, args: &[&str]) -> Result<ApprovalPolicy, Exit> {
        let dir = std::env::temp_dir().join(format!("baton-policy-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.toml");
        let mut argv = vec!["baton".to_owned(), "submit".to_owned()];
        if let Some(text) = policy {
            std::fs::write(&path, text).unwrap();
            argv.extend(["--policy".to_owned(), path.display().to_string()]);
        }
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        argv.push("x".to_owned());
        let Command::Submit(submit) = Cli::try_parse_from(argv).unwrap().command else {
            unreachable!()
        };
        let built = build_policy(&submit);
        std::fs::remove_dir_all(&dir).unwrap();
        built
    }

    #[test]
    fn allow_host_entries_are_checked_and_written_canonically() {
        let parse = |host: &str| {
            Cli::try_parse_from(["baton", "submit", "--allow-host", host, "x"]).map(|cli| {
                let Command::Submit(submit) = cli.command else {
                    unreachable!()
                };
                submit.sandboxing.allow_hosts
            })
        };
        assert_eq!(parse("PyPI.org.").unwrap(), ["pypi.org"]);
        assert_eq!(parse("*.example.com:443").unwrap(), ["*.example.com:443"]);
        let bad = parse("exa mple.com").unwrap_err();
        assert_eq!(bad.exit_code(), 2);
        assert!(
            bad.to_string().contains("bad --allow-host 'exa mple.com'"),
            "{bad}"
        );
    }

    #[test]
    fn a_policy_file_without_require_approval_keeps_shell_asking() {
        let rules_only = "[[rules]]\ntool = \"*\"\npattern = \"secrets/*\"\naction = \"deny\"\n";
        assert_eq!(
            policy_of(Some(rules_only), &[]).unwrap().require_approval,
            ["shell", "mcp__*"]
        );
        assert_eq!(
            policy_of(None, &[]).unwrap().require_approval,
            ["shell", "mcp__*"]
        );
        assert!(
            policy_of(Some("require_approval = []\n"), &[])
                .unwrap()
                .require_approval
                .is_empty(),
            "an explicit empty list turns approvals off"
        );
        assert_eq!(
            policy_of(Some(rules_only), &["--require-approval", "write_file"])
                .unwrap()
                .require_approval,
            ["write_file"]
        );
    }

    #[test]
    fn policy_files_are_held_to_what_the_flags_are() {
        for (file, said) in [
            (
                "on_retry = \"maybe\"\n",
                "unknown variant `maybe`, expected `rerun` or `ask`",
            ),
            (
                "on_timeout = \"fail\"\n",
                "has no effect without an approval timeout",
            ),
        ] {
            let e = policy_of(Some(file), &[]).unwrap_err();
            assert_eq!(e.code, exit::USAGE, "{}", e.message);
            assert!(e.message.contains(said), "{}", e.message);
        }
        let ok = policy_of(
            Some("on_retry = \"ask\"\ntimeout_seconds = 60\non_timeout = \"fail\"\n"),
            &[],
        );
        assert_eq!(
            ok.unwrap().on_retry(),
            baton_proto::approval_policy::OnRetry::Ask
        );
    }

    #[test]
    fn read_only_tools_cannot_require_approval() {
        for (file, args) in [
            (None, &["--require-approval", "read_file"][..]),
            (Some("require_approval = [\"glob\"]\n"), &[][..]),
        ] {
            let e = policy_of(file, args).unwrap_err();
            assert_eq!(e.code, exit::USAGE, "{}", e.message);
            assert!(
                e.message.contains("never wait for approval"),
                "{}",
                e.message
            );
        }
    }

    /// The spec built from a policy file with `text` and `args`.
    fn spec_with_policy(text: &str, args: &[&str]) -> Result<RunSpec, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(&path, text).unwrap();
        let path = path.display().to_string();
        let mut all = vec!["--policy", path.as_str()];
        all.extend_from_slice(args);
        spec_of(&all)
    }

    #[test]
    fn verification_comes_from_the_flags_or_the_policy_file() {
        let spec = spec_of(&["--verify", "cargo build", "--verify", "cargo test"]).unwrap();
        assert_eq!(spec.verify, ["cargo build", "cargo test"]);
        assert_eq!(spec.verify_attempts, 0, "the workflow's default");
        let file = "verify = [\"npm test\"]\nverify_attempts = 3\nrequire_approval = []\n";
        let spec = spec_with_policy(file, &[]).unwrap();
        assert_eq!(
            (spec.verify.as_slice(), spec.verify_attempts),
            (&["npm test".to_owned()][..], 3)
        );
        assert!(
            spec.approval.unwrap().require_approval.is_empty(),
            "the policy still applies"
        );
        // Flags override the file.
        let spec =
            spec_with_policy(file, &["--verify", "make check", "--verify-attempts", "1"]).unwrap();
        assert_eq!(
            (spec.verify.as_slice(), spec.verify_attempts),
            (&["make check".to_owned()][..], 1)
        );
        assert!(spec_of(&[]).unwrap().verify.is_empty());
    }

    #[test]
    fn bad_verification_is_refused_with_what_to_do() {
        for (args, said) in [
            (&["--verify", " "][..], "verification command 1 is empty"),
            (
                &["--verify-attempts", "2"][..],
                "--verify-attempts needs a check",
            ),
            (
                &["--verify", "true", "--verify-attempts", "0"][..],
                "0 is not in 1..=10",
            ),
        ] {
            let e = spec_of(args).unwrap_err();
            assert!(e.contains(said), "{args:?}: {e}");
        }
        for (file, said) in [
            ("verify = \"npm test\"\n", "verify must be a list"),
            ("verify = [1]\n", "verify must be a list"),
            ("verify = [\"x\"]\nverify_attempts = 50\n", "from 1 to 10"),
        ] {
            let e = spec_with_policy(file, &[]).unwrap_err();
            assert!(e.contains(said), "{file}: {e}");
        }
    }

    fn spec_of(args: &[&str]) -> Result<RunSpec, String> {
        let mut argv = vec!["baton", "submit"];
        argv.extend_from_slice(args);
        argv.push("x");
        let Command::Submit(submit) = Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .command
        else {
            unreachable!()
        };
        build_spec(&submit).map_err(|e| e.message)
    }

    #[test]
    fn mcp_servers_and_their_tools_reach_the_spec() {
        let spec = spec_of(&[
            "--mcp",
            "fs",
            "--mcp",
            "github:get_issue, list_issues",
            "--mcp-unavailable",
            "continue",
            "--require-approval",
            "mcp__github__*",
        ])
        .unwrap();
        let servers: Vec<(&str, Vec<&str>)> = spec
            .mcp
            .iter()
            .map(|m| {
                (
                    m.server.as_str(),
                    m.tools.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            servers,
            [("fs", vec![]), ("github", vec!["get_issue", "list_issues"])]
        );
        assert_eq!(
            spec.mcp_unavailable(),
            baton_proto::run_spec::McpUnavailable::Continue
        );
        assert_eq!(spec.approval.unwrap().require_approval, ["mcp__github__*"]);
        for (bad, says) in [
            ("a__b", "invalid MCP server name"),
            ("fs:", "empty tool name"),
            ("fs:a,,b", "empty tool name"),
        ] {
            let err = spec_of(&["--mcp", bad]).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
        let err = spec_of(&["--require-approval", "mcp__fs"]).unwrap_err();
        assert!(err.contains("MCP tool patterns"), "{err}");
    }

    #[test]
    fn cost_and_reasoning_flags_reach_the_spec() {
        let spec = spec_of(&[
            "--max-cost",
            "$2.50",
            "--reasoning-effort",
            "minimal",
            "--thinking-budget",
            "4096",
            "--max-output-tokens",
            "8192",
            "--cache-ttl",
            "1h",
        ])
        .unwrap();
        assert_eq!(spec.limits.unwrap().max_cost_usd, 2.5);
        let model = spec.model.unwrap();
        assert_eq!(
            (
                model.reasoning_effort.as_str(),
                model.thinking_budget_tokens,
                model.cache_ttl.as_str()
            ),
            ("minimal", 4096, "1h")
        );
        let plain = spec_of(&[]).unwrap();
        assert_eq!(plain.limits.unwrap().max_cost_usd, 0.0);
        let model = plain.model.unwrap();
        assert_eq!(
            (
                model.reasoning_effort,
                model.thinking_budget_tokens,
                model.cache_ttl
            ),
            (String::new(), 0, String::new())
        );
    }

    #[test]
    fn bad_cost_and_reasoning_flags_say_what_to_give() {
        for (args, said) in [
            (
                &["--max-cost", "0"][..],
                "give a positive amount of US dollars",
            ),
            (
                &["--max-cost", "lots"][..],
                "is not an amount of US dollars",
            ),
            (&["--max-cost=-1"][..], "give a positive amount"),
            (
                &["--thinking-budget", "500"][..],
                "below Anthropic's minimum of 1024",
            ),
            (
                &["--thinking-budget", "many"][..],
                "is not a number of tokens",
            ),
            (
                &["--reasoning-effort", "extreme"][..],
                "possible values: none, minimal, low, medium, high, xhigh, max",
            ),
            (&["--cache-ttl", "10m"][..], "possible values: 5m, 1h"),
            (
                &["--thinking-budget", "8192", "--max-output-tokens", "8192"][..],
                "--thinking-budget 8192 must be under --max-output-tokens 8192",
            ),
        ] {
            let e = spec_of(args).unwrap_err();
            assert!(e.contains(said), "{args:?}: {e}");
        }
    }
}
