//! Subagents (item 2), end to end on a real dev server and worker, the model being
//! the OpenAI wire mock answering each run by its own script (the request's
//! `prompt_cache_key` is the run id; the turn is the number of assistant messages so far):
//! two children started in one turn whose change sets both land in the parent's workspace, a
//! child's call waiting for approval in `baton pending` under its parent, `baton cancel` of the
//! parent cancelling its children, and a child that continues as new under a parent that does
//! too.

#![allow(clippy::unwrap_used)]

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use crate::common;

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// Replies by run id, each run's in order.
type Scripts = Arc<Mutex<BTreeMap<String, Vec<Value>>>>;

/// The mock answers each run from its script: reply k to the request with k assistant
/// messages. A run without a script (or past its end) gets a 500, which fails the test.
pub(super) fn scripted(llm: &MockOpenAi) -> Scripts {
    let scripts: Scripts = Arc::default();
    let by_run = Arc::clone(&scripts);
    llm.set_responder(Arc::new(move |req| {
        let run = req.body["prompt_cache_key"].as_str()?.to_owned();
        let turn = req
            .messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count();
        let reply = by_run.lock().unwrap().get(&run)?.get(turn)?.clone();
        Some(MockResponse::ok(reply))
    }));
    scripts
}

pub(super) fn spawn(id: &str, task: &str) -> (String, String, String) {
    let args = json!({"task": task}).to_string();
    (id.to_owned(), "spawn_agent".to_owned(), args)
}

pub(super) fn calls(calls: &[(String, String, String)]) -> Value {
    let refs: Vec<(&str, &str, &str)> = calls
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
        .collect();
    MockOpenAi::tool_calls_reply(&refs)
}

pub(super) fn write(id: &str, path: &str, content: &str) -> Value {
    let args = json!({"path": path, "content": content}).to_string();
    MockOpenAi::tool_calls_reply(&[(id, "write_file", &args)])
}

fn shell(id: &str, command: &str) -> Value {
    let args = json!({"command": command}).to_string();
    MockOpenAi::tool_calls_reply(&[(id, "shell", &args)])
}

struct Setup {
    server: DevServer,
    llm: MockOpenAi,
    scripts: Scripts,
    queue: String,
    worker: Worker,
    dir: tempfile::TempDir,
}

