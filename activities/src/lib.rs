//! baton's side effects: everything the `AgentRun` workflow asks the world to do.
//!
//! - [`llm`]: the `llm_generate` activity ([`llm::LlmService`]) and its providers (`openai`,
//!   `scripted`), with the failure taxonomy in [`llm::error`].
//! - [`tools`]: the built-in tools (`shell`, `read_file`, `write_file`, `list_files`), all
//!   confined to the run's workspace.
//! - [`tool_activity`]: the `run_tool` activity ([`tool_activity::ToolService`]).
//! - [`metrics`]: baton's metrics and the per-activity log span (worker-side interceptors).

pub mod llm;
pub mod metrics;
pub mod senders;
pub mod tool_activity;
pub mod tools;
