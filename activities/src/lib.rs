//! baton's side effects: everything the `AgentRun` workflow asks the world to do.
//!
//! - [`git`]: a run's `--git` source cloned into its workspace ([`git::clone_into`]) and its
//!   change set delivered as a pushed branch or a GitHub pull request ([`git::deliver`]).
//! - [`llm`]: the model activities (`llm_generate`, `compact_context`: [`llm::LlmService`]),
//!   their providers (`openai`, `anthropic`, `scripted`) and the failure taxonomy
//!   ([`llm::error`]).
//! - [`mcp`]: MCP servers: `[mcp]` settings, the connection pool
//!   ([`mcp::McpPool`]), the `mcp_list_tools` activity ([`mcp::McpService`]) and the calls
//!   `mcp_call_tool` makes (the activity itself is on [`tools::ToolService`]).
//! - [`tools`]: the tool activities (`run_tool`, `read_instructions`: [`tools::ToolService`],
//!   in `tools/activity.rs`) and the built-in tools (`shell`, `read_file`, `write_file`,
//!   `edit_file`, `list_files`, `search_files`, `glob`), all confined to the run's workspace.
//! - [`workspace`]: the workspace activities (`prepare_workspace`, `collect_changes`, `deliver`:
//!   [`workspace::WorkspaceService`]): a run's source in, its change set and delivery out.
//! - [`progress`]: `report_progress` ([`progress::ProgressService`]): a run's comment and
//!   check run on its GitHub issue or pull request.
//! - `heartbeat`: heartbeats from a task of their own for a whole activity attempt (tool, model
//!   and workspace activities); [`HEARTBEAT_THROTTLE`], the worker's heartbeat throttle.
//! - [`git`]: clones of a run's git source and delivery (commit, push, GitHub pull request),
//!   through real `git` processes with the worker's credentials.
//!
//! Elsewhere: the blob store and conversation storage are the `baton-store` crate; the process
//! sandbox of `shell` is the `baton-sandbox` crate; the worker's interceptors (metrics
//! observers, approval senders) are in `baton-worker`.

pub mod git;
mod heartbeat;
pub use heartbeat::HEARTBEAT_THROTTLE;
pub mod llm;
pub mod mcp;
pub mod progress;
pub mod tools;
pub mod workspace;
