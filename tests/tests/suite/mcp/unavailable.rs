//! MCP servers a run cannot use: not configured on the worker, a program that is missing, a
//! server that exits at start, one that refuses the handshake. Each ends the run
//! `tools_unavailable` with the server named in its detail, its events and the worker log; with
//! `--mcp-unavailable continue` the run goes on without that server's tools.

use super::*;

use pretty_assertions::assert_eq;

/// A stdio "server" that answers every request (the `initialize` first) with a JSON-RPC error.
const REFUSES_HANDSHAKE: &str = r#"
const rl = require('readline').createInterface({ input: process.stdin });
rl.on('line', (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.id === undefined) return;
  process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id: m.id,
    error: { code: -32603, message: 'this server refuses every handshake' } }) + '\n');
});
"#;

#[test]
fn servers_that_cannot_be_used_end_the_run_or_are_left_out_as_asked() {
    let setup = Setup::start();
    let refuses = setup.dir.path().join("refuses.cjs");
    std::fs::write(&refuses, REFUSES_HANDSHAKE).unwrap();
    let missing_dir = setup.dir.path().join("no-such-dir");
    let crashes_args = [
        filesystem_entry().unwrap().display().to_string(),
        missing_dir.display().to_string(),
    ];
    let crashes_args: Vec<&str> = crashes_args.iter().map(String::as_str).collect();
    let config = setup.config(&[
        setup.fs(),
        command_server_toml("missing", "/nonexistent/mcp-server", &[]),
        command_server_toml("crashes", "node", &crashes_args),
        command_server_toml("refuses", "node", &[refuses.to_str().unwrap()]),
    ]);
    let queue = unique("mcp-unavailable");
    let w = setup.worker(&queue, &config);

    // (server, what the run's detail says about it)
    let cases = [
        ("ghost", "ghost"),
        ("missing", "/nonexistent/mcp-server"),
        (
            "crashes",
            "None of the specified directories are accessible",
        ),
        ("refuses", "this server refuses every handshake"),
    ];
    for (name, why) in cases {
        let run = setup.submit(&queue, &format!("run-mcp-{name}"), &["--mcp", name]);
        let r = result(&setup.server, &run, 1);
        assert_eq!(r["reason"], "tools_unavailable", "{name}: {r}");
        let detail = r["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(&format!("'{name}'")), "{name}: {detail}");
        assert!(detail.contains(why), "{name}: {detail}");
        // The run's last event, `finished`, says it too; the worker log names the server and why.
        let events = events(&setup.server, &run);
        let finished = events.last().map(|e| e["finished"]["detail"].clone());
        assert_eq!(
            finished.as_ref().and_then(|d| d.as_str()),
            Some(detail),
            "{events:?}"
        );
        let log = w.log();
        let server_field = format!("server={name} ");
        assert!(
            log.lines()
                .any(|l| l.contains("MCP tools not listed") && l.contains(&server_field)),
            "{name}: the worker log does not name it:\n{log}"
        );
        assert!(
            log.contains(why),
            "{name}: the worker log does not say why:\n{log}"
        );
        assert_eq!(setup.llm.request_count(), 0, "{name}: the model was called");
    }
    // Told to go on: the run completes without the broken server's tools.
    setup.llm.push_text("Without the broken one.");
    let run = setup.submit(
        &queue,
        "run-mcp-continue",
        &[
            "--mcp",
            "fs",
            "--mcp",
            "refuses",
            "--mcp-unavailable",
            "continue",
        ],
    );
    let r = result(&setup.server, &run, 0);
    assert_eq!(r["status"], "COMPLETED", "{r}");
    let requests = setup.llm.requests();
    assert_eq!(requests.len(), 1);
    let names = tool_names(&requests[0]);
    assert!(
        names.iter().any(|n| n == "mcp__fs__read_text_file"),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__refuses")),
        "{names:?}"
    );
    let events = events(&setup.server, &run);
    assert!(
        events.iter().any(|e| {
            let note = e["note"]["text"].as_str().unwrap_or_default();
            note.contains("'refuses'")
                && note.contains("this server refuses every handshake")
                && note.contains("goes on without it")
        }),
        "no event says why the server was left out: {events:?}"
    );
}
