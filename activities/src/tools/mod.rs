//! The built-in tools (`shell`, `read_file`, `write_file`, `edit_file`, `list_files`,
//! `search_files`, `glob`) as plain async functions, free of any Temporal code; the `run_tool`
//! activity ([`activity`], [`ToolService`]) wraps [`execute`].
//!
//! Every tool is confined to the run's workspace directory (see [`workspace::resolve`]) and
//! every result sent back to the model is capped at
//! [`OUTPUT_CAP_BYTES`](baton_core::tools::OUTPUT_CAP_BYTES) (see [`output::cap`]).
//!
//! Failures come in two kinds:
//! - ordinary ones, caused by what the model asked for (bad arguments, unknown tool, a path
//!   outside the workspace, a missing file, a non-zero exit, a timeout): [`execute`] returns
//!   them as `Ok` with [`ToolResult::is_error`] set and a message saying what was wrong and what
//!   to do instead, so the model can correct itself;
//! - infrastructure failures (cannot create the workspace, cannot start `sh`, cannot sandbox it)
//!   and cancellation: [`execute`] returns them as [`ToolError`], for the activity to fail or
//!   retry.

pub mod activity;
mod attempt;
pub mod edit;
pub mod files;
pub mod glob;
pub mod kept;
pub mod orphans;
pub mod output;
mod retry;
pub mod search;
pub mod shell;
pub mod verify;
mod walk;
pub mod workspace;

pub use activity::{HEARTBEAT_EVERY, ToolService};

use std::path::PathBuf;
use std::time::Duration;

use baton_core::tools::{
    BUILTIN_TOOLS, EDIT_FILE, GLOB, LIST_FILES, READ_FILE, SEARCH_FILES, SHELL, WRITE_FILE,
};
use baton_proto::{ToolCall, ToolResult};
use baton_sandbox::{Sandbox, SandboxError};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

/// Everything a tool needs besides its arguments.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The run's workspace: the working directory of `shell` and the root every path is
    /// confined to. Created by [`execute`] if missing.
    pub workspace: PathBuf,
    /// How long a `shell` command may run unless the call sets `timeout_seconds`.
    pub timeout: Duration,
    /// Extra environment variables for `shell` commands, on top of the inherited ones.
    pub env: Vec<(String, String)>,
    /// Cancelling it stops the running tool (killing every process it started); [`execute`]
    /// then returns [`ToolError::Cancelled`].
    pub cancel: CancellationToken,
    /// How the processes a tool starts are confined (see [`baton_sandbox`]); file tools keep
    /// their own confinement to the workspace whatever it says.
    pub sandbox: Sandbox,
}

/// Why a tool could not run at all (as opposed to running and failing, which is an `Ok`
/// [`ToolResult`] with `is_error` set).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The call was cancelled through [`ToolContext::cancel`]; everything it started was stopped.
    #[error("the tool call was cancelled")]
    Cancelled,
    /// An I/O failure of the machinery itself (the workspace, spawning `sh`, ...). The message
    /// includes the underlying error, as callers often keep only the message.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, e.g. "cannot create the workspace directory '/w'".
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The process could not be sandboxed as the run asks ([`SandboxError`] says whether
    /// retrying may help).
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

impl ToolError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

/// What a tool produced: the text for the model and whether it is an error to correct
/// (the [`ToolResult`] without the call's id and name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The text for the model (a preview of at most 16 KiB).
    pub content: String,
    /// The tool failed in the ordinary way; `content` says why and what to do.
    pub is_error: bool,
    /// When `content` is a cut preview: the fuller output for the transcript.
    pub full: Option<String>,
    /// What the call's processes did through the proxy of their network namespace.
    pub network: Option<baton_sandbox::net::NetReport>,
}

impl Outcome {
    /// A successful outcome.
    pub fn ok(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
            full: None,
            network: None,
        }
    }

    /// An ordinary failure, explained by `content`.
    pub fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
            full: None,
            network: None,
        }
    }
}

