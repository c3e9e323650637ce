//! baton's pure core: the agent state machine and everything it decides with. Nothing here
//! knows Temporal, does I/O, or reads clocks or the environment (`clippy.toml` enforces it),
//! so it can be unit-tested directly and the workflow built on it (`baton-workflows`) replays
//! deterministically.
//!
//! - [`machine`]: [`machine::RunState`] and its pure transitions, one file per concern, with
//!   the phase × input table in its doc.
//! - [`policy`]: the approval policy, `assess(call, tool, policy)`.
//! - [`guards`]: loop guards (circuit breaker thresholds, loop detection).
//! - [`prompt`]: the system prompt builder.
//! - [`tools`]: the built-in tool catalog (definitions the model sees, read-only flags).
//! - [`mcp`]: MCP tools: model-facing names, listed tools as definitions, spec checks.
//! - [`subagent`]: subagents: `spawn_agent` arguments and the child run's spec.
//! - [`view`]: the model's view of a conversation (elision, summary, stubs), shared with the
//!   model activity and the blob store.
//! - [`fork`]: forks (`baton fork`): where a turn ends in a conversation, what a fork holds of
//!   it, the workspace then (the source's side; the fork's state is `machine/fork.rs`).
//! - [`schema`]: the checks of a run's `--output-schema`.
//! - [`environment`]: a repository's environment file (`.baton/environment.toml`).
//! - [`net`]: host rules (`--allow-host`) and address classes, which the sandbox's proxy
//!   decides with.
//! - [`error`]: errors of this crate.

pub mod environment;
pub mod error;
pub mod fork;
pub mod guards;
pub mod machine;
pub mod mcp;
pub mod net;
pub mod policy;
pub mod prompt;
pub mod schema;
pub mod subagent;
pub mod tools;
pub mod view;

pub use machine::{RunState, Step};
