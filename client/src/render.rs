//! Output for people (the `--json` objects are in `json.rs`). Everything a model, a tool, a
//! server or another client wrote goes through `safe_text` first: no control character
//! reaches the terminal raw.

use std::time::{SystemTime, UNIX_EPOCH};

use baton_proto::{RunEvent, RunResult, RunState, RunStatus, TerminationReason, Usage, run_event};

use crate::{
    inflight::{self, InFlight},
    safe_text::{escape, escape_line},
    style::Style,
};

/// A run's answer, only when it completed; otherwise the agent's last message, which is not
/// an answer (a CI job reading `.answer` must not take "Running the tests now." for one).
pub(crate) fn answer_of(result: &RunResult) -> (&str, Option<&str>) {
    if result.status() == RunState::Completed {
        (&result.answer, None)
    } else {
        ("", Some(result.answer.as_str()).filter(|t| !t.is_empty()))
    }
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
            "the run hit its token or cost budget or its deadline; raise --max-tokens / --max-cost / the deadline or narrow the task"
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
        TerminationReason::WorkspaceUnavailable => {
            "the run's workspace could not be prepared (git URL, ref or credentials, or a missing snapshot); see the detail"
        }
        TerminationReason::ToolsUnavailable => {
            "an MCP server the run named (--mcp) could not be used at its start; see the detail, check the workers' [mcp.servers] settings, or submit with --mcp-unavailable continue"
        }
        TerminationReason::SetupFailed => {
            "a setup command of the run's environment failed before any model call (or the environment could not be set up); the detail has its output's end"
        }
        TerminationReason::VerificationFailed => {
            "the run's --verify commands still failed after the last round (or could not run); nothing was delivered, the patch is still there (baton diff)"
        }
        TerminationReason::OutputInvalid => {
            "the final answer did not match --output-schema, even after a corrective turn"
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
        escape_line(&result.run_id),
        result.status().as_str_name(),
        result.reason().as_str_name(),
        result.turns,
        if result.turns == 1 { "" } else { "s" },
        usage.total_tokens
    );
    if let Some(cost) = cost_human(&usage) {
        out.push_str(&format!("cost {cost}\n"));
    }
    if result.reason() != TerminationReason::Completed {
        out.push_str(&format!("why:    {}\n", explain(result.reason())));
    }
    if !result.detail.is_empty() {
        out.push_str(&format!("detail: {}\n", escape(&result.detail)));
    }
    match answer_of(result) {
        (answer, None) if !answer.is_empty() => {
            out.push('\n');
            out.push_str(&escape(answer.trim_end()));
            out.push('\n');
        }
        (_, Some(text)) => {
            out.push_str(&format!(
                "last message from the agent (not an answer):\n{}\n",
                escape(text.trim_end())
            ));
        }
        _ => {}
    }
    out.push_str(&verification_human(result));
    out.push_str(&outputs_human(result));
    out
}

/// The verification lines of a result ("" for runs without `--verify`).
fn verification_human(result: &RunResult) -> String {
    let mut out = String::new();
    for v in &result.verification {
        let passed = v.exit_code == 0 && !v.timed_out;
        out.push_str(&format!(
            "{}verified: {} {} ({}, {:.1} s, round {})\n",
            if out.is_empty() { "\n" } else { "" },
            if passed { "✓" } else { "✗" },
            escape_line(&v.command),
            escape_line(&v.status),
            v.duration_ms as f64 / 1000.0,
            v.round
        ));
        if !passed && !v.output_tail.trim().is_empty() {
            for line in v
                .output_tail
                .trim_end()
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
            {
                out.push_str(&format!("    {}\n", escape_line(line)));
            }
        }
    }
    out
}

