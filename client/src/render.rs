//! Human and JSON output.

use std::time::{SystemTime, UNIX_EPOCH};

use baton_proto::{
    FinishReason, RunEvent, RunResult, RunState, RunStatus, TerminationReason, Usage, run_event,
};
use serde_json::{Value, json};

use crate::{
    exit,
    inflight::{self, InFlight},
    style::Style,
};

/// JSON of a proto message with extra top-level fields.
pub(crate) fn json_with<T: serde::Serialize>(value: &T, extra: &[(&str, Value)]) -> Value {
    let mut v = serde_json::to_value(value).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut v {
        for (k, x) in extra {
            map.insert((*k).to_owned(), x.clone());
        }
    }
    v
}

/// The JSON printed for a finished run: `{"run_id", "status", "reason", "answer", "turns",
/// "usage", "detail"}`, and `last_text` (`""` when the agent said nothing) when it did not
/// complete.
pub(crate) fn result_json(result: &RunResult) -> Value {
    let (answer, last_text) = answer_of(result);
    let mut v = json_with(result, &[("answer", json!(answer))]);
    if let Value::Object(map) = &mut v
        && result.status() != RunState::Completed
    {
        map.insert("last_text".to_owned(), json!(last_text.unwrap_or_default()));
    }
    v
}

/// A run's answer, only when it completed; otherwise the agent's last message, which is not
/// an answer (a CI job reading `.answer` must not take "Running the tests now." for one).
fn answer_of(result: &RunResult) -> (&str, Option<&str>) {
    if result.status() == RunState::Completed {
        (&result.answer, None)
    } else {
        ("", Some(result.answer.as_str()).filter(|t| !t.is_empty()))
    }
}

/// The JSON of a run's status with extra top-level fields: the reason is `null` while the
/// run goes on, and times are numbers (as in `watch --json`), not the strings proto3 JSON
/// makes of 64-bit integers.
pub(crate) fn status_json(status: &RunStatus, extra: &[(&str, Value)]) -> Value {
    let mut v = json_with(status, extra);
    if status.reason == 0 {
        v["reason"] = Value::Null;
    }
    if let Some(pending) = v.get_mut("pending").and_then(Value::as_array_mut) {
        for (p, call) in pending.iter_mut().zip(&status.pending) {
            p["requested_at_ms"] = json!(call.requested_at_ms);
        }
    }
    v
}

/// One line explaining a termination reason, and what to do about it.
pub(crate) fn explain(reason: TerminationReason) -> &'static str {
    match reason {
        TerminationReason::Completed => "the agent finished and gave its answer",
        TerminationReason::Cancelled => "the run was cancelled (or terminated) before it finished",
        TerminationReason::MaxTurnsExceeded => {
            "the agent used all its turns without a final answer; raise --max-turns or narrow the task"
        }
        TerminationReason::BudgetExceeded => {
            "the run hit its token budget or deadline; raise --max-tokens / the deadline or narrow the task"
        }
        TerminationReason::ContextOverflow => {
            "the conversation no longer fits the model's context window, even after trimming old tool outputs"
        }
        TerminationReason::OutputTruncated => {
            "the model's replies kept hitting the output token limit; raise the model's max output tokens"
        }
        TerminationReason::ContentFiltered => "the provider's content filter stopped the reply",
        TerminationReason::LoopDetected => {
            "the agent was repeating itself (or kept failing) and was stopped; rephrase the task or give guidance"
        }
        TerminationReason::ApprovalTimedOut => {
            "nobody approved or denied a pending tool call in time, and the policy says to fail"
        }
        TerminationReason::ProviderError => {
            "the model provider refused the request (bad key, bad request, unknown model) or kept failing after every retry (an outage); the detail has its last answer"
        }
        TerminationReason::InternalError => {
            "baton failed internally (e.g. the workers' blob store); see the detail and the worker logs"
        }
        TerminationReason::Unspecified => "the run has not ended",
    }
}

/// One or two lines about a finished run, then the answer.
pub(crate) fn result_human(result: &RunResult) -> String {
    let usage = result.usage.unwrap_or_default();
    let mut out = format!(
        "run {}: {} ({}) after {} turn{}, {} tokens\n",
        result.run_id,
        result.status().as_str_name(),
        result.reason().as_str_name(),
        result.turns,
        if result.turns == 1 { "" } else { "s" },
        usage.total_tokens
    );
    if result.reason() != TerminationReason::Completed {
        out.push_str(&format!("why:    {}\n", explain(result.reason())));
    }
    if !result.detail.is_empty() {
        out.push_str(&format!("detail: {}\n", result.detail));
    }
    match answer_of(result) {
        (answer, None) if !answer.is_empty() => {
            out.push('\n');
            out.push_str(answer.trim_end());
            out.push('\n');
        }
        (_, Some(text)) => {
            out.push_str(&format!(
                "last message from the agent (not an answer):\n{}\n",
                text.trim_end()
            ));
        }
        _ => {}
    }
    out
}

