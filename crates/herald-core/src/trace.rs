//! The W3C trace context an ingest request carries (docs/operations.md, "Traces"): its
//! `traceparent` read as the W3C Trace Context recommendation says, and its `tracestate` kept
//! within herald's bound, cut at whole entries. What a request's headers hold becomes a
//! [`TraceContext`], or nothing: an invalid `traceparent` is ignored (the request starts a new
//! trace), and so is a `tracestate` that does not parse or comes without a valid `traceparent`.

/// The longest `tracestate` kept, in bytes: longer ones are cut at whole entries.
pub const MAX_TRACESTATE: usize = 256;
/// The most `tracestate` entries W3C allows; more make the whole value invalid.
const MAX_ENTRIES: usize = 32;
/// A version-00 `traceparent`'s length: `00-` + 32 + `-` + 16 + `-` + 2.
pub const TRACEPARENT_LEN: usize = 55;

/// Whether `name` is one of the W3C trace context's headers, which herald alone sets on a
/// webhook request: never an endpoint's custom header (an endpoint stored with one before they
/// were reserved keeps the others; that one is never sent).
pub fn is_trace_header(name: &str) -> bool {
    name.eq_ignore_ascii_case("traceparent") || name.eq_ignore_ascii_case("tracestate")
}

/// A request's trace context: the caller's span (its trace id and span id, the sampled flag)
/// and the vendors' state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    /// The caller's span: the parent of the spans herald makes for the request.
    pub parent_id: [u8; 8],
    pub flags: u8,
    /// The `tracestate` as kept: whole entries, at most [`MAX_TRACESTATE`] bytes.
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The context of a request with these `traceparent` and `tracestate` values (each `None`
    /// when the request has no such header; several `tracestate` headers are joined by `,`
    /// before). `None` when `traceparent` is missing or invalid: the request starts a new trace.
    pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        let (trace_id, parent_id, flags) = parse_traceparent(traceparent?)?;
        Some(TraceContext {
            trace_id,
            parent_id,
            flags,
            tracestate: tracestate.and_then(cut_tracestate),
        })
    }

    /// The `traceparent` header of this context, in version 00 (what herald sends whatever
    /// version it received).
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&self.parent_id),
            self.flags
        )
    }

    /// Whether the caller sampled its span (the flags' lowest bit).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

/// A stored context's form in JSON (the archive): `{"traceparent": …, "tracestate": …}`, read
/// back through [`TraceContext::from_headers`] so that what is read is checked as a request's
/// headers are.
impl serde::Serialize for TraceContext {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("traceparent", &self.traceparent())?;
        if let Some(state) = &self.tracestate {
            m.serialize_entry("tracestate", state)?;
        }
        m.end()
    }
}

