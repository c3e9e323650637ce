//! Network for tools end to end: shell calls run in a network namespace of their
//! own whose only way out is baton's proxy at 127.0.0.1:3128. `--allow-host` lets exactly the
//! named hosts through; `--network` alone lets public hosts through but never loopback,
//! link-local or private addresses; a raw connect reaches nothing. A refused request is a 403
//! with the reason for the tool, a `network_refusals` entry on the call's `tool_finished`
//! event (`watch --json`, `transcript`), and a count in `baton_tool_network_total`. The
//! targets count what reached them (`baton_tests::net_targets`), so "refused" also means
//! "never arrived". Real dev server, worker, CLI, curl, bash, python, git and pip.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_tests::net_targets::{
    PROBE_PACKAGE, PROBE_WHEEL, PackageIndex, SITE_PAGE, Site, TcpCounter, TlsSite,
};
use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// The proxy's address inside every tool's network namespace.
const PROXY_PORT: u16 = 3128;

/// curl with a deadline, printing the status code after the body.
fn curl(args: &str) -> String {
    format!("curl -sS -m 20 -w '\\nhttp_code=%{{http_code}}\\n' {args}")
}

/// A raw TCP connect to 127.0.0.1:`port` from bash and from Python, each echoing its exit code.
fn raw_connects(port: u16) -> [String; 2] {
    [
        format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'; echo \"rc=$?\""),
        format!(
            "/usr/bin/python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 3)'; echo \"rc=$?\""
        ),
    ]
}

/// Runs one turn of shell calls (`(call id, command)`) with `net` flags and no approvals, waits
/// for the answer, and returns the run id.
fn run_shell_calls(
    server: &DevServer,
    queue: &str,
    name: &str,
    net: &[String],
    calls: &[(&str, String)],
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, command)| json!({"id": id, "name": "shell", "arguments": {"command": command}}))
        .collect();
    let turns = json!([{"text": "Trying the network.", "tool_calls": calls}, {"text": "Done."}]);
    let s = script(dir.path(), name, turns).display().to_string();
    let mut args = vec!["--script", s.as_str(), "--no-approval"];
    args.extend(net.iter().map(String::as_str));
    let run = submit(server, queue, &unique(name), &args, "use the network");
    let r = ended(server, &run, 0);
    assert_eq!(r.answer, "Done.", "{r:?}");
    run
}

/// `--allow-host 127.0.0.1:<port>` for each port.
fn allow_loopback(ports: &[u16]) -> Vec<String> {
    ports
        .iter()
        .flat_map(|p| ["--allow-host".to_owned(), format!("127.0.0.1:{p}")])
        .collect()
}

/// Each shell call's whole output, by call id (`baton transcript --json`).
fn outputs(server: &DevServer, run: &str) -> BTreeMap<String, String> {
    let transcript = baton(server, &["transcript", run, "--json"])
        .unwrap()
        .json()
        .unwrap();
    transcript["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| {
            let r = i.get("tool_result")?;
            let full = r["full_output"].as_str().unwrap_or_default();
            let body = if full.is_empty() {
                r["content"].as_str().unwrap_or_default()
            } else {
                full
            };
            Some((r["call_id"].as_str()?.to_owned(), body.to_owned()))
        })
        .collect()
}

