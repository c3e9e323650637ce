//! `baton replay-check`: the replay gate before a rollout. Fetches the histories of open and
//! recently closed runs from the server (decoded with the codec keys, like every command),
//! replays each against this binary's `AgentRun` code with the SDK's replayer, and names each
//! run this build could not take over and the event where it parts from the history.
//!
//! A failing history is located by replaying its prefixes (cut after a workflow task starts,
//! the shape of a history whose last task is in flight) to find the first workflow task whose
//! commands differ from what was recorded: a bisection, so `log2(tasks)` extra replays of only
//! the histories that fail. Runs already replayed by this build are skipped: a cache file
//! records run id -> history length per build id, and a run is checked again when it has grown.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, SystemTime},
};

use baton_workflows::{AgentRun, WORKFLOW_TYPE};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use temporalio_client::{
    Client, NamespacedClient, WorkflowExecution, WorkflowExecutionInfo,
    WorkflowFetchHistoryOptions, WorkflowHandle, WorkflowHistory, WorkflowListOptions,
};
use temporalio_common::protos::temporal::api::{
    enums::v1::EventType,
    history::v1::{History, HistoryEvent},
};
use temporalio_sdk::workflow_replayer::{
    WorkflowReplayFailure, WorkflowReplayer, WorkflowReplayerOptions,
};

use crate::{
    cli::ReplayCheckArgs,
    connect::{connect, short},
    exit::{self, Exit},
    json,
};

/// Histories replayed by one replay worker.
const BATCH: usize = 25;

/// What replaying one run found.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Diverged {
    pub workflow_id: String,
    pub run_id: String,
    /// The first event this build's commands do not match ("" kind when unknown).
    pub event_id: i64,
    pub event_type: String,
    /// `nondeterminism`, `workflow_task_failure`, `invalid_history`, `internal`.
    pub kind: String,
    pub message: String,
}

/// `baton replay-check`.
pub(crate) async fn run(args: ReplayCheckArgs) -> Result<i32, Exit> {
    use baton_workflows::workflow::variant;
    variant::set_from(std::env::var(variant::VARIANT_ENV).ok().as_deref()).map_err(Exit::usage)?;
    let build_id = args
        .build_id
        .clone()
        .unwrap_or_else(|| baton_workflows::BUILD_ID.to_owned());
    let started = std::time::Instant::now();
    let client = connect().await?;
    let query = visibility_query(args.query.as_deref(), args.since, SystemTime::now());
    let runs = list(&client, &query, args.limit as usize).await?;
    let cache_path = (!args.no_cache).then(|| args.cache.clone().unwrap_or_else(default_cache));
    let mut cache = cache_path
        .as_ref()
        .map(|p| Cache::load(p, &build_id))
        .unwrap_or_else(|| Cache::empty(&build_id));
    let (todo, skipped): (Vec<_>, Vec<_>) = runs
        .into_iter()
        .partition(|r| !cache.covers(r.run_id(), r.history_length()));
    let replayer = replayer(&client)?;
    let mut diverged = Vec::new();
    let mut events = 0usize;
    let mut done = 0usize;
    for batch in todo.chunks(BATCH) {
        let mut histories = Vec::with_capacity(batch.len());
        for run in batch {
            let events_of = fetch(&client, run).await?;
            events += events_of.len();
            histories.push((run, events_of));
        }
        let failures = replay(&replayer, histories.iter().map(|(_, e)| e.as_slice())).await?;
        for ((run, events_of), failure) in histories.iter().zip(failures) {
            match failure {
                None => cache.record(run.run_id(), run.history_length()),
                Some(f) => diverged.push(locate(&replayer, run, events_of, f).await?),
            }
        }
        done += batch.len();
        eprintln!(
            "replay-check: {done}/{} runs replayed ({} events, {} skipped as already checked, \
             {} diverged)",
            todo.len(),
            events,
            skipped.len(),
            diverged.len()
        );
    }
    if let Some(path) = &cache_path {
        cache.save(path);
    }
    // Histories this process cannot decrypt say nothing about the build: say what is missing.
    let sealed = diverged
        .iter()
        .filter(|d| d.message.contains(baton_codec::KEYS_ENV))
        .count();
    if sealed > 0 {
        return Err(Exit::usage(format!(
            "cannot decrypt the histories of {sealed} run(s): set {} (and {}) to the workers' \
             payload encryption keys, then check again",
            baton_codec::KEYS_ENV,
            baton_codec::ACTIVE_KEY_ENV
        )));
    }
    let report = json::ReplayCheck {
        build_id,
        query,
        replayed: todo.len(),
        skipped: skipped.len(),
        events,
        seconds: started.elapsed().as_secs_f64(),
        diverged,
    };
    if args.json {
        json::print(&report)?;
    } else {
        print_report(&report);
    }
    Ok(if report.diverged.is_empty() {
        exit::COMPLETED
    } else {
        exit::NOT_COMPLETED
    })
}

