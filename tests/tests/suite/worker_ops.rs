//! Worker operations: the Prometheus endpoint (Temporal's and baton's metrics), JSON logs
//! whose activity lines name their run, gRPC health for probes, a clean exit on SIGTERM, and
//! start-up errors that say what to fix. Real dev server, real worker process, real CLI. TLS
//! and API keys to Temporal are in `tls.rs`.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(60);

#[test]
fn metrics_endpoint_counts_runs_tools_tokens_and_approvals() {
    let server = DevServer::start().unwrap();
    let queue = unique("metrics");
    // A price for the scripted model ($1 per input token, $2 per output token): the cost
    // gauge must then equal input + 2 x output tokens.
    let settings = tempfile::tempdir().unwrap();
    let toml = settings.path().join("baton.toml");
    std::fs::write(
        &toml,
        "[models.\"scripted-priced\"]\ninput_usd_per_mtok = 1000000.0\noutput_usd_per_mtok = 2000000.0\n",
    )
    .unwrap();
    let (mut w, addr) = metrics_worker(
        &server,
        &queue,
        &[
            ("BATON_LOG_FORMAT", "json"),
            ("BATON_CONFIG", toml.to_str().unwrap()),
        ],
    );

    // Temporal core's worker metrics are served before any run.
    let (text, _) = scrape(&addr).unwrap();
    assert!(
        text.lines().any(|l| l.starts_with("temporal_")),
        "no temporal_ metric:\n{text}"
    );

    let dir = tempfile::tempdir().unwrap();
    let s = script(
        dir.path(),
        "m",
        json!([
            {"text": "Running it.", "tool_calls": [
                {"name": "shell", "arguments": {"command": "echo metrics-ok"}}
            ]},
            {"text": "Done."}
        ]),
    )
    .display()
    .to_string();
    let run = unique("run-metrics");
    submit(
        &server,
        &queue,
        &run,
        &["--script", &s, "--model", "scripted-priced"],
        "metrics",
    );

    // The shell call waits for approval (default policy): the visibility gauges see it. The
    // two gauges come from separate visibility queries, so wait for both rather than assert
    // one in the scrape where the other first turned.
    let (_, samples) = scrape_until(
        &addr,
        "baton_approvals_pending = 1 and one run open in AWAITING_APPROVAL",
        |s| {
            value(s, "baton_approvals_pending", &[]) == 1.0
                && value(s, "baton_runs_open", &[("state", "AWAITING_APPROVAL")]) == 1.0
        },
    );
    for state in ["THINKING", "EXECUTING", "COMPACTING"] {
        assert_eq!(
            value(&samples, "baton_runs_open", &[("state", state)]),
            0.0,
            "{state}"
        );
    }
    assert_eq!(value(&samples, "baton_runs_started_total", &[]), 1.0);

    let approved = baton(&server, &["approve", &run, "--all"]).unwrap();
    assert_eq!(approved.code, 0, "{approved}");
    let done = ended(&server, &run, 0);
    assert_eq!(done.reason, "completed");
    assert_eq!(done.turns, 2);

    let (text, samples) = scrape_until(&addr, "the run counted as completed", |s| {
        value(s, "baton_runs_completed_total", &[("reason", "completed")]) == 1.0
            && value(s, "baton_approvals_pending", &[]) == 0.0
            && value(s, "baton_runs_open", &[("state", "AWAITING_APPROVAL")]) == 0.0
    });
    let ok_shell = [("tool", "shell"), ("outcome", "ok")];
    assert_eq!(
        value(&samples, "baton_tool_calls_total", &ok_shell),
        1.0,
        "{text}"
    );
    assert_eq!(
        value(&samples, "baton_tool_calls_total", &[]),
        1.0,
        "{text}"
    );
    assert_eq!(
        value(
            &samples,
            "baton_tool_call_duration_seconds_count",
            &ok_shell
        ),
        1.0
    );
    let scripted = ("provider", "scripted");
    assert_eq!(
        value(&samples, "baton_turns_total", &[scripted]),
        2.0,
        "{text}"
    );
    assert_eq!(
        value(
            &samples,
            "baton_llm_calls_total",
            &[scripted, ("outcome", "ok")]
        ),
        2.0
    );
    let mut tokens = Vec::new();
    for direction in ["input", "output"] {
        let counted = value(
            &samples,
            "baton_llm_tokens_total",
            &[scripted, ("direction", direction)],
        );
        assert!(counted > 0.0, "{direction} tokens: {text}");
        tokens.push(counted);
    }
    // The cost under the worker's [models] price, by provider/model/kind.
    let cost = value(
        &samples,
        "baton_llm_cost_usd_total",
        &[scripted, ("model", "scripted-priced"), ("kind", "generate")],
    );
    assert_eq!(cost, tokens[0] + 2.0 * tokens[1], "{text}");
    // The scripted model has no prompt cache: its cache counters count nothing.
    assert_eq!(
        value(
            &samples,
            "baton_llm_cache_tokens_total",
            &[scripted, ("cache", "read")]
        ),
        0.0,
        "{text}"
    );
    assert_eq!(value(&samples, "baton_runs_started_total", &[]), 1.0);
    assert_eq!(
        value(&samples, "baton_approval_wait_seconds_count", &[]),
        1.0
    );
    assert!(value(&samples, "baton_approval_wait_seconds_sum", &[]) >= 0.0);
    assert!(
        samples.iter().any(|s| s.name.starts_with("temporal_")),
        "{text}"
    );

    // JSON logs: every line is an object, and lines written inside an activity carry its run.
    let log = w.log();
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines.iter().any(|l| l["message"] == "worker started"),
        "{log}"
    );
    let activity_span = |line: &Value| -> Option<Value> {
        line["spans"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == "activity")
            .cloned()
    };
    let in_activities: Vec<Value> = lines.iter().filter_map(activity_span).collect();
    assert!(in_activities.len() >= 4, "{log}");
    for span in &in_activities {
        assert_eq!(span["run_id"], run.as_str(), "{span}");
    }
    let tool_line = lines
        .iter()
        .find(|l| l["message"] == "tool started")
        .unwrap_or_else(|| panic!("no tool started line:\n{log}"));
    let span = activity_span(tool_line).unwrap();
    assert_eq!(span["call_id"], "call_1_1", "{tool_line}");
    assert_eq!(span["tool"], "shell");
    let llm_line = lines
        .iter()
        .find(|l| l["message"] == "llm call started")
        .unwrap_or_else(|| panic!("no llm call line:\n{log}"));
    assert_eq!(activity_span(llm_line).unwrap()["turn"], 1, "{llm_line}");

    w.terminate_timeout(Duration::from_secs(20)).unwrap();
}

