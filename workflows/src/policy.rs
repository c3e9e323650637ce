//! The approval policy: a pure decision, per tool call, taken before anything of a batch runs.

use baton_proto::{ApprovalPolicy, ToolCall, ToolDefinition};

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

/// Decides whether `call` (to the tool `tool`) may run, must wait for a human, or is refused.
///
/// Read-only tools never need approval. Tools named in `require_approval` (or `"*"`, meaning
/// every tool that is not read-only) ask a human. Everything else runs.
pub fn assess(_call: &ToolCall, tool: &ToolDefinition, policy: &ApprovalPolicy) -> Assessment {
    if tool.read_only {
        return Assessment::AutoApprove;
    }
    let listed = policy
        .require_approval
        .iter()
        .any(|name| name == &tool.name || name == "*");
    if listed {
        Assessment::AskHuman
    } else {
        Assessment::AutoApprove
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools;

    fn call(name: &str) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments: "{}".into(),
        }
    }

    fn policy(names: &[&str]) -> ApprovalPolicy {
        ApprovalPolicy {
            require_approval: names.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn listed_tools_ask_a_human() {
        let shell = tools::definition(tools::SHELL).unwrap();
        assert_eq!(
            assess(&call("shell"), &shell, &policy(&["shell"])),
            Assessment::AskHuman
        );
        assert_eq!(
            assess(&call("shell"), &shell, &policy(&[])),
            Assessment::AutoApprove
        );
        assert_eq!(
            assess(&call("shell"), &shell, &policy(&["*"])),
            Assessment::AskHuman
        );
    }

    #[test]
    fn read_only_tools_never_ask() {
        let read = tools::definition(tools::READ_FILE).unwrap();
        assert_eq!(
            assess(&call("read_file"), &read, &policy(&["read_file", "*"])),
            Assessment::AutoApprove
        );
    }
}
