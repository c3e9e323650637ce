//! `baton eval`, end to end: the example suite's three shell projects served by a real `git
//! daemon`, two scripted configurations (one fixes each bug, one fixes it and breaks the other
//! function the test checks) twice each, on a real worker. The report gives 100% and 0%,
//! pass@k, turns and cost; a CLI killed mid-way and started again with the evaluation's id
//! starts no run twice and reports every run.

#![allow(clippy::unwrap_used)]

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    time::Duration,
};

use crate::common;

use baton_cli::json;
use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;

/// `examples/eval/` in this checkout.
fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/eval")
}

/// The example's projects as bare repositories behind a `git daemon`.
struct Projects {
    _repos: GitRepos,
    daemon: GitDaemon,
}

fn projects() -> Projects {
    let repos = GitRepos::new().unwrap();
    for task in ["add", "max", "greet"] {
        let dir = example().join("repos").join(task);
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        let (lib, test) = (read("lib.sh"), read("test.sh"));
        repos
            .create(
                &format!("shell/{task}.git"),
                &[("lib.sh", lib.as_str()), ("test.sh", test.as_str())],
            )
            .unwrap();
    }
    let daemon = GitDaemon::start(&repos).unwrap();
    Projects {
        _repos: repos,
        daemon,
    }
}

/// The example suite with each task's directory replaced by its repository on `daemon`.
fn git_suite(dir: &Path, daemon: &GitDaemon) -> PathBuf {
    let text = std::fs::read_to_string(example().join("suite.toml")).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        match line.strip_prefix("dir = \"repos/") {
            Some(rest) => {
                let task = rest.trim_end_matches('"');
                out.push_str(&format!(
                    "git = \"{}\"\n",
                    daemon.url(&format!("shell/{task}.git"))
                ));
            }
            None if line.starts_with("script = \"") => {
                let script = example().join(line["script = \"".len()..].trim_end_matches('"'));
                out.push_str(&format!("script = \"{}\"\n", script.display()));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    assert!(out.contains("git = \"git://"), "{out}");
    let path = dir.join("suite.toml");
    std::fs::write(&path, out).unwrap();
    path
}

/// `baton eval ARGS` (5 minutes at most), which must exit 0.
fn eval_ok(server: &DevServer, args: &[&str]) -> CmdOutput {
    let mut all = vec!["eval"];
    all.extend_from_slice(args);
    let out = baton_with_timeout(server, &all, &[], None, Duration::from_secs(300)).unwrap();
    assert_eq!(out.code, 0, "{out}");
    out
}

fn config<'a>(eval: &'a json::Eval, name: &str) -> &'a json::EvalConfig {
    eval.configs.iter().find(|c| c.config == name).unwrap()
}

/// Every execution labelled with evaluation `id`, closed ones included (a run started twice
/// under one id would show twice).
fn executions(server: &DevServer, id: &str) -> Vec<String> {
    listed(
        server,
        &[
            "list",
            "--label",
            &format!("baton.eval.id={id}"),
            "--limit",
            "1000",
            "--json",
        ],
    )
    .unwrap()
}

