//! A workflow's event history as the `temporal` CLI shows it, and what it says about a run:
//! its size, its events by kind, and when each turn started (by the server's clock).

use std::time::SystemTime;

use anyhow::{Context, bail};
use baton_tests::DevServer;
use serde_json::Value;

/// When set to a directory, every fetched history is also written there as `<id>.json`.
pub(crate) const KEEP_DIR_ENV: &str = "BATON_BENCH_HISTORIES";

/// Continue-as-new chains longer than this are not followed (a safety stop).
const MAX_RUNS: usize = 100;

/// The history of every run (continue-as-new segment) of one workflow, oldest first.
#[derive(Debug, Default)]
pub(crate) struct History {
    /// Events of all runs, in order.
    pub(crate) events: Vec<Value>,
    /// Bytes of stdout of `temporal workflow show -w ID -o json`, summed over the runs.
    pub(crate) json_bytes: usize,
    /// Number of runs.
    pub(crate) runs: usize,
}

/// Counts of a history's events, per kind that matters for the cost of a turn.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Profile {
    /// Bytes of the history as JSON (see [`History::json_bytes`]).
    pub(crate) json_bytes: f64,
    /// All events.
    pub(crate) events: f64,
    /// Workflow tasks completed (each one a round trip worker <-> server).
    pub(crate) workflow_tasks: f64,
    /// Activities scheduled.
    pub(crate) activities: f64,
    /// Memo upserts (`WorkflowPropertiesModified`).
    pub(crate) memo_upserts: f64,
    /// Search attribute upserts.
    pub(crate) search_attribute_upserts: f64,
    /// Runs (1 + continue-as-new count).
    pub(crate) runs: f64,
}

impl Profile {
    /// Every count divided by `n` (e.g. per turn).
    pub(crate) fn per(&self, n: f64) -> Profile {
        Profile {
            json_bytes: self.json_bytes / n,
            events: self.events / n,
            workflow_tasks: self.workflow_tasks / n,
            activities: self.activities / n,
            memo_upserts: self.memo_upserts / n,
            search_attribute_upserts: self.search_attribute_upserts / n,
            runs: self.runs,
        }
    }

    /// The mean of several profiles (e.g. over repetitions).
    pub(crate) fn mean(profiles: &[Profile]) -> Profile {
        let n = profiles.len().max(1) as f64;
        let sum = |f: fn(&Profile) -> f64| profiles.iter().map(f).sum::<f64>() / n;
        Profile {
            json_bytes: sum(|p| p.json_bytes),
            events: sum(|p| p.events),
            workflow_tasks: sum(|p| p.workflow_tasks),
            activities: sum(|p| p.activities),
            memo_upserts: sum(|p| p.memo_upserts),
            search_attribute_upserts: sum(|p| p.search_attribute_upserts),
            runs: sum(|p| p.runs),
        }
    }
}

