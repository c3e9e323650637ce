//! Real processes under the real sandbox: each test runs `sh -c` confined as a tool call would
//! be (the shell tool's own tests cover its output, timeouts and group kills).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use tempfile::TempDir;

use crate::{Network, Prepared, Sandbox, SandboxError, SandboxMode, SandboxSettings};

/// The worker's state directory in a workspace, as the tools name it.
const STATE_DIR: &str = ".baton";

/// What a confined `sh -c` did.
#[derive(Debug)]
struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    network: Option<crate::net::NetReport>,
}

fn sandbox(mode: SandboxMode, network: bool, settings: SandboxSettings) -> Sandbox {
    Sandbox {
        mode,
        network: if network {
            Network::Unfiltered
        } else {
            Network::Off
        },
        settings: Arc::new(settings),
    }
}

/// Runs `command` with `sh -c` in `workspace` (created if missing) confined by `sandbox`; the
/// private temp dir is gone when it returns.
async fn try_sh(
    sandbox: &Sandbox,
    workspace: &Path,
    command: &str,
) -> Result<Output, SandboxError> {
    std::fs::create_dir_all(workspace).unwrap();
    let mut prepared = sandbox.prepare(workspace, STATE_DIR)?;
    let mut sh = tokio::process::Command::new("sh");
    sh.arg("-c")
        .arg(command)
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(prepared) = &mut prepared {
        prepared.apply(&mut sh);
    }
    let child = sh.spawn();
    if let Some(prepared) = &mut prepared {
        prepared.spawned()?;
    }
    let output = child.unwrap().wait_with_output().await.unwrap();
    let network = prepared.as_ref().and_then(Prepared::network_report);
    drop(prepared);
    Ok(Output {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        network,
    })
}

async fn sh(sandbox: &Sandbox, workspace: &Path, command: &str) -> Output {
    try_sh(sandbox, workspace, command).await.unwrap()
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `<dir>/outside`, writable by anyone: only the sandbox stops a write there.
fn open_outside(dir: &TempDir) -> PathBuf {
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o777)).unwrap();
    outside
}

fn python() -> Option<&'static str> {
    Path::new("/usr/bin/python3")
        .exists()
        .then_some("/usr/bin/python3")
}

fn uid_gid() -> (nix::unistd::Uid, nix::unistd::Gid) {
    (nix::unistd::getuid(), nix::unistd::getgid())
}

#[tokio::test]
async fn workspace_write_allows_the_workspace_and_tmpdir_only() {
    let dir = TempDir::new().unwrap();
    let outside = open_outside(&dir);
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("readme.txt"), "from the worker\n").unwrap();
    let sandbox = sandbox(
        SandboxMode::WorkspaceWrite,
        false,
        SandboxSettings::default(),
    );
    let result = sh(
        &sandbox,
        &workspace,
        &format!(
            "cat readme.txt; echo in > inside.txt && cat inside.txt; \
             echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; echo \"$TMPDIR\" > tmpdir.txt; \
             echo null > /dev/null && echo to-stdout > /dev/stdout; \
             echo x > {}/file || echo outside-refused; \
             echo x > /tmp/baton-sandbox-test-$$ || echo tmp-refused",
            outside.display()
        ),
    )
    .await;
    assert_eq!(
        (result.code, result.stdout.as_str()),
        (
            Some(0),
            "from the worker\nin\nt\nto-stdout\noutside-refused\ntmp-refused\n"
        ),
        "{}",
        result.stderr
    );
    assert!(result.stderr.contains("Permission denied"), "{result:?}");
    assert!(!outside.join("file").exists());
    assert_eq!(
        std::fs::read_to_string(workspace.join("inside.txt")).unwrap(),
        "in\n"
    );
    // The private temp dir was not /tmp, and is gone after the call.
    let tmpdir = std::fs::read_to_string(workspace.join("tmpdir.txt")).unwrap();
    let tmpdir = Path::new(tmpdir.trim());
    assert!(
        tmpdir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("baton-tool-"),
        "{}",
        tmpdir.display()
    );
    assert!(!tmpdir.exists(), "{}", tmpdir.display());
}

