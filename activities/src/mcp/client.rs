//! One live connection to an MCP server ([`Connection`]), over rmcp: a stdio child process in a
//! process group of its own (environment cleared but for [`BASE_ENV`] and the names the settings
//! list; stderr logged and its tail kept for errors), or a streamable HTTP session (bearer
//! token and headers from the worker's environment, bounded retries so nothing hangs).
//!
//! The client declares no capabilities (no `roots`: server-filesystem would replace its
//! allowed directories with the client's roots) and keeps no response cache (an outage must be
//! an error, not a stale list). `initialize` runs under the server's `startup_timeout_secs`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use process_wrap::tokio::{CommandWrap, ProcessGroup};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{ClientInitializeError, Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientCacheConfig, RoleClient, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tracing::info;

use super::error::McpError;
use super::pool::RunScope;
use super::settings::{BASE_ENV, McpServerSettings, Transport};

/// Lines of a stdio server's stderr kept for error messages.
const STDERR_TAIL: usize = 20;

/// How long a failed start waits for the child's last stderr lines.
const STDERR_DRAIN: Duration = Duration::from_secs(1);

/// Tries of the HTTP transport's SSE stream resumption before a call fails (rmcp's default
/// retries forever).
const HTTP_RETRIES: usize = 3;

/// The last lines a stdio server wrote to stderr.
#[derive(Clone, Default)]
struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    fn push(&self, line: String) {
        let mut lines = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.len() == STDERR_TAIL {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    fn lines(&self) -> Vec<String> {
        let lines = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        lines.iter().cloned().collect()
    }
}

/// A connected, initialized MCP client. Dropping it closes the session and kills a stdio
/// server's whole process group.
pub(crate) struct Connection {
    server: String,
    what: String,
    transport: Transport,
    service: RunningService<RoleClient, ClientConfig>,
    /// The stdio child's process group (its pid).
    group: Option<u32>,
    stderr: StderrTail,
    /// A sandboxed child's set-up (its private temp dir), kept while it runs.
    sandbox: Option<baton_sandbox::Prepared>,
}

impl Connection {
    /// What a sandboxed server's processes did through their proxy since the last call of
    /// this (`None` unless the server runs with the run's network).
    pub(crate) fn take_network_report(&self) -> Option<baton_sandbox::net::NetReport> {
        self.sandbox
            .as_ref()
            .and_then(baton_sandbox::Prepared::take_network_report)
    }

    /// A handle for requests (cheap; requests on clones multiplex on the one connection).
    pub(crate) fn peer(&self) -> Peer<RoleClient> {
        self.service.peer().clone()
    }

    /// Whether the connection is known dead (a stdio server that exited).
    pub(crate) fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    /// Whether the server answers a ping within `limit`. An HTTP connection does not notice a
    /// server that went away or restarted (a stale session can even make requests hang), so
    /// one unused for a while is pinged before it is handed out.
    pub(crate) async fn answers_ping(&self, limit: Duration) -> bool {
        let ping = rmcp::model::ClientRequest::PingRequest(Default::default());
        matches!(
            tokio::time::timeout(limit, self.service.peer().send_request(ping)).await,
            Ok(Ok(_))
        )
    }

    /// Whether this is a streamable HTTP connection.
    pub(crate) fn is_http(&self) -> bool {
        self.transport == Transport::Http
    }

    /// The stdio server's process group id (its pid), for tests and logs.
    pub(crate) fn process_group(&self) -> Option<u32> {
        self.group
    }

    /// The server's `serverInfo`: "name version".
    pub(crate) fn server_info(&self) -> String {
        self.service
            .peer_info()
            .and_then(|info| info.server_info.clone())
            .map(|i| format!("{} {}", i.name, i.version))
            .unwrap_or_default()
    }

    /// A retryable failure of this connection, with the stderr tail.
    pub(crate) fn unreachable(&self, reason: impl Into<String>) -> McpError {
        McpError::Unreachable {
            server: self.server.clone(),
            what: self.what.clone(),
            reason: reason.into(),
            stderr: self.stderr.lines(),
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.service.cancellation_token().cancel();
        // Wrappers (`npx`, `sh -c`) leave grandchildren that rmcp's graceful close does not
        // reach: the whole group goes.
        kill_group(self.group);
    }
}

/// SIGKILLs the process group `group` (a stdio server and whatever it started).
fn kill_group(group: Option<u32>) {
    if let Some(pid) = group.and_then(|p| i32::try_from(p).ok())
        && pid > 0
    {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// baton's client identity and capabilities (none).
fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("baton", env!("CARGO_PKG_VERSION")),
    )
}

/// Starts or reaches server `name` and runs the MCP handshake; a stdio server with `run` starts
/// in that run's workspace and sandbox.
pub(crate) async fn connect(
    name: &str,
    settings: &McpServerSettings,
    run: Option<&RunScope>,
) -> Result<Connection, McpError> {
    match settings.transport() {
        Transport::Stdio => connect_stdio(name, settings, run).await,
        Transport::Http => connect_http(name, settings).await,
    }
}

/// Sets `cmd` up to run in `run`'s workspace under its sandbox; the set-up must outlive the
/// child.
async fn confine(
    name: &str,
    cmd: &mut tokio::process::Command,
    run: &RunScope,
) -> Result<Option<baton_sandbox::Prepared>, McpError> {
    let sandbox_error = |source| McpError::Sandbox {
        server: name.to_owned(),
        source,
    };
    let workspace = run.workspace.clone();
    tokio::fs::create_dir_all(&workspace).await.map_err(|e| {
        sandbox_error(baton_sandbox::SandboxError::Setup {
            context: format!("cannot create the workspace {}", workspace.display()),
            source: Box::new(e),
        })
    })?;
    cmd.current_dir(&workspace);
    let sandbox = run.sandbox.clone();
    let prepared = tokio::task::spawn_blocking(move || {
        sandbox.prepare(&workspace, baton_store::snapshot::LOCAL_DIR)
    })
    .await
    .map_err(|e| {
        sandbox_error(baton_sandbox::SandboxError::Setup {
            context: "the sandbox set-up panicked".into(),
            source: Box::new(e),
        })
    })?
    .map_err(sandbox_error)?;
    let mut prepared = prepared;
    if let Some(prepared) = &mut prepared {
        prepared.apply(cmd);
    }
    Ok(prepared)
}

async fn connect_stdio(
    name: &str,
    settings: &McpServerSettings,
    run: Option<&RunScope>,
) -> Result<Connection, McpError> {
    let what = settings.describe();
    let command = settings.command.clone().unwrap_or_default();
    let mut cmd = tokio::process::Command::new(&command);
    cmd.args(&settings.args).env_clear();
    for var in BASE_ENV
        .iter()
        .copied()
        .chain(settings.env.iter().map(String::as_str))
    {
        if let Some(value) = std::env::var_os(var) {
            cmd.env(var, value);
        }
    }
    if let Some(cwd) = &settings.cwd {
        cmd.current_dir(cwd);
    }
    let mut confined = match run {
        Some(run) => confine(name, &mut cmd, run).await?,
        None => None,
    };
    let mut wrap = CommandWrap::from(cmd);
    wrap.wrap(ProcessGroup::leader());
    let spawned = TokioChildProcess::builder(wrap)
        .stderr(std::process::Stdio::piped())
        .spawn();
    let (transport, stderr) = spawned.map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            McpError::ProgramNotFound {
                server: name.to_owned(),
                command: command.clone(),
                source,
            }
        } else {
            McpError::Unreachable {
                server: name.to_owned(),
                what: what.clone(),
                reason: format!("cannot start it: {source}"),
                stderr: Vec::new(),
            }
        }
    })?;
    let group = transport.id();
    if let Some(prepared) = &mut confined {
        prepared.spawned().map_err(|source| McpError::Sandbox {
            server: name.to_owned(),
            source,
        })?;
    }
    let tail = StderrTail::default();
    let reader = stderr.map(|stderr| {
        let tail = tail.clone();
        let server = name.to_owned();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                info!(server = %server, "{line}");
                tail.push(line);
            }
        })
    });
    match handshake(name, &what, settings, transport).await {
        Ok(service) => Ok(Connection {
            server: name.to_owned(),
            what,
            transport: Transport::Stdio,
            service,
            group,
            stderr: tail,
            sandbox: confined,
        }),
        Err(mut e) => {
            kill_group(group);
            // The reason a server crashed at start is on its stderr, written as it exited.
            if let Some(reader) = reader {
                let _ = tokio::time::timeout(STDERR_DRAIN, reader).await;
            }
            if let McpError::Unreachable { stderr, .. } = &mut e {
                *stderr = tail.lines();
            }
            Err(e)
        }
    }
}

