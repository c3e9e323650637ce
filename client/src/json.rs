//! Every object a `--json` command prints, as a typed struct: baton's machine output is
//! defined here once, apart from the human printer (`render.rs`), after ripgrep's `--json`
//! (`crates/printer/src/jsont.rs`). The objects borrow from what they are built from; keys
//! come out in field order. `docs/src/reference/json.md` documents [`WatchLine`], a
//! contract: add fields, never rename or remove them.
//!
//! | Command | Prints |
//! | --- | --- |
//! | any, when it fails | [`Failure`] |
//! | `submit` | [`Submitted`]; with `--wait`: [`Ended`] or [`StoppedWaiting`] |
//! | `fork` | [`Forked`]; with `--wait`: [`Ended`] or [`StoppedWaiting`] |
//! | `result` | [`Ended`]; [`NotEnded`] without `--wait`; [`StoppedWaiting`] |
//! | `status` | [`Status`] (`activities`: [`Activity`]) |
//! | `watch` | one [`WatchLine`] per event (`json_watch.rs`) |
//! | `transcript` | [`Transcript`] (the proto items as proto3 JSON) |
//! | `show` | [`Shown`] |
//! | `approve`, `deny` | [`Decided`] |
//! | `list`, `pending` | [`Runs`] of [`ListedRun`], of [`PendingRun`] |
//! | `diff` | [`Diff`] ([`ChangeSet`]) |
//! | `download` | [`Downloaded`] |
//! | `eval` | [`Eval`]; with `--from-runs`: [`Counterfactual`] (`json_eval.rs`) |

use baton_proto::{
    Changes, Delivered, FileChange, Item, PendingCall, RunResult, RunState, RunStatus, Usage,
};
use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::{
    exit::{self, Exit},
    inflight::InFlight,
    inspect::Snapshot,
    render, waiting,
};

/// `value` as one line of JSON.
pub(crate) fn line<T: Serialize>(value: &T) -> Result<String, Exit> {
    serde_json::to_string(value)
        .map_err(|e| Exit::infra(format!("cannot write the JSON output: {e}")))
}

/// Prints `value` on stdout as one line of JSON.
pub(crate) fn print<T: Serialize>(value: &T) -> Result<(), Exit> {
    println!("{}", line(value)?);
    Ok(())
}

/// `{"error", "exit_code"}`: what a `--json` command that fails prints on stdout (bad flags
/// included; `watch --json` as its last line).
#[derive(Debug, Serialize, Deserialize)]
pub struct Failure<'a> {
    pub error: Cow<'a, str>,
    pub exit_code: i32,
}

/// `submit --json` without `--wait`: the run has started.
#[derive(Debug, Serialize, Deserialize)]
pub struct Submitted<'a> {
    pub run_id: Cow<'a, str>,
    /// Always `RUNNING`.
    pub status: Cow<'a, str>,
    pub task_queue: Cow<'a, str>,
    /// With `--priority`/`--fairness-key` (or a `team` label): whether the server kept them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_applied: Option<bool>,
}

impl<'a> Submitted<'a> {
    pub fn new(run_id: &'a str, task_queue: &'a str) -> Self {
        Self {
            run_id: Cow::from(run_id),
            status: Cow::from("RUNNING"),
            task_queue: Cow::from(task_queue),
            priority_applied: None,
        }
    }
}

/// `fork --json` without `--wait`: the fork has started.
#[derive(Debug, Serialize, Deserialize)]
pub struct Forked<'a> {
    pub run_id: Cow<'a, str>,
    /// Always `RUNNING`.
    pub status: Cow<'a, str>,
    pub task_queue: Cow<'a, str>,
    /// The run it was forked from, and at which turn.
    pub fork_of: Cow<'a, str>,
    pub at_turn: u32,
}

