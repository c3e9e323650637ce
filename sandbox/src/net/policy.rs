//! The decision for one `host:port` a tool asks the proxy for: a run's [`HostRule`]s, the
//! worker's [`NetGuard`] and a [`Resolve`]r, giving the addresses to connect to or a
//! [`Refusal`]. The order of the checks is in the [module doc](super).

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use ipnet::IpNet;

use super::NetError;
use super::addr::{canonical, classify};
use super::rules::{HostRule, Target};

/// How long a name lookup may take before the request is refused as [`RefusalKind::Unresolved`].
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// A boxed, sendable future (what [`Resolve::lookup`] returns).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Resolves a host name to addresses; [`SystemResolver`] in production, a table in tests.
pub trait Resolve: Send + Sync {
    /// The addresses of `host` (never an IP literal: those are not looked up), with `port`.
    fn lookup<'a>(&'a self, host: &'a str, port: u16)
    -> BoxFuture<'a, io::Result<Vec<SocketAddr>>>;
}

/// The host's resolver: `tokio::net::lookup_host`, i.e. glibc `getaddrinfo` (which also reads
/// `/etc/hosts` and accepts the inet_aton forms `127.1`, `2130706433`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

/// Ports of a Temporal frontend host no rule ever opens, even one naming the address and port
/// exactly: the frontend's gRPC (7233) and HTTP API (7243) ports, the other services of a
/// one-host server (history 7234, matching 7235, worker 7239, membership 6933-6939) and the dev
/// server's Web UI (8233). (The frontend's own port is protected too, whatever it is.)
pub const TEMPORAL_PORTS: &[u16] = &[
    6933, 6934, 6935, 6936, 6937, 6938, 6939, 7233, 7234, 7235, 7239, 7243, 8233,
];

/// At most this many frontend addresses are kept ([`ProtectedHosts::update`] keeps old ones).
const MAX_PROTECTED_HOSTS: usize = 64;

/// One address of a Temporal frontend: every port of it is protected ([`NetGuard`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedHost {
    /// The address (any form: compared as [`canonical`]).
    pub ip: IpAddr,
    /// The frontend's port there (never reachable, like [`TEMPORAL_PORTS`]).
    pub port: u16,
    /// What it is, for refusal reasons ("the Temporal frontend (temporal.example:7233)").
    pub what: String,
}

/// The Temporal frontend's addresses, shared by every run's policy and updated in place as the
/// worker re-resolves the frontend's name: a policy made before an update sees it.
#[derive(Debug, Clone, Default)]
pub struct ProtectedHosts(Arc<RwLock<Vec<ProtectedHost>>>);

impl ProtectedHosts {
    /// These hosts.
    pub fn new(hosts: Vec<ProtectedHost>) -> ProtectedHosts {
        let shared = ProtectedHosts::default();
        shared.update(hosts);
        shared
    }

    /// Adds `hosts` (a fresh resolution of the frontend's name), keeping the ones already there
    /// (a name that rotates among addresses keeps them all protected), the newest
    /// [`MAX_PROTECTED_HOSTS`] at most. Returns whether anything was added.
    pub fn update(&self, hosts: Vec<ProtectedHost>) -> bool {
        let mut list = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let mut added = false;
        for host in hosts {
            let same =
                |h: &ProtectedHost| canonical(h.ip) == canonical(host.ip) && h.port == host.port;
            if let Some(at) = list.iter().position(same) {
                let known = list.remove(at);
                list.push(known);
            } else {
                list.push(host);
                added = true;
            }
        }
        let over = list.len().saturating_sub(MAX_PROTECTED_HOSTS);
        list.drain(..over);
        added
    }

    /// The hosts now.
    pub fn list(&self) -> Vec<ProtectedHost> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The worker's side of every run's policy, from its settings.
#[derive(Debug, Clone, Default)]
pub struct NetGuard {
    /// Endpoints never reachable whatever the rules say, with what they are ("the worker's
    /// metrics port"). An unspecified IP (`0.0.0.0` / `::`) means: that port on any non-public
    /// address. Loopback and unspecified addresses all count as this host: `127.0.0.1:9464`
    /// protects `0.0.0.0:9464`, `[::1]:9464` and `127.0.0.2:9464` too.
    pub protected: Vec<(SocketAddr, String)>,
    /// Hosts protected on every port (the Temporal frontend's addresses): its own port and
    /// [`TEMPORAL_PORTS`] always, any other port unless a rule of the run names that address
    /// and port exactly (`--allow-host 127.0.0.1:5432`; `localhost:5432` for loopback). A
    /// frontend on this host (loopback, or one of [`NetGuard::local_addrs`]) protects every
    /// address of this host so.
    pub protected_hosts: ProtectedHosts,
    /// Ranges treated like the private ones (the operator's cluster ranges).
    pub private_ranges: Vec<IpNet>,
    /// This host's own interface addresses (the worker fills them in at start): they count as
    /// this host too, so a protected port is refused on a public address of the host as well.
    pub local_addrs: Vec<IpAddr>,
}

impl NetGuard {
    /// Whether `ip` (canonical) is this host.
    fn is_here(&self, ip: IpAddr) -> bool {
        classify(ip, &[]).is_this_host() || self.local_addrs.iter().any(|a| canonical(*a) == ip)
    }

