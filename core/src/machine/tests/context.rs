//! The model's context: overflow, elision, the token estimate, compaction.

use pretty_assertions::assert_eq;

use super::*;

#[test]
fn context_overflow_elides_old_tool_outputs_and_retries_once() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    let big = "x".repeat(10_000);
    for i in 0..3 {
        expect_llm(&mut s);
        s.on_llm_response(
            reply(
                "",
                vec![call(
                    &format!("c{i}"),
                    "list_files",
                    &format!(r#"{{"path":"d{i}"}}"#),
                )],
                FinishReason::ToolCalls,
            ),
            T0,
        );
        expect_tools(&mut s);
        s.on_tool_results(vec![ok_result(&big)], T0);
    }
    let before = expect_llm(&mut s);
    s.on_llm_failure(LlmFailure::ContextOverflow, "prompt is too long".into(), T0);
    // The turn is retried with the oldest output elided; the last two turns stay intact.
    let after = expect_llm(&mut s);
    assert_eq!(after.conversation.len(), before.conversation.len());
    let contents: Vec<String> = after
        .conversation
        .iter()
        .filter_map(|i| match &i.kind {
            Some(item::Kind::ToolResult(r)) => Some(r.content.clone()),
            _ => None,
        })
        .collect();
    assert!(
        contents[0].starts_with("[10000 bytes of output from list_files were removed"),
        "{}",
        contents[0]
    );
    assert_eq!(contents[1], big);
    assert_eq!(contents[2], big);
    // The full output is kept in the conversation itself.
    assert_eq!(tool_results(&s)[0].content, big);
    // A second overflow in the same turn, with nothing left to elide, summarizes the older
    // turns before the turn is tried again.
    s.on_llm_failure(LlmFailure::ContextOverflow, "prompt is too long".into(), T0);
    assert!(matches!(s.next_step(T0), Step::Compact(_)));
}

#[test]
fn context_overflow_with_nothing_to_elide_fails_at_once() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_failure(LlmFailure::ContextOverflow, "too long".into(), T0);
    assert_eq!(
        expect_finish(&mut s).reason(),
        TerminationReason::ContextOverflow
    );
}

fn windowed(window: u32) -> RunSpec {
    let mut sp = spec(&[]);
    // These runs repeat themselves on purpose.
    sp.approval.as_mut().unwrap().loops = Some(baton_proto::LoopPolicy {
        disabled: true,
        ..Default::default()
    });
    sp.model = Some(baton_proto::ModelConfig {
        provider: "scripted".into(),
        context_window: window,
        ..Default::default()
    });
    sp
}

fn shrink_window(s: &mut RunState, window: u32) {
    if let Some(m) = s.spec.model.as_mut() {
        m.context_window = window;
    }
}

/// A turn whose tool returns `out`, with `text` as the assistant's words.
fn turn_with_output(s: &mut RunState, i: u32, text: &str, out: &str) {
    expect_llm(s);
    s.on_llm_response(
        LlmResponse {
            message: Some(AssistantMessage {
                text: text.into(),
                tool_calls: vec![call(
                    &format!("k{i}"),
                    "read_file",
                    &format!(r#"{{"path":"f{i}"}}"#),
                )],
                finish_reason: FinishReason::ToolCalls as i32,
                ..Default::default()
            }),
            usage: None,
            ..Default::default()
        },
        T0,
    );
    expect_tools(s);
    s.on_tool_results(vec![ok_result(out)], T0);
}

#[test]
fn no_context_window_means_no_compaction() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    for i in 0..4 {
        turn_with_output(&mut s, i, "", &"y".repeat(50_000));
    }
    assert_eq!(s.compaction_threshold(), None);
    assert!(matches!(s.next_step(T0), Step::CallLlm(_)));
}

