//! Host rules: one entry of a run's allow list (`--allow-host HOST[:PORT]`), parsed, printed in
//! a canonical form and matched against what a tool asked the proxy for. Pure.
//!
//! Forms: `example.com`, `*.example.com` (subdomains at any depth, not the apex), an IPv4
//! address, an IPv6 address (bare, or in brackets), a CIDR (`10.0.0.0/8`, `[fd00::]/8`), each
//! optionally followed by `:PORT` (IPv6 in brackets then: `[::1]:8080`). A rule without a port
//! matches any port. Names match names and IP rules match IP literals: a name is never resolved
//! to be compared with an IP rule (the decision refuses unlisted names before any lookup).
//! Only an IP or CIDR rule (and `localhost`, for loopback) opens a non-public address, also one
//! a listed name resolves to ([`HostRule::names`]).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

use super::NetError;
use super::addr::{AddrClass, canonical};

/// One entry of a run's allow list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRule {
    host: HostPattern,
    port: Option<u16>,
}

/// What a rule matches, port aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostPattern {
    /// This exact host name (lowercase, no trailing dot).
    Name(String),
    /// Any name ending in `.` + this suffix.
    Subdomains(String),
    /// This address (canonical: v4-mapped IPv6 as IPv4).
    Ip(IpAddr),
    /// Any address in this network (host bits cleared).
    Net(IpNet),
}

/// What a tool asked for, normalised: a host name or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A host name, lowercase, without a trailing dot.
    Name(String),
    /// An IP literal, canonical (v4-mapped IPv6 as IPv4).
    Ip(IpAddr),
}

impl Target {
    /// Normalises a host as a client sent it: lowercase, one trailing dot stripped, brackets of
    /// IPv6 stripped; a strict IP literal becomes [`Target::Ip`] (canonicalised). `Err` says
    /// what is wrong with it.
    pub fn parse(host: &str) -> Result<Target, String> {
        let lower = host.to_ascii_lowercase();
        let bare = lower
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&lower);
        if let Ok(ip) = IpAddr::from_str(bare) {
            return Ok(Target::Ip(ip.to_canonical()));
        }
        let name = bare.strip_suffix('.').unwrap_or(bare);
        check_name(name)?;
        Ok(Target::Name(name.to_owned()))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Name(name) => f.write_str(name),
            Target::Ip(ip) => f.write_str(&ip.to_string()),
        }
    }
}

impl HostRule {
    /// Parses one `--allow-host` entry; the error says what was wrong and the accepted forms.
    pub fn parse(entry: &str) -> Result<HostRule, NetError> {
        parse_rule(entry).map_err(|problem| NetError::BadHostRule {
            entry: entry.to_owned(),
            problem,
        })
    }

    /// The port the rule is limited to, if any.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// Whether the rule matches `target` on `port`.
    pub fn matches(&self, target: &Target, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.host, target) {
            (HostPattern::Name(rule), Target::Name(name)) => rule == name,
            (HostPattern::Subdomains(suffix), Target::Name(name)) => name
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (HostPattern::Ip(rule), Target::Ip(ip)) => rule == ip,
            (HostPattern::Net(net), Target::Ip(ip)) => net.contains(ip),
            _ => false,
        }
    }

    /// Whether the rule names the address `ip` on `port`, so that it may be reached although
    /// it is non-public (`class`): an IP or CIDR rule containing it, with that port if the rule
    /// has one, or `localhost` for a loopback address. A host name (or a wildcard) never names
    /// an address: whoever runs its DNS could point it at cloud metadata or this host.
    pub fn names(&self, ip: IpAddr, port: u16, class: AddrClass) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        let ip = ip.to_canonical();
        match &self.host {
            HostPattern::Name(name) => name == "localhost" && class == AddrClass::Loopback,
            HostPattern::Subdomains(_) => false,
            HostPattern::Ip(rule) => *rule == ip,
            HostPattern::Net(net) => net.contains(&ip),
        }
    }
    /// Whether the rule names exactly the address `ip` (canonical) and `port`: an IP rule (or a
    /// one-address CIDR) with that port, or `localhost:PORT` for a loopback address. Only such
    /// a rule opens a port of a protected host other than its Temporal ports.
    pub fn pins(&self, ip: IpAddr, port: u16) -> bool {
        if self.port != Some(port) {
            return false;
        }
        match &self.host {
            HostPattern::Ip(rule) => canonical(*rule) == ip,
            HostPattern::Net(net) => net.prefix_len() == net.max_prefix_len() && net.contains(&ip),
            HostPattern::Name(name) => name == "localhost" && ip.is_loopback(),
            HostPattern::Subdomains(_) => false,
        }
    }
}

impl FromStr for HostRule {
    type Err = NetError;

    fn from_str(entry: &str) -> Result<HostRule, NetError> {
        HostRule::parse(entry)
    }
}

impl fmt::Display for HostRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Name(name) => f.write_str(name)?,
            HostPattern::Subdomains(suffix) => write!(f, "*.{suffix}")?,
            HostPattern::Ip(IpAddr::V4(ip)) => write!(f, "{ip}")?,
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
            HostPattern::Net(IpNet::V4(net)) => write!(f, "{net}")?,
            HostPattern::Net(IpNet::V6(net)) => write!(f, "[{}]/{}", net.addr(), net.prefix_len())?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

