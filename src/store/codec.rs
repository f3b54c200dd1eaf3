//! How records become sled keys and values.
//!
//! Ids are ULID-based and fixed-length, so an id's bytes are its key and keys sort by creation
//! time. Values are compact JSON, except that an event keeps its payload bytes untouched beside
//! the JSON (never re-serialized, so every retry sends identical bytes) and payloads over
//! [`INLINE_PAYLOAD`] go to chunks small enough that sled never moves them to its unsynced
//! `blobs/` files.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::StoreError;
use crate::clock::Millis;
use crate::model::EventMeta;

/// Payloads up to this size stay inside the event's value; larger ones are chunked.
pub const INLINE_PAYLOAD: usize = 6 * 1024;
/// Chunk size for large payloads (sled keeps values under ~10 KB in its log).
pub const CHUNK: usize = 6 * 1024;

pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(v).map_err(|e| StoreError::Corrupt(format!("encode: {e}")))
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(format!("decode: {e}")))
}

/// Queue key: due time (big-endian, so keys sort by due time) then the delivery id.
pub fn queue_key(due: Millis, delivery_id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + delivery_id.len());
    k.extend_from_slice(&(due.max(0) as u64).to_be_bytes());
    k.extend_from_slice(delivery_id.as_bytes());
    k
}

pub fn parse_queue_key(key: &[u8]) -> Option<(Millis, String)> {
    let (due, id) = key.split_at_checked(8)?;
    let due = u64::from_be_bytes(due.try_into().ok()?) as Millis;
    Some((due, String::from_utf8(id.to_vec()).ok()?))
}

/// Attempt key: the delivery id then the attempt id, so a prefix scan lists a delivery's attempts.
pub fn attempt_key(delivery_id: &str, attempt_id: &str) -> Vec<u8> {
    [delivery_id.as_bytes(), attempt_id.as_bytes()].concat()
}

pub fn chunk_key(event_id: &str, index: u32) -> Vec<u8> {
    let mut k = event_id.as_bytes().to_vec();
    k.extend_from_slice(&index.to_be_bytes());
    k
}

/// Account-scoped key: account id, a NUL (never in an account id), then a name (an idempotency
/// key, an account secret's name).
pub fn account_key(account_id: &str, key: &str) -> Vec<u8> {
    [account_id.as_bytes(), b"\0", key.as_bytes()].concat()
}

/// Quota counter key: account id, a NUL, `m` (minute) or `d` (day), the window number.
pub fn quota_key(account_id: &str, kind: u8, window: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(account_id.len() + 10);
    k.extend_from_slice(account_id.as_bytes());
    k.push(0);
    k.push(kind);
    k.extend_from_slice(&window.to_be_bytes());
    k
}

/// Event value: `payload_len: u32 BE`, `meta_len: u32 BE`, meta JSON, then the payload bytes when
/// they are inline.
pub fn encode_event(meta: &EventMeta, payload: &[u8]) -> Result<Vec<u8>, StoreError> {
    let meta = encode(meta)?;
    let inline = payload.len() <= INLINE_PAYLOAD;
    let mut v = Vec::with_capacity(8 + meta.len() + if inline { payload.len() } else { 0 });
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(&(meta.len() as u32).to_be_bytes());
    v.extend_from_slice(&meta);
    if inline {
        v.extend_from_slice(payload);
    }
    Ok(v)
}

/// The meta, the payload length, and the inline payload if it was inline.
pub fn decode_event(v: &[u8]) -> Result<(EventMeta, usize, Option<&[u8]>), StoreError> {
    let bad = || StoreError::Corrupt("event record too short".into());
    let (plen, rest) = v.split_at_checked(4).ok_or_else(bad)?;
    let (mlen, rest) = rest.split_at_checked(4).ok_or_else(bad)?;
    let plen = u32::from_be_bytes(plen.try_into().map_err(|_| bad())?) as usize;
    let mlen = u32::from_be_bytes(mlen.try_into().map_err(|_| bad())?) as usize;
    let (meta, rest) = rest.split_at_checked(mlen).ok_or_else(bad)?;
    let meta = decode(meta)?;
    let inline = (plen <= INLINE_PAYLOAD).then_some(rest);
    Ok((meta, plen, inline))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> EventMeta {
        EventMeta {
            id: "evt_x".into(),
            account_id: "1".into(),
            event_type: "t".into(),
            received_at: 5,
            idempotency_key: None,
            debounce_key: None,
            deliveries: vec!["dlv_a".into()],
        }
    }

    #[test]
    fn queue_keys_sort_by_due_time_and_round_trip() {
        let a = queue_key(999, "dlv_b");
        let b = queue_key(1000, "dlv_a");
        assert!(a < b);
        assert_eq!(parse_queue_key(&b), Some((1000, "dlv_a".to_string())));
    }

    #[test]
    fn event_values_keep_payload_bytes_exactly() {
        let payload = br#"{ "b":1,  "a" : [1.0e3] }"#;
        let v = encode_event(&meta(), payload).unwrap();
        let (m, len, inline) = decode_event(&v).unwrap();
        assert_eq!(m.id, "evt_x");
        assert_eq!(len, payload.len());
        assert_eq!(inline, Some(&payload[..]));

        let big = vec![b' '; INLINE_PAYLOAD + 1];
        let v = encode_event(&meta(), &big).unwrap();
        let (_, len, inline) = decode_event(&v).unwrap();
        assert_eq!((len, inline), (big.len(), None));
    }
}
