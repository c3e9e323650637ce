//! Address classes: a table of addresses, including the pitfalls measured on this machine
//! (v4-mapped loopback, NAT64 of the metadata address, `0.0.0.0`, AWS's IPv6 metadata address).

use std::net::IpAddr;

use ipnet::IpNet;
use pretty_assertions::assert_eq;

use crate::net::addr::{AddrClass, classify};

#[test]
fn addresses_are_classified_by_what_they_reach() {
    use AddrClass::*;
    let table = [
        ("8.8.8.8", Public),
        ("1.1.1.1", Public),
        ("2606:4700::1111", Public),
        ("2a00:1450:4001::200e", Public),
        ("127.0.0.1", Loopback),
        ("127.255.0.9", Loopback),
        ("::1", Loopback),
        ("::ffff:127.0.0.1", Loopback),
        ("0.0.0.0", Unspecified),
        ("0.1.2.3", Unspecified),
        ("::", Unspecified),
        ("10.255.255.53", Private),
        ("172.16.0.1", Private),
        ("172.31.255.255", Private),
        ("172.32.0.1", Public),
        ("192.168.1.1", Private),
        ("fec0::1", Private),
        ("100.64.0.1", SharedNat),
        ("100.127.255.255", SharedNat),
        ("100.128.0.1", Public),
        ("169.254.169.254", LinkLocal),
        ("fe80::1", LinkLocal),
        ("64:ff9b::a9fe:a9fe", LinkLocal),
        ("64:ff9b::7f00:1", Loopback),
        ("64:ff9b::808:808", Public),
        ("2002:a9fe:a9fe::1", LinkLocal),
        ("::ffff:169.254.169.254", LinkLocal),
        ("fd00:ec2::254", UniqueLocal),
        ("fc00::1", UniqueLocal),
        ("192.0.2.2", Documentation),
        ("198.51.100.7", Documentation),
        ("203.0.113.9", Documentation),
        ("2001:db8::1", Documentation),
        ("3fff::1", Documentation),
        ("198.18.0.1", Benchmarking),
        ("198.19.255.255", Benchmarking),
        ("2001:2::1", Benchmarking),
        ("255.255.255.255", Broadcast),
        ("224.0.0.1", Multicast),
        ("ff02::1", Multicast),
        ("240.0.0.1", Reserved),
        ("192.0.0.8", Reserved),
        ("2001::1", Reserved),
        ("64:ff9b:1::1", Reserved),
        ("::7f00:1", Reserved),
        ("100::1", Reserved),
    ];
    let got: Vec<(&str, AddrClass)> = table
        .iter()
        .map(|(ip, _)| (*ip, classify(ip.parse().unwrap(), &[])))
        .collect();
    assert_eq!(got, table.to_vec());
}

#[test]
fn configured_ranges_come_first_also_for_embedded_addresses() {
    let extra: Vec<IpNet> = vec!["8.8.0.0/16".parse().unwrap(), "2600::/16".parse().unwrap()];
    let class = |ip: &str| classify(ip.parse::<IpAddr>().unwrap(), &extra);
    assert_eq!(class("8.8.8.8"), AddrClass::Configured);
    assert_eq!(class("::ffff:8.8.8.8"), AddrClass::Configured);
    assert_eq!(class("64:ff9b::808:808"), AddrClass::Configured);
    assert_eq!(class("2600::1"), AddrClass::Configured);
    assert_eq!(class("9.9.9.9"), AddrClass::Public);
    assert!(!AddrClass::Configured.is_public());
}

#[test]
fn the_metadata_address_is_described_as_such() {
    assert_eq!(
        classify([169, 254, 169, 254].into(), &[]).to_string(),
        "link-local (where cloud metadata services live)"
    );
}
