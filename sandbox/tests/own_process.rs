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

/// How deep a tool may nest directories: a command makes this many in a second or two.
const DEEP: usize = 30_000;

/// Makes `DEEP` nested directories `d/d/d/...` under `dir` (one descriptor at a time), with a
/// file at the bottom.
fn deep_tree(dir: &std::path::Path) {
    use nix::fcntl::{OFlag, open, openat};
    use nix::sys::stat::{Mode, mkdirat};
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut fd = open(dir, flags, Mode::empty()).unwrap();
    for _ in 0..DEEP {
        mkdirat(&fd, "d", Mode::from_bits_truncate(0o755)).unwrap();
        fd = openat(&fd, "d", flags, Mode::empty()).unwrap();
    }
    let file = openat(
        &fd,
        "bottom.txt",
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    drop(file);
}

/// Runs `f` on a thread with the stack of tokio's blocking threads (2 MiB), where the worker
/// prepares and drops sandboxes.
fn on_a_blocking_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

/// Review #10: a tool can nest directories far deeper than a recursive walk's stack allows.
/// Handing the workspace over, removing the private temp dir and sweeping a dead worker's
/// temp dirs must neither overflow the stack (an abort of the whole worker, at every start
/// for the sweep) nor leave the tree behind. The re-run lifts the descriptor limit to its
/// hard limit, as container runtimes do, so that a recursion is not cut short by `EMFILE`.
#[test]
fn a_very_deep_tree_crashes_nothing_and_is_removed() {
    const TEST: &str = "a_very_deep_tree_crashes_nothing_and_is_removed";
    if std::env::var_os(CHILD).is_none() {
        let (passed, output) = rerun(&["sh", "-c"], TEST);
        assert!(passed, "the re-run failed (an abort shows here): {output}");
        return;
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2)/setrlimit(2) with a valid struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    // On tmpfs where there is one (a disk makes 90,000 directories slowly); removed at the
    // end by rm(1) (iterative), not by TempDir's remove_dir_all.
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    };
    let dir = dir.unwrap().keep();
    // SAFETY: this re-run is single-threaded here (no other thread reads the environment).
    unsafe { std::env::set_var("TMPDIR", &dir) };
    let started = std::time::Instant::now();
    let step = |what: &str| eprintln!("{what}: {:?}", started.elapsed());
    let workspace = dir.join("ws");
    std::fs::create_dir(&workspace).unwrap();
    deep_tree(&workspace);
    step("made");

    let sandbox = Sandbox {
        mode: SandboxMode::WorkspaceWrite,
        network: Network::Off,
        settings: Arc::new(SandboxSettings::default()),
    };
    let prepared = on_a_blocking_thread({
        let workspace = workspace.clone();
        move || sandbox.prepare(&workspace, ".baton").unwrap().unwrap()
    });
    step("prepared");
    if nix::unistd::geteuid().is_root() {
        // Handed over down to the bottom.
        use std::os::unix::fs::MetadataExt;
        let bottom = (0..DEEP).fold(std::fs::File::open(&workspace).unwrap(), |dir, _| {
            let fd = nix::fcntl::openat(
                &dir,
                "d",
                nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY,
                nix::sys::stat::Mode::empty(),
            )
            .unwrap();
            std::fs::File::from(fd)
        });
        assert_eq!(bottom.metadata().unwrap().uid(), 65534);
    }
    // The tool nested its temp dir as deep: dropping the set-up removes it.
    let temp = prepared.temp_dir().to_path_buf();
    deep_tree(&temp);
    step("checked");
    on_a_blocking_thread(move || drop(prepared));
    assert!(!temp.exists(), "{} is left", temp.display());
    step("dropped");

    // A dead worker's temp dir, as deep: swept.
    let stale = temp.parent().unwrap().join("baton-tool-4194305-deep");
    std::fs::create_dir(&stale).unwrap();
    deep_tree(&stale);
    let swept = on_a_blocking_thread(baton_sandbox::sweep_stale_temp_dirs);
    assert_eq!(swept, 1);
    assert!(!stale.exists(), "{} is left", stale.display());
    step("swept");
    let removed = std::process::Command::new("rm")
        .arg("-rf")
        .arg(&dir)
        .status()
        .unwrap();
    assert!(removed.success());
}
