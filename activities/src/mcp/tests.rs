//! The MCP side of the activities against the reference servers from npm (server-filesystem
//! over stdio, server-everything over streamable HTTP on loopback and over stdio), installed
//! by `scripts/mcp-servers.sh`. Skipped, with the reason printed, only when `node` is absent.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use baton_proto::{McpListRequest, McpOrigin, ToolCall, ToolResult};
use baton_store::{BlobId, SharedStore};
use pretty_assertions::assert_eq;

use super::settings::{McpServerSettings, McpSettings};
use super::{McpError, McpPool, McpService, call};

/// The reference servers' `node_modules/@modelcontextprotocol`, or `None` (printed) without
/// node.
fn servers_dir() -> Option<PathBuf> {
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: `node` is not installed (the MCP reference servers need it)");
        return None;
    }
    let script = repo_root().join("scripts/mcp-servers.sh");
    let out = std::process::Command::new(&script)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    Some(PathBuf::from(dir).join("node_modules/@modelcontextprotocol"))
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn stdio(args: Vec<String>) -> McpServerSettings {
    McpServerSettings {
        command: Some("node".into()),
        args,
        startup_timeout_secs: Some(20),
        ..Default::default()
    }
}

/// A reference server (`server-filesystem`, `server-everything`) over stdio with `args`.
fn reference(modules: &Path, package: &str, args: &[&str]) -> McpServerSettings {
    let script = modules.join(package).join("dist/index.js");
    let mut all = vec![script.display().to_string()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    stdio(all)
}

fn fs_server(modules: &Path, dir: &Path) -> McpServerSettings {
    reference(modules, "server-filesystem", &[&dir.display().to_string()])
}

fn pool(servers: Vec<(&str, McpServerSettings)>) -> McpPool {
    let settings = McpSettings {
        servers: servers
            .into_iter()
            .map(|(name, s)| (name.to_owned(), s))
            .collect(),
        ..Default::default()
    };
    settings.check().unwrap();
    McpPool::new(settings)
}

fn store(dir: &Path) -> SharedStore {
    Arc::new(baton_store::LocalStore::new(dir.join("blobs")).unwrap())
}

fn list(server: &str, tools: &[&str]) -> McpListRequest {
    McpListRequest {
        server: server.into(),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        sandbox: None,
    }
}

/// Calls `tool` of `server` as `mcp_call_tool` does.
async fn call_tool(
    pool: &McpPool,
    store: &SharedStore,
    server: &str,
    tool: &str,
    arguments: serde_json::Value,
    timeout: Duration,
) -> Result<ToolResult, McpError> {
    let origin = McpOrigin {
        server: server.into(),
        tool: tool.into(),
        ..Default::default()
    };
    let call = ToolCall {
        id: "call-1".into(),
        name: baton_core::mcp::tool_name(server, tool, &Default::default()),
        arguments: arguments.to_string(),
        ..Default::default()
    };
    call::execute(pool, store, &origin, &call, timeout, None).await
}

const CALL: Duration = Duration::from_secs(20);

/// [`call_tool`] within [`CALL`], which must not fail.
async fn ok(
    pool: &McpPool,
    store: &SharedStore,
    server: &str,
    tool: &str,
    arguments: serde_json::Value,
) -> ToolResult {
    call_tool(pool, store, server, tool, arguments, CALL)
        .await
        .unwrap_or_else(|e| panic!("{server}/{tool}: {e}"))
}

#[tokio::test]
async fn filesystem_tools_are_listed_filtered_and_called() {
    let Some(modules) = servers_dir() else { return };
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("hello.txt"), "hello from baton\n").unwrap();
    let pool = pool(vec![("fs", fs_server(&modules, &shared))]);
    let service = McpService::new(pool.clone());

    let all = service.list(&list("fs", &[]), "run-1").await.unwrap();
    assert_eq!(all.server, "fs");
    assert_eq!(all.listed, 14);
    assert_eq!(all.tools.len(), 14);
    assert!(all.unknown.is_empty());
    assert!(
        all.server_info.starts_with("secure-filesystem-server "),
        "{}",
        all.server_info
    );
    let tool = |name: &str| all.tools.iter().find(|t| t.name == name).unwrap().clone();
    let read = tool("read_text_file");
    assert_eq!(read.read_only_hint, Some(true));
    assert_eq!(read.destructive_hint, None);
    let schema: serde_json::Value = serde_json::from_str(&read.input_schema).unwrap();
    assert_eq!(schema["required"], serde_json::json!(["path"]));
    let write = tool("write_file");
    assert_eq!(
        (write.read_only_hint, write.destructive_hint),
        (Some(false), Some(true))
    );
    assert!(!write.description.is_empty());
    let read_only = all
        .tools
        .iter()
        .filter(|t| t.read_only_hint == Some(true))
        .count();
    assert_eq!(read_only, 10);

    // Only the names asked for, in the server's order; the rest named as unknown.
    let some = service
        .list(
            &list("fs", &["write_file", "no_such_tool", "read_text_file"]),
            "run-1",
        )
        .await
        .unwrap();
    let names: Vec<&str> = some.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["read_text_file", "write_file"]);
    assert_eq!(some.unknown, ["no_such_tool"]);
    assert_eq!(some.listed, 14);

    let store = store(dir.path());
    let path = shared.join("hello.txt").display().to_string();
    let read = ok(
        &pool,
        &store,
        "fs",
        "read_text_file",
        serde_json::json!({ "path": path }),
    )
    .await;
    assert_eq!(
        (read.content.as_str(), read.is_error),
        ("hello from baton\n", false)
    );
    assert_eq!(read.name, "mcp__fs__read_text_file");
    assert_eq!(read.call_id, "call-1");

    let new = shared.join("new.txt");
    let wrote = ok(
        &pool,
        &store,
        "fs",
        "write_file",
        serde_json::json!({ "path": new.display().to_string(), "content": "written\n" }),
    )
    .await;
    assert!(!wrote.is_error, "{}", wrote.content);
    assert_eq!(std::fs::read_to_string(&new).unwrap(), "written\n");

    // The tool's own error is a result the model sees, not a failure.
    let outside = ok(
        &pool,
        &store,
        "fs",
        "read_text_file",
        serde_json::json!({ "path": "/etc/passwd" }),
    )
    .await;
    assert!(outside.is_error);
    assert!(
        outside.content.contains("outside allowed directories"),
        "{}",
        outside.content
    );
    // Arguments that are not an object never reach the server.
    let bad = ok(
        &pool,
        &store,
        "fs",
        "read_text_file",
        serde_json::json!(["x"]),
    )
    .await;
    assert!(
        bad.is_error && bad.content.contains("not a JSON object"),
        "{}",
        bad.content
    );
    pool.close_all().await;
}