/// A run's token use and estimated cost. `input_tokens` counts every prompt token (cache
/// reads and writes are parts of it), `output_tokens` the reasoning ones; `cost_usd` is the
/// workers' estimate under their price table (0 for a model without a price).
#[derive(Debug, Serialize, Deserialize)]
pub struct Tokens {
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub total_tokens: u32,
    pub llm_calls: u32,
    pub cache_read_tokens: u32,
    pub cache_write_tokens: u32,
    pub reasoning_tokens: u32,
    pub cost_usd: f64,
    /// Calls whose server reported no usage: their tokens (and cost) are estimates from the
    /// text. Left out when every call was reported.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub estimated_calls: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl From<&Usage> for Tokens {
    fn from(u: &Usage) -> Self {
        Self {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            total_tokens: u.total_tokens,
            llm_calls: u.llm_calls,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            reasoning_tokens: u.reasoning_tokens,
            // A sum of many small floats: shown to a millionth of a dollar.
            cost_usd: (u.cost_usd * 1e6).round() / 1e6,
            estimated_calls: u.estimated_calls,
        }
    }
}

/// How a run ended: what `result --json` (and `submit --wait --json`) prints
/// ([`Ended::result`]), and the object of `watch`'s `finished` line ([`Ended::finished`]).
/// `answer` is set only for a completed run; otherwise the agent's last message is
/// `last_text`, which is not an answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct Ended<'a> {
    /// `result` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Cow<'a, str>>,
    pub status: Cow<'a, str>,
    pub reason: Cow<'a, str>,
    pub answer: Cow<'a, str>,
    pub turns: u32,
    /// `result`: when the run recorded it; `finished`: always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Tokens>,
    pub detail: Cow<'a, str>,
    /// `finished` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// `result`: for every run that did not complete (`""` when the agent said nothing);
    /// `finished`: when the agent said something.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_text: Option<Cow<'a, str>>,
    /// What the run changed (runs of baton versions that collect it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<ChangeSet<'a>>,
    /// What delivery did, when the run asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered: Option<Delivery<'a>>,
    /// The final answer as JSON (runs with `--output-schema`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
    /// The verification commands of the last round (runs with `--verify`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verification: Vec<Check<'a>>,
}

/// One verification command as it ran: `result`'s `verification`, `watch`'s
/// `verification_finished`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Check<'a> {
    pub command: Cow<'a, str>,
    /// -1 when the command has none (a signal, the timeout).
    pub exit_code: i32,
    pub passed: bool,
    pub duration_ms: u64,
    pub status: Cow<'a, str>,
    pub timed_out: bool,
    pub round: u32,
    pub output_tail: Cow<'a, str>,
    /// Blob id of the whole output (`""` when the tail is all of it).
    pub output_blob: Cow<'a, str>,
}

impl<'a> From<&'a baton_proto::Verification> for Check<'a> {
    fn from(v: &'a baton_proto::Verification) -> Self {
        Self {
            command: Cow::from(&v.command),
            exit_code: v.exit_code,
            passed: v.exit_code == 0 && !v.timed_out,
            duration_ms: v.duration_ms,
            status: Cow::from(&v.status),
            timed_out: v.timed_out,
            round: v.round,
            output_tail: Cow::from(&v.output_tail),
            output_blob: Cow::from(&v.output_blob),
        }
    }
}

/// `verification_started`: command `index` of `of` in round `round`.
#[derive(Debug, Serialize, Deserialize)]
pub struct CheckStarted<'a> {
    pub command: Cow<'a, str>,
    pub round: u32,
    pub index: u32,
    pub of: u32,
}