/// Runs evicted from a worker's workflow cache leave its memory: with a cache of 2 and 6 runs
/// waiting for approval, at most 2 `AgentRun` instances stay resident, and none once every run
/// has finished. An SDK timer, wait or activity started with a run's own cancellation token
/// keeps the whole instance alive after eviction (a reference cycle in the SDK); this fails if
/// that comes back.
#[test]
fn evicted_and_finished_runs_leave_the_workers_memory() {
    const CACHE: f64 = 2.0;
    const RUNS: usize = 6;
    let server = DevServer::start().unwrap();
    let queue = unique("resident");
    let (mut w, addr) = metrics_worker(&server, &queue, &[("BATON_MAX_CACHED_WORKFLOWS", "2")]);

    let dir = tempfile::tempdir().unwrap();
    let s = script(
        dir.path(),
        "r",
        json!([
            {"text": "Checking.", "tool_calls": [
                {"name": "shell", "arguments": {"command": "echo resident-ok"}}
            ]},
            {"text": "Done."}
        ]),
    )
    .display()
    .to_string();
    // An approval timeout puts a durable timer in flight next to the wait, as in production.
    let runs: Vec<String> = (0..RUNS)
        .map(|i| {
            submit(
                &server,
                &queue,
                &unique(&format!("run-resident-{i}")),
                &["--script", &s, "--approval-timeout", "1h"],
                "resident",
            )
        })
        .collect();

    let wanted = format!("{RUNS} runs pending and at most {CACHE} instances resident");
    let (text, samples) = scrape_until(&addr, &wanted, |s| {
        value(s, "baton_approvals_pending", &[]) == RUNS as f64
            && value(s, "baton_workflows_resident", &[]) <= CACHE
    });
    let resident = value(&samples, "baton_workflows_resident", &[]);
    assert!(resident >= 1.0, "the cache holds the latest runs: {text}");

    for run in &runs {
        let approved = baton(&server, &["approve", run, "--all"]).unwrap();
        assert_eq!(approved.code, 0, "{approved}");
    }
    for run in &runs {
        assert_eq!(result(&server, run, 0)["reason"], "completed");
    }
    scrape_until(&addr, "no instance resident after every run ended", |s| {
        value(s, "baton_workflows_resident", &[]) == 0.0
    });
    w.terminate_timeout(Duration::from_secs(20)).unwrap();
}

