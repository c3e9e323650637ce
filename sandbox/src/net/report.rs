//! What a tool process is told about its proxy (the environment), and what the proxy reports
//! back once the call is over ([`NetReport`]).

use std::ffi::OsString;

use super::{ProxyHandle, Refusal};

/// What the proxy of one process did: its refusals (the first 32) and the counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetReport {
    /// The first refusals, in order.
    pub refusals: Vec<Refusal>,
    /// Requests forwarded and tunnels opened.
    pub allowed: u64,
    /// Requests refused, all of them.
    pub refused: u64,
}

impl ProxyHandle {
    /// The refusals and counts so far.
    pub fn report(&self) -> NetReport {
        let counts = self.counts();
        NetReport {
            refusals: self.refusals(),
            allowed: counts.allowed,
            refused: counts.refused,
        }
    }

    /// The refusals and counts since the last time this was called, which starts them over
    /// (a long-lived process, such as a sandboxed MCP server, reports them per call).
    pub fn take_report(&self) -> NetReport {
        let (refusals, counts) = self.take();
        NetReport {
            refusals,
            allowed: counts.allowed,
            refused: counts.refused,
        }
    }
}

/// The proxy variables of a process in its own network namespace: both cases, since curl and
/// the libcurl users (git, cargo) ignore the upper-case `HTTP_PROXY` and npm ignores
/// `ALL_PROXY`; an empty `NO_PROXY`, so that loopback targets (which tools do not bypass by
/// default, and which are only reachable through the proxy) keep going to it.
pub fn proxy_env() -> Vec<(&'static str, OsString)> {
    let url = OsString::from(format!("http://127.0.0.1:{}", crate::PROXY_PORT));
    [
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
    ]
    .into_iter()
    .map(|name| (name, url.clone()))
    .chain(["no_proxy", "NO_PROXY"].map(|name| (name, OsString::new())))
    .collect()
}
