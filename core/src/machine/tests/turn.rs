//! Turns: the model's replies and finish reasons, turn guards, user messages, requests.

use pretty_assertions::assert_eq;

use super::*;

#[test]
fn two_tool_turns_then_a_final_answer() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    let req = expect_llm(&mut s);
    assert_eq!(req.conversation.len(), 1);
    assert_eq!(req.tools.len(), tools::BUILTIN_TOOLS.len());
    assert!(req.system_prompt.starts_with(crate::prompt::BASE_PROMPT));
    assert!(req.system_prompt.contains("Today's date is 2023-11-14"));

    s.on_llm_response(
        reply(
            "",
            vec![call("a", "list_files", "{}")],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    let reqs = expect_tools(&mut s);
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].call.as_ref().unwrap().id, "a");
    s.on_tool_results(vec![ok_result("README.md")], T0);

    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("b", "read_file", r#"{"path":"README.md"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("# hello")], T0);

    let req = expect_llm(&mut s);
    // task, assistant, tool result, assistant, tool result
    assert_eq!(req.conversation.len(), 5);
    s.on_llm_response(reply("All done.", vec![], FinishReason::Stop), T0);
    let result = expect_finish(&mut s);
    assert_eq!(result.status(), StateName::Completed);
    assert_eq!(result.reason(), TerminationReason::Completed);
    assert_eq!(result.answer, "All done.");
    assert_eq!(result.turns, 3);
    assert_eq!(result.usage.unwrap().total_tokens, 45);
    assert_eq!(result.usage.unwrap().llm_calls, 3);
    let results = tool_results(&s);
    assert_eq!(results[0].call_id, "a");
    assert_eq!(results[0].name, "list_files");
    assert_eq!(results[1].call_id, "b");
}

#[test]
fn length_is_continued_three_times_then_the_run_fails() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    for i in 1..=MAX_LENGTH_CONTINUATIONS {
        expect_llm(&mut s);
        // Partial tool calls of a cut-off reply are dropped.
        s.on_llm_response(
            reply(
                &format!("part{i} "),
                vec![call("x", "shell", r#"{"comm"#)],
                FinishReason::Length,
            ),
            T0,
        );
        let last = s.conversation.last().unwrap();
        match &last.kind {
            Some(item::Kind::User(u)) => {
                assert!(u.synthetic);
                assert_eq!(u.text, CONTINUE_PROMPT);
            }
            other => panic!("expected a continue prompt, got {other:?}"),
        }
    }
    for i in &s.conversation {
        if let Some(item::Kind::Assistant(a)) = &i.kind {
            assert!(
                a.tool_calls.is_empty(),
                "partial tool calls must be dropped"
            );
        }
    }
    expect_llm(&mut s);
    s.on_llm_response(reply("part4", vec![], FinishReason::Length), T0);
    let result = expect_finish(&mut s);
    assert_eq!(result.status(), StateName::Failed);
    assert_eq!(result.reason(), TerminationReason::OutputTruncated);
    assert_eq!(result.turns, 4);
}

#[test]
fn a_continued_reply_is_joined_into_the_answer() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(reply("The answer ", vec![], FinishReason::Length), T0);
    expect_llm(&mut s);
    s.on_llm_response(reply("is 42.", vec![], FinishReason::Stop), T0);
    let result = expect_finish(&mut s);
    assert_eq!(result.reason(), TerminationReason::Completed);
    assert_eq!(result.answer, "The answer is 42.");
    assert_eq!(s.consecutive_length, 0);
}

#[test]
fn max_turns_ends_the_run() {
    let mut spec = spec(&[]);
    spec.limits = Some(Limits {
        max_turns: 2,
        ..Default::default()
    });
    let mut s = RunState::new("run-1", spec, T0).unwrap();
    for i in 0..2 {
        expect_llm(&mut s);
        s.on_llm_response(
            reply(
                "",
                vec![call(&format!("c{i}"), "list_files", "{}")],
                FinishReason::ToolCalls,
            ),
            T0,
        );
        expect_tools(&mut s);
        s.on_tool_results(vec![ok_result("x")], T0);
    }
    let result = expect_finish(&mut s);
    assert_eq!(result.status(), StateName::Failed);
    assert_eq!(result.reason(), TerminationReason::MaxTurnsExceeded);
    assert_eq!(result.turns, 2);
}

