//! The `--json` object of `baton eval`: the evaluation's report.

use serde::{Deserialize, Serialize};

/// `baton eval --json`: every run of the evaluation and a summary per configuration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Eval {
    /// The evaluation's id: `baton eval SUITE --id EVAL` resumes it.
    pub eval_id: String,
    pub suite: String,
    /// Runs per task and configuration.
    pub repeat: u32,
    /// Every planned run ended (false after `--wait-timeout`: resume to finish).
    pub complete: bool,
    /// Runs this invocation started; the others were started before (a resumed evaluation).
    pub submitted: usize,
    /// Wall time of this invocation.
    pub seconds: f64,
    pub configs: Vec<EvalConfig>,
    /// With `--compare A B`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare: Option<EvalCompare>,
    pub runs: Vec<EvalRun>,
}

/// One configuration's results over every task.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EvalConfig {
    pub config: String,
    /// Planned runs, and those that ended.
    pub runs: usize,
    pub ended: usize,
    /// Ended runs that completed with every verification command passing (and every
    /// expected file changed).
    pub passed: usize,
    /// `passed / ended` (0 when none ended).
    pub pass_rate: f64,
    /// The unbiased pass@k per k from 1 to the repeat count, averaged over tasks whose runs
    /// all ended.
    pub pass_at_k: Vec<PassAtK>,
    /// Medians over the ended runs.
    pub median_turns: f64,
    pub median_seconds: f64,
    pub median_cost_usd: f64,
    /// Sums over the ended runs.
    pub total_tokens: u64,
    pub cost_usd: f64,
    /// Runs that did not pass, by why: the run's reason (`verification_failed`,
    /// `max_turns`, ...), or `expected_change_missing`.
    pub failures: Vec<FailureCount>,
    pub tasks: Vec<TaskResult>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PassAtK {
    pub k: u32,
    pub value: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FailureCount {
    pub reason: String,
    pub runs: usize,
}

/// One task under one configuration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskResult {
    pub task: String,
    pub ended: usize,
    pub passed: usize,
}

/// `--compare A B`: B against A.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EvalCompare {
    pub a: String,
    pub b: String,
    /// B's pass rate minus A's.
    pub pass_rate_delta: f64,
    pub median_turns_delta: f64,
    pub cost_usd_delta: f64,
    /// Each task: passes of each side, and whether B does better, worse or the same.
    pub tasks: Vec<TaskDiff>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskDiff {
    pub task: String,
    pub a: TaskResult,
    pub b: TaskResult,
    /// `better`, `worse` or `same` (B's pass rate on the task against A's).
    pub verdict: String,
}

/// One run of the evaluation, as it stands.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EvalRun {
    pub run_id: String,
    pub task: String,
    pub config: String,
    pub repeat: u32,
    /// The run's state (`COMPLETED`, `FAILED`, `CANCELLED`), or `RUNNING` when it has not
    /// ended (or `NOT_STARTED`).
    pub state: String,
    pub reason: String,
    pub passed: bool,
    /// Why it did not pass (empty when it passed or has not ended).
    pub failure: String,
    /// The first verification command that failed in the run's last round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_check: Option<String>,
    pub turns: u32,
    pub total_tokens: u64,
    pub cost_usd: f64,
    /// From start to close, by the server's clock.
    pub seconds: f64,
}

/// `baton eval SUITE --from-runs QUERY --at-turn N --config B --json`: stored runs forked at a
/// turn under configuration B, each fork against its original.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Counterfactual {
    pub eval_id: String,
    pub suite: String,
    pub config: String,
    /// The visibility query that chose the original runs (closed ones, before `as_of`).
    pub query: String,
    /// `"N"` or `"each"`.
    pub at_turn: String,
    /// When the evaluation first ran: later runs are not taken, so a resumed evaluation
    /// forks the same runs (RFC 3339).
    pub as_of: String,
    pub complete: bool,
    pub submitted: usize,
    pub seconds: f64,
    /// Original runs the query found, and those left out (with why).
    pub originals: usize,
    pub skipped: Vec<Skipped>,
    pub summary: CounterfactualSummary,
    pub pairs: Vec<Pair>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Skipped {
    pub run_id: String,
    pub reason: String,
}

/// Over the pairs whose fork ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CounterfactualSummary {
    pub pairs: usize,
    pub ended: usize,
    /// Forks whose replies after the fork point differ from the original's.
    pub differing: usize,
    /// Pairs where one passed and the other did not.
    pub outcome_changed: usize,
    pub original_passed: usize,
    pub fork_passed: usize,
    /// The forks' cost: their turns after the fork point only.
    pub fork_cost_usd: f64,
    /// The originals' cost, whole runs (once per original).
    pub original_cost_usd: f64,
}

/// One original run and its fork at one turn.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Pair {
    pub original: PairSide,
    pub at_turn: u32,
    /// The fork, graded as an evaluation run (`task` is the original's run id).
    pub fork: EvalRun,
    /// The first turn after `at_turn` where the replies differ; absent when they are the same
    /// (or the fork has not ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_difference: Option<FirstDifference>,
}

/// The original run as it ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PairSide {
    pub run_id: String,
    pub state: String,
    pub reason: String,
    pub passed: bool,
    pub turns: u32,
    pub cost_usd: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FirstDifference {
    pub turn: u32,
    /// `tool(arguments)`, `answer: text` or `nothing`.
    pub original: String,
    pub fork: String,
}