#[test]
fn worker_exits_cleanly_on_sigterm() {
    let server = DevServer::start().unwrap();
    let queue = unique("sigterm");
    let mut w = worker(&server, &queue, &[("BATON_GRACEFUL_SHUTDOWN_SECS", "2")]);
    let status = w.terminate_timeout(Duration::from_secs(15)).unwrap();
    assert!(
        status.success(),
        "worker exit status {status:?}\n{}",
        w.log()
    );
    assert!(w.log().contains("shutting down"), "{}", w.log());
    assert!(w.log().contains("worker stopped"), "{}", w.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_worker_serves_grpc_health_for_probes() {
    let mut server = DevServer::start().unwrap();
    let queue = unique("health");
    let port = free_port().unwrap();
    let addr = format!("127.0.0.1:{port}");
    let mut w = Worker::spawn(&server, &queue, &[("BATON_HEALTH_ADDR", addr.as_str())]).unwrap();
    w.wait_ready(T).await.unwrap();
    let url = format!("http://{addr}");
    let check = async |service: &str| -> anyhow::Result<i32> {
        use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
        let channel = tonic::transport::Channel::from_shared(url.clone())?
            .connect()
            .await?;
        let r = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await?
            .into_inner();
        Ok(r.status)
    };
    const SERVING: i32 = 1;
    const NOT_SERVING: i32 = 2;
    let until = async |service: &str, want: i32, timeout: Duration| {
        wait_until(
            timeout,
            &format!("health of {service:?} = {want}"),
            async || Ok((check(service).await? == want).then_some(())),
        )
        .await
        .unwrap();
    };
    until("", SERVING, T).await;
    assert_eq!(check("baton.worker").await.unwrap(), SERVING);
    assert_eq!(check("baton.worker.liveness").await.unwrap(), SERVING);

    // Temporal goes away: readiness turns NOT_SERVING (after 15 s of failed checks), liveness
    // does not (restarting the worker would not help), and both come back with Temporal.
    server.stop();
    let stopped = Instant::now();
    until("", NOT_SERVING, Duration::from_secs(60)).await;
    assert!(
        stopped.elapsed() >= Duration::from_secs(10),
        "NOT_SERVING after only {:?}: a short blip must not flip readiness",
        stopped.elapsed()
    );
    assert_eq!(check("baton.worker").await.unwrap(), NOT_SERVING);
    assert_eq!(check("baton.worker.liveness").await.unwrap(), SERVING);
    assert!(
        w.log()
            .contains("Temporal is unreachable: health NOT_SERVING"),
        "{}",
        w.log()
    );
    server.restart().unwrap();
    until("", SERVING, Duration::from_secs(60)).await;
    assert!(
        w.log().contains("Temporal is reachable again"),
        "{}",
        w.log()
    );

    let exit = w.terminate_timeout(Duration::from_secs(20)).unwrap();
    assert!(exit.success());
    let reconnect = tonic::transport::Channel::from_shared(url)
        .unwrap()
        .connect()
        .await;
    assert!(reconnect.is_err(), "the port closes with the worker");
}

/// Start-up errors name what to fix, and the exit code says whose they are: 2 for the
/// worker's configuration, 1 for the rest (Temporal unreachable).
#[tokio::test(flavor = "multi_thread")]
async fn worker_start_up_errors_say_what_to_fix_and_whose_they_are() {
    let server = DevServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let closed = format!("127.0.0.1:{}", free_port().unwrap());
    let key = format!("my key={}", codec_key());
    for (env, code, says) in [
        (
            ("BATON_CODEC_KEYS", key.as_str()),
            2,
            "an id cannot contain spaces",
        ),
        (
            ("BATON_WORKSPACE_ROOT", file.to_str().unwrap()),
            2,
            "cannot create the workspace root (workspace_root)",
        ),
        (("BATON_STORE__BACKEND", "floppy"), 2, "floppy"),
        (
            ("BATON_HISTORY__INLINE_BYTES", "0"),
            2,
            "history.inline_bytes = 0 is out of range: between 256 and 65536",
        ),
        (
            ("TEMPORAL_ADDRESS", closed.as_str()),
            1,
            "cannot reach Temporal",
        ),
        (
            ("TEMPORAL_NAMESPACE", "no-such-namespace"),
            2,
            "namespace 'no-such-namespace' does not exist",
        ),
    ] {
        let mut w = Worker::spawn(&server, &unique("startup"), &[env]).unwrap();
        let exit = w.wait_exit(Duration::from_secs(60)).await;
        let log = w.log();
        assert_eq!(exit.and_then(|e| e.code()), Some(code), "{env:?}: {log}");
        assert!(log.contains(says), "{env:?}: {log}");
        assert!(
            !log.contains(&codec_key_material(&key)),
            "the key leaked: {log}"
        );
    }
}

/// A root worker whose tools run as the sandbox user (65534), with a parent
/// of its workspace root that user cannot traverse (`0700`, owned by root), would start and
/// fail every tool using an absolute path with "Permission denied": it exits 2 within 5 s
/// naming the directory and the fix. The same root made traversable starts.
#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_root_the_sandbox_user_cannot_traverse_stops_the_worker() {
    use std::os::unix::fs::MetadataExt;
    // `/proc/self` belongs to this process's effective user.
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        eprintln!("skipped: the check is for root workers that drop to the sandbox user");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let server = DevServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let closed = dir.path().join("closed");
    std::fs::create_dir(&closed).unwrap();
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let root = closed.join("workspaces");
    let root_env = root.to_str().unwrap();

    let started = Instant::now();
    let mut w = Worker::spawn(
        &server,
        &unique("untraversable"),
        &[("BATON_WORKSPACE_ROOT", root_env)],
    )
    .unwrap();
    let exit = w.wait_exit(Duration::from_secs(30)).await;
    let took = started.elapsed();
    let log = w.log();
    assert_eq!(exit.and_then(|e| e.code()), Some(2), "{log}");
    assert!(
        took < Duration::from_secs(5),
        "exited after {took:?}: {log}"
    );
    let closed = closed.display();
    for says in [
        format!("the sandbox user (uid 65534, gid 65534) cannot traverse {closed}"),
        format!("chmod o+x {closed}"),
        "workspace_root".to_owned(),
    ] {
        assert!(log.contains(&says), "no {says:?} in: {log}");
    }

    // `chmod o+x` as told: the worker starts.
    std::fs::set_permissions(
        dir.path().join("closed"),
        std::fs::Permissions::from_mode(0o701),
    )
    .unwrap();
    let mut w = Worker::spawn(
        &server,
        &unique("traversable"),
        &[("BATON_WORKSPACE_ROOT", root_env)],
    )
    .unwrap();
    w.wait_ready(T).await.unwrap();
}

/// A worker whose settings cannot be read reports it as a JSON log line when the environment
/// asks for JSON logs (a log pipeline would drop plain text).
#[tokio::test(flavor = "multi_thread")]
async fn invalid_settings_are_reported_as_json_when_logs_are_json() {
    let server = DevServer::start().unwrap();
    let mut w = Worker::spawn(
        &server,
        &unique("json-settings"),
        &[
            ("BATON_LOG_FORMAT", "json"),
            ("BATON_MAX_CACHED_WORKFLOWS", "many"),
        ],
    )
    .unwrap();
    let exit = w.wait_exit(Duration::from_secs(30)).await;
    let log = w.log();
    assert_eq!(exit.and_then(|e| e.code()), Some(2), "{log}");
    let line: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(line["level"], "ERROR", "{log}");
    assert!(
        line["cause"]
            .as_str()
            .unwrap()
            .contains("max_cached_workflows"),
        "{log}"
    );
}

/// The base64 part of a `BATON_CODEC_KEYS` entry.
fn codec_key_material(entry: &str) -> String {
    entry
        .split_once('=')
        .map(|(_, k)| k.to_owned())
        .unwrap_or_default()
}

/// A namespace missing one of baton's search attributes (a cluster upgraded from an older
/// baton lacks `BatonLabels`) would wedge every run at its first workflow task: the worker
/// exits 2 within seconds naming the attribute and the command that creates it; with
/// `register_search_attributes` it creates it, and a labelled run completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_namespace_missing_a_search_attribute_stops_the_worker_or_gets_it_created() {
    let defs: Vec<String> = baton_workflows::workflow::SEARCH_ATTRIBUTE_DEFINITIONS
        .iter()
        .filter(|(name, _)| *name != "BatonLabels")
        .map(|(name, kind)| format!("{name}={kind}"))
        .collect();
    let mut args = Vec::new();
    for d in &defs {
        args.extend(["--search-attribute", d.as_str()]);
    }
    let server = DevServer::start_with_args(&args).unwrap();

    let started = std::time::Instant::now();
    let mut w = Worker::spawn(&server, &unique("no-labels"), &[]).unwrap();
    let exit = w.wait_exit(Duration::from_secs(30)).await;
    let took = started.elapsed();
    let log = w.log();
    assert_eq!(exit.and_then(|e| e.code()), Some(2), "{log}");
    assert!(
        took < Duration::from_secs(10),
        "exited after {took:?}: {log}"
    );
    assert!(
        log.contains(
            "temporal operator search-attribute create --namespace default --name BatonLabels --type KeywordList"
        ),
        "{log}"
    );
    assert!(
        !log.contains("--name BatonState"),
        "only the missing one: {log}"
    );
    assert!(!log.contains("worker started"), "{log}");

    let queue = unique("register-attributes");
    let w = worker(
        &server,
        &queue,
        &[("BATON_REGISTER_SEARCH_ATTRIBUTES", "true")],
    );
    assert!(
        w.log().contains("created baton's search attributes"),
        "{}",
        w.log()
    );
    let run = submit_labelled(&server, &queue);
    let r = ended(&server, &run, 0);
    assert_eq!(r.status, "COMPLETED", "{r:?}");
    let listed = baton(&server, &["list", "--label", "team=infra", "--json"]).unwrap();
    assert!(listed.stdout.contains(&run), "{listed}");
}