/// The refusals (`host:port`) on each call's `tool_finished` event (`baton watch --json`),
/// checking each names its kind and reason.
fn watched_refusals(server: &DevServer, run: &str) -> BTreeMap<String, Vec<String>> {
    let lines = baton(server, &["watch", run, "--json"])
        .unwrap()
        .json_lines()
        .unwrap();
    lines
        .iter()
        .filter_map(|l| l.get("tool_finished"))
        .map(|f| {
            let refusals = f["network_refusals"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let named = refusals
                .iter()
                .map(|r| {
                    for field in ["kind", "reason"] {
                        assert!(
                            !r[field].as_str().unwrap_or_default().is_empty(),
                            "a refusal without its {field}: {f}"
                        );
                    }
                    let port = r["port"]
                        .as_u64()
                        .or_else(|| r["port"].as_str()?.parse().ok())
                        .unwrap_or_else(|| panic!("a refusal without a port: {f}"));
                    format!("{}:{port}", r["host"].as_str().unwrap_or_default())
                })
                .collect();
            (f["call_id"].as_str().unwrap().to_owned(), named)
        })
        .collect()
}

/// The proxy's 403 for `host_port` as curl prints it.
fn assert_refused(output: &str, host_port: &str) {
    assert!(
        output.contains(&format!("baton proxy refused {host_port}: ")),
        "no refusal of {host_port}: {output}"
    );
    assert!(output.contains("http_code=403"), "{output}");
}

/// A command of [`raw_connects`] failed (and did run).
fn assert_connect_failed(output: &str) {
    assert!(
        output.contains("rc=") && !output.contains("rc=0"),
        "the connect did not fail: {output}"
    );
}

/// The expected refusals by call id.
fn by_call(calls: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    calls
        .iter()
        .map(|(id, r)| {
            (
                (*id).to_owned(),
                r.iter().map(|h| (*h).to_owned()).collect(),
            )
        })
        .collect()
}

#[test]
fn allowed_host_is_reached_and_every_other_destination_refused_visibly() {
    let server = DevServer::start().unwrap();
    let site = Site::start().unwrap();
    let counter = TcpCounter::start().unwrap();
    let queue = unique("net-allow");
    let (_w, metrics) = metrics_worker(&server, &queue, &[]);
    let frontend = server.port();
    let counter_at = format!("127.0.0.1:{}", counter.port());
    let frontend_at = format!("127.0.0.1:{frontend}");
    let metadata_at = "169.254.169.254:80";
    let calls = [
        ("site", curl(&site.url())),
        ("counter", curl(&format!("http://{counter_at}/"))),
        ("frontend", curl(&format!("http://{frontend_at}/"))),
        ("metadata", curl("http://169.254.169.254/")),
        (
            "tunnel-counter",
            format!("curl -sS -m 20 https://{counter_at}/; echo \"rc=$?\""),
        ),
        // The allowed host itself is out of reach but through the proxy.
        ("raw-site", raw_connects(site.port())[0].clone()),
    ];
    let net = allow_loopback(&[site.port()]);
    let run = run_shell_calls(&server, &queue, "run-allow", &net, &calls);

    let out = outputs(&server, &run);
    assert!(out["site"].contains(SITE_PAGE), "{}", out["site"]);
    assert!(out["site"].contains("http_code=200"), "{}", out["site"]);
    assert_refused(&out["counter"], &counter_at);
    assert_refused(&out["frontend"], &frontend_at);
    assert_refused(&out["metadata"], metadata_at);
    let tunnel = &out["tunnel-counter"];
    assert!(tunnel.contains("response 403"), "{tunnel}");
    assert_connect_failed(tunnel);
    assert_connect_failed(&out["raw-site"]);
    assert_eq!((site.hits(), site.connections()), (1, 1));
    assert_eq!(
        counter.connections(),
        0,
        "a refused request reached the port"
    );

    let expected = by_call(&[
        ("counter", &[&counter_at]),
        ("frontend", &[&frontend_at]),
        ("metadata", &[metadata_at]),
        ("raw-site", &[]),
        ("site", &[]),
        ("tunnel-counter", &[&counter_at]),
    ]);
    assert_eq!(watched_refusals(&server, &run), expected);

    let transcript = baton(&server, &["transcript", &run]).unwrap();
    assert_eq!(transcript.code, 0, "{transcript}");
    for host_port in [&counter_at, &frontend_at, metadata_at] {
        assert!(
            transcript
                .stdout
                .contains(&format!("network refused: {host_port} (")),
            "{host_port} not in the transcript: {}",
            transcript.stdout
        );
    }

    let (_, samples) = scrape_until(&metrics, "the requests counted", |s| {
        let counted = |outcome| value(s, "baton_tool_network_total", &[("outcome", outcome)]);
        counted("allowed") >= 1.0 && counted("refused") >= 4.0
    });
    let counted = |outcome| {
        value(
            &samples,
            "baton_tool_network_total",
            &[("outcome", outcome)],
        )
    };
    assert_eq!((counted("allowed"), counted("refused")), (1.0, 4.0));
}

/// The review's held-out case: a rule naming the frontend's address
/// (`--allow-host 127.0.0.1`) does not open the frontend's other ports. The dev server's HTTP
/// API answers the harness, and a tool asking it (through the proxy) gets the proxy's 403
/// `X-Baton-Refused: protected`, on the call's network report too; a local service on another
/// port is reached when a rule names its address and port exactly.
#[test]
fn the_frontends_http_api_stays_protected_when_its_address_is_allowed() {
    let server = DevServer::start().unwrap();
    let site = Site::start().unwrap();
    let queue = unique("net-http-api");
    let _w = worker(&server, &queue, &[]);
    let api_at = format!("127.0.0.1:{}", server.http_port());
    let api = format!("http://{api_at}/api/v1/namespaces");
    // The control: the HTTP API is there and answers without credentials.
    let answered = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-m",
            "20",
            &api,
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&answered.stdout),
        "200",
        "{answered:?}"
    );
    let calls = [
        (
            "api",
            format!("curl -s -D - -o /dev/null -w 'http_code=%{{http_code}}\\n' -m 20 {api}"),
        ),
        ("site", curl(&site.url())),
    ];
    let net = [
        "--allow-host".to_owned(),
        "127.0.0.1".to_owned(),
        "--allow-host".to_owned(),
        format!("127.0.0.1:{}", site.port()),
    ];
    let run = run_shell_calls(&server, &queue, "run-http-api", &net, &calls);

    let out = outputs(&server, &run);
    let api_out = &out["api"];
    assert!(api_out.contains("http_code=403"), "{api_out}");
    assert!(
        api_out
            .to_ascii_lowercase()
            .contains("x-baton-refused: protected"),
        "{api_out}"
    );
    assert!(out["site"].contains(SITE_PAGE), "{}", out["site"]);
    assert_eq!(site.hits(), 1);
    assert_eq!(
        watched_refusals(&server, &run),
        by_call(&[("api", &[&api_at]), ("site", &[])])
    );
    let lines = baton(&server, &["watch", &run, "--json"])
        .unwrap()
        .json_lines()
        .unwrap();
    let refusal = lines
        .iter()
        .filter_map(|l| l.get("tool_finished"))
        .find(|f| f["call_id"] == "api")
        .map(|f| f["network_refusals"][0].clone())
        .unwrap();
    assert_eq!(refusal["kind"], "protected", "{refusal}");
    let reason = refusal["reason"].as_str().unwrap();
    assert!(
        reason.contains("of the host of the Temporal frontend")
            && reason.contains(&format!("--allow-host {api_at}")),
        "{reason}"
    );
}