#[test]
fn a_suite_on_git_grades_a_fixing_and_a_breaking_config_and_compares_them() {
    let server = DevServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let projects = projects();
    let queue = unique("eval");
    let mut w = Worker::spawn(&server, &queue, &[]).unwrap();
    w.wait_ready_blocking(Duration::from_secs(30)).unwrap();
    let suite = git_suite(tmp.path(), &projects.daemon);
    let suite = suite.display().to_string();
    let out = eval_ok(
        &server,
        &[
            &suite,
            "--id",
            "ev1",
            "--task-queue",
            &queue,
            "--concurrency",
            "4",
            "--compare",
            "fixer",
            "breaker",
            "--json",
        ],
    );
    let eval: json::Eval = out.parse().unwrap();
    assert_eq!(
        (eval.eval_id.as_str(), eval.suite.as_str()),
        ("ev1", "shell-fixes")
    );
    assert_eq!((eval.repeat, eval.complete, eval.submitted), (2, true, 12));
    assert_eq!(eval.runs.len(), 12);

    let fixer = config(&eval, "fixer");
    assert_eq!((fixer.runs, fixer.ended, fixer.passed), (6, 6, 6));
    assert_eq!(fixer.pass_rate, 1.0);
    let ks: Vec<(u32, f64)> = fixer.pass_at_k.iter().map(|p| (p.k, p.value)).collect();
    assert_eq!(ks, [(1, 1.0), (2, 1.0)]);
    assert_eq!(fixer.median_turns, 3.0, "read, write, answer");
    assert!(fixer.total_tokens > 0, "{fixer:?}");
    assert_eq!(fixer.cost_usd, 0.0, "a scripted model has no price");
    assert!(fixer.failures.is_empty(), "{fixer:?}");

    let breaker = config(&eval, "breaker");
    assert_eq!(
        (breaker.ended, breaker.passed, breaker.pass_rate),
        (6, 0, 0.0)
    );
    let ks: Vec<(u32, f64)> = breaker.pass_at_k.iter().map(|p| (p.k, p.value)).collect();
    assert_eq!(ks, [(1, 0.0), (2, 0.0)]);
    assert_eq!(breaker.median_turns, 3.0);
    assert_eq!(
        breaker.failures,
        [json::FailureCount {
            reason: "verification_failed".into(),
            runs: 6
        }]
    );
    for run in eval.runs.iter().filter(|r| r.config == "breaker") {
        assert_eq!(run.state, "FAILED", "{run:?}");
        assert_eq!(run.failed_check.as_deref(), Some("sh test.sh"), "{run:?}");
        assert!(run.seconds > 0.0, "{run:?}");
    }
    let cmp = eval.compare.as_ref().unwrap();
    assert_eq!(cmp.pass_rate_delta, -1.0);
    let verdicts: Vec<(&str, &str)> = cmp
        .tasks
        .iter()
        .map(|t| (t.task.as_str(), t.verdict.as_str()))
        .collect();
    assert_eq!(
        verdicts,
        [("add", "worse"), ("max", "worse"), ("greet", "worse")]
    );

    // Ordinary runs, labelled: found by evaluation, and by suite and config.
    let ids: BTreeSet<String> = executions(&server, "ev1").into_iter().collect();
    let planned: BTreeSet<String> = eval.runs.iter().map(|r| r.run_id.clone()).collect();
    assert_eq!(ids, planned);
    assert!(ids.contains("ev1.greet.breaker.2"), "{ids:?}");
    let breakers = listed(
        &server,
        &[
            "list",
            "--label",
            "baton.eval=shell-fixes/breaker",
            "--json",
        ],
    )
    .unwrap();
    assert_eq!(breakers.len(), 6);

    // The same command again: nothing is started, the report is the same.
    let again = eval_ok(
        &server,
        &[&suite, "--id", "ev1", "--task-queue", &queue, "--json"],
    );
    let again: json::Eval = again.parse().unwrap();
    assert_eq!(again.submitted, 0);
    assert_eq!(again.configs, eval.configs);
    assert_eq!(executions(&server, "ev1").len(), 12);

    // The table for people.
    let text = eval_ok(
        &server,
        &[
            &suite,
            "--id",
            "ev1",
            "--task-queue",
            &queue,
            "--compare",
            "fixer",
            "breaker",
        ],
    );
    assert!(text.stdout.contains("6/6 100%"), "{text}");
    assert!(text.stdout.contains("0/6 0%"), "{text}");
    assert!(
        text.stdout.contains("breaker  verification_failed 6"),
        "{text}"
    );
    assert!(
        text.stdout
            .contains("breaker against fixer: pass rate -100 points"),
        "{text}"
    );
}

