//! How records become sled keys and values.
//!
//! Keys are ULIDs as 16 big-endian bytes (so keys sort by creation time), alone or followed by a
//! number. Values are a compact binary layout of length-prefixed fields, written and read by
//! [`Writer`] and [`Reader`]: the hot records (event, attempt, pending entry) are encoded and
//! decoded on every ingest and attempt, and JSON there cost a good share of the CPU and of the
//! disk. Every value starts with a version byte, so a later layout can be told apart. An event
//! keeps its payload bytes untouched (never re-serialized, so every retry sends identical bytes);
//! payloads over [`INLINE_PAYLOAD`] go to chunks small enough that sled never moves them to its
//! unsynced `blobs/` files.

use super::StoreError;
use crate::clock::Millis;
use crate::ids;
use crate::model::{Attempt, DeliveryState, EventMeta, Status};

/// Payloads up to this size stay inside the event's value; larger ones are chunked.
pub const INLINE_PAYLOAD: usize = 6 * 1024;
/// Chunk size for large payloads (sled keeps values under ~10 KB in its log).
pub const CHUNK: usize = 6 * 1024;

const V1: u8 = 1;

// --- keys -------------------------------------------------------------------------------------

/// Keys of the `log` tree: a kind byte, then a ULID (big-endian, so keys of a kind sort by
/// creation time) and maybe a number. A delivery's ULID follows its event's, so one event's rows
/// of each kind sit together, in the order of the events.
pub mod key {
    pub const EVENT: u8 = b'e';
    pub const CHUNK: u8 = b'c';
    pub const ATTEMPT: u8 = b'a';
    pub const PENDING: u8 = b'p';
    pub const IDEMPOTENCY: u8 = b'i';
    pub const WINDOW: u8 = b'w';

    pub fn of(kind: u8, ulid: u128) -> [u8; 17] {
        let mut k = [0u8; 17];
        k[0] = kind;
        k[1..].copy_from_slice(&ulid.to_be_bytes());
        k
    }

    pub fn numbered(kind: u8, ulid: u128, n: u32) -> [u8; 21] {
        let mut k = [0u8; 21];
        k[..17].copy_from_slice(&of(kind, ulid));
        k[17..].copy_from_slice(&n.to_be_bytes());
        k
    }

    pub fn event(ulid: u128) -> [u8; 17] {
        of(EVENT, ulid)
    }

    /// A delivery's attempt by number: a prefix scan of [`attempts`] lists them in order.
    pub fn attempt(delivery: u128, number: u32) -> [u8; 21] {
        numbered(ATTEMPT, delivery, number)
    }

    pub fn attempts(delivery: u128) -> [u8; 17] {
        of(ATTEMPT, delivery)
    }

    pub fn pending(delivery: u128) -> [u8; 17] {
        of(PENDING, delivery)
    }

    pub fn chunk(event: u128, index: u32) -> [u8; 21] {
        numbered(CHUNK, event, index)
    }

    /// The end (exclusive) of a ULID kind's keys.
    pub fn end(kind: u8) -> [u8; 17] {
        of(kind + 1, 0)
    }

    /// The ULID of a key of the ULID kinds.
    pub fn ulid(k: &[u8]) -> Option<u128> {
        Some(u128::from_be_bytes(k.get(1..17)?.try_into().ok()?))
    }

    /// The number after the ULID (an attempt's, a chunk's).
    pub fn number(k: &[u8]) -> Option<u32> {
        Some(u32::from_be_bytes(k.get(17..21)?.try_into().ok()?))
    }

    /// An idempotency key: the account id, a NUL (never in an account id), the key.
    pub fn idempotency(account_id: &str, key: &str) -> Vec<u8> {
        [
            &[IDEMPOTENCY][..],
            account_id.as_bytes(),
            b"\0",
            key.as_bytes(),
        ]
        .concat()
    }