    /// Whether a connection to `ip` reaches what listens on `guarded` (both canonical).
    fn same_host(&self, guarded: IpAddr, ip: IpAddr) -> bool {
        guarded == ip || (self.is_here(guarded) && self.is_here(ip))
    }

    /// What `addr` is, if it is (or reaches) a protected endpoint, or the port of a protected
    /// host that no rule opens (its frontend port, [`TEMPORAL_PORTS`]).
    fn protected(&self, addr: SocketAddr) -> Option<String> {
        let ip = canonical(addr.ip());
        let port = addr.port();
        let public = classify(ip, &self.private_ranges).is_public();
        let endpoint = self.protected.iter().find_map(|(endpoint, what)| {
            let guarded = canonical(endpoint.ip());
            let same = self.same_host(guarded, ip)
                || (guarded.is_unspecified() && (!public || self.is_here(ip)));
            (endpoint.port() == port && same)
                .then(|| format!("{what} (port {port}): tools may never reach it"))
        });
        if endpoint.is_some() {
            return endpoint;
        }
        self.protected_hosts.list().into_iter().find_map(|host| {
            if !self.same_host(canonical(host.ip), ip) {
                None
            } else if port == host.port {
                Some(format!(
                    "{} (port {port}): tools may never reach it",
                    host.what
                ))
            } else if TEMPORAL_PORTS.contains(&port) {
                Some(format!(
                    "a Temporal port ({port}) of the host of {}: tools may never reach it",
                    host.what
                ))
            } else {
                None
            }
        })
    }

    /// What `addr` is when it is another port of a protected host and none of `rules` names
    /// that address and port exactly.
    fn unpinned(&self, addr: SocketAddr, rules: &[HostRule]) -> Option<String> {
        let ip = canonical(addr.ip());
        let port = addr.port();
        if rules.iter().any(|rule| rule.pins(ip, port)) {
            return None;
        }
        let host = self
            .protected_hosts
            .list()
            .into_iter()
            .find(|host| self.same_host(canonical(host.ip), ip))?;
        Some(format!(
            "port {port} of the host of {}, protected on every port unless a rule names the \
             address and port exactly: submit with --allow-host {}:{port} to allow it",
            host.what,
            bracketed(ip)
        ))
    }
}

/// `ip` as written before `:PORT` (IPv6 in brackets).
fn bracketed(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// Why the proxy refused a request, as a metric label ([`RefusalKind::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalKind {
    /// No rule of the run's allow list matches the host and port.
    NotAllowed,
    /// Every address is non-public and no matching rule names it.
    Private,
    /// The address is one of the worker's protected endpoints.
    Protected,
    /// The name could not be resolved.
    Unresolved,
    /// No permitted address accepted a connection.
    Unreachable,
    /// The request is not one the proxy serves.
    BadRequest,
}

impl RefusalKind {
    /// The label for metrics and the `X-Baton-Refused` header.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalKind::NotAllowed => "not_allowed",
            RefusalKind::Private => "private",
            RefusalKind::Protected => "protected",
            RefusalKind::Unresolved => "unresolved",
            RefusalKind::Unreachable => "unreachable",
            RefusalKind::BadRequest => "bad_request",
        }
    }
}

impl fmt::Display for RefusalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request the proxy refused, with what was asked and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The host as asked (normalised when it could be; empty when the request named none).
    pub host: String,
    /// The port asked for (0 when the request named none).
    pub port: u16,
    /// The class of refusal.
    pub kind: RefusalKind,
    /// What was wrong, in words for the tool's output and the run's events.
    pub reason: String,
}

impl Refusal {
    /// A refusal of `host:port`.
    pub fn new(host: &str, port: u16, kind: RefusalKind, reason: String) -> Refusal {
        Refusal {
            host: host.to_owned(),
            port,
            kind,
            reason,
        }
    }

    /// `host:port` (IPv6 in brackets), or "the request" when no host was named.
    pub fn target(&self) -> String {
        if self.host.is_empty() {
            "the request".to_owned()
        } else if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.target(), self.reason)
    }
}

/// A run's network policy: its host rules (none = any PUBLIC host) and the worker's guard.
#[derive(Debug, Clone)]
pub struct NetPolicy {
    rules: Vec<HostRule>,
    guard: Arc<NetGuard>,
}

impl NetPolicy {
    /// Parses the run's `allowed_hosts`; the error names the first bad entry.
    pub fn new(allowed_hosts: &[String], guard: Arc<NetGuard>) -> Result<NetPolicy, NetError> {
        let rules = allowed_hosts
            .iter()
            .map(|entry| HostRule::parse(entry))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(NetPolicy { rules, guard })
    }

    /// The run's rules (empty: any public host).
    pub fn rules(&self) -> &[HostRule] {
        &self.rules
    }