fn parse_rule(entry: &str) -> Result<HostRule, String> {
    if entry.is_empty() {
        return Err("it is empty".to_owned());
    }
    if let Some(c) = entry.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("it contains {c:?}"));
    }
    if entry.contains("://") {
        return Err("give a host, not a URL (no scheme)".to_owned());
    }
    let lower = entry.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix('[') {
        return parse_bracketed(rest);
    }
    if lower.matches(':').count() >= 2 {
        // Bare IPv6 (a port needs brackets: `[::1]:8080`).
        let host = parse_ip_or_net(&lower)?;
        return Ok(HostRule { host, port: None });
    }
    let (host, port) = match lower.rsplit_once(':') {
        Some((host, port)) => (host, Some(parse_port(port)?)),
        None => (lower.as_str(), None),
    };
    let host = if host.contains('/') || IpAddr::from_str(host).is_ok() {
        parse_ip_or_net(host)?
    } else {
        parse_name(host)?
    };
    Ok(HostRule { host, port })
}

/// `[v6]`, `[v6]/len`, `[v6/len]`, each with an optional `:port`; `rest` follows the `[`.
fn parse_bracketed(rest: &str) -> Result<HostRule, String> {
    let (inside, after) = rest
        .split_once(']')
        .ok_or_else(|| "'[' without its closing ']'".to_owned())?;
    let (len, after) = match after.strip_prefix('/') {
        Some(tail) => match tail.split_once(':') {
            Some((len, port)) => (Some(len), Some(port)),
            None => (Some(tail), None),
        },
        None if after.is_empty() => (None, None),
        None => match after.strip_prefix(':') {
            Some(port) => (None, Some(port)),
            None => return Err(format!("unexpected '{after}' after ']'")),
        },
    };
    let text = match (len, inside.contains('/')) {
        (Some(_), true) => return Err("two prefix lengths".to_owned()),
        (Some(len), false) => format!("{inside}/{len}"),
        (None, _) => inside.to_owned(),
    };
    let host = parse_ip_or_net(&text)?;
    if matches!(
        host,
        HostPattern::Ip(IpAddr::V4(_)) | HostPattern::Net(IpNet::V4(_))
    ) && !inside.contains(':')
    {
        return Err("brackets are for IPv6 addresses; write an IPv4 address without them".into());
    }
    let port = after.map(parse_port).transpose()?;
    Ok(HostRule { host, port })
}

fn parse_ip_or_net(text: &str) -> Result<HostPattern, String> {
    if text.contains('/') {
        let net = IpNet::from_str(text)
            .map_err(|_| format!("'{text}' is not a CIDR range (ADDRESS/PREFIX-LENGTH)"))?;
        let net = match net {
            IpNet::V6(v6) => match v6.addr().to_ipv4_mapped() {
                Some(v4) if v6.prefix_len() >= 96 => {
                    IpNet::new(IpAddr::V4(v4), v6.prefix_len() - 96).map_err(|e| e.to_string())?
                }
                _ => net,
            },
            IpNet::V4(_) => net,
        };
        return Ok(HostPattern::Net(net.trunc()));
    }
    IpAddr::from_str(text)
        .map(|ip| HostPattern::Ip(ip.to_canonical()))
        .map_err(|_| format!("'{text}' is not an IP address"))
}

fn parse_port(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(0) => Err("port 0 is not a port a tool can connect to".to_owned()),
        Ok(port) if !text.starts_with('+') => Ok(port),
        _ => Err(format!("'{text}' is not a port (1-65535)")),
    }
}

fn parse_name(host: &str) -> Result<HostPattern, String> {
    let (wildcard, name) = match host.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, host),
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    check_name(name)?;
    let last = name.rsplit('.').next().unwrap_or(name);
    let numeric = |l: &str| match l.strip_prefix("0x") {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => l.bytes().all(|b| b.is_ascii_digit()),
    };
    if numeric(last) {
        // `127.1`, `2130706433`, `0x7f.1`: glibc resolves them as IPv4 addresses.
        return Err(format!(
            "'{name}' is a numeric IPv4 form, not a dotted address; write it as a.b.c.d"
        ));
    }
    if wildcard {
        if !name.contains('.') {
            return Err(format!(
                "'*.{name}' would match a whole top-level domain; name a domain (*.example.com)"
            ));
        }
        Ok(HostPattern::Subdomains(name.to_owned()))
    } else {
        Ok(HostPattern::Name(name.to_owned()))
    }
}

/// Checks a lowercase host name without trailing dot: labels of 1-63 letters, digits, `-`, `_`,
/// 253 characters at most.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the host is empty".to_owned());
    }
    if !name.is_ascii() {
        return Err(format!(
            "'{name}' is not ASCII; write an internationalised name in its xn-- (punycode) form"
        ));
    }
    if name.len() > 253 {
        return Err("a host name has at most 253 characters".to_owned());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
    {
        let hint = match c {
            '*' => "; a wildcard is only allowed as the whole first label (*.example.com)",
            '/' => "; give a host, not a path",
            '@' => "; give a host, no user name",
            _ => "",
        };
        return Err(format!("'{name}' has the character {c:?}{hint}"));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(format!("'{name}' has an empty label (two dots in a row)"));
        }
        if label.len() > 63 {
            return Err(format!("'{name}' has a label over 63 characters"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("'{name}' has a label starting or ending with '-'"));
        }
    }
    Ok(())
}