/// Runs one call.
///
/// Ordinary failures (bad or missing arguments, unknown tool, a path escaping the workspace,
/// file not found, non-zero exit, timeout) are returned as `Ok(ToolResult { is_error: true,
/// content: <what was wrong and what to do> })`. `Err` only for infrastructure failures
/// (cannot spawn `sh`, cannot create the workspace directory) and for cancellation
/// ([`ToolError::Cancelled`]).
///
/// Dropping the returned future stops the tool too: a running `shell` command's whole process
/// group is killed.
pub async fn execute(ctx: &ToolContext, call: &ToolCall) -> Result<ToolResult, ToolError> {
    if ctx.cancel.is_cancelled() {
        return Err(ToolError::Cancelled);
    }
    tokio::fs::create_dir_all(&ctx.workspace)
        .await
        .map_err(|e| {
            ToolError::io(
                format!(
                    "cannot create the workspace directory '{}'",
                    ctx.workspace.display()
                ),
                e,
            )
        })?;

    let outcome = match call.name.as_str() {
        // The shell tool watches the cancellation token itself: it must kill and reap its
        // processes before returning.
        SHELL => match parse_arguments(SHELL, &call.arguments) {
            Ok(args) => shell::run(ctx, args).await?,
            Err(outcome) => outcome,
        },
        READ_FILE => match parse_arguments(READ_FILE, &call.arguments) {
            Ok(args) => cancellable(ctx, files::read_file(ctx, args)).await?,
            Err(outcome) => outcome,
        },
        WRITE_FILE => match parse_arguments(WRITE_FILE, &call.arguments) {
            Ok(args) => cancellable(ctx, files::write_file(ctx, args)).await?,
            Err(outcome) => outcome,
        },
        EDIT_FILE => match parse_arguments(EDIT_FILE, &call.arguments) {
            Ok(args) => cancellable(ctx, edit::edit_file(ctx, args)).await?,
            Err(outcome) => outcome,
        },
        LIST_FILES => match parse_arguments(LIST_FILES, &call.arguments) {
            Ok(args) => cancellable(ctx, files::list_files(ctx, args)).await?,
            Err(outcome) => outcome,
        },
        SEARCH_FILES => match parse_arguments(SEARCH_FILES, &call.arguments) {
            Ok(args) => cancellable(ctx, search::search_files(ctx, args)).await?,
            Err(outcome) => outcome,
        },
        GLOB => match parse_arguments(GLOB, &call.arguments) {
            Ok(args) => cancellable(ctx, glob::glob(ctx, args)).await?,
            Err(outcome) => outcome,
        },
        other => Outcome::error(format!(
            "unknown tool '{other}'; the available tools are: {}. Call one of those instead.",
            BUILTIN_TOOLS.join(", ")
        )),
    };

    let mut result = ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content: outcome.content,
        is_error: outcome.is_error,
        full_output: outcome.full.unwrap_or_default(),
        ..Default::default()
    };
    if let Some(network) = outcome.network {
        add_network(&mut result, network);
    }
    Ok(result)
}

/// What the call's processes did through their proxy, in the result: the counts, the kept
/// refusals, and a note for the model when there were refusals.
pub(crate) fn add_network(result: &mut ToolResult, network: baton_sandbox::net::NetReport) {
    result.content.push_str(&refusals_note(&network));
    result.network_refused = saturate(network.refused);
    result.network_allowed = saturate(network.allowed);
    result.network_refusals = network.refusals.into_iter().map(refusal_proto).collect();
}

/// What the model is told about refused connections, which some tools hide (pip says only
/// "No matching distribution"): at most 5 lines.
fn refusals_note(network: &baton_sandbox::net::NetReport) -> String {
    if network.refusals.is_empty() {
        return String::new();
    }
    let mut note = String::from("\n[network: baton's proxy refused these connections]");
    for r in network.refusals.iter().take(5) {
        note.push_str(&format!("\n- {}:{}: {}", r.host, r.port, r.reason));
    }
    let shown = network.refusals.len().min(5) as u64;
    let more = network.refused.saturating_sub(shown);
    if more > 0 {
        note.push_str(&format!("\n- and {more} more"));
    }
    note
}

fn saturate(count: u64) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

fn refusal_proto(refusal: baton_sandbox::net::Refusal) -> baton_proto::NetworkRefusal {
    baton_proto::NetworkRefusal {
        host: refusal.host,
        port: u32::from(refusal.port),
        kind: refusal.kind.as_str().to_owned(),
        reason: refusal.reason,
    }
}

/// Runs `work` unless the call is cancelled first.
async fn cancellable(
    ctx: &ToolContext,
    work: impl Future<Output = Outcome>,
) -> Result<Outcome, ToolError> {
    tokio::select! {
        biased;
        () = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
        outcome = work => Ok(outcome),
    }
}