/// Fetches the history of workflow `id` with `temporal workflow show -w ID -o json
/// --address ..` (payloads in the CLI's default JSON shorthand), following continue-as-new
/// back to the first run.
pub(crate) fn fetch(server: &DevServer, id: &str) -> anyhow::Result<History> {
    let mut history = History::default();
    let mut run_id: Option<String> = None;
    let mut chain: Vec<Vec<Value>> = Vec::new();
    loop {
        let mut args = vec!["workflow", "show", "-w", id, "-o", "json"];
        if let Some(r) = &run_id {
            args.extend(["--run-id", r.as_str()]);
        }
        let out = server.temporal(&args)?.ensure_success()?;
        history.json_bytes += out.stdout.len();
        history.runs += 1;
        let doc = out.json()?;
        if let Some(dir) = std::env::var_os(KEEP_DIR_ENV) {
            let name = format!(
                "{id}{}.json",
                run_id
                    .as_deref()
                    .map(|r| format!("-{r}"))
                    .unwrap_or_default()
            );
            let path = std::path::Path::new(&dir).join(name);
            std::fs::write(&path, &out.stdout)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        let events = doc
            .get("events")
            .and_then(Value::as_array)
            .cloned()
            .with_context(|| format!("no events in the history of {id}"))?;
        let previous = events
            .first()
            .and_then(|e| {
                e.pointer("/workflowExecutionStartedEventAttributes/continuedExecutionRunId")
            })
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
            .map(str::to_owned);
        chain.push(events);
        match previous {
            Some(r) if history.runs < MAX_RUNS => run_id = Some(r),
            Some(_) => bail!("{id} has more than {MAX_RUNS} runs; not following further"),
            None => break,
        }
    }
    history.events = chain.into_iter().rev().flatten().collect();
    Ok(history)
}

impl History {
    /// Counts of events by kind.
    pub(crate) fn profile(&self) -> Profile {
        let count = |attributes: &str| {
            self.events
                .iter()
                .filter(|e| e.get(attributes).is_some())
                .count() as f64
        };
        Profile {
            json_bytes: self.json_bytes as f64,
            events: self.events.len() as f64,
            workflow_tasks: count("workflowTaskCompletedEventAttributes"),
            activities: count("activityTaskScheduledEventAttributes"),
            memo_upserts: count("workflowPropertiesModifiedEventAttributes"),
            search_attribute_upserts: count("upsertWorkflowSearchAttributesEventAttributes"),
            runs: self.runs as f64,
        }
    }

    /// How many completed activities returned a result flagged as an error (`is_error`: a
    /// tool call that failed in the ordinary way), so a run that only looks fast because its
    /// tools fail is caught.
    pub(crate) fn error_results(&self) -> usize {
        self.events
            .iter()
            .filter_map(|e| e.get("activityTaskCompletedEventAttributes"))
            .filter(|a| has_error_flag(a))
            .count()
    }

    /// Milliseconds of each turn by the server's clock: a turn starts when activity
    /// `turn_activity` (the model call) is scheduled and ends when the next one is, the last
    /// one when the workflow completes. What comes before the first turn (the first workflow
    /// task, baton's `read_instructions`) is not part of any turn.
    pub(crate) fn turn_ms(&self, turn_activity: &str) -> anyhow::Result<Vec<f64>> {
        let mut starts = Vec::new();
        let mut end = None;
        for e in &self.events {
            let scheduled = e
                .pointer("/activityTaskScheduledEventAttributes/activityType/name")
                .and_then(Value::as_str);
            if scheduled == Some(turn_activity) {
                starts.push(event_time(e)?);
            }
            if e.get("workflowExecutionCompletedEventAttributes").is_some() {
                end = Some(event_time(e)?);
            }
        }
        let end = end.context("the workflow did not complete")?;
        starts.push(end);
        Ok(starts.windows(2).map(|w| ms_between(w[0], w[1])).collect())
    }
}

/// Where a run's time went by the server's clock, summed over the run, in ms.
///
/// Activities are measured from scheduled to completed: the server stamps an activity's
/// started event with (about) its scheduling time, so the split between waiting and running
/// is not in the history.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Phases {
    /// Activities: dispatch to a worker, the body, the result's way back (scheduled ->
    /// completed).
    pub(crate) activities: f64,
    /// Workflow tasks waiting to be picked up (scheduled -> started).
    pub(crate) workflow_task_queue: f64,
    /// Workflow tasks from pickup to the server having recorded the worker's commands
    /// (started -> completed): delivery, running the workflow code, the completion RPC.
    pub(crate) workflow_task_run: f64,
    /// The rest: the server between one step's completion and the next step's scheduling.
    pub(crate) other: f64,
    /// The whole run: started -> closed.
    pub(crate) total: f64,
}

impl Phases {
    /// Every phase divided by `n` (e.g. per turn).
    pub(crate) fn per(&self, n: f64) -> Phases {
        self.map(|v| v / n)
    }

