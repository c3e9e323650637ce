//! The patch registry: every `ctx.patched(..)` marker [`AgentRun`](super::AgentRun) has
//! checked, what it changed, and the recorded history (`tests/histories/`) that covers it.
//!
//! A change that adds, removes or reorders the commands a run issues would break the runs
//! already in flight (their histories no longer match), so it goes behind a marker: code
//! branches on `ctx.patched(ID)`, new runs record the marker and take the new path, histories
//! without it replay through the old one. Each marker is a migration with an end:
//!
//! - [`Stage::Active`]: both paths live. A history recorded with the marker is committed under
//!   `tests/histories/` and replayed by `tests/tests/suite/replay.rs`; its coverage test fails on
//!   an active marker no history there records, and on one whose old path no replayed history
//!   takes any more (every replayed history records it: the old path is dead code, so the
//!   marker is due for retirement).
//! - [`Stage::Deprecated`]: no open run can predate the marker any more. The old path is gone and
//!   the code calls `ctx.deprecate_patch(ID)`: histories that carry the marker still replay, the
//!   ones from before it cannot and move to `tests/histories/retired/` (kept, not replayed).
//! - [`Stage::Retired`]: no open run can predate the deprecation either; the call is gone, the
//!   id appears nowhere in the workflow's code (the replay suite checks), and the histories that
//!   carry the marker move to `tests/histories/retired/` too. The entry stays here as the record;
//!   its coverage is looked for in `retired/`.
//!
//! **Baseline 0.1.0.** Before the first release, all eleven markers were retired at once: the new
//! paths became the only ones, the histories were recorded again with that code, and the older
//! ones moved to `retired/`. `suite::replay` shows that the oldest of them, which took every old
//! path, no longer replays.
//!
//! Add a marker: a constant in this module, an entry in [`REGISTRY`], a recorded history that
//! takes the new path (AGENTS.md "How to run things") named in its `covered_by`.

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

/// Every marker the workflow has ever checked, oldest first. All eleven were folded into the
/// 0.1.0 baseline: their new paths are the only ones, and the histories that record them are in
/// `tests/histories/retired/`.
pub const REGISTRY: [Patch; 11] = [
    Patch {
        id: "read-instructions-v1",
        changed: "a read_instructions activity before the first turn (AGENTS.md in the prompt)",
        covered_by: &["approval-run-v2.json"],
        stage: Stage::Retired,
    },
    Patch {
        id: "search-attributes-v1",
        changed: "search attribute upserts (BatonState, BatonAwaitingApproval, BatonTurns, ...)",
        covered_by: &["approval-run-v3.json"],
        stage: Stage::Retired,
    },
    Patch {
        id: "continue-as-new-v1",
        changed: "continue-as-new when a segment passes its history budget",
        covered_by: &["budget-run-segment-1.json"],
        stage: Stage::Retired,
    },
    Patch {
        id: "serial-mutating-tools-v1",
        changed: "a batch with a mutating call runs one call at a time, snapshots chained",
        covered_by: &["budget-run-segment-1.json"],
        stage: Stage::Retired,
    },
    Patch {
        id: "quiet-read-steps-v1",
        changed: "no memo/search attribute refresh before a read-only tool step",
        covered_by: &["quiet-read-steps-f00d46f.json"],
        stage: Stage::Retired,
    },
    Patch {
        id: "status-on-change-v1",
        changed: "memo/search attributes refreshed on coarse state changes and every 10 turns",
        covered_by: &["approval-run-v5.json"],
        stage: Stage::Retired,
    },
    Patch {
        id: "strict-shell-rules-v1",
        changed: "an allow rule or remembered approval never covers a compound shell command",
        covered_by: &["approval-run-v7.json"],
        stage: Stage::Retired,
    },
    Patch {
        id: "memo-on-decision-v1",
        changed: "a partial decision refreshes the memo inside the approval wait",
        covered_by: &["approval-run-v8.json"],
        stage: Stage::Retired,
    },
    Patch {
        id: "run-outputs-v1",
        changed: "workspace prepared from its source; change set collected and delivered at the end",
        covered_by: &["approval-run-v9.json"],
        stage: Stage::Retired,
    },
    Patch {
        id: "local-read-tools-v1",
        changed: "read-only tool batches as local activities by default (a slow read falls back)",
        covered_by: &["approval-run-v10.json"],
        stage: Stage::Retired,
    },
    Patch {
        id: "compact-on-overflow-v1",
        changed: "an overflow that eliding cannot fix compacts and retries the turn",
        covered_by: &["approval-run-v11.json"],
        stage: Stage::Retired,
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