/// A server-everything on loopback (the preload binds it to 127.0.0.1), killed when dropped.
struct Everything {
    child: std::process::Child,
    port: u16,
    modules: PathBuf,
    url: String,
}

impl Everything {
    fn start(modules: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self {
            child: Self::spawn(modules, port),
            port,
            modules: modules.to_path_buf(),
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }

    fn spawn(modules: &Path, port: u16) -> std::process::Child {
        let child = std::process::Command::new("node")
            .arg("-r")
            .arg(repo_root().join("tests/mcp/loopback.cjs"))
            .arg(modules.join("server-everything/dist/index.js"))
            .arg("streamableHttp")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "server-everything did not listen on {port} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        child
    }

    /// A new server process on the same port (it knows none of the old sessions).
    fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::spawn(&self.modules, self.port);
    }
}

impl Drop for Everything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn everything_over_http_text_images_structured_content_errors_and_timeouts() {
    let Some(modules) = servers_dir() else { return };
    let mut server = Everything::start(&modules);
    // Every lease pings first (the worker's pool pings connections unused for 15 s).
    let pool = pool(vec![(
        "every",
        McpServerSettings {
            url: Some(server.url.clone()),
            startup_timeout_secs: Some(10),
            ..Default::default()
        },
    )])
    .with_ping_after(Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let listed = McpService::new(pool.clone())
        .list(&list("every", &["echo", "get-tiny-image"]), "run-1")
        .await
        .unwrap();
    assert_eq!(listed.tools.len(), 2);
    assert!(listed.listed >= 13, "{}", listed.listed);

    let echo = ok(
        &pool,
        &store,
        "every",
        "echo",
        serde_json::json!({"message": "hi"}),
    )
    .await;
    assert_eq!((echo.content.as_str(), echo.is_error), ("Echo: hi", false));

    let image = ok(
        &pool,
        &store,
        "every",
        "get-tiny-image",
        serde_json::json!({}),
    )
    .await;
    assert_eq!(image.attachments.len(), 1, "{image:?}");
    let attachment = &image.attachments[0];
    assert_eq!(
        (attachment.kind.as_str(), attachment.mime_type.as_str()),
        ("image", "image/png")
    );
    let bytes = store
        .get(&BlobId::parse(&attachment.blob).unwrap())
        .await
        .unwrap();
    assert_eq!(bytes.len() as u64, attachment.bytes);
    assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
    let stub = format!(
        "[image image/png, {} bytes, stored as blob {}]",
        attachment.bytes, attachment.blob
    );
    assert!(image.content.contains(&stub), "{}", image.content);
    assert!(!image.content.contains("iVBOR"), "base64 left in the text");

    let weather = ok(
        &pool,
        &store,
        "every",
        "get-structured-content",
        serde_json::json!({"location": "New York"}),
    )
    .await;
    let json: serde_json::Value = serde_json::from_str(&weather.content).unwrap();
    assert_eq!(json["temperature"], serde_json::json!(33));

    let sum = ok(
        &pool,
        &store,
        "every",
        "get-sum",
        serde_json::json!({"a": "x", "b": 2}),
    )
    .await;
    assert!(sum.is_error, "{}", sum.content);
    assert!(sum.content.contains("Invalid"), "{}", sum.content);

    // The run's tool timeout: the model sees an error naming it, the call is cancelled.
    let slow = call_tool(
        &pool,
        &store,
        "every",
        "trigger-long-running-operation",
        serde_json::json!({"duration": 10, "steps": 2}),
        Duration::from_secs(1),
    )
    .await
    .unwrap();
    assert!(slow.is_error, "{}", slow.content);
    assert!(slow.content.contains("within 1 s"), "{}", slow.content);
    // The pool reconnects after the timeout.
    let again = ok(
        &pool,
        &store,
        "every",
        "echo",
        serde_json::json!({"message": "again"}),
    )
    .await;
    assert_eq!(again.content, "Echo: again");

    // A restarted server has forgotten the session: requests on it would hang, the ping
    // before the lease notices and the pool reconnects.
    server.restart();
    let restarted = call_tool(
        &pool,
        &store,
        "every",
        "echo",
        serde_json::json!({"message": "restarted"}),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(restarted.content, "Echo: restarted");
    pool.close_all().await;
}

/// Asserts `e` is `McpUnavailable` (or retryable) and its message has every one of `parts`.
fn expect(e: &McpError, unavailable: bool, parts: &[&str]) {
    assert_eq!(e.is_unavailable(), unavailable, "{e}");
    let message = e.to_string();
    for part in parts {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
}

fn retryable(e: &McpError, parts: &[&str]) {
    expect(e, false, parts);
}

fn unavailable(e: &McpError, parts: &[&str]) {
    expect(e, true, parts);
}

#[tokio::test]
async fn servers_that_cannot_be_used_fail_naming_the_server() {
    let Some(modules) = servers_dir() else { return };
    let dir = tempfile::tempdir().unwrap();
    let refuses = dir.path().join("refuses.js");
    std::fs::write(
        &refuses,
        r#"const rl = require('readline').createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const m = JSON.parse(line);
  if (m.method === 'initialize') {
    process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id: m.id,
      error: { code: -32603, message: 'boom: server misconfigured' } }) + '\n');
  }
});
"#,
    )
    .unwrap();
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let refusing = answering(axum::http::StatusCode::UNAUTHORIZED).await;
    let failing = answering(axum::http::StatusCode::INTERNAL_SERVER_ERROR).await;
    let http = |url: String| McpServerSettings {
        url: Some(url),
        startup_timeout_secs: Some(5),
        ..Default::default()
    };
    let pool = pool(vec![
        ("refusing", http(refusing)),
        ("failing", http(failing)),
        (
            "crashes",
            fs_server(&modules, &dir.path().join("does-not-exist")),
        ),
        (
            "missing",
            McpServerSettings {
                command: Some("baton-no-such-mcp-server".into()),
                ..Default::default()
            },
        ),
        (
            "down",
            McpServerSettings {
                url: Some(format!("http://127.0.0.1:{closed_port}/mcp")),
                startup_timeout_secs: Some(5),
                ..Default::default()
            },
        ),
        ("refuses", stdio(vec![refuses.display().to_string()])),
    ]);
    let service = McpService::new(pool.clone());
    let err = |server: &'static str| {
        let service = service.clone();
        async move { service.list(&list(server, &[]), "run-1").await.unwrap_err() }
    };
    unavailable(
        &err("other").await,
        &[
            "MCP server 'other' is not configured on this worker",
            "(it has: crashes, down, failing, missing, refuses, refusing)",
            "[mcp.servers.other]",
        ],
    );
    unavailable(
        &err("missing").await,
        &["'missing'", "`baton-no-such-mcp-server`", "not found"],
    );
    retryable(
        &err("crashes").await,
        &[
            "MCP server 'crashes'",
            "server-filesystem",
            "Error: None of the specified directories are accessible",
        ],
    );
    retryable(
        &err("down").await,
        &["MCP server 'down'", &closed_port.to_string()],
    );
    unavailable(
        &err("refuses").await,
        &[
            "MCP server 'refuses'",
            "refused the MCP handshake",
            "boom: server misconfigured",
        ],
    );
    unavailable(
        &err("refusing").await,
        &["MCP server 'refusing'", "401", "bearer_token_env"],
    );
    retryable(&err("failing").await, &["MCP server 'failing'", "500"]);
    // A call of an unconfigured server fails the same way.
    let store = store(dir.path());
    let call = call_tool(&pool, &store, "other", "x", serde_json::json!({}), CALL).await;
    unavailable(&call.unwrap_err(), &["'other' is not configured"]);
}

