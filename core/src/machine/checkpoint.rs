//! Continue-as-new: when a segment ends, the checkpoint it carries, and the run resumed from
//! it.

use baton_proto::{Continuation, RunEvent, RunSpec, run_event};

use super::persisted::RunStateV1;
use super::{
    CARRIED_EVENT_TEXT, CARRIED_EVENTS, CHECKPOINT_FORMAT, DEFAULT_HISTORY_EVENTS_BUDGET,
    MAX_CHECKPOINT_BYTES, Phase, RESIDENT_TURNS, RunState, normalize,
};
use crate::{error::StateError, view};

impl RunState {
    /// Whether the run should continue as new before its next step: the server suggests it,
    /// or the segment used its event or turn budget. Never while finished.
    pub fn wants_continue_as_new(&self, history_length: u32, suggested: bool) -> bool {
        if matches!(self.phase, Phase::Finished(_)) {
            return false;
        }
        let limits = self.limits();
        let events_budget = match limits.history_events_budget {
            0 => DEFAULT_HISTORY_EVENTS_BUDGET,
            n => n,
        };
        let turns = self.turn.saturating_sub(self.segment_start_turn);
        suggested
            || history_length >= events_budget
            || (limits.segment_turns > 0 && turns >= limits.segment_turns)
    }

    /// The state to carry into the next segment: this state without the spec (the next
    /// segment's input carries it), with the conversation before the last
    /// [`RESIDENT_TURNS`] turns reduced to stubs (the blob store holds it: only items already
    /// stored are stubbed) and only the last [`CARRIED_EVENTS`] events, their texts cut.
    pub fn checkpoint(&self) -> Result<Continuation, StateError> {
        let mut state = self.clone();
        state.spec = RunSpec::default();
        state.segment += 1;
        state.segment_start_turn = state.turn;
        let stored = self.stored.as_ref().map(|s| s.1).unwrap_or(0);
        let mut resident_turns = RESIDENT_TURNS;
        let mut carried = CARRIED_EVENTS;
        loop {
            let resident_from = view::resident_from(&self.conversation, resident_turns, stored);
            view::stub_before(&mut state.conversation, resident_from);
            let skip = self.events.len().saturating_sub(carried);
            state.events = self.events[skip..].iter().map(trim_event).collect();
            let json = serde_json::to_string(&RunStateV1::from(state.clone()))
                .map_err(StateError::Unserializable)?;
            if json.len() <= MAX_CHECKPOINT_BYTES || (resident_turns <= 1 && carried == 0) {
                return Ok(Continuation {
                    segment: state.segment,
                    state: json,
                    format: CHECKPOINT_FORMAT,
                });
            }
            resident_turns = (resident_turns / 2).max(1);
            carried /= 2;
        }
    }

    /// A run continued from [`RunState::checkpoint`], with `spec` (the input without its
    /// continuation).
    pub fn resume(
        run_id: &str,
        spec: RunSpec,
        continued: &Continuation,
    ) -> Result<Self, StateError> {
        if continued.format != CHECKPOINT_FORMAT {
            return Err(StateError::CheckpointFormat {
                found: continued.format,
            });
        }
        let mut state: RunState = serde_json::from_str::<RunStateV1>(&continued.state)
            .map_err(StateError::Unreadable)?
            .into();
        state.run_id = run_id.to_owned();
        state.spec = normalize(spec);
        Ok(state)
    }
}

/// An event as carried across continue-as-new: long texts cut.
fn trim_event(e: &RunEvent) -> RunEvent {
    let cut = |t: &mut String| view::cut_text(t, CARRIED_EVENT_TEXT);
    let mut e = e.clone();
    match &mut e.kind {
        Some(run_event::Kind::Assistant(a)) => {
            cut(&mut a.text);
            cut(&mut a.reasoning);
            for c in &mut a.tool_calls {
                cut(&mut c.arguments);
            }
        }
        Some(run_event::Kind::ToolFinished(r)) => {
            cut(&mut r.content);
            r.full_output.clear();
        }
        Some(run_event::Kind::ToolStarted(c)) => cut(&mut c.arguments),
        Some(run_event::Kind::Note(n)) => cut(n),
        _ => {}
    }
    e
}
