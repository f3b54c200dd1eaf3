//! The backup archive's format (docs/operations.md, "The archive"): one line naming the format
//! and its version, then parts. A part is a header line of JSON (`part`, `index`, `records`,
//! `deliveries`, `bytes`, `raw_bytes`, `sha256`) and `bytes` bytes: a zstd frame of JSON lines,
//! one record each, `raw_bytes` long once decompressed, whose SHA-256 the header names. The
//! first part is `info`, the last `end` (the counts of the whole archive); `directory` and
//! `events` parts come between. Written here a record at a time; read in bounded memory by
//! [`Reader`] ([`super::read`]), which checks every part and names the first that fails.

use std::io::Write;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::model::{Attempt, Delivery, EventMeta};
use crate::store::{DirectoryRecord, EventHistory};

/// The archive's first line.
pub const MAGIC: &str = "herald-backup";
/// The format version this herald writes. Version 2 added endpoints' payload filters and
/// accounts' alert addresses to the directory: a herald that reads only version 1 would drop
/// them, so it refuses a version-2 archive instead. Version 3 added `raw_bytes` to part headers,
/// so that a reader can refuse a part that decompresses to more. Version 4 added application
/// records and kept answers to the directory, and events' channels and tags and attempts' URLs
/// to the log (docs/svix.md). Version 5 added endpoints' last successes to the directory.
/// Version 6 added attempts' response headers to the log. Version 7 added events' trace
/// contexts (`trace`) to the log.
pub const VERSION: u32 = 7;
/// The oldest format this herald still reads (its records are a subset of this version's).
pub const OLDEST: u32 = 1;
/// zstd's level for parts: its fastest; JSON packs several times smaller even so.
const LEVEL: i32 = 1;

pub use super::read::{Reader, MAX_RECORD};

/// What an archive's `info` part says.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Info {
    pub format: u32,
    /// The herald version that wrote it.
    pub herald: String,
    /// When the backup began (ms since the epoch).
    pub started_at: i64,
    /// The store it was taken from: `sled` or `postgres`.
    pub source: String,
}

/// What an archive's `end` part says: the counts of everything before it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub parts: u64,
    pub directory: u64,
    pub events: u64,
    pub deliveries: u64,
    pub attempts: u64,
}

/// An event as the archive carries it.
#[derive(Serialize, Deserialize)]
pub(super) struct ArchivedEvent {
    event: EventMeta,
    /// The payload as ingested, when it is UTF-8 (every JSON payload is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload: Option<String>,
    /// The payload in base64, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload_base64: Option<String>,
    deliveries: Vec<ArchivedDelivery>,
}

#[derive(Serialize, Deserialize)]
struct ArchivedDelivery {
    delivery: Delivery,
    attempts: Vec<Attempt>,
    /// Its place in its ordering lane in a cluster's store (format 3 on; a cluster's event ids
    /// do not grow in commit order, so a lane's order is not its ids').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lane_seq: Option<i64>,
}

/// A part's header line.
#[derive(Debug, Serialize, Deserialize)]
pub struct Header {
    pub part: String,
    pub index: u64,
    pub records: u64,
    /// The deliveries of an `events` part's events (0 for other parts): for progress.
    pub deliveries: u64,
    /// The body's size (compressed).
    pub bytes: u64,
    /// The body's size decompressed (from format 3 on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_bytes: Option<u64>,
    pub sha256: String,
}

/// A part, read and checked.
pub enum Part {
    Info(Info),
    Directory(Vec<DirectoryRecord>),
    Events(Vec<EventHistory>),
    End(Totals),
}

impl Part {
    /// The part's kind, as its header names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Part::Info(_) => "info",
            Part::Directory(_) => "directory",
            Part::Events(_) => "events",
            Part::End(_) => "end",
        }
    }
}

/// Why an archive cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("this is not a herald backup archive (its first line is not \"{MAGIC} N\")")]
    NotAnArchive,
    #[error(
        "the archive's format is version {0}; this herald reads versions {OLDEST} to {VERSION}"
    )]
    Version(u32),
    /// The part (its index and, when known, its kind) and what is wrong with it.
    #[error("part {index} ({kind}) is damaged: {why}")]
    Damaged {
        index: u64,
        kind: String,
        why: String,
    },
    #[error("cannot read the archive: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot write the archive: {0}")]
    Encode(String),
}

/// The archive's first line.
pub fn preamble() -> Vec<u8> {
    format!("{MAGIC} {VERSION}\n").into_bytes()
}

