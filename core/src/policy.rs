//! The approval policy: a pure decision, per tool call, taken before anything of a batch runs.
//!
//! Order of precedence for a call:
//! 1. rules remembered from approvals with `remember: true` (allow);
//! 2. the policy's `rules`, in order: the first rule whose tool and pattern match decides;
//! 3. `require_approval` (tool names, MCP tool patterns such as `mcp__*` or `mcp__github__*`,
//!    or `*`; never a read-only tool): ask;
//! 4. otherwise allow (read-only tools always end here unless a rule named them).
//!
//! In `never_ask` mode (CI), anything that would ask a human is rejected with a reason the
//! model sees, so the run never blocks.

use baton_proto::{ApprovalPolicy, ApproverRule, ToolCall, ToolDefinition, ToolRule};

use crate::tools;

/// Policy mode: calls that need a human wait for one.
pub const MODE_SUPERVISED: &str = "supervised";
/// Policy mode for unattended runs: calls that need a human are denied at once.
pub const MODE_NEVER_ASK: &str = "never_ask";
/// Rule actions.
pub const ALLOW: &str = "allow";
/// Rule action: ask a human.
pub const ASK: &str = "ask";
/// Rule action: refuse.
pub const DENY: &str = "deny";

/// What the policy says about one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assessment {
    /// Run it without asking.
    AutoApprove,
    /// A human must approve it first.
    AskHuman,
    /// Never run it; the model is told why.
    Reject {
        /// Shown to the model as the call's error result.
        reason: String,
    },
}

/// Checks a policy's data before a run starts; the error says what to fix.
pub fn validate(policy: &ApprovalPolicy) -> Result<(), String> {
    if !matches!(policy.mode.as_str(), "" | MODE_SUPERVISED | MODE_NEVER_ASK) {
        return Err(format!(
            "unknown policy mode '{}'; use \"{MODE_SUPERVISED}\" or \"{MODE_NEVER_ASK}\"",
            policy.mode
        ));
    }
    for (i, rule) in policy.rules.iter().enumerate() {
        if !matches!(rule.action.as_str(), ALLOW | ASK | DENY) {
            return Err(format!(
                "rule {} ({} {}): unknown action '{}'; use allow, ask or deny",
                i + 1,
                rule.tool,
                rule.pattern,
                rule.action
            ));
        }
        if rule.tool != "*" && !known_tool(&rule.tool) {
            return Err(format!(
                "rule {}: unknown tool '{}'; use one of {}, an MCP tool pattern (mcp__*, \
                 mcp__<server>__*, mcp__<server>__<tool>) or *",
                i + 1,
                rule.tool,
                tools::BUILTIN_TOOLS.join(", ")
            ));
        }
    }
    for (i, rule) in policy.approvers.iter().enumerate() {
        let pseudo = [
            crate::machine::QUESTION_TOOL,
            crate::machine::ALLOW_HOST_TOOL,
        ];
        if rule.tool != "*" && !pseudo.contains(&rule.tool.as_str()) && !known_tool(&rule.tool) {
            return Err(format!(
                "approvers entry {}: unknown tool '{}'; use one of {}, {}, an MCP tool pattern \
                 (mcp__*, mcp__<server>__*, mcp__<server>__<tool>) or *",
                i + 1,
                rule.tool,
                tools::BUILTIN_TOOLS.join(", "),
                pseudo.join(", ")
            ));
        }
        if rule.identities.is_empty() {
            return Err(format!(
                "approvers entry {} ({}): no identities; list the client identities (patterns \
                 with * and ?) that may decide its calls",
                i + 1,
                rule.tool
            ));
        }
    }
    if let Some(loops) = &policy.loops
        && baton_proto::loop_policy::OnLoop::try_from(loops.on_loop).is_err()
    {
        return Err(format!(
            "unknown loops.on_loop value {}; use \"stop\" or \"ask\"",
            loops.on_loop
        ));
    }
    Ok(())
}

