//! Exit codes (`docs/src/architecture/design.md` §7) and the error type every command returns.

use baton_proto::{RunResult, RunState};

/// The run completed.
pub(crate) const COMPLETED: i32 = 0;
/// The agent ended without completing (reason in the output), or its delivery failed.
pub(crate) const NOT_COMPLETED: i32 = 1;
/// Usage error or invalid input.
pub(crate) const USAGE: i32 = 2;
/// `--wait` timed out; the run is still going.
pub(crate) const WAIT_TIMEOUT: i32 = 3;
/// Cancelled or terminated.
pub(crate) const CANCELLED: i32 = 4;
/// Cannot reach Temporal, or another infrastructure error.
pub(crate) const INFRA: i32 = 5;

/// A command failed: what to print (nothing when empty), and the exit code.
#[derive(Debug)]
pub(crate) struct Exit {
    pub(crate) code: i32,
    pub(crate) message: String,
    /// Temporal (or the way to it) did not answer for a moment: worth trying again.
    pub(crate) transient: bool,
}

impl Exit {
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self {
            code: USAGE,
            message: message.into(),
            transient: false,
        }
    }

    pub(crate) fn infra(message: impl Into<String>) -> Self {
        Self {
            code: INFRA,
            message: message.into(),
            transient: false,
        }
    }
}

/// The exit code for a finished run. A completed run whose delivery failed (`--deliver`) did
/// not do what the pipeline asked: 1.
pub(crate) fn for_result(result: &RunResult) -> i32 {
    let undelivered = result
        .delivered
        .as_ref()
        .is_some_and(|d| !d.error.is_empty());
    match result.status() {
        RunState::Completed if undelivered => NOT_COMPLETED,
        RunState::Completed => COMPLETED,
        RunState::Cancelled => CANCELLED,
        _ => NOT_COMPLETED,
    }
}