fn setup(name: &str) -> Setup {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let scripts = scripted(&llm);
    let queue = unique(name);
    let base = llm.base_url();
    let worker = worker(&server, &queue, &[("OPENAI_BASE_URL", base.as_str())]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README"), "the project\n").unwrap();
    Setup {
        server,
        llm,
        scripts,
        queue,
        worker,
        dir,
    }
}

impl Setup {
    fn script(&self, run: &str, replies: Vec<Value>) {
        self.scripts.lock().unwrap().insert(run.to_owned(), replies);
    }

    fn submit(&self, run: &str, extra: &[&str]) {
        let mut args = vec![
            "--provider",
            "openai",
            "--subagents",
            "--workspace-from",
            self.dir.path().to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        submit(&self.server, &self.queue, run, &args, "split the work");
    }

    /// Submits a parent whose first turn spawns A (writes a.txt, answers) and B (writes
    /// b.txt, then a shell call that waits for approval, then answers); the parent then
    /// answers. Returns (parent, A, B).
    fn two_children(&self) -> (String, String, String) {
        let parent = unique("parent");
        let (a, b) = (format!("{parent}.sub-1"), format!("{parent}.sub-2"));
        self.script(
            &parent,
            vec![
                calls(&[
                    spawn("call_a", "write a.txt"),
                    spawn("call_b", "write b.txt"),
                ]),
                MockOpenAi::text_reply("Both parts are done."),
            ],
        );
        self.script(
            &a,
            vec![
                write("call_wa", "a.txt", "from A\n"),
                MockOpenAi::text_reply("A wrote a.txt."),
            ],
        );
        self.script(
            &b,
            vec![
                write("call_wb", "b.txt", "from B\n"),
                shell("call_sb", "cat b.txt README"),
                MockOpenAi::text_reply("B wrote b.txt and read it back."),
            ],
        );
        self.submit(&parent, &[]);
        (parent, a, b)
    }

    fn status(&self, run: &str) -> Value {
        baton(&self.server, &["status", run, "--json"])
            .unwrap()
            .json()
            .unwrap()
    }
}

#[test]
fn two_children_land_their_changes_and_a_childs_approval_shows_under_its_parent() {
    let s = setup("sub-two");
    let (parent, a, b) = s.two_children();
    // B's shell call waits (shell asks by default); the parent waits for B.
    wait_state(&s.server, &b, "AWAITING_APPROVAL", Duration::from_secs(60));
    let pending = baton(&s.server, &["pending", "--json"]).unwrap();
    let runs = pending.json().unwrap()["runs"].clone();
    let child = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == b.as_str())
        .unwrap_or_else(|| panic!("{b} not in pending: {pending}"))
        .clone();
    assert_eq!(child["parent_run_id"], parent.as_str(), "{child}");
    assert_eq!(child["pending"][0]["tool"], "shell", "{child}");
    let human = baton(&s.server, &["pending"]).unwrap();
    assert!(
        human
            .stdout
            .contains(&format!("{b}  (turn 2, subagent of {parent})")),
        "{human}"
    );
    assert_eq!(s.status(&parent)["state"], "EXECUTING");
    let approved = baton(&s.server, &["approve", &b, "--all"]).unwrap();
    assert_eq!(approved.code, 0, "{approved}");

    let r = result(&s.server, &parent, 0);
    assert_eq!(r["answer"], "Both parts are done.", "{r}");
    // Both change sets landed: the parent's own change set has both files.
    let paths: Vec<&str> = r["changes"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, vec!["a.txt", "b.txt"], "{r}");
    let diff = baton(&s.server, &["diff", &parent]).unwrap();
    assert!(
        diff.stdout.contains("+from A") && diff.stdout.contains("+from B"),
        "{diff}"
    );
    // The children's answers reached the parent's model, in call order, with the merge.
    let last = s
        .llm
        .requests()
        .into_iter()
        .rfind(|q| q.body["prompt_cache_key"] == parent.as_str())
        .unwrap();
    let tool_msgs: Vec<String> = last
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(tool_msgs.len(), 2, "{tool_msgs:?}");
    assert!(
        tool_msgs[0].contains("A wrote a.txt.")
            && tool_msgs[0].contains("are now in your workspace"),
        "{}",
        tool_msgs[0]
    );
    assert!(tool_msgs[1].contains("B wrote b.txt"), "{}", tool_msgs[1]);
    // The children's tokens count as the parent's.
    let child_tokens: u64 = [&a, &b]
        .iter()
        .map(|c| {
            result(&s.server, c, 0)["usage"]["total_tokens"]
                .as_u64()
                .unwrap()
        })
        .sum();
    let own: u64 = s.scripts.lock().unwrap()[&parent]
        .iter()
        .map(|reply| reply["usage"]["total_tokens"].as_u64().unwrap())
        .sum();
    assert!(child_tokens > 0);
    assert_eq!(
        r["usage"]["total_tokens"].as_u64().unwrap(),
        own + child_tokens,
        "{r}"
    );
    // watch: the children's start and end; --children: their own events inline.
    let watch = baton(&s.server, &["watch", &parent, "--json"]).unwrap();
    let lines: Vec<Value> = watch
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds = |k: &str| lines.iter().filter(|l| l["kind"] == k).count();
    assert_eq!(
        (kinds("subagent_started"), kinds("subagent_finished")),
        (2, 2),
        "{watch}"
    );
    let finished_b = lines
        .iter()
        .find(|l| {
            l["kind"] == "subagent_finished" && l["subagent_finished"]["child_run_id"] == b.as_str()
        })
        .unwrap();
    assert_eq!(
        finished_b["subagent_finished"]["merge"], "merged",
        "{finished_b}"
    );
    assert_eq!(finished_b["subagent_finished"]["status"], "COMPLETED");
    let inline = baton(&s.server, &["watch", &parent, "--json", "--children"]).unwrap();
    let child_lines: Vec<Value> = inline
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["run_id"] == b.as_str())
        .collect();
    assert!(
        child_lines.iter().any(|l| l["kind"] == "approval_decided")
            && child_lines.iter().any(|l| l["kind"] == "finished"),
        "{inline}"
    );
}

