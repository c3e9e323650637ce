//! Targets for the network tests (tools behind baton's proxy): servers on
//! `127.0.0.1:0` that count what reached them, so a test can assert that a refused request
//! never arrived, not only that the tool saw an error.
//!
//! * [`Site`]: plain HTTP, `GET /` answers [`SITE_PAGE`];
//! * [`TlsSite`]: the same over HTTPS with a throwaway CA whose PEM file the sandbox user
//!   (uid 65534) can read, for `curl --cacert`, `GIT_SSL_CAINFO`, `pip --cert`;
//! * [`PackageIndex`]: a PEP 503 simple index serving one real wheel (`index.rs`);
//! * [`TcpCounter`]: a listener that only counts accepted connections (a port a tool must
//!   not reach, not even with a raw `/dev/tcp` connect).
//!
//! Git over HTTP is [`crate::GitHttp`]. Each target serves from a thread of its own
//! (`http_thread.rs`) and stops on drop.

mod index;
#[cfg(test)]
mod tests;

pub use index::{PROBE_PACKAGE, PROBE_WHEEL, PROBE_WHEEL_GREETING, PackageIndex};

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{Next, from_fn_with_state};
use axum::response::Response;
use axum::routing::get;
use axum::serve::{Listener, ListenerExt};
use tempfile::TempDir;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::http_thread::HttpThread;
use crate::tls_proxy::{TestPki, server_config};

/// The body of `GET /` on [`Site`] and [`TlsSite`].
pub const SITE_PAGE: &str = "hello from the baton test site\n";

/// How long a TLS client may take for its handshake before the site drops it (so a client that
/// never speaks cannot hold up the others).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Counts {
    /// Accepted TCP connections (before any TLS handshake).
    connections: AtomicUsize,
    /// HTTP requests, whatever their path or answer.
    requests: AtomicUsize,
}

/// A router served on its own thread, counting connections and requests: what every target
/// is made of.
struct Served {
    server: HttpThread,
    counts: Arc<Counts>,
}

impl Served {
    /// Serves `app` over plain HTTP, or over TLS when `tls` is given.
    fn start(name: &str, app: Router, tls: Option<TlsAcceptor>) -> anyhow::Result<Served> {
        let counts = Arc::new(Counts::default());
        let app = app.layer(from_fn_with_state(Arc::clone(&counts), count_request));
        let tap = Arc::clone(&counts);
        let count = move |_: &mut TcpStream| {
            tap.connections.fetch_add(1, Ordering::SeqCst);
        };
        let server = match tls {
            None => HttpThread::start_on(name, app, move |tcp| tcp.tap_io(count))?,
            Some(acceptor) => HttpThread::start_on(name, app, move |tcp| TlsListener {
                inner: tcp.tap_io(count),
                acceptor,
            })?,
        };
        Ok(Served { server, counts })
    }

    fn port(&self) -> u16 {
        self.server.addr().port()
    }

    fn connections(&self) -> usize {
        self.counts.connections.load(Ordering::SeqCst)
    }

    fn requests(&self) -> usize {
        self.counts.requests.load(Ordering::SeqCst)
    }
}

async fn count_request(State(counts): State<Arc<Counts>>, req: Request, next: Next) -> Response {
    counts.requests.fetch_add(1, Ordering::SeqCst);
    next.run(req).await
}

async fn not_found() -> (StatusCode, &'static str) {
    (
        StatusCode::NOT_FOUND,
        "no such page on the baton test target\n",
    )
}

/// `GET /` -> [`SITE_PAGE`], anything else 404.
fn page() -> Router {
    Router::new()
        .route("/", get(|| async { SITE_PAGE }))
        .fallback(not_found)
}

/// Accepts TCP connections from `inner` and completes the TLS handshake before handing them
/// to axum; a failed handshake is logged and skipped.
struct TlsListener<L> {
    inner: L,
    acceptor: TlsAcceptor,
}