    /// A debounce window, by its (account, type, key) string.
    pub fn window(key: &str) -> Vec<u8> {
        [&[WINDOW][..], key.as_bytes()].concat()
    }
}

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
        let mut w = Writer(Vec::with_capacity(n + 1));
        w.u8(V1);
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
        match v.split_first() {
            Some((&V1, rest)) => Ok(Reader(rest)),
            _ => Err(StoreError::Corrupt(format!(
                "{what}: unknown record layout"
            ))),
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
        std::str::from_utf8(self.bytes()?)
            .map_err(|_| StoreError::Corrupt("record holds text that is not UTF-8".into()))
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

    pub fn tail(self) -> &'a [u8] {
        self.0
    }
}

// --- events -----------------------------------------------------------------------------------

/// An event as stored: its fixed fields, its targets (the endpoint of each delivery, in
/// fan-out order; `None` for the one delivery of an event that had no endpoint) and its payload
/// (inline, or its length when chunked).
#[derive(Debug, Clone)]
pub struct EventRecord {
    pub meta: EventMeta,
    /// Endpoint ULIDs; 0 for the delivery of an event without endpoint.
    pub targets: Vec<u128>,
    pub payload_len: usize,
}

pub fn encode_event(
    meta: &EventMeta,
    targets: &[u128],
    payload: &[u8],
) -> Result<Vec<u8>, StoreError> {
    let inline = payload.len() <= INLINE_PAYLOAD;
    let mut w = Writer::with_capacity(
        64 + meta.account_id.len()
            + meta.event_type.len()
            + 16 * targets.len()
            + if inline { payload.len() } else { 0 },
    );
    w.i64(meta.received_at);
    w.str(&meta.account_id);
    w.str(&meta.event_type);
    w.opt_str(meta.idempotency_key.as_deref());
    w.opt_str(meta.debounce_key.as_deref());
    let n = u16::try_from(targets.len())
        .map_err(|_| StoreError::Corrupt("event has too many deliveries".into()))?;
    w.u16(n);
    for t in targets {
        w.u128(*t);
    }
    w.u32(payload.len() as u32);
    if inline {
        w.tail(payload);
    }
    Ok(w.finish())
}

/// The event record and, when the payload is inline, its bytes.
pub fn decode_event(ulid: u128, v: &[u8]) -> Result<(EventRecord, Option<&[u8]>), StoreError> {
    let mut r = Reader::new(v, "event")?;
    let received_at = r.i64()?;
    let account_id = r.string()?;
    let event_type = r.string()?;
    let idempotency_key = r.opt_string()?;
    let debounce_key = r.opt_string()?;
    let n = r.u16()? as usize;
    let mut targets = Vec::with_capacity(n);
    for _ in 0..n {
        targets.push(r.u128()?);
    }
    let payload_len = r.u32()? as usize;
    let inline = (payload_len <= INLINE_PAYLOAD).then(|| r.tail());
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
        deliveries: (0..n)
            .map(|i| ids::format(ids::DELIVERY, ids::delivery_of(ulid, i)))
            .collect(),
    };
    Ok((
        EventRecord {
            meta,
            targets,
            payload_len,
        },
        inline,
    ))
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

pub fn encode_attempt(a: &Attempt, state: DeliveryState) -> Vec<u8> {
    let headers: usize = a
        .request_headers
        .iter()
        .map(|(k, v)| 8 + k.len() + v.len())
        .sum();
    let mut w = Writer::with_capacity(
        64 + headers + a.response_body.len() + a.error.as_ref().map_or(0, String::len),
    );
    w.str(&a.id);
    w.i64(a.at);
    w.i64(a.duration_ms as i64);
    w.u8(status_code(a.status));
    w.u16(a.http_status.unwrap_or(0));
    w.opt_str(a.error.as_deref());
    w.u16(a.request_headers.len().min(u16::MAX as usize) as u16);
    for (k, v) in a.request_headers.iter().take(u16::MAX as usize) {
        w.str(k);
        w.str(v);
    }
    w.str(&a.response_body);
    w.u8(state_code(state));
    w.finish()
}

