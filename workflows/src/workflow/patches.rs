//! The patch registry: every `ctx.patched(..)` marker of [`AgentRun`](super::AgentRun), what it
//! changed, and the recorded history (`tests/histories/`) that covers it.
//!
//! A change that adds, removes or reorders the commands a run issues would break the runs
//! already in flight (their histories no longer match), so it goes behind a marker: code
//! branches on `ctx.patched(ID)`, new runs record the marker and take the new path, histories
//! without it replay through the old one. Each marker is a migration with an end:
//!
//! - [`Stage::Active`]: both paths live. A history recorded with the marker is committed under
//!   `tests/histories/` and replayed by `tests/tests/suite/replay.rs`; its coverage test fails on an
//!   active marker no history there records.
//! - [`Stage::Deprecated`]: no open run can predate the marker any more. The old path is gone and
//!   the code calls `ctx.deprecate_patch(ID)`: histories that carry the marker still replay, the
//!   ones from before it cannot and move to `tests/histories/retired/` (kept, not replayed).
//! - [`Stage::Retired`]: no open run can predate the deprecation either; the call is gone and the
//!   histories that carry the marker move to `tests/histories/retired/` too. The entry stays
//!   here as the record; its coverage is looked for in `retired/`.
//!
//! Add a marker: a constant below, an entry in [`REGISTRY`], a recorded history that takes the
//! new path (AGENTS.md "Record a new replay history") named in its `covered_by`.

/// Runs recorded before the prompt builder existed did not read the workspace: the run reads
/// its workspace's instructions (AGENTS.md, activity `read_instructions`) before the first turn.
pub const PATCH_READ_INSTRUCTIONS: &str = "read-instructions-v1";

/// The run keeps its search attributes (`BatonState`, ...) current.
pub const PATCH_SEARCH_ATTRIBUTES: &str = "search-attributes-v1";

/// The run continues as new when its segment's history passes its budget. Histories recorded
/// before it never do.
pub const PATCH_CONTINUE_AS_NEW: &str = "continue-as-new-v1";

/// A batch with a mutating call runs its calls one at a time, each starting from the workspace
/// snapshot the previous one left (workspace hand-off between workers).
pub const PATCH_SERIAL_MUTATING: &str = "serial-mutating-tools-v1";

/// A step that runs only read-only tool calls does not update the status memo and search
/// attributes (it takes milliseconds; the status keeps showing the turn that asked for it, and
/// the live `status` query still shows the step). Histories recorded before it publish every
/// step. Superseded by [`PATCH_STATUS_ON_CHANGE`]: only consulted where that is not patched.
pub const PATCH_QUIET_READ_STEPS: &str = "quiet-read-steps-v1";

/// The status memo and search attributes are refreshed when the run's coarse state changes
/// (running, waiting for a human, ended, or the pending calls change) and every
/// [`STATUS_EVERY_TURNS`](super::STATUS_EVERY_TURNS) turns, not on every step: each refresh is a
/// history event and a visibility write, the largest per-turn cost baton added to the server
/// (BENCHMARKS.md). The live `status` query stays exact.
pub const PATCH_STATUS_ON_CHANGE: &str = "status-on-change-v1";

/// Shell rules and remembered approvals match strictly (`policy::Matching::Strict`): an allow
/// never covers a compound command. Checked once per execution, at its start.
pub const PATCH_STRICT_SHELL_RULES: &str = "strict-shell-rules-v1";

/// A decision that leaves other calls of the batch pending refreshes the status memo (and
/// search attributes) at once, not when the whole batch is decided.
pub const PATCH_MEMO_ON_DECISION: &str = "memo-on-decision-v1";

/// The run prepares its workspace from the spec's source (`prepare_workspace`) and, when it
/// ends, collects its change set (`collect_changes`) and delivers it when asked (`deliver`).
/// Checked once per execution, at its start.
pub const PATCH_RUN_OUTPUTS: &str = "run-outputs-v1";

/// A batch of read-only built-in tool calls runs as local activities by default (one
/// workflow task per turn instead of two), each bounded by
/// [`LOCAL_READ_BUDGET`](super::options::LOCAL_READ_BUDGET): a read that fails or runs longer
/// runs again as a regular activity. `RunSpec.remote_read_tools` opts out.
pub const PATCH_LOCAL_READS: &str = "local-read-tools-v1";

