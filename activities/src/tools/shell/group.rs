//! The command's process group: killed with `SIGKILL` on every way out of the call, and `sh`
//! itself killed should the worker die.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Command;

/// Sets `PR_SET_PDEATHSIG` to `SIGKILL` in the child, so `sh` dies with the worker.
#[cfg(target_os = "linux")]
pub(crate) fn set_parent_death_signal(command: &mut Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before `exec`; it only makes the
    // async-signal-safe system calls prctl(2) and getppid(2) and does not allocate.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // The parent may have died before the signal was armed.
            if nix::unistd::getppid() != parent {
                return Err(nix::errno::Errno::ESRCH.into());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_parent_death_signal(_command: &mut Command) {}

/// Kills the process group with `SIGKILL` when told to and when dropped, unless disarmed.
pub(crate) struct GroupGuard {
    pgid: Pid,
    armed: bool,
}

impl GroupGuard {
    pub(crate) fn new(pgid: Pid) -> Self {
        Self { pgid, armed: true }
    }

    pub(crate) fn kill(&self) {
        if self.armed {
            // ESRCH (the group is already empty) is the usual, fine outcome.
            let _ = killpg(self.pgid, Signal::SIGKILL);
        }
    }

    /// Once the group was killed and `sh` reaped: never signal that group id again, as it may
    /// be reused.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use baton_core::tools::SHELL;
    use tempfile::TempDir;

    use super::super::tests::{Cleanup, assert_no_process_left, marker, sh, wait_for};
    use crate::tools::tests::{call, context};
    use crate::tools::{ToolError, execute};

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = TempDir::new().unwrap();
        let marker = marker(1);
        let _cleanup = Cleanup(marker.clone());
        let started = Instant::now();
        let result = execute(
            &context(&dir),
            &call(
                SHELL,
                serde_json::json!({
                    "command": format!("echo started; echo warn >&2; {marker} & {marker}"),
                    "timeout_seconds": 1,
                }),
            ),
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
            result
                .content
                .starts_with("command timed out after 1 s and was stopped"),
            "{}",
            result.content
        );
        assert!(
            result
                .content
                .ends_with("Output so far:\n--- stdout ---\nstarted\n--- stderr ---\nwarn"),
            "{}",
            result.content
        );
        assert_no_process_left(&marker).await;
    }

    #[tokio::test]
    async fn sandboxed_command_is_killed_as_a_whole_too() {
        let dir = TempDir::new().unwrap();
        let marker = marker(6);
        let _cleanup = Cleanup(marker.clone());
        let mut ctx = context(&dir);
        ctx.sandbox = baton_sandbox::Sandbox::resolve(
            None,
            std::sync::Arc::new(baton_sandbox::SandboxSettings::default()),
        )
        .unwrap();
        let result = execute(
            &ctx,
            &call(
                SHELL,
                serde_json::json!({
                    "command": format!("echo started; {marker} & {marker}"),
                    "timeout_seconds": 1,
                }),
            ),
        )
        .await
        .unwrap();
        assert!(
            result
                .content
                .starts_with("command timed out after 1 s and was stopped"),
            "{}",
            result.content
        );
        assert!(result.content.ends_with("--- stdout ---\nstarted"));
        assert_no_process_left(&marker).await;
    }

    #[tokio::test]
    async fn sandboxed_processes_that_leave_the_group_die_with_the_call() {
        if let Err(reason) = baton_sandbox::probe_pid_namespace() {
            eprintln!("skipped: this host cannot make PID namespaces ({reason})");
            return;
        }
        let dir = TempDir::new().unwrap();
        let marker = marker(7);
        let _cleanup = Cleanup(marker.clone());
        let mut ctx = context(&dir);
        ctx.sandbox = baton_sandbox::Sandbox::resolve(
            None,
            std::sync::Arc::new(baton_sandbox::SandboxSettings::default()),
        )
        .unwrap();
        let started = Instant::now();
        let result = sh(
            &ctx,
            &format!(
                "{{ setsid sh -c '{marker}' & setsid -f {marker}; \
                 nohup sh -c '({marker} &) &'; }} > /dev/null 2>&1; sleep 0.2; echo started"
            ),
        )
        .await;
        assert_eq!(result.content, "exit code: 0\n--- stdout ---\nstarted");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_no_process_left(&marker).await;
    }

    #[tokio::test]
    async fn cancellation_kills_the_whole_group() {
        let dir = TempDir::new().unwrap();
        let marker = marker(3);
        let _cleanup = Cleanup(marker.clone());
        let ctx = context(&dir);
        let cancel = ctx.cancel.clone();
        let watched = marker.clone();
        let canceller = tokio::spawn(async move {
            // Both sleeps (and `sh`, whose command line has the marker too) are running.
            assert!(wait_for(&watched, true).await);
            tokio::time::sleep(Duration::from_millis(100)).await;
            cancel.cancel();
        });
        let started = Instant::now();
        let err = execute(
            &ctx,
            &call(
                SHELL,
                serde_json::json!({ "command": format!("{marker} & {marker}") }),
            ),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ToolError::Cancelled), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
        canceller.await.unwrap();
        assert_no_process_left(&marker).await;
    }

    #[tokio::test]
    async fn dropping_the_future_kills_the_whole_group() {
        let dir = TempDir::new().unwrap();
        let marker = marker(4);
        let _cleanup = Cleanup(marker.clone());
        let ctx = context(&dir);
        let command = call(
            SHELL,
            serde_json::json!({ "command": format!("{marker} & {marker}") }),
        );
        tokio::select! {
            result = execute(&ctx, &command) => panic!("the command ended: {result:?}"),
            present = wait_for(&marker, true) => assert!(present),
        }
        // The `execute` future is dropped here.
        assert_no_process_left(&marker).await;
    }

    #[tokio::test]
    async fn background_jobs_do_not_keep_the_call_waiting() {
        let dir = TempDir::new().unwrap();
        let marker = marker(5);
        let _cleanup = Cleanup(marker.clone());
        let started = Instant::now();
        let result = sh(&context(&dir), &format!("echo hi; {marker} &")).await;
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(result.content, "exit code: 0\n--- stdout ---\nhi");
        assert!(!result.is_error);
        assert_no_process_left(&marker).await;
    }

    #[tokio::test]
    async fn output_of_background_jobs_written_before_exit_is_kept() {
        let dir = TempDir::new().unwrap();
        let result = sh(&context(&dir), "(echo from-job) & wait").await;
        assert_eq!(result.content, "exit code: 0\n--- stdout ---\nfrom-job");
    }
}
