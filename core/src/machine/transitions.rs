//! The transition table: phase × trigger → next phase, and the [`Step`](super::Step) that
//! [`RunState::next_step`](super::RunState::next_step) returns in it or the effect of the
//! input. It is data, so it cannot drift from the inputs: a test fails when an [`InputKind`]
//! has no row, and `docs/src/architecture/machine.md` is rendered from it (a test fails when
//! the page differs; `BATON_BLESS=1 cargo test -p baton-core transitions` rewrites it).
//!
//! "Question" is a one-call batch for a human ([`QUESTION_TOOL`](super::QUESTION_TOOL)):
//! approving continues the run, denying ends it.

use super::input::InputKind;
use super::input::InputKind as K;

/// What a row of the table is triggered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On {
    /// The workflow asks for the next step ([`RunState::next_step`](super::RunState::next_step)).
    NextStep,
    /// An input ([`RunState::apply`](super::RunState::apply)).
    Input(InputKind),
    /// The run's state is made: new, invalid, forked or resumed.
    Start,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct Transition {
    /// The phase the run is in (`any`, `not Finished`, or one phase with a condition).
    pub phase: &'static str,
    /// What triggers it.
    pub on: &'static [On],
    /// The condition, beyond the phase and the trigger.
    pub when: &'static str,
    /// The phase after it.
    pub next: &'static str,
    /// The step returned, or the events and notes recorded.
    pub effect: &'static str,
}