#[test]
fn a_killed_eval_resumed_by_its_id_starts_no_run_twice_and_reports_every_run() {
    let server = DevServer::start().unwrap();
    let queue = unique("eval");
    let mut w = Worker::spawn(&server, &queue, &[]).unwrap();
    w.wait_ready_blocking(Duration::from_secs(30)).unwrap();
    // The example suite as it is (directories, uploaded to the workers' store), one run at a
    // time, so that the kill lands with runs done, going and not started.
    let suite = example().join("suite.toml").display().to_string();
    let args = [
        "eval",
        &suite,
        "--id",
        "ev2",
        "--task-queue",
        &queue,
        "--concurrency",
        "1",
        "--json",
    ];
    let mut first = baton_spawn(&server, &args, &[]).unwrap();
    wait_until_blocking(
        Duration::from_secs(120),
        "two runs of the evaluation ended",
        || Ok((first.stderr_so_far().matches("] ev2.").count() >= 2).then_some(())),
    )
    .unwrap();
    first.signal(Signal::SIGKILL).unwrap();
    let killed = first.wait(Duration::from_secs(10)).unwrap();
    assert!(
        killed.stdout.is_empty(),
        "killed before its report: {killed}"
    );
    // Which runs exist, asked of each (describe is consistent; visibility may lag a start).
    let mut planned = Vec::new();
    for k in 1..=2 {
        for task in ["add", "max", "greet"] {
            for config in ["fixer", "breaker"] {
                planned.push(format!("ev2.{task}.{config}.{k}"));
            }
        }
    }
    let before = planned
        .iter()
        .filter(|id| baton(&server, &["status", id.as_str()]).unwrap().code == 0)
        .count();
    assert!(
        (2..12).contains(&before),
        "the kill landed mid-evaluation: {before} runs"
    );

    let out = eval_ok(&server, &args[1..]);
    let eval: json::Eval = out.parse().unwrap();
    assert!(eval.complete);
    assert_eq!(
        eval.submitted,
        12 - before,
        "only the runs not started before"
    );
    assert_eq!(
        (
            config(&eval, "fixer").passed,
            config(&eval, "breaker").passed
        ),
        (6, 0)
    );
    let ids: BTreeSet<&String> = eval.runs.iter().map(|r| &r.run_id).collect();
    assert_eq!(ids, planned.iter().collect());
    // One execution per run id, the closed ones included: a run started twice would show
    // twice.
    let after = wait_until_blocking(Duration::from_secs(10), "12 runs listed", || {
        let listed = executions(&server, "ev2");
        Ok((listed.len() >= 12).then_some(listed))
    })
    .unwrap();
    let unique_ids: BTreeSet<&String> = after.iter().collect();
    assert_eq!(after.len(), 12, "one execution per run: {after:?}");
    assert_eq!(unique_ids.len(), 12);

    // A changed suite does not resume this evaluation.
    let tmp = tempfile::tempdir().unwrap();
    let changed = tmp.path().join("suite.toml");
    let text = std::fs::read_to_string(example().join("suite.toml")).unwrap();
    let text = text
        .replace("repos/", &format!("{}/repos/", example().display()))
        .replace("scripts/", &format!("{}/scripts/", example().display()))
        .replace("repeat = 2", "repeat = 3");
    std::fs::write(&changed, text).unwrap();
    let changed = changed.display().to_string();
    let refused = baton(
        &server,
        &["eval", &changed, "--id", "ev2", "--task-queue", &queue],
    )
    .unwrap();
    assert_eq!(refused.code, 2, "{refused}");
    assert!(
        refused.stderr.contains("this suite has changed"),
        "{refused}"
    );
    assert_eq!(executions(&server, "ev2").len(), 12);
}