/// The change set and delivery lines of a result ("" for runs that recorded neither).
fn outputs_human(result: &RunResult) -> String {
    let mut out = String::new();
    let run = escape_line(&result.run_id);
    if let Some(c) = &result.changes {
        out.push('\n');
        if !c.error.is_empty() {
            out.push_str(&format!(
                "changes: could not be collected: {}\n",
                escape(&c.error)
            ));
        } else if c.files_changed == 0 {
            out.push_str("changes: none\n");
        } else {
            out.push_str(&format!(
                "changes: {} file{} changed, +{} -{}  (baton diff {run} | baton apply {run} | baton download {run} DIR)\n",
                c.files_changed,
                if c.files_changed == 1 { "" } else { "s" },
                c.insertions,
                c.deletions
            ));
        }
    }
    if let Some(d) = &result.delivered {
        if !d.error.is_empty() {
            out.push_str(&format!("delivery failed: {}\n", escape(&d.error)));
        } else if d.nothing_to_deliver {
            out.push_str("delivery: nothing changed, nothing pushed\n");
        } else {
            out.push_str(&format!(
                "delivered: branch {} at {}\n",
                escape_line(&d.branch),
                escape_line(&d.commit)
            ));
            if !d.pull_request_url.is_empty() {
                out.push_str(&format!(
                    "pull request: {}\n",
                    escape_line(&d.pull_request_url)
                ));
            }
        }
    }
    out
}

/// An amount of US dollars: to the cent, or to a hundredth of a cent below one cent.
fn usd(amount: f64) -> String {
    if amount >= 0.01 {
        format!("${amount:.2}")
    } else {
        format!("${amount:.4}")
    }
}