/// Parses a call's raw JSON arguments (empty text meaning `{}`) into the tool's argument
/// struct, or explains to the model what is wrong with them.
fn parse_arguments<T: DeserializeOwned>(tool: &str, arguments: &str) -> Result<T, Outcome> {
    let text = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    serde_json::from_str(text).map_err(|e| {
        let schema = baton_core::tools::definition(tool)
            .map(|d| d.parameters)
            .unwrap_or_default();
        Outcome::error(format!(
            "invalid arguments for tool '{tool}': {e}. The arguments must be a JSON object \
             matching this schema: {schema}. Fix the arguments and call the tool again."
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use tempfile::TempDir;

    pub(crate) fn context(dir: &TempDir) -> ToolContext {
        ToolContext {
            workspace: dir.path().to_path_buf(),
            timeout: Duration::from_secs(30),
            env: Vec::new(),
            cancel: CancellationToken::new(),
            sandbox: Sandbox::off(),
        }
    }

    pub(crate) fn call(name: &str, arguments: serde_json::Value) -> ToolCall {
        ToolCall {
            id: "call-1".into(),
            name: name.into(),
            arguments: arguments.to_string(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn fills_call_id_and_name() {
        let dir = TempDir::new().unwrap();
        let ctx = context(&dir);
        let result = execute(
            &ctx,
            &call(
                WRITE_FILE,
                serde_json::json!({"path": "a.txt", "content": "x"}),
            ),
        )
        .await
        .unwrap();
        assert_eq!(
            result,
            ToolResult {
                call_id: "call-1".into(),
                name: WRITE_FILE.into(),
                content: "wrote 1 bytes to a.txt".into(),
                is_error: false,
                full_output: String::new(),
                ..Default::default()
            }
        );
    }

    #[tokio::test]
    async fn unknown_tool_is_an_ordinary_error() {
        let dir = TempDir::new().unwrap();
        let result = execute(&context(&dir), &call("rm_rf", serde_json::json!({})))
            .await
            .unwrap();
        assert!(result.is_error);
        assert_eq!(result.name, "rm_rf");
        assert!(
            result.content.contains("unknown tool 'rm_rf'"),
            "{}",
            result.content
        );
        assert!(
            result.content.contains(
                "shell, read_file, write_file, edit_file, list_files, search_files, glob"
            )
        );
    }

    #[tokio::test]
    async fn every_builtin_tool_is_dispatched() {
        let dir = TempDir::new().unwrap();
        for name in BUILTIN_TOOLS {
            let result = execute(&context(&dir), &call(name, serde_json::json!({"bogus": 1})))
                .await
                .unwrap();
            assert!(result.is_error);
            assert!(
                result
                    .content
                    .starts_with(&format!("invalid arguments for tool '{name}'")),
                "{name}: {}",
                result.content
            );
        }
    }

    #[tokio::test]
    async fn invalid_json_is_an_ordinary_error() {
        let dir = TempDir::new().unwrap();
        let mut bad = call(READ_FILE, serde_json::json!({}));
        bad.arguments = "{\"path\": ".into();
        let result = execute(&context(&dir), &bad).await.unwrap();
        assert!(result.is_error);
        assert!(
            result
                .content
                .starts_with("invalid arguments for tool 'read_file'"),
            "{}",
            result.content
        );
        assert!(result.content.contains("\"required\":[\"path\"]"));
    }

    #[tokio::test]
    async fn missing_argument_is_an_ordinary_error() {
        let dir = TempDir::new().unwrap();
        let result = execute(&context(&dir), &call(SHELL, serde_json::json!({})))
            .await
            .unwrap();
        assert!(result.is_error);
        assert!(
            result.content.contains("missing field `command`"),
            "{}",
            result.content
        );
    }

    #[tokio::test]
    async fn unknown_argument_is_an_ordinary_error() {
        let dir = TempDir::new().unwrap();
        let result = execute(
            &context(&dir),
            &call(
                WRITE_FILE,
                serde_json::json!({"path": "a", "content": "", "mode": 7}),
            ),
        )
        .await
        .unwrap();
        assert!(result.is_error);
        assert!(
            result.content.contains("unknown field `mode`"),
            "{}",
            result.content
        );
    }

    #[tokio::test]
    async fn wrong_argument_type_is_an_ordinary_error() {
        let dir = TempDir::new().unwrap();
        let result = execute(
            &context(&dir),
            &call(LIST_FILES, serde_json::json!({"recursive": "yes"})),
        )
        .await
        .unwrap();
        assert!(result.is_error);
        assert!(
            result.content.contains("invalid type"),
            "{}",
            result.content
        );
    }

    #[tokio::test]
    async fn empty_arguments_mean_an_empty_object() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("f.txt"), "x").unwrap();
        let mut list = call(LIST_FILES, serde_json::json!({}));
        list.arguments = String::new();
        let result = execute(&context(&dir), &list).await.unwrap();
        assert!(!result.is_error, "{}", result.content);
        assert_eq!(result.content, "f.txt");
    }

    #[tokio::test]
    async fn creates_a_missing_workspace() {
        let dir = TempDir::new().unwrap();
        let mut ctx = context(&dir);
        ctx.workspace = dir.path().join("runs").join("r1");
        let result = execute(&ctx, &call(LIST_FILES, serde_json::json!({})))
            .await
            .unwrap();
        assert!(!result.is_error, "{}", result.content);
        assert!(ctx.workspace.is_dir());
    }

    #[tokio::test]
    async fn workspace_that_cannot_be_created_is_an_infrastructure_error() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("file"), "x").unwrap();
        let mut ctx = context(&dir);
        ctx.workspace = dir.path().join("file").join("ws");
        let err = execute(&ctx, &call(LIST_FILES, serde_json::json!({})))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::Io { .. }), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("cannot create the workspace directory")
        );
    }

    #[tokio::test]
    async fn already_cancelled_call_does_not_run() {
        let dir = TempDir::new().unwrap();
        let ctx = context(&dir);
        ctx.cancel.cancel();
        let err = execute(
            &ctx,
            &call(
                WRITE_FILE,
                serde_json::json!({"path": "a.txt", "content": "x"}),
            ),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ToolError::Cancelled));
        assert_eq!(err.to_string(), "the tool call was cancelled");
        assert!(!dir.path().join("a.txt").exists());
    }
}