/// Every transition of the machine.
pub const TRANSITIONS: &[Transition] = &[
    Transition {
        phase: "`Thinking`",
        on: &[On::NextStep],
        when: "a turn guard trips (turns, tokens, deadline), `on_exhausted = \"ask\"`",
        next: "`AwaitingApproval` (question, `extend`)",
        effect: "`AwaitApproval`",
    },
    Transition {
        phase: "`Thinking`",
        on: &[On::NextStep],
        when: "a turn guard trips",
        next: "`Finished` (`MaxTurnsExceeded`, `BudgetExceeded`)",
        effect: "`Finish`",
    },
    Transition {
        phase: "`Thinking`",
        on: &[On::NextStep],
        when: "over the compaction threshold after eliding old outputs, older turns to cut, compaction not failed this turn",
        next: "`Compacting`",
        effect: "`Compact`",
    },
    Transition {
        phase: "`Thinking`",
        on: &[On::NextStep],
        when: "otherwise (the inbox joins the conversation)",
        next: "`Thinking`",
        effect: "`CallLlm`",
    },
    Transition {
        phase: "`Thinking`",
        on: &[On::Input(K::LlmResponse)],
        when: "finish `length`, at most `MAX_LENGTH_CONTINUATIONS` (3) in a row",
        next: "`Thinking`",
        effect: "`CONTINUE_PROMPT` added",
    },
    Transition {
        phase: "`Thinking`",
        on: &[On::Input(K::LlmResponse)],
        when: "finish `length`, one more",
        next: "`Finished` (`OutputTruncated`)",
        effect: "",
    },
    Transition {
        phase: "`Thinking`",
        on: &[On::Input(K::LlmResponse)],
        when: "finish `content_filter`",
        next: "`Finished` (`ContentFiltered`)",
        effect: "",
    },
    Transition {
        phase: "`Thinking`",
        on: &[On::Input(K::LlmResponse)],
        when: "a loop detected",
        next: "`AwaitingApproval` (question) if `loops.on_loop = \"ask\"`, else `Finished` (`LoopDetected`)",
        effect: "",
    },
    Transition {
        phase: "`Thinking`",
        on: &[On::Input(K::LlmResponse)],
        when: "no tool calls",
        next: "`Finished` (`Completed`, the answer)",
        effect: "",
    },
    Transition {
        phase: "`Thinking`",
        on: &[On::Input(K::LlmResponse)],
        when: "tool calls, each auto-approved or refused by policy",
        next: "`Executing`",
        effect: "",
    },
    Transition {
        phase: "`Thinking`",
        on: &[On::Input(K::LlmResponse)],
        when: "tool calls, one needs a human",
        next: "`AwaitingApproval` (the whole batch)",
        effect: "`approval_requested` events",
    },
    Transition {
        phase: "`Thinking`",
        on: &[On::Input(K::LlmFailure)],
        when: "ContextOverflow, first in the turn and old outputs to elide",
        next: "`Thinking` (the turn is retried)",
        effect: "note",
    },
    Transition {
        phase: "`Thinking`",
        on: &[On::Input(K::LlmFailure)],
        when: "otherwise",
        next: "`Finished` (`ContextOverflow`, `ProviderError`, `InternalError`)",
        effect: "",
    },
    Transition {
        phase: "`Compacting`",
        on: &[On::NextStep],
        when: "",
        next: "`Compacting`",
        effect: "`Compact`",
    },
    Transition {
        phase: "`Compacting`",
        on: &[On::Input(K::Compacted)],
        when: "",
        next: "`Thinking` (the summary replaces the older turns in the view)",
        effect: "note",
    },
    Transition {
        phase: "`Compacting`",
        on: &[On::Input(K::CompactionFailed)],
        when: "",
        next: "`Thinking` (not retried this turn)",
        effect: "note",
    },
    Transition {
        phase: "`AwaitingApproval`",
        on: &[On::NextStep],
        when: "",
        next: "`AwaitingApproval`",
        effect: "`AwaitApproval` (policy timeout)",
    },
    Transition {
        phase: "`AwaitingApproval`",
        on: &[On::Input(K::Decision)],
        when: "valid, calls still pending",
        next: "`AwaitingApproval`",
        effect: "`approval_decided` events",
    },
    Transition {
        phase: "`AwaitingApproval`",
        on: &[On::Input(K::Decision)],
        when: "the last pending call of a tool batch",
        next: "`Executing`",
        effect: "",
    },
    Transition {
        phase: "`AwaitingApproval`",
        on: &[On::Input(K::Decision)],
        when: "a question approved",
        next: "`Thinking` (limit extended, or breaker reset)",
        effect: "note",
    },
    Transition {
        phase: "`AwaitingApproval`",
        on: &[On::Input(K::Decision)],
        when: "a question denied",
        next: "`Finished` (the limit's reason, else `LoopDetected`)",
        effect: "",
    },
    Transition {
        phase: "`AwaitingApproval`",
        on: &[On::Input(K::Decision)],
        when: "invalid (`DecisionError`)",
        next: "`AwaitingApproval`",
        effect: "note `approval ignored: ..`",
    },
    Transition {
        phase: "`AwaitingApproval`",
        on: &[On::Input(K::ApprovalTimeout)],
        when: "`on_timeout = \"deny\"`",
        next: "as if the undecided calls were denied",
        effect: "note",
    },
    Transition {
        phase: "`AwaitingApproval`",
        on: &[On::Input(K::ApprovalTimeout)],
        when: "`on_timeout = \"fail\"`",
        next: "`Finished` (`ApprovalTimedOut`)",
        effect: "",
    },
    Transition {
        phase: "`Executing`",
        on: &[On::NextStep],
        when: "",
        next: "`Executing`",
        effect: "`RunTools` (the calls allowed to run)",
    },
    Transition {
        phase: "`Executing`",
        on: &[On::Input(K::ToolsStarted), On::Input(K::ToolsFinished)],
        when: "",
        next: "`Executing`",
        effect: "`tool_started`/`tool_finished` events, once each",
    },
    Transition {
        phase: "`Executing`",
        on: &[On::Input(K::ToolResults)],
        when: "",
        next: "`Thinking`; `AwaitingApproval` (question) when the breaker pauses; `AwaitingApproval` (`retry`) for calls a worker failure cut off (`on_retry = \"ask\"`)",
        effect: "results join the conversation (and the breaker's alert, after its first threshold)",
    },
    Transition {
        phase: "`Thinking`",
        on: &[On::Input(K::LlmResponse)],
        when: "no tool calls, the spec has `verify` commands",
        next: "`Verifying` (the answer waits)",
        effect: "note",
    },
    Transition {
        phase: "`Verifying`",
        on: &[On::NextStep],
        when: "",
        next: "`Verifying`",
        effect: "`Verify` (the round's next command; `verification_started` once)",
    },
    Transition {
        phase: "`Verifying`",
        on: &[On::Input(K::Verified)],
        when: "passed, commands left",
        next: "`Verifying`",
        effect: "`verification_finished`",
    },
    Transition {
        phase: "`Verifying`",
        on: &[On::Input(K::Verified)],
        when: "the last command passed",
        next: "`Finished` (`Completed`, `verification` in the result)",
        effect: "",
    },
    Transition {
        phase: "`Verifying`",
        on: &[On::Input(K::Verified)],
        when: "failed, rounds left",
        next: "`Thinking`",
        effect: "the failure as a synthetic user message",
    },
    Transition {
        phase: "`Verifying`",
        on: &[On::Input(K::Verified), On::Input(K::VerifyFailed)],
        when: "failed in the last round; the command could not be run",
        next: "`Finished` (`VerificationFailed`; not delivered)",
        effect: "",
    },
    Transition {
        phase: "`Finished`",
        on: &[On::NextStep],
        when: "change set not yet collected, a call that may change the tree ran",
        next: "`Finished`",
        effect: "`CollectChanges`",
    },
    Transition {
        phase: "`Finished`",
        on: &[On::NextStep],
        when: "change set collected, delivery asked for and not done, a patch to deliver",
        next: "`Finished`",
        effect: "`Deliver`",
    },
    Transition {
        phase: "`Finished`",
        on: &[On::NextStep],
        when: "otherwise (not a conversation between tasks)",
        next: "`Finished`",
        effect: "`Finish` (the result with `changes` and `delivered`)",
    },
    Transition {
        phase: "`Finished` (`Completed`), a conversation (`idle_timeout_seconds`)",
        on: &[On::NextStep],
        when: "outputs done, inbox empty",
        next: "`Finished`, status `Idle`",
        effect: "`AwaitMessage`",
    },
    Transition {
        phase: "`Finished` (`Completed`), a conversation",
        on: &[On::NextStep],
        when: "outputs done, a message in the inbox",
        next: "`Thinking` (the next task: turn limit counted afresh, change set from the last delivery)",
        effect: "`CallLlm`",
    },
    Transition {
        phase: "`Finished`, a conversation between tasks",
        on: &[On::Input(K::Message)],
        when: "",
        next: "unchanged (the inbox)",
        effect: "note",
    },
    Transition {
        phase: "`Finished`, a conversation between tasks",
        on: &[
            On::Input(K::IdleTimeout),
            On::Input(K::Cancelled),
            On::Input(K::DeadlinePassed),
        ],
        when: "",
        next: "`Finished` (the last task's result)",
        effect: "note, then `Finish`",
    },
    Transition {
        phase: "any",
        on: &[On::Input(K::Message)],
        when: "with an id taken before (or the task's `task_message_id`)",
        next: "unchanged",
        effect: "note",
    },
    Transition {
        phase: "`Finished`",
        on: &[
            On::Input(K::Changes),
            On::Input(K::ChangesFailed),
            On::Input(K::Delivered),
            On::Input(K::DeliveryFailed),
        ],
        when: "",
        next: "`Finished`",
        effect: "note",
    },
    Transition {
        phase: "not `Finished`",
        on: &[On::Input(K::DeadlinePassed)],
        when: "",
        next: "`Finished` (`BudgetExceeded`)",
        effect: "open calls answered",
    },
    Transition {
        phase: "not `Finished`",
        on: &[On::Input(K::Cancelled)],
        when: "",
        next: "`Finished` (`Cancelled`)",
        effect: "open calls answered",
    },
    Transition {
        phase: "not `Finished`",
        on: &[On::Input(K::Message)],
        when: "",
        next: "unchanged (the inbox)",
        effect: "note",
    },
    Transition {
        phase: "any",
        on: &[On::Input(K::WorkspacePrepared)],
        when: "(once, before the first step)",
        next: "unchanged",
        effect: "note, the starting snapshot",
    },
    Transition {
        phase: "not `Finished`",
        on: &[On::Input(K::WorkspaceFailed)],
        when: "",
        next: "`Finished` (`WorkspaceUnavailable`)",
        effect: "",
    },
    Transition {
        phase: "any",
        on: &[On::Input(K::Instructions)],
        when: "(once, before the first step)",
        next: "unchanged",
        effect: "note",
    },
    Transition {
        phase: "not `Finished`",
        on: &[On::Input(K::EnvironmentReady)],
        when: "(once, after the workspace, before the first step: an environment with setup)",
        next: "unchanged (the starting tree is the set-up one)",
        effect: "note",
    },
    Transition {
        phase: "not `Finished`",
        on: &[
            On::Input(K::EnvironmentReady),
            On::Input(K::EnvironmentFailed),
        ],
        when: "the setup failed, or could not be run",
        next: "`Finished` (`SetupFailed`)",
        effect: "",
    },
    Transition {
        phase: "not `Finished`",
        on: &[On::Input(K::McpListed)],
        when: "(once, before the first step: the spec's MCP servers)",
        next: "unchanged",
        effect: "the tools join the run, a note per server",
    },
    Transition {
        phase: "not `Finished`",
        on: &[On::Input(K::McpListed)],
        when: "a server could not be used (or lacks a named tool), `mcp_unavailable` not `continue`",
        next: "`Finished` (`ToolsUnavailable`)",
        effect: "",
    },
    Transition {
        phase: "(none)",
        on: &[On::Start],
        when: "`RunState::new`, a valid spec",
        next: "`Thinking`",
        effect: "the task as the first user message; `run started` note",
    },
    Transition {
        phase: "(none)",
        on: &[On::Start],
        when: "a spec or checkpoint that cannot run (`RunState::invalid`)",
        next: "`Finished` (`InternalError`)",
        effect: "the reason in the result",
    },
    Transition {
        phase: "(none)",
        on: &[On::Start],
        when: "`RunState::fork` (`baton fork`): the source's conversation up to turn N, by reference",
        next: "`Thinking` at turn N",
        effect: "the fork's instructions as a user message; its workspace is the source's then",
    },
    Transition {
        phase: "(none)",
        on: &[On::Start],
        when: "`RunState::resume` (continue-as-new): the checkpoint of the last segment",
        next: "the checkpointed phase",
        effect: "the segment counter moves on",
    },
    Transition {
        phase: "`Thinking`",
        on: &[On::Input(K::LlmResponse)],
        when: "no tool calls, `--output-schema`, the answer does not match it, the first time",
        next: "`Thinking`",
        effect: "the reasons as a synthetic user message (one corrective turn)",
    },
    Transition {
        phase: "`Thinking`",
        on: &[On::Input(K::LlmResponse)],
        when: "no tool calls, `--output-schema`, the answer does not match it again",
        next: "`Finished` (`OutputInvalid`)",
        effect: "",
    },
    Transition {
        phase: "`Executing`",
        on: &[On::Input(K::ToolResults)],
        when: "a call's processes were refused hosts not on the list, `on_unknown_host = \"ask\"`",
        next: "`AwaitingApproval` (`hosts`: one `baton.allow_host` call per host)",
        effect: "results join the conversation",
    },
    Transition {
        phase: "`AwaitingApproval` (`hosts`)",
        on: &[On::Input(K::Decision)],
        when: "the last host decided",
        next: "`Thinking`",
        effect: "approved hosts join the run's allow list; the model is told what was decided (nothing runs again)",
    },
    Transition {
        phase: "`AwaitingApproval` (`retry`)",
        on: &[On::Input(K::Decision)],
        when: "the last cut-off call decided",
        next: "`Executing`",
        effect: "approved calls run again, denied ones are skipped",
    },
    Transition {
        phase: "`Executing`",
        on: &[On::Input(K::SubagentStarted)],
        when: "a `spawn_agent` call's child run started",
        next: "`Executing`",
        effect: "`subagent_started` event",
    },
    Transition {
        phase: "any",
        on: &[On::Input(K::ProgressReported)],
        when: "a run for a GitHub issue or pull request",
        next: "unchanged",
        effect: "the comment and check run ids are kept for the next report",
    },
    Transition {
        phase: "any",
        on: &[On::Input(K::ProgressFailed)],
        when: "",
        next: "unchanged",
        effect: "note (the run goes on)",
    },
];

