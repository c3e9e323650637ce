//! Errors of the workflows crate.

use thiserror::Error;

/// Why an approval decision cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecisionError {
    /// No call of the run is awaiting a decision.
    #[error("no tool call is awaiting approval in this run; check `baton status`")]
    NothingPending,
    /// The run has ended.
    #[error("the run has already ended; nothing to approve")]
    RunOver,
    /// The call id is not part of the pending batch.
    #[error("unknown call id '{call_id}'; calls awaiting approval: {}", if pending.is_empty() { "none".to_owned() } else { pending.join(", ") })]
    UnknownCall {
        /// The id that was sent.
        call_id: String,
        /// Ids awaiting a decision.
        pending: Vec<String>,
    },
    /// The call was approved or denied before.
    #[error("call '{call_id}' has already been decided")]
    AlreadyDecided {
        /// The id that was sent.
        call_id: String,
    },
    /// The run's policy does not let this client identity decide calls of this tool.
    #[error(
        "{} may not decide calls of tool '{tool}' in this run; allowed identities: {}",
        if identity.is_empty() { "a client with no identity".to_owned() } else { format!("identity '{identity}'") },
        allowed.join(", ")
    )]
    NotAllowed {
        /// The Temporal client identity the decision came from.
        identity: String,
        /// The tool of the call it targeted.
        tool: String,
        /// The identity patterns the policy allows for that tool.
        allowed: Vec<String>,
    },
}

/// Why a run's state cannot be made: from a spec ([`crate::machine::RunState::new`]), into a
/// checkpoint ([`crate::machine::RunState::checkpoint`]) or from one
/// ([`crate::machine::RunState::resume`]). A run that hits one ends at once with this text as
/// its detail.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StateError {
    /// The spec names tools the catalog does not have.
    #[error("unknown tools in spec: {}", unknown.join(", "))]
    UnknownTools {
        /// The names not found.
        unknown: Vec<String>,
    },
    /// The spec's approval policy does not validate ([`crate::policy::validate`]).
    #[error("invalid approval policy: {detail}")]
    InvalidPolicy {
        /// What is wrong with it and how to fix it.
        detail: String,
    },
    /// The spec's workspace source or delivery cannot work.
    #[error("invalid workspace or delivery: {detail}")]
    InvalidWorkspace {
        /// What is wrong with it and how to fix it.
        detail: String,
    },
    /// The spec's MCP servers cannot be used as written.
    #[error("invalid MCP servers: {detail}")]
    InvalidMcp {
        /// What is wrong with them and how to fix it.
        detail: String,
    },
    /// The spec's verification commands cannot run as written.
    #[error("invalid --verify: {detail}")]
    InvalidVerify {
        /// What is wrong with them and how to fix it.
        detail: String,
    },
    /// The spec's output schema is not a JSON Schema.
    #[error("invalid --output-schema: {detail}")]
    InvalidOutputSchema {
        /// What is wrong with it.
        detail: String,
    },
    /// The spec's fork source does not describe a conversation the fork can start from (the
    /// CLI builds it; a hand-made one may not).
    #[error("invalid fork source: {detail}")]
    InvalidFork {
        /// What is wrong with it.
        detail: String,
    },
    /// The state cannot be written as JSON (not expected: every field serializes).
    #[error("{0}")]
    Unserializable(#[source] serde_json::Error),
    /// The continued state was written by a worker with another checkpoint format.
    #[error(
        "continued run state has format {found}, this worker reads format {}",
        crate::machine::CHECKPOINT_FORMAT
    )]
    CheckpointFormat {
        /// The format the checkpoint has.
        found: u32,
    },
    /// The continued state is not a readable checkpoint.
    #[error("continued run state is unreadable: {0}")]
    Unreadable(#[source] serde_json::Error),
}