impl<L> Listener for TlsListener<L>
where
    L: Listener,
    L::Io: AsyncRead + AsyncWrite + Unpin,
{
    type Io = TlsStream<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (io, addr) = self.inner.accept().await;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(io)).await {
                Ok(Ok(tls)) => return (tls, addr),
                Ok(Err(e)) => eprintln!("TLS test site: handshake failed: {e}"),
                Err(_) => eprintln!("TLS test site: no handshake within {HANDSHAKE_TIMEOUT:?}"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A plain HTTP site on 127.0.0.1: `GET /` answers [`SITE_PAGE`].
pub struct Site {
    served: Served,
}

impl Site {
    /// Starts the site on a free port.
    pub fn start() -> anyhow::Result<Site> {
        Ok(Site {
            served: Served::start("test site", page(), None)?,
        })
    }

    /// `http://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port())
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.served.port()
    }

    /// HTTP requests that reached it (any path).
    pub fn hits(&self) -> usize {
        self.served.requests()
    }

    /// TCP connections it accepted.
    pub fn connections(&self) -> usize {
        self.served.connections()
    }
}

/// [`Site`] over HTTPS: a certificate for `127.0.0.1` and `localhost` signed by a throwaway
/// CA; [`TlsSite::ca_cert`] is that CA's PEM, readable by every user.
pub struct TlsSite {
    served: Served,
    ca_cert: PathBuf,
    _ca_dir: TempDir,
    _pki: TestPki,
}

impl TlsSite {
    /// Generates the CA and certificate and starts the site on a free port.
    pub fn start() -> anyhow::Result<TlsSite> {
        let pki = TestPki::generate()?;
        let mut config = server_config(&pki.server_cert, &pki.server_key, None)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let ca_dir = world_readable_dir("baton-net-ca-")?;
        let ca_cert = ca_dir.path().join("ca.pem");
        std::fs::copy(&pki.ca_cert, &ca_cert)
            .with_context(|| format!("copying the CA to {}", ca_cert.display()))?;
        set_mode(&ca_cert, 0o644)?;
        Ok(TlsSite {
            served: Served::start("tls test site", page(), Some(acceptor))?,
            ca_cert,
            _ca_dir: ca_dir,
            _pki: pki,
        })
    }

    /// `https://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}/", self.port())
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.served.port()
    }

    /// The CA certificate (PEM) to trust: mode 0644 in a 0755 directory under `/tmp`, so the
    /// sandbox user can read it wherever the checkout is.
    pub fn ca_cert(&self) -> &Path {
        &self.ca_cert
    }

    /// HTTP requests that reached it over TLS (any path).
    pub fn hits(&self) -> usize {
        self.served.requests()
    }

    /// TCP connections it accepted, with or without a completed handshake.
    pub fn connections(&self) -> usize {
        self.served.connections()
    }
}

/// A listener on 127.0.0.1 that counts the TCP connections it accepts: a stand-in for a port
/// no tool may reach (it speaks HTTP, answering 404, to whoever does reach it).
pub struct TcpCounter {
    served: Served,
}

impl TcpCounter {
    /// Starts listening on a free port.
    pub fn start() -> anyhow::Result<TcpCounter> {
        let app = Router::new().fallback(not_found);
        Ok(TcpCounter {
            served: Served::start("tcp counter", app, None)?,
        })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.served.port()
    }

    /// TCP connections it accepted.
    pub fn connections(&self) -> usize {
        self.served.connections()
    }
}

/// A fresh directory under `/tmp` with mode 0755 (removed on drop), for files another user
/// must read: the checkout's temp dirs may sit in a directory only root can enter.
fn world_readable_dir(prefix: &str) -> anyhow::Result<TempDir> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .with_context(|| format!("creating a {prefix}* directory under /tmp"))?;
    set_mode(dir.path(), 0o755)?;
    Ok(dir)
}

fn set_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting mode {mode:o} on {}", path.display()))
}
