//! How records become sled keys and values.
//!
//! Keys are ULIDs as 16 big-endian bytes (so keys sort by creation time), alone or followed by a
//! number. Values are a compact binary layout of length-prefixed fields, written and read by
//! [`Writer`] and [`Reader`]: the hot records (event, attempt, pending entry) are encoded and
//! decoded on every ingest and attempt, and JSON there cost a good share of the CPU and of the
//! disk. Every value starts with a version byte, so a later layout can be told apart. An event
//! keeps its payload bytes untouched (never re-serialized, so every retry sends identical bytes).
//!
//! # Row size
//!
//! sled moves a page whose serialized form exceeds an eighth of its 512 KiB segment (131,052
//! bytes) to a `blobs/` file that it never fsyncs, and a leaf page holds up to 17 rows before it
//! splits. So every row herald writes is at most [`MAX_ROW`] bytes (key and value), which keeps
//! every page in the fsynced log: an event's payload goes to [`CHUNK`]-byte chunk rows once the
//! event row would outgrow [`MAX_ROW`], its targets to target rows once they are many, an
//! attempt's response excerpt is shortened if its headers are large, and keys of unbounded
//! text (idempotency and debounce keys) are stored as digests.

use super::StoreError;
use herald_core::clock::Millis;
use herald_core::ids;
use herald_core::model::{Attempt, DeliveryState, EventMeta, Status};
use herald_core::policy::debounce::{Candidate, Window};
use herald_core::trace::TraceContext;

/// The largest row (key and value) herald writes: 17 of them fit one sled page below its blob
/// threshold (131,052 bytes), with room for sled's own framing.
pub const MAX_ROW: usize = 7 * 1024;
// An endpoint is one row (its id the key, its JSON the value).
const _: () = assert!(herald_store::MAX_ENDPOINT_SIZE <= MAX_ROW);
/// Payloads up to this size stayed inside the event's value in layout 1; larger ones were
/// chunked. Layout 2 inlines whatever fits [`MAX_ROW`].
pub const INLINE_PAYLOAD: usize = 6 * 1024;
/// Chunk size for payloads that do not fit the event row.
pub const CHUNK: usize = 6 * 1024;
/// Event ULIDs per account index row (16 bytes each, within [`MAX_ROW`]).
pub const INDEX_PER_ROW: usize = 256;
/// An event keeps this many targets in its own row at most; more go to target rows of
/// [`TARGETS_PER_ROW`] each.
pub const INLINE_TARGETS: usize = 64;
pub const TARGETS_PER_ROW: usize = 256;

const V1: u8 = 1;
/// Event layout 2: a flags byte says whether the payload and the targets are inline.
const V2: u8 = 2;

// --- keys -------------------------------------------------------------------------------------

/// Account-scoped key: account id, a NUL (never in an account id), then a name (an account
/// secret's name).
pub fn account_key(account_id: &str, key: &str) -> Vec<u8> {
    [account_id.as_bytes(), b"\0", key.as_bytes()].concat()
}

// --- the layout -------------------------------------------------------------------------------

/// Appends fields to a value.
#[derive(Default)]
pub struct Writer(Vec<u8>);

impl Writer {
    pub fn with_capacity(n: usize) -> Writer {
        Writer::versioned(V1, n)
    }

    fn versioned(version: u8, n: usize) -> Writer {
        let mut w = Writer(Vec::with_capacity(n + 1));
        w.u8(version);
        w
    }

    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }

    pub fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }

    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }

    pub fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }

    pub fn u128(&mut self, v: u128) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }

    pub fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
    }

    pub fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }

    pub fn opt_str(&mut self, v: Option<&str>) {
        match v {
            Some(s) => {
                self.u8(1);
                self.str(s);
            }
            None => self.u8(0),
        }
    }

    pub fn opt_i64(&mut self, v: Option<i64>) {
        match v {
            Some(n) => {
                self.u8(1);
                self.i64(n);
            }
            None => self.u8(0),
        }
    }

    /// An unsigned LEB128 number: one byte below 128.
    pub fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    /// Bytes with a varint length.
    pub fn vbytes(&mut self, v: &[u8]) {
        self.varint(v.len() as u64);
        self.0.extend_from_slice(v);
    }

    /// The rest of the value, unframed (an inline payload).
    pub fn tail(&mut self, v: &[u8]) {
        self.0.extend_from_slice(v);
    }

    pub fn finish(self) -> Vec<u8> {
        self.0
    }
}

