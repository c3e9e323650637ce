//! End-to-end test harness for baton.
//!
//! Everything here drives *real processes*: a Temporal dev server
//! ([`DevServer`], the `temporal` CLI from `PATH` or `$TEMPORAL_BIN`), the
//! `baton-worker` binary ([`Worker`]) and the `baton` CLI ([`baton`],
//! [`baton_with`], [`baton_at`], [`baton_spawn`]), plus in-process
//! [`MockOpenAi`] / [`MockAnthropic`] / [`MockResponses`] servers that play the LLM (scripted
//! with [`MockResponse`]s: extra headers, delays, cut / slow streams,
//! in-stream errors). Every request to a mock is checked against what the
//! real APIs require (tool results answer calls made just before them) and
//! for the worker's API key in the body; a violation is answered 400 and
//! fails the test when the mock is dropped (`mock_checks.rs`).
//!
//! For the code a run starts on and the changes it hands back: bare git repositories
//! ([`GitRepos`], [`BareRepo`]) served by the real `git daemon` ([`GitDaemon`], `git://`,
//! pushes allowed) and the real `git http-backend` behind Basic auth with a token
//! ([`GitHttp`]) (`git_server.rs`), and a stand-in for GitHub's pull-request REST endpoints
//! over those repositories that refuses what GitHub refuses ([`GitHubStandIn`], `github.rs`).
//! The HTTP servers each run on a thread of their own (`http_thread.rs`).
//!
//! For MCP tools: the reference MCP servers installed from npm ([`servers_dir`]),
//! server-everything over streamable HTTP behind a relay that counts listings and calls
//! ([`EverythingServer`]), and the worker settings naming servers ([`worker_config`])
//! (`mcp_servers.rs`).
//!
//! For tools behind baton's network proxy: targets on loopback that count what
//! reached them, so a test can assert a refused request never arrived: a plain site, the same
//! over HTTPS with a CA the sandbox user can read, a PEP 503 package index with a real wheel,
//! and a bare TCP counter ([`net_targets`]).
//!
//! The baton binaries are looked up next to the test executable
//! ([`bin_path`]); `cargo test` does not build them, so run
//! `cargo build --workspace` first.
//!
//! Hygiene rules the harness follows:
//! * every child process is spawned with `PR_SET_PDEATHSIG=SIGKILL`, so
//!   nothing outlives a killed test binary; the owning struct stops it on drop;
//! * children never inherit `TEMPORAL_*`, `BATON_*`, `OPENAI_*` or `GIT_*` from the
//!   developer's environment (see [`SCRUBBED_ENV_PREFIXES`]); `NO_COLOR=1`;
//! * servers/workers keep their files in private temp dirs (set
//!   `BATON_TEST_KEEP_DIRS=1` to keep them); when a test panics, the logs of
//!   the dev server and workers are printed to stderr on drop.
//!
//! ```ignore
//! use baton_tests::*;
//! use std::time::Duration;
//!
//! #[tokio::test(flavor = "multi_thread")]
//! async fn agent_answers() -> anyhow::Result<()> {
//!     let server = DevServer::start()?;
//!     let llm = MockOpenAi::start()?;
//!     llm.push_text("hello");
//!     let queue = unique("tq");
//!     let mut worker = Worker::spawn(&server, &queue, &[("OPENAI_BASE_URL", &llm.base_url())])?;
//!     worker.wait_ready(Duration::from_secs(30)).await?;
//!     let out = baton(&server, &["run", "--task-queue", &queue, "say hi"])?.ensure_success()?;
//!     assert!(out.stdout.contains("hello"));
//!     Ok(())
//! }
//! ```

mod cli;
mod codec;
mod git_server;
mod github;
mod history;
mod http_thread;
pub mod llama_server;
mod mcp_servers;
mod mock_anthropic;
mod mock_checks;
mod mock_http;
mod mock_openai;
mod mock_responses;
mod mock_window;
pub mod moto;
pub mod net_targets;
mod process;
mod server;
pub mod tls_proxy;
mod wait;
mod worker;

pub use cli::{baton, baton_at, baton_spawn, baton_with, baton_with_timeout};
pub use codec::{PayloadSeen, codec_key, history_payloads};
pub use git_server::{
    AcceptToken, BareRepo, GIT_AUTHOR, GIT_DAEMON_START_TIMEOUT, GIT_DATE, GIT_HTTP_REALM,
    GIT_ISOLATION_ENV, GitDaemon, GitHttp, GitRepos, MAIN_BRANCH, TOKEN_CREDENTIAL_HELPER,
    TOKEN_ENV, git_command, run_git,
};
pub use github::{
    ApiRequest, CheckRunRecord, GitHubStandIn, IssueComment, IssuedToken, PullRequest,
};
pub use history::{
    CompletedActivity, completed_activities, decode_history_payloads, history_search_text,
};
pub use llama_server::{Exchange, LlamaServer, RecordingProxy};
pub use mcp_servers::{
    EverythingServer, MCP_SERVER_START_TIMEOUT, McpCounts, command_server_toml, count_methods,
    everything_entry, filesystem_entry, fs_server_command, fs_server_toml, http_server_toml,
    loopback_preload, servers_dir, worker_config,
};
pub use mock_anthropic::{MESSAGES_PATH, MockAnthropic};
pub use mock_http::{CapturedRequest, Dialect, MockResponse, MockServer, Responder, ResponseMode};
pub use mock_openai::{CHAT_COMPLETIONS_PATH, MockOpenAi};
pub use mock_responses::{MockResponses, RESPONSES_PATH};
pub use process::{
    CmdOutput, DEFAULT_CMD_TIMEOUT, RunningCmd, SCRUBBED_ENV_NAMES, SCRUBBED_ENV_PREFIXES,
    bin_path, clean_command, describe_status, pids_matching, process_exists_matching, run_cmd,
    send_signal, temporal_bin,
};
pub use server::{
    DevServer, SERVER_START_TIMEOUT, SERVER_STOP_TIMEOUT, TEMPORAL_CMD_TIMEOUT, free_port,
    free_ports, port_accepts,
};
pub use wait::{POLL_INTERVAL, assert_holds_for, unique, wait_until, wait_until_blocking};
pub use worker::{WORKER_READY_MARKER, WORKER_TERMINATE_TIMEOUT, Worker, pause_worker_starts};

/// Re-exported so tests can name signals (`Signal::SIGINT`) without a direct
/// `nix` dependency.
pub use nix::sys::signal::Signal;