fn print_report(report: &json::ReplayCheck) {
    for d in &report.diverged {
        println!(
            "✗ {} (run {}): {} at event {} {}: {}",
            d.workflow_id, d.run_id, d.kind, d.event_id, d.event_type, d.message
        );
    }
    let verdict = if report.diverged.is_empty() {
        "every run replays on this build".to_owned()
    } else {
        format!(
            "{} run(s) would fail on this build: do not roll it out while they are open (or \
             guard the change with a patch marker, AGENTS.md \"Patches\")",
            report.diverged.len()
        )
    };
    println!(
        "build {}: {} run(s) replayed ({} events, {:.1} s), {} already checked; {verdict}",
        report.build_id, report.replayed, report.events, report.seconds, report.skipped
    );
}

/// The runs to check: baton's, open or closed within `since`, narrowed by the user's query.
pub(crate) fn visibility_query(user: Option<&str>, since: Duration, now: SystemTime) -> String {
    let cutoff = humantime::format_rfc3339_seconds(now - since);
    let base = format!(
        "WorkflowType = '{WORKFLOW_TYPE}' AND (ExecutionStatus = 'Running' OR CloseTime > \
         '{cutoff}')"
    );
    match user.map(str::trim).filter(|q| !q.is_empty()) {
        Some(q) => format!("{base} AND ({q})"),
        None => base,
    }
}

async fn list(client: &Client, query: &str, limit: usize) -> Result<Vec<WorkflowExecution>, Exit> {
    let mut stream = client.list_workflows(
        query.to_owned(),
        WorkflowListOptions::builder().limit(limit).build(),
    );
    let mut runs = Vec::new();
    while let Some(item) = stream.next().await {
        runs.push(item.map_err(|e| {
            Exit::usage(format!(
                "cannot list runs with `{query}`: {}; check --query (Temporal's list filter \
                 syntax)",
                short(&e.to_string())
            ))
        })?);
    }
    Ok(runs)
}

async fn fetch(client: &Client, run: &WorkflowExecution) -> Result<Vec<HistoryEvent>, Exit> {
    let info = WorkflowExecutionInfo::builder()
        .namespace(client.namespace())
        .workflow_id(run.id())
        .run_id(run.run_id())
        .build();
    WorkflowHandle::<_, AgentRun>::new(client.clone(), info)
        .fetch_history(WorkflowFetchHistoryOptions::default())
        .into_events()
        .await
        .map_err(|e| {
            Exit::infra(format!(
                "cannot fetch the history of {} (run {}): {}",
                run.id(),
                run.run_id(),
                short(&e.to_string())
            ))
        })
}

fn replayer(client: &Client) -> Result<WorkflowReplayer, Exit> {
    let options = WorkflowReplayerOptions::new()
        .register_workflow::<AgentRun>()
        .map_err(|e| Exit::infra(format!("cannot register AgentRun for replay: {e}")))?
        .data_converter(client.data_converter().clone())
        .build();
    WorkflowReplayer::new(options).map_err(|e| Exit::infra(format!("cannot replay: {e}")))
}

fn as_history(events: &[HistoryEvent]) -> WorkflowHistory {
    WorkflowHistory::from(History {
        events: events.to_vec(),
    })
}

/// The replay failure of each history (None = replays), in order.
async fn replay<'a>(
    replayer: &WorkflowReplayer,
    histories: impl IntoIterator<Item = &'a [HistoryEvent]>,
) -> Result<Vec<Option<WorkflowReplayFailure>>, Exit> {
    let results = replayer
        .replay_workflows(histories.into_iter().map(as_history))
        .await
        .map_err(|e| Exit::infra(format!("replay failed: {e}")))?;
    Ok(results.into_iter().map(|r| r.replay_failure).collect())
}

/// Where `events` (which failed with `failure`) parts from this build's code.
async fn locate(
    replayer: &WorkflowReplayer,
    run: &WorkflowExecution,
    events: &[HistoryEvent],
    failure: WorkflowReplayFailure,
) -> Result<Diverged, Exit> {
    let (kind, message) = match &failure {
        WorkflowReplayFailure::Nondeterminism { message } => ("nondeterminism", message),
        WorkflowReplayFailure::WorkflowTaskFailure { message } => {
            ("workflow_task_failure", message)
        }
        WorkflowReplayFailure::InvalidHistory { message } => ("invalid_history", message),
        WorkflowReplayFailure::Internal { message, .. } => ("internal", message),
        _ => ("internal", &String::new()),
    };
    let cuts = task_starts(events);
    // The shortest prefix that fails: cut after the k-th started task. The full history
    // fails; a prefix holding only the first task cannot (nothing recorded to compare).
    let (mut good, mut bad) = (0usize, cuts.len());
    while bad - good > 1 {
        let mid = (good + bad) / 2;
        let prefix = &events[..=cuts[mid - 1]];
        match replay(replayer, [prefix]).await?.pop().flatten() {
            Some(_) => bad = mid,
            None => good = mid,
        }
    }
    // Task `bad` is the first whose replay fails: the commands of the task before it do not
    // match the events recorded after that task completed.
    let first_differing = cuts
        .get(bad.saturating_sub(2))
        .and_then(|&started| {
            events[started..]
                .iter()
                .find(|e| e.event_type() == EventType::WorkflowTaskCompleted)
                .map(|e| e.event_id)
        })
        .and_then(|completed| events.iter().find(|e| e.event_id == completed + 1));
    let (event_id, event_type) = match first_differing {
        Some(e) => (e.event_id, event_name(e)),
        None => (0, String::new()),
    };
    Ok(Diverged {
        workflow_id: run.id().to_owned(),
        run_id: run.run_id().to_owned(),
        event_id,
        event_type,
        kind: kind.to_owned(),
        message: short(&core_message(message)),
    })
}

