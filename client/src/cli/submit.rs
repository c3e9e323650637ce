//! `baton submit`'s flags: the run-level ones in [`SubmitArgs`], the rest in groups by concern,
//! each with its help heading.

use std::path::PathBuf;

use clap::Args;

use super::*;

#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
    /// The task for the agent; `-` reads it from stdin.
    #[arg(
        required_unless_present = "prompt_file",
        conflicts_with = "prompt_file"
    )]
    pub(crate) prompt: Option<String>,
    /// Read the task from this file instead (e.g. a task written by an earlier CI step).
    #[arg(long, value_name = "FILE")]
    pub(crate) prompt_file: Option<PathBuf>,
    /// Extra instructions for the agent, appended to its system prompt (after the workspace's
    /// AGENTS.md).
    #[arg(long, value_name = "TEXT")]
    pub(crate) instructions: Option<String>,
    /// Label the run (repeatable), e.g. --label repo=acme/api.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub(crate) labels: Vec<(String, String)>,
    /// Where the run's tasks go in a backlogged queue: 1 first, 5 last (server default 3).
    /// Every activity of the run inherits it.
    #[arg(long, value_name = "1..5", value_parser = clap::value_parser!(u32).range(1..=5))]
    pub(crate) priority: Option<u32>,
    /// Runs with different keys share a backlogged queue by weight, so one team's many runs do
    /// not hold up another's (default: the `team` label, if given; at most 64 bytes). Needs a
    /// server with fairness on (`matching.enableFairness`).
    #[arg(long, value_name = "KEY", value_parser = parse_fairness_key)]
    pub(crate) fairness_key: Option<String>,
    /// The fairness key's weight (default 1.0; 0.001..1000).
    #[arg(long, value_name = "W", value_parser = parse_fairness_weight)]
    pub(crate) fairness_weight: Option<f32>,
    /// Run id (the workflow id); default: a new unique id. The run works in a workspace of
    /// that name: an id reused after its run ended finds the files that run left.
    #[arg(long, value_parser = parse_run_id)]
    pub(crate) id: Option<String>,
    /// Task queue the workers poll.
    #[arg(long, env = "BATON_TASK_QUEUE", default_value = "baton")]
    pub(crate) task_queue: String,
    #[command(flatten)]
    pub(crate) waiting: super::WaitArgs,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
    // The groups come last: each sets the help heading of the flags after it.
    #[command(flatten)]
    pub(crate) llm: ModelArgs,
    #[command(flatten)]
    pub(crate) toolset: ToolArgs,
    #[command(flatten)]
    pub(crate) approval: ApprovalArgs,
    #[command(flatten)]
    pub(crate) sandboxing: SandboxArgs,
    #[command(flatten)]
    pub(crate) workspace: WorkspaceArgs,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
}

/// `submit` flags: which model the run calls, and how.
#[derive(Debug, Args)]
#[command(next_help_heading = "Model")]
pub(crate) struct ModelArgs {
    /// Provider profile configured on the workers: openai, anthropic, openai-responses or scripted
    /// (default: scripted when --script is given, else openai).
    #[arg(long)]
    pub(crate) provider: Option<String>,
    /// Model name (default: the provider's default).
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// The model's context window in tokens; with it, baton compacts the conversation before
    /// it overflows (old tool outputs first, then a summary of older turns).
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) context_window: Option<u32>,
    /// Maximum output tokens per model call.
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_output_tokens: Option<u32>,
    /// How hard an OpenAI reasoning model thinks (openai and openai-responses providers).
    #[arg(long, value_enum)]
    pub(crate) reasoning_effort: Option<ReasoningEffort>,
    /// Turn on Anthropic extended thinking with this token budget (at least 1024, and under
    /// --max-output-tokens when that is given).
    #[arg(long, value_name = "TOKENS", value_parser = parse_thinking_budget)]
    pub(crate) thinking_budget: Option<u32>,
    /// How long the provider keeps the run's cached prompt prefix: 5m (default) or 1h for
    /// runs that wait on humans longer than five minutes between calls (Anthropic).
    #[arg(long, value_enum)]
    pub(crate) cache_ttl: Option<CacheTtl>,
    /// JSON script of assistant turns for the scripted provider.
    #[arg(long, value_name = "FILE")]
    pub(crate) script: Option<PathBuf>,
}