/// Reads fields back in the order [`Writer`] wrote them; a short or malformed value is
/// [`StoreError::Corrupt`].
pub struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    pub fn new(v: &'a [u8], what: &str) -> Result<Reader<'a>, StoreError> {
        match Reader::versioned(v, what)? {
            (V1, r) => Ok(r),
            _ => Err(StoreError::Corrupt(format!(
                "{what}: unknown record layout"
            ))),
        }
    }

    /// The layout version byte and a reader of the rest.
    fn versioned(v: &'a [u8], what: &str) -> Result<(u8, Reader<'a>), StoreError> {
        match v.split_first() {
            Some((&version, rest)) => Ok((version, Reader(rest))),
            None => Err(StoreError::Corrupt(format!("{what}: empty record"))),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        let (head, rest) = self
            .0
            .split_at_checked(n)
            .ok_or_else(|| StoreError::Corrupt("record too short".into()))?;
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], StoreError> {
        let b = self.take(N)?;
        b.try_into()
            .map_err(|_| StoreError::Corrupt("record too short".into()))
    }

    pub fn u8(&mut self) -> Result<u8, StoreError> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16, StoreError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32, StoreError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub fn i64(&mut self) -> Result<i64, StoreError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    pub fn u128(&mut self) -> Result<u128, StoreError> {
        Ok(u128::from_be_bytes(self.array()?))
    }

    pub fn bytes(&mut self) -> Result<&'a [u8], StoreError> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    pub fn str(&mut self) -> Result<&'a str, StoreError> {
        utf8(self.bytes()?)
    }

    pub fn varint(&mut self) -> Result<u64, StoreError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(StoreError::Corrupt("record holds a number too long".into()))
    }

    pub fn vbytes(&mut self) -> Result<&'a [u8], StoreError> {
        let n = usize::try_from(self.varint()?)
            .map_err(|_| StoreError::Corrupt("record too short".into()))?;
        self.take(n)
    }

    pub fn vstring(&mut self) -> Result<String, StoreError> {
        utf8(self.vbytes()?).map(str::to_string)
    }

    pub fn string(&mut self) -> Result<String, StoreError> {
        self.str().map(str::to_string)
    }

    pub fn opt_string(&mut self) -> Result<Option<String>, StoreError> {
        match self.u8()? {
            0 => Ok(None),
            _ => self.string().map(Some),
        }
    }

    pub fn opt_i64(&mut self) -> Result<Option<i64>, StoreError> {
        match self.u8()? {
            0 => Ok(None),
            _ => self.i64().map(Some),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn tail(self) -> &'a [u8] {
        self.0
    }
}

fn utf8(b: &[u8]) -> Result<&str, StoreError> {
    std::str::from_utf8(b)
        .map_err(|_| StoreError::Corrupt("record holds text that is not UTF-8".into()))
}

// --- events -----------------------------------------------------------------------------------

/// An event as stored: its fixed fields, its targets (the endpoint of each delivery, in
/// fan-out order; 0 for the one delivery of an event that had no endpoint) and its payload
/// (inline, or its length when chunked).
#[derive(Debug, Clone)]
pub struct EventRecord {
    pub meta: EventMeta,
    /// Endpoint ULIDs; 0 for the delivery of an event without endpoint. Empty while
    /// `targets_in_rows` (the store reads them from their rows).
    pub targets: Vec<u128>,
    /// How many targets the event has (its deliveries).
    pub target_count: usize,
    /// The targets are in target rows ([`super::key::targets`]), not in the event row.
    pub targets_in_rows: bool,
    pub payload_len: usize,
    /// The payload is in the event row; else in chunk rows ([`super::key::chunk`]).
    pub payload_inline: bool,
}

/// An event's rows: the event row, and its target rows if it has many targets. Whether the
/// payload went inline is in `payload_inline`; if not, the caller writes it in [`CHUNK`]s.
pub struct EncodedEvent {
    pub row: Vec<u8>,
    pub target_rows: Vec<Vec<u8>>,
    pub payload_inline: bool,
}