    /// `self - other`, phase by phase.
    pub(crate) fn minus(&self, other: &Phases) -> Phases {
        Phases {
            activities: self.activities - other.activities,
            workflow_task_queue: self.workflow_task_queue - other.workflow_task_queue,
            workflow_task_run: self.workflow_task_run - other.workflow_task_run,
            other: self.other - other.other,
            total: self.total - other.total,
        }
    }

    fn map(&self, f: impl Fn(f64) -> f64) -> Phases {
        Phases {
            activities: f(self.activities),
            workflow_task_queue: f(self.workflow_task_queue),
            workflow_task_run: f(self.workflow_task_run),
            other: f(self.other),
            total: f(self.total),
        }
    }

    /// The median of several, phase by phase (e.g. over repetitions: robust to one run
    /// disturbed by something else on the machine).
    pub(crate) fn median(all: &[Phases]) -> Phases {
        let of =
            |f: fn(&Phases) -> f64| crate::stats::median(&all.iter().map(f).collect::<Vec<_>>());
        Phases {
            activities: of(|p| p.activities),
            workflow_task_queue: of(|p| p.workflow_task_queue),
            workflow_task_run: of(|p| p.workflow_task_run),
            other: of(|p| p.other),
            total: of(|p| p.total),
        }
    }
}

impl History {
    /// Splits the run's time into [`Phases`], pairing each completed/started event with the
    /// event it refers to (`scheduledEventId`, `startedEventId`).
    pub(crate) fn phases(&self) -> anyhow::Result<Phases> {
        let mut times = std::collections::BTreeMap::new();
        for e in &self.events {
            if let Some(id) = e.get("eventId").and_then(as_id) {
                times.insert(id, event_time(e)?);
            }
        }
        let since = |e: &Value, attributes: &str, field: &str| -> Option<f64> {
            let from = e.get(attributes)?.get(field).and_then(as_id)?;
            let t0 = times.get(&from)?;
            let t1 = event_time(e).ok()?;
            Some(ms_between(*t0, t1))
        };
        let mut p = Phases::default();
        for e in &self.events {
            if let Some(ms) = since(
                e,
                "activityTaskCompletedEventAttributes",
                "scheduledEventId",
            ) {
                p.activities += ms;
            } else if let Some(ms) =
                since(e, "workflowTaskStartedEventAttributes", "scheduledEventId")
            {
                p.workflow_task_queue += ms;
            } else if let Some(ms) =
                since(e, "workflowTaskCompletedEventAttributes", "startedEventId")
            {
                p.workflow_task_run += ms;
            }
        }
        if let (Some(first), Some(last)) = (self.events.first(), self.events.last()) {
            p.total = ms_between(event_time(first)?, event_time(last)?);
        }
        p.other = p.total - p.activities - p.workflow_task_queue - p.workflow_task_run;
        Ok(p)
    }
}

impl History {
    /// Started -> completed (ms) of the first workflow task that started after the first
    /// signal: the task that handled it.
    pub(crate) fn first_task_after_signal(&self) -> Option<f64> {
        let signal = self
            .events
            .iter()
            .position(|e| e.get("workflowExecutionSignaledEventAttributes").is_some())?;
        let mut started = None;
        for e in &self.events[signal..] {
            if e.get("workflowTaskStartedEventAttributes").is_some() {
                started = Some(event_time(e).ok()?);
            } else if e.get("workflowTaskCompletedEventAttributes").is_some()
                && let Some(t0) = started
            {
                return Some(ms_between(t0, event_time(e).ok()?));
            }
        }
        None
    }
}

impl History {
    /// When the workflow started (its `WorkflowExecutionStarted` event), by the server's clock.
    pub(crate) fn started_at(&self) -> anyhow::Result<SystemTime> {
        let e = self
            .events
            .iter()
            .find(|e| e.get("workflowExecutionStartedEventAttributes").is_some())
            .context("no WorkflowExecutionStarted event in the history")?;
        event_time(e)
    }

    /// When the first activity named `name` was scheduled, by the server's clock.
    pub(crate) fn scheduled_at(&self, name: &str) -> anyhow::Result<SystemTime> {
        event_time(self.first_scheduled(name)?)
    }

