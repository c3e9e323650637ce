//! Tool batches: planning, calls started and finished, results, loop guards, the breaker.

use pretty_assertions::assert_eq;

use super::*;

#[test]
fn malformed_arguments_and_unknown_tools_become_error_observations() {
    let mut s = RunState::new("run-1", spec(&["shell"]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("bad", "shell", r#"{"command": "ls"#),
                call("nope", "teleport", "{}"),
                call("arr", "read_file", "[1,2]"),
                call("ok", "list_files", ""),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    // The malformed shell call needs no approval: it can never run.
    let reqs = expect_tools(&mut s);
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].call.as_ref().unwrap().id, "ok");
    s.on_tool_results(vec![ok_result("files")], T0);
    let results = tool_results(&s);
    assert!(results[0].is_error);
    assert!(
        results[0].content.contains("not valid JSON"),
        "{}",
        results[0].content
    );
    // The provider is sent `{}` in their place, so the error quotes what the model wrote.
    assert!(
        results[0].content.contains(r#"You sent: {"command": "ls"#),
        "{}",
        results[0].content
    );
    assert!(results[1].is_error);
    assert!(results[1].content.contains("Unknown tool 'teleport'"));
    assert!(results[1].content.contains("shell"));
    assert!(results[2].is_error);
    assert!(results[2].content.contains("must be a JSON object"));
    assert!(!results[3].is_error);
    assert!(matches!(s.next_step(T0), Step::CallLlm(_)));
}

/// `timeout_seconds` in a shell call may shorten the run's tool timeout, never
/// extend it.
#[test]
fn a_model_chosen_timeout_is_capped_at_the_runs_tool_timeout() {
    let mut spec = spec(&[]);
    spec.limits.get_or_insert_default().tool_timeout_seconds = 5;
    let mut s = RunState::new("run-1", spec, T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call(
                    "long",
                    "shell",
                    r#"{"command":"sleep 20","timeout_seconds":3600}"#,
                ),
                call(
                    "short",
                    "shell",
                    r#"{"command":"sleep 1","timeout_seconds":2}"#,
                ),
                call("default", "shell", r#"{"command":"true"}"#),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    let timeouts: Vec<u32> = expect_tools(&mut s)
        .iter()
        .map(|r| r.timeout_seconds)
        .collect();
    assert_eq!(timeouts, [5, 2, 5]);
}

#[test]
fn a_stopped_batch_keeps_the_results_of_the_calls_that_completed() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("w", "write_file", r#"{"path":"a","content":"x"}"#),
                call("s", "shell", r#"{"command":"sleep 60"}"#),
                call("r", "read_file", r#"{"path":"a"}"#),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tools_started(&["w".to_owned()], T0);
    s.on_tools_started(&["s".to_owned()], T0 + 1);
    s.on_tools_finished(
        &[ToolResult {
            call_id: "w".into(),
            name: "write_file".into(),
            content: "wrote 1 byte to a".into(),
            ..Default::default()
        }],
        T0 + 1,
    );
    s.on_deadline_passed(T0 + 2);
    expect_finish(&mut s);
    let closed = tool_results(&s);
    let by_id = |id: &str| closed.iter().find(|r| r.call_id == id).unwrap().clone();
    assert_eq!(by_id("w").content, "wrote 1 byte to a");
    assert!(!by_id("w").is_error);
    let told: Vec<String> = s
        .events_since(0)
        .events
        .into_iter()
        .filter_map(|e| match e.kind {
            Some(run_event::Kind::ToolFinished(r)) => Some(r.call_id),
            _ => None,
        })
        .collect();
    assert_eq!(told, ["w", "s", "r"], "each call's end is told once");
    assert!(
        by_id("s")
            .content
            .starts_with("stopped: the run ended while this call ran")
    );
    assert!(
        by_id("r")
            .content
            .starts_with("not run: the run ended before this call ran"),
        "{:?}",
        by_id("r")
    );
}

fn breaker_alerts(s: &RunState) -> usize {
    s.conversation
        .iter()
        .filter(|i| matches!(&i.kind, Some(item::Kind::User(u)) if u.synthetic && u.text.contains("circuit breaker")))
        .count()
}

#[test]
fn the_breaker_alerts_after_three_failing_turns_and_a_success_resets_it() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    failing_turn(&mut s, 1, true);
    failing_turn(&mut s, 2, true);
    assert_eq!(breaker_alerts(&s), 0, "two failing turns are not enough");
    failing_turn(&mut s, 3, false);
    assert_eq!(s.error_streak, 0);
    for i in 4..=6 {
        failing_turn(&mut s, i, true);
    }
    assert_eq!(breaker_alerts(&s), 1);
    let req = expect_llm(&mut s);
    assert!(matches!(
        &req.conversation.last().unwrap().kind,
        Some(item::Kind::User(u)) if u.text.contains("change strategy")
    ));
}

#[test]
fn the_breaker_pauses_for_a_human_who_can_continue_or_abort() {
    for approve in [true, false] {
        let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
        for i in 1..=6 {
            failing_turn(&mut s, i, true);
        }
        assert_eq!(breaker_alerts(&s), 1);
        let status = s.status();
        assert_eq!(status.state(), StateName::AwaitingApproval);
        assert_eq!(status.pending[0].tool, QUESTION_TOOL);
        assert!(status.pending[0].arguments.contains("Continue the run"));
        let id = status.pending[0].call_id.clone();
        s.on_decision(
            ApprovalDecision {
                call_id: id,
                approved: approve,
                approver: "op".into(),
                reason: "enough".into(),
                remember: false,
                identity: String::new(),
            },
            T0,
        )
        .unwrap();
        if approve {
            assert_eq!(s.error_streak, 0);
            assert!(matches!(s.next_step(T0), Step::CallLlm(_)));
        } else {
            let r = expect_finish(&mut s);
            assert_eq!(r.reason(), TerminationReason::LoopDetected);
            assert!(r.detail.contains("ended by op: enough"), "{}", r.detail);
            // Not the text written for the model.
            assert!(!r.detail.contains("Do not retry"), "{}", r.detail);
        }
    }
}

#[test]
fn repeated_batches_stop_the_run_or_ask_by_policy() {
    for ask in [false, true] {
        let mut sp = spec(&[]);
        if ask {
            sp.approval.as_mut().unwrap().loops = Some(baton_proto::LoopPolicy {
                on_loop: baton_proto::loop_policy::OnLoop::Ask as i32,
                ..Default::default()
            });
        }
        let mut s = RunState::new("run-1", sp, T0).unwrap();
        for i in 0..2 {
            expect_llm(&mut s);
            s.on_llm_response(
                reply(
                    "",
                    vec![call(&format!("x{i}"), "list_files", "{}")],
                    FinishReason::ToolCalls,
                ),
                T0,
            );
            expect_tools(&mut s);
            s.on_tool_results(vec![ok_result("same")], T0);
        }
        expect_llm(&mut s);
        s.on_llm_response(
            reply(
                "",
                vec![call("x2", "list_files", "{}")],
                FinishReason::ToolCalls,
            ),
            T0,
        );
        if ask {
            assert_eq!(s.status().pending[0].tool, QUESTION_TOOL);
        } else {
            let r = expect_finish(&mut s);
            assert_eq!(r.reason(), TerminationReason::LoopDetected);
            assert!(r.detail.contains("same tool calls"));
        }
    }
}

#[test]
fn loop_guards_can_be_disabled() {
    let mut sp = spec(&[]);
    sp.approval.as_mut().unwrap().loops = Some(baton_proto::LoopPolicy {
        disabled: true,
        ..Default::default()
    });
    let mut s = RunState::new("run-1", sp, T0).unwrap();
    for i in 0..4 {
        expect_llm(&mut s);
        s.on_llm_response(
            reply(
                "",
                vec![call(&format!("x{i}"), "list_files", "{}")],
                FinishReason::ToolCalls,
            ),
            T0,
        );
        expect_tools(&mut s);
        s.on_tool_results(vec![err_result("boom")], T0);
    }
    assert_eq!(breaker_alerts(&s), 0);
    assert!(matches!(s.next_step(T0), Step::CallLlm(_)));
}

/// The snapshot `read_instructions` took is the base of the run's first tool calls, so even
/// the first mutating call carries it in its input; a mutating call's snapshot replaces it.
#[test]
fn the_initial_snapshot_is_the_first_calls_base_until_a_call_changes_the_workspace() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    s.on_instructions(
        Some(WorkspaceInstructions {
            workspace: "/w/run-1".into(),
            snapshot: "s0".into(),
            ..Default::default()
        }),
        T0,
    );
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("a", "shell", r#"{"command":"touch x"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    let reqs = expect_tools(&mut s);
    assert_eq!((reqs[0].snapshot.as_str(), reqs[0].mutating), ("s0", true));
    s.on_tool_results(
        vec![ToolResult {
            snapshot: "s1".into(),
            ..ok_result("")
        }],
        T0,
    );
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("b", "read_file", r#"{"path":"x"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    assert_eq!(expect_tools(&mut s)[0].snapshot, "s1");

    // Without one (snapshots off, or not taken in time), the first call has no base.
    let mut off = RunState::new("run-2", spec(&[]), T0).unwrap();
    off.on_instructions(Some(WorkspaceInstructions::default()), T0);
    expect_llm(&mut off);
    off.on_llm_response(
        reply(
            "",
            vec![call("a", "shell", r#"{"command":"touch x"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    assert_eq!(expect_tools(&mut off)[0].snapshot, "");
}

#[test]
fn calls_finished_during_a_batch_are_told_once() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("a", "write_file", r#"{"path":"a","content":"x"}"#),
                call("b", "write_file", r#"{"path":"b","content":"y"}"#),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    let result = |id: &str| ToolResult {
        call_id: id.into(),
        name: "write_file".into(),
        content: format!("wrote {id}"),
        ..Default::default()
    };
    s.on_tools_started(&["a".to_owned()], T0);
    s.on_tools_finished(&[result("a")], T0 + 1);
    s.on_tools_started(&["b".to_owned()], T0 + 1);
    s.on_tools_finished(&[result("b")], T0 + 2);
    s.on_tool_results(vec![result("a"), result("b")], T0 + 2);
    let kinds: Vec<String> = s
        .events_since(0)
        .events
        .into_iter()
        .filter_map(|e| match e.kind {
            Some(run_event::Kind::ToolStarted(c)) => Some(format!("start {}", c.id)),
            Some(run_event::Kind::ToolFinished(r)) => Some(format!("end {}", r.call_id)),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, ["start a", "end a", "start b", "end b"]);
    assert_eq!(tool_results(&s).len(), 2);
    expect_llm(&mut s);
}