async fn connect_http(name: &str, settings: &McpServerSettings) -> Result<Connection, McpError> {
    let url = settings.url.clone().unwrap_or_default();
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
    if let Some(var) = &settings.bearer_token_env
        && let Some(token) = std::env::var(var).ok().filter(|t| !t.is_empty())
    {
        config = config.auth_header(token);
    }
    let mut headers = HashMap::new();
    for (header, var) in &settings.headers {
        let Some(value) = std::env::var(var).ok().filter(|v| !v.is_empty()) else {
            continue;
        };
        let bad = |problem: &str| McpError::BadSettings {
            server: name.to_owned(),
            problem: format!("mcp.servers.{name}.headers.{header} (from ${var}): {problem}"),
        };
        let header = http::HeaderName::from_bytes(header.as_bytes())
            .map_err(|_| bad("not a header name"))?;
        let value = http::HeaderValue::from_str(&value)
            .map_err(|_| bad("the variable's value is not a valid header value"))?;
        headers.insert(header, value);
    }
    config = config.custom_headers(headers);
    let mut backoff = rmcp::transport::common::client_side_sse::ExponentialBackoff::default();
    backoff.max_times = Some(HTTP_RETRIES);
    backoff.base_duration = Duration::from_millis(200);
    config.retry_config = Arc::new(backoff);
    let transport = StreamableHttpClientTransport::from_config(config);
    let service = handshake(name, &url, settings, transport).await?;
    Ok(Connection {
        server: name.to_owned(),
        what: url,
        transport: Transport::Http,
        service,
        group: None,
        stderr: StderrTail::default(),
        sandbox: None,
    })
}

