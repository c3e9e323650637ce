//! Tool processes with the network: their own namespace, the proxy their only way out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use pretty_assertions::assert_eq;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{python, sh};
use crate::net::{NetGuard, NetPolicy};
use crate::{Network, Sandbox, SandboxMode, SandboxSettings};

/// A loopback HTTP server answering every request with `body`, counting connections.
struct Site {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Site {
    async fn start(body: &'static str) -> Site {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    let _ = stream.read(&mut buffer).await;
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                });
            }
        });
        Site {
            addr,
            connections,
            task,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn proxied(hosts: &[String], guard: NetGuard) -> Sandbox {
    let guard = Arc::new(guard);
    Sandbox {
        mode: SandboxMode::WorkspaceWrite,
        network: Network::Proxied(Arc::new(NetPolicy::new(hosts, guard.clone()).unwrap())),
        settings: Arc::new(SandboxSettings {
            guard,
            ..SandboxSettings::default()
        }),
    }
}

#[tokio::test]
async fn only_the_allowed_host_is_reached_and_only_through_the_proxy() {
    let site = Site::start("hello from the allowed site\n").await;
    let other = Site::start("must not be reached\n").await;
    let frontend = Site::start("must not be reached either\n").await;
    // The "Temporal frontend" is protected even when a rule names it.
    let named_frontend = [
        format!("127.0.0.1:{}", site.addr.port()),
        format!("127.0.0.1:{}", frontend.addr.port()),
    ];
    let sandbox = proxied(
        &named_frontend,
        NetGuard {
            protected: vec![(frontend.addr, "the Temporal frontend".to_owned())],
            ..NetGuard::default()
        },
    );
    let dir = TempDir::new().unwrap();
    let workspace = dir.path().join("ws");
    let (site_port, other_port, frontend_port) =
        (site.addr.port(), other.addr.port(), frontend.addr.port());
    let script = format!(
        "echo \"proxy=$http_proxy\"; \
         curl -sS --max-time 10 http://127.0.0.1:{site_port}/; \
         curl -sS --max-time 10 http://127.0.0.1:{other_port}/; \
         curl -sS --max-time 10 http://127.0.0.1:{frontend_port}/; \
         curl -sS --max-time 10 http://169.254.169.254/latest/meta-data/; \
         bash -c 'exec 3<>/dev/tcp/127.0.0.1/{site_port}' && echo direct-connected || echo direct-failed; \
         cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '"
    );
    let out = sh(&sandbox, &workspace, &script).await;
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "proxy=http://127.0.0.1:3128", "{out:?}");
    assert_eq!(lines[1], "hello from the allowed site", "{out:?}");
    assert!(
        lines[2].starts_with(&format!("baton proxy refused 127.0.0.1:{other_port}: ")),
        "{out:?}"
    );
    assert!(
        lines[3].contains("Temporal frontend") && lines[4].contains("169.254.169.254"),
        "{out:?}"
    );
    // No route but the proxy: a raw connection to the allowed port fails, and the namespace
    // has only `lo`.
    assert_eq!(&lines[5..], ["direct-failed", "lo"], "{out:?}");
    assert_eq!(
        (
            site.connections(),
            other.connections(),
            frontend.connections()
        ),
        (1, 0, 0)
    );
    let report = out.network.unwrap();
    assert_eq!((report.allowed, report.refused), (1, 3), "{report:?}");
    let kinds: Vec<(String, &str)> = report
        .refusals
        .iter()
        .map(|r| (r.target(), r.kind.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            (format!("127.0.0.1:{other_port}"), "not_allowed"),
            (format!("127.0.0.1:{frontend_port}"), "protected"),
            ("169.254.169.254:80".to_owned(), "not_allowed"),
        ]
    );
}

#[tokio::test]
async fn any_public_host_mode_never_reaches_loopback_and_the_port_cannot_be_taken() {
    let site = Site::start("loopback\n").await;
    let sandbox = proxied(&[], NetGuard::default());
    let dir = TempDir::new().unwrap();
    let workspace = dir.path().join("ws");
    let port = site.addr.port();
    let mut script = format!(
        "curl -sS --max-time 10 http://localhost:{port}/; \
         curl -sS --max-time 10 http://127.1:{port}/; \
         bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' && echo direct-connected || echo direct-failed"
    );
    if let Some(python) = python() {
        script.push_str(&format!(
            "; {python} -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 3128))' \
             2>&1 | tail -1"
        ));
    }
    let out = sh(&sandbox, &workspace, &script).await;
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0].contains("refused localhost:") && lines[0].contains("loopback"),
        "{out:?}"
    );
    // curl writes 127.1 as 127.0.0.1 itself (the proxy resolves such forms too).
    assert!(lines[1].contains("refused 127.0.0.1:"), "{out:?}");
    assert_eq!(lines[2], "direct-failed", "{out:?}");
    if python().is_some() {
        assert!(lines[3].contains("Address already in use"), "{out:?}");
    }
    assert_eq!(site.connections(), 0);
    let report = out.network.unwrap();
    assert_eq!((report.allowed, report.refused), (0, 2));
    assert!(report.refusals.iter().all(|r| r.kind.as_str() == "private"));
}

#[tokio::test]
async fn a_long_lived_process_reports_its_refusals_call_by_call() {
    let sandbox = proxied(&[], NetGuard::default());
    let dir = TempDir::new().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let fifo = workspace.join("go");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    // Two "calls" of one process, as a sandboxed MCP server serves them.
    let script = "curl -sS --max-time 10 http://127.0.0.1:1/first; read _ < go; \
                  curl -sS --max-time 10 http://10.1.2.3/second";
    let mut prepared = sandbox
        .prepare(&workspace, super::STATE_DIR)
        .unwrap()
        .unwrap();
    let mut sh = tokio::process::Command::new("sh");
    sh.arg("-c")
        .arg(script)
        .current_dir(&workspace)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    prepared.apply(&mut sh);
    let child = sh.spawn().unwrap();
    prepared.spawned().unwrap();
    let mut first = Vec::new();
    for _ in 0..200 {
        first.extend(prepared.take_network_report().unwrap().refusals);
        if !first.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let targets =
        |refusals: &[crate::net::Refusal]| refusals.iter().map(|r| r.target()).collect::<Vec<_>>();
    assert_eq!(targets(&first), ["127.0.0.1:1"]);
    std::fs::write(&fifo, "\n").unwrap();
    let out = child.wait_with_output().await.unwrap();
    let second = prepared.take_network_report().unwrap();
    assert_eq!(
        (targets(&second.refusals), second.refused),
        (vec!["10.1.2.3:80".to_owned()], 1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(prepared.take_network_report().unwrap().refused, 0);
}
