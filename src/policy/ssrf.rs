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

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

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
/// according to the IPv4 address they carry (see [`embedded_v4`]).
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

/// A CIDR range such as `"127.0.0.0/8"`, `"::1/128"`, `"10.1.2.3"` (a bare address is a /32 or
/// /128).
///
/// Host bits are accepted and masked off on parse: `"10.1.2.3/8"` is the range `10.0.0.0/8`.
/// Operators often write an interface address with its prefix, and the range they mean is
/// unambiguous; [`Display`](fmt::Display) shows the canonical (masked) form so the log says what
/// was actually allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// The network address, host bits always zero.
    addr: IpAddr,
    /// Prefix length, at most 32 for IPv4 and 128 for IPv6.
    len: u8,
}

impl Cidr {
    /// Whether `ip` lies in this range. Families never mix: an IPv4 address is only in IPv4
    /// ranges (an IPv6 spelling of IPv4 ranges, `::ffff:a.b.c.d/n`, is read as the IPv4 range
    /// when parsed), and the guard judges an IPv6 address that embeds an IPv4 address as that
    /// IPv4 address, so allowing `::/0` never lets a refused IPv4 address through.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => v4_in(net, self.len, ip),
            (IpAddr::V6(net), IpAddr::V6(ip)) => v6_in(net, self.len, ip),
            _ => false,
        }
    }
}

/// Why a string is not a valid [`Cidr`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// The string was empty.
    #[error("empty CIDR: expected an address such as \"10.0.0.0/8\" or \"::1\"")]
    Empty,
    /// The part before the `/` is not an IPv4 or IPv6 address.
    #[error("invalid CIDR {input:?}: {addr:?} is not an IPv4 or IPv6 address")]
    BadAddress { input: String, addr: String },
    /// The part after the `/` is not a plain decimal number.
    #[error(
        "invalid CIDR {input:?}: prefix length {prefix:?} is not a plain decimal number \
         (0-32 for IPv4, 0-128 for IPv6)"
    )]
    BadPrefix { input: String, prefix: String },
    /// The prefix length is longer than the address.
    #[error(
        "invalid CIDR {input:?}: prefix length /{prefix} is longer than {max} bits ({family})"
    )]
    PrefixTooLong {
        input: String,
        prefix: String,
        max: u8,
        family: &'static str,
    },
}

impl FromStr for Cidr {
    type Err = CidrError;

    /// Parses `addr` or `addr/len`. Strict on purpose — this is security configuration, so
    /// anything unusual is an error rather than a guess: no surrounding whitespace, no zone id
    /// (`%eth0`), no sign or leading zero in the prefix length.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(CidrError::Empty);
        }
        let (addr_str, prefix_str) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr_str.parse().map_err(|_| CidrError::BadAddress {
            input: s.to_owned(),
            addr: addr_str.to_owned(),
        })?;
        let (max, family) = match addr {
            IpAddr::V4(_) => (32u8, "IPv4"),
            IpAddr::V6(_) => (128u8, "IPv6"),
        };
        let len = match prefix_str {
            None => max,
            Some(p) => {
                let bad = || CidrError::BadPrefix {
                    input: s.to_owned(),
                    prefix: p.to_owned(),
                };
                // `u32::from_str` would accept "+8"; insist on plain digits, and no leading zero
                // so a prefix never looks like it might be read in another base.
                if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                if p.len() > 1 && p.starts_with('0') {
                    return Err(bad());
                }
                // All digits: anything that does not fit in a u8 is certainly too long.
                match p.parse::<u8>() {
                    Ok(len) if len <= max => len,
                    _ => {
                        return Err(CidrError::PrefixTooLong {
                            input: s.to_owned(),
                            prefix: p.to_owned(),
                            max,
                            family,
                        })
                    }
                }
            }
        };
        // `::ffff:a.b.c.d/n` (n >= 96) spells an IPv4 range: it is read as that range.
        let (addr, len) = match addr {
            IpAddr::V6(a) if len >= 96 && a.to_ipv4_mapped().is_some() => {
                (IpAddr::V4(Ipv4Addr::from(u128::from(a) as u32)), len - 96)
            }
            other => (other, len),
        };
        let addr = match addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & v4_mask(len))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & v6_mask(len))),
        };
        Ok(Cidr { addr, len })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

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
    /// An IPv6 form that embeds an IPv4 address (mapped, translated, compatible, 6to4, NAT64)
    /// is judged as that IPv4 address alone, against the IPv4 table and the IPv4 entries of the
    /// allow-list: allowing `127.0.0.0/8` for local testing also allows `::ffff:127.0.0.1`, and
    /// allowing `::/0` lets no refused IPv4 address through.
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
    let judged = match ip {
        // An embedding IPv6 address is only as safe as the IPv4 address it carries, since the
        // OS, a 6to4 relay or a NAT64 gateway may deliver it there: it is that address.
        IpAddr::V6(v6) => embedded_v4(v6).map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    };
    if allowed(judged) {
        return None;
    }
    match judged {
        IpAddr::V4(v4) => lookup_v4(v4),
        IpAddr::V6(v6) => lookup_v6(v6),
    }
}

