//! The `shell` tool: `sh -c <command>` in the workspace, in a process group of its own that is
//! killed as a whole when the command ends, times out, is cancelled or abandoned.
//!
//! No process started by a command outlives the call: after the `sh` leader exits, whatever is
//! left in its process group (background jobs such as `sleep 300 &`) is killed with `SIGKILL`;
//! on timeout, cancellation or when the future is dropped, the whole group is. The leader also
//! gets `SIGKILL` should the worker die (`PR_SET_PDEATHSIG` on Linux; note that the kernel ties
//! it to the *thread* that spawned `sh`, a long-lived tokio worker thread). A sandboxed `sh`
//! runs in a PID namespace of its own where the host has them
//! ([`Prepared::own_pid_namespace`]): processes that leave the group on purpose (`setsid`,
//! `setpgid`, double forks) die with the call too, as the kernel kills the whole namespace.
//! Without one (mode `off`, or a host that cannot), such processes are out of reach; the
//! output is not waited for forever on their account.
//!
//! Unless the run's sandbox is `off`, `sh` starts confined (see [`baton_sandbox`]): Landlock,
//! seccomp, resource limits, a private `TMPDIR` removed after the call, a session of its own
//! (no controlling terminal), and the sandbox user when the worker is root.
//!
//! This file runs the command (arguments, environment, the wait, the result); `group.rs` owns
//! its process group (the kill on every way out, the parent-death signal); `capture.rs` reads
//! the two pipes into bounded captures and renders them.

mod capture;
pub(crate) mod group;

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_core::tools::{FULL_OUTPUT_CAP_BYTES, OUTPUT_CAP_BYTES};
use baton_sandbox::Prepared;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde::Deserialize;
use tokio::process::Command;

use self::capture::{Capture, Readers, lock, render, spawn_reader};
use self::group::{GroupGuard, set_parent_death_signal};
use super::output;
use super::{Outcome, ToolContext, ToolError};
use baton_store::snapshot::LOCAL_DIR;

/// Arguments of the `shell` tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellArgs {
    /// The command line, run with `sh -c`.
    pub command: String,
    /// Overrides [`ToolContext::timeout`].
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

/// How long to keep reading output after the command ended and its group was killed, in case
/// a process that left the group still holds the pipes open.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// How long to wait for `sh` to be reaped after `SIGKILL` (a process in uninterruptible sleep
/// can take longer; the runtime reaps it later then).
const REAP_GRACE: Duration = Duration::from_secs(5);

/// Runs `args.command` with `sh -c` in the workspace.
///
/// Returns the exit code and the output (see the module docs for how processes are stopped).
/// A non-zero exit, death by a signal and a timeout are ordinary errors; `Err` means `sh`
/// could not be started or waited for, or [`ToolContext::cancel`] fired
/// ([`ToolError::Cancelled`], after everything was killed and `sh` reaped).
pub async fn run(ctx: &ToolContext, args: ShellArgs) -> Result<Outcome, ToolError> {
    if args.command.trim().is_empty() {
        return Ok(Outcome::error(
            "the command is empty; pass the command line to run in `command`",
        ));
    }
    let timeout = match args.timeout_seconds {
        Some(0) => {
            return Ok(Outcome::error(
                "timeout_seconds must be at least 1; leave it out to use the default timeout",
            ));
        }
        // The model may shorten the call's timeout, never extend it.
        Some(seconds) => Duration::from_secs(seconds).min(ctx.timeout),
        None => ctx.timeout,
    };
    let ran = run_command(ctx, &args.command, timeout).await?;
    Ok(Outcome {
        is_error: !ran.succeeded(),
        full: (ran.full != ran.preview).then_some(ran.full),
        content: ran.preview,
        network: ran.network,
    })
}

/// How a command ended, for callers that need more than the tool's text (the verification
/// gate).
#[derive(Debug)]
pub struct Ran {
    /// Its exit code (`None`: killed by a signal, or stopped at the timeout).
    pub exit_code: Option<i32>,
    /// It was stopped at the timeout.
    pub timed_out: bool,
    /// How it ended, in words ("exit code: 1", "exit code: none (killed by signal SIGKILL)");
    /// for a timeout, what the model should do about it.
    pub status_line: String,
    /// The status line and the output, at most [`OUTPUT_CAP_BYTES`].
    pub preview: String,
    /// The same, at most [`FULL_OUTPUT_CAP_BYTES`].
    pub full: String,
    /// What its processes did through the proxy of their network namespace.
    pub network: Option<baton_sandbox::net::NetReport>,
}