    /// When the first activity named `name` was scheduled and when it completed (after any
    /// retries), by the server's clock.
    pub(crate) fn first_activity(&self, name: &str) -> anyhow::Result<(SystemTime, SystemTime)> {
        let scheduled = self.first_scheduled(name)?;
        let id = scheduled
            .get("eventId")
            .and_then(as_id)
            .with_context(|| format!("the scheduled event of {name} has no eventId"))?;
        let completed = self
            .events
            .iter()
            .find(|e| {
                e.pointer("/activityTaskCompletedEventAttributes/scheduledEventId")
                    .and_then(as_id)
                    == Some(id)
            })
            .with_context(|| format!("activity {name} (event {id}) did not complete"))?;
        Ok((event_time(scheduled)?, event_time(completed)?))
    }

    fn first_scheduled(&self, name: &str) -> anyhow::Result<&Value> {
        self.events
            .iter()
            .find(|e| {
                e.pointer("/activityTaskScheduledEventAttributes/activityType/name")
                    .and_then(Value::as_str)
                    == Some(name)
            })
            .with_context(|| format!("no activity {name} was scheduled"))
    }
}

/// Milliseconds from `t0` to `t1` (0 if `t1` is earlier).
pub(crate) fn ms_between(t0: SystemTime, t1: SystemTime) -> f64 {
    t1.duration_since(t0)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

/// An event id, a JSON string or number.
fn as_id(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => s.parse().ok(),
        other => other.as_i64(),
    }
}

fn has_error_flag(v: &Value) -> bool {
    match v {
        Value::Object(map) => map.iter().any(|(k, v)| {
            ((k == "is_error" || k == "isError") && v == &Value::Bool(true)) || has_error_flag(v)
        }),
        Value::Array(items) => items.iter().any(has_error_flag),
        _ => false,
    }
}

