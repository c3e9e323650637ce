//! A worker that is not root: each tool process gets a user namespace of its own (mapping only
//! the worker's uid) with its network namespace, and reaches the allowed host only through
//! the proxy. Run as root (CI), the test runs itself again as uid 65534 (`setpriv`), from a
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
const TEST: &str = "a_worker_that_is_not_root_confines_the_network_in_a_user_namespace";

#[tokio::test]
async fn a_worker_that_is_not_root_confines_the_network_in_a_user_namespace() {
    if std::env::var_os(CHILD).is_some() || !nix::unistd::geteuid().is_root() {
        as_the_worker().await;
        return;
    }
    // Root: run this test again as nobody, from a directory nobody may enter.
    let dir = tempfile::Builder::new()
        .prefix("baton-rootless-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let exe = dir.path().join("rootless-test");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = tokio::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
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
