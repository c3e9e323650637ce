//! The proxy end to end: real loopback sites, the real `curl` binary and raw sockets.

use std::future::Future;
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

/// `fut`, failing the test if it hangs.
async fn soon<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG, fut).await.expect("hung")
}

fn start(hosts: &[String]) -> ProxyHandle {
    start_guarded(hosts, NetGuard::default())
}

fn start_guarded(hosts: &[String], guard: NetGuard) -> ProxyHandle {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let policy = NetPolicy::new(hosts, Arc::new(guard)).unwrap();
    Proxy::start(listener, Arc::new(policy), Arc::new(SystemResolver)).unwrap()
}

fn counts(allowed: u64, refused: u64) -> ProxyCounts {
    ProxyCounts { allowed, refused }
}

/// Asserts that `text` starts with `start` and contains each of `parts`.
#[track_caller]
fn assert_has(text: &str, start: &str, parts: &[&str]) {
    assert!(
        text.starts_with(start),
        "does not start with {start:?}:\n{text}"
    );
    for part in parts {
        assert!(text.contains(part), "{part:?} missing in:\n{text}");
    }
}

/// Sends `GET http://{addr}{path}` on `client` and reads the answer: (head, body).
async fn get(client: &mut TcpStream, addr: SocketAddr, path: &str) -> (String, String) {
    let request = format!("GET http://{addr}{path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    client.write_all(request.as_bytes()).await.unwrap();
    soon(read_response(client)).await
}

/// What a command printed and how it ended.
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl From<std::process::Output> for Ran {
    fn from(output: std::process::Output) -> Ran {
        Ran {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

/// `curl -sS -i <args>` (headers in the output, no proxy variables inherited).
async fn curl(args: &[&str]) -> Ran {
    let output = tokio::process::Command::new("curl")
        .args(["-sS", "-i", "--max-time", "60"])
        .args(args)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .await
        .expect("running curl");
    output.into()
}

/// `curl` through `proxy`.
async fn curl_via(proxy: &ProxyHandle, args: &[&str]) -> Ran {
    let proxy = format!("http://{}", proxy.local_addr());
    curl(&[&["-x", proxy.as_str()], args].concat()).await
}

#[tokio::test]
async fn an_allowed_page_comes_back_and_a_refused_port_is_never_contacted() {
    let site = Site::start().await;
    let other = Site::start().await;
    let port = site.addr.port();
    let proxy = start(&[format!("127.0.0.1:{port}"), format!("localhost:{port}")]);

    let got = curl_via(&proxy, &[&format!("http://127.0.0.1:{port}/page?q=1")]).await;
    assert_eq!(got.code, 0, "{}", got.stderr);
    assert_has(
        &got.stdout,
        "HTTP/1.1 200 OK\r\n",
        &["\r\n\r\nhello from /page?q=1"],
    );
    // The site's hop-by-hop header is not passed on.
    assert!(
        !got.stdout
            .to_ascii_lowercase()
            .contains("keep-alive: timeout")
    );
    // By name, through the system resolver (/etc/hosts): the exact rule names loopback.
    let got = curl_via(&proxy, &[&format!("http://localhost:{port}/by-name")]).await;
    assert_has(&got.stdout, "HTTP/1.1 200 OK\r\n", &["hello from /by-name"]);
    let heads = site.heads();
    assert_eq!(heads.len(), 2);
    assert_has(
        &heads[0],
        "GET /page?q=1 HTTP/1.1\r\n",
        &[&format!("\r\nhost: 127.0.0.1:{port}\r\n")],
    );
    assert_has(
        &heads[1],
        "GET /by-name ",
        &[&format!("\r\nhost: localhost:{port}\r\n")],
    );
    for head in &heads {
        assert!(
            !head.to_ascii_lowercase().contains("proxy-connection"),
            "{head}"
        );
    }

    let other_port = other.addr.port();
    let got = curl_via(&proxy, &[&format!("http://127.0.0.1:{other_port}/secret")]).await;
    assert_eq!(got.code, 0, "{}", got.stderr);
    let body = format!(
        "\r\n\r\nbaton proxy refused 127.0.0.1:{other_port}: 127.0.0.1:{other_port} is not on \
         this run's allow list (--allow-host); submit with --allow-host HOST[:PORT] to allow it\n"
    );
    let headers = [
        "\r\nx-baton-refused: not_allowed\r\n",
        "\r\ncontent-type: text/plain",
    ];
    assert_has(&got.stdout, "HTTP/1.1 403 Forbidden\r\n", &headers);
    assert!(got.stdout.ends_with(&body), "{}", got.stdout);
    assert_eq!(other.connections(), 0);

    assert_eq!(proxy.counts(), counts(2, 1));
    let refusals = proxy.refusals();
    assert_eq!(refusals.len(), 1);
    let refusal = &refusals[0];
    assert_eq!(
        (refusal.host.as_str(), refusal.port, refusal.kind),
        ("127.0.0.1", other_port, RefusalKind::NotAllowed)
    );
}

#[tokio::test]
async fn any_public_mode_refuses_loopback_and_metadata() {
    let site = Site::start().await;
    let proxy = start(&[]);
    let got = curl_via(&proxy, &[&format!("http://{}/", site.addr)]).await;
    let parts = [
        "x-baton-refused: private",
        "127.0.0.1 is loopback (this host)",
    ];
    assert_has(&got.stdout, "HTTP/1.1 403 Forbidden\r\n", &parts);
    let got = curl_via(&proxy, &["http://169.254.169.254/latest/meta-data/"]).await;
    let parts = ["169.254.169.254 is link-local (where cloud metadata services live)"];
    assert_has(&got.stdout, "HTTP/1.1 403 Forbidden\r\n", &parts);
    // https: curl sees the CONNECT refused.
    let got = curl_via(&proxy, &["-k", &format!("https://{}/", site.addr)]).await;
    assert_eq!(got.code, 56, "{} {}", got.stdout, got.stderr);
    assert_has(
        &got.stderr,
        "curl: (56) ",
        &["CONNECT tunnel failed, response 403"],
    );
    assert_eq!(site.connections(), 0);
    assert_eq!(proxy.counts(), counts(0, 3));
}

#[tokio::test]
async fn https_goes_through_a_connect_tunnel() {
    let site = Site::start_tls().await;
    let proxy = start(&[format!("127.0.0.1:{}", site.addr.port())]);
    let got = curl_via(&proxy, &["-k", &format!("https://{}/over-tls", site.addr)]).await;
    assert_eq!(got.code, 0, "{}", got.stderr);
    assert_has(
        &got.stdout,
        "HTTP/1.1 200 OK\r\n",
        &["\r\n\r\nhello from /over-tls"],
    );
    assert_eq!(site.heads().len(), 1);
    assert_eq!(proxy.counts(), counts(1, 0));
}

#[tokio::test]
async fn each_request_of_a_keep_alive_connection_is_decided_on_its_own() {
    let site = Site::start().await;
    let other = Site::start().await;
    let proxy = start(&[format!("127.0.0.1:{}", site.addr.port())]);
    let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
    let (head, body) = get(&mut client, site.addr, "/one").await;
    assert_has(&head, "HTTP/1.1 200 OK\r\n", &[]);
    assert_eq!(body, "hello from /one");
    let (head, body) = get(&mut client, other.addr, "/two").await;
    assert_has(&head, "HTTP/1.1 403 Forbidden\r\n", &[]);
    assert_has(&body, &format!("baton proxy refused {}: ", other.addr), &[]);
    let (_, body) = get(&mut client, site.addr, "/three").await;
    assert_eq!(body, "hello from /three");
    assert_eq!(other.connections(), 0);
    assert_eq!(proxy.counts(), counts(2, 1));
}

#[tokio::test]
async fn dropping_the_handle_closes_an_open_tunnel() {
    let (addr, mut far_side_eof, _echo) = echo().await;
    let proxy = start(&[format!("127.0.0.1:{}", addr.port())]);
    let listening = proxy.local_addr();
    let mut client = TcpStream::connect(listening).await.unwrap();
    let connect = format!("CONNECT {addr} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    client.write_all(connect.as_bytes()).await.unwrap();
    let (head, _) = soon(read_response(&mut client)).await;
    assert_has(&head, "HTTP/1.1 200 ", &[]);
    client.write_all(b"ping").await.unwrap();
    let mut echoed = [0u8; 4];
    soon(client.read_exact(&mut echoed)).await.unwrap();
    assert_eq!(&echoed, b"ping");

    drop(proxy);
    soon(far_side_eof.recv()).await;
    let mut rest = Vec::new();
    let read = soon(client.read_to_end(&mut rest)).await;
    assert!(read.is_ok_and(|n| n == 0), "the client side stayed open");
    // And the listener is closed: new clients are refused.
    soon(async {
        while TcpStream::connect(listening).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn requests_the_proxy_does_not_serve_are_bad_requests() {
    let site = Site::start().await;
    let proxy = start(&[format!("127.0.0.1:{}", site.addr.port())]);
    let addr = proxy.local_addr();
    // Straight at the proxy (origin form).
    let got = curl(&["--noproxy", "*", &format!("http://{addr}/")]).await;
    assert_has(
        &got.stdout,
        "HTTP/1.1 400 Bad Request\r\n",
        &["x-baton-refused: bad_request"],
    );
    let body = "baton proxy refused the request: this is baton's proxy for tool processes; send \
                requests through it with http_proxy/https_proxy\n";
    assert!(got.stdout.ends_with(body), "{}", got.stdout);
    let mut client = TcpStream::connect(addr).await.unwrap();
    let https = format!("GET https://{0}/ HTTP/1.1\r\nHost: {0}\r\n\r\n", site.addr);
    client.write_all(https.as_bytes()).await.unwrap();
    let (head, body) = soon(read_response(&mut client)).await;
    assert_has(&head, "HTTP/1.1 400 Bad Request\r\n", &[]);
    assert_has(
        &body,
        "baton proxy refused ",
        &["use CONNECT (https_proxy) for https"],
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
    let _ = soon(client.read_to_end(&mut answer)).await;
    assert_has(&String::from_utf8_lossy(&answer), "HTTP/1.1 431 ", &[]);
    assert_eq!(site.connections(), 0);
    assert_eq!(proxy.counts(), counts(0, 2));
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
        ..NetGuard::default()
    };
    let proxy = start_guarded(&["127.0.0.1".to_owned()], guard);
    let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
    let (head, body) = get(&mut client, site.addr, "/").await;
    assert_has(
        &head,
        "HTTP/1.1 403 Forbidden\r\n",
        &["x-baton-refused: protected\r\n"],
    );
    let reason = format!(
        "127.0.0.1 is the worker's Temporal frontend (port {}): tools may never reach it\n",
        site.addr.port()
    );
    assert!(body.ends_with(&reason), "{body}");
    assert_eq!(site.connections(), 0);
    let (head, body) = get(&mut client, dead, "/").await;
    assert_has(
        &head,
        "HTTP/1.1 502 Bad Gateway\r\n",
        &["x-baton-refused: unreachable\r\n"],
    );
    assert_has(
        &body,
        "baton proxy refused ",
        &["could not connect (127.0.0.1:"],
    );
    let kinds: Vec<RefusalKind> = proxy.refusals().iter().map(|r| r.kind).collect();
    assert_eq!(kinds, [RefusalKind::Protected, RefusalKind::Unreachable]);
}

#[tokio::test]
async fn the_handle_keeps_the_first_32_refusals_and_counts_all() {
    let proxy = start(&["example.invalid".to_owned()]);
    let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
    for port in 1..=40u16 {
        let (head, _) = get(&mut client, SocketAddr::from(([127, 0, 0, 1], port)), "/").await;
        assert_has(&head, "HTTP/1.1 403 ", &[]);
    }
    let ports: Vec<u16> = proxy.refusals().iter().map(|r| r.port).collect();
    assert_eq!(ports, (1..=32).collect::<Vec<u16>>());
    assert_eq!(proxy.counts(), counts(0, 40));
}

/// A wheel of the package `probe-pkg` 0.1 (written by python's `zipfile`).
fn probe_wheel(dir: &std::path::Path) -> Vec<u8> {
    let path = dir.join("probe_pkg-0.1-py3-none-any.whl");
    let metadata = r"Metadata-Version: 2.1\nName: probe-pkg\nVersion: 0.1\n";
    let wheel =
        r"Wheel-Version: 1.0\nGenerator: baton-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n";
    let script = [
        "import sys, zipfile".to_owned(),
        "with zipfile.ZipFile(sys.argv[1], 'w') as z:".to_owned(),
        "    z.writestr('probe_pkg/__init__.py', '')".to_owned(),
        format!("    z.writestr('probe_pkg-0.1.dist-info/METADATA', '{metadata}')"),
        format!("    z.writestr('probe_pkg-0.1.dist-info/WHEEL', '{wheel}')"),
        "    z.writestr('probe_pkg-0.1.dist-info/RECORD', '')".to_owned(),
    ]
    .join("\n");
    let status = std::process::Command::new("python3")
        .args(["-c", &script])
        .arg(&path)
        .status()
        .expect("running python3");
    assert!(status.success(), "writing the wheel failed");
    std::fs::read(&path).unwrap()
}

/// `pip download probe-pkg` from `index` with the proxy variables a sandboxed tool gets.
async fn pip_download(proxy: &ProxyHandle, index: SocketAddr, dest: &std::path::Path) -> Ran {
    let proxy = format!("http://{}", proxy.local_addr());
    let output = tokio::process::Command::new("pip")
        .args([
            "download",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--no-deps",
        ])
        .args(["--retries", "0", "--dest"])
        .arg(dest)
        .args([
            "--index-url",
            &format!("http://{index}/simple/"),
            "probe-pkg",
        ])
        .envs([("http_proxy", &proxy), ("HTTP_PROXY", &proxy)])
        .envs([("https_proxy", &proxy), ("HTTPS_PROXY", &proxy)])
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .await
        .expect("running pip");
    output.into()
}

#[tokio::test]
async fn pip_downloads_from_an_allowed_index_and_not_from_another() {
    let dir = tempfile::tempdir().unwrap();
    let wheel_name = "probe_pkg-0.1-py3-none-any.whl";
    let page =
        format!("<html><body><a href=\"/files/{wheel_name}\">{wheel_name}</a></body></html>");
    let files = super::servers::Files::from([
        (
            "/simple/probe-pkg/".to_owned(),
            ("text/html", page.into_bytes()),
        ),
        (
            format!("/files/{wheel_name}"),
            ("application/octet-stream", probe_wheel(dir.path())),
        ),
    ]);
    let index = Site::with_files(files.clone()).await;
    let other = Site::with_files(files).await;
    let proxy = start(&[format!("127.0.0.1:{}", index.addr.port())]);

    let dest = dir.path().join("allowed");
    let got = pip_download(&proxy, index.addr, &dest).await;
    assert_eq!(got.code, 0, "{}\n{}", got.stdout, got.stderr);
    assert!(dest.join(wheel_name).is_file(), "{}", got.stdout);
    let paths: Vec<String> = index
        .heads()
        .iter()
        .map(|head| head.split(' ').take(2).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        paths,
        [
            "GET /simple/probe-pkg/",
            &format!("GET /files/{wheel_name}")
        ]
    );

    let dest = dir.path().join("refused");
    let got = pip_download(&proxy, other.addr, &dest).await;
    assert_eq!(got.code, 1, "{}\n{}", got.stdout, got.stderr);
    assert!(!dest.join(wheel_name).exists());
    assert_eq!(other.connections(), 0);
    let refusals = proxy.refusals();
    assert!(!refusals.is_empty());
    assert!(
        refusals
            .iter()
            .all(|r| r.kind == RefusalKind::NotAllowed && r.port == other.addr.port()),
        "{refusals:?}"
    );
    assert_eq!(proxy.counts().allowed, 2);
}

#[tokio::test]
async fn hop_by_hop_headers_and_proxy_credentials_are_not_passed_on() {
    let site = Site::start().await;
    let proxy = start(&[format!("127.0.0.1:{}", site.addr.port())]);
    let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
    let request = format!(
        "POST http://{0}/form HTTP/1.1\r\nHost: elsewhere.example\r\nProxy-Authorization: Basic \
         c2VjcmV0\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n\
         TE: trailers\r\nX-Kept: 2\r\nContent-Length: 5\r\n\r\nhello",
        site.addr
    );
    client.write_all(request.as_bytes()).await.unwrap();
    let (head, body) = soon(read_response(&mut client)).await;
    assert_has(&head, "HTTP/1.1 200 OK\r\n", &[]);
    assert_eq!(body, "hello from /form");
    let heads = site.heads();
    let sent = heads[0].to_ascii_lowercase();
    // Host is the URI's authority (RFC 9112 3.2.2), the body's length is kept.
    let kept = [
        format!("\r\nhost: {}\r\n", site.addr),
        "\r\nx-kept: 2\r\n".to_owned(),
    ];
    assert_has(
        &sent,
        "post /form http/1.1\r\n",
        &[&kept[0], &kept[1], "content-length: 5"],
    );
    for dropped in [
        "proxy-authorization",
        "proxy-connection",
        "x-hop",
        "\r\nte:",
        "c2vjcmv0",
        "elsewhere",
    ] {
        assert!(!sent.contains(dropped), "{dropped} was passed on:\n{sent}");
    }
}
