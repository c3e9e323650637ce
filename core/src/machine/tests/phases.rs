//! Inputs that arrive in a phase that cannot take them: each is an explicit branch that
//! changes nothing but what it says it does (see the table in `machine/mod.rs`). The workflow
//! never sends these; the tests pin what would happen if it did.

use pretty_assertions::assert_eq;

use super::*;

/// A run in `Thinking`, about to call the model.
fn thinking() -> RunState {
    let mut s = RunState::new("run-1", spec(&["shell"]), T0).unwrap();
    expect_llm(&mut s);
    s
}

/// A run waiting for a decision on one shell call.
fn awaiting() -> RunState {
    let mut s = thinking();
    s.on_llm_response(
        reply(
            "",
            vec![call("s", "shell", r#"{"command":"make"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    assert!(matches!(s.phase, Phase::AwaitingApproval(_)));
    s
}

/// A run executing one (auto-approved) read.
fn executing() -> RunState {
    let mut s = thinking();
    s.on_llm_response(
        reply(
            "",
            vec![call("r", "read_file", r#"{"path":"a"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    assert!(matches!(s.phase, Phase::Executing(_)));
    s
}

/// A run summarizing its older turns.
fn compacting() -> RunState {
    let mut s = thinking();
    s.phase = Phase::Compacting {
        upto: 1,
        tokens_before: 100,
    };
    s
}

/// A run that completed.
fn finished() -> RunState {
    let mut s = thinking();
    s.on_llm_response(reply("done", vec![], FinishReason::Stop), T0);
    assert!(matches!(s.phase, Phase::Finished(_)));
    // The `finished` event is told with the outputs, at the last step.
    expect_finish(&mut s);
    s
}

/// `after` is `before` plus one note event saying `note`.
fn only_noted(before: &RunState, mut after: RunState, note: &str) {
    let last = after.events.pop().expect("an event");
    assert_eq!(last.kind, Some(run_event::Kind::Note(note.to_owned())));
    assert_eq!(last.seq, before.next_seq);
    after.next_seq -= 1;
    assert_eq!(&after, before);
}

fn make_summary() -> baton_proto::CompactResponse {
    baton_proto::CompactResponse {
        summary: "what happened".into(),
        ..Default::default()
    }
}

#[test]
fn a_model_reply_or_failure_outside_thinking_is_noted_and_ignored() {
    for (before, phase) in [
        (awaiting(), "awaiting approval"),
        (executing(), "executing tools"),
        (compacting(), "compacting"),
        (finished(), "finished"),
    ] {
        let mut s = before.clone();
        s.on_llm_response(reply("late", vec![], FinishReason::Stop), T0 + 1);
        only_noted(
            &before,
            s,
            &format!("model reply ignored: the run is {phase}, not thinking"),
        );

        let mut s = before.clone();
        s.on_llm_failure(LlmFailure::Fatal, "boom".into(), T0 + 1);
        only_noted(
            &before,
            s,
            &format!("model failure ignored: the run is {phase}, not thinking"),
        );
    }
}

#[test]
fn a_compaction_outcome_outside_compacting_is_noted_and_ignored() {
    for (before, phase) in [
        (thinking(), "thinking"),
        (awaiting(), "awaiting approval"),
        (finished(), "finished"),
    ] {
        let mut s = before.clone();
        s.on_compacted(make_summary(), T0 + 1);
        only_noted(
            &before,
            s,
            &format!("compaction result ignored: the run is {phase}, not compacting"),
        );

        // Not even the "not retried this turn" mark is set.
        let mut s = before.clone();
        s.on_compaction_failed("boom", T0 + 1);
        assert_eq!(s.compaction_failed_turn, None);
        only_noted(
            &before,
            s,
            &format!("compaction failure ignored: the run is {phase}, not compacting"),
        );
    }
    // In `Compacting` both are taken.
    let mut s = compacting();
    s.on_compacted(make_summary(), T0 + 1);
    assert_eq!(s.phase, Phase::Thinking);
    assert_eq!(s.summary.as_ref().map(|s| s.upto), Some(1));
    let mut s = compacting();
    s.on_compaction_failed("boom", T0 + 1);
    assert_eq!(s.phase, Phase::Thinking);
    assert_eq!(s.compaction_failed_turn, Some(s.turn));
}

#[test]
fn tool_progress_and_results_outside_executing_are_noted_and_ignored() {
    let r = ToolResult {
        call_id: "s".into(),
        ..ok_result("out")
    };
    for (before, phase) in [
        (thinking(), "thinking"),
        (awaiting(), "awaiting approval"),
        (finished(), "finished"),
    ] {
        let mut s = before.clone();
        s.on_tools_started(&["s".to_owned()], T0 + 1);
        only_noted(
            &before,
            s,
            &format!("tools started ignored: the run is {phase}, not executing tools"),
        );

        let mut s = before.clone();
        s.on_tools_finished(std::slice::from_ref(&r), T0 + 1);
        only_noted(
            &before,
            s,
            &format!("tools finished ignored: the run is {phase}, not executing tools"),
        );

        // The phase stays what it was (a finished run is not put back to thinking).
        let mut s = before.clone();
        s.on_tool_results(vec![r.clone()], T0 + 1);
        only_noted(
            &before,
            s,
            &format!("tool results ignored: the run is {phase}, not executing tools"),
        );
    }
}

#[test]
fn an_approval_timeout_outside_awaiting_approval_is_noted_and_ignored() {
    for (before, phase) in [
        (thinking(), "thinking"),
        (executing(), "executing tools"),
        (finished(), "finished"),
    ] {
        let mut s = before.clone();
        s.on_approval_timeout(T0 + 1);
        only_noted(
            &before,
            s,
            &format!("approval timeout ignored: the run is {phase}, not awaiting approval"),
        );
    }
}

#[test]
fn a_decision_outside_awaiting_approval_is_refused_and_noted() {
    let decision = ApprovalDecision {
        call_id: "*".into(),
        approved: true,
        ..Default::default()
    };
    for (before, refused) in [
        (thinking(), DecisionError::NothingPending),
        (executing(), DecisionError::NothingPending),
        (finished(), DecisionError::RunOver),
    ] {
        let mut s = before.clone();
        assert_eq!(
            s.on_decision(decision.clone(), T0 + 1),
            Err(refused.clone())
        );
        only_noted(&before, s, &format!("approval ignored: {refused}"));
    }
}

#[test]
fn a_finished_run_records_nothing_for_a_deadline_a_cancellation_or_a_message() {
    let before = finished();
    let mut s = before.clone();
    s.on_deadline_passed(T0 + 1);
    s.on_cancelled(Some("too late".into()), T0 + 1);
    s.on_user_message("are you there?".into(), T0 + 1);
    // The first ending stands, and stays the last event.
    assert_eq!(s, before);
    assert_eq!(s.status().last_event, "run ended: completed");
}

#[test]
fn every_phase_has_a_name() {
    let names: Vec<&str> = [
        thinking(),
        awaiting(),
        executing(),
        compacting(),
        finished(),
    ]
    .iter()
    .map(|s| s.phase.name())
    .collect();
    assert_eq!(
        names,
        [
            "thinking",
            "awaiting approval",
            "executing tools",
            "compacting",
            "finished"
        ]
    );
}