#[test]
fn over_the_threshold_old_tool_outputs_go_first() {
    // Window 8000 -> buffer 2000 -> threshold 6000 tokens (~24 KB).
    let mut s = RunState::new("run-1", windowed(1_000_000), T0).unwrap();
    for i in 0..4 {
        turn_with_output(&mut s, i, "", &"y".repeat(7_000));
    }
    shrink_window(&mut s, 8_000);
    assert_eq!(s.compaction_threshold(), Some(6_000));
    assert!(s.estimate_tokens() > 6_000, "{}", s.estimate_tokens());
    let req = expect_llm(&mut s);
    // The two oldest outputs are placeholders now; the last two turns are intact.
    let outs: Vec<usize> = req
        .conversation
        .iter()
        .filter_map(|i| match &i.kind {
            Some(item::Kind::ToolResult(r)) => Some(r.content.len()),
            _ => None,
        })
        .collect();
    assert!(outs[0] < 200 && outs[1] < 200, "{outs:?}");
    assert_eq!(&outs[2..], &[7_000, 7_000]);
    assert!(s.estimate_tokens() <= 6_000);
    let notes = s
        .events
        .iter()
        .filter(|e| matches!(&e.kind, Some(baton_proto::run_event::Kind::Note(n)) if n.starts_with("compaction: removed")))
        .count();
    assert!(notes > 0, "a compaction event is recorded");
    // The conversation itself keeps everything.
    assert!(tool_results(&s).iter().all(|r| r.content.len() == 7_000));
}

#[test]
fn when_elision_is_not_enough_the_older_turns_are_summarized() {
    let mut s = RunState::new("run-1", windowed(1_000_000), T0).unwrap();
    let long_text = "z".repeat(6_000);
    for i in 0..5 {
        turn_with_output(&mut s, i, &long_text, "small output");
    }
    shrink_window(&mut s, 8_000);
    let step = s.next_step(T0);
    let Step::Compact(mut req) = step else {
        panic!("expected compaction, got {step:?}");
    };
    let history = req.history.clone().unwrap();
    req.items = crate::view::compaction_input(
        &history.added,
        &req.view.clone().unwrap(),
        req.from as usize,
        req.upto as usize,
    );
    assert_eq!(s.status().state(), StateName::Compacting);
    assert_eq!(req.task, "do the thing");
    // Everything but the task and the last two turns goes to the summary.
    assert!(matches!(&req.items[0].kind, Some(item::Kind::Assistant(_))));
    let summarized_assistants = req
        .items
        .iter()
        .filter(|i| matches!(i.kind, Some(item::Kind::Assistant(_))))
        .count();
    assert_eq!(summarized_assistants, 3);
    s.on_compacted(
        baton_proto::CompactResponse {
            summary: "Read f0..f2; nothing found yet.".into(),
            usage: None,
        },
        T0,
    );
    let req = expect_llm(&mut s);
    match (&req.conversation[0].kind, &req.conversation[1].kind) {
        (Some(item::Kind::User(task)), Some(item::Kind::User(summary))) => {
            assert_eq!(task.text, "do the thing");
            assert!(summary.synthetic && summary.text.contains("Read f0..f2; nothing found yet."));
        }
        other => panic!("unexpected view start {other:?}"),
    }
    let kept = req
        .conversation
        .iter()
        .filter(|i| matches!(i.kind, Some(item::Kind::Assistant(_))))
        .count();
    assert_eq!(kept, 2);
    assert!(s.estimate_tokens() < 6_000);
    assert!(s.status().last_event.starts_with("compaction: summarized"));
    assert_eq!(s.conversation.len(), 11, "the full conversation is kept");
}

#[test]
fn a_failed_compaction_is_not_retried_in_the_same_turn() {
    let mut s = RunState::new("run-1", windowed(1_000_000), T0).unwrap();
    let long_text = "z".repeat(6_000);
    for i in 0..5 {
        turn_with_output(&mut s, i, &long_text, "small");
    }
    shrink_window(&mut s, 8_000);
    assert!(matches!(s.next_step(T0), Step::Compact(_)));
    s.on_compaction_failed("provider down", T0);
    assert!(matches!(s.next_step(T0), Step::CallLlm(_)));
}