/// `submit` flags: the tools the run may call: built-in, subagents, MCP.
#[derive(Debug, Args)]
#[command(next_help_heading = "Tools")]
pub(crate) struct ToolArgs {
    /// Enable this tool (repeatable; default: all built-in tools).
    #[arg(long = "tool", value_name = "NAME")]
    pub(crate) tools: Vec<String>,
    /// Give the model the spawn_agent tool: it may delegate parts of the task to subagents,
    /// child runs with their own copy of the workspace whose changes merge back (added to the
    /// --tool list, or to all built-in tools).
    #[arg(long)]
    pub(crate) subagents: bool,
    /// With --subagents: how many subagents the run may start in all (default 8).
    #[arg(long, value_name = "N", requires = "subagents", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_subagents: Option<u32>,
    /// With --subagents: how deep they may nest (default 1: subagents cannot start their own).
    #[arg(long, value_name = "N", requires = "subagents", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_subagent_depth: Option<u32>,
    /// Give the run the tools of this MCP server, configured on the workers as
    /// `[mcp.servers.NAME]` (repeatable); `NAME:tool1,tool2` narrows it to those tools. The model
    /// sees them as `mcp__NAME__tool`.
    #[arg(long = "mcp", value_name = "NAME[:TOOLS]")]
    pub(crate) mcp: Vec<String>,
    /// When an --mcp server cannot be used at the run's start: end the run (fail, the default)
    /// or go on without its tools (continue).
    #[arg(long, value_enum)]
    pub(crate) mcp_unavailable: Option<McpUnavailable>,
}

/// `submit` flags: which calls wait for a human, and for how long.
#[derive(Debug, Args)]
#[command(next_help_heading = "Approvals")]
pub(crate) struct ApprovalArgs {
    /// Calls to this tool wait for a human (repeatable; default: shell and every MCP tool that
    /// is not read-only, `mcp__*`). `*` means every tool that is not read-only; MCP tools
    /// match patterns such as `mcp__github__*`.
    #[arg(long = "require-approval", value_name = "TOOL")]
    pub(crate) require_approval: Vec<String>,
    /// No tool call waits for a human (overrides the default of --require-approval shell
    /// mcp__*).
    #[arg(long, conflicts_with = "require_approval")]
    pub(crate) no_approval: bool,
    /// Approval policy file (TOML or JSON): mode, ordered rules, require_approval, timeout,
    /// loop guards. Flags given on the command line override its fields.
    #[arg(long, value_name = "FILE")]
    pub(crate) policy: Option<PathBuf>,
    /// Never wait for a human (CI): calls that would ask are denied with a reason the model
    /// sees (policy mode never_ask).
    #[arg(long)]
    pub(crate) never_ask: bool,
    /// A call that changes things and was cut off by a worker failure (it may have taken
    /// effect): run it again from the workspace snapshot it started from (rerun, the default)
    /// or let a human decide (ask).
    #[arg(long, value_enum)]
    pub(crate) on_retry: Option<OnRetry>,
    /// How long an approval may wait, e.g. 30m, 2h, 90s (default: forever).
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub(crate) approval_timeout: Option<std::time::Duration>,
    /// What happens when an approval times out (default: deny).
    #[arg(long, value_enum)]
    pub(crate) on_approval_timeout: Option<TimeoutAction>,
}

/// `submit` flags: how the tools' processes are confined, and what they may reach.
#[derive(Debug, Args)]
#[command(next_help_heading = "Sandbox and network")]
pub(crate) struct SandboxArgs {
    /// Confinement of the shell tool's processes (Linux Landlock + seccomp on the workers).
    #[arg(long, value_enum, default_value = "workspace-write")]
    pub(crate) sandbox: SandboxMode,
    /// Run read-only tool calls (read_file, list_files, search_files, glob) as local
    /// activities on the worker running the run: one workflow task per turn instead of two. A
    /// worker dying mid-call re-runs the read (harmless: it changes nothing). The default (a
    /// read that takes over 3 s runs again as a regular activity); kept for scripts.
    #[arg(long, conflicts_with = "remote_read_tools")]
    pub(crate) local_read_tools: bool,
    /// Run read-only tool calls as regular activities instead (each visible as an activity in
    /// the Web UI, retried by the server; two workflow tasks per turn).
    #[arg(long)]
    pub(crate) remote_read_tools: bool,
    /// Let tool processes reach any public host (default: no network, only Unix sockets).
    /// They get it through the worker's proxy (HTTP and HTTPS, with http_proxy/https_proxy
    /// set), never loopback, link-local, private ranges, the Temporal frontend or the
    /// worker's own ports.
    #[arg(long)]
    pub(crate) network: bool,
    /// A host the run's tools may reach, and only those (repeatable; turns the network on):
    /// HOST, *.HOST (its subdomains), HOST:PORT, an IP, [IPv6]:PORT or a CIDR. Enforced by
    /// the worker's proxy; a loopback or private address is reachable only when its IP or a
    /// CIDR holding it is given here (a host name never opens one; `localhost` for loopback).
    #[arg(long = "allow-host", value_name = "HOST[:PORT]", value_parser = parse_host_rule)]
    pub(crate) allow_hosts: Vec<String>,
    /// A connection to a host not on the --allow-host list: refused (deny), or refused and a
    /// human is asked whether to allow that host for the rest of the run (ask).
    #[arg(long, value_enum, default_value = "deny")]
    pub(crate) on_unknown_host: OnUnknownHost,
}

