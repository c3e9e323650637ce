//! Exit codes (DESIGN.md §7) and the error type every command returns.

use baton_proto::{RunResult, RunState};

/// The run completed.
pub const COMPLETED: i32 = 0;
/// The agent ended without completing (reason in the output).
pub const NOT_COMPLETED: i32 = 1;
/// Usage error or invalid input.
pub const USAGE: i32 = 2;
/// `--wait` timed out; the run is still going.
pub const WAIT_TIMEOUT: i32 = 3;
/// Cancelled or terminated.
pub const CANCELLED: i32 = 4;
/// Cannot reach Temporal, or another infrastructure error.
pub const INFRA: i32 = 5;

/// A command failed: what to print, and the exit code.
#[derive(Debug)]
pub struct Exit {
    pub code: i32,
    pub message: String,
}

impl Exit {
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            code: USAGE,
            message: message.into(),
        }
    }

    pub fn infra(message: impl Into<String>) -> Self {
        Self {
            code: INFRA,
            message: message.into(),
        }
    }
}

/// The exit code for a finished run.
pub fn for_result(result: &RunResult) -> i32 {
    match result.status() {
        RunState::Completed => COMPLETED,
        RunState::Cancelled => CANCELLED,
        _ => NOT_COMPLETED,
    }
}