/// The mock model's reply to `req`: by the model asked for and the replies already in the
/// conversation (so concurrent runs each get theirs). `gpt-a` writes a.txt, b.txt, c.txt
/// ("3") and answers; `gpt-b` does the same but writes "THREE" and answers otherwise.
fn reply(req: &CapturedRequest) -> Option<MockResponse> {
    let model = req.body["model"].as_str().unwrap_or_default().to_owned();
    let done = req
        .messages()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count();
    let write = |id: &str, path: &str, content: &str| {
        let args = serde_json::json!({"path": path, "content": content}).to_string();
        MockOpenAi::tool_calls_reply(&[(id, "write_file", args.as_str())])
    };
    let body = match (model.as_str(), done) {
        (_, 0) => write("a1", "a.txt", "1"),
        (_, 1) => write("a2", "b.txt", "2"),
        ("gpt-a", 2) => write("a3", "c.txt", "3"),
        ("gpt-b", 2) => write("b3", "c.txt", "THREE"),
        ("gpt-a", 3) => MockOpenAi::text_reply("Wrote three files."),
        ("gpt-b", 3) => MockOpenAi::text_reply("Wrote three files, c.txt in words."),
        _ => return None,
    };
    Some(MockResponse::ok(body))
}

/// (model, replies in its conversation) of each request in `requests`.
fn asked(requests: &[CapturedRequest]) -> Vec<(String, usize)> {
    let mut asked: Vec<(String, usize)> = requests
        .iter()
        .map(|r| {
            let done = r
                .messages()
                .iter()
                .filter(|m| m["role"] == "assistant")
                .count();
            (
                r.body["model"].as_str().unwrap_or_default().to_owned(),
                done,
            )
        })
        .collect();
    asked.sort();
    asked
}

