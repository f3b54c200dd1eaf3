//! The SSRF guard's tables and rules, case by case.

use super::*;

use crate::policy::cidr::tests::{cidr, ip};

/// Every refused range in the contract: first, last and a middle address, and the name the
/// operator will see.
const REFUSED: &[(&str, &str)] = &[
    ("0.0.0.0", "0.0.0.0/8 (this network)"),
    ("0.1.2.3", "0.0.0.0/8 (this network)"),
    ("0.255.255.255", "0.0.0.0/8 (this network)"),
    ("10.0.0.0", "10.0.0.0/8 (private)"),
    ("10.1.2.3", "10.0.0.0/8 (private)"),
    ("10.255.255.255", "10.0.0.0/8 (private)"),
    ("100.64.0.0", "100.64.0.0/10 (carrier-grade NAT)"),
    ("100.100.1.1", "100.64.0.0/10 (carrier-grade NAT)"),
    ("100.127.255.255", "100.64.0.0/10 (carrier-grade NAT)"),
    ("127.0.0.0", "127.0.0.0/8 (loopback)"),
    ("127.0.0.1", "127.0.0.0/8 (loopback)"),
    ("127.255.255.255", "127.0.0.0/8 (loopback)"),
    ("169.254.0.0", "169.254.0.0/16 (link-local)"),
    ("169.254.1.1", "169.254.0.0/16 (link-local)"),
    ("169.254.255.255", "169.254.0.0/16 (link-local)"),
    ("169.254.169.254", "169.254.169.254/32 (cloud metadata)"),
    ("172.16.0.0", "172.16.0.0/12 (private)"),
    ("172.20.1.1", "172.16.0.0/12 (private)"),
    ("172.31.255.255", "172.16.0.0/12 (private)"),
    ("192.0.0.0", "192.0.0.0/24 (IETF protocol assignments)"),
    ("192.0.0.8", "192.0.0.0/24 (IETF protocol assignments)"),
    ("192.0.0.255", "192.0.0.0/24 (IETF protocol assignments)"),
    ("192.0.2.0", "192.0.2.0/24 (documentation)"),
    ("192.0.2.1", "192.0.2.0/24 (documentation)"),
    ("192.0.2.255", "192.0.2.0/24 (documentation)"),
    ("192.88.99.0", "192.88.99.0/24 (6to4 relay anycast)"),
    ("192.88.99.1", "192.88.99.0/24 (6to4 relay anycast)"),
    ("192.88.99.255", "192.88.99.0/24 (6to4 relay anycast)"),
    ("192.168.0.0", "192.168.0.0/16 (private)"),
    ("192.168.1.1", "192.168.0.0/16 (private)"),
    ("192.168.255.255", "192.168.0.0/16 (private)"),
    ("198.18.0.0", "198.18.0.0/15 (benchmarking)"),
    ("198.18.200.1", "198.18.0.0/15 (benchmarking)"),
    ("198.19.255.255", "198.18.0.0/15 (benchmarking)"),
    ("198.51.100.0", "198.51.100.0/24 (documentation)"),
    ("198.51.100.7", "198.51.100.0/24 (documentation)"),
    ("198.51.100.255", "198.51.100.0/24 (documentation)"),
    ("203.0.113.0", "203.0.113.0/24 (documentation)"),
    ("203.0.113.9", "203.0.113.0/24 (documentation)"),
    ("203.0.113.255", "203.0.113.0/24 (documentation)"),
    ("224.0.0.0", "224.0.0.0/4 (multicast)"),
    ("230.1.2.3", "224.0.0.0/4 (multicast)"),
    ("239.255.255.255", "224.0.0.0/4 (multicast)"),
    ("240.0.0.0", "240.0.0.0/4 (reserved)"),
    ("250.1.2.3", "240.0.0.0/4 (reserved)"),
    ("255.255.255.254", "240.0.0.0/4 (reserved)"),
    ("255.255.255.255", "255.255.255.255/32 (broadcast)"),
    ("::", "::/128 (unspecified)"),
    ("::1", "::1/128 (loopback)"),
    ("fe80::", "fe80::/10 (link-local)"),
    ("fe80::1", "fe80::/10 (link-local)"),
    (
        "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        "fe80::/10 (link-local)",
    ),
    ("fc00::", "fc00::/7 (unique local)"),
    ("fd12:3456::1", "fc00::/7 (unique local)"),
    (
        "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        "fc00::/7 (unique local)",
    ),
    ("fd00:ec2::254", "fd00:ec2::254/128 (cloud metadata)"),
    ("ff00::", "ff00::/8 (multicast)"),
    ("ff02::1", "ff00::/8 (multicast)"),
    (
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        "ff00::/8 (multicast)",
    ),
    ("2001:db8::", "2001:db8::/32 (documentation)"),
    ("2001:db8::1", "2001:db8::/32 (documentation)"),
    (
        "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
        "2001:db8::/32 (documentation)",
    ),
    ("100::", "100::/64 (discard-only)"),
    ("100::1", "100::/64 (discard-only)"),
    ("100::ffff:ffff:ffff:ffff", "100::/64 (discard-only)"),
    ("fec0::", "fec0::/10 (site-local)"),
    ("fec0::1", "fec0::/10 (site-local)"),
    (
        "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        "fec0::/10 (site-local)",
    ),
    ("2001::", "2001::/32 (Teredo)"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001::/32 (Teredo)"),
    ("2001:0:ffff:ffff:ffff:ffff:ffff:ffff", "2001::/32 (Teredo)"),
    // Local-use NAT64 carrying a public IPv4 address is refused as a range of its own.
    ("64:ff9b:1::808:808", "64:ff9b:1::/48 (local-use NAT64)"),
    (
        "64:ff9b:1:ffff:ffff:ffff:101:101",
        "64:ff9b:1::/48 (local-use NAT64)",
    ),
];

/// IPv6 forms embedding a refused IPv4 address: refused under the IPv4 range's name.
const EMBEDDED_REFUSED: &[(&str, &str)] = &[
    ("::ffff:127.0.0.1", "127.0.0.0/8 (loopback)"),
    ("::ffff:10.0.0.1", "10.0.0.0/8 (private)"),
    (
        "::ffff:169.254.169.254",
        "169.254.169.254/32 (cloud metadata)",
    ),
    ("::ffff:0.0.0.0", "0.0.0.0/8 (this network)"),
    ("::ffff:255.255.255.255", "255.255.255.255/32 (broadcast)"),
    ("::ffff:7f00:1", "127.0.0.0/8 (loopback)"),
    ("::ffff:0:127.0.0.1", "127.0.0.0/8 (loopback)"),
    (
        "::ffff:0:169.254.169.254",
        "169.254.169.254/32 (cloud metadata)",
    ),
    ("::169.254.169.254", "169.254.169.254/32 (cloud metadata)"),
    ("2002:a9fe:a9fe::", "169.254.169.254/32 (cloud metadata)"),
    ("::127.0.0.1", "127.0.0.0/8 (loopback)"),
    ("::10.0.0.1", "10.0.0.0/8 (private)"),
    ("2002:7f00:1::", "127.0.0.0/8 (loopback)"),
    ("2002:a00:1::", "10.0.0.0/8 (private)"),
    (
        "2002:a9fe:a9fe:1:2:3:4:5",
        "169.254.169.254/32 (cloud metadata)",
    ),
    ("64:ff9b::a00:1", "10.0.0.0/8 (private)"),
    ("64:ff9b::7f00:1", "127.0.0.0/8 (loopback)"),
    ("64:ff9b::c0a8:101", "192.168.0.0/16 (private)"),
    ("64:ff9b:1::", "0.0.0.0/8 (this network)"),
    (
        "64:ff9b:1:ffff:ffff:ffff:ffff:ffff",
        "255.255.255.255/32 (broadcast)",
    ),
    ("64:ff9b:1::a00:1", "10.0.0.0/8 (private)"),
    ("64:ff9b:1::7f00:1", "127.0.0.0/8 (loopback)"),
    (
        "64:ff9b:1::a9fe:a9fe",
        "169.254.169.254/32 (cloud metadata)",
    ),
    (
        "64:ff9b:1:abcd:1:2:a9fe:a9fe",
        "169.254.169.254/32 (cloud metadata)",
    ),
];

/// Public addresses, including the neighbours just outside refused ranges, and embedded
/// forms of public IPv4 addresses.
const ALLOWED: &[&str] = &[
    "8.8.8.8",
    "1.1.1.1",
    "1.0.0.0",
    "9.255.255.255",
    "11.0.0.0",
    "100.63.255.255",
    "100.128.0.0",
    "126.255.255.255",
    "128.0.0.0",
    "169.253.255.255",
    "169.255.0.0",
    "172.15.255.255",
    "172.32.0.0",
    "192.0.1.1",
    "192.0.3.0",
    "192.167.255.255",
    "192.169.0.0",
    "198.17.255.255",
    "198.20.0.0",
    "223.255.255.255",
    "2606:4700:4700::1111",
    "2001:4860:4860::8888",
    "2001:db9::1",
    "fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
    "fb00::1",
    "2001:1::1",
    "64:ff9b:2::1",
    "::ffff:0:8.8.8.8",
    "100:0:0:1::",
    "::ffff:8.8.8.8",
    "::8.8.8.8",
    "2002:808:808::",
    "2002:808:808:1:2:3:4:5",
    "64:ff9b::808:808",
    "64:ff9b::1.1.1.1",
];

#[test]
fn refused_ranges_are_refused_with_their_name() {
    for &(addr, name) in REFUSED.iter().chain(EMBEDDED_REFUSED) {
        assert_eq!(refused_range(ip(addr)), Some(name), "{addr}");
        let expected = Refused {
            addr: ip(addr),
            range: name,
        };
        assert_eq!(Guard::default().check(ip(addr)), Err(expected), "{addr}");
    }
}

#[test]
fn public_addresses_pass() {
    for &addr in ALLOWED {
        assert_eq!(refused_range(ip(addr)), None, "{addr}");
        assert_eq!(Guard::default().check(ip(addr)), Ok(()), "{addr}");
    }
}

/// Every IPv4 table entry, reached through every embedding form, is still refused, under the
/// same name as the plain IPv4 address.
#[test]
fn every_refused_v4_range_is_refused_when_embedded() {
    for &(net, len, _) in REFUSED_V4 {
        let first = u32::from(net);
        let last = first | !v4_mask(len);
        for v4 in [first, last].map(Ipv4Addr::from) {
            // Not necessarily this entry's name: the last address of 240/4 is the broadcast.
            let name = refused_range(IpAddr::V4(v4));
            assert!(name.is_some(), "{v4}");
            let [a, b, c, d] = v4.octets();
            let hi = u16::from_be_bytes([a, b]);
            let lo = u16::from_be_bytes([c, d]);
            let mapped = v4.to_ipv6_mapped();
            let six_to_four = Ipv6Addr::new(0x2002, hi, lo, 0, 0, 0, 0, 1);
            let nat64 = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, hi, lo);
            let translated = Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, hi, lo);
            let local_nat64 = Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, hi, lo);
            for v6 in [mapped, six_to_four, nat64, translated, local_nat64] {
                assert_eq!(refused_range(IpAddr::V6(v6)), name, "{v6} ({v4})");
            }
            // `::` and `::1` are named by their own IPv6 entries, so only require refusal.
            let compatible = Ipv6Addr::from(u128::from(u32::from(v4)));
            assert!(
                refused_range(IpAddr::V6(compatible)).is_some(),
                "{compatible}"
            );
            // No IPv6 allow-list entry lets the embedded address through (`::` and `::1`
            // are IPv6's own unspecified and loopback addresses, which ::/0 does allow).
            let everything_v6 = Guard::new(vec![cidr("::/0")]);
            for v6 in [
                mapped,
                six_to_four,
                nat64,
                translated,
                compatible,
                local_nat64,
            ] {
                if u128::from(v6) <= 1 {
                    continue;
                }
                assert!(everything_v6.check(IpAddr::V6(v6)).is_err(), "{v6} ({v4})");
            }
        }
    }
}

