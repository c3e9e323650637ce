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

use baton_proto::{
    Changes, Delivered, FileChange, Item, PendingCall, RunResult, RunState, RunStatus, Usage,
};
use serde::Serialize;

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
#[derive(Debug, Serialize)]
pub(crate) struct Failure<'a> {
    pub(crate) error: &'a str,
    pub(crate) exit_code: i32,
}

/// `submit --json` without `--wait`: the run has started.
#[derive(Debug, Serialize)]
pub(crate) struct Submitted<'a> {
    pub(crate) run_id: &'a str,
    /// Always `RUNNING`.
    pub(crate) status: &'static str,
    pub(crate) task_queue: &'a str,
    /// With `--priority`/`--fairness-key` (or a `team` label): whether the server kept them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) priority_applied: Option<bool>,
}

impl<'a> Submitted<'a> {
    pub(crate) fn new(run_id: &'a str, task_queue: &'a str) -> Self {
        Self {
            run_id,
            status: "RUNNING",
            task_queue,
            priority_applied: None,
        }
    }
}

/// `fork --json` without `--wait`: the fork has started.
#[derive(Debug, Serialize)]
pub(crate) struct Forked<'a> {
    pub(crate) run_id: &'a str,
    /// Always `RUNNING`.
    pub(crate) status: &'static str,
    pub(crate) task_queue: &'a str,
    /// The run it was forked from, and at which turn.
    pub(crate) fork_of: &'a str,
    pub(crate) at_turn: u32,
}

/// A run's token use and estimated cost. `input_tokens` counts every prompt token (cache
/// reads and writes are parts of it), `output_tokens` the reasoning ones; `cost_usd` is the
/// workers' estimate under their price table (0 for a model without a price).
#[derive(Debug, Serialize)]
pub(crate) struct Tokens {
    pub(crate) input_tokens: u32,
    pub(crate) output_tokens: u32,
    pub(crate) total_tokens: u32,
    pub(crate) llm_calls: u32,
    pub(crate) cache_read_tokens: u32,
    pub(crate) cache_write_tokens: u32,
    pub(crate) reasoning_tokens: u32,
    pub(crate) cost_usd: f64,
    /// Calls whose server reported no usage: their tokens (and cost) are estimates from the
    /// text. Left out when every call was reported.
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) estimated_calls: u32,
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
#[derive(Debug, Serialize)]
pub(crate) struct Ended<'a> {
    /// `result` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) run_id: Option<&'a str>,
    pub(crate) status: &'static str,
    pub(crate) reason: &'static str,
    pub(crate) answer: &'a str,
    pub(crate) turns: u32,
    /// `result`: when the run recorded it; `finished`: always.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) usage: Option<Tokens>,
    pub(crate) detail: &'a str,
    /// `finished` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) exit_code: Option<i32>,
    /// `result`: for every run that did not complete (`""` when the agent said nothing);
    /// `finished`: when the agent said something.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) last_text: Option<&'a str>,
    /// What the run changed (runs of baton versions that collect it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) changes: Option<ChangeSet<'a>>,
    /// What delivery did, when the run asked for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) delivered: Option<Delivery<'a>>,
    /// The final answer as JSON (runs with `--output-schema`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) output: Option<serde_json::Value>,
    /// The verification commands of the last round (runs with `--verify`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) verification: Vec<Check<'a>>,
}

/// One verification command as it ran: `result`'s `verification`, `watch`'s
/// `verification_finished`.
#[derive(Debug, Serialize)]
pub(crate) struct Check<'a> {
    pub(crate) command: &'a str,
    /// -1 when the command has none (a signal, the timeout).
    pub(crate) exit_code: i32,
    pub(crate) passed: bool,
    pub(crate) duration_ms: u64,
    pub(crate) status: &'a str,
    pub(crate) timed_out: bool,
    pub(crate) round: u32,
    pub(crate) output_tail: &'a str,
    /// Blob id of the whole output (`""` when the tail is all of it).
    pub(crate) output_blob: &'a str,
}

impl<'a> From<&'a baton_proto::Verification> for Check<'a> {
    fn from(v: &'a baton_proto::Verification) -> Self {
        Self {
            command: &v.command,
            exit_code: v.exit_code,
            passed: v.exit_code == 0 && !v.timed_out,
            duration_ms: v.duration_ms,
            status: &v.status,
            timed_out: v.timed_out,
            round: v.round,
            output_tail: &v.output_tail,
            output_blob: &v.output_blob,
        }
    }
}