/// An HTTP server on loopback answering every request with `status`; its `/mcp` URL.
async fn answering(status: axum::http::StatusCode) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(move || async move { status });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/mcp")
}

/// SIGKILLs a stdio server's whole process group.
fn kill9(pool_pid: u32) {
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(i32::try_from(pool_pid).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// Bytes the processes of process group `pgid` have read so far (`rchar` of each
/// `/proc/PID/io`): grows when a server reads a request from its stdin.
fn group_bytes_read(pgid: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut total = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        if crate::tools::orphans::process_group(&path) != Some(pgid) {
            continue;
        }
        let io = std::fs::read_to_string(path.join("io")).unwrap_or_default();
        total += io
            .lines()
            .find_map(|l| l.strip_prefix("rchar: "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

#[tokio::test]
async fn a_killed_stdio_server_fails_the_call_and_the_next_one_reconnects() {
    let Some(modules) = servers_dir() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let everything = reference(&modules, "server-everything", &["stdio"]);
    let pool = pool(vec![
        ("every", everything),
        ("fs", fs_server(&modules, dir.path())),
    ]);
    let pid = |server: &'static str| {
        let pool = pool.clone();
        async move {
            pool.lease(server, None)
                .await
                .unwrap()
                .connection
                .process_group()
                .unwrap()
        }
    };

    // Killed during a call: the call fails (retryable), the next one gets a new process.
    let first = pid("every").await;
    let read_before = group_bytes_read(first);
    let slow = call_tool(
        &pool,
        &store,
        "every",
        "trigger-long-running-operation",
        serde_json::json!({"duration": 30, "steps": 30}),
        CALL,
    );
    // Killed once the server has read the call (which runs for 30 s), not before it.
    let killer = async {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while group_bytes_read(first) == read_before {
            assert!(
                std::time::Instant::now() < deadline,
                "server-everything read nothing of the call within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        kill9(first);
    };
    let (failed, ()) = tokio::join!(slow, killer);
    retryable(&failed.unwrap_err(), &["MCP server 'every'", "tools/call"]);
    let echo = ok(
        &pool,
        &store,
        "every",
        "echo",
        serde_json::json!({"message": "back"}),
    )
    .await;
    assert_eq!(echo.content, "Echo: back");
    assert_ne!(pid("every").await, first);

    // Killed between calls: the next call fails retryable or (once the pool has seen the
    // process go) reconnects at once; the one after works on a new process either way.
    let args = serde_json::json!({});
    ok(
        &pool,
        &store,
        "fs",
        "list_allowed_directories",
        args.clone(),
    )
    .await;
    let before = pid("fs").await;
    kill9(before);
    if let Err(e) = call_tool(
        &pool,
        &store,
        "fs",
        "list_allowed_directories",
        args.clone(),
        CALL,
    )
    .await
    {
        retryable(&e, &["MCP server 'fs'"]);
    }
    let after = ok(&pool, &store, "fs", "list_allowed_directories", args).await;
    assert!(
        after.content.contains("Allowed directories"),
        "{}",
        after.content
    );
    assert_ne!(pid("fs").await, before);
    pool.close_all().await;
}

#[tokio::test]
async fn a_sandboxed_server_runs_per_run_in_its_workspace_and_sandbox() {
    let Some(modules) = servers_dir() else { return };
    if let Err(reason) = baton_sandbox::probe_host() {
        eprintln!("skipped: this host cannot sandbox ({reason})");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let root = dir.path().join("workspaces");
    let mut fs = reference(&modules, "server-filesystem", &["."]);
    fs.sandbox = true;
    let mut every = reference(&modules, "server-everything", &["stdio"]);
    every.sandbox = true;
    let pool = pool(vec![("ws", fs), ("every", every)]);
    let tools = crate::tools::ToolService::new(root.clone(), store.clone(), true)
        .with_sandbox(baton_sandbox::SandboxSettings {
            hidden: vec![root.clone()],
            ..Default::default()
        })
        .with_mcp(pool.clone());
    let service = McpService::new(pool.clone()).with_workspaces(tools.clone());
    assert_eq!(
        service
            .list(&list("ws", &[]), "run-a")
            .await
            .unwrap()
            .listed,
        14
    );

    let scope = |run: &str| tools.run_scope("ws", run, None).unwrap();
    let call = |server: &str, tool: &str, arguments: serde_json::Value| ToolCall {
        id: "c1".into(),
        name: format!("mcp__{server}__{tool}"),
        arguments: arguments.to_string(),
        ..Default::default()
    };
    let origin = |server: &str, tool: &str| McpOrigin {
        server: server.into(),
        tool: tool.into(),
        ..Default::default()
    };
    let run = |run_id: &'static str, server: &'static str, tool: &'static str, args| {
        let (pool, store, scope) = (pool.clone(), store.clone(), scope(run_id));
        let (origin, call) = (origin(server, tool), call(server, tool, args));
        async move {
            call::execute(&pool, &store, &origin, &call, CALL, Some(&scope))
                .await
                .unwrap()
        }
    };
    // Each run's server has that run's workspace as its one directory.
    for run_id in ["run-a", "run-b"] {
        let dirs = run(
            run_id,
            "ws",
            "list_allowed_directories",
            serde_json::json!({}),
        )
        .await;
        let workspace = std::fs::canonicalize(tools.workspace_of(run_id)).unwrap();
        assert!(
            dirs.content.ends_with(&workspace.display().to_string()),
            "{}",
            dirs.content
        );
    }
    let target = tools.workspace_of("run-a").join("made.txt");
    let wrote = run(
        "run-a",
        "ws",
        "write_file",
        serde_json::json!({"path": target.display().to_string(), "content": "in the sandbox\n"}),
    )
    .await;
    assert!(!wrote.is_error, "{}", wrote.content);
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "in the sandbox\n"
    );
    if nix::unistd::geteuid().is_root() {
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(&target).unwrap().uid();
        assert_eq!(
            owner,
            baton_sandbox::DEFAULT_SANDBOX_ID,
            "written as the sandbox user"
        );
    }
    // The sandbox's private TMPDIR, not the worker's; no worker variables beyond the base.
    let env = run("run-a", "every", "get-env", serde_json::json!({})).await;
    let env: serde_json::Value = serde_json::from_str(&env.content).unwrap();
    let tmpdir = env["TMPDIR"].as_str().unwrap_or_default().to_owned();
    assert!(!tmpdir.is_empty(), "{env}");
    assert_ne!(
        Some(tmpdir.as_str()),
        std::env::var("TMPDIR").ok().as_deref()
    );
    assert!(env.get("CARGO_MANIFEST_DIR").is_none(), "{env}");
    pool.close_all().await;
}