impl Transition {
    /// [`TRANSITIONS`] as a Markdown table, one row per transition.
    pub fn markdown_table() -> String {
        let mut out = String::from(
            "| Phase | On | When | Next phase | Step / effect |\n|---|---|---|---|---|\n",
        );
        for t in TRANSITIONS {
            let on: Vec<String> =
                t.on.iter()
                    .map(|o| match o {
                        On::NextStep => "`next_step`".to_owned(),
                        On::Input(kind) => format!("`{kind:?}`"),
                        On::Start => "start".to_owned(),
                    })
                    .collect();
            let cell = |s: &str| {
                if s.is_empty() {
                    " ".to_owned()
                } else {
                    s.replace('|', "\\|")
                }
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                cell(t.phase),
                on.join(", "),
                cell(t.when),
                cell(t.next),
                cell(t.effect)
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_has_a_row() {
        let missing: Vec<&InputKind> = InputKind::ALL
            .iter()
            .filter(|kind| {
                !TRANSITIONS
                    .iter()
                    .any(|t| t.on.contains(&On::Input(**kind)))
            })
            .collect();
        assert!(
            missing.is_empty(),
            "inputs without a row in TRANSITIONS (core/src/machine/transitions.rs): {missing:?}"
        );
        assert!(TRANSITIONS.iter().any(|t| t.on.contains(&On::NextStep)));
        assert!(TRANSITIONS.iter().any(|t| t.on.contains(&On::Start)));
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // test code: reads the environment for BATON_BLESS
    fn the_machine_page_is_rendered_from_the_table() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../docs/src/architecture/machine.md");
        let page = format!(
            "# The state machine\n\n\
             <!-- Rendered from core/src/machine/transitions.rs: do not edit. \
             BATON_BLESS=1 cargo test -p baton-core transitions rewrites it. -->\n\n\
             A run is a pure state machine, `RunState` (`core/src/machine/`). The workflow asks \
             it for the next step (`next_step`), does that step (an activity, a timer, a wait \
             for a human), and reports what happened as an input (`apply`). This table is every \
             transition: the phase the run is in, what happened, the condition, the phase \
             after, and the step returned or what was recorded. An input in a phase the table \
             does not list for it changes nothing but a note (see `machine/tests/phases.rs`).\n\n{}",
            Transition::markdown_table()
        );
        if std::env::var_os("BATON_BLESS").is_some() {
            std::fs::write(&path, &page).unwrap();
            return;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == page,
            "docs/src/architecture/machine.md differs from TRANSITIONS: run \
             `BATON_BLESS=1 cargo test -p baton-core transitions` and commit the page"
        );
    }
}