/// `verification_started`: command `index` of `of` in round `round`.
#[derive(Debug, Serialize)]
pub(crate) struct CheckStarted<'a> {
    pub(crate) command: &'a str,
    pub(crate) round: u32,
    pub(crate) index: u32,
    pub(crate) of: u32,
}

/// A run's change set: counts, the starting commit, where the patch is, and each file.
#[derive(Debug, Serialize)]
pub(crate) struct ChangeSet<'a> {
    pub(crate) files_changed: u32,
    pub(crate) insertions: u32,
    pub(crate) deletions: u32,
    /// The git commit the run started from (`""` when its tree was not a repository).
    pub(crate) base_commit: &'a str,
    pub(crate) base_snapshot: &'a str,
    pub(crate) final_snapshot: &'a str,
    /// Blob id of the patch (`""` when nothing changed); `baton diff RUN` prints it.
    pub(crate) patch: &'a str,
    pub(crate) patch_bytes: u64,
    pub(crate) files: Vec<ChangedFile<'a>>,
    /// `files` lists the first 500; the patch has them all.
    pub(crate) files_truncated: bool,
    /// Why the change set could not be collected.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(crate) error: &'a str,
}

#[derive(Debug, Serialize)]
pub(crate) struct ChangedFile<'a> {
    pub(crate) path: &'a str,
    /// `added`, `modified`, `deleted`, `mode` or `type`.
    pub(crate) status: &'a str,
    pub(crate) insertions: u32,
    pub(crate) deletions: u32,
    pub(crate) binary: bool,
}

impl<'a> From<&'a Changes> for ChangeSet<'a> {
    fn from(c: &'a Changes) -> Self {
        Self {
            files_changed: c.files_changed,
            insertions: c.insertions,
            deletions: c.deletions,
            base_commit: &c.base_commit,
            base_snapshot: &c.base_snapshot,
            final_snapshot: &c.final_snapshot,
            patch: &c.patch,
            patch_bytes: c.patch_bytes,
            files: c.files.iter().map(ChangedFile::from).collect(),
            files_truncated: c.files_truncated,
            error: &c.error,
        }
    }
}

impl<'a> From<&'a FileChange> for ChangedFile<'a> {
    fn from(f: &'a FileChange) -> Self {
        Self {
            path: &f.path,
            status: &f.status,
            insertions: f.insertions,
            deletions: f.deletions,
            binary: f.binary,
        }
    }
}

/// What `--deliver` did.
#[derive(Debug, Serialize)]
pub(crate) struct Delivery<'a> {
    /// `branch` or `pr`.
    pub(crate) mode: &'a str,
    /// Whether the branch was pushed (and the pull request opened, for `pr`).
    pub(crate) ok: bool,
    pub(crate) url: &'a str,
    pub(crate) branch: &'a str,
    pub(crate) commit: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(crate) pull_request_url: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pull_request_number: Option<u64>,
    /// Nothing changed: nothing was pushed.
    pub(crate) nothing_to_deliver: bool,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(crate) error: &'a str,
}

impl<'a> From<&'a Delivered> for Delivery<'a> {
    fn from(d: &'a Delivered) -> Self {
        Self {
            mode: &d.mode,
            ok: d.error.is_empty(),
            url: &d.url,
            branch: &d.branch,
            commit: &d.commit,
            pull_request_url: &d.pull_request_url,
            pull_request_number: (d.pull_request_number != 0).then_some(d.pull_request_number),
            nothing_to_deliver: d.nothing_to_deliver,
            error: &d.error,
        }
    }
}

/// `diff --json`.
#[derive(Debug, Serialize)]
pub(crate) struct Diff<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) changes: ChangeSet<'a>,
    /// The patch as text (absent with `--stat`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) patch: Option<String>,
}

/// `download --json`.
#[derive(Debug, Serialize)]
pub(crate) struct Downloaded<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) dir: &'a str,
    pub(crate) files: usize,
    pub(crate) bytes: u64,
    /// `.git` directories (or files) of the run's tree that were not written, with how many
    /// entries each held.
    pub(crate) left_out: Vec<LeftOut<'a>>,
}

/// A `.git` path `download` left out.
#[derive(Debug, Serialize)]
pub(crate) struct LeftOut<'a> {
    pub(crate) path: &'a str,
    pub(crate) entries: usize,
}

impl<'a> Ended<'a> {
    /// `result --json`.
    pub(crate) fn result(r: &'a RunResult) -> Self {
        let (answer, last_text) = render::answer_of(r);
        Self {
            run_id: Some(&r.run_id),
            usage: r.usage.as_ref().map(Tokens::from),
            exit_code: None,
            last_text: (r.status() != RunState::Completed).then(|| last_text.unwrap_or_default()),
            ..Self::common(r, answer)
        }
    }