/// The tables read like the contract: each name spells its own range, with no host bits.
#[test]
fn table_names_match_their_ranges() {
    for &(net, len, name) in REFUSED_V4 {
        assert_eq!(u32::from(net) & !v4_mask(len), 0, "{name}");
        assert!(name.starts_with(&format!("{net}/{len} (")), "{name}");
    }
    for &(net, len, name) in REFUSED_V6 {
        assert_eq!(u128::from(net) & !v6_mask(len), 0, "{name}");
        assert!(name.starts_with(&format!("{net}/{len} (")), "{name}");
    }
}

#[test]
fn refused_message_names_address_and_range() {
    let err = Guard::default().check(ip("127.0.0.1"));
    let msg = err.map_err(|e| e.to_string());
    assert_eq!(
        msg,
        Err("address 127.0.0.1 is in the refused range 127.0.0.0/8 (loopback)".to_owned())
    );
    let err = Guard::default().check(ip("64:ff9b::a9fe:a9fe"));
    assert_eq!(
        err.map_err(|e| e.to_string()),
        Err("address 64:ff9b::a9fe:a9fe is in the refused range \
             169.254.169.254/32 (cloud metadata)"
            .to_owned())
    );
}

/// `(allow-list, address, expected refusal or None)`.
const ALLOW_LIST: &[(&[&str], &str, Option<&str>)] = &[
    // The contract's example.
    (&["127.0.0.0/8"], "127.0.0.1", None),
    (&["127.0.0.0/8"], "::ffff:127.0.0.1", None),
    (&["127.0.0.0/8"], "10.0.0.1", Some("10.0.0.0/8 (private)")),
    // The embedded IPv4 is judged as IPv4, with the IPv4 allow-list.
    (&["127.0.0.0/8"], "::127.0.0.1", None),
    (&["127.0.0.0/8"], "::ffff:0:127.0.0.1", None),
    (&["127.0.0.0/8"], "2002:7f00:1::", None),
    (&["127.0.0.0/8"], "64:ff9b::7f00:1", None),
    (
        &["127.0.0.0/8"],
        "::ffff:10.0.0.1",
        Some("10.0.0.0/8 (private)"),
    ),
    // IPv4 loopback does not imply IPv6 loopback.
    (&["127.0.0.0/8"], "::1", Some("::1/128 (loopback)")),
    (&["::1"], "::1", None),
    (&["::1"], "127.0.0.1", Some("127.0.0.0/8 (loopback)")),
    // Partial exemption: the rest of the range is still refused under its name.
    (&["10.1.0.0/16"], "10.1.2.3", None),
    (&["10.1.0.0/16"], "10.2.0.1", Some("10.0.0.0/8 (private)")),
    // The allow-list wins over the more specific metadata entries.
    (&["169.254.0.0/16"], "169.254.169.254", None),
    (&["fd00::/8"], "fd00:ec2::254", None),
    // An IPv6 spelling of an IPv4 range is read as that IPv4 range.
    (&["::ffff:127.0.0.0/104"], "127.0.0.1", None),
    (&["::ffff:127.0.0.0/104"], "::ffff:127.0.0.1", None),
    // An IPv6 range never lets a refused IPv4 address through, whatever embeds it.
    (&["2002::/16"], "2002:a00:1::", Some("10.0.0.0/8 (private)")),
    (&["::/0"], "fe80::1", None),
    (&["::/0"], "fec0::1", None),
    (&["::/0"], "10.0.0.1", Some("10.0.0.0/8 (private)")),
    (
        &["::/0"],
        "::ffff:169.254.169.254",
        Some("169.254.169.254/32 (cloud metadata)"),
    ),
    (
        &["::/0"],
        "::169.254.169.254",
        Some("169.254.169.254/32 (cloud metadata)"),
    ),
    (
        &["::/0"],
        "2002:a9fe:a9fe::",
        Some("169.254.169.254/32 (cloud metadata)"),
    ),
    (&["::/0"], "::ffff:7f00:1", Some("127.0.0.0/8 (loopback)")),
    (&["::/0"], "64:ff9b::a00:1", Some("10.0.0.0/8 (private)")),
    (
        &["::/0"],
        "64:ff9b:1::7f00:1",
        Some("127.0.0.0/8 (loopback)"),
    ),
    (
        &["::/0"],
        "64:ff9b:1::a9fe:a9fe",
        Some("169.254.169.254/32 (cloud metadata)"),
    ),
    // A public IPv4 address behind local-use NAT64 passes with an IPv6 allow entry only.
    (&["::/0"], "64:ff9b:1::808:808", None),
    (
        &["0.0.0.0/0"],
        "64:ff9b:1::808:808",
        Some("64:ff9b:1::/48 (local-use NAT64)"),
    ),
    (
        &["127.0.0.0/8"],
        "64:ff9b:1::7f00:1",
        Some("64:ff9b:1::/48 (local-use NAT64)"),
    ),
    (&["::/0"], "::1", None),
    (&["0.0.0.0/0"], "10.0.0.1", None),
    (&["0.0.0.0/0"], "fe80::1", Some("fe80::/10 (link-local)")),
    (&["192.168.0.0/16", "10.0.0.0/8"], "10.9.9.9", None),
    (
        &["192.168.0.0/16", "10.0.0.0/8"],
        "172.16.0.1",
        Some("172.16.0.0/12 (private)"),
    ),
    (&[], "8.8.8.8", None),
];

#[test]
fn allow_list_exempts_ranges() {
    for &(allow, addr, expected) in ALLOW_LIST {
        let guard = Guard::new(allow.iter().map(|s| cidr(s)).collect());
        let got = guard.check(ip(addr)).map_err(|e| e.range).err();
        assert_eq!(got, expected, "allow {allow:?}, address {addr}");
    }
}