/// Whether a decision sent by client `identity` may decide a call of `tool`: the first
/// `approvers` entry naming the tool (or `*`) decides; no entry means anyone may. On refusal,
/// returns the patterns that would have been allowed.
pub fn may_decide(
    approvers: &[ApproverRule],
    tool: &str,
    identity: &str,
) -> Result<(), Vec<String>> {
    let Some(rule) = approvers.iter().find(|r| tool_matches(&r.tool, tool)) else {
        return Ok(());
    };
    if rule
        .identities
        .iter()
        .any(|p| identity_matches(p, identity))
    {
        Ok(())
    } else {
        Err(rule.identities.clone())
    }
}

/// Prefix of approver patterns that name a GitHub team (`github-team:<org>/<team>`).
pub const GITHUB_TEAM: &str = "github-team:";

/// Whether an `approvers` pattern takes `identity`: as a wildcard, or, for a team pattern
/// `github-team:<org>/<team>`, a member's identity `github-team:<org>/<team>/<login>` (what
/// `baton serve` decides as once GitHub says the commenter is in that team).
fn identity_matches(pattern: &str, identity: &str) -> bool {
    if wildcard(pattern, identity) {
        return true;
    }
    pattern.starts_with(GITHUB_TEAM)
        && identity
            .strip_prefix(pattern)
            .and_then(|rest| rest.strip_prefix('/'))
            .is_some_and(|login| !login.is_empty() && !login.contains('/'))
}

/// Decides whether `call` (to the tool `tool`) may run, must wait for a human, or is refused.
///
/// How rules match shell commands: an `allow` rule (or a remembered approval) for `shell`
/// matches only a simple command, one with no `;`, `&`, `|`, redirection, command substitution
/// or subshell outside quotes (a pattern that is empty or `*` still allows anything); `deny`
/// and `ask` rules match the whole command or any part of a compound one; a pattern ending in
/// ` *` also matches its prefix alone (`git status *` matches `git status`).
pub fn assess(
    call: &ToolCall,
    tool: &ToolDefinition,
    policy: &ApprovalPolicy,
    remembered: &[ToolRule],
) -> Assessment {
    let subject = subject(call);
    let shell = (tool.name == tools::SHELL).then(|| ShellCommand::parse(&subject));
    let decided = remembered
        .iter()
        .chain(policy.rules.iter())
        .find(|r| match &shell {
            None => rule_matches(r, &tool.name, &subject),
            Some(command) => shell_rule_matches(r, command, &subject),
        });
    let assessment = match decided {
        Some(rule) => match rule.action.as_str() {
            ALLOW => Assessment::AutoApprove,
            DENY => Assessment::Reject {
                reason: if rule.reason.is_empty() {
                    format!(
                        "The policy of this run forbids this call (rule: {} {}). It did not \
                         run; do something else.",
                        rule.tool,
                        if rule.pattern.is_empty() {
                            "*"
                        } else {
                            &rule.pattern
                        }
                    )
                } else {
                    format!("The policy of this run forbids this call: {}", rule.reason)
                },
            },
            _ => Assessment::AskHuman,
        },
        None => {
            let listed = policy.require_approval.iter().any(|name| {
                tool_matches(name, &tool.name)
                        && !tool.read_only
                        // A subagent asks for its own calls; "*" does not also ask for the
                        // delegation (naming `spawn_agent` does).
                        && !(name == "*" && tool.name == tools::SPAWN_AGENT)
            });
            if listed {
                Assessment::AskHuman
            } else {
                Assessment::AutoApprove
            }
        }
    };
    // The matched field was cut for history (the exact arguments are in the blob store): a
    // rule may have matched what was cut, so nothing is allowed without a human.
    let cut = call.cut.as_ref().is_some_and(|c| c.subject_cut);
    let assessment = if cut && assessment == Assessment::AutoApprove {
        Assessment::AskHuman
    } else {
        assessment
    };
    if assessment == Assessment::AskHuman && policy.mode == MODE_NEVER_ASK {
        return Assessment::Reject {
            reason: format!(
                "This run cannot ask a human (policy mode never_ask), and '{}' needs approval \
                 here, so the call was denied without running. Find a way that needs no \
                 approval, or finish and explain what a human should do.",
                tool.name
            ),
        };
    }
    assessment
}