/// Every run's commands run as the same user: the workspace root (other runs) and the
/// blob store are hidden, the run's own workspace and the system stay readable.
#[tokio::test]
async fn other_runs_and_the_store_are_not_readable() {
    let dir = TempDir::new().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = dir.path().join("workspaces");
    let blobs = dir.path().join("blobs");
    for d in [root.join("run-a"), root.join("run-b"), blobs.join("ab")] {
        std::fs::create_dir_all(&d).unwrap();
    }
    for d in [&root, &blobs, &root.join("run-b"), &blobs.join("ab")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(root.join("run-b/secret.txt"), "victim-secret\n").unwrap();
    std::fs::write(blobs.join("ab/blob"), "stored-secret\n").unwrap();
    std::fs::write(root.join("run-a/own.txt"), "own-content\n").unwrap();
    for mode in [SandboxMode::WorkspaceWrite, SandboxMode::ReadOnly] {
        let sandbox = sandbox(
            mode,
            false,
            SandboxSettings {
                hidden: vec![root.clone(), blobs.clone()],
                ..SandboxSettings::default()
            },
        );
        let result = sh(
            &sandbox,
            &root.join("run-a"),
            &format!(
                "cat own.txt; cat ../run-b/secret.txt || echo denied-run; \
                 cat {}/ab/blob || echo denied-store; ls .. || echo denied-list; \
                 cat /etc/passwd > /dev/null && echo system-ok",
                blobs.display()
            ),
        )
        .await;
        let out = format!("{}{}", result.stdout, result.stderr);
        for want in [
            "own-content",
            "denied-run",
            "denied-store",
            "denied-list",
            "system-ok",
        ] {
            assert!(
                result.stdout.contains(want),
                "{mode:?}: {want} missing: {out}"
            );
        }
        assert!(
            !out.contains("victim-secret") && !out.contains("stored-secret"),
            "{mode:?}: {out}"
        );
    }
}

#[tokio::test]
async fn read_only_forbids_workspace_writes() {
    let dir = TempDir::new().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("readme.txt"), "readable\n").unwrap();
    let sandbox = sandbox(SandboxMode::ReadOnly, false, SandboxSettings::default());
    let result = sh(
        &sandbox,
        &workspace,
        "cat readme.txt; echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; \
         echo x > new.txt || echo create-refused; echo x >> readme.txt || echo append-refused; \
         rm readme.txt || echo rm-refused",
    )
    .await;
    assert_eq!(
        (result.code, result.stdout.as_str()),
        (
            Some(0),
            "readable\nt\ncreate-refused\nappend-refused\nrm-refused\n"
        ),
        "{}",
        result.stderr
    );
    assert!(!workspace.join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(workspace.join("readme.txt")).unwrap(),
        "readable\n"
    );
}

#[tokio::test]
async fn network_off_denies_tcp_and_network_on_allows_it() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect =
        format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' && echo connected || echo refused");

    let dir = TempDir::new().unwrap();
    let workspace = dir.path().join("ws");
    let off = sandbox(
        SandboxMode::WorkspaceWrite,
        false,
        SandboxSettings::default(),
    );
    let result = sh(&off, &workspace, &connect).await;
    assert!(
        result.stdout.contains("refused") && result.stderr.contains("Permission denied"),
        "{result:?}"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), listener.accept())
            .await
            .is_err(),
        "the sandboxed process reached the listener"
    );
    // Unix sockets stay allowed.
    if let Some(python) = python() {
        let result = sh(
            &off,
            &workspace,
            &format!(
                "{python} -c 'import socket; socket.socket(socket.AF_UNIX).close(); print(\"unix-ok\")'"
            ),
        )
        .await;
        assert_eq!(result.stdout, "unix-ok\n", "{result:?}");
    }

    let on = sandbox(
        SandboxMode::WorkspaceWrite,
        true,
        SandboxSettings::default(),
    );
    let (result, accepted) = tokio::join!(sh(&on, &workspace, &connect), listener.accept());
    assert!(result.stdout.contains("connected"), "{result:?}");
    assert!(accepted.is_ok());
}

#[tokio::test]
async fn ptrace_and_user_namespaces_are_denied() {
    let Some(python) = python() else {
        eprintln!("skipped: /usr/bin/python3 is needed to call ptrace(2) and unshare(2)");
        return;
    };
    let script = "import ctypes, os\n\
                  libc = ctypes.CDLL(None, use_errno=True)\n\
                  for name, call in [('ptrace', lambda: libc.ptrace(0, 0, 0, 0)), \
                  ('unshare', lambda: libc.unshare(0x10000000))]:\n\
                  \x20   rc = call()\n\
                  \x20   print(name, rc, os.strerror(ctypes.get_errno()) if rc else 'ok')\n";
    let dir = TempDir::new().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("probe.py"), script).unwrap();
    let sandboxed = sandbox(
        SandboxMode::WorkspaceWrite,
        true,
        SandboxSettings::default(),
    );
    let result = sh(&sandboxed, &workspace, &format!("{python} probe.py")).await;
    assert_eq!(
        result.stdout, "ptrace -1 Operation not permitted\nunshare -1 Operation not permitted\n",
        "{result:?}"
    );
    // Unsandboxed, PTRACE_TRACEME works: the filter made the difference.
    let result = sh(&Sandbox::off(), &workspace, &format!("{python} probe.py")).await;
    assert!(result.stdout.contains("ptrace 0 ok"), "{result:?}");
}

#[tokio::test]
async fn big_files_are_bounded() {
    let dir = TempDir::new().unwrap();
    let workspace = dir.path().join("ws");
    let sandbox = sandbox(
        SandboxMode::WorkspaceWrite,
        false,
        SandboxSettings {
            max_file_size: 1 << 20,
            ..SandboxSettings::default()
        },
    );
    let result = sh(
        &sandbox,
        &workspace,
        "head -c 2000000 /dev/zero > big; echo \"rc=$?\"",
    )
    .await;
    assert!(!result.stdout.contains("rc=0"), "{result:?}");
    assert_eq!(
        std::fs::metadata(workspace.join("big")).unwrap().len(),
        1 << 20
    );
}

