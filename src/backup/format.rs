//! The backup archive's format (docs/operations.md, "The archive"): one line naming the format
//! and its version, then parts. A part is a header line of JSON (`part`, `index`, `records`,
//! `bytes`, `sha256`) and `bytes` bytes: a zstd frame of JSON lines, one record each, whose
//! SHA-256 the header names. The first part is `info`, the last `end` (the counts of the whole
//! archive); `directory` and `events` parts come between. A reader checks every part's
//! checksum, count and place, and names the first part that fails.

use std::io::{BufRead, Read};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::model::{Attempt, Delivery, EventMeta};
use crate::store::{DirectoryRecord, EventHistory};

/// The archive's first line.
pub const MAGIC: &str = "herald-backup";
/// The format version this herald writes. Version 2 added endpoints' payload filters and
/// accounts' alert addresses to the directory: a herald that reads only version 1 would drop
/// them, so it refuses a version-2 archive instead.
pub const VERSION: u32 = 2;
/// The oldest format this herald still reads (its records are a subset of this version's).
pub const OLDEST: u32 = 1;
/// zstd's level for parts: its fastest; JSON packs several times smaller even so.
const LEVEL: i32 = 1;
/// The largest part a reader accepts (a part is a page of events: far below this).
const MAX_PART: u64 = 1 << 30;

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
struct ArchivedEvent {
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
}

/// A part's header line.
#[derive(Debug, Serialize, Deserialize)]
pub struct Header {
    pub part: String,
    pub index: u64,
    pub records: u64,
    /// The deliveries of an `events` part's events (0 for other parts): for progress.
    pub deliveries: u64,
    pub bytes: u64,
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
        self.part("info", std::slice::from_ref(info), 0)
    }

    /// A `directory` part.
    pub fn directory(&mut self, rows: &[DirectoryRecord]) -> Result<Vec<u8>, ArchiveError> {
        self.totals.directory += rows.len() as u64;
        self.part("directory", rows, 0)
    }

    /// An `events` part.
    pub fn events(&mut self, events: Vec<EventHistory>) -> Result<Vec<u8>, ArchiveError> {
        let archived: Vec<ArchivedEvent> = events
            .into_iter()
            .map(|h| {
                self.totals.events += 1;
                self.totals.deliveries += h.deliveries.len() as u64;
                let (payload, payload_base64) = match std::str::from_utf8(&h.payload) {
                    Ok(text) => (Some(text.to_string()), None),
                    Err(_) => (None, Some(b64().encode(&h.payload))),
                };
                ArchivedEvent {
                    event: h.meta,
                    payload,
                    payload_base64,
                    deliveries: h
                        .deliveries
                        .into_iter()
                        .map(|(delivery, attempts)| {
                            self.totals.attempts += attempts.len() as u64;
                            ArchivedDelivery { delivery, attempts }
                        })
                        .collect(),
                }
            })
            .collect();
        let deliveries = archived.iter().map(|e| e.deliveries.len() as u64).sum();
        self.part("events", &archived, deliveries)
    }

    /// The `end` part, with the counts of every part before it.
    pub fn end(mut self) -> Result<Vec<u8>, ArchiveError> {
        let totals = self.totals.clone();
        self.part("end", std::slice::from_ref(&totals), 0)
    }

    /// What was written so far.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    fn part<T: Serialize>(
        &mut self,
        kind: &str,
        records: &[T],
        deliveries: u64,
    ) -> Result<Vec<u8>, ArchiveError> {
        let mut lines = Vec::with_capacity(records.len() * 256);
        for r in records {
            serde_json::to_writer(&mut lines, r)
                .map_err(|e| ArchiveError::Encode(e.to_string()))?;
            lines.push(b'\n');
        }
        let body = zstd::bulk::compress(&lines, LEVEL)?;
        let header = Header {
            part: kind.to_string(),
            index: self.totals.parts,
            records: records.len() as u64,
            deliveries,
            bytes: body.len() as u64,
            sha256: hex(&Sha256::digest(&body)),
        };
        self.totals.parts += 1;
        let mut out =
            serde_json::to_vec(&header).map_err(|e| ArchiveError::Encode(e.to_string()))?;
        out.push(b'\n');
        out.extend_from_slice(&body);
        Ok(out)
    }
}

/// Reads an archive part by part, checking each.
pub struct Reader<R> {
    input: std::io::BufReader<R>,
    next: u64,
    totals: Totals,
    ended: bool,
}

