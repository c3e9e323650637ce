//! The run's environment: set up between the prepared workspace and the first model call.

use baton_proto::{
    EnvironmentSpec, GitSource, PreparedWorkspace, SetupResult, Verification, WorkspaceSource,
    workspace_source,
};
use pretty_assertions::assert_eq;

use super::*;

fn env() -> EnvironmentSpec {
    EnvironmentSpec {
        setup: vec!["npm ci".into()],
        verify: vec!["npm test".into()],
        verify_attempts: 3,
        origin: "the repository's .baton/environment.toml".into(),
        ..Default::default()
    }
}

fn git_spec() -> RunSpec {
    RunSpec {
        workspace: Some(WorkspaceSource {
            source: Some(workspace_source::Source::Git(GitSource {
                url: "git://127.0.0.1/acme/web.git".into(),
                r#ref: String::new(),
            })),
        }),
        ..spec(&[])
    }
}

fn prepared(environment: Option<EnvironmentSpec>) -> PreparedWorkspace {
    PreparedWorkspace {
        snapshot: "a".repeat(64),
        commit: "c".repeat(40),
        files: 3,
        base_branch: "main".into(),
        environment,
        ..PreparedWorkspace::default()
    }
}

#[test]
fn setup_runs_once_and_its_tree_is_the_runs_starting_tree() {
    let mut s = RunState::new("run-1", git_spec(), T0).unwrap();
    assert!(s.setup_request().is_none(), "not before the workspace");
    s.on_workspace_prepared(prepared(Some(env())), T0);
    let request = s.setup_request().expect("setup is due");
    assert_eq!(
        (request.snapshot.as_str(), request.commit.as_str()),
        ("a".repeat(64).as_str(), "c".repeat(40).as_str())
    );
    s.on_environment_ready(
        SetupResult {
            snapshot: "e".repeat(64),
            cache_key: "k".repeat(64),
            files_added: 120,
            commands: vec![Verification {
                command: "npm ci".into(),
                duration_ms: 2_000,
                ..Default::default()
            }],
            ..Default::default()
        },
        T0,
    );
    assert!(s.setup_request().is_none(), "once");
    assert_eq!(
        s.outputs.start.as_ref().unwrap().snapshot,
        "e".repeat(64),
        "the change set leaves setup out"
    );
    // The environment's verify commands and attempts are the run's defaults.
    assert_eq!(s.verify_commands(), ["npm test"]);
    assert_eq!(s.verify_attempts(), 3);
    expect_llm(&mut s);
    s.on_llm_response(reply("done", vec![], FinishReason::Stop), T0);
    let Step::Verify(v) = s.next_step(T0) else {
        panic!("verification from the environment")
    };
    assert_eq!(v.snapshot, "e".repeat(64), "checked on the set-up tree");
}

#[test]
fn a_failed_setup_ends_the_run_before_any_model_call() {
    let mut s = RunState::new("run-1", git_spec(), T0).unwrap();
    s.on_workspace_prepared(prepared(Some(env())), T0);
    s.on_environment_ready(
        SetupResult {
            failed: "setup command `npm ci` exit code: 1 (from the repository's file)".into(),
            ..Default::default()
        },
        T0,
    );
    let result = expect_finish(&mut s);
    assert_eq!(result.reason(), TerminationReason::SetupFailed);
    assert_eq!(result.turns, 0);
    assert!(
        result.detail.contains("`npm ci` exit code: 1"),
        "{}",
        result.detail
    );

    let mut s = RunState::new("run-2", git_spec(), T0).unwrap();
    s.on_workspace_prepared(prepared(Some(env())), T0);
    s.on_environment_failed("the blob store is down", T0);
    assert_eq!(
        expect_finish(&mut s).reason(),
        TerminationReason::SetupFailed
    );
}

#[test]
fn flags_win_over_the_environments_verify_and_nothing_to_set_up_schedules_nothing() {
    let mut spec = git_spec();
    spec.verify = vec!["make check".into()];
    let mut s = RunState::new("run-1", spec, T0).unwrap();
    s.on_workspace_prepared(
        prepared(Some(EnvironmentSpec {
            setup: vec![],
            ..env()
        })),
        T0,
    );
    assert!(
        s.setup_request().is_none(),
        "no setup commands, no activity"
    );
    assert_eq!(s.verify_commands(), ["make check"]);
    assert_eq!(
        s.verify_attempts(),
        3,
        "attempts from the environment unless given"
    );
}

#[test]
fn an_environment_with_setup_needs_a_workspace() {
    let spec = RunSpec {
        environment: Some(env()),
        ..spec(&[])
    };
    let e = RunState::new("run-1", spec, T0).unwrap_err().to_string();
    assert!(e.contains("--git URL or --workspace-from DIR"), "{e}");
    let bad = RunSpec {
        environment: Some(EnvironmentSpec {
            cache_key: vec!["../x".into()],
            ..env()
        }),
        ..git_spec()
    };
    let e = RunState::new("run-1", bad, T0).unwrap_err().to_string();
    assert!(e.contains("not a path inside"), "{e}");
}