/// The IPv4 address carried by an IPv6 address, for the forms the contract names:
/// - IPv4-mapped `::ffff:a.b.c.d` (`::ffff:0:0/96`): how a dual-stack socket reaches IPv4;
/// - IPv4-translated `::ffff:0:a.b.c.d` (`::ffff:0:0:0/96`, SIIT);
/// - IPv4-compatible `::a.b.c.d` (first 96 bits zero, except `::` and `::1`, which are the
///   IPv6 unspecified and loopback addresses and judged as such): deprecated, but some stacks
///   still route it to the IPv4 address;
/// - 6to4 `2002:AABB:CCDD::/48` (`2002::/16`, IPv4 in bits 16..48): relayed to that IPv4 site;
/// - NAT64 `64:ff9b::a.b.c.d` (`64:ff9b::/96`, IPv4 in the last 32 bits): translated to it.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    let low32 = Ipv4Addr::from(bits as u32);
    if let Some(mapped) = ip.to_ipv4_mapped() {
        return Some(mapped);
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

fn v4_in(net: Ipv4Addr, len: u8, ip: Ipv4Addr) -> bool {
    let mask = v4_mask(len);
    u32::from(net) & mask == u32::from(ip) & mask
}

fn v6_in(net: Ipv6Addr, len: u8, ip: Ipv6Addr) -> bool {
    let mask = v6_mask(len);
    u128::from(net) & mask == u128::from(ip) & mask
}

/// Netmask for a prefix length; `checked_shl` because shifting by the full width (a /0) would
/// overflow, and a /0 mask is simply zero.
fn v4_mask(len: u8) -> u32 {
    u32::MAX
        .checked_shl(32u32.saturating_sub(u32::from(len)))
        .unwrap_or(0)
}

fn v6_mask(len: u8) -> u128 {
    u128::MAX
        .checked_shl(128u32.saturating_sub(u32::from(len)))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse()
            .unwrap_or_else(|e| panic!("bad test address {s:?}: {e}"))
    }

    fn cidr(s: &str) -> Cidr {
        s.parse()
            .unwrap_or_else(|e| panic!("bad test CIDR {s:?}: {e}"))
    }

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
        ("64:ff9b:1::", "64:ff9b:1::/48 (local-use NAT64)"),
        ("64:ff9b:1::a00:1", "64:ff9b:1::/48 (local-use NAT64)"),
        (
            "64:ff9b:1:ffff:ffff:ffff:ffff:ffff",
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
                for v6 in [mapped, six_to_four, nat64, translated] {
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
                for v6 in [mapped, six_to_four, nat64, translated, compatible] {
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

    /// `(input, canonical Display)`.
    const CIDR_GOOD: &[(&str, &str)] = &[
        ("127.0.0.0/8", "127.0.0.0/8"),
        ("10.1.2.3", "10.1.2.3/32"),
        ("10.1.2.3/32", "10.1.2.3/32"),
        ("10.1.2.3/8", "10.0.0.0/8"), // host bits masked
        ("192.168.1.77/24", "192.168.1.0/24"),
        ("0.0.0.0/0", "0.0.0.0/0"),
        ("255.255.255.255/0", "0.0.0.0/0"),
        ("::1/128", "::1/128"),
        ("::1", "::1/128"),
        ("::/0", "::/0"),
        ("fd00:ec2::254/64", "fd00:ec2::/64"),
        ("2001:DB8::/32", "2001:db8::/32"),
        ("::ffff:127.0.0.0/104", "127.0.0.0/8"),
        ("::ffff:10.1.2.3", "10.1.2.3/32"),
        ("fe80::1/10", "fe80::/10"),
    ];

    #[test]
    fn cidr_parses_and_displays_canonically() {
        for &(input, canonical) in CIDR_GOOD {
            let parsed = cidr(input);
            assert_eq!(parsed.to_string(), canonical, "{input}");
            assert_eq!(cidr(canonical), parsed, "round trip of {input}");
        }
    }

    #[test]
    fn cidr_rejects_bad_strings() {
        let bad_addr = |input: &str, addr: &str| CidrError::BadAddress {
            input: input.to_owned(),
            addr: addr.to_owned(),
        };
        let bad_prefix = |input: &str, prefix: &str| CidrError::BadPrefix {
            input: input.to_owned(),
            prefix: prefix.to_owned(),
        };
        let too_long = |input: &str, prefix: &str, max, family| CidrError::PrefixTooLong {
            input: input.to_owned(),
            prefix: prefix.to_owned(),
            max,
            family,
        };
        let cases = [
            ("", CidrError::Empty),
            ("/8", bad_addr("/8", "")),
            ("localhost", bad_addr("localhost", "localhost")),
            ("10.0.0/8", bad_addr("10.0.0/8", "10.0.0")),
            ("256.0.0.0/8", bad_addr("256.0.0.0/8", "256.0.0.0")),
            ("0177.0.0.1", bad_addr("0177.0.0.1", "0177.0.0.1")),
            (" 10.0.0.0/8", bad_addr(" 10.0.0.0/8", " 10.0.0.0")),
            ("10.0.0.0 /8", bad_addr("10.0.0.0 /8", "10.0.0.0 ")),
            (
                "fe80::1%eth0/64",
                bad_addr("fe80::1%eth0/64", "fe80::1%eth0"),
            ),
            ("[::1]/128", bad_addr("[::1]/128", "[::1]")),
            ("10.0.0.0/", bad_prefix("10.0.0.0/", "")),
            ("10.0.0.0/-1", bad_prefix("10.0.0.0/-1", "-1")),
            ("10.0.0.0/+8", bad_prefix("10.0.0.0/+8", "+8")),
            ("10.0.0.0/08", bad_prefix("10.0.0.0/08", "08")),
            ("10.0.0.0/ 8", bad_prefix("10.0.0.0/ 8", " 8")),
            ("10.0.0.0/8 ", bad_prefix("10.0.0.0/8 ", "8 ")),
            ("10.0.0.0/8/8", bad_prefix("10.0.0.0/8/8", "8/8")),
            (
                "10.0.0.0/255.0.0.0",
                bad_prefix("10.0.0.0/255.0.0.0", "255.0.0.0"),
            ),
            ("10.0.0.0/33", too_long("10.0.0.0/33", "33", 32, "IPv4")),
            ("10.0.0.0/128", too_long("10.0.0.0/128", "128", 32, "IPv4")),
            ("::/129", too_long("::/129", "129", 128, "IPv6")),
            (
                "::/99999999999999999999",
                too_long(
                    "::/99999999999999999999",
                    "99999999999999999999",
                    128,
                    "IPv6",
                ),
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(input.parse::<Cidr>(), Err(expected), "{input:?}");
        }
        let msg = |s: &str| s.parse::<Cidr>().map_err(|e| e.to_string()).err();
        assert_eq!(
            msg("10.0.0.0/33").as_deref(),
            Some("invalid CIDR \"10.0.0.0/33\": prefix length /33 is longer than 32 bits (IPv4)")
        );
        assert_eq!(
            msg("10.0.0/8").as_deref(),
            Some("invalid CIDR \"10.0.0/8\": \"10.0.0\" is not an IPv4 or IPv6 address")
        );
    }

    /// `(range, address, contained)`.
    const CONTAINS: &[(&str, &str, bool)] = &[
        ("127.0.0.0/8", "127.0.0.1", true),
        ("127.0.0.0/8", "127.255.255.255", true),
        ("127.0.0.0/8", "128.0.0.0", false),
        ("127.0.0.0/8", "126.255.255.255", false),
        // Families never mix in `contains` (the guard unwraps embedded IPv4 itself).
        ("127.0.0.0/8", "::ffff:127.0.0.1", false),
        ("127.0.0.0/8", "::127.0.0.1", false),
        ("127.0.0.0/8", "2002:7f00:1::", false),
        ("127.0.0.0/8", "::1", false),
        ("0.0.0.0/0", "1.2.3.4", true),
        ("0.0.0.0/0", "::ffff:1.2.3.4", false),
        ("0.0.0.0/0", "2606:4700:4700::1111", false),
        ("10.1.2.3", "10.1.2.3", true),
        ("10.1.2.3", "10.1.2.4", false),
        ("::1", "::1", true),
        ("::1", "::2", false),
        ("::/0", "2606:4700:4700::1111", true),
        ("::/0", "1.2.3.4", false),
        ("::ffff:0:0/96", "1.2.3.4", true),
        ("::ffff:0:0/96", "::ffff:1.2.3.4", false),
        ("::ffff:127.0.0.0/104", "127.0.0.1", true),
        ("::ffff:127.0.0.0/104", "10.0.0.1", false),
        ("::/96", "1.2.3.4", false),
        ("fe80::/10", "febf::1", true),
        ("fe80::/10", "fec0::1", false),
    ];

    #[test]
    fn cidr_contains() {
        for &(range, addr, expected) in CONTAINS {
            assert_eq!(cidr(range).contains(ip(addr)), expected, "{range} ∋ {addr}");
        }
    }

    #[test]
    fn masks_at_the_edges() {
        assert_eq!(v4_mask(0), 0);
        assert_eq!(v4_mask(32), u32::MAX);
        assert_eq!(v4_mask(8), 0xff00_0000);
        assert_eq!(v6_mask(0), 0);
        assert_eq!(v6_mask(128), u128::MAX);
        assert_eq!(v6_mask(96), u128::MAX << 32);
    }
}