/// A run's change set: counts, the starting commit, where the patch is, and each file.
#[derive(Debug, Serialize, Deserialize)]
pub struct ChangeSet<'a> {
    pub files_changed: u32,
    pub insertions: u32,
    pub deletions: u32,
    /// The git commit the run started from (`""` when its tree was not a repository).
    pub base_commit: Cow<'a, str>,
    pub base_snapshot: Cow<'a, str>,
    pub final_snapshot: Cow<'a, str>,
    /// Blob id of the patch (`""` when nothing changed); `baton diff RUN` prints it.
    pub patch: Cow<'a, str>,
    pub patch_bytes: u64,
    pub files: Vec<ChangedFile<'a>>,
    /// `files` lists the first 500; the patch has them all.
    pub files_truncated: bool,
    /// Why the change set could not be collected.
    #[serde(default, skip_serializing_if = "str::is_empty")]
    pub error: Cow<'a, str>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ChangedFile<'a> {
    pub path: Cow<'a, str>,
    /// `added`, `modified`, `deleted`, `mode` or `type`.
    pub status: Cow<'a, str>,
    pub insertions: u32,
    pub deletions: u32,
    pub binary: bool,
}

impl<'a> From<&'a Changes> for ChangeSet<'a> {
    fn from(c: &'a Changes) -> Self {
        Self {
            files_changed: c.files_changed,
            insertions: c.insertions,
            deletions: c.deletions,
            base_commit: Cow::from(&c.base_commit),
            base_snapshot: Cow::from(&c.base_snapshot),
            final_snapshot: Cow::from(&c.final_snapshot),
            patch: Cow::from(&c.patch),
            patch_bytes: c.patch_bytes,
            files: c.files.iter().map(ChangedFile::from).collect(),
            files_truncated: c.files_truncated,
            error: Cow::from(&c.error),
        }
    }
}

impl<'a> From<&'a FileChange> for ChangedFile<'a> {
    fn from(f: &'a FileChange) -> Self {
        Self {
            path: Cow::from(&f.path),
            status: Cow::from(&f.status),
            insertions: f.insertions,
            deletions: f.deletions,
            binary: f.binary,
        }
    }
}

/// What `--deliver` did.
#[derive(Debug, Serialize, Deserialize)]
pub struct Delivery<'a> {
    /// `branch` or `pr`.
    pub mode: Cow<'a, str>,
    /// Whether the branch was pushed (and the pull request opened, for `pr`).
    pub ok: bool,
    pub url: Cow<'a, str>,
    pub branch: Cow<'a, str>,
    pub commit: Cow<'a, str>,
    #[serde(default, skip_serializing_if = "str::is_empty")]
    pub pull_request_url: Cow<'a, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request_number: Option<u64>,
    /// Nothing changed: nothing was pushed.
    pub nothing_to_deliver: bool,
    #[serde(default, skip_serializing_if = "str::is_empty")]
    pub error: Cow<'a, str>,
}

impl<'a> From<&'a Delivered> for Delivery<'a> {
    fn from(d: &'a Delivered) -> Self {
        Self {
            mode: Cow::from(&d.mode),
            ok: d.error.is_empty(),
            url: Cow::from(&d.url),
            branch: Cow::from(&d.branch),
            commit: Cow::from(&d.commit),
            pull_request_url: Cow::from(&d.pull_request_url),
            pull_request_number: (d.pull_request_number != 0).then_some(d.pull_request_number),
            nothing_to_deliver: d.nothing_to_deliver,
            error: Cow::from(&d.error),
        }
    }
}

/// `diff --json`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Diff<'a> {
    pub run_id: Cow<'a, str>,
    pub changes: ChangeSet<'a>,
    /// The patch as text (absent with `--stat`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

/// `download --json`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Downloaded<'a> {
    pub run_id: Cow<'a, str>,
    pub dir: Cow<'a, str>,
    pub files: usize,
    pub bytes: u64,
    /// `.git` directories (or files) of the run's tree that were not written, with how many
    /// entries each held.
    pub left_out: Vec<LeftOut<'a>>,
}

/// A `.git` path `download` left out.
#[derive(Debug, Serialize, Deserialize)]
pub struct LeftOut<'a> {
    pub path: Cow<'a, str>,
    pub entries: usize,
}

impl<'a> Ended<'a> {
    /// `result --json`.
    pub fn result(r: &'a RunResult) -> Self {
        let (answer, last_text) = render::answer_of(r);
        Self {
            run_id: Some(Cow::from(&r.run_id)),
            usage: r.usage.as_ref().map(Tokens::from),
            exit_code: None,
            last_text: ((r.status() != RunState::Completed).then(|| last_text.unwrap_or_default()))
                .map(Cow::from),
            ..Self::common(r, answer)
        }
    }

