//! What a run tells: its status, the calls waiting for a decision, its events (and the one
//! line that describes each), notes.

use baton_proto::{
    EventsPage, PendingCall, RunEvent, RunResult, RunState as StateName, RunStatus,
    TerminationReason, run_event,
};

use super::{MAX_EVENTS, Phase, RunState};

impl RunState {
    /// The answer of query `status`.
    pub fn status(&self) -> RunStatus {
        let (state, reason) = match &self.phase {
            Phase::Thinking => (StateName::Thinking, TerminationReason::Unspecified),
            Phase::AwaitingApproval(_) => {
                (StateName::AwaitingApproval, TerminationReason::Unspecified)
            }
            Phase::Executing(_) => (StateName::Executing, TerminationReason::Unspecified),
            Phase::Compacting { .. } => (StateName::Compacting, TerminationReason::Unspecified),
            Phase::Verifying { .. } => (StateName::Verifying, TerminationReason::Unspecified),
            Phase::Finished(_) if self.follow_ups.idle => {
                (StateName::Idle, TerminationReason::Unspecified)
            }
            Phase::Finished(r) => (r.status(), r.reason()),
        };
        RunStatus {
            state: state as i32,
            turn: self.turn,
            pending: self.pending_calls(),
            usage: Some(self.usage),
            last_event: self.events.last().map(describe_event).unwrap_or_default(),
            reason: reason as i32,
            parent_run_id: self
                .spec
                .parent
                .as_ref()
                .map(|p| p.run_id.clone())
                .unwrap_or_default(),
            task: if self.spec.idle_timeout_seconds > 0 {
                self.task_number()
            } else {
                0
            },
            answer: match &self.phase {
                Phase::Finished(r) if self.follow_ups.idle => r.answer.clone(),
                _ => String::new(),
            },
        }
    }

    /// Calls waiting for a decision.
    pub fn pending_calls(&self) -> Vec<PendingCall> {
        match &self.phase {
            Phase::AwaitingApproval(batch) => batch
                .pending()
                .map(|c| PendingCall {
                    call_id: c.call.id.clone(),
                    tool: c.call.name.clone(),
                    arguments: c.call.arguments.clone(),
                    requested_at_ms: batch.requested_at_ms,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// How many calls wait for a decision ([`RunState::pending_calls`] without building them:
    /// the approval wait checks it on every activation).
    pub fn pending_count(&self) -> usize {
        match &self.phase {
            Phase::AwaitingApproval(batch) => batch.pending().count(),
            _ => 0,
        }
    }

    /// Whether every call of the pending batch is decided (the approval wait can end).
    pub fn approvals_settled(&self) -> bool {
        !matches!(self.phase, Phase::AwaitingApproval(_))
    }

    /// Events with `seq >= since` (query `events`).
    pub fn events_since(&self, since: u32) -> EventsPage {
        EventsPage {
            events: self
                .events
                .iter()
                .filter(|e| e.seq >= since)
                .cloned()
                .collect(),
            // Once the `finished` event is there (after the outputs of runs that hand some back).
            finished: matches!(self.phase, Phase::Finished(_)) && self.outputs.announced,
        }
    }

    /// The result, once finished.
    pub fn result(&self) -> Option<&RunResult> {
        match &self.phase {
            Phase::Finished(r) => Some(r),
            _ => None,
        }
    }

    /// An input arrived in a phase that cannot take it (`expected`: the phase that can). The
    /// workflow never sends one; should it, the note says so and nothing else changes.
    pub(super) fn ignored(&mut self, now_ms: i64, input: &str, expected: &str) {
        let note = format!(
            "{input} ignored: the run is {}, not {expected}",
            self.phase.name()
        );
        self.note(now_ms, &note);
    }

    /// Records a note event (shown by `watch` and as `last_event`).
    pub fn note(&mut self, now_ms: i64, text: &str) {
        self.push_event(now_ms, run_event::Kind::Note(text.to_owned()));
    }

    pub(super) fn push_event(&mut self, now_ms: i64, kind: run_event::Kind) {
        self.events.push(RunEvent {
            seq: self.next_seq,
            turn: self.turn,
            at_ms: now_ms,
            kind: Some(kind),
        });
        self.next_seq += 1;
        if self.events.len() > MAX_EVENTS {
            let excess = self.events.len() - MAX_EVENTS;
            self.events.drain(..excess);
        }
    }
}

/// One line describing an event, for `status.last_event`.
pub fn describe_event(e: &RunEvent) -> String {
    match &e.kind {
        Some(run_event::Kind::Assistant(a)) if a.tool_calls.is_empty() => {
            format!("turn {}: model replied", e.turn)
        }
        Some(run_event::Kind::Assistant(a)) => format!(
            "turn {}: model called {}",
            e.turn,
            a.tool_calls
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Some(run_event::Kind::ApprovalRequested(p)) => {
            format!("approval requested for {} ({})", p.call_id, p.tool)
        }
        Some(run_event::Kind::ApprovalDecided(d)) => format!(
            "{} {} by {}",
            d.call_id,
            if d.approved { "approved" } else { "denied" },
            d.approver
        ),
        Some(run_event::Kind::ToolStarted(c)) => format!("running {} ({})", c.name, c.id),
        Some(run_event::Kind::ToolFinished(r)) => format!(
            "{} ({}) {}{}",
            r.name,
            r.call_id,
            if r.is_error { "failed" } else { "finished" },
            match r.network_refused {
                0 => String::new(),
                n => format!("; the proxy refused {n} network connection(s)"),
            }
        ),
        Some(run_event::Kind::Finished(r)) => format!("run ended: {}", r.reason().as_str_name()),
        Some(run_event::Kind::Note(n)) => n.clone(),
        Some(run_event::Kind::SubagentStarted(s)) => {
            format!("subagent {} started ({})", s.run_id, s.call_id)
        }
        Some(run_event::Kind::SubagentFinished(f)) => {
            let o = f.outcome.clone().unwrap_or_default();
            format!(
                "subagent {} ended: {}{}",
                o.run_id,
                o.reason().as_str_name(),
                if o.merge.is_empty() {
                    String::new()
                } else {
                    format!("; changes {}", o.merge)
                }
            )
        }
        Some(run_event::Kind::VerificationStarted(v)) => format!(
            "verifying ({}/{}, round {}): {}",
            v.index, v.of, v.round, v.command
        ),
        Some(run_event::Kind::VerificationFinished(v)) => format!(
            "verification {}: {} ({}, {:.1} s)",
            if v.exit_code == 0 && !v.timed_out {
                "passed"
            } else {
                "failed"
            },
            v.command,
            v.status,
            v.duration_ms as f64 / 1000.0
        ),
        None => String::new(),
    }
}