/// `initialize` under the start-up timeout, the response cache off.
async fn handshake<T, E, A>(
    name: &str,
    what: &str,
    settings: &McpServerSettings,
    transport: T,
) -> Result<RunningService<RoleClient, ClientConfig>, McpError>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let limit = settings.startup_timeout();
    let unreachable = |reason: String| McpError::Unreachable {
        server: name.to_owned(),
        what: what.to_owned(),
        reason,
        stderr: Vec::new(),
    };
    let service = match tokio::time::timeout(limit, client_config().serve(transport)).await {
        Err(_) => {
            return Err(unreachable(format!(
                "it did not answer the MCP handshake within {} s (startup_timeout_secs)",
                limit.as_secs()
            )));
        }
        Ok(Err(e)) => return Err(classify_init(name, what, e)),
        Ok(Ok(service)) => service,
    };
    service
        .peer()
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    Ok(service)
}

/// An `initialize` failure: refused (JSON-RPC error, credentials) or unreachable.
fn classify_init(name: &str, what: &str, e: ClientInitializeError) -> McpError {
    if let ClientInitializeError::JsonRpcError(error) = &e {
        return McpError::Refused {
            server: name.to_owned(),
            what: what.to_owned(),
            message: format!("{}: {}", error.code.0, error.message),
        };
    }
    let chain = baton_store::error_chain(&e);
    if e.is_authorization_required() || chain.contains("HTTP 401") || chain.contains("HTTP 403") {
        return McpError::Unauthorized {
            server: name.to_owned(),
            what: what.to_owned(),
            detail: chain,
        };
    }
    let reason = match &e {
        // Without the transport's Rust type name.
        ClientInitializeError::TransportError { error, context } => {
            format!("{context}: {}", baton_store::error_chain(&*error.error))
        }
        _ => chain,
    };
    McpError::Unreachable {
        server: name.to_owned(),
        what: what.to_owned(),
        reason,
        stderr: Vec::new(),
    }
}

/// A failed request, without the transport's Rust type name.
pub(crate) fn describe(e: &rmcp::service::ServiceError) -> String {
    match e {
        rmcp::service::ServiceError::TransportSend(error) => {
            baton_store::error_chain(&*error.error)
        }
        other => baton_store::error_chain(other),
    }
}