fn event_time(e: &Value) -> anyhow::Result<SystemTime> {
    let text = e
        .get("eventTime")
        .and_then(Value::as_str)
        .with_context(|| format!("event without eventTime: {e}"))?;
    humantime::parse_rfc3339_weak(text.trim_end_matches('Z'))
        .with_context(|| format!("bad eventTime {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn turns_run_from_one_model_call_to_the_next() {
        let sched = |name: &str, t: &str| json!({"eventTime": t, "activityTaskScheduledEventAttributes": {"activityType": {"name": name}}});
        let history = History {
            events: vec![
                json!({"eventTime": "2025-01-01T00:00:00Z", "workflowExecutionStartedEventAttributes": {}}),
                sched("read_instructions", "2025-01-01T00:00:00.010Z"),
                sched("llm_generate", "2025-01-01T00:00:00.100Z"),
                sched("run_tool", "2025-01-01T00:00:00.150Z"),
                json!({"eventTime": "2025-01-01T00:00:00.160Z", "workflowTaskCompletedEventAttributes": {}}),
                sched("llm_generate", "2025-01-01T00:00:00.225500Z"),
                json!({"eventTime": "2025-01-01T00:00:00.300Z", "workflowExecutionCompletedEventAttributes": {}}),
            ],
            json_bytes: 1000,
            runs: 1,
        };
        assert_eq!(history.error_results(), 0);
        let turns = history.turn_ms("llm_generate").unwrap();
        assert_eq!(turns.len(), 2);
        assert!((turns[0] - 125.5).abs() < 1e-6, "{turns:?}");
        assert!((turns[1] - 74.5).abs() < 1e-6, "{turns:?}");
        let p = history.profile();
        assert_eq!((p.events, p.activities, p.workflow_tasks), (7.0, 4.0, 1.0));
        assert_eq!(p.per(2.0).json_bytes, 500.0);
    }

    #[test]
    fn first_activity_pairs_its_completion_by_scheduled_event_id() {
        let event = |id: i64, t: &str, attributes: Value| {
            let mut e = json!({"eventId": id.to_string(), "eventTime": t});
            if let (Some(map), Value::Object(a)) = (e.as_object_mut(), attributes) {
                map.extend(a);
            }
            e
        };
        let scheduled = |name: &str| json!({"activityTaskScheduledEventAttributes": {"activityType": {"name": name}}});
        let completed = |of: i64| json!({"activityTaskCompletedEventAttributes": {"scheduledEventId": of.to_string()}});
        let history = History {
            events: vec![
                event(
                    1,
                    "2025-01-01T00:00:00Z",
                    json!({"workflowExecutionStartedEventAttributes": {}}),
                ),
                event(
                    5,
                    "2025-01-01T00:00:00.010Z",
                    scheduled("prepare_workspace"),
                ),
                event(6, "2025-01-01T00:00:00.012Z", scheduled("other")),
                event(7, "2025-01-01T00:00:00.020Z", completed(6)),
                event(8, "2025-01-01T00:00:00.250Z", completed(5)),
                event(11, "2025-01-01T00:00:00.300Z", scheduled("llm_generate")),
            ],
            json_bytes: 0,
            runs: 1,
        };
        let begun = history.started_at().unwrap();
        let (t0, t1) = history.first_activity("prepare_workspace").unwrap();
        assert!((ms_between(begun, t0) - 10.0).abs() < 1e-6);
        assert!((ms_between(t0, t1) - 240.0).abs() < 1e-6);
        let call = history.scheduled_at("llm_generate").unwrap();
        assert!((ms_between(begun, call) - 300.0).abs() < 1e-6);
        let err = history
            .first_activity("llm_generate")
            .unwrap_err()
            .to_string();
        assert!(err.contains("did not complete"), "{err}");
        let err = history.first_activity("missing").unwrap_err().to_string();
        assert!(err.contains("no activity missing"), "{err}");
    }

    #[test]
    fn phases_pair_events_by_id() {
        let e = |id: i64, t: &str, attributes: &str, refers: Option<(&str, i64)>| {
            let mut body = serde_json::Map::new();
            if let Some((field, to)) = refers {
                body.insert(field.to_owned(), json!(to.to_string()));
            }
            json!({"eventId": id.to_string(), "eventTime": t, attributes: body})
        };
        let history = History {
            events: vec![
                e(
                    1,
                    "2025-01-01T00:00:00Z",
                    "workflowExecutionStartedEventAttributes",
                    None,
                ),
                e(
                    2,
                    "2025-01-01T00:00:00.002Z",
                    "workflowTaskScheduledEventAttributes",
                    None,
                ),
                e(
                    3,
                    "2025-01-01T00:00:00.005Z",
                    "workflowTaskStartedEventAttributes",
                    Some(("scheduledEventId", 2)),
                ),
                e(
                    4,
                    "2025-01-01T00:00:00.015Z",
                    "workflowTaskCompletedEventAttributes",
                    Some(("startedEventId", 3)),
                ),
                e(
                    5,
                    "2025-01-01T00:00:00.015Z",
                    "activityTaskScheduledEventAttributes",
                    None,
                ),
                e(
                    6,
                    "2025-01-01T00:00:00.035Z",
                    "activityTaskStartedEventAttributes",
                    Some(("scheduledEventId", 5)),
                ),
                e(
                    7,
                    "2025-01-01T00:00:00.075Z",
                    "activityTaskCompletedEventAttributes",
                    Some(("scheduledEventId", 5)),
                ),
                e(
                    8,
                    "2025-01-01T00:00:00.100Z",
                    "workflowExecutionCompletedEventAttributes",
                    None,
                ),
            ],
            json_bytes: 0,
            runs: 1,
        };
        let p = history.phases().unwrap();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert!(close(p.workflow_task_queue, 3.0), "{p:?}");
        assert!(close(p.workflow_task_run, 10.0), "{p:?}");
        assert!(close(p.activities, 60.0), "{p:?}");
        assert!(close(p.total, 100.0) && close(p.other, 27.0), "{p:?}");
    }
}
