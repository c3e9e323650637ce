//! Status publishing: the run's memo (read by `baton status` with no worker), its search
//! attributes (`baton list`, `baton pending`) and its Web UI details.
//!
//! When to refresh ([`before_step`]): on a change of the coarse state or the pending calls,
//! every [`STATUS_EVERY_TURNS`] turns, and at the end. Each refresh is a history event and a
//! visibility write, the largest per-turn cost baton adds to the server (BENCHMARKS.md); the
//! live `status` query is always exact.

use baton_proto::RunStatus;
use temporalio_common::search_attributes::SearchAttributeKey;
use temporalio_workflow::{MemoValue, WorkflowContext};

use super::AgentRun;
use baton_core::machine::Step;

/// Memo key holding the latest [`RunStatus`], so `baton status` can answer without a worker.
pub const STATUS_MEMO_KEY: &str = "status";
/// Turns between two refreshes of the status memo while the coarse state does not change.
pub const STATUS_EVERY_TURNS: u32 = 10;

/// Search attribute: the run's state (`THINKING`, `AWAITING_APPROVAL`, ...). Keyword.
pub const SA_STATE: SearchAttributeKey<String> = SearchAttributeKey::keyword("BatonState");
/// Search attribute: a call waits for a human. Bool.
pub const SA_AWAITING_APPROVAL: SearchAttributeKey<bool> =
    SearchAttributeKey::bool("BatonAwaitingApproval");
/// Search attribute: LLM calls so far. Int.
pub const SA_TURNS: SearchAttributeKey<i64> = SearchAttributeKey::int("BatonTurns");
/// Search attribute: who submitted the run (label `submitter`). Keyword.
pub const SA_SUBMITTER: SearchAttributeKey<String> = SearchAttributeKey::keyword("BatonSubmitter");
/// Search attribute: the run's labels as `key=value`. KeywordList.
pub const SA_LABELS: SearchAttributeKey<Vec<String>> =
    SearchAttributeKey::keyword_list("BatonLabels");
/// `--search-attribute` arguments of `temporal server start-dev` registering them.
pub const SEARCH_ATTRIBUTE_DEFINITIONS: [(&str, &str); 5] = [
    ("BatonState", "Keyword"),
    ("BatonAwaitingApproval", "Bool"),
    ("BatonTurns", "Int"),
    ("BatonSubmitter", "Keyword"),
    ("BatonLabels", "KeywordList"),
];

/// The search attribute values last sent. Not part of the run's state: rebuilt identically on
/// replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Indexed {
    state: String,
    awaiting_approval: bool,
    turns: u32,
}

/// What a status refresh is keyed on: the coarse state (thinking, running tools and compacting
/// are all "running") and the calls waiting for a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StatusKey {
    state: String,
    pending: Vec<String>,
}

/// What the last status refresh showed and at which turn (generation 3). Not part of the run's
/// state: rebuilt identically on replay.
#[derive(Debug, Clone)]
pub(super) struct Published {
    key: StatusKey,
    turn: u32,
}

impl Published {
    fn of(status: &RunStatus) -> Self {
        let state = match status.state() {
            baton_proto::RunState::Thinking
            | baton_proto::RunState::Executing
            | baton_proto::RunState::Compacting
            | baton_proto::RunState::Verifying => "RUNNING".to_owned(),
            other => other.as_str_name().to_owned(),
        };
        let pending = status.pending.iter().map(|p| p.call_id.clone()).collect();
        Self {
            key: StatusKey { state, pending },
            turn: status.turn,
        }
    }

    /// Whether a run that last published `self` publishes again before `step`, now at `now`.
    fn is_due(&self, now: &Self, step: &Step) -> bool {
        self.key != now.key
            || now.turn >= self.turn + STATUS_EVERY_TURNS
            || matches!(step, Step::Finish(_))
    }
}

/// Publishes before `step` when the rule of the module doc says it is due; sets the details
/// always.
pub(super) fn before_step(ctx: &WorkflowContext<AgentRun>, step: &Step) {
    let status = set_details(ctx);
    let now = Published::of(&status);
    let due = ctx.state(|s| s.published.as_ref().is_none_or(|p| p.is_due(&now, step)));
    if due {
        publish(ctx, &status);
        ctx.state_mut(|s| s.published = Some(now));
    }
}

/// Publishes at once, outside the per-step rule (a partial approval decision), and remembers it
/// as the last refresh.
pub(super) fn publish_now(ctx: &WorkflowContext<AgentRun>) {
    let status = set_details(ctx);
    publish(ctx, &status);
    ctx.state_mut(|s| s.published = Some(Published::of(&status)));
}

/// Keeps the run's memo and UI details current, so `baton status` works with no worker.
pub(super) fn publish_status(ctx: &WorkflowContext<AgentRun>) {
    let status = set_details(ctx);
    publish(ctx, &status);
}

/// Writes `status` (the run's current one, its details already set) to the memo, and the search
/// attributes that changed.
fn publish(ctx: &WorkflowContext<AgentRun>, status: &RunStatus) {
    if let Ok(value) = serde_json::to_value(status) {
        let _ = ctx.upsert_memo([(STATUS_MEMO_KEY, Some(MemoValue::new(value)))]);
    }
    let indexed = Indexed {
        state: status.state().as_str_name().to_owned(),
        awaiting_approval: !status.pending.is_empty(),
        turns: status.turn,
    };
    let previous = ctx.state(|s| s.indexed.clone());
    if previous.as_ref() == Some(&indexed) {
        return;
    }
    let mut updates = Vec::new();
    if previous.is_none() {
        let labels = ctx.state(|s| s.run.spec.labels.clone());
        let mut pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        pairs.sort();
        updates.extend(SA_LABELS.try_value_set(pairs).ok());
        if let Some(submitter) = labels.get("submitter") {
            updates.extend(SA_SUBMITTER.try_value_set(submitter.clone()).ok());
        }
    }
    updates.extend(SA_STATE.try_value_set(indexed.state.clone()).ok());
    updates.extend(
        SA_AWAITING_APPROVAL
            .try_value_set(indexed.awaiting_approval)
            .ok(),
    );
    updates.extend(SA_TURNS.try_value_set(i64::from(indexed.turns)).ok());
    ctx.upsert_search_attributes(updates);
    ctx.state_mut(|s| s.indexed = Some(indexed));
}

/// Sets the run's current details (shown by the Web UI; answered by a query, so no command
/// and no history event) and returns the status they describe.
fn set_details(ctx: &WorkflowContext<AgentRun>) -> RunStatus {
    let status = ctx.state(|s| s.run.status());
    let details = format!(
        "{} · turn {} · {}",
        status.state().as_str_name(),
        status.turn,
        status.last_event
    );
    ctx.set_current_details(details);
    status
}
