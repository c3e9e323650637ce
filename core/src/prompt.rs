//! The system prompt builder: base role text, the workspace path and today's date (from
//! workflow time, so it is the same on replay), the workspace's AGENTS.md, then the run's extra
//! instructions.

use baton_proto::{SandboxPolicy, WorkspaceInstructions};

/// The base role text.
pub const BASE_PROMPT: &str = "You are baton, an autonomous software agent. You work in a \
private workspace directory through the tools you are given: inspect before you change, keep \
changes small, and check your work. Some tool calls wait for a human's approval; if one is \
denied, respect the reason and find another way. When the task is done, reply with a short \
summary of what you did and found, without calling tools.";

/// The system prompt of a run.
pub fn build(
    started_at_ms: i64,
    instructions: Option<&WorkspaceInstructions>,
    sandbox: Option<&SandboxPolicy>,
    extra: &str,
    output_schema: &str,
) -> String {
    let mut prompt = String::from(BASE_PROMPT);
    if let Some(ws) = instructions.filter(|w| !w.workspace.is_empty()) {
        prompt.push_str(&format!(
            "\n\nYour workspace is {}; tool paths are relative to it.",
            ws.workspace
        ));
    }
    if let Some(limits) = sandbox_text(sandbox) {
        prompt.push(' ');
        prompt.push_str(&limits);
    }
    prompt.push_str(&format!("\nToday's date is {}.", date(started_at_ms)));
    if let Some(ws) = instructions.filter(|w| !w.agents_md.trim().is_empty()) {
        prompt.push_str(
            "\n\nThe workspace's AGENTS.md (instructions from its maintainers) follows.\n\n",
        );
        prompt.push_str(ws.agents_md.trim_end());
        if ws.truncated {
            prompt.push_str("\n[AGENTS.md was cut at 32 KiB]");
        }
    }
    if !extra.trim().is_empty() {
        prompt.push_str("\n\nInstructions for this run:\n");
        prompt.push_str(extra.trim_end());
    }
    if !output_schema.trim().is_empty() {
        prompt.push_str(
            "\n\nYour final answer (the reply in which you call no tools) must be a single JSON \
             value matching this JSON Schema, with nothing before or after it:\n",
        );
        prompt.push_str(output_schema.trim());
    }
    prompt
}

/// What the model is told about the run's MCP tools (runs with MCP servers only).
pub fn mcp_text(servers: &[&str]) -> String {
    format!(
        "\n\nTools named mcp__<server>__<tool> come from MCP servers ({}). They act on the \
         systems those servers reach, not on your workspace: their paths and effects are the \
         server's, and changes they make are real and not part of your workspace's changes.",
        servers.join(", ")
    )
}

/// What the sandbox lets shell commands do, so that the model neither retries what it forbids
/// nor mistakes its refusals for bugs. `None` without a sandbox (`off`).
fn sandbox_text(sandbox: Option<&SandboxPolicy>) -> Option<String> {
    let default = SandboxPolicy::default();
    let p = sandbox.unwrap_or(&default);
    let writes = match p.mode.as_str() {
        "off" => return None,
        "read-only" => "can write nothing but a private temporary directory ($TMPDIR)",
        _ => "can write only inside the workspace and a private temporary directory ($TMPDIR)",
    };
    let network = if !p.allowed_hosts.is_empty() {
        format!(
            "may reach only these hosts, over HTTP and HTTPS through a proxy that http_proxy and \
             https_proxy already point to: {}; the proxy refuses anything else with HTTP 403 and \
             a reason, and direct connections fail{}",
            p.allowed_hosts.join(", "),
            if p.on_unknown_host() == baton_proto::sandbox_policy::OnUnknownHost::Ask {
                " (a refused host is put to a human, who may allow it: the decision comes \
                 before your next turn)"
            } else {
                ""
            }
        )
    } else if p.network {
        "may reach public hosts over HTTP and HTTPS through a proxy that http_proxy and \
         https_proxy already point to (loopback, private and link-local addresses are refused \
         with HTTP 403, and direct connections fail)"
            .to_owned()
    } else {
        "have no network access".to_owned()
    };
    Some(format!(
        "Shell commands run in a sandbox: they {writes}, cannot read other runs' files, and \
         {network}. A \"Permission denied\" or a failed connection that comes from these limits \
         will not go away on a retry: work within them, or say in your answer what a human \
         should do."
    ))
}

/// `YYYY-MM-DD` (UTC) of a Unix time in milliseconds.
pub fn date(unix_ms: i64) -> String {
    let days = unix_ms.div_euclid(86_400_000);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(951_782_400_000), "2000-02-29");
        assert_eq!(date(1_796_083_200_000), "2026-12-01");
        assert_eq!(date(1_796_083_199_999), "2026-11-30");
    }

    #[test]
    fn sections_in_order() {
        let ws = WorkspaceInstructions {
            workspace: "/w/run-1".into(),
            agents_md: "Run `make test` before you finish.".into(),
            truncated: true,
            ..Default::default()
        };
        let p = build(0, Some(&ws), None, "Only touch docs/.", "");
        let i_base = p.find("You are baton").unwrap();
        let i_ws = p.find("Your workspace is /w/run-1").unwrap();
        let i_date = p.find("Today's date is 1970-01-01").unwrap();
        let i_agents = p.find("Run `make test`").unwrap();
        let i_cut = p.find("cut at 32 KiB").unwrap();
        let i_extra = p.find("Only touch docs/.").unwrap();
        assert!(i_base < i_ws && i_ws < i_date && i_date < i_agents);
        assert!(i_agents < i_cut && i_cut < i_extra);
        let bare = build(0, None, None, "", "");
        assert!(!bare.contains("AGENTS.md") && !bare.contains("Instructions for this run"));
        // The default sandbox is described; `off` is not.
        assert!(bare.contains("write only inside the workspace") && bare.contains("no network"));
        let open = SandboxPolicy {
            mode: "read-only".into(),
            network: true,
            ..Default::default()
        };
        let p = build(0, None, Some(&open), "", "");
        assert!(
            p.contains("write nothing but") && p.contains("may reach public hosts"),
            "{p}"
        );
        let off = SandboxPolicy {
            mode: "off".into(),
            ..Default::default()
        };
        assert!(!build(0, None, Some(&off), "", "").contains("sandbox"));
    }
}
