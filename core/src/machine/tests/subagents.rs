//! `spawn_agent` calls in the machine: checked when planned (count limit, arguments), the
//! child's spec and run id in the step, the child's usage added to the run's.

use baton_proto::{SubagentOutcome, Usage};
use pretty_assertions::assert_eq;

use super::*;
use crate::subagent::PARENT_LABEL;

fn spawning_spec(max_subagents: u32) -> RunSpec {
    RunSpec {
        tools: vec!["write_file".into(), tools::SPAWN_AGENT.into()],
        limits: Some(Limits {
            max_subagents,
            ..Default::default()
        }),
        ..spec(&["*"])
    }
}

fn spawn(id: &str, task: &str) -> ToolCall {
    call(id, tools::SPAWN_AGENT, &format!(r#"{{"task":"{task}"}}"#))
}

#[test]
fn spawns_over_the_limit_or_with_bad_arguments_are_refused_and_the_rest_get_child_specs() {
    let mut s = RunState::new("p1", spawning_spec(2), T0).unwrap();
    assert!(s.tools.iter().any(|t| t.name == tools::SPAWN_AGENT));
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                spawn("a", "one"),
                call("b", tools::SPAWN_AGENT, r#"{"tools":["shell"]}"#),
                spawn("c", "two"),
                spawn("d", "three"),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    // "*" does not make the delegation itself wait for a human.
    let requests = expect_tools(&mut s);
    let children: Vec<(&str, &str, &str)> = requests
        .iter()
        .map(|r| {
            let spec = r.subagent.as_ref().unwrap();
            (
                r.call.as_ref().unwrap().id.as_str(),
                r.subagent_run_id.as_str(),
                spec.task.as_str(),
            )
        })
        .collect();
    assert_eq!(
        children,
        vec![("a", "p1.sub-1", "one"), ("c", "p1.sub-2", "two")]
    );
    assert_eq!(
        requests[0].subagent.as_ref().unwrap().labels[PARENT_LABEL],
        "p1"
    );
    let outcome = |run_id: &str, tokens: u32| ToolResult {
        subagent: Some(SubagentOutcome {
            run_id: run_id.into(),
            usage: Some(Usage {
                total_tokens: tokens,
                input_tokens: tokens,
                ..Default::default()
            }),
            merge: "merged".into(),
            ..Default::default()
        }),
        ..ok_result("done")
    };
    s.on_tool_results(vec![outcome("p1.sub-1", 100), outcome("p1.sub-2", 50)], T0);
    assert_eq!(s.subagents_started, 2);
    // The parent's own 15 tokens and its children's.
    assert_eq!(s.usage.total_tokens, 15 + 150);
    let results = tool_results(&s);
    assert!(
        results[1].content.contains("missing field `task`"),
        "{}",
        results[1].content
    );
    assert!(
        results[3].content.contains("limit of 2 subagents"),
        "{}",
        results[3].content
    );
    let finished: Vec<String> = s
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            Some(run_event::Kind::SubagentFinished(f)) => Some(f.outcome.clone().unwrap().run_id),
            _ => None,
        })
        .collect();
    assert_eq!(finished, vec!["p1.sub-1", "p1.sub-2"]);
    // The next spawn is over the limit at once.
    expect_llm(&mut s);
    s.on_llm_response(
        reply("", vec![spawn("e", "four")], FinishReason::ToolCalls),
        T0,
    );
    assert!(expect_tools(&mut s).is_empty());
}

#[test]
fn a_scripted_parent_hands_each_child_its_own_script() {
    let script = |text: &str| baton_proto::Script {
        turns: vec![baton_proto::ScriptedTurn {
            text: text.into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let spec = RunSpec {
        model: Some(baton_proto::ModelConfig {
            provider: "scripted".into(),
            script: Some(baton_proto::Script {
                subagents: vec![script("first child"), script("second child")],
                ..script("parent")
            }),
            ..Default::default()
        }),
        ..spawning_spec(0)
    };
    let mut s = RunState::new("p1", spec, T0).unwrap();
    expect_llm(&mut s);
    let spawns = vec![spawn("a", "one"), spawn("b", "two"), spawn("c", "three")];
    s.on_llm_response(reply("", spawns, FinishReason::ToolCalls), T0);
    let texts: Vec<Option<String>> = expect_tools(&mut s)
        .iter()
        .map(|r| {
            let model = r.subagent.as_ref().unwrap().model.as_ref().unwrap();
            model.script.as_ref().map(|s| s.turns[0].text.clone())
        })
        .collect();
    assert_eq!(
        texts,
        vec![
            Some("first child".into()),
            Some("second child".into()),
            None
        ]
    );
}

#[test]
fn a_child_at_the_depth_limit_is_not_offered_spawn_agent() {
    let spec = RunSpec {
        parent: Some(baton_proto::ParentRun {
            run_id: "p1".into(),
            depth: 1,
            ..Default::default()
        }),
        ..spawning_spec(0)
    };
    let s = RunState::new("p1.sub-1", spec, T0).unwrap();
    let names: Vec<&str> = s.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["write_file"]);
    assert_eq!(s.status().parent_run_id, "p1");
}
