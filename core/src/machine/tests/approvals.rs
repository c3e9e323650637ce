//! Approvals: decisions, approvers, the approval timeout, questions, limit extensions.

use pretty_assertions::assert_eq;

use super::*;

#[test]
fn one_call_needing_approval_holds_the_whole_batch() {
    let mut s = RunState::new("run-1", spec(&["shell"]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("r", "read_file", r#"{"path":"a"}"#),
                call("s", "shell", r#"{"command":"make"}"#),
                call("w", "write_file", r#"{"path":"b","content":"x"}"#),
            ],
            FinishReason::ToolCalls,
        ),
        T0 + 5,
    );
    assert_eq!(
        s.next_step(T0),
        Step::AwaitApproval {
            timeout_seconds: None
        }
    );
    let status = s.status();
    assert_eq!(status.state(), StateName::AwaitingApproval);
    assert_eq!(status.pending.len(), 1);
    assert_eq!(status.pending[0].call_id, "s");
    assert_eq!(status.pending[0].tool, "shell");
    assert_eq!(status.pending[0].arguments, r#"{"command":"make"}"#);
    assert_eq!(status.pending[0].requested_at_ms, T0 + 5);
    // Still waiting: nothing of the batch runs.
    assert!(!s.approvals_settled());
    assert!(matches!(s.next_step(T0), Step::AwaitApproval { .. }));

    let outcome = s
        .on_decision(
            ApprovalDecision {
                call_id: "s".into(),
                approved: true,
                approver: "alice".into(),
                reason: String::new(),
                remember: false,
                identity: String::new(),
            },
            T0,
        )
        .unwrap();
    assert_eq!(outcome.call_ids, vec!["s".to_string()]);
    assert_eq!(outcome.still_pending, 0);
    assert!(s.approvals_settled());
    let ids: Vec<String> = expect_tools(&mut s)
        .into_iter()
        .map(|r| r.call.unwrap().id)
        .collect();
    assert_eq!(ids, vec!["r", "s", "w"]);
    s.on_tool_results(vec![ok_result("1"), ok_result("2"), ok_result("3")], T0);
    let results: Vec<(String, String)> = tool_results(&s)
        .into_iter()
        .map(|r| (r.call_id, r.content))
        .collect();
    assert_eq!(
        results,
        vec![
            ("r".to_string(), "1".to_string()),
            ("s".to_string(), "2".to_string()),
            ("w".to_string(), "3".to_string())
        ]
    );
}

#[test]
fn a_denial_becomes_an_error_observation_and_the_run_goes_on() {
    let mut s = RunState::new("run-1", spec(&["shell"]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("s", "shell", r#"{"command":"rm -rf build"}"#),
                call("l", "list_files", "{}"),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    s.on_decision(
        ApprovalDecision {
            call_id: "s".into(),
            approved: false,
            approver: "bob".into(),
            reason: "not on main".into(),
            remember: false,
            identity: String::new(),
        },
        T0,
    )
    .unwrap();
    let reqs = expect_tools(&mut s);
    assert_eq!(reqs.len(), 1, "only the list_files call runs");
    assert_eq!(reqs[0].call.as_ref().unwrap().id, "l");
    s.on_tool_results(vec![ok_result("a.txt")], T0);
    let results = tool_results(&s);
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].call_id, "s");
    assert!(results[0].is_error);
    assert!(results[0].content.contains("denied by bob: not on main"));
    assert!(!results[1].is_error);
    // The model is asked again, with the denial in view.
    let req = expect_llm(&mut s);
    assert!(
        req.conversation
            .iter()
            .any(|i| matches!(&i.kind, Some(item::Kind::ToolResult(r)) if r.content.contains("denied by bob")))
    );
}

#[test]
fn decisions_are_validated() {
    let mut s = RunState::new("run-1", spec(&["shell", "write_file"]), T0).unwrap();
    let d = |id: &str, ok: bool| ApprovalDecision {
        call_id: id.into(),
        approved: ok,
        approver: "carol".into(),
        reason: "r".into(),
        remember: false,
        identity: String::new(),
    };
    assert_eq!(
        s.validate_decision(&d("s", true)),
        Err(DecisionError::NothingPending)
    );
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("s", "shell", r#"{"command":"x"}"#),
                call("w", "write_file", r#"{"path":"a","content":""}"#),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    assert!(matches!(
        s.validate_decision(&d("zzz", true)),
        Err(DecisionError::UnknownCall { .. })
    ));
    s.on_decision(d("s", true), T0).unwrap();
    assert_eq!(
        s.validate_decision(&d("s", false)),
        Err(DecisionError::AlreadyDecided {
            call_id: "s".into()
        })
    );
    // A duplicate sent as a signal is ignored and changes nothing.
    assert!(s.on_decision(d("s", false), T0).is_err());
    assert!(!s.approvals_settled());
    let outcome = s.on_decision(d("*", false), T0).unwrap();
    assert_eq!(outcome.call_ids, vec!["w".to_string()]);
    let reqs = expect_tools(&mut s);
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].call.as_ref().unwrap().id, "s");
}

#[test]
fn approvers_restrict_who_may_decide_which_tool() {
    let mut spec = spec(&["shell", "write_file"]);
    spec.approval.as_mut().unwrap().approvers = vec![ApproverRule {
        tool: "shell".into(),
        identities: vec!["alice@*".into()],
    }];
    let mut s = RunState::new("run-1", spec, T0).unwrap();
    let d = |id: &str, identity: &str| ApprovalDecision {
        call_id: id.into(),
        approved: true,
        approver: "alice".into(),
        identity: identity.into(),
        ..Default::default()
    };
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("s", "shell", r#"{"command":"x"}"#),
                call("w", "write_file", r#"{"path":"a","content":""}"#),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    // The claimed approver name does not count; the identity does.
    let refused = DecisionError::NotAllowed {
        identity: "bob@box".into(),
        tool: "shell".into(),
        allowed: vec!["alice@*".into()],
    };
    assert_eq!(
        s.validate_decision(&d("s", "bob@box")),
        Err(refused.clone())
    );
    assert!(
        refused
            .to_string()
            .contains("identity 'bob@box' may not decide calls of tool 'shell'")
    );
    // "*" covers the shell call too, so bob may not decide everything at once...
    assert!(s.validate_decision(&d("*", "bob@box")).is_err());
    // ...but write_file has no entry: anyone may decide it.
    s.on_decision(d("w", "bob@box"), T0).unwrap();
    // A refused signal leaves the call pending and says why.
    assert!(s.on_decision(d("s", ""), T0).is_err());
    assert!(!s.approvals_settled());
    assert!(
        s.status()
            .last_event
            .contains("a client with no identity may not decide"),
        "{}",
        s.status().last_event
    );
    s.on_decision(d("s", "alice@laptop"), T0).unwrap();
    assert_eq!(expect_tools(&mut s).len(), 2);
}

#[test]
fn approval_timeout_denies_or_fails_by_policy() {
    for (action, expect_fail) in [
        (ApprovalTimeoutAction::Deny, false),
        (ApprovalTimeoutAction::Fail, true),
    ] {
        let mut sp = spec(&["shell"]);
        let approval = sp.approval.as_mut().unwrap();
        approval.timeout_seconds = 30;
        approval.on_timeout = action as i32;
        let mut s = RunState::new("run-1", sp, T0).unwrap();
        expect_llm(&mut s);
        s.on_llm_response(
            reply(
                "",
                vec![call("s", "shell", r#"{"command":"x"}"#)],
                FinishReason::ToolCalls,
            ),
            T0,
        );
        assert_eq!(
            s.next_step(T0),
            Step::AwaitApproval {
                timeout_seconds: Some(30)
            }
        );
        s.on_approval_timeout(T0 + 30_000);
        if expect_fail {
            let r = expect_finish(&mut s);
            assert_eq!(r.reason(), TerminationReason::ApprovalTimedOut);
        } else {
            assert!(expect_tools(&mut s).is_empty());
            s.on_tool_results(vec![], T0);
            let results = tool_results(&s);
            assert!(results[0].is_error);
            assert!(results[0].content.contains("approval timed out"));
        }
    }
}

#[test]
fn a_run_ending_while_calls_await_a_decision_answers_each_call() {
    let mut s = RunState::new("run-1", spec(&["shell"]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("r", "read_file", r#"{"path":"a"}"#),
                call("s", "shell", r#"{"command":"make"}"#),
                call("x", "no_such_tool", "{}"),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    assert!(matches!(s.next_step(T0), Step::AwaitApproval { .. }));
    s.on_cancelled(None, T0 + 1);
    expect_finish(&mut s);
    let closed = tool_results(&s);
    let by_id = |id: &str| {
        closed
            .iter()
            .find(|r| r.call_id == id)
            .unwrap()
            .content
            .clone()
    };
    assert_eq!(closed.len(), 3);
    assert_eq!(
        by_id("r"),
        "not run: the run ended before this call ran (cancelled)"
    );
    assert_eq!(
        by_id("s"),
        "not run: the run ended before this call was decided (cancelled)"
    );
    assert!(by_id("x").contains("no_such_tool"), "{}", by_id("x"));
}

#[test]
fn remember_allows_the_same_pattern_for_the_rest_of_the_run() {
    let mut s = RunState::new("run-1", spec(&["shell"]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("a", "shell", r#"{"command":"cargo test --lib"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    s.on_decision(
        ApprovalDecision {
            call_id: "a".into(),
            approved: true,
            approver: "eve".into(),
            reason: String::new(),
            remember: true,
            identity: String::new(),
        },
        T0,
    )
    .unwrap();
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("ok")], T0);
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("b", "shell", r#"{"command":"cargo test -p other"}"#),
                call("c", "shell", r#"{"command":"cargo publish"}"#),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    let pending: Vec<String> = s.pending_calls().into_iter().map(|p| p.call_id).collect();
    assert_eq!(
        pending,
        vec!["c".to_string()],
        "cargo test* is remembered, cargo publish is not"
    );
}

#[test]
fn never_ask_denies_without_blocking() {
    let mut sp = spec(&["shell"]);
    sp.approval.as_mut().unwrap().mode = crate::policy::MODE_NEVER_ASK.into();
    let mut s = RunState::new("run-1", sp, T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("a", "shell", r#"{"command":"make deploy"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    assert!(
        expect_tools(&mut s).is_empty(),
        "nothing runs and nothing waits"
    );
    s.on_tool_results(vec![], T0);
    let r = &tool_results(&s)[0];
    assert!(
        r.is_error && r.content.contains("never_ask"),
        "{}",
        r.content
    );
    assert!(matches!(s.next_step(T0), Step::CallLlm(_)));
}

#[test]
fn an_invalid_policy_is_refused_at_start() {
    let mut sp = spec(&[]);
    sp.approval
        .as_mut()
        .unwrap()
        .rules
        .push(baton_proto::ToolRule {
            tool: "shell".into(),
            pattern: String::new(),
            action: "perhaps".into(),
            reason: String::new(),
        });
    let err = RunState::new("run-1", sp, T0).unwrap_err();
    assert!(matches!(err, StateError::InvalidPolicy { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.starts_with("invalid approval policy: "), "{text}");
    assert!(text.contains("unknown action 'perhaps'"), "{text}");
}

pub(super) fn decide(s: &mut RunState, approved: bool) {
    let id = s.status().pending[0].call_id.clone();
    s.on_decision(
        ApprovalDecision {
            call_id: id,
            approved,
            approver: "boss".into(),
            reason: "budget".into(),
            remember: false,
            identity: String::new(),
        },
        T0,
    )
    .unwrap();
}

#[test]
fn exhausted_limits_can_ask_for_an_extension() {
    for approve in [true, false] {
        let mut sp = spec(&[]);
        sp.limits = Some(Limits {
            max_turns: 2,
            on_exhausted: baton_proto::limits::OnExhausted::Ask as i32,
            ..Default::default()
        });
        let mut s = RunState::new("run-1", sp, T0).unwrap();
        for i in 0..2 {
            failing_turn(&mut s, i, false);
        }
        assert_eq!(
            s.next_step(T0),
            Step::AwaitApproval {
                timeout_seconds: None
            }
        );
        assert!(s.status().pending[0].arguments.contains("Extend the limit"));
        decide(&mut s, approve);
        if approve {
            // Two more turns.
            failing_turn(&mut s, 2, false);
            failing_turn(&mut s, 3, false);
            assert!(matches!(s.next_step(T0), Step::AwaitApproval { .. }));
        } else {
            let r = expect_finish(&mut s);
            assert_eq!(r.reason(), TerminationReason::MaxTurnsExceeded);
            assert_eq!(r.detail, "The run was ended by boss: budget.");
        }
    }
}

#[test]
fn token_budget_extension_and_deadline_interruption() {
    let mut sp = spec(&[]);
    sp.limits = Some(Limits {
        max_total_tokens: 20,
        on_exhausted: baton_proto::limits::OnExhausted::Ask as i32,
        ..Default::default()
    });
    let mut s = RunState::new("run-1", sp, T0).unwrap();
    // Each reply reports 15 tokens: after two, 30 >= 20.
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
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("b", "glob", r#"{"pattern":"*"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("x")], T0);
    assert!(matches!(s.next_step(T0), Step::AwaitApproval { .. }));
    decide(&mut s, true);
    assert_eq!(s.spec.limits.as_ref().unwrap().max_total_tokens, 50);
    assert!(matches!(s.next_step(T0), Step::CallLlm(_)));

    let mut sp = spec(&[]);
    sp.limits = Some(Limits {
        deadline_seconds: 30,
        ..Default::default()
    });
    let mut s = RunState::new("run-2", sp, T0).unwrap();
    assert_eq!(s.deadline_ms(), Some(T0 + 30_000));
    assert!(s.deadline_interrupts());
    expect_llm(&mut s);
    s.on_deadline_passed(T0 + 30_000);
    let r = expect_finish(&mut s);
    assert_eq!(r.reason(), TerminationReason::BudgetExceeded);
    assert!(r.detail.contains("deadline of 30 s"));
}

#[test]
fn an_interrupted_call_waits_for_a_human_who_reruns_or_skips_it() {
    let mut spec = spec(&[]);
    spec.approval.as_mut().unwrap().on_retry = baton_proto::approval_policy::OnRetry::Ask as i32;
    for approve in [true, false] {
        let mut s = RunState::new("run-1", spec.clone(), T0).unwrap();
        expect_llm(&mut s);
        s.on_llm_response(
            reply(
                "two things",
                vec![
                    call("a", "shell", r#"{"command":"make deploy"}"#),
                    call("b", "read_file", r#"{"path":"x"}"#),
                ],
                FinishReason::ToolCalls,
            ),
            T0,
        );
        let requests = expect_tools(&mut s);
        assert!(requests[0].confirm_retries && requests[0].mutating);
        assert!(!requests[0].retry_confirmed);
        s.on_tool_results(
            vec![
                ToolResult {
                    interrupted: true,
                    content: "not run again".into(),
                    ..Default::default()
                },
                ok_result("file x"),
            ],
            T0,
        );
        // The read went through; the cut-off call waits for a human.
        assert_eq!(tool_results(&s).len(), 1);
        let status = s.status();
        assert_eq!(status.state(), StateName::AwaitingApproval);
        assert_eq!(status.pending[0].call_id, "a");
        s.on_decision(
            ApprovalDecision {
                call_id: "a".into(),
                approved: approve,
                approver: "ann".into(),
                reason: "already deployed".into(),
                ..Default::default()
            },
            T0,
        )
        .unwrap();
        if approve {
            let again = expect_tools(&mut s);
            assert_eq!(again.len(), 1);
            assert!(again[0].retry_confirmed);
            s.on_tool_results(vec![ok_result("deployed")], T0);
            let all = tool_results(&s);
            assert_eq!(all.len(), 2, "{all:?} {:?}", s.phase);
            assert_eq!(all[1].content, "deployed");
        } else {
            // Nothing runs; the skip is the call's result.
            assert!(expect_tools(&mut s).is_empty());
            s.on_tool_results(Vec::new(), T0);
            let skipped = &tool_results(&s)[1];
            assert!(skipped.is_error);
            assert!(
                skipped.content.contains("may or may not have taken effect")
                    && skipped.content.contains("already deployed"),
                "{}",
                skipped.content
            );
        }
        expect_llm(&mut s);
    }
}