/// A run whose workflow tasks keep failing (here: an attribute removed from the namespace
/// after the worker started, so the run's upsert of it fails) reads as failing in `status`,
/// with the server's message, not as "waiting for a worker".
#[tokio::test(flavor = "multi_thread")]
async fn status_says_when_a_runs_workflow_tasks_are_failing() {
    let server = DevServer::start().unwrap();
    let queue = unique("failing-tasks");
    let _w = worker(&server, &queue, &[]);
    server
        .temporal(&[
            "operator",
            "search-attribute",
            "remove",
            "--name",
            "BatonLabels",
            "--yes",
        ])
        .unwrap()
        .ensure_success()
        .unwrap();
    let run = submit_labelled(&server, &queue);
    let status = wait_until_blocking(
        Duration::from_secs(60),
        "status to say the workflow tasks are failing",
        || {
            let out = baton(&server, &["status", &run, "--json"])?;
            let v = out.json()?;
            let said = v["last_event"].as_str().unwrap_or_default().to_owned();
            Ok(said.contains("workflow tasks are failing").then_some(v))
        },
    )
    .unwrap();
    let said = status["last_event"].as_str().unwrap();
    assert!(
        said.contains("BatonLabels"),
        "the server's message names it: {said}"
    );
    let human = baton(&server, &["status", &run]).unwrap();
    assert!(
        human.stdout.contains("workflow tasks are failing"),
        "{human}"
    );
}

/// Submits a one-turn scripted run labelled `team=infra` (its start upserts `BatonLabels`).
fn submit_labelled(server: &DevServer, queue: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), "labelled", json!([{"text": "Done."}]))
        .display()
        .to_string();
    submit(
        server,
        queue,
        &unique("run-labelled"),
        &["--script", &s, "--label", "team=infra"],
        "labelled",
    )
}
