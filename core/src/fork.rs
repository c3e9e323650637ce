//! Forks (`baton fork RUN --at-turn N`), the source's side: where turn N of a
//! conversation ends, what a fork holds of the part before it, and the workspace at that
//! point. Pure; the CLI reads the source run and builds the spec's
//! [`ForkSource`](baton_proto::ForkSource) with these, and the fork's first segment makes its
//! state from it ([`RunState::fork`](crate::machine::RunState::fork)).
//!
//! A turn is one LLM call, as `RunState.turn` counts them: every reply adds exactly one
//! assistant item (a `length` finish too, followed by baton's "continue" message; a context
//! overflow retries the call without adding one). Turn N ends after its assistant item and
//! what answers it: the results of its tool calls and baton's own (synthetic) messages. A
//! user's message (`baton send`) joins just before the next call, so it belongs to turn N+1.

use baton_proto::{Item, item};
use thiserror::Error;

use crate::{
    machine::{MAX_CHECKPOINT_BYTES, RESIDENT_TURNS},
    view,
};

/// Why a conversation cannot be forked at a turn.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ForkPointError {
    /// Turn 0 names no call.
    #[error(
        "--at-turn 0: turns count from 1 (the run's first model call); pick a turn from 1 to \
         {turns}"
    )]
    Zero {
        /// Turns the run has.
        turns: u32,
    },
    /// The run has not made that many calls.
    #[error(
        "--at-turn {at}: the run has {turns} turn{} so far; pick a turn from 1 to {turns}",
        if *turns == 1 { "" } else { "s" }
    )]
    Beyond {
        /// The turn asked for.
        at: u32,
        /// Turns the run has.
        turns: u32,
    },
    /// Some tool calls of the turn have no result yet.
    #[error(
        "--at-turn {at}: that turn has not finished ({missing} of its tool calls have no result \
         yet: they run or wait for approval); wait for it, or fork at an earlier turn"
    )]
    Unfinished {
        /// The turn asked for.
        at: u32,
        /// Its calls without a result.
        missing: usize,
    },
    /// An item of the part to fork is only a stub (the stored conversation was not read).
    #[error(
        "item {index} of the conversation is held only as a stub and the stored conversation \
         did not supply it"
    )]
    Stub {
        /// Its index.
        index: usize,
    },
}

/// The number of turns (assistant items, stubbed ones included) in `conversation`.
pub fn turns(conversation: &[Item]) -> u32 {
    conversation
        .iter()
        .filter(|i| view::is_assistant(i))
        .count() as u32
}

/// The length of the conversation up to the end of turn `at_turn` (1 = the first call's
/// reply): its assistant item, then the tool results and synthetic user messages right after
/// it. Every item up to there must be whole (not a stub).
pub fn turn_end(conversation: &[Item], at_turn: u32) -> Result<usize, ForkPointError> {
    let assistants: Vec<usize> = conversation
        .iter()
        .enumerate()
        .filter(|(_, i)| view::is_assistant(i))
        .map(|(n, _)| n)
        .collect();
    let count = assistants.len() as u32;
    let Some(&at) = at_turn
        .checked_sub(1)
        .and_then(|k| assistants.get(k as usize))
    else {
        return Err(if at_turn == 0 {
            ForkPointError::Zero { turns: count }
        } else {
            ForkPointError::Beyond {
                at: at_turn,
                turns: count,
            }
        });
    };
    let mut end = at + 1;
    while let Some(next) = conversation.get(end) {
        match &next.kind {
            Some(item::Kind::ToolResult(_)) => end += 1,
            Some(item::Kind::User(u)) if u.synthetic => end += 1,
            _ => break,
        }
    }
    if let Some(index) = conversation[..end]
        .iter()
        .position(|i| matches!(i.kind, Some(item::Kind::Stub(_))))
    {
        return Err(ForkPointError::Stub { index });
    }
    let calls = match &conversation[at].kind {
        Some(item::Kind::Assistant(a)) => a.tool_calls.as_slice(),
        _ => &[],
    };
    let missing = calls
        .iter()
        .filter(|c| {
            !conversation[at + 1..end]
                .iter()
                .any(|i| matches!(&i.kind, Some(item::Kind::ToolResult(r)) if r.call_id == c.id))
        })
        .count();
    if missing > 0 {
        return Err(ForkPointError::Unfinished {
            at: at_turn,
            missing,
        });
    }
    Ok(end)
}