    /// The object of `watch`'s `finished` line.
    pub(crate) fn finished(r: &'a RunResult) -> Self {
        let (answer, last_text) = render::answer_of(r);
        Self {
            run_id: None,
            usage: Some(Tokens::from(&r.usage.unwrap_or_default())),
            exit_code: Some(exit::for_result(r)),
            last_text,
            ..Self::common(r, answer)
        }
    }

    fn common(r: &'a RunResult, answer: &'a str) -> Self {
        Self {
            run_id: None,
            status: r.status().as_str_name(),
            reason: r.reason().as_str_name(),
            answer,
            turns: r.turns,
            usage: None,
            detail: &r.detail,
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
#[derive(Debug, Serialize)]
pub(crate) struct Pending<'a> {
    pub(crate) call_id: &'a str,
    pub(crate) tool: &'a str,
    pub(crate) arguments: &'a str,
    /// A number, not the string proto3 JSON makes of a 64-bit integer.
    pub(crate) requested_at_ms: i64,
}

impl<'a> From<&'a PendingCall> for Pending<'a> {
    fn from(p: &'a PendingCall) -> Self {
        Self {
            call_id: &p.call_id,
            tool: &p.tool,
            arguments: &p.arguments,
            requested_at_ms: p.requested_at_ms,
        }
    }
}

/// A run's status (`RunStatus`), as it is part of [`Status`] and [`StoppedWaiting`]:
/// `reason` is null while the run goes on.
#[derive(Debug, Serialize)]
pub(crate) struct StatusFields<'a> {
    pub(crate) state: &'static str,
    pub(crate) turn: u32,
    pub(crate) pending: Vec<Pending<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) usage: Option<Tokens>,
    pub(crate) last_event: &'a str,
    pub(crate) reason: Option<&'static str>,
    /// A conversation's current task (absent for other runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) task: Option<u32>,
    /// A conversation's last answer, while it is `IDLE`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) answer: Option<&'a str>,
}

impl<'a> From<&'a RunStatus> for StatusFields<'a> {
    fn from(s: &'a RunStatus) -> Self {
        Self {
            state: s.state().as_str_name(),
            turn: s.turn,
            pending: s.pending.iter().map(Pending::from).collect(),
            usage: s.usage.as_ref().map(Tokens::from),
            last_event: &s.last_event,
            reason: (s.reason != 0).then(|| s.reason().as_str_name()),
            task: (s.task != 0).then_some(s.task),
            answer: (!s.answer.is_empty()).then_some(s.answer.as_str()),
        }
    }
}

/// `status --json`.
#[derive(Debug, Serialize)]
pub(crate) struct Status<'a> {
    pub(crate) run_id: &'a str,
    #[serde(flatten)]
    pub(crate) status: StatusFields<'a>,
    /// `query` (live, from a worker) or `memo` (the last state the run recorded).
    pub(crate) source: &'a str,
    /// The execution's status in Temporal: `Running`, `Completed`, `Terminated`, ...
    pub(crate) temporal_status: String,
    pub(crate) activities: Vec<Activity<'a>>,
}

impl<'a> Status<'a> {
    pub(crate) fn new(run_id: &'a str, snap: &'a Snapshot) -> Self {
        Self {
            run_id,
            status: StatusFields::from(&snap.status),
            source: snap.source,
            temporal_status: format!("{:?}", snap.temporal_status),
            activities: snap.activities.iter().map(Activity::from).collect(),
        }
    }
}

/// One activity in flight, in `status --json` (`activities`; `docs/src/architecture/overview.md`
/// lists the fields).
#[derive(Debug, Serialize)]
pub(crate) struct Activity<'a> {
    pub(crate) activity: &'a str,
    pub(crate) activity_id: &'a str,
    /// `SCHEDULED`, `STARTED`, `CANCEL_REQUESTED`, `PAUSED`, `PAUSE_REQUESTED`.
    pub(crate) state: &'static str,
    pub(crate) attempt: i32,
    pub(crate) maximum_attempts: i32,
    pub(crate) last_failure: Option<&'a str>,
    pub(crate) scheduled_at_ms: Option<i64>,
    pub(crate) started_at_ms: Option<i64>,
    pub(crate) last_heartbeat_at_ms: Option<i64>,
    pub(crate) next_attempt_at_ms: Option<i64>,
}

