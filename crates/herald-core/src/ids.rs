//! Prefixed ids that sort by creation time: `evt_`, `ep_`, `dlv_`, `att_` + a ULID.
//!
//! A ULID is 48 bits of Unix milliseconds and 80 random bits in Crockford base32. Ids made in the
//! same millisecond by this process increment the random part, so ids are strictly increasing
//! within a process: sled keys made from them list in creation order and cursors are stable.
//!
//! A delivery's id is derived from its event's: an event id's ULID ends in [`SLOT_BITS`] zero
//! bits, and the delivery to the event's `i`-th target is that ULID plus `i + 1`. So the store
//! finds a delivery's event (and from it the delivery's fixed fields) without an index, and an
//! ingest writes one row per event instead of one per delivery.

use std::sync::Mutex;

use rand::RngCore;

use crate::clock::Millis;

pub const EVENT: &str = "evt_";
pub const ENDPOINT: &str = "ep_";
pub const DELIVERY: &str = "dlv_";
pub const ATTEMPT: &str = "att_";
/// An account made through the Svix-compatible API without a `uid` (docs/svix.md).
pub const APPLICATION: &str = "app_";

/// Low bits of an event's ULID that number its deliveries.
pub const SLOT_BITS: u32 = 12;
/// Deliveries one event can have at most (its fan-out), so at most this many endpoints per
/// account (`endpoints.max_per_account`).
pub const MAX_FAN_OUT: usize = (1 << SLOT_BITS) - 1;
const SLOT_MASK: u128 = (1 << SLOT_BITS) - 1;

const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const RANDOM_MASK: u128 = (1 << 80) - 1;

/// The last ULID made: (milliseconds, random part), to keep ids monotonic.
static LAST: Mutex<(u64, u128)> = Mutex::new((0, 0));

/// A new ULID stamped with `now`, greater than every one made before in this process.
fn next_ulid(now: Millis) -> u128 {
    let ms = (now.max(0) as u64) & ((1 << 48) - 1);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if ms <= last.0 && last.1 < RANDOM_MASK - 2 {
        // Same (or an earlier) millisecond: keep the order by counting up.
        last.1 += 1;
    } else {
        let mut bytes = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut bytes);
        *last = (
            ms.max(last.0),
            u128::from_be_bytes(bytes) & (RANDOM_MASK >> 1),
        );
    }
    (u128::from(last.0) << 80) | last.1
}

/// Makes every later id greater than `ulid` (one found in the store at start-up), even if the
/// clock went back since it was made.
pub fn observe(ulid: u128) {
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    let (ms, random) = ((ulid >> 80) as u64, ulid & RANDOM_MASK);
    if (ms, random) > *last {
        *last = (ms, random | SLOT_MASK);
    }
}

/// A new id with `prefix`, stamped with `now`.
pub fn new_id(prefix: &str, now: Millis) -> String {
    format(prefix, next_ulid(now))
}

/// A new event's ULID after `last` (the store's newest), stamped with `now` or, if the clock is
/// behind `last`, with `last`'s time; its low [`SLOT_BITS`] are free for its deliveries. The
/// store keeps `last`, so each store's event ids are ordered on their own (whatever other stores
/// in the process, such as tests', have made).
pub fn event_after(last: u128, now: Millis) -> u128 {
    let ms = (now.max(0) as u64) & ((1 << 48) - 1);
    let (last_ms, last_random) = ((last >> 80) as u64, last & RANDOM_MASK);
    let step = SLOT_MASK + 1;
    if ms <= last_ms && last_random < RANDOM_MASK - 2 * step {
        // The same (or an earlier) millisecond: the next slot block after `last`'s.
        return (u128::from(last_ms) << 80) | ((last_random | SLOT_MASK) + 1);
    }
    // A later millisecond (or the random part ran out: the next millisecond).
    let ms = if ms <= last_ms { last_ms + 1 } else { ms };
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    let random = u128::from_be_bytes(bytes) & (RANDOM_MASK >> 1) & !SLOT_MASK;
    (u128::from(ms) << 80) | random
}

/// The ULID of the delivery to an event's `index`-th target (`index` < [`MAX_FAN_OUT`]).
pub fn delivery_of(event: u128, index: usize) -> u128 {
    event | (index as u128 + 1)
}

/// The event a delivery belongs to, and the delivery's index among the event's targets. `None`
/// for a ULID that is no delivery's.
pub fn event_of(delivery: u128) -> Option<(u128, usize)> {
    let slot = (delivery & SLOT_MASK) as usize;
    (slot > 0).then(|| (delivery & !SLOT_MASK, slot - 1))
}