const EVENT_PAYLOAD_INLINE: u8 = 1;
const EVENT_TARGETS_IN_ROWS: u8 = 2;
/// The event has an ingest `ordering_key`, written right after the flags.
const EVENT_ORDERING_KEY: u8 = 4;
/// The event has channels or tags (docs/svix.md): two counted lists of strings, written after
/// the ordering key.
const EVENT_LABELS: u8 = 8;
/// The event has a request key (docs/svix.md), a string written after the labels.
const EVENT_REQUEST_KEY: u8 = 16;
/// The event keeps its request's trace context (docs/operations.md, "Traces"), written after
/// the request key: the trace id (16 bytes), the ingest span's id (8), the flags (1) and the
/// `tracestate` (an optional string). Since storage format 15.
const EVENT_TRACE: u8 = 32;

/// An event's record (its layout is the storage format: docs/operations.md, "Backup, restore,
/// upgrade").
///
/// Longer than most functions on purpose: it writes the record field by field in the order
/// the format fixes, beside `decode_event`'s reading of the same order; split, the one order
/// would be spread over several functions.
pub fn encode_event(
    meta: &EventMeta,
    targets: &[u128],
    payload: &[u8],
) -> Result<EncodedEvent, StoreError> {
    let n = u16::try_from(targets.len())
        .map_err(|_| StoreError::Corrupt("event has too many deliveries".into()))?;
    let targets_inline = targets.len() <= INLINE_TARGETS;
    let fixed = 64
        + meta.account_id.len()
        + meta.event_type.len()
        + meta.idempotency_key.as_ref().map_or(0, String::len)
        + meta.debounce_key.as_ref().map_or(0, String::len)
        + meta.ordering_key.as_ref().map_or(0, String::len)
        + meta
            .trace
            .as_ref()
            .map_or(0, |t| 30 + t.tracestate.as_ref().map_or(0, String::len))
        + meta
            .channels
            .iter()
            .chain(&meta.tags)
            .map(|c| 4 + c.len())
            .sum::<usize>()
        + if targets_inline {
            16 * targets.len()
        } else {
            0
        };
    let payload_inline = 17 + fixed + payload.len() <= MAX_ROW;
    let mut w = Writer::versioned(V2, fixed + if payload_inline { payload.len() } else { 0 });
    w.i64(meta.received_at);
    w.str(&meta.account_id);
    w.str(&meta.event_type);
    w.opt_str(meta.idempotency_key.as_deref());
    w.opt_str(meta.debounce_key.as_deref());
    let mut flags = 0;
    if payload_inline {
        flags |= EVENT_PAYLOAD_INLINE;
    }
    if !targets_inline {
        flags |= EVENT_TARGETS_IN_ROWS;
    }
    if meta.ordering_key.is_some() {
        flags |= EVENT_ORDERING_KEY;
    }
    let labelled = !meta.channels.is_empty() || !meta.tags.is_empty();
    if labelled {
        flags |= EVENT_LABELS;
    }
    if meta.request_key.is_some() {
        flags |= EVENT_REQUEST_KEY;
    }
    if meta.trace.is_some() {
        flags |= EVENT_TRACE;
    }
    w.u8(flags);
    if let Some(k) = &meta.ordering_key {
        w.str(k);
    }
    if labelled {
        for list in [&meta.channels, &meta.tags] {
            w.u16(list.len().min(u16::MAX as usize) as u16);
            for c in list.iter().take(u16::MAX as usize) {
                w.str(c);
            }
        }
    }
    if let Some(k) = &meta.request_key {
        w.str(k);
    }
    if let Some(t) = &meta.trace {
        w.0.extend_from_slice(&t.trace_id);
        w.0.extend_from_slice(&t.parent_id);
        w.u8(t.flags);
        w.opt_str(t.tracestate.as_deref());
    }
    w.u16(n);
    let mut target_rows = Vec::new();
    if targets_inline {
        for t in targets {
            w.u128(*t);
        }
    } else {
        for chunk in targets.chunks(TARGETS_PER_ROW) {
            let mut row = Vec::with_capacity(16 * chunk.len());
            for t in chunk {
                row.extend_from_slice(&t.to_be_bytes());
            }
            target_rows.push(row);
        }
    }
    w.u32(payload.len() as u32);
    if payload_inline {
        w.tail(payload);
    }
    Ok(EncodedEvent {
        row: w.finish(),
        target_rows,
        payload_inline,
    })
}