    /// The object of `watch`'s `finished` line.
    pub fn finished(r: &'a RunResult) -> Self {
        let (answer, last_text) = render::answer_of(r);
        Self {
            run_id: None,
            usage: Some(Tokens::from(&r.usage.unwrap_or_default())),
            exit_code: Some(exit::for_result(r)),
            last_text: last_text.map(Cow::from),
            ..Self::common(r, answer)
        }
    }

    fn common(r: &'a RunResult, answer: &'a str) -> Self {
        Self {
            run_id: None,
            status: Cow::from(r.status().as_str_name()),
            reason: Cow::from(r.reason().as_str_name()),
            answer: Cow::from(answer),
            turns: r.turns,
            usage: None,
            detail: Cow::from(&r.detail),
            exit_code: None,
            last_text: None,
            changes: r.changes.as_ref().map(ChangeSet::from),
            delivered: r.delivered.as_ref().map(Delivery::from),
            output: (!r.output.is_empty())
                .then(|| serde_json::from_str(&r.output).ok())
                .flatten(),
            verification: r.verification.iter().map(Check::from).collect(),
        }
    }
}

/// A call awaiting a decision: in a status's `pending`, and `watch`'s `approval_requested`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Pending<'a> {
    pub call_id: Cow<'a, str>,
    pub tool: Cow<'a, str>,
    pub arguments: Cow<'a, str>,
    /// A number, not the string proto3 JSON makes of a 64-bit integer.
    pub requested_at_ms: i64,
}

impl<'a> From<&'a PendingCall> for Pending<'a> {
    fn from(p: &'a PendingCall) -> Self {
        Self {
            call_id: Cow::from(&p.call_id),
            tool: Cow::from(&p.tool),
            arguments: Cow::from(&p.arguments),
            requested_at_ms: p.requested_at_ms,
        }
    }
}

/// A run's status (`RunStatus`), as it is part of [`Status`] and [`StoppedWaiting`]:
/// `reason` is null while the run goes on.
#[derive(Debug, Serialize, Deserialize)]
pub struct StatusFields<'a> {
    pub state: Cow<'a, str>,
    pub turn: u32,
    pub pending: Vec<Pending<'a>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Tokens>,
    pub last_event: Cow<'a, str>,
    pub reason: Option<Cow<'a, str>>,
    /// A conversation's current task (absent for other runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<u32>,
    /// A conversation's last answer, while it is `IDLE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Cow<'a, str>>,
}

impl<'a> From<&'a RunStatus> for StatusFields<'a> {
    fn from(s: &'a RunStatus) -> Self {
        Self {
            state: Cow::from(s.state().as_str_name()),
            turn: s.turn,
            pending: s.pending.iter().map(Pending::from).collect(),
            usage: s.usage.as_ref().map(Tokens::from),
            last_event: Cow::from(&s.last_event),
            reason: ((s.reason != 0).then(|| s.reason().as_str_name())).map(Cow::from),
            task: (s.task != 0).then_some(s.task),
            answer: (!s.answer.is_empty()).then_some(Cow::from(s.answer.as_str())),
        }
    }
}

/// `status --json`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Status<'a> {
    pub run_id: Cow<'a, str>,
    #[serde(flatten)]
    pub status: StatusFields<'a>,
    /// `query` (live, from a worker) or `memo` (the last state the run recorded).
    pub source: Cow<'a, str>,
    /// The execution's status in Temporal: `Running`, `Completed`, `Terminated`, ...
    pub temporal_status: String,
    pub activities: Vec<Activity<'a>>,
}

