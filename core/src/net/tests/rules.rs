//! `HostRule`: the parse table (canonical text of good forms, messages of bad ones) and matching.

use pretty_assertions::assert_eq;

use crate::net::rules::{HostRule, Target};

fn rule(entry: &str) -> HostRule {
    match HostRule::parse(entry) {
        Ok(rule) => rule,
        Err(err) => panic!("{entry}: {err}"),
    }
}

#[test]
fn good_forms_parse_to_their_canonical_text() {
    let table = [
        ("example.com", "example.com"),
        ("Example.COM.", "example.com"),
        ("example.com:443", "example.com:443"),
        ("*.example.com", "*.example.com"),
        ("*.Example.com:8443", "*.example.com:8443"),
        ("localhost:8080", "localhost:8080"),
        ("my_host.internal", "my_host.internal"),
        ("10.1.2.3", "10.1.2.3"),
        ("10.1.2.3:80", "10.1.2.3:80"),
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("10.1.2.3/8", "10.0.0.0/8"),
        ("10.0.0.0/8:443", "10.0.0.0/8:443"),
        ("::1", "[::1]"),
        ("[::1]", "[::1]"),
        ("[::1]:8080", "[::1]:8080"),
        ("[FD00::1]", "[fd00::1]"),
        ("fd00::/8", "[fd00::]/8"),
        ("[fd00::]/8", "[fd00::]/8"),
        ("[fd00::/8]", "[fd00::]/8"),
        ("[fd00::]/8:443", "[fd00::]/8:443"),
        ("[fd00::/8]:443", "[fd00::]/8:443"),
        ("::ffff:10.0.0.1", "10.0.0.1"),
        ("[::ffff:10.0.0.0]/104", "10.0.0.0/8"),
    ];
    let got: Vec<(&str, String)> = table
        .iter()
        .map(|(entry, _)| (*entry, rule(entry).to_string()))
        .collect();
    let want: Vec<(&str, String)> = table.iter().map(|(e, c)| (*e, c.to_string())).collect();
    assert_eq!(got, want);
    for (_, canonical) in table {
        assert_eq!(rule(canonical).to_string(), canonical, "round trip");
    }
}

#[test]
fn bad_forms_say_what_is_wrong_and_the_accepted_forms() {
    let table = [
        ("", "it is empty"),
        ("exa mple.com", "it contains ' '"),
        ("https://example.com", "give a host, not a URL (no scheme)"),
        ("example.com/path", "'example.com/path' is not a CIDR range"),
        (
            "example.com:0",
            "port 0 is not a port a tool can connect to",
        ),
        ("example.com:http", "'http' is not a port (1-65535)"),
        ("example.com:70000", "'70000' is not a port (1-65535)"),
        ("example.com:", "'' is not a port (1-65535)"),
        (
            "foo.*.com",
            "a wildcard is only allowed as the whole first label",
        ),
        ("*", "a wildcard is only allowed as the whole first label"),
        ("*.com", "would match a whole top-level domain"),
        ("a..b", "has an empty label (two dots in a row)"),
        ("-a.com", "has a label starting or ending with '-'"),
        (
            "bücher.de",
            "write an internationalised name in its xn-- (punycode) form",
        ),
        ("user@example.com", "give a host, no user name"),
        ("127.1", "is a numeric IPv4 form, not a dotted address"),
        ("2130706433", "is a numeric IPv4 form, not a dotted address"),
        ("0x7f.1", "is a numeric IPv4 form, not a dotted address"),
        ("10.0.0.0/33", "'10.0.0.0/33' is not a CIDR range"),
        ("[10.0.0.1]", "brackets are for IPv6 addresses"),
        ("[::1", "'[' without its closing ']'"),
        ("[::1]x", "unexpected 'x' after ']'"),
        ("[::1]:99999", "'99999' is not a port"),
        ("[::1/64]/64", "two prefix lengths"),
        ("[zz::1]", "'zz::1' is not an IP address"),
    ];
    for (entry, problem) in table {
        let err = match HostRule::parse(entry) {
            Ok(rule) => panic!("{entry:?} parsed as {rule}"),
            Err(err) => err.to_string(),
        };
        assert!(
            err.starts_with(&format!("bad --allow-host '{entry}': ")),
            "{entry:?}: {err}"
        );
        assert!(err.contains(problem), "{entry:?}: {err}");
        assert!(
            err.ends_with(
                "use HOST, *.HOST, HOST:PORT, an IP, [IPv6] or a CIDR (10.0.0.0/8, [fd00::]/8), \
                 each with an optional :PORT"
            ),
            "{entry:?}: {err}"
        );
    }
}