/// The event record and, when the payload is inline, its bytes. When the targets are in target
/// rows, `targets` is left empty for the store to fill ([`decode_targets`]).
pub fn decode_event(ulid: u128, v: &[u8]) -> Result<(EventRecord, Option<&[u8]>), StoreError> {
    let (version, mut r) = Reader::versioned(v, "event")?;
    if version != V1 && version != V2 {
        return Err(StoreError::Corrupt("event: unknown record layout".into()));
    }
    let received_at = r.i64()?;
    let account_id = r.string()?;
    let event_type = r.string()?;
    let idempotency_key = r.opt_string()?;
    let debounce_key = r.opt_string()?;
    let flags = if version == V2 { r.u8()? } else { 0 };
    let ordering_key = if flags & EVENT_ORDERING_KEY != 0 {
        Some(r.string()?)
    } else {
        None
    };
    let (mut channels, mut tags) = (Vec::new(), Vec::new());
    if flags & EVENT_LABELS != 0 {
        for list in [&mut channels, &mut tags] {
            let n = r.u16()? as usize;
            for _ in 0..n {
                list.push(r.string()?);
            }
        }
    }
    let request_key = if flags & EVENT_REQUEST_KEY != 0 {
        Some(r.string()?)
    } else {
        None
    };
    let trace = if flags & EVENT_TRACE != 0 {
        Some(TraceContext {
            trace_id: r.array()?,
            parent_id: r.array()?,
            flags: r.u8()?,
            tracestate: r.opt_string()?,
        })
    } else {
        None
    };
    let n = r.u16()? as usize;
    let targets_in_rows = flags & EVENT_TARGETS_IN_ROWS != 0;
    let mut targets = Vec::with_capacity(if targets_in_rows { 0 } else { n });
    if !targets_in_rows {
        for _ in 0..n {
            targets.push(r.u128()?);
        }
    }
    let payload_len = r.u32()? as usize;
    let payload_inline = match version {
        V1 => payload_len <= INLINE_PAYLOAD,
        _ => flags & EVENT_PAYLOAD_INLINE != 0,
    };
    let inline = payload_inline.then(|| r.tail());
    if inline.is_some_and(|p| p.len() != payload_len) {
        return Err(StoreError::Corrupt(
            "event payload has the wrong length".into(),
        ));
    }
    let meta = EventMeta {
        id: ids::format(ids::EVENT, ulid),
        account_id,
        event_type,
        received_at,
        idempotency_key,
        debounce_key,
        ordering_key,
        channels,
        tags,
        request_key,
        trace,
        deliveries: (0..n)
            .map(|i| ids::format(ids::DELIVERY, ids::delivery_of(ulid, i)))
            .collect(),
    };
    Ok((
        EventRecord {
            meta,
            targets,
            target_count: n,
            targets_in_rows,
            payload_len,
            payload_inline,
        },
        inline,
    ))
}

/// An account index row's value: its events' ULIDs in order.
pub fn encode_ulids(ulids: &[u128]) -> Vec<u8> {
    ulids.iter().flat_map(|u| u.to_be_bytes()).collect()
}

/// Appends one target row's targets (or an account index row's events).
pub fn decode_targets(v: &[u8], into: &mut Vec<u128>) -> Result<(), StoreError> {
    if v.len() % 16 != 0 {
        return Err(StoreError::Corrupt(
            "target row has a partial target".into(),
        ));
    }
    for t in v.chunks_exact(16) {
        into.push(u128::from_be_bytes(t.try_into().unwrap_or_default()));
    }
    Ok(())
}

// --- attempts ---------------------------------------------------------------------------------

/// An attempt and where it left its delivery.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub attempt: Attempt,
    /// The delivery's state after this attempt.
    pub state: DeliveryState,
}

fn status_code(s: Status) -> u8 {
    Status::ALL.iter().position(|x| *x == s).unwrap_or(0) as u8
}

