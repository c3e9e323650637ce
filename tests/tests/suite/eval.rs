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
    let out = baton_with_timeout(
        &server,
        &[
            "eval",
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
        &[],
        None,
        Duration::from_secs(300),
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
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
    let again = baton_with_timeout(
        &server,
        &[
            "eval",
            &suite,
            "--id",
            "ev1",
            "--task-queue",
            &queue,
            "--json",
        ],
        &[],
        None,
        Duration::from_secs(120),
    )
    .unwrap();
    let again: json::Eval = again.parse().unwrap();
    assert_eq!(again.submitted, 0);
    assert_eq!(again.configs, eval.configs);
    assert_eq!(executions(&server, "ev1").len(), 12);

    // The table for people.
    let text = baton_with_timeout(
        &server,
        &[
            "eval",
            &suite,
            "--id",
            "ev1",
            "--task-queue",
            &queue,
            "--compare",
            "fixer",
            "breaker",
        ],
        &[],
        None,
        Duration::from_secs(120),
    )
    .unwrap();
    assert_eq!(text.code, 0, "{text}");
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

    let out = baton_with_timeout(&server, &args, &[], None, Duration::from_secs(300)).unwrap();
    assert_eq!(out.code, 0, "{out}");
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
    assert!(refused.stderr.contains("this one has changed"), "{refused}");
    assert_eq!(executions(&server, "ev2").len(), 12);
}