/// The core's own words inside the SDK's wrapping (`... message: "[TMPRL1100] ...", ...`).
fn core_message(raw: &str) -> String {
    let Some(start) = raw.find("message: \"") else {
        return raw.to_owned();
    };
    let rest = &raw[start + "message: \"".len()..];
    let end = rest.find("\", source:").unwrap_or(rest.len());
    rest[..end].replace("\\\"", "\"")
}

/// Indexes of the `WorkflowTaskStarted` events.
fn task_starts(events: &[HistoryEvent]) -> Vec<usize> {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.event_type() == EventType::WorkflowTaskStarted)
        .map(|(i, _)| i)
        .collect()
}

fn event_name(e: &HistoryEvent) -> String {
    e.event_type()
        .as_str_name()
        .trim_start_matches("EVENT_TYPE_")
        .to_owned()
}

/// `$XDG_CACHE_HOME/baton/replay-check.json` (or `~/.cache/...`).
fn default_cache() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("baton")
        .join("replay-check.json")
}

/// Runs already replayed, per build id: run id -> history length when it replayed.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Cache {
    #[serde(skip)]
    build_id: String,
    builds: BTreeMap<String, BTreeMap<String, i64>>,
}

impl Cache {
    fn empty(build_id: &str) -> Self {
        Self {
            build_id: build_id.to_owned(),
            builds: BTreeMap::new(),
        }
    }

    /// The cache at `path`; an unreadable one is started afresh (it only saves time).
    fn load(path: &PathBuf, build_id: &str) -> Self {
        let mut cache: Self = std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        cache.build_id = build_id.to_owned();
        cache
    }

    fn covers(&self, run_id: &str, length: i64) -> bool {
        self.builds
            .get(&self.build_id)
            .and_then(|runs| runs.get(run_id))
            .is_some_and(|&checked| checked == length)
    }

    fn record(&mut self, run_id: &str, length: i64) {
        self.builds
            .entry(self.build_id.clone())
            .or_default()
            .insert(run_id.to_owned(), length);
    }

    /// Writes the cache; a failure only costs the next check time, so it is a warning.
    fn save(&self, path: &PathBuf) {
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| {
                let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
                let tmp = path.with_extension("json.tmp");
                std::fs::write(&tmp, bytes)?;
                std::fs::rename(&tmp, path)
            });
        if let Err(e) = written {
            eprintln!(
                "· cannot save the replay-check cache {}: {e}",
                path.display()
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_query_covers_open_and_recent_runs_and_narrows_by_the_users() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(86_400 * 10);
        let q = visibility_query(None, Duration::from_secs(86_400 * 7), now);
        assert_eq!(
            q,
            "WorkflowType = 'AgentRun' AND (ExecutionStatus = 'Running' OR CloseTime > \
             '1970-01-04T00:00:00Z')"
        );
        let q = visibility_query(Some("BatonLabels = 'team=a'"), Duration::from_secs(60), now);
        assert!(q.ends_with(" AND (BatonLabels = 'team=a')"), "{q}");
    }

    #[test]
    fn the_cores_message_is_taken_out_of_the_sdks_wrapping() {
        let raw = r#"Workflow activation completion failed: Failure { failure: Some(Failure { message: "[TMPRL1100] Nondeterminism error: marker for \"x\"", source: "", stack_trace: "" }) }"#;
        assert_eq!(
            core_message(raw),
            r#"[TMPRL1100] Nondeterminism error: marker for "x""#
        );
        assert_eq!(core_message("plain"), "plain");
    }

    #[test]
    fn the_cache_skips_a_run_only_for_the_same_build_and_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        let mut cache = Cache::load(&path, "b1");
        assert!(!cache.covers("r", 10));
        cache.record("r", 10);
        cache.save(&path);
        let cache = Cache::load(&path, "b1");
        assert!(cache.covers("r", 10));
        assert!(!cache.covers("r", 12), "a run that grew is checked again");
        assert!(
            !Cache::load(&path, "b2").covers("r", 10),
            "another build checks anew"
        );
    }
}