#[tokio::test]
async fn runs_as_the_sandbox_user_when_the_worker_is_root() {
    let dir = TempDir::new().unwrap();
    let sandbox = sandbox(
        SandboxMode::WorkspaceWrite,
        false,
        SandboxSettings::default(),
    );
    let result = sh(
        &sandbox,
        &dir.path().join("ws"),
        "id -u; id -g; test \"$HOME\" = \"$TMPDIR\" && echo home-is-tmp; true",
    )
    .await;
    let expected = if is_root() {
        "65534\n65534\nhome-is-tmp\n".to_owned()
    } else {
        let (uid, gid) = uid_gid();
        format!("{uid}\n{gid}\n")
    };
    assert_eq!((result.code, result.stdout), (Some(0), expected));
}

#[tokio::test]
async fn workspace_inside_a_private_directory_works() {
    // TempDir is mode 0700: the sandbox user cannot walk to the workspace by its path, but
    // the child enters it before changing user.
    let dir = TempDir::new().unwrap();
    let sandbox = sandbox(
        SandboxMode::WorkspaceWrite,
        false,
        SandboxSettings::default(),
    );
    let result = sh(&sandbox, &dir.path().join("ws"), "pwd; echo x > f && cat f").await;
    let root = std::fs::canonicalize(dir.path()).unwrap().join("ws");
    assert_eq!(
        result.stdout,
        format!("{}\nx\n", root.display()),
        "{result:?}"
    );
}

#[tokio::test]
async fn the_workspace_is_handed_over_without_following_links() {
    if !is_root() {
        eprintln!("skipped: only a root worker hands the workspace to another user");
        return;
    }
    let dir = TempDir::new().unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret"), "root's").unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(workspace.join("sub").join(STATE_DIR)).unwrap();
    std::fs::create_dir_all(workspace.join(STATE_DIR)).unwrap();
    std::fs::write(workspace.join("sub/by-root.txt"), "a\n").unwrap();
    std::os::unix::fs::symlink(&outside, workspace.join("link")).unwrap();
    std::fs::hard_link(outside.join("secret"), workspace.join("hard")).unwrap();

    let sandbox = sandbox(
        SandboxMode::WorkspaceWrite,
        false,
        SandboxSettings::default(),
    );
    let result = sh(
        &sandbox,
        &workspace,
        "echo b >> sub/by-root.txt && cat sub/by-root.txt; \
         echo x > .baton/state || echo state-refused",
    )
    .await;
    assert!(
        result.stdout.starts_with("a\nb\nstate-refused"),
        "{result:?}"
    );
    let owner = |p: &Path| std::fs::symlink_metadata(p).unwrap().uid();
    assert_eq!(owner(&workspace), 65534);
    assert_eq!(owner(&workspace.join("sub").join(STATE_DIR)), 65534);
    assert_eq!(owner(&workspace.join(STATE_DIR)), 0);
    assert_eq!(owner(&outside), 0);
    assert_eq!(owner(&outside.join("secret")), 0);
    assert_eq!(owner(&workspace.join("link")), 0);
}

#[tokio::test]
async fn refuses_when_the_host_cannot_sandbox() {
    fn unavailable() -> Result<(), String> {
        Err("Landlock unavailable: disabled for this test".to_owned())
    }
    let dir = TempDir::new().unwrap();
    let workspace = dir.path().join("ws");
    let refusing = sandbox(
        SandboxMode::WorkspaceWrite,
        false,
        SandboxSettings {
            probe: unavailable,
            ..SandboxSettings::default()
        },
    );
    let err = try_sh(&refusing, &workspace, "echo ran > ran.txt")
        .await
        .unwrap_err();
    assert!(!err.is_retryable());
    assert_eq!(
        err.to_string(),
        "this worker cannot sandbox tool processes (Landlock unavailable: disabled for this \
         test); run the worker on Linux >= 5.13 with Landlock enabled, or set \
         allow_unsandboxed = true in its config"
    );
    assert!(!workspace.join("ran.txt").exists());

    // Allowed: it runs, unconfined.
    let allowed = sandbox(
        SandboxMode::WorkspaceWrite,
        false,
        SandboxSettings {
            probe: unavailable,
            allow_unsandboxed: true,
            ..SandboxSettings::default()
        },
    );
    let result = sh(&allowed, &workspace, "id -u").await;
    assert_eq!(result.stdout, format!("{}\n", uid_gid().0));
}

#[tokio::test]
async fn mode_off_runs_unconfined() {
    let dir = TempDir::new().unwrap();
    let outside = open_outside(&dir);
    let off = sandbox(
        SandboxMode::Off,
        false,
        SandboxSettings {
            probe: || Err("never asked".to_owned()),
            allow_sandbox_off: true,
            ..SandboxSettings::default()
        },
    );
    let result = sh(
        &off,
        &dir.path().join("ws"),
        &format!("id -u; echo x > {}/file && echo wrote", outside.display()),
    )
    .await;
    assert_eq!(
        (result.code, result.stdout),
        (Some(0), format!("{}\nwrote\n", uid_gid().0))
    );
}

mod network;
mod processes;