#[test]
fn token_budget_and_deadline_end_the_run() {
    let mut budget = spec(&[]);
    budget.limits = Some(Limits {
        max_total_tokens: 20,
        ..Default::default()
    });
    let mut s = RunState::new("run-1", budget, T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("a", "list_files", "{}")],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("x")], T0);
    expect_llm(&mut s); // 15 < 20
    s.on_llm_response(
        reply(
            "",
            vec![call("b", "list_files", "{}")],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("x")], T0);
    assert_eq!(
        expect_finish(&mut s).reason(),
        TerminationReason::BudgetExceeded
    );

    let mut deadline = spec(&[]);
    deadline.limits = Some(Limits {
        deadline_seconds: 60,
        ..Default::default()
    });
    let mut s = RunState::new("run-2", deadline, T0).unwrap();
    assert!(matches!(s.next_step(T0 + 59_000), Step::CallLlm(_)));
    s.on_llm_response(
        reply(
            "",
            vec![call("a", "list_files", "{}")],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("x")], T0);
    match s.next_step(T0 + 60_000) {
        Step::Finish(r) => assert_eq!(r.reason(), TerminationReason::BudgetExceeded),
        other => panic!("expected finish, got {other:?}"),
    }
}

#[test]
fn content_filter_and_provider_errors_fail_the_run() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(reply("", vec![], FinishReason::ContentFilter), T0);
    assert_eq!(
        expect_finish(&mut s).reason(),
        TerminationReason::ContentFiltered
    );

    let mut s = RunState::new("run-2", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_failure(LlmFailure::Fatal, "401 invalid api key".into(), T0);
    let r = expect_finish(&mut s);
    assert_eq!(r.reason(), TerminationReason::ProviderError);
    assert_eq!(r.detail, "401 invalid api key");

    // The worker's blob store failing is not the provider's doing.
    let mut s = RunState::new("run-3", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_failure(
        LlmFailure::Infrastructure,
        "store: permission denied".into(),
        T0,
    );
    let r = expect_finish(&mut s);
    assert_eq!(r.reason(), TerminationReason::InternalError);
    assert_eq!(r.detail, "store: permission denied");
}

#[test]
fn cancellation_user_messages_and_duplicate_ids() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    s.on_user_message("also check\nthe tests".into(), T0);
    assert_eq!(s.status().last_event, "user message: also check the tests");
    s.on_user_message("x".repeat(500), T0);
    assert_eq!(
        s.status().last_event,
        format!("user message: {}…", "x".repeat(200))
    );
    let req = expect_llm(&mut s);
    assert!(matches!(
        &req.conversation.last().unwrap().kind,
        Some(item::Kind::User(u)) if u.text == "x".repeat(500) && !u.synthetic
    ));
    // Providers that send empty or repeated ids get unique ones.
    s.on_llm_response(
        reply(
            "",
            vec![call("", "list_files", "{}"), call("", "list_files", "{}")],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    let ids: Vec<String> = expect_tools(&mut s)
        .into_iter()
        .map(|r| r.call.unwrap().id)
        .collect();
    assert_eq!(ids, vec!["call_1_1", "call_1_2"]);
    // The workflow tells when calls start; only then does `watch` see them running.
    let started = |s: &RunState| {
        s.events_since(0)
            .events
            .into_iter()
            .filter(|e| matches!(e.kind, Some(run_event::Kind::ToolStarted(_))))
            .count()
    };
    assert_eq!(started(&s), 0);
    s.on_tools_started(&["call_1_1".to_owned()], T0);
    s.on_tools_started(&["call_1_1".to_owned()], T0);
    assert_eq!(started(&s), 1, "a call starts once");
    s.on_cancelled(Some("user asked".into()), T0);
    let r = expect_finish(&mut s);
    assert_eq!(r.status(), StateName::Cancelled);
    assert_eq!(r.reason(), TerminationReason::Cancelled);
    assert_eq!(r.detail, "cancelled: user asked");
    // Every call has an outcome: a transcript never shows a call without one.
    let closed = tool_results(&s);
    assert_eq!(
        closed
            .iter()
            .map(|r| (r.call_id.as_str(), r.content.as_str(), r.is_error))
            .collect::<Vec<_>>(),
        [
            (
                "call_1_1",
                "stopped: the run ended while this call ran (cancelled: user asked); it may \
                 have taken effect in part",
                true
            ),
            (
                "call_1_2",
                "not run: the run ended before this call ran (cancelled: user asked)",
                true
            ),
        ]
    );
    let finished_events: Vec<_> = s
        .events_since(0)
        .events
        .into_iter()
        .filter_map(|e| match e.kind {
            Some(run_event::Kind::ToolFinished(r)) => Some(r.call_id),
            Some(run_event::Kind::Finished(_)) => Some("END".to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(finished_events, ["call_1_1", "call_1_2", "END"]);
}

#[test]
fn state_and_wire_types_round_trip_as_json_with_proto_field_names() {
    let mut s = RunState::new("run-1", spec(&["shell"]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("s", "shell", r#"{"command":"x"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    let json = serde_json::to_string(&persisted::RunStateV1::from(s.clone())).unwrap();
    let back: RunState = serde_json::from_str::<persisted::RunStateV1>(&json)
        .unwrap()
        .into();
    assert_eq!(back, s);
    let status = serde_json::to_value(s.status()).unwrap();
    assert_eq!(status["state"], "AWAITING_APPROVAL");
    assert_eq!(status["pending"][0]["call_id"], "s");
    let decision: ApprovalDecision =
        serde_json::from_str(r#"{"call_id":"*","approved":true,"approver":"dan","reason":"ok"}"#)
            .unwrap();
    assert_eq!(decision.call_id, "*");
    assert!(decision.approved);
    let item: Item = serde_json::from_str(r#"{"user":{"text":"hi"}}"#).unwrap();
    assert!(matches!(item.kind, Some(item::Kind::User(_))));
    let finished = RunResult {
        reason: TerminationReason::MaxTurnsExceeded as i32,
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&finished).unwrap()["reason"],
        "max_turns_exceeded"
    );
}

#[test]
fn full_outputs_are_kept_in_the_conversation_but_not_sent_to_the_model() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("a", "shell", r#"{"command":"x"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(
        vec![ToolResult {
            content: "preview".into(),
            full_output: "the whole thing".into(),
            ..Default::default()
        }],
        T0,
    );
    let req = expect_llm(&mut s);
    let sent = req
        .conversation
        .iter()
        .find_map(|i| match &i.kind {
            Some(item::Kind::ToolResult(r)) => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(sent.content, "preview");
    assert!(sent.full_output.is_empty());
    assert_eq!(tool_results(&s)[0].full_output, "the whole thing");
}

#[test]
fn requests_carry_only_what_is_new_once_stored() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    for i in 0..5 {
        stored_turn(&mut s, i, "some output");
    }
    let Step::CallLlm(req) = s.next_step(T0) else {
        panic!("expected an LLM call");
    };
    let history = req.history.unwrap();
    assert_eq!(history.head, "head4");
    // The last reply and its tool result are all that travel.
    assert_eq!(history.added.len(), 2);
    assert_eq!(history.stored_items as usize + 2, s.conversation.len());
    assert_eq!(req.context, "ctx");
    assert!(req.system_prompt.is_empty() && req.tools.is_empty());
}

#[test]
fn a_script_travels_one_turn_at_a_time() {
    let mut spec = spec(&[]);
    spec.model = Some(baton_proto::ModelConfig {
        provider: "scripted".into(),
        script: Some(baton_proto::Script {
            turns: (0..3)
                .map(|i| baton_proto::ScriptedTurn {
                    text: format!("t{i}"),
                    ..Default::default()
                })
                .collect(),
            first_turn: 0,
            subagents: Vec::new(),
        }),
        ..Default::default()
    });
    let mut s = RunState::new("run-1", spec, T0).unwrap();
    stored_turn(&mut s, 0, "x");
    let Step::CallLlm(req) = s.next_step(T0) else {
        panic!("expected an LLM call");
    };
    let script = req.model.unwrap().script.unwrap();
    assert_eq!(req.turn, 1);
    assert_eq!(script.first_turn, 1);
    assert_eq!(script.turns.len(), 1);
    assert_eq!(script.turns[0].text, "t1");
}
