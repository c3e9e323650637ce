//! Why an MCP server could not be used, and how each reason maps to a Temporal failure: a
//! server this worker cannot use at all ([`McpError::is_unavailable`]) fails with
//! `McpUnavailable` (not retried); one that is down, crashed or too slow fails the attempt
//! (retried, on a fresh connection). Every message names the server and what it is (its
//! command line or URL), never a secret.

use baton_workflows::activities::FailureType;
use temporalio_common::error::ApplicationFailure;
use temporalio_sdk::activities::ActivityError;

/// An MCP server that could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The run names a server this worker has no settings for.
    #[error(
        "MCP server '{server}' is not configured on this worker (it has: {known}); add \
         [mcp.servers.{server}] to its baton.toml"
    )]
    NotConfigured {
        /// The server's name.
        server: String,
        /// The servers it has, comma-separated (`none` when it has none).
        known: String,
    },
    /// The stdio server's program does not exist.
    #[error(
        "MCP server '{server}': cannot start `{command}`: the program was not found ({source}); \
         install it on the worker or fix mcp.servers.{server}.command"
    )]
    ProgramNotFound {
        /// The server's name.
        server: String,
        /// Its program.
        command: String,
        /// The spawn error.
        #[source]
        source: std::io::Error,
    },
    /// The server answered `initialize` with a JSON-RPC error.
    #[error("MCP server '{server}' ({what}) refused the MCP handshake: {message}")]
    Refused {
        /// The server's name.
        server: String,
        /// Its command line or URL.
        what: String,
        /// The server's error.
        message: String,
    },
    /// The HTTP server refused the worker's credentials (401/403).
    #[error(
        "MCP server '{server}' ({what}) refused the worker's credentials ({detail}); check \
         mcp.servers.{server}.bearer_token_env / headers and the variables they name"
    )]
    Unauthorized {
        /// The server's name.
        server: String,
        /// Its URL.
        what: String,
        /// The HTTP answer.
        detail: String,
    },
    /// The settings cannot be turned into a connection (a header value that is not one).
    #[error("MCP server '{server}': {problem}")]
    BadSettings {
        /// The server's name.
        server: String,
        /// What is wrong, naming the key.
        problem: String,
    },
    /// A `sandbox = true` server's sandbox could not be set up for the run.
    #[error("MCP server '{server}': cannot start it in the run's sandbox: {source}")]
    Sandbox {
        /// The server's name.
        server: String,
        /// Why (whether retrying may help).
        #[source]
        source: baton_sandbox::SandboxError,
    },
    /// The server is down, crashed, closed the connection or did not answer in time
    /// (retried).
    #[error("MCP server '{server}' ({what}): {reason}{}", stderr_note(.stderr))]
    Unreachable {
        /// The server's name.
        server: String,
        /// Its command line or URL.
        what: String,
        /// What went wrong.
        reason: String,
        /// The last lines the stdio server wrote to stderr (empty for HTTP).
        stderr: Vec<String>,
    },
}

fn stderr_note(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!("; its last stderr lines:\n{}", lines.join("\n"))
    }
}

impl McpError {
    /// Whether retrying cannot help (`McpUnavailable`): not configured, no such program, the
    /// handshake refused, credentials refused, bad settings.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Unreachable { .. } => false,
            Self::Sandbox { source, .. } => !source.is_retryable(),
            _ => true,
        }
    }

    /// The activity failure: `McpUnavailable` (non-retryable) or a retryable one.
    pub fn into_failure(self) -> ActivityError {
        let message = self.to_string();
        if self.is_unavailable() {
            ActivityError::application(
                ApplicationFailure::builder(message)
                    .type_name(FailureType::McpUnavailable.as_str().to_owned())
                    .non_retryable(true)
                    .build(),
            )
        } else {
            ActivityError::application(ApplicationFailure::new(message))
        }
    }
}