/// Multi-line status, with the commands to decide pending calls.
pub(crate) fn status_human(
    run: &str,
    status: &RunStatus,
    source: &str,
    activities: &[InFlight],
) -> String {
    let usage = status.usage.unwrap_or_default();
    let mut out = format!(
        "run:     {run}\nstate:   {}{}\nturn:    {}\ntokens:  {} (in {}, out {})\nlast:    {}\n",
        status.state().as_str_name(),
        if status.reason != 0 {
            format!(" ({})", status.reason().as_str_name())
        } else {
            String::new()
        },
        status.turn,
        usage.total_tokens,
        usage.input_tokens,
        usage.output_tokens,
        status.last_event,
    );
    let ended = matches!(
        status.state(),
        RunState::Completed | RunState::Failed | RunState::Cancelled
    );
    let now = now_ms();
    for a in activities {
        out.push_str(&format!("now:     {}\n", inflight::human(a, now)));
    }
    if source == "memo" && !ended {
        out.push_str("note:    no worker answered; this is the last state the run recorded\n");
    }
    if !status.pending.is_empty() {
        out.push_str("pending approval:\n");
        for p in &status.pending {
            out.push_str(&format!(
                "  {}  {}  {}  (waiting {})\n",
                p.call_id,
                p.tool,
                one_line(&p.arguments, 160),
                ago(p.requested_at_ms)
            ));
        }
        out.push_str(&format!(
            "decide:  baton approve {run} <CALL_ID>|--all   or   baton deny {run} <CALL_ID>|--all --reason \"...\"\n"
        ));
    }
    out
}

/// One event for `watch`, for people. `tokens`: the run's token use up to this event, shown
/// in the turn header when known (live runs).
pub(crate) fn event_human(
    run: &str,
    e: &RunEvent,
    style: &Style,
    tokens: Option<&Usage>,
) -> String {
    match &e.kind {
        Some(run_event::Kind::Assistant(a)) => {
            let header = format!("── turn {} ──", e.turn);
            let mut out = style.bold(&header);
            if let Some(u) = tokens {
                out.push_str(&style.dim(&format!(
                    " {} tokens so far (in {}, out {})",
                    u.total_tokens, u.input_tokens, u.output_tokens
                )));
            }
            out.push('\n');
            if !a.reasoning.trim().is_empty() {
                out.push_str(&style.dim(&format!("(thinking) {}", one_line(&a.reasoning, 200))));
                out.push('\n');
            }
            if !a.text.trim().is_empty() {
                out.push_str(a.text.trim_end());
                out.push('\n');
            }
            for c in &a.tool_calls {
                out.push_str(&format!(
                    "{} {} {}\n",
                    style.cyan(&format!("→ {}", c.name)),
                    one_line(&c.arguments, 200),
                    style.dim(&format!("[{}]", c.id))
                ));
            }
            out
        }
        Some(run_event::Kind::ApprovalRequested(p)) => format!(
            "{} {} awaits approval: baton approve {run} {}  |  baton deny {run} {} --reason \"...\"\n",
            style.yellow(&format!("⏸ {}", p.tool)),
            one_line(&p.arguments, 120),
            p.call_id,
            p.call_id
        ),
        Some(run_event::Kind::ApprovalDecided(d)) => {
            let by = if d.identity.is_empty() {
                d.approver.clone()
            } else {
                format!("{} (identity {})", d.approver, d.identity)
            };
            if d.approved {
                format!(
                    "{} approved by {by}\n",
                    style.green(&format!("✔ {}", d.call_id)),
                )
            } else {
                format!(
                    "{} denied by {by}: {}\n",
                    style.red(&format!("✘ {}", d.call_id)),
                    if d.reason.is_empty() {
                        "no reason given"
                    } else {
                        &d.reason
                    }
                )
            }
        }
        Some(run_event::Kind::ToolStarted(c)) => format!(
            "{} {} running\n",
            style.cyan(&format!("▶ {}", c.name)),
            style.dim(&format!("[{}]", c.id))
        ),
        Some(run_event::Kind::ToolFinished(r)) => {
            let mark = if r.is_error {
                style.red(&format!("✘ {}", r.name))
            } else {
                style.green(&format!("✔ {}", r.name))
            };
            format!(
                "{mark} {} {}\n",
                style.dim(&format!("[{}]", r.call_id)),
                one_line(&r.content, 160)
            )
        }
        Some(run_event::Kind::Finished(r)) => finished_human(r, style, false),
        Some(run_event::Kind::Note(n)) => style.dim(&format!("· {n}")) + "\n",
        None => String::new(),
    }
}

