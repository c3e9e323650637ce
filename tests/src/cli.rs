//! Running the `baton` CLI binary.

use std::time::Duration;

use crate::process::{CmdOutput, DEFAULT_CMD_TIMEOUT, RunningCmd, bin_path, clean_command};
use crate::server::DevServer;

fn baton_command(
    address: &str,
    namespace: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<std::process::Command> {
    let mut cmd = clean_command(bin_path("baton")?);
    cmd.args(args)
        .env("TEMPORAL_ADDRESS", address)
        .env("TEMPORAL_NAMESPACE", namespace);
    for (k, v) in env {
        cmd.env(k, v);
    }
    Ok(cmd)
}

/// Runs `baton <args>` against `server` and waits for it (timeout 180 s).
/// A non-zero exit is *not* an error: check [`CmdOutput::code`] or call
/// [`CmdOutput::ensure_success`].
pub fn baton(server: &DevServer, args: &[&str]) -> anyhow::Result<CmdOutput> {
    baton_with(server, args, &[], None)
}

/// [`baton`] with extra environment variables and optional stdin text.
/// `TEMPORAL_ADDRESS`/`TEMPORAL_NAMESPACE` are set from `server` (and may be
/// overridden by `env`); inherited `TEMPORAL_*`/`BATON_*`/`OPENAI_*` are
/// removed; `NO_COLOR=1`.
pub fn baton_with(
    server: &DevServer,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: Option<&str>,
) -> anyhow::Result<CmdOutput> {
    baton_with_timeout(server, args, env, stdin, DEFAULT_CMD_TIMEOUT)
}

/// [`baton_with`] with an explicit timeout (the process is killed and an error
/// returned when it is exceeded).
pub fn baton_with_timeout(
    server: &DevServer,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: Option<&str>,
    timeout: Duration,
) -> anyhow::Result<CmdOutput> {
    let blobs = server.blob_dir().display().to_string();
    let env = with_store(&blobs, env);
    let cmd = baton_command(&server.address(), server.namespace(), args, &env)?;
    RunningCmd::spawn(cmd, stdin)?.wait(timeout)
}

/// `env` after `BATON_STORE__DIR` (the blob store the server's harness workers share), so
/// the CLI can read full outputs and older conversation items; `env` may override it.
fn with_store<'a>(blobs: &'a str, env: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut all = vec![("BATON_STORE__DIR", blobs)];
    all.extend_from_slice(env);
    all
}

/// Runs `baton <args>` against an arbitrary address (namespace `default`),
/// e.g. an unreachable one to test connection errors.
pub fn baton_at(address: &str, args: &[&str]) -> anyhow::Result<CmdOutput> {
    let cmd = baton_command(address, "default", args, &[])?;
    RunningCmd::spawn(cmd, None)?.wait(DEFAULT_CMD_TIMEOUT)
}

/// Starts `baton <args>` in the background (stdin `/dev/null`); finish it
/// with [`RunningCmd::wait`] / [`RunningCmd::wait_async`], signal it with
/// [`RunningCmd::signal`]. Killed on drop if not waited for.
pub fn baton_spawn(
    server: &DevServer,
    args: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<RunningCmd> {
    let blobs = server.blob_dir().display().to_string();
    let env = with_store(&blobs, env);
    let cmd = baton_command(&server.address(), server.namespace(), args, &env)?;
    RunningCmd::spawn(cmd, None)
}