impl<'a> Status<'a> {
    pub(crate) fn new(run_id: &'a str, snap: &'a Snapshot) -> Self {
        Self {
            run_id: Cow::from(run_id),
            status: StatusFields::from(&snap.status),
            source: Cow::from(snap.source),
            temporal_status: format!("{:?}", snap.temporal_status),
            activities: snap.activities.iter().map(Activity::from).collect(),
        }
    }
}

/// One activity in flight, in `status --json` (`activities`; `docs/src/architecture/overview.md`
/// lists the fields).
#[derive(Debug, Serialize, Deserialize)]
pub struct Activity<'a> {
    pub activity: Cow<'a, str>,
    pub activity_id: Cow<'a, str>,
    /// `SCHEDULED`, `STARTED`, `CANCEL_REQUESTED`, `PAUSED`, `PAUSE_REQUESTED`.
    pub state: Cow<'a, str>,
    pub attempt: i32,
    pub maximum_attempts: i32,
    pub last_failure: Option<Cow<'a, str>>,
    pub scheduled_at_ms: Option<i64>,
    pub started_at_ms: Option<i64>,
    pub last_heartbeat_at_ms: Option<i64>,
    pub next_attempt_at_ms: Option<i64>,
}

impl<'a> From<&'a InFlight> for Activity<'a> {
    fn from(a: &'a InFlight) -> Self {
        Self {
            activity: Cow::from(&a.activity),
            activity_id: Cow::from(&a.activity_id),
            state: Cow::from(
                a.state
                    .as_str_name()
                    .trim_start_matches("PENDING_ACTIVITY_STATE_"),
            ),
            attempt: a.attempt,
            maximum_attempts: a.maximum_attempts,
            last_failure: (a.last_failure.as_deref()).map(Cow::from),
            scheduled_at_ms: a.scheduled_at_ms,
            started_at_ms: a.started_at_ms,
            last_heartbeat_at_ms: a.last_heartbeat_at_ms,
            next_attempt_at_ms: a.next_attempt_at_ms,
        }
    }
}

/// `submit --wait` and `result --wait` stopped waiting (`--wait-timeout`, Ctrl-C) while the
/// run goes on: `detail` says how to wait again, and the run's status follows when it could
/// be read (`result` prints the object without it otherwise).
#[derive(Debug, Serialize, Deserialize)]
pub struct StoppedWaiting<'a> {
    pub run_id: Cow<'a, str>,
    /// The run's state, as `state`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Cow<'a, str>>,
    /// Always `true`.
    pub waited: bool,
    pub detail: String,
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub run: Option<StatusFields<'a>>,
}

impl<'a> StoppedWaiting<'a> {
    pub fn new(run_id: &'a str, status: Option<&'a RunStatus>) -> Self {
        Self {
            run_id: Cow::from(run_id),
            status: (status.map(|s| s.state().as_str_name())).map(Cow::from),
            waited: true,
            detail: waiting::stopped(run_id),
            run: status.map(StatusFields::from),
        }
    }
}

/// `result --json` without `--wait`, for a run that goes on.
#[derive(Debug, Serialize, Deserialize)]
pub struct NotEnded<'a> {
    pub run_id: Cow<'a, str>,
    pub status: Cow<'a, str>,
    pub detail: Cow<'a, str>,
}

/// `transcript --json`: the conversation as proto3 JSON items.
#[derive(Debug, Serialize, Deserialize)]
pub struct Transcript<'a> {
    pub run_id: Cow<'a, str>,
    pub items: Cow<'a, [Item]>,
}

/// `show --json`: one call's arguments, exactly as the model wrote them.
#[derive(Debug, Serialize, Deserialize)]
pub struct Shown<'a> {
    pub run_id: Cow<'a, str>,
    pub call_id: Cow<'a, str>,
    pub tool: Cow<'a, str>,
    pub arguments: Cow<'a, str>,
    /// Bytes of `arguments`.
    pub bytes: usize,
    /// The run's history keeps them cut (`pending`/`status` show the cut form); these were
    /// read from the blob store.
    pub cut_in_history: bool,
}

