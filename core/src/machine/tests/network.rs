//! `on_unknown_host = "ask"`: hosts the proxy refused as not on the list become questions;
//! approved ones join the run's allowed hosts (and the next tool requests' policy).

use baton_proto::{NetworkRefusal, SandboxPolicy};
use pretty_assertions::assert_eq;

use super::*;
use baton_proto::sandbox_policy::OnUnknownHost;

fn asking_spec(on_unknown_host: OnUnknownHost) -> RunSpec {
    RunSpec {
        sandbox: Some(SandboxPolicy {
            network: true,
            allowed_hosts: vec!["pypi.org".into()],
            on_unknown_host: on_unknown_host as i32,
            ..Default::default()
        }),
        ..spec(&[])
    }
}

fn refused(host: &str, port: u32, kind: &str) -> NetworkRefusal {
    NetworkRefusal {
        host: host.into(),
        port,
        kind: kind.into(),
        reason: format!("{host}:{port} refused"),
    }
}

/// One turn of two shell calls whose processes were refused `refusals` (on the first call).
fn refused_turn(s: &mut RunState, refusals: Vec<NetworkRefusal>) {
    expect_llm(s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("a", "shell", r#"{"command":"pip download x"}"#),
                call("b", "shell", r#"{"command":"curl http://[::1]:9/"}"#),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(s);
    let first = ToolResult {
        network_refused: refusals.len() as u32,
        network_refusals: refusals,
        ..err_result("403")
    };
    let second = ToolResult {
        network_refused: 1,
        network_refusals: vec![refused("::1", 9, "private")],
        ..err_result("403")
    };
    s.on_tool_results(vec![first, second], T0);
}

fn decide(s: &mut RunState, call_id: &str, approved: bool) {
    s.on_decision(
        ApprovalDecision {
            call_id: call_id.into(),
            approved,
            approver: "alice".into(),
            ..Default::default()
        },
        T0,
    )
    .unwrap();
}

#[test]
fn refused_unknown_hosts_are_put_to_a_human_and_approved_ones_join_the_list() {
    let mut s = RunState::new("run-1", asking_spec(OnUnknownHost::Ask), T0).unwrap();
    refused_turn(
        &mut s,
        vec![
            refused("files.example.com", 443, "not_allowed"),
            refused("files.example.com", 443, "not_allowed"),
            refused("169.254.169.254", 80, "private"),
            refused("cdn.example.net", 443, "not_allowed"),
        ],
    );
    assert!(matches!(s.next_step(T0), Step::AwaitApproval { .. }));
    let pending = s.status().pending;
    // Only hosts that are not on the list; private ones are not questions, duplicates once.
    assert_eq!(
        pending
            .iter()
            .map(|p| (p.call_id.as_str(), p.tool.as_str(), p.arguments.as_str()))
            .collect::<Vec<_>>(),
        vec![
            (
                "baton_allow_host_1_1",
                ALLOW_HOST_TOOL,
                r#"{"host":"files.example.com:443","refused_for":"a"}"#
            ),
            (
                "baton_allow_host_1_2",
                ALLOW_HOST_TOOL,
                r#"{"host":"cdn.example.net:443","refused_for":"a"}"#
            ),
        ]
    );
    decide(&mut s, "baton_allow_host_1_1", true);
    assert!(matches!(s.next_step(T0), Step::AwaitApproval { .. }));
    decide(&mut s, "baton_allow_host_1_2", false);

    // The model hears what was decided, and the next calls may reach the approved host.
    let req = expect_llm(&mut s);
    let Some(item::Kind::User(told)) = &req.conversation.last().unwrap().kind else {
        panic!("expected a message to the model");
    };
    assert!(told.synthetic);
    assert!(
        told.text
            .contains("allowed your tools to reach files.example.com:443")
            && told.text.contains("did not allow cdn.example.net:443"),
        "{}",
        told.text
    );
    s.on_llm_response(
        reply(
            "",
            vec![call("c", "shell", r#"{"command":"pip download x"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    let requests = expect_tools(&mut s);
    assert_eq!(
        requests[0].sandbox.as_ref().unwrap().allowed_hosts,
        vec!["pypi.org".to_owned(), "files.example.com:443".to_owned()]
    );
}

#[test]
fn deny_mode_and_already_allowed_hosts_ask_nothing() {
    let mut s = RunState::new("run-1", asking_spec(OnUnknownHost::Deny), T0).unwrap();
    refused_turn(
        &mut s,
        vec![refused("files.example.com", 443, "not_allowed")],
    );
    expect_llm(&mut s);

    // Asking, but the host was allowed meanwhile (the same entry as the list has).
    let mut spec = asking_spec(OnUnknownHost::Ask);
    spec.sandbox
        .as_mut()
        .unwrap()
        .allowed_hosts
        .push("files.example.com:443".into());
    let mut s = RunState::new("run-1", spec, T0).unwrap();
    refused_turn(
        &mut s,
        vec![refused("files.example.com", 443, "not_allowed")],
    );
    expect_llm(&mut s);
}

#[test]
fn unanswered_host_questions_are_denied_on_timeout_by_policy() {
    let mut spec = asking_spec(OnUnknownHost::Ask);
    let approval = spec.approval.as_mut().unwrap();
    approval.timeout_seconds = 60;
    approval.on_timeout = ApprovalTimeoutAction::Deny as i32;
    let mut s = RunState::new("run-1", spec, T0).unwrap();
    refused_turn(
        &mut s,
        vec![refused("files.example.com", 443, "not_allowed")],
    );
    assert!(matches!(s.next_step(T0), Step::AwaitApproval { .. }));
    s.on_approval_timeout(T0);
    let req = expect_llm(&mut s);
    let Some(item::Kind::User(told)) = &req.conversation.last().unwrap().kind else {
        panic!("expected a message to the model");
    };
    assert!(told.text.contains("did not allow files.example.com:443"));
    assert_eq!(
        s.spec.sandbox.as_ref().unwrap().allowed_hosts,
        vec!["pypi.org".to_owned()]
    );
}