/// Whether the conversation ends with a reply that asked for nothing (a final answer, or a
/// reply the run ended on): a fork from there needs instructions, or the model has nothing to
/// answer.
pub fn ends_with_reply(conversation: &[Item]) -> bool {
    matches!(
        conversation.last().and_then(|i| i.kind.as_ref()),
        Some(item::Kind::Assistant(a)) if a.tool_calls.is_empty()
    )
}

/// The workspace snapshot at the end of `conversation`: the last one a tool call took
/// (`None`: no call took one; the run's starting tree stands).
pub fn workspace_at(conversation: &[Item]) -> Option<&str> {
    conversation.iter().rev().find_map(|i| match &i.kind {
        Some(item::Kind::ToolResult(r)) if !r.snapshot.is_empty() => Some(r.snapshot.as_str()),
        _ => None,
    })
}

/// What a fork of `prefix` holds of its first `stored` items (the part in the blob store):
/// stubs, except the task and the items of the last [`RESIDENT_TURNS`] turns, halved while the
/// held items and the rest of the prefix pass [`MAX_CHECKPOINT_BYTES`] as JSON (down to the
/// task alone), as a continue-as-new checkpoint does.
pub fn held(prefix: &[Item], stored: usize) -> Vec<Item> {
    let stored = stored.min(prefix.len());
    let inline = json_bytes(&prefix[stored..]);
    let mut turns = RESIDENT_TURNS;
    let mut held = prefix[..stored].to_vec();
    loop {
        view::stub_before(&mut held, view::resident_from(prefix, turns, stored));
        if turns == 0 || inline + json_bytes(&held) <= MAX_CHECKPOINT_BYTES {
            return held;
        }
        turns /= 2;
    }
}