/// `approve --json`, `deny --json`: each decision sent.
#[derive(Debug, Serialize, Deserialize)]
pub struct Decided<'a> {
    pub run_id: Cow<'a, str>,
    pub approved: bool,
    pub decisions: Cow<'a, [Decision]>,
}

/// How one decision was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SentAs {
    /// The validated update `approve`: applied when this returned.
    Update,
    /// The fire-and-forget signal `approval`: applied when a worker runs the run.
    Signal,
}

/// One decision sent. A signal has the same fields as the update, with what only the update
/// can tell (`still_pending`) null, and `call_id` besides.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Decision {
    pub call_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    pub approved: bool,
    pub still_pending: Option<u32>,
    pub remembered: Vec<String>,
    pub sent_as: SentAs,
}

impl Decision {
    /// A decision the update applied: the calls it decided, how many still wait, the rules
    /// it remembered.
    pub fn update(
        call_ids: Vec<String>,
        approved: bool,
        still_pending: u32,
        remembered: Vec<String>,
    ) -> Self {
        Self {
            call_ids,
            call_id: None,
            approved,
            still_pending: Some(still_pending),
            remembered,
            sent_as: SentAs::Update,
        }
    }

    /// A decision sent as the signal.
    pub fn signal(call_id: &str, approved: bool) -> Self {
        Self {
            call_ids: vec![call_id.to_owned()],
            call_id: Some(call_id.to_owned()),
            approved,
            still_pending: None,
            remembered: Vec::new(),
            sent_as: SentAs::Signal,
        }
    }
}

/// `list --json` and `pending --json`: `{"runs": [..]}`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Runs<T> {
    pub runs: Vec<T>,
}

/// One run in `list --json`.
#[derive(Debug, Serialize, Deserialize)]
pub struct ListedRun<'a> {
    pub run_id: Cow<'a, str>,
    pub state: Cow<'a, str>,
    /// Null while the run goes on.
    pub reason: Option<Cow<'a, str>>,
    pub turn: u32,
    pub temporal_status: String,
    pub task_queue: Cow<'a, str>,
}

/// One run in `pending --json`, with the calls it waits on.
#[derive(Debug, Serialize, Deserialize)]
pub struct PendingRun<'a> {
    pub run_id: Cow<'a, str>,
    pub turn: u32,
    /// A subagent's parent run.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parent_run_id: String,
    pub pending: Vec<WaitingCall>,
}

/// A call in `pending --json`, with how long it has waited.
#[derive(Debug, Serialize, Deserialize)]
pub struct WaitingCall {
    pub call_id: String,
    pub tool: String,
    /// The arguments exactly as the model wrote them; when the run's history keeps them cut
    /// and the whole could not be read, the cut form (then `arguments_unreadable` says why).
    pub arguments: String,
    /// The run's history keeps these arguments cut (over 1 KiB): `arguments` were read whole
    /// from the blob store, or see `arguments_unreadable`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub arguments_cut: bool,
    /// Why the whole arguments could not be read (`arguments` is then the cut form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_unreadable: Option<String>,
    pub waiting_seconds: i64,
}

impl WaitingCall {
    pub fn new(p: PendingCall, now_ms: i64) -> Self {
        Self {
            waiting_seconds: (now_ms - p.requested_at_ms).max(0) / 1000,
            call_id: p.call_id,
            tool: p.tool,
            arguments: p.arguments,
            arguments_cut: false,
            arguments_unreadable: None,
        }
    }
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;

#[path = "json_watch.rs"]
mod watch;
pub use watch::WatchLine;

#[path = "json_fleet.rs"]
mod fleet;
pub use fleet::{Fleet, FleetBuild, FleetPatch, FleetPatches, ReplayCheck};

#[path = "json_eval.rs"]
mod eval;
pub use eval::{
    Counterfactual, CounterfactualSummary, Eval, EvalCompare, EvalConfig, EvalRun, FailureCount,
    FirstDifference, Pair, PairSide, PassAtK, Skipped, TaskDiff, TaskResult,
};
