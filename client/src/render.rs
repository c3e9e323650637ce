//! Human and JSON output.

use std::time::{SystemTime, UNIX_EPOCH};

use baton_proto::{RunEvent, RunResult, RunStatus, TerminationReason, run_event};
use serde_json::Value;

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
/// "usage", "detail"}`.
pub(crate) fn result_json(result: &RunResult) -> Value {
    json_with(result, &[])
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
            "the model provider refused the request (bad key, bad request, unknown model); see the detail"
        }
        TerminationReason::InternalError => {
            "baton failed internally; see the detail and the worker logs"
        }
        TerminationReason::Unspecified => "the run has not ended",
    }
}

/// One or two lines about a finished run, then the answer.
pub(crate) fn result_human(result: &RunResult) -> String {
    let usage = result.usage.unwrap_or_default();
    let mut out = format!(
        "run {}: {} ({}) after {} turns, {} tokens\n",
        result.run_id,
        result.status().as_str_name(),
        result.reason().as_str_name(),
        result.turns,
        usage.total_tokens
    );
    if result.reason() != TerminationReason::Completed {
        out.push_str(&format!("why:    {}\n", explain(result.reason())));
    }
    if !result.detail.is_empty() {
        out.push_str(&format!("detail: {}\n", result.detail));
    }
    if !result.answer.is_empty() {
        out.push('\n');
        out.push_str(result.answer.trim_end());
        out.push('\n');
    }
    out
}

/// Multi-line status, with the commands to decide pending calls.
pub(crate) fn status_human(run: &str, status: &RunStatus, source: &str) -> String {
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
    if source == "memo" {
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

/// One event for `watch`.
pub(crate) fn event_human(run: &str, e: &RunEvent) -> String {
    match &e.kind {
        Some(run_event::Kind::Assistant(a)) => {
            let mut out = format!("── turn {} ──\n", e.turn);
            if !a.text.trim().is_empty() {
                out.push_str(a.text.trim_end());
                out.push('\n');
            }
            for c in &a.tool_calls {
                out.push_str(&format!(
                    "→ {} {} [{}]\n",
                    c.name,
                    one_line(&c.arguments, 200),
                    c.id
                ));
            }
            out
        }
        Some(run_event::Kind::ApprovalRequested(p)) => format!(
            "⏸ {} {} awaits approval: baton approve {run} {}  |  baton deny {run} {} --reason \"...\"\n",
            p.tool,
            one_line(&p.arguments, 120),
            p.call_id,
            p.call_id
        ),
        Some(run_event::Kind::ApprovalDecided(d)) => {
            if d.approved {
                format!("✔ {} approved by {}\n", d.call_id, d.approver)
            } else {
                format!("✘ {} denied by {}: {}\n", d.call_id, d.approver, d.reason)
            }
        }
        Some(run_event::Kind::ToolStarted(c)) => format!("▶ {} [{}] running\n", c.name, c.id),
        Some(run_event::Kind::ToolFinished(r)) => format!(
            "{} {} [{}] {}\n",
            if r.is_error { "✘" } else { "✔" },
            r.name,
            r.call_id,
            one_line(&r.content, 160)
        ),
        Some(run_event::Kind::Finished(r)) => format!("■ {}", result_human(r)),
        Some(run_event::Kind::Note(n)) => format!("· {n}\n"),
        None => String::new(),
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
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default();
    duration(((now - at_ms).max(0) / 1000) as u64)
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
            None => {}
        }
    }
    out
}