/// Writes parts, numbering them and counting what they hold.
#[derive(Default)]
pub struct PartWriter {
    totals: Totals,
}

impl PartWriter {
    /// The `info` part.
    pub fn info(&mut self, info: &Info) -> Result<Vec<u8>, ArchiveError> {
        self.part("info", 1, [info], 0)
    }

    /// A `directory` part.
    pub fn directory(&mut self, rows: &[DirectoryRecord]) -> Result<Vec<u8>, ArchiveError> {
        self.totals.directory += rows.len() as u64;
        self.part("directory", rows.len(), rows, 0)
    }

    /// An `events` part: each event encoded as it goes, so that a page is never held twice.
    #[cfg(test)]
    pub fn events(&mut self, events: Vec<EventHistory>) -> Result<Vec<u8>, ArchiveError> {
        let [mut header, body] = self.events_split(events)?;
        header.extend_from_slice(&body);
        Ok(header)
    }

    /// An `events` part as its header line and its body, to be sent one after the other: the
    /// body (a page, compressed) is never copied. Each event is encoded as it goes and dropped
    /// once encoded, its payload written straight from the page (never copied either), so
    /// that encoding a page adds little more than its compressed size to the page.
    pub fn events_split(
        &mut self,
        events: Vec<EventHistory>,
    ) -> Result<[Vec<u8>; 2], ArchiveError> {
        let deliveries = events.iter().map(|e| e.deliveries.len() as u64).sum();
        let records = events.len();
        let payloads: usize = events.iter().map(|e| e.payload.len()).sum();
        let mut totals = Totals::default();
        let archived = events.into_iter().map(|h| {
            let mut lane_seqs = h.lane_seqs.into_iter();
            totals.events += 1;
            totals.deliveries += h.deliveries.len() as u64;
            let (payload, payload_base64) = match std::str::from_utf8(&h.payload) {
                Ok(_) => (Some(Utf8Payload(h.payload)), None),
                Err(_) => (None, Some(b64().encode(&h.payload))),
            };
            OutgoingEvent {
                event: h.meta,
                payload,
                payload_base64,
                deliveries: h
                    .deliveries
                    .into_iter()
                    .map(|(delivery, attempts)| {
                        totals.attempts += attempts.len() as u64;
                        ArchivedDelivery {
                            delivery,
                            attempts,
                            lane_seq: lane_seqs.next().flatten(),
                        }
                    })
                    .collect(),
            }
        });
        let part = self.part_split("events", records, archived, deliveries, payloads)?;
        self.totals.events += totals.events;
        self.totals.deliveries += totals.deliveries;
        self.totals.attempts += totals.attempts;
        Ok(part)
    }

    /// The `end` part, with the counts of every part before it.
    pub fn end(mut self) -> Result<Vec<u8>, ArchiveError> {
        let totals = self.totals.clone();
        self.part("end", 1, [&totals], 0)
    }

    /// What was written so far.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    fn part<T: Serialize>(
        &mut self,
        kind: &str,
        records: usize,
        each: impl IntoIterator<Item = T>,
        deliveries: u64,
    ) -> Result<Vec<u8>, ArchiveError> {
        let [mut header, body] = self.part_split(kind, records, each, deliveries, 0)?;
        header.extend_from_slice(&body);
        Ok(header)
    }

    /// A part's header line and body. `expect` is about what the records hold (their
    /// payloads): the compressed body is given room for that much at once, so that it never
    /// grows by copies (room it does not fill is never touched).
    fn part_split<T: Serialize>(
        &mut self,
        kind: &str,
        records: usize,
        each: impl IntoIterator<Item = T>,
        deliveries: u64,
        expect: usize,
    ) -> Result<[Vec<u8>; 2], ArchiveError> {
        let room = zstd::zstd_safe::compress_bound(expect + (records << 10)).max(1024);
        let mut z = zstd::stream::write::Encoder::new(Vec::with_capacity(room), LEVEL)?;
        let mut line = Vec::with_capacity(1024);
        let mut raw_bytes = 0u64;
        for r in each {
            line.clear();
            serde_json::to_writer(&mut line, &r)
                .map_err(|e| ArchiveError::Encode(e.to_string()))?;
            drop(r);
            line.push(b'\n');
            raw_bytes += line.len() as u64;
            z.write_all(&line)?;
            // A large record's line is let go at once rather than kept for the next.
            if line.capacity() > 1 << 20 {
                line = Vec::with_capacity(1024);
            }
        }
        let body = z.finish()?;
        let header = Header {
            part: kind.to_string(),
            index: self.totals.parts,
            records: records as u64,
            deliveries,
            bytes: body.len() as u64,
            raw_bytes: Some(raw_bytes),
            sha256: hex(&Sha256::digest(&body)),
        };
        self.totals.parts += 1;
        let mut out =
            serde_json::to_vec(&header).map_err(|e| ArchiveError::Encode(e.to_string()))?;
        out.push(b'\n');
        Ok([out, body])
    }
}