/// The rule to remember after a human approved `call` with `remember: true`: the same tool and
/// the same command prefix (shell: program and first argument, `ls *`, never `lsblk`) or the
/// same path. `None` when there is nothing to tie the rule to (no command or path).
pub fn remembered_rule(call: &ToolCall) -> Option<ToolRule> {
    let subject = subject(call);
    let pattern = if call.name == tools::SHELL {
        // Words with wildcard characters would widen the rule; stop before them.
        let words: Vec<&str> = subject
            .split_whitespace()
            .take(2)
            .take_while(|w| !w.contains(['*', '?']))
            .collect();
        if words.is_empty() {
            return None;
        }
        format!("{} *", words.join(" "))
    } else if crate::mcp::is_mcp_name(&call.name) && subject.is_empty() {
        // An MCP tool without a path: the approval covers the tool.
        String::new()
    } else if subject.is_empty() || subject.contains(['*', '?']) {
        return None;
    } else {
        subject
    };
    Some(ToolRule {
        tool: call.name.clone(),
        pattern,
        action: ALLOW.to_owned(),
        reason: "remembered approval".to_owned(),
    })
}

/// What a rule's pattern is matched against: the shell command, or a file tool's path.
fn subject(call: &ToolCall) -> String {
    let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap_or_default();
    let key = if call.name == tools::SHELL {
        "command"
    } else {
        "path"
    };
    args.get(key)
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn rule_matches(rule: &ToolRule, tool: &str, subject: &str) -> bool {
    tool_matches(&rule.tool, tool) && (rule.pattern.is_empty() || wildcard(&rule.pattern, subject))
}

/// Whether a rule's tool field (a name, `*`, or an MCP tool pattern such as `mcp__*` or
/// `mcp__github__*`) covers `tool`.
pub fn tool_matches(pattern: &str, tool: &str) -> bool {
    pattern == "*"
        || pattern == tool
        || (crate::mcp::is_tool_pattern(pattern) && wildcard(pattern, tool))
}

/// A built-in tool's name or an MCP tool pattern (the run's MCP tools are known only once
/// their servers are listed).
fn known_tool(name: &str) -> bool {
    tools::definition(name).is_some() || crate::mcp::is_tool_pattern(name)
}

/// How a rule matches a shell command (see [`assess`]).
fn shell_rule_matches(rule: &ToolRule, command: &ShellCommand, text: &str) -> bool {
    if rule.tool != "*" && rule.tool != tools::SHELL {
        return false;
    }
    if rule.pattern.is_empty() || rule.pattern == "*" {
        return true;
    }
    let matches = |text: &str| {
        wildcard(&rule.pattern, text)
            || rule
                .pattern
                .strip_suffix(" *")
                .is_some_and(|prefix| wildcard(prefix, text))
    };
    if rule.action == ALLOW {
        command.simple && matches(text)
    } else {
        matches(text) || command.parts.iter().any(|part| matches(part))
    }
}

/// A shell command as far as rules care: whether it is one simple command, and its parts
/// (the text between control operators, trimmed).
#[derive(Debug, PartialEq, Eq)]
struct ShellCommand {
    /// No control operator (`;`, `&`, `|`, newline), redirection (`<`, `>`), subshell
    /// (`(`, `)`), command substitution (`$(`, backquote) or unterminated quote outside
    /// quotes (substitutions count inside double quotes too).
    simple: bool,
    parts: Vec<String>,
}

impl ShellCommand {
    fn parse(command: &str) -> Self {
        let mut simple = true;
        let mut parts = Vec::new();
        let mut part = String::new();
        let (mut single, mut double) = (false, false);
        let mut chars = command.chars().peekable();
        while let Some(c) = chars.next() {
            if single {
                single = c != '\'';
                part.push(c);
                continue;
            }
            match c {
                '\\' => {
                    part.push(c);
                    if let Some(next) = chars.next() {
                        part.push(next);
                    }
                }
                '\'' if !double => {
                    single = true;
                    part.push(c);
                }
                '"' => {
                    double = !double;
                    part.push(c);
                }
                '`' => {
                    simple = false;
                    part.push(c);
                }
                '$' if chars.peek() == Some(&'(') => {
                    simple = false;
                    part.push(c);
                }
                ';' | '&' | '|' | '\n' | '\r' | '(' | ')' if !double => {
                    simple = false;
                    parts.push(std::mem::take(&mut part));
                }
                '<' | '>' if !double => {
                    simple = false;
                    part.push(c);
                }
                _ => part.push(c),
            }
        }
        if single || double {
            simple = false;
        }
        parts.push(part);
        let parts = parts
            .into_iter()
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .collect();
        Self { simple, parts }
    }
}

/// `*` matches any run of characters (including none), `?` exactly one; everything else
/// literally.
pub fn wildcard(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments: args.into(),
            ..Default::default()
        }
    }

    fn shell(cmd: &str) -> ToolCall {
        call("shell", &serde_json::json!({ "command": cmd }).to_string())
    }

    fn rule(tool: &str, pattern: &str, action: &str) -> ToolRule {
        ToolRule {
            tool: tool.into(),
            pattern: pattern.into(),
            action: action.into(),
            reason: String::new(),
        }
    }

    fn policy(names: &[&str], rules: Vec<ToolRule>) -> ApprovalPolicy {
        ApprovalPolicy {
            require_approval: names.iter().map(|s| s.to_string()).collect(),
            rules,
            ..Default::default()
        }
    }

    fn def(name: &str) -> ToolDefinition {
        tools::definition(name).unwrap()
    }

    #[test]
    fn listed_tools_ask_a_human() {
        let sh = def(tools::SHELL);
        assert_eq!(
            assess(&shell("ls"), &sh, &policy(&["shell"], vec![]), &[]),
            Assessment::AskHuman
        );
        assert_eq!(
            assess(&shell("ls"), &sh, &policy(&[], vec![]), &[]),
            Assessment::AutoApprove
        );
        assert_eq!(
            assess(&shell("ls"), &sh, &policy(&["*"], vec![]), &[]),
            Assessment::AskHuman
        );
    }

    #[test]
    fn read_only_tools_are_allowed_unless_a_rule_says_otherwise() {
        let read = def(tools::READ_FILE);
        let c = call("read_file", r#"{"path":"secrets/key.pem"}"#);
        assert_eq!(
            assess(&c, &read, &policy(&["*"], vec![]), &[]),
            Assessment::AutoApprove
        );
        let p = policy(&[], vec![rule("read_file", "secrets/*", "deny")]);
        assert!(matches!(
            assess(&c, &read, &p, &[]),
            Assessment::Reject { .. }
        ));
        let other = call("read_file", r#"{"path":"src/main.rs"}"#);
        assert_eq!(assess(&other, &read, &p, &[]), Assessment::AutoApprove);
    }

    #[test]
    fn shell_rules_match_in_order_first_wins() {
        let sh = def(tools::SHELL);
        let p = policy(
            &[],
            vec![
                rule("shell", "git status*", "allow"),
                rule("shell", "cargo test*", "allow"),
                rule("shell", "rm -rf /*", "deny"),
                rule("shell", "", "ask"),
            ],
        );
        assert_eq!(
            assess(&shell("git status --short"), &sh, &p, &[]),
            Assessment::AutoApprove
        );
        assert_eq!(
            assess(&shell("cargo test -p x"), &sh, &p, &[]),
            Assessment::AutoApprove
        );
        assert!(matches!(
            assess(&shell("rm -rf /usr"), &sh, &p, &[]),
            Assessment::Reject { reason } if reason.contains("rm -rf /*")
        ));
        // Near misses fall through to the catch-all.
        assert_eq!(
            assess(&shell("git push"), &sh, &p, &[]),
            Assessment::AskHuman
        );
        assert_eq!(
            assess(&shell("rm -rf build"), &sh, &p, &[]),
            Assessment::AskHuman
        );
        // Order matters: a deny before an allow wins.
        let p = policy(
            &[],
            vec![
                rule("shell", "git*", "deny"),
                rule("shell", "git status*", "allow"),
            ],
        );
        assert!(matches!(
            assess(&shell("git status"), &sh, &p, &[]),
            Assessment::Reject { .. }
        ));
    }

    #[test]
    fn never_ask_turns_asks_into_rejections_the_model_sees() {
        let sh = def(tools::SHELL);
        let mut p = policy(&["shell"], vec![rule("shell", "echo *", "allow")]);
        p.mode = MODE_NEVER_ASK.into();
        assert_eq!(
            assess(&shell("echo hi"), &sh, &p, &[]),
            Assessment::AutoApprove
        );
        match assess(&shell("make deploy"), &sh, &p, &[]) {
            Assessment::Reject { reason } => assert!(reason.contains("never_ask"), "{reason}"),
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn remembered_approvals_allow_the_same_pattern() {
        let sh = def(tools::SHELL);
        let p = policy(&["shell", "edit_file"], vec![]);
        let remembered = vec![remembered_rule(&shell("cargo test --lib")).unwrap()];
        assert_eq!(remembered[0].pattern, "cargo test *");
        assert_eq!(
            assess(&shell("cargo test -p other"), &sh, &p, &remembered),
            Assessment::AutoApprove
        );
        assert_eq!(
            assess(&shell("cargo build"), &sh, &p, &remembered),
            Assessment::AskHuman
        );
        let edit = call(
            "edit_file",
            r#"{"path":"src/lib.rs","old_text":"a","new_text":"b"}"#,
        );
        let remembered = vec![remembered_rule(&edit).unwrap()];
        let edit_def = def(tools::EDIT_FILE);
        let again = call(
            "edit_file",
            r#"{"path":"src/lib.rs","old_text":"c","new_text":"d"}"#,
        );
        let other = call(
            "edit_file",
            r#"{"path":"src/main.rs","old_text":"c","new_text":"d"}"#,
        );
        assert_eq!(
            assess(&again, &edit_def, &p, &remembered),
            Assessment::AutoApprove
        );
        assert_eq!(
            assess(&other, &edit_def, &p, &remembered),
            Assessment::AskHuman
        );
    }

    fn strict(call: &ToolCall, policy: &ApprovalPolicy, remembered: &[ToolRule]) -> Assessment {
        assess(call, &def(tools::SHELL), policy, remembered)
    }

    /// A remembered `ls` approval allows `ls -la`, never `lsblk`, a chained `ls; rm` or an
    /// `ls` with a substitution.
    #[test]
    fn remembered_approvals_allow_only_simple_commands_with_the_same_words() {
        let p = policy(&["shell"], vec![]);
        let remembered = vec![remembered_rule(&shell("ls")).unwrap()];
        assert_eq!(remembered[0].pattern, "ls *");
        for allowed in ["ls", "ls -la", "ls 'a;b'", "ls \"x|y\"", "ls a\\;b"] {
            assert_eq!(
                strict(&shell(allowed), &p, &remembered),
                Assessment::AutoApprove,
                "{allowed}"
            );
        }
        for asked in [
            "lsblk",
            "ls; echo PWNED > pwned.txt",
            "ls && rm -rf .",
            "ls | sh",
            "ls > /tmp/x",
            "ls $(rm -rf .)",
            "ls \"$(rm -rf .)\"",
            "ls `rm -rf .`",
            "ls &",
            "ls\nrm -rf .",
            "ls 'unterminated",
        ] {
            assert_eq!(
                strict(&shell(asked), &p, &remembered),
                Assessment::AskHuman,
                "{asked}"
            );
        }
        let two = remembered_rule(&shell("cargo test --lib")).unwrap();
        assert_eq!(two.pattern, "cargo test *");
        let wild = remembered_rule(&shell("rm *.tmp")).unwrap();
        assert_eq!(
            wild.pattern, "rm *",
            "wildcard words are not part of the rule"
        );
        // Nothing to tie a rule to: nothing is remembered (it would allow every call).
        assert_eq!(remembered_rule(&shell("  ")), None);
        assert_eq!(remembered_rule(&call("shell", "{}")), None);
        assert_eq!(
            remembered_rule(&call("write_file", r#"{"content":"x"}"#)),
            None
        );
    }

    /// Policy rules under strict matching: allow needs a simple command (unless the pattern
    /// allows everything), deny and ask see every part of a compound command.
    #[test]
    fn strict_shell_rules_see_through_compound_commands() {
        let p = policy(
            &["shell"],
            vec![
                rule("shell", "rm *", "deny"),
                rule("shell", "git status *", "allow"),
                rule("shell", "make*", "ask"),
                rule("shell", "echo *", "allow"),
            ],
        );
        assert_eq!(
            strict(&shell("git status"), &p, &[]),
            Assessment::AutoApprove
        );
        assert_eq!(
            strict(&shell("git status -s"), &p, &[]),
            Assessment::AutoApprove
        );
        assert_eq!(
            strict(&shell("git status; git push"), &p, &[]),
            Assessment::AskHuman
        );
        assert!(matches!(
            strict(&shell("cd build && rm -rf /"), &p, &[]),
            Assessment::Reject { .. }
        ));
        assert!(matches!(
            strict(&shell("echo hi | rm -rf x"), &p, &[]),
            Assessment::Reject { .. }
        ));
        assert_eq!(
            strict(&shell("echo start; make deploy"), &p, &[]),
            Assessment::AskHuman
        );
        // A pattern that allows everything still does, compound or not.
        let all = policy(&["shell"], vec![rule("shell", "*", "allow")]);
        assert_eq!(
            strict(&shell("a; b | c > d"), &all, &[]),
            Assessment::AutoApprove
        );
        assert_eq!(
            ShellCommand::parse("a 'x;y' \"p|q\" && b ; c"),
            ShellCommand {
                simple: false,
                parts: vec!["a 'x;y' \"p|q\"".into(), "b".into(), "c".into()]
            }
        );
    }

    #[test]
    fn a_team_pattern_takes_its_members_identities_only() {
        let rule = ApproverRule {
            tool: "shell".into(),
            identities: vec!["github-team:acme/reviewers".into()],
        };
        let rules = [rule];
        assert!(may_decide(&rules, "shell", "github-team:acme/reviewers/carol").is_ok());
        assert!(may_decide(&rules, "shell", "github:carol").is_err());
        assert!(may_decide(&rules, "shell", "github-team:acme/reviewers-2/carol").is_err());
        assert!(may_decide(&rules, "shell", "github-team:acme/reviewers/a/b").is_err());
    }

    #[test]
    fn wildcards() {
        assert!(wildcard("git status*", "git status"));
        assert!(wildcard("git status*", "git status -s"));
        assert!(!wildcard("git status*", "git statu"));
        assert!(wildcard("*.rs", "src/main.rs"));
        assert!(wildcard("a?c", "abc"));
        assert!(!wildcard("a?c", "ac"));
        assert!(wildcard("*", ""));
        assert!(wildcard("rm -rf /*", "rm -rf /"));
        assert!(!wildcard("rm -rf /*", "rm -rf ./build"));
    }

    #[test]
    fn policies_are_validated() {
        assert!(validate(&policy(&[], vec![rule("shell", "", "allow")])).is_ok());
        let err = validate(&policy(&[], vec![rule("shell", "", "maybe")])).unwrap_err();
        assert!(err.contains("unknown action 'maybe'"), "{err}");
        let err = validate(&policy(&[], vec![rule("sh", "", "allow")])).unwrap_err();
        assert!(err.contains("unknown tool 'sh'"), "{err}");
        let mut p = policy(&[], vec![]);
        p.mode = "yolo".into();
        assert!(validate(&p).unwrap_err().contains("unknown policy mode"));
    }

    #[test]
    fn approvers_match_identities_by_tool() {
        let rules = vec![
            ApproverRule {
                tool: "shell".into(),
                identities: vec!["alice@*".into(), "ci:github:*@acme/app/*".into()],
            },
            ApproverRule {
                tool: "*".into(),
                identities: vec!["*@ops-*".into()],
            },
        ];
        assert_eq!(may_decide(&rules, "shell", "alice@laptop"), Ok(()));
        assert_eq!(
            may_decide(&rules, "shell", "ci:github:bob@acme/app/runs/7"),
            Ok(())
        );
        // The first entry naming the tool decides: the "*" entry does not widen it.
        assert!(may_decide(&rules, "shell", "root@ops-1").is_err());
        assert_eq!(may_decide(&rules, "write_file", "root@ops-1"), Ok(()));
        assert_eq!(
            may_decide(&rules, "write_file", "alice@laptop"),
            Err(vec!["*@ops-*".to_string()])
        );
        assert_eq!(may_decide(&[], "shell", ""), Ok(()));
        let mut p = ApprovalPolicy {
            approvers: vec![ApproverRule {
                tool: "sh".into(),
                identities: vec!["x".into()],
            }],
            ..Default::default()
        };
        assert!(validate(&p).unwrap_err().contains("unknown tool 'sh'"));
        p.approvers[0].tool = "baton.continue".into();
        assert_eq!(validate(&p), Ok(()));
        p.approvers[0].identities.clear();
        assert!(validate(&p).unwrap_err().contains("no identities"));
    }

    #[test]
    fn a_call_whose_matched_field_was_cut_never_runs_without_a_human() {
        // The exact command is in the blob store; history holds a cut one. An allow rule that
        // matches the kept prefix must not let it run, a deny rule still refuses it.
        let sh = def(tools::SHELL);
        let cut = Some(baton_proto::CutArguments {
            digest: "d".into(),
            subject_cut: true,
            bytes: 70_010,
        });
        let mut c = shell("ls -la [cut: 70000 bytes in all, kept in the blob store]");
        c.cut = cut.clone();
        let allow = policy(&[], vec![rule("shell", "ls*", "allow")]);
        assert_eq!(assess(&c, &sh, &allow, &[]), Assessment::AskHuman);
        assert_eq!(
            assess(&c, &sh, &policy(&[], vec![]), &[]),
            Assessment::AskHuman
        );
        let deny = policy(&[], vec![rule("shell", "ls*", "deny")]);
        assert!(matches!(
            assess(&c, &sh, &deny, &[]),
            Assessment::Reject { .. }
        ));
        let mut never = allow.clone();
        never.mode = MODE_NEVER_ASK.into();
        assert!(matches!(
            assess(&c, &sh, &never, &[]),
            Assessment::Reject { .. }
        ));
        // Read-only tools too.
        let mut read = call("read_file", r#"{"path":"src/a.rs"}"#);
        read.cut = cut;
        assert_eq!(
            assess(&read, &def(tools::READ_FILE), &policy(&[], vec![]), &[]),
            Assessment::AskHuman
        );
        // Not cut: as before.
        c.cut = None;
        assert_eq!(assess(&c, &sh, &allow, &[]), Assessment::AutoApprove);
    }
}
