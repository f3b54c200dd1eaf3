//! CIDR ranges (`delivery.allow_private_networks`), parsed strictly: this is security
//! configuration, so anything unusual is an error rather than a guess.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

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

pub(super) fn v4_in(net: Ipv4Addr, len: u8, ip: Ipv4Addr) -> bool {
    let mask = v4_mask(len);
    u32::from(net) & mask == u32::from(ip) & mask
}

pub(super) fn v6_in(net: Ipv6Addr, len: u8, ip: Ipv6Addr) -> bool {
    let mask = v6_mask(len);
    u128::from(net) & mask == u128::from(ip) & mask
}

/// Netmask for a prefix length; `checked_shl` because shifting by the full width (a /0) would
/// overflow, and a /0 mask is simply zero.
pub(super) fn v4_mask(len: u8) -> u32 {
    u32::MAX
        .checked_shl(32u32.saturating_sub(u32::from(len)))
        .unwrap_or(0)
}

pub(super) fn v6_mask(len: u8) -> u128 {
    u128::MAX
        .checked_shl(128u32.saturating_sub(u32::from(len)))
        .unwrap_or(0)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn ip(s: &str) -> IpAddr {
        s.parse()
            .unwrap_or_else(|e| panic!("bad test address {s:?}: {e}"))
    }

    pub(crate) fn cidr(s: &str) -> Cidr {
        s.parse()
            .unwrap_or_else(|e| panic!("bad test CIDR {s:?}: {e}"))
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