impl<'de> serde::Deserialize<'de> for TraceContext {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        struct Form {
            traceparent: String,
            #[serde(default)]
            tracestate: Option<String>,
        }
        let f = Form::deserialize(d)?;
        TraceContext::from_headers(Some(&f.traceparent), f.tracestate.as_deref())
            .ok_or_else(|| serde::de::Error::custom("traceparent is not a valid W3C traceparent"))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `N` bytes from `2N` lowercase hex digits; `None` for anything else (W3C allows no capitals).
fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let digits = s.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

/// The trace id, parent id and flags of a `traceparent`. Version 00 is exactly 55 characters;
/// a later version (not `ff`) is read by its first 55, which a `-` must follow if more come;
/// the trace id and the parent id must not be all zeros.
fn parse_traceparent(v: &str) -> Option<([u8; 16], [u8; 8], u8)> {
    let v = v.trim_matches(|c| c == ' ' || c == '\t');
    let version = unhex::<1>(v.get(..2)?)?[0];
    if version == 0xff || !v.is_ascii() {
        return None;
    }
    let head = match (version, v.len()) {
        (0, TRACEPARENT_LEN) => v,
        (0, _) => return None,
        (_, n) if n == TRACEPARENT_LEN => v,
        (_, n) if n > TRACEPARENT_LEN && v.as_bytes()[TRACEPARENT_LEN] == b'-' => {
            &v[..TRACEPARENT_LEN]
        }
        _ => return None,
    };
    let mut parts = head.split('-');
    let (_, trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let trace_id = unhex::<16>(trace)?;
    let parent_id = unhex::<8>(parent)?;
    let flags = unhex::<1>(flags)?[0];
    if trace_id == [0; 16] || parent_id == [0; 8] {
        return None;
    }
    Some((trace_id, parent_id, flags))
}

/// A `tracestate` as herald keeps it: its entries in order, empty ones dropped, joined by `,`,
/// as many whole entries as fit [`MAX_TRACESTATE`] bytes. `None` when nothing is left, or when
/// the value is invalid (an entry that is not `key=value` in W3C's characters, a key given
/// twice, more than 32 entries): W3C says not to pass on what did not parse.
pub fn cut_tracestate(v: &str) -> Option<String> {
    let entries: Vec<&str> = v
        .split(',')
        .map(|e| e.trim_matches(|c| c == ' ' || c == '\t'))
        .filter(|e| !e.is_empty())
        .collect();
    if entries.len() > MAX_ENTRIES {
        return None;
    }
    let mut keys = Vec::with_capacity(entries.len());
    for e in &entries {
        let (key, value) = e.split_once('=')?;
        if !valid_key(key) || !valid_value(value) || keys.contains(&key) {
            return None;
        }
        keys.push(key);
    }
    let mut kept = String::new();
    for e in entries {
        let more = if kept.is_empty() { 0 } else { 1 } + e.len();
        if kept.len() + more > MAX_TRACESTATE {
            break;
        }
        if !kept.is_empty() {
            kept.push(',');
        }
        kept.push_str(e);
    }
    (!kept.is_empty()).then_some(kept)
}

/// A `tracestate` key: a simple key (a lowercase letter, then up to 255 of `a-z 0-9 _ - * /`),
/// or a multi-tenant one (`tenant@system`: up to 241 and 14 of them, the tenant's first a
/// letter or digit, the system's a letter).
fn valid_key(key: &str) -> bool {
    let rest = |s: &str, max: usize| {
        s.len() <= max
            && s.bytes().all(|c| {
                c.is_ascii_lowercase()
                    || c.is_ascii_digit()
                    || matches!(c, b'_' | b'-' | b'*' | b'/')
            })
    };
    match key.split_once('@') {
        None => {
            key.as_bytes()
                .first()
                .is_some_and(|c| c.is_ascii_lowercase())
                && rest(&key[1..], 255)
        }
        Some((tenant, system)) => {
            tenant
                .as_bytes()
                .first()
                .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                && rest(&tenant[1..], 240)
                && system
                    .as_bytes()
                    .first()
                    .is_some_and(|c| c.is_ascii_lowercase())
                && rest(&system[1..], 13)
        }
    }
}

/// A `tracestate` value: 1 to 256 printable ASCII characters but `,` and `=`, not ending in a
/// space.
fn valid_value(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 256
        && !value.ends_with(' ')
        && value
            .bytes()
            .all(|c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=')
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_read_and_written_back_in_version_00() {
        let c = TraceContext::from_headers(Some(GOOD), None).unwrap();
        assert_eq!(c.traceparent(), GOOD);
        assert!(c.sampled());
        assert_eq!(c.trace_id[0], 0x4b);
        assert_eq!(c.parent_id[7], 0xb7);
        let unsampled = GOOD.replace("-01", "-00");
        assert!(!TraceContext::from_headers(Some(&unsampled), None)
            .unwrap()
            .sampled());
        // Spaces around the value are not part of it.
        assert!(TraceContext::from_headers(Some(&format!(" {GOOD}\t")), None).is_some());
    }

    #[test]
    fn a_later_version_is_read_by_its_first_55_characters() {
        let v1 = GOOD.replacen("00", "01", 1);
        let c = TraceContext::from_headers(Some(&v1), None).unwrap();
        assert_eq!(c.traceparent(), GOOD, "written back as version 00");
        let longer = format!("{v1}-what-comes-next");
        assert!(TraceContext::from_headers(Some(&longer), None).is_some());
        let glued = format!("{v1}x");
        assert!(TraceContext::from_headers(Some(&glued), None).is_none());
    }

    #[test]
    fn an_invalid_traceparent_is_ignored() {
        for bad in [
            "",
            "00",
            // Version 00 with more after it.
            &format!("{GOOD}-01"),
            // Version ff is invalid.
            &GOOD.replacen("00", "ff", 1),
            // Capitals.
            &GOOD.to_uppercase(),
            // All-zero ids.
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            // Not hex, wrong lengths, wrong separators.
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736a-0f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "0é-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(
                TraceContext::from_headers(Some(bad), Some("a=1")),
                None,
                "{bad:?}"
            );
        }
        assert_eq!(TraceContext::from_headers(None, Some("a=1")), None);
    }

    #[test]
    fn tracestate_keeps_whole_entries_within_256_bytes() {
        assert_eq!(
            cut_tracestate(" congo=t61rcWkgMzE , rojo=00f067aa0ba902b7,,").as_deref(),
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        );
        // 5 entries of 60 bytes: 4 fit (4 × 60 + 3 commas = 243), the fifth would pass 256.
        let entry = |i: usize| format!("k{i}={}", "v".repeat(57));
        let five: Vec<String> = (0..5).map(entry).collect();
        let kept = cut_tracestate(&five.join(",")).unwrap();
        assert_eq!(kept, five[..4].join(","));
        assert!(kept.len() <= MAX_TRACESTATE);
        // One entry longer than the bound alone: nothing fits.
        assert_eq!(cut_tracestate(&format!("a={}", "v".repeat(256))), None);
        assert_eq!(cut_tracestate(""), None);
        assert_eq!(cut_tracestate(" , "), None);
        // Multi-tenant keys.
        assert_eq!(
            cut_tracestate("fw529a3039@dt=x").as_deref(),
            Some("fw529a3039@dt=x")
        );
    }

    #[test]
    fn an_invalid_tracestate_is_dropped_whole() {
        for bad in [
            "novalue", "=v", "Upper=v", "a=v,a=w", "a=v=w", "a=v w=x", "a=\u{e9}", "1abc=v",
            "t@1sys=v",
        ] {
            assert_eq!(cut_tracestate(bad), None, "{bad:?}");
        }
        let many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        assert_eq!(cut_tracestate(&many.join(",")), None, "33 entries");
        let c = TraceContext::from_headers(Some(GOOD), Some("Upper=v")).unwrap();
        assert_eq!(c.tracestate, None, "the traceparent stands without it");
    }
}
