use baton_proto::{
    Changes, FileChange, RunResult, RunState, TerminationReason, Usage, Verification,
};
use pretty_assertions::assert_eq;

use super::*;
use crate::eval::suite::{Source, Task};

fn task(expect_changed: &[&str]) -> Task {
    Task {
        id: "add".into(),
        source: Source::Dir("d".into()),
        prompt: "p".into(),
        verify: vec!["sh t.sh".into()],
        verify_attempts: None,
        expect_changed: expect_changed.iter().map(|s| s.to_string()).collect(),
        flags: Vec::new(),
    }
}

fn planned(task: &str, config: &str, k: u32) -> Planned {
    Planned {
        run_id: format!("e.{task}.{config}.{k}"),
        task: task.into(),
        config: config.into(),
        repeat: k,
    }
}

fn result(
    state: RunState,
    reason: TerminationReason,
    exit_code: i32,
    changed: &[&str],
) -> RunResult {
    RunResult {
        status: state as i32,
        reason: reason as i32,
        turns: 3,
        usage: Some(Usage {
            total_tokens: 100,
            cost_usd: 0.5,
            ..Default::default()
        }),
        verification: vec![Verification {
            command: "sh t.sh".into(),
            exit_code,
            ..Default::default()
        }],
        changes: Some(Changes {
            files: changed
                .iter()
                .map(|p| FileChange {
                    path: p.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn pass_at_k_is_the_unbiased_estimate() {
    assert_eq!(pass_at_k(2, 1, 1), 0.5);
    assert_eq!(pass_at_k(2, 1, 2), 1.0);
    assert_eq!(pass_at_k(2, 0, 2), 0.0);
    assert_eq!(pass_at_k(2, 2, 1), 1.0);
    // 1 - C(3,2)/C(5,2) = 1 - 3/10.
    assert!((pass_at_k(5, 2, 2) - 0.7).abs() < 1e-12);
    // 1 - C(8,3)/C(10,3) = 1 - 56/120.
    assert!((pass_at_k(10, 2, 3) - 64.0 / 120.0).abs() < 1e-12);
    assert_eq!(pass_at_k(1, 1, 2), 0.0, "k above n has no estimate");
}

#[test]
fn median_of_odd_even_and_none() {
    assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    assert_eq!(median(Vec::new()), 0.0);
}

#[test]
fn a_run_passes_when_it_completed_verified_and_changed_what_was_expected() {
    let t = task(&["lib.sh"]);
    let run = planned("add", "a", 1);
    let ok = grade(
        &run,
        &t.expect_changed,
        &result(
            RunState::Completed,
            TerminationReason::Completed,
            0,
            &["lib.sh"],
        ),
        2.5,
    );
    assert!(ok.passed, "{ok:?}");
    assert_eq!(
        (ok.failure.as_str(), ok.turns, ok.total_tokens),
        ("", 3, 100)
    );
    assert_eq!((ok.cost_usd, ok.seconds), (0.5, 2.5));

    let failed = grade(
        &run,
        &t.expect_changed,
        &result(
            RunState::Failed,
            TerminationReason::VerificationFailed,
            1,
            &["lib.sh"],
        ),
        1.0,
    );
    assert!(!failed.passed);
    assert_eq!(failed.failure, "verification_failed");
    assert_eq!(failed.failed_check.as_deref(), Some("sh t.sh"));
    assert_eq!(failed.state, "FAILED");

    let untouched = grade(
        &run,
        &t.expect_changed,
        &result(
            RunState::Completed,
            TerminationReason::Completed,
            0,
            &["other.sh"],
        ),
        1.0,
    );
    assert_eq!(untouched.failure, EXPECTED_CHANGE_MISSING);

    let turns = grade(
        &run,
        &t.expect_changed,
        &result(
            RunState::Failed,
            TerminationReason::MaxTurnsExceeded,
            0,
            &[],
        ),
        1.0,
    );
    assert_eq!(turns.failure, "max_turns_exceeded");
    let terminated = grade(
        &run,
        &t.expect_changed,
        &result(RunState::Cancelled, TerminationReason::Unspecified, 0, &[]),
        1.0,
    );
    assert_eq!(terminated.failure, "cancelled");
}

/// Config `fix` passes every run, `half` one run of each task in two, `gone` has a run open.
fn runs() -> Vec<EvalRun> {
    let t = task(&[]);
    let mut runs = Vec::new();
    for task_id in ["add", "sub"] {
        for k in 1..=2 {
            let pass = result(RunState::Completed, TerminationReason::Completed, 0, &[]);
            let fail = result(
                RunState::Failed,
                TerminationReason::VerificationFailed,
                1,
                &[],
            );
            runs.push(grade(
                &planned(task_id, "fix", k),
                &t.expect_changed,
                &pass,
                2.0,
            ));
            let half = if k == 1 { &pass } else { &fail };
            runs.push(grade(
                &planned(task_id, "half", k),
                &t.expect_changed,
                half,
                4.0,
            ));
        }
    }
    runs.push(open(&planned("add", "gone", 1), RUNNING));
    runs
}

fn header(compare: Option<(&str, &str)>) -> Header<'static> {
    Header {
        eval_id: "e",
        suite: "calc",
        repeat: 2,
        tasks: vec!["add".into(), "sub".into()],
        configs: vec!["fix".into(), "half".into(), "gone".into()],
        compare: compare.map(|(a, b)| (a.to_owned(), b.to_owned())),
        submitted: 9,
        seconds: 12.0,
    }
}

#[test]
fn the_report_sums_up_each_config() {
    let eval = build(header(None), runs());
    assert!(!eval.complete, "a run is open");
    let fix = &eval.configs[0];
    assert_eq!((fix.runs, fix.ended, fix.passed), (4, 4, 4));
    assert_eq!(fix.pass_rate, 1.0);
    assert_eq!(
        fix.pass_at_k,
        [PassAtK { k: 1, value: 1.0 }, PassAtK { k: 2, value: 1.0 }]
    );
    assert_eq!((fix.median_turns, fix.median_seconds), (3.0, 2.0));
    assert_eq!((fix.total_tokens, fix.cost_usd), (400, 2.0));
    assert!(fix.failures.is_empty());
    let half = &eval.configs[1];
    assert_eq!((half.passed, half.pass_rate), (2, 0.5));
    assert_eq!(
        half.pass_at_k,
        [PassAtK { k: 1, value: 0.5 }, PassAtK { k: 2, value: 1.0 }]
    );
    assert_eq!(
        half.failures,
        [FailureCount {
            reason: "verification_failed".into(),
            runs: 2
        }]
    );
    let gone = &eval.configs[2];
    assert_eq!((gone.runs, gone.ended, gone.pass_rate), (1, 0, 0.0));
    assert_eq!(gone.pass_at_k[0].value, 0.0, "no task has all its runs");
}

#[test]
fn compare_names_what_changed_task_by_task() {
    let eval = build(header(Some(("fix", "half"))), runs());
    let cmp = eval.compare.as_ref().unwrap();
    assert_eq!((cmp.a.as_str(), cmp.b.as_str()), ("fix", "half"));
    assert_eq!(cmp.pass_rate_delta, -0.5);
    let verdicts: Vec<(&str, &str)> = cmp
        .tasks
        .iter()
        .map(|t| (t.task.as_str(), t.verdict.as_str()))
        .collect();
    assert_eq!(verdicts, [("add", "worse"), ("sub", "worse")]);
    let back = build(header(Some(("half", "fix"))), runs());
    assert_eq!(back.compare.unwrap().tasks[0].verdict, "better");

    let text = render(&eval);
    let expected = [
        "config  passed       pass@1   pass@2   turns     tokens      cost $    time s",
        "fix     4/4 100%       1.00     1.00       3        400      2.0000       2.0",
        "half    2/4 50%        0.50     1.00       3        400      2.0000       4.0",
        "gone    0/0 -          0.00     0.00       0          0      0.0000       0.0",
        "  half    verification_failed 2",
        "half against fix: pass rate -50 points, median turns +0, cost +0.0000 $",
        "  add        2/2       1/2  worse",
        "not every run has ended: `baton eval SUITE --id e` picks the evaluation up again",
    ];
    for line in expected {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in\n{text}"
        );
    }
}

/// The example in docs/src/reference/json.md is what `baton eval --json` prints for it, and
/// reads back as [`crate::json::Eval`].
#[test]
fn the_documented_report_is_what_eval_prints() {
    let t = task(&["lib.sh"]);
    let pass = result(
        RunState::Completed,
        TerminationReason::Completed,
        0,
        &["lib.sh"],
    );
    let fail = result(
        RunState::Failed,
        TerminationReason::VerificationFailed,
        1,
        &["lib.sh"],
    );
    let runs = vec![
        grade(&planned("add", "fixer", 1), &t.expect_changed, &pass, 1.9),
        grade(&planned("add", "breaker", 1), &t.expect_changed, &fail, 2.1),
    ];
    let eval = build(
        Header {
            eval_id: "e",
            suite: "shell-fixes",
            repeat: 1,
            tasks: vec!["add".into()],
            configs: vec!["fixer".into(), "breaker".into()],
            compare: Some(("fixer".into(), "breaker".into())),
            submitted: 2,
            seconds: 4.5,
        },
        runs,
    );
    let printed = crate::json::line(&eval).unwrap();
    let page = include_str!("../../../docs/src/reference/json.md");
    let documented: Vec<&str> = page
        .lines()
        .filter(|l| l.starts_with(r#"{"eval_id":"#))
        .collect();
    assert_eq!(documented, [printed.as_str()]);
    let read: crate::json::Eval = serde_json::from_str(documented[0]).unwrap();
    assert_eq!(read, eval);
}
