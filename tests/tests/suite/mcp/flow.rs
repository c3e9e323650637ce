//! A run that lists and calls the tools of a stdio and an HTTP server, with approval of the
//! mutating one; `never_ask` denying it unless a policy rule trusts it; images and tool errors
//! as the model sees them, and the calls in the worker's metrics; a `sandbox = true` server
//! writing into the run's workspace and change set.

use super::*;

use pretty_assertions::assert_eq;
use serde_json::json;

#[test]
fn a_run_calls_a_stdio_and_an_http_server_and_asks_before_a_mutating_tool() {
    let setup = Setup::start();
    let everything = EverythingServer::start().unwrap();
    let notes = setup.data.join("notes.txt");
    std::fs::write(&notes, "notes from the data dir\n").unwrap();
    let written = setup.data.join("out.txt");
    let config = setup.config(&[
        setup.fs(),
        http_server_toml("everything", &everything.url()),
    ]);
    let queue = unique("mcp-flow");
    let _w = setup.worker(&queue, &config);
    let llm = &setup.llm;
    let read = json!({"path": notes}).to_string();
    llm.push_tool_calls(&[
        ("call_read", "mcp__fs__read_text_file", &read),
        (
            "call_echo",
            "mcp__everything__echo",
            r#"{"message":"hello through the relay"}"#,
        ),
    ]);
    let write = json!({"path": written, "content": "written after approval"}).to_string();
    llm.push_tool_calls(&[("call_write", "mcp__fs__write_file", &write)]);
    llm.push_text("All done.");
    let run = setup.submit(
        &queue,
        "run-mcp-flow",
        &["--mcp", "fs", "--mcp", "everything"],
    );

    // The write waits for approval; the read-only calls ran without it.
    let status = wait_state(&setup.server, &run, "AWAITING_APPROVAL", T);
    let pending = status["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{status}");
    assert_eq!(pending[0]["tool"], "mcp__fs__write_file", "{status}");
    let human = baton(&setup.server, &["status", &run]).unwrap();
    assert!(human.stdout.contains("mcp__fs__write_file"), "{human}");
    assert!(!written.exists(), "the write ran before its approval");

    // The first request offered the servers' tools with their schemas.
    let requests = llm.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let names = tool_names(&requests[0]);
    for name in [
        "mcp__fs__read_text_file",
        "mcp__fs__write_file",
        "mcp__everything__echo",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
    }
    let read_def = tool_def(&requests[0], "mcp__fs__read_text_file");
    assert_eq!(
        read_def["parameters"]["properties"]["path"]["type"], "string",
        "{read_def}"
    );
    let write_def = tool_def(&requests[0], "mcp__fs__write_file");
    let required = write_def["parameters"]["required"].to_string();
    assert!(
        required.contains("path") && required.contains("content"),
        "{write_def}"
    );
    let echo_def = tool_def(&requests[0], "mcp__everything__echo");
    assert_eq!(
        echo_def["parameters"]["properties"]["message"]["type"], "string",
        "{echo_def}"
    );
    assert!(
        !echo_def["description"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "{echo_def}"
    );

    // The next request carries both results.
    assert_eq!(
        result_of(&requests[1], "call_read").trim(),
        "notes from the data dir"
    );
    assert!(
        result_of(&requests[1], "call_echo").contains("Echo: hello through the relay"),
        "{:?}",
        tool_results(&requests[1])
    );

    let approve = baton(&setup.server, &["approve", &run, "--all"]).unwrap();
    assert_eq!(approve.code, 0, "{approve}");
    let r = result(&setup.server, &run, 0);
    assert_eq!(r["status"], "COMPLETED", "{r}");
    assert_eq!(r["answer"], "All done.");
    assert_eq!(
        std::fs::read_to_string(&written).unwrap(),
        "written after approval"
    );
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let wrote = result_of(&requests[2], "call_write");
    assert!(wrote.contains("Successfully wrote"), "{wrote}");

    // One listing per server; one call of each tool reached its server.
    assert_eq!(everything.counts(), McpCounts { lists: 1, calls: 1 });
    let sent = setup.fs_sent();
    assert_eq!(count_methods(&sent, "tools/list"), 1, "{sent}");
    assert_eq!(count_methods(&sent, "tools/call"), 2, "{sent}");

    // The transcript and the events name the MCP tools.
    let transcript = baton(&setup.server, &["transcript", &run]).unwrap();
    assert_eq!(transcript.code, 0, "{transcript}");
    for name in [
        "mcp__fs__read_text_file",
        "mcp__everything__echo",
        "mcp__fs__write_file",
    ] {
        assert!(transcript.stdout.contains(name), "{name}: {transcript}");
    }
    assert!(
        transcript.stdout.contains("Successfully wrote"),
        "{transcript}"
    );
    let events = events(&setup.server, &run);
    let started: Vec<String> = events
        .iter()
        .filter(|e| !e["tool_started"].is_null())
        .map(|e| e["tool_started"].to_string())
        .collect();
    for name in [
        "mcp__fs__read_text_file",
        "mcp__everything__echo",
        "mcp__fs__write_file",
    ] {
        assert!(
            started.iter().any(|s| s.contains(name)),
            "{name}: {started:?}"
        );
    }
    // The listing notes count the tools the servers annotate read-only.
    let notes: Vec<&str> = events
        .iter()
        .filter_map(|e| e["note"]["text"].as_str())
        .collect();
    for listed in ["MCP server 'fs'", "MCP server 'everything'"] {
        assert!(
            notes.iter().any(|n| n.starts_with(listed)),
            "{listed}: {notes:?}"
        );
    }
    assert!(
        notes
            .iter()
            .any(|n| n.ends_with(": 14 tools (10 read-only)")),
        "{notes:?}"
    );
    assert!(
        events.iter().any(|e| !e["approval_requested"].is_null()
            && e["approval_requested"]
                .to_string()
                .contains("mcp__fs__write_file")),
        "{events:?}"
    );
}

#[test]
fn never_ask_denies_a_mutating_mcp_tool_unless_a_policy_rule_trusts_it() {
    let setup = Setup::start();
    let config = setup.config(&[setup.fs()]);
    let queue = unique("mcp-never-ask");
    let _w = setup.worker(&queue, &config);
    let target = setup.data.join("never.txt");
    let write = json!({"path": target, "content": "must not be written"}).to_string();
    setup
        .llm
        .push_tool_calls(&[("call_write", "mcp__fs__write_file", &write)]);
    setup.llm.push_text("Could not write without approval.");
    let run = setup.submit(&queue, "run-mcp-never-ask", &["--mcp", "fs", "--never-ask"]);
    let r = result(&setup.server, &run, 0);
    assert_eq!(r["status"], "COMPLETED", "{r}");
    assert_eq!(r["answer"], "Could not write without approval.");
    let requests = setup.llm.requests();
    assert_eq!(requests.len(), 2);
    let denial = result_of(&requests[1], "call_write");
    assert!(denial.contains("never_ask"), "{denial}");
    assert!(!target.exists(), "a denied call wrote the file");
    let sent = setup.fs_sent();
    assert_eq!(count_methods(&sent, "tools/call"), 0, "{sent}");
    // It never waited.
    assert!(
        events(&setup.server, &run)
            .iter()
            .all(|e| e["approval_requested"].is_null()),
        "the run asked for approval"
    );

    // A policy file that trusts the server's writes for good: the same call runs, unasked.
    let policy = setup.dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "mode = \"never_ask\"\n[[rules]]\ntool = \"mcp__fs__write_*\"\naction = \"allow\"\n",
    )
    .unwrap();
    let trusted = setup.data.join("trusted.txt");
    let write = json!({"path": trusted, "content": "written by a trusted tool"}).to_string();
    setup
        .llm
        .push_tool_calls(&[("call_trusted", "mcp__fs__write_file", &write)]);
    setup.llm.push_text("Wrote it.");
    let policy = policy.display().to_string();
    let run = setup.submit(
        &queue,
        "run-mcp-trusted",
        &["--mcp", "fs", "--policy", &policy],
    );
    let r = result(&setup.server, &run, 0);
    assert_eq!(r["answer"], "Wrote it.", "{r}");
    assert_eq!(
        std::fs::read_to_string(&trusted).unwrap(),
        "written by a trusted tool"
    );
    let wrote = result_of(&setup.llm.requests()[3], "call_trusted");
    assert!(wrote.contains("Successfully wrote"), "{wrote}");
}

