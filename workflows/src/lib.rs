//! baton's deterministic core: the agent state machine and the `AgentRun` workflow.
//!
//! - [`machine`]: [`machine::RunState`] and its pure transitions, one file per concern, with
//!   the phase × input table in its doc.
//! - [`policy`]: the approval policy, `assess(call, tool, policy)`.
//! - [`guards`]: loop guards (circuit breaker thresholds, loop detection).
//! - [`prompt`]: the system prompt builder.
//! - [`tools`]: the built-in tool catalog (definitions the model sees, read-only flags).
//! - [`mcp`]: MCP tools (issue 18): model-facing names, listed tools as definitions, spec
//!   checks.
//! - [`subagent`]: subagents (issue 20): `spawn_agent` arguments and the child run's spec.
//! - [`view`]: the model's view of a conversation (elision, summary, stubs), shared with the
//!   model activity.
//! - [`activities`]: activity contracts (names, payloads, failure types); bodies live in
//!   `baton-activities`.
//! - [`workflow`]: the `AgentRun` workflow: signals, update, queries and the run loop, with the
//!   approval wait, tool batches, status publishing, options and the patch registry beside it.
//! - [`fork`]: forks (`baton fork`): where a turn ends in a conversation, what a fork holds of
//!   it, the workspace then (the source's side; the fork's state is `machine/fork.rs`).
//! - [`error`]: errors of this crate.
//!
//! Nothing here does I/O or reads clocks or the environment (`clippy.toml` enforces it), so the
//! workflow replays deterministically.

pub mod activities;
pub mod environment;
pub mod error;
pub mod fork;
pub mod guards;
pub mod machine;
pub mod mcp;
pub mod policy;
pub mod prompt;
pub mod schema;
pub mod subagent;
pub mod tools;
pub mod view;
pub mod workflow;

pub use machine::{RunState, Step};

/// This build's default Worker Deployment build id: `<version>-<git sha>`, with a fingerprint
/// of the workflow code added when it differs from the commit (`build.rs`).
pub const BUILD_ID: &str = env!("BATON_BUILD_ID");
/// The label of a scheduled run: the schedule's name (`baton schedule create NAME`).
pub const SCHEDULE_LABEL: &str = "baton.schedule";
/// The label of a scheduled run whose schedule pauses once that many of its runs in a row
/// ended without completing (`schedule create --pause-after-failures N`); the workers check.
pub const PAUSE_AFTER_FAILURES_LABEL: &str = "baton.pause_after_failures";
pub use workflow::{AgentRun, DEFAULT_TASK_QUEUE, STATUS_MEMO_KEY, WORKFLOW_TYPE};