/// What a run cost, for people: `~$0.42 (cache read 81%, reasoning 1200 tokens)`; `None`
/// when there is nothing to say (no price and no cache use).
pub(crate) fn cost_human(usage: &Usage) -> Option<String> {
    let mut parts = Vec::new();
    if usage.cache_read_tokens > 0 && usage.input_tokens > 0 {
        let share = f64::from(usage.cache_read_tokens) * 100.0 / f64::from(usage.input_tokens);
        parts.push(format!("cache read {share:.0}%"));
    }
    if usage.cache_write_tokens > 0 {
        parts.push(format!("cache write {} tokens", usage.cache_write_tokens));
    }
    if usage.reasoning_tokens > 0 {
        parts.push(format!("reasoning {} tokens", usage.reasoning_tokens));
    }
    let detail = if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    };
    if usage.cost_usd > 0.0 {
        Some(format!("~{}{detail}", usd(usage.cost_usd)))
    } else if !parts.is_empty() {
        Some(format!(
            "unknown: no price for the model in the workers' [models] table{detail}"
        ))
    } else {
        None
    }
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
        escape_line(&status.last_event),
    );
    if let Some(cost) = cost_human(&usage) {
        out.push_str(&format!("cost:    {cost}\n"));
    }
    if status.task > 0 {
        out.push_str(&format!("task:    {} (a conversation)\n", status.task));
    }
    if status.state() == RunState::Idle {
        out.push_str(&format!(
            "next:    baton send {run} \"...\"  (the run waits for its next task)\n"
        ));
    }
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
                escape_line(&p.call_id),
                escape_line(&p.tool),
                one_line(&p.arguments, 160),
                ago(p.requested_at_ms)
            ));
            if crate::calls::looks_cut(&p.arguments) {
                out.push_str(&format!(
                    "    {}\n",
                    crate::calls::cut_note(run, &p.call_id)
                ));
            }
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
        Some(run_event::Kind::VerificationStarted(v)) => format!(
            "{} {}\n",
            style.cyan(&format!(
                "⧗ verifying ({}/{}, round {}):",
                v.index, v.of, v.round
            )),
            one_line(&v.command, 200)
        ),
        Some(run_event::Kind::VerificationFinished(v)) => {
            let passed = v.exit_code == 0 && !v.timed_out;
            let line = format!(
                "{} {} ({}, {:.1} s)",
                if passed {
                    "✓ verified:"
                } else {
                    "✗ verification failed:"
                },
                one_line(&v.command, 160),
                escape_line(&v.status),
                v.duration_ms as f64 / 1000.0
            );
            let mut out = if passed {
                style.green(&line)
            } else {
                style.red(&line)
            };
            out.push('\n');
            if !passed {
                let tail: Vec<&str> = v.output_tail.trim_end().lines().collect();
                for l in &tail[tail.len().saturating_sub(10)..] {
                    out.push_str(&style.dim(&format!("    {}", escape_line(l))));
                    out.push('\n');
                }
            }
            out
        }
        Some(run_event::Kind::SubagentStarted(s)) => format!(
            "{} {}  (baton watch {})\n",
            style.cyan(&format!("⇢ subagent {} started:", escape_line(&s.run_id))),
            one_line(&s.task, 160),
            escape_line(&s.run_id)
        ),
        Some(run_event::Kind::SubagentFinished(f)) => {
            let o = f.outcome.clone().unwrap_or_default();
            let how = format!(
                "⇠ subagent {} {} after {} turn(s), changes {}",
                escape_line(&o.run_id),
                o.status().as_str_name().to_lowercase(),
                o.turns,
                if o.merge.is_empty() {
                    "unchanged".into()
                } else {
                    escape_line(&o.merge)
                }
            );
            let landed = matches!(o.merge.as_str(), "merged" | "unchanged" | "");
            let how = if o.status() == baton_proto::RunState::Completed && landed {
                style.green(&how)
            } else {
                style.yellow(&how)
            };
            format!("{how}\n")
        }
        Some(run_event::Kind::Assistant(a)) => {
            let header = format!("── turn {} ──", e.turn);
            let mut out = style.bold(&header);
            if let Some(u) = tokens {
                let cost = if u.cost_usd > 0.0 {
                    format!(", ~{}", usd(u.cost_usd))
                } else {
                    String::new()
                };
                out.push_str(&style.dim(&format!(
                    " {} tokens so far (in {}, out {}){cost}",
                    u.total_tokens, u.input_tokens, u.output_tokens
                )));
            }
            out.push('\n');
            if !a.reasoning.trim().is_empty() {
                out.push_str(&style.dim(&format!("(thinking) {}", one_line(&a.reasoning, 200))));
                out.push('\n');
            }
            if !a.text.trim().is_empty() {
                out.push_str(&escape(a.text.trim_end()));
                out.push('\n');
            }
            for c in &a.tool_calls {
                out.push_str(&format!(
                    "{} {} {}\n",
                    style.cyan(&format!("→ {}", escape_line(&c.name))),
                    one_line(&c.arguments, 200),
                    style.dim(&format!("[{}]", escape_line(&c.id)))
                ));
            }
            out
        }
        Some(run_event::Kind::ApprovalRequested(p)) => format!(
            "{} {} awaits approval: baton approve {run} {}  |  baton deny {run} {} --reason \"...\"\n",
            style.yellow(&format!("⏸ {}", escape_line(&p.tool))),
            one_line(&p.arguments, 120),
            escape_line(&p.call_id),
            escape_line(&p.call_id)
        ),
        Some(run_event::Kind::ApprovalDecided(d)) => {
            let by = if d.identity.is_empty() {
                escape_line(&d.approver).into_owned()
            } else {
                format!(
                    "{} (identity {})",
                    escape_line(&d.approver),
                    escape_line(&d.identity)
                )
            };
            let call_id = escape_line(&d.call_id);
            if d.approved {
                format!(
                    "{} approved by {by}\n",
                    style.green(&format!("✔ {call_id}")),
                )
            } else {
                format!(
                    "{} denied by {by}: {}\n",
                    style.red(&format!("✘ {call_id}")),
                    if d.reason.is_empty() {
                        "no reason given".into()
                    } else {
                        escape_line(&d.reason)
                    }
                )
            }
        }
        Some(run_event::Kind::ToolStarted(c)) => format!(
            "{} {} running\n",
            style.cyan(&format!("▶ {}", escape_line(&c.name))),
            style.dim(&format!("[{}]", escape_line(&c.id)))
        ),
        Some(run_event::Kind::ToolFinished(r)) => {
            let name = escape_line(&r.name);
            let mark = if r.is_error {
                style.red(&format!("✘ {name}"))
            } else {
                style.green(&format!("✔ {name}"))
            };
            format!(
                "{mark} {} {}\n{}",
                style.dim(&format!("[{}]", escape_line(&r.call_id))),
                one_line(&r.content, 160),
                network_refusals(r)
                    .lines()
                    .map(|l| style.red(&format!("  {l}")) + "\n")
                    .collect::<String>()
            )
        }
        Some(run_event::Kind::Finished(r)) => finished_human(r, style, false),
        Some(run_event::Kind::Note(n)) => style.dim(&format!("· {}", escape_line(n))) + "\n",
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

