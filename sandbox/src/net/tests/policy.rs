//! Decisions with a fake resolver: no lookup for unlisted names, rebinding to private addresses,
//! glibc's numeric forms, protected endpoints and lookup errors.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use pretty_assertions::assert_eq;

use crate::net::{
    BoxFuture, NetError, NetGuard, NetPolicy, ProtectedHost, ProtectedHosts, Refusal, RefusalKind,
    Resolve,
};

/// A resolver answering from a table, recording every name it was asked for.
#[derive(Default)]
pub(super) struct FakeResolver {
    table: HashMap<String, Vec<&'static str>>,
    pub(super) asked: Mutex<Vec<String>>,
}

impl FakeResolver {
    pub(super) fn with(entries: &[(&str, &[&'static str])]) -> FakeResolver {
        FakeResolver {
            table: entries
                .iter()
                .map(|(host, ips)| (host.to_string(), ips.to_vec()))
                .collect(),
            asked: Mutex::default(),
        }
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl Resolve for FakeResolver {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        self.asked.lock().unwrap().push(host.to_owned());
        let answer = match self.table.get(host) {
            Some(ips) => Ok(ips
                .iter()
                .map(|ip| SocketAddr::new(ip.parse().unwrap(), port))
                .collect()),
            None => Err(io::Error::other("failed to lookup address information")),
        };
        Box::pin(async move { answer })
    }
}

fn guard() -> Arc<NetGuard> {
    Arc::new(NetGuard {
        protected: vec![(
            "0.0.0.0:9464".parse().unwrap(),
            "the worker's metrics port".to_owned(),
        )],
        protected_hosts: ProtectedHosts::new(vec![ProtectedHost {
            ip: "127.0.0.1".parse().unwrap(),
            port: 7233,
            what: "the worker's Temporal frontend".to_owned(),
        }]),
        private_ranges: vec!["203.0.0.0/16".parse().unwrap()],
        // A public address of this host.
        local_addrs: vec!["198.100.7.7".parse().unwrap()],
    })
}

fn policy(hosts: &[&str]) -> NetPolicy {
    let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    NetPolicy::new(&hosts, guard()).unwrap()
}

/// A policy under a guard without a frontend (only the private ranges).
fn unguarded(hosts: &[&str]) -> NetPolicy {
    let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    let guard = NetGuard {
        private_ranges: guard().private_ranges.clone(),
        ..NetGuard::default()
    };
    NetPolicy::new(&hosts, Arc::new(guard)).unwrap()
}

fn resolver() -> FakeResolver {
    FakeResolver::with(&[
        (
            "example.com",
            &["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"],
        ),
        ("www.example.com", &["93.184.215.14"]),
        ("evil.test", &["127.0.0.1"]),
        ("app.evil.test", &["127.0.0.1"]),
        ("127.1", &["127.0.0.1"]),
        ("2130706433", &["127.0.0.1"]),
        ("mixed.test", &["10.0.0.1", "8.8.8.8"]),
        ("frontend.test", &["127.0.0.1"]),
        ("localhost", &["127.0.0.1"]),
        ("meta.example", &["169.254.169.254"]),
        ("mirror.example", &["10.0.0.9", "93.184.215.14"]),
        ("cluster.test", &["203.0.9.9"]),
        ("nat64.test", &["64:ff9b::a9fe:a9fe"]),
    ])
}

async fn decide(policy: &NetPolicy, host: &str, port: u16) -> Result<String, Refusal> {
    policy
        .decide(host, port, &resolver())
        .await
        .map(|addr| addr.to_string())
}

async fn refusal(policy: &NetPolicy, host: &str, port: u16) -> (RefusalKind, String) {
    match decide(policy, host, port).await {
        Ok(addr) => panic!("{host}:{port} was allowed ({addr})"),
        Err(refusal) => (refusal.kind, refusal.reason),
    }
}

#[tokio::test]
async fn any_public_mode_allows_public_hosts_and_refuses_the_rest() {
    let any = policy(&[]);
    assert_eq!(
        decide(&any, "example.com", 443).await.unwrap(),
        "93.184.215.14:443"
    );
    assert_eq!(decide(&any, "8.8.8.8", 53).await.unwrap(), "8.8.8.8:53");
    assert_eq!(
        decide(&any, "[2606:4700::1111]", 443).await.unwrap(),
        "[2606:4700::1111]:443"
    );
    // The first permitted address wins: 10.0.0.1 is skipped.
    assert_eq!(decide(&any, "mixed.test", 80).await.unwrap(), "8.8.8.8:80");
    let (kind, reason) = refusal(&any, "169.254.169.254", 80).await;
    assert_eq!(kind, RefusalKind::Private);
    assert!(
        reason.starts_with("169.254.169.254 is link-local (where cloud metadata services live)"),
        "{reason}"
    );
    assert!(reason.contains("reaches public hosts only"), "{reason}");
    for (host, class) in [
        ("::ffff:169.254.169.254", "link-local"),
        ("nat64.test", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("[fd00:ec2::254]", "unique local"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("10.255.255.53", "a private address"),
        ("cluster.test", "the worker's private ranges"),
    ] {
        let (kind, reason) = refusal(&any, host, 80).await;
        assert_eq!(kind, RefusalKind::Private, "{host}");
        assert!(reason.contains(class), "{host}: {reason}");
    }
}

#[tokio::test]
async fn rebinding_to_loopback_is_refused_even_when_the_name_is_listed() {
    let (kind, reason) = refusal(&policy(&[]), "evil.test", 80).await;
    assert_eq!(kind, RefusalKind::Private);
    assert!(
        reason.starts_with("evil.test resolves to 127.0.0.1, which is loopback (this host)"),
        "{reason}"
    );
    let wildcard = policy(&["*.evil.test"]);
    let (kind, reason) = refusal(&wildcard, "app.evil.test", 80).await;
    assert_eq!(kind, RefusalKind::Private);
    assert!(
        reason.contains("a host name never opens a non-public address"),
        "{reason}"
    );
    let (kind, _) = refusal(&unguarded(&["evil.test"]), "evil.test", 80).await;
    assert_eq!(kind, RefusalKind::Private);
    assert_eq!(
        decide(&unguarded(&["evil.test", "127.0.0.1:80"]), "evil.test", 80)
            .await
            .unwrap(),
        "127.0.0.1:80"
    );
    assert_eq!(
        decide(&unguarded(&["127.0.0.0/8:80"]), "127.0.0.1", 80)
            .await
            .unwrap(),
        "127.0.0.1:80"
    );
}

/// The review's held-out case (#13): an exact host name on the list (or approved by a human
/// through `baton.allow_host`, which adds such an entry) does not open a non-public address
/// because the name resolves there; a rule naming the address does.
#[tokio::test]
async fn a_listed_name_does_not_open_the_non_public_addresses_it_resolves_to() {
    for rules in [
        &["meta.example:80"][..],
        &["meta.example"],
        &["meta.example", "10.0.0.0/8"],
    ] {
        let (kind, reason) = refusal(&unguarded(rules), "meta.example", 80).await;
        assert_eq!(kind, RefusalKind::Private, "{rules:?}");
        assert_eq!(
            reason,
            "meta.example resolves to 169.254.169.254, which is link-local (where cloud \
             metadata services live); a host name never opens a non-public address (whoever \
             runs its DNS can point it anywhere); only a rule naming the address does: add \
             --allow-host 169.254.169.254:80 (or a CIDR containing it)"
        );
    }
    // Its public addresses are the name's; the private one is skipped.
    assert_eq!(
        decide(&unguarded(&["mirror.example"]), "mirror.example", 443)
            .await
            .unwrap(),
        "93.184.215.14:443"
    );
    // A rule naming the address (and port) opens it, for the name too.
    for rules in [
        &["meta.example", "169.254.169.254:80"][..],
        &["meta.example:80", "169.254.0.0/16"],
    ] {
        assert_eq!(
            decide(&unguarded(rules), "meta.example", 80).await.unwrap(),
            "169.254.169.254:80",
            "{rules:?}"
        );
    }
    let (kind, _) = refusal(
        &unguarded(&["meta.example", "169.254.169.254:81"]),
        "meta.example",
        80,
    )
    .await;
    assert_eq!(kind, RefusalKind::Private);
    // `localhost` is the name of this host's loopback, not a name that resolves somewhere.
    assert_eq!(
        decide(&unguarded(&["localhost:8080"]), "localhost", 8080)
            .await
            .unwrap(),
        "127.0.0.1:8080"
    );
    let (kind, _) = refusal(&unguarded(&["localhost"]), "169.254.169.254", 80).await;
    assert_eq!(kind, RefusalKind::NotAllowed);
}

#[tokio::test]
async fn glibc_numeric_forms_are_classified_by_what_they_resolve_to() {
    let resolver = resolver();
    let any = policy(&[]);
    for host in ["127.1", "2130706433"] {
        let refused = any.decide(host, 80, &resolver).await.unwrap_err();
        assert_eq!(refused.kind, RefusalKind::Private, "{host}");
        assert!(
            refused.reason.contains("resolves to 127.0.0.1"),
            "{}",
            refused.reason
        );
    }
    assert_eq!(resolver.asked(), ["127.1", "2130706433"]);
}

#[tokio::test]
async fn unlisted_hosts_are_refused_without_a_lookup() {
    let resolver = resolver();
    let listed = policy(&["www.example.com:443", "10.0.0.0/8"]);
    for (host, port) in [
        ("example.com", 443),
        ("www.example.com", 80),
        ("evil.test", 443),
    ] {
        let refused = listed.decide(host, port, &resolver).await.unwrap_err();
        assert_eq!(refused.kind, RefusalKind::NotAllowed);
        assert_eq!(
            refused.reason,
            format!(
                "{host}:{port} is not on this run's allow list (--allow-host); submit with \
                 --allow-host HOST[:PORT] to allow it"
            )
        );
    }
    // A name is not compared with an IP rule: mixed.test resolves into 10/8 but is not listed.
    let refused = listed
        .decide("mixed.test", 80, &resolver)
        .await
        .unwrap_err();
    assert_eq!(refused.kind, RefusalKind::NotAllowed);
    assert!(
        resolver.asked().is_empty(),
        "looked up {:?}",
        resolver.asked()
    );
    assert_eq!(
        listed
            .decide("WWW.example.com.", 443, &resolver)
            .await
            .unwrap()
            .to_string(),
        "93.184.215.14:443"
    );
    assert_eq!(
        listed
            .decide("10.2.3.4", 22, &resolver)
            .await
            .unwrap()
            .to_string(),
        "10.2.3.4:22"
    );
    assert_eq!(resolver.asked(), ["www.example.com"]);
}

#[tokio::test]
async fn protected_endpoints_are_refused_even_when_a_rule_names_them() {
    let naming = policy(&["127.0.0.1", "0.0.0.0", "::1", "frontend.test", "10.0.0.0/8"]);
    for host in [
        "127.0.0.1",
        "0.0.0.0",
        "[::1]",
        "::ffff:127.0.0.1",
        "frontend.test",
    ] {
        let (kind, reason) = refusal(&naming, host, 7233).await;
        assert_eq!(kind, RefusalKind::Protected, "{host}");
        assert!(
            reason.contains("the worker's Temporal frontend (port 7233): tools may never reach it"),
            "{host}: {reason}"
        );
    }
    // 0.0.0.0:9464 protects the port on every non-public address, not on public ones.
    let (kind, _) = refusal(&naming, "10.1.1.1", 9464).await;
    assert_eq!(kind, RefusalKind::Protected);
    assert_eq!(
        decide(&policy(&[]), "8.8.8.8", 9464).await.unwrap(),
        "8.8.8.8:9464"
    );
    // This host's own public address is this host too.
    for port in [7233, 9464] {
        let (kind, _) = refusal(&policy(&["198.100.7.7"]), "198.100.7.7", port).await;
        assert_eq!(kind, RefusalKind::Protected, "{port}");
    }
    // ... and with the frontend on this host, so are its other ports, unless pinned.
    let (kind, _) = refusal(&policy(&[]), "198.100.7.7", 443).await;
    assert_eq!(kind, RefusalKind::Protected);
    assert_eq!(
        decide(&policy(&["198.100.7.7:443"]), "198.100.7.7", 443)
            .await
            .unwrap(),
        "198.100.7.7:443"
    );
    // Other ports of the frontend's host (this host: loopback, unspecified, its own addresses)
    // are protected too unless a rule names the address and port exactly.
    for (host, asked) in [
        ("127.0.0.1", "127.0.0.1"),
        ("0.0.0.0", "0.0.0.0"),
        ("[::1]", "[::1]"),
        ("frontend.test", "127.0.0.1"),
        ("198.100.7.7", "198.100.7.7"),
    ] {
        let all = policy(&[
            "127.0.0.1",
            "0.0.0.0",
            "::1",
            "frontend.test",
            "198.100.7.7",
        ]);
        let (kind, reason) = refusal(&all, host, 8080).await;
        assert_eq!(kind, RefusalKind::Protected, "{host}");
        assert!(
            reason.contains(&format!(
                "is port 8080 of the host of the worker's Temporal frontend, protected on every \
                 port unless a rule names the address and port exactly: submit with \
                 --allow-host {asked}:8080 to allow it"
            )),
            "{host}: {reason}"
        );
    }
    for (pin, host) in [
        ("127.0.0.1:8080", "127.0.0.1"),
        ("localhost:8080", "localhost"),
        ("127.0.0.1/32:8080", "127.0.0.1"),
    ] {
        assert_eq!(
            decide(&policy(&[pin]), host, 8080)
                .await
                .unwrap_or_else(|r| panic!("{pin}: {r}")),
            "127.0.0.1:8080",
            "{pin}"
        );
    }
    // A CIDR, another port or a name do not pin.
    for rules in [
        &["127.0.0.0/8:8080"][..],
        &["127.0.0.1:8081", "127.0.0.1"],
        &["frontend.test:8080", "127.0.0.1"],
    ] {
        let host = if rules[0].starts_with("frontend") {
            "frontend.test"
        } else {
            "127.0.0.1"
        };
        let (kind, _) = refusal(&policy(rules), host, 8080).await;
        assert_eq!(kind, RefusalKind::Protected, "{rules:?}");
    }
    // The Temporal ports of the host never open, not even to a rule naming them exactly.
    for port in [7243, 8233, 7234, 6933] {
        let (kind, reason) =
            refusal(&policy(&[&format!("127.0.0.1:{port}")]), "127.0.0.1", port).await;
        assert_eq!(kind, RefusalKind::Protected, "{port}");
        assert!(
            reason.contains(&format!(
                "a Temporal port ({port}) of the host of the worker's Temporal frontend: tools \
                 may never reach it"
            )),
            "{reason}"
        );
    }
    // Hosts that are not the frontend's are the rules' business.
    assert_eq!(
        decide(&naming, "10.1.1.1", 8080).await.unwrap(),
        "10.1.1.1:8080"
    );
}

/// The review's held-out case: a protected public address asked for in its NAT64 or 6to4 form
/// (a translator would connect to the IPv4 address it carries).
#[tokio::test]
async fn nat64_6to4_and_mapped_forms_of_a_protected_address_are_protected() {
    let exact = Arc::new(NetGuard {
        protected: vec![("8.8.8.8:7233".parse().unwrap(), "fe".to_owned())],
        ..NetGuard::default()
    });
    let host = Arc::new(NetGuard {
        protected_hosts: ProtectedHosts::new(vec![ProtectedHost {
            ip: "8.8.8.8".parse().unwrap(),
            port: 7233,
            what: "fe".to_owned(),
        }]),
        ..NetGuard::default()
    });
    for guard in [exact, host] {
        let any = NetPolicy::new(&[], guard.clone()).unwrap();
        for form in [
            "64:ff9b::808:808",
            "2002:808:808::1",
            "::ffff:8.8.8.8",
            "8.8.8.8",
        ] {
            let (kind, reason) = refusal(&any, form, 7233).await;
            assert_eq!(kind, RefusalKind::Protected, "{form}: {reason}");
            assert!(reason.contains("is fe (port 7233)"), "{form}: {reason}");
        }
        // The guard's own address may be written in such a form too.
        let nat64 = Arc::new(NetGuard {
            protected: vec![("[64:ff9b::808:808]:7233".parse().unwrap(), "fe".to_owned())],
            ..NetGuard::default()
        });
        let (kind, _) = refusal(&NetPolicy::new(&[], nat64).unwrap(), "8.8.8.8", 7233).await;
        assert_eq!(kind, RefusalKind::Protected);
        // Another public address on that port is not the frontend.
        assert_eq!(decide(&any, "8.8.4.4", 7233).await.unwrap(), "8.8.4.4:7233");
    }
}

/// The worker re-resolves the frontend's name and updates the hosts in place: a policy made
/// before the update refuses the new address, and the old one stays protected.
#[tokio::test]
async fn frontend_addresses_updated_in_place_reach_existing_policies() {
    let hosts = ProtectedHosts::new(vec![ProtectedHost {
        ip: "8.8.8.8".parse().unwrap(),
        port: 7233,
        what: "fe".to_owned(),
    }]);
    let guard = Arc::new(NetGuard {
        protected_hosts: hosts.clone(),
        ..NetGuard::default()
    });
    let any = NetPolicy::new(&[], guard).unwrap();
    assert_eq!(decide(&any, "1.1.1.1", 7233).await.unwrap(), "1.1.1.1:7233");
    let moved = ProtectedHost {
        ip: "1.1.1.1".parse().unwrap(),
        port: 7233,
        what: "fe".to_owned(),
    };
    assert!(hosts.update(vec![moved.clone()]));
    assert!(!hosts.update(vec![moved]), "nothing new");
    for host in ["1.1.1.1", "8.8.8.8"] {
        let (kind, _) = refusal(&any, host, 443).await;
        assert_eq!(kind, RefusalKind::Protected, "{host}");
    }
    assert_eq!(hosts.list().len(), 2);
}

#[tokio::test]
async fn lookup_errors_and_bad_hosts_are_refused_with_their_kind() {
    let any = policy(&[]);
    let (kind, reason) = refusal(&any, "no-such-host.invalid", 443).await;
    assert_eq!(kind, RefusalKind::Unresolved);
    assert_eq!(
        reason,
        "no-such-host.invalid could not be resolved: failed to lookup address information"
    );
    let (kind, reason) = refusal(&any, "exa mple.com", 443).await;
    assert_eq!(kind, RefusalKind::BadRequest);
    assert!(
        reason.starts_with("'exa mple.com' is not a host name or IP address"),
        "{reason}"
    );
}

#[test]
fn a_bad_entry_is_named_in_the_error() {
    let hosts = vec!["example.com".to_owned(), "exa mple.com".to_owned()];
    let err = NetPolicy::new(&hosts, guard()).unwrap_err();
    assert!(matches!(&err, NetError::BadHostRule { entry, .. } if entry == "exa mple.com"));
    assert!(
        err.to_string()
            .starts_with("bad --allow-host 'exa mple.com': it contains ' '")
    );
}

#[test]
fn refusal_targets_bracket_ipv6() {
    let refusal = Refusal::new("::1", 443, RefusalKind::NotAllowed, "no".to_owned());
    assert_eq!(refusal.to_string(), "[::1]:443: no");
    let refusal = Refusal::new("", 0, RefusalKind::BadRequest, "no".to_owned());
    assert_eq!(refusal.to_string(), "the request: no");
}