impl Ran {
    /// It exited with code 0.
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0)
    }
}

/// Runs `command` with `sh -c` in the workspace under the context's sandbox, within `timeout`
/// (see the module docs for how its processes are stopped). `Err` means `sh` could not be
/// started or waited for, or [`ToolContext::cancel`] fired.
pub async fn run_command(
    ctx: &ToolContext,
    command_line: &str,
    timeout: Duration,
) -> Result<Ran, ToolError> {
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(command_line)
        .current_dir(&ctx.workspace);
    command
        .env_clear()
        .envs(tool_env(std::env::vars_os()))
        // Finds the call's processes again if this worker dies without killing them.
        .env(super::orphans::WORKER_ENV, this_worker())
        .envs(ctx.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Kept until the call ends: the sandbox's temp dir lives as long.
    let mut confinement = Confinement(confine(ctx).await?);
    let what = match &mut confinement.0 {
        Some(prepared) => {
            // The sandbox's hook makes `sh` a session (and process group) of its own, whose
            // id is its pid: not `process_group(0)`, which would make that fail. Before the
            // death signal: that hook must run after the change of user; with a PID
            // namespace the sandbox ties its processes to the worker itself.
            prepared.apply(&mut command);
            if !prepared.own_pid_namespace() {
                set_parent_death_signal(&mut command);
            }
            format!(
                "cannot start `sh` in the sandbox ({})",
                ctx.sandbox.mode.as_str()
            )
        }
        None => {
            command.process_group(0);
            set_parent_death_signal(&mut command);
            "cannot start `sh`".to_owned()
        }
    };

    let spawned = command.spawn();
    let proxy = match &mut confinement.0 {
        Some(prepared) => prepared.spawned(),
        None => Ok(()),
    };
    let mut child = spawned.map_err(|e| ToolError::io(what, e))?;
    // Without its proxy the process has no network it was promised: end it (kill_on_drop).
    proxy.map_err(ToolError::from)?;
    let pgid = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw)
        .ok_or_else(|| {
            ToolError::io(
                "cannot get the process id of `sh`",
                std::io::Error::other("no process id"),
            )
        })?;
    // From here on, returning or being dropped kills the whole group.
    let mut group = GroupGuard::new(pgid);

    let stdout = Arc::new(Mutex::new(Capture::default()));
    let stderr = Arc::new(Mutex::new(Capture::default()));
    let readers = Readers(
        [
            child
                .stdout
                .take()
                .map(|pipe| spawn_reader(pipe, Arc::clone(&stdout))),
            child
                .stderr
                .take()
                .map(|pipe| spawn_reader(pipe, Arc::clone(&stderr))),
        ]
        .into_iter()
        .flatten()
        .collect(),
    );

    let ended = tokio::select! {
        biased;
        () = ctx.cancel.cancelled() => Ended::Cancelled,
        () = tokio::time::sleep(timeout) => Ended::TimedOut,
        status = child.wait() => Ended::Exited(status),
    };
    // Whatever happened, nothing of the command may survive it.
    group.kill();

    let status_line = match ended {
        Ended::Cancelled => {
            let _ = tokio::time::timeout(REAP_GRACE, child.wait()).await;
            group.disarm();
            return Err(ToolError::Cancelled);
        }
        Ended::TimedOut => {
            let _ = tokio::time::timeout(REAP_GRACE, child.wait()).await;
            format!(
                "command timed out after {} s and was stopped (it and every process it started \
                 were killed). If it needs more time, call it again with a larger \
                 timeout_seconds; if it waits for input, provide the input (e.g. with a pipe) or \
                 use a non-interactive option; run servers in the background only within one \
                 command, as nothing outlives a call. Output so far:",
                timeout.as_secs_f64()
            )
        }
        Ended::Exited(Ok(status)) => describe(status),
        Ended::Exited(Err(e)) => return Err(ToolError::io("cannot wait for `sh`", e)),
    };

    let complete = tokio::select! {
        biased;
        () = ctx.cancel.cancelled() => {
            // The group was killed and `sh` reaped already.
            group.disarm();
            return Err(ToolError::Cancelled);
        }
        complete = readers.finish(DRAIN_GRACE) => complete,
    };
    group.disarm();

    let (exit_code, timed_out) = match &ended {
        Ended::Exited(Ok(status)) => (status.code(), false),
        _ => (None, true),
    };
    let stdout = lock(&stdout);
    let stderr = lock(&stderr);
    let incomplete = if complete {
        ""
    } else {
        "\n[output may be incomplete: a process that left the command's process group kept \
         the output open]"
    };
    let preview = render(&status_line, &stdout, &stderr, OUTPUT_CAP_BYTES) + incomplete;
    let full = render(&status_line, &stdout, &stderr, FULL_OUTPUT_CAP_BYTES) + incomplete;
    Ok(Ran {
        exit_code,
        timed_out,
        preview: output::cap(&preview, OUTPUT_CAP_BYTES),
        full: output::cap(&full, FULL_OUTPUT_CAP_BYTES),
        status_line,
        network: confinement.0.as_ref().and_then(Prepared::network_report),
    })
}