#[test]
fn cancelling_the_parent_cancels_its_children() {
    let s = setup("sub-cancel");
    let parent = unique("parent");
    let children = [format!("{parent}.sub-1"), format!("{parent}.sub-2")];
    s.script(
        &parent,
        vec![calls(&[
            spawn("call_a", "look at a"),
            spawn("call_b", "look at b"),
        ])],
    );
    for (n, child) in children.iter().enumerate() {
        s.script(child, vec![shell(&format!("call_s{n}"), "ls")]);
    }
    s.submit(&parent, &[]);
    for child in &children {
        wait_state(
            &s.server,
            child,
            "AWAITING_APPROVAL",
            Duration::from_secs(60),
        );
    }
    let out = baton(&s.server, &["cancel", &parent]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let r = result(&s.server, &parent, 4);
    assert_eq!(r["status"], "CANCELLED", "{r}");
    for child in &children {
        let st = s.status(child);
        assert_eq!(st["state"], "CANCELLED", "{child}: {st}");
    }
}

#[test]
fn a_child_that_continues_as_new_reports_to_a_parent_that_does_too() {
    let s = setup("sub-can");
    let parent = unique("parent");
    let child = format!("{parent}.sub-1");
    s.script(
        &parent,
        vec![
            calls(&[spawn("call_a", "write three files")]),
            MockOpenAi::text_reply("The child wrote them."),
        ],
    );
    s.script(
        &child,
        vec![
            write("call_1", "one.txt", "1\n"),
            write("call_2", "two.txt", "2\n"),
            write("call_3", "three.txt", "3\n"),
            MockOpenAi::text_reply("Wrote one, two and three."),
        ],
    );
    s.submit(&parent, &["--no-approval", "--segment-turns", "1"]);
    let r = result(&s.server, &parent, 0);
    assert_eq!(r["answer"], "The child wrote them.", "{r}");
    assert_eq!(r["changes"]["files_changed"], 3, "{r}");
    assert!(
        segments(&s.server, &child).len() >= 3,
        "the child continued as new"
    );
    assert!(
        segments(&s.server, &parent).len() >= 2,
        "the parent continued as new"
    );
    let child_result = result(&s.server, &child, 0);
    assert_eq!(child_result["answer"], "Wrote one, two and three.");
}

#[test]
fn a_scripted_parents_children_that_change_one_file_differently_conflict_and_the_first_stands() {
    let server = DevServer::start().unwrap();
    let queue = unique("sub-conflict");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let child = |text: &str| {
        json!({"turns": [
            {"text": "", "tool_calls": [{"name": "write_file", "arguments":
                {"path": "same.txt", "content": format!("{text}\n")}}]},
            {"text": format!("{text} wrote same.txt")}
        ]})
    };
    let s = dir.path().join("parent.json");
    let parent_script = json!({
        "turns": [
            {"text": "", "tool_calls": [
                {"name": "spawn_agent", "arguments": {"task": "write same.txt as A"}},
                {"name": "spawn_agent", "arguments": {"task": "write same.txt as B"}}
            ]},
            {"text": "One of them conflicted."}
        ],
        "subagents": [child("A"), child("B")]
    });
    std::fs::write(&s, parent_script.to_string()).unwrap();
    let run = unique("parent");
    let out = baton_with_timeout(
        &server,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--id",
            &run,
            "--script",
            s.to_str().unwrap(),
            "--subagents",
            "--no-approval",
            "--wait",
            "--json",
            "write same.txt twice",
        ],
        &[],
        None,
        Duration::from_secs(120),
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    let r = out.json().unwrap();
    assert_eq!(r["answer"], "One of them conflicted.", "{r}");
    // The first child's change landed; the second's conflicted and did not.
    let diff = baton(&server, &["diff", &run]).unwrap();
    assert!(
        diff.stdout.contains("+A") && !diff.stdout.contains("+B"),
        "{diff}"
    );
    let watch = baton(&server, &["watch", &run, "--json"]).unwrap();
    let merges: Vec<String> = watch
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["kind"] == "subagent_finished")
        .map(|l| l["subagent_finished"]["merge"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(merges, vec!["merged", "conflict: same.txt"], "{watch}");
    let transcript = baton(&server, &["transcript", &run, "--json"]).unwrap();
    assert!(
        transcript
            .stdout
            .contains("did NOT land in your workspace (conflict: same.txt)"),
        "{transcript}"
    );
}

#[test]
fn a_worker_killed_while_a_child_waits_hands_the_whole_tree_to_another() {
    let mut s = setup("sub-kill");
    let (parent, a, b) = s.two_children();
    wait_state(&s.server, &b, "AWAITING_APPROVAL", Duration::from_secs(60));
    wait_state(&s.server, &a, "COMPLETED", Duration::from_secs(60));
    s.worker.kill9();
    // A new worker with a cold cache and an empty workspace root picks up all three runs.
    let base = s.llm.base_url();
    let _second = worker(&s.server, &s.queue, &[("OPENAI_BASE_URL", base.as_str())]);
    let approved = baton(&s.server, &["approve", &b, "--all"]).unwrap();
    assert_eq!(approved.code, 0, "{approved}");
    let r = result(&s.server, &parent, 0);
    assert_eq!(r["answer"], "Both parts are done.", "{r}");
    assert_eq!(r["changes"]["files_changed"], 2, "{r}");
    let diff = baton(&s.server, &["diff", &parent]).unwrap();
    assert!(
        diff.stdout.contains("+from A") && diff.stdout.contains("+from B"),
        "{diff}"
    );
    // No child was started twice, and B made one model call per turn (none repeated).
    let history = s.server.workflow_history_json(&parent, None).unwrap();
    let starts = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e.get("startChildWorkflowExecutionInitiatedEventAttributes")
                .is_some()
        })
        .count();
    assert_eq!(starts, 2);
    let b_result = result(&s.server, &b, 0);
    assert_eq!(b_result["answer"], "B wrote b.txt and read it back.");
    let b_calls = s
        .llm
        .requests()
        .iter()
        .filter(|q| q.body["prompt_cache_key"] == b.as_str())
        .count();
    assert_eq!(b_calls, 3, "one model call per turn of B");
}