pub fn decode_attempt(number: u32, v: &[u8]) -> Result<AttemptRecord, StoreError> {
    let mut r = Reader::new(v, "attempt")?;
    let id = r.string()?;
    let at = r.i64()?;
    let duration_ms = r.i64()?.max(0) as u64;
    let status = *Status::ALL
        .get(r.u8()? as usize)
        .ok_or_else(|| StoreError::Corrupt("attempt has an unknown status".into()))?;
    let http_status = Some(r.u16()?).filter(|s| *s != 0);
    let error = r.opt_string()?;
    let n = r.u16()? as usize;
    let mut request_headers = Vec::with_capacity(n);
    for _ in 0..n {
        request_headers.push((r.string()?, r.string()?));
    }
    let response_body = r.string()?;
    let state = *DeliveryState::ALL
        .get(r.u8()? as usize)
        .ok_or_else(|| StoreError::Corrupt("attempt has an unknown state".into()))?;
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
        },
        state,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> EventMeta {
        EventMeta {
            id: String::new(),
            account_id: "1".into(),
            event_type: "t".into(),
            received_at: 5,
            idempotency_key: Some("k".into()),
            debounce_key: None,
            deliveries: Vec::new(),
        }
    }

    #[test]
    fn event_values_keep_payload_bytes_exactly() {
        let ulid = ids::new_event(5);
        let payload = br#"{ "b":1,  "a" : [1.0e3] }"#;
        let v = encode_event(&meta(), &[7, 0], payload).unwrap();
        let (rec, inline) = decode_event(ulid, &v).unwrap();
        assert_eq!(rec.meta.id, ids::format(ids::EVENT, ulid));
        assert_eq!(rec.meta.idempotency_key.as_deref(), Some("k"));
        assert_eq!(rec.targets, vec![7, 0]);
        assert_eq!(rec.meta.deliveries.len(), 2);
        assert_eq!(rec.payload_len, payload.len());
        assert_eq!(inline, Some(&payload[..]));

        let big = vec![b' '; INLINE_PAYLOAD + 1];
        let v = encode_event(&meta(), &[], &big).unwrap();
        let (rec, inline) = decode_event(ulid, &v).unwrap();
        assert_eq!((rec.payload_len, inline), (big.len(), None));
    }

    #[test]
    fn attempts_round_trip() {
        let a = Attempt {
            id: "att_x".into(),
            number: 3,
            at: 1_700_000_000_000,
            duration_ms: 12,
            status: Status::HttpError,
            http_status: Some(503),
            error: Some("boom".into()),
            request_headers: vec![("webhook-id".into(), "evt_1".into())],
            response_body: "busy".into(),
        };
        let rec = decode_attempt(3, &encode_attempt(&a, DeliveryState::Pending)).unwrap();
        assert_eq!(rec.state, DeliveryState::Pending);
        assert_eq!(format!("{:?}", rec.attempt), format!("{a:?}"));
    }

    #[test]
    fn short_or_unknown_values_are_corrupt_not_a_panic() {
        assert!(decode_pending(&[]).is_err());
        assert!(decode_pending(&[9, 0]).is_err());
        assert!(decode_attempt(1, &[V1, 0, 0]).is_err());
        let p = Pending {
            due: 42,
            manual: true,
        };
        assert_eq!(decode_pending(&encode_pending(p, 9)).unwrap(), (p, 9));
    }

    #[test]
    fn attempt_keys_sort_by_delivery_then_number() {
        assert!(key::attempt(1, 9) < key::attempt(1, 10));
        assert!(key::attempt(1, u32::MAX) < key::attempt(2, 0));
        assert!(key::attempt(u128::MAX, u32::MAX)[..] < key::end(key::ATTEMPT)[..]);
        assert_eq!(key::ulid(&key::attempt(77, 1)), Some(77));
        assert_eq!(key::number(&key::attempt(77, 1)), Some(1));
    }
}