#[test]
fn images_go_to_the_blob_store_tool_errors_reach_the_model_and_metrics_count_both() {
    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n";
    let setup = Setup::start();
    let everything = EverythingServer::start().unwrap();
    let metrics_addr = format!("127.0.0.1:{}", free_port().unwrap());
    let config = setup.config_with(
        &[http_server_toml("everything", &everything.url())],
        &format!("metrics_addr = \"{metrics_addr}\"\n"),
    );
    let queue = unique("mcp-content");
    let _w = setup.worker(&queue, &config);
    setup.llm.push_tool_calls(&[
        ("call_image", "mcp__everything__get-tiny-image", "{}"),
        (
            "call_sum",
            "mcp__everything__get-sum",
            r#"{"a": "one", "b": 2}"#,
        ),
    ]);
    setup.llm.push_text("Seen.");
    let run = setup.submit(
        &queue,
        "run-mcp-content",
        &["--mcp", "everything:get-tiny-image,get-sum"],
    );
    let r = result(&setup.server, &run, 0);
    assert_eq!(r["status"], "COMPLETED", "{r}");
    let requests = setup.llm.requests();
    assert_eq!(requests.len(), 2);
    // Narrowed to the two tools named.
    let mut names = tool_names(&requests[0]);
    names.retain(|n| n.starts_with("mcp__"));
    names.sort();
    assert_eq!(
        names,
        [
            "mcp__everything__get-sum",
            "mcp__everything__get-tiny-image"
        ]
    );

    let image = result_of(&requests[1], "call_image");
    assert!(image.contains("Here's the image you requested"), "{image}");
    assert!(image.contains("image"), "a stub names the image: {image}");
    assert!(
        !image.contains("iVBORw0KGgo"),
        "the model got the image's base64: {image}"
    );
    // The stub names the blob, which holds the decoded PNG.
    let blob = image
        .split(|c: char| !c.is_ascii_hexdigit())
        .find(|w| w.len() == 64)
        .unwrap_or_else(|| panic!("no blob id in the stub: {image}"));
    let path = setup.server.blob_dir().join(&blob[..2]).join(&blob[2..]);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(bytes.starts_with(PNG), "{} is not the PNG", path.display());

    let sum = result_of(&requests[1], "call_sum");
    assert!(sum.contains("expected number, received string"), "{sum}");
    assert_eq!(everything.counts(), McpCounts { lists: 1, calls: 2 });

    // The worker's metrics count the calls by server and tool.
    let expected = [
        r#"baton_tool_calls_total{outcome="ok",server="everything",tool="get-tiny-image"} 1"#,
        r#"baton_tool_calls_total{outcome="error",server="everything",tool="get-sum"} 1"#,
    ];
    wait_until_blocking(T, "the MCP calls in the metrics", || {
        let text = metrics(&metrics_addr)?;
        Ok(expected
            .iter()
            .all(|line| text.lines().any(|l| l == *line))
            .then_some(()))
    })
    .unwrap();
}