fn state_code(s: DeliveryState) -> u8 {
    DeliveryState::ALL.iter().position(|x| *x == s).unwrap_or(0) as u8
}

/// An attempt's error message is kept up to this many bytes.
const MAX_ERROR: usize = 1024;

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Attempt layout 2: the attempt id as its ULID, varint lengths, and the request headers
/// herald sets named by one byte ([`HEADER_NAMES`]); a header whose value follows from the
/// row's key and time (the event and delivery ids, the attempt number, the timestamp, the
/// content type) is not stored at all. Layout 1 rows (every name and value spelled out) are
/// still read.
const ATTEMPT_V2: u8 = 2;
/// Attempt layout 3: layout 2, then the URL the request went to (empty: none) and a flags byte
/// ([`ATTEMPT_MANUAL`]).
const ATTEMPT_V3: u8 = 3;
/// Attempt layout 4: layout 3, then the response's headers (a count, then each name and
/// value), as many as the row has room for after the response excerpt.
const ATTEMPT_V4: u8 = 4;
/// Layout 3's flag: a manual retry made the attempt.
const ATTEMPT_MANUAL: u8 = 1;
/// An attempt's URL is kept up to this many bytes (an endpoint's URL is at most 2,048).
const MAX_URL: usize = 2048;

/// The header names an attempt row codes as their index + 1 (append only: rows hold the index).
const HEADER_NAMES: [&str; 12] = [
    "content-type",
    "user-agent",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "herald-event-type",
    "herald-attempt",
    "herald-delivery-id",
    "herald-endpoint-id",
    "svix-id",
    "svix-timestamp",
    "svix-signature",
];
/// Tag bit: the header's value is derived, not stored.
const DERIVED: u8 = 0x80;

/// The value a header of an attempt of `delivery` numbered `number` at `at` has when herald
/// set it, for the names whose value follows from those.
fn derived_header(name: usize, delivery: u128, number: u32, at: Millis) -> Option<String> {
    match *HEADER_NAMES.get(name)? {
        "content-type" => Some("application/json".into()),
        "webhook-id" | "svix-id" => {
            ids::event_of(delivery).map(|(event, _)| ids::format(ids::EVENT, event))
        }
        "webhook-timestamp" | "svix-timestamp" => Some(at.div_euclid(1000).to_string()),
        "herald-attempt" => Some(number.to_string()),
        "herald-delivery-id" => Some(ids::format(ids::DELIVERY, delivery)),
        _ => None,
    }
}

/// The attempt's row value for the attempt row of `delivery`, at most [`MAX_ROW`] with its
/// key: the response excerpt is shortened to what the rest leaves (a large set of custom
/// headers), the request headers are cut (last first) only if they alone would not fit, and
/// the response headers fill what the excerpt leaves (whole, in order, up to the first that
/// does not fit). (The room is reckoned as layout 1 would spend it, which layout 2 never
/// exceeds; each response header as 8 bytes of lengths and its bytes.)
pub fn encode_attempt(delivery: u128, a: &Attempt, state: DeliveryState) -> Vec<u8> {
    // Key (21), version, times, status, code, presence bytes, counts and length prefixes.
    const FIXED: usize = 21 + 1 + 8 + 8 + 1 + 2 + 1 + 4 + 2 + 4 + 1 + 4;
    let error = a.error.as_deref().map(|e| clip(e, MAX_ERROR));
    let url = clip(a.url.as_deref().unwrap_or_default(), MAX_URL);
    let mut room =
        MAX_ROW - FIXED - 4 - 4 - url.len() - a.id.len().min(64) - error.map_or(0, str::len);
    let mut headers = 0;
    for (k, v) in a.request_headers.iter().take(u16::MAX as usize) {
        let len = 8 + k.len() + v.len();
        if len > room {
            break;
        }
        room -= len;
        headers += 1;
    }
    let body = clip(&a.response_body, room);
    room -= body.len();
    // The count of response headers (a varint of at most 2 bytes for the 32 kept).
    room = room.saturating_sub(2);
    let mut answered = 0;
    for (k, v) in &a.response_headers {
        let len = 8 + k.len() + v.len();
        if len > room {
            break;
        }
        room -= len;
        answered += 1;
    }
    let mut w = Writer::versioned(ATTEMPT_V4, 64 + MAX_ROW - room);
    match ids::parse(ids::ATTEMPT, &a.id).filter(|u| ids::format(ids::ATTEMPT, *u) == a.id) {
        Some(ulid) => {
            w.u8(1);
            w.u128(ulid);
        }
        None => {
            w.u8(0);
            w.vbytes(clip(&a.id, 64).as_bytes());
        }
    }
    w.i64(a.at);
    w.varint(a.duration_ms);
    w.u8(status_code(a.status));
    w.u16(a.http_status.unwrap_or(0));
    match error {
        Some(e) => {
            w.u8(1);
            w.vbytes(e.as_bytes());
        }
        None => w.u8(0),
    }
    w.varint(headers as u64);
    for (k, v) in a.request_headers.iter().take(headers) {
        match HEADER_NAMES.iter().position(|n| n == k) {
            Some(i) if derived_header(i, delivery, a.number, a.at).as_deref() == Some(v) => {
                w.u8(DERIVED | (i as u8 + 1));
            }
            Some(i) => {
                w.u8(i as u8 + 1);
                w.vbytes(v.as_bytes());
            }
            None => {
                w.u8(0);
                w.vbytes(k.as_bytes());
                w.vbytes(v.as_bytes());
            }
        }
    }
    w.vbytes(body.as_bytes());
    w.u8(state_code(state));
    w.vbytes(url.as_bytes());
    w.u8(if a.manual { ATTEMPT_MANUAL } else { 0 });
    w.varint(answered as u64);
    for (k, v) in a.response_headers.iter().take(answered) {
        w.vbytes(k.as_bytes());
        w.vbytes(v.as_bytes());
    }
    w.finish()
}