#[test]
fn the_reported_prompt_capacity_is_what_compaction_runs_against() {
    // A gpt-5 run: the window is 400K but prompts are capped at 272K, which the worker
    // reports as the prompt capacity.
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    let mut r = reply(
        "",
        vec![call("c0", "list_files", "{}")],
        FinishReason::ToolCalls,
    );
    r.context_window = 400_000;
    r.prompt_capacity = 272_000;
    s.on_llm_response(r, T0);
    assert_eq!(
        s.compaction_threshold(),
        Some(272_000 - COMPACTION_BUFFER_TOKENS)
    );
    // A reply without one (an older worker) keeps the last one.
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("x")], T0);
    expect_llm(&mut s);
    let mut r = reply(
        "",
        vec![call("c1", "list_files", "{}")],
        FinishReason::ToolCalls,
    );
    r.context_window = 400_000;
    s.on_llm_response(r, T0);
    assert_eq!(
        s.compaction_threshold(),
        Some(272_000 - COMPACTION_BUFFER_TOKENS)
    );
}

/// A run of five turns with long assistant texts and small outputs: nothing to elide, and
/// the window is too large for the threshold to ask for a compaction.
fn long_texts() -> RunState {
    let mut s = RunState::new("run-1", windowed(1_000_000), T0).unwrap();
    let long_text = "z".repeat(6_000);
    for i in 0..5 {
        turn_with_output(&mut s, i, &long_text, "small");
    }
    s
}

#[test]
fn an_overflow_that_eliding_cannot_fix_is_compacted_and_the_turn_retried() {
    let mut s = long_texts();
    expect_llm(&mut s);
    let estimate = s.estimate_tokens();
    s.on_llm_failure(
        LlmFailure::ContextOverflow,
        "input tokens exceed".into(),
        T0,
    );
    // Not the end: a compaction, then the same turn again with the summary.
    let step = s.next_step(T0);
    let Step::Compact(req) = step else {
        panic!("expected a compaction, got {step:?}");
    };
    assert!(req.upto > req.from);
    assert!(
        s.events.iter().any(|e| matches!(&e.kind,
            Some(baton_proto::run_event::Kind::Note(n)) if n.starts_with("context overflow: nothing left"))),
        "{:?}",
        s.events
    );
    s.on_compacted(
        baton_proto::CompactResponse {
            summary: "Read f0..f2.".into(),
            usage: None,
        },
        T0,
    );
    let req = expect_llm(&mut s);
    assert!(
        matches!(&req.conversation[1].kind, Some(item::Kind::User(u)) if u.text.contains("Read f0..f2.")),
        "{:?}",
        req.conversation[1]
    );
    // Within the turn the refusal does not ask for more; a second overflow in the same turn
    // ends the run: one compaction per turn.
    assert_eq!(
        s.compaction_threshold(),
        Some(1_000_000 - COMPACTION_BUFFER_TOKENS)
    );
    let mut ended = s.clone();
    ended.on_llm_failure(
        LlmFailure::ContextOverflow,
        "input tokens exceed".into(),
        T0,
    );
    assert_eq!(
        expect_finish(&mut ended).reason(),
        TerminationReason::ContextOverflow
    );
    // The retry is answered: the refused estimate bounds the threshold from now on.
    s.on_llm_response(
        reply(
            "",
            vec![call("k9", "list_files", "{}")],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    assert_eq!(s.compaction_threshold(), Some(estimate * 9 / 10));
}

#[test]
fn an_overflow_with_nothing_to_summarize_ends_the_run() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_failure(LlmFailure::ContextOverflow, "too long".into(), T0);
    assert_eq!(
        expect_finish(&mut s).reason(),
        TerminationReason::ContextOverflow
    );
}
