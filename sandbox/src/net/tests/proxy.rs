//! The proxy end to end: real loopback sites, the real `curl` binary and raw sockets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::servers::{Site, echo, read_response};
use crate::net::{
    NetGuard, NetPolicy, Proxy, ProxyCounts, ProxyHandle, RefusalKind, SystemResolver,
};

/// A guard for waits that should end at once: a hang fails the test instead of blocking it.
const HANG: Duration = Duration::from_secs(60);

fn start(hosts: &[String]) -> ProxyHandle {
    start_guarded(hosts, NetGuard::default())
}

fn start_guarded(hosts: &[String], guard: NetGuard) -> ProxyHandle {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let policy = NetPolicy::new(hosts, Arc::new(guard)).unwrap();
    Proxy::start(listener, Arc::new(policy), Arc::new(SystemResolver)).unwrap()
}

/// Sends `GET http://{addr}{path}` on `client` and reads the answer.
async fn get(client: &mut TcpStream, addr: SocketAddr, path: &str) -> (String, String) {
    let request = format!("GET http://{addr}{path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    client.write_all(request.as_bytes()).await.unwrap();
    tokio::time::timeout(HANG, read_response(client))
        .await
        .unwrap()
}

struct Curl {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `curl -sS -i -x http://<proxy> <args>`.
async fn curl(proxy: &ProxyHandle, args: &[&str]) -> Curl {
    let output = tokio::process::Command::new("curl")
        .args(["-sS", "-i", "--max-time", "60", "-x"])
        .arg(format!("http://{}", proxy.local_addr()))
        .args(args)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .await
        .expect("running curl");
    Curl {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[tokio::test]
async fn an_allowed_page_comes_back_and_a_refused_port_is_never_contacted() {
    let site = Site::start().await;
    let other = Site::start().await;
    let port = site.addr.port();
    let proxy = start(&[format!("127.0.0.1:{port}"), format!("localhost:{port}")]);

    let got = curl(&proxy, &[&format!("http://127.0.0.1:{port}/page?q=1")]).await;
    assert_eq!(got.code, 0, "{}", got.stderr);
    assert!(
        got.stdout.starts_with("HTTP/1.1 200 OK\r\n"),
        "{}",
        got.stdout
    );
    assert!(
        got.stdout.ends_with("\r\n\r\nhello from /page?q=1"),
        "{}",
        got.stdout
    );
    assert!(
        !got.stdout
            .to_ascii_lowercase()
            .contains("keep-alive: timeout"),
        "{}",
        got.stdout
    );
    // By name, through the system resolver (/etc/hosts): the exact rule names loopback.
    let got = curl(&proxy, &[&format!("http://localhost:{port}/by-name")]).await;
    assert!(
        got.stdout.ends_with("hello from /by-name"),
        "{} {}",
        got.stdout,
        got.stderr
    );
    let heads = site.heads();
    assert_eq!(heads.len(), 2);
    assert!(
        heads[0].starts_with("GET /page?q=1 HTTP/1.1\r\n"),
        "{}",
        heads[0]
    );
    assert!(
        heads[0].contains(&format!("\r\nhost: 127.0.0.1:{port}\r\n")),
        "{}",
        heads[0]
    );
    assert!(
        heads[1].contains(&format!("\r\nhost: localhost:{port}\r\n")),
        "{}",
        heads[1]
    );
    for head in &heads {
        assert!(
            !head.to_ascii_lowercase().contains("proxy-connection"),
            "{head}"
        );
    }

    let refused_url = format!("http://127.0.0.1:{}/secret", other.addr.port());
    let got = curl(&proxy, &[&refused_url]).await;
    assert_eq!(got.code, 0, "{}", got.stderr);
    assert!(
        got.stdout.starts_with("HTTP/1.1 403 Forbidden\r\n"),
        "{}",
        got.stdout
    );
    assert!(
        got.stdout.contains("\r\nx-baton-refused: not_allowed\r\n"),
        "{}",
        got.stdout
    );
    assert!(
        got.stdout.contains("\r\ncontent-type: text/plain"),
        "{}",
        got.stdout
    );
    let body = format!(
        "baton proxy refused 127.0.0.1:{0}: 127.0.0.1:{0} is not on this run's allow list \
         (--allow-host); submit with --allow-host HOST[:PORT] to allow it\n",
        other.addr.port()
    );
    assert!(got.stdout.ends_with(&body), "{}", got.stdout);
    assert_eq!(other.connections(), 0);

    assert_eq!(
        proxy.counts(),
        ProxyCounts {
            allowed: 2,
            refused: 1
        }
    );
    let refusals = proxy.refusals();
    assert_eq!(refusals.len(), 1);
    assert_eq!(
        (
            refusals[0].host.as_str(),
            refusals[0].port,
            refusals[0].kind
        ),
        ("127.0.0.1", other.addr.port(), RefusalKind::NotAllowed)
    );
}

#[tokio::test]
async fn any_public_mode_refuses_loopback_and_metadata() {
    let site = Site::start().await;
    let proxy = start(&[]);
    let got = curl(
        &proxy,
        &[&format!("http://127.0.0.1:{}/", site.addr.port())],
    )
    .await;
    assert!(
        got.stdout.starts_with("HTTP/1.1 403 Forbidden\r\n"),
        "{}",
        got.stdout
    );
    assert!(
        got.stdout.contains("x-baton-refused: private"),
        "{}",
        got.stdout
    );
    assert!(
        got.stdout.contains("127.0.0.1 is loopback (this host)"),
        "{}",
        got.stdout
    );
    let got = curl(&proxy, &["http://169.254.169.254/latest/meta-data/"]).await;
    assert!(
        got.stdout
            .contains("169.254.169.254 is link-local (where cloud metadata services live)"),
        "{}",
        got.stdout
    );
    // https: curl sees the CONNECT refused.
    let got = curl(
        &proxy,
        &["-k", &format!("https://127.0.0.1:{}/", site.addr.port())],
    )
    .await;
    assert_eq!(got.code, 56, "{} {}", got.stdout, got.stderr);
    assert!(
        got.stderr.contains("CONNECT tunnel failed, response 403"),
        "{}",
        got.stderr
    );
    assert_eq!(site.connections(), 0);
    assert_eq!(
        proxy.counts(),
        ProxyCounts {
            allowed: 0,
            refused: 3
        }
    );
}

#[tokio::test]
async fn https_goes_through_a_connect_tunnel() {
    let site = Site::start_tls().await;
    let port = site.addr.port();
    let proxy = start(&[format!("127.0.0.1:{port}")]);
    let got = curl(
        &proxy,
        &["-k", &format!("https://127.0.0.1:{port}/over-tls")],
    )
    .await;
    assert_eq!(got.code, 0, "{}", got.stderr);
    assert!(
        got.stdout.starts_with("HTTP/1.1 200 OK\r\n"),
        "{}",
        got.stdout
    );
    assert!(
        got.stdout.ends_with("\r\n\r\nhello from /over-tls"),
        "{}",
        got.stdout
    );
    assert_eq!(site.heads().len(), 1);
    assert_eq!(
        proxy.counts(),
        ProxyCounts {
            allowed: 1,
            refused: 0
        }
    );
}

#[tokio::test]
async fn each_request_of_a_keep_alive_connection_is_decided_on_its_own() {
    let site = Site::start().await;
    let other = Site::start().await;
    let proxy = start(&[format!("127.0.0.1:{}", site.addr.port())]);
    let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
    for (addr, path) in [
        (site.addr, "/one"),
        (other.addr, "/two"),
        (site.addr, "/three"),
    ] {
        let (head, body) = get(&mut client, addr, path).await;
        if addr == site.addr {
            assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
            assert_eq!(body, format!("hello from {path}"));
        } else {
            assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{head}");
            assert!(
                body.starts_with(&format!("baton proxy refused {addr}: ")),
                "{body}"
            );
        }
    }
    assert_eq!(other.connections(), 0);
    assert_eq!(
        proxy.counts(),
        ProxyCounts {
            allowed: 2,
            refused: 1
        }
    );
}

#[tokio::test]
async fn dropping_the_handle_closes_an_open_tunnel() {
    let (addr, mut far_side_eof, _echo) = echo().await;
    let proxy = start(&[format!("127.0.0.1:{}", addr.port())]);
    let listening = proxy.local_addr();
    let mut client = TcpStream::connect(listening).await.unwrap();
    let connect = format!("CONNECT {addr} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    client.write_all(connect.as_bytes()).await.unwrap();
    let (head, _) = tokio::time::timeout(HANG, read_response(&mut client))
        .await
        .unwrap();
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    client.write_all(b"ping").await.unwrap();
    let mut echoed = [0u8; 4];
    tokio::time::timeout(HANG, client.read_exact(&mut echoed))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&echoed, b"ping");

    drop(proxy);
    tokio::time::timeout(HANG, far_side_eof.recv())
        .await
        .unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(HANG, client.read_to_end(&mut rest))
        .await
        .unwrap();
    assert!(read.is_ok_and(|n| n == 0), "the client side stayed open");
    // And the listener is closed: new clients are refused.
    tokio::time::timeout(HANG, async {
        while TcpStream::connect(listening).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn requests_the_proxy_does_not_serve_are_bad_requests() {
    let site = Site::start().await;
    let proxy = start(&[format!("127.0.0.1:{}", site.addr.port())]);
    let addr = proxy.local_addr();
    // Straight at the proxy (origin form).
    let output = tokio::process::Command::new("curl")
        .args(["-sS", "-i", "--noproxy", "*", &format!("http://{addr}/")])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{stdout}"
    );
    assert!(stdout.contains("x-baton-refused: bad_request"), "{stdout}");
    assert!(
        stdout.ends_with(
            "baton proxy refused the request: this is baton's proxy for tool processes; send \
             requests through it with http_proxy/https_proxy\n"
        ),
        "{stdout}"
    );
    let mut client = TcpStream::connect(addr).await.unwrap();
    let https = format!("GET https://{0}/ HTTP/1.1\r\nHost: {0}\r\n\r\n", site.addr);
    client.write_all(https.as_bytes()).await.unwrap();
    let (head, body) = tokio::time::timeout(HANG, read_response(&mut client))
        .await
        .unwrap();
    assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
    assert!(
        body.contains("use CONNECT (https_proxy) for https"),
        "{body}"
    );
    // A head over 64 KiB is refused by the server before any decision.
    let mut client = TcpStream::connect(addr).await.unwrap();
    let big = format!(
        "GET http://{0}/ HTTP/1.1\r\nHost: {0}\r\nX-Big: {1}\r\n\r\n",
        site.addr,
        "a".repeat(70 * 1024)
    );
    let _ = client.write_all(big.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(HANG, client.read_to_end(&mut answer))
        .await
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    assert_eq!(site.connections(), 0);
    assert_eq!(
        proxy.counts(),
        ProxyCounts {
            allowed: 0,
            refused: 2
        }
    );
}

#[tokio::test]
async fn protected_endpoints_and_dead_ports_are_refused_with_their_kind() {
    let site = Site::start().await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let guard = NetGuard {
        protected: vec![(site.addr, "the worker's Temporal frontend".to_owned())],
        private_ranges: Vec::new(),
    };
    let proxy = start_guarded(&["127.0.0.1".to_owned()], guard);
    let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
    let (head, body) = get(&mut client, site.addr, "/").await;
    assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{head}");
    assert!(head.contains("x-baton-refused: protected\r\n"), "{head}");
    assert!(
        body.ends_with(&format!(
            "127.0.0.1 is the worker's Temporal frontend (port {}): tools may never reach it\n",
            site.addr.port()
        )),
        "{body}"
    );
    assert_eq!(site.connections(), 0);
    let (head, body) = get(&mut client, dead, "/").await;
    assert!(head.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{head}");
    assert!(head.contains("x-baton-refused: unreachable\r\n"), "{head}");
    assert!(body.contains("could not connect (127.0.0.1:"), "{body}");
    let kinds: Vec<RefusalKind> = proxy.refusals().iter().map(|r| r.kind).collect();
    assert_eq!(kinds, [RefusalKind::Protected, RefusalKind::Unreachable]);
}

#[tokio::test]
async fn the_handle_keeps_the_first_32_refusals_and_counts_all() {
    let proxy = start(&["example.invalid".to_owned()]);
    let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
    for port in 1..=40u16 {
        let (head, _) = get(&mut client, SocketAddr::from(([127, 0, 0, 1], port)), "/").await;
        assert!(head.starts_with("HTTP/1.1 403 "), "{head}");
    }
    let ports: Vec<u16> = proxy.refusals().iter().map(|r| r.port).collect();
    assert_eq!(ports, (1..=32).collect::<Vec<u16>>());
    assert_eq!(
        proxy.counts(),
        ProxyCounts {
            allowed: 0,
            refused: 40
        }
    );
}