/// Size of `items` as JSON (as the workflow input carries them).
pub fn json_bytes(items: &[Item]) -> usize {
    serde_json::to_vec(items).map_or(usize::MAX, |v| v.len())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use baton_proto::{AssistantMessage, FinishReason, ToolCall, ToolResult, UserMessage};
    use pretty_assertions::assert_eq;

    use super::*;

    fn user(text: &str, synthetic: bool) -> Item {
        Item {
            kind: Some(item::Kind::User(UserMessage {
                text: text.into(),
                synthetic,
            })),
        }
    }

    fn reply(text: &str, calls: &[&str]) -> Item {
        Item {
            kind: Some(item::Kind::Assistant(AssistantMessage {
                text: text.into(),
                tool_calls: calls
                    .iter()
                    .map(|id| ToolCall {
                        id: (*id).into(),
                        name: "write_file".into(),
                        arguments: "{}".into(),
                        ..Default::default()
                    })
                    .collect(),
                finish_reason: if calls.is_empty() {
                    FinishReason::Stop
                } else {
                    FinishReason::ToolCalls
                } as i32,
                ..Default::default()
            })),
        }
    }

    fn result(id: &str, snapshot: &str) -> Item {
        Item {
            kind: Some(item::Kind::ToolResult(ToolResult {
                call_id: id.into(),
                name: "write_file".into(),
                content: "x".repeat(300),
                snapshot: snapshot.into(),
                ..Default::default()
            })),
        }
    }

    fn is_stub(item: &Item) -> bool {
        matches!(item.kind, Some(item::Kind::Stub(_)))
    }

    /// `item`, a tool result's output made `bytes` long.
    fn with_output(item: &Item, bytes: usize) -> Item {
        let mut item = item.clone();
        if let Some(item::Kind::ToolResult(r)) = &mut item.kind {
            r.content = "y".repeat(bytes);
        }
        item
    }

    /// task; t1: two calls; t2: one call, the breaker's message; a user's message; t3: the
    /// answer.
    fn run() -> Vec<Item> {
        vec![
            user("the task", false),
            reply("one", &["a", "b"]),
            result("a", "snap-1"),
            result("b", ""),
            reply("two", &["c"]),
            result("c", "snap-2"),
            user("[baton circuit breaker] ...", true),
            user("try the other file", false),
            reply("done", &[]),
        ]
    }

    #[test]
    fn a_turn_ends_after_what_answers_its_reply_and_before_a_users_message() {
        let items = run();
        assert_eq!(turns(&items), 3);
        assert_eq!(turn_end(&items, 1), Ok(4));
        assert_eq!(
            turn_end(&items, 2),
            Ok(7),
            "the breaker's message, not the user's"
        );
        assert_eq!(turn_end(&items, 3), Ok(9));
        assert!(ends_with_reply(&items[..9]) && !ends_with_reply(&items[..7]));
        assert_eq!(turn_end(&items, 0), Err(ForkPointError::Zero { turns: 3 }));
        let beyond = turn_end(&items, 4).unwrap_err();
        assert_eq!(beyond, ForkPointError::Beyond { at: 4, turns: 3 });
        assert!(
            beyond.to_string().contains("pick a turn from 1 to 3"),
            "{beyond}"
        );
        // A turn whose calls are still running cannot be forked.
        let running = &items[..3];
        assert_eq!(
            turn_end(running, 1),
            Err(ForkPointError::Unfinished { at: 1, missing: 1 })
        );
        // An item only stubbed (a continued run's store was not read) cannot be forked.
        let mut stubbed = items.clone();
        stubbed[2] = view::stub(&stubbed[2]);
        assert_eq!(
            turn_end(&stubbed, 2),
            Err(ForkPointError::Stub { index: 2 })
        );
    }

    #[test]
    fn the_workspace_is_the_last_snapshot_a_call_took() {
        let items = run();
        assert_eq!(workspace_at(&items[..4]), Some("snap-1"));
        assert_eq!(workspace_at(&items[..7]), Some("snap-2"));
        assert_eq!(workspace_at(&items[..1]), None);
    }

    #[test]
    fn a_fork_holds_old_items_as_stubs_and_the_last_turns_whole_within_the_budget() {
        let mut items = vec![user("the task", false)];
        for k in 0..20 {
            let id = format!("c{k}");
            items.push(reply(&format!("turn {k}"), &[id.as_str()]));
            items.push(result(&id, ""));
        }
        // 41 items, 38 stored: the last 8 turns (from item 25) stay whole.
        let kept = held(&items, 38);
        assert_eq!(kept.len(), 38);
        let stubs: Vec<usize> = (0..38).filter(|n| is_stub(&kept[*n])).collect();
        assert_eq!(stubs, (1..25).collect::<Vec<_>>());
        assert_eq!(kept[0], items[0]);
        assert_eq!(kept[25..], items[25..38]);
        // Stubs keep what the machine counts: kinds (turns) and sizes.
        assert_eq!(turns(&kept), 19);
        assert_eq!(
            view::view_chars(&kept, 0, 0, 38),
            view::view_chars(&items, 0, 0, 38)
        );
        // Over the budget: fewer resident turns, down to the task alone.
        let big: Vec<Item> = items.iter().map(|i| with_output(i, 30 * 1024)).collect();
        let kept = held(&big, 38);
        assert!(json_bytes(&kept) + json_bytes(&big[38..]) <= MAX_CHECKPOINT_BYTES);
        let whole = kept.iter().filter(|i| !is_stub(i)).count();
        assert!(whole > 1 && whole < 13, "{whole} whole items");
        let huge: Vec<Item> = items.iter().map(|i| with_output(i, 96 * 1024)).collect();
        let kept = held(&huge, 38);
        assert_eq!(kept[0], huge[0], "the task stays whole");
        assert!(kept[1..].iter().all(is_stub));
    }
}