#[test]
fn network_without_hosts_keeps_loopback_out_of_reach() {
    let server = DevServer::start().unwrap();
    let counter = TcpCounter::start().unwrap();
    let queue = unique("net-any");
    let _w = worker(&server, &queue, &[]);
    let [bash_frontend, py_frontend] = raw_connects(server.port());
    let [bash_counter, py_counter] = raw_connects(counter.port());
    let counter_at = format!("127.0.0.1:{}", counter.port());
    let calls = [
        ("bash-frontend", bash_frontend),
        ("py-frontend", py_frontend),
        ("bash-counter", bash_counter),
        ("py-counter", py_counter),
        ("proxy-counter", curl(&format!("http://{counter_at}/"))),
        ("proxy-metadata", curl("http://169.254.169.254/")),
        ("proxy-private", curl("http://10.255.255.53/")),
        // `127.1` is 127.0.0.1 to the resolver: the proxy must check the address, not the name.
        (
            "proxy-numeric",
            format!(
                r#"/usr/bin/python3 -c 'import socket; s = socket.create_connection(("127.0.0.1", {PROXY_PORT}), 5); s.settimeout(20); s.sendall(b"GET http://127.1:{p}/ HTTP/1.1\r\nHost: 127.1:{p}\r\nConnection: close\r\n\r\n"); print(s.recv(4096).decode())'"#,
                p = counter.port()
            ),
        ),
        // The control: sockets work and the proxy is there.
        (
            "py-proxy",
            format!(
                "/usr/bin/python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {PROXY_PORT}), 3); print(\"proxy reachable\")'"
            ),
        ),
    ];
    let run = run_shell_calls(
        &server,
        &queue,
        "run-any",
        &["--network".to_owned()],
        &calls,
    );

    let out = outputs(&server, &run);
    for id in ["bash-frontend", "py-frontend", "bash-counter", "py-counter"] {
        assert_connect_failed(&out[id]);
    }
    assert_refused(&out["proxy-counter"], &counter_at);
    assert_refused(&out["proxy-metadata"], "169.254.169.254:80");
    assert_refused(&out["proxy-private"], "10.255.255.53:80");
    let numeric = &out["proxy-numeric"];
    assert!(
        numeric
            .lines()
            .any(|l| l.starts_with("HTTP/1.") && l.contains(" 403")),
        "{numeric}"
    );
    assert!(
        out["py-proxy"].contains("proxy reachable"),
        "{}",
        out["py-proxy"]
    );
    assert_eq!(counter.connections(), 0, "a tool reached a loopback port");
    let mut refused = watched_refusals(&server, &run);
    let numeric = refused.remove("proxy-numeric").unwrap_or_default();
    assert!(
        numeric.len() == 1 && numeric[0].ends_with(&format!(":{}", counter.port())),
        "{numeric:?}"
    );
    let expected = by_call(&[
        ("bash-counter", &[]),
        ("bash-frontend", &[]),
        ("proxy-counter", &[&counter_at]),
        ("proxy-metadata", &["169.254.169.254:80"]),
        ("proxy-private", &["10.255.255.53:80"]),
        ("py-counter", &[]),
        ("py-frontend", &[]),
        ("py-proxy", &[]),
    ]);
    assert_eq!(refused, expected);
}

