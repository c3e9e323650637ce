//! History stays bounded on long runs: conversations by reference, payloads under
//! 256 KiB, constant history bytes per turn, continue-as-new with an approval pending across
//! the boundary.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use base64::Engine;
use baton_tests::*;
use common::*;
use serde_json::{Value, json};

/// Largest payload allowed in history.
const MAX_PAYLOAD: usize = 256 * 1024;

/// A dev server with baton's search attributes and fast history processing.
fn fast_server() -> DevServer {
    DevServer::start_baton(&[
        "--dynamic-config-value",
        "history.transferProcessorMaxPollRPS=1000",
    ])
    .unwrap()
}

/// Sizes of every payload's data in a history.
fn payload_sizes(v: &Value, out: &mut Vec<usize>) {
    match v {
        Value::Object(map) => {
            if let (Some(Value::String(data)), Some(_)) = (map.get("data"), map.get("metadata")) {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .map(|b| b.len())
                    .unwrap_or(data.len());
                out.push(bytes);
            }
            map.values().for_each(|x| payload_sizes(x, out));
        }
        Value::Array(items) => items.iter().for_each(|x| payload_sizes(x, out)),
        _ => {}
    }
}

/// History bytes of each turn: the events from one `llm_generate` scheduling to the next.
fn bytes_per_turn(history: &Value) -> Vec<usize> {
    let events = history["events"].as_array().unwrap();
    let mut turns = Vec::new();
    let mut current: Option<usize> = None;
    for e in events {
        let size = serde_json::to_string(e).unwrap().len();
        let is_llm =
            e["activityTaskScheduledEventAttributes"]["activityType"]["name"] == "llm_generate";
        if is_llm {
            if let Some(c) = current.take() {
                turns.push(c);
            }
            current = Some(0);
        }
        if let Some(c) = current.as_mut() {
            *c += size;
        }
    }
    turns
}