impl<R: Read> Reader<R> {
    /// Reads the first line: the format and its version.
    pub fn new(input: R) -> Result<Reader<R>, ArchiveError> {
        let mut input = std::io::BufReader::with_capacity(1 << 20, input);
        let mut line = Vec::new();
        input.by_ref().take(64).read_until(b'\n', &mut line)?;
        let text = std::str::from_utf8(&line).map_err(|_| ArchiveError::NotAnArchive)?;
        let version = text
            .strip_suffix('\n')
            .and_then(|t| t.strip_prefix(MAGIC))
            .and_then(|t| t.strip_prefix(' '))
            .and_then(|v| v.parse::<u32>().ok())
            .ok_or(ArchiveError::NotAnArchive)?;
        if !(OLDEST..=VERSION).contains(&version) {
            return Err(ArchiveError::Version(version));
        }
        Ok(Reader {
            input,
            next: 0,
            totals: Totals::default(),
            ended: false,
        })
    }

    /// The next part's header and body, checked: the header reads, names this place, and its
    /// body is whole and matches its checksum.
    fn read_body(&mut self) -> Result<(Header, Vec<u8>), ArchiveError> {
        let index = self.next;
        let damaged = |kind: &str, why: String| ArchiveError::Damaged {
            index,
            kind: kind.to_string(),
            why,
        };
        let mut line = Vec::new();
        self.input
            .by_ref()
            .take(4096)
            .read_until(b'\n', &mut line)?;
        if line.is_empty() {
            return Err(damaged(
                "end",
                "the archive ends here without its end part (it is truncated)".into(),
            ));
        }
        let header: Header = serde_json::from_slice(&line)
            .map_err(|e| damaged("unknown", format!("its header cannot be read ({e})")))?;
        let kind = header.part.clone();
        if header.index != index {
            return Err(damaged(
                &kind,
                format!("its header says part {}", header.index),
            ));
        }
        if header.bytes > MAX_PART {
            return Err(damaged(
                &kind,
                format!("its size {} is too large", header.bytes),
            ));
        }
        let mut body = Vec::with_capacity(header.bytes as usize);
        let got = self
            .input
            .by_ref()
            .take(header.bytes)
            .read_to_end(&mut body)?;
        if (got as u64) < header.bytes {
            return Err(damaged(
                &kind,
                format!("truncated: {got} of its {} bytes", header.bytes),
            ));
        }
        if hex(&Sha256::digest(&body)) != header.sha256 {
            return Err(damaged(&kind, "its checksum does not match".into()));
        }
        Ok((header, body))
    }

    /// Checks the archive's frame without decoding its records: every part's header, place and
    /// checksum, the end's counts against the headers', and that nothing follows. What a
    /// download checks before the archive takes its name; [`Reader::next_part`] (`restore
    /// --check`) decodes every record too.
    pub fn skim(mut self) -> Result<Totals, ArchiveError> {
        let mut seen = Totals::default();
        loop {
            let index = self.next;
            let (header, body) = self.read_body()?;
            self.next += 1;
            let damaged = |why: String| ArchiveError::Damaged {
                index,
                kind: header.part.clone(),
                why,
            };
            let one = header.records == 1 && header.deliveries == 0;
            match (header.part.as_str(), index) {
                ("info", 0) if one => {
                    let lines = zstd::stream::decode_all(&body[..])
                        .map_err(|e| damaged(format!("cannot be decompressed ({e})")))?;
                    serde_json::from_slice::<Info>(lines.trim_ascii_end())
                        .map_err(|e| damaged(format!("it cannot be read ({e})")))?;
                }
                ("events", i) if i > 0 => {
                    seen.events += header.records;
                    seen.deliveries += header.deliveries;
                }
                ("directory", i) if i > 0 && header.deliveries == 0 => {
                    seen.directory += header.records
                }
                ("end", i) if i > 0 && one => {
                    let lines = zstd::stream::decode_all(&body[..])
                        .map_err(|e| damaged(format!("cannot be decompressed ({e})")))?;
                    let totals: Totals = serde_json::from_slice(lines.trim_ascii_end())
                        .map_err(|e| damaged(format!("its counts cannot be read ({e})")))?;
                    seen.parts = index;
                    seen.attempts = totals.attempts;
                    if totals != seen {
                        return Err(damaged(format!(
                            "its counts {totals:?} differ from the archive's {seen:?}"
                        )));
                    }
                    let mut rest = [0u8; 1];
                    if self.input.read(&mut rest)? != 0 {
                        return Err(damaged("bytes follow the end part".into()));
                    }
                    return Ok(totals);
                }
                (other, _) => return Err(damaged(format!("{other:?} is out of place here"))),
            }
        }
    }

