//! SSRF guard: decides whether herald may open a connection to an IP address.
//!
//! This module owns the *policy*: the table of refused address ranges from the product contract,
//! the rules for IPv6 forms that embed an IPv4 address, and the operator's allow-list
//! (`delivery.allow_private_networks`, parsed into [`Cidr`]s).
//!
//! It must never do I/O or DNS itself. The caller resolves the host, passes *every* resolved
//! address through [`Guard::check`], and then connects to one of the addresses that passed —
//! never re-resolving the name, because a second lookup could return a different (internal)
//! address (DNS rebinding). Keeping this module pure makes the policy testable without a network.
//!
//! Odd literal notations (`0177.0.0.1`, `2130706433`, ...) are normalised by the `url` crate
//! before anything gets here; this module only classifies [`std::net::IpAddr`] values.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::cidr::{v4_in, v6_in};
#[cfg(test)]
use super::cidr::{v4_mask, v6_mask};
pub use super::cidr::{Cidr, CidrError};

/// Refused IPv4 ranges, as listed in the product contract: `(network, prefix length, name)`.
///
/// The name is what an operator sees in a delivery error, so it spells the range and says why.
/// Lookups pick the *longest* matching prefix, so the more specific entries (broadcast inside
/// 240/4, cloud metadata inside 169.254/16) give the more useful name regardless of order.
const REFUSED_V4: &[(Ipv4Addr, u8, &str)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8, "0.0.0.0/8 (this network)"),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "10.0.0.0/8 (private)"),
    (
        Ipv4Addr::new(100, 64, 0, 0),
        10,
        "100.64.0.0/10 (carrier-grade NAT)",
    ),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "127.0.0.0/8 (loopback)"),
    (
        Ipv4Addr::new(169, 254, 0, 0),
        16,
        "169.254.0.0/16 (link-local)",
    ),
    (
        Ipv4Addr::new(169, 254, 169, 254),
        32,
        "169.254.169.254/32 (cloud metadata)",
    ),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "172.16.0.0/12 (private)"),
    (
        Ipv4Addr::new(192, 0, 0, 0),
        24,
        "192.0.0.0/24 (IETF protocol assignments)",
    ),
    (
        Ipv4Addr::new(192, 0, 2, 0),
        24,
        "192.0.2.0/24 (documentation)",
    ),
    (
        Ipv4Addr::new(192, 88, 99, 0),
        24,
        "192.88.99.0/24 (6to4 relay anycast)",
    ),
    (
        Ipv4Addr::new(192, 168, 0, 0),
        16,
        "192.168.0.0/16 (private)",
    ),
    (
        Ipv4Addr::new(198, 18, 0, 0),
        15,
        "198.18.0.0/15 (benchmarking)",
    ),
    (
        Ipv4Addr::new(198, 51, 100, 0),
        24,
        "198.51.100.0/24 (documentation)",
    ),
    (
        Ipv4Addr::new(203, 0, 113, 0),
        24,
        "203.0.113.0/24 (documentation)",
    ),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "224.0.0.0/4 (multicast)"),
    (Ipv4Addr::new(240, 0, 0, 0), 4, "240.0.0.0/4 (reserved)"),
    (
        Ipv4Addr::new(255, 255, 255, 255),
        32,
        "255.255.255.255/32 (broadcast)",
    ),
];

/// Refused IPv6 ranges, as listed in the product contract: `(network, prefix length, name)`.
///
/// IPv6 forms that embed an IPv4 address are not listed here: they are refused or allowed
/// according to the IPv4 address they carry (see [`embedded_v4`]). The one exception is
/// local-use NAT64, judged by its IPv4 address first and then refused as a range of its own.
const REFUSED_V6: &[(Ipv6Addr, u8, &str)] = &[
    (
        Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0),
        128,
        "::/128 (unspecified)",
    ),
    (
        Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 1),
        128,
        "::1/128 (loopback)",
    ),
    (
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
        10,
        "fe80::/10 (link-local)",
    ),
    (
        Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
        7,
        "fc00::/7 (unique local)",
    ),
    (
        Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
        128,
        "fd00:ec2::254/128 (cloud metadata)",
    ),
    (
        Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0),
        8,
        "ff00::/8 (multicast)",
    ),
    (
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
        32,
        "2001:db8::/32 (documentation)",
    ),
    (
        Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0),
        64,
        "100::/64 (discard-only)",
    ),
    (
        Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0),
        10,
        "fec0::/10 (site-local)",
    ),
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        32,
        "2001::/32 (Teredo)",
    ),
    (
        Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0),
        48,
        "64:ff9b:1::/48 (local-use NAT64)",
    ),
];

/// Why an address is refused: names the range, e.g. "127.0.0.0/8 (loopback)".
///
/// For an IPv6 address that embeds a refused IPv4 address, `addr` is the IPv6 address as
/// resolved and `range` is the IPv4 range the embedded address falls in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("address {addr} is in the refused range {range}")]
pub struct Refused {
    pub addr: IpAddr,
    pub range: &'static str,
}

/// The guard: the refused table minus the operator's allow-list.
///
/// `Guard::default()` has an empty allow-list, i.e. the full contract applies.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    allow: Vec<Cidr>,
}