/// Prepares the run's sandbox for `sh` (off the async threads: it may walk the workspace).
async fn confine(ctx: &ToolContext) -> Result<Option<Prepared>, ToolError> {
    let sandbox = ctx.sandbox.clone();
    let workspace = ctx.workspace.clone();
    tokio::task::spawn_blocking(move || sandbox.prepare(&workspace, LOCAL_DIR))
        .await
        .map_err(|e| ToolError::io("cannot prepare the sandbox", std::io::Error::other(e)))?
        .map_err(ToolError::from)
}

/// A sandbox set-up, dropped (its temp dir removed) off the async threads.
struct Confinement(Option<Prepared>);

impl Drop for Confinement {
    fn drop(&mut self) {
        if let Some(prepared) = self.0.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn_blocking(move || drop(prepared));
                }
                Err(_) => drop(prepared),
            }
        }
    }
}

/// How the wait for the command ended.
enum Ended {
    Cancelled,
    TimedOut,
    Exited(std::io::Result<ExitStatus>),
}

/// The first line of the result: the exit code, or the signal that killed `sh`.
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code: {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(signal) => format!("exit code: none (killed by signal {})", signal.as_str()),
            Err(_) => format!("exit code: none (killed by signal {signal})"),
        },
        (None, None) => "exit code: none".to_owned(),
    }
}

/// This worker's [`super::orphans::WORKER_ENV`] value, computed once.
fn this_worker() -> &'static str {
    static WORKER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    WORKER.get_or_init(super::orphans::this_worker)
}

/// Environment variables the worker's settings name as holding secrets (git tokens, the GitHub
/// API token), whatever they are called.
static NAMED_SECRETS: std::sync::RwLock<BTreeSet<String>> = std::sync::RwLock::new(BTreeSet::new());

/// Keeps the variables `names` from every command a tool starts (their names come from the
/// worker's settings, so [`is_secret_env`]'s patterns may not catch them).
pub fn hide_env(names: impl IntoIterator<Item = String>) {
    let mut named = NAMED_SECRETS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    named.extend(names.into_iter().filter(|n| !n.is_empty()));
}

/// The worker environment variables every tool command gets (an allow-list, so that
/// `DATABASE_URL`, `CI_JOB_JWT`, `SSH_AUTH_SOCK`, `DBUS_SESSION_BUS_ADDRESS` and whatever else
/// a worker's environment holds do not reach model-chosen commands): the search path, locale
/// and terminal, the user's names, where common toolchains live, and CA bundles. A name ending in `*` is a
/// prefix. The worker's `tool_env` setting adds names ([`pass_env`]).
pub const PASSED_ENV: [&str; 27] = [
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "TZ",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "JAVA_HOME",
    "PYENV_ROOT",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "NVM_DIR",
    "NODE_PATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
];

/// Names (or `PREFIX*`) the worker's settings add to [`PASSED_ENV`].
static EXTRA_PASSED: std::sync::RwLock<BTreeSet<String>> = std::sync::RwLock::new(BTreeSet::new());

/// Passes the worker variables `names` (a trailing `*` makes a prefix) to tool commands too,
/// unless they look like secrets ([`is_secret_env`] always wins).
pub fn pass_env(names: impl IntoIterator<Item = String>) {
    let mut extra = EXTRA_PASSED
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    extra.extend(names.into_iter().filter(|n| !n.is_empty()));
}

