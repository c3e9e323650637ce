//! What a run cost: usage sums, the cost budget (`max_cost_usd`) and its extension, the
//! context window the worker's model table reports.

use super::{approvals::decide, *};
use pretty_assertions::assert_eq;

/// A tool-calling reply whose usage reports cache and reasoning tokens and `cost_usd`.
fn priced(id: &str, cost_usd: f64, window: u32) -> LlmResponse {
    let mut r = reply(
        "",
        vec![call(id, "list_files", "{}")],
        FinishReason::ToolCalls,
    );
    r.usage = Some(Usage {
        input_tokens: 2_000,
        output_tokens: 300,
        total_tokens: 2_300,
        cache_read_tokens: 1_536,
        cache_write_tokens: 100,
        reasoning_tokens: 64,
        cost_usd,
        ..Default::default()
    });
    r.context_window = window;
    r
}

fn tool_turn(s: &mut RunState, id: &str, cost_usd: f64) {
    expect_llm(s);
    s.on_llm_response(priced(id, cost_usd, 0), T0);
    expect_tools(s);
    s.on_tool_results(vec![ok_result("x")], T0);
}

fn cost_limited(max_cost_usd: f64, on_exhausted: baton_proto::limits::OnExhausted) -> RunSpec {
    let mut sp = spec(&[]);
    sp.limits = Some(Limits {
        max_cost_usd,
        on_exhausted: on_exhausted as i32,
        ..Default::default()
    });
    sp
}

#[test]
fn usage_sums_cache_reasoning_tokens_and_cost() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    tool_turn(&mut s, "a", 0.125);
    tool_turn(&mut s, "b", 0.25);
    assert_eq!(
        s.status().usage.unwrap(),
        Usage {
            input_tokens: 4_000,
            output_tokens: 600,
            total_tokens: 4_600,
            llm_calls: 2,
            cache_read_tokens: 3_072,
            cache_write_tokens: 200,
            reasoning_tokens: 128,
            cost_usd: 0.375,
            estimated_calls: 0,
        }
    );
}

#[test]
fn the_cost_budget_ends_the_run_before_the_next_call() {
    let mut s = RunState::new(
        "run-1",
        cost_limited(0.5, baton_proto::limits::OnExhausted::Stop),
        T0,
    )
    .unwrap();
    tool_turn(&mut s, "a", 0.3);
    // $0.30 < $0.50: another turn.
    tool_turn(&mut s, "b", 0.3);
    let r = expect_finish(&mut s);
    assert_eq!(r.reason(), TerminationReason::BudgetExceeded);
    assert_eq!(r.detail, "the run cost $0.60, its budget is $0.50");
    assert_eq!(s.turn, 2);

    // Without a budget, no cost ends a run.
    let mut s = RunState::new("run-2", spec(&[]), T0).unwrap();
    tool_turn(&mut s, "a", 1_000.0);
    assert!(matches!(s.next_step(T0), Step::CallLlm(_)));
}

#[test]
fn an_exhausted_cost_budget_can_be_extended_by_a_human() {
    let mut s = RunState::new(
        "run-1",
        cost_limited(0.25, baton_proto::limits::OnExhausted::Ask),
        T0,
    )
    .unwrap();
    tool_turn(&mut s, "a", 0.3);
    assert!(matches!(s.next_step(T0), Step::AwaitApproval { .. }));
    let question = s.status().pending[0].arguments.clone();
    assert!(question.contains("the run cost $0.30"), "{question}");
    decide(&mut s, true);
    // The starting budget again on top of what was spent: $0.30 + $0.25.
    let limit = s.spec.limits.as_ref().unwrap().max_cost_usd;
    assert!((limit - 0.55).abs() < 1e-9, "{limit}");
    assert!(
        s.events.iter().any(|e| matches!(&e.kind,
            Some(run_event::Kind::Note(n)) if n == "cost budget extended to $0.55")),
        "{:?}",
        s.events
    );
    assert!(matches!(s.next_step(T0), Step::CallLlm(_)));
}

#[test]
fn the_model_tables_window_turns_compaction_on_without_changing_the_spec() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    assert_eq!(s.compaction_threshold(), None);
    expect_llm(&mut s);
    s.on_llm_response(priced("a", 0.0, 8_000), T0);
    // Window 8000 -> buffer 2000 -> threshold 6000.
    assert_eq!(s.compaction_threshold(), Some(6_000));
    assert_eq!(s.spec.model.as_ref().unwrap().context_window, 0);
    // A reply without a window (a worker without the model in its table) keeps the last one.
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("x")], T0);
    expect_llm(&mut s);
    s.on_llm_response(priced("b", 0.0, 0), T0);
    assert_eq!(s.compaction_threshold(), Some(6_000));

    // It survives continue-as-new.
    let carried = s.checkpoint().unwrap();
    let next = RunState::resume("run-1", spec(&[]), &carried).unwrap();
    assert_eq!(next.compaction_threshold(), Some(6_000));

    // The run's own window wins over the table's.
    let mut sp = spec(&[]);
    sp.model = Some(baton_proto::ModelConfig {
        context_window: 100_000,
        ..Default::default()
    });
    let mut s = RunState::new("run-2", sp, T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(priced("a", 0.0, 8_000), T0);
    assert_eq!(
        s.compaction_threshold(),
        Some(100_000 - COMPACTION_BUFFER_TOKENS)
    );
}