fn target(host: &str) -> Target {
    match Target::parse(host) {
        Ok(target) => target,
        Err(problem) => panic!("{host}: {problem}"),
    }
}

/// Which of `hosts` (host, port) the rule matches.
fn matching(entry: &str, hosts: &[(&str, u16)]) -> Vec<String> {
    let rule = rule(entry);
    hosts
        .iter()
        .filter(|(host, port)| rule.matches(&target(host), *port))
        .map(|(host, port)| format!("{host}:{port}"))
        .collect()
}

#[test]
fn names_match_exactly_with_case_and_trailing_dot_normalised() {
    let hosts = [
        ("example.com", 443),
        ("EXAMPLE.com.", 80),
        ("www.example.com", 443),
        ("example.com.evil", 443),
        ("notexample.com", 443),
    ];
    assert_eq!(
        matching("example.com", &hosts),
        ["example.com:443", "EXAMPLE.com.:80"]
    );
    assert_eq!(matching("example.com:443", &hosts), ["example.com:443"]);
}

#[test]
fn wildcards_match_subdomains_at_any_depth_but_not_the_apex() {
    let hosts = [
        ("example.com", 443),
        ("www.example.com", 443),
        ("a.b.example.com", 8443),
        ("WWW.Example.Com.", 443),
        ("wwwexample.com", 443),
        ("www.example.com.evil", 443),
    ];
    assert_eq!(
        matching("*.example.com", &hosts),
        [
            "www.example.com:443",
            "a.b.example.com:8443",
            "WWW.Example.Com.:443"
        ]
    );
    assert_eq!(
        matching("*.example.com:443", &hosts),
        ["www.example.com:443", "WWW.Example.Com.:443"]
    );
}

#[test]
fn ip_and_cidr_rules_match_ip_literals_only() {
    let hosts = [
        ("10.1.2.3", 80),
        ("10.9.9.9", 443),
        ("11.0.0.1", 80),
        ("::ffff:10.1.2.3", 80),
        ("[::1]", 8080),
        ("::1", 9090),
        ("[FD00::5]", 443),
        ("ten.example", 80),
    ];
    assert_eq!(
        matching("10.1.2.3", &hosts),
        ["10.1.2.3:80", "::ffff:10.1.2.3:80"]
    );
    assert_eq!(
        matching("10.0.0.0/8", &hosts),
        ["10.1.2.3:80", "10.9.9.9:443", "::ffff:10.1.2.3:80"]
    );
    assert_eq!(matching("[::1]:8080", &hosts), ["[::1]:8080"]);
    assert_eq!(matching("::1", &hosts), ["[::1]:8080", "::1:9090"]);
    assert_eq!(matching("[fd00::]/8:443", &hosts), ["[FD00::5]:443"]);
}

#[test]
fn client_hosts_are_normalised_or_refused() {
    assert_eq!(target("Example.COM."), Target::Name("example.com".into()));
    assert_eq!(target("[::1]"), Target::Ip("::1".parse().unwrap()));
    assert_eq!(
        target("::ffff:127.0.0.1"),
        Target::Ip([127, 0, 0, 1].into())
    );
    // Not strict IP literals: names, which the resolver turns into 127.0.0.1.
    assert_eq!(target("127.1"), Target::Name("127.1".into()));
    assert_eq!(target("2130706433"), Target::Name("2130706433".into()));
    for bad in ["", ".", "a b", "exa%mple.com", "fe80::1%eth0", "[::1"] {
        assert!(Target::parse(bad).is_err(), "{bad:?} was accepted");
    }
}
