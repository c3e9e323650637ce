//! The `AgentRun` Temporal workflow: baton's pure core (`baton-core`: the state machine and
//! everything it decides with) driven by Temporal.
//!
//! - [`workflow`]: the `AgentRun` workflow: signals, update, queries and the run loop, with the
//!   approval wait, tool batches, status publishing, options and the patch registry beside it.
//! - [`activities`]: activity contracts (names, payloads, failure types); bodies live in
//!   `baton-activities`.
//!
//! Nothing here does I/O or reads clocks or the environment (`clippy.toml` enforces it), so the
//! workflow replays deterministically. The build id ([`BUILD_ID`]) fingerprints this crate,
//! the core and the proto contract (`build.rs`).

pub mod activities;
pub mod workflow;

/// This build's default Worker Deployment build id: `<version>-<git sha>`, with a fingerprint
/// of the workflow code added when it differs from the commit (`build.rs`).
pub const BUILD_ID: &str = env!("BATON_BUILD_ID");
/// The label of a scheduled run: the schedule's name (`baton schedule create NAME`).
pub const SCHEDULE_LABEL: &str = "baton.schedule";
/// The label of a scheduled run whose schedule pauses once that many of its runs in a row
/// ended without completing (`schedule create --pause-after-failures N`); the workers check.
pub const PAUSE_AFTER_FAILURES_LABEL: &str = "baton.pause_after_failures";
pub use workflow::{AgentRun, DEFAULT_TASK_QUEUE, STATUS_MEMO_KEY, WORKFLOW_TYPE};