impl<'a> From<&'a InFlight> for Activity<'a> {
    fn from(a: &'a InFlight) -> Self {
        Self {
            activity: &a.activity,
            activity_id: &a.activity_id,
            state: a
                .state
                .as_str_name()
                .trim_start_matches("PENDING_ACTIVITY_STATE_"),
            attempt: a.attempt,
            maximum_attempts: a.maximum_attempts,
            last_failure: a.last_failure.as_deref(),
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
#[derive(Debug, Serialize)]
pub(crate) struct StoppedWaiting<'a> {
    pub(crate) run_id: &'a str,
    /// The run's state, as `state`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<&'static str>,
    /// Always `true`.
    pub(crate) waited: bool,
    pub(crate) detail: String,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(crate) run: Option<StatusFields<'a>>,
}

impl<'a> StoppedWaiting<'a> {
    pub(crate) fn new(run_id: &'a str, status: Option<&'a RunStatus>) -> Self {
        Self {
            run_id,
            status: status.map(|s| s.state().as_str_name()),
            waited: true,
            detail: waiting::stopped(run_id),
            run: status.map(StatusFields::from),
        }
    }
}

/// `result --json` without `--wait`, for a run that goes on.
#[derive(Debug, Serialize)]
pub(crate) struct NotEnded<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) status: &'static str,
    pub(crate) detail: &'a str,
}

/// `transcript --json`: the conversation as proto3 JSON items.
#[derive(Debug, Serialize)]
pub(crate) struct Transcript<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) items: &'a [Item],
}

/// `show --json`: one call's arguments, exactly as the model wrote them.
#[derive(Debug, Serialize)]
pub(crate) struct Shown<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) call_id: &'a str,
    pub(crate) tool: &'a str,
    pub(crate) arguments: &'a str,
    /// Bytes of `arguments`.
    pub(crate) bytes: usize,
    /// The run's history keeps them cut (`pending`/`status` show the cut form); these were
    /// read from the blob store.
    pub(crate) cut_in_history: bool,
}

/// `approve --json`, `deny --json`: each decision sent.
#[derive(Debug, Serialize)]
pub(crate) struct Decided<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) approved: bool,
    pub(crate) decisions: &'a [Decision],
}

/// How one decision was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SentAs {
    /// The validated update `approve`: applied when this returned.
    Update,
    /// The fire-and-forget signal `approval`: applied when a worker runs the run.
    Signal,
}

/// One decision sent. A signal has the same fields as the update, with what only the update
/// can tell (`still_pending`) null, and `call_id` besides.
#[derive(Debug, Serialize)]
pub(crate) struct Decision {
    pub(crate) call_ids: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) call_id: Option<String>,
    pub(crate) approved: bool,
    pub(crate) still_pending: Option<u32>,
    pub(crate) remembered: Vec<String>,
    pub(crate) sent_as: SentAs,
}

impl Decision {
    /// A decision the update applied: the calls it decided, how many still wait, the rules
    /// it remembered.
    pub(crate) fn update(
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
    pub(crate) fn signal(call_id: &str, approved: bool) -> Self {
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
#[derive(Debug, Serialize)]
pub(crate) struct Runs<T> {
    pub(crate) runs: Vec<T>,
}

/// One run in `list --json`.
#[derive(Debug, Serialize)]
pub(crate) struct ListedRun<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) state: &'static str,
    /// Null while the run goes on.
    pub(crate) reason: Option<&'static str>,
    pub(crate) turn: u32,
    pub(crate) temporal_status: String,
    pub(crate) task_queue: &'a str,
}

/// One run in `pending --json`, with the calls it waits on.
#[derive(Debug, Serialize)]
pub(crate) struct PendingRun<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) turn: u32,
    /// A subagent's parent run.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) parent_run_id: String,
    pub(crate) pending: Vec<WaitingCall>,
}

/// A call in `pending --json`, with how long it has waited.
#[derive(Debug, Serialize)]
pub(crate) struct WaitingCall {
    pub(crate) call_id: String,
    pub(crate) tool: String,
    /// The arguments exactly as the model wrote them; when the run's history keeps them cut
    /// and the whole could not be read, the cut form (then `arguments_unreadable` says why).
    pub(crate) arguments: String,
    /// The run's history keeps these arguments cut (over 1 KiB): `arguments` were read whole
    /// from the blob store, or see `arguments_unreadable`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) arguments_cut: bool,
    /// Why the whole arguments could not be read (`arguments` is then the cut form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) arguments_unreadable: Option<String>,
    pub(crate) waiting_seconds: i64,
}

impl WaitingCall {
    pub(crate) fn new(p: PendingCall, now_ms: i64) -> Self {
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
pub(crate) use watch::WatchLine;

#[path = "json_fleet.rs"]
mod fleet;
pub(crate) use fleet::{Fleet, FleetBuild, FleetPatch, FleetPatches, ReplayCheck};
