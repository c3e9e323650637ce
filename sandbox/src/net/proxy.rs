//! The proxy server: HTTP/1.1 (hyper) on a listener a tool's network namespace reaches. Each
//! request is decided on its own ([`NetPolicy::permitted`]), also the second and later ones of a
//! keep-alive connection:
//! - `CONNECT host:port`: connect (10 s), answer `200`, then copy bytes both ways until either side
//!   closes or the [`ProxyHandle`] is dropped;
//! - an absolute-form `http://` request (any method): connect, send it on in origin form with
//!   `Host` set to the URI's authority and hop-by-hop headers removed, stream the response back;
//! - anything else (an origin-form request, an `https://` URI) is refused as a bad request.
//!
//! A refusal is an HTTP answer the tool sees (403, 400 for a bad request, 502 when nothing
//! answered), `text/plain`, with `X-Baton-Refused: <kind>` and the body
//! `baton proxy refused <host>:<port>: <reason>`; the first 32 are logged at info level and kept
//! in the handle, all are counted. Request heads are capped at 64 KiB and must arrive within
//! 30 s (also the next one on an idle keep-alive connection: hyper closes it then). At most
//! [`MAX_CONNECTIONS`] client connections are served at a time; more wait in the listener's
//! backlog.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::policy::{NetPolicy, Refusal, RefusalKind, Resolve};
use super::rules::Target;

/// The largest request head accepted (request line and headers).
const MAX_HEAD: usize = 64 * 1024;
/// How long a client may take to send a request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting to the permitted addresses of a host may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How many client connections one proxy serves at a time: each costs the worker up to two file
/// descriptors (the client's and the upstream one), and a tool must not exhaust the worker's.
pub const MAX_CONNECTIONS: usize = 256;
/// How many refusals a handle keeps (the rest are only counted).
const KEPT_REFUSALS: usize = 32;

type Body = BoxBody<Bytes, hyper::Error>;

/// The filtering proxy; [`Proxy::start`] serves on a listener.
#[derive(Debug)]
pub struct Proxy;

/// What a proxy has done so far: requests and tunnels allowed (connected) and refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProxyCounts {
    /// Requests forwarded and tunnels opened.
    pub allowed: u64,
    /// Requests refused (every one, also those past the kept [`ProxyHandle::refusals`]).
    pub refused: u64,
}

/// A running proxy. Dropping it stops accepting and closes every open connection and tunnel.
pub struct ProxyHandle {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
}

impl std::fmt::Debug for ProxyHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyHandle")
            .field("local_addr", &self.local_addr)
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

struct Shared {
    policy: Arc<NetPolicy>,
    resolver: Arc<dyn Resolve>,
    stop: CancellationToken,
    allowed: AtomicU64,
    refused: AtomicU64,
    kept: Mutex<Vec<Refusal>>,
}

impl Proxy {
    /// Serves on `listener` (bound and listening) on the current tokio runtime until the handle
    /// is dropped. Fails outside a runtime or when the listener cannot be made non-blocking.
    pub fn start(
        listener: std::net::TcpListener,
        policy: Arc<NetPolicy>,
        resolver: Arc<dyn Resolve>,
    ) -> io::Result<ProxyHandle> {
        let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
        listener.set_nonblocking(true)?;
        let local_addr = listener.local_addr()?;
        let listener = {
            let _entered = runtime.enter();
            TcpListener::from_std(listener)?
        };
        let shared = Arc::new(Shared {
            policy,
            resolver,
            stop: CancellationToken::new(),
            allowed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            kept: Mutex::new(Vec::new()),
        });
        runtime.spawn(accept_loop(listener, Arc::clone(&shared)));
        Ok(ProxyHandle { shared, local_addr })
    }
}

impl ProxyHandle {
    /// The address the proxy listens on (in the namespace the listener was bound in).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The refusals so far, in order: the first 32 (the rest are in [`ProxyCounts::refused`]).
    pub fn refusals(&self) -> Vec<Refusal> {
        self.shared.kept().clone()
    }

    /// The kept refusals and the counts, which start over (see [`ProxyHandle::take_report`]).
    pub(super) fn take(&self) -> (Vec<Refusal>, ProxyCounts) {
        let refusals = std::mem::take(&mut *self.shared.kept());
        let counts = ProxyCounts {
            allowed: self.shared.allowed.swap(0, Ordering::Relaxed),
            refused: self.shared.refused.swap(0, Ordering::Relaxed),
        };
        (refusals, counts)
    }