/// The last lines of `watch`: how the run ended, and its answer unless `answer_shown` (the
/// last turn's text, just printed, is the answer).
pub(crate) fn finished_human(r: &RunResult, style: &Style, answer_shown: bool) -> String {
    let shown;
    let r = if answer_shown {
        shown = RunResult {
            answer: String::new(),
            ..r.clone()
        };
        &shown
    } else {
        r
    };
    let text = result_human(r);
    let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let first = format!("■ {first}");
    let first = match r.status() {
        RunState::Completed => style.green(&first),
        RunState::Cancelled => style.yellow(&first),
        _ => style.red(&first),
    };
    format!("{first}\n{rest}")
}

/// One `baton watch --json` line: `{"run_id", "seq", "turn", "at_ms", "kind", <kind>: {..}}`.
/// This schema is a contract (README "`baton watch --json` schema"): add fields, never rename
/// or remove them.
pub(crate) fn event_json(run: &str, e: &RunEvent) -> Option<Value> {
    let (kind, body) = match e.kind.as_ref()? {
        run_event::Kind::Assistant(a) => (
            "assistant",
            json!({
                "text": a.text,
                "reasoning": a.reasoning,
                "finish_reason": finish_reason(a.finish_reason()),
                "tool_calls": a.tool_calls.iter().map(|c| json!({
                    "call_id": c.id,
                    "tool": c.name,
                    "arguments": c.arguments,
                })).collect::<Vec<_>>(),
            }),
        ),
        run_event::Kind::ApprovalRequested(p) => (
            "approval_requested",
            json!({
                "call_id": p.call_id,
                "tool": p.tool,
                "arguments": p.arguments,
                "requested_at_ms": p.requested_at_ms,
            }),
        ),
        run_event::Kind::ApprovalDecided(d) => (
            "approval_decided",
            json!({
                "call_id": d.call_id,
                "approved": d.approved,
                "approver": d.approver,
                "identity": d.identity,
                "reason": d.reason,
                "remember": d.remember,
            }),
        ),
        run_event::Kind::ToolStarted(c) => (
            "tool_started",
            json!({"call_id": c.id, "tool": c.name, "arguments": c.arguments}),
        ),
        run_event::Kind::ToolFinished(r) => (
            "tool_finished",
            json!({
                "call_id": r.call_id,
                "tool": r.name,
                "is_error": r.is_error,
                "content": r.content,
            }),
        ),
        run_event::Kind::Note(n) => ("note", json!({ "text": n })),
        run_event::Kind::Finished(r) => ("finished", finished_body(r)),
    };
    Some(watch_line(
        run,
        json!(e.seq),
        e.turn,
        json!(e.at_ms),
        kind,
        body,
    ))
}

/// The `finished` line built from a run's result, when no worker could replay its events
/// (`seq` and `at_ms` are null).
pub(crate) fn finished_json(run: &str, r: &RunResult) -> Value {
    watch_line(
        run,
        Value::Null,
        r.turns,
        Value::Null,
        "finished",
        finished_body(r),
    )
}

fn watch_line(run: &str, seq: Value, turn: u32, at_ms: Value, kind: &str, body: Value) -> Value {
    let mut map = serde_json::Map::new();
    map.insert("run_id".to_owned(), json!(run));
    map.insert("seq".to_owned(), seq);
    map.insert("turn".to_owned(), json!(turn));
    map.insert("at_ms".to_owned(), at_ms);
    map.insert("kind".to_owned(), json!(kind));
    map.insert(kind.to_owned(), body);
    Value::Object(map)
}

fn finished_body(r: &RunResult) -> Value {
    let u = r.usage.unwrap_or_default();
    let (answer, last_text) = answer_of(r);
    let mut body = json!({
        "status": r.status().as_str_name(),
        "reason": r.reason().as_str_name(),
        "answer": answer,
        "turns": r.turns,
        "usage": {
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "total_tokens": u.total_tokens,
            "llm_calls": u.llm_calls,
        },
        "detail": r.detail,
        "exit_code": exit::for_result(r),
    });
    if let Some(text) = last_text {
        body["last_text"] = json!(text);
    }
    body
}

fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Unspecified => "",
        other => other.as_str_name(),
    }
}

/// `text` on one line, shortened to `max` chars.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    }
}

fn ago(at_ms: i64) -> String {
    duration(((now_ms() - at_ms).max(0) / 1000) as u64)
}

/// Milliseconds since the epoch, now.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// `42s`, `3m 5s`, `2h 10m`.
pub(crate) fn duration(secs: u64) -> String {
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m {}s", secs / 60, secs % 60),
        _ => format!("{}h {}m", secs / 3600, (secs % 3600) / 60),
    }
}

/// The whole conversation for people: every message and the full tool outputs.
pub(crate) fn transcript_human(items: &[baton_proto::Item]) -> String {
    use baton_proto::item::Kind;
    let mut out = String::new();
    let mut turn = 0;
    for entry in items {
        match &entry.kind {
            Some(Kind::User(u)) => {
                let who = if u.synthetic { "baton" } else { "user" };
                out.push_str(&format!("── {who} ──\n{}\n", u.text.trim_end()));
            }
            Some(Kind::Assistant(a)) => {
                turn += 1;
                out.push_str(&format!("── assistant (turn {turn}) ──\n"));
                if !a.text.trim().is_empty() {
                    out.push_str(a.text.trim_end());
                    out.push('\n');
                }
                for c in &a.tool_calls {
                    out.push_str(&format!("→ {} {} [{}]\n", c.name, c.arguments, c.id));
                }
            }
            Some(Kind::ToolResult(r)) => {
                out.push_str(&format!(
                    "── {} [{}]{} ──\n",
                    r.name,
                    r.call_id,
                    if r.is_error { " error" } else { "" }
                ));
                let body = if r.full_output.is_empty() {
                    &r.content
                } else {
                    &r.full_output
                };
                out.push_str(body.trim_end());
                out.push('\n');
            }
            Some(Kind::Stub(stub)) => {
                if stub.kind == "assistant" {
                    turn += 1;
                }
                let what = if stub.tool.is_empty() {
                    stub.kind.clone()
                } else {
                    format!("{} ({})", stub.kind, stub.tool)
                };
                out.push_str(&format!(
                    "── {what}: {} characters, kept only in the blob store ──\n",
                    stub.chars
                ));
            }
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use baton_proto::{
        ApprovalDecision, AssistantMessage, PendingCall, ToolCall, ToolResult, Usage,
    };
    use serde_json::json;

    use super::*;

    fn event(seq: u32, turn: u32, kind: run_event::Kind) -> RunEvent {
        RunEvent {
            seq,
            turn,
            at_ms: 1_700_000_000_000,
            kind: Some(kind),
        }
    }

    fn call() -> ToolCall {
        ToolCall {
            id: "call_1_1".to_owned(),
            name: "shell".to_owned(),
            arguments: r#"{"command":"ls"}"#.to_owned(),
            ..Default::default()
        }
    }

    #[test]
    fn watch_json_lines_have_the_documented_shape() {
        let e = event(
            3,
            1,
            run_event::Kind::Assistant(AssistantMessage {
                text: "Looking.".to_owned(),
                tool_calls: vec![call()],
                finish_reason: FinishReason::ToolCalls as i32,
                reasoning: String::new(),
            }),
        );
        assert_eq!(
            event_json("r1", &e).unwrap(),
            json!({
                "run_id": "r1", "seq": 3, "turn": 1, "at_ms": 1_700_000_000_000_i64,
                "kind": "assistant",
                "assistant": {
                    "text": "Looking.", "reasoning": "", "finish_reason": "tool_calls",
                    "tool_calls": [{"call_id": "call_1_1", "tool": "shell", "arguments": "{\"command\":\"ls\"}"}]
                }
            })
        );
        let body = |kind: run_event::Kind| {
            let v = event_json("r1", &event(4, 1, kind)).unwrap();
            let k = v["kind"].as_str().unwrap().to_owned();
            (k.clone(), v[k.as_str()].clone())
        };
        assert_eq!(
            body(run_event::Kind::ApprovalRequested(PendingCall {
                call_id: "call_1_1".to_owned(),
                tool: "shell".to_owned(),
                arguments: "{}".to_owned(),
                requested_at_ms: 5,
            })),
            (
                "approval_requested".to_owned(),
                json!({"call_id": "call_1_1", "tool": "shell", "arguments": "{}", "requested_at_ms": 5})
            )
        );
        assert_eq!(
            body(run_event::Kind::ApprovalDecided(ApprovalDecision {
                call_id: "call_1_1".to_owned(),
                approved: false,
                approver: "bob".to_owned(),
                reason: "no".to_owned(),
                remember: false,
                identity: String::new(),
            })),
            (
                "approval_decided".to_owned(),
                json!({"call_id": "call_1_1", "approved": false, "approver": "bob", "identity": "", "reason": "no", "remember": false})
            )
        );
        assert_eq!(
            body(run_event::Kind::ToolStarted(call())),
            (
                "tool_started".to_owned(),
                json!({"call_id": "call_1_1", "tool": "shell", "arguments": "{\"command\":\"ls\"}"})
            )
        );
        assert_eq!(
            body(run_event::Kind::ToolFinished(ToolResult {
                call_id: "call_1_1".to_owned(),
                name: "shell".to_owned(),
                content: "exit code: 0".to_owned(),
                is_error: false,
                ..Default::default()
            })),
            (
                "tool_finished".to_owned(),
                json!({"call_id": "call_1_1", "tool": "shell", "is_error": false, "content": "exit code: 0"})
            )
        );
        assert_eq!(
            body(run_event::Kind::Note("run started".to_owned())),
            ("note".to_owned(), json!({"text": "run started"}))
        );
    }

    /// The last message of a run that did not complete is not its answer.
    #[test]
    fn only_a_completed_run_has_an_answer() {
        let mut r = RunResult {
            run_id: "r1".to_owned(),
            status: RunState::Failed as i32,
            reason: TerminationReason::MaxTurnsExceeded as i32,
            answer: "Running the tests now.".to_owned(),
            turns: 50,
            ..Default::default()
        };
        let v = result_json(&r);
        assert_eq!(
            (v["answer"].clone(), v["last_text"].clone()),
            (json!(""), json!("Running the tests now."))
        );
        assert_eq!(
            finished_json("r1", &r)["finished"]["last_text"],
            "Running the tests now."
        );
        assert!(
            result_human(&r)
                .contains("last message from the agent (not an answer):\nRunning the tests now.")
        );
        r.status = RunState::Completed as i32;
        r.reason = TerminationReason::Completed as i32;
        let v = result_json(&r);
        assert_eq!(v["answer"], "Running the tests now.");
        assert!(v.get("last_text").is_none(), "{v}");
    }

    #[test]
    fn the_finished_line_carries_the_result_and_exit_code() {
        let r = RunResult {
            run_id: "r1".to_owned(),
            status: RunState::Cancelled as i32,
            reason: TerminationReason::Cancelled as i32,
            turns: 2,
            usage: Some(Usage {
                input_tokens: 10,
                output_tokens: 5,
                total_tokens: 15,
                llm_calls: 2,
            }),
            detail: "cancelled: why".to_owned(),
            ..Default::default()
        };
        let from_event =
            event_json("r1", &event(9, 2, run_event::Kind::Finished(r.clone()))).unwrap();
        let built = finished_json("r1", &r);
        assert_eq!(from_event["finished"], built["finished"]);
        assert_eq!(
            built,
            json!({
                "run_id": "r1", "seq": null, "turn": 2, "at_ms": null, "kind": "finished",
                "finished": {
                    "status": "CANCELLED", "reason": "cancelled", "answer": "", "turns": 2,
                    "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15, "llm_calls": 2},
                    "detail": "cancelled: why", "exit_code": 4
                }
            })
        );
    }

    #[test]
    fn plain_event_text_has_no_escapes_and_colour_has_them() {
        let e = event(
            1,
            1,
            run_event::Kind::ToolFinished(ToolResult {
                call_id: "c".to_owned(),
                name: "shell".to_owned(),
                content: "boom".to_owned(),
                is_error: true,
                ..Default::default()
            }),
        );
        let plain = event_human("r1", &e, &Style::plain(), None);
        assert_eq!(plain, "✘ shell [c] boom\n");
        let coloured = event_human("r1", &e, &Style::decide(true, None), None);
        assert!(coloured.contains("\x1b[31m"), "{coloured:?}");
        let turn = event(
            2,
            3,
            run_event::Kind::Assistant(AssistantMessage {
                text: "Hi.".to_owned(),
                ..Default::default()
            }),
        );
        let usage = Usage {
            total_tokens: 120,
            input_tokens: 100,
            output_tokens: 20,
            llm_calls: 3,
        };
        assert_eq!(
            event_human("r1", &turn, &Style::plain(), Some(&usage)),
            "── turn 3 ── 120 tokens so far (in 100, out 20)\nHi.\n"
        );
    }
}