/// `submit` flags: where the run's workspace comes from, how its work is checked, and what comes back.
#[derive(Debug, Args)]
#[command(next_help_heading = "Workspace and results")]
pub(crate) struct WorkspaceArgs {
    /// Start the run from this directory (`.` in CI): uploaded to the blob store (only what
    /// the store lacks), honouring .gitignore and .batonignore, without .git; needs write
    /// access to the workers' store (BATON_STORE__*).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["git", "workspace_of"])]
    pub(crate) workspace_from: Option<PathBuf>,
    /// With --workspace-from: refuse a tree larger than this (bytes, or e.g. 512MiB, 2GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "workspace_from")]
    pub(crate) max_upload_size: Option<u64>,
    /// Start the run from a clone of this git repository (done by the worker, with the
    /// workers' credentials: the CLI needs no store access).
    #[arg(long, value_name = "URL", conflicts_with = "workspace_of")]
    pub(crate) git: Option<String>,
    /// With --git: the branch, tag or commit to start from (default: the default branch).
    #[arg(long = "ref", value_name = "REF", requires = "git")]
    pub(crate) git_ref: Option<String>,
    /// Start from the final workspace of an earlier run (a follow-up task).
    #[arg(long, value_name = "RUN")]
    pub(crate) workspace_of: Option<String>,
    /// When the run ends, commit its changes and push a branch (branch), or push and open a
    /// pull request (pr). Needs --git (or --workspace-of a run that had it).
    #[arg(long, value_enum)]
    pub(crate) deliver: Option<DeliverMode>,
    /// With --deliver: the branch to push to (default baton/<run id>).
    #[arg(long, value_name = "NAME", requires = "deliver")]
    pub(crate) branch: Option<String>,
    /// With --deliver pr: open the pull request as a draft.
    #[arg(long, requires = "deliver")]
    pub(crate) pr_draft: bool,
    /// The run's environment file (TOML, like a repository's .baton/environment.toml): setup
    /// commands run once per cache key before the first model call, with network to
    /// setup_hosts and the worker-side setup_secrets; the set-up tree is cached for later runs;
    /// verify = [...] gives the default --verify. Default: --workspace-from DIR's
    /// .baton/environment.toml, or the --git repository's own (read by the worker); a worker's
    /// pin for the repository wins.
    #[arg(long, value_name = "FILE")]
    pub(crate) environment: Option<PathBuf>,
    /// A check the workflow runs in the final workspace when the agent answers (repeatable,
    /// in order; `sh -c`, sandboxed like shell, no network), e.g. --verify 'cargo test'. All
    /// pass: COMPLETED, the evidence in the result's `verification`. One fails: the agent is
    /// told and may go on, up to --verify-attempts rounds; then the run ends
    /// verification_failed (exit 1) and nothing is delivered. Also `verify = [...]` in the
    /// --policy file.
    #[arg(long = "verify", value_name = "CMD")]
    pub(crate) verify: Vec<String>,
    /// Verification rounds before the run ends verification_failed (default 2: the agent
    /// gets one failure to fix).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10))]
    pub(crate) verify_attempts: Option<u32>,
    /// A JSON Schema file: the agent's final answer must be JSON matching it (one corrective
    /// turn on a mismatch); `result --json` carries it as `output`.
    #[arg(long, value_name = "FILE")]
    pub(crate) output_schema: Option<PathBuf>,
}

/// `submit` flags: when the run stops, or asks to go on.
#[derive(Debug, Args)]
#[command(next_help_heading = "Limits")]
pub(crate) struct LimitArgs {
    /// Maximum model calls (default 50).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_turns: Option<u32>,
    /// Stop after this many tokens in total.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_tokens: Option<u32>,
    /// Stop once the run's estimated cost reaches this many US dollars, e.g. 2.50 (under the
    /// workers' price table, `[models]`; a model without a price there costs nothing).
    #[arg(long, value_name = "USD", value_parser = parse_usd)]
    pub(crate) max_cost: Option<f64>,
    /// Continue the run as new (same run id) once a segment's history has this many events
    /// (default 5000; the server may suggest it earlier).
    #[arg(long, value_name = "EVENTS", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) history_budget: Option<u32>,
    /// Also continue as new after this many turns in one segment.
    #[arg(long, value_name = "TURNS", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) segment_turns: Option<u32>,
    /// Wall-clock limit for the whole run, e.g. 2h (a durable timer: with --on-exhausted stop
    /// it stops work in flight; with ask, the question comes once the current step ends).
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub(crate) deadline: Option<std::time::Duration>,
    /// When a limit (turns, tokens, cost, deadline) is reached: end the run (stop) or pause for a
    /// human to extend it (ask).
    #[arg(long, value_enum, default_value = "stop")]
    pub(crate) on_exhausted: Exhausted,
    /// Default timeout of a tool call, e.g. 10m.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub(crate) tool_timeout: Option<std::time::Duration>,
}