#[test]
fn stored_runs_forked_at_turn_2_under_another_model_call_it_only_after_turn_2() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    llm.set_responder(std::sync::Arc::new(reply));
    let queue = unique("eval-cf");
    let base = llm.base_url();
    let _w = worker(&server, &queue, &[("OPENAI_BASE_URL", base.as_str())]);
    // Three production runs (and one of another team, which the query leaves out).
    let mut originals = Vec::new();
    for (n, team) in ["prod", "prod", "prod", "lab"].iter().enumerate() {
        let run = format!("orig-{n}");
        let label = format!("team={team}");
        submit(
            &server,
            &queue,
            &run,
            &[
                "--provider",
                "openai",
                "--model",
                "gpt-a",
                "--no-approval",
                "--label",
                &label,
                "--verify",
                "test -f c.txt",
            ],
            "write three files",
        );
        assert_eq!(ended(&server, &run, 0).turns, 4);
        if *team == "prod" {
            originals.push(run);
        }
    }
    assert_eq!(llm.request_count(), 16);
    let tmp = tempfile::tempdir().unwrap();
    let suite = tmp.path().join("models.toml");
    std::fs::write(
        &suite,
        "[[config]]\nname = \"b\"\nprovider = \"openai\"\nmodel = \"gpt-b\"\n",
    )
    .unwrap();
    let suite = suite.display().to_string();
    let args = [
        "eval",
        &suite,
        "--id",
        "cf1",
        "--from-runs",
        "BatonLabels = 'team=prod'",
        "--at-turn",
        "2",
        "--config",
        "b",
        "--json",
    ];
    let out = eval_ok(&server, &args[1..]);
    let report: json::Counterfactual = out.parse().unwrap();

    // Exactly the turns after 2 reached the model, under gpt-b: turn 3 (two replies in its
    // conversation) and turn 4 of each fork; nothing before them was asked again.
    let requests = llm.requests();
    let forks = asked(&requests[16..]);
    let b = |done: usize| ("gpt-b".to_owned(), done);
    assert_eq!(forks, [b(2), b(2), b(2), b(3), b(3), b(3)]);

    assert_eq!(
        (report.originals, report.submitted, report.complete),
        (3, 3, true)
    );
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    let mut seen: Vec<&str> = report
        .pairs
        .iter()
        .map(|p| p.original.run_id.as_str())
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        originals.iter().map(String::as_str).collect::<Vec<_>>()
    );
    for p in &report.pairs {
        assert_eq!(p.at_turn, 2);
        assert_eq!(p.fork.run_id, format!("cf1.{}.b.at2", p.original.run_id));
        assert_eq!(
            (p.original.state.as_str(), p.original.passed),
            ("COMPLETED", true)
        );
        assert_eq!(
            (p.fork.state.as_str(), p.fork.passed),
            ("COMPLETED", true),
            "{p:?}"
        );
        assert_eq!(p.fork.turns, 4, "turns count on from 2");
        let d = p.first_difference.as_ref().unwrap();
        assert_eq!(d.turn, 3);
        assert_eq!(d.original, r#"write_file({"content":"3","path":"c.txt"})"#);
        assert_eq!(d.fork, r#"write_file({"content":"THREE","path":"c.txt"})"#);
    }
    assert_eq!(
        (
            report.summary.pairs,
            report.summary.differing,
            report.summary.outcome_changed
        ),
        (3, 3, 0)
    );

    // Again with the same id: the same forks (the query would now find them too, and the
    // runs closed since), none started, no model called.
    let again = eval_ok(&server, &args[1..]);
    let again: json::Counterfactual = again.parse().unwrap();
    assert_eq!((again.submitted, again.pairs.len()), (0, 3));
    assert_eq!(again.as_of, report.as_of);
    assert_eq!(llm.request_count(), 22);

    // The text report names the difference.
    let text_args: Vec<&str> = args.iter().copied().filter(|a| *a != "--json").collect();
    let text = eval_ok(&server, &text_args[1..]);
    assert!(
        text.stdout.contains("first difference at turn 3:"),
        "{text}"
    );
    assert!(
        text.stdout.contains("3 differ from their original"),
        "{text}"
    );

    // Flags that are for suites of tasks are refused, before anything is read.
    for (extra, said) in [
        (&["--repeat", "2"][..], "--repeat is for suites of tasks"),
        (
            &["--compare", "b", "b"][..],
            "--compare is for suites of tasks",
        ),
    ] {
        let mut all = vec![
            "eval",
            &suite,
            "--from-runs",
            "BatonLabels = 'team=lab'",
            "--at-turn",
            "1",
            "--config",
            "b",
        ];
        all.extend_from_slice(extra);
        let out = baton(&server, &all).unwrap();
        assert_eq!(out.code, 2, "{out}");
        assert!(out.stderr.contains(said), "{out}");
    }

    // --at-turn past a run's end skips it, saying why.
    let late = baton(
        &server,
        &[
            "eval",
            &suite,
            "--from-runs",
            "BatonLabels = 'team=lab'",
            "--at-turn",
            "4",
            "--config",
            "b",
            "--json",
        ],
    )
    .unwrap();
    let late: json::Counterfactual = late.parse().unwrap();
    assert_eq!(late.pairs.len(), 0);
    assert_eq!(late.skipped.len(), 1);
    assert!(
        late.skipped[0].reason.contains("it has 4 turns"),
        "{late:?}"
    );
    assert_eq!(llm.request_count(), 22);

    // --at-turn each: the lab run forked after each of its turns but the last.
    let each = eval_ok(
        &server,
        &[
            &suite,
            "--from-runs",
            "BatonLabels = 'team=lab'",
            "--at-turn",
            "each",
            "--config",
            "b",
            "--json",
        ],
    );
    let each: json::Counterfactual = each.parse().unwrap();
    let at: Vec<(u32, u32, &str)> = each
        .pairs
        .iter()
        .map(|p| {
            let d = p.first_difference.as_ref().unwrap();
            (p.at_turn, d.turn, d.fork.as_str())
        })
        .collect();
    assert_eq!(
        at,
        [
            (1, 3, r#"write_file({"content":"THREE","path":"c.txt"})"#),
            (2, 3, r#"write_file({"content":"THREE","path":"c.txt"})"#),
            (3, 4, "answer: Wrote three files, c.txt in words."),
        ]
    );
    // Turns 2-4, 3-4 and 4: six requests, none for a turn at or before its fork point.
    let requests = llm.requests();
    assert_eq!(asked(&requests[22..]), [b(1), b(2), b(2), b(3), b(3), b(3)]);
}
