//! kill -9 of the worker running an MCP call: the call runs again on the other worker and the
//! run completes, and the tool list recorded at the run's start is reused (the relay in front of
//! server-everything sees one listing in the whole run, the replay on the other worker included).

use super::*;

use pretty_assertions::assert_eq;
use serde_json::json;

/// The identity of the worker running the run's `mcp_call_tool` activity (waiting up to 30 s).
fn identity_running_the_call(server: &DevServer, run: &str) -> String {
    wait_until_blocking(
        Duration::from_secs(30),
        "a worker to start the MCP call",
        || {
            let described = server.workflow_describe_json(run)?;
            let pending = described["pendingActivities"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            Ok(pending.iter().find_map(|a| {
                (a["activityType"]["name"] == "mcp_call_tool"
                    && a["state"] == "PENDING_ACTIVITY_STATE_STARTED")
                    .then(|| a["lastWorkerIdentity"].as_str().map(str::to_owned))
                    .flatten()
            }))
        },
    )
    .unwrap()
}

/// Attempts of the run's `mcp_call_tool` activity that started, and the identities of the
/// workers that started them, from the history.
fn call_attempts(server: &DevServer, run: &str) -> Vec<(u64, String)> {
    let mut calls = Vec::new();
    let mut attempts = Vec::new();
    for event in history_events(server, run) {
        let scheduled = &event["activityTaskScheduledEventAttributes"];
        if scheduled["activityType"]["name"] == "mcp_call_tool" {
            calls.push(event["eventId"].clone());
        }
        let started = &event["activityTaskStartedEventAttributes"];
        if calls.contains(&started["scheduledEventId"]) {
            let identity = started["identity"].as_str().unwrap_or_default();
            attempts.push((
                started["attempt"].as_u64().unwrap_or(1),
                identity.to_owned(),
            ));
        }
    }
    attempts
}

/// Identities of the workers that completed the run's workflow tasks, in order.
fn workflow_task_identities(server: &DevServer, run: &str) -> Vec<String> {
    history_events(server, run)
        .iter()
        .filter_map(|e| e["workflowTaskCompletedEventAttributes"]["identity"].as_str())
        .map(str::to_owned)
        .collect()
}

/// One worker runs the workflow and the call; a second starts while the call runs and the first
/// is killed: the second must replay the whole run (it never had it in its cache) and
/// run the call again.
#[test]
fn kill_9_during_an_mcp_call_retries_it_on_the_other_worker_without_listing_again() {
    let setup = Setup::start();
    let everything = EverythingServer::start().unwrap();
    let config = setup.config(&[http_server_toml("everything", &everything.url())]);
    let queue = unique("mcp-kill");
    let mut first = setup.workers(&queue, 1, &config).remove(0);
    let long = json!({"duration": 8, "steps": 8}).to_string();
    setup.llm.push_tool_calls(&[(
        "call_long",
        "mcp__everything__trigger-long-running-operation",
        &long,
    )]);
    setup.llm.push_text("Survived.");
    let run = setup.submit(&queue, "run-mcp-kill", &["--mcp", "everything"]);

    let identity = identity_running_the_call(&setup.server, &run);
    let first_id = format!(":{}", first.pid());
    assert!(identity.ends_with(&first_id), "{identity}");
    wait_until_blocking(T, "the call to reach the server", || {
        Ok((everything.counts().calls >= 1).then_some(()))
    })
    .unwrap();
    assert_eq!(everything.counts().lists, 1, "listed once before the call");
    // The second worker starts (and is not waited for) while the call runs.
    let mut second = setup.spawn_worker(&queue, &config);
    assert!(
        everything.counts().calls == 1 && scheduled(&setup.server, &run, "llm_generate") == 1,
        "the call ended before the kill; make it longer"
    );
    first.kill9();
    second.wait_ready_blocking(T).unwrap();

    let r = result(&setup.server, &run, 0);
    assert_eq!(r["status"], "COMPLETED", "{r}");
    assert_eq!(r["answer"], "Survived.");
    let requests = setup.llm.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let done = result_of(&requests[1], "call_long");
    assert!(done.contains("Long running operation completed"), "{done}");

    // The call ran again on the second worker, which replayed the run: nobody listed again.
    let counts = everything.counts();
    assert_eq!(
        counts.lists, 1,
        "a listing reached the server after the kill: {counts:?}"
    );
    assert!(counts.calls >= 2, "{counts:?}");
    let second_id = format!(":{}", second.pid());
    let attempts = call_attempts(&setup.server, &run);
    assert!(
        attempts
            .last()
            .is_some_and(|(n, who)| *n >= 2 && who.ends_with(&second_id)),
        "{attempts:?} (second worker {second_id})"
    );
    let tasks = workflow_task_identities(&setup.server, &run);
    assert!(
        tasks.last().is_some_and(|who| who.ends_with(&second_id)),
        "the second worker did not take the workflow over: {tasks:?}"
    );
    assert_eq!(
        scheduled(&setup.server, &run, "mcp_list_tools"),
        1,
        "one listing activity in the history"
    );
}