/// A context overflow that eliding old tool outputs cannot fix is answered by a compaction
/// (`compact_context`) and a retry of the turn, and the refused estimate lowers the
/// compaction threshold; histories before it end the run
/// `context_overflow` there. Checked once per execution, at its start.
pub const PATCH_COMPACT_ON_OVERFLOW: &str = "compact-on-overflow-v1";

/// Name of the marker events a patch records in history (`MarkerRecorded`; the patch id is in
/// the details), for tools that read histories.
pub const PATCH_MARKER_NAME: &str = temporalio_common::protos::constants::PATCH_MARKER_NAME;

/// Where a marker is in its life (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Checked with `ctx.patched`; both paths live.
    Active,
    /// Checked with `ctx.deprecate_patch`; the old path is gone.
    Deprecated,
    /// No longer checked; its histories are in `tests/histories/retired/`.
    Retired,
}

/// One registered patch marker.
#[derive(Debug, Clone, Copy)]
pub struct Patch {
    /// The marker id recorded in history.
    pub id: &'static str,
    /// What runs that record it do differently.
    pub changed: &'static str,
    /// Recorded histories (file names under `tests/histories/`, or `retired/` once retired)
    /// that carry the marker.
    pub covered_by: &'static [&'static str],
    /// Where the marker is in its life.
    pub stage: Stage,
}

/// Every marker the workflow has ever checked, oldest first.
pub const REGISTRY: [Patch; 11] = [
    Patch {
        id: PATCH_READ_INSTRUCTIONS,
        changed: "a read_instructions activity before the first turn (AGENTS.md in the prompt)",
        covered_by: &["approval-run-v2.json"],
        stage: Stage::Active,
    },
    Patch {
        id: PATCH_SEARCH_ATTRIBUTES,
        changed: "search attribute upserts (BatonState, BatonAwaitingApproval, BatonTurns, ...)",
        covered_by: &["approval-run-v3.json"],
        stage: Stage::Active,
    },
    Patch {
        id: PATCH_CONTINUE_AS_NEW,
        changed: "continue-as-new when a segment passes its history budget",
        covered_by: &["budget-run-segment-1.json"],
        stage: Stage::Active,
    },
    Patch {
        id: PATCH_SERIAL_MUTATING,
        changed: "a batch with a mutating call runs one call at a time, snapshots chained",
        covered_by: &["budget-run-segment-1.json"],
        stage: Stage::Active,
    },
    Patch {
        id: PATCH_QUIET_READ_STEPS,
        changed: "no memo/search attribute refresh before a read-only tool step",
        covered_by: &["quiet-read-steps-f00d46f.json"],
        stage: Stage::Active,
    },
    Patch {
        id: PATCH_STATUS_ON_CHANGE,
        changed: "memo/search attributes refreshed on coarse state changes and every 10 turns",
        covered_by: &["approval-run-v5.json"],
        stage: Stage::Active,
    },
    Patch {
        id: PATCH_STRICT_SHELL_RULES,
        changed: "an allow rule or remembered approval never covers a compound shell command",
        covered_by: &["approval-run-v7.json"],
        stage: Stage::Active,
    },
    Patch {
        id: PATCH_MEMO_ON_DECISION,
        changed: "a partial decision refreshes the memo inside the approval wait",
        covered_by: &["approval-run-v8.json"],
        stage: Stage::Active,
    },
    Patch {
        id: PATCH_RUN_OUTPUTS,
        changed: "workspace prepared from its source; change set collected and delivered at the end",
        covered_by: &["approval-run-v9.json"],
        stage: Stage::Active,
    },
    Patch {
        id: PATCH_LOCAL_READS,
        changed: "read-only tool batches as local activities by default (a slow read falls back)",
        covered_by: &["approval-run-v10.json"],
        stage: Stage::Active,
    },
    Patch {
        id: PATCH_COMPACT_ON_OVERFLOW,
        changed: "an overflow that eliding cannot fix compacts and retries the turn",
        covered_by: &["approval-run-v11.json"],
        stage: Stage::Active,
    },
];

#[cfg(test)]
mod tests {
    use super::REGISTRY;

    #[test]
    fn marker_ids_are_unique_and_covered_by_name() {
        for (i, patch) in REGISTRY.iter().enumerate() {
            assert!(
                REGISTRY[..i].iter().all(|p| p.id != patch.id),
                "{} is registered twice",
                patch.id
            );
            assert!(
                !patch.covered_by.is_empty(),
                "{} names no history",
                patch.id
            );
        }
    }
}
