//! Forks: the state a fork starts from, its first request, its change set, bad fork sources.

use baton_proto::{
    ConversationRef, ForkSource, PreparedWorkspace, SnapshotSource, WorkspaceSource,
    workspace_source,
};
use pretty_assertions::assert_eq;

use super::*;
use crate::fork::{held, turn_end, workspace_at};

/// A source run of `turns` turns, each writing a file (snapshot `snap-<k>`), then its answer;
/// `inbox_after` turns get a user's message while their calls run. Returns the run and its
/// stored segments (head, total) as the model activity would have stored them.
fn source_run(turns: u32, inbox_after: &[u32]) -> (RunState, Vec<(String, u32)>) {
    let mut s = RunState::new("src", spec(&[]), T0).unwrap();
    let mut segments = Vec::new();
    for k in 1..=turns + 1 {
        let Step::CallLlm(req) = s.next_step(T0) else {
            panic!("expected an LLM call");
        };
        let h = req.history.unwrap();
        let total = h.stored_items + h.added.len() as u32;
        segments.push((format!("seg-{k}"), total));
        let mut r = if k > turns {
            reply("All written.", vec![], FinishReason::Stop)
        } else {
            let args = format!(r#"{{"path": "f{k}", "content": "{k}"}}"#);
            reply(
                &format!("turn {k}"),
                vec![call(&format!("w{k}"), "write_file", &args)],
                FinishReason::ToolCalls,
            )
        };
        r.history_head = format!("seg-{k}");
        r.history_items = total;
        s.on_llm_response(r, T0);
        if k > turns {
            break;
        }
        expect_tools(&mut s);
        if inbox_after.contains(&k) {
            s.on_user_message(format!("a message during turn {k}"), T0);
        }
        s.on_tool_results(
            vec![ToolResult {
                call_id: format!("w{k}"),
                name: "write_file".into(),
                content: format!("wrote f{k}"),
                snapshot: format!("snap-{k}"),
                ..Default::default()
            }],
            T0,
        );
    }
    assert_eq!(
        s.result().map(|r| r.reason()),
        Some(TerminationReason::Completed)
    );
    (s, segments)
}

/// The spec `baton fork` makes of `source` at turn `at` (see `client/src/fork.rs`).
fn fork_spec(
    source: &RunState,
    segments: &[(String, u32)],
    at: u32,
    instructions: &str,
) -> RunSpec {
    let end = turn_end(&source.conversation, at).unwrap();
    let prefix = &source.conversation[..end];
    let (head, stored) = segments
        .iter()
        .rev()
        .find(|(_, total)| *total as usize <= end)
        .cloned()
        .unwrap_or_default();
    let snapshot = workspace_at(prefix).unwrap_or("snap-0").to_owned();
    RunSpec {
        workspace: Some(WorkspaceSource {
            source: Some(workspace_source::Source::Snapshot(SnapshotSource {
                id: snapshot.clone(),
                from_run: "src".into(),
                origin: format!("fork of src at turn {at}"),
                ..Default::default()
            })),
        }),
        fork: Some(ForkSource {
            run_id: "src".into(),
            at_turn: at,
            conversation: Some(ConversationRef {
                head,
                stored_items: stored,
                added: prefix[stored as usize..].to_vec(),
            }),
            held: held(prefix, stored as usize),
            snapshot,
            base_snapshot: "snap-0".into(),
            base_commit: String::new(),
            instructions: instructions.into(),
        }),
        ..source.spec.clone()
    }
}

#[test]
fn a_fork_holds_the_first_turns_by_reference_and_asks_with_its_instructions() {
    // The user's message sent during turn 3 belongs to turn 4: the fork leaves it out, so the
    // segment stored by call 4 (which holds it) does not fit and call 3's is the head.
    let (source, segments) = source_run(6, &[3]);
    let spec = fork_spec(&source, &segments, 3, "Write g instead.");
    let mut fork = RunState::fork("fork", spec.clone(), T0 + 5).unwrap();
    assert_eq!(fork.turn, 3);
    assert_eq!(fork.usage, Usage::default());
    assert_eq!(fork.conversation, source.conversation[..7]);
    assert_eq!(fork.stored, Some(("seg-3".to_owned(), 5)));
    assert_eq!(fork.started_at_ms, T0 + 5);
    let Step::CallLlm(req) = fork.next_step(T0 + 5) else {
        panic!("expected the fork's first call");
    };
    assert_eq!(req.turn, 3, "turns count on from the source's");
    let history = req.history.unwrap();
    assert_eq!((history.head.as_str(), history.stored_items), ("seg-3", 5));
    let mut expected = source.conversation[5..7].to_vec();
    expected.push(user("Write g instead.", false));
    assert_eq!(
        history.added, expected,
        "assistant 3, its result, the instructions"
    );
    // The spec the fork keeps names the source, not its items.
    let kept = fork.spec.fork.clone().unwrap();
    assert!(kept.held.is_empty() && kept.conversation.unwrap().added.is_empty());
    assert_eq!((kept.run_id.as_str(), kept.at_turn), ("src", 3));
    assert_noted(&fork, "forked from run src at turn 3");
    fork.on_llm_response(reply("Wrote g.", vec![], FinishReason::Stop), T0 + 6);
    let result = expect_finish(&mut fork);
    assert_eq!((result.answer.as_str(), result.turns), ("Wrote g.", 4));
    assert_eq!(result.usage.unwrap().llm_calls, 1);
}

#[test]
fn a_fork_of_a_long_run_holds_stubs_and_counts_them_like_the_source() {
    let (source, segments) = source_run(20, &[]);
    let spec = fork_spec(&source, &segments, 15, "");
    let fork = RunState::fork("fork", spec, T0).unwrap();
    let end = turn_end(&source.conversation, 15).unwrap();
    assert_eq!(fork.conversation.len(), end);
    let stubs = fork
        .conversation
        .iter()
        .filter(|i| matches!(i.kind, Some(item::Kind::Stub(_))))
        .count();
    assert!(stubs > 10, "{stubs} stubs");
    assert_eq!(
        fork.stored.as_ref().map(|s| s.1),
        Some(end),
        "call 16 stored exactly the prefix: nothing inline"
    );
    let mut cut = source.clone();
    cut.conversation.truncate(end);
    cut.calibration = None;
    assert_eq!(fork.estimate_tokens(), cut.estimate_tokens());
    // Loop detection and the call ids see the resident turns whole.
    assert!(fork.seen_call_ids.contains("w15") && !fork.seen_call_ids.contains("w16"));
}

#[test]
fn a_forks_workspace_is_its_sources_at_the_turn_and_its_changes_count_from_the_sources_start() {
    let (source, segments) = source_run(6, &[]);
    let mut fork = RunState::fork("fork", fork_spec(&source, &segments, 3, "go on"), T0).unwrap();
    let request = fork.prepare_request().unwrap();
    let Some(workspace_source::Source::Snapshot(s)) = request.source.unwrap().source else {
        panic!("a snapshot source");
    };
    assert_eq!(s.id, "snap-3");
    fork.on_workspace_prepared(
        PreparedWorkspace {
            snapshot: "snap-3".into(),
            files: 3,
            ..Default::default()
        },
        T0,
    );
    assert_noted(&fork, "workspace ready: fork of src at turn 3");
    expect_llm_by_reference(&mut fork);
    fork.on_llm_response(reply("Nothing more.", vec![], FinishReason::Stop), T0);
    match fork.next_step(T0) {
        Step::CollectChanges(c) => {
            assert_eq!(
                (c.base_snapshot.as_str(), c.final_snapshot.as_str()),
                ("snap-0", "snap-3"),
                "the source's first three turns are part of the fork's changes"
            );
        }
        other => panic!("expected the change set, got {other:?}"),
    }
}

/// One of the run's events says `text`.
fn assert_noted(state: &RunState, text: &str) {
    let notes: Vec<String> = state.events.iter().map(describe_event).collect();
    assert!(notes.iter().any(|n| n.contains(text)), "{text}: {notes:?}");
}

/// The next step, an LLM call by reference.
fn expect_llm_by_reference(state: &mut RunState) -> LlmRequest {
    match state.next_step(T0) {
        Step::CallLlm(req) => req,
        other => panic!("expected an LLM call, got {other:?}"),
    }
}

#[test]
fn a_fork_right_after_cut_replies_joins_their_text_to_the_reply_that_completes_them() {
    let mut source = RunState::new("src", spec(&[]), T0).unwrap();
    expect_llm(&mut source);
    source.on_llm_response(reply("The answer is ", vec![], FinishReason::Length), T0);
    expect_llm(&mut source);
    source.on_llm_response(reply("forty", vec![], FinishReason::Length), T0);
    let spec = fork_spec(&source, &[], 2, "");
    let mut fork = RunState::fork("fork", spec, T0).unwrap();
    assert_eq!(fork.consecutive_length, 2);
    expect_llm(&mut fork);
    fork.on_llm_response(reply("-two.", vec![], FinishReason::Stop), T0);
    assert_eq!(expect_finish(&mut fork).answer, "The answer is forty-two.");
}

#[test]
fn a_fork_continues_as_new_with_its_turns() {
    let (source, segments) = source_run(6, &[]);
    let mut spec = fork_spec(&source, &segments, 4, "and then?");
    spec.limits = Some(Limits {
        segment_turns: 1,
        ..Default::default()
    });
    let mut fork = RunState::fork("fork", spec.clone(), T0).unwrap();
    expect_llm_by_reference(&mut fork);
    let mut r = reply(
        "More.",
        vec![call("m1", "list_files", "{}")],
        FinishReason::ToolCalls,
    );
    r.history_head = "seg-fork-1".into();
    r.history_items = 10;
    fork.on_llm_response(r, T0);
    assert!(fork.wants_continue_as_new(10, false));
    let carried = fork.checkpoint().unwrap();
    let next = RunState::resume("fork", fork.spec.clone(), &carried).unwrap();
    assert_eq!((next.turn, next.segment_start_turn), (5, 5));
    assert_eq!(next.conversation.len(), fork.conversation.len());
    assert!(next.spec.fork.as_ref().unwrap().held.is_empty());
}

#[test]
fn a_fork_source_that_does_not_add_up_is_refused_with_why() {
    let (source, segments) = source_run(3, &[]);
    let good = fork_spec(&source, &segments, 2, "x");
    let broken = |change: &dyn Fn(&mut ForkSource)| {
        let mut spec = good.clone();
        change(spec.fork.as_mut().unwrap());
        RunState::fork("fork", spec, T0).unwrap_err().to_string()
    };
    let e = broken(&|f| f.at_turn = 3);
    assert!(e.contains("has 2 turns, not 3"), "{e}");
    let e = broken(&|f| {
        f.held.pop();
    });
    assert!(e.contains("of the 5 it says are stored"), "{e}");
    let e = broken(&|f| f.conversation.as_mut().unwrap().head.clear());
    assert!(e.contains("under no head"), "{e}");
    let e = broken(&|f| {
        f.held.clear();
        f.conversation = Some(ConversationRef::default());
        f.at_turn = 0;
    });
    assert!(e.contains("does not start with the task"), "{e}");
    // In the workflow, a refused fork is a run that ends at once saying why.
    let spec = RunSpec {
        fork: Some(ForkSource {
            at_turn: 9,
            ..good.fork.clone().unwrap()
        }),
        ..good.clone()
    };
    let detail = RunState::fork("fork", spec.clone(), T0).unwrap_err();
    let ended = RunState::invalid("fork", spec, T0, detail);
    assert!(
        ended
            .result()
            .unwrap()
            .detail
            .starts_with("invalid fork source"),
        "{:?}",
        ended.result()
    );
}