    /// The worker's guard.
    pub fn guard(&self) -> &NetGuard {
        &self.guard
    }

    /// The decision for `host:port`: the address to connect to (the first permitted one).
    pub async fn decide(
        &self,
        host: &str,
        port: u16,
        resolver: &dyn Resolve,
    ) -> Result<SocketAddr, Refusal> {
        let permitted = self.permitted(host, port, resolver).await?;
        permitted.first().copied().ok_or_else(|| {
            Refusal::new(host, port, RefusalKind::Unresolved, "no address".to_owned())
        })
    }

    /// Every permitted address of `host:port`, in the resolver's order, never empty; the proxy
    /// tries them in turn. When none is permitted, the refusal of the first address.
    pub async fn permitted(
        &self,
        host: &str,
        port: u16,
        resolver: &dyn Resolve,
    ) -> Result<Vec<SocketAddr>, Refusal> {
        let target = Target::parse(host).map_err(|problem| {
            let reason = format!("'{host}' is not a host name or IP address: {problem}");
            Refusal::new(host, port, RefusalKind::BadRequest, reason)
        })?;
        let name = target.to_string();
        let refuse = |kind, reason| Refusal::new(&name, port, kind, reason);
        if !self.rules.is_empty() && !self.rules.iter().any(|rule| rule.matches(&target, port)) {
            let asked = refuse(RefusalKind::NotAllowed, String::new()).target();
            let reason = format!(
                "{asked} is not on this run's allow list (--allow-host); submit with \
                 --allow-host HOST[:PORT] to allow it"
            );
            return Err(refuse(RefusalKind::NotAllowed, reason));
        }
        let addrs = match &target {
            Target::Ip(ip) => vec![SocketAddr::new(*ip, port)],
            Target::Name(host) => {
                match tokio::time::timeout(LOOKUP_TIMEOUT, resolver.lookup(host, port)).await {
                    Ok(Ok(addrs)) if !addrs.is_empty() => addrs,
                    Ok(Ok(_)) => {
                        let reason = format!("{host} has no address");
                        return Err(refuse(RefusalKind::Unresolved, reason));
                    }
                    Ok(Err(err)) => {
                        let reason = format!("{host} could not be resolved: {err}");
                        return Err(refuse(RefusalKind::Unresolved, reason));
                    }
                    Err(_) => {
                        let reason = format!(
                            "{host} could not be resolved: no answer within {} s",
                            LOOKUP_TIMEOUT.as_secs()
                        );
                        return Err(refuse(RefusalKind::Unresolved, reason));
                    }
                }
            }
        };
        let mut permitted = Vec::new();
        let mut first_refusal = None;
        for addr in addrs {
            let addr = SocketAddr::new(addr.ip().to_canonical(), port);
            match self.check(&target, addr) {
                Ok(()) if !permitted.contains(&addr) => permitted.push(addr),
                Ok(()) => {}
                Err((kind, reason)) => {
                    first_refusal.get_or_insert_with(|| refuse(kind, reason));
                }
            }
        }
        match first_refusal {
            Some(refusal) if permitted.is_empty() => Err(refusal),
            _ => Ok(permitted),
        }
    }

    /// Whether `addr`, one address of `target` (which a rule matched, or the run has none),
    /// may be connected to: not protected, and public or named by a rule (an IP or CIDR rule
    /// covering the address and port; `localhost` for loopback). A name rule never names an
    /// address: a name resolving to a non-public address is refused unless a rule names that.
    fn check(&self, target: &Target, addr: SocketAddr) -> Result<(), (RefusalKind, String)> {
        let ip = addr.ip();
        let what = match target {
            Target::Ip(_) => ip.to_string(),
            Target::Name(name) => format!("{name} resolves to {}, which", ip),
        };
        if let Some(endpoint) = self.guard.protected(addr) {
            return Err((RefusalKind::Protected, format!("{what} is {endpoint}")));
        }
        let class = classify(ip, &self.guard.private_ranges);
        if class.is_public()
            || self
                .rules
                .iter()
                .any(|rule| rule.names(ip, addr.port(), class))
        {
            return match self.guard.unpinned(addr, &self.rules) {
                Some(port) => Err((RefusalKind::Protected, format!("{what} is {port}"))),
                None => Ok(()),
            };
        }
        let how = if self.rules.is_empty() {
            "a run with network and no --allow-host reaches public hosts only; submit with \
             --allow-host naming the address (its IP or a CIDR containing it) to allow it"
                .to_owned()
        } else if matches!(target, Target::Name(_)) {
            format!(
                "a host name never opens a non-public address (whoever runs its DNS can point \
                 it anywhere); only a rule naming the address does: add --allow-host {}:{} (or \
                 a CIDR containing it)",
                bracketed(canonical(ip)),
                addr.port()
            )
        } else {
            "only a rule naming it allows it (its IP or a CIDR containing it, with the rule's \
             port if it has one)"
                .to_owned()
        };
        Err((RefusalKind::Private, format!("{what} is {class}; {how}")))
    }
}
