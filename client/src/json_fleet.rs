//! The `--json` objects of the fleet commands: `replay-check`, `fleet status`, `fleet patches`.

use serde::{Deserialize, Serialize};

/// `baton replay-check --json`: what replaying this build against the server's histories found.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReplayCheck {
    /// The build whose workflow code replayed them.
    pub build_id: String,
    /// The visibility query that chose the runs.
    pub query: String,
    /// Runs replayed now.
    pub replayed: usize,
    /// Runs skipped: this build replayed them before, at the same history length.
    pub skipped: usize,
    /// Events replayed.
    pub events: usize,
    /// Wall time of the whole check: connecting, listing, fetching and replaying.
    pub seconds: f64,
    /// Each run that would fail on this build, and where.
    pub diverged: Vec<crate::replay_check::Diverged>,
}

/// `baton fleet status --json`: the Worker Deployment's builds and the open runs on each.
#[derive(Debug, Serialize, Deserialize)]
pub struct Fleet {
    pub deployment: String,
    /// The open runs were counted only up to a bound.
    pub open_runs_truncated: bool,
    /// Current first, then ramping, then newest first.
    pub builds: Vec<FleetBuild>,
}

/// One build (deployment version) of the fleet.
#[derive(Debug, Serialize, Deserialize)]
pub struct FleetBuild {
    pub build_id: String,
    /// `current`, `ramping`, `draining`, `drained`, `inactive` ("" = the server does not know
    /// it as a version: runs of unversioned workers).
    pub state: String,
    /// `draining` / `drained` once it stopped being current ("" otherwise).
    pub drainage: String,
    /// Open runs pinned to it.
    pub open_runs: usize,
}

/// `baton fleet patches --json`: each patch marker and the open runs that lack it.
#[derive(Debug, Serialize, Deserialize)]
pub struct FleetPatches {
    pub open_runs: usize,
    pub open_runs_truncated: bool,
    pub markers: Vec<FleetPatch>,
}

/// One patch marker of this build's registry.
#[derive(Debug, Serialize, Deserialize)]
pub struct FleetPatch {
    pub id: String,
    /// `active` or `deprecated`.
    pub stage: String,
    /// Open runs that did not record it (they started before it, or have not reached it yet).
    pub open_runs_without: usize,
    /// Of them, runs on no deployment version: the ones another build could replay.
    pub unversioned_without: usize,
    /// Whether it can move to its next stage, and why.
    pub verdict: String,
}