/// The milliseconds a ULID was stamped with.
pub fn ulid_ms(ulid: u128) -> Millis {
    (ulid >> 80) as Millis
}

/// The smallest ULID stamped at `ms` (a lower bound for keys made from `ms` on).
pub fn ulid_floor(ms: Millis) -> u128 {
    u128::from(ms.max(0) as u64 & ((1 << 48) - 1)) << 80
}

/// `prefix` + the ULID's 26 base32 characters.
pub fn format(prefix: &str, ulid: u128) -> String {
    let mut out = String::with_capacity(prefix.len() + 26);
    out.push_str(prefix);
    for i in (0..26).rev() {
        out.push(ALPHABET[((ulid >> (i * 5)) & 31) as usize] as char);
    }
    out
}

/// The ULID of an id made with `prefix`; `None` if `id` is not one.
pub fn parse(prefix: &str, id: &str) -> Option<u128> {
    let rest = id.strip_prefix(prefix)?;
    if rest.len() != 26 {
        return None;
    }
    let mut v: u128 = 0;
    for (i, b) in rest.bytes().enumerate() {
        let d = ALPHABET.iter().position(|a| *a == b)? as u128;
        // The first character carries only 3 bits (26 × 5 = 130 > 128).
        if i == 0 && d > 7 {
            return None;
        }
        v = (v << 5) | d;
    }
    Some(v)
}

/// True if `id` looks like an id made with `prefix` (so bad path ids answer 404 without a lookup).
pub fn is_valid(prefix: &str, id: &str) -> bool {
    parse(prefix, id).is_some()
}

/// Random lowercase hex, for tokens and challenge nonces.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::thread_rng().fill_bytes(&mut buf);
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_follow_the_last_one_and_leave_room_for_deliveries() {
        let a = event_after(0, 1_700_000_000_000);
        assert_eq!(ulid_ms(a), 1_700_000_000_000);
        assert_eq!(a & SLOT_MASK, 0);
        // The same millisecond, and a clock gone back: later ids, past a's deliveries.
        let b = event_after(a, 1_700_000_000_000);
        let c = event_after(b, 1_699_000_000_000);
        assert!(delivery_of(a, MAX_FAN_OUT - 1) < b && b < c, "{a} {b} {c}");
        assert_eq!((ulid_ms(c), c & SLOT_MASK), (1_700_000_000_000, 0));
        // A later millisecond is stamped with it; the random part running out moves on a ms.
        assert_eq!(
            ulid_ms(event_after(c, 1_700_000_000_005)),
            1_700_000_000_005
        );
        let full = (1_700_000_000_000u128 << 80) | (RANDOM_MASK & !SLOT_MASK);
        let d = event_after(full, 1_700_000_000_000);
        assert!(d > full && ulid_ms(d) == 1_700_000_000_001, "{d}");
    }

    #[test]
    fn ids_are_prefixed_valid_and_increasing() {
        let a = new_id(EVENT, 1_700_000_000_000);
        let b = new_id(EVENT, 1_700_000_000_000);
        let c = new_id(EVENT, 1_700_000_000_001);
        assert!(a.starts_with("evt_") && a.len() == 30, "{a}");
        assert!(is_valid(EVENT, &a));
        assert!(a < b && b < c, "{a} {b} {c}");
        assert!(!is_valid(DELIVERY, &a));
        assert!(!is_valid(EVENT, "evt_../../etc"));
        assert!(!is_valid(EVENT, "evt_ZZZZZZZZZZZZZZZZZZZZZZZZZZ"));
    }

    #[test]
    fn ids_round_trip_through_their_ulid() {
        let id = new_id(ATTEMPT, 1_700_000_000_000);
        let ulid = parse(ATTEMPT, &id).unwrap();
        assert_eq!(format(ATTEMPT, ulid), id);
        // Other tests in this process may have made ids stamped later: never earlier than now.
        let ms = ulid_ms(ulid);
        assert!(ms >= 1_700_000_000_000);
        assert!(ulid_floor(ms) <= ulid && ulid < ulid_floor(ms + 1));
    }

    #[test]
    fn deliveries_derive_from_their_event_and_back() {
        let now = 1_700_000_000_000;
        let e1 = event_after(0, now);
        let e2 = event_after(e1, now);
        assert_eq!(e1 & SLOT_MASK, 0);
        for i in [0, 1, MAX_FAN_OUT - 1] {
            let d = delivery_of(e1, i);
            assert!(d < e2, "an event's deliveries sort before the next event");
            assert_eq!(event_of(d), Some((e1, i)));
        }
        assert_eq!(event_of(e1), None, "an event's own ULID is no delivery's");
    }
}