/// The variables of `worker` (the worker's environment) a tool command gets: those
/// [`PASSED_ENV`] or [`pass_env`] name, never one that [`is_secret_env`].
pub fn tool_env(
    worker: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let extra = EXTRA_PASSED
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let named = |pattern: &str, name: &str| match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    };
    worker
        .into_iter()
        .filter(|(name, _)| {
            name.to_str().is_some_and(|name| {
                (PASSED_ENV.iter().any(|p| named(p, name)) || extra.iter().any(|p| named(p, name)))
                    && !is_secret_env(name)
            })
        })
        .collect()
}

/// Whether a worker environment variable must not reach model-chosen commands: provider keys,
/// Temporal credentials, worker settings, the secrets the settings name ([`hide_env`]), and
/// anything that looks like a secret.
pub fn is_secret_env(name: &str) -> bool {
    if NAMED_SECRETS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains(name)
    {
        return true;
    }
    let upper = name.to_ascii_uppercase();
    const PREFIXES: [&str; 6] = [
        "OPENAI_",
        "ANTHROPIC_",
        "TEMPORAL_",
        "BATON_",
        "AWS_",
        "AZURE_",
    ];
    const PARTS: [&str; 6] = ["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"];
    PREFIXES.iter().any(|p| upper.starts_with(p)) || PARTS.iter().any(|p| upper.contains(p))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::tools::tests::{call, context};
    use crate::tools::{ToolContext, execute};
    use baton_core::tools::SHELL;
    use baton_sandbox::{Sandbox, SandboxMode, SandboxSettings};
    use pretty_assertions::assert_eq;
    use tempfile::TempDir;

    pub(super) async fn sh(ctx: &ToolContext, command: &str) -> baton_proto::ToolResult {
        execute(ctx, &call(SHELL, serde_json::json!({ "command": command })))
            .await
            .unwrap()
    }

    /// A `sleep` argument no other process has: 300.<our pid><n>.
    pub(super) fn marker(n: u32) -> String {
        format!("sleep 300.{}{n:02}", std::process::id())
    }

    /// Live (non-zombie) processes whose command line contains `marker`.
    pub(super) fn live_processes(marker: &str) -> Vec<i32> {
        let mut found = Vec::new();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return found;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if !cmdline.contains(marker) {
                continue;
            }
            let zombie = std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|stat| {
                    stat.rsplit_once(')')
                        .map(|(_, rest)| rest.trim_start().starts_with('Z'))
                })
                .unwrap_or(true);
            if !zombie {
                found.push(pid);
            }
        }
        found
    }

    pub(super) async fn wait_for(marker: &str, present: bool) -> bool {
        for _ in 0..200 {
            if live_processes(marker).is_empty() != present {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        false
    }

    /// Kills (by pid) whatever a failed test left behind with our unique marker.
    pub(super) struct Cleanup(pub(super) String);

    impl Drop for Cleanup {
        fn drop(&mut self) {
            for pid in live_processes(&self.0) {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }

    pub(super) async fn assert_no_process_left(marker: &str) {
        assert!(
            wait_for(marker, false).await,
            "processes left running: {:?}",
            live_processes(marker)
        );
    }

    #[tokio::test]
    async fn reports_exit_code_stdout_and_stderr() {
        let dir = TempDir::new().unwrap();
        let result = sh(&context(&dir), "echo out; echo err >&2").await;
        assert_eq!(
            result.content,
            "exit code: 0\n--- stdout ---\nout\n--- stderr ---\nerr"
        );
        assert!(!result.is_error);
    }

    #[tokio::test]
    async fn empty_streams_are_omitted() {
        let dir = TempDir::new().unwrap();
        let ctx = context(&dir);
        assert_eq!(sh(&ctx, "true").await.content, "exit code: 0");
        assert_eq!(
            sh(&ctx, "echo only-err >&2").await.content,
            "exit code: 0\n--- stderr ---\nonly-err"
        );
        assert_eq!(
            sh(&ctx, "printf 'a\\nb'").await.content,
            "exit code: 0\n--- stdout ---\na\nb"
        );
    }

    #[tokio::test]
    async fn non_zero_exit_is_an_error() {
        let dir = TempDir::new().unwrap();
        let result = sh(&context(&dir), "echo partial; echo oops >&2; exit 3").await;
        assert!(result.is_error);
        assert_eq!(
            result.content,
            "exit code: 3\n--- stdout ---\npartial\n--- stderr ---\noops"
        );
    }

    #[tokio::test]
    async fn death_by_signal_is_an_error() {
        let dir = TempDir::new().unwrap();
        let result = sh(&context(&dir), "kill -9 $$").await;
        assert!(result.is_error);
        assert_eq!(result.content, "exit code: none (killed by signal SIGKILL)");
    }

    #[tokio::test]
    async fn runs_in_the_workspace() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("here.txt"), "found me").unwrap();
        let result = sh(&context(&dir), "pwd; cat here.txt").await;
        let root = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(
            result.content,
            format!("exit code: 0\n--- stdout ---\n{}\nfound me", root.display())
        );
    }

    #[tokio::test]
    async fn passes_extra_env_and_inherits_the_rest() {
        let dir = TempDir::new().unwrap();
        let mut ctx = context(&dir);
        ctx.env = vec![
            ("BATON_TEST_VAR".into(), "hello world".into()),
            ("BATON_OTHER".into(), "2".into()),
        ];
        let result = sh(&ctx, "printf '%s|%s|' \"$BATON_TEST_VAR\" \"$BATON_OTHER\"; test -n \"$PATH\" && echo path-set").await;
        assert_eq!(
            result.content,
            "exit code: 0\n--- stdout ---\nhello world|2|path-set"
        );
    }

    #[test]
    fn tools_get_only_the_passed_variables_of_the_worker() {
        let worker = [
            ("PATH", "/usr/bin"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C"),
            ("HOME", "/root"),
            ("DATABASE_URL", "postgres://u:pw@h/db"),
            ("SSH_AUTH_SOCK", "/run/user/0/ssh"),
            ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/0/bus"),
            ("XDG_RUNTIME_DIR", "/run/user/0"),
            ("CI_JOB_JWT", "eyJ"),
            ("KUBECONFIG", "/root/.kube/config"),
            ("LC_SECRET_TOKEN", "x"),
            ("MY_TEAM_CACHE_DIR", "/cache"),
            ("MY_TEAM_API_TOKEN", "t"),
        ]
        .map(|(k, v)| (k.into(), v.into()));
        let names = |env: Vec<(std::ffi::OsString, std::ffi::OsString)>| {
            env.into_iter()
                .map(|(k, _)| k.into_string().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(tool_env(worker.clone())),
            ["PATH", "LANG", "LC_ALL", "HOME"]
        );
        pass_env(["MY_TEAM_*".to_owned()]);
        assert_eq!(
            names(tool_env(worker)),
            ["PATH", "LANG", "LC_ALL", "HOME", "MY_TEAM_CACHE_DIR"]
        );
    }

    #[test]
    fn secrets_are_recognised() {
        for name in [
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "TEMPORAL_API_KEY",
            "GITHUB_TOKEN",
            "db_password",
            "BATON_CONFIG",
            "AWS_ACCESS_KEY_ID",
        ] {
            assert!(is_secret_env(name), "{name}");
        }
        for name in ["PATH", "HOME", "LANG", "CARGO_HOME", "TERM"] {
            assert!(!is_secret_env(name), "{name}");
        }
        // A name the settings give (a git host's token variable) is hidden whatever it is.
        assert!(!is_secret_env("GH_PAT_FOR_BATON_TEST"));
        hide_env(["GH_PAT_FOR_BATON_TEST".to_owned()]);
        assert!(is_secret_env("GH_PAT_FOR_BATON_TEST"));
    }

    /// `env` in a tool shows only allow-listed variables of the worker (the test
    /// process has cargo's `CARGO_PKG_*` and whatever the machine set; none of it passes).
    #[tokio::test]
    async fn env_in_a_tool_shows_only_allow_listed_variables() {
        let dir = TempDir::new().unwrap();
        let result = sh(&context(&dir), "env").await;
        assert!(!result.is_error, "{}", result.content);
        let names: Vec<&str> = result
            .content
            .lines()
            .filter_map(|line| line.split_once('=').map(|(name, _)| name))
            .filter(|name| {
                !name.is_empty() && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
            })
            .collect();
        assert!(names.contains(&"PATH"), "{names:?}");
        // Set by `sh` itself, or by the shell tool for the call.
        let own = [
            "PWD",
            "SHLVL",
            "_",
            "OLDPWD",
            super::super::orphans::WORKER_ENV,
        ];
        let extra = EXTRA_PASSED.read().unwrap().clone();
        for name in names {
            let passed = PASSED_ENV
                .iter()
                .chain(own.iter())
                .map(|p| p.to_string())
                .chain(extra.iter().cloned())
                .any(|p| match p.strip_suffix('*') {
                    Some(prefix) => name.starts_with(prefix),
                    None => p == name,
                });
            assert!(passed, "{name} reached the tool:\n{}", result.content);
        }
    }

    #[tokio::test]
    async fn stdin_is_empty() {
        let dir = TempDir::new().unwrap();
        let result = sh(&context(&dir), "cat; read line; echo \"read=$?\"").await;
        assert_eq!(result.content, "exit code: 0\n--- stdout ---\nread=1");
    }

    #[tokio::test]
    async fn non_utf8_output_is_replaced() {
        let dir = TempDir::new().unwrap();
        let result = sh(&context(&dir), "printf 'ab\\377cd'").await;
        assert_eq!(result.content, "exit code: 0\n--- stdout ---\nab\u{FFFD}cd");
    }

    #[tokio::test]
    async fn empty_command_and_zero_timeout_are_rejected() {
        let dir = TempDir::new().unwrap();
        let ctx = context(&dir);
        let result = sh(&ctx, "  ").await;
        assert!(result.is_error);
        assert!(result.content.contains("the command is empty"));
        let result = execute(
            &ctx,
            &call(
                SHELL,
                serde_json::json!({"command": "true", "timeout_seconds": 0}),
            ),
        )
        .await
        .unwrap();
        assert!(result.is_error);
        assert!(
            result
                .content
                .contains("timeout_seconds must be at least 1")
        );
        let result = execute(
            &ctx,
            &call(
                SHELL,
                serde_json::json!({"command": "true", "timeout_seconds": -1}),
            ),
        )
        .await
        .unwrap();
        assert!(result.is_error);
        assert!(
            result
                .content
                .starts_with("invalid arguments for tool 'shell'")
        );
    }

    #[tokio::test]
    async fn default_timeout_comes_from_the_context() {
        let dir = TempDir::new().unwrap();
        let marker = marker(2);
        let _cleanup = Cleanup(marker.clone());
        let mut ctx = context(&dir);
        ctx.timeout = Duration::from_millis(300);
        let result = sh(&ctx, &marker).await;
        assert!(result.is_error);
        assert!(
            result.content.starts_with("command timed out after 0.3 s"),
            "{}",
            result.content
        );
        assert_no_process_left(&marker).await;
    }

    #[tokio::test]
    async fn cannot_start_is_an_infrastructure_error() {
        let dir = TempDir::new().unwrap();
        let mut ctx = context(&dir);
        ctx.workspace = dir.path().join("missing"); // `run` does not create it, `execute` does
        let err = run(
            &ctx,
            ShellArgs {
                command: "true".into(),
                timeout_seconds: None,
            },
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ToolError::Io { .. }), "{err:?}");
        assert!(err.to_string().starts_with("cannot start `sh`: "), "{err}");
    }

    #[tokio::test]
    async fn a_host_that_cannot_sandbox_fails_the_call() {
        fn unavailable() -> Result<(), String> {
            Err("Landlock unavailable: disabled for this test".to_owned())
        }
        let dir = TempDir::new().unwrap();
        let mut ctx = context(&dir);
        ctx.sandbox = Sandbox {
            mode: SandboxMode::WorkspaceWrite,
            network: baton_sandbox::Network::Off,
            settings: Arc::new(SandboxSettings {
                probe: unavailable,
                ..SandboxSettings::default()
            }),
        };
        let err = execute(
            &ctx,
            &call(
                SHELL,
                serde_json::json!({ "command": "echo ran > ran.txt" }),
            ),
        )
        .await
        .unwrap_err();
        let ToolError::Sandbox(e) = &err else {
            panic!("{err:?}");
        };
        assert!(!e.is_retryable());
        assert!(
            err.to_string()
                .starts_with("this worker cannot sandbox tool processes"),
            "{err}"
        );
        assert!(!ctx.workspace.join("ran.txt").exists());
    }
}
