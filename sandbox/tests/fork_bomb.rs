//! A fork bomb in a sandboxed process. In a test binary of its own: `RLIMIT_NPROC` counts
//! every task of the sandbox user on the host, zombies not yet reaped included, so sandboxed
//! commands of tests running next to it would use up part of its limit (and could make its own
//! shell's first fork fail).

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_sandbox::{Sandbox, SandboxMode, SandboxSettings};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tempfile::TempDir;
use tokio::io::AsyncReadExt;

#[tokio::test]
async fn fork_bomb_is_bounded_and_ends_with_its_process_group() {
    let dir = TempDir::new().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let marker = format!("BATON_BOMB_{}", std::process::id());
    let defaults = SandboxSettings::default();
    // Tasks of the sandbox user left by earlier test binaries (zombies that PID 1 has not
    // reaped yet) count too: the bomb gets 32 on top of them.
    let existing = tasks_of(defaults.uid);
    let sandbox = Sandbox {
        mode: SandboxMode::WorkspaceWrite,
        network: baton_sandbox::Network::Off,
        settings: Arc::new(SandboxSettings {
            max_processes: existing + 32,
            ..defaults
        }),
    };
    let started = Instant::now();
    // The top shell forks once, before the bomb goes off, and then `exec`s: once the bomb has
    // used up the limit it needs no fork of its own (dash exits 2 on "Cannot fork"; a bare
    // `bomb` would fork the second half of its pipeline after the first half may have taken
    // every slot), so it ends when its group is killed, after 2 s, as a timed-out tool call's.
    let bomb = run(
        &sandbox,
        &workspace,
        &marker,
        "bomb() { bomb | bomb & }; (bomb) & exec sleep 10",
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(bomb.code, None, "not killed: {bomb:?}");
    // dash says "Cannot fork" when fork(2) fails with EAGAIN.
    assert!(
        bomb.stderr.contains("Cannot fork"),
        "the process limit was never reached: {bomb:?}"
    );
    assert!(
        eventually(|| processes_with_env(&marker) == 0).await,
        "{} bomb processes left",
        processes_with_env(&marker)
    );
    let after = run(
        &sandbox,
        &workspace,
        &marker,
        "echo alive",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!((after.code, after.stdout.as_str()), (Some(0), "alive\n"));
}

/// What a confined process did.
#[derive(Debug)]
struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `command` with `sh -c` in its own process group, confined by `sandbox`, with `marker`
/// set in its environment; after `limit`, the whole group is killed (as the shell tool does).
async fn run(
    sandbox: &Sandbox,
    workspace: &Path,
    marker: &str,
    command: &str,
    limit: Duration,
) -> std::io::Result<Output> {
    let missing = |what: &str| std::io::Error::other(format!("no {what}"));
    let mut prepared = sandbox
        .prepare(workspace, ".baton")
        .map_err(std::io::Error::other)?
        .ok_or_else(|| missing("sandbox"))?;
    let mut sh = tokio::process::Command::new("sh");
    sh.arg("-c")
        .arg(command)
        .current_dir(workspace)
        .env(marker, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    prepared.apply(&mut sh);
    let mut child = sh.spawn()?;
    prepared.spawned().map_err(std::io::Error::other)?;
    let pid = child.id().ok_or_else(|| missing("process id"))?;
    let group = Pid::from_raw(i32::try_from(pid).map_err(std::io::Error::other)?);
    let read = |mut pipe: Box<dyn tokio::io::AsyncRead + Unpin + Send>| {
        tokio::spawn(async move {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes).await;
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = read(Box::new(
        child.stdout.take().ok_or_else(|| missing("stdout"))?,
    ));
    let stderr = read(Box::new(
        child.stderr.take().ok_or_else(|| missing("stderr"))?,
    ));
    let status = match tokio::time::timeout(limit, child.wait()).await {
        Ok(status) => status?,
        Err(_) => {
            // ESRCH (the group is already empty) is fine.
            let _ = killpg(group, Signal::SIGKILL);
            child.wait().await?
        }
    };
    let drained = Duration::from_secs(5);
    let drain = |reader: tokio::task::JoinHandle<String>| async move {
        tokio::time::timeout(drained, reader)
            .await?
            .map_err(std::io::Error::other)
    };
    Ok(Output {
        code: status.code(),
        stdout: drain(stdout).await?,
        stderr: drain(stderr).await?,
    })
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