/// An event as a backup writes it: [`ArchivedEvent`]'s fields, the payload taken from the page
/// without a copy.
#[derive(Serialize)]
struct OutgoingEvent {
    event: EventMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<Utf8Payload>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_base64: Option<String>,
    deliveries: Vec<ArchivedDelivery>,
}

/// A payload known to be UTF-8, written as a JSON string.
struct Utf8Payload(bytes::Bytes);

impl Serialize for Utf8Payload {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => s.serialize_str(text),
            Err(e) => Err(serde::ser::Error::custom(e)),
        }
    }
}

impl ArchivedEvent {
    pub(super) fn into_history(self) -> Result<EventHistory, String> {
        let payload = match (self.payload, self.payload_base64) {
            (Some(text), None) => bytes::Bytes::from(text),
            (None, Some(b)) => bytes::Bytes::from(
                b64()
                    .decode(b)
                    .map_err(|e| format!("event {}: its payload_base64: {e}", self.event.id))?,
            ),
            _ => return Err(format!("event {} has no payload", self.event.id)),
        };
        Ok(EventHistory {
            meta: self.event,
            payload,
            lane_seqs: match self.deliveries.iter().any(|d| d.lane_seq.is_some()) {
                true => self.deliveries.iter().map(|d| d.lane_seq).collect(),
                false => Vec::new(),
            },
            deliveries: self
                .deliveries
                .into_iter()
                .map(|d| (d.delivery, d.attempts))
                .collect(),
        })
    }
}

/// Checks an event read from an archive as the API would check what it names (docs/operations.md,
/// "Check an archive"): its id, its account's id, its deliveries' and attempts' ids, each
/// delivery its event's in its place; answers its id's ULID.
pub(super) fn check_event(h: &EventHistory) -> Result<u128, String> {
    use crate::ids::{self, ATTEMPT, DELIVERY, EVENT};
    let id = &h.meta.id;
    let event = ids::parse(EVENT, id).ok_or_else(|| format!("{id:?} is not an event id"))?;
    check_account(&h.meta.account_id).map_err(|why| format!("event {id}: {why}"))?;
    if h.meta.deliveries.len() != h.deliveries.len() {
        return Err(format!(
            "event {id} names {} deliveries and holds {}",
            h.meta.deliveries.len(),
            h.deliveries.len()
        ));
    }
    for (index, (d, attempts)) in h.deliveries.iter().enumerate() {
        let place = ids::delivery_of(event, index);
        if ids::parse(DELIVERY, &d.id) != Some(place) || h.meta.deliveries[index] != d.id {
            return Err(format!(
                "delivery {:?} is not delivery {index} of event {id}",
                d.id
            ));
        }
        if d.event_id != *id || d.account_id != h.meta.account_id {
            return Err(format!(
                "delivery {} names another event or account than event {id}",
                d.id
            ));
        }
        if let Some(ep) = &d.endpoint_id {
            check_endpoint_id(ep).map_err(|why| format!("delivery {}: {why}", d.id))?;
        }
        if let Some(a) = attempts
            .iter()
            .find(|a| ids::parse(ATTEMPT, &a.id).is_none())
        {
            return Err(format!(
                "delivery {}: {:?} is not an attempt id",
                d.id, a.id
            ));
        }
    }
    Ok(event)
}

/// Checks a directory row read from an archive: every id in it as the API would check it.
pub(super) fn check_row(row: &DirectoryRecord) -> Result<(), String> {
    match row {
        DirectoryRecord::Endpoint { endpoint, .. } => {
            check_endpoint_id(&endpoint.id)?;
            check_account(&endpoint.account_id)
                .map_err(|why| format!("endpoint {}: {why}", endpoint.id))
        }
        DirectoryRecord::Plan { account_id, .. }
        | DirectoryRecord::AlertEmails { account_id, .. }
        | DirectoryRecord::AccountSecret { account_id, .. }
        | DirectoryRecord::Usage { account_id, .. }
        | DirectoryRecord::ApiAnswer { account_id, .. } => check_account(account_id),
        DirectoryRecord::Application { application } => check_account(&application.id),
        DirectoryRecord::Breaker { endpoint_id, .. }
        | DirectoryRecord::LastSuccess { endpoint_id, .. } => check_endpoint_id(endpoint_id),
    }
}