impl Guard {
    /// A guard that exempts the given ranges (`delivery.allow_private_networks`).
    pub fn new(allow: Vec<Cidr>) -> Self {
        Guard { allow }
    }

    /// Ok if the address may be connected to. An address in an allowed CIDR is Ok.
    ///
    /// An IPv6 form that embeds an IPv4 address (mapped, translated, compatible, 6to4, NAT64,
    /// local-use NAT64) is judged as that IPv4 address, against the IPv4 table and the IPv4
    /// entries of the allow-list: allowing `127.0.0.0/8` for local testing also allows
    /// `::ffff:127.0.0.1`, and allowing `::/0` lets no refused IPv4 address through. A
    /// local-use NAT64 address whose IPv4 address passes is then judged as IPv6 too.
    pub fn check(&self, ip: IpAddr) -> Result<(), Refused> {
        let allowed = |ip: IpAddr| self.allow.iter().any(|c| c.contains(ip));
        match classify(ip, &allowed) {
            None => Ok(()),
            Some(range) => Err(Refused { addr: ip, range }),
        }
    }
}

/// The pure classification without any allow-list: `Some(range name)` if refused.
pub fn refused_range(ip: IpAddr) -> Option<&'static str> {
    classify(ip, &|_| false)
}

/// The one place the policy is decided, shared by [`Guard::check`] and [`refused_range`] so the
/// two can never disagree.
fn classify(ip: IpAddr, allowed: &dyn Fn(IpAddr) -> bool) -> Option<&'static str> {
    let v6 = match ip {
        IpAddr::V4(v4) => return judge_v4(v4, allowed),
        IpAddr::V6(v6) => v6,
    };
    if let Some(v4) = embedded_v4(v6) {
        // An embedding IPv6 address is only as safe as the IPv4 address it carries, since the
        // OS, a 6to4 relay or a NAT64 gateway may deliver it there: it is that address, judged
        // with the IPv4 allow-list only, and named by the IPv4 range it falls in.
        let refused = judge_v4(v4, allowed);
        if refused.is_some() || !in_local_use_nat64(v6) {
            return refused;
        }
        // A local-use NAT64 prefix is also refused in its own right (its gateway sits inside
        // the network), so a public IPv4 address behind it still needs an IPv6 allow entry.
    }
    if allowed(ip) {
        return None;
    }
    lookup_v6(v6)
}

/// An IPv4 address against the allow-list and the IPv4 table.
fn judge_v4(v4: Ipv4Addr, allowed: &dyn Fn(IpAddr) -> bool) -> Option<&'static str> {
    if allowed(IpAddr::V4(v4)) {
        None
    } else {
        lookup_v4(v4)
    }
}

/// `64:ff9b:1::/48`, the local-use NAT64 prefix, whose IPv4 address sits in the last 32 bits.
fn in_local_use_nat64(ip: Ipv6Addr) -> bool {
    u128::from(ip) >> 80 == 0x0064_ff9b_0001
}

/// The IPv4 address carried by an IPv6 address, for the forms the contract names:
/// - IPv4-mapped `::ffff:a.b.c.d` (`::ffff:0:0/96`): how a dual-stack socket reaches IPv4;
/// - IPv4-translated `::ffff:0:a.b.c.d` (`::ffff:0:0:0/96`, SIIT);
/// - IPv4-compatible `::a.b.c.d` (first 96 bits zero, except `::` and `::1`, which are the
///   IPv6 unspecified and loopback addresses and judged as such): deprecated, but some stacks
///   still route it to the IPv4 address;
/// - 6to4 `2002:AABB:CCDD::/48` (`2002::/16`, IPv4 in bits 16..48): relayed to that IPv4 site;
/// - NAT64 `64:ff9b::a.b.c.d` (`64:ff9b::/96`, IPv4 in the last 32 bits): translated to it;
/// - local-use NAT64 `64:ff9b:1::/48`, IPv4 in the last 32 bits: translated to it by a
///   gateway of the local network.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    let low32 = Ipv4Addr::from(bits as u32);
    if let Some(mapped) = ip.to_ipv4_mapped() {
        return Some(mapped);
    }
    if in_local_use_nat64(ip) {
        return Some(low32);
    }
    match bits >> 32 {
        0 if bits > 1 => Some(low32),
        0xffff_0000 | 0x0064_ff9b_0000_0000_0000_0000 => Some(low32),
        _ if bits >> 112 == 0x2002 => Some(Ipv4Addr::from((bits >> 80) as u32)),
        _ => None,
    }
}

/// Longest-prefix match in the IPv4 table.
fn lookup_v4(ip: Ipv4Addr) -> Option<&'static str> {
    REFUSED_V4
        .iter()
        .filter(|(net, len, _)| v4_in(*net, *len, ip))
        .max_by_key(|(_, len, _)| *len)
        .map(|(_, _, name)| *name)
}

/// Longest-prefix match in the IPv6 table.
fn lookup_v6(ip: Ipv6Addr) -> Option<&'static str> {
    REFUSED_V6
        .iter()
        .filter(|(net, len, _)| v6_in(*net, *len, ip))
        .max_by_key(|(_, len, _)| *len)
        .map(|(_, _, name)| *name)
}

#[cfg(test)]
#[path = "ssrf_tests.rs"]
mod tests;