/// Reads an attempt row back from its key (the delivery and the attempt's number) and value,
/// of either layout.
pub fn decode_attempt(k: &[u8], v: &[u8]) -> Result<AttemptRecord, StoreError> {
    let (Some(delivery), Some(number)) = (super::key::ulid(k), super::key::number(k)) else {
        return Err(StoreError::Corrupt("attempt key".into()));
    };
    let (layout, mut r) = Reader::versioned(v, "attempt")?;
    let v2 = match layout {
        V1 => false,
        ATTEMPT_V2 | ATTEMPT_V3 | ATTEMPT_V4 => true,
        _ => return Err(StoreError::Corrupt("attempt: unknown record layout".into())),
    };
    let id = match (v2, v2 && r.u8()? != 0) {
        (true, true) => ids::format(ids::ATTEMPT, r.u128()?),
        (true, false) => r.vstring()?,
        (false, _) => r.string()?,
    };
    let at = r.i64()?;
    let duration_ms = if v2 {
        r.varint()?
    } else {
        r.i64()?.max(0) as u64
    };
    let status = status_of(r.u8()?)?;
    let http_status = Some(r.u16()?).filter(|s| *s != 0);
    let error = match (v2, r.u8()?) {
        (_, 0) => None,
        (true, _) => Some(r.vstring()?),
        (false, _) => Some(r.string()?),
    };
    let n = if v2 {
        r.varint()?.min(u16::MAX as u64) as usize
    } else {
        r.u16()? as usize
    };
    let mut request_headers = Vec::with_capacity(n);
    for _ in 0..n {
        request_headers.push(if v2 {
            read_header(&mut r, delivery, number, at)?
        } else {
            (r.string()?, r.string()?)
        });
    }
    let response_body = if v2 { r.vstring()? } else { r.string()? };
    let state = state_of(r.u8()?)?;
    let (url, manual) = match layout {
        ATTEMPT_V3 | ATTEMPT_V4 => (
            Some(r.vstring()?).filter(|u| !u.is_empty()),
            r.u8()? & ATTEMPT_MANUAL != 0,
        ),
        _ => (None, false),
    };
    let mut response_headers = Vec::new();
    if layout == ATTEMPT_V4 {
        let n = r.varint()?.min(u16::MAX as u64) as usize;
        response_headers.reserve(n);
        for _ in 0..n {
            response_headers.push((r.vstring()?, r.vstring()?));
        }
    }
    Ok(AttemptRecord {
        attempt: Attempt {
            id,
            number,
            at,
            duration_ms,
            status,
            http_status,
            error,
            request_headers,
            response_body,
            response_headers,
            url,
            manual,
        },
        state,
    })
}

