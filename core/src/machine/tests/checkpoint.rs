//! Continue-as-new: checkpoint and resume.

use baton_proto::Continuation;
use pretty_assertions::assert_eq;

use super::*;

#[test]
fn a_checkpoint_carries_the_run_by_reference_and_resumes_it() {
    let mut spec = spec(&["shell"]);
    spec.limits = Some(Limits {
        max_turns: 100,
        segment_turns: 30,
        ..Default::default()
    });
    let mut s = RunState::new("run-1", spec.clone(), T0).unwrap();
    assert!(!s.wants_continue_as_new(10, false));
    assert!(s.wants_continue_as_new(10, true));
    assert!(s.wants_continue_as_new(DEFAULT_HISTORY_EVENTS_BUDGET, false));
    for i in 0..30 {
        // Approve each call so the batch runs.
        shell_reply(&mut s, i, "ctx-1", T0);
        if i == 29 {
            break;
        }
        approve_and_run(&mut s, i, false, &"o".repeat(2000), T0);
    }
    // Turn 30 waits for a human, and the segment used its turn budget.
    assert_eq!(s.status().state(), StateName::AwaitingApproval);
    assert!(s.wants_continue_as_new(100, false));
    let carried = s.checkpoint().unwrap();
    assert_eq!(carried.segment, 1);
    assert!(carried.state.len() < MAX_CHECKPOINT_BYTES);
    let mut next = RunState::resume("run-1", spec, &carried).unwrap();
    assert!(
        !next.wants_continue_as_new(100, false),
        "the budget restarts"
    );
    assert_eq!(next.turn, 30);
    assert_eq!(next.conversation.len(), s.conversation.len());
    assert_eq!(next.estimate_tokens(), s.estimate_tokens());
    let stubs = next
        .conversation
        .iter()
        .filter(|i| matches!(i.kind, Some(item::Kind::Stub(_))))
        .count();
    assert!(stubs > 40, "older items are stubs: {stubs}");
    assert!(next.events.len() <= CARRIED_EVENTS);
    // The pending approval survives the boundary and is applied.
    assert_eq!(next.status().pending.len(), 1);
    next.on_decision(
        ApprovalDecision {
            call_id: "c29".into(),
            approved: true,
            approver: "ann".into(),
            ..Default::default()
        },
        T0,
    )
    .unwrap();
    let requests = expect_tools(&mut next);
    assert_eq!(requests[0].call.as_ref().unwrap().id, "c29");
    next.on_tool_results(vec![ok_result("done")], T0);
    let Step::CallLlm(req) = next.next_step(T0) else {
        panic!("expected an LLM call");
    };
    // The prompt prefix providers cache (system prompt and tools) is the same stored blob
    // after the boundary: the cache keeps hitting.
    assert_eq!(req.context, "ctx-1");
    assert!(req.system_prompt.is_empty() && req.tools.is_empty());
    assert_eq!(next.system_prompt(), s.system_prompt());
    let h = req.history.unwrap();
    assert_eq!(h.head, "head29");
    assert!(
        h.added
            .iter()
            .all(|i| !matches!(i.kind, Some(item::Kind::Stub(_)))),
        "stubs never travel"
    );
}

#[test]
fn a_state_that_cannot_be_made_says_why_in_a_typed_error() {
    let unknown = RunState::new(
        "run-1",
        RunSpec {
            tools: vec!["read_file".into(), "teleport".into(), "fly".into()],
            ..spec(&[])
        },
        T0,
    )
    .unwrap_err();
    assert!(
        matches!(&unknown, StateError::UnknownTools { unknown } if unknown == &["teleport", "fly"])
    );
    assert_eq!(unknown.to_string(), "unknown tools in spec: teleport, fly");

    let s = RunState::new("run-1", spec(&[]), T0).unwrap();
    let mut continued = s.checkpoint().unwrap();
    continued.format = CHECKPOINT_FORMAT + 1;
    let newer = RunState::resume("run-1", spec(&[]), &continued).unwrap_err();
    assert_eq!(
        newer.to_string(),
        format!(
            "continued run state has format {}, this worker reads format {CHECKPOINT_FORMAT}",
            CHECKPOINT_FORMAT + 1
        )
    );

    continued.format = CHECKPOINT_FORMAT;
    continued.state = "{not json".into();
    let unreadable = RunState::resume("run-1", spec(&[]), &continued).unwrap_err();
    assert!(
        matches!(unreadable, StateError::Unreadable(_)),
        "{unreadable:?}"
    );
    assert!(
        unreadable
            .to_string()
            .starts_with("continued run state is unreadable: "),
        "{unreadable}"
    );

    // The run that cannot start ends at once, with that text as its detail.
    let invalid = RunState::invalid("run-1", spec(&[]), T0, &unknown);
    assert_eq!(
        invalid.result().map(|r| r.detail.as_str()),
        Some("unknown tools in spec: teleport, fly")
    );
    assert_eq!(
        invalid.result().map(|r| r.reason()),
        Some(TerminationReason::InternalError)
    );
}

/// A state with most of its fields away from their defaults: three approved turns, a fourth
/// waiting for a human, and the context fields a long run sets.
fn busy_state() -> RunState {
    let mut s = RunState::new("run-1", spec(&["shell"]), T0).unwrap();
    for i in 0..4 {
        shell_reply(&mut s, i, "ctx-1", T0 + i64::from(i));
        if i == 3 {
            break;
        }
        approve_and_run(&mut s, i, i == 0, &format!("out {i}"), T0 + i64::from(i));
    }
    s.summary = Some(Summary {
        text: "Earlier: listed files.".into(),
        upto: 2,
    });
    s.calibration = Some((1200, 5));
    s.compaction_failed_turn = Some(2);
    s.workspace_snapshot = Some("snap-3".into());
    s.refused_at = Some(90_000);
    s.model_context_window = 128_000;
    s.prompt_capacity = 120_000;
    s.inbox.push("also check the README".into());
    s
}

/// The checkpoint JSON is the version-1 shape that earlier builds wrote
/// (`tests/checkpoint_v1.json`): a field added to `RunState` does not change it until it
/// is given a place in `persisted::RunStateV1`, and that file still resumes.
#[test]
#[allow(clippy::disallowed_methods)] // test code: reads the environment for BATON_BLESS
fn a_checkpoint_is_the_version_1_json_and_the_committed_one_resumes() {
    let s = busy_state();
    let carried = s.checkpoint().unwrap();
    let json: serde_json::Value = serde_json::from_str(&carried.state).unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/machine/tests/checkpoint_v1.json");
    if std::env::var_os("BATON_BLESS").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap() + "\n").unwrap();
    }
    let committed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(json, committed);
    let resumed = RunState::resume(
        "run-1",
        spec(&["shell"]),
        &Continuation {
            segment: 1,
            state: committed.to_string(),
            format: CHECKPOINT_FORMAT,
        },
    )
    .unwrap();
    let again = RunState::resume("run-1", spec(&["shell"]), &carried).unwrap();
    assert_eq!(resumed, again);
    assert_eq!(resumed.turn, 4);
    assert_eq!(resumed.status().pending.len(), 1);
    assert_eq!(resumed.remembered.len(), 1);
    assert_eq!(resumed.inbox, ["also check the README"]);
}
