//! The MCP harness itself against the real reference servers (no baton binaries): the relay
//! counts a real listing and a real call of server-everything over streamable HTTP, survives a
//! server restart, and the `tee` wrapper of server-filesystem logs what its client sent.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use baton_tests::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"baton-tests","version":"0"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// One JSON-RPC POST to a streamable HTTP endpoint; the session id it answers with and the
/// JSON-RPC answer (from a JSON body or the SSE stream's `data:` line), `Null` for a
/// notification.
async fn post(url: &str, session: Option<&str>, body: &str) -> (Option<String>, Value) {
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .timeout(Duration::from_secs(20))
        .body(body.to_owned());
    if let Some(id) = session {
        req = req.header("mcp-session-id", id);
    }
    let resp = req.send().await.unwrap();
    assert!(resp.status().is_success(), "{body} -> {}", resp.status());
    let session = resp
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = resp.text().await.unwrap();
    let answer = text
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .map_or(text.as_str(), str::trim);
    (session, serde_json::from_str(answer).unwrap_or(Value::Null))
}

async fn initialize(url: &str) -> String {
    let (session, answer) = post(url, None, INITIALIZE).await;
    assert_eq!(
        answer["result"]["serverInfo"]["name"].is_string(),
        true,
        "{answer}"
    );
    let session = session.unwrap();
    post(url, Some(&session), INITIALIZED).await;
    session
}

#[tokio::test(flavor = "multi_thread")]
async fn the_relay_counts_listings_and_calls_that_reach_server_everything() {
    let mut server = EverythingServer::start().unwrap();
    assert_eq!(server.counts(), McpCounts::default());
    let url = server.url();
    let session = initialize(&url).await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let (_, tools) = post(&url, Some(&session), &list).await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"echo") && names.contains(&"get-sum"),
        "{names:?}"
    );
    assert_eq!(server.counts(), McpCounts { lists: 1, calls: 0 });

    // With a space after the colon, as some encoders write it.
    let call = r#"{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "relayed"}}}"#;
    let (_, echoed) = post(&url, Some(&session), call).await;
    assert!(echoed.to_string().contains("relayed"), "{echoed}");
    assert_eq!(server.counts(), McpCounts { lists: 1, calls: 1 });

    // The environment is only PATH, HOME and PORT (get-env returns it).
    let env_call = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"get-env","arguments":{}}}"#;
    let (_, env) = post(&url, Some(&session), env_call).await;
    let env_text = env["result"]["content"][0]["text"].as_str().unwrap();
    let env: Value = serde_json::from_str(env_text).unwrap();
    let mut keys: Vec<&str> = env
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.retain(|k| !["PATH", "HOME", "PORT"].contains(k));
    assert_eq!(keys, Vec::<&str>::new(), "{env_text}");

    // After a restart the URL still works (a new session); counts go on.
    let old = server.pid().unwrap();
    server.restart().unwrap();
    assert_ne!(server.pid().unwrap(), old);
    let session = initialize(&url).await;
    post(&url, Some(&session), &list).await;
    assert_eq!(server.counts(), McpCounts { lists: 2, calls: 2 });
    server.kill();
    assert_eq!(server.pid(), None);
}

#[test]
fn the_filesystem_wrapper_logs_what_its_client_sent() {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("hello.txt"), "hello from disk").unwrap();
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("fs.log");
    let (program, args) = fs_server_command(data.path(), &log).unwrap();
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let path = data.path().join("hello.txt").display().to_string();
    let read = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "read_text_file", "arguments": {"path": path}}});
    for line in [
        INITIALIZE.to_owned(),
        INITIALIZED.to_owned(),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string(),
        read.to_string(),
    ] {
        writeln!(stdin, "{line}").unwrap();
    }
    let mut answers = Vec::new();
    while answers.len() < 3 {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "server ended early"
        );
        answers.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    drop(stdin);
    let _ = child.wait();
    assert!(
        answers[1].to_string().contains("write_file"),
        "{}",
        answers[1]
    );
    assert_eq!(
        answers[2]["result"]["content"][0]["text"],
        "hello from disk"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(count_methods(&logged, "tools/list"), 1, "{logged}");
    assert_eq!(count_methods(&logged, "tools/call"), 1, "{logged}");
}