/// `text` on one line, shortened to `max` chars: runs of spaces, tabs and newlines become
/// one space, every other control character is shown escaped (`\r`, `\x1b`: see
/// `safe_text`).
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let flat: String = escape(text)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
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

/// One line per connection the proxy refused a call's processes, and how many more.
pub(crate) fn network_refusals(r: &baton_proto::ToolResult) -> String {
    let mut out: String = r
        .network_refusals
        .iter()
        .map(|n| {
            format!(
                "network refused: {}:{} ({}): {}\n",
                escape_line(&n.host),
                n.port,
                escape_line(&n.kind),
                escape_line(&n.reason)
            )
        })
        .collect();
    let more = (r.network_refused as usize).saturating_sub(r.network_refusals.len());
    if more > 0 {
        out.push_str(&format!("network refused: {more} more connections\n"));
    }
    out
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
                out.push_str(&format!("── {who} ──\n{}\n", escape(u.text.trim_end())));
            }
            Some(Kind::Assistant(a)) => {
                turn += 1;
                out.push_str(&format!("── assistant (turn {turn}) ──\n"));
                if !a.text.trim().is_empty() {
                    out.push_str(&escape(a.text.trim_end()));
                    out.push('\n');
                }
                for c in &a.tool_calls {
                    out.push_str(&format!(
                        "→ {} {} [{}]\n",
                        escape_line(&c.name),
                        escape_line(&c.arguments),
                        escape_line(&c.id)
                    ));
                }
            }
            Some(Kind::ToolResult(r)) => {
                out.push_str(&format!(
                    "── {} [{}]{} ──\n",
                    escape_line(&r.name),
                    escape_line(&r.call_id),
                    if r.is_error { " error" } else { "" }
                ));
                let body = if r.full_output.is_empty() {
                    &r.content
                } else {
                    &r.full_output
                };
                out.push_str(&escape(body.trim_end()));
                out.push('\n');
                out.push_str(&network_refusals(r));
            }
            Some(Kind::Stub(stub)) => {
                if stub.kind == "assistant" {
                    turn += 1;
                }
                let what = if stub.tool.is_empty() {
                    escape_line(&stub.kind).into_owned()
                } else {
                    format!("{} ({})", escape_line(&stub.kind), escape_line(&stub.tool))
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
    use baton_proto::{AssistantMessage, ToolResult, Usage};
    use pretty_assertions::assert_eq;

    use super::*;

    fn event(seq: u32, turn: u32, kind: run_event::Kind) -> RunEvent {
        RunEvent {
            seq,
            turn,
            at_ms: 1_700_000_000_000,
            kind: Some(kind),
        }
    }

    /// The last message of a run that did not complete is not its answer (the JSON side:
    /// `json_tests.rs`).
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
        assert_eq!(answer_of(&r), ("", Some("Running the tests now.")));
        assert!(
            result_human(&r)
                .contains("last message from the agent (not an answer):\nRunning the tests now.")
        );
        r.status = RunState::Completed as i32;
        r.reason = TerminationReason::Completed as i32;
        assert_eq!(answer_of(&r), ("Running the tests now.", None));
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
            ..Default::default()
        };
        assert_eq!(
            event_human("r1", &turn, &Style::plain(), Some(&usage)),
            "── turn 3 ── 120 tokens so far (in 100, out 20)\nHi.\n"
        );
        let priced = Usage {
            cost_usd: 0.4217,
            ..usage
        };
        assert_eq!(
            event_human("r1", &turn, &Style::plain(), Some(&priced)),
            "── turn 3 ── 120 tokens so far (in 100, out 20), ~$0.42\nHi.\n"
        );
    }

    /// Review #9a: model text and tool output reach the terminal escaped (an OSC 52
    /// clipboard write, a line erase, a bidi override), newlines of a block kept.
    #[test]
    fn model_text_and_tool_output_are_shown_escaped() {
        let output = "ok\x1b]52;c;cHduZWQ=\x07\r\x1b[2Kfake \u{202e}x";
        let finished = event(
            1,
            1,
            run_event::Kind::ToolFinished(ToolResult {
                call_id: "c".to_owned(),
                name: "shell".to_owned(),
                content: output.to_owned(),
                ..Default::default()
            }),
        );
        assert_eq!(
            event_human("r1", &finished, &Style::plain(), None),
            "✔ shell [c] ok\\x1b]52;c;cHduZWQ=\\x07\\r\\x1b[2Kfake \\u{202e}x\n"
        );
        let turn = event(
            2,
            1,
            run_event::Kind::Assistant(AssistantMessage {
                text: "line one\nline\x1b[1A two".to_owned(),
                ..Default::default()
            }),
        );
        assert_eq!(
            event_human("r1", &turn, &Style::plain(), None),
            "── turn 1 ──\nline one\nline\\x1b[1A two\n"
        );
        let items = [baton_proto::Item {
            kind: Some(baton_proto::item::Kind::ToolResult(ToolResult {
                call_id: "c".to_owned(),
                name: "shell".to_owned(),
                content: format!("{output}\nsecond line"),
                ..Default::default()
            })),
        }];
        let shown = transcript_human(&items);
        assert!(
            !shown.contains(['\x1b', '\r', '\x07', '\u{202e}']),
            "{shown:?}"
        );
        assert!(
            shown.ends_with("fake \\u{202e}x\nsecond line\n"),
            "{shown:?}"
        );
    }

    #[test]
    fn the_cost_line_shows_the_estimate_and_the_cache_share() {
        let usage = Usage {
            input_tokens: 10_000,
            output_tokens: 500,
            total_tokens: 10_500,
            cache_read_tokens: 8_100,
            cost_usd: 0.4249,
            ..Default::default()
        };
        assert_eq!(
            cost_human(&usage).as_deref(),
            Some("~$0.42 (cache read 81%)")
        );
        let cheap = Usage {
            cache_read_tokens: 0,
            cache_write_tokens: 2_000,
            reasoning_tokens: 64,
            cost_usd: 0.00123,
            ..usage
        };
        assert_eq!(
            cost_human(&cheap).as_deref(),
            Some("~$0.0012 (cache write 2000 tokens, reasoning 64 tokens)")
        );
        let unpriced = Usage {
            cost_usd: 0.0,
            ..usage
        };
        assert_eq!(
            cost_human(&unpriced).as_deref(),
            Some("unknown: no price for the model in the workers' [models] table (cache read 81%)")
        );
        assert_eq!(cost_human(&Usage::default()), None);
        let mut result = RunResult {
            run_id: "r1".to_owned(),
            status: RunState::Completed as i32,
            reason: TerminationReason::Completed as i32,
            turns: 3,
            usage: Some(usage),
            ..Default::default()
        };
        let shown = result_human(&result);
        assert!(
            shown.contains("after 3 turns, 10500 tokens\ncost ~$0.42 (cache read 81%)\n"),
            "{shown}"
        );
        result.usage = None;
        assert!(!result_human(&result).contains("cost"));
    }
}