    /// Requests allowed and refused so far.
    pub fn counts(&self) -> ProxyCounts {
        ProxyCounts {
            allowed: self.shared.allowed.load(Ordering::Relaxed),
            refused: self.shared.refused.load(Ordering::Relaxed),
        }
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

impl Shared {
    fn kept(&self) -> std::sync::MutexGuard<'_, Vec<Refusal>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records, logs and answers a refusal. The kept ones are logged at info level, the rest at
    /// debug (a tool retrying in a loop must not flood the worker's log).
    fn refuse(&self, refusal: Refusal) -> Response<Body> {
        let status = match refusal.kind {
            RefusalKind::BadRequest => StatusCode::BAD_REQUEST,
            RefusalKind::Unreachable => StatusCode::BAD_GATEWAY,
            _ => StatusCode::FORBIDDEN,
        };
        let mut response = text(status, format!("baton proxy refused {refusal}\n"));
        response.headers_mut().insert(
            HeaderName::from_static("x-baton-refused"),
            HeaderValue::from_static(refusal.kind.as_str()),
        );
        self.refused.fetch_add(1, Ordering::Relaxed);
        let (host, port, kind) = (&refusal.host, refusal.port, refusal.kind.as_str());
        let mut kept = self.kept();
        if kept.len() < KEPT_REFUSALS {
            let reason = &refusal.reason;
            info!(%host, port, kind, %reason, "baton proxy refused a request");
            kept.push(refusal);
            if kept.len() == KEPT_REFUSALS {
                info!(
                    "baton proxy: {KEPT_REFUSALS} refusals, further ones are logged at debug level"
                );
            }
        } else {
            debug!(%host, port, kind, reason = %refusal.reason, "baton proxy refused a request");
        }
        response
    }

    /// Decides `host:port` and connects to its first permitted address that answers.
    async fn open(&self, host: &str, port: u16) -> Result<TcpStream, Refusal> {
        let addrs = self.policy.permitted(host, port, &*self.resolver).await?;
        let attempts = async {
            let mut failures = Vec::new();
            for addr in &addrs {
                match TcpStream::connect(addr).await {
                    Ok(stream) => return Ok((stream, *addr)),
                    Err(err) => failures.push(format!("{addr}: {err}")),
                }
            }
            Err(failures.join("; "))
        };
        let name = Target::parse(host).map_or_else(|_| host.to_owned(), |t| t.to_string());
        let unreachable = |reason| Refusal::new(&name, port, RefusalKind::Unreachable, reason);
        match tokio::time::timeout(CONNECT_TIMEOUT, attempts).await {
            Ok(Ok((stream, addr))) => {
                debug!(host = %name, port, %addr, "baton proxy connected");
                let _ = stream.set_nodelay(true);
                self.allowed.fetch_add(1, Ordering::Relaxed);
                Ok(stream)
            }
            Ok(Err(failures)) => Err(unreachable(format!("could not connect ({failures})"))),
            Err(_) => Err(unreachable(format!(
                "no connection within {} s",
                CONNECT_TIMEOUT.as_secs()
            ))),
        }
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        // At the cap, wait for a connection to end: further clients queue in the backlog.
        let slot = tokio::select! {
            () = shared.stop.cancelled() => return,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
        };
        let accepted = tokio::select! {
            () = shared.stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    serve(stream, shared).await;
                    drop(slot);
                });
            }
            Err(err) => {
                // Out of file descriptors and the like: back off instead of spinning.
                warn!(cause = %err, "baton proxy could not accept a connection");
                tokio::select! {
                    () = shared.stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        }
    }
}

/// Serves one client connection until it closes or the proxy stops.
async fn serve(stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let for_requests = Arc::clone(&shared);
    let service = service_fn(move |request| {
        let shared = Arc::clone(&for_requests);
        async move { Ok::<_, Infallible>(handle(request, shared).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_header_size(MAX_HEAD);
    let connection = builder
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::select! {
        () = shared.stop.cancelled() => {}
        served = connection => if let Err(err) = served {
            debug!(cause = %err, "baton proxy client connection ended with an error");
        },
    }
}

async fn handle(request: Request<Incoming>, shared: Arc<Shared>) -> Response<Body> {
    let answer = if request.method() == Method::CONNECT {
        tunnel(request, &shared).await
    } else {
        forward(request, &shared).await
    };
    answer.unwrap_or_else(|refusal| shared.refuse(refusal))
}

fn bad_request(reason: &str) -> Refusal {
    Refusal::new("", 0, RefusalKind::BadRequest, reason.to_owned())
}

/// `CONNECT host:port`: a tunnel to the first permitted address.
async fn tunnel(
    request: Request<Incoming>,
    shared: &Arc<Shared>,
) -> Result<Response<Body>, Refusal> {
    let authority = request
        .uri()
        .authority()
        .ok_or_else(|| bad_request("CONNECT needs a target HOST:PORT"))?;
    let host = authority.host().to_owned();
    let port = authority.port_u16().ok_or_else(|| {
        let reason = format!("CONNECT {authority} has no port; send CONNECT HOST:PORT");
        Refusal::new(authority.host(), 0, RefusalKind::BadRequest, reason)
    })?;
    let mut upstream = shared.open(&host, port).await?;
    let stop = shared.stop.clone();
    tokio::spawn(async move {
        let upgraded = tokio::select! {
            () = stop.cancelled() => return,
            upgraded = hyper::upgrade::on(request) => upgraded,
        };
        let mut client = match upgraded {
            Ok(upgraded) => TokioIo::new(upgraded),
            Err(err) => {
                debug!(cause = %err, host, port, "baton proxy tunnel was not upgraded");
                return;
            }
        };
        tokio::select! {
            () = stop.cancelled() => {}
            copied = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {
                if let Err(err) = copied {
                    debug!(cause = %err, host, port, "baton proxy tunnel ended with an error");
                }
            }
        }
    });
    Ok(Response::new(empty()))
}

/// An absolute-form `http://` request, sent on over a new connection in origin form.
async fn forward(
    request: Request<Incoming>,
    shared: &Arc<Shared>,
) -> Result<Response<Body>, Refusal> {
    let uri = request.uri().clone();
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(bad_request(
                "an https:// URI cannot be forwarded as a plain request; use CONNECT \
                 (https_proxy) for https",
            ));
        }
        Some(other) => {
            return Err(bad_request(&format!(
                "only http:// URIs are forwarded, not {other}://"
            )));
        }
        None => {
            return Err(bad_request(
                "this is baton's proxy for tool processes; send requests through it with \
                 http_proxy/https_proxy",
            ));
        }
    }
    let authority = uri
        .authority()
        .ok_or_else(|| bad_request("an http:// URI without a host"))?;
    let port = authority.port_u16().unwrap_or(80);
    let upstream = shared.open(authority.host(), port).await?;
    let failed = |err: hyper::Error| {
        let message = format!("baton proxy: {authority} failed: {err}\n");
        Ok(text(StatusCode::BAD_GATEWAY, message))
    };
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(pair) => pair,
            Err(err) => return failed(err),
        };
    let stop = shared.stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = stop.cancelled() => {}
            done = connection => if let Err(err) = done {
                debug!(cause = %err, "baton proxy upstream connection ended with an error");
            },
        }
    });
    let (mut parts, body) = request.into_parts();
    parts.uri = origin_form(&uri);
    strip_hop_by_hop(&mut parts.headers);
    if let Ok(host) = HeaderValue::from_str(authority.as_str()) {
        parts.headers.insert(header::HOST, host);
    }
    let response = match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(response) => response,
        Err(err) => return failed(err),
    };
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Ok(Response::from_parts(parts, body.boxed()))
}

/// `/path?query` of an absolute URI (`/` when it has none).
fn origin_form(uri: &Uri) -> Uri {
    uri.path_and_query()
        .map_or_else(|| Uri::from_static("/"), |pq| Uri::from(pq.clone()))
}

/// Removes the hop-by-hop headers, and those a `Connection` header names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("proxy-connection"),
        header::PROXY_AUTHORIZATION,
        HeaderName::from_static("keep-alive"),
        header::TE,
        header::TRAILER,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)).map_err(|n| match n {}).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn empty() -> Body {
    Full::new(Bytes::new()).map_err(|n| match n {}).boxed()
}
