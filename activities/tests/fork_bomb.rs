//! A fork bomb in a sandboxed shell call. In a test binary of its own: `RLIMIT_NPROC` counts
//! every task of the sandbox user on the host, zombies not yet reaped included, so sandboxed
//! commands of tests running next to it would use up part of its limit (and could make its own
//! shell's first fork fail).

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_activities::tools::sandbox::{Sandbox, SandboxMode, SandboxSettings};
use baton_activities::tools::{ToolContext, execute};
use baton_proto::ToolCall;
use baton_workflows::tools::SHELL;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn fork_bomb_is_bounded_and_ends_with_the_call() {
    let dir = TempDir::new().unwrap();
    let marker = format!("BATON_BOMB_{}", std::process::id());
    let defaults = SandboxSettings::default();
    // Tasks of the sandbox user left by earlier test binaries (zombies that PID 1 has not
    // reaped yet) count too: the bomb gets 32 on top of them.
    let existing = tasks_of(defaults.uid);
    let ctx = ToolContext {
        workspace: dir.path().join("ws"),
        timeout: Duration::from_secs(30),
        env: vec![(marker.clone(), "1".into())],
        cancel: CancellationToken::new(),
        sandbox: Sandbox {
            mode: SandboxMode::WorkspaceWrite,
            network: false,
            settings: Arc::new(SandboxSettings {
                max_processes: existing + 32,
                ..defaults
            }),
        },
    };
    let shell = |arguments: serde_json::Value| ToolCall {
        id: "call-1".into(),
        name: SHELL.into(),
        arguments: arguments.to_string(),
        ..Default::default()
    };
    let started = Instant::now();
    let result = execute(
        &ctx,
        &shell(serde_json::json!({
            // The top shell forks once, before the bomb goes off, and then `exec`s: once the
            // bomb has used up the limit it needs no fork of its own (dash exits 2 on "Cannot
            // fork"; a bare `bomb` would fork the second half of its pipeline after the first
            // half may have taken every slot), so the call ends by its timeout.
            "command": "bomb() { bomb | bomb & }; (bomb) & exec sleep 10",
            "timeout_seconds": 2,
        })),
    )
    .await
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(result.is_error);
    assert!(
        result.content.starts_with("command timed out after 2 s"),
        "{}",
        result.content
    );
    // dash says "Cannot fork" when fork(2) fails with EAGAIN.
    assert!(
        result.content.contains("Cannot fork"),
        "the process limit was never reached: {}",
        result.content
    );
    assert!(
        eventually(|| processes_with_env(&marker) == 0).await,
        "{} bomb processes left",
        processes_with_env(&marker)
    );
    let after = execute(&ctx, &shell(serde_json::json!({ "command": "echo alive" })))
        .await
        .unwrap();
    assert_eq!(after.content, "exit code: 0\n--- stdout ---\nalive");
}

/// Waits (bounded) until `check` holds.
async fn eventually(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    check()
}

/// The tasks (threads) of `uid` now, zombies included: what `RLIMIT_NPROC` counts.
fn tasks_of(uid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .filter_map(|e| std::fs::read_dir(e.path().join("task")).ok())
        .map(|tasks| tasks.count() as u64)
        .sum()
}

/// Live (not zombie) processes whose environment has `name`.
fn processes_with_env(name: &str) -> usize {
    let needle = format!("{name}=");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("environ")).is_ok_and(|env| {
                env.split(|&b| b == 0)
                    .any(|var| var.starts_with(needle.as_bytes()))
            })
        })
        .filter(|e| {
            std::fs::read_to_string(e.path().join("stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
            })
        })
        .count()
}
