//! An axum [`Router`] served on 127.0.0.1 from a thread of its own (with its own
//! current-thread tokio runtime), so that a server keeps answering whatever runtime — or
//! none — the test uses, and stops (aborting in-flight connections) when dropped. Shared by
//! the mock model servers, the git HTTP server and the GitHub stand-in; plus the header map
//! their captured requests keep, and [`loopback_request`], the one plain HTTP/1.1 request the
//! harnesses of real servers (moto, llama.cpp) probe them with.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::http::HeaderMap;
use axum::serve::Listener;

/// A running server; stopped on drop.
pub(crate) struct HttpThread {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl HttpThread {
    /// Binds 127.0.0.1 on a free port and serves `app` there; `name` names the thread and
    /// the error messages.
    pub(crate) fn start(name: &str, app: Router) -> anyhow::Result<HttpThread> {
        Self::start_on(name, app, |listener| listener)
    }

    /// Like [`HttpThread::start`], serving on the listener `wrap` makes of the bound one (one
    /// that counts connections, or does TLS); `wrap` runs on the server's thread.
    pub(crate) fn start_on<L, F>(name: &str, app: Router, wrap: F) -> anyhow::Result<HttpThread>
    where
        L: Listener,
        L::Addr: Debug,
        F: FnOnce(tokio::net::TcpListener) -> L + Send + 'static,
    {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .with_context(|| format!("binding {name} server"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .with_context(|| format!("building {name} runtime"))?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let label = name.to_owned();
        let thread = thread::Builder::new()
            .name(format!("{}-{}", name.replace(' ', "-"), addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            eprintln!("{label}: cannot register listener: {e}");
                            return;
                        }
                    };
                    tokio::select! {
                        res = axum::serve(wrap(listener), app) => {
                            if let Err(e) = res {
                                eprintln!("{label} server error: {e}");
                            }
                        }
                        _ = rx => {}
                    }
                });
                // Dropping the runtime here aborts in-flight connections (and the tasks
                // feeding streamed bodies, and the child processes they own).
            })
            .with_context(|| format!("spawning {name} thread"))?;
        Ok(HttpThread {
            addr,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The socket address the server listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the server and waits for its thread. Idempotent.
    pub(crate) fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HttpThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Request headers with lowercase names, repeated headers joined with `", "`.
pub(crate) fn header_map(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        map.entry(name.as_str().to_ascii_lowercase())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    map
}

/// One HTTP/1.1 request to `127.0.0.1:port` (`extra_headers` each ending in CRLF), read to
/// the end of the connection: the status and the body.
pub(crate) fn loopback_request(
    port: u16,
    method: &str,
    path: &str,
    body: &[u8],
    extra_headers: &str,
) -> anyhow::Result<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\n\
         Connection: close\r\n{extra_headers}\r\n",
        body.len()
    )?;
    stream.write_all(body)?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .with_context(|| format!("reading the answer to {method} {path}"))?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("no HTTP status line in the answer to {method} {path}: {text}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}
