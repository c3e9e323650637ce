//! Network for tool processes: the filtering HTTP/HTTPS proxy a sandboxed process
//! reaches as its only way out, and the rules it decides by.
//!
//! A tool runs in its own network namespace whose only listener is `127.0.0.1:3128`; the worker
//! accepts on that listener ([`Proxy::start`]) and, for each request, decides
//! ([`NetPolicy::decide`]) and connects on the tool's behalf from the worker's network. Tools
//! send host NAMES (`CONNECT example.com:443`, `GET http://example.com/`), so the proxy is the
//! only resolver, and it connects to the address it checked, never to the name again (DNS
//! rebinding).
//!
//! # Layout
//! - [`rules`]: [`HostRule`], one `--allow-host` entry (`example.com`, `*.example.com:443`,
//!   `10.0.0.0/8`, `[::1]:8080`), parsed, printed canonically and matched. Pure, so it lives in
//!   `baton-core` (the CLI parses `--allow-host` without linking the sandbox).
//! - [`addr`]: [`AddrClass`], what an IP address is (public, loopback, link-local, ...). Pure,
//!   also in `baton-core`.
//! - [`policy`]: [`NetPolicy`] (a run's rules + the worker's [`NetGuard`]), the decision
//!   for `host:port` with a [`Resolve`]r, and [`Refusal`]/[`RefusalKind`].
//! - [`proxy`]: [`Proxy`], the HTTP/1.1 server (hyper): `CONNECT` tunnels and absolute-form
//!   requests forwarded one by one; [`ProxyHandle`] stops it and holds what it refused.
//!
//! # The decision, in order
//! 1. The host is normalised (lowercase, one trailing dot and IPv6 brackets stripped); a strict
//!    IP literal is an address (v4-mapped IPv6 as IPv4).
//! 2. With rules, a host:port no rule matches is refused ([`RefusalKind::NotAllowed`]) before any
//!    lookup, so an unlisted name leaks nothing to DNS. Names match name rules, IP literals match
//!    IP and CIDR rules; a rule without a port matches every port.
//! 3. A name is resolved; every address is checked, in order, and the proxy connects to the first
//!    permitted one that answers.
//! 4. A protected endpoint of the worker ([`NetGuard::protected`]: its metrics and health ports)
//!    is never permitted ([`RefusalKind::Protected`]). The Temporal frontend's hosts
//!    ([`NetGuard::protected_hosts`], re-resolved by the worker every minute) are protected on
//!    every port: the frontend's port and [`TEMPORAL_PORTS`] (HTTP API 7243, UI 8233, ...)
//!    always, other ports unless a rule names that address and port exactly
//!    (`--allow-host 127.0.0.1:5432`), so `--allow-host 127.0.0.1` does not open the dev
//!    server's HTTP API on its random port. A frontend on this host makes every address of this
//!    host (loopback, unspecified, the interfaces' addresses) such a host. Addresses are
//!    compared in [`canonical`] form: v4-mapped, NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`)
//!    forms are the IPv4 address they carry.
//! 5. A non-public address ([`AddrClass`], plus [`NetGuard::private_ranges`]) is permitted only
//!    when a rule of the run names it: an IP or CIDR rule containing it (and its port, if the
//!    rule has one), or `localhost` for loopback. A host name never does, also not the exact
//!    name asked for nor one a human approved through `baton.allow_host`: whoever runs a name's
//!    DNS can point it at cloud metadata or this host. Without rules (any public host) never
//!    ([`RefusalKind::Private`]).

pub mod policy;
pub mod proxy;
mod report;

pub use baton_core::net::{NetError, addr, rules};

#[cfg(test)]
mod tests;

pub use addr::{AddrClass, canonical, classify};
pub use policy::{
    BoxFuture, NetGuard, NetPolicy, ProtectedHost, ProtectedHosts, Refusal, RefusalKind, Resolve,
    SystemResolver, TEMPORAL_PORTS,
};
pub use proxy::{Proxy, ProxyCounts, ProxyHandle};
pub use report::{NetReport, proxy_env};
pub use rules::HostRule;
