//! A worker that is not root: each tool process gets a user namespace of its own (mapping only
//! the worker's uid) with its network namespace, and reaches the allowed host only through
//! the proxy; files the worker's groups may read stay hidden from its tools. Run as root (CI),
//! each test runs itself again as uid 65534 (`setpriv`, with a supplementary group), from a
//! copy of this binary that user can execute, to be that worker.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::sync::Arc;

use baton_sandbox::net::{NetGuard, NetPolicy};
use baton_sandbox::{Network, Sandbox, SandboxMode, SandboxSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Set in the re-run: this process is the non-root worker.
const CHILD: &str = "BATON_ROOTLESS_TEST_CHILD";
/// In the re-run: the files the worker's groups may read, which the sandbox must hide.
const KEY: &str = "BATON_ROOTLESS_TEST_KEY";
const GROUP_KEY: &str = "BATON_ROOTLESS_TEST_GROUP_KEY";
/// A supplementary group of the re-run worker.
const EXTRA_GROUP: u32 = 4242;

#[tokio::test]
async fn a_worker_that_is_not_root_confines_the_network_in_a_user_namespace() {
    if std::env::var_os(CHILD).is_some() || !nix::unistd::geteuid().is_root() {
        as_the_worker().await;
        return;
    }
    rerun_as_nobody(
        "a_worker_that_is_not_root_confines_the_network_in_a_user_namespace",
        |_| Vec::new(),
    )
    .await;
}

/// A worker that is not root keeps its uid and groups for its tools (a user namespace can
/// only deny `setgroups`, not drop them): a credential readable by the worker's primary or
/// supplementary group (`0440`, like the mTLS key of the Kubernetes overlay) must be
/// unreadable to them through `hidden`.
#[tokio::test]
async fn hidden_files_of_the_workers_groups_are_unreadable_to_its_tools() {
    if std::env::var_os(CHILD).is_some() {
        hidden_as_the_worker().await;
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to make the files and become another worker user");
        return;
    }
    rerun_as_nobody(
        "hidden_files_of_the_workers_groups_are_unreadable_to_its_tools",
        |dir| {
            let key = dir.join("tls.key");
            let group_key = dir.join("token");
            for (path, gid) in [(&key, 65534), (&group_key, EXTRA_GROUP)] {
                std::fs::write(path, "worker-secret-31f4\n").unwrap();
                std::os::unix::fs::chown(path, Some(0), Some(gid)).unwrap();
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o440)).unwrap();
            }
            vec![(KEY, key), (GROUP_KEY, group_key)]
        },
    )
    .await;
}

/// Runs test `test` of this binary again as uid/gid 65534 with supplementary group
/// [`EXTRA_GROUP`], from a copy of this binary that user can execute, in a directory it may
/// write; `files` makes what the re-run needs there and names it by environment variable.
async fn rerun_as_nobody(
    test: &str,
    files: impl FnOnce(&std::path::Path) -> Vec<(&'static str, std::path::PathBuf)>,
) {
    let dir = tempfile::Builder::new()
        .prefix("baton-rootless-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let exe = dir.path().join("rootless-test");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let env = files(dir.path());
    let out = tokio::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            &format!("--groups={EXTRA_GROUP}"),
        ])
        .arg(&exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .envs(env)
        .env("HOME", dir.path())
        .env("TMPDIR", dir.path())
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "{stdout}\n{stderr}");
}

/// The hidden-files check, as a worker that is not root.
async fn hidden_as_the_worker() {
    let key = std::path::PathBuf::from(std::env::var_os(KEY).unwrap());
    let group_key = std::path::PathBuf::from(std::env::var_os(GROUP_KEY).unwrap());
    // The worker itself can read both (by its primary and its supplementary group).
    assert!(
        nix::unistd::getgroups()
            .unwrap()
            .contains(&nix::unistd::Gid::from_raw(EXTRA_GROUP))
    );
    for path in [&key, &group_key] {
        assert_eq!(
            std::fs::read_to_string(path).unwrap(),
            "worker-secret-31f4\n"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let sandbox = Sandbox {
        mode: SandboxMode::WorkspaceWrite,
        network: Network::Off,
        settings: Arc::new(SandboxSettings {
            hidden: vec![key.clone(), group_key.clone()],
            ..SandboxSettings::default()
        }),
    };
    let script = format!(
        "id -u; cat {} || echo key-denied; cat {} || echo group-key-denied",
        key.display(),
        group_key.display()
    );
    let mut prepared = sandbox.prepare(&workspace, ".baton").unwrap().unwrap();
    let mut sh = tokio::process::Command::new("sh");
    sh.arg("-c")
        .arg(&script)
        .current_dir(&workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    prepared.apply(&mut sh);
    let child = sh.spawn().unwrap();
    prepared.spawned().unwrap();
    let out = child.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let context = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    println!("the tool printed:\n{context}");
    assert!(!context.contains("worker-secret-31f4"), "{context}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["65534", "key-denied", "group-key-denied"],
        "{context}"
    );
}

/// The worker's part, as a user that is not root.
async fn as_the_worker() {
    let site = site().await;
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let guard = Arc::new(NetGuard::default());
    let hosts = [format!("127.0.0.1:{}", site.port())];
    let sandbox = Sandbox {
        mode: SandboxMode::WorkspaceWrite,
        network: Network::Proxied(Arc::new(NetPolicy::new(&hosts, guard.clone()).unwrap())),
        settings: Arc::new(SandboxSettings {
            guard,
            ..SandboxSettings::default()
        }),
    };
    let port = site.port();
    let script = format!(
        "id -u; readlink /proc/self/ns/user /proc/self/ns/net; \
         curl -sS --max-time 10 http://127.0.0.1:{port}/; \
         bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null && echo direct-connected \
         || echo direct-failed; \
         grep CapEff /proc/self/status; \
         readlink /proc/self/ns/pid; echo \"pid=$$\"; \
         cat /proc/1/environ > /dev/null 2>&1 && echo init-environ-read || echo init-environ-denied"
    );
    let mut prepared = sandbox.prepare(&workspace, ".baton").unwrap().unwrap();
    let mut sh = tokio::process::Command::new("sh");
    sh.arg("-c")
        .arg(&script)
        .current_dir(&workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    prepared.apply(&mut sh);
    let child = sh.spawn().unwrap();
    prepared.spawned().unwrap();
    let out = child.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let context = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    println!("the tool printed:\n{context}");
    let uid = nix::unistd::getuid().as_raw().to_string();
    assert_eq!(lines.first(), Some(&uid.as_str()), "{context}");
    let own = |ns: &str| std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
    assert_ne!(lines[1], own("user").to_string_lossy(), "{context}");
    assert_ne!(lines[2], own("net").to_string_lossy(), "{context}");
    assert_eq!(lines[3], "hello from the allowed site", "{context}");
    assert_eq!(lines[4], "direct-failed", "{context}");
    assert_eq!(lines[5], "CapEff:\t0000000000000000", "{context}");
    // A PID namespace of its own (made in the user namespace), where the shell is pid 2 and
    // the init's files (the worker's environment) are closed to it.
    assert_ne!(lines[6], own("pid").to_string_lossy(), "{context}");
    assert_eq!(lines[7..], ["pid=2", "init-environ-denied"], "{context}");
    let report = prepared.network_report().unwrap();
    assert_eq!((report.allowed, report.refused), (1, 0), "{report:?}");
}

/// A loopback HTTP server answering every request with one page.
async fn site() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer).await;
                let body = "hello from the allowed site\n";
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    addr
}