/// An account id as the API reads it: `.` and `..`, which an older version accepted, are
/// restored (the API still reads them); herald's own operator account too.
fn check_account(account_id: &str) -> Result<(), String> {
    if account_id == crate::model::OPERATOR_ACCOUNT {
        return Ok(());
    }
    crate::api::validate::account_id_lookup("account_id", account_id)
        .map_err(|e| format!("account id {account_id:?}: {}", e.message))
}

fn check_endpoint_id(id: &str) -> Result<(), String> {
    match crate::ids::parse(crate::ids::ENDPOINT, id) {
        Some(_) => Ok(()),
        None => Err(format!("{id:?} is not an endpoint id")),
    }
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

pub(super) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Follows an archive as its bytes go by, from its part headers alone: what a download shows
/// as progress. It checks nothing ([`Reader`] does).
#[derive(Default)]
pub struct Tally {
    /// Bytes still to skip: the rest of a part's body (0 while reading a line).
    skip: u64,
    line: Vec<u8>,
    preamble_read: bool,
    pub events: u64,
    pub deliveries: u64,
    pub ended: bool,
}

impl Tally {
    pub fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            if self.skip > 0 {
                let n = (self.skip as usize).min(chunk.len());
                self.skip -= n as u64;
                chunk = &chunk[n..];
                continue;
            }
            match chunk.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    self.line.extend_from_slice(&chunk[..i]);
                    chunk = &chunk[i + 1..];
                    let line = std::mem::take(&mut self.line);
                    if !self.preamble_read {
                        self.preamble_read = true;
                    } else if let Ok(h) = serde_json::from_slice::<Header>(&line) {
                        if h.part == "events" {
                            self.events += h.records;
                            self.deliveries += h.deliveries;
                        }
                        self.ended |= h.part == "end";
                        self.skip = h.bytes;
                    }
                }
                None => {
                    self.line.extend_from_slice(chunk);
                    chunk = &[];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeliveryState, Endpoint};

    fn history(n: u128, payload: &[u8]) -> EventHistory {
        let event = crate::ids::format(crate::ids::EVENT, n << 80);
        let delivery = Delivery {
            id: crate::ids::format(crate::ids::DELIVERY, crate::ids::delivery_of(n << 80, 0)),
            event_id: event.clone(),
            endpoint_id: None,
            account_id: "acct".into(),
            event_type: "order.created".into(),
            state: DeliveryState::Pending,
            last_status: None,
            last_http_status: None,
            attempt_count: 0,
            next_attempt_at: Some(1),
            created_at: 1,
            manual: false,
            queued: false,
        };
        EventHistory {
            meta: EventMeta {
                id: event,
                account_id: "acct".into(),
                event_type: "order.created".into(),
                received_at: 1,
                idempotency_key: None,
                debounce_key: None,
                ordering_key: None,
                channels: Vec::new(),
                tags: Vec::new(),
                request_key: None,
                trace: None,
                deliveries: vec![delivery.id.clone()],
            },
            payload: bytes::Bytes::copy_from_slice(payload),
            deliveries: vec![(delivery, Vec::new())],
            lane_seqs: Vec::new(),
        }
    }

    /// A small archive, and where each of its parts begins.
    fn archive() -> (Vec<u8>, Vec<usize>) {
        archive_of(VERSION)
    }

    /// An archive whose first line and info part name `format` (its part headers this
    /// version's).
    fn archive_of(format: u32) -> (Vec<u8>, Vec<usize>) {
        let mut w = PartWriter::default();
        let mut out = format!("{MAGIC} {format}\n").into_bytes();
        let mut starts = Vec::new();
        let info = Info {
            format,
            herald: "test".into(),
            started_at: 1,
            source: "sled".into(),
        };
        starts.push(out.len());
        out.extend(w.info(&info).unwrap());
        let ep: Endpoint = serde_json::from_value(serde_json::json!({
            "id": "ep_00000000000000000000000001", "account_id": "acct", "url": "https://example.com/", "description": "",
            "event_types": [], "headers": {}, "retry_policy": "default", "signature": "hmac",
            "state": "active", "verified": true, "created_at": 1, "updated_at": 1,
            "secrets": [{"value": "whsec_x", "expires_at": null}]
        }))
        .unwrap();
        starts.push(out.len());
        out.extend(
            w.directory(&[DirectoryRecord::Endpoint {
                endpoint: Box::new(ep),
                client_certificate: None,
            }])
            .unwrap(),
        );
        starts.push(out.len());
        out.extend(
            w.events(vec![history(2, b"{\"a\":1}"), history(1, &[0xff, 0])])
                .unwrap(),
        );
        starts.push(out.len());
        out.extend(w.end().unwrap());
        (out, starts)
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<Part>, ArchiveError> {
        let mut r = Reader::new(bytes)?;
        let mut parts = Vec::new();
        while let Some(p) = r.next_part()? {
            parts.push(p);
        }
        Ok(parts)
    }

    #[test]
    fn an_archive_reads_back_whole() {
        let (bytes, _) = archive();
        let parts = read_all(&bytes).unwrap();
        let kinds: Vec<_> = parts.iter().map(Part::kind).collect();
        assert_eq!(kinds, ["info", "directory", "events", "end"]);
        let Part::Events(events) = &parts[2] else {
            panic!("events")
        };
        assert_eq!(&events[0].payload[..], b"{\"a\":1}");
        assert_eq!(
            &events[1].payload[..],
            &[0xff, 0],
            "a payload that is not UTF-8"
        );
        let Part::End(t) = &parts[3] else {
            panic!("end")
        };
        assert_eq!((t.parts, t.directory, t.events, t.deliveries), (3, 1, 2, 2));
    }

    #[test]
    fn versions_up_to_this_one_are_read_and_a_later_one_is_refused() {
        // Part headers name `raw_bytes` from version 3 on.
        let with_version = |v: u32| {
            let (bytes, starts) = archive_of(v);
            let mut b = format!("{MAGIC} {v}\n").into_bytes();
            let mut ends = starts[1..].to_vec();
            ends.push(bytes.len());
            for (at, end) in starts.iter().zip(ends) {
                let nl = at + bytes[*at..].iter().position(|b| *b == b'\n').unwrap();
                let mut header: Header = serde_json::from_slice(&bytes[*at..nl]).unwrap();
                if v < 3 {
                    header.raw_bytes = None;
                }
                b.extend(serde_json::to_vec(&header).unwrap());
                b.extend_from_slice(&bytes[nl..end]);
            }
            b
        };
        for v in OLDEST..=VERSION {
            assert_eq!(
                read_all(&with_version(v)).map(|p| p.len()).ok(),
                Some(4),
                "{v}"
            );
        }
        assert!(matches!(
            read_all(&with_version(VERSION + 1)),
            Err(ArchiveError::Version(v)) if v == VERSION + 1
        ));
        // The first line says one version and the info part another: damaged, not misread.
        let (mut bytes, _) = archive();
        bytes[MAGIC.len() + 1] = b'0' + (VERSION as u8 - 1);
        assert!(matches!(
            read_all(&bytes),
            Err(ArchiveError::Damaged { index: 0, .. })
        ));
    }

    /// The part a byte at `at` belongs to (`None`: the first line).
    fn part_of(starts: &[usize], at: usize) -> Option<u64> {
        starts.iter().rposition(|s| *s <= at).map(|i| i as u64)
    }

    #[test]
    fn every_flipped_byte_is_refused_naming_its_part() {
        let (bytes, starts) = archive();
        for at in 0..bytes.len() {
            for bit in [0x01u8, 0x20, 0x80] {
                let mut damaged = bytes.clone();
                damaged[at] ^= bit;
                let skimmed = Reader::new(&damaged[..]).and_then(Reader::skim);
                assert!(
                    skimmed.is_err(),
                    "byte {at} (bit {bit:#x}) flipped: the frame checks"
                );
                match (read_all(&damaged), part_of(&starts, at)) {
                    (Err(ArchiveError::Damaged { index, .. }), Some(part)) => {
                        // A header's newline or size flipped may surface at the next part.
                        assert!(
                            index == part || index == part + 1,
                            "byte {at}: part {index} named, the byte is in part {part}"
                        );
                    }
                    (Err(ArchiveError::NotAnArchive | ArchiveError::Version(_)), None) => {}
                    // The version flipped to an older one this herald reads: the first part's
                    // header names `raw_bytes`, which that version has not.
                    (Err(ArchiveError::Damaged { index: 0, .. }), None) => {}
                    (other, part) => panic!(
                        "byte {at} (bit {bit:#x}) in part {part:?} flipped: {:?}",
                        other.map(|p| p.len())
                    ),
                }
            }
        }
    }

    #[test]
    fn every_truncation_is_refused_naming_its_part() {
        let (bytes, starts) = archive();
        assert!(Reader::new(&bytes[..]).and_then(Reader::skim).is_ok());
        for len in 0..bytes.len() {
            assert!(
                Reader::new(&bytes[..len]).and_then(Reader::skim).is_err(),
                "cut at {len}: the frame checks"
            );
            match read_all(&bytes[..len]) {
                Err(ArchiveError::Damaged { index, why, .. }) => {
                    let part = part_of(&starts, len).unwrap_or(0);
                    assert_eq!(index, part, "cut at {len}: part {index} named ({why})");
                }
                Err(ArchiveError::NotAnArchive) if len < starts[0] => {}
                other => panic!("cut at {len}: {:?}", other.map(|p| p.len())),
            }
        }
    }

    #[test]
    fn events_out_of_order_or_repeated_are_damaged() {
        let info = Info {
            format: VERSION,
            herald: "test".into(),
            started_at: 1,
            source: "sled".into(),
        };
        for (name, events) in [
            ("ascending", vec![history(1, b"{}"), history(2, b"{}")]),
            ("repeated", vec![history(2, b"{}"), history(2, b"{}")]),
        ] {
            let mut w = PartWriter::default();
            let mut out = preamble();
            out.extend(w.info(&info).unwrap());
            out.extend(w.events(events).unwrap());
            out.extend(w.end().unwrap());
            match read_all(&out) {
                Err(ArchiveError::Damaged { index: 1, why, .. })
                    if why.contains("out of order") => {}
                other => panic!("{name}: {:?}", other.map(|p| p.len())),
            }
        }
    }

    #[test]
    fn a_part_past_its_raw_bytes_or_a_record_over_the_limit_is_damaged() {
        use std::io::Write;
        let (bytes, starts) = archive();
        // The events part's header with a smaller raw_bytes (its checksum still matches).
        let at = starts[2];
        let nl = at + bytes[at..].iter().position(|b| *b == b'\n').unwrap();
        let mut header: Header = serde_json::from_slice(&bytes[at..nl]).unwrap();
        header.raw_bytes = header.raw_bytes.map(|r| r - 1);
        let mut small = bytes[..at].to_vec();
        small.extend(serde_json::to_vec(&header).unwrap());
        small.extend_from_slice(&bytes[nl..]);
        match read_all(&small) {
            Err(ArchiveError::Damaged { index: 2, why, .. }) if why.contains("past") => {}
            other => panic!("{:?}", other.map(|p| p.len())),
        }
        assert!(Reader::new(&small[..]).and_then(Reader::skim).is_err());
        // A record longer than the limit, in a format without raw_bytes.
        let mut z = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..=(MAX_RECORD >> 20) {
            z.write_all(&chunk).unwrap();
        }
        let body = z.finish().unwrap();
        let header = Header {
            part: "events".into(),
            index: 2,
            records: 1,
            deliveries: 0,
            bytes: body.len() as u64,
            raw_bytes: None,
            sha256: hex(&Sha256::digest(&body)),
        };
        // An archive of format 2, whose info part says so.
        let (bytes, starts) = archive_of(2);
        let info_nl = starts[0] + bytes[starts[0]..].iter().position(|b| *b == b'\n').unwrap();
        let mut first: Header = serde_json::from_slice(&bytes[starts[0]..info_nl]).unwrap();
        first.raw_bytes = None;
        let dir_nl = starts[1] + bytes[starts[1]..].iter().position(|b| *b == b'\n').unwrap();
        let mut second: Header = serde_json::from_slice(&bytes[starts[1]..dir_nl]).unwrap();
        second.raw_bytes = None;
        let mut huge = b"herald-backup 2\n".to_vec();
        huge.extend(serde_json::to_vec(&first).unwrap());
        huge.extend_from_slice(&bytes[info_nl..starts[1]]);
        huge.extend(serde_json::to_vec(&second).unwrap());
        huge.extend_from_slice(&bytes[dir_nl..at]);
        huge.extend(serde_json::to_vec(&header).unwrap());
        huge.push(b'\n');
        huge.extend(body);
        match read_all(&huge) {
            Err(ArchiveError::Damaged { index: 2, why, .. }) if why.contains("over 64 MiB") => {}
            other => panic!("{:?}", other.map(|p| p.len())),
        }
    }
}
