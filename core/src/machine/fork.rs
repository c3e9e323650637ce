//! A forked run (`baton fork RUN --at-turn N`): its first segment's state, made from the spec's
//! [`ForkSource`] (built by the CLI with [`crate::fork`]). The conversation is the source's up
//! to the end of turn N, by reference: the stored part stays in the blob store (the model
//! activity loads it), the state holds it as stubs but for the task and the last few turns.
//! The turn count goes on from N, usage starts at zero, and the instructions join as a user
//! message before the first call. The workspace is restored by the spec's `workspace` (see
//! [`Input::WorkspacePrepared`]).

use baton_proto::{ConversationRef, FinishReason, ForkSource, RunSpec, item};

use super::RunState;
use crate::error::StateError;

impl RunState {
    /// The state a fork starts from (`spec.fork` set; without it, [`RunState::new`]). Fails
    /// like [`RunState::new`], or when the fork source does not hold a conversation of
    /// `at_turn` turns starting with the task.
    pub fn fork(run_id: &str, spec: RunSpec, now_ms: i64) -> Result<Self, StateError> {
        let Some(source) = spec.fork.clone() else {
            return Self::new(run_id, spec, now_ms);
        };
        let bad = |detail: String| StateError::InvalidFork { detail };
        let reference = source.conversation.clone().unwrap_or_default();
        let stored = reference.stored_items as usize;
        if source.held.len() != stored {
            return Err(bad(format!(
                "it holds {} items of the {stored} it says are stored",
                source.held.len()
            )));
        }
        if stored > 0 && reference.head.is_empty() {
            return Err(bad(format!("{stored} items are stored, under no head")));
        }
        let mut conversation = source.held.clone();
        conversation.extend(reference.added.iter().cloned());
        if !matches!(
            conversation.first().and_then(|i| i.kind.as_ref()),
            Some(item::Kind::User(_))
        ) {
            return Err(bad(
                "its conversation does not start with the task".to_owned()
            ));
        }
        let turns = crate::fork::turns(&conversation);
        if turns != source.at_turn {
            return Err(bad(format!(
                "its conversation has {turns} turns, not {}",
                source.at_turn
            )));
        }
        // The spec the run keeps (and carries into later segments) names the source, not its
        // items.
        let kept = ForkSource {
            conversation: Some(ConversationRef {
                added: Vec::new(),
                ..reference.clone()
            }),
            held: Vec::new(),
            ..source.clone()
        };
        let mut state = Self::new(
            run_id,
            RunSpec {
                fork: Some(kept),
                ..spec
            },
            now_ms,
        )?;
        state.conversation = conversation;
        state.stored = (stored > 0).then(|| (reference.head.clone(), stored));
        state.turn = source.at_turn;
        state.segment_start_turn = source.at_turn;
        state.seen_call_ids = state
            .conversation
            .iter()
            .filter_map(|i| match &i.kind {
                Some(item::Kind::Assistant(a)) => Some(a.tool_calls.iter().map(|c| c.id.clone())),
                _ => None,
            })
            .flatten()
            .collect();
        state.note(
            now_ms,
            &format!(
                "forked from run {} at turn {}: {} items ({stored} of them in the blob store)",
                source.run_id,
                source.at_turn,
                state.conversation.len()
            ),
        );
        if source.instructions.trim().is_empty() {
            // Forked right after replies cut by the output limit: the reply that completes
            // them is joined to their text, as in the source.
            (state.consecutive_length, state.partial_text) = cut_replies(&state.conversation);
        } else {
            state.on_user_message(source.instructions.clone(), now_ms);
        }
        Ok(state)
    }
}

/// The replies cut by the output limit at the end of `conversation` (each followed by baton's
/// continue message): how many in a row, and their text.
fn cut_replies(conversation: &[baton_proto::Item]) -> (u32, String) {
    let mut count = 0;
    let mut texts = Vec::new();
    for item in conversation.iter().rev() {
        match &item.kind {
            Some(item::Kind::User(u)) if u.synthetic => {}
            Some(item::Kind::Assistant(a)) if a.finish_reason == FinishReason::Length as i32 => {
                count += 1;
                texts.push(a.text.as_str());
            }
            _ => break,
        }
    }
    texts.reverse();
    (count, texts.concat())
}
