//! How a run ends: its result, an answer for every call left open, the deadline and
//! cancellation.

use baton_proto::{
    Item, RunResult, RunState as StateName, TerminationReason, ToolResult, item, run_event,
};

use super::{BatchKind, Disposition, Phase, RunState};

impl RunState {
    /// The run completed with `answer` (and its JSON `output`, `--output-schema`).
    pub(super) fn complete(&mut self, answer: String, output: String) {
        let result = RunResult {
            run_id: self.run_id.clone(),
            status: StateName::Completed as i32,
            reason: TerminationReason::Completed as i32,
            answer,
            turns: self.turn,
            usage: Some(self.usage),
            detail: String::new(),
            output,
            started_at_ms: self.started_at_ms,
            ..RunResult::default()
        };
        self.phase = Phase::Finished(Box::new(result));
    }

    pub(super) fn finish(&mut self, now_ms: i64, reason: TerminationReason, detail: String) {
        let status = match reason {
            TerminationReason::Completed => StateName::Completed,
            TerminationReason::Cancelled => StateName::Cancelled,
            _ => StateName::Failed,
        };
        self.close_open_calls(now_ms, &detail);
        let result = RunResult {
            run_id: self.run_id.clone(),
            status: status as i32,
            reason: reason as i32,
            answer: self.last_assistant_text(),
            turns: self.turn,
            usage: Some(self.usage),
            detail,
            started_at_ms: self.started_at_ms,
            ..RunResult::default()
        };
        self.phase = Phase::Finished(Box::new(result));
    }

    /// Tells the `finished` event (once), carrying the result with its outputs.
    pub(super) fn announce(&mut self, now_ms: i64, result: &RunResult) {
        if !self.outputs.announced {
            self.push_event(now_ms, run_event::Kind::Finished(result.clone()));
            self.outputs.announced = true;
        }
    }

    /// The run ends (`detail`: why) with tool calls of the model's last turn unanswered (in
    /// flight, or waiting for a decision): each gets a result saying so, in the conversation
    /// and as an event, so a transcript or `watch` never shows a call without an outcome.
    fn close_open_calls(&mut self, now_ms: i64, detail: &str) {
        let (batch, running) = match &self.phase {
            Phase::Executing(batch) => (batch, true),
            Phase::AwaitingApproval(batch) if !matches!(batch.kind, BatchKind::Question { .. }) => {
                (batch, false)
            }
            _ => return,
        };
        // (result, whether its `tool_finished` event is still to be told)
        let results: Vec<(ToolResult, bool)> = batch
            .calls
            .iter()
            .map(|planned| {
                let id = &planned.call.id;
                if let Some(done) = batch.done.iter().find(|r| &r.call_id == id) {
                    return (done.clone(), false);
                }
                let content = match &planned.disposition {
                    Disposition::Refused { content } => content.clone(),
                    Disposition::Run { .. } if running && batch.started.contains(id) => format!(
                        "stopped: the run ended while this call ran ({detail}); it may have \
                         taken effect in part"
                    ),
                    Disposition::Run { .. } => {
                        format!("not run: the run ended before this call ran ({detail})")
                    }
                    Disposition::Pending => {
                        format!("not run: the run ended before this call was decided ({detail})")
                    }
                };
                let result = ToolResult {
                    call_id: planned.call.id.clone(),
                    name: planned.call.name.clone(),
                    content,
                    is_error: true,
                    ..Default::default()
                };
                (result, true)
            })
            .collect();
        for (result, tell) in results {
            if tell {
                self.push_event(now_ms, run_event::Kind::ToolFinished(result.clone()));
            }
            self.conversation.push(Item {
                kind: Some(item::Kind::ToolResult(result)),
            });
        }
    }

    fn last_assistant_text(&self) -> String {
        self.conversation
            .iter()
            .rev()
            .find_map(|i| match &i.kind {
                Some(item::Kind::Assistant(a)) if !a.text.is_empty() => Some(a.text.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// The run's deadline in workflow time (Unix ms), if it has one.
    pub fn deadline_ms(&self) -> Option<i64> {
        let secs = self.limits().deadline_seconds;
        (secs > 0).then(|| self.started_at_ms + i64::from(secs) * 1000)
    }

    /// Whether the workflow should stop work in flight when the deadline passes (limits that
    /// ask a human are checked between turns instead).
    pub fn deadline_interrupts(&self) -> bool {
        self.deadline_ms().is_some() && !self.ask_on_exhausted()
    }

    /// The deadline passed while an activity or approval wait was in flight (which the
    /// workflow cancelled).
    pub(crate) fn on_deadline_passed(&mut self, now_ms: i64) {
        let secs = self.limits().deadline_seconds;
        self.end_conversation(
            now_ms,
            &format!(
                "the run passed its deadline of {secs} s between tasks: the conversation ends"
            ),
        );
        if matches!(self.phase, Phase::Finished(_)) {
            // The run ended first: that ending stands, and stays its last event.
            return;
        }
        self.finish(
            now_ms,
            TerminationReason::BudgetExceeded,
            format!("the run passed its deadline of {secs} s; work in flight was stopped"),
        );
    }

    /// Workflow cancellation was requested.
    pub(crate) fn on_cancelled(&mut self, reason: Option<String>, now_ms: i64) {
        self.end_conversation(now_ms, "cancelled between tasks: the conversation ends");
        if matches!(self.phase, Phase::Finished(_)) {
            // The run ended first: that ending stands, and stays its last event.
            return;
        }
        let detail = match reason {
            Some(r) if !r.is_empty() => format!("cancelled: {r}"),
            _ => "cancelled".to_owned(),
        };
        self.finish(now_ms, TerminationReason::Cancelled, detail);
    }
}
