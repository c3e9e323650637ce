//! Network rules that need no network: the host rules of a run's allow list and the classes of
//! IP addresses. The sandbox's proxy decides with them (`baton-sandbox`'s `net`); the CLI
//! parses `--allow-host` with them, without linking the sandbox.
//!
//! - [`rules`]: [`HostRule`], one `--allow-host` entry (`example.com`, `*.example.com:443`,
//!   `10.0.0.0/8`, `[::1]:8080`), parsed, printed canonically and matched.
//! - [`addr`]: [`AddrClass`], what an IP address is (public, loopback, link-local, ...).

pub mod addr;
pub mod rules;

#[cfg(test)]
mod tests;

pub use addr::{AddrClass, canonical, classify};
pub use rules::HostRule;

/// A network setting that cannot be used as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// An `--allow-host` entry that is not one of the accepted forms.
    #[error(
        "bad --allow-host '{entry}': {problem}; use HOST, *.HOST, HOST:PORT, an IP, [IPv6] or a \
         CIDR (10.0.0.0/8, [fd00::]/8), each with an optional :PORT"
    )]
    BadHostRule {
        /// The entry as given.
        entry: String,
        /// What is wrong with it.
        problem: String,
    },
}