/// `sandbox = true`: the stdio server runs per run, in the run's workspace under its sandbox, and
/// what it writes there is in the run's change set like a built-in tool's writes.
#[test]
fn a_sandboxed_stdio_server_writes_into_the_runs_workspace_and_change_set() {
    let setup = Setup::start();
    let entry = filesystem_entry().unwrap().display().to_string();
    let mut ws = command_server_toml("ws", "node", &[&entry, "."]);
    ws.push_str("sandbox = true\n");
    let config = setup.config(&[ws]);
    let queue = unique("mcp-sandboxed");
    let w = setup.worker(&queue, &config);
    let run = unique("run-mcp-sandboxed");
    let target = w.workspace_root().join(&run).join("made-by-mcp.txt");
    let write = json!({"path": target, "content": "written in the sandbox\n"}).to_string();
    setup
        .llm
        .push_tool_calls(&[("call_write", "mcp__ws__write_file", &write)]);
    setup.llm.push_text("Wrote it.");
    submit(
        &setup.server,
        &queue,
        &run,
        &["--provider", "openai", "--mcp", "ws", "--no-approval"],
        "write a file",
    );
    let r = result(&setup.server, &run, 0);
    assert_eq!(r["answer"], "Wrote it.", "{r}");
    let wrote = result_of(&setup.llm.requests()[1], "call_write");
    assert!(wrote.contains("Successfully wrote"), "{wrote}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "written in the sandbox\n"
    );
    let files = r["changes"]["files"].to_string();
    assert!(
        files.contains("made-by-mcp.txt"),
        "not in the change set: {}",
        r["changes"]
    );
}
