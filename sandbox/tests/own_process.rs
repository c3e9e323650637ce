//! Tests that need a process of their own: each runs itself again (this binary, `--exact`)
//! with what it needs, e.g. a controlling terminal (`script`), and asserts on how that ended.

#![allow(clippy::unwrap_used)]

use std::process::Stdio;
use std::sync::Arc;

use baton_sandbox::{Network, Sandbox, SandboxMode, SandboxSettings};

/// Set in the re-run.
const CHILD: &str = "BATON_OWN_PROCESS_TEST_CHILD";

/// This binary's test `test` again, with `CHILD` set; its output and whether it passed.
fn rerun(wrapper: &[&str], test: &str) -> (bool, String) {
    let exe = std::env::current_exe().unwrap();
    let line = format!(
        "{} --exact {test} --nocapture --test-threads=1",
        exe.display()
    );
    let mut command = std::process::Command::new(wrapper[0]);
    command.args(&wrapper[1..]).arg(&line);
    if wrapper[0] == "script" {
        command.arg("/dev/null");
    }
    let out = command
        .env(CHILD, "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && text.contains("1 passed"), text)
}

/// `sh -c command` under `sandbox` (in a new temp workspace), as a process group of its own
/// when `group` (the way the MCP client starts servers); its stdout.
async fn run(sandbox: &Sandbox, command: &str, group: bool) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut prepared = sandbox.prepare(dir.path(), ".baton").unwrap();
    let mut sh = tokio::process::Command::new("sh");
    sh.arg("-c")
        .arg(command)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if group {
        sh.process_group(0);
    }
    if let Some(prepared) = &mut prepared {
        prepared.apply(&mut sh);
    }
    let child = sh.spawn().unwrap();
    if let Some(prepared) = &mut prepared {
        prepared.spawned().unwrap();
    }
    let out = child.wait_with_output().await.unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Review #16: a worker started from a terminal must not lend it to its tools (fake approval
/// text, `TIOCSTI`). The re-run has a controlling terminal (`script`).
#[tokio::test]
async fn sandboxed_commands_cannot_reach_the_workers_terminal() {
    const TEST: &str = "sandboxed_commands_cannot_reach_the_workers_terminal";
    if std::env::var_os(CHILD).is_none() {
        if std::process::Command::new("script")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("skipped: `script` (util-linux) makes the controlling terminal");
            return;
        }
        let (passed, output) = rerun(&["script", "-qec"], TEST);
        assert!(passed, "{output}");
        return;
    }
    // This process has a controlling terminal, and so does a command it starts unsandboxed.
    assert!(
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/tty")
            .is_ok()
    );
    let probe = "echo hi > /dev/tty && echo tty-written || echo tty-refused";
    let off = Sandbox {
        settings: Arc::new(SandboxSettings {
            allow_sandbox_off: true,
            ..SandboxSettings::default()
        }),
        ..Sandbox::off()
    };
    assert_eq!(run(&off, probe, true).await, "tty-written\n");
    let sandboxed = |settings: SandboxSettings| Sandbox {
        mode: SandboxMode::WorkspaceWrite,
        network: Network::Off,
        settings: Arc::new(settings),
    };
    // A session of its own: no controlling terminal at all.
    let default = sandboxed(SandboxSettings::default());
    assert_eq!(run(&default, probe, false).await, "tty-refused\n");
    assert_eq!(run(&default, probe, true).await, "tty-refused\n");
    // A caller that made the process a group leader, on a host without PID namespaces: it
    // keeps the worker's session (setsid fails), and Landlock refuses /dev/tty.
    let without_pid_namespace = sandboxed(SandboxSettings {
        pid_probe: || Err("disabled for this test".to_owned()),
        ..SandboxSettings::default()
    });
    assert_eq!(
        run(&without_pid_namespace, probe, true).await,
        "tty-refused\n"
    );
}