/// About 400 bytes of words that differ from turn to turn (the loop guard compares the
/// replies' word sets).
fn varied(turn: usize) -> String {
    const WORDS: [&str; 16] = [
        "inspect", "parser", "module", "retry", "config", "branch", "fixture", "schema", "migrate",
        "index", "token", "buffer", "latency", "handler", "cache", "report",
    ];
    let mut x = (turn as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..48)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("{}{}", WORDS[(x % 16) as usize], (x >> 8) % 1000)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn median(mut xs: Vec<usize>) -> usize {
    xs.sort_unstable();
    xs[xs.len() / 2]
}

#[test]
fn a_500_turn_run_keeps_history_bounded_and_continues_as_new_with_an_approval_pending() {
    const TURNS: usize = 500;
    const APPROVAL_AT: usize = 400; // the 400th model call asks for write_file
    let server = fast_server();
    let queue = unique("budget");
    let w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    // Each turn: a few hundred bytes of assistant text (different every turn, or the loop
    // guard would stop the run) and a small shell output, so the conversation grows to
    // several hundred KiB.
    let turns: Vec<Value> = (0..TURNS)
        .map(|i| {
            if i == TURNS - 1 {
                json!({"text": "All 499 steps are done."})
            } else if i == APPROVAL_AT - 1 {
                json!({"text": format!("turn {i}: writing the report. {}", varied(i)),
                       "tool_calls": [{"name": "write_file",
                                       "arguments": json!({"path": "report.txt", "content": "approved report\n"}).to_string()}]})
            } else {
                json!({"text": format!("turn {i}: step {i}. {}", varied(i)),
                       "tool_calls": [{"name": "shell",
                                       "arguments": json!({"command": format!("echo step {i} >> steps.txt; echo ok {i}")}).to_string()}]})
            }
        })
        .collect();
    let run = run_scripted(&server, &queue, dir.path(), "run-long", &turns, 200);
    // The approval is requested right at a segment boundary: it is pending across it.
    let status = wait_status(&server, &run, "AWAITING_APPROVAL", Duration::from_secs(600));
    let call = status.status.pending[0].call_id.to_string();
    assert_eq!(status.status.pending[0].tool, "write_file", "{status:?}");
    let before = segments(&server, &run);
    assert_eq!(
        before.len(),
        3,
        "continued as new at turns 200 and 400: {before:?}"
    );
    let out = baton(&server, &["approve", &run, &call, "--reason", "fine"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let result = ended(&server, &run, 0);
    assert_eq!(result.answer, "All 499 steps are done.", "{result:?}");
    assert_eq!(u64::from(result.turns), TURNS as u64, "{result:?}");

    // The approved call ran, and every step ran exactly once.
    let ws = w.workspace_root().join(&run);
    assert_eq!(
        std::fs::read_to_string(ws.join("report.txt")).unwrap(),
        "approved report\n"
    );
    let steps = std::fs::read_to_string(ws.join("steps.txt")).unwrap();
    assert_eq!(steps.lines().count(), TURNS - 2, "every shell step once");

    // History: every segment's payloads stay small, the last segment is small, and the bytes
    // a turn adds do not grow with the conversation.
    let runs = segments(&server, &run);
    assert_eq!(runs.len(), 3, "{runs:?}");
    let mut per_turn = Vec::new();
    let mut largest = 0;
    let mut total = 0;
    for r in &runs {
        let history = server.workflow_history_json(&run, Some(r)).unwrap();
        let mut sizes = Vec::new();
        payload_sizes(&history, &mut sizes);
        largest = largest.max(sizes.iter().copied().max().unwrap_or(0));
        total += serde_json::to_string(&history).unwrap().len();
        per_turn.extend(bytes_per_turn(&history));
    }
    let last = serde_json::to_string(&server.workflow_history_json(&run, None).unwrap())
        .unwrap()
        .len();
    let at_50 = median(per_turn[45..55].to_vec());
    let at_500 = median(per_turn[per_turn.len() - 11..per_turn.len() - 1].to_vec());
    println!(
        "history: {} segments, {total} bytes in all, last segment {last} bytes, largest \
         payload {largest} bytes; bytes per turn at turn 50: {at_50}, at turn 500: {at_500}",
        runs.len()
    );
    assert!(largest <= MAX_PAYLOAD, "largest payload {largest}");
    assert!(last < 5 * 1024 * 1024, "final history {last} bytes");
    assert!(
        at_500 <= 2 * at_50 && at_50 <= 2 * at_500,
        "per-turn bytes {at_50} -> {at_500}"
    );

    // The transcript still holds the whole conversation (older items from the blob store).
    let out = baton(&server, &["transcript", &run, "--json"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let items = out.json().unwrap()["items"].as_array().unwrap().clone();
    assert!(items.len() >= 2 * TURNS - 1, "{}", items.len());
    assert!(
        items.iter().all(|i| i.get("stub").is_none()),
        "stubs are resolved"
    );
    assert!(out.stdout.contains("turn 3: step 3."));
}

/// What a run's history costs, from the server's own count (`historySizeBytes` of
/// `temporal workflow describe`, the protobuf size the server limits) and, per event type,
/// the payload bytes (decoded) in the CLI's JSON of the history.
#[derive(Debug, Default)]
struct HistoryCost {
    /// `historySizeBytes` summed over every segment.
    server_bytes: u64,
    /// Segments (1 + continue-as-new count).
    segments: usize,
    /// Event type -> (events, payload bytes).
    by_event: std::collections::BTreeMap<String, (usize, usize)>,
    /// Payload bytes of the largest `WorkflowExecutionStarted` (a continued segment's input
    /// is the checkpoint).
    largest_start: usize,
}

impl HistoryCost {
    fn measure(server: &DevServer, id: &str) -> Self {
        let mut cost = HistoryCost::default();
        for r in segments(server, id) {
            let out = server
                .temporal(&["workflow", "describe", "-w", id, "-r", &r, "-o", "json"])
                .unwrap()
                .ensure_success()
                .unwrap();
            let info = &out.json().unwrap()["workflowExecutionInfo"];
            let size = info["historySizeBytes"]
                .as_str()
                .map(|s| s.parse::<u64>().unwrap())
                .or_else(|| info["historySizeBytes"].as_u64())
                .unwrap_or_else(|| panic!("no historySizeBytes in {info}"));
            cost.server_bytes += size;
            cost.segments += 1;
            let history = server.workflow_history_json(id, Some(&r)).unwrap();
            // Activity events are split by activity type (completions name theirs through
            // the scheduled event).
            let mut activity = std::collections::HashMap::new();
            for e in history["events"].as_array().unwrap() {
                let attributes = &e["activityTaskScheduledEventAttributes"];
                let scheduled = attributes["activityType"]["name"].as_str();
                if let Some(name) = scheduled {
                    activity.insert(e["eventId"].as_str().unwrap_or("").to_owned(), name);
                }
                let of = e["activityTaskCompletedEventAttributes"]["scheduledEventId"]
                    .as_str()
                    .and_then(|id| activity.get(id).copied());
                let event = e["eventType"].as_str().unwrap_or("?");
                let event = event.strip_prefix("EVENT_TYPE_").unwrap_or(event);
                let kind = match scheduled.or(of) {
                    Some(name) => format!("{event} {name}"),
                    None => event.to_owned(),
                };
                let mut sizes = Vec::new();
                payload_sizes(e, &mut sizes);
                if event == "WORKFLOW_EXECUTION_STARTED" {
                    cost.largest_start = cost.largest_start.max(sizes.iter().sum());
                }
                let entry = cost.by_event.entry(kind).or_default();
                entry.0 += 1;
                entry.1 += sizes.iter().sum::<usize>();
            }
        }
        cost
    }

    /// One line per event type, largest payload share first.
    fn breakdown(&self, turns: usize) -> String {
        let mut rows: Vec<_> = self.by_event.iter().collect();
        rows.sort_by_key(|(_, (_, bytes))| std::cmp::Reverse(*bytes));
        rows.iter()
            .map(|(kind, (n, bytes))| {
                format!(
                    "  {kind}: {n} events, {bytes} payload bytes ({} per turn)\n",
                    bytes / turns
                )
            })
            .collect()
    }
}

/// A scripted run of `turns` turns whose every turn but the last adds `text_bytes` of
/// assistant text and a shell call printing about `output_bytes`, different every turn. The
/// script is padded past the CLI's inline limit with turns the run never reaches, so it goes
/// to the blob store and each model call's input carries a reference to it, as a real model's
/// carries none: the history measured is the run's, not the script's.
fn scripted_turns(turns: usize, text_bytes: usize, output_bytes: usize) -> Vec<Value> {
    let unreached = json!({"text": "x".repeat(70 * 1024)});
    (0..turns)
        .map(|i| {
            if i == turns - 1 {
                return json!({"text": "All steps are done."});
            }
            let mut text = format!("turn {i}: ");
            while text.len() < text_bytes {
                text.push_str(&varied(i * 31 + text.len()));
                text.push(' ');
            }
            text.truncate(text_bytes);
            // `seq` lines of ~30 bytes: the output differs per turn and has the size asked.
            let lines = (output_bytes / 30).max(1);
            let command = format!("seq -f 'step {i:04} output line %05g' 1 {lines}");
            json!({"text": text, "tool_calls": [{"name": "shell",
                   "arguments": json!({"command": command}).to_string()}]})
        })
        .chain([unreached])
        .collect()
}

/// Submits a scripted run (see [`scripted_turns`]) and returns its id once it has finished.
fn run_scripted(
    server: &DevServer,
    queue: &str,
    dir: &std::path::Path,
    name: &str,
    turns: &[Value],
    segment_turns: usize,
) -> String {
    let script = script(dir, name, json!(turns));
    let run = unique(name);
    let max_turns = (turns.len() + 10).to_string();
    submit(
        server,
        queue,
        &run,
        &[
            "--script",
            script.to_str().unwrap(),
            "--require-approval",
            "write_file",
            "--max-turns",
            &max_turns,
            "--segment-turns",
            &segment_turns.to_string(),
        ],
        "take the steps",
    );
    run
}

/// `baton result RUN --wait --json` of a run that finishes within `timeout`.
fn result_within(server: &DevServer, run: &str, timeout: Duration) -> Value {
    let args = ["result", run, "--wait", "--json"];
    let out = baton_with_timeout(server, &args, &[], None, timeout).unwrap();
    assert_eq!(out.code, 0, "{out}");
    out.json().unwrap()
}

/// History of the same scripted run with ~100-byte turns and with ~4 KiB turns (1.2 KB of
/// assistant text and a 3 KB tool output each), run side by side on one worker started with
/// `env`; prints both with their breakdown per event type.
fn small_and_large_turns(
    turns: usize,
    segment_turns: usize,
    env: &[(&str, &str)],
) -> (HistoryCost, HistoryCost) {
    let server = fast_server();
    let queue = unique("cost");
    let _w = worker(&server, &queue, env);
    let dir = tempfile::tempdir().unwrap();
    let small = scripted_turns(turns, 60, 40);
    let large = scripted_turns(turns, 1200, 3000);
    let small = run_scripted(&server, &queue, dir.path(), "small", &small, segment_turns);
    let large = run_scripted(&server, &queue, dir.path(), "large", &large, segment_turns);
    let mut costs = Vec::new();
    for (run, label) in [(&small, "100-byte turns"), (&large, "4 KiB turns")] {
        let r = result_within(&server, run, Duration::from_secs(600));
        assert_eq!(r["answer"], "All steps are done.", "{r}");
        assert_eq!(r["turns"], turns as u64, "{r}");
        let cost = HistoryCost::measure(&server, run);
        println!(
            "{label} ({turns} turns, {env:?}): {} history bytes in {} segments (server \
             historySizeBytes), {} per turn, largest segment input {} bytes\n{}",
            cost.server_bytes,
            cost.segments,
            cost.server_bytes / turns as u64,
            cost.largest_start,
            cost.breakdown(turns)
        );
        costs.push(cost);
    }
    let large = costs.pop().unwrap();
    (costs.pop().unwrap(), large)
}

/// The bounded-history acceptance, on a shorter run than its 300 turns (the figure for 300 is the
/// ignored test below, in BENCHMARKS.md): 4 KiB turns cost under 1.5x the history of
/// 100-byte turns, and 300 of them would stay under 5 MB. Two segments: the checkpoint a
/// continued run starts from carries previews too.
#[test]
fn turns_adding_4_kib_cost_under_1_5x_the_history_of_100_byte_turns() {
    const TURNS: usize = 80;
    let (small, large) = small_and_large_turns(TURNS, 40, &[]);
    let per_turn = |c: &HistoryCost| c.server_bytes as f64 / TURNS as f64;
    let ratio = per_turn(&large) / per_turn(&small);
    println!(
        "bytes per turn: {:.0} (100-byte turns), {:.0} (4 KiB turns), ratio {ratio:.2}",
        per_turn(&small),
        per_turn(&large)
    );
    assert!(
        ratio < 1.5,
        "4 KiB turns cost {ratio:.2}x the 100-byte ones"
    );
    assert!(
        per_turn(&large) * 300.0 < 5_000_000.0,
        "300 turns would make {:.0} bytes of history",
        per_turn(&large) * 300.0
    );
    assert_eq!(large.segments, 2);
    // The checkpoint holds previews: it grows by far less than the ~4.2 KB each of the
    // segment's 40 turns added.
    let added = 40 * 4200;
    assert!(
        large.largest_start - small.largest_start < added / 4,
        "checkpoint {} bytes for 4 KiB turns, {} for 100-byte ones",
        large.largest_start,
        small.largest_start
    );
}

/// The 300-turn figures of BENCHMARKS.md "History bytes per turn": with the default limit,
/// and with `inline_bytes` at its maximum (64 KiB: 4 KiB turns stay inline, as before
/// the bounded-history acceptance). About 2 minutes; run with `--ignored`.
#[test]
#[ignore]
fn history_bytes_of_300_turns_for_benchmarks() {
    const TURNS: usize = 300;
    let (small, large) = small_and_large_turns(TURNS, 200, &[]);
    assert!(large.server_bytes < 5_000_000, "{}", large.server_bytes);
    let ratio = large.server_bytes as f64 / small.server_bytes as f64;
    println!("ratio {ratio:.2}");
    assert!(ratio < 1.5);
    small_and_large_turns(TURNS, 200, &[("BATON_HISTORY__INLINE_BYTES", "65536")]);
}

#[test]
fn long_texts_outputs_and_arguments_reach_the_model_whole_and_history_as_previews() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("by-ref");
    let base = llm.base_url();
    let w = worker(&server, &queue, &[("OPENAI_BASE_URL", base.as_str())]);
    let text = format!("PLAN-START {} PLAN-END", varied(1).repeat(3));
    let content = format!("{}CONTENT-END", "notes line\n".repeat(300));
    let write = json!({"path": "notes.txt", "content": content}).to_string();
    let shell = json!({"command": "seq -f 'output line %05g' 1 200; printf 'OUTPUT-%sEND\\n' ''"})
        .to_string();
    let mut reply =
        MockOpenAi::tool_calls_reply(&[("c1", "write_file", &write), ("c2", "shell", &shell)]);
    reply["choices"][0]["message"]["content"] = json!(text);
    llm.push(reply);
    llm.push_text("Done.");
    let run = unique("run-by-ref");
    submit(
        &server,
        &queue,
        &run,
        &["--provider", "openai", "--no-approval"],
        "write notes",
    );
    assert_eq!(result(&server, &run, 0)["answer"], "Done.");

    // The tool got the exact arguments; the model got every text whole.
    let ws = w.workspace_root().join(&run);
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        content
    );
    let sent = llm.requests()[1].messages();
    let assistant = sent.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(assistant["content"], text.as_str());
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"],
        write.as_str()
    );
    let outputs: Vec<&str> = sent
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(
        outputs[1].contains("output line 00200\nOUTPUT-END"),
        "{outputs:?}"
    );

    // History holds previews: none of the long texts' ends, and markers naming the blobs.
    let history = history_text(&server, &run);
    for end in ["PLAN-END", "CONTENT-END", "OUTPUT-END", "output line 00200"] {
        assert!(!history.contains(end), "{end} is in history");
    }
    assert!(history.contains("bytes in all, in the blob store as"));
    assert!(history.contains("PLAN-START"), "previews are readable");

    // The transcript shows everything whole.
    let out = baton(&server, &["transcript", &run, "--json"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    for end in ["PLAN-END", "CONTENT-END", "OUTPUT-END"] {
        assert!(
            out.stdout.contains(end),
            "{end} missing from the transcript"
        );
    }
}

#[test]
fn calls_whose_cut_arguments_look_alike_are_not_taken_for_a_loop() {
    // Three writes to one path whose contents differ only past the preview: history holds the
    // same cut arguments three times, the exact ones (and their digests) differ.
    let server = DevServer::start().unwrap();
    let queue = unique("cut-loop");
    let w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let content = |i: usize| format!("{}version {i}\n", "same start\n".repeat(200));
    let mut turns: Vec<Value> = (0..3)
        .map(|i| {
            let arguments = json!({"path": "notes.txt", "content": content(i)}).to_string();
            json!({"tool_calls": [{"name": "write_file", "arguments": arguments}]})
        })
        .collect();
    turns.push(json!({"text": "Wrote three versions."}));
    // Padded past the CLI's inline limit (turns never reached): the script goes to the blob
    // store, so history holds only what the run recorded.
    turns.push(json!({"text": "x".repeat(70 * 1024)}));
    let script = script(dir.path(), "cut-loop", json!(turns));
    let run = unique("run-cut-loop");
    submit(
        &server,
        &queue,
        &run,
        &["--script", script.to_str().unwrap(), "--no-approval"],
        "write three versions",
    );
    let r = ended(&server, &run, 0);
    assert_eq!(r.answer, "Wrote three versions.", "{r:?}");
    let ws = w.workspace_root().join(&run);
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        content(2)
    );
    let history = history_text(&server, &run);
    assert!(
        history.contains("kept in the blob store"),
        "arguments were cut"
    );
    assert!(
        !history.contains("version 2"),
        "history holds no exact arguments"
    );
}