/// One request header of a layout 2 attempt row (see [`encode_attempt`]).
fn read_header(
    r: &mut Reader<'_>,
    delivery: u128,
    number: u32,
    at: Millis,
) -> Result<(String, String), StoreError> {
    let tag = r.u8()?;
    let name = (tag & !DERIVED) as usize;
    if name == 0 {
        return Ok((r.vstring()?, r.vstring()?));
    }
    let known = *HEADER_NAMES
        .get(name - 1)
        .ok_or_else(|| StoreError::Corrupt("attempt names an unknown header".into()))?;
    let value = if tag & DERIVED != 0 {
        derived_header(name - 1, delivery, number, at)
            .ok_or_else(|| StoreError::Corrupt("attempt header cannot be derived".into()))?
    } else {
        r.vstring()?
    };
    Ok((known.to_string(), value))
}

fn status_of(code: u8) -> Result<Status, StoreError> {
    Status::ALL
        .get(code as usize)
        .copied()
        .ok_or_else(|| StoreError::Corrupt("attempt has an unknown status".into()))
}

fn state_of(code: u8) -> Result<DeliveryState, StoreError> {
    DeliveryState::ALL
        .get(code as usize)
        .copied()
        .ok_or_else(|| StoreError::Corrupt("attempt has an unknown state".into()))
}

// --- pending entries --------------------------------------------------------------------------

/// A delivery waiting for an attempt at `due` other than its first one at ingest (a retry, a
/// manual retry, a debounce window's trailing candidate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub due: Millis,
    /// A manual retry: one attempt, no automatic schedule after it.
    pub manual: bool,
}

/// The pending entry's value: the entry and the lane (endpoint) it waits in, so start-up rebuilds
/// the due index from this tree alone.
pub fn encode_pending(p: Pending, lane: u128) -> [u8; 26] {
    let mut v = [0u8; 26];
    v[0] = V1;
    v[1..9].copy_from_slice(&p.due.to_be_bytes());
    v[9] = u8::from(p.manual);
    v[10..].copy_from_slice(&lane.to_be_bytes());
    v
}

pub fn decode_pending(v: &[u8]) -> Result<(Pending, u128), StoreError> {
    let mut r = Reader::new(v, "pending entry")?;
    let p = Pending {
        due: r.i64()?,
        manual: r.u8()? != 0,
    };
    Ok((p, r.u128()?))
}

// --- debounce windows -------------------------------------------------------------------------

/// A debounce window's value: its end and its trailing candidate (event ULID and delivery count;
/// zero for none).
pub fn encode_window(w: &Window) -> [u8; 27] {
    let mut v = [0u8; 27];
    v[0] = V1;
    v[1..9].copy_from_slice(&w.end.to_be_bytes());
    if let Some(c) = w.candidate {
        v[9..25].copy_from_slice(&c.event.to_be_bytes());
        v[25..].copy_from_slice(&(c.deliveries as u16).to_be_bytes());
    }
    v
}

/// A window's value from storage format 8 on: [`encode_window`]'s, then the digest of its
/// account ([`super::key::account_digest`]), so whoever removes the window removes its row in
/// the account's index ([`super::key::account_window`]) too.
pub fn encode_window_of(w: &Window, account: &[u8; 16]) -> [u8; 43] {
    let mut v = [0u8; 43];
    v[..27].copy_from_slice(&encode_window(w));
    v[27..].copy_from_slice(account);
    v
}

/// The digest of the window's account, if its value names it (every window since format 8;
/// one the migration could not attribute does not).
pub fn window_account(v: &[u8]) -> Option<[u8; 16]> {
    v.get(27..43)?.try_into().ok()
}

pub fn decode_window(v: &[u8]) -> Result<Window, StoreError> {
    let mut r = Reader::new(v, "debounce window")?;
    let end = r.i64()?;
    let event = r.u128()?;
    let deliveries = r.u16()? as usize;
    Ok(Window {
        end,
        candidate: (event != 0).then_some(Candidate { event, deliveries }),
    })
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