    /// The next part, checked: its header, its place (`info` first, `end` last), its checksum,
    /// its records and their count; after `end`, that the counts match and nothing follows.
    /// `None` after the `end` part.
    pub fn next_part(&mut self) -> Result<Option<Part>, ArchiveError> {
        if self.ended {
            return Ok(None);
        }
        let index = self.next;
        let damaged = |kind: &str, why: String| ArchiveError::Damaged {
            index,
            kind: kind.to_string(),
            why,
        };
        let (header, body) = self.read_body()?;
        let kind = header.part.clone();
        let lines = zstd::stream::decode_all(&body[..])
            .map_err(|e| damaged(&kind, format!("cannot be decompressed ({e})")))?;
        let part = self
            .decode(&kind, &lines)
            .map_err(|why| damaged(&kind, why))?;
        let records = match &part {
            Part::Directory(rows) => rows.len(),
            Part::Events(events) => events.len(),
            Part::Info(_) | Part::End(_) => 1,
        };
        if records as u64 != header.records {
            return Err(damaged(
                &kind,
                format!(
                    "it holds {records} records, its header says {}",
                    header.records
                ),
            ));
        }
        let deliveries = match &part {
            Part::Events(events) => events.iter().map(|e| e.deliveries.len() as u64).sum(),
            _ => 0,
        };
        if deliveries != header.deliveries {
            return Err(damaged(
                &kind,
                format!(
                    "it holds {deliveries} deliveries, its header says {}",
                    header.deliveries
                ),
            ));
        }
        match (&part, index) {
            (Part::Info(_), 0) => {}
            (Part::Info(_), _) => return Err(damaged(&kind, "a second info part".into())),
            (_, 0) => {
                return Err(damaged(
                    &kind,
                    "the archive must begin with its info part".into(),
                ))
            }
            _ => {}
        }
        self.next += 1;
        match &part {
            Part::End(totals) => {
                let mut seen = self.totals.clone();
                seen.parts = index;
                if *totals != seen {
                    return Err(damaged(
                        &kind,
                        format!("its counts {totals:?} differ from the archive's {seen:?}"),
                    ));
                }
                let mut rest = [0u8; 1];
                if self.input.read(&mut rest)? != 0 {
                    return Err(damaged(&kind, "bytes follow the end part".into()));
                }
                self.ended = true;
            }
            Part::Directory(rows) => self.totals.directory += rows.len() as u64,
            Part::Events(events) => {
                self.totals.events += events.len() as u64;
                for e in events {
                    self.totals.deliveries += e.deliveries.len() as u64;
                    self.totals.attempts += e
                        .deliveries
                        .iter()
                        .map(|(_, a)| a.len() as u64)
                        .sum::<u64>();
                }
            }
            Part::Info(_) => {}
        }
        Ok(Some(part))
    }

    fn decode(&self, kind: &str, lines: &[u8]) -> Result<Part, String> {
        let records = lines.split(|b| *b == b'\n').filter(|l| !l.is_empty());
        let one = |what: &str| -> Result<&[u8], String> {
            let mut it = lines.split(|b| *b == b'\n').filter(|l| !l.is_empty());
            match (it.next(), it.next()) {
                (Some(l), None) => Ok(l),
                _ => Err(format!("an {what} part holds one record")),
            }
        };
        let bad = |e: serde_json::Error| format!("a record cannot be read ({e})");
        Ok(match kind {
            "info" => Part::Info(serde_json::from_slice(one("info")?).map_err(bad)?),
            "end" => Part::End(serde_json::from_slice(one("end")?).map_err(bad)?),
            "directory" => Part::Directory(
                records
                    .map(|l| serde_json::from_slice(l).map_err(bad))
                    .collect::<Result<_, _>>()?,
            ),
            "events" => Part::Events(
                records
                    .map(|l| {
                        let a: ArchivedEvent = serde_json::from_slice(l).map_err(bad)?;
                        a.into_history()
                    })
                    .collect::<Result<_, _>>()?,
            ),
            other => return Err(format!("{other:?} is not a kind of part")),
        })
    }

    /// The counts read so far.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }
}

impl ArchivedEvent {
    fn into_history(self) -> Result<EventHistory, String> {
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
            deliveries: self
                .deliveries
                .into_iter()
                .map(|d| (d.delivery, d.attempts))
                .collect(),
        })
    }
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn hex(bytes: &[u8]) -> String {
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
                deliveries: vec![delivery.id.clone()],
            },
            payload: bytes::Bytes::copy_from_slice(payload),
            deliveries: vec![(delivery, Vec::new())],
        }
    }

    /// A small archive, and where each of its parts begins.
    fn archive() -> (Vec<u8>, Vec<usize>) {
        let mut w = PartWriter::default();
        let mut out = preamble();
        let mut starts = Vec::new();
        let info = Info {
            format: VERSION,
            herald: "test".into(),
            started_at: 1,
            source: "sled".into(),
        };
        starts.push(out.len());
        out.extend(w.info(&info).unwrap());
        let ep: Endpoint = serde_json::from_value(serde_json::json!({
            "id": "ep_1", "account_id": "acct", "url": "https://example.com/", "description": "",
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
            w.events(vec![history(1, b"{\"a\":1}"), history(2, &[0xff, 0])])
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
        let (bytes, starts) = archive();
        let with_version = |v: u32| {
            let mut b = format!("{MAGIC} {v}\n").into_bytes();
            b.extend_from_slice(&bytes[starts[0]..]);
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
}