#[test]
fn git_clone_pip_download_and_https_work_through_the_proxy() {
    const TOKEN: &str = "net-git-token-3e1";
    const README: &str = "cloned through the baton proxy\n";
    let server = DevServer::start().unwrap();
    let repos = GitRepos::new().unwrap();
    repos
        .create("acme/probe.git", &[("README.md", README)])
        .unwrap();
    let git = GitHttp::start(&repos, TOKEN).unwrap();
    let index = PackageIndex::start().unwrap();
    let tls = TlsSite::start().unwrap();
    let queue = unique("net-tools");
    let (_w, metrics) = metrics_worker(&server, &queue, &[]);
    let clone_url = git
        .url("acme/probe.git")
        .replace("http://", &format!("http://baton:{TOKEN}@"));
    let calls = [
        (
            "git",
            format!("git clone -q {clone_url} probe && cat probe/README.md"),
        ),
        (
            "pip",
            format!(
                "/usr/bin/python3 -m pip download --no-deps --no-cache-dir \
                 --disable-pip-version-check --index-url {} -d . {PROBE_PACKAGE} && ls",
                index.index_url()
            ),
        ),
        (
            "https",
            curl(&format!(
                "--cacert {} {}",
                tls.ca_cert().display(),
                tls.url()
            )),
        ),
    ];
    let net = allow_loopback(&[git.port(), index.port(), tls.port()]);
    let run = run_shell_calls(&server, &queue, "run-tools", &net, &calls);

    let out = outputs(&server, &run);
    assert!(
        out["git"].contains(README.trim_end()),
        "{}\n{}",
        out["git"],
        git.log()
    );
    assert!(git.requests() > 0);
    assert!(out["pip"].contains(PROBE_WHEEL), "{}", out["pip"]);
    assert_eq!(index.downloads(), 1, "{}", out["pip"]);
    assert!(out["https"].contains(SITE_PAGE), "{}", out["https"]);
    assert_eq!(tls.hits(), 1);
    let refused = watched_refusals(&server, &run);
    assert!(
        refused.values().all(Vec::is_empty),
        "allowed hosts were refused: {refused:?}"
    );
    // They went through the proxy (git asks several times, pip twice, curl once).
    scrape_until(&metrics, "the proxied requests counted", |s| {
        value(s, "baton_tool_network_total", &[("outcome", "allowed")]) >= 3.0
    });
}

#[test]
fn an_unknown_host_is_put_to_a_human_and_reached_once_allowed() {
    let server = DevServer::start().unwrap();
    let listed = Site::start().unwrap();
    let unknown = Site::start().unwrap();
    let queue = unique("net-ask");
    let _w = worker(&server, &queue, &[]);
    let unknown_at = format!("127.0.0.1:{}", unknown.port());
    let fetch = curl(&unknown.url());
    let dir = tempfile::tempdir().unwrap();
    let shell = |id: &str| json!({"id": id, "name": "shell", "arguments": {"command": fetch}});
    let turns = json!([
        {"text": "Fetching.", "tool_calls": [shell("first")]},
        {"text": "Again, now that it may be allowed.", "tool_calls": [shell("again")]},
        {"text": "Done."}
    ]);
    let s = script(dir.path(), "run-ask", turns).display().to_string();
    let mut args = vec![
        "--script",
        s.as_str(),
        "--no-approval",
        "--on-unknown-host",
        "ask",
    ];
    let net = allow_loopback(&[listed.port()]);
    args.extend(net.iter().map(String::as_str));
    let run = submit(&server, &queue, &unique("run-ask"), &args, "fetch the page");

    // The refused host waits for a human, named in `baton pending`.
    let status = wait_state(&server, &run, "AWAITING_APPROVAL", Duration::from_secs(60));
    let pending = &status["pending"][0];
    assert_eq!(pending["tool"], "baton.allow_host", "{status}");
    let call_id = pending["call_id"].as_str().unwrap().to_owned();
    assert!(
        pending["arguments"]
            .as_str()
            .unwrap()
            .contains(&format!("\"host\":\"{unknown_at}\"")),
        "{status}"
    );
    assert_eq!(unknown.hits(), 0);
    wait_until_blocking(
        Duration::from_secs(30),
        "the run in `baton pending`",
        || {
            let listed = baton(&server, &["pending", "--json"])?;
            Ok(
                (listed.stdout.contains(&run) && listed.stdout.contains("baton.allow_host"))
                    .then_some(()),
            )
        },
    )
    .unwrap();
    let approved = baton(&server, &["approve", &run, &call_id]).unwrap();
    assert_eq!(approved.code, 0, "{approved}");

    let r = ended(&server, &run, 0);
    assert_eq!(r.answer, "Done.", "{r:?}");
    let out = outputs(&server, &run);
    assert_refused(&out["first"], &unknown_at);
    assert!(out["again"].contains(SITE_PAGE), "{}", out["again"]);
    assert_eq!(unknown.hits(), 1);
    assert_eq!(
        watched_refusals(&server, &run)["again"],
        Vec::<String>::new()
    );
}
