//! Address classes: whether an IP address is public, and if not, what it is (loopback, private,
//! link-local, ...). Pure; the proxy classifies the addresses a host RESOLVES to, so the forms
//! glibc accepts (`127.1`, `2130706433`) and embedded IPv4 (`::ffff:127.0.0.1`, NAT64
//! `64:ff9b::a9fe:a9fe`) are caught by what they reach, not by how they are spelled.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// What an address is, as far as the proxy cares: [`AddrClass::Public`] or one of the
/// non-public classes a tool may reach only when a host rule names the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddrClass {
    /// A globally routable unicast address.
    Public,
    /// `127.0.0.0/8`, `::1`: this host.
    Loopback,
    /// `0.0.0.0/8`, `::`: connecting to it reaches this host.
    Unspecified,
    /// RFC 1918 `10/8`, `172.16/12`, `192.168/16` (and the deprecated IPv6 site-local `fec0::/10`).
    Private,
    /// `100.64.0.0/10`, carrier-grade NAT shared space.
    SharedNat,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// `fc00::/7` (`fd00:ec2::254` is in it).
    UniqueLocal,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// `198.18.0.0/15`, `2001:2::/48`.
    Benchmarking,
    /// `255.255.255.255`.
    Broadcast,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// Everything else that is not global unicast: `240/4`, `192.0.0/24`, IPv6 outside
    /// `2000::/3`, Teredo, ...
    Reserved,
    /// One of the worker's configured private ranges (the sandbox's
    /// `NetGuard::private_ranges`).
    Configured,
}

impl AddrClass {
    /// Whether the class is [`AddrClass::Public`].
    pub fn is_public(self) -> bool {
        self == AddrClass::Public
    }

    /// Whether connecting to an address of this class reaches this host itself.
    pub fn is_this_host(self) -> bool {
        matches!(self, AddrClass::Loopback | AddrClass::Unspecified)
    }

    /// A short description for refusal reasons ("link-local (where cloud metadata services
    /// live)").
    pub fn describe(self) -> &'static str {
        match self {
            AddrClass::Public => "public",
            AddrClass::Loopback => "loopback (this host)",
            AddrClass::Unspecified => "unspecified (connecting to it reaches this host)",
            AddrClass::Private => "a private address",
            AddrClass::SharedNat => "carrier-grade NAT space",
            AddrClass::LinkLocal => "link-local (where cloud metadata services live)",
            AddrClass::UniqueLocal => {
                "an IPv6 unique local address (where cloud metadata services may live)"
            }
            AddrClass::Documentation => "a documentation/test network",
            AddrClass::Benchmarking => "a benchmarking network",
            AddrClass::Broadcast => "broadcast",
            AddrClass::Multicast => "multicast",
            AddrClass::Reserved => "reserved (not globally routable)",
            AddrClass::Configured => "in the worker's private ranges (network.private_ranges)",
        }
    }
}

impl fmt::Display for AddrClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// The class of `ip`: the worker's `extra` ranges first (an operator's cluster range may
/// overlap public space), then the built-in classes. IPv4-mapped (`::ffff:a.b.c.d`), NAT64
/// (`64:ff9b::/96`) and 6to4 (`2002::/16`) addresses are classified by their embedded IPv4.
pub fn classify(ip: IpAddr, extra: &[IpNet]) -> AddrClass {
    let ip = ip.to_canonical();
    let embedded = match ip {
        IpAddr::V6(v6) => embedded_v4(v6),
        IpAddr::V4(_) => None,
    };
    let in_extra = |ip: IpAddr| extra.iter().any(|net| net.contains(&ip));
    if in_extra(ip) || embedded.is_some_and(|v4| in_extra(IpAddr::V4(v4))) {
        return AddrClass::Configured;
    }
    match (ip, embedded) {
        (IpAddr::V4(v4), _) => classify_v4(v4),
        (IpAddr::V6(_), Some(v4)) => classify_v4(v4),
        (IpAddr::V6(v6), None) => classify_v6(v6),
    }
}

/// `ip` in the one form the proxy compares addresses in: IPv4-mapped (`::ffff:a.b.c.d`), NAT64
/// (`64:ff9b::/96`) and 6to4 (`2002::/16`) addresses as the IPv4 address they carry, since
/// that is what a connection to them reaches (through the translator); the rest unchanged.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The IPv4 address a NAT64 (`64:ff9b::/96`) or 6to4 (`2002::/16`) address carries. (Mapped
/// addresses are canonicalised before this.)
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let o = ip.octets();
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    None
}

fn classify_v4(ip: Ipv4Addr) -> AddrClass {
    let [a, b, c, _] = ip.octets();
    if ip.is_broadcast() {
        AddrClass::Broadcast
    } else if ip.is_loopback() {
        AddrClass::Loopback
    } else if a == 0 {
        AddrClass::Unspecified
    } else if ip.is_private() {
        AddrClass::Private
    } else if a == 100 && (b & 0xc0) == 64 {
        AddrClass::SharedNat
    } else if ip.is_link_local() {
        AddrClass::LinkLocal
    } else if ip.is_documentation() {
        AddrClass::Documentation
    } else if a == 198 && (b & 0xfe) == 18 {
        AddrClass::Benchmarking
    } else if ip.is_multicast() {
        AddrClass::Multicast
    } else if a >= 240 || (a, b, c) == (192, 0, 0) || (a, b, c) == (192, 88, 99) {
        AddrClass::Reserved
    } else {
        AddrClass::Public
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddrClass {
    let s = ip.segments();
    if ip.is_loopback() {
        AddrClass::Loopback
    } else if ip.is_unspecified() {
        AddrClass::Unspecified
    } else if ip.is_multicast() {
        AddrClass::Multicast
    } else if ip.is_unicast_link_local() {
        AddrClass::LinkLocal
    } else if (s[0] & 0xffc0) == 0xfec0 {
        AddrClass::Private
    } else if ip.is_unique_local() {
        AddrClass::UniqueLocal
    } else if (s[0], s[1]) == (0x2001, 0x0db8) || (s[0] == 0x3fff && s[1] < 0x1000) {
        AddrClass::Documentation
    } else if (s[0], s[1], s[2]) == (0x2001, 0x0002, 0) {
        AddrClass::Benchmarking
    } else if (s[0] & 0xe000) != 0x2000
        || (s[0], s[1]) == (0x2001, 0)
        || (s[0] == 0x2001 && matches!(s[1] & 0xfff0, 0x0010 | 0x0020))
    {
        // Outside global unicast 2000::/3; Teredo 2001::/32; ORCHID 2001:10::/28, 2001:20::/28.
        AddrClass::Reserved
    } else {
        AddrClass::Public
    }
}
